"""Compile probe: which (dtype, B layout, tile, stages) make the SS mainloop's Params fail to compile.

``CollectiveMma::Params`` slices stage 0 out of the swizzled smem layouts
(``SmemLayoutB{}(_,_,Int<0>{})``); CuTe's slice_and_offset then static_asserts divisibility
conditions (cute/layout.hpp:1077, :1101). This TU instantiates ``sizeof(Main::Params)`` for
each case; nvcc names the failing namespaces. The verdicts are the table in
tests/test_smem_stage_slice.py (measured with nvcc 13.0, CUTLASS 4.2.0, on 2026-11-22).

    python oracles/smem_probe_slice.py            # prints: case, compiles?
    python oracles/smem_probe_slice.py kernels    # full kernels (device code too): the epilogue cases

The ``kernels`` mode instantiates ``cutlass::device_kernel<GemmKernel>`` for KERNEL_CASES, which
compiles the epilogue's device code: that is where SM90-EPILOGUE-FRAGMENT fires
(sm90_epilogue_tma_warpspecialized.hpp:626) and where the C/D buffers turned out NOT to follow the
mainloop's slice algebra. Verdicts (nvcc 13.0, 2026-11-22) are in tests/test_smem_stage_slice.py.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
T = {"bf16": "cutlass::bfloat16_t", "e4m3": "cutlass::float_e4m3_t", "tf32": "cutlass::tfloat32_t"}
ALIGN = {"bf16": 8, "e4m3": 16, "tf32": 4}
LAYOUT = {"row": "cutlass::layout::RowMajor", "col": "cutlass::layout::ColumnMajor"}

# (dtype, layout_b, tile, stages); A is row-major (K-major)
CASES = [
    ("bf16", "col", (128, 8, 64), 13), ("bf16", "col", (128, 8, 64), 12), ("bf16", "col", (128, 8, 64), 8),
    ("bf16", "col", (128, 8, 64), 7), ("bf16", "col", (128, 16, 64), 13), ("bf16", "col", (128, 8, 32), 13),
    ("bf16", "col", (128, 8, 64), 3), ("bf16", "col", (128, 8, 64), 5), ("bf16", "col", (128, 24, 64), 13),
    ("bf16", "col", (128, 16, 64), 11), ("bf16", "col", (128, 64, 64), 13), ("bf16", "col", (128, 8, 64), 9),
    ("bf16", "col", (128, 8, 192), 4), ("bf16", "col", (128, 8, 192), 5), ("bf16", "col", (128, 8, 128), 5),
    ("bf16", "col", (128, 40, 64), 5), ("bf16", "col", (128, 40, 64), 6), ("bf16", "row", (128, 8, 64), 13),
    ("e4m3", "col", (128, 8, 128), 13), ("tf32", "col", (128, 8, 32), 13), ("bf16", "col", (128, 8, 48), 13),
    ("bf16", "col", (128, 8, 16), 13), ("bf16", "col", (128, 24, 32), 5), ("e4m3", "col", (128, 16, 128), 13),
    ("bf16", "col", (128, 72, 64), 3),
]


# (layout_a, layout_b, layout_c, tile, stages or "auto", schedule) -> nvcc verdict in the tests
KERNEL_CASES = [
    ("row", "col", "row", (128, 8, 64), 12, "coop"), ("col", "row", "row", (128, 8, 64), "auto", "coop"),
    ("col", "row", "row", (128, 16, 64), "auto", "coop"), ("row", "col", "row", (64, 8, 64), "auto", "pp"),
    ("col", "row", "row", (128, 24, 64), "auto", "coop"), ("col", "row", "row", (64, 24, 64), "auto", "pp"),
    ("row", "col", "col", (128, 8, 128), "auto", "pp"), ("row", "col", "col", (64, 8, 64), "auto", "pp"),
    ("row", "col", "row", (128, 8, 128), "auto", "pp"), ("row", "col", "col", (128, 8, 64), 12, "coop"),
]


def kernel_source() -> str:
    out = ['#include "cutlass/cutlass.h"\n#include "cute/tensor.hpp"\n'
           '#include "cutlass/gemm/collective/collective_builder.hpp"\n'
           '#include "cutlass/epilogue/collective/collective_builder.hpp"\n'
           '#include "cutlass/gemm/kernel/gemm_universal.hpp"\n#include "cutlass/device_kernel.h"\n']
    for i, (la, lb, lc, (m, n, k), s, sch) in enumerate(KERNEL_CASES):
        kern = "KernelTmaWarpSpecializedCooperative" if sch == "coop" else "KernelTmaWarpSpecializedPingpong"
        epi = "TmaWarpSpecializedCooperative" if sch == "coop" else "TmaWarpSpecialized"
        stages = (f"cutlass::gemm::collective::StageCount<{s}>" if s != "auto" else
                  "cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>")
        out.append(f"""
namespace q{i} {{
using Tile = cute::Shape<cute::_{m}, cute::_{n}, cute::_{k}>;
using Cl = cute::Shape<cute::_1, cute::_1, cute::_1>;
using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
  Tile, Cl, cutlass::epilogue::collective::EpilogueTileAuto, float, float, cutlass::bfloat16_t, {LAYOUT[lc]}, 8,
  cutlass::bfloat16_t, {LAYOUT[lc]}, 8, cutlass::epilogue::{epi}>::CollectiveOp;
using Main = typename cutlass::gemm::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
  cutlass::bfloat16_t, {LAYOUT[la]}, 8, cutlass::bfloat16_t, {LAYOUT[lb]}, 8, float, Tile, Cl, {stages},
  cutlass::gemm::{kern}>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int,int,int,int>, Main, Epi>;
void* ptr = (void*)&cutlass::device_kernel<Kernel>;
}}
""")
    return "".join(out)


def source() -> str:
    out = ['#include "cutlass/cutlass.h"\n#include "cute/tensor.hpp"\n'
           '#include "cutlass/gemm/collective/collective_builder.hpp"\n']
    for i, (dt, lb, (m, n, k), s) in enumerate(CASES):
        out.append(f"""
namespace q{i} {{
using Main = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    {T[dt]}, cutlass::layout::RowMajor, {ALIGN[dt]}, {T[dt]}, {LAYOUT[lb]}, {ALIGN[dt]}, float,
    cute::Shape<cute::_{m}, cute::_{n}, cute::_{k}>, cute::Shape<cute::_1, cute::_1, cute::_1>,
    cutlass::gemm::collective::StageCount<{s}>, cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
constexpr int params_size = sizeof(typename Main::Params);
}}
""")
    return "".join(out)


def main() -> int:
    import cutlass_library
    inc = Path(cutlass_library.__file__).parent / "source"
    build = HERE.parent / "build" / "smem_probe_slice"
    build.mkdir(parents=True, exist_ok=True)
    kernels = sys.argv[1:] == ["kernels"]
    cases = KERNEL_CASES if kernels else CASES
    src = build / ("kernels.cu" if kernels else "probe.cu")
    src.write_text(kernel_source() if kernels else source())
    r = subprocess.run(["flock", "/tmp/cutegen-nvcc.lock", "nvcc", "-std=c++17", "-O0", "--expt-relaxed-constexpr",
                        "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", f"-I{inc / 'include'}", "-c", "-o",
                        str(build / "probe.o"), str(src)], capture_output=True, text=True)
    failed = {int(x) for x in re.findall(r"\bq(\d+)::", r.stdout + r.stderr)}
    for i, case in enumerate(cases):
        print(case, "compiles" if i not in failed else "static_assert")
    return 0


if __name__ == "__main__":
    sys.exit(main())
