"""The C ABI every built kernel library exports, whatever the backend (CUTLASS C++ or CuTe DSL).

`cutegen validate` and `cutegen bench` load any kernel through this ABI with ctypes, so the
renderers and the runner agree on it here, once.

All pointers are device pointers. Matrices are stored as the GemmProblem says: A is M x K,
B is K x N, C and D are M x N, each row- or column-major; ``ld*`` is the leading dimension in
elements (the stride of the non-contiguous mode), ``batch_stride_*`` the distance between
batches in elements (ignored when batch == 1). ``C`` may be NULL when the problem's C is void
or beta == 0. ``bias`` is a per-row vector of M elements of D's type, or NULL.
"""
from __future__ import annotations

import ctypes
import re

C_DECLARATIONS = r"""
extern "C" int cutegen_gemm(
    const void* A, const void* B, const void* C, void* D,
    int64_t M, int64_t N, int64_t K, int64_t batch,
    int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd,
    int64_t batch_stride_a, int64_t batch_stride_b, int64_t batch_stride_c, int64_t batch_stride_d,
    float alpha, float beta, const void* bias,
    void* workspace, size_t workspace_bytes, cudaStream_t stream);
extern "C" size_t cutegen_workspace_size(int64_t M, int64_t N, int64_t K, int64_t batch);
extern "C" const char* cutegen_describe(void);    /* JSON: {"problem":..., "config":..., "hash":..., "backend":...} */
extern "C" const char* cutegen_last_error(void);  /* message of the last non-zero status, naming the rule ID */

/* Stream-K kernels (tile_scheduler "stream_k") only: the run-time launch plan of cutegen/launch_plan.py.
   decomposition 0 heuristic, 1 data-parallel, 2 split-K, 3 stream-K; splits >= 1; reduction 0
   deterministic, 1 nondeterministic. cutegen_gemm of such a kernel is the plan (0, 1, 0). Every call
   re-initializes the workspace (resets the stream-K barriers) before it launches. */
extern "C" int cutegen_gemm_plan(
    const void* A, const void* B, const void* C, void* D,
    int64_t M, int64_t N, int64_t K, int64_t batch,
    int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd,
    int64_t batch_stride_a, int64_t batch_stride_b, int64_t batch_stride_c, int64_t batch_stride_d,
    float alpha, float beta, const void* bias,
    int decomposition, int splits, int reduction,
    void* workspace, size_t workspace_bytes, cudaStream_t stream);
extern "C" size_t cutegen_workspace_size_plan(int64_t M, int64_t N, int64_t K, int64_t batch,
                                              int decomposition, int splits, int reduction);
"""

# Every extern "C" name a kernel library may export (the plan pair only in stream-K kernels). A pack
# links many kernels into one library, so its plan.cu renames each of these before it includes the
# kernel (templates/cutegen_plan.inc.j2); a name missing here would collide at link time.
EXPORTED_SYMBOLS = tuple(re.findall(r'extern "C" [\w\s*]*?\b(cutegen_\w+)\(', C_DECLARATIONS))

# Status codes returned by cutegen_gemm.
STATUS = {
    0: "success",
    1: "problem cannot be implemented by this kernel (alignment, shape or layout; message names the rule)",
    2: "workspace too small",
    3: "initialization failed (shared-memory attribute, TMA descriptor)",
    4: "launch failed (CUDA error)",
}
OK, CANNOT_IMPLEMENT, WORKSPACE_TOO_SMALL, INIT_FAILED, LAUNCH_FAILED = range(5)

GEMM_ARGTYPES = (
    [ctypes.c_void_p] * 4
    + [ctypes.c_int64] * 4
    + [ctypes.c_int64] * 4
    + [ctypes.c_int64] * 4
    + [ctypes.c_float, ctypes.c_float, ctypes.c_void_p]
    + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)


GEMM_PLAN_ARGTYPES = (
    GEMM_ARGTYPES[:19] + [ctypes.c_int, ctypes.c_int, ctypes.c_int] + GEMM_ARGTYPES[19:]
)


def has_plan(lib: ctypes.CDLL) -> bool:
    """Whether the library exports the launch-plan entry points (stream-K kernels do)."""
    try:
        lib.cutegen_gemm_plan
        lib.cutegen_workspace_size_plan
    except AttributeError:
        return False
    return True


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the ABI's argument and result types on a loaded library."""
    lib.cutegen_gemm.argtypes = GEMM_ARGTYPES
    lib.cutegen_gemm.restype = ctypes.c_int
    lib.cutegen_workspace_size.argtypes = [ctypes.c_int64] * 4
    lib.cutegen_workspace_size.restype = ctypes.c_size_t
    lib.cutegen_describe.argtypes = []
    lib.cutegen_describe.restype = ctypes.c_char_p
    lib.cutegen_last_error.argtypes = []
    lib.cutegen_last_error.restype = ctypes.c_char_p
    if has_plan(lib):
        lib.cutegen_gemm_plan.argtypes = GEMM_PLAN_ARGTYPES
        lib.cutegen_gemm_plan.restype = ctypes.c_int
        lib.cutegen_workspace_size_plan.argtypes = [ctypes.c_int64] * 4 + [ctypes.c_int] * 3
        lib.cutegen_workspace_size_plan.restype = ctypes.c_size_t
    return lib
