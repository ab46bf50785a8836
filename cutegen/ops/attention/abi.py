"""The C ABI every attention kernel library exports (templates/attention/fmha_sm90.cu.j2).

Same conventions as GEMM's (``cutegen.abi``): status codes, a workspace query, ``cutegen_describe`` (JSON)
and ``cutegen_last_error`` (the message of the last non-zero status, naming the rule).

All pointers are device pointers. Q is (batch, heads_q, seqlen_q, head_dim), K and V are
(batch, heads_kv, seqlen_kv, head_dim), O is (batch, heads_q, seqlen_q, head_dim), each with the head dim
contiguous and the three other strides given in elements (``stride_x_b``, ``_h``, ``_s``): BSHD and BHSD
tensors are both just strides. ``LSE`` is a contiguous float32 (batch, heads_q, seqlen_q) log-sum-exp
(natural log, of the scaled scores), or NULL: the kernel then writes it into the workspace
(``cutegen_attention_workspace_size`` bytes; 0 is enough when LSE is given). ``scale`` multiplies Q K^T.
A grouped (GQA/MQA) kernel needs batch strides that are heads x head stride (BHSD has them) unless batch
is 1 (rule ATTN-ABI-GQA-STRIDES).

A varlen kernel (problem ``varlen``; templates/attention/fmha_varlen_sm90.cu.j2) exports
``cutegen_attention_varlen`` instead: packed Q and O (total_q, heads_q, D), K and V (total_k, heads_kv, D) with a
row (token) stride and a head stride each, ``cu_seqlens_q`` / ``cu_seqlens_k`` int32 device arrays of batch + 1
non-decreasing offsets from 0 (flash-attention's), ``max_seqlen_q`` / ``max_seqlen_k`` at least every length
(max_seqlen_q sizes the grid: rows of a longer sequence past it are not computed), ``total_q`` / ``total_k`` the
packed row counts (the tensor maps' row extents). A KV tile of a sequence may read up to tile_kv - 1 rows past the
sequence's end (the next sequence's, or zeros past total_k): they are masked, but must be finite (0 x NaN is NaN). LSE is float32 (heads_q, total_q) (flash-attention's varlen ``softmax_lse``), or NULL: not written, so
the workspace is 0 bytes. Causal is bottom-right aligned per sequence.

A backward kernel (templates/attention/fmha_bwd_sm90.cu.j2; ``cutegen.ops.attention.backward``) exports
``cutegen_attention_backward`` instead: Q, K, V, O, dO (inputs), LSE (the forward's float32 (batch, heads, seqlen_q),
contiguous), dQ, dK, dV (outputs), each 16-bit tensor with (b, h, s) strides in elements and a contiguous head dim;
MHA only (heads_q == heads_kv, rule ATTN-BWD-MHA: expand K and V and sum dK, dV over each group, as the PyTorch op
does); a 256-byte aligned workspace of ``cutegen_attention_backward_workspace_size(batch, heads, seqlen_q,
head_dim)`` bytes (sum_OdO, the padded LSE copy, the float32 dQ accumulator), never 0.

FP8 (e4m3) kernels export ``cutegen_attention_fp8`` instead of ``cutegen_attention`` (an addition: the other
symbols are the same). Its V argument is **V^T**: (batch, heads_kv, head_dim, seqlen_kv) with the KV sequence
contiguous, strides (``stride_vt_b``, ``_h``, ``_d``) in elements, ``stride_vt_d`` >= seqlen_kv and a multiple
of 16 (pad each row to 16 elements; rules ATTN-ABI-VT-ROW, TMA-GMEM-STRIDE-16B). ``descale_q``,
``descale_k``, ``descale_v`` are the per-tensor factors (real value = stored e4m3 x descale; positive and
finite, ATTN-ABI-DESCALE): the kernel uses scale x descale_q x descale_k on Q K^T and multiplies O by
descale_v in its epilogue. O is the kernel's 16-bit output type (bf16 or f16, its describe JSON's
``problem.dtype_out``).
"""
from __future__ import annotations

import ctypes

from ...abi import CANNOT_IMPLEMENT, INIT_FAILED, LAUNCH_FAILED, OK, STATUS, WORKSPACE_TOO_SMALL  # noqa: F401  (re-exported: the same codes)

C_DECLARATIONS = r"""
extern "C" int cutegen_attention(
    const void* Q, const void* K, const void* V, void* O, float* LSE,
    int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_kv, int64_t head_dim,
    int64_t stride_q_b, int64_t stride_q_h, int64_t stride_q_s,
    int64_t stride_k_b, int64_t stride_k_h, int64_t stride_k_s,
    int64_t stride_v_b, int64_t stride_v_h, int64_t stride_v_s,
    int64_t stride_o_b, int64_t stride_o_h, int64_t stride_o_s,
    float scale, void* workspace, size_t workspace_bytes, cudaStream_t stream);
extern "C" size_t cutegen_attention_workspace_size(int64_t batch, int64_t heads_q, int64_t seqlen_q);
extern "C" const char* cutegen_describe(void);
extern "C" const char* cutegen_last_error(void);
"""

FP8_C_DECLARATIONS = r"""
extern "C" int cutegen_attention_fp8(
    const void* Q, const void* K, const void* Vt, void* O, float* LSE,
    int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_kv, int64_t head_dim,
    int64_t stride_q_b, int64_t stride_q_h, int64_t stride_q_s,
    int64_t stride_k_b, int64_t stride_k_h, int64_t stride_k_s,
    int64_t stride_vt_b, int64_t stride_vt_h, int64_t stride_vt_d,
    int64_t stride_o_b, int64_t stride_o_h, int64_t stride_o_s,
    float scale, float descale_q, float descale_k, float descale_v,
    void* workspace, size_t workspace_bytes, cudaStream_t stream);
"""

BACKWARD_C_DECLARATIONS = r"""
extern "C" int cutegen_attention_backward(
    const void* Q, const void* K, const void* V, const void* O, const void* dO, const float* LSE,
    void* dQ, void* dK, void* dV,
    int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_kv, int64_t head_dim,
    int64_t stride_q_b, int64_t stride_q_h, int64_t stride_q_s,
    int64_t stride_k_b, int64_t stride_k_h, int64_t stride_k_s,
    int64_t stride_v_b, int64_t stride_v_h, int64_t stride_v_s,
    int64_t stride_o_b, int64_t stride_o_h, int64_t stride_o_s,
    int64_t stride_do_b, int64_t stride_do_h, int64_t stride_do_s,
    int64_t stride_dq_b, int64_t stride_dq_h, int64_t stride_dq_s,
    int64_t stride_dk_b, int64_t stride_dk_h, int64_t stride_dk_s,
    int64_t stride_dv_b, int64_t stride_dv_h, int64_t stride_dv_s,
    float scale, void* workspace, size_t workspace_bytes, cudaStream_t stream);
extern "C" size_t cutegen_attention_backward_workspace_size(int64_t batch, int64_t heads_q, int64_t seqlen_q,
                                                            int64_t head_dim);
extern "C" int cutegen_attention_backward_shared_memory_bytes(void);
"""

BACKWARD_ARGTYPES = (
    [ctypes.c_void_p] * 9            # Q, K, V, O, dO, LSE, dQ, dK, dV
    + [ctypes.c_int64] * 6           # batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim
    + [ctypes.c_int64] * 24          # strides (b, h, s) of Q, K, V, O, dO, dQ, dK, dV
    + [ctypes.c_float]               # scale
    + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]   # workspace, bytes, stream
)


ATTENTION_ARGTYPES = (
    [ctypes.c_void_p] * 5            # Q, K, V, O, LSE
    + [ctypes.c_int64] * 6           # batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim
    + [ctypes.c_int64] * 12          # strides (b, h, s) of Q, K, V, O
    + [ctypes.c_float]               # scale
    + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]   # workspace, bytes, stream
)


ATTENTION_FP8_ARGTYPES = (
    [ctypes.c_void_p] * 5            # Q, K, V^T, O, LSE
    + [ctypes.c_int64] * 6           # batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim
    + [ctypes.c_int64] * 12          # strides (b, h, s) of Q, K; (b, h, d) of V^T; (b, h, s) of O
    + [ctypes.c_float] * 4           # scale, descale_q, descale_k, descale_v
    + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]   # workspace, bytes, stream
)


VARLEN_C_DECLARATIONS = r"""
extern "C" int cutegen_attention_varlen(
    const void* Q, const void* K, const void* V, void* O, float* LSE, const int* cu_seqlens_q, const int* cu_seqlens_k,
    int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t max_seqlen_q, int64_t max_seqlen_k,
    int64_t total_q, int64_t total_k, int64_t head_dim,
    int64_t stride_q_t, int64_t stride_q_h, int64_t stride_k_t, int64_t stride_k_h,
    int64_t stride_v_t, int64_t stride_v_h, int64_t stride_o_t, int64_t stride_o_h,
    float scale, void* workspace, size_t workspace_bytes, cudaStream_t stream);
extern "C" size_t cutegen_attention_varlen_workspace_size(int64_t heads_q, int64_t total_q);
"""

VARLEN_ARGTYPES = (
    [ctypes.c_void_p] * 7            # Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k
    + [ctypes.c_int64] * 8           # batch, heads_q, heads_kv, max_seqlen_q, max_seqlen_k, total_q, total_k, head_dim
    + [ctypes.c_int64] * 8           # (row, head) strides of Q, K, V, O
    + [ctypes.c_float]               # scale
    + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]   # workspace, bytes, stream
)


def is_fp8_library(lib: ctypes.CDLL) -> bool:
    try:
        lib.cutegen_attention_fp8
    except AttributeError:
        return False
    return True


def is_varlen_library(lib: ctypes.CDLL) -> bool:
    try:
        lib.cutegen_attention_varlen
    except AttributeError:
        return False
    return True


def is_backward_library(lib: ctypes.CDLL) -> bool:
    try:
        lib.cutegen_attention_backward
    except AttributeError:
        return False
    return True


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the ABI's argument and result types on a loaded attention library (16-bit, FP8, varlen or backward)."""
    if is_backward_library(lib):
        lib.cutegen_attention_backward.argtypes = BACKWARD_ARGTYPES
        lib.cutegen_attention_backward.restype = ctypes.c_int
        lib.cutegen_attention_backward_workspace_size.argtypes = [ctypes.c_int64] * 4
        lib.cutegen_attention_backward_workspace_size.restype = ctypes.c_size_t
        lib.cutegen_attention_backward_shared_memory_bytes.argtypes = []
        lib.cutegen_attention_backward_shared_memory_bytes.restype = ctypes.c_int
    elif is_varlen_library(lib):
        lib.cutegen_attention_varlen.argtypes = VARLEN_ARGTYPES
        lib.cutegen_attention_varlen.restype = ctypes.c_int
        lib.cutegen_attention_varlen_workspace_size.argtypes = [ctypes.c_int64] * 2
        lib.cutegen_attention_varlen_workspace_size.restype = ctypes.c_size_t
    else:
        if is_fp8_library(lib):
            lib.cutegen_attention_fp8.argtypes = ATTENTION_FP8_ARGTYPES
            lib.cutegen_attention_fp8.restype = ctypes.c_int
        else:
            lib.cutegen_attention.argtypes = ATTENTION_ARGTYPES
            lib.cutegen_attention.restype = ctypes.c_int
        lib.cutegen_attention_workspace_size.argtypes = [ctypes.c_int64] * 3
        lib.cutegen_attention_workspace_size.restype = ctypes.c_size_t
    lib.cutegen_describe.argtypes = []
    lib.cutegen_describe.restype = ctypes.c_char_p
    lib.cutegen_last_error.argtypes = []
    lib.cutegen_last_error.restype = ctypes.c_char_p
    return lib


def is_attention_library(lib: ctypes.CDLL) -> bool:
    """A dense (``cutegen_attention``), varlen (``cutegen_attention_varlen``) or backward
    (``cutegen_attention_backward``) attention library."""
    try:
        lib.cutegen_attention
    except AttributeError:
        return is_fp8_library(lib) or is_varlen_library(lib) or is_backward_library(lib)
    return True
