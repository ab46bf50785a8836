"""Host-side probe of the TMA descriptors CUTLASS 4.2 encodes for an SM90 GEMM.

For each row, the TU builds the mainloop and epilogue collectives through the
CollectiveBuilders (as oracles/smem_probe.py does) and calls their host-side
``to_underlying_arguments`` on a packed problem with 256-byte-aligned fake pointers. That
is where CuTe calls ``cuTensorMapEncodeTiled``; the TU defines that symbol itself (with
CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL), records every argument and returns success, so no
GPU and no driver are needed. The records are what ``legality/cutlass_sm90.py`` models as
the A, B, C and D tensor maps (rank, dims, strides, box, swizzle).

    python oracles/smem_probe_tma.py     # writes oracles/smem_probe_tma_results.jsonl
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from smem_probe import BITS, CUTLASS_T, EPI_T, KERNEL_T, LAYOUT_T, SCHED_T, _row  # noqa: E402

RESULTS = HERE / "smem_probe_tma_results.jsonl"


def rows() -> list[dict]:
    R = []
    for la, lb in [("row", "col"), ("col", "row"), ("col", "col"), ("row", "row")]:
        for tile in [(128, 128, 64), (128, 128, 128), (128, 96, 64), (128, 64, 32), (256, 128, 64)]:
            R.append(_row(4096, 4096, 4096, tile, la=la, lb=lb))
    for cl in [(2, 1, 1), (1, 2, 1), (2, 2, 1), (4, 1, 1), (1, 4, 1), (1, 8, 1), (8, 1, 1)]:
        R.append(_row(4096, 4096, 4096, (128, 128, 64), cluster=cl))
        R.append(_row(4096, 4096, 4096, (128, 128, 128), cluster=cl, la="col"))
    R.append(_row(4096, 4096, 4096, (64, 128, 64), cluster=(1, 8, 1), sched="pingpong"))
    for m, n, k in [(2000, 2056, 1000), (4096, 4096, 4104), (512, 512, 16384), (1, 8, 64)]:
        R.append(_row(m, n, k, (128, 128, 64)))
    for c, d, lc in [("f32", "f32", "row"), ("void", "bf16", "row"), ("bf16", "bf16", "col"), ("f32", "bf16", "col")]:
        R.append(_row(4096, 4096, 4096, (128, 128, 64), c=c, d=d, lc=lc))
        R.append(_row(4096, 4096, 4096, (64, 256, 64), sched="pingpong", c=c, d=d, lc=lc))
    for a, tile in [("e4m3", (128, 128, 128)), ("tf32", (128, 128, 32)), ("f16", (128, 256, 64))]:
        R.append(_row(4096, 4096, 4096, tile, a=a, c="f32" if a == "tf32" else "bf16"))
    R.append(_row(4096, 4096, 4096, (128, 16, 64)))
    R.append(_row(4096, 4096, 4096, (128, 200, 64), lb="row"))
    return R


def _block(i: int, row: dict) -> str:
    p, c = row["problem"], row["config"]
    tm, tn, tk = c["tile_shape"]
    cm, cn, ck = c["cluster_shape"]
    d_t, c_t = CUTLASS_T[p["dtype_d"]], CUTLASS_T[p["dtype_c"]]
    align_c = 128 // BITS[p["dtype_d"] if p["dtype_c"] == "void" else p["dtype_c"]]
    fusion = f"cutlass::epilogue::fusion::LinearCombination<{d_t}, float, {c_t}, float>"
    has_c = p["dtype_c"] != "void"
    return f"""
namespace q{i} {{
using Tile = cute::Shape<cute::_{tm}, cute::_{tn}, cute::_{tk}>;
using Cluster = cute::Shape<cute::_{cm}, cute::_{cn}, cute::_{ck}>;
using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
    float, float, {c_t}, {LAYOUT_T[p['layout_c']]}, {align_c}, {d_t}, {LAYOUT_T[p['layout_c']]}, {128 // BITS[p['dtype_d']]},
    {EPI_T[c['epilogue_schedule']]}, {fusion}>::CollectiveOp;
using Main = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    {CUTLASS_T[p['dtype_a']]}, {LAYOUT_T[p['layout_a']]}, {128 // BITS[p['dtype_a']]},
    {CUTLASS_T[p['dtype_b']]}, {LAYOUT_T[p['layout_b']]}, {128 // BITS[p['dtype_b']]},
    float, Tile, Cluster,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
    {KERNEL_T[c['mainloop_schedule']]}>::CollectiveOp;
void report() {{
  int M = {p['m']}, N = {p['n']}, K = {p['k']}, L = 1;
  auto shape = cute::make_shape(M, N, K, L);
  g_row = {i};
  typename Main::Arguments ma{{}};
  ma.ptr_A = reinterpret_cast<typename Main::ElementA const*>(uintptr_t(1) << 20);
  ma.ptr_B = reinterpret_cast<typename Main::ElementB const*>(uintptr_t(1) << 30);
  ma.dA = cutlass::make_cute_packed_stride(typename Main::StrideA{{}}, cute::make_shape(M, K, L));
  ma.dB = cutlass::make_cute_packed_stride(typename Main::StrideB{{}}, cute::make_shape(N, K, L));
  g_part = "AB";
  (void)Main::to_underlying_arguments(shape, ma, nullptr);
  typename Epi::Arguments ea{{}};
  {'ea.ptr_C = reinterpret_cast<typename Epi::ElementC const*>(uintptr_t(1) << 34);' if has_c else ''}
  ea.ptr_D = reinterpret_cast<typename Epi::ElementD*>(uintptr_t(1) << 38);
  ea.dC = cutlass::make_cute_packed_stride(typename Epi::StrideC{{}}, cute::make_shape(M, N, L));
  ea.dD = cutlass::make_cute_packed_stride(typename Epi::StrideD{{}}, cute::make_shape(M, N, L));
  g_part = "{'CD' if has_c else 'D'}";
  (void)Epi::to_underlying_arguments(shape, ea, nullptr);
}}
}}  // namespace q{i}
"""


PRELUDE = r"""
#define CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL 1
#include <cstdio>
#include <cuda.h>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/util/packed_stride.hpp"

static int g_row = -1;
static const char* g_part = "";
static int g_index = 0;

// Stands in for the driver: records what CuTe asks for, accepts it.
extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap*, CUtensorMapDataType dt, cuuint32_t rank, void* addr,
    const cuuint64_t* dim, const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* estr,
    CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  static int last_row = -2; static const char* last_part = nullptr;
  if (g_row != last_row || g_part != last_part) { g_index = 0; last_row = g_row; last_part = g_part; }
  printf("{\"row\": %d, \"operand\": \"%c\", \"data_type\": %d, \"rank\": %u, \"address\": %llu, \"global_dim\": [",
         g_row, g_part[g_index++], int(dt), rank, (unsigned long long)(uintptr_t)addr);
  for (cuuint32_t i = 0; i < rank; ++i) printf("%s%llu", i ? ", " : "", (unsigned long long)dim[i]);
  printf("], \"global_strides\": [");
  for (cuuint32_t i = 0; i + 1 < rank; ++i) printf("%s%llu", i ? ", " : "", (unsigned long long)strides[i]);
  printf("], \"box_dim\": [");
  for (cuuint32_t i = 0; i < rank; ++i) printf("%s%u", i ? ", " : "", box[i]);
  printf("], \"element_strides\": [");
  for (cuuint32_t i = 0; i < rank; ++i) printf("%s%u", i ? ", " : "", estr[i]);
  printf("], \"interleave\": %d, \"swizzle\": %d, \"l2_promotion\": %d, \"oob_fill\": %d}\n", int(il), int(sw), int(l2), int(oob));
  return CUDA_SUCCESS;
}
"""


def main() -> int:
    import cutlass_library
    inc = Path(cutlass_library.__file__).parent / "source"
    build = HERE.parent / "build" / "smem_probe_tma"
    build.mkdir(parents=True, exist_ok=True)
    rws = rows()
    src, exe = build / "probe.cu", build / "probe"
    body = [PRELUDE] + [_block(i, r) for i, r in enumerate(rws)]
    body.append("int main() {\n" + "".join(f"  q{i}::report();\n" for i in range(len(rws))) + "  return 0;\n}\n")
    src.write_text("".join(body))
    cmd = ["flock", "/tmp/cutegen-nvcc.lock", "nvcc", "-std=c++17", "-O0", "--expt-relaxed-constexpr",
           "-gencode=arch=compute_90a,code=sm_90a", f"-I{inc / 'include'}", f"-I{inc / 'tools/util/include'}",
           "-o", str(exe), str(src)]
    subprocess.run(cmd, check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    by_row: dict[int, dict] = {}
    for line in out.splitlines():
        rec = json.loads(line)
        by_row.setdefault(rec.pop("row"), {})[rec.pop("operand")] = rec
    with open(RESULTS, "w") as f:
        for i, r in enumerate(rws):
            f.write(json.dumps({"problem": r["problem"], "config": r["config"], "tensor_maps": by_row.get(i, {})},
                               sort_keys=True) + "\n")
    print(f"{len(rws)} rows -> {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
