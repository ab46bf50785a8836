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

The kernel runs behind ``torch.library.custom_op("cutegen::attention_fwd")``: opaque to ``torch.compile``
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

from . import abi

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
_LOCK = threading.Lock()
_LIBS: dict[str, tuple[ctypes.CDLL, dict]] = {}


def _library_path(path: str | os.PathLike) -> str:
    p = Path(path)
    if p.is_dir():
        p = p / "kernel.so"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no built attention kernel (cutegen build <kernel dir> first)")
    return str(p.resolve())


def load_library(path: str | os.PathLike) -> tuple[ctypes.CDLL, dict]:
    """The bound library and its ``cutegen_describe`` JSON, loaded once per path."""
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
    return got


def _fit_strides(t: torch.Tensor, group_merge: bool, heads: int, batch: int) -> torch.Tensor:
    """``t`` as the kernel takes it: contiguous head dim, 16-byte aligned base and strides, and (for a
    grouped kernel with batch > 1) batch stride == heads x head stride. A tensor that is not gets one copy."""
    ok = t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:3])
    if ok and group_merge and batch > 1:
        ok = t.stride(0) == heads * t.stride(1)
    return t if ok else t.contiguous()


@torch.library.custom_op("cutegen::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, library: str,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of the kernel library at ``library`` for q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D)."""
    lib, desc = load_library(library)
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    grouped = bool(desc["problem"].get("grouped"))
    q = _fit_strides(q, grouped, Hq, B)
    k = _fit_strides(k, grouped, Hkv, B)
    v = _fit_strides(v, grouped, Hkv, B)
    out = torch.empty_like(q)              # q's memory order (BSHD or BHSD), so O's strides match a BSHD caller
    if grouped and B > 1 and out.stride(0) != Hq * out.stride(1):
        out = torch.empty((B, Hq, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        status = lib.cutegen_attention(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
            B, Hq, Hkv, Sq, Skv, D, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            float(scale), None, 0, stream)
    if status != 0:
        raise RuntimeError(f"cutegen attention kernel {desc['hash']}: status {status} "
                           f"({abi.STATUS.get(status, '?')}): {lib.cutegen_last_error().decode()}")
    return out, lse


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

    def __init__(self, kernels: Iterable[str | os.PathLike]):
        self.entries = []
        for path in kernels:
            _, desc = load_library(path)
            self.entries.append((_library_path(path), desc))
        if not self.entries:
            raise ValueError("AttentionKernels: no kernel given")

    def pick(self, dtype: str, head_dim: int, causal: bool, grouped: bool, varlen: bool = False) -> str:
        """The library path of the first kernel computing this kind of problem; a grouped kernel also
        serves MHA calls (group 1), an MHA kernel only MHA; varlen calls need varlen kernels and dense calls
        dense ones."""
        for path, desc in self.entries:
            p = desc["problem"]
            if ((p["dtype"], p["head_dim"], p["causal"], bool(p.get("varlen", False))) == (dtype, head_dim, causal, varlen)
                    and (p["grouped"] or not grouped)):
                return path
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
                                     scale=None, enable_gqa=False):
        """``torch.nn.functional.scaled_dot_product_attention`` for the cases the kernels cover."""
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
        library = self.pick(dtype, D, bool(is_causal), Hkv != Hq)
        s = 1.0 / math.sqrt(D) if scale is None else float(scale)
        out, _ = torch.ops.cutegen.attention_fwd(query, key, value, library, s)
        return out

    __call__ = scaled_dot_product_attention
