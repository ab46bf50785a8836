"""Asking nvMatmulHeuristics (pip ``nvidia-matmul-heuristics``, the ``heuristics`` extra) for proposals.

Set up as CUTLASS 4.2's profiler sets it up (``cutlass_library/heuristics_provider.py``): the CUTLASS3
target, performance-model auto-tuning, the device kind's predefined GPU, a backend object, and
``DISABLE_FAST_ACC_FOR_FP8`` on, because cutegen's fp8 kernels keep CUTLASS's two-level accumulation
(with fast accumulation assumed, its fp8 picks spill here: ../shared/peers.md).
"""
from __future__ import annotations

import ctypes
import functools

from ..errors import CutegenError
from ..problem import GemmProblem
from .mapping import GPU_OF_KIND, Proposal, layout_name, precision

REQUIREMENT = "nvidia-matmul-heuristics==0.1.0.27 (pip install 'cutegen[heuristics]')"


def _library():
    try:
        import nvMatmulHeuristics
    except ImportError:
        raise CutegenError(f"nvMatmulHeuristics is not installed: {REQUIREMENT}") from None
    return nvMatmulHeuristics


@functools.lru_cache(maxsize=None)
def _interface(gpu: str):
    H = _library()
    iface = H.NvMatmulHeuristicsInterfaceEx(
        backend=H.NvMatmulHeuristicsTarget.CUTLASS3, flags=H.NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
        load_discovery_implicitly=True, gpu=H.NvMatmulHeuristicsNvidiaGpu[gpu])
    backend = iface.createBackend(H.NvMatmulHeuristicsTarget.CUTLASS3)
    off = ctypes.c_int(1)
    iface.setBackendValueProperty(backend, H.NvMatmulHeuristicsBackendProperty.DISABLE_FAST_ACC_FOR_FP8,
                                  ctypes.byref(off), ctypes.sizeof(off))
    return iface, backend


def gpu_for(device_kind: str) -> str:
    gpu = GPU_OF_KIND.get(device_kind)
    if gpu is None:
        raise CutegenError(f"device kind {device_kind!r} has no nvMatmulHeuristics GPU "
                           f"(known: {', '.join(sorted(GPU_OF_KIND))})")
    return gpu


def proposals(problem: GemmProblem, device_kind: str, count: int = 8) -> list[Proposal]:
    """nvMMH's top ``count`` for ``problem`` on ``device_kind``, best first."""
    H = _library()
    iface, backend = _interface(gpu_for(device_kind))
    lay = H.NvMatmulHeuristicsMatmulLayout[layout_name(problem)]
    mp = iface.makeNvMatmulHeuristicsProblem(problem.m, problem.n, problem.k, lay, problem.batch)
    out = []
    for rank, r in enumerate(iface.getEx(mp, count, backend, precision=precision(problem))):
        k = r["kernel"]
        out.append(Proposal(rank=rank, cta=(k.cta_tile_m, k.cta_tile_n, k.cta_tile_k),
                            cluster=(k.cluster_m, k.cluster_n), stages=int(k.stages), split_k=int(k.split_k),
                            swizzle=int(k.swizzle_factor), cta_order=int(k.cta_order),
                            warp=(k.warp_tile_m, k.warp_tile_n, k.warp_tile_k),
                            estimated_us=round(float(r["runtime"]) * 1e6, 3) if r.get("runtime") else None))
    return out
