// The transposing stage of operand staging (cutegen/staging.py), bare: the ABI's tiled transpose kernel
// (templates/cutegen_abi.inc.j2, copied verbatim between the markers below; tests/test_staging_transpose.py
// keeps the two equal) writing an MN-major operand K-major, timed with CUDA events (median of 50 after
// 10 warm-ups) at the layouts suite's operand sizes, every element of the copy checked against the source
// once. It checks the cost model's transpose term (search/cost.py staging_us: bytes read + written over
// HBM bandwidth at STAGE_TRANSPOSE_EFFICIENCY, plus STAGE_COPY_LAUNCH_US per copy), which is assumed,
// not measured. One JSON object per line. Build: nvcc -O2 -std=c++17 -arch=sm_90 -o stage_transpose_rate stage_transpose_rate.cu
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  std::printf("{\"error\": \"%s: %s\"}\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

// >>> cutegen_stage_transpose (a verbatim copy of templates/cutegen_abi.inc.j2's)
template <class Bits>
__global__ void __launch_bounds__(256) cutegen_stage_transpose(
    Bits* __restrict__ dst, Bits const* __restrict__ src, int64_t rows, int64_t cols, int64_t ld,
    int64_t batch_stride, int64_t dst_ld, int64_t batch) {
  __shared__ Bits tile[32][33];
  const int64_t row_tiles = (rows + 31) / 32, col_tiles = (cols + 31) / 32;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      for (int64_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
        const int64_t r0 = rt * 32, c0 = ct * 32;
        for (int i = threadIdx.y; i < 32; i += blockDim.y) {
          if (r0 + i < rows && c0 + threadIdx.x < cols) {
            tile[i][threadIdx.x] = src[b * batch_stride + (r0 + i) * ld + c0 + threadIdx.x];
          }
        }
        __syncthreads();
        for (int i = threadIdx.y; i < 32; i += blockDim.y) {
          if (c0 + i < cols && r0 + threadIdx.x < rows) {
            dst[b * dst_ld * cols + (c0 + i) * dst_ld + r0 + threadIdx.x] = tile[threadIdx.x][i];
          }
        }
        __syncthreads();   // the tile is reused by this block's next (b, rt, ct)
      }
    }
  }
}
// <<< cutegen_stage_transpose

// The ABI's launch (stage_transpose in the template): 32x8 threads, grid x over column tiles, y over
// row tiles (at most 65535), z over batches (at most 65535).
template <class Bits>
void launch(Bits* dst, Bits const* src, int64_t rows, int64_t cols, int64_t ld, int64_t dst_ld, int64_t batch,
            int64_t batch_stride, cudaStream_t stream) {
  const int64_t row_tiles = (rows + 31) / 32, col_tiles = (cols + 31) / 32;
  const dim3 grid(unsigned(col_tiles), unsigned(row_tiles < 65535 ? row_tiles : 65535),
                  unsigned(batch < 65535 ? batch : 65535));
  cutegen_stage_transpose<Bits><<<grid, dim3(32, 8), 0, stream>>>(dst, src, rows, cols, ld, batch_stride, dst_ld,
                                                                  batch);
}

template <class Bits>
int run(const char* name, int64_t rows, int64_t cols, int64_t ld, int64_t batch, cudaStream_t stream,
        cudaEvent_t t0, cudaEvent_t t1) {
  const int64_t q = 16 / int64_t(sizeof(Bits));
  const int64_t dst_ld = (rows + q - 1) / q * q;          // staged_ld: the copy's rows are K, rounded to 16 B
  const int64_t src_n = ld * rows * batch, dst_n = dst_ld * cols * batch;
  std::vector<Bits> host(size_t(src_n), Bits(0));
  for (int64_t i = 0; i < src_n; ++i) host[size_t(i)] = Bits((i * 2654435761u) >> 7);
  Bits *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, size_t(src_n) * sizeof(Bits)));
  CHECK(cudaMalloc(&dst, size_t(dst_n) * sizeof(Bits)));
  CHECK(cudaMemcpy(src, host.data(), size_t(src_n) * sizeof(Bits), cudaMemcpyHostToDevice));
  std::vector<float> ms;
  for (int i = 0; i < 60; ++i) {
    CHECK(cudaEventRecord(t0, stream));
    launch<Bits>(dst, src, rows, cols, ld, dst_ld, batch, ld * rows, stream);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(t1, stream));
    CHECK(cudaEventSynchronize(t1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, t0, t1));
    if (i >= 10) ms.push_back(t);
  }
  std::vector<Bits> out(static_cast<size_t>(dst_n));
  CHECK(cudaMemcpy(out.data(), dst, size_t(dst_n) * sizeof(Bits), cudaMemcpyDeviceToHost));
  int64_t wrong = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        wrong += out[size_t(b * dst_ld * cols + c * dst_ld + r)] != host[size_t(b * ld * rows + r * ld + c)];
  std::sort(ms.begin(), ms.end());
  const double us = ms[ms.size() / 2] * 1e3;
  const double moved = 2.0 * double(rows) * double(cols) * double(batch) * double(sizeof(Bits));   // read + write
  std::printf("{\"case\": \"%s\", \"element_bytes\": %d, \"rows\": %ld, \"cols\": %ld, \"ld\": %ld, \"batch\": %ld, "
              "\"dst_ld\": %ld, \"median_us\": %.3f, \"min_us\": %.3f, \"moved_bytes\": %.0f, \"gb_per_s\": %.1f, "
              "\"wrong_elements\": %ld}\n",
              name, int(sizeof(Bits)), long(rows), long(cols), long(ld), long(batch), long(dst_ld), us, ms[0] * 1e3,
              moved, moved / (us * 1e-6) / 1e9, long(wrong));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return wrong != 0;
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"device\": \"%s\", \"sms\": %d}\n", prop.name, prop.multiProcessorCount);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  int bad = 0;
  // (source rows = K, contiguous cols = M or N, ld): the MN-major operands the layouts suite transposes
  bad |= run<uint8_t>("e4m3 2048x2048 (nn/nt/tt 2048)", 2048, 2048, 2048, 1, stream, t0, t1);
  bad |= run<uint8_t>("e4m3 K777 x M1000 (nn ragged A)", 777, 1000, 1000, 1, stream, t0, t1);
  bad |= run<uint8_t>("e5m2 K777 x N1500 (tt ragged B)", 777, 1500, 1500, 1, stream, t0, t1);
  bad |= run<uint8_t>("e4m3 K4096 x N4096 ld 4100, batch 3", 4096, 4096, 4100, 3, stream, t0, t1);
  bad |= run<uint8_t>("e4m3 K8192 x M8192", 8192, 8192, 8192, 1, stream, t0, t1);
  bad |= run<uint32_t>("tf32 2048x2048 (nt/nn 2048)", 2048, 2048, 2048, 1, stream, t0, t1);
  bad |= run<uint32_t>("tf32 K777 x M1000 (nt ragged A)", 777, 1000, 1000, 1, stream, t0, t1);
  bad |= run<uint32_t>("tf32 K4096 x M4096", 4096, 4096, 4096, 1, stream, t0, t1);
  bad |= run<uint16_t>("2-byte K4096 x M4096 (the kernel's 2-byte path)", 4096, 4096, 4096, 1, stream, t0, t1);
  bad |= run<uint8_t>("e4m3 K3 x M1 (M = 1 decode)", 3, 1, 1, 1, stream, t0, t1);
  return bad;
}
