"""The ABI's transpose kernel (templates/cutegen_abi.inc.j2, the text between its markers) run on the CPU.

No GPU here, so the kernel's own text is compiled with g++ under a small emulation of the CUDA execution
model: every block of the grid in turn, each of its 32x8 threads a std::thread, ``__syncthreads`` a
std::barrier, ``__shared__`` one array per block run. It checks what the GPU run will rely on: every
element of a K-major copy of an MN-major operand lands where the kernel's TMA descriptor reads it, for
1-, 2- and 4-byte elements, ragged extents, padded leading dimensions, batches, and grids smaller than
the tile counts (the loops that carry it past CUDA's 65535 limits on y and z).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


CXX = shutil.which("g++") or shutil.which("c++")
ROOT = Path(__file__).resolve().parents[1]

HARNESS = r"""
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx;
dim3 blockIdx, blockDim, gridDim;
std::barrier<>* block_barrier = nullptr;
void __syncthreads() { block_barrier->arrive_and_wait(); }
#define __global__
#define __shared__ static
#define __launch_bounds__(n)
KERNEL_TEXT
// rows x cols source (cols contiguous, ld apart, batches ld*rows apart) -> cols x rows copy (rows contiguous)
template <class Bits>
int check(long rows, long cols, long ld, long batch, dim3 grid) {
  const long q = 16 / long(sizeof(Bits)), dst_ld = (rows + q - 1) / q * q;
  std::vector<Bits> src(ld * rows * batch), dst(dst_ld * cols * batch, Bits(0));
  for (size_t i = 0; i < src.size(); ++i) src[i] = Bits(i * 2654435761u >> 5);
  gridDim = grid;
  blockDim = dim3{32, 8, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3{x, y, z};
        std::barrier<> bar(256);
        block_barrier = &bar;
        std::vector<std::thread> threads;
        for (unsigned ty = 0; ty < 8; ++ty)
          for (unsigned tx = 0; tx < 32; ++tx)
            threads.emplace_back([&, tx, ty] {
              threadIdx = dim3{tx, ty, 0};
              cutegen_stage_transpose<Bits>(dst.data(), src.data(), rows, cols, ld, batch > 1 ? ld * rows : 0,
                                            dst_ld, batch);
            });
        for (auto& t : threads) t.join();
      }
  long wrong = 0;
  for (long b = 0; b < batch; ++b)
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c)
        wrong += dst[b * dst_ld * cols + c * dst_ld + r] != src[b * ld * rows + r * ld + c];
  std::printf("%zu-byte rows=%ld cols=%ld ld=%ld batch=%ld grid=%ux%ux%u wrong=%ld\n", sizeof(Bits), rows, cols, ld,
              batch, grid.x, grid.y, grid.z, wrong);
  return wrong != 0;
}
int main() {
  int bad = 0;
  bad |= check<uint8_t>(77, 100, 100, 1, dim3{4, 3, 1});           // K=77 x M=100: the grid the ABI launches
  bad |= check<uint8_t>(45, 33, 40, 3, dim3{2, 1, 2});             // fewer blocks than tiles along x, y and z
  bad |= check<uint16_t>(64, 64, 64, 1, dim3{2, 2, 1});
  bad |= check<uint32_t>(97, 50, 53, 2, dim3{1, 3, 1});            // tf32: padded ld, batch, looped x
  bad |= check<uint8_t>(3, 1, 1, 1, dim3{1, 1, 1});                // M = 1
  return bad;
}
"""


def kernel_text() -> str:
    text = (ROOT / "templates" / "cutegen_abi.inc.j2").read_text()
    body = text.split("// >>> cutegen_stage_transpose")[1].split("// <<< cutegen_stage_transpose")[0]
    return body.split("\n", 1)[1]


def test_transpose_kernel_text_is_correct_under_cpu_emulation(tmp_path):
    assert CXX, "no C++ compiler (g++ or c++) on the PATH"
    src = tmp_path / "t.cpp"
    src.write_text(HARNESS.replace("KERNEL_TEXT", kernel_text()))
    exe = tmp_path / "t"
    build = subprocess.run([CXX, "-std=c++20", "-O1", "-pthread", "-o", str(exe), str(src)], capture_output=True,
                           text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    print(run.stdout)
    assert run.returncode == 0 and run.stdout.count("wrong=0") == 5, run.stdout + run.stderr
