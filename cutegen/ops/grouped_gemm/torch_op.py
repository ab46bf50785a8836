"""The PyTorch op of grouped GEMM: ``torch._grouped_mm``'s semantics for the case MoE layers use.

    import cutegen.ops.grouped_gemm.torch_op as gg
    k = gg.load("out/grouped/<kernel dir or kernel.so>")           # a built grouped kernel
    out = gg.grouped_mm(x, w.transpose(-2, -1), offs, kernel=k)     # x (T, K), w (E, N, K), offs int32 (E,)

``torch.ops.cutegen_grouped.grouped_mm(a, b, offs, kernel, scale_a=None, scale_b=None)``: ``a`` is
(T, K) with K contiguous; ``b`` is (E, K, N) with K contiguous (``w.transpose(-2, -1)`` of stacked
``W[E, N, K]``, as in ``torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)``); ``offs`` is int32 (E,),
the cumulative end row of each group, on the device. The result is (T, N) bf16; rows at or past
``offs[-1]`` are left unwritten (as ``torch._grouped_mm`` leaves them). ``grouped_mm_masked(a, b, counts,
kernel)`` is DeepGEMM's masked form: ``a`` (E, max_m, K), ``counts`` int32 (E,), result (E, max_m, N) with
each group's first ``counts[i]`` rows written. FP8 (e4m3) kernels with per-tensor scales take ``scale_a``
(float32, 1 element) and ``scale_b`` (float32, 1 or E elements); with DeepSeek-V3's block scales
(``block128``), ``scale_a`` is float32 (T, ceil(K/128)) (masked: (E, max_m, ceil(K/128))), one scale per row
and 128 of K, and ``scale_b`` float32 (E, ceil(N/128), ceil(K/128)), one per 128 x 128 block of each
expert's ``w[N, K]``. ``kernel`` is the handle ``load`` returns.

Both are ``torch.library`` custom ops with fake (meta) implementations: they trace under
``torch.compile`` and, since the group sizes are read on the device only, can be captured in a CUDA
graph. Bad arguments raise ``GroupedArgumentError``, one line naming the argument.
"""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from ...errors import CutegenError
from . import abi

LIBRARY = "cutegen_grouped"
_TORCH_DTYPES = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}


class GroupedArgumentError(CutegenError, ValueError):
    """An argument of the grouped op is out of what it computes (one line, naming the argument)."""


@dataclass
class GroupedKernel:
    """A loaded grouped kernel library: its handle, the problem class it computes and its config."""
    handle: int
    path: str
    lib: Any
    dtype: str
    scale: str
    layout: str
    config: dict
    kernel_hash: str

    @property
    def scaled(self) -> bool:
        return self.scale != "none"


_KERNELS: list[GroupedKernel] = []
_LOCK = threading.Lock()


def load(path: str | os.PathLike) -> int:
    """Load a built grouped kernel (its directory or its ``kernel.so``); returns its handle."""
    p = Path(path)
    so = p / "kernel.so" if p.is_dir() else p
    if not so.is_file():
        raise CutegenError(f"{so}: no such kernel library (build the kernel directory first)")
    lib = ctypes.CDLL(str(so.resolve()))
    if not abi.is_grouped(lib):
        raise CutegenError(f"{so}: not a grouped GEMM kernel (it exports no cutegen_grouped_gemm)")
    abi.bind(lib)
    desc = abi.describe(lib)
    prob = desc.get("problem", {})
    with _LOCK:
        k = GroupedKernel(len(_KERNELS), str(so), lib, prob.get("dtype"), prob.get("scale"), prob.get("layout"),
                          desc.get("config", {}), desc.get("hash", ""))
        _KERNELS.append(k)
    return k.handle


def kernel(handle: int) -> GroupedKernel:
    if isinstance(handle, bool) or not isinstance(handle, int) or not 0 <= handle < len(_KERNELS):
        raise GroupedArgumentError(f"kernel: {handle!r} is not a loaded grouped kernel handle "
                                   f"({len(_KERNELS)} loaded; see cutegen.ops.grouped_gemm.torch_op.load)")
    return _KERNELS[handle]


# --- argument checks (shared by the real and the fake implementation) --------------------------------
def _need(cond: bool, message: str) -> None:
    if not cond:
        raise GroupedArgumentError(message)


def _check_common(k: GroupedKernel, a, b, sizes, sizes_name: str, scale_a, scale_b, layout: str) -> None:
    _need(k.layout == layout, f"kernel: handle {k.handle} computes the {k.layout!r} layout, not {layout!r} "
                              f"(use {'grouped_mm' if k.layout == 'offs' else 'grouped_mm_masked'})")
    want = _TORCH_DTYPES[k.dtype]
    _need(a.dtype == want, f"a: dtype {a.dtype} is not the kernel's {want} ({k.dtype})")
    _need(b.dtype == want, f"b: dtype {b.dtype} is not the kernel's {want} ({k.dtype})")
    _need(b.dim() == 3, f"b: expected (E, K, N) stacked weights, got {b.dim()} dimensions")
    groups = b.shape[0]
    _need(sizes.dim() == 1 and sizes.shape[0] == groups,
          f"{sizes_name}: expected shape ({groups},) (one entry per group of b), got {tuple(sizes.shape)}")
    _need(sizes.dtype == torch.int32, f"{sizes_name}: dtype {sizes.dtype} is not torch.int32")
    _need(b.shape[1] == 0 or b.shape[2] == 0 or b.stride(1) == 1,
          f"b: K must be contiguous (stride(-2) == 1, b = w.transpose(-2, -1) of stacked w[E, N, K]); "
          f"strides {tuple(b.stride())}")
    _need(a.shape[-1] == b.shape[1], f"a: K={a.shape[-1]} differs from b's K={b.shape[1]}")
    _need(a.shape[-1] == 0 or a.stride(-1) == 1, f"a: K must be contiguous (stride(-1) == 1); strides {tuple(a.stride())}")
    if k.scale == "block128":
        _need(scale_a is not None and scale_b is not None,
              f"scale_a, scale_b: the kernel ({k.dtype}, scale {k.scale}) needs both block scales")
        kb, nb = -(-a.shape[-1] // 128), -(-b.shape[2] // 128)
        want_a = (a.shape[0], kb) if layout == "offs" else (a.shape[0], a.shape[1], kb)
        _need(scale_a.dtype == torch.float32 and tuple(scale_a.shape) == want_a and scale_a.is_contiguous(),
              f"scale_a: expected contiguous float32 {want_a} (1 x 128 blocks of a), got {scale_a.dtype} "
              f"{tuple(scale_a.shape)}")
        want_b = (groups, nb, kb)
        _need(scale_b.dtype == torch.float32 and tuple(scale_b.shape) == want_b and scale_b.is_contiguous(),
              f"scale_b: expected contiguous float32 {want_b} (128 x 128 blocks of each expert's w[N, K]), got "
              f"{scale_b.dtype} {tuple(scale_b.shape)}")
    elif k.scaled:
        _need(scale_a is not None and scale_b is not None,
              f"scale_a, scale_b: the kernel ({k.dtype}, scale {k.scale}) needs both per-tensor scales")
        _need(scale_a.dtype == torch.float32 and scale_a.numel() == 1, "scale_a: expected one float32")
        _need(scale_b.dtype == torch.float32 and scale_b.numel() in (1, groups),
              f"scale_b: expected float32 with 1 or {groups} elements, got {scale_b.dtype} with {scale_b.numel()}")
        _need(scale_a.is_contiguous() and scale_b.is_contiguous(), "scale_a, scale_b: must be contiguous")
    else:
        _need(scale_a is None and scale_b is None, f"scale_a, scale_b: the kernel ({k.dtype}) takes no scales")


def check_offs(handle: int, a, b, offs, scale_a=None, scale_b=None) -> GroupedKernel:
    k = kernel(handle)
    _need(a.dim() == 2, f"a: expected (T, K) tokens, got {a.dim()} dimensions (only the 2D x 3D case of "
                        f"torch._grouped_mm is computed)")
    _check_common(k, a, b, offs, "offs", scale_a, scale_b, "offs")
    return k


def check_masked(handle: int, a, b, counts, scale_a=None, scale_b=None) -> GroupedKernel:
    k = kernel(handle)
    _need(a.dim() == 3, f"a: expected (E, max_m, K), got {a.dim()} dimensions")
    _need(a.shape[0] == b.shape[0] if b.dim() == 3 else True,
          f"a: {a.shape[0]} groups differ from b's {b.shape[0] if b.dim() == 3 else '?'}")
    _check_common(k, a, b, counts, "counts", scale_a, scale_b, "masked")
    return k


def _check_devices(*tensors) -> None:
    dev = tensors[0].device
    for name, t in zip(("a", "b", "sizes", "scale_a", "scale_b"), tensors):
        if t is None:
            continue
        _need(t.device.type == "cuda", f"{name}: on {t.device}, the kernel runs on CUDA tensors")
        _need(t.device == dev, f"{name}: on {t.device}, a is on {dev}")


# --- the launch ----------------------------------------------------------------------------------------
def launch(k: GroupedKernel, a, b, out, sizes, scale_a=None, scale_b=None, *, workspace_shortfall: int = 0
           ) -> tuple[int, str]:
    """Run kernel ``k`` into ``out`` (no checks beyond the C ABI's own): the op's launch, and the GPU
    validation's, which passes an ``out`` filled with a sentinel to see that nothing else is written.
    ``workspace_shortfall`` bytes are taken off the workspace (a refusal probe). Returns (status, message)."""
    groups, kk, n = b.shape[0], b.shape[1], b.shape[2]
    if k.lib is None:
        raise GroupedArgumentError(f"kernel: handle {k.handle} is a stand-in with no library to launch")
    if k.layout == "offs":
        tokens, ldx, ldd, x_gs, d_gs = a.shape[0], a.stride(0), out.stride(0), 0, 0
    else:
        tokens, ldx, ldd, x_gs, d_gs = a.shape[1], a.stride(1), out.stride(1), a.stride(0), out.stride(0)
    with torch.cuda.device(a.device):
        need = k.lib.cutegen_grouped_workspace_size(groups)
        if need == 0:
            return abi.CANNOT_IMPLEMENT, f"GROUPED-ABI-GROUPS: {groups} groups is more than the kernel takes"
        # one allocation per call from torch's stream-ordered caching allocator (a graph's own pool while
        # capturing); the kernel re-initializes its parameters only when the address changes
        ws = torch.empty(need + abi.WORKSPACE_ALIGN, dtype=torch.uint8, device=a.device)
        base = ws.data_ptr()
        base += (-base) % abi.WORKSPACE_ALIGN
        stream = torch.cuda.current_stream(a.device).cuda_stream
        status = k.lib.cutegen_grouped_gemm(
            a.data_ptr(), b.data_ptr(), out.data_ptr(), sizes.data_ptr(),
            groups, tokens, n, kk, ldx, b.stride(2), ldd, x_gs, b.stride(0), d_gs,
            scale_a.data_ptr() if scale_a is not None else None,
            scale_b.data_ptr() if scale_b is not None else None,
            scale_b.numel() if scale_b is not None else 0,
            base, need - workspace_shortfall, stream)
    msg = k.lib.cutegen_last_error().decode(errors="replace") if status != abi.OK else ""
    return status, msg


def _launch_or_raise(k: GroupedKernel, a, b, out, sizes, scale_a, scale_b) -> None:
    status, msg = launch(k, a, b, out, sizes, scale_a, scale_b)
    if status != abi.OK:
        raise GroupedArgumentError(f"grouped kernel {k.kernel_hash} refused the call (status {status}: {msg})")


@torch.library.custom_op(f"{LIBRARY}::grouped_mm", mutates_args=())
def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, kernel: int,
                scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None) -> torch.Tensor:
    k = check_offs(kernel, a, b, offs, scale_a, scale_b)
    _check_devices(a, b, offs, scale_a, scale_b)
    out = torch.empty((a.shape[0], b.shape[2]), dtype=torch.bfloat16, device=a.device)
    if a.shape[0] == 0 or b.shape[2] == 0:
        return out
    _launch_or_raise(k, a, b, out, offs, scale_a, scale_b)
    return out


@_grouped_mm.register_fake
def _grouped_mm_fake(a, b, offs, kernel, scale_a=None, scale_b=None):
    check_offs(kernel, a, b, offs, scale_a, scale_b)
    return a.new_empty((a.shape[0], b.shape[2]), dtype=torch.bfloat16)


@torch.library.custom_op(f"{LIBRARY}::grouped_mm_masked", mutates_args=())
def _grouped_mm_masked(a: torch.Tensor, b: torch.Tensor, counts: torch.Tensor, kernel: int,
                       scale_a: Optional[torch.Tensor] = None,
                       scale_b: Optional[torch.Tensor] = None) -> torch.Tensor:
    k = check_masked(kernel, a, b, counts, scale_a, scale_b)
    _check_devices(a, b, counts, scale_a, scale_b)
    out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=torch.bfloat16, device=a.device)
    if a.shape[1] == 0 or b.shape[2] == 0:
        return out
    _launch_or_raise(k, a, b, out, counts, scale_a, scale_b)
    return out


@_grouped_mm_masked.register_fake
def _grouped_mm_masked_fake(a, b, counts, kernel, scale_a=None, scale_b=None):
    check_masked(kernel, a, b, counts, scale_a, scale_b)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]), dtype=torch.bfloat16)


def grouped_mm(a, b, offs, kernel: int, scale_a=None, scale_b=None):
    """``torch._grouped_mm(a, b, offs=offs)`` through the grouped kernel ``kernel`` (a ``load`` handle)."""
    return torch.ops.cutegen_grouped.grouped_mm(a, b, offs, kernel, scale_a, scale_b)


def grouped_mm_masked(a, b, counts, kernel: int, scale_a=None, scale_b=None):
    """The masked form: ``out[i, :counts[i]] = a[i, :counts[i]] @ b[i]``."""
    return torch.ops.cutegen_grouped.grouped_mm_masked(a, b, counts, kernel, scale_a, scale_b)


def register_stand_in(dtype: str = "bf16", layout: str = "offs", scale: str = "none") -> int:
    """A handle with no library behind it, for shape and argument checks on a machine without a GPU
    (the fake implementation and every check run; a launch through it is refused)."""
    with _LOCK:
        k = GroupedKernel(len(_KERNELS), "<stand-in>", None, dtype, scale, layout, {}, "stand-in")
        _KERNELS.append(k)
    return k.handle
