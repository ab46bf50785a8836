"""Bench extensions for small problems (no GPU): graph-timed ratios, the HBM floor, the table."""
import pytest

from cutegen import GemmProblem
from cutegen.commands import bench as B

from test_bench_results import document, entry

DECODE = GemmProblem(1, 8192, 8192)            # bf16 TN, C = bf16 with beta 0: A, B, D move
BIG = GemmProblem(8192, 8192, 8192)


def with_graph(e, ours_ms, cublas_ms):
    e["results"]["cutegen"]["graph_median_ms"] = ours_ms
    e["results"]["cublas"]["graph_median_ms"] = cublas_ms
    return e


def test_hbm_bytes_counts_a_b_d_and_c_only_with_beta():
    p = DECODE.to_dict()
    assert B.hbm_bytes(p) == (8192 + 8192 * 8192 + 8192) * 2
    assert B.hbm_bytes({**p, "beta": 1.0}) == (8192 + 8192 * 8192 + 2 * 8192) * 2
    assert B.hbm_bytes({**p, "beta": 1.0, "dtype_c": "void"}) == B.hbm_bytes(p)
    fp8 = GemmProblem(16, 4096, 4096, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16").to_dict()
    assert B.hbm_bytes(fp8) == 16 * 4096 + 4096 * 4096 + 16 * 4096 * 2


def test_device_bandwidth_table_is_most_specific_first():
    assert B.hbm_bandwidth("NVIDIA H100 80GB HBM3")[0] == 3.35e12
    assert B.hbm_bandwidth("NVIDIA H100 PCIe")[0] == 2.0e12
    assert B.hbm_bandwidth("NVIDIA H200")[0] == 4.8e12
    assert B.hbm_bandwidth("NVIDIA H20")[0] == 4.0e12
    assert B.hbm_bandwidth("NVIDIA A100-SXM4-80GB") == (None, None)


def test_floor_fraction_uses_graph_time_and_only_small_m():
    floor_ms = B.hbm_bytes(DECODE.to_dict()) / 3.35e12 * 1e3
    e = B.derive(with_graph(entry(DECODE, 0.060, 0.055, 0.080), 0.050, 0.045), hbm_bytes_per_s=3.35e12)
    assert e["hbm_floor_ms"] == pytest.approx(floor_ms)
    assert e["fraction_of_hbm_floor"]["cutegen"] == pytest.approx(floor_ms / 0.050)
    assert e["fraction_of_hbm_floor"]["cutlass_builder"] == pytest.approx(floor_ms / e["results"]["cutlass_builder"]["median_ms"])
    assert e["ratio_vs_cublas_graph"] == pytest.approx(0.045 / 0.050)
    big = B.derive(entry(BIG, 1.0, 1.0, 1.0), hbm_bytes_per_s=3.35e12)
    assert "fraction_of_hbm_floor" not in big and big["ratio_vs_cublas_graph"] is None
    unknown = B.derive(entry(DECODE, 0.06, 0.05, 0.08), hbm_bytes_per_s=None)
    assert "fraction_of_hbm_floor" not in unknown


def test_document_summary_and_table_carry_the_graph_figures():
    es = [with_graph(entry(DECODE, 0.060, 0.055, 0.080), 0.050, 0.040), entry(BIG, 1.0, 1.1, 1.2)]
    doc = document(es)
    assert B.check_result_doc(doc) == []
    assert doc["hbm_bytes_per_s"] == 3.35e12 and "H100" in doc["hbm_label"]
    s = doc["summary"]
    assert s["vs_cublas_graph"]["n"] == 1 and s["vs_cublas_graph"]["geomean"] == pytest.approx(0.8)
    assert s["small_m_vs_cublas_graph"]["n"] == 1
    table = B.format_table(doc)
    assert "x cuBLAS graph" in table and "% HBM floor" in table
    assert "M <= 16: graph-timed geomean x cuBLAS 0.800 over 1" in table


def test_graph_timing_is_not_attempted_on_the_cpu_dry_run(monkeypatch):
    from cutegen import _runner_worker as W
    monkeypatch.setattr(W, "DEVICE", "cpu")
    calls = []
    assert W.time_graph(lambda i: calls.append(i), 4, 50) == {"graph_status": "no_gpu"}
    assert calls == []
    class Set:
        def reset_d(self):
            calls.append("reset")

    res = {"status": "ok", "median_ms": 0.01}
    W._maybe_graph(res, lambda i: None, [Set()], None, None, 4, 50)
    assert calls == []
    assert res["graph_status"] == "no_gpu"
    slow = {"status": "ok", "median_ms": 0.2}        # over 50 us: no graph time is taken
    W._maybe_graph(slow, lambda i: None, [Set()], None, None, 4, 50)
    assert "graph_status" not in slow
