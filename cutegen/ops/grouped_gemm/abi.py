"""The C ABI every grouped GEMM kernel library exports (templates/grouped_gemm/abi.inc.j2).

All pointers are device pointers. X holds the tokens, W the stacked expert weights, D the output
(bf16), as ``GroupedGemmProblem`` describes them; ``sizes`` is int32[groups] on the device: the
cumulative end rows (layout ``offs``) or the valid rows of each group (layout ``masked``). ``tokens`` is
T, the rows of X and D (offs), or max_m, the rows of each group's slice (masked). Row strides (``ld*``)
and group strides are in elements; X's and D's group strides are read for the masked layout only.
A launch reads the sizes on the device only (no host synchronization; CUDA-graph capturable).
"""
from __future__ import annotations

import ctypes
import json
import re

C_DECLARATIONS = r"""
extern "C" int cutegen_grouped_gemm(
    const void* X, const void* W, void* D, const int32_t* sizes,
    int64_t groups, int64_t tokens, int64_t N, int64_t K,
    int64_t ldx, int64_t ldw, int64_t ldd,
    int64_t x_group_stride, int64_t w_group_stride, int64_t d_group_stride,
    const float* scale_x, const float* scale_w, int64_t scale_w_count,
    void* workspace, size_t workspace_bytes, cudaStream_t stream);
extern "C" size_t cutegen_grouped_workspace_size(int64_t groups);   /* 0: a group count the kernel refuses */
extern "C" size_t cutegen_grouped_smem_bytes(void);  /* the CTA's shared memory (no GPU needed) */
extern "C" const char* cutegen_describe(void);    /* JSON: {"abi": "grouped_gemm", "problem":..., "config":..., "hash":...} */
extern "C" const char* cutegen_last_error(void);  /* message of the last non-zero status, naming the rule ID */
"""

EXPORTED_SYMBOLS = tuple(re.findall(r'extern "C" [\w\s*]*?\b(cutegen_\w+)\(', C_DECLARATIONS))

# Status codes: the GEMM ABI's (cutegen/abi.py).
from ...abi import CANNOT_IMPLEMENT, INIT_FAILED, LAUNCH_FAILED, OK, STATUS, WORKSPACE_TOO_SMALL  # noqa: E402,F401

# The refusals of the C ABI, each with the rule it enforces (the ID starts the message of
# cutegen_last_error). Workspace alignment: the template's kRegionAlign.
ABI_RULES = {
    "GROUPED-ABI-GROUPS": "1 <= groups <= MAX_GROUPS (cutegen/ops/grouped_gemm/problem.py)",
    "GROUPED-ABI-EXTENT": "tokens, N and K fit GroupProblemShape's int extents (< 2^31)",
    "GROUPED-ABI-NULL": "X, W, D and the sizes are non-NULL device pointers",
    "GROUPED-ABI-SCALE": "scales exactly when the kernel scales (e4m3, scale 'tensor'): scale_x 1 float, scale_w 1 or E",
    "GROUPED-ABI-PTR-ALIGN": "X, W and D are 16-byte aligned (TMA descriptor base)",
    "GROUPED-ABI-ROW-ALIGN": "K (X, W) and N (D) rows are multiples of 16 bytes, so every group's base is 16-byte aligned",
    "GROUPED-ABI-LD": "row strides >= the row, multiples of 16 bytes and below 2^40 bytes (TMA strides)",
    "GROUPED-ABI-GROUP-STRIDE": "group strides are multiples of 16 bytes and at least one group (no overlap)",
    "GROUPED-ABI-WORKSPACE-ALIGN": "the workspace is 256-byte aligned",
    "GROUPED-ABI-CAN-IMPLEMENT": "CUTLASS's can_implement accepts the grouped arguments",
}
WORKSPACE_ALIGN = 256

GROUPED_ARGTYPES = (
    [ctypes.c_void_p] * 4
    + [ctypes.c_int64] * 4
    + [ctypes.c_int64] * 3
    + [ctypes.c_int64] * 3
    + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
)


def is_grouped(lib: ctypes.CDLL) -> bool:
    try:
        lib.cutegen_grouped_gemm
    except AttributeError:
        return False
    return True


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.cutegen_grouped_gemm.argtypes = GROUPED_ARGTYPES
    lib.cutegen_grouped_gemm.restype = ctypes.c_int
    lib.cutegen_grouped_workspace_size.argtypes = [ctypes.c_int64]
    lib.cutegen_grouped_workspace_size.restype = ctypes.c_size_t
    lib.cutegen_grouped_smem_bytes.argtypes = []
    lib.cutegen_grouped_smem_bytes.restype = ctypes.c_size_t
    lib.cutegen_describe.argtypes = []
    lib.cutegen_describe.restype = ctypes.c_char_p
    lib.cutegen_last_error.argtypes = []
    lib.cutegen_last_error.restype = ctypes.c_char_p
    return lib


def describe(lib: ctypes.CDLL) -> dict:
    return json.loads(lib.cutegen_describe().decode())
