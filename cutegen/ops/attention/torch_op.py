"""The PyTorch op: cutegen attention kernels with ``torch.nn.functional.scaled_dot_product_attention``'s signature.

    from cutegen.ops.attention.torch_op import AttentionKernels
    attn = AttentionKernels(["out/attn/kernel_a", "out/attn/kernel_b"])   # built kernel directories
    o = attn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

Covered: q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D) CUDA tensors of the kernel's dtype and head dim, any
strides with a contiguous head dim (BSHD and BHSD views alike), ``is_causal`` (top-left, as SDPA), ``scale``
(default 1/sqrt(D)), ``enable_gqa`` (Hq a multiple of Hkv). Not covered, and refused in one line naming the
rule: ``attn_mask`` (ATTN-OP-MASK), ``dropout_p`` != 0 (ATTN-OP-DROPOUT), a problem no loaded kernel computes
(ATTN-OP-NO-KERNEL).

Variable-length batches: ``AttentionKernels.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=False)`` with flash-attention's packed layout and semantics:
q (total_q, Hq, D), k and v (total_k, Hkv, D), int32 offsets of batch + 1 entries, causal **bottom-right** aligned
per sequence (query i sees key j iff j <= i + len_k - len_q); a row with no visible key gives O = 0 and LSE = +inf.
It runs on varlen kernels (problem ``varlen``; templates/attention/varlen/) behind
``torch.library.custom_op("cutegen::attention_varlen_fwd")``.

FP8 (e4m3, ``torch.float8_e4m3fn`` q, k, v): ``descale_q``, ``descale_k``, ``descale_v`` (floats, default 1.0;
real value = stored x descale, FlashAttention-3's convention; a one-element tensor is read with ``float()``,
which synchronizes) and O in the kernel's 16-bit output type (bf16 unless the kernel was rendered with
``dtype_out`` f16). The kernel reads V transposed (V^T, the KV sequence contiguous: 8-bit WGMMA takes B
K-major only): pass ``v_transposed=True`` with ``value`` of shape (B, Hkv, D, Skv) (any strides with the
sequence contiguous and a 16-element multiple row stride), or an SDPA-layout ``value`` (B, Hkv, Skv, D)
that the op copies into V^T (``transpose_v``: one read and one write of V per call, counted in the op's time).

A split-KV kernel (config ``kv_splits`` > 1, for decode-like calls: few queries, a long KV cache) takes its
float32 partials in a workspace the op allocates through torch (``cutegen_attention_workspace_size``), and Q
in an order that reads a group's query heads as rows (BHSD, or one query); other Q strides get one copy.

Backward (autograd): give ``AttentionKernels`` backward kernel directories too (``cutegen.ops.attention.backward``,
bf16/f16, head dims 32/64/128, causal or not). A call whose q, k or v requires grad (with grad mode on) then runs
``cutegen::attention_fwd_train``: the same forward kernel, keeping O and the LSE, whose registered autograd formula
runs ``cutegen::attention_bwd`` (the backward kernel: dQ, dK, dV). GQA/MQA: the backward kernel is MHA, so the op
expands K and V to the query heads for it and sums dK and dV over each group (in float32). Without a matching
backward kernel, ``backward()`` raises ATTN-OP-NO-BACKWARD. Dropout, masks and a gradient of the LSE are not
covered.

Eager calls of ``AttentionKernels.scaled_dot_product_attention`` on plain tensors (no tracing, no dispatch or
torch-function mode, no autograd) skip the custom op's dispatcher and reuse a call plan per input signature (shapes,
strides, dtypes, device, scale): about 20 us of host time per call on the H200's host instead of 40-65 through the
custom op; set ``AttentionKernels.eager_fast_path = False`` to always go through the custom op. The split-KV workspace
is kept per (device, stream) between eager calls (never under CUDA-graph capture, where torch's graph pool allocates).

The kernel runs behind ``torch.library.custom_op("cutegen::attention_fwd")`` (FP8: ``cutegen::attention_fwd_fp8``): opaque to ``torch.compile``
(its fake implementation gives the shapes) and capturable in CUDA graphs (it launches on the current stream,
allocates only through torch, and never synchronizes). The library's dynamic shared-memory attribute is set
on its first call: call once before capturing.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import threading
from pathlib import Path
from typing import Iterable

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from . import abi
from .splitkv import is_decode_like

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "e4m3": torch.float8_e4m3fn}
OUT_TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
VT_ROW_ALIGN = 16                  # elements: a V^T row (the TMA stride over the head dim) is 16 bytes of e4m3
_LOCK = threading.Lock()
_LIBS: dict[str, tuple[ctypes.CDLL, dict]] = {}


def _library_path(path: str | os.PathLike) -> str:
    p = Path(path)
    if p.is_dir():
        p = p / "kernel.so"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no built attention kernel (cutegen build <kernel dir> first)")
    return str(p.resolve())


_BY_ARGUMENT: dict[str, tuple[ctypes.CDLL, dict]] = {}      # the op's hot path: no stat/realpath per call


def load_library(path: str | os.PathLike) -> tuple[ctypes.CDLL, dict]:
    """The bound library and its ``cutegen_describe`` JSON, loaded once per path (a path given before is answered
    without touching the file system: resolving it cost ~25 us per op call)."""
    got = _BY_ARGUMENT.get(str(path))
    if got is not None:
        return got
    key = _library_path(path)
    with _LOCK:
        got = _LIBS.get(key)
        if got is None:
            lib = ctypes.CDLL(key)
            if not abi.is_attention_library(lib):
                raise ValueError(f"{key}: not an attention kernel (no cutegen_attention or cutegen_attention_varlen symbol)")
            abi.bind(lib)
            got = (lib, json.loads(lib.cutegen_describe().decode()))
            _LIBS[key] = got
        _BY_ARGUMENT[str(path)] = got
    return got


def _fit_strides(t: torch.Tensor, group_merge: bool, heads: int, batch: int) -> torch.Tensor:
    """``t`` as the kernel takes it: contiguous head dim, 16-byte aligned base and strides, and (for a
    grouped kernel with batch > 1) batch stride == heads x head stride. A tensor that is not gets one copy
    (a new allocation: torch's are 512-byte aligned)."""
    s0, s1, s2, s3 = t.stride()
    e = t.element_size()
    ok = s3 == 1 and t.data_ptr() % 16 == 0 and (s0 * e) % 16 == 0 and (s1 * e) % 16 == 0 and (s2 * e) % 16 == 0
    if ok and group_merge and batch > 1:
        ok = s0 == heads * s1
    # clone, not contiguous(): a contiguous tensor at a misaligned base would come back as itself (the kernel's E18)
    return t if ok else t.clone(memory_format=torch.contiguous_format)


class _Kernel:
    """What the op's hot path needs of one loaded library, read from its describe JSON once: the bound entry
    points, whether it folds (batch, KV head) into one mode (grouped or split-KV) and whether it is split."""
    __slots__ = ("lib", "call", "workspace_size", "hash", "grouped", "split", "merge")

    def __init__(self, lib: ctypes.CDLL, desc: dict):
        self.lib = lib
        self.call = lib.cutegen_attention
        self.workspace_size = lib.cutegen_attention_workspace_size
        self.hash = desc["hash"]
        self.grouped = bool(desc["problem"].get("grouped"))
        self.split = int(desc["config"].get("kv_splits", 1)) > 1
        # a split-KV kernel folds (batch, KV head) into one mode whatever the group (templates/attention/fmha_sm90_splitkv.cu.j2)
        self.merge = self.grouped or self.split


_KERNELS: dict[str, _Kernel] = {}


def _kernel(library: str) -> _Kernel:
    got = _KERNELS.get(library)
    if got is None:
        got = _KERNELS[library] = _Kernel(*load_library(library))
    return got


# Split-KV workspaces kept between eager calls, one per (device, stream): a decode loop calls the op with the same
# shapes every step, and an allocation through torch costs a few microseconds of host time per call. Work on one
# stream is ordered, so reusing its workspace is safe; a larger call replaces it (torch's allocator frees the old
# block in stream order). Under CUDA-graph capture the op allocates through torch as before (the graph's pool owns
# the block for the graph's lifetime; a cached block could be replaced while the graph still points at it).
_WORKSPACES: dict[tuple[int, int], torch.Tensor] = {}


def _workspace(nbytes: int, device: torch.device, stream: int) -> torch.Tensor:
    if torch.cuda.is_current_stream_capturing():
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    key = (device.index if device.index is not None else torch.cuda.current_device(), stream)
    ws = _WORKSPACES.get(key)
    if ws is None or ws.numel() < nbytes:
        ws = _WORKSPACES[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return ws


def _run(kern: _Kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
         want_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One call of the kernel: (O, LSE or None). ``want_lse`` False lets a split-KV kernel skip the LSE (its
    combine writes it only when given a pointer); an unsplit kernel keeps its LSE (without one it needs a workspace)."""
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    merge, split = kern.merge, kern.split
    q = _fit_strides(q, merge, Hq, B)
    k = _fit_strides(k, merge, Hkv, B)
    v = _fit_strides(v, merge, Hkv, B)
    sq = q.stride()
    if split and Hq != Hkv and not (Sq == 1 and sq[1] >= D) and sq[1] != Sq * sq[2]:
        q = q.contiguous()                 # the group's query heads as rows of one problem (ATTN-ABI-SPLIT-PACK)
        sq = q.stride()
    out = torch.empty_like(q)              # q's memory order (BSHD or BHSD), so O's strides match a BSHD caller
    if kern.grouped and not split and B > 1 and out.stride(0) != Hq * out.stride(1):
        out = torch.empty((B, Hq, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device) if (want_lse or not split) else None
    device = q.device
    index = device.index
    if index is None:
        index = torch.cuda.current_device()
    stream = torch._C._cuda_getCurrentRawStream(index)
    ws_ptr, ws_bytes = None, 0
    if split:                              # float32 partial O and LSE per KV split
        ws_bytes = int(kern.workspace_size(B, Hq, Sq))
        ws_ptr = _workspace(ws_bytes, device, stream).data_ptr()
    sk, sv, so = k.stride(), v.stride(), out.stride()
    args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr() if lse is not None else None,
            B, Hq, Hkv, Sq, Skv, D, sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], so[0], so[1], so[2],
            float(scale), ws_ptr, ws_bytes, stream)
    if torch._C._cuda_getDevice() == index:
        status = kern.call(*args)
    else:
        with torch.cuda.device(index):
            status = kern.call(*args)
    if status != 0:
        raise RuntimeError(f"cutegen attention kernel {kern.hash}: status {status} "
                           f"({abi.STATUS.get(status, '?')}): {kern.lib.cutegen_last_error().decode()}")
    return out, lse


class _CallPlan:
    """An eager op call with everything that depends only on the inputs' shapes, strides, dtypes and device worked
    out once (the SDPA checks, the kernel pick, the stride fits, the ABI's integer arguments): per call it checks
    the three base addresses' alignment, allocates O (and the unsplit kernel's LSE), and calls the kernel. Made only
    where ``_run`` would pass q, k and v unchanged (no copy)."""
    __slots__ = ("kern", "index", "device", "dims", "out_shape", "out_contiguous", "ws_bytes", "tail_args")

    @classmethod
    def make(cls, kern: _Kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> "_CallPlan | None":
        B, Hq, Sq, D = q.shape
        Hkv, Skv = k.shape[1], k.shape[2]
        if (_fit_strides(q, kern.merge, Hq, B) is not q or _fit_strides(k, kern.merge, Hkv, B) is not k
                or _fit_strides(v, kern.merge, Hkv, B) is not v):
            return None
        sq = q.stride()
        if kern.split and Hq != Hkv and not (Sq == 1 and sq[1] >= D) and sq[1] != Sq * sq[2]:
            return None
        self = cls()
        self.kern = kern
        self.device = q.device
        self.index = q.device.index if q.device.index is not None else torch.cuda.current_device()
        probe = torch.empty_like(q, device="meta")
        self.out_contiguous = kern.grouped and not kern.split and B > 1 and probe.stride(0) != Hq * probe.stride(1)
        self.out_shape = (B, Hq, Sq, D)
        so = (Hq * Sq * D, Sq * D, D) if self.out_contiguous else probe.stride()[:3]
        sk, sv = k.stride(), v.stride()
        self.dims = (B, Hq, Hkv, Sq, Skv, D, sq[0], sq[1], sq[2], sk[0], sk[1], sk[2], sv[0], sv[1], sv[2], *so,
                     float(scale))
        self.ws_bytes = int(kern.workspace_size(B, Hq, Sq)) if kern.split else 0
        return self

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        if (qp | kp | vp) & 15:
            return None                    # a misaligned base: the full path copies it
        kern = self.kern
        if self.out_contiguous:
            out = torch.empty(self.out_shape, dtype=q.dtype, device=self.device)
        else:
            out = torch.empty_like(q)
        index = self.index
        stream = torch._C._cuda_getCurrentRawStream(index)
        if kern.split:
            lse_ptr = None
            ws_ptr = _workspace(self.ws_bytes, self.device, stream).data_ptr()
        else:
            lse_ptr = torch.empty(self.out_shape[:3], dtype=torch.float32, device=self.device).data_ptr()
            ws_ptr = None
        if torch._C._cuda_getDevice() == index:
            status = kern.call(qp, kp, vp, out.data_ptr(), lse_ptr, *self.dims, ws_ptr, self.ws_bytes, stream)
        else:
            with torch.cuda.device(index):
                status = kern.call(qp, kp, vp, out.data_ptr(), lse_ptr, *self.dims, ws_ptr, self.ws_bytes, stream)
        if status != 0:
            raise RuntimeError(f"cutegen attention kernel {kern.hash}: status {status} "
                               f"({abi.STATUS.get(status, '?')}): {kern.lib.cutegen_last_error().decode()}")
        return out


PLANS_MAX = 256                            # call plans kept per AttentionKernels (cleared when full)


@torch.library.custom_op("cutegen::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, library: str,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of the kernel library at ``library`` for q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D)."""
    return _forward(q, k, v, library, scale)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, library: str,
             scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _run(_kernel(library), q, k, v, scale, want_lse=True)


def _eager_fast_path(*tensors: torch.Tensor) -> bool:
    """Whether the op may call its kernel directly instead of through ``torch.ops.cutegen.attention_fwd``: plain
    tensors, no tracing (torch.compile, export, fake or functional tensors), no dispatch or torch-function mode,
    no autograd to record. The dispatcher's round trip through the custom op costs tens of microseconds of host
    time per call, as much as a decode step's kernel; everything a trace needs still goes through the custom op."""
    if torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled():
        return False
    if _get_current_dispatch_mode() is not None:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    return True


@torch.library.custom_op("cutegen::attention_fwd_train", mutates_args=())
def attention_fwd_train(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, library: str, backward_library: str,
                        scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``attention_fwd`` that autograd can differentiate: (O, LSE) of the forward library; its backward runs the
    backward kernel library at ``backward_library`` (``attention_bwd``)."""
    return _forward(q, k, v, library, scale)


@attention_fwd_train.register_fake
def _attention_fwd_train_fake(q, k, v, library, backward_library, scale):
    return _attention_fwd_fake(q, k, v, library, scale)


def _fit_backward(t: torch.Tensor) -> torch.Tensor:
    """A (B, H, S, D) tensor as the backward kernel takes it: BHSD- or BSHD-dense (no stride-0 or overlapping
    modes: a gradient of a sum arrives expanded), 16-byte aligned base and strides; otherwise one contiguous copy
    (a new allocation: 16-byte aligned)."""
    dense = t.is_contiguous() or t.transpose(1, 2).is_contiguous()
    ok = dense and t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:3])
    # clone, not contiguous(): a contiguous tensor at a misaligned base would come back as itself
    return t if ok else t.clone(memory_format=torch.contiguous_format)


@torch.library.custom_op("cutegen::attention_bwd", mutates_args=())
def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, library: str, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV), contiguous, of the backward kernel library at ``library`` for the forward q (B, Hq, Sq, D),
    k, v (B, Hkv, Skv, D), its O and float32 LSE (B, Hq, Sq), and dO. GQA: K and V expanded for the (MHA) kernel,
    dK and dV summed over each group of query heads in float32."""
    lib, desc = load_library(library)
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    q, k, v, out, dout = (_fit_backward(t) for t in (q, k, v, out, dout))
    lse = lse.contiguous()
    dq = torch.empty((B, Hq, Sq, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, Hq, Skv, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, Hq, Skv, D), dtype=q.dtype, device=q.device)
    ws_bytes = int(lib.cutegen_attention_backward_workspace_size(B, Hq, Sq, D))
    workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device)   # the caching allocator: 512-byte aligned
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        status = lib.cutegen_attention_backward(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), dout.data_ptr(), lse.data_ptr(),
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), B, Hq, Hq, Sq, Skv, D,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3], *dout.stride()[:3],
            *dq.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], float(scale), workspace.data_ptr(), ws_bytes, stream)
    if status != 0:
        raise RuntimeError(f"cutegen attention backward kernel {desc['hash']}: status {status} "
                           f"({abi.STATUS.get(status, '?')}): {lib.cutegen_last_error().decode()}")
    if group > 1:
        dk = dk.view(B, Hkv, group, Skv, D).float().sum(2).to(q.dtype)
        dv = dv.view(B, Hkv, group, Skv, D).float().sum(2).to(q.dtype)
    return dq, dk, dv


@attention_bwd.register_fake
def _attention_bwd_fake(dout, q, k, v, out, lse, library, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _train_setup(ctx, inputs, output):
    q, k, v, library, backward_library, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.backward_library = backward_library
    ctx.scale = scale


def _train_backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.cutegen.attention_bwd(dout, q, k, v, out, lse, ctx.backward_library, ctx.scale)
    return dq, dk, dv, None, None, None


attention_fwd_train.register_autograd(_train_backward, setup_context=_train_setup)


def _no_backward(ctx, dout, dlse):
    raise RuntimeError("ATTN-OP-NO-BACKWARD: this call ran a forward kernel with no backward kernel loaded for its "
                       "dtype, head dim and mask; give AttentionKernels a backward kernel directory "
                       "(cutegen.ops.attention.backward) to differentiate it")


attention_fwd.register_autograd(_no_backward, setup_context=lambda ctx, inputs, output: None)


def _vt_strides(shape) -> tuple[int, int, int, int]:
    B, H, S, D = shape
    padded = -(-S // VT_ROW_ALIGN) * VT_ROW_ALIGN
    return (H * D * padded, D * padded, padded, 1)


@torch.library.custom_op("cutegen::attention_transpose_v", mutates_args=())
def _transpose_v_op(v: torch.Tensor) -> torch.Tensor:
    B, H, S, D = v.shape
    vt = torch.empty_strided((B, H, D, S), _vt_strides(v.shape), dtype=v.dtype, device=v.device)
    # One byte-granular strided copy: 0.37 ms for 64 MiB on the H200 (363 GB/s). A two-pass transpose over 32-bit
    # words was slower there (0.49 ms, run 2); the real fix is the kernel transposing V in shared memory (FA3).
    vt.copy_(v.transpose(2, 3))
    return vt


@_transpose_v_op.register_fake
def _transpose_v_fake(v):
    B, H, S, D = v.shape
    return v.new_empty_strided((B, H, D, S), _vt_strides(v.shape))


def transpose_v(v: torch.Tensor) -> torch.Tensor:
    """V (B, H, S, D) -> V^T (B, H, D, S) with its rows (the KV sequence, contiguous) padded to 16 elements: the
    FP8 kernel's V layout. One read and one write of V. A custom op of its own (``cutegen::attention_transpose_v``):
    torch.compile keeps it opaque (Inductor cannot lower this float8 copy: it promotes Bool with Float8)."""
    return torch.ops.cutegen.attention_transpose_v(v)


def _fit_vt(vt: torch.Tensor, group_merge: bool, heads: int, batch: int) -> torch.Tensor:
    """V^T as the FP8 kernel takes it: the sequence contiguous, 16-byte aligned base and strides (rows padded),
    and for a grouped kernel with batch > 1, batch stride == heads x head stride; otherwise one padded copy."""
    ok = vt.stride(-1) == 1 and vt.data_ptr() % 16 == 0 and all(s % VT_ROW_ALIGN == 0 for s in vt.stride()[:3])
    if ok and group_merge and batch > 1:
        ok = vt.stride(0) == heads * vt.stride(1)
    return vt if ok else transpose_v(vt.transpose(2, 3))


@torch.library.custom_op("cutegen::attention_fwd_fp8", mutates_args=())
def attention_fwd_fp8(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, library: str, scale: float,
                      descale_q: float, descale_k: float, descale_v: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of the FP8 kernel library at ``library`` for e4m3 q (B, Hq, Sq, D), k (B, Hkv, Skv, D) and
    vt = V^T (B, Hkv, D, Skv); O in the kernel's 16-bit output type."""
    lib, desc = load_library(library)
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    grouped = bool(desc["problem"].get("grouped"))
    q = _fit_strides(q, grouped, Hq, B)
    k = _fit_strides(k, grouped, Hkv, B)
    vt = _fit_vt(vt, grouped, Hkv, B)
    out_dtype = OUT_TORCH_DTYPES[desc["problem"].get("dtype_out", "bf16")]
    # O contiguous (B, Hq, Sq, D), as the fake implementation says (torch.compile plans with the fake's strides)
    out = torch.empty((B, Hq, Sq, D), dtype=out_dtype, device=q.device)
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        status = lib.cutegen_attention_fp8(
            q.data_ptr(), k.data_ptr(), vt.data_ptr(), out.data_ptr(), lse.data_ptr(),
            B, Hq, Hkv, Sq, Skv, D, *q.stride()[:3], *k.stride()[:3], *vt.stride()[:3], *out.stride()[:3],
            float(scale), float(descale_q), float(descale_k), float(descale_v), None, 0, stream)
    if status != 0:
        raise RuntimeError(f"cutegen attention kernel {desc['hash']}: status {status} "
                           f"({abi.STATUS.get(status, '?')}): {lib.cutegen_last_error().decode()}")
    return out, lse


@attention_fwd_fp8.register_fake
def _attention_fwd_fp8_fake(q, k, vt, library, scale, descale_q, descale_k, descale_v):
    torch._check(q.dim() == 4 and k.dim() == 4 and vt.dim() == 4, lambda: "cutegen::attention_fwd_fp8: 4-d q, k, vt")
    _, desc = load_library(library)
    B, Hq, Sq, D = q.shape
    out_dtype = OUT_TORCH_DTYPES[desc["problem"].get("dtype_out", "bf16")]
    return q.new_empty((B, Hq, Sq, vt.shape[2]), dtype=out_dtype), q.new_empty((B, Hq, Sq), dtype=torch.float32)


def _descale(name: str, value) -> float:
    if value is None:
        return 1.0
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"ATTN-OP-DESCALE: {name} must be one per-tensor factor, got a tensor of shape "
                             f"{tuple(value.shape)}")
        value = float(value)
    value = float(value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"ATTN-OP-DESCALE: {name} {value} is not a positive finite number")
    return value


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, library, scale):
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4, lambda: "cutegen::attention_fwd: 4-d q, k, v")
    B, Hq, Sq, D = q.shape
    return q.new_empty((B, Hq, Sq, v.shape[-1])), q.new_empty((B, Hq, Sq), dtype=torch.float32)


def check_varlen_offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, total_q: int,
                         total_k: int) -> None:
    """The varlen contract, checked on the host (a device-to-host copy when the offsets live on the GPU): offsets
    start at 0, never decrease, stay within the packed rows, and no length exceeds its max. One-line ValueError."""
    for name, cu, mx, total in (("cu_seqlens_q", cu_seqlens_q, max_seqlen_q, total_q),
                                ("cu_seqlens_k", cu_seqlens_k, max_seqlen_k, total_k)):
        c = cu.detach().to("cpu", torch.int64)
        lens = c[1:] - c[:-1]
        if int(c[0]) != 0:
            raise ValueError(f"ATTN-OP-VARLEN-OFFSETS: {name}[0] is {int(c[0])}, not 0")
        if bool((lens < 0).any()):
            b = int((lens < 0).nonzero()[0])
            raise ValueError(f"ATTN-OP-VARLEN-OFFSETS: {name} decreases at sequence {b} ({int(c[b])} -> {int(c[b + 1])})")
        if int(c[-1]) > total:
            raise ValueError(f"ATTN-OP-VARLEN-OFFSETS: {name}[-1] = {int(c[-1])} is past the {total} packed rows")
        if lens.numel() and int(lens.max()) > mx:
            b = int(lens.argmax())
            raise ValueError(f"ATTN-OP-VARLEN-MAX: sequence {b} has length {int(lens[b])} > max_seqlen "
                             f"{'q' if name.endswith('q') else 'k'} {mx}")


def _fit_packed(t: torch.Tensor) -> torch.Tensor:
    """A packed (total, heads, D) tensor as the varlen kernel takes it: contiguous head dim, 16-byte aligned base and
    row/head strides; otherwise one contiguous copy."""
    ok = t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(x * t.element_size() % 16 == 0 for x in t.stride()[:2])
    return t if ok else t.contiguous()


@torch.library.custom_op("cutegen::attention_varlen_fwd", mutates_args=())
def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, library: str,
                         scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(O (total_q, Hq, D), LSE (Hq, total_q) float32) of the varlen kernel library at ``library``."""
    lib, desc = load_library(library)
    total_q, Hq, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    B = cu_seqlens_q.shape[0] - 1
    q, k, v = _fit_packed(q), _fit_packed(k), _fit_packed(v)
    out = torch.empty((total_q, Hq, D), dtype=q.dtype, device=q.device)
    if total_k == 0 or max_seqlen_k == 0:
        # every sequence has no keys: the kernel's tensor maps need a K row, and the answer needs no kernel
        out.zero_()
        return out, torch.full((Hq, total_q), float("inf"), dtype=torch.float32, device=q.device)
    lse = torch.empty((Hq, total_q), dtype=torch.float32, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        status = lib.cutegen_attention_varlen(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
            cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr(), B, Hq, Hkv, int(max_seqlen_q), int(max_seqlen_k),
            total_q, total_k, D, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            out.stride(0), out.stride(1), float(scale), None, 0, stream)
    if status != 0:
        raise RuntimeError(f"cutegen attention kernel {desc['hash']}: status {status} "
                           f"({abi.STATUS.get(status, '?')}): {lib.cutegen_last_error().decode()}")
    return out, lse


@attention_varlen_fwd.register_fake
def _attention_varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, library, scale):
    torch._check(q.dim() == 3 and k.dim() == 3 and v.dim() == 3, lambda: "cutegen::attention_varlen_fwd: 3-d q, k, v")
    return q.new_empty((q.shape[0], q.shape[1], v.shape[-1])), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


class AttentionKernels:
    """A set of built attention kernels; each call runs the one whose kernel key matches the inputs."""

    eager_fast_path = True     # eager calls skip the custom op's dispatch (``_eager_fast_path``); False: always through it

    def __init__(self, kernels: Iterable[str | os.PathLike]):
        self.entries = []
        self.backward_entries = []          # backward kernels (describe "pass": "backward")
        for path in kernels:
            _, desc = load_library(path)
            entry = (_library_path(path), desc)
            (self.backward_entries if desc.get("pass") == "backward" else self.entries).append(entry)
        if not self.entries:
            raise ValueError("AttentionKernels: no forward kernel given")

    def pick_backward(self, dtype: str, head_dim: int, causal: bool) -> str | None:
        """The library path of the first backward kernel for (dtype, head dim, mask), or None. Backward kernels are
        MHA; grouped calls go through the op's K/V expansion."""
        for path, desc in getattr(self, "backward_entries", ()):
            p = desc["problem"]
            if (p["dtype"], p["head_dim"], p["causal"]) == (dtype, head_dim, causal) and not p.get("varlen"):
                return path
        return None

    def pick(self, dtype: str, head_dim: int, causal: bool, grouped: bool, decode_like: bool | None = None,
             varlen: bool = False) -> str:
        """The library path of the first kernel computing this kind of problem; a grouped kernel also
        serves MHA calls (group 1), an MHA kernel only MHA; varlen calls need varlen kernels and dense calls
        dense ones. ``decode_like`` (``splitkv.is_decode_like``): among those, the first split-KV kernel (config
        kv_splits > 1) for a decode-like call and the first unsplit one otherwise, where one of that kind is
        loaded (a split kernel's workspace grows with the query rows)."""
        matching = []
        for path, desc in self.entries:
            p = desc["problem"]
            if ((p["dtype"], p["head_dim"], p["causal"], bool(p.get("varlen", False))) == (dtype, head_dim, causal, varlen)
                    and (p["grouped"] or not grouped)):
                matching.append((path, int(desc.get("config", {}).get("kv_splits", 1)) > 1))
        if matching:
            if decode_like is not None:
                for path, split in matching:
                    if split == decode_like:
                        return path
            return matching[0][0]
        raise ValueError(f"ATTN-OP-NO-KERNEL: no loaded kernel computes dtype {dtype}, head_dim {head_dim}, "
                         f"causal {causal}, grouped {grouped}{', varlen' if varlen else ''}")

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, return_lse=False, check_offsets=None):
        """flash-attention's ``flash_attn_varlen_func`` for the cases the kernels cover: q (total_q, Hq, D), k and v
        (total_k, Hkv, D), ``cu_seqlens_q`` / ``cu_seqlens_k`` int32 (batch + 1) offsets, causal bottom-right per
        sequence. Returns O (total_q, Hq, D), and with ``return_lse`` also LSE (Hq, total_q) float32 (+inf for a row
        with no visible key). ``check_offsets`` (default: only when the offsets are CPU tensors, which are then
        copied to the GPU) checks the offsets against the totals and maxima on the host (ATTN-OP-VARLEN-OFFSETS,
        ATTN-OP-VARLEN-MAX); unchecked device offsets that break the contract give wrong rows (and an O row written
        outside a sequence). K and V rows in [cu_seqlens_k[-1], total_k) and between sequences may be read by a
        sequence's last KV tile: masked, but they must be finite."""
        if dropout_p != 0.0:
            raise ValueError(f"ATTN-OP-DROPOUT: dropout_p {dropout_p} is not supported (forward inference only)")
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise ValueError("ATTN-OP-SHAPE: q, k and v must be packed 3-d (total tokens, heads, head dim)")
        total_q, Hq, D = q.shape
        if k.shape != v.shape:
            raise ValueError(f"ATTN-OP-SHAPE: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
        if k.shape[2] != D:
            raise ValueError(f"ATTN-OP-HEAD-DIM: head dims q {D}, k {k.shape[2]}, v {v.shape[2]} must be equal")
        Hkv = k.shape[1]
        if Hq % Hkv:
            raise ValueError(f"ATTN-OP-GQA: {Hkv} KV heads do not divide {Hq} query heads")
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
                raise ValueError(f"ATTN-OP-VARLEN-OFFSETS: {name} must be a 1-d int32 tensor of batch + 1 offsets")
        if cu_seqlens_q.numel() != cu_seqlens_k.numel():
            raise ValueError(f"ATTN-OP-VARLEN-OFFSETS: cu_seqlens_q has {cu_seqlens_q.numel()} entries, "
                             f"cu_seqlens_k {cu_seqlens_k.numel()} (both batch + 1)")
        for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ATTN-OP-VARLEN-MAX: {name} must be a non-negative int, got {value!r}")
        dtype = next((name for name, t in TORCH_DTYPES.items() if t == q.dtype), None)
        if dtype is None or k.dtype != q.dtype or v.dtype != q.dtype:
            raise ValueError(f"ATTN-OP-DTYPE: q, k, v must all be bfloat16 or float16, got {q.dtype}, {k.dtype}, {v.dtype}")
        on_host = cu_seqlens_q.device.type == "cpu" or cu_seqlens_k.device.type == "cpu"
        if check_offsets or (check_offsets is None and on_host):
            check_varlen_offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, total_q, k.shape[0])
        cu_seqlens_q = cu_seqlens_q.to(q.device).contiguous()
        cu_seqlens_k = cu_seqlens_k.to(q.device).contiguous()
        library = self.pick(dtype, D, bool(causal), Hkv != Hq, varlen=True)
        s = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
        out, lse = torch.ops.cutegen.attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                                         int(max_seqlen_k), library, s)
        return (out, lse) if return_lse else out

    def scaled_dot_product_attention(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False, *, descale_q=None, descale_k=None, descale_v=None,
                                     v_transposed=False):
        """``torch.nn.functional.scaled_dot_product_attention`` for the cases the kernels cover; e4m3 inputs take
        the descale factors and ``v_transposed`` (``value`` given as V^T, (B, Hkv, D, Skv))."""
        fast = (self.eager_fast_path and attn_mask is None and not dropout_p and not v_transposed and descale_q is None
                and descale_k is None and descale_v is None and _eager_fast_path(query, key, value))
        if fast:
            signature = (query.shape, query.stride(), key.shape, key.stride(), value.shape, value.stride(), query.dtype,
                         key.dtype, value.dtype, query.device, is_causal, enable_gqa, scale)
            plans = self.__dict__.setdefault("_plans", {})      # signature -> _CallPlan (entries fixed after __init__)
            plan = plans.get(signature)
            if plan is not None:
                out = plan(query, key, value)
                if out is not None:
                    return out
        if query.dtype == torch.float8_e4m3fn:
            return self._fp8(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                             descale_q, descale_k, descale_v, bool(v_transposed))
        if v_transposed or descale_q is not None or descale_k is not None or descale_v is not None:
            raise ValueError("ATTN-OP-FP8-ARGS: descale factors and v_transposed are for float8_e4m3fn inputs")
        if attn_mask is not None:
            raise ValueError("ATTN-OP-MASK: attn_mask is not supported (is_causal is)")
        if dropout_p != 0.0:
            raise ValueError(f"ATTN-OP-DROPOUT: dropout_p {dropout_p} is not supported (forward inference only)")
        if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
            raise ValueError("ATTN-OP-SHAPE: query, key and value must be 4-d (batch, heads, sequence, head dim)")
        B, Hq, Sq, D = query.shape
        if key.shape[0] != B or value.shape[0] != B or key.shape[1] != value.shape[1] or key.shape[2] != value.shape[2]:
            raise ValueError(f"ATTN-OP-SHAPE: key {tuple(key.shape)} and value {tuple(value.shape)} do not match "
                             f"query {tuple(query.shape)}")
        if key.shape[3] != D or value.shape[3] != D:
            raise ValueError(f"ATTN-OP-HEAD-DIM: head dims q {D}, k {key.shape[3]}, v {value.shape[3]} must be equal")
        Hkv = key.shape[1]
        if Hkv != Hq and not enable_gqa:
            raise ValueError(f"ATTN-OP-GQA: {Hq} query heads and {Hkv} KV heads need enable_gqa=True (as SDPA)")
        if Hq % Hkv:
            raise ValueError(f"ATTN-OP-GQA: {Hkv} KV heads do not divide {Hq} query heads")
        dtype = next((k for k, v in TORCH_DTYPES.items() if v == query.dtype), None)
        if dtype is None or key.dtype != query.dtype or value.dtype != query.dtype:
            raise ValueError(f"ATTN-OP-DTYPE: q, k, v must all be bfloat16 or float16, got "
                             f"{query.dtype}, {key.dtype}, {value.dtype}")
        library = self.pick(dtype, D, bool(is_causal), Hkv != Hq, is_decode_like(B, Hq, Hkv, Sq, bool(is_causal)))
        s = 1.0 / math.sqrt(D) if scale is None else float(scale)
        if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
            backward_library = self.pick_backward(dtype, D, bool(is_causal))
            if backward_library is not None:
                out, _ = torch.ops.cutegen.attention_fwd_train(query, key, value, library, backward_library, s)
                return out
        if fast:
            kern = _kernel(library)
            plan = _CallPlan.make(kern, query, key, value, s)
            if plan is not None:
                if len(plans) >= PLANS_MAX:
                    plans.clear()
                plans[signature] = plan
            return _run(kern, query, key, value, s, want_lse=False)[0]
        out, _ = torch.ops.cutegen.attention_fwd(query, key, value, library, s)
        return out

    def _fp8(self, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, descale_q, descale_k,
             descale_v, v_transposed):
        if attn_mask is not None:
            raise ValueError("ATTN-OP-MASK: attn_mask is not supported (is_causal is)")
        if dropout_p != 0.0:
            raise ValueError(f"ATTN-OP-DROPOUT: dropout_p {dropout_p} is not supported (forward inference only)")
        if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
            raise ValueError("ATTN-OP-SHAPE: query, key and value must be 4-d")
        if key.dtype != query.dtype or value.dtype != query.dtype:
            raise ValueError(f"ATTN-OP-DTYPE: q, k, v must all be float8_e4m3fn, got {query.dtype}, {key.dtype}, "
                             f"{value.dtype}")
        B, Hq, Sq, D = query.shape
        Hkv, Skv = key.shape[1], key.shape[2]
        v_shape = (B, Hkv, D, Skv) if v_transposed else (B, Hkv, Skv, D)
        if key.shape[0] != B or key.shape[3] != D or tuple(value.shape) != v_shape:
            raise ValueError(f"ATTN-OP-SHAPE: key {tuple(key.shape)} and value {tuple(value.shape)} do not match query "
                             f"{tuple(query.shape)} (value {'V^T ' if v_transposed else ''}expected {v_shape})")
        if Hkv != Hq and not enable_gqa:
            raise ValueError(f"ATTN-OP-GQA: {Hq} query heads and {Hkv} KV heads need enable_gqa=True (as SDPA)")
        if Hq % Hkv:
            raise ValueError(f"ATTN-OP-GQA: {Hkv} KV heads do not divide {Hq} query heads")
        dq, dk, dv = (_descale(n, v) for n, v in (("descale_q", descale_q), ("descale_k", descale_k),
                                                  ("descale_v", descale_v)))
        library = self.pick("e4m3", D, bool(is_causal), Hkv != Hq)
        vt = value if v_transposed else transpose_v(value)
        s = 1.0 / math.sqrt(D) if scale is None else float(scale)
        out, _ = torch.ops.cutegen.attention_fwd_fp8(query, key, vt, library, s, dq, dk, dv)
        return out

    __call__ = scaled_dot_product_attention
