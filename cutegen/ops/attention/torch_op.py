"""The PyTorch op: cutegen attention kernels with ``torch.nn.functional.scaled_dot_product_attention``'s signature.

    from cutegen.ops.attention.torch_op import AttentionKernels
    attn = AttentionKernels(["out/attn/kernel_a", "out/attn/kernel_b"])   # built kernel directories
    o = attn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

Covered: q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D) CUDA tensors of the kernel's dtype and head dim, any
strides with a contiguous head dim (BSHD and BHSD views alike), ``is_causal`` (top-left, as SDPA), ``scale``
(default 1/sqrt(D)), ``enable_gqa`` (Hq a multiple of Hkv). Not covered, and refused in one line naming the
rule: ``attn_mask`` (ATTN-OP-MASK), ``dropout_p`` != 0 (ATTN-OP-DROPOUT), a problem no loaded kernel computes
(ATTN-OP-NO-KERNEL). Variable-length batches (flash-attention's ``flash_attn_varlen_func``) have no entry
point: the renderer refuses them (ATTN-RENDER-VARLEN; cutegen/ops/attention/render.py says why).

A split-KV kernel (config ``kv_splits`` > 1, for decode-like calls: few queries, a long KV cache) takes its
float32 partials in a workspace the op allocates through torch (``cutegen_attention_workspace_size``), and Q
in an order that reads a group's query heads as rows (BHSD, or one query); other Q strides get one copy.

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
                raise ValueError(f"{key}: not an attention kernel (no cutegen_attention symbol)")
            abi.bind(lib)
            got = (lib, json.loads(lib.cutegen_describe().decode()))
            _LIBS[key] = got
        _BY_ARGUMENT[str(path)] = got
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
    split = int(desc["config"].get("kv_splits", 1)) > 1
    # a split-KV kernel folds (batch, KV head) into one mode whatever the group (templates/attention/fmha_sm90_splitkv.cu.j2)
    q = _fit_strides(q, grouped or split, Hq, B)
    k = _fit_strides(k, grouped or split, Hkv, B)
    v = _fit_strides(v, grouped or split, Hkv, B)
    if split and Hq != Hkv and not (Sq == 1 and q.stride(1) >= D) and q.stride(1) != Sq * q.stride(2):
        q = q.contiguous()                 # the group's query heads as rows of one problem (ATTN-ABI-SPLIT-PACK)
    out = torch.empty_like(q)              # q's memory order (BSHD or BHSD), so O's strides match a BSHD caller
    if grouped and not split and B > 1 and out.stride(0) != Hq * out.stride(1):
        out = torch.empty((B, Hq, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
    workspace, ws_bytes = None, 0
    if split:                              # float32 partial O and LSE per KV split (torch's allocator: graph-safe)
        ws_bytes = int(lib.cutegen_attention_workspace_size(B, Hq, Sq))
        workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        status = lib.cutegen_attention(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
            B, Hq, Hkv, Sq, Skv, D, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            float(scale), workspace.data_ptr() if workspace is not None else None, ws_bytes, stream)
    if status != 0:
        raise RuntimeError(f"cutegen attention kernel {desc['hash']}: status {status} "
                           f"({abi.STATUS.get(status, '?')}): {lib.cutegen_last_error().decode()}")
    return out, lse


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, library, scale):
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4, lambda: "cutegen::attention_fwd: 4-d q, k, v")
    B, Hq, Sq, D = q.shape
    return q.new_empty((B, Hq, Sq, v.shape[-1])), q.new_empty((B, Hq, Sq), dtype=torch.float32)


class AttentionKernels:
    """A set of built attention kernels; each call runs the one whose kernel key matches the inputs."""

    def __init__(self, kernels: Iterable[str | os.PathLike]):
        self.entries = []
        for path in kernels:
            _, desc = load_library(path)
            self.entries.append((_library_path(path), desc))
        if not self.entries:
            raise ValueError("AttentionKernels: no kernel given")

    def pick(self, dtype: str, head_dim: int, causal: bool, grouped: bool, decode_like: bool | None = None) -> str:
        """The library path of the first kernel computing this kind of problem; a grouped kernel also
        serves MHA calls (group 1), an MHA kernel only MHA. ``decode_like`` (``splitkv.is_decode_like``): among
        those, the first split-KV kernel (config kv_splits > 1) for a decode-like call and the first unsplit one
        otherwise, where one of that kind is loaded (a split kernel's workspace grows with the query rows)."""
        matching = []
        for path, desc in self.entries:
            p = desc["problem"]
            if (p["dtype"], p["head_dim"], p["causal"]) == (dtype, head_dim, causal) and (p["grouped"] or not grouped):
                matching.append((path, int(desc.get("config", {}).get("kv_splits", 1)) > 1))
        if matching:
            if decode_like is not None:
                for path, split in matching:
                    if split == decode_like:
                        return path
            return matching[0][0]
        raise ValueError(f"ATTN-OP-NO-KERNEL: no loaded kernel computes dtype {dtype}, head_dim {head_dim}, "
                         f"causal {causal}, grouped {grouped}")

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
        from .splitkv import is_decode_like
        library = self.pick(dtype, D, bool(is_causal), Hkv != Hq, is_decode_like(B, Hq, Hkv, Sq, bool(is_causal)))
        s = 1.0 / math.sqrt(D) if scale is None else float(scale)
        out, _ = torch.ops.cutegen.attention_fwd(query, key, value, library, s)
        return out

    __call__ = scaled_dot_product_attention
