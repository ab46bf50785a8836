"""The tuning curve from ranked measurements (cutegen.tuning.curve, bench/tuning_curve.py)."""
from __future__ import annotations

import pytest

from cutegen.config import KernelConfig
from cutegen.problem import GemmProblem
from cutegen.results import Measurement, ResultsDB
from cutegen.tuning.curve import curve, format_curve, runs, search_rank

P1 = GemmProblem(4096, 4096, 4096)
P2 = GemmProblem(128, 8192, 8192)
CFG = KernelConfig((128, 256, 64))


def m(problem, source, us, validated=True, kind="h100-sxm", cublas=100.0, method="cuda-events/median"):
    return Measurement(problem=problem, config=CFG, device_kind=kind, median_us=us, validated=validated,
                       source=source, cublas_us=cublas, timing_method=method, measured_at="2026-11-23")


def test_search_rank_reads_both_source_forms():
    assert search_rank("cutegen-tune 2026-11-23T23:00:00+00:00#p/search3") == 3
    assert search_rank("2026-11-22-calibration-h200.json#sq1024_bf16_tn/rank0") == 1
    assert search_rank("cutegen-tune x#p/nvmmh") is None and search_rank("bench.json#p/cutegen") is None


def test_curve_values():
    t = "cutegen-tune 2026-11-23T23:00:00+00:00#"
    ms = [m(P1, t + "a/search1", 120.0), m(P1, t + "a/search2", 100.0), m(P1, t + "a/search3", 90.0, validated=False),
          m(P1, t + "a/search4", 96.0), m(P1, t + "a/nvmmh", 50.0),
          m(P2, t + "b/search1", 40.0, cublas=50.0), m(P2, t + "b/search2", 44.0, cublas=50.0),
          m(P1, "cal.json#a/rank0", 200.0, kind="h200")]
    rs = runs(ms)
    assert [(r.device_kind, r.depth) for r in rs] == [("h100-sxm", 4), ("h100-sxm", 2), ("h200", 1)]
    c = curve(rs, ks=(1, 2, 4))
    h100 = {r["k"]: r for r in c["h100-sxm"]}
    # run a: best of 1 = 120, of 2 = 100, of 4 = 96 (search3 failed validation; nvmmh is not ranked); run b: 40
    assert h100[1]["runs"] == 2 and h100[1]["best_of_k_over_best"] == pytest.approx((120 / 96 * 1.0) ** 0.5)
    assert h100[2]["best_of_k_over_best"] == pytest.approx((100 / 96) ** 0.5)
    assert h100[4]["runs"] == 1 and h100[4]["best_of_k_over_best"] == pytest.approx(1.0)
    assert h100[1]["x_cublas"] == pytest.approx((100 / 120 * 50 / 40) ** 0.5)
    assert h100[1]["best_found"] == 1 and h100[2]["best_found"] == 1
    assert c["h200"][0]["runs"] == 1 and c["h200"][1]["runs"] == 0
    assert "no run measured this deep" in format_curve(c)


def test_a_gap_ends_a_run():
    t = "cutegen-tune x#a/search"
    [r] = runs([m(P1, t + "1", 120.0), m(P1, t + "2", 110.0), m(P1, t + "4", 50.0)])  # rank 3 never built
    assert r.depth == 2 and r.best() == 110.0
    c = curve([r], ks=(1, 2, 4))["h100-sxm"]
    assert c[0]["best_of_k_over_best"] == pytest.approx(120 / 110) and c[2]["runs"] == 0


def test_script_reads_the_database(tmp_path, capsys):
    import importlib.util
    from pathlib import Path
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    t = "cutegen-tune 2026-11-23T23:00:00+00:00#a/search"
    db.add_many([m(P1, t + "1", 120.0), m(P1, t + "2", 100.0)])
    db.close()
    spec = importlib.util.spec_from_file_location("tc", Path(__file__).parents[1] / "bench" / "tuning_curve.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--db", str(tmp_path / "r.sqlite"), "--no-seed", "--ks", "1,2", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    h100 = out.split("h100-sxm:")[1].split(":")[0]           # the seed's h200 runs follow, under their own kind
    assert "1     1            1.2000     0.833" in h100 and "2     1            1.0000     1.000" in h100
    import json
    assert json.loads((tmp_path / "c.json").read_text())["h100-sxm"][0]["best_of_k_over_best"] == pytest.approx(1.2)
