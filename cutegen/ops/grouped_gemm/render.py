"""Render a grouped GEMM (problem, config) into ``kernel.cu`` and ``manifest.json``.

The kernel is CUTLASS 4.2's SM90 ptr-array grouped GEMM (``GroupProblemShape<Shape<int,int,int>>``,
``KernelPtrArrayTmaWarpSpecializedCooperative`` / ``...Pingpong`` with the matching
``PtrArrayTmaWarpSpecialized*`` epilogue), its collectives built by CUTLASS's CollectiveBuilders from
the config's tile, cluster, stage count and schedule (as ``torch._grouped_mm`` and CUTLASS's example 57
build theirs), plus a prep kernel and the grouped C ABI (templates/grouped_gemm/). Deterministic: the
same input gives the same bytes. Imports neither egglog nor torch.
"""
from __future__ import annotations

import json
from typing import Any

from ... import manifest as manifest_mod
from ...errors import CutegenError, FieldError, IllegalConfig
from .config import GroupedGemmConfig
from .problem import MAX_GROUPS, GroupedGemmProblem

BACKEND = "cutlass_builder"
TEMPLATE = "grouped_gemm/kernel.cu.j2"
ABI = "grouped_gemm"       # cutegen_describe's "abi": which entry points the library exports

_KERNEL_SCHEDULES = {"ptr_cooperative": "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative",
                     "ptr_pingpong": "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong"}
# block128 FP8: the blockwise-scaling mainloop of the same schedule (sm90_mma_array_..._fp8_blockwise_scaling.hpp)
_BLOCKWISE_SCHEDULES = {k: v + "FP8Blockwise" for k, v in _KERNEL_SCHEDULES.items()}
# fp8_fast_accum: the FP8 mainloop without promotion (accumulates in the WGMMA accumulator alone)
_FAST_ACCUM_SCHEDULES = {k: v + "FP8FastAccum" for k, v in _KERNEL_SCHEDULES.items()}
_EPILOGUE_SCHEDULES = {"ptr_cooperative": "cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative",
                       "ptr_pingpong": "cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong"}
_ELEMENTS = {"bf16": "cutlass::bfloat16_t", "e4m3": "cutlass::float_e4m3_t"}
_RASTER = {"heuristic": "Heuristic", "along_m": "AlongM", "along_n": "AlongN"}

# What this renderer refuses of a configuration the rules may allow: "RULE-ID: reason" (block128's tile_k and
# weight-side tile are the rules GROUPED-BLOCK128-TILE-K and -TILE-N).
RENDER_RULES: dict[str, str] = {
    # nvcc 13.0 + CUTLASS 4.2 (2026-11-26, this machine): block128 swapped 256x16x128 ping-pong fails
    # fp8_accumulation.hpp:119 static_assert "Accumulator and scaleA must have same shape" (the weights' 128-row
    # scale blocks give 2 scales per 256-row tile); 128x16x128 ping-pong swapped compiles.
    "GROUPED-RENDER-BLOCK128-SWAP-TILE-M": "block128 with swap_ab needs tile_m == 128 (one weight scale block per "
                                           "tile along M; CUTLASS fp8_accumulation.hpp:119)",
}


def refusals(problem: GroupedGemmProblem, config: GroupedGemmConfig) -> list[str]:
    out = []
    if problem.scale == "block128" and config.swap_ab and config.tile_m != 128:
        out.append(f"GROUPED-RENDER-BLOCK128-SWAP-TILE-M: block128 swapped with tile_m={config.tile_m}: "
                   f"{RENDER_RULES['GROUPED-RENDER-BLOCK128-SWAP-TILE-M'].split(' needs ', 1)[1]}")
    return out


def describe(problem: GroupedGemmProblem, config: GroupedGemmConfig, khash: str) -> str:
    from ... import __version__
    out = {"abi": ABI, "backend": BACKEND, "config": config.to_dict(), "cutegen": __version__, "hash": khash,
           "problem": {"op": problem.op, **problem.kernel_key()}}
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def template_context(problem: GroupedGemmProblem, config: GroupedGemmConfig) -> dict[str, Any]:
    from ... import __version__
    khash = manifest_mod.kernel_hash(problem, config, BACKEND)
    return {
        "version": __version__, "kernel_hash": khash, "problem_class": problem.kernel_class_name,
        "config_name": config.short_name(), "describe_json": describe(problem, config, khash),
        "layout": problem.layout, "dtype": problem.dtype, "element": _ELEMENTS[problem.dtype],
        "scaled": problem.scale == "tensor", "blockwise": problem.scale == "block128", "swap_ab": config.swap_ab,
        # (M, N) granularity of the scale blocks of the kernel's A and B: X's rows are 1 x 128, W's 128 x 128
        "scale_granularity": [128, 1] if config.swap_ab else [1, 128],
        "tile": list(config.tile), "cluster": list(config.cluster[:2]), "stages": config.stages,
        "kernel_schedule": (_BLOCKWISE_SCHEDULES if problem.scale == "block128" else
                            _FAST_ACCUM_SCHEDULES if problem.fp8_fast_accum else _KERNEL_SCHEDULES)[config.schedule],
        "epilogue_schedule": _EPILOGUE_SCHEDULES[config.schedule],
        "raster_option": f"cutlass::gemm::kernel::detail::RasterOrderOptions::{_RASTER[config.raster]}",
        "max_groups": MAX_GROUPS,
    }


def _environment():
    from ...core.templates import environment
    return environment()


def render_source(problem: GroupedGemmProblem, config: GroupedGemmConfig) -> str:
    return _environment().get_template(TEMPLATE).render(**template_context(problem, config))


def render(problem: GroupedGemmProblem, config: GroupedGemmConfig, backend: str = BACKEND, *,
           cost: Any = None, toolchain: dict[str, Any] | None = None):
    """Check ``config`` against the operation's rules and this renderer's refusals, then render it."""
    from ...core import registry
    from ...render import RenderedKernel
    if not isinstance(problem, GroupedGemmProblem):
        raise FieldError("problem", f"expected a GroupedGemmProblem, got {type(problem).__name__}")
    if not isinstance(config, GroupedGemmConfig):
        raise FieldError("config", f"expected a GroupedGemmConfig, got {type(config).__name__}")
    if backend != BACKEND:
        raise FieldError("backend", f"{backend!r} is not a grouped GEMM backend ({BACKEND})")
    violations = [v for v in registry.check(problem, config) if getattr(v, "enforced", True)]
    if violations:
        raise IllegalConfig(violations)
    refused = refusals(problem, config)
    if refused:
        raise CutegenError("cannot render this grouped configuration: " + "; ".join(refused))
    source = render_source(problem, config)
    if toolchain is None:
        toolchain = {"cutlass": manifest_mod.cutlass_version(), "nvcc": manifest_mod.nvcc_version()}
    legality = {"legal": True, "violations": [],
                "rules": "the grouped_gemm operation's check (cutegen.core.registry.check)"
                         + "".join(f", {r}" for r in sorted(RENDER_RULES))}
    man = manifest_mod.build_manifest(problem=problem, config=config, backend=BACKEND, source=source,
                                      legality=legality, cost=cost, toolchain=toolchain)
    man["abi"] = ABI
    return RenderedKernel(problem, config, BACKEND, man["kernel_hash"],
                          {"kernel.cu": source, "manifest.json": manifest_mod.dumps(man)}, man)
