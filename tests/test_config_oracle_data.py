"""The configuration oracle: its case list, its evidence collector, and the data it brought back.

The data file is written by ``oracles/run_config_oracle.sh`` on a Hopper GPU. The 2026-11-22 sweep
ran on an H200 (no H100 was lent; tests/data/ORACLE_DEVICE.txt), so ``config_oracle_h200.jsonl`` is
the data and ``config_oracle_h100.jsonl`` only a stand-in name; the data tests skip while neither exists. The agreement between the legality rules and
these outcomes is tested by the legality engineer's own test.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from cutegen.config import KernelConfig
from cutegen.problem import GemmProblem

ROOT = Path(__file__).resolve().parents[1]
DATA_FILES = [ROOT / "tests" / "data" / n for n in ("config_oracle_h200.jsonl", "config_oracle_h100.jsonl")]
DATA = next((p for p in DATA_FILES if p.exists()), DATA_FILES[-1])
HOPPER = ("H100", "H200")   # compute capability 9.0, the chips sm_90a code runs on
SMEM_LIMIT = 232448  # bytes of dynamic shared memory one block may opt into on H100 (rulebook D02)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_oracle_{name}", ROOT / "oracles" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is being built
    spec.loader.exec_module(mod)
    return mod


cases_mod = _load("config_cases")
collect_mod = _load("config_collect")
CASES = cases_mod.cases()


# ----------------------------------------------------------------------------- the case list
def test_case_list_is_large_deterministic_and_unique():
    assert len(CASES) >= 80
    again = cases_mod.cases()
    assert [c.to_dict() for c in again] == [c.to_dict() for c in CASES]
    ids = [c.id for c in CASES]
    assert len(set(ids)) == len(ids)


def test_every_case_is_a_valid_problem_and_config():
    for c in CASES:
        problem = GemmProblem.from_dict(c.problem)
        config = KernelConfig.from_dict(c.config)
        # the JSON written to the oracle data must round-trip through the schema unchanged
        assert {k: v for k, v in config.to_dict().items() if k in c.config} == c.config
        assert problem.m == c.problem["m"] and problem.layout_a == c.problem["layout_a"]


def test_case_list_covers_the_rule_boundaries_it_claims():
    cfgs = [(c.config, c.problem) for c in CASES]
    coop_m = {cfg["tile_shape"][0] for cfg, _ in cfgs if cfg["mainloop_schedule"] == "cooperative"}
    assert {64, 128, 192, 256} <= coop_m
    clusters = {tuple(cfg["cluster_shape"][:2]) for cfg, _ in cfgs}
    assert {(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (8, 1), (1, 8), (4, 4), (3, 1)} <= clusters
    tile_n = {cfg["tile_shape"][1] for cfg, _ in cfgs}
    assert {8, 24, 96, 200, 208, 256} <= tile_n
    assert {32, 64, 128, 256} <= {cfg["tile_shape"][2] for cfg, _ in cfgs}
    assert {"tn", "nt", "nn", "tt"} <= {("t" if p["layout_a"] == "row" else "n") + ("n" if p["layout_b"] == "col" else "t")
                                       for _, p in cfgs}
    assert {"bf16", "f16", "e4m3", "e5m2", "tf32"} <= {p["dtype_a"] for _, p in cfgs} | {p["dtype_b"] for _, p in cfgs}
    assert any(p["dtype_c"] == "void" for _, p in cfgs)
    fp8 = [(cfg, p) for cfg, p in cfgs if p["dtype_a"] == "e4m3"]
    assert any(p["layout_a"] == "row" and p["layout_b"] == "col" for _, p in fp8)
    assert any(not (p["layout_a"] == "row" and p["layout_b"] == "col") for _, p in fp8)
    sk = {(cfg["mainloop_schedule"]) for cfg, _ in cfgs if cfg["tile_scheduler"] == "stream_k"}
    assert sk == {"cooperative", "pingpong", "warp_specialized"}
    hang = [(cfg, p) for cfg, p in cfgs if cfg["tile_shape"] == [128, 96, 128] and cfg["stages"] == 3
            and cfg["tile_scheduler"] == "stream_k"]
    assert {(tuple(cfg["cluster_shape"][:2]), p["m"]) for cfg, p in hang} >= {((2, 2), 2048), ((2, 2), 4096),
                                                                               ((1, 1), 2048), ((1, 1), 4096)}
    assert {"auto", 1, 3, 7, 8, 9} <= {cfg["stages"] for cfg, _ in cfgs}
    assert any(p["m"] % 128 and p["k"] % 64 for _, p in cfgs)  # ragged problems


def test_kernels_group_cases_by_everything_but_the_problem_size():
    groups = cases_mod.kernels()
    assert sum(len(v) for v in groups.values()) == len(CASES)
    for key, members in groups.items():
        first = members[0]
        for c in members:
            assert c.config == first.config
            strip = lambda p: {k: v for k, v in p.items() if k not in ("m", "n", "k", "batch")}  # noqa: E731
            assert strip(c.problem) == strip(first.problem)
    # distinct configurations never share a binary
    by_cfg = {}
    for c in CASES:
        by_cfg.setdefault(c.kernel_key, set()).add(json.dumps(c.config, sort_keys=True))
    assert all(len(v) == 1 for v in by_cfg.values())


def test_render_writes_the_same_bytes_twice(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    cases_mod.render(str(a))
    cases_mod.render(str(b))
    names = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
    order = (a / "kernels.txt").read_text().split()
    assert len(order) == len(cases_mod.kernels())
    src = (a / order[0] / "probe.cu").read_text()
    assert '#include "config_probe.cu"' in src and "#define PROBE_TILE_SCHEDULER" in src


def test_render_can_restrict_to_groups(tmp_path):
    n = cases_mod.render(str(tmp_path), ["streamk_hang"])
    listed = json.loads((tmp_path / "cases.json").read_text())
    assert {c["group"] for c in listed} == {"streamk_hang"}
    assert len(listed) == sum(c.group == "streamk_hang" for c in CASES)
    assert n == len((tmp_path / "kernels.txt").read_text().split()) < len(cases_mod.kernels())
    with pytest.raises(ValueError, match="no_such_group"):
        cases_mod.render(str(tmp_path / "x"), ["no_such_group"])


def test_wrapper_spells_the_cutlass_types_of_the_case():
    c = next(c for c in CASES if c.problem["dtype_a"] == "e4m3" and c.config["tile_scheduler"] == "persistent")
    src = cases_mod.wrapper_source(c)
    assert "#define PROBE_ELEMENT_A cutlass::float_e4m3_t" in src
    v = next(c for c in CASES if c.problem["dtype_c"] == "void")
    assert "#define PROBE_ELEMENT_C void" in cases_mod.wrapper_source(v)
    s = next(c for c in CASES if c.config["stages"] == 7)
    assert "#define PROBE_STAGES 7" in cases_mod.wrapper_source(s)
    a = next(c for c in CASES if c.config["stages"] == "auto")
    assert "#define PROBE_STAGES 0" in cases_mod.wrapper_source(a)


# ----------------------------------------------------------------------------- the collector
_SA_LOG = ('/x/sm90_gemm_tma_warpspecialized_cooperative.hpp(357): error: static assertion failed with '
           '"Cooperative kernel requires Tile Size to be greater than or equal to 128 along the M-dimension."\n'
           '      detected during instantiation of ...\n1 error detected in the compilation of "probe.cu".\n')


def test_compile_log_parsing():
    info = collect_mod.parse_compile_log(_SA_LOG)
    assert info["static_asserts"] == ["Cooperative kernel requires Tile Size to be greater than or equal to 128 "
                                      "along the M-dimension."]
    assert info["first_error"].startswith("/x/sm90_gemm_tma_warpspecialized_cooperative.hpp(357): error")
    ok = ("ptxas info    : Compiling entry function '_Z11fill_kernel' for 'sm_90a'\n"
          "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 12 registers\n"
          "ptxas info    : Compiling entry function '_ZN7cutlass13device_kernelIX' for 'sm_90a'\n"
          "    0 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads\n"
          "ptxas info    : Used 168 registers, used 6 barriers\n"
          "ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized\n")
    info = collect_mod.parse_compile_log(ok)
    assert (info["registers"], info["spill_stores"], info["spill_loads"]) == (168, 16, 24)
    assert len(info["ptxas_warnings"]) == 1 and "C7510" in info["ptxas_warnings"][0]
    assert info["first_error"] is None


def test_probe_output_keeps_the_last_phase_reached():
    out = '{"phase":"static","stages":4}\n{"phase":"initialized","initialize":"Success"}\n'
    fields, phase = collect_mod.parse_probe_output(out + '{"phase":"che')   # cut off by the watchdog
    assert phase == "initialized" and fields["stages"] == 4 and fields["initialize"] == "Success"


@pytest.mark.parametrize("crc,rrc,probe,expect", [
    ("1", None, {}, "compile_error"),
    ("124", None, {}, "infra_error"),
    ("skipped", None, {}, "infra_error"),
    ("0", "124", {"initialize": "Success"}, "hang"),
    ("0", "137", {}, "hang"),
    ("0", "0", {"can_implement": "Error Invalid Problem"}, "launch_failure"),
    ("0", "0", {"can_implement": "Success", "initialize": "Error Internal"}, "launch_failure"),
    ("0", "0", {"can_implement": "Success", "initialize": "Success", "run": "Success", "sync": "cudaErrorIllegalInstruction"}, "launch_failure"),
    ("0", "3", {"cuda_error": "cudaErrorLaunchFailure", "cuda_error_call": "x"}, "launch_failure"),
    ("0", "0", {"can_implement": "Success", "initialize": "Success", "run": "Success", "sync": "cudaSuccess", "rel_err": 0.004, "nonfinite": 0}, "correct"),
    ("0", "0", {"can_implement": "Success", "initialize": "Success", "run": "Success", "sync": "cudaSuccess", "rel_err": 0.02, "nonfinite": 0}, "wrong"),
    ("0", "0", {"can_implement": "Success", "initialize": "Success", "run": "Success", "sync": "cudaSuccess", "rel_err": 0.0, "nonfinite": 5}, "wrong"),
    ("0", "139", {"stages": 3}, "infra_error"),
])
def test_classification(crc, rrc, probe, expect):
    case = {"problem": {"dtype_a": "bf16"}}
    info = collect_mod.parse_compile_log(_SA_LOG if crc == "1" else "")
    assert collect_mod.classify(case, crc, info, rrc, probe, "static")[0] == expect


def test_an_error_in_the_probe_itself_is_not_cutlass_evidence():
    info = collect_mod.parse_compile_log('/b/oracles/config_probe.cu(301): error: identifier "x" is undefined\n')
    assert collect_mod.classify({"problem": {"dtype_a": "bf16"}}, "1", info, None, {}, None)[0] == "infra_error"


def test_tf32_tolerance_is_tighter():
    probe = {"can_implement": "Success", "initialize": "Success", "run": "Success", "sync": "cudaSuccess",
             "rel_err": 0.004, "nonfinite": 0}
    assert collect_mod.classify({"problem": {"dtype_a": "tf32"}}, "0", {}, "0", probe, "done")[0] == "wrong"
    assert collect_mod.classify({"problem": {"dtype_a": "e4m3"}}, "0", {}, "0", probe, "done")[0] == "correct"


# ----------------------------------------------------------------------------- the H100 data
def _records():
    if not DATA.exists():
        pytest.skip("no tests/data/config_oracle_h*.jsonl (run oracles/run_config_oracle.sh on a Hopper GPU)")
    with open(DATA) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_data_size_and_identity():
    recs = _records()
    assert len(recs) >= 60
    ids = [r["id"] for r in recs]
    assert len(set(ids)) == len(ids)
    known = {c.id: c for c in CASES}
    for r in recs:
        assert r["id"] in known, f"{r['id']}: not in oracles/config_cases.py (stale data?)"
        assert r["config"] == known[r["id"]].config and r["problem"] == known[r["id"]].problem, r["id"]
        KernelConfig.from_dict(r["config"])
        GemmProblem.from_dict(r["problem"])


def test_data_environment_is_recorded():
    recs = _records()
    ran = [r for r in recs if r["device"]]
    assert ran, "no record names its device"
    assert all(any(chip in r["device"] for chip in HOPPER) for r in ran)
    assert len({r["device"] for r in ran}) == 1, "one sweep, one device"
    for r in recs:
        assert r["date"] and r["nvcc"] and "13.0" in r["nvcc"]


def test_every_outcome_carries_its_evidence():
    recs = _records()
    for r in recs:
        o, rid = r["outcome"], r["id"]
        assert o in collect_mod.OUTCOMES, rid
        if o == "compile_error":
            assert r["compile"]["rc"] not in ("0", None) and r["compile"]["first_error"], rid
            assert r["run"]["rc"] is None, rid
        else:
            if o != "infra_error":
                assert r["compile"]["rc"] == "0", rid
                assert isinstance(r["stages"], int) and isinstance(r["smem_kernel"], int), rid
        if o == "launch_failure":
            statuses = (r["can_implement"], r["initialize"], r["run_status"])
            assert any(s not in (None, "Success") for s in statuses) or r["cuda_error"] or \
                r["sync"] not in (None, "cudaSuccess"), rid
        if o == "hang":
            assert r["run"]["rc"] in ("124", "137"), rid
        if o in ("wrong", "correct"):
            assert r["run"]["rc"] == "0" and isinstance(r["rel_err"], (int, float)), rid
            assert r["elements"] == r["problem"]["m"] * r["problem"]["n"] * r["problem"]["batch"], rid
        if o == "wrong":
            assert r["nonfinite"] > 0 or r["rel_err"] > r["tolerance"], rid
        if o == "correct":
            assert r["nonfinite"] == 0 and r["rel_err"] <= r["tolerance"], rid
            assert isinstance(r["tflops"], (int, float)) and r["tflops"] > 0, rid


def test_data_spans_the_outcomes_the_cases_were_built_for():
    recs = _records()
    seen = {r["outcome"] for r in recs}
    assert {"compile_error", "launch_failure", "correct"} <= seen
    assert sum(r["outcome"] == "infra_error" for r in recs) <= len(recs) // 20


def test_shared_memory_over_the_opt_in_limit_never_launches():
    """D02 as observed: a kernel whose SharedStorage exceeds 227 KiB fails at initialize, never runs."""
    recs = [r for r in _records() if isinstance(r["smem_kernel"], int) and r["compile"]["rc"] == "0"
            and r["can_implement"] == "Success"]
    over = [r for r in recs if r["smem_kernel"] > SMEM_LIMIT]
    under_ok = [r for r in recs if r["smem_kernel"] <= SMEM_LIMIT and r["outcome"] == "correct"]
    assert under_ok
    for r in over:
        assert r["outcome"] == "launch_failure" and r["initialize"] != "Success", r["id"]


def test_compiled_kernels_have_at_least_two_stages():
    for r in _records():
        if r["compile"]["rc"] == "0" and isinstance(r["stages"], int):
            assert r["stages"] >= 2, r["id"]
