// A PyTorch extension around a pack's vendor source (src/vendor_cublaslt.cpp, compiled beside it): the tuning
// step of the vendor tactic (bench/gpu_vendor_algos.py) runs cuBLASLt's algorithm at index i of the heuristic's
// list through the pack's own plan entry points, so what it times is what the pack runs with that index.
//   torch.ops.cutegen_vendor_algos.count(cls, M, N, K) -> how many of the heuristic's list there are (<= kTopK)
//   torch.ops.cutegen_vendor_algos.describe(cls, M, N, K, index) -> "index=.. id=.. tile=.. stages=.. ..; note"
//   torch.ops.cutegen_vendor_algos.run(a, b, cls, index) -> D = a @ b (index -1: the pack's own choice)
//   torch.ops.cutegen_vendor_algos.version() -> cublasLtGetVersion()
// Shapes are the language-model class: a (M x K, row-major) @ b (K x N, column-major: W^T), D row-major.
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <torch/library.h>
#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "cutegen_pack.h"

namespace cutegen_pack_vendor {
int plan_create(int, const cutegen_pack_shape*, void**);
int plan_create_algorithm(int, const cutegen_pack_shape*, int, void**);
size_t plan_workspace(const void*);
void plan_destroy(void*);
int plan_run(void*, const void*, const void*, const void*, void*, const void*, void*, size_t, cudaStream_t);
const char* plan_error();
int plan_algorithm(const void*);
std::string plan_algorithm_describe(const void*);
const char* algorithm_note(int, const cutegen_pack_shape*);
}  // namespace cutegen_pack_vendor

namespace {
using namespace cutegen_pack_vendor;

cutegen_pack_shape shape_of(int64_t M, int64_t N, int64_t K) {
  cutegen_pack_shape s{};
  s.M = M; s.N = N; s.K = K; s.batch = 1;
  s.lda = K; s.ldb = K; s.ldc = s.ldd = N;
  s.batch_stride_a = M * K; s.batch_stride_b = N * K; s.batch_stride_c = s.batch_stride_d = M * N;
  s.alpha = 1.0f; s.beta = 0.0f;
  return s;
}

std::mutex g_lock;
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, void*> g_plans;   // (cls, M, N, K, index)

void* plan_for(int64_t cls, int64_t M, int64_t N, int64_t K, int64_t index) {
  std::lock_guard<std::mutex> guard(g_lock);
  auto key = std::make_tuple(cls, M, N, K, index);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  cutegen_pack_shape s = shape_of(M, N, K);
  void* p = nullptr;
  int st = index < 0 ? plan_create(int(cls), &s, &p) : plan_create_algorithm(int(cls), &s, int(index), &p);
  TORCH_CHECK(st == 0, "vendor plan (status ", st, "): ", plan_error());
  g_plans[key] = p;
  return p;
}

int64_t count(int64_t cls, int64_t M, int64_t N, int64_t K) {
  int64_t n = 0;
  for (int64_t i = 0; i < 64; ++i) {
    void* p = plan_for(cls, M, N, K, i);
    if (plan_algorithm(p) != i) break;   // past the end of the list the plan takes the first
    n = i + 1;
  }
  return n;
}

std::string describe(int64_t cls, int64_t M, int64_t N, int64_t K, int64_t index) {
  void* p = plan_for(cls, M, N, K, index);
  std::string out = plan_algorithm_describe(p);
  if (index < 0) {
    cutegen_pack_shape s = shape_of(M, N, K);
    out += std::string("; ") + algorithm_note(int(cls), &s);
  }
  return out;
}

at::Tensor run(const at::Tensor& a, const at::Tensor& b, int64_t cls, int64_t index) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "a (M x K) @ b (K x N)");
  TORCH_CHECK(a.stride(1) == 1 && a.stride(0) == a.size(1) && b.stride(0) == 1 && b.stride(1) == b.size(0),
              "a row-major, b column-major (W^T), both packed");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  void* p = plan_for(cls, M, N, K, index);
  at::Tensor d = at::empty({M, N}, a.options());
  const size_t ws = plan_workspace(p);
  at::Tensor workspace = at::empty({int64_t(ws) + 1}, a.options().dtype(at::kByte));
  int st = plan_run(p, a.data_ptr(), b.data_ptr(), nullptr, d.data_ptr(), nullptr, workspace.data_ptr(), ws,
                    c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(st == 0, "vendor run (status ", st, "): ", plan_error());
  return d;
}

int64_t version() { return int64_t(cublasLtGetVersion()); }

}  // namespace

TORCH_LIBRARY(cutegen_vendor_algos, m) {
  m.def("count(int cls, int M, int N, int K) -> int", &count);
  m.def("describe(int cls, int M, int N, int K, int index) -> str", &describe);
  m.def("run(Tensor a, Tensor b, int cls, int index) -> Tensor", &run);
  m.def("version() -> int", &version);
}
