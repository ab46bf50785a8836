"""render: a (problem, legal config) pair becomes kernel source and its manifest.

Two C++ backends share one ABI (cutegen/abi.py):

``cutlass``          the configuration spelled out in explicit CuTe/CUTLASS types
                     (templates/cutlass_sm90_gemm.cu.j2); nothing in the mainloop is re-decided.
``cutlass_builder``  the same problem through CUTLASS's CollectiveBuilders for a given tile, cluster,
                     stage count and schedule (templates/cutlass_builder_gemm.cu.j2): the
                     "hand-written CUTLASS" baseline and a cross-check of the explicit rendering.

A configuration is completed (``cutegen.collective_builder.complete``) and checked against every
legality rule (``cutegen.legality.check_config``) before anything is rendered; a broken rule
raises ``IllegalConfig`` naming it. Rendering is deterministic: the same input gives the same
bytes. This module imports neither egglog nor the search, so it runs on the GPU machine.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import manifest as manifest_mod
from ._atomic import atomic_directory, atomic_write, leftovers  # noqa: F401  (atomic_write: also dsl.py)
from .config import KernelConfig
from .dtypes import DTYPES
from .errors import CutegenError, FieldError, IllegalConfig
from .problem import GemmProblem
from . import split_k_reduce as _split_k_reduce
from . import stage_tma as _stage_tma
from . import staging as _staging
from .swap_ab import kernel_problem
from .render_common import (  # noqa: F401  (re-exported: render.complete_config etc. stay importable)
    _cstring, _describe, check_legality, complete_config, legality_summary,
)

BACKENDS = ("cutlass", "cutlass_builder", "dsl")   # dsl: cutegen/dsl.py (CuTe DSL, issue 6)
TEMPLATES = {"cutlass": "cutlass_sm90_gemm.cu.j2", "cutlass_builder": "cutlass_builder_gemm.cu.j2"}
SMEM_CAPACITY = 232448  # bytes a block may opt into on sm_90 (rulebook D02)

# WGMMA N values CuTe declares without CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (mma_traits_sm90_gmma.hpp).
_BASE_MMA_N = frozenset((8, 16, 32, 64, 96, 128, 192, 256))

_KERNEL_SCHEDULES = {
    "warp_specialized": "cutlass::gemm::KernelTmaWarpSpecialized",
    "cooperative": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    "pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
}
_CP_ASYNC_SCHEDULES = {
    "warp_specialized": "cutlass::gemm::KernelCpAsyncWarpSpecialized",
    "cooperative": "cutlass::gemm::KernelCpAsyncWarpSpecializedCooperative",
    "pingpong": "cutlass::gemm::KernelCpAsyncWarpSpecializedPingpong",
}
_EPILOGUE_SCHEDULES = {
    "tma_warp_specialized": "cutlass::epilogue::TmaWarpSpecialized",
    "tma_warp_specialized_cooperative": "cutlass::epilogue::TmaWarpSpecializedCooperative",
    "no_smem": "cutlass::epilogue::NoSmemWarpSpecialized",
}
_TILE_SCHEDULERS = {"persistent": "cutlass::gemm::PersistentScheduler",
                    "stream_k": "cutlass::gemm::StreamKScheduler"}
_RASTER = {"heuristic": "Heuristic", "along_m": "AlongM", "along_n": "AlongN"}
_TMA = {"tma": "cute::SM90_TMA_LOAD", "tma_multicast": "cute::SM90_TMA_LOAD_MULTICAST"}
_MMA_TYPE = {"bf16": "BF16", "f16": "F16", "tf32": "TF32", "e4m3": "E4M3", "e5m2": "E5M2"}
_ACTIVATIONS = {"relu": "cutlass::epilogue::thread::ReLu", "gelu": "cutlass::epilogue::thread::GELU"}


# What the manifest of a fast-accumulation FP8 kernel says about its arithmetic (only such kernels
# carry the key, so every other manifest keeps its bytes).
FP8_FAST_ACCUM_NUMERICS = {
    "accumulation": "fp8_fast_accum",
    "text": ("FP8 fast accumulation (CUTLASS ...FP8FastAccum schedule, MainloopSm90TmaGmmaWarpSpecialized): "
             "every WGMMA accumulates into the one f32 accumulator in the tensor core's reduced-precision "
             "FP8 accumulation, with no periodic promotion into a separate f32 copy; like "
             "torch._scaled_mm(use_fast_accum=True). The error grows with K; validated to the FP8 tolerance "
             "(cutegen.runner.tolerance)."),
}


@dataclass(frozen=True)
class RenderedKernel:
    """The files of one kernel, ready to write: ``kernel.cu`` and ``manifest.json``."""
    problem: GemmProblem
    config: KernelConfig
    backend: str
    kernel_hash: str
    files: dict[str, str] = field(repr=False)
    manifest: dict[str, Any] = field(repr=False)

    @property
    def source(self) -> str:
        return self.files["kernel.cu"]

    def write(self, directory: str | os.PathLike) -> list[Path]:
        """Write the kernel directory whole (``atomic_directory``: a concurrent writer of the same
        directory cannot mix its files with these; a kill leaves the old directory or the new one);
        returns the paths whose bytes changed. Other files there (a built kernel.so) are kept."""
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise CutegenError(f"{directory}: exists and is not a directory (the kernel directory)")
        changed = self.differences(directory)
        if not changed and not leftovers(directory):
            return []
        with atomic_directory(directory) as new:
            changed = self.differences(new)         # under the lock: what this write changes
            for path in changed:
                (new / path.name).write_bytes(self.files[path.name].encode())
        return [directory / p.name for p in changed]

    def differences(self, directory: str | os.PathLike) -> list[Path]:
        """Files under ``directory`` that are missing or whose bytes differ from this rendering."""
        directory = Path(directory)
        out = []
        for name in sorted(self.files):
            path = directory / name
            if not path.exists() or path.read_bytes() != self.files[name].encode():
                out.append(path)
        return out


# --- the template context --------------------------------------------------------------------------
def epilogue_tile(problem: GemmProblem, config: KernelConfig) -> tuple[int, int]:
    """The epilogue tile, as CUTLASS 4.2's EpilogueTileAuto computes it when the config leaves it unset.

    sm90_builder.inl sm90_compute_tile_shape_or_override (rulebook E19): cooperative epilogues take
    (min(128, Tile_M), gcd(min(32, Tile_N), Tile_N)); the others (min(64, Tile_M),
    gcd(min(N_perf, Tile_N), Tile_N)) with N_perf = 64 for an 8-bit D and Tile_N % 64 == 0, else 32.
    """
    if config.epilogue_tile is not None:
        return tuple(config.epilogue_tile)  # type: ignore[return-value]
    tm, tn, _ = config.tile_shape
    if config.epilogue_schedule == "tma_warp_specialized_cooperative":
        return (min(128, tm), math.gcd(min(32, tn), tn))
    n_perf = 64 if DTYPES[problem.dtype_d].bits == 8 and tn % 64 == 0 else 32
    return (min(64, tm), math.gcd(min(n_perf, tn), tn))


def epilogue_stages(problem: GemmProblem, config: KernelConfig, epi: tuple[int, int]) -> tuple[int, int]:
    """(StagesC, StagesD) of sm90_get_tma_dispatch_policy for this tile (sm90_builder.inl, E19)."""
    tm, tn, _ = config.tile_shape
    epi_tiles = (tm // epi[0]) * (tn // epi[1])
    bits_c = 0 if problem.dtype_c == "void" else DTYPES[problem.dtype_c].bits
    bits_d = DTYPES[problem.dtype_d].bits
    reuse_smem = bits_c == bits_d and bits_d > 8
    stages_d = min(epi_tiles, 2)
    stages_c = max(min(epi_tiles, 4), stages_d + 1) if reuse_smem else min(epi_tiles, 4)
    return stages_c, stages_d


def _layout_tag(layout: str) -> str:
    return "cutlass::layout::RowMajor" if layout == "row" else "cutlass::layout::ColumnMajor"


def _element(dtype_name: str) -> str:
    # tf32 operands are f32 in memory; CUTLASS's mainloop has TMA round them to tf32 when ElementA
    # is float (sm90_mma_tma_gmma_ss_warpspecialized.hpp ConvertF32toTF32A, rulebook A04).
    return "float" if dtype_name == "tf32" else DTYPES[dtype_name].cutlass


def _mma_atom(problem: GemmProblem, config: KernelConfig) -> tuple[str, bool]:
    m, n, k = config.mma_instruction
    ta, tb = _MMA_TYPE[problem.dtype_a], _MMA_TYPE[problem.dtype_b]
    name = f"cute::SM90_{m}x{n}x{k}_F32{ta}{tb}_SS"
    if problem.dtype_a in ("bf16", "f16"):
        major_a = "cute::GMMA::Major::K" if config.smem_layout_a.major == "K" else "cute::GMMA::Major::MN"
        major_b = "cute::GMMA::Major::K" if config.smem_layout_b.major == "K" else "cute::GMMA::Major::MN"
        return f"{name}<{major_a}, {major_b}>", True
    # tf32 and fp8 WGMMA have no transpose operands: both K-major (rulebook B07).
    return f"{name}_TN<>", False


def _smem_atom(atom, element_mma: str) -> str:
    return f"cute::GMMA::Layout_{atom.major}_{atom.swizzle}_Atom<{element_mma}>"


def _fusion(problem: GemmProblem, element_c: str) -> tuple[str, str, str]:
    """(fusion operation type, comment, bias element) for the problem's epilogue."""
    d = "ElementD"
    c = "ElementC"
    act = problem.activation
    if problem.bias:
        # Bias has D's type (abi.py). Alignment 1 keeps the bias loads scalar and predicated, so any M
        # and any element-aligned bias pointer are safe; per-row loads are not contiguous per thread
        # in the WGMMA accumulator layout anyway.
        bias = "ElementD"
        fn = _ACTIVATIONS.get(act, "cutlass::epilogue::thread::Identity")
        op = (f"cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<{fn}, {d}, ElementCompute, {bias}, {c}, "
              f"ElementCompute, 1>")
        text = f"D = {act if act != 'none' else 'identity'}(alpha * acc + beta * C + bias[m]), bias per row (M)"
        return op, text, bias
    if act != "none":
        op = f"cutlass::epilogue::fusion::LinCombEltAct<{_ACTIVATIONS[act]}, {d}, ElementCompute, {c}, ElementCompute>"
        return op, f"D = {act}(alpha * acc + beta * C)", ""
    return (f"cutlass::epilogue::fusion::LinearCombination<{d}, ElementCompute, {c}, ElementCompute>",
            "D = alpha * acc + beta * C", "")


def template_context(problem: GemmProblem, config: KernelConfig, backend: str) -> dict[str, Any]:
    """Everything the templates need, derived from (problem, config) alone.

    The hash, the name and ``cutegen_describe`` belong to the caller's problem; every CUTLASS type
    belongs to the problem the kernel computes, which is the transposed one for a swap-AB kernel."""
    from . import __version__
    khash = manifest_mod.kernel_hash(problem, config, backend)
    describe_json = _describe(problem, config, backend, khash)
    problem_name = problem.kernel_class_name
    caller = problem
    problem = kernel_problem(problem, config)
    element_c = "void" if problem.dtype_c == "void" else DTYPES[problem.dtype_c].cutlass
    fusion_op, fusion_comment, bias_element = _fusion(problem, element_c)
    ctx: dict[str, Any] = {
        "version": __version__,
        "kernel_hash": khash,
        "problem_name": problem_name,
        "config_name": config.short_name(),
        "config_lines": [f"{k} = {json.dumps(v)}" for k, v in sorted(config.to_dict().items())],
        "dtype_a": problem.dtype_a, "dtype_b": problem.dtype_b,
        "dtype_c": problem.dtype_c, "dtype_d": problem.dtype_d,
        "element_a": _element(problem.dtype_a), "element_b": _element(problem.dtype_b),
        "element_a_mma": DTYPES[problem.dtype_a].cutlass, "element_b_mma": DTYPES[problem.dtype_b].cutlass,
        "element_c": element_c, "element_d": DTYPES[problem.dtype_d].cutlass,
        "c_is_void": problem.dtype_c == "void",
        "layout_tag_a": _layout_tag(problem.layout_a), "layout_tag_b": _layout_tag(problem.layout_b),
        "layout_tag_c": _layout_tag(problem.layout_c),
        "a_k_major": problem.a_k_major, "b_k_major": problem.b_k_major,
        "alignment_a": problem.alignment_a, "alignment_b": problem.alignment_b,
        "alignment_c": problem.alignment_c,
        "tile": list(config.tile_shape), "cluster": list(config.cluster_shape),
        "kernel_schedule": _KERNEL_SCHEDULES[config.mainloop_schedule]
        + ("FP8FastAccum" if problem.fp8_fast_accum else ""),
        "epilogue_schedule": _EPILOGUE_SCHEDULES[config.epilogue_schedule],
        "epilogue_is_tma": config.epilogue_schedule != "no_smem",
        "tile_scheduler": _TILE_SCHEDULERS[config.tile_scheduler],
        # stream-K kernels export the run-time launch plan (cutegen/launch_plan.py) through
        # cutegen_gemm_plan / cutegen_workspace_size_plan; other kernels keep the four-function ABI
        "stream_k": config.tile_scheduler == "stream_k",
        "raster_order": _RASTER[config.raster_order],
        "raster_swizzle": config.raster_swizzle,
        "fusion_op": fusion_op, "fusion_comment": fusion_comment,
        "has_bias": problem.bias, "bias_element": bias_element,
        "smem_capacity": SMEM_CAPACITY,
        "describe_json": describe_json,
        "swap_ab": config.swap_ab,
        # operand staging (cutegen/staging.py): the caller's A / B is copied into the workspace first
        "stage_a": config.stage_a, "stage_b": config.stage_b,
        "staged_ops": [(op, op.upper()) for op in ("a", "b") if getattr(config, f"stage_{op}")],
        "staged_words": " and ".join(op.upper() for op in ("a", "b") if getattr(config, f"stage_{op}")),
        # ...and the MN-major ones among them written K-major (the transposing stage)
        "transposed_ops": list(_staging.transposed_operands(config)),
        "stage_transposed": bool(_staging.transposed_operands(config)),
        "transposed_words": " and ".join(op.upper() for op in _staging.transposed_operands(config)),
        "is_fp8": problem.dtype_a in ("e4m3", "e5m2"),
        "cp_async": config.mainloop_load == "cp_async",
        # any operand below 16 bytes: the ABI checks each pointer against its own vector width
        "unaligned_abi": any(getattr(problem, f"alignment_{op}") * DTYPES[dt].bits < 128
                             for op, dt in (("a", problem.dtype_a), ("b", problem.dtype_b), ("c", problem.dtype_d))),
    }
    # split-K with a separate reduction (cutegen/split_k_reduce.py): the CUTLASS types above are the sliced
    # GEMM's (f32 D into the workspace, no C); the reduction kernel of the ABI writes the caller's C and D
    s = _split_k_reduce.slices(config)
    ctx.update({
        "split_k_reduce": s > 1, "split_k_slices": s,
        "out_dtype_c": caller.dtype_c, "out_dtype_d": caller.dtype_d,
        "out_element_c": "void" if caller.dtype_c == "void" else DTYPES[caller.dtype_c].cutlass,
        "out_element_d": DTYPES[caller.dtype_d].cutlass,
        "out_c_is_void": caller.dtype_c == "void",
        "out_row_major": caller.layout_c == "row",
        "out_alignment_c": caller.alignment_c,
        "partial_unit": _split_k_reduce.PARTIAL_UNIT,
    })
    ctx["align_words"] = "(one vector of this kernel)" if ctx["unaligned_abi"] else "(16 bytes); TMA needs it"
    if ctx["cp_async"]:
        ctx["kernel_schedule"] = _CP_ASYNC_SCHEDULES[config.mainloop_schedule]
    if config.epilogue_schedule == "no_smem" and (problem.bias or problem.activation != "none"):
        # NoSmemWarpSpecialized only takes LinearCombination (sm90_builder.inl, the NoSmem builder).
        raise CutegenError("epilogue_schedule: no_smem cannot apply a bias or an activation "
                           "(CUTLASS's no-smem epilogue is a plain linear combination); use a TMA epilogue")
    if config.epilogue_schedule != "no_smem":
        epi = epilogue_tile(problem, config)
        ctx["epi_tile"] = list(epi)
        # The tile is spelled out unless the builder forbids it: an explicit tile needs N % 16 == 0, which
        # the tiles Auto itself picks for Tile_N = 8 * odd do not have; those are written as
        # EpilogueTileAuto, and the static_assert in the template pins what Auto resolves to
        # (sm90_compute_tile_shape_or_override).
        ctx["epi_tile_auto"] = epi[1] % 16 != 0 and epi == epilogue_tile(problem, config.replace(epilogue_tile=None))
        ctx["epi_stages_c"], ctx["epi_stages_d"] = epilogue_stages(problem, config, epi)
    if backend == "cutlass":
        mma_atom, has_major = _mma_atom(problem, config)
        ctx.update({
            "stages": config.stages,
            "mma_m": config.mma_instruction[0], "mma_n": config.mma_instruction[1],
            "mma_k": config.mma_instruction[2],
            "mma_atom": mma_atom, "mma_has_major": has_major,
            "major_a_word": config.smem_layout_a.major, "major_b_word": config.smem_layout_b.major,
            "extended_mma_shapes": config.mma_instruction[1] not in _BASE_MMA_N,
            "warpgroups": list(config.warpgroup_layout),
            "smem_atom_a": _smem_atom(config.smem_layout_a, "ElementAMma"),
            "smem_atom_b": _smem_atom(config.smem_layout_b, "ElementBMma"),
            "smem_a_word": str(config.smem_layout_a), "smem_b_word": str(config.smem_layout_b),
            "smem_a_shape": list(config.smem_layout_a.shape(DTYPES[problem.dtype_a].bits)),
            "smem_b_shape": list(config.smem_layout_b.shape(DTYPES[problem.dtype_b].bits)),
            "tma_a": _TMA[config.tma_a], "tma_b": _TMA[config.tma_b],
            # FP8 keeps the builder's two-level accumulation (MainloopSm90TmaGmmaWarpSpecializedFP8):
            # the FP8 WGMMA accumulator loses precision over long K otherwise. Fast accumulation, when
            # the problem asks for it, is the plain mainloop with an ...FP8FastAccum schedule, exactly
            # what CUTLASS's builder makes of that schedule (sm90_gmma_builder.inl, FP8FastAccum builder).
            "dispatch_policy": ("cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8"
                                if ctx["is_fp8"] and not problem.fp8_fast_accum
                                else "cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized"),
        })
        # tiles whose stock collective cannot slice a swizzled stage (cutegen/stage_tma.py): cutegen's
        # mainloop builds the TMA descriptors from one stage's layout; every other kernel is unchanged
        bits_a, bits_b = DTYPES[problem.dtype_a].bits, DTYPES[problem.dtype_b].bits
        fp8_two_level = ctx["dispatch_policy"].endswith("FP8")
        from .collective_builder import uses_register_a
        ctx["stage_tma"] = _stage_tma.needed(problem, config, bits_a, bits_b, fp8_two_level,
                                             uses_register_a(problem))
        if ctx["stage_tma"]:
            ctx["stage_tma_rows"] = config.tile_shape[1]
            ctx["stage_tma_stage_bytes"] = config.tile_shape[1] * config.tile_shape[2] * bits_b // 8
        if ctx["cp_async"]:
            # No FP8 variant exists for cp.async: FP8 accumulates in the WGMMA accumulator only.
            ctx["dispatch_policy"] = "cutlass::gemm::MainloopSm90CpAsyncGmmaWarpSpecialized"
            ctx["gmem_copy_a"] = gmem_tiled_copy(problem, config, "a")
            ctx["gmem_copy_b"] = gmem_tiled_copy(problem, config, "b")
    else:
        ctx["stages"] = config.stages
    ctx["builder_crosscheck"] = (backend == "cutlass" and not ctx.get("stage_tma")
                                 and builder_would_choose(problem, config))
    return ctx


def gmem_tiled_copy(problem: GemmProblem, config: KernelConfig, operand: str) -> dict[str, Any]:
    """The producer's gmem->smem tiled copy of a cp.async mainloop, as CUTLASS's builder makes it
    (make_simt_gmem_tiled_copy, sm90_common.inl:128-167): 128 threads per load warpgroup, as many as
    fit along the contiguous mode, each moving one vector of the operand's alignment. A 4-16 byte
    vector is one cp.async (zero-filling when predicated off); a 1-2 byte vector, which cp.async cannot
    move, is a synchronous UniversalCopy (legality/cp_async.py)."""
    from .legality.cp_async import NUM_THREADS_PER_WARPGROUP, load_warpgroups, tiled_copy_threads, vector_bytes
    tm, tn, tk = config.tile_shape
    k_major = problem.a_k_major if operand == "a" else problem.b_k_major
    align = problem.alignment_a if operand == "a" else problem.alignment_b
    threads = NUM_THREADS_PER_WARPGROUP * load_warpgroups(config.mainloop_schedule)
    got = tiled_copy_threads(threads, tm if operand == "a" else tn, tk, align, k_major)
    if isinstance(got, str):
        raise CutegenError(f"SM90-CPASYNC-TILED-COPY: operand {operand.upper()}: {got}")
    major, minor = got
    nbytes = vector_bytes(problem, operand)
    element = "ElementA" if operand == "a" else "ElementB"
    op = (f"cute::SM80_CP_ASYNC_CACHEALWAYS_ZFILL<cute::uint_byte_t<{nbytes}>>" if nbytes >= 4
          else f"cute::UniversalCopy<cute::uint_byte_t<{nbytes}>>")
    if k_major:
        thr = f"Layout<Shape<_{minor}, _{major}>, Stride<_{major}, _1>>"
        val = f"Layout<Shape<_1, _{align}>>"
    else:
        thr = f"Layout<Shape<_{major}, _{minor}>, Stride<_1, _{major}>>"
        val = f"Layout<Shape<_{align}, _1>>"
    return {"atom": f"Copy_Atom<{op}, {element}>", "threads": thr, "vals": val, "bytes": nbytes,
            "sync": nbytes < 4, "threads_total": threads, "major": major, "minor": minor}


_MAINLOOP_CHOICES = ("smem_layout_a", "smem_layout_b", "tma_a", "tma_b", "mma_instruction", "warpgroup_layout")


def builder_would_choose(problem: GemmProblem, config: KernelConfig) -> bool:
    """Whether CUTLASS's mainloop CollectiveBuilder, given this tile, cluster, stage count and schedule,
    picks the same atoms, TMA copies, instruction and warpgroups (then the kernel asserts it does)."""
    try:
        from .collective_builder import complete
    except ImportError:
        return False
    if _stage_tma.needed_for(problem, config):
        return ["CUTLASS-BUILDER-STAGE-SLICE: the CollectiveBuilder's stock mainloop slices a stage out of the "
                f"swizzled {config.tile_shape[1]}-row B layout, which CuTe cannot (SM90-SMEM-STAGE-SLICE); the "
                "one-stage TMA form (cutegen/stage_tma.py) is rendered by backend cutlass"]
    if config.mainloop_load == "cp_async":
        from .legality.cp_async import vector_bytes
        if min(vector_bytes(problem, "a"), vector_bytes(problem, "b")) < 4:
            return False   # the builder static_asserts 4-byte cp.async vectors (sm90_gmma_builder.inl:796)
    bare = config.replace(**{f: None for f in _MAINLOOP_CHOICES})
    try:
        chosen = complete(problem, bare)   # ``problem`` is the kernel's (template_context passes it)
    except CutegenError:
        return False
    return all(getattr(chosen, f) == getattr(config, f) for f in _MAINLOOP_CHOICES)


# --- Jinja2 --------------------------------------------------------------------------------------
def _environment():
    from .core.templates import environment
    return environment()


def render_source(problem: GemmProblem, config: KernelConfig, backend: str = "cutlass") -> str:
    """kernel.cu for an already completed and checked configuration."""
    if backend not in TEMPLATES:
        raise FieldError("backend", f"{backend!r} is not one of {', '.join(BACKENDS)}")
    ctx = template_context(problem, config, backend)
    return _environment().get_template(TEMPLATES[backend]).render(**ctx)


def cutlass_temporal(config: KernelConfig) -> list[str]:
    """The pipeline's temporal choices CUTLASS 4.2's collectives fix (both C++ backends): the mainloop
    releases a stage one k-block after reading it (``K_PIPE_MMAS = 1``,
    sm90_mma_tma_gmma_ss_warpspecialized.hpp:264, ``warpgroup_wait<K_PIPE_MMAS>``), the producer is
    bounded by the stages only, and the ping-pong kernel arrives on ``MathWarpGroupOrderBarrier`` after
    the mainloop's MMAs. The DSL backend renders the others (search/temporal.py)."""
    fixed = []
    if config.release_lag != 1:
        fixed.append(f"release_lag={config.release_lag} (K_PIPE_MMAS = 1)")
    if config.prefetch_distance:
        fixed.append(f"prefetch_distance={config.prefetch_distance} (the producer is bounded by the stages only)")
    if config.pingpong_order != "after_mma":
        fixed.append(f"pingpong_order={config.pingpong_order} (MathWarpGroupOrderBarrier after the mainloop)")
    return [f"CUTLASS-TEMPORAL: CUTLASS 4.2's collective fixes the pipeline's temporal protocol: {'; '.join(fixed)}"] \
        if fixed else []


def cutlass_supports(problem: GemmProblem, config: KernelConfig) -> list[str]:
    """Why the explicit-type template cannot render a configuration CUTLASS itself accepts (empty: it can).

    Each reason starts with its rule ID, like ``cutegen.dsl.dsl_supports``, so the search prunes by it.
    """
    from .collective_builder import uses_register_a
    if cutlass_temporal(config):
        return cutlass_temporal(config)
    problem = kernel_problem(problem, config)
    if uses_register_a(problem):
        # Found by the coverage build on 2026-11-22: tf32 NT rendered as an SS mainloop with K-major
        # atoms did not compile; the template's static_assert showed CUTLASS builds a register-A mainloop.
        return [f"CUTLASS-EXPLICIT-RS: {problem.dtype_a} {problem.blas_layout.upper()} goes to CUTLASS's "
                "register-A (RS) mainloop, which transposes in shared memory; the explicit-type template "
                "spells out the SS mainloop only (use backend cutlass_builder)"]
    return []


def builder_supports(problem: GemmProblem, config: KernelConfig) -> list[str]:
    """Why CUTLASS's CollectiveBuilder cannot build a configuration the explicit template can (empty: it can)."""
    if cutlass_temporal(config):
        return cutlass_temporal(config)
    if config.split_k_slices > 1:
        return ["CUTLASS-BUILDER-SPLIT-K-REDUCE: the CollectiveBuilder template includes only the ordinary C ABI; "
                "the separate split-K reduction (cutegen/split_k_reduce.py) is rendered by backend cutlass"]
    if _stage_tma.needed_for(problem, config):
        return ["CUTLASS-BUILDER-STAGE-SLICE: the CollectiveBuilder's stock mainloop slices a stage out of the "
                f"swizzled {config.tile_shape[1]}-row B layout, which CuTe cannot (SM90-SMEM-STAGE-SLICE); the "
                "one-stage TMA form (cutegen/stage_tma.py) is rendered by backend cutlass"]
    if config.mainloop_load == "cp_async":
        from .legality.cp_async import vector_bytes
        small = [f"{op.upper()} {vector_bytes(problem, op)} B" for op in ("a", "b") if vector_bytes(problem, op) < 4]
        if small:
            return [f"CUTLASS-BUILDER-CPASYNC-4B: the builder's cp.async mainloop needs 4-byte vectors "
                    f"(sm90_gmma_builder.inl:796 static_assert); this problem has {', '.join(small)}"]
    return []


def render(problem: GemmProblem, config: KernelConfig, backend: str = "cutlass", *,
           cost: Any = None, toolchain: dict[str, Any] | None = None) -> RenderedKernel:
    """Complete ``config``, refuse it if any legality rule is broken, then render the kernel.

    ``cost`` (the search's estimate) is recorded in the manifest as given. ``toolchain`` overrides
    the detected CUTLASS and nvcc versions (a stored manifest's, when re-rendering elsewhere).
    """
    if not isinstance(problem, GemmProblem):
        raise FieldError("problem", f"expected a GemmProblem, got {type(problem).__name__}")
    if not isinstance(config, KernelConfig):
        raise FieldError("config", f"expected a KernelConfig, got {type(config).__name__}")
    if backend not in BACKENDS:
        raise FieldError("backend", f"{backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "dsl":
        from .dsl import render_files  # completes, checks both backends' rules, writes its manifest
        files = render_files(problem, config, cost=cost)
        man = json.loads(files["manifest.json"])
        return RenderedKernel(problem, KernelConfig.from_dict(man["config"]), backend, man["kernel_hash"],
                              files, man)
    if backend == "cutlass_builder":
        # The builder decides the mainloop itself; only what it is given is checked: complete a copy
        # to check legality, but render the configuration as the user wrote it.
        report = check_legality(problem, complete_config(problem, config))
        reasons = builder_supports(problem, config)
        if reasons:
            from .legality.rule import Violation
            raise IllegalConfig([Violation(r.split(":", 1)[0], r.split(":", 1)[1].strip()) for r in reasons])
    else:
        config = complete_config(problem, config)
        report = check_legality(problem, config)
        reasons = cutlass_supports(problem, config)
        if reasons:
            raise CutegenError("the explicit-type CUTLASS backend cannot render this configuration: "
                               + "; ".join(reasons))
    source = render_source(problem, config, backend)
    if toolchain is None:
        toolchain = {"cutlass": manifest_mod.cutlass_version(), "nvcc": manifest_mod.nvcc_version()}
    man = manifest_mod.build_manifest(problem=problem, config=config, backend=backend, source=source,
                                      legality=legality_summary(report), cost=cost, toolchain=toolchain)
    if problem.fp8_fast_accum:
        man["numerics"] = FP8_FAST_ACCUM_NUMERICS
    if config.tile_scheduler == "stream_k":
        man["launch_plan"] = launch_plan_for(problem, config, cost).to_dict()
    if config.split_k_slices > 1:
        man["split_k_reduce"] = _split_k_reduce.describe(problem, config)
    if config.stage_a or config.stage_b:
        from . import staging
        man["staging"] = {
            "operands": staging.describe(config),
            "how": "the C ABI copies each staged operand into the workspace with cudaMemcpy2DAsync "
                   "(leading dimension rounded up to 16 bytes) before the TMA kernel reads it",
            "staged_ld": {op: staging.staged_ld(staging.copy_view(problem, config), op)
                          for op in staging.staged_operands(config)},
            "workspace_bytes": staging.staging_workspace_bytes(problem, config)}
        if staging.transposed_operands(config):
            trans = staging.transposed_operands(config)
            plain = [op.upper() for op in staging.staged_operands(config) if op not in trans]
            man["staging"]["transposed"] = staging.describe_transposed(config)
            man["staging"]["how"] = (
                (f"{' and '.join(plain)}: copied into the workspace with cudaMemcpy2DAsync (leading dimension rounded "
                 "up to 16 bytes); " if plain else "")
                + f"{' and '.join(op.upper() for op in trans)}: MN-major, written K-major into the workspace by the C "
                "ABI's tiled transpose kernel (32x32 tiles through shared memory, on the caller's stream; leading "
                "dimension K rounded up to 16 bytes), because WGMMA reads 8-bit and tf32 operands only K-major: "
                "the kernel is an ordinary TN TMA kernel")
    return RenderedKernel(problem, config, backend, man["kernel_hash"],
                          {"kernel.cu": source, "manifest.json": manifest_mod.dumps(man)}, man)


def launch_plan_for(problem: GemmProblem, config: KernelConfig, cost: Any = None):
    """The launch plan a stream-K kernel runs its own problem with: the search's choice, recorded in its
    cost record (``cost["launch_plan"]``), else the ABI's default; refused if a plan rule breaks."""
    from .launch_plan import LaunchPlan
    from .legality.stream_k import check_plan

    data = cost.get("launch_plan") if isinstance(cost, dict) else None
    plan = LaunchPlan.from_dict(data, where="cost.launch_plan")
    broken, _ = check_plan(problem, config, plan)
    if broken:
        raise IllegalConfig(broken)
    return plan


def render_manifest(path: str | os.PathLike, *, keep_toolchain: bool = True) -> RenderedKernel:
    """Re-render the kernel a stored manifest.json describes (no search needed)."""
    m = manifest_mod.load(path)
    toolchain = m.data.get("toolchain") if keep_toolchain else None
    from .core import registry       # the manifest's operation renders it (GEMM: render() above)
    return registry.render(m.problem, m.config, m.backend, cost=m.data.get("cost"), toolchain=toolchain)
