"""The operation seam: a new operation plugs in through the registry alone (tests/toy_op.py, "vscale"),
and GEMM's parts, reached through the registry, are the modules they always were."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from cutegen.core import registry
from cutegen.core.search import search
from cutegen.errors import CutegenError, FieldError

import toy_op
from toy_op import ScaleConfig, VectorScaleProblem

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def vscale():
    with registry.registered(toy_op.OPERATION) as op:
        yield op


# --- the toy operation, through the registry alone -----------------------------------------------------
def test_the_toy_is_found_by_name_by_problem_and_by_stored_dict(vscale):
    p = VectorScaleProblem(4096, "f16", 2.0)
    assert registry.get("vscale") is vscale and "vscale" in registry.names() and "gemm" in registry.names()
    assert registry.operation_of(p) is vscale
    assert registry.problem_from_dict(p.to_dict()) == p
    assert registry.config_from_dict("vscale", {"block": 128, "vector": 4}) == ScaleConfig(128, 4)
    # bad input: one line naming the field, for either operation
    with pytest.raises(FieldError, match=r"^problem\.n: 0 is below the minimum 1$"):
        registry.problem_from_dict({"op": "vscale", "n": 0})
    with pytest.raises(FieldError, match=r"^problem\.op: unknown operation 'conv'"):
        registry.problem_from_dict({"op": "conv", "n": 1})
    with pytest.raises(FieldError, match=r"^config\.vector: 3 is not one of"):
        registry.config_from_dict("vscale", {"vector": 3})


def test_the_toy_leaves_the_registry_after_the_test():
    assert "vscale" not in registry.names()
    with pytest.raises(FieldError, match="is the problem of no registered operation"):
        registry.operation_of(VectorScaleProblem(8))


def test_its_rule_holds_on_one_side_of_the_boundary_and_breaks_on_the_other(vscale):
    f32 = VectorScaleProblem(1000, "f32")
    assert registry.check(f32, ScaleConfig(256, 4)) == []                     # 4 x 4 bytes = 16
    broken = registry.check(f32, ScaleConfig(256, 8))                         # 8 x 4 bytes = 32
    assert [v.rule_id for v in broken] == ["VSCALE-VECTOR-BYTES"]
    assert "vector 8 x 4 bytes (f32) = 32 bytes > 16" in broken[0].reason
    assert registry.check(VectorScaleProblem(1000, "f16"), ScaleConfig(256, 8)) == []   # 8 x 2 = 16


def test_the_core_search_walks_its_space_prunes_by_its_rule_and_ranks_by_its_cost(vscale):
    f32 = search(VectorScaleProblem(1 << 20, "f32"), top_k=3)
    assert f32.candidates_total == 20 and f32.pruned_by_rule == {"VSCALE-VECTOR-BYTES": 5}
    assert f32.candidates_legal == 15 and len(f32.ranked) == 3
    costs = [r.cost for r in f32.ranked]
    assert costs == sorted(costs)
    every = sorted(toy_op.cost(f32.problem, c) for c in toy_op.space(f32.problem) if not toy_op.check(f32.problem, c))
    assert costs == every[:3]
    assert all(r.config.vector <= 4 for r in f32.ranked) and f32.ranked[0].config.vector == 4
    f16 = search(VectorScaleProblem(1 << 20, "f16"), top_k=1)
    assert f16.pruned_by_rule == {} and f16.ranked[0].config.vector == 8      # the wider load is legal there
    assert json.loads(json.dumps(f16.to_dict()))["ranked"][0]["config"]["vector"] == 8
    with pytest.raises(FieldError, match="takes no search options"):
        search(VectorScaleProblem(8), backend="dsl")


def test_cutegen_check_rules_lists_its_rules_beside_gemms(vscale, capsys):
    from cutegen.cli import main
    assert main(["check", "rules", "--op", "vscale"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "VSCALE-VECTOR-BYTES vscale: vector * sizeof(dtype) <= 16 (one 128-bit load per thread)"]
    assert main(["check", "rules", "--json"]) == 0
    ids = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    assert "VSCALE-VECTOR-BYTES" in ids and "SM90-CAN-IMPLEMENT-AB" in ids and len(ids) == len(set(ids))


def test_it_renders_its_template_through_the_registry(vscale, tmp_path):
    p, c = VectorScaleProblem(1000, "bf16", 0.5), ScaleConfig(128, 8)
    k = registry.render(p, c)                                   # the op's default backend
    src = k.files["kernel.cu"]
    assert "__launch_bounds__(128)" in src and "__nv_bfloat16" in src and "0.5f" in src and "v < 8" in src
    assert registry.render(p, c, "cuda").files == k.files      # deterministic
    k.write(tmp_path / "k")
    assert (tmp_path / "k" / "kernel.cu").read_text() == src
    stored = json.loads((tmp_path / "k" / "manifest.json").read_text())
    assert registry.problem_from_dict(stored["problem"]) == p
    with pytest.raises(FieldError, match=r"^backend: 'cutlass' is not a backend of vscale"):
        registry.render(p, c, "cutlass")
    with pytest.raises(FieldError, match="VSCALE-VECTOR-BYTES"):
        registry.render(VectorScaleProblem(1000, "f32"), c)


def test_its_validation_plan_and_peer_come_from_it(vscale):
    p, c = VectorScaleProblem(1000, "f32"), ScaleConfig(128, 2)
    assert registry.validation_cases(p, c) == [1000, 257, 1]
    assert registry.refusal_probes(p, c) == []                  # it declares none
    assert registry.tolerance(p) == 1e-3 and registry.peers(p) == ("torch.mul",)
    assert registry.features(p) == {"n": 1000.0, "bytes": 4.0}


class _Bare:
    name = "bare"

    def to_dict(self):
        return {"op": "bare"}

    @classmethod
    def from_dict(cls, data, where="problem"):
        return cls()


def test_a_stage_it_lacks_says_so_in_one_line(vscale):
    bare = toy_op.Operation(name="bare", problem_type=_Bare, config_type=_Bare)
    with registry.registered(bare):
        with pytest.raises(CutegenError, match=r"^operation 'bare' has no render \(stage not available for it\)$"):
            registry.render(_Bare(), _Bare())
    with pytest.raises(ValueError, match="already registered"):
        registry.register(toy_op.Operation(name="vscale", problem_type=_Bare, config_type=_Bare))
    with pytest.raises(TypeError, match=r"problem type dict lacks to_dict, from_dict, name"):
        registry.register(toy_op.Operation(name="broken", problem_type=dict, config_type=_Bare))
    with pytest.raises(ValueError, match="lower-case letters"):
        toy_op.Operation(name="Attention", problem_type=_Bare, config_type=_Bare)


def test_problems_and_configs_meet_the_protocols(vscale):
    import dataclasses
    from cutegen import GemmProblem, KernelConfig
    from cutegen.core.op import Config, Problem, config_hash
    for p, c in ((GemmProblem.from_dict({"m": 64, "n": 64, "k": 64, "dtype": "f16"}), KernelConfig((128, 128, 64))),
                 (VectorScaleProblem(64), ScaleConfig(64, 2))):
        assert isinstance(p, Problem) and isinstance(c, Config)
        with pytest.raises(dataclasses.FrozenInstanceError):
            c.__setattr__("tile_shape" if isinstance(c, KernelConfig) else "block", None)
        op = registry.operation_of(p)
        assert registry.config_from_dict(op, json.loads(json.dumps(c.to_dict()))) == c
        assert config_hash(c) == c.hash and len(c.hash) == 16
        registry.validate(p)                       # a valid problem passes its own checks again
    assert config_hash(ScaleConfig(64, 2)) != config_hash(ScaleConfig(64, 4))
    bad = VectorScaleProblem(64)
    object.__setattr__(bad, "n", -1)               # changed behind construction's back
    with pytest.raises(FieldError, match=r"^problem\.n: -1 is below the minimum 1$"):
        registry.validate(bad)
    gemm = GemmProblem.from_dict({"m": 64, "n": 64, "k": 64, "dtype": "f16"})
    object.__setattr__(gemm, "dtype_a", "int4")
    with pytest.raises(FieldError, match=r"^problem\.dtype_a"):
        registry.validate(gemm)


def test_the_results_database_files_and_reads_back_its_measurements(vscale, tmp_path):
    from cutegen.results import Measurement, ResultsDB, problem_key
    p, c = VectorScaleProblem(1 << 20, "f16", 2.0), ScaleConfig(256, 8)
    key = problem_key(p)
    assert json.loads(key) == {"op": "vscale", "n": 1 << 20, "dtype": "f16", "scale": 2.0}
    m = Measurement(problem=p, config=c, kernel_hash="toy", backend="cuda", device_name="NVIDIA H200",
                    device_kind="h200", timing_method="events", times_us=(5.0, 5.5), median_us=5.25,
                    validated=True, source="test", measured_at="2026-11-26")
    with ResultsDB(tmp_path / "r.sqlite", seed=None) as db:
        db.add(m)
        back = db.measurements("h200", p)
        assert [(b.problem, b.config, b.median_us) for b in back] == [(p, c, 5.25)]
        assert db.measurements("h200", VectorScaleProblem(1 << 20, "f16", 3.0)) == []
        row = db._open().execute("SELECT kernel_class, m FROM problems").fetchone()
        assert tuple(row) == ("vscale_f16", 1 << 20)
    assert Measurement.from_dict(m.to_dict()) == m
    with pytest.raises(FieldError, match=r"^config: expected a ScaleConfig \(vscale\)"):
        Measurement(problem=p, config={"block": 1}, device_kind="h200", median_us=1.0)


def test_the_toy_imports_only_the_core_and_shared_contracts():
    tree = ast.parse((Path(__file__).parent / "toy_op.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in mods if m.startswith("cutegen")}
    assert ours == {"cutegen._fields", "cutegen.core.op", "cutegen.errors", "cutegen.legality.rule"}


# --- GEMM through the registry is GEMM as it was --------------------------------------------------------
def test_gemm_parts_are_the_modules_they_always_were():
    from cutegen import GemmProblem, KernelConfig
    from cutegen.legality import CONFIG_RULESETS, all_rules, check_config
    from cutegen.run.cases import refusal_probes, validation_cases
    from cutegen.run.tolerance import tolerance
    p = GemmProblem.from_dict({"m": 1000, "n": 1500, "k": 777, "dtype": "bf16", "layout": "tn"})
    cfg = KernelConfig((128, 128, 64), (1, 1, 1))
    op = registry.operation_of(p)
    assert op.name == "gemm" and registry.get("gemm") is op and op.packs
    assert [r.id for r in registry.all_rules("gemm")] == [r.id for r in all_rules()]
    assert registry.config_rule_ids("gemm") == [r.id for rs in CONFIG_RULESETS for r in rs]
    assert [v.rule_id for v in registry.check(p, cfg)] == [v.rule_id for v in check_config(p, cfg).violations]
    assert registry.validation_cases(p, cfg) == validation_cases(p, cfg)
    assert registry.refusal_probes(p, cfg) == refusal_probes(p, cfg)
    assert registry.tolerance(p) == tolerance(p) and registry.peers(p) == ("cublas",)
    # the database key of every stored GEMM record: no "op" key, GEMM's own canonical JSON
    assert registry.problem_key(p) == json.dumps(p.to_dict(), sort_keys=True, separators=(",", ":"))
    assert registry.problem_from_dict(p.to_dict()) == p == registry.problem_from_dict({**p.to_dict(), "op": "gemm"})
    assert registry.db_columns(p) == {"kernel_class": p.kernel_class_name, "m": 1000, "n": 1500, "k": 777, "batch": 1}
    f = registry.features(p)
    assert f["log2_k"] == pytest.approx(9.6018, abs=1e-4) and f["bits_a"] == 16 and f["batch"] == 1


def test_gemms_cost_part_prices_a_completed_config_and_names_what_cannot_complete():
    from cutegen import GemmProblem, KernelConfig
    from cutegen.legality import check_config
    from cutegen.search.cost import config_cost
    op = registry.get("gemm")
    p = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"})
    small, big = KernelConfig((128, 128, 64), (1, 1, 1)), KernelConfig((128, 256, 64), (2, 1, 1))
    rep = check_config(p, small)
    assert op.cost(p, small) == config_cost(p, rep.config, rep.stages)[0] > 0
    assert op.cost(p, big) != op.cost(p, small)
    with pytest.raises(ValueError, match="no cost for an illegal config .*RES-SMEM-CAPACITY"):
        op.cost(p, KernelConfig((256, 256, 128), (1, 1, 1), stages=9))


def test_the_search_legality_analysis_indexes_the_registrys_rules():
    from cutegen.search.legality_analysis import rule_ids
    from cutegen.legality import CONFIG_RULESETS
    assert rule_ids() == [r.id for rs in CONFIG_RULESETS for r in rs] == registry.config_rule_ids("gemm")


def test_gemm_renders_through_the_registry_byte_for_byte():
    from cutegen import GemmProblem, KernelConfig
    from cutegen.render import render
    p = GemmProblem.from_dict({"m": 512, "n": 512, "k": 512, "dtype": "bf16"})
    cfg = KernelConfig((128, 128, 64), (1, 1, 1))
    assert registry.render(p, cfg).files == render(p, cfg, "cutlass").files
    assert registry.render(p, cfg, "cutlass_builder").files == render(p, cfg, "cutlass_builder").files
    with pytest.raises(FieldError, match=r"^backend: 'cuda' is not a backend of gemm"):
        registry.render(p, cfg, "cuda")


def test_the_core_imports_no_operation():
    # the core names operations only through cutegen.ops, by string; it imports no GEMM module
    gemm_modules = {"problem", "config", "legality", "search", "render", "dsl", "runner", "run", "ops",
                    "collective_builder", "staging", "swap_ab", "smem", "build", "manifest", "packs"}
    for f in sorted((ROOT / "cutegen" / "core").glob("*.py")):
        for n in ast.walk(ast.parse(f.read_text())):
            names = [n.module or ""] if isinstance(n, ast.ImportFrom) else (
                [a.name for a in n.names] if isinstance(n, ast.Import) else [])
            for name in names:
                parts = name.lstrip(".").split(".")
                first = parts[1] if parts[0] == "cutegen" and len(parts) > 1 else parts[0]
                if isinstance(n, ast.ImportFrom) and n.level == 2:
                    first = parts[0]
                assert first not in gemm_modules, f"{f.name} imports {name}"


def test_the_registry_and_gemms_entry_load_nothing_heavy():
    # the GPU machine reads manifests and database rows through the registry without egglog or torch
    import subprocess
    import sys
    code = ("import sys\nfrom cutegen.core import registry as r\nfrom cutegen import GemmProblem\n"
            "p = GemmProblem.from_dict({'m': 8, 'n': 8, 'k': 8, 'dtype': 'bf16'})\n"
            "r.problem_key(p); r.problem_from_dict(p.to_dict()); r.db_columns(p); r.get('gemm').backends\n"
            "print(sorted(m for m in ('egglog', 'torch', 'numpy', 'jinja2', 'cutegen.search', 'cutegen.legality',"
            " 'cutegen.render') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr[-2000:]


def test_the_search_hears_a_renderers_refusals_through_the_registry():
    # tf32 NT takes CUTLASS's register-A mainloop, which the explicit template does not spell
    from cutegen import GemmProblem, KernelConfig
    from cutegen.render import complete_config
    from cutegen.search.legality_analysis import Judge
    nt = GemmProblem(2048, 2048, 2048, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32",
                     layout_a="col", layout_b="row")
    cfg = KernelConfig((128, 128, 32), (1, 1, 1))
    done = complete_config(nt, cfg)
    assert registry.backend_refusals(nt, done, "cutlass")[0].startswith("CUTLASS-EXPLICIT-RS")
    assert registry.backend_refusals(nt, done, "cutlass_builder") == []
    assert registry.backend_refusals(nt.replace(layout_a="row", layout_b="col"), done, "cutlass") == []
    assert Judge(nt, "cutlass")(cfg).rules[:1] == ["CUTLASS-EXPLICIT-RS"]
    assert Judge(nt, "cutlass_builder")(cfg).legal
