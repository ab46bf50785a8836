"""The top-level Python API (cutegen/__init__.py, cutegen/_api.py): it returns what the CLI prints."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cutegen
from cutegen.cli import main

PROBLEM = {"m": 8192, "n": 3072, "k": 1024, "dtype": "bf16", "layout": "tn"}
ROOT = Path(__file__).resolve().parents[1]


def test_all_is_exactly_the_public_api_with_docstrings_and_type_hints():
    assert set(cutegen.__all__) == {"GemmProblem", "KernelConfig", "SmemAtom", "CutegenError", "FieldError",
                                    "IllegalConfig", "find_kernels", "generate", "pack", "plan_tuning", "tune",
                                    "GeneratedKernel", "PackResult", "ProblemLike", "__version__"}
    for name in ("find_kernels", "generate", "pack", "plan_tuning", "tune"):
        fn = getattr(cutegen, name)
        assert inspect.isfunction(fn), name
        assert fn.__doc__ and len(fn.__doc__) > 80, name
        sig = inspect.signature(fn)
        assert sig.return_annotation is not inspect.Signature.empty, name
        unannotated = [p for p in sig.parameters.values() if p.annotation is inspect.Parameter.empty]
        assert [p.name for p in unannotated] == [], name


@pytest.mark.parametrize("order", ["api-first", "subpackage-first"])
def test_find_kernels_and_the_search_subpackage_coexist_in_either_import_order(order):
    # `cutegen.search` is the search's subpackage: importing cutegen.search.engine sets that attribute on
    # the package. The API's search entry point has another name, so neither import clobbers the other.
    lines = ["import cutegen", "fn = cutegen.find_kernels", "import cutegen.search.engine"]
    if order == "subpackage-first":
        lines = ["import cutegen.search.engine", "import cutegen", "fn = cutegen.find_kernels"]
    code = "; ".join(lines + [
        "import types",
        "assert isinstance(cutegen.search, types.ModuleType), cutegen.search",
        "assert cutegen.search.engine.search is cutegen.search.search",
        "assert callable(fn) and cutegen.find_kernels is fn and fn.__name__ == 'find_kernels'",
        "r = cutegen.find_kernels({'m': 256, 'n': 256, 'k': 256, 'dtype': 'bf16', 'layout': 'tn'}, top_k=1)",
        "print(len(r.ranked))"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_import_cutegen_does_not_import_the_search():
    # The GPU machine has no egglog: `import cutegen` must not need it.
    code = "import sys, cutegen; print('egglog' in sys.modules, 'cutegen.search' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_find_kernels_ranks_what_cutegen_search_prints(capsys):
    result = cutegen.find_kernels(PROBLEM, top_k=3)
    assert main(["search", "--m", "8192", "--n", "3072", "--k", "1024", "--top-k", "3", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert [r.config.to_dict() for r in result.ranked] == [r["config"] for r in cli["ranked"]]
    assert len(result.ranked) == 3
    assert result.ranked[0].cost <= result.ranked[1].cost <= result.ranked[2].cost


def test_find_kernels_takes_a_gemm_problem_as_well_as_a_dict():
    as_dict = cutegen.find_kernels(PROBLEM, top_k=1)
    as_obj = cutegen.find_kernels(cutegen.GemmProblem.from_dict(PROBLEM), top_k=1)
    assert as_dict.ranked[0].config == as_obj.ranked[0].config


@pytest.mark.parametrize("bad, field", [("8192x3072", "problem"), ({"m": 8, "n": 8}, "problem.k")])
def test_bad_problems_are_one_line_field_errors(bad, field):
    with pytest.raises(cutegen.FieldError) as e:
        cutegen.find_kernels(bad)
    assert e.value.field == field


@pytest.mark.parametrize("top_k", [0, 101])
def test_top_k_out_of_range_is_refused(top_k):
    with pytest.raises(cutegen.FieldError, match="top_k"):
        cutegen.find_kernels(PROBLEM, top_k=top_k)


def test_generate_without_build_writes_what_the_cli_writes_and_prints(tmp_path, capsys):
    api = cutegen.generate(PROBLEM, tmp_path / "api", build=False)
    assert api.build is None and api.library is None and api.ok
    assert api.source_file == tmp_path / "api" / "kernel.cu"
    assert main(["generate", "--m", "8192", "--n", "3072", "--k", "1024", "-o", str(tmp_path / "cli"),
                 "--no-build"]) == 0
    printed = capsys.readouterr().out.splitlines()
    for name in ("kernel.cu", "manifest.json"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    import re

    def same(lines, d):   # the folder and the search's wall time differ between the two runs
        return [re.sub(r"\d+\.\d+ s\)", "T s)", line.replace(str(tmp_path / d), "D")) for line in lines]
    assert same(api.lines(), "api") == same(printed, "cli")
    assert len(printed) >= 6 and printed[3].startswith("config   ")
    manifest = json.loads((tmp_path / "api" / "manifest.json").read_text())
    assert manifest["kernel_hash"] == api.kernel_hash
    assert api.config == cutegen.find_kernels(PROBLEM, top_k=3).ranked[0].config


def test_generate_says_when_nvcc_is_missing_instead_of_failing(tmp_path, monkeypatch):
    import cutegen.build
    monkeypatch.setattr(cutegen.build, "find_nvcc", lambda: None)
    said = []
    result = cutegen.generate(PROBLEM, tmp_path, build=True, say=said.append)
    assert result.library is None and result.build is None
    assert result.build_note.startswith("skipped: nvcc not found")
    assert result.lines()[-1].startswith("build    skipped: nvcc not found")
    assert said == result.lines()          # every line said once: the report, then the build's


def test_generate_renders_a_given_configuration_without_searching(tmp_path):
    config = {"tile_shape": [128, 128, 64], "cluster_shape": [1, 1, 1], "stages": "auto",
              "mainloop_schedule": "cooperative", "epilogue_schedule": "tma_warp_specialized_cooperative"}
    result = cutegen.generate(PROBLEM, tmp_path, config=config, build=False)
    assert result.config.tile_shape == (128, 128, 64)
    assert result.why == ["configuration given (no search)"]
    # An illegal configuration is refused naming its rule, and nothing is written.
    bad = dict(config, tile_shape=[64, 128, 64])   # cooperative needs 128 rows (two consumer warpgroups)
    with pytest.raises(cutegen.CutegenError) as e:
        cutegen.generate(PROBLEM, tmp_path / "bad", config=bad, build=False)
    assert "SM90-COOP-TILE-M" in str(e.value)
    assert not (tmp_path / "bad").exists()


def test_pack_writes_one_pack_per_target_and_check_then_finds_nothing_to_change(tmp_path):
    shapes = ROOT / "examples" / "pack" / "tiny.toml"
    written = cutegen.pack(shapes, tmp_path)
    pack = written["h100-sxm"]
    assert pack.directory == tmp_path / "h100-sxm"
    assert sorted(pack.changed) == sorted(pack.files)          # a fresh folder: every file written
    assert (pack.directory / "CMakeLists.txt").is_file()
    assert "3 kernels for 3 shapes" in pack.coverage
    assert cutegen.pack(shapes, tmp_path, check=True)["h100-sxm"].changed == []
    (pack.directory / "COVERAGE.md").write_text("edited\n")
    assert cutegen.pack(shapes, tmp_path, check=True)["h100-sxm"].changed == ["COVERAGE.md"]


def test_pack_refuses_an_unknown_target(tmp_path):
    with pytest.raises(cutegen.FieldError, match="target"):
        cutegen.pack(ROOT / "examples" / "pack" / "tiny.toml", tmp_path, targets=["h999"])


def test_plan_tuning_writes_the_plan_cutegen_tune_plan_only_writes(tmp_path):
    problem = {"m": 512, "n": 1024, "k": 512, "dtype": "bf16", "layout": "tn"}
    plan = cutegen.plan_tuning(problem, tmp_path / "api", top_k=2, nvmmh=False, device_kind=None)
    assert plan.single and len(plan.problems) == 1
    assert [c.origin for c in plan.problems[0].candidates][:2] == ["search", "search"]
    assert main(["tune", "--m", "512", "--n", "1024", "--k", "512", "--top-k", "2", "--no-nvmmh", "--plan-only",
                 "--workdir", str(tmp_path / "cli"), "--quiet"]) == 0
    assert (tmp_path / "api" / "plan.json").read_text() == (tmp_path / "cli" / "plan.json").read_text()


def test_tune_refuses_too_few_timed_iterations_before_touching_a_gpu(tmp_path):
    with pytest.raises(cutegen.FieldError, match="iters"):
        cutegen.tune(PROBLEM, tmp_path, iters=49)
