"""The CuTe DSL backend: the same KernelConfig as a CuTe Python kernel, compiled ahead of time.

``render_dsl`` writes the configuration into ``templates/cute_dsl_sm90_gemm.py.j2`` (a CuTe DSL
module, nvidia-cutlass-dsl 4.8); ``render_dsl_abi`` writes the small C++ file that adapts the
DSL's exported entry to cutegen's C ABI (``cutegen/abi.py``); ``build_dsl`` runs the module with
``CUTE_DSL_ARCH=sm_90a`` (no GPU needed: fake tensors, ``cute.compile``, ``export_to_c``) and links
the object with nvcc into ``kernel.so``. The library carries the DSL's small static runtime and
the static CUDA runtime, so the GPU machine needs only the driver: no DSL, no Python.

``dsl_supports(problem, config)`` lists, with rule IDs, what the template cannot express; the
search asks it to know which backend takes a configuration. Everything the C++ backend's legality
rules refuse is refused here too (``build_dsl`` checks both).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .config import KernelConfig
from .dtypes import DTYPES
from .errors import CutegenError, FieldError
from .pipelines import protocol as _pipeline_protocol
from .problem import GemmProblem

BACKEND = "dsl"
TEMPLATE = "cute_dsl_sm90_gemm.py.j2"
ABI_TEMPLATE = "cute_dsl_sm90_abi.cpp.j2"
DSL_REQUIREMENT = "nvidia-cutlass-dsl 4.8"
SMEM_CAPACITY = 232448          # bytes a block may opt into on sm_90 (rulebook D02)
LOCK = "/tmp/cutegen-nvcc.lock"
LINK_FLAGS = ("-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden",
              "-Xlinker", "--exclude-libs,ALL", "-Xlinker", "-z,defs", "-Xlinker", "--version-script=exports.map",
              "-Xlinker", "--strip-all",
              "--cudart", "static")
# Only the ABI leaves the library: two DSL kernels (or a DSL and a C++ one) load side by side.
EXPORTS_MAP = "{ global: cutegen_gemm; cutegen_workspace_size; cutegen_describe; cutegen_last_error; local: *; };\n"

# CuTe DSL element type names (cutlass.<name>).
_DSL_TYPES = {"bf16": "BFloat16", "f16": "Float16", "e4m3": "Float8E4M3FN", "e5m2": "Float8E5M2",
              "f32": "Float32"}
_C_TYPES = {"bf16": "__nv_bfloat16", "f16": "__half", "f32": "float"}
# setmaxnreg for the producer warpgroup and the consumers; CUTLASS's cooperative kernel uses the
# same pair (sm90_gemm_tma_warpspecialized_cooperative.hpp), 128 * (40 + 2 * 232) <= 65536.
LOAD_REGS, MMA_REGS = 40, 232


# --- what the template can express ----------------------------------------------------------------
def dsl_epilogue_tile(problem: GemmProblem, config: KernelConfig) -> tuple[int, int] | None:
    """The epilogue subtile; None for the no-smem epilogue (it stores from registers).

    A config that names one keeps it. Unset, it is CUTLASS's EpilogueTileAuto
    (sm90_builder.inl sm90_compute_tile_shape_or_override), so both backends subtile alike.
    """
    if config.epilogue_schedule == "no_smem":
        return None
    if config.epilogue_tile is not None:
        return tuple(config.epilogue_tile)  # type: ignore[return-value]
    from .collective_builder import auto_epilogue_tile
    return auto_epilogue_tile(problem, config)


def dsl_epilogue_stages(config: KernelConfig, epi: tuple[int, int] | None) -> int:
    """D buffers of the TMA store: min(subtiles, 2), CUTLASS's StagesD (sm90_builder.inl:75)."""
    if epi is None:
        return 0
    tm, tn, _ = config.tile_shape
    return min((tm // epi[0]) * (tn // epi[1]), 2)


def dsl_consumer_warpgroups(config: KernelConfig) -> int:
    """Consumer warpgroups: two for pingpong (one tile each), else the tiled MMA's warpgroups."""
    if config.mainloop_schedule == "pingpong":
        return 2
    wg = config.warpgroup_layout or (1, 1, 1)
    return wg[0] * wg[1]


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def dsl_smem_bytes(problem: GemmProblem, config: KernelConfig) -> int:
    """Shared memory the template's SharedStorage takes: 2 mbarriers per stage (and ping-pong's two
    ordering barriers), then the A, B and
    D buffers, each 1024-byte aligned (BUFFER_ALIGN). C is read from global memory, not staged."""
    tm, tn, tk = config.tile_shape
    stages = config.stages if isinstance(config.stages, int) else 0
    total = 16 * stages + (32 if config.mainloop_schedule == "pingpong" else 0)  # + ping-pong's ordering barriers (up to 2x2)
    total = _round_up(total, 1024) + tm * tk * DTYPES[problem.dtype_a].bits // 8 * stages
    total = _round_up(total, 1024) + tn * tk * DTYPES[problem.dtype_b].bits // 8 * stages
    epi = dsl_epilogue_tile(problem, config)
    if epi is not None:
        copies = 2 if config.mainloop_schedule == "pingpong" else 1   # a D buffer set per pingpong warpgroup
        total = _round_up(total, 1024) + epi[0] * epi[1] * DTYPES[problem.dtype_d].bits // 8 \
            * dsl_epilogue_stages(config, epi) * copies
    return total


def dsl_supports(problem: GemmProblem, config: KernelConfig) -> list[str]:
    """Why the CuTe DSL template cannot express (problem, config); empty when it can.

    Each reason starts with a stable rule ID (DSL-...) and prints the offending values. The
    config must be complete (``cutegen.collective_builder.complete``); legality under the C++
    rules is a separate question (``build_dsl`` checks both).
    """
    out: list[str] = []
    if not config.is_complete:
        missing = [f for f in ("smem_layout_a", "smem_layout_b", "tma_a", "tma_b", "mma_instruction",
                               "warpgroup_layout") if getattr(config, f) is None]
        if config.stages == "auto":
            missing.append("stages")
        return [f"DSL-COMPLETE: config leaves {', '.join(missing)} unset; complete it first "
                "(cutegen.collective_builder.complete)"]
    from . import stage_tma
    if stage_tma.needed_for(problem, config):
        out.append(f"DSL-STAGE-SLICE: Tile_N = {config.tile_shape[1]} is an odd number of 8-row swizzle atoms: "
                   "CUTLASS's collective needs cutegen's one-stage TMA form (cutegen/stage_tma.py), which only the "
                   "C++ backend cutlass renders; the DSL template is not verified with it")
    if config.swap_ab:
        out.append("DSL-SWAP-AB: the DSL template and its ABI do not exchange the operands (swap_ab); "
                   "use the C++ backend (cutlass or cutlass_builder)")
    if getattr(config, "stage_a", False) or getattr(config, "stage_b", False):
        out.append("DSL-STAGING: the DSL template's ABI does not make the restride copies of staged operands "
                   "(cutegen/staging.py); use the C++ backend (cutlass)")
    if getattr(config, "split_k_slices", 1) > 1:
        out.append("DSL-SPLIT-K-REDUCE: the DSL template's ABI has no separate split-K reduction "
                   "(cutegen/split_k_reduce.py); use the C++ backend (cutlass)")
    for op, dt in (("A", problem.dtype_a), ("B", problem.dtype_b)):
        if dt == "tf32":
            out.append(f"DSL-TF32: operand {op} is tf32; CuTe DSL 4.8's warpgroup module has no tf32 WGMMA "
                       "op (only MmaF16BF16Op, MmaF8Op, MmaI8Op)")
    if DTYPES[problem.dtype_a].bits == 16 and problem.dtype_a != problem.dtype_b:
        out.append(f"DSL-AB-TYPE: 16-bit A ({problem.dtype_a}) and B ({problem.dtype_b}) differ; MmaF16BF16Op "
                   "takes one type for both")
    if problem.dtype_a in ("e4m3", "e5m2") and not problem.fp8_fast_accum:
        # The template accumulates every k-block into one f32 WGMMA accumulator: the numerics of CUTLASS's
        # ...FP8FastAccum schedules (WGMMA's FP8 accumulation keeps fewer mantissa bits than f32). The C++
        # default promotes into a second accumulator every k-tile (GmmaFP8Accumulation); the DSL does not.
        out.append("DSL-FP8-ACCUM: the DSL template accumulates FP8 only in the WGMMA accumulator (fast "
                   "accumulation); ask for it with fp8_fast_accum (--fp8-fast-accum) or use the C++ backend")
    if config.mainloop_schedule == "pingpong" and tuple(config.warpgroup_layout) != (1, 1, 1):
        out.append(f"DSL-PINGPONG-WG: pingpong gives each consumer warpgroup a whole tile; warpgroup_layout "
                   f"{config.warpgroup_layout} is not (1, 1, 1)")
    if config.mainloop_load != "tma":
        out.append(f"DSL-CPASYNC: mainloop_load={config.mainloop_load}; the DSL template loads A and B with TMA only")
    if config.tile_scheduler == "stream_k":
        out.append("DSL-STREAMK: tile_scheduler stream_k is not in the DSL template (it has the static "
                   "persistent scheduler only)")
    if config.cluster_shape[2] != 1:
        out.append(f"DSL-CLUSTER-K: cluster_shape {config.cluster_shape} has K extent "
                   f"{config.cluster_shape[2]}; PersistentTileSchedulerParams needs 1")
    for op, tma, extent, along in (("A", config.tma_a, config.cluster_shape[1], "N"),
                                   ("B", config.tma_b, config.cluster_shape[0], "M")):
        if (tma == "tma_multicast") != (extent > 1):
            out.append(f"DSL-MULTICAST: tma_{op.lower()}={tma} with cluster {along} extent {extent}; the DSL "
                       f"pipeline multicasts {op} exactly when the cluster's {along} extent is above 1")
    wg = config.warpgroup_layout
    mma = config.mma_instruction
    tm, tn, tk = config.tile_shape
    if wg[2] != 1:
        out.append(f"DSL-WG-K: warpgroup_layout {wg} splits K across warpgroups; the template does not")
    if dsl_consumer_warpgroups(config) > 2:
        out.append(f"DSL-WG-COUNT: warpgroup_layout {wg} has {wg[0] * wg[1]} consumer warpgroups; the template's "
                   f"register split (setmaxnreg {LOAD_REGS}/{MMA_REGS}) holds for at most 2")
    if tm % (mma[0] * wg[0]) or tn % (mma[1] * wg[1]) or tk % mma[2]:
        out.append(f"DSL-MMA-TILE: tile {tm}x{tn}x{tk} is not a whole number of the tiled MMA "
                   f"{mma[0] * wg[0]}x{mma[1] * wg[1]}x{mma[2]} (instruction {mma} x warpgroups {wg})")
    epi = dsl_epilogue_tile(problem, config)
    if epi is not None:
        em, en = epi
        if tm % em or tn % en:
            out.append(f"DSL-EPI-TILE: epilogue tile {em}x{en} does not divide the CTA tile {tm}x{tn}")
        elif em % (64 * wg[0]):
            out.append(f"DSL-EPI-TILE: epilogue tile M {em} is not a multiple of the warpgroups' M extent "
                       f"{64 * wg[0]}; the register-to-smem copy would split a warpgroup's rows")
    smem = dsl_smem_bytes(problem, config)
    if smem > SMEM_CAPACITY:
        out.append(f"DSL-SMEM: the DSL kernel's shared storage is {smem} bytes ({config.stages} stages, epilogue "
                   f"tile {epi}), above the {SMEM_CAPACITY} a block may use (rulebook D02)")
    return out


# --- rendering -------------------------------------------------------------------------------------
def _raster_swizzle(problem: GemmProblem, config: KernelConfig) -> int:
    """The swizzle CUTLASS actually applies for this problem: raster_swizzle is a maximum, cut down for
    small grids (tile_scheduler_params.h get_log_swizzle_size, on the CTA-tile counts)."""
    tm, tn, _ = config.tile_shape
    least = min(-(-problem.m // tm), -(-problem.n // tn))
    swz = config.raster_swizzle
    if swz >= 8 and least >= 6:
        return 8
    if swz >= 4 and least >= 3:
        return 4
    if swz >= 2 and least >= 2:
        return 2
    return 1


def _raster_along_m(problem: GemmProblem, config: KernelConfig) -> tuple[bool, str]:
    """The DSL scheduler's raster order is fixed at compile time; "heuristic" is resolved here for
    this problem's shape as CUTLASS resolves it at run time (tile_scheduler_params.h:337-343: along
    M when there are more N than M cluster tiles, counted after rounding up to swizzle x cluster)."""
    if config.raster_order == "along_m":
        return True, "along_m"
    if config.raster_order == "along_n":
        return False, "along_n"
    tm, tn, _ = config.tile_shape
    cm, cn, _ = config.cluster_shape
    swz = _raster_swizzle(problem, config)
    tiles_m = _round_up(-(-problem.m // tm), swz * cm) // cm
    tiles_n = _round_up(-(-problem.n // tn), swz * cn) // cn
    along_m = tiles_n > tiles_m
    return along_m, (f"heuristic for this problem: {tiles_m} x {tiles_n} cluster tiles -> "
                     f"{'along_m' if along_m else 'along_n'}")


def _epilogue_formula(problem: GemmProblem) -> str:
    body = "alpha * acc"
    if problem.dtype_c != "void":
        body += " + beta * C"
    if problem.bias:
        body += " + bias[m]"
    if problem.activation != "none":
        body = f"{problem.activation}({body})"
    return body


def kernel_hash(problem: GemmProblem, config: KernelConfig) -> str:
    from .manifest import kernel_hash as _kernel_hash
    return _kernel_hash(problem, config, BACKEND)


def describe_json(problem: GemmProblem, config: KernelConfig) -> str:
    """cutegen_describe()'s JSON, made as the C++ backend makes it."""
    from .render_common import _describe
    return _describe(problem, config, BACKEND, kernel_hash(problem, config))


def template_context(problem: GemmProblem, config: KernelConfig) -> dict[str, Any]:
    from . import __version__
    epi = dsl_epilogue_tile(problem, config)
    along_m, raster_comment = _raster_along_m(problem, config)
    persistent = config.mainloop_schedule in ("cooperative", "pingpong")
    khash = kernel_hash(problem, config)
    align = {d: 128 // DTYPES[d].bits for d in DTYPES}
    protocol = _pipeline_protocol(problem, config, "dsl")    # the term the checker proves (cutegen.pipelines)
    return {
        "version": __version__,
        "kernel_hash": khash,
        "prefix": f"cutegen_dsl_{khash}",
        "problem_name": problem.kernel_class_name,
        "config_name": config.short_name(),
        "config_lines": [f"{k} = {json.dumps(v)}" for k, v in sorted(config.to_dict().items())],
        "epilogue_formula": _epilogue_formula(problem),
        "dtype_a": problem.dtype_a, "dtype_b": problem.dtype_b, "dtype_c": problem.dtype_c,
        "dtype_d": problem.dtype_d,
        "dtype_a_bits": DTYPES[problem.dtype_a].bits, "dtype_b_bits": DTYPES[problem.dtype_b].bits,
        "dtype_c_bits": DTYPES[problem.dtype_c].bits if problem.dtype_c != "void" else 0,
        "dtype_d_bits": DTYPES[problem.dtype_d].bits,
        "dsl_a": _DSL_TYPES[problem.dtype_a], "dsl_b": _DSL_TYPES[problem.dtype_b],
        "dsl_c": _DSL_TYPES.get(problem.dtype_c, "void"), "dsl_d": _DSL_TYPES[problem.dtype_d],
        "c_type_c": _C_TYPES.get(problem.dtype_c, "void"), "c_type_d": _C_TYPES[problem.dtype_d],
        "a_k_major": problem.a_k_major, "b_k_major": problem.b_k_major,
        "d_n_major": problem.layout_c == "row",
        # The kernel's static alignment facts are the problem's, never less than TMA's 16 bytes.
        "align_a": max(problem.alignment_a, align[problem.dtype_a]),
        "align_b": max(problem.alignment_b, align[problem.dtype_b]),
        "align_d": max(problem.alignment_c, align[problem.dtype_d]),
        "align_c": align[problem.dtype_c] if problem.dtype_c != "void" else 0,
        "tile": list(config.tile_shape), "cluster": list(config.cluster_shape[:2]),
        "stages": config.stages,
        "tma_a": config.tma_a, "tma_b": config.tma_b,
        "a_multicast": config.tma_a == "tma_multicast", "b_multicast": config.tma_b == "tma_multicast",
        "mma": list(config.mma_instruction), "warpgroups": list(config.warpgroup_layout),
        "smem_a": f"{config.smem_layout_a.major}_{config.smem_layout_a.swizzle}",
        "smem_b": f"{config.smem_layout_b.major}_{config.smem_layout_b.swizzle}",
        "persistent": persistent, "pingpong": config.mainloop_schedule == "pingpong",
        "consumer_wgs": dsl_consumer_warpgroups(config),
        # Rendered from the pipeline term the checker proves (cutegen.pipelines, backend "dsl").
        "ordering": protocol["ordering"],
        "order_epilogue": protocol["order_epilogue"],
        # the temporal choices (search/temporal.py), from the same term: prefetch None = the stages bound it
        "prefetch": protocol["prefetch"] or 0,
        "release_lag": config.release_lag,
        "order_after_release": protocol["order_after_release"],
        "schedule_comment": (f"{config.mainloop_schedule}: "
                             + ("persistent: as many clusters as fit at once, static tile scheduler"
                                if persistent else "one work tile per CTA, the grid covers every tile")
                             + ("; two consumer warpgroups on alternate tiles"
                                if config.mainloop_schedule == "pingpong" else "")),
        "raster_along_m": along_m, "raster_comment": raster_comment, "raster_swizzle": _raster_swizzle(problem, config),
        "max_swizzle": config.raster_swizzle,
        "epi_tma": epi is not None, "epi_tile": list(epi) if epi else [0, 0],
        "epi_stages": dsl_epilogue_stages(config, epi),
        "epilogue_schedule": config.epilogue_schedule,
        "has_c": problem.dtype_c != "void", "has_bias": problem.bias, "activation": problem.activation,
        "smem_capacity": SMEM_CAPACITY, "smem_bytes": dsl_smem_bytes(problem, config),
        "load_regs": LOAD_REGS, "mma_regs": MMA_REGS,
        "cluster_size": config.cluster_shape[0] * config.cluster_shape[1],
        "describe_json": describe_json(problem, config),
    }


_ENV = None


def _environment():
    global _ENV
    if _ENV is None:
        import jinja2
        from .render_common import _cstring
        tdir = Path(__file__).resolve().parent.parent / "templates"
        if not (tdir / TEMPLATE).is_file():  # installed (non-editable): templates ship as cutegen.templates
            from . import templates as _t  # type: ignore[attr-defined]
            tdir = Path(_t.__file__).parent
        _ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(tdir)), undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True, autoescape=False)
        _ENV.filters["cstring"] = _cstring
    return _ENV


def _checked(problem: GemmProblem, config: KernelConfig) -> KernelConfig:
    """Complete the config, refuse it if a legality rule or the DSL template refuses it."""
    if not isinstance(problem, GemmProblem):
        raise FieldError("problem", f"expected a GemmProblem, got {type(problem).__name__}")
    if not isinstance(config, KernelConfig):
        raise FieldError("config", f"expected a KernelConfig, got {type(config).__name__}")
    from .render_common import complete_config
    config = complete_config(problem, config)
    reasons = dsl_supports(problem, config)
    if reasons:
        raise CutegenError("the CuTe DSL backend cannot express this configuration: " + "; ".join(reasons))
    return config


def _lint(kernel_py: str) -> str:
    """Refuse a rendered module the DSL would trace into a different program (cutegen/dsl_lint.py)."""
    from .dsl_lint import loop_state_violations
    problems = loop_state_violations(kernel_py)
    if problems:
        raise CutegenError("the rendered CuTe DSL kernel is wrong: " + "; ".join(problems))
    return kernel_py


def _verify_pipeline(kernel_py: str, problem: GemmProblem, config: KernelConfig) -> str:
    """Refuse a rendered module whose TMA/mbarrier pipeline, read back from its source, is not the term the
    pipeline checker proves (cutegen/dsl_pipeline.py, DSL-PIPELINE-MATCH)."""
    from .dsl_pipeline import check_rendered
    problems = check_rendered(kernel_py, problem, config)
    if problems:
        raise CutegenError("the rendered CuTe DSL kernel's pipeline is not the verified one: " + "; ".join(problems))
    return kernel_py


def render_dsl(problem: GemmProblem, config: KernelConfig) -> str:
    """The CuTe DSL module (kernel.py) for a configuration the DSL template can express."""
    config = _checked(problem, config)
    kernel_py = _lint(_environment().get_template(TEMPLATE).render(**template_context(problem, config)))
    return _verify_pipeline(kernel_py, problem, config)


def render_dsl_abi(problem: GemmProblem, config: KernelConfig) -> str:
    """The C++ shim (abi.cpp) adapting the DSL's exported entry to cutegen/abi.py."""
    config = _checked(problem, config)
    return _environment().get_template(ABI_TEMPLATE).render(**template_context(problem, config))


def render_files(problem: GemmProblem, config: KernelConfig, *, check_legality: bool = True,
                 cost: Any = None) -> dict[str, str]:
    """kernel.py, abi.cpp and manifest.json of one DSL kernel (what `generate --backend dsl` writes)."""
    from . import manifest as manifest_mod
    from .render_common import check_legality as _check, legality_summary
    config = _checked(problem, config)
    report = _check(problem, config) if check_legality else None
    ctx = template_context(problem, config)
    env = _environment()
    kernel_py = env.get_template(TEMPLATE).render(**ctx)
    _lint(kernel_py)
    _verify_pipeline(kernel_py, problem, config)
    abi_cpp = env.get_template(ABI_TEMPLATE).render(**ctx)
    man = manifest_mod.build_manifest(
        problem=problem, config=config, backend=BACKEND, source=kernel_py,
        legality=legality_summary(report) if report is not None else {"checked": False},
        cost=cost, toolchain={"cute_dsl": dsl_version(), "nvcc": manifest_mod.nvcc_version()})
    man["files"] = {name: {"sha256": hashlib.sha256(text.encode()).hexdigest(), "bytes": len(text.encode())}
                    for name, text in (("kernel.py", kernel_py), ("abi.cpp", abi_cpp))}
    man["dsl"] = {"epilogue_tile": ctx["epi_tile"] if ctx["epi_tma"] else None,
                  "epilogue_stages": ctx["epi_stages"], "smem_bytes": ctx["smem_bytes"],
                  "raster": ctx["raster_comment"]}
    return {"kernel.py": kernel_py, "abi.cpp": abi_cpp, "manifest.json": manifest_mod.dumps(man)}


# --- building --------------------------------------------------------------------------------------
def dsl_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("nvidia-cutlass-dsl")
    except Exception:
        return None


def dsl_runtime_archive() -> Path:
    """libcuda_dialect_runtime_static.a of the installed DSL (the exported object calls into it)."""
    try:
        import nvidia_cutlass_dsl  # noqa: F401
    except ImportError:
        pass
    for base in map(Path, sys.path):
        for cu in ("cu13", "cu12"):
            p = base / "nvidia_cutlass_dsl" / cu / "lib" / "libcuda_dialect_runtime_static.a"
            if p.is_file():
                return p
    raise CutegenError(f"the CuTe DSL runtime (libcuda_dialect_runtime_static.a) is not installed; "
                       f"install the dsl extra ({DSL_REQUIREMENT}: pip install 'cutegen[dsl]')")


def _cache_key(files: dict[str, str], nvcc_version: str | None) -> str:
    ident = json.dumps({"kernel.py": hashlib.sha256(files["kernel.py"].encode()).hexdigest(),
                        "abi.cpp": hashlib.sha256(files["abi.cpp"].encode()).hexdigest(),
                        "cute_dsl": dsl_version(), "nvcc": nvcc_version, "link": list(LINK_FLAGS),
                        "backend": BACKEND}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()


def compile_object(kernel_py: Path, out_dir: Path, prefix: str, timeout: float | None = 600) -> dict:
    """Run the rendered module (its own process: the DSL keeps global state) to AOT-compile and
    export <prefix>.h / <prefix>.o; returns its timings plus the wall time of the whole step."""
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(kernel_py), "--out-dir", str(out_dir), "--prefix", prefix],
                          capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise CutegenError(f"CuTe DSL compile of {kernel_py.name} failed (exit {proc.returncode}); a config "
                           f"dsl_supports accepted did not compile, a bug in cutegen.dsl:\n{tail}")
    timings = json.loads(proc.stdout.strip().splitlines()[-1])
    timings["python_wall_s"] = round(wall, 3)
    return timings


def link_library(workdir: Path, prefix: str, output: Path, nvcc: str | None = None,
                 timeout: float | None = 600) -> float:
    """nvcc-link abi.cpp + <prefix>.o + the DSL's static runtime into one self-contained .so."""
    from .build import find_nvcc
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CutegenError("nvcc not found on PATH (or in CUDA_HOME); cannot link the DSL kernel")
    (workdir / "exports.map").write_text(EXPORTS_MAP)
    cmd = [nvcc, *LINK_FLAGS, "-I", str(workdir), "-o", str(output), str(workdir / "abi.cpp"),
           str(workdir / f"{prefix}.o"), str(dsl_runtime_archive())]
    import fcntl
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one nvcc at a time on this machine (CONVENTIONS.md)
        start = time.monotonic()         # the link itself, not the wait for the lock
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)
        seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise CutegenError(f"linking the DSL kernel failed (nvcc exit {proc.returncode}):\n"
                           + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:]))
    return seconds


def build_dsl(problem: GemmProblem, config: KernelConfig, out_dir: str | os.PathLike, *,
              cache: Path | None = None, check_legality: bool = True, cost: Any = None) -> Path:
    """Render, AOT-compile and link one DSL kernel; returns out_dir/kernel.so.

    out_dir gets kernel.py, abi.cpp, manifest.json, kernel.so and build.json (timings). The
    library is cached under cutegen.build's cache directory, keyed by both rendered sources,
    the DSL and nvcc versions and the link flags; entries appear atomically.
    """
    from .build import cache_dir, find_nvcc
    from .manifest import nvcc_full_version
    from ._atomic import atomic_write
    files = render_files(problem, config, check_legality=check_legality, cost=cost)
    from ._atomic import atomic_directory, leftovers
    out = Path(out_dir)
    stale = [n for n, t in files.items() if not (out / n).is_file() or (out / n).read_bytes() != t.encode()]
    if stale or leftovers(out):
        with atomic_directory(out) as new:          # the sources appear together (a kernel.so stays)
            for name, text in files.items():
                if not (new / name).is_file() or (new / name).read_bytes() != text.encode():
                    (new / name).write_bytes(text.encode())
    nvcc = find_nvcc()
    key = _cache_key(files, nvcc_full_version(nvcc) if nvcc else None)
    entry = (Path(cache) if cache else cache_dir()) / key[:2] / key
    if not (entry / "kernel.so").is_file():
        _build_entry(files, kernel_hash(problem, _checked(problem, config)), entry, nvcc, key)
    for name in ("kernel.so", "build.json"):
        data = (entry / name).read_bytes()
        if not (out / name).exists() or (out / name).read_bytes() != data:
            atomic_write(out / name, data)
    os.chmod(out / "kernel.so", 0o755)
    return out / "kernel.so"


def _build_entry(files: dict[str, str], khash: str, entry: Path, nvcc: str | None, key: str) -> None:
    prefix = f"cutegen_dsl_{khash}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    from ._atomic import scratch_directory
    # scratch directories, not TemporaryDirectory: what a killed build leaves, the next one removes
    with scratch_directory("cutegen-dsl-") as work:
        (work / "kernel.py").write_text(files["kernel.py"])
        (work / "abi.cpp").write_text(files["abi.cpp"])
        timings = compile_object(work / "kernel.py", work, prefix)
        timings["object_bytes"] = (work / f"{prefix}.o").stat().st_size
        timings["link_s"] = round(link_library(work, prefix, work / "kernel.so", nvcc), 3)
        record = {"key": key, "backend": BACKEND, "cute_dsl": dsl_version(), "link_flags": list(LINK_FLAGS),
                  "timings": timings, "library_bytes": (work / "kernel.so").stat().st_size}
        with scratch_directory(f".{entry.name}.", root=entry.parent) as staging:
            shutil.copyfile(work / "kernel.so", staging / "kernel.so")
            (staging / "build.json").write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")
            try:
                os.rename(staging, entry)  # atomic: the entry is complete or absent
            except OSError:
                if not (entry / "kernel.so").is_file():
                    raise


def build_dsl_dir(directory: str | os.PathLike, *, cache: Path | None = None) -> Path:
    """`cutegen build --backend dsl DIR`: rebuild the kernel a DSL manifest.json describes, in place."""
    from .manifest import load
    m = load(Path(directory) / "manifest.json")
    if m.backend != BACKEND:
        raise FieldError("backend", f"{directory}/manifest.json is a {m.backend!r} kernel, not {BACKEND!r}")
    return build_dsl(m.problem, m.config, directory, cache=cache, cost=m.data.get("cost"))
