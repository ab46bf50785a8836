// The MoE layers of a cutegen pack, from C++: which grouped kernel serves each token count, and why. No GPU needed
// for these calls; a run is cutegen_pack_moe_run(layer, &args, workspace, bytes, stream) with device pointers
// (cutegen_pack.h shows the whole call).
//   moe_consumer [TOKENS ...]      e.g. moe_consumer 1 64 4096
#include <cstdio>
#include <cstdlib>

#include "cutegen_pack.h"

int main(int argc, char** argv) {
  printf("pack %s for %s: %d GEMM kernels, %d MoE layers, %d grouped kernels\n", CUTEGEN_PACK_NAME, CUTEGEN_PACK_TARGET,
         cutegen_pack_kernel_count(), cutegen_pack_moe_count(), cutegen_pack_moe_kernel_count());
  for (int layer = 0; layer < cutegen_pack_moe_count(); ++layer) {
    for (int i = 1; i < argc; ++i) {
      const long long tokens = atoll(argv[i]);
      printf("%s %lld -> %d | %s\n", cutegen_pack_moe_name(layer), tokens, cutegen_pack_moe_select(layer, tokens),
             cutegen_pack_moe_explain(layer, tokens));
    }
  }
  return 0;
}
