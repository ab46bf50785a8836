"""The vendor tactic of a pack (issue 22 part 3; cutegen/packs/vendor.py): where, measured, no generated kernel
comes within the tolerance of cuBLAS, the pack routes the segment to cuBLASLt through the same plan API.

CPU only, seconds: the dispatcher is freshly rendered and compiled with g++ against stub kernels (as in
tests/test_pack.py), and the vendor's own C++ (templates/pack_vendor_cublaslt.cpp.j2, freshly rendered) runs
against a CPU stand-in of the cuBLASLt calls it makes, written from cublasLt.h's contract, on host buffers.
The real cuBLASLt compile and link is tests/test_pack_compile.py; the GPU check bench/gpu_vendor.sh."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cutegen.config import KernelConfig
from cutegen.packs import render, select, shapes, targets, vendor
from cutegen.problem import GemmProblem

from test_pack import DISPATCH_KERNELS, DISPATCH_SHAPES, _dispatcher, _write

REPO = Path(__file__).resolve().parent.parent
VENDOR = 4          # 4 generated kernels, one class: the vendor's entry is kernel 4 + 0


def _given(tmp_path):
    configs = [KernelConfig.from_dict(json.loads((REPO / d / "manifest.json").read_text())["config"])
               for d in DISPATCH_KERNELS]
    t = targets.target("h100-sxm")
    pts = shapes.expand(shapes.load(_write(tmp_path, DISPATCH_SHAPES)), t.sms)
    return lambda: select.given(pts, t, configs)


def _measured_pack(tmp_path, matmul_512=49.0, vendor_on=True, name="p", vendor_algorithms=None):
    """A fresh pack of the four DISPATCH_KERNELS with a synthetic measured file for N = K = 4096 (the numbers the
    docstring of the test below works through) and none for N = 6144."""
    make = _given(tmp_path)
    names = [k["name"] for k in json.loads(render.pack_files(make(), {}, name, "d.toml")["pack.json"])["kernels"]]
    times = {16: ([50, 10, 14, 40], 10.0), 128: ([90, 30, 20, 25], 15.0), 512: ([400, 120, 60, 50], matmul_512),
             2048: ([900, 400, 200, 150], 100.0)}
    res = {"pack": name, "time": [{"m": m, "n": 4096, "k": 4096, "matmul_us": mm, "per_kernel_us": dict(zip(names, ts))}
                                  for m, (ts, mm) in times.items()]}
    results = tmp_path / f"results-{matmul_512}.json"
    results.write_text(json.dumps(res))
    sel = make()
    points = render.apply_measured(sel, str(results), name)
    return render.pack_files(sel, {}, name, "d.toml", measured=points, vendor_on=vendor_on,
                             vendor_algorithms=vendor_algorithms), names


def test_measured_segments_where_no_kernel_comes_within_the_tolerance_go_to_cublaslt(tmp_path):
    """N = K = 4096 measured at M = 16, 128, 512, 2048 (kernel times k00..k03; torch.matmul, i.e. cuBLAS; tolerance 3%):
      M=16:   k01 10 us, cuBLAS 10 -> k01 (cuBLASLt is offered at 10 * 1.03 = 10.3)
      M=128:  best k02 20 us, cuBLAS 15 (15.45 offered) -> cuBLASLt
      M=512:  best k03 50 us, cuBLAS 49 (50.47 offered: k03 is 2.0% slower, inside the tolerance) -> k03
      M=2048: best k03 150 us, cuBLAS 100 (103) -> cuBLASLt
    Boundaries where the curves cross, linear in log2 M: k01 10 -> 30 vs cuBLASLt 10.3 -> 15.45 at
    2^(4 + 3 * 0.3/14.85) = 16.7 (M 16 k01, 17 cuBLASLt); cuBLASLt 15.45 -> 50.47 vs k03 25 -> 50 at
    2^(7 + 2 * 9.55/10.02) = 479.7 (479 cuBLASLt, 480 k03); k03 50 -> 150 vs cuBLASLt 50.47 -> 103 at
    2^(9 + 2 * 0.47/47.47) = 519.1 (519 k03, 520 cuBLASLt). N = 6144 has no measurement: no vendor there,
    whatever the kernels' predictions."""
    files, names = _measured_pack(tmp_path)
    query = _dispatcher(tmp_path, files)
    ms = [17, 100, 479, 480, 500, 519, 520, 5000, 2**31 - 1]
    got = query([(m, 4096, 4096, 0) for m in ms] + [(m, 6144, 4096, 0) for m in (100, 3000, 100000)])
    assert [g[0] for g in got[:len(ms)]] == [VENDOR, VENDOR, VENDOR, 3, 3, 3, VENDOR, VENDOR, VENDOR]
    assert all(g[0] < VENDOR for g in got[len(ms):]), got[len(ms):]
    assert got[0][1].startswith("vendor_cublaslt_c0: measured segment: N=4096 K=4096, M in [17, 479]")
    assert "no generated kernel of the pack came within 3.0% of cuBLAS" in got[0][1]
    assert got[6][1].startswith("vendor_cublaslt_c0: measured segment: N=4096 K=4096, M in [520, 2^31-1]")
    # the measured set shapes: M = 16 keeps k01, M = 128 and 2048 are cuBLASLt's (their exact-table entries)
    exact = query([(16, 4096, 4096, 0), (128, 4096, 4096, 0), (2048, 4096, 4096, 0)])
    assert [e[0] for e in exact] == [1, VENDOR, VENDOR]
    assert exact[1][1] == ("vendor_cublaslt_c0: exact shape o m128n4096k4096 of the pack's set: measured: no generated "
                           "kernel within 3.0% of cuBLAS (best 20.0 us, torch.matmul 15.0 us): cuBLASLt (vendor); stub")
    # (the vendor's own note follows: which of cuBLASLt's algorithms, and why; the stub's word here)
    # the pack links cuBLASLt, says so, and reports both figures
    assert "src/vendor_cublaslt.cpp" in files and "cmake/cutegen_cublaslt.cmake" in files
    assert "target_link_libraries(p PUBLIC CUDA::cublasLt)" in files["CMakeLists.txt"]
    assert "src/vendor_cublaslt.cpp" in files["CMakeLists.txt"]
    assert "cutegen_cublaslt.cmake" in files["cmake/pConfig.cmake.in"]
    assert '#define CUTEGEN_PACK_VENDOR "cuBLASLt"' in files["include/cutegen_pack.h"]
    meta = json.loads(files["pack.json"])
    assert [(g["m_first"], g["m_last"]) for g in meta["vendor"]["segments"]] == [(17, 479), (520, 2**31 - 1)]
    assert [(e["m"], e["n"]) for e in meta["vendor"]["exact_shapes"]] == [(128, 4096), (2048, 4096)]
    assert meta["vendor"]["entries"] == [{"name": "vendor_cublaslt_c0", "class": 0, "unsupported": None}]
    fig = meta["measured_figures"]
    # as shipped: 10/10, 15/15, 49/50, 100/100; generated alone: 10/10, 15/20, 49/50, 100/150
    assert (fig["points"], fig["vendor_points"]) == (4, 2)
    assert fig["as_shipped"]["geomean"] == pytest.approx((1 * 1 * 0.98 * 1) ** 0.25, abs=1e-4)
    assert fig["generated_only"]["geomean"] == pytest.approx((1 * 0.75 * 0.98 * (100 / 150)) ** 0.25, abs=1e-4)
    assert (fig["as_shipped"]["under_0.97"], fig["generated_only"]["under_0.9"]) == (0, 2)
    cov = files["COVERAGE.md"]
    assert "| 0 | 4096 | 4096 | 17 | 479 | vendor_cublaslt_c0 |" in cov and "| 0 | 4096 | 4096 | 520 | 2^31-1 |" in cov
    assert "- the pack as shipped: geomean 0.995x" in cov and "- its generated kernels alone: geomean 0.837x" in cov
    assert "| o m128n4096k4096 | 0.2 | vendor_cublaslt_c0 | 15.00 | measured |" in cov


def test_the_tolerance_boundary_decides_between_a_kernel_and_cublaslt(tmp_path):
    """At M = 512 the best kernel takes 50 us: with cuBLAS at 49 us it is 2.04% slower (inside 3%) and keeps the
    M; at 48.5 us it is 3.09% slower and cuBLASLt takes it (the segment then runs from 17 to 2^31-1)."""
    inside, _ = _measured_pack(tmp_path, matmul_512=49.0)
    outside, _ = _measured_pack(tmp_path, matmul_512=48.5)
    seg = lambda f: [(g["m_first"], g["m_last"]) for g in json.loads(f["pack.json"])["vendor"]["segments"]]  # noqa: E731
    assert seg(inside) == [(17, 479), (520, 2**31 - 1)]
    assert seg(outside) == [(17, 2**31 - 1)]


def test_no_vendor_and_no_measurement_route_nothing_to_cublaslt(tmp_path):
    """--no-vendor with the same measurements: every M goes to a generated kernel, no cuBLASLt source or link,
    the kernel table is the generated kernels'; and a pack made without measurements (prediction alone) has no
    vendor either, whatever it predicts."""
    files, names = _measured_pack(tmp_path, vendor_on=False)
    # the generated winners' crossings alone: k01 10 -> 30 vs k02 14 -> 20 at 2^(4 + 3 * 4/14) = 28.97; k02 20 -> 60
    # vs k03 25 -> 50 at 2^(7 + 2 * 5/15) = 203.2
    got = _dispatcher(tmp_path, files)([(m, 4096, 4096, 0) for m in (16, 28, 29, 203, 204, 2048, 5000)])
    assert [g[0] for g in got] == [1, 1, 2, 2, 3, 3, 3]
    assert all(not g[1].startswith("vendor_") for g in got)
    for f in (files, render.pack_files(_given(tmp_path)(), {}, "p", "d.toml")):
        assert not any("cublaslt" in p for p in f) and "cublasLt" not in f["CMakeLists.txt"]
        assert "kKernels[4]" in f["src/dispatch.cpp"] and "vendor" not in json.loads(f["pack.json"])
    assert json.loads(files["pack.json"])["measured_figures"]["vendor_points"] == 0


def test_no_vendor_flag_of_the_command(tmp_path, capsys):
    """`cutegen pack --measured R` routes to cuBLASLt where R says no kernel is within the tolerance of cuBLAS;
    with --no-vendor it does not (the tiny pack of tests/test_pack.py: one kernel, torch.matmul at half its time)."""
    from cutegen.cli import main
    from test_pack import TINY
    f = _write(tmp_path, TINY)
    out = tmp_path / "out"
    assert main(["pack", f, "-o", str(out), "--target", "h100-sxm", "--max-kernels", "1", "--prior"]) == 0
    meta = json.loads((out / "h100-sxm" / "pack.json").read_text())
    kernel = meta["kernels"][0]["name"]
    res = tmp_path / "r.json"
    res.write_text(json.dumps({"pack": "cutegen_pack", "time": [
        {"m": m, "n": 4096, "k": 4096, "matmul_us": 10.0, "per_kernel_us": {kernel: 20.0}} for m in (1, 16, 128)]}))
    for flags, routed in (([], True), (["--no-vendor"], False)):
        assert main(["pack", f, "-o", str(out), "--target", "h100-sxm", "--max-kernels", "1", "--prior",
                     "--measured", str(res), *flags]) == 0
        pack = out / "h100-sxm"
        assert (pack / "src" / "vendor_cublaslt.cpp").is_file() == routed
        rows = json.loads((pack / "pack.json").read_text())["coverage"]["rows"]
        assert [r["kernel"] == "vendor_cublaslt_c0" for r in rows] == [routed] * 3
    capsys.readouterr()


@pytest.mark.parametrize("fields,rule", [
    ({}, None),
    ({"bias": True}, "VENDOR-EPILOGUE"),
    ({"activation": "relu"}, "VENDOR-EPILOGUE"),
    ({"dtype_c": "void"}, None),
    ({"dtype_c": "f32"}, "VENDOR-TYPES"),                              # C f32, D bf16
    ({"dtype_c": "f32", "dtype_d": "f32"}, None),
    ({"dtype_c": "f16", "dtype_d": "f16"}, "VENDOR-TYPES"),            # bf16 in, f16 out
    ({"dtype_a": "f16", "dtype_b": "f16", "dtype_c": "f16", "dtype_d": "f16"}, None),
    ({"dtype_b": "f16"}, "VENDOR-TYPES"),
    ({"dtype_a": "tf32", "dtype_b": "tf32", "dtype_c": "f32", "dtype_d": "f32"}, None),
    ({"dtype_a": "tf32", "dtype_b": "tf32"}, "VENDOR-TYPES"),          # tf32 in, bf16 out
    ({"dtype_a": "e4m3", "dtype_b": "e5m2"}, None),
    ({"dtype_a": "e5m2", "dtype_b": "e5m2"}, "VENDOR-TYPES"),
    ({"dtype_a": "e4m3", "dtype_b": "e4m3"}, None),
    ({"dtype_a": "e4m3", "dtype_b": "e4m3", "layout_b": "row"}, "VENDOR-FP8-LAYOUT"),
    ({"dtype_a": "e4m3", "dtype_b": "e4m3", "layout_a": "col"}, "VENDOR-FP8-LAYOUT"),
    ({"layout_a": "col", "layout_b": "row", "layout_c": "col"}, None),  # 16-bit: any layout
])
def test_which_classes_the_vendor_computes(fields, rule):
    """Each rule on both sides (bf16 TN, C and D bf16, no epilogue, unless the case says otherwise)."""
    p = GemmProblem(m=64, n=64, k=64, **{"dtype_a": "bf16", "dtype_b": "bf16", "dtype_c": "bf16", "dtype_d": "bf16",
                                         **fields})
    why = vendor.unsupported(p)
    assert (why is None) if rule is None else why.startswith(rule + ": "), why


def test_a_class_the_vendor_cannot_compute_is_never_routed_to_it(tmp_path):
    """Measurements where cuBLAS takes half the time of every kernel, on a class with a per-row bias
    (VENDOR-EPILOGUE): every shape and every M stays on a generated kernel, and nothing links cuBLASLt."""
    configs = [KernelConfig.from_dict(json.loads((REPO / d / "manifest.json").read_text())["config"])
               for d in DISPATCH_KERNELS]
    configs = [c for c in configs if not c.swap_ab]          # a swap-AB kernel has no per-row bias epilogue
    assert len(configs) == 2
    t = targets.target("h100-sxm")
    pts = shapes.expand(shapes.load(_write(tmp_path, DISPATCH_SHAPES.replace('layout="tn"', 'layout="tn"\nbias=true'))),
                        t.sms)
    assert all(s.problem.bias for s in pts)
    names = [k["name"] for k in json.loads(render.pack_files(select.given(pts, t, configs), {}, "p", "d.toml")
                                           ["pack.json"])["kernels"]]
    res = tmp_path / "r.json"
    res.write_text(json.dumps({"pack": "p", "time": [
        {"m": m, "n": 4096, "k": 4096, "matmul_us": 10.0, "per_kernel_us": {n: 20.0 + i for i, n in enumerate(names)}}
        for m in (16, 128, 2048)]}))
    sel = select.given(pts, t, configs)
    files = render.pack_files(sel, {}, "p", "d.toml", measured=render.apply_measured(sel, str(res), "p"))
    assert "src/vendor_cublaslt.cpp" not in files and "vendor" not in json.loads(files["pack.json"])
    got = _dispatcher(tmp_path, files)([(m, 4096, 4096, 0) for m in (16, 128, 500, 2048, 9000)])
    assert [g[0] for g in got] == [0] * 5          # k00, the fastest measured kernel, everywhere
    fig = json.loads(files["pack.json"])["measured_figures"]
    assert fig["vendor_points"] == 0 and fig["as_shipped"] == fig["generated_only"]


# ---- the vendor's C++ against a CPU stand-in of cuBLASLt -------------------------------------------------------

# Written from cublasLt.h's documented contract, not from the code under test: a matrix layout is column-major
# (element (i, j) of a rows x cols layout at j * ld + i, ld >= rows; batch b at b * STRIDED_BATCH_OFFSET), and
# cublasLtMatmul computes D = alpha * op(A) op(B) + beta * C, op per TRANSA/TRANSB, op(A) m x k, op(B) k x n, C and D
# m x n (anything else is CUBLAS_STATUS_INVALID_VALUE). Types: CUDA_R_32F and CUDA_R_16BF. The heuristic's
# algorithm records the alignment it was asked for (and wants 64 bytes of workspace per byte of it); K = 13 has no
# algorithm and M = 11 fails in cublasLtMatmul, to reach those status codes.
MOCK = r"""
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
struct Layout { cudaDataType type; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; };
struct Desc { cublasOperation_t ta, tb; };
struct Pref { uint32_t align; };
uint32_t g_align_used = 0;
uint64_t g_index_used = 0;
static Layout* L(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l->data); }
static float get(const void* p, cudaDataType t, int64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  uint32_t bits = uint32_t(static_cast<const uint16_t*>(p)[i]) << 16; float f; std::memcpy(&f, &bits, 4); return f;
}
static void put(void* p, cudaDataType t, int64_t i, float v) {
  if (t == CUDA_R_32F) { static_cast<float*>(p)[i] = v; return; }
  uint32_t bits; std::memcpy(&bits, &v, 4); bits += 0x7fff + ((bits >> 16) & 1); static_cast<uint16_t*>(p)[i] = uint16_t(bits >> 16);
}
extern "C" {
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  const char* n = std::getenv("MOCK_DEVICE"); std::memset(p, 0, sizeof(*p)); std::strncpy(p->name, n ? n : "Mock GPU", 255);
  return cudaSuccess;
}
size_t cublasLtGetVersion(void) { const char* v = std::getenv("MOCK_VERSION"); return v ? std::strtoull(v, nullptr, 10) : 130002; }
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* a, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
    size_t n, size_t* written) {
  // as cublasLt.h documents it: buf NULL and size 0 ask for the attribute's size; another size than its own is refused
  if (attr != CUBLASLT_ALGO_CONFIG_ID) return CUBLAS_STATUS_INVALID_VALUE;
  if (buf == nullptr && n == 0) { *written = 4; return CUBLAS_STATUS_SUCCESS; }
  if (n != 4) return CUBLAS_STATUS_INVALID_VALUE;
  const int32_t id = int32_t(100 + a->data[1]); std::memcpy(buf, &id, 4); *written = 4; return CUBLAS_STATUS_SUCCESS;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "mock"; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { static int x; *h = reinterpret_cast<cublasLtHandle_t>(&x); return CUBLAS_STATUS_SUCCESS; }
const char* cublasLtGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_MOCK"; }
const char* cublasLtGetStatusString(cublasStatus_t) { return "mock"; }
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < int64_t(rows) || (t != CUDA_R_32F && t != CUDA_R_16BF)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t{}; *L(*l) = Layout{t, rows, cols, ld, 1, 0}; return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void* v, size_t n) {
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == 4) { std::memcpy(&L(l)->batch, v, 4); return CUBLAS_STATUS_SUCCESS; }
  if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == 8) { std::memcpy(&L(l)->stride, v, 8); return CUBLAS_STATUS_SUCCESS; }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t c, cudaDataType_t s) {
  if (s != CUDA_R_32F || (c != CUBLAS_COMPUTE_32F && c != CUBLAS_COMPUTE_32F_FAST_TF32)) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtMatmulDescOpaque_t{}; return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
  Desc* D = reinterpret_cast<Desc*>(d->data);
  if (a == CUBLASLT_MATMUL_DESC_TRANSA && n == sizeof(cublasOperation_t)) { std::memcpy(&D->ta, v, n); return CUBLAS_STATUS_SUCCESS; }
  if (a == CUBLASLT_MATMUL_DESC_TRANSB && n == sizeof(cublasOperation_t)) { std::memcpy(&D->tb, v, n); return CUBLAS_STATUS_SUCCESS; }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new cublasLtMatmulPreferenceOpaque_t{}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void* v, size_t n) {
  if (a == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && n == 4) std::memcpy(p->data, v, 4);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t p, int requested, cublasLtMatmulHeuristicResult_t* r,
    int* found) {
  *found = 0;
  if (L(a)->rows == 13 || L(a)->cols == 13 || L(b)->rows == 13 || L(b)->cols == 13) return CUBLAS_STATUS_SUCCESS;  // K = 13 (and any 13)
  uint32_t align; std::memcpy(&align, p->data, 4);
  // MOCK_ALGOS algorithms (default 1), at most as many as requested; algorithm i records its place in data[1]
  const char* e = std::getenv("MOCK_ALGOS");
  const int have = e ? std::atoi(e) : 1;
  for (int i = 0; i < have && i < requested; ++i) {
    r[i] = cublasLtMatmulHeuristicResult_t{}; r[i].algo.data[0] = align; r[i].algo.data[1] = uint64_t(i);
    r[i].workspaceSize = 64u * align; r[i].state = CUBLAS_STATUS_SUCCESS; *found = i + 1;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* A, cublasLtMatrixLayout_t ad,
    const void* B, cublasLtMatrixLayout_t bd, const void* beta, const void* C, cublasLtMatrixLayout_t cd, void* Dp,
    cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t* algo, void*, size_t ws, cudaStream_t) {
  const Desc* o = reinterpret_cast<const Desc*>(d->data);
  const Layout a = *L(ad), b = *L(bd), c = *L(cd), D = *L(dd);
  const bool ta = o->ta == CUBLAS_OP_T, tb = o->tb == CUBLAS_OP_T;
  const uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols, kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || D.rows != m || D.cols != n || c.rows != m || c.cols != n || a.batch != D.batch || b.batch != D.batch ||
      c.batch != D.batch || ws < 64u * algo->data[0]) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 11 || n == 11) return CUBLAS_STATUS_EXECUTION_FAILED;
  g_align_used = uint32_t(algo->data[0]);
  g_index_used = algo->data[1];
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  for (int32_t q = 0; q < D.batch; ++q)
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (uint64_t l = 0; l < k; ++l) {
          const int64_t ia = q * a.stride + (ta ? int64_t(i) * a.ld + l : int64_t(l) * a.ld + i);
          const int64_t ib = q * b.stride + (tb ? int64_t(l) * b.ld + j : int64_t(j) * b.ld + l);
          acc += double(get(A, a.type, ia)) * get(B, b.type, ib);
        }
        const float cv = be != 0.0f ? get(C, c.type, q * c.stride + int64_t(j) * c.ld + i) : 0.0f;
        put(Dp, D.type, q * D.stride + int64_t(j) * D.ld + i, al * float(acc) + be * cv);
      }
  return CUBLAS_STATUS_SUCCESS;
}
}
"""

# The oracle: cutegen's storage of A (M x K), B (K x N), C/D (M x N) by the class's majors (cutegen/problem.py),
# computed here from that definition, against what the vendor plan writes through the stand-in.
HARNESS = r"""
#include "cutegen_pack.h"
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
namespace cutegen_pack_vendor {
int plan_create(int, const cutegen_pack_shape*, void**); size_t plan_workspace(const void*); void plan_destroy(void*);
int plan_run(void*, const void*, const void*, const void*, void*, const void*, void*, size_t, cudaStream_t); const char* plan_error();
}
extern uint32_t g_align_used;
using namespace cutegen_pack_vendor;
static float val(uint64_t i) { return float(int(((i * 2654435761u) >> 7) % 5) - 2); }   // -2..2: exact in bf16 sums
static uint16_t bf(float v) { uint32_t b; std::memcpy(&b, &v, 4); return uint16_t(b >> 16); }
static float unbf(uint16_t h) { uint32_t b = uint32_t(h) << 16; float f; std::memcpy(&f, &b, 4); return f; }
int main() {
  int cls, ak, bk, cn, bf16, pad, misalign, null_a, ws_less; long long M, N, K, batch; float alpha, beta;
  while (std::scanf("%d %d %d %d %d %lld %lld %lld %lld %d %f %f %d %d %d", &cls, &ak, &bk, &cn, &bf16, &M, &N, &K, &batch,
                    &pad, &alpha, &beta, &misalign, &null_a, &ws_less) == 15) {
    cutegen_pack_shape s{};
    s.M = M; s.N = N; s.K = K; s.batch = batch; s.alpha = alpha; s.beta = beta;
    s.lda = (ak ? K : M) + pad; s.ldb = (bk ? K : N) + pad; s.ldc = s.ldd = (cn ? N : M) + pad;
    s.batch_stride_a = s.lda * (ak ? M : K) + 3 * pad; s.batch_stride_b = s.ldb * (bk ? N : K) + 3 * pad;
    s.batch_stride_c = s.batch_stride_d = s.ldd * (cn ? M : N) + 3 * pad;
    void* plan = nullptr;
    int st = plan_create(cls, &s, &plan);
    if (st != 0) { std::printf("%d|0|0|0|%s\n", st, plan_error()); continue; }
    const int es = bf16 ? 2 : 4;
    auto alloc = [&](int64_t n) { return static_cast<char*>(std::aligned_alloc(256, size_t(n * es + 512))); };
    const int64_t na = batch * s.batch_stride_a, nb = batch * s.batch_stride_b, nd = batch * s.batch_stride_d;
    char *A = alloc(na), *B = alloc(nb), *C = alloc(nd), *D = alloc(nd);
    const int off = misalign;                         // bytes added to every pointer
    auto set = [&](char* p, int64_t n, uint64_t seed) {
      for (int64_t i = 0; i < n; ++i) {
        if (bf16) reinterpret_cast<uint16_t*>(p + off)[i] = bf(val(i + seed)); else reinterpret_cast<float*>(p + off)[i] = val(i + seed);
      }
    };
    set(A, na, 1); set(B, nb, 777); set(C, nd, 4242); set(D, nd, 99);
    auto at = [&](char* p, int64_t i) { return bf16 ? unbf(reinterpret_cast<uint16_t*>(p + off)[i]) : reinterpret_cast<float*>(p + off)[i]; };
    std::vector<float> ref(static_cast<size_t>(nd));
    for (int64_t i = 0; i < nd; ++i) ref[size_t(i)] = at(D, i);   // untouched padding stays as it was
    for (long long q = 0; q < batch; ++q)
      for (long long m = 0; m < M; ++m)
        for (long long n = 0; n < N; ++n) {
          double acc = 0;
          for (long long k = 0; k < K; ++k) {
            acc += double(at(A, q * s.batch_stride_a + (ak ? m * s.lda + k : k * s.lda + m))) *
                   at(B, q * s.batch_stride_b + (bk ? n * s.ldb + k : k * s.ldb + n));
          }
          const int64_t id = q * s.batch_stride_d + (cn ? m * s.ldd + n : n * s.ldd + m);
          ref[size_t(id)] = alpha * float(acc) + (beta != 0.0f ? beta * at(C, id) : 0.0f);
        }
    const size_t ws_need = plan_workspace(plan);
    std::vector<char> ws(ws_need + 1);
    g_align_used = 0;
    st = plan_run(plan, null_a ? nullptr : A + off, B + off, beta != 0.0f ? C + off : nullptr, D + off, nullptr,
                  ws.data(), ws_need - size_t(ws_less), nullptr);
    double err = 0;
    for (int64_t i = 0; i < nd && st == 0; ++i) err = std::fmax(err, std::fabs(double(at(D, i)) - ref[size_t(i)]));
    std::printf("%d|%g|%zu|%u|%s\n", st, err, ws_need, g_align_used, st ? plan_error() : "");
    plan_destroy(plan);
    std::free(A); std::free(B); std::free(C); std::free(D);
  }
}
"""


def _cublaslt_include() -> Path:
    """cublasLt.h of the nvidia-cublas wheel (the test extra)."""
    import nvidia.cu13
    found = [Path(p) / "include" for p in nvidia.cu13.__path__ if (Path(p) / "include" / "cublasLt.h").is_file()]
    assert found, "cublasLt.h: the nvidia-cublas wheel of the test extra is not installed"
    return found[0]


# classes of the rendered vendor source: every layout of tf32 (f32 data), bf16 both ways of D, a bias class
# (VENDOR-EPILOGUE) and a void-C class
CLASSES = [dict(dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32", layout_a=la, layout_b=lb, layout_c=lc)
           for la in ("row", "col") for lb in ("row", "col") for lc in ("row", "col")]
CLASSES += [dict(layout_c="row"), dict(layout_a="col", layout_b="row", layout_c="col"), dict(bias=True),
            dict(dtype_c="void")]


@pytest.fixture(scope="module")
def vendor_plan(tmp_path_factory):
    """The freshly rendered vendor source, built with g++ against the stand-in: ``run(cases) -> [(status,
    max |error|, workspace, alignment the algorithm assumed, message)]``."""
    from cutegen import render as render_mod
    from cutegen.build import find_nvcc
    d = tmp_path_factory.mktemp("vendor")
    problems = [GemmProblem(m=64, n=64, k=64, **{"dtype_a": "bf16", "dtype_b": "bf16", "dtype_c": "bf16",
                                                 "dtype_d": "bf16", **c}) for c in CLASSES]
    from cutegen.packs.dispatch import class_context, Fallback
    rows = []
    for p in problems:
        cc = class_context(p, [-1] * 31, Fallback(None, None, ""))
        rows.append({**vendor.context(p), "a_k": cc["a_k"], "b_k": cc["b_k"], "c_n": cc["c_n"]})
    env = render_mod._environment()
    (d / "include").mkdir()
    (d / "include" / "cutegen_pack.h").write_text(env.get_template("pack_header.h.j2").render(
        pack_name="p", target="h200", kernels=[], classes=[], vendor=False, generated=[]))
    (d / "vendor.cpp").write_text(env.get_template("pack_vendor_cublaslt.cpp.j2").render(
        pack_name="p", target="h200", vendor_classes=rows))
    (d / "mock.cpp").write_text(MOCK)
    (d / "main.cpp").write_text(HARNESS)
    cuda_inc = Path(find_nvcc()).resolve().parent.parent / "include"
    if not (cuda_inc / "cuda_runtime.h").is_file():
        cuda_inc = Path("/usr/local/cuda/include")
    exe = d / "vendor"
    gxx = shutil.which("g++")
    subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-I", str(d / "include"), "-I", str(cuda_inc),
                    "-I", str(_cublaslt_include()), str(d / "vendor.cpp"), str(d / "mock.cpp"), str(d / "main.cpp"),
                    "-o", str(exe)], check=True)

    def run(cases):
        stdin = "".join(" ".join(str(x) for x in c) + "\n" for c in cases)
        out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(out) == len(cases), out
        return [(int(a), float(b), int(c), int(e), msg) for a, b, c, e, msg in (line.split("|", 4) for line in out)]
    return run


def _case(cls, M=5, N=7, K=9, batch=1, pad=0, alpha=1.0, beta=0.0, misalign=0, null_a=0, ws_less=0):
    c = CLASSES[cls]
    ak = int(c.get("layout_a", "row") == "row")
    bk = int(c.get("layout_b", "col") == "col")
    cn = int(c.get("layout_c", "row") == "row")
    bf16 = int(c.get("dtype_a", "bf16") == "bf16")
    return (cls, ak, bk, cn, bf16, M, N, K, batch, pad, alpha, beta, misalign, null_a, ws_less)


def test_vendor_plan_computes_cutegens_gemm_for_every_layout(vendor_plan):
    """Every (A, B, D) major of tf32 and bf16, with padded leading dimensions and batch strides, a batch of 3,
    alpha 2 and beta 1 (C read), the answer of cutegen's own definition, exactly (small integers)."""
    cases = [_case(i, M=5, N=7, K=9) for i in range(10)]
    cases += [_case(i, M=6, N=3, K=17, batch=3, pad=2, alpha=2.0, beta=1.0) for i in range(10)]
    got = vendor_plan(cases)
    bad = [(CLASSES[c[0]], c[5:12], g) for c, g in zip(cases, got) if g[0] != 0 or g[1] != 0.0]
    assert not bad, bad
    # both cached algorithms: aligned pointers run the 256-byte one; the workspace covers the larger need (64 * 256)
    assert {g[3] for g in got} == {256} and {g[2] for g in got} == {64 * 256}


def test_vendor_plan_status_codes(vendor_plan):
    """The house status codes: 16-byte aligned pointers run the algorithm chosen for 16 bytes; 4 bytes are E18;
    a NULL A is ABI-NULL; one byte less workspace than the plan asks is 2; no algorithm is 1; a failed
    cublasLtMatmul is 4; a class the vendor cannot compute and beta != 0 with a void C are refused at plan time."""
    got = vendor_plan([_case(0, misalign=16), _case(0, misalign=4), _case(0, null_a=1), _case(0, ws_less=1),
                       _case(0, K=13), _case(0, M=11), _case(10), _case(11, beta=1.0), _case(11), _case(0, M=0)])
    assert got[0][:4] == (0, 0.0, 64 * 256, 16)
    assert got[1][0] == 1 and "E18: an operand pointer is not 16-byte aligned" in got[1][4]
    assert got[2][0] == 1 and "ABI-NULL: A is NULL" in got[2][4]
    assert got[3][0] == 2 and "smaller than the 16384 bytes this plan needs" in got[3][4]
    assert got[4][0] == 1 and "VENDOR-NO-ALGORITHM" in got[4][4] and "K=13" in got[4][4]
    assert got[5][0] == 4 and "cublasLtMatmul failed: CUBLAS_STATUS_MOCK" in got[5][4]
    assert got[6][0] == 1 and got[6][4].startswith("cuBLASLt: VENDOR-EPILOGUE")
    assert got[7][0] == 1 and "E16: this class has no C operand" in got[7][4]
    assert got[8][:2] == (0, 0.0)
    assert got[9][0] == 1 and "ABI-EXTENT" in got[9][4]


# ---- which of cuBLASLt's algorithms a vendor segment runs (measured; cutegen/packs/vendor.py) ------------------

def _algorithms_file(tmp_path, shapes, device="NVIDIA H200", version=130002, top_k=8):
    """A tuning step's output (bench/gpu_vendor_algos.py's format): {(M, N): {index: us}} at K = 4096, bf16 TN."""
    base = {"dtype_a": "bf16", "dtype_b": "bf16", "dtype_c": "bf16", "dtype_d": "bf16", "layout_a": "row",
            "layout_b": "col", "layout_c": "row", "k": 4096}
    data = {"format": vendor.ALGORITHMS_FORMAT, "device": device, "cublaslt_version": version, "top_k": top_k,
            "shapes": [{"problem": GemmProblem.from_dict({**base, "m": m, "n": n}).to_dict(),
                        "algorithms": [{"index": i, "us": t, "ok": True, "describe": f"index={i} id={100 + i}"}
                                       for i, t in times.items()]} for (m, n), times in shapes.items()]}
    path = tmp_path / "algos.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_the_algorithm_leaves_the_heuristics_first_only_past_the_margin():
    """VENDOR-ALGO-MARGIN (2%): an algorithm 2.5% faster than the first at the segment's one point is taken, one
    1.5% faster is not; over two points the geomean of time / the point's best decides, and an index not measured
    at every point of the segment is not a candidate."""
    assert vendor.choose_algorithm({64: {0: 102.5, 1: 100.0}})[0] == 1
    assert vendor.choose_algorithm({64: {0: 101.5, 1: 100.0}})[0] == 0
    # idx0: sqrt(20/15 * 30/27) = 1.217, idx1 sqrt(19/15 * 1) = 1.125, idx2 sqrt(1 * 33/27) = 1.106 -> 2 (1.10x)
    idx, gain = vendor.choose_algorithm({128: {0: 20, 1: 19, 2: 15}, 300: {0: 30, 1: 27, 2: 33}})
    assert idx == 2 and gain == pytest.approx(1.2172 / 1.1055, abs=1e-3)
    assert vendor.choose_algorithm({128: {0: 20, 3: 10}, 300: {0: 30}})[0] == 0
    assert vendor.choose_algorithm({}) == (0, None)
    # where the first's two timings disagree by 3%, a 5% faster algorithm is noise (2 x 3% = 6%), a 7% one is not
    assert vendor.choose_algorithm({64: {0: 105.0, 1: 100.0}}, noise=0.03)[0] == 0
    assert vendor.choose_algorithm({64: {0: 107.0, 1: 100.0}}, noise=0.03)[0] == 1
    # VENDOR-ALGO-LONG: from a first of 200 us on, 10%: 9% faster keeps the first at 200 us and is taken at 199 us
    assert vendor.choose_algorithm({64: {0: 200.0, 1: 200.0 / 1.09}})[0] == 0
    assert vendor.choose_algorithm({64: {0: 199.0, 1: 199.0 / 1.09}})[0] == 1
    assert vendor.choose_algorithm({64: {0: 200.0, 1: 200.0 / 1.11}})[0] == 1


def test_measured_algorithms_go_into_the_pack_per_segment_and_shape(tmp_path):
    """--vendor-algorithms: the measured pack's exact vendor shapes (M = 128, 2048) take their own point's winner,
    the segments (17-479, 520-) the winner over the points inside them; a point of a kernel-served M (16) or of
    an (N, K) without vendor (6144) makes no entry. The table is rendered into the vendor source in that order
    (exact shapes first), pack.json records it with the algorithms' descriptions, COVERAGE.md names the moved
    ones; without the file the vendor source has an empty table and pack.json no algorithms."""
    path = _algorithms_file(tmp_path, {(128, 4096): {0: 20, 1: 19, 2: 15}, (300, 4096): {0: 30, 1: 27, 2: 33},
                                       (2048, 4096): {0: 100, 1: 98.5}, (16, 4096): {0: 10, 5: 5},
                                       (128, 6144): {0: 30, 4: 10}})
    files, _ = _measured_pack(tmp_path, vendor_algorithms=vendor.load_algorithms(path))
    alg = json.loads(files["pack.json"])["vendor"]["algorithms"]
    assert (alg["device"], alg["cublaslt_version"], alg["top_k"], alg["source"]) == ("NVIDIA H200", 130002, 8, "algos.json")
    got = [(c["m_first"], c["m_last"], c["index"]) for c in alg["choices"]]
    assert got == [(128, 128, 2), (2048, 2048, 0), (17, 479, 2), (520, 2**31 - 1, 0)]
    assert alg["choices"][2]["measured"] == {"128": "index=2 id=102", "300": "index=2 id=102"}
    src = files["src/vendor_cublaslt.cpp"]
    table = src[src.index("const AlgoChoice kAlgos["):]
    rows = ["{0, 4096, 4096, 128, 128, 2}", "{0, 4096, 4096, 2048, 2048, 0}", "{0, 4096, 4096, 17, 479, 2}",
            "{0, 4096, 4096, 520, 2147483647, 0}"]
    assert [table.index(r) for r in rows] == sorted(table.index(r) for r in rows)
    assert 'const char* const kTunedDevice = "NVIDIA H200";' in src and "kTunedVersion = 130002;" in src
    assert "index 2 (1.33x)" in files["COVERAGE.md"] and "2 run another than the heuristic's first" in files["COVERAGE.md"]
    # the first timed twice at M = 128 (index 0, then the pack's own plan) 20% apart: 1.33x is within 2 x 20%, so
    # the shape keeps the first; the segment's other point (300) still gives its index 2 a 1.10x, but the
    # segment's worst repeatability (20%) now asks for 1.4x: the first there too
    noisy = vendor.load_algorithms(path)
    next(x for x in noisy["shapes"] if x["problem"]["m"] == 128 and x["problem"]["n"] == 4096)["pack_us"] = 24.0
    files, _ = _measured_pack(tmp_path, vendor_algorithms=noisy)
    alg = json.loads(files["pack.json"])["vendor"]["algorithms"]
    assert [(c["m_first"], c["index"], c["noise"]) for c in alg["choices"]][:3] == [(128, 0, 0.2), (2048, 0, 0.0),
                                                                                    (17, 0, 0.2)]
    plain, _ = _measured_pack(tmp_path)
    assert "constexpr int kAlgoChoices = 0;" in plain["src/vendor_cublaslt.cpp"]
    assert "algorithms" not in json.loads(plain["pack.json"])["vendor"]


@pytest.mark.parametrize("data, field", [
    ({"format": "other"}, "format"),
    ({"format": vendor.ALGORITHMS_FORMAT, "device": "x", "cublaslt_version": "13", "top_k": 8, "shapes": []},
     "cublaslt_version"),
    ({"format": vendor.ALGORITHMS_FORMAT, "device": "x", "cublaslt_version": 1, "top_k": 0, "shapes": []}, "top_k"),
    ({"format": vendor.ALGORITHMS_FORMAT, "device": "x", "cublaslt_version": 1, "top_k": 8,
      "shapes": [{"problem": {}, "algorithms": [{"index": 8, "us": 1.0}]}]}, "shapes[0]"),
])
def test_a_bad_algorithms_file_is_one_line_naming_the_field(tmp_path, data, field):
    from cutegen.errors import FieldError
    path = tmp_path / "a.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FieldError) as e:
        vendor.load_algorithms(str(path))
    assert f"a.json:{field}" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FieldError, match="no such file"):
        vendor.load_algorithms(str(tmp_path / "missing.json"))


ALGO_HARNESS = r"""
#include "cutegen_pack.h"
#include <cstdio>
#include <cstdlib>
#include <string>
namespace cutegen_pack_vendor {
int plan_create(int, const cutegen_pack_shape*, void**); size_t plan_workspace(const void*); void plan_destroy(void*);
int plan_run(void*, const void*, const void*, const void*, void*, const void*, void*, size_t, cudaStream_t);
const char* plan_error(); int plan_algorithm(const void*); std::string plan_algorithm_describe(const void*);
const char* algorithm_note(int, const cutegen_pack_shape*); int force_algorithm(int);
}
extern uint64_t g_index_used;
using namespace cutegen_pack_vendor;
int main() {
  int cls, forced, misalign; long long M, N, K;
  while (std::scanf("%d %lld %lld %lld %d %d", &cls, &M, &N, &K, &forced, &misalign) == 6) {
    cutegen_pack_shape s{};
    s.M = M; s.N = N; s.K = K; s.batch = 1; s.alpha = 1; s.beta = 0; s.lda = K; s.ldb = K; s.ldc = s.ldd = N;
    s.batch_stride_a = M * K; s.batch_stride_b = N * K; s.batch_stride_c = s.batch_stride_d = M * N;
    force_algorithm(forced);
    void* plan = nullptr;
    int st = plan_create(cls, &s, &plan);
    if (st != 0) { std::printf("%d|-1|-1||%s\n", st, plan_error()); continue; }
    char* buf = static_cast<char*>(std::aligned_alloc(256, size_t(4 * (M * K + N * K + M * N) + 1024)));
    char* A = buf + misalign; char* B = A + (2 * M * K / 256 + 1) * 256;
    char* D = B + (2 * N * K / 256 + 1) * 256;
    std::string ws(plan_workspace(plan) + 1, '\0');
    g_index_used = 99;
    int rs = plan_run(plan, A, B, nullptr, D, nullptr, &ws[0], ws.size(), nullptr);
    std::printf("%d|%d|%d|%s|%s\n", rs, plan_algorithm(plan), int(g_index_used), plan_algorithm_describe(plan).c_str(),
                forced >= 0 ? "" : algorithm_note(cls, &s));
    plan_destroy(plan);
    std::free(buf);
  }
}
"""


@pytest.fixture(scope="module")
def vendor_algorithm_plan(tmp_path_factory):
    """The vendor source rendered with a measured algorithm table (class 8 of CLASSES: bf16 TN, D row-major;
    N 7, K 9: M = 5 exactly index 3, M 1-64 index 2; tuned on "Mock GPU", cuBLASLt 130002), built with g++
    against the stand-in: ``run(cases, **env) -> [(status, plan's index, index the run used, describe, note)]``."""
    from cutegen import render as render_mod
    from cutegen.build import find_nvcc
    from cutegen.packs.dispatch import class_context, Fallback
    d = tmp_path_factory.mktemp("vendor_algos")
    rows = []
    for c in CLASSES:
        p = GemmProblem(m=64, n=64, k=64, **{"dtype_a": "bf16", "dtype_b": "bf16", "dtype_c": "bf16", "dtype_d": "bf16", **c})
        cc = class_context(p, [-1] * 31, Fallback(None, None, ""))
        rows.append({**vendor.context(p), "a_k": cc["a_k"], "b_k": cc["b_k"], "c_n": cc["c_n"]})
    table = {"device": "Mock GPU", "cublaslt_version": 130002, "top_k": 8,
             "choices": [{"cls": 8, "n": 7, "k": 9, "m_first": 5, "m_last": 5, "index": 3},
                         {"cls": 8, "n": 7, "k": 9, "m_first": 1, "m_last": 64, "index": 2}]}
    env = render_mod._environment()
    (d / "include").mkdir()
    (d / "include" / "cutegen_pack.h").write_text(env.get_template("pack_header.h.j2").render(
        pack_name="p", target="h200", kernels=[], classes=[], vendor=False, generated=[]))
    (d / "vendor.cpp").write_text(env.get_template("pack_vendor_cublaslt.cpp.j2").render(
        pack_name="p", target="h200", vendor_classes=rows, vendor_algorithms=table))
    (d / "mock.cpp").write_text(MOCK)
    (d / "main.cpp").write_text(ALGO_HARNESS)
    cuda_inc = Path(find_nvcc()).resolve().parent.parent / "include"
    if not (cuda_inc / "cuda_runtime.h").is_file():
        cuda_inc = Path("/usr/local/cuda/include")
    exe = d / "vendor_algos"
    subprocess.run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Werror", "-I", str(d / "include"), "-I",
                    str(cuda_inc), "-I", str(_cublaslt_include()), str(d / "vendor.cpp"), str(d / "mock.cpp"),
                    str(d / "main.cpp"), "-o", str(exe)], check=True)

    def run(cases, **env_vars):
        import os
        stdin = "".join(" ".join(str(x) for x in c) + "\n" for c in cases)
        out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True,
                             env={**os.environ, **env_vars}).stdout.splitlines()
        assert len(out) == len(cases), out
        return [(int(a), int(b), int(c), desc, note) for a, b, c, desc, note in (ln.split("|", 4) for ln in out)]
    return run


def test_the_plan_runs_the_measured_algorithm_on_the_device_and_version_it_was_measured_on(vendor_algorithm_plan):
    """Class 8, N 7, K 9 (8 algorithms in the list): M = 5 runs index 3 (the exact entry before the segment's 2),
    M = 6 and 64 index 2, M = 65 (outside the segment) and N = 8 the first; 16-byte-aligned operands run the first
    of their own list (the measured index is for 256-byte ones); the describe names cuBLASLt's algorithm id."""
    got = vendor_algorithm_plan([(8, 5, 7, 9, -1, 0), (8, 6, 7, 9, -1, 0), (8, 64, 7, 9, -1, 0), (8, 65, 7, 9, -1, 0),
                                 (8, 5, 8, 9, -1, 0), (8, 5, 7, 9, -1, 16)], MOCK_ALGOS="8")
    assert [(g[0], g[1], g[2]) for g in got] == [(0, 3, 3), (0, 2, 2), (0, 2, 2), (0, 0, 0), (0, 0, 0), (0, 3, 0)]
    assert got[0][3].startswith("index=3 id=103")
    assert "cuBLASLt algorithm 3 of the heuristic's list (measured fastest of the heuristic's 8 at tune time (Mock GPU, " \
           "cuBLASLt 130002))" == got[0][4]
    assert "no measured choice for this shape" in got[3][4] and "no measured choice" in got[4][4]


def test_the_plan_falls_back_to_the_first_algorithm_and_says_why(vendor_algorithm_plan):
    """Another cuBLASLt version, another device, or a list shorter than the measured index: the first, and the
    note (cutegen_pack_explain's words) says which; a list exactly long enough keeps the index. The tuning
    step's forced index takes any place of the list, and past its end the first."""
    case = [(8, 5, 7, 9, -1, 0)]
    v = vendor_algorithm_plan(case, MOCK_ALGOS="8", MOCK_VERSION="130100")[0]
    assert v[:3] == (0, 0, 0) and "is for cuBLASLt 130002, this is 130100" in v[4]
    d = vendor_algorithm_plan(case, MOCK_ALGOS="8", MOCK_DEVICE="NVIDIA H100")[0]
    assert d[:3] == (0, 0, 0) and "is for Mock GPU, this is NVIDIA H100" in d[4]
    short = vendor_algorithm_plan(case, MOCK_ALGOS="3")[0]
    assert short[:3] == (0, 0, 0) and "the list has 3 algorithms, the chosen index 3 is not in it" in short[4]
    assert vendor_algorithm_plan(case, MOCK_ALGOS="4")[0][:3] == (0, 3, 3)
    forced = vendor_algorithm_plan([(8, 5, 7, 9, 6, 0), (8, 5, 7, 9, 7, 0), (8, 5, 7, 9, 6, 0)], MOCK_ALGOS="7")
    assert [f[:3] for f in forced] == [(0, 6, 6), (0, 0, 0), (0, 6, 6)]


def test_vendor_algorithms_flag_needs_a_measured_vendor_pack(tmp_path, capsys):
    """--vendor-algorithms without measurements, with --no-vendor or with --plan-only: a one-line error naming it."""
    from cutegen.cli import main
    from test_pack import TINY
    f = _write(tmp_path, TINY)
    path = _algorithms_file(tmp_path, {(128, 4096): {0: 1.0}})
    for extra in ([], ["--measured", path, "--no-vendor"], ["--tune", "--plan-only"]):
        assert main(["pack", f, "-o", str(tmp_path / "o"), "--target", "h200", "--prior", "--vendor-algorithms", path,
                     *extra]) != 0
        err = capsys.readouterr().err
        assert "--vendor-algorithms" in err and "needs a pack with the vendor tactic" in err
