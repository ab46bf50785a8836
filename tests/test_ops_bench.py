"""`cutegen validate --op` / `cutegen bench --op` and the results database for any operation (cutegen/run/ops.py),
on the CPU: the test-only "vscale" operation with a CPU runner (tests/toy_op_runner.py) goes through suite, plan,
validation, timing, ratios, JSON, plot and database; a second bench reuses what the database holds. The real
runners (attention, grouped GEMM) import without torch on the CPU side, and the Llama suite is what issue 25 asks."""
from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

import toy_op
import toy_op_runner
from cutegen.config import KernelConfig
from cutegen.core import registry
from cutegen.errors import CutegenError, FieldError
from cutegen.problem import GemmProblem
from cutegen.results import Measurement, ResultsDB
from cutegen.run import ops

DEVICE = {"name": "NVIDIA H200", "sm_count": 132, "kind": "h200"}
SUITE = """op = "vscale"
[[case]]
name = "small"
n = 1000
dtype = "f32"
scale = 2.5

[[case]]
name = "big"
n = 1048576
scale = 0.5
repeat = 2
"""


@pytest.fixture
def vscale(monkeypatch):
    op = toy_op_runner.OPERATION
    monkeypatch.setattr(toy_op_runner, "CALLS", {"validate": 0, "bench": 0})
    with registry.registered(op):
        yield op


@pytest.fixture
def planned(vscale, tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE)
    cases = ops.load_cases("vscale", str(suite))
    plan_dir = tmp_path / "plan"
    ops.plan("vscale", cases, plan_dir, top_k=2, say=lambda *a: None)
    for d in (plan_dir / "kernels").iterdir():
        (d / "kernel.so").write_bytes(b"built")          # what the build leaves; the toy runner reads kernel.cu
    return cases, plan_dir


# --- problems ----------------------------------------------------------------------------------------------
def test_a_suite_gives_problems_and_run_options(vscale, tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    cases = ops.load_cases("vscale", str(suite))
    assert [(c.name, c.problem.n, c.options) for c in cases] == [("small", 1000, {}), ("big", 1048576, {"repeat": 2})]
    one = ops.load_cases("vscale", None, ['{"n": 64}'])
    assert one[0].name == "vscale_f16_n64"
    assert [c.name for c in ops.load_cases("vscale", str(suite), only=["big"])] == ["big"]


@pytest.mark.parametrize("text,field", [
    ('op = "attention"\n[[case]]\nname = "a"\nn = 1\n', "s.toml: op"),
    ('[[case]]\nname = "a"\nn = 0\n', "s.toml: case[0] (a).n"),
    ('[[case]]\nname = "a"\nn = 4\nwidth = 3\n', "s.toml: case[0] (a).width"),
    ('[[case]]\nname = "a b"\nn = 4\n', "s.toml: case[0].name"),
    ('[[case]]\nname = "a"\nn = 4\n[[case]]\nname = "a"\nn = 8\n', "--suite"),
    ('title = 3\n', "s.toml: title"),
])
def test_a_bad_suite_is_one_line_naming_the_field(vscale, tmp_path, text, field):
    suite = tmp_path / "s.toml"
    suite.write_text(text)
    with pytest.raises(FieldError) as e:
        ops.load_cases("vscale", str(suite))
    assert e.value.field == field and "\n" not in str(e.value)


def test_gemm_and_an_op_without_runner_are_refused_in_one_line():
    with pytest.raises(CutegenError, match="no runner"):
        ops.load_cases("gemm", "bench/suite.toml")
    with pytest.raises(FieldError, match="unknown operation 'conv'"):
        ops.load_cases("conv", None, ['{"n": 1}'])


# --- plan and validate ---------------------------------------------------------------------------------
def test_the_plan_holds_the_picks_and_the_peer_kernels(planned):
    cases, plan_dir = planned
    index = json.loads((plan_dir / "index.json").read_text())
    for c in cases:
        roles = index["problems"][c.name]["kernels"]
        assert set(roles) == {"cutegen", "cutegen-2", "naive"}
        ranked = sorted(toy_op.cost(c.problem, k) for k in toy_op.space(c.problem) if not toy_op.check(c.problem, k))
        assert roles["cutegen"]["predicted_us"] == pytest.approx(ranked[0], abs=1e-3)
        assert roles["naive"]["config"] == {"block": 32, "vector": 1}
        assert (plan_dir / roles["cutegen"]["dir"] / "kernel.cu").is_file()
    dirs = (plan_dir / "dirs.txt").read_text().split()
    assert len(dirs) == len(set(dirs)) == len(index["kernels"])


def test_validate_passes_built_kernels_and_fails_a_wrong_one(planned, tmp_path):
    cases, plan_dir = planned
    index = json.loads((plan_dir / "index.json").read_text())
    doc = ops.validate("vscale", cases, plan_dir, json_path=str(tmp_path / "v.json"), device=DEVICE, isolate=False,
                       say=lambda *a: None)
    assert doc["summary"]["ok"] and doc["summary"]["pass"] == len(index["kernels"])
    assert json.loads((tmp_path / "v.json").read_text())["summary"]["pass"] == doc["summary"]["pass"]
    # a kernel computing the wrong scale fails; one without its library is "not built"
    wrong = plan_dir / index["problems"]["big"]["kernels"]["cutegen"]["dir"]
    (wrong / "kernel.cu").write_text((wrong / "kernel.cu").read_text().replace("0.5f *", "0.25f *"))
    unbuilt = plan_dir / index["problems"]["small"]["kernels"]["naive"]["dir"]
    (unbuilt / "kernel.so").unlink()
    doc = ops.validate("vscale", cases, plan_dir, json_path=str(tmp_path / "v.json"), device=DEVICE, isolate=False,
                       say=lambda *a: None)
    verdicts = {r["dir"]: r["verdict"] for r in doc["kernels"]}
    assert verdicts[str(wrong)] == "fail" and verdicts[str(unbuilt)] == "not built"
    assert not doc["summary"]["ok"]
    assert ops.passed_in([str(tmp_path / "v.json")]) == {str((plan_dir / d).resolve()) for d, v in verdicts.items()
                                                        if v == "pass"}


def test_in_a_worker_child_a_hang_costs_one_kernel(planned):
    """The default: every runner call in a watchdog child; a kernel that does not answer is a hang, the child is
    killed, the next kernel runs in a fresh one and passes; bench results come back from the child too."""
    cases, plan_dir = planned
    index = json.loads((plan_dir / "index.json").read_text())
    hung = plan_dir / index["problems"]["small"]["kernels"]["cutegen"]["dir"]
    (hung / "kernel.cu").write_text((hung / "kernel.cu").read_text() + "// HANG\n")
    doc = ops.validate("vscale", cases[:1], plan_dir, device=DEVICE, timeout=6, say=lambda *a: None)
    verdicts = {r["role"]: r["verdict"] for r in doc["kernels"]}
    assert verdicts == {"cutegen": "hang", "cutegen-2": "pass", "naive": "pass"}
    assert toy_op_runner.CALLS["validate"] == 0          # every call ran in a child, none here
    bdoc, _ = ops.bench("vscale", cases[1:], plan_dir, plan_dir.parent / "o", device=DEVICE, plot=False,
                        say=lambda *a: None)
    assert bdoc["problems"][0]["results"]["cutegen"]["status"] == "ok" and toy_op_runner.CALLS["bench"] == 0


# --- bench and the database ----------------------------------------------------------------------------
def test_bench_times_files_and_a_second_bench_reuses(planned, tmp_path):
    cases, plan_dir = planned
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    doc, path = ops.bench("vscale", cases, plan_dir, tmp_path / "out", db=db, device=DEVICE, isolate=False,
                       say=lambda *a: None)
    assert toy_op_runner.CALLS["bench"] == 2
    big = next(e for e in doc["problems"] if e["name"] == "big")
    index = json.loads((plan_dir / "index.json").read_text())["problems"]["big"]["kernels"]
    ours_us = toy_op.cost(cases[1].problem, toy_op.ScaleConfig(**index["cutegen"]["config"])) * 2   # repeat = 2
    peer_us = toy_op.LAUNCH_US + 2 * 1048576 * 2 / toy_op.HBM_BYTES_PER_US
    naive_us = toy_op.cost(cases[1].problem, toy_op.ScaleConfig(32, 1)) * 2
    assert big["results"]["cutegen"]["median_ms"] == pytest.approx(ours_us / 1e3)
    assert big["ratios"]["torch.mul"] == pytest.approx(peer_us / ours_us)
    assert big["ratios"]["naive"] == pytest.approx(naive_us / ours_us) and big["ratios"]["naive"] > 1
    assert big["results"]["cutegen"]["tflops"] == pytest.approx(1048576 / (ours_us * 1e-6) / 1e12)
    assert big["fraction_of_hbm_floor"]["cutegen"] == pytest.approx(2 * 1048576 * 2 / 4.8e12 * 1e3 / (ours_us / 1e3))
    assert json.loads(path.read_text())["schema"] == ops.BENCH_SCHEMA and path.with_suffix(".png").stat().st_size > 1000
    stored = db.measurements(op="vscale")
    assert len(stored) == 6 and {m.backend for m in stored} == {"cuda"}          # 3 kernels x 2 problems
    mine = [m for m in stored if m.source.endswith("#big/cutegen")]
    assert mine[0].peers_us == {"torch.mul": pytest.approx(peer_us)} and mine[0].median_us == pytest.approx(ours_us)
    # the same database again: nothing is timed, the figures come back
    doc2, _ = ops.bench("vscale", cases, plan_dir, tmp_path / "out2", db=db, device=DEVICE, plot=False, isolate=False,
                       say=lambda *a: None)
    assert toy_op_runner.CALLS["bench"] == 2 and doc2["summary"]["reused"] == ["big", "small"]
    big2 = next(e for e in doc2["problems"] if e["name"] == "big")
    assert big2["ratios"] == pytest.approx(big["ratios"]) and len(db.measurements(op="vscale")) == 6
    # another device kind, or no reuse: timed again
    ops.bench("vscale", cases, plan_dir, tmp_path / "out3", db=db, device={**DEVICE, "name": "NVIDIA H100 80GB HBM3",
              "kind": "h100-sxm"}, plot=False, isolate=False, say=lambda *a: None)
    assert toy_op_runner.CALLS["bench"] == 4
    ops.bench("vscale", cases, plan_dir, tmp_path / "out4", db=db, device=DEVICE, plot=False, reuse=False,
              isolate=False, say=lambda *a: None)
    assert toy_op_runner.CALLS["bench"] == 6


def test_bench_times_only_what_passed_validation(planned, tmp_path):
    cases, plan_dir = planned
    naive = json.loads((plan_dir / "index.json").read_text())["problems"]["small"]["kernels"]["naive"]["dir"]
    passed = {str(p.resolve()) for p in (plan_dir / "kernels").iterdir()} - {str((plan_dir / naive).resolve())}
    doc, _ = ops.bench("vscale", cases[:1], plan_dir, tmp_path / "o", validated=passed, device=DEVICE, plot=False,
                       isolate=False, say=lambda *a: None)
    e = doc["problems"][0]
    assert e["not_timed"] == {"naive": "did not pass validation"} and "naive" not in e["results"]
    assert e["ratios"]["naive"] is None and e["ratios"]["torch.mul"] is not None


def test_the_cli_lists_records_of_one_operation(planned, tmp_path, capsys):
    from cutegen.commands import db as db_cmd
    from cutegen.cli import main
    cases, plan_dir = planned
    path = tmp_path / "r.sqlite"
    with ResultsDB(path, seed=None) as db:
        ops.bench("vscale", cases, plan_dir, tmp_path / "o", db=db, device=DEVICE, plot=False, isolate=False,
                       say=lambda *a: None)
        db.add(Measurement(problem=GemmProblem(64, 64, 64), config=KernelConfig((128, 128, 64), (1, 1, 1)),
                           device_name="NVIDIA H200", device_kind="h200", median_us=3.0, validated=True,
                           measured_at="2026-11-26"))
    capsys.readouterr()
    assert main(["db", "list", "--db", str(path), "--no-seed", "--op", "vscale", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(rows) == 6 and {r["op"] for r in rows} == {"vscale"} and all(r["peers_us"] for r in rows)
    assert main(["db", "list", "--db", str(path), "--no-seed", "--op", "gemm", "--json"]) == 0
    assert [json.loads(x)["op"] for x in capsys.readouterr().out.splitlines()] == ["gemm"]
    assert db_cmd.stats(ResultsDB(path, seed=None, readonly=True).measurements(op="gemm"))["h200"]["records"] == 1


# --- the schema: migration 3 --------------------------------------------------------------------------
def _gemm(median=5.0) -> Measurement:
    return Measurement(problem=GemmProblem(4096, 4096, 4096), config=KernelConfig((128, 256, 64), (2, 1, 1)),
                       kernel_hash="abc", device_name="NVIDIA H200", device_kind="h200", timing_method="cuda-events",
                       times_us=(median,), median_us=median, validated=True, source="t", measured_at="2026-11-22",
                       cublas_us=6.0)


def _as_version_2(path) -> None:
    """Undo migration 3 on a file (what a database written before it looks like)."""
    conn = sqlite3.connect(path)
    conn.executescript("DROP INDEX problems_op; ALTER TABLE problems DROP COLUMN op; "
                       "ALTER TABLE measurements DROP COLUMN peers_us; PRAGMA user_version = 2;")
    conn.close()


def test_migration_3_keeps_gemm_records_and_names_their_operation(tmp_path, vscale):
    path = tmp_path / "old.sqlite"
    with ResultsDB(path, seed=None) as db:
        db.add(_gemm())
    _as_version_2(path)
    seed_like = tmp_path / "seed.sqlite"
    seed_like.write_bytes(path.read_bytes())
    # read-only, as the committed seed is read: version 2 is GEMMs only
    ro = ResultsDB(seed_like, seed=None, readonly=True)
    assert ro.measurements(op="gemm") == [_gemm()] and ro.measurements(op="vscale") == []
    # opened for writing: migrated, the record kept with its key, and filed under gemm
    with ResultsDB(path, seed=None) as db:
        assert db.measurements() == [_gemm()]
        toy = Measurement(problem=toy_op.VectorScaleProblem(64), config=toy_op.ScaleConfig(), kernel_hash="t",
                          backend="cuda", device_name="NVIDIA H200", device_kind="h200", median_us=1.0, validated=True,
                          measured_at="2026-11-26", peers_us={"torch.mul": 2.0})
        db.add(toy)
        assert db.measurements(op="vscale") == [toy] and db.measurements(op="gemm") == [_gemm()]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert sorted(conn.execute("SELECT op FROM problems")) == [("gemm",), ("vscale",)]


def test_peers_us_round_trips_and_a_bad_one_is_named(vscale):
    m = dataclasses.replace(_gemm(), peers_us={"cublas": 6})
    assert Measurement.from_dict(m.to_dict()) == m and m.peers_us == {"cublas": 6.0}
    assert "peers_us" not in _gemm().to_dict()                       # older exports keep their shape
    assert m.record_key != _gemm().record_key and _gemm().record_key == dataclasses.replace(_gemm()).record_key
    with pytest.raises(FieldError, match="peers_us"):
        dataclasses.replace(_gemm(), peers_us={"cublas": 0})


def test_gemms_learned_ranking_reads_no_other_operation(tmp_path):
    from cutegen.ops.attention.config import AttentionConfig
    from cutegen.ops.attention.problem import AttentionProblem
    from search.learned import cache
    from search.learned.samples import from_measurements
    attn = Measurement(problem=AttentionProblem(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096,
                                                head_dim=128, causal=True),
                       config=AttentionConfig(128, 128, "ws_cooperative"), kernel_hash="a", backend="cutlass",
                       device_name="NVIDIA H200", device_kind="h200", timing_method="cutegen bench --op attention",
                       times_us=(900.0,), median_us=900.0, validated=True, source="t", measured_at="2026-11-26",
                       peers_us={"sdpa_cudnn": 950.0})
    # the same kind of record (backend "cutlass", validated benchmark) of a GEMM is a sample; of attention none
    assert len(from_measurements([_gemm()], "h200")) == 1
    assert from_measurements([attn], "h200") == [] and len(from_measurements([attn, _gemm()], "h200")) == 1
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    db.add_many([attn, _gemm()])
    assert db.measurements(op="gemm") == [_gemm()] and db.measurements(op="attention") == [attn]
    seen = []
    monkey = cache.Predictor

    class Spy(monkey):
        def __init__(self, kind, measurements, *a, **kw):
            seen.extend(measurements)
            super().__init__(kind, measurements, *a, **kw)
    cache_pred = cache.predictor.__globals__
    old = cache_pred["Predictor"]
    cache_pred["Predictor"] = Spy
    try:
        cache.predictor("h200", db, disk=False)
    finally:
        cache_pred["Predictor"] = old
    assert seen == [_gemm()]


def test_gemms_ranking_and_model_cache_do_not_see_attention_records(tmp_path):
    """A database holding only attention records of a kind is, for GEMM's ranking, one without measurements of it;
    and adding one does not change the fingerprint the GEMM model cache is keyed by."""
    from cutegen.ops.attention.config import AttentionConfig
    from cutegen.ops.attention.problem import AttentionProblem
    from search import ranking
    attn = Measurement(problem=AttentionProblem(batch=1, heads_q=8, heads_kv=8, seqlen_q=512, seqlen_kv=512,
                                                head_dim=64),
                       config=AttentionConfig(128, 64, "ws_cooperative"), kernel_hash="a", backend="cutlass",
                       device_name="NVIDIA H20", device_kind="h20", median_us=50.0, validated=True,
                       measured_at="2026-11-26", peers_us={"sdpa_cudnn": 60.0})
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    db.add(_gemm())
    before = db.fingerprint(op="gemm")
    db.add(attn)
    assert db.fingerprint(op="gemm") == before and db.fingerprint() != before
    assert db.holds_kind("h20") and not db.holds_kind("h20", op="gemm") and db.holds_kind("h200", op="gemm")
    r = ranking.choose(device="h20", db=db)
    assert r.method == "prior" and "holds no measurement of h20" in r.note


# --- the real operations' runners and the Llama suite ------------------------------------------------------
def test_the_llama_suite_is_the_issues():
    cases = ops.load_cases("attention", "bench/attention_llama.toml")
    prefill = [c for c in cases if c.problem.causal]
    decode = [c for c in cases if not c.problem.causal]
    heads = {(c.problem.heads_q, c.problem.heads_kv, c.problem.head_dim) for c in cases}
    assert heads == {(32, 8, 128), (64, 8, 128)}
    assert {c.problem.seqlen_q for c in prefill} == {512, 1024, 2048, 4096, 8192, 16384}
    assert all(c.problem.seqlen_q == c.problem.seqlen_kv and c.problem.batch * c.problem.seqlen_q == 16384
               for c in prefill)
    assert {(c.problem.seqlen_q, c.problem.seqlen_kv) for c in decode} == {
        (q, kv) for q in (1, 4, 16) for kv in (8192, 32768)}
    assert len(prefill) == len(decode) == 12 and all(c.problem.dtype == "bf16" for c in cases)


def test_the_real_runners_load_without_torch_and_name_their_peer_kernels():
    import subprocess
    import sys
    att = registry.get("attention")
    gg = registry.get("grouped_gemm")
    run_a, run_g = ops.runner_of(att), ops.runner_of(gg)
    p = ops.load_cases("attention", "bench/attention_llama.toml", only=["llama8b_decode_q1_kv8k"])[0].problem
    peers = run_a.peer_kernels(p)
    assert list(peers) == ["cutlass88", "cutlass88-2"] and all(ops.peer_of(r, att.peers) == "cutlass88" for r in peers)
    assert run_a.floor_bytes(p) == p.bytes_min
    masked = ops.load_cases("grouped_gemm", "bench/moe.toml", only=["dsv3_gate_up_decode_masked"])[0]
    assert masked.options == {"fill": 16} and run_g.peer_kernels(masked.problem) == {}
    # 32 experts, 16 of 64 rows each: every expert's weights, the rows and the output
    assert run_g.floor_bytes(masked.problem, masked.options) == 32 * 4096 * 7168 * 2 + 512 * 7168 * 2 + 512 * 4096 * 2
    assert run_g.flops(masked.problem, masked.options) == 2 * 512 * 4096 * 7168 < masked.problem.flops   # not 64 rows
    # the CPU side (plan, suite, database) never imports torch through a runner
    code = ("import sys; from cutegen.run import ops; "
            "[ops.runner_of(ops.operation(n)).peer_kernels for n in ('attention', 'grouped_gemm')]; "
            "ops.load_cases('attention', 'bench/attention_llama.toml'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_commands_plan_validate_bench_and_reuse(vscale, tmp_path, monkeypatch, capsys):
    """`cutegen bench --op vscale --plan`, `cutegen validate --op`, `cutegen bench --op --db` twice (the second
    reuses every problem), through the CLI (in this process; the device stands in)."""
    from cutegen.cli import main
    monkeypatch.setattr(ops, "device_info", lambda: dict(DEVICE))
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    plan_dir, db = tmp_path / "plan", tmp_path / "r.sqlite"
    common = ["--op", "vscale", "--suite", str(suite)]
    assert main(["bench", *common, "--kernels", str(plan_dir), "--plan"]) == 0
    for d in (plan_dir / "kernels").iterdir():
        (d / "kernel.so").write_bytes(b"built")
    assert main(["validate", str(plan_dir), *common, "--in-process", "--json", str(tmp_path / "v.json")]) == 0
    capsys.readouterr()
    bench = ["bench", *common, "--kernels", str(plan_dir), "--db", str(db), "--in-process", "--no-plot",
             "--validated", str(tmp_path / "v.json")]
    assert main([*bench, "--out", str(tmp_path / "o1")]) == 0
    first = capsys.readouterr().out
    assert main([*bench, "--out", str(tmp_path / "o2")]) == 0
    second = capsys.readouterr().out
    assert first.count("BENCH ") == 2 and "REUSED" not in first
    assert second.count("REUSED") == 2 and "BENCH " not in second
    assert toy_op_runner.CALLS == {"validate": 4, "bench": 2}      # (pick + naive) x 2 problems; 2 timed
    # one-line refusals
    assert main(["bench", "--op", "vscale", "--problem", '{"n": 0}', "--kernels", str(plan_dir)]) == 2
    assert "--problem[0].n" in capsys.readouterr().err
    assert main(["bench", "--op", "vscale", "--suite", str(suite)]) == 2
    assert "--kernels" in capsys.readouterr().err
    assert main(["validate", "--op", "vscale", "--suite", str(suite)]) == 2


@pytest.mark.parametrize("bug", [None, "wrong_weights"])
def test_the_grouped_runner_validates_on_the_cpu_with_a_stand_in(monkeypatch, tmp_path, bug):
    """grouped_gemm's runner.validate: the ragged cases (into a sentinel-filled output) and the refusal probes, as
    one verdict; a stand-in launch does the arithmetic on CPU tensors (as tests/test_grouped_bench.py's)."""
    from test_grouped_bench import _stand_in
    from cutegen.ops.grouped_gemm import runner as gg_runner, torch_op
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem
    monkeypatch.setattr(gg_runner, "DEVICE", "cpu")
    monkeypatch.setattr(torch_op, "launch", _stand_in(bug))
    monkeypatch.setattr(torch_op, "load", lambda path: torch_op.register_stand_in("bf16", "offs"))
    monkeypatch.setattr(gg_runner, "probes",
                        lambda torch_op, handle, p: {"misaligned_x_base": {"status": 1, "agreed": True}})
    kdir = tmp_path / "k"
    kdir.mkdir()
    (kdir / "manifest.json").write_text(json.dumps({"config": {"tile_m": 128, "tile_n": 128, "swap_ab": False}}))
    got = gg_runner.validate(GroupedGemmProblem(8, 4096, 4096, 4096), kdir)
    assert [c["case"] for c in got["cases"]] == ["empty_groups", "one_token", "ragged_tile", "all_in_one",
                                                 "very_uneven"]
    assert got["probes"] == [{"probe": "misaligned_x_base", "ok": True, "status": 1, "agreed": True}]
    assert got["ok"] == (bug is None) and (got["max_rel_error"] < 1e-2) == (bug is None)


@pytest.mark.parametrize("damage,field", [
    (lambda ix: ix.pop("problems"), "index.json"),
    (lambda ix: ix["problems"]["small"].pop("kernels"), "index.json: problems.small"),
    (lambda ix: ix["problems"]["small"]["kernels"]["naive"].pop("hash"), "index.json: problems.small.kernels.naive"),
    (lambda ix: ix["problems"]["small"]["kernels"]["naive"].update(dir="../../elsewhere"),
     "index.json: problems.small.kernels.naive.dir"),
])
def test_a_damaged_plan_index_is_one_line(planned, damage, field):
    cases, plan_dir = planned
    index = json.loads((plan_dir / "index.json").read_text())
    damage(index)
    (plan_dir / "index.json").write_text(json.dumps(index))
    with pytest.raises(FieldError) as e:
        ops.validate("vscale", cases, plan_dir, device=DEVICE, isolate=False, say=lambda *a: None)
    assert e.value.field.endswith(field) and "\n" not in str(e.value)


def test_validate_op_sanitize_runs_the_runners_case_under_the_tool(vscale, tmp_path, monkeypatch, capsys):
    """`cutegen validate --op --sanitize-only`: compute-sanitizer over `python -m cutegen._runner_worker --once` with
    an op_runner request for each pick; a stand-in tool (it runs the command after its own flags) shows the
    request reaching the runner: clean when the case passes, failed when it does not."""
    import os
    import stat
    from pathlib import Path
    from cutegen.cli import main
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "compute-sanitizer"
    tool.write_text('#!/bin/sh\nshift 6\n"$@"\nrc=$?\necho "========= ERROR SUMMARY: 0 errors"\nexit $rc\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    plan_dir = tmp_path / "plan"
    ops.plan("vscale", ops.load_cases("vscale", str(suite)), plan_dir, say=lambda *a: None)
    argv = ["validate", "--op", "vscale", str(plan_dir), "--suite", str(suite), "--only", "small", "--sanitize-only",
            "--sanitize-tools", "memcheck", "--json", str(tmp_path / "s.json")]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [s["verdict"] for s in doc["sanitizer"]] == ["clean"]
    assert doc["sanitizer"][0]["tools"]["memcheck"]["summary"] == "ERROR SUMMARY: 0 errors"
    pick = Path(doc["sanitizer"][0]["kernel"])
    (pick / "kernel.cu").write_text((pick / "kernel.cu").read_text().replace("2.5f *", "2.0f *"))
    assert main(argv) == 1
    assert [s["verdict"] for s in json.loads((tmp_path / "s.json").read_text())["sanitizer"]] == ["failed"]


def test_the_committed_h200_run_reads_back(tmp_path):
    """bench/results/ops/2026-11-26-h200-run1-*: the database the GPU run wrote (schema 3) decodes through the
    registry, every kernel of every problem filed with its peers, and the second bench reused all it was asked."""
    import gzip
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "bench" / "results" / "ops"
    db_path = tmp_path / "run1.sqlite"
    db_path.write_bytes(gzip.decompress((root / "2026-11-26-h200-run1-results.sqlite.gz").read_bytes()))
    db = ResultsDB(db_path, seed=None, readonly=True)
    attn, grouped = db.measurements(op="attention"), db.measurements(op="grouped_gemm")
    bench_doc = json.loads((root / "2026-11-26-h200-run1-bench-attention.json").read_text())
    assert len(attn) == sum(len([r for r in e["results"] if r.startswith(("cutegen", "cutlass88"))])
                            for e in bench_doc["problems"]) == 72
    assert len(grouped) == 4 and db.measurements(op="gemm") == []
    assert all(set(m.peers_us) == {"sdpa_cudnn", "sdpa_flash"} and m.validated and m.device_kind == "h200"
               for m in attn)
    reuse = json.loads((root / "2026-11-26-h200-run1-reuse-attention.json").read_text())
    assert reuse["summary"]["reused"] == sorted(e["name"] for e in reuse["problems"]) and len(reuse["problems"]) == 3


def test_a_plan_replaces_the_folder_whole(planned, monkeypatch):
    """A second plan into the same folder drops the first one's kernels; one that fails half-way leaves the old
    plan as it was."""
    cases, plan_dir = planned
    before = sorted(p.name for p in (plan_dir / "kernels").iterdir())
    (plan_dir / "kernels" / "stale").mkdir()
    ops.plan("vscale", cases[:1], plan_dir, say=lambda *a: None)
    after = sorted(p.name for p in (plan_dir / "kernels").iterdir())
    assert "stale" not in after and set(after) < set(before)
    index = (plan_dir / "index.json").read_text()

    def broken(*a, **k):
        raise RuntimeError("renderer died")
    monkeypatch.setattr(registry, "render", broken)
    with pytest.raises(RuntimeError):
        ops.plan("vscale", cases, plan_dir, say=lambda *a: None)
    assert (plan_dir / "index.json").read_text() == index
    assert sorted(p.name for p in (plan_dir / "kernels").iterdir()) == after
