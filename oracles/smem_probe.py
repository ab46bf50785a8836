"""Host-side compiler probe: what CUTLASS 4.2's SM90 CollectiveBuilders really build.

For each (problem, config) row below this writes one C++ block that instantiates the
epilogue and mainloop CollectiveBuilders and ``GemmUniversal`` exactly as a user (and
cutegen's renderer) writes them -- stages ``"auto"`` as
``StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>`` -- and prints the
sizeofs of the three SharedStorage structs, the resolved stage count, and the choices
the builder made (smem atoms, TMA atoms, WGMMA N, epilogue tile and stages).

Nothing is launched and no device code is generated: the kernels are never referenced
from a ``__global__`` function and the blocks sit under ``#ifndef __CUDA_ARCH__``, so one
translation unit holds all rows and compiles on a machine without a GPU.

    python oracles/smem_probe.py            # writes build/smem_probe.cu, compiles, runs, writes
                                            # oracles/smem_probe_results.jsonl
The compile takes the shared nvcc lock (/tmp/cutegen-nvcc.lock).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "smem_probe_results.jsonl"

CUTLASS_T = {"bf16": "cutlass::bfloat16_t", "f16": "cutlass::half_t", "tf32": "cutlass::tfloat32_t",
             "e4m3": "cutlass::float_e4m3_t", "e5m2": "cutlass::float_e5m2_t", "f32": "float", "void": "void"}
BITS = {"bf16": 16, "f16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "f32": 32}
LAYOUT_T = {"row": "cutlass::layout::RowMajor", "col": "cutlass::layout::ColumnMajor"}
KERNEL_T = {"warp_specialized": "cutlass::gemm::KernelTmaWarpSpecialized",
            "cooperative": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
            "pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong"}
EPI_T = {"tma_warp_specialized": "cutlass::epilogue::TmaWarpSpecialized",
         "tma_warp_specialized_cooperative": "cutlass::epilogue::TmaWarpSpecializedCooperative",
         "no_smem": "cutlass::epilogue::NoSmemWarpSpecialized"}
SCHED_T = {"persistent": "cutlass::gemm::PersistentScheduler", "stream_k": "cutlass::gemm::StreamKScheduler"}


def _row(m, n, k, tile, cluster=(1, 1, 1), sched="cooperative", epi=None, stages="auto", ts="persistent",
         a="bf16", b=None, c="bf16", d=None, la="row", lb="col", lc="row", bias=False, act="none",
         epi_tile=None):
    b = b or a
    d = d or (c if c != "void" else "bf16")
    if epi is None:
        epi = "tma_warp_specialized_cooperative" if sched == "cooperative" else "tma_warp_specialized"
    problem = {"m": m, "n": n, "k": k, "dtype_a": a, "dtype_b": b, "dtype_c": c, "dtype_d": d,
               "layout_a": la, "layout_b": lb, "layout_c": lc, "bias": bias, "activation": act}
    config = {"tile_shape": list(tile), "cluster_shape": list(cluster), "stages": stages,
              "mainloop_schedule": sched, "epilogue_schedule": epi, "tile_scheduler": ts}
    if epi_tile is not None:
        config["epilogue_tile"] = list(epi_tile)
    return {"problem": problem, "config": config}


def rows() -> list[dict]:
    """Configurations that compile (no static_assert fires); chosen to vary every input of the model."""
    R = []
    # tile shapes x schedules, bf16 TN, C = D = bf16
    for tile in [(128, 128, 64), (128, 256, 64), (256, 128, 64), (128, 128, 128), (128, 64, 64),
                 (256, 64, 64), (128, 192, 64), (128, 96, 128), (128, 16, 64),
                 (128, 8, 32), (256, 256, 64), (128, 200, 64), (128, 128, 32), (128, 24, 64)]:
        R.append(_row(4096, 4096, 4096, tile, sched="cooperative"))
    for tile in [(64, 128, 64), (64, 256, 64), (128, 128, 64), (64, 64, 128), (128, 256, 64),
                 (64, 96, 64), (64, 8, 64), (128, 48, 64), (64, 128, 256)]:
        R.append(_row(4096, 4096, 4096, tile, sched="pingpong"))
        R.append(_row(4096, 4096, 4096, tile, sched="warp_specialized"))
    # no-smem epilogue
    for sched, tile in [("cooperative", (128, 128, 64)), ("pingpong", (64, 128, 64)),
                        ("warp_specialized", (128, 256, 64)), ("cooperative", (256, 128, 128))]:
        R.append(_row(4096, 4096, 4096, tile, sched=sched, epi="no_smem"))
        R.append(_row(4096, 4096, 4096, tile, sched=sched, epi="no_smem", c="void"))
    # C/D element types and void C, row and column major C/D
    for c, d in [("f32", "f32"), ("void", "bf16"), ("void", "f32"), ("f16", "f16"), ("bf16", "f32"),
                 ("f32", "bf16"), ("void", "f16")]:
        for sched, tile in [("cooperative", (128, 128, 64)), ("pingpong", (64, 256, 64)),
                            ("cooperative", (256, 128, 64))]:
            R.append(_row(4096, 4096, 4096, tile, sched=sched, c=c, d=d))
    for lc in ("col",):
        for c, d in [("bf16", "bf16"), ("f32", "f32"), ("void", "bf16")]:
            R.append(_row(4096, 4096, 4096, (128, 128, 64), sched="cooperative", c=c, d=d, lc=lc))
            R.append(_row(4096, 4096, 4096, (64, 128, 64), sched="pingpong", c=c, d=d, lc=lc))
    # majorness of A and B (smem atom selection)
    for la, lb in [("col", "col"), ("row", "row"), ("col", "row")]:
        for tile in [(128, 128, 64), (128, 64, 32), (64, 32, 64), (128, 96, 64), (256, 128, 16)]:
            sched = "cooperative" if tile[0] >= 128 else "pingpong"
            R.append(_row(4096, 4096, 4096, tile, sched=sched, la=la, lb=lb))
    for tile in [(128, 128, 16), (128, 128, 32), (128, 128, 48), (128, 128, 96)]:
        R.append(_row(4096, 4096, 4096, tile, sched="cooperative"))
    # other input types (K-major only: tf32 and fp8 non-K-major go to the RS builder)
    for a, b, tile in [("f16", None, (128, 128, 64)), ("e4m3", None, (128, 128, 128)), ("e4m3", "e5m2", (128, 256, 128)),
                       ("e5m2", None, (64, 128, 128)), ("tf32", None, (128, 128, 32)), ("tf32", None, (128, 64, 16)),
                       ("e4m3", None, (128, 128, 64)), ("e4m3", None, (128, 64, 32))]:
        sched = "cooperative" if tile[0] >= 128 else "pingpong"
        c = "f32" if a == "tf32" else "bf16"
        R.append(_row(4096, 4096, 4096, tile, sched=sched, a=a, b=b, c=c))
    R.append(_row(4096, 4096, 4096, (128, 128, 64), sched="pingpong", a="e4m3", c="bf16", d="bf16"))
    R.append(_row(4096, 4096, 4096, (64, 128, 64), sched="pingpong", a="f16", lb="row", la="col"))
    # clusters (multicast atoms), explicit stages, stream-K
    for cl in [(2, 1, 1), (1, 2, 1), (2, 2, 1), (4, 1, 1), (1, 4, 1), (2, 4, 1)]:
        R.append(_row(4096, 4096, 4096, (128, 128, 64), cluster=cl, sched="cooperative"))
    R.append(_row(4096, 4096, 4096, (64, 128, 64), cluster=(2, 1, 1), sched="pingpong"))
    for st in (2, 3, 5, 8):
        R.append(_row(4096, 4096, 4096, (128, 128, 64), sched="cooperative", stages=st))
        R.append(_row(4096, 4096, 4096, (64, 128, 64), sched="pingpong", stages=st))
    R.append(_row(4096, 4096, 4096, (128, 256, 128), sched="cooperative", stages=2))
    R.append(_row(4096, 4096, 4096, (128, 128, 64), sched="warp_specialized", stages=4, ts="persistent"))
    for tile in [(128, 128, 64), (128, 96, 128), (256, 128, 64), (128, 256, 64)]:
        R.append(_row(4096, 4096, 4096, tile, sched="cooperative", ts="stream_k"))
        R.append(_row(4096, 4096, 4096, tile, sched="cooperative", ts="stream_k", epi="no_smem"))
    R.append(_row(4096, 4096, 4096, (128, 128, 64), cluster=(2, 1, 1), sched="cooperative", ts="stream_k", c="void"))
    # explicit epilogue tiles
    for sched, tile, et in [("cooperative", (128, 128, 64), (128, 64)), ("cooperative", (256, 128, 64), (128, 128)),
                            ("pingpong", (64, 128, 64), (64, 64)), ("pingpong", (128, 128, 64), (64, 16)),
                            ("cooperative", (128, 256, 64), (128, 16))]:
        R.append(_row(4096, 4096, 4096, tile, sched=sched, epi_tile=et))
        R.append(_row(4096, 4096, 4096, tile, sched=sched, epi_tile=et, c="void"))
    # fused per-row bias + activation
    for sched, tile, c in [("cooperative", (128, 128, 64), "bf16"), ("pingpong", (64, 128, 64), "bf16"),
                           ("cooperative", (128, 256, 64), "void")]:
        R.append(_row(4096, 4096, 4096, tile, sched=sched, c=c, bias=True, act="relu"))
    R.append(_row(4096, 4096, 4096, (64, 128, 128), sched="pingpong", a="e4m3", c="void", d="bf16"))
    # dedupe, keep order
    seen, out = set(), []
    for r in R:
        key = json.dumps(r, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _block(i: int, row: dict) -> str:
    p, c = row["problem"], row["config"]
    tm, tn, tk = c["tile_shape"]
    cm, cn, ck = c["cluster_shape"]
    d_t = CUTLASS_T[p["dtype_d"]]
    c_t = CUTLASS_T[p["dtype_c"]]
    align_c_src = p["dtype_d"] if p["dtype_c"] == "void" else p["dtype_c"]
    align_c = 128 // BITS[align_c_src]
    align_d = 128 // BITS[p["dtype_d"]]
    epi_tile = ("cutlass::epilogue::collective::EpilogueTileAuto" if "epilogue_tile" not in c else
                f"cute::Shape<cute::_{c['epilogue_tile'][0]}, cute::_{c['epilogue_tile'][1]}>")
    if p["bias"] or p["activation"] != "none":
        act = {"none": "cutlass::epilogue::thread::Identity", "relu": "cutlass::epilogue::thread::ReLu"}[p["activation"]]
        fusion = (f"cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<{act}, {d_t}, float, {d_t}, {c_t}>")
    else:
        fusion = f"cutlass::epilogue::fusion::LinearCombination<{d_t}, float, {c_t}, float>"
    stages = ("cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi{i}::SharedStorage))>"
              .format(i=i) if c["stages"] == "auto" else f"cutlass::gemm::collective::StageCount<{c['stages']}>")
    tma_epi = c["epilogue_schedule"] != "no_smem"
    return f"""
namespace p{i} {{
using Tile = cute::Shape<cute::_{tm}, cute::_{tn}, cute::_{tk}>;
using Cluster = cute::Shape<cute::_{cm}, cute::_{cn}, cute::_{ck}>;
using Epi{i} = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, {epi_tile},
    float, float, {c_t}, {LAYOUT_T[p['layout_c']]}, {align_c}, {d_t}, {LAYOUT_T[p['layout_c']]}, {align_d},
    {EPI_T[c['epilogue_schedule']]}, {fusion}>::CollectiveOp;
using Main = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    {CUTLASS_T[p['dtype_a']]}, {LAYOUT_T[p['layout_a']]}, {128 // BITS[p['dtype_a']]},
    {CUTLASS_T[p['dtype_b']]}, {LAYOUT_T[p['layout_b']]}, {128 // BITS[p['dtype_b']]},
    float, Tile, Cluster, {stages}, {KERNEL_T[c['mainloop_schedule']]}>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int,int,int,int>, Main, Epi{i}, {SCHED_T[c['tile_scheduler']]}>;
void report() {{
  using Mma = typename Main::TiledMma;
  printf("{{\\"row\\": {i}, \\"mainloop_bytes\\": %d, \\"epilogue_bytes\\": %d, \\"kernel_bytes\\": %d, \\"stages\\": %d, "
         "\\"smem_layout_a\\": \\"%s\\", \\"smem_layout_b\\": \\"%s\\", \\"tma_a\\": \\"%s\\", \\"tma_b\\": \\"%s\\", "
         "\\"mma_instruction\\": [%d, %d, %d], \\"warpgroup_layout\\": [%d, %d, %d], \\"threads\\": %d{', ' if tma_epi else ''}%s}}\\n",
         int(sizeof(typename Main::SharedStorage)), int(sizeof(typename Epi{i}::SharedStorage)),
         int(sizeof(typename Kernel::SharedStorage)), int(Main::DispatchPolicy::Stages),
         atom_name<typename Main::SmemLayoutAtomA, typename Mma::ValTypeA>(),
         atom_name<typename Main::SmemLayoutAtomB, typename Mma::ValTypeB>(),
         tma_name<typename Main::GmemTiledCopyA>(), tma_name<typename Main::GmemTiledCopyB>(),
         int(cute::size<0>(typename Mma::AtomShape_MNK{{}})), int(cute::size<1>(typename Mma::AtomShape_MNK{{}})),
         int(cute::size<2>(typename Mma::AtomShape_MNK{{}})),
         int(cute::size<1>(typename Mma::ThrLayoutVMNK{{}})),
         int(cute::size<2>(typename Mma::ThrLayoutVMNK{{}})), int(cute::size<3>(typename Mma::ThrLayoutVMNK{{}})),
         int(Kernel::MaxThreadsPerBlock),
         {'epi_info<Epi' + str(i) + '>().c_str()' if tma_epi else '""'});
}}
}}  // namespace p{i}
"""


PRELUDE = r"""
#include <cstdio>
#include <string>
#include <type_traits>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#ifndef __CUDA_ARCH__
template <class Atom, class T>
const char* atom_name() {
  namespace G = cute::GMMA;
  if constexpr (std::is_same_v<Atom, G::Layout_K_SW128_Atom<T>>) return "K_SW128";
  else if constexpr (std::is_same_v<Atom, G::Layout_K_SW64_Atom<T>>) return "K_SW64";
  else if constexpr (std::is_same_v<Atom, G::Layout_K_SW32_Atom<T>>) return "K_SW32";
  else if constexpr (std::is_same_v<Atom, G::Layout_K_INTER_Atom<T>>) return "K_INTER";
  else if constexpr (std::is_same_v<Atom, G::Layout_MN_SW128_Atom<T>>) return "MN_SW128";
  else if constexpr (std::is_same_v<Atom, G::Layout_MN_SW64_Atom<T>>) return "MN_SW64";
  else if constexpr (std::is_same_v<Atom, G::Layout_MN_SW32_Atom<T>>) return "MN_SW32";
  else if constexpr (std::is_same_v<Atom, G::Layout_MN_INTER_Atom<T>>) return "MN_INTER";
  else return "?";
}
template <class Copy>
const char* tma_name() {
  if constexpr (std::is_same_v<Copy, cute::SM90_TMA_LOAD>) return "tma";
  else if constexpr (std::is_same_v<Copy, cute::SM90_TMA_LOAD_MULTICAST>) return "tma_multicast";
  else return "?";
}
template <class Epi>
std::string epi_info() {
  using P = typename Epi::DispatchPolicy;
  using T = typename Epi::EpilogueTile;
  char buf[200];
  snprintf(buf, sizeof buf, "\"epilogue_tile\": [%d, %d], \"epilogue_stages_c\": %d, \"epilogue_stages_d\": %d, "
           "\"epilogue_reuse_smem_c\": %s",
           int(cute::size<0>(T{})), int(cute::size<1>(T{})), int(P::StagesC), int(P::StagesD),
           P::ReuseSmemC ? "true" : "false");
  return buf;
}
"""


def write_source(path: Path, rws: list[dict]) -> None:
    parts = [PRELUDE]
    for i, r in enumerate(rws):
        parts.append(_block(i, r))
    parts.append("int main() {\n" + "".join(f"  p{i}::report();\n" for i in range(len(rws))) + "  return 0;\n}\n#else\nint main() { return 0; }\n#endif\n")
    path.write_text("".join(parts))


def main() -> int:
    import cutlass_library
    inc = Path(cutlass_library.__file__).parent / "source"
    build = HERE.parent / "build" / "smem_probe"
    build.mkdir(parents=True, exist_ok=True)
    rws = rows()
    if os.environ.get("SMEM_PROBE_LIMIT"):  # quick syntax check on the first few rows
        rws = rws[: int(os.environ["SMEM_PROBE_LIMIT"])]
    src, exe = build / "smem_probe.cu", build / "smem_probe"
    write_source(src, rws)
    cmd = ["flock", "/tmp/cutegen-nvcc.lock", "nvcc", "-std=c++17", "-O0", "--expt-relaxed-constexpr",
           "-gencode=arch=compute_90a,code=sm_90a", f"-I{inc / 'include'}", f"-I{inc / 'tools/util/include'}",
           "-o", str(exe), str(src)]
    print(" ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    target = RESULTS if not os.environ.get("SMEM_PROBE_LIMIT") else build / "partial.jsonl"
    with open(target, "w") as f:
        for line in out.splitlines():
            rec = json.loads(line)
            row = rws[rec.pop("row")]
            f.write(json.dumps({"problem": row["problem"], "config": row["config"], "measured": rec},
                               sort_keys=True) + "\n")
    print(f"{len(rws)} rows -> {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
