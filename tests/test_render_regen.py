"""cutegen regen and generate: the machinery (the search is replaced by a fixed choice here)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import cutegen._api as api
import cutegen.render as render_mod
from cutegen import GemmProblem, KernelConfig
from cutegen.cli import main
from cutegen.suites import load_suite
from cutegen.errors import FieldError

SUITE = """
[[problem]]
name = "square"
m = 4096
n = 4096
k = 4096
dtype = "bf16"
layout = "tn"

[[problem]]
name = "llm"
m = 2048
n = 3584
k = 3584
dtype = "f16"
layout = "nt"
"""

CHOICE = KernelConfig(tile_shape=(128, 128, 64), cluster_shape=(2, 1, 1), mainloop_schedule="cooperative",
                      epilogue_schedule="tma_warp_specialized_cooperative")


class _Passing:
    violations: list = []

    def to_dict(self):
        return {"legal": True, "violations": []}


@pytest.fixture
def env(tmp_path, monkeypatch):
    try:
        from cutegen.legality import check_config  # noqa: F401
    except ImportError:
        monkeypatch.setattr(render_mod, "check_legality", lambda p, c: _Passing())
    # The one place the search's choice is made (the API; generate and regen both call it).
    monkeypatch.setattr(api, "choose", lambda problem, backend="cutlass": (CHOICE, {"est_tflops": 700.0}, ["fixed"]))
    # The same toolchain on every machine, so that files compare.
    monkeypatch.setattr("cutegen.manifest.nvcc_version", lambda *a: "13.0")
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_load_suite_reads_names_and_problems(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SUITE)
    suite = load_suite(path)
    assert [n for n, _ in suite] == ["square", "llm"]
    assert suite[1][1].layout_a == "col" and suite[1][1].dtype_a == "f16" and suite[1][1].k == 3584


def test_load_suite_errors_name_the_entry(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[problem]]\nm = 1\nn = 2\nk = 3\ndtype = "int4"\n')
    with pytest.raises(FieldError, match=r"s.toml:problem\[0\].dtype"):
        load_suite(path)
    path.write_text("[[problem]\n")
    with pytest.raises(FieldError, match="not valid TOML"):
        load_suite(path)


def test_regen_writes_then_check_passes_then_detects_drift(env, capsys):
    assert main(["regen", "--suite", "suite.toml", "--out", "gen"]) == 0
    dirs = sorted(p.parent.relative_to(env / "gen") for p in (env / "gen").rglob("manifest.json"))
    assert [str(d) for d in dirs] == [
        "baseline/sm90a/bf16_tn_m4096n4096k4096_cbf16dbf16", "baseline/sm90a/f16_nt_m2048n3584k3584_cf16df16",
        "sm90a/bf16_tn_m4096n4096k4096_cbf16dbf16", "sm90a/f16_nt_m2048n3584k3584_cf16df16"]
    man = json.loads((env / "gen/sm90a/bf16_tn_m4096n4096k4096_cbf16dbf16/manifest.json").read_text())
    assert man["cost"] == {"est_tflops": 700.0} and man["backend"] == "cutlass"
    base = json.loads((env / "gen/baseline/sm90a/bf16_tn_m4096n4096k4096_cbf16dbf16/manifest.json").read_text())
    assert base["backend"] == "cutlass_builder" and base["config"]["tile_shape"] == [128, 256, 64]
    capsys.readouterr()

    assert main(["regen", "--check", "--suite", "suite.toml", "--out", "gen"]) == 0
    assert "no byte would change" in capsys.readouterr().out

    victim = env / "gen/sm90a/f16_nt_m2048n3584k3584_cf16df16/kernel.cu"
    victim.write_text(victim.read_text() + " ")
    assert main(["regen", "--check", "--suite", "suite.toml", "--out", "gen"]) == 1
    err = capsys.readouterr().err
    assert str(Path("gen/sm90a/f16_nt_m2048n3584k3584_cf16df16/kernel.cu")) in err
    assert "1 file(s) would change" in err
    assert victim.read_text().endswith(" ")  # --check writes nothing


def test_regen_check_reports_stale_kernels(env, capsys):
    assert main(["regen", "--suite", "suite.toml", "--out", "gen"]) == 0
    stale = env / "gen/sm90a/old_problem"
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    capsys.readouterr()
    assert main(["regen", "--check", "--suite", "suite.toml", "--out", "gen"]) == 1
    assert "stale" in capsys.readouterr().err


def test_regen_from_manifests_needs_no_search(env, monkeypatch, capsys):
    assert main(["regen", "--suite", "suite.toml", "--out", "gen"]) == 0
    monkeypatch.setattr(api, "choose", lambda problem, backend="cutlass": pytest.fail("searched"))
    assert main(["regen", "--check", "--from-manifests", "--suite", "suite.toml", "--out", "gen"]) == 0


def test_generate_writes_the_kernel_and_says_why(env, capsys):
    assert main(["generate", "--m", "1024", "--n", "2048", "--k", "512", "--dtype", "f16", "--layout", "nn",
                 "-o", "out", "--no-build"]) == 0
    out = capsys.readouterr().out
    assert "out/kernel.cu" in out and "why      fixed" in out
    man = json.loads((env / "out/manifest.json").read_text())
    assert man["problem"]["m"] == 1024 and man["problem"]["layout_a"] == "col"


def test_generate_with_no_arguments_is_the_default_problem(env, capsys):
    assert main(["generate", "--no-build"]) == 0
    assert (env / "generated/sm90a/bf16_tn_m4096n4096k4096_cbf16dbf16/kernel.cu").is_file()


def test_generate_rejects_partial_extents(env, capsys):
    assert main(["generate", "--m", "1024", "--no-build"]) == 2
    assert "--m/--n/--k" in capsys.readouterr().err


def test_regen_only_checks_one_problem_and_calls_nothing_else_stale(tmp_path, capsys):
    from cutegen.commands import regen
    suite = tmp_path / "suite.toml"
    suite.write_text('[[problem]]\nname = "a"\nm = 256\nn = 256\nk = 256\ndtype = "bf16"\nlayout = "tn"\n'
                     '[[problem]]\nname = "b"\nm = 512\nn = 512\nk = 512\ndtype = "bf16"\nlayout = "nt"\n')
    out = tmp_path / "gen"
    base = ["--suite", str(suite), "--out", str(out)]
    assert main(["regen", *base]) == 0
    assert main(["regen", "--check", "--only", "a", *base]) == 0
    assert "stale" not in capsys.readouterr().err
    (out / "sm90a" / "orphan").mkdir(parents=True)
    (out / "sm90a" / "orphan" / "manifest.json").write_text("{}")
    assert main(["regen", "--check", "--only", "a", *base]) == 1
    assert "orphan" in capsys.readouterr().err
    assert len(regen.select_suite(suite, ["b"])) == 1


def test_cp_async_baselines_stay_out_of_generated(tmp_path):
    # generated/ holds sanitizer-clean kernels only: the builder's cp.async default (SM90-CPASYNC-SYNCCHECK)
    # is rendered elsewhere (a bench plan) but not into the checked-in tree
    from pathlib import Path

    from cutegen.commands.regen import render_task
    repo = Path(__file__).resolve().parents[1]
    odd_k = GemmProblem.from_dict({"m": 2048, "n": 2048, "k": 2046})          # 4-byte rows: the builder can
    status, why = render_task(("baseline", odd_k, repo / "generated" / "x" / "baseline" / "sm90a" / "p", False))
    assert status == "illegal" and "SM90-CPASYNC-SYNCCHECK" in why
    status, kernel = render_task(("baseline", odd_k, tmp_path / "baseline" / "sm90a" / "p", False))
    assert status == "ok" and kernel.config.mainloop_load == "cp_async"
    aligned = GemmProblem.from_dict({"m": 2048, "n": 2048, "k": 2048})
    assert render_task(("baseline", aligned, repo / "generated" / "x" / "baseline" / "sm90a" / "p", False))[0] == "ok"
