"""Host-side compiler probe of CUTLASS 4.2's SM90 ptr-array grouped kernels: sizeof(SharedStorage) and stages.

For each row below this writes one C++ block that builds the grouped kernel exactly as the grouped renderer
does (templates/grouped_gemm/kernel.cu.j2: GroupProblemShape, LayoutA*/LayoutB*/LayoutD* pointer strides,
no C (void), LinearCombination<bf16, float, void>, KernelPtrArrayTmaWarpSpecialized{Cooperative,Pingpong} (the
FP8Blockwise variants with example 68's 1x128 / 128x128 scales) with the matching PtrArray epilogue,
StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)> or StageCount<n>)
and prints sizeof(GemmKernel::SharedStorage), sizeof(CollectiveEpilogue::SharedStorage) and the stage count.
Nothing is launched and no device code is generated (the blocks sit under ``#ifndef __CUDA_ARCH__``).

    python oracles/grouped_smem_probe.py    # compiles under the shared nvcc lock, writes
                                            # oracles/grouped_smem_probe_results.jsonl

tests/test_grouped_legality.py compares legality/grouped_gemm.py's model (``GroupedContext.smem_bytes``,
``grouped_stages``) with every row of the results file.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "grouped_smem_probe_results.jsonl"
ELEMENT = {"bf16": "cutlass::bfloat16_t", "e4m3": "cutlass::float_e4m3_t"}
KERNEL = {"ptr_cooperative": "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative",
          "ptr_pingpong": "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong"}
EPILOGUE = {"ptr_cooperative": "cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative",
            "ptr_pingpong": "cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong"}


def rows() -> list[dict]:
    """(dtype, config) pairs that compile; they vary the tile, the schedule, the orientation, the cluster, the
    stages and the input type."""
    def c(tm, tn, tk, sched="ptr_cooperative", cm=1, cn=1, swap=False, stages=None):  # noqa: PLR0913
        return {"tile_m": tm, "tile_n": tn, "tile_k": tk, "cluster_m": cm, "cluster_n": cn, "schedule": sched,
                "swap_ab": swap, "stages": stages, "raster": "heuristic"}
    R = [("bf16", c(128, 128, 64)), ("bf16", c(128, 256, 64)), ("bf16", c(128, 256, 64, cm=2)),
         ("bf16", c(256, 128, 64)), ("bf16", c(128, 112, 64, stages=6)), ("bf16", c(128, 112, 64, stages=7)),
         ("bf16", c(64, 128, 64, "ptr_pingpong")), ("bf16", c(64, 128, 128, "ptr_pingpong", cm=2)),
         ("bf16", c(64, 256, 64, "ptr_pingpong")), ("bf16", c(128, 16, 64, swap=True)),
         ("bf16", c(256, 16, 128, swap=True, cm=2)), ("bf16", c(256, 8, 128, "ptr_pingpong", swap=True)),
         ("bf16", c(128, 64, 128, stages=3)), ("e4m3", c(128, 128, 128)), ("e4m3", c(128, 192, 128)),
         ("e4m3", c(64, 128, 128, "ptr_pingpong")), ("e4m3", c(256, 16, 128, swap=True)),
         ("bf16", c(128, 192, 64)), ("bf16", c(128, 192, 64, cm=2)), ("e4m3", c(128, 168, 128)),
         ("e4m3", c(128, 168, 128, stages=5)), ("e4m3", c(128, 168, 128, stages=6))]
    out = [{"dtype": d, "scale": "none", "config": cfg} for d, cfg in R]
    for cfg in (c(128, 128, 128), c(64, 128, 128, "ptr_pingpong"), c(128, 16, 128, swap=True), c(128, 256, 128)):
        out.append({"dtype": "e4m3", "scale": "block128", "config": cfg})
    return out


def _block(i: int, row: dict) -> str:
    cfg = row["config"]
    swap = cfg["swap_ab"]
    stages = ("cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>"
              if cfg["stages"] is None else f"cutlass::gemm::collective::StageCount<{cfg['stages']}>")
    block = row.get("scale") == "block128"
    gran = "128, 1" if swap else "1, 128"
    sched = KERNEL[cfg["schedule"]] + ("FP8Blockwise" if block else "")
    la = ("cute::tuple<cutlass::layout::RowMajor*, LayoutSFA*>" if block else "cutlass::layout::RowMajor*")
    lb = ("cute::tuple<cutlass::layout::ColumnMajor*, LayoutSFB*>" if block else "cutlass::layout::ColumnMajor*")
    scale_decl = (f"using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<{gran}, 128, cute::GMMA::Major::K, "
                  "cute::GMMA::Major::K>;\nusing LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());\n"
                  "using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());" if block else "")
    return f"""
namespace p{i} {{
using Shape3 = cute::Shape<int, int, int>;
using Tile = cute::Shape<cute::_{cfg['tile_m']}, cute::_{cfg['tile_n']}, cute::_{cfg['tile_k']}>;
using Cluster = cute::Shape<cute::_{cfg['cluster_m']}, cute::_{cfg['cluster_n']}, cute::_1>;
using LayoutD = {"cutlass::layout::ColumnMajor" if swap else "cutlass::layout::RowMajor"};
{scale_decl}
using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
    float, float, void, LayoutD*, 8, cutlass::bfloat16_t, LayoutD*, 8,
    {EPILOGUE[cfg['schedule']]},
    cutlass::epilogue::fusion::LinearCombination<cutlass::bfloat16_t, float, void, float>>::CollectiveOp;
using Main = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    {ELEMENT[row['dtype']]}, {la}, {16 if row['dtype'] == 'e4m3' else 8},
    {ELEMENT[row['dtype']]}, {lb}, {16 if row['dtype'] == 'e4m3' else 8},
    float, Tile, Cluster, {stages}, {sched}>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<Shape3>, Main, Epi>;
void report() {{
  using KS = typename Kernel::SharedStorage;
  printf("{{\\"row\\": {i}, \\"kernel_bytes\\": %d, \\"epilogue_bytes\\": %d, \\"stages\\": %d, "
         "\\"kernel_tensors\\": %d, \\"kernel_pipelines\\": %d, \\"kernel_tensormaps\\": %d, "
         "\\"mainloop_tensors\\": %d, \\"epilogue_tensors\\": %d, \\"epilogue_stages_c\\": %d, "
         "\\"epilogue_stages_d\\": %d}}\\n",
         int(sizeof(KS)), int(sizeof(typename Epi::SharedStorage)), int(Main::DispatchPolicy::Stages),
         int(sizeof(typename KS::TensorStorage)), int(sizeof(typename KS::PipelineStorage)),
         int(sizeof(typename KS::TensorMapStorage)), int(sizeof(typename Main::TensorStorage)),
         int(sizeof(typename Epi::TensorStorage)), int(Epi::DispatchPolicy::StagesC), int(Epi::DispatchPolicy::StagesD));
}}
}}  // namespace p{i}
"""


PRELUDE = r"""
#include <cstdio>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#ifndef __CUDA_ARCH__
"""


def main() -> int:
    import cutlass_library
    inc = Path(cutlass_library.__file__).parent / "source"
    build = HERE.parent / "build" / "grouped_smem_probe"
    build.mkdir(parents=True, exist_ok=True)
    rws = rows()
    src, exe = build / "probe.cu", build / "probe"
    src.write_text(PRELUDE + "".join(_block(i, r) for i, r in enumerate(rws))
                   + "int main() {\n" + "".join(f"  p{i}::report();\n" for i in range(len(rws)))
                   + "  return 0;\n}\n#else\nint main() { return 0; }\n#endif\n")
    cmd = ["flock", "/tmp/cutegen-nvcc.lock", "nvcc", "-std=c++17", "-O0", "--expt-relaxed-constexpr",
           "-gencode=arch=compute_90a,code=sm_90a", f"-I{inc / 'include'}", f"-I{inc / 'tools/util/include'}",
           "-o", str(exe), str(src)]
    print(" ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    with open(RESULTS, "w") as f:
        for line in out.splitlines():
            rec = json.loads(line)
            row = rws[rec.pop("row")]
            f.write(json.dumps({"dtype": row["dtype"], "scale": row["scale"], "config": row["config"], "measured": rec},
                               sort_keys=True) + "\n")
    print(f"{len(rws)} rows -> {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
