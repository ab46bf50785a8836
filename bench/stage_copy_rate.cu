// The restride copy of operand staging (cutegen/staging.py), bare: cudaMemcpy2DAsync device to device
// from rows of `width` bytes at pitch `spitch` to the 16-byte pitch the staged TMA kernel reads, timed
// with CUDA events (median of 50 after 10 warm-ups), at the unaligned suites' operand sizes. It checks
// the cost model's copy term (search/cost.py staging_us: bytes read + written over HBM bandwidth at
// STAGE_COPY_EFFICIENCY, plus STAGE_COPY_LAUNCH_US per copy) and prints the device's memPitch (the
// limit of rule STAGE-PITCH). One JSON object per line. Build: nvcc -O2 -o stage_copy_rate stage_copy_rate.cu
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::printf("{\"error\": \"%s: %s\"}\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"device\": \"%s\", \"mem_pitch\": %zu, \"sms\": %d}\n", prop.name, prop.memPitch,
              prop.multiProcessorCount);
  // (rows, contiguous elements, source ld, element bytes): the operands the unaligned suites stage
  struct Case { const char* name; long rows, cols, ld, esize; };
  const Case cases[] = {
      {"bf16 2048x2047 (tn oddk A or B)", 2048, 2047, 2047, 2},
      {"bf16 4096x4095 (nt oddm A)", 4096, 4095, 4095, 2},
      {"bf16 4096x4096 lda 4100 (tn lda A)", 4096, 4096, 4100, 2},
      {"bf16 8192x1022 (tn k2mod8 A)", 8192, 1022, 1022, 2},
      {"bf16 1024x1022 (tn k2mod8 B)", 1024, 1022, 1022, 2},
      {"f16 1001x1001 (nn odd)", 1001, 1001, 1001, 2},
      {"e4m3 4096x4100 (tn k4mod16)", 4096, 4100, 4100, 1},
      {"e4m3 2048x2047 (tn oddk)", 2048, 2047, 2047, 1},
      {"bf16 8192x8191", 8192, 8191, 8191, 2},
  };
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  for (const Case& c : cases) {
    const long q = 16 / c.esize;
    const long sld = (c.cols + q - 1) / q * q;
    void *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, size_t(c.ld * c.rows * c.esize)));
    CHECK(cudaMalloc(&dst, size_t(sld * c.rows * c.esize)));
    CHECK(cudaMemset(src, 1, size_t(c.ld * c.rows * c.esize)));
    std::vector<float> ms;
    for (int i = 0; i < 60; ++i) {
      CHECK(cudaEventRecord(t0, stream));
      CHECK(cudaMemcpy2DAsync(dst, size_t(sld * c.esize), src, size_t(c.ld * c.esize), size_t(c.cols * c.esize),
                              size_t(c.rows), cudaMemcpyDeviceToDevice, stream));
      CHECK(cudaEventRecord(t1, stream));
      CHECK(cudaEventSynchronize(t1));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, t0, t1));
      if (i >= 10) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    const double moved = 2.0 * double(c.cols) * double(c.rows) * double(c.esize);   // read + write
    std::printf("{\"case\": \"%s\", \"rows\": %ld, \"width_bytes\": %ld, \"spitch\": %ld, \"dpitch\": %ld, "
                "\"median_us\": %.3f, \"min_us\": %.3f, \"moved_bytes\": %.0f, \"gb_per_s\": %.1f}\n",
                c.name, c.rows, c.cols * c.esize, c.ld * c.esize, sld * c.esize, us, ms[0] * 1e3, moved,
                moved / (us * 1e-6) / 1e9);
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
  }
  return 0;
}
