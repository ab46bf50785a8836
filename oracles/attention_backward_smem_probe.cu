// sizeof(SharedStorage) of the CUTLASS 88 Hopper FMHA backward kernel (legality/attention_backward.py SMEM model).
// Host-only probe: nvcc -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I <CUTLASS>/include
//   -I <CUTLASS>/tools/util/include -I <CUTLASS>/examples/88_hopper_fmha -o probe oracles/attention_backward_smem_probe.cu
// then ./probe (no GPU needed). nvcc 13.0, CUTLASS 4.2 (2026-11-26): kernel = mainloop + 512 on every row.
#include <cstdio>
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "collective/fmha_fusion.hpp"
#include "collective/fmha_collective_bwd_tma_warpspecialized.hpp"
#include "collective/fmha_epilogue_bwd.hpp"
#include "kernel/fmha_kernel_tma_warpspecialized.hpp"
#include "kernel/fmha_options.hpp"
#include "kernel/fmha_tile_scheduler.hpp"
using namespace cute;
template <class E, int TQ, int TKV, int D>
void probe(const char* name) {
  using TileShape = Shape<Int<TQ>, Int<TKV>, Int<D>>;
  using Mask = cutlass::fmha::collective::FusionBwdAdapter<cutlass::fmha::collective::DefaultFusion>;
  using M = cutlass::fmha::collective::FmhaBwdMainloopTmaWarpSpecialized<E, float, TileShape, Mask>;
  using Ep = cutlass::fmha::collective::FmhaBwdEpilogueKV<E, float, typename M::TileShapePV>;
  using K = cutlass::fmha::kernel::FmhaKernelTmaWarpSpecialized<M, Ep, cutlass::fmha::kernel::TileSchedulerBwdAdapter<cutlass::fmha::kernel::IndividualTileScheduler>>;
  printf("%s %d %d %d smem %d mainloop %d threads %d\n", name, TQ, TKV, D, int(K::SharedStorageSize), int(sizeof(typename M::SharedStorage)), int(K::MaxThreadsPerBlock));
}
int main() {
  probe<cutlass::bfloat16_t, 64, 128, 64>("bf16");
  probe<cutlass::bfloat16_t, 128, 128, 64>("bf16");
  probe<cutlass::bfloat16_t, 64, 128, 128>("bf16");
  probe<cutlass::bfloat16_t, 128, 128, 128>("bf16");
  probe<cutlass::bfloat16_t, 64, 128, 32>("bf16");
  probe<cutlass::bfloat16_t, 128, 128, 32>("bf16");
  probe<cutlass::bfloat16_t, 64, 256, 64>("bf16");
  probe<cutlass::bfloat16_t, 64, 128, 96>("bf16");
  probe<cutlass::half_t, 64, 128, 128>("f16");
  return 0;
}
