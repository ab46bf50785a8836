// Prints the pack's dispatch decision for each "M N K [lda]" on the command line; with a GPU and
// --run, also plans and runs each shape once on zeroed buffers and reports the status.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cutegen_pack.h"

int main(int argc, char** argv) {
  bool run = argc > 1 && std::strcmp(argv[1], "--run") == 0;
  int first = run ? 2 : 1;
  std::printf("pack %s for %s: %d kernels, %d classes\n", CUTEGEN_PACK_NAME, CUTEGEN_PACK_TARGET,
              cutegen_pack_kernel_count(), cutegen_pack_class_count());
  for (int i = first; i + 2 < argc; i += 4) {
    long long M = std::atoll(argv[i]), N = std::atoll(argv[i + 1]), K = std::atoll(argv[i + 2]);
    cutegen_pack_shape s = cutegen_pack_shape_packed(0, M, N, K, 1);
    if (i + 3 < argc && std::atoll(argv[i + 3]) > 0) s.lda = std::atoll(argv[i + 3]);
    std::printf("%lld %lld %lld -> %d | %s\n", M, N, K, cutegen_pack_select(0, &s), cutegen_pack_explain(0, &s));
    if (!run) continue;
    cutegen_pack_plan_t plan = nullptr;
    int status = cutegen_pack_plan(0, &s, &plan);
    if (status == 0) {
      void *a, *b, *d, *ws = nullptr;
      size_t wsb = cutegen_pack_plan_workspace_size(plan);
      cudaMalloc(&a, 2 * s.lda * M); cudaMalloc(&b, 2 * K * N); cudaMalloc(&d, 2 * M * N);
      if (wsb) cudaMalloc(&ws, wsb);
      status = cutegen_pack_run(plan, a, b, nullptr, d, nullptr, ws, wsb, 0);
      if (status == 0) status = cudaDeviceSynchronize() == cudaSuccess ? 0 : 4;
      cudaFree(a); cudaFree(b); cudaFree(d); cudaFree(ws);
      cutegen_pack_plan_destroy(plan);
    }
    std::printf("  run status %d %s\n", status, status ? cutegen_pack_last_error() : "");
  }
  return 0;
}
