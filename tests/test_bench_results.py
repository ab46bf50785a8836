"""Benchmark arithmetic and the results file, from synthetic measurements (no GPU)."""
import copy
import datetime as dt
import json
import math

import pytest

from cutegen import GemmProblem
from cutegen.commands import bench as B

P1 = GemmProblem(8192, 8192, 8192)
P2 = GemmProblem(4096, 4096, 4096, layout_a="col", layout_b="row")
P3 = GemmProblem(4096, 4096, 4096, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16")


def measured(ms, iters=50):
    times = [ms] * (iters // 2) + [ms * 1.01] * (iters - iters // 2)
    return {"status": "ok", "times_ms": times, "median_ms": sorted(times)[iters // 2 - 1] / 2 + sorted(times)[iters // 2] / 2,
            "min_ms": min(times), "verify": {"ok": True, "rel_err": 3e-3, "tol": 1e-2}}


def entry(problem, ours, cublas, cutlass):
    res = {}
    for name, ms in (("cutegen", ours), ("cublas", cublas), ("cutlass_builder", cutlass)):
        res[name] = measured(ms) if ms else {"status": "missing", "reason": "no kernel directory"}
    return {"name": problem.name, "problem": problem.to_dict(), "flops": problem.flops, "input_sets": 4,
            "results": res}


def document(entries):
    return B.make_document(entries, {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 50 * 2**20},
                           dt.datetime(2026, 11, 22, 4, 30, tzinfo=dt.timezone.utc),
                           {"cutegen": "0.1.0", "nvcc": "13.0.88", "cutlass": "4.2.0", "torch": "2.11.0",
                            "torch_cuda": "13.0", "cublas": "13.1.0", "driver": "580.159.04", "driver_api": 13000,
                            "python": "3.12.3"},
                           warmup=10, iters=50, l2_multiple=4, suite="bench/suite.toml", seconds=12.3)


def test_tflops_ratios_and_fraction_of_peak():
    e = B.derive(entry(P1, 1.40, 1.40 * 1.05, 1.40 * 1.20))
    ours = e["results"]["cutegen"]["tflops"]
    assert ours == pytest.approx(P1.flops / (e["results"]["cutegen"]["median_ms"] * 1e-3) / 1e12)
    assert e["ratio_vs_cublas"] == pytest.approx(1.05, rel=1e-9)
    assert e["ratio_vs_cutlass"] == pytest.approx(1.20, rel=1e-9)
    assert e["fraction_of_peak"]["cutegen"] == pytest.approx(ours / 989.4)


def test_missing_contender_gives_no_ratio():
    e = B.derive(entry(P2, 0.2, 0.21, None))
    assert e["ratio_vs_cutlass"] is None and e["ratio_vs_cublas"] == pytest.approx(1.05, rel=1e-9)


def test_summary_geomeans_targets_and_groups():
    es = [B.derive(entry(P1, 1.0, 1.1, 1.2)), B.derive(entry(P2, 1.0, 0.8, 1.0)),
          B.derive(entry(P3, 1.0, 0.5, None))]
    s = B.summarize(es)
    r = [1.1, 0.8, 0.5]
    assert s["vs_cublas"]["geomean"] == pytest.approx(math.prod(r) ** (1 / 3))
    assert s["vs_cublas"]["n"] == 3 and s["vs_cutlass"]["n"] == 2
    assert s["vs_cutlass"]["geomean"] == pytest.approx(math.sqrt(1.2 * 1.0))
    assert s["below_target_vs_cublas"] == sorted([P2.name, P3.name])
    assert s["by_dtype"]["bf16"]["vs_cublas"]["geomean"] == pytest.approx(math.sqrt(1.1 * 0.8))
    assert s["by_dtype"]["e4m3"]["vs_cublas"]["n"] == 1
    assert s["not_measured"] == []


def test_document_passes_its_own_schema_check_and_survives_json():
    doc = json.loads(json.dumps(document([entry(P1, 1.0, 1.1, 1.2), entry(P3, 1.0, 0.9, None)])))
    assert B.check_result_doc(doc) == []
    assert doc["method"]["iters"] >= 50 and doc["peak_tflops"] == pytest.approx(989.4)
    assert doc["device"]["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("mutate,complaint", [
    (lambda d: d.pop("versions"), "doc.versions: missing"),
    (lambda d: d["versions"].pop("cublas"), "versions.cublas: missing"),
    (lambda d: d["method"].update(iters=20), "method.iters: 20 < 50"),
    (lambda d: d["problems"][0]["results"]["cutegen"].update(tflops=123.0), "tflops: 123.0 != flops / median"),
    (lambda d: d["problems"][0]["results"]["cublas"]["times_ms"].pop(), "49 values"),
    (lambda d: d["problems"][0]["results"]["cutegen"]["verify"].update(ok=False), "without a passing verification"),
    (lambda d: d["problems"][0]["results"].pop("cutlass_builder"), "results.cutlass_builder: missing"),
    (lambda d: d.update(schema="other/9"), "schema"),
])
def test_schema_check_catches_each_defect(mutate, complaint):
    doc = json.loads(json.dumps(document([entry(P1, 1.0, 1.1, 1.2)])))
    bad = copy.deepcopy(doc)
    mutate(bad)
    errs = B.check_result_doc(bad)
    assert any(complaint in e for e in errs), errs


def test_result_filename_is_dated_and_names_the_device():
    when = dt.datetime(2026, 11, 22, 4, 30)
    assert B.result_filename(when, "NVIDIA H100 80GB HBM3") == "2026-11-22-nvidia-h100-80gb-hbm3.json"
    assert B.result_filename(when, "") == "2026-11-22-unknown-device.json"


def test_table_lists_every_problem_and_the_geomean():
    doc = document([entry(P1, 1.0, 1.1, 1.2), entry(P3, 1.0, 0.9, None)])
    table = B.format_table(doc)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["problem", "cutegen", "cuBLAS", "CUTLASS"]
    assert any(line.startswith(P1.name) and "1.100" in line for line in lines)
    assert any(line.startswith(P3.name) and "missing" in line for line in lines)
    geo = next(line for line in lines if line.startswith("geomean"))
    assert f"{math.sqrt(1.1 * 0.9):.3f}" in geo
    assert "989.4" in table


def test_skipped_problem_has_every_contender_marked():
    e = B.skipped_entry("x", P1, "deadline")
    assert set(e["results"]) == set(B.CONTENDERS) and all(r["status"] == "skipped" for r in e["results"].values())
    doc = document([e])
    assert doc["summary"]["not_measured"] == ["x"] and B.check_result_doc(json.loads(json.dumps(doc))) == []


def test_find_kernel_matches_the_problem(tmp_path):
    from cutegen import KernelConfig
    d = tmp_path / P1.name
    d.mkdir()
    cfg = KernelConfig((128, 256, 64))
    (d / "manifest.json").write_text(json.dumps({"problem": P1.to_dict(), "config": cfg.to_dict()}))
    (d / "kernel.so").write_bytes(b"")
    info, why = B.find_kernel(tmp_path, P1)
    assert info is not None and why == "" and info.config == cfg
    info, why = B.find_kernel(tmp_path, P2)
    assert info is None and "no kernel directory" in why
    # a directory of the right name holding another problem's manifest is not used
    d2 = tmp_path / P2.name
    d2.mkdir()
    (d2 / "manifest.json").write_text(json.dumps({"problem": P1.to_dict(), "config": cfg.to_dict()}))
    (d2 / "kernel.so").write_bytes(b"")
    info, why = B.find_kernel(tmp_path, P2)
    assert info is None and "another problem" in why


def test_iters_below_50_are_refused():
    import argparse
    from cutegen import FieldError
    p = argparse.ArgumentParser()
    B.add_arguments(p)
    with pytest.raises(FieldError) as e:
        B.run(p.parse_args(["--iters", "49"]))
    assert e.value.field == "--iters"


def test_plot_writes_a_png(tmp_path):
    doc = document([entry(P1, 1.0, 1.1, 1.2), entry(P2, 0.2, 0.21, None), entry(P3, 1.0, 0.9, None)])
    out = B.plot_module().plot(doc, tmp_path / "p.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_libraries_that_hung_in_validation_are_not_timed(tmp_path):
    report = {"kernels": [{"library": str(tmp_path / "a.so"), "verdict": "hang"},
                          {"library": str(tmp_path / "b.so"), "verdict": "pass"},
                          {"library": str(tmp_path / "c.so"), "verdict": "crash"}]}
    (tmp_path / "v.json").write_text(json.dumps(report))
    failed = B.failed_in_validation(tmp_path / "v.json")
    assert failed == {str((tmp_path / "a.so").resolve()): "hang", str((tmp_path / "c.so").resolve()): "crash"}
    assert B.failed_in_validation(None) == {}
    from cutegen import FieldError
    with pytest.raises(FieldError):
        B.failed_in_validation(tmp_path / "missing.json")


def test_nvmmh_column_only_when_timed():
    plain = document([entry(P1, 1.0, 1.1, 1.2)])
    assert "nvMMH" not in B.format_table(plain) and "ratio_vs_nvmmh" not in plain["problems"][0]
    e1, e2 = entry(P1, 1.0, 1.1, 1.2), entry(P2, 1.0, 0.9, 1.0)
    e1["results"]["nvmmh"] = measured(1.08)
    e2["results"]["nvmmh"] = {"status": "missing", "reason": "no kernel directory"}
    doc = document([e1, e2])
    assert doc["problems"][0]["ratio_vs_nvmmh"] == pytest.approx(1.08, rel=1e-9)
    assert doc["problems"][1]["ratio_vs_nvmmh"] is None
    assert doc["summary"]["vs_nvmmh"] == {"geomean": pytest.approx(1.08, rel=1e-9), "n": 1}
    table = B.format_table(doc)
    assert "x nvMMH" in table and "missing" in table and "1.080" in table
    assert B.check_result_doc(doc) == []
