"""Rendering of attention kernels: explicit CUTLASS C++ on the Hopper FMHA example's collectives, with a C ABI.

``render(problem, config)`` returns the kernel directory's files (``kernel.cu``, ``manifest.json``), a pure
function of the problem's kernel key and the config. ``backend_refusals`` lists what this renderer cannot
build, each ``"RULE-ID: reason"`` (the search prunes on them like on rules); ``render`` raises on any.

The kernel compiles with ``-I <CUTLASS>/examples/88_hopper_fmha`` (``cutegen.build`` adds it when the headers
are there: the nvidia-cutlass wheel's source, or oracles/.cutlass after oracles/prepare_cutlass_headers.sh).
"""
from __future__ import annotations

import json
from typing import Any

from ...errors import CutegenError, FieldError
from .config import AttentionConfig
from .problem import AttentionProblem

BACKEND = "cutlass"
TEMPLATE = "attention/fmha_sm90.cu.j2"
TEMPLATE_FP8 = "attention/fmha_sm90_fp8.cu.j2"   # e4m3 inputs: V^T, descale factors, a 16-bit O (its own file)
TEMPLATE_SPLIT_KV = "attention/fmha_sm90_splitkv.cu.j2"      # config.kv_splits > 1 (cutegen.ops.attention.splitkv)
VARLEN_TEMPLATE = "attention/fmha_varlen_sm90.cu.j2"
# cutegen's varlen kernel, collective, loads, epilogue and scheduler (C++ on the 88 collectives), inlined into every
# varlen kernel.cu so that the kernel's bytes (and hash) carry it and the build needs no extra include path
VARLEN_HEADER = "attention/varlen/fmha_varlen_sm90.hpp"
ELEMENT = {"bf16": "cutlass::bfloat16_t", "f16": "cutlass::half_t", "e4m3": "cutlass::float_e4m3_t"}
ACC = {"f32": "float", "f16": "cutlass::half_t"}
WGMMA_M = 64                      # rows of one wgmma.mma_async (every Hopper WGMMA shape is 64 x N x K)
WGMMA_K_16BIT = 16                # K of one 16-bit WGMMA: the head mode of the tile is a multiple of it
SOURCE_88 = "examples/88_hopper_fmha"
SMEM_LIMIT = 232448               # bytes: sm_90's opt-in shared memory per block (CUDA guide, compute capability 9.0)

# What this renderer refuses, by ID: the summary and where the limit comes from. The hardware rules
# (WGMMA shapes, shared memory, registers, TMA) are legality/attention*'s; these are the template's.
REFUSALS = {
    "ATTN-RENDER-FP8-SCHEDULE": ("e4m3 is rendered on the warp-specialized schedules only",
                                 "88 fmha_collective_tma.hpp: LayoutQKV (int, _1, (int, int)) for Q, K and V: no V^T"),
    "ATTN-RENDER-FP8-SPLIT-KV": ("e4m3 kernels are not split along the KV length",
                                 "templates/attention/fmha_sm90_splitkv.cu.j2 is written for 16-bit inputs (V head-dim "
                                 "contiguous); the FP8 template has no split mainloop"),
    "ATTN-RENDER-V-LAYOUT": ("16-bit kernels read V with its head dim contiguous (v_transposed is e4m3's layout)",
                             "templates/attention/fmha_sm90.cu.j2: StrideV (int, _1, ...); 16-bit WGMMA could read V^T "
                             "MN-major, not rendered"),
    "ATTN-RENDER-HEAD-DIM-V": ("head_dim_v must equal head_dim",
                               "88 TileShape has one head mode for Q K^T's K and P V's N"),
    "ATTN-RENDER-VARLEN-TMA": ("variable-length batches run on the warp-specialized schedules only",
                               "templates/attention/varlen/fmha_varlen_sm90.hpp ports the per-sequence loads, masks, "
                               "epilogue and scheduler to FmhaMainloopTmaWarpSpecialized; 88's fmha_collective_tma.hpp "
                               "(schedule tma) has no varlen variant"),
    "ATTN-RENDER-VARLEN-FP8": ("variable-length batches are rendered for 16-bit inputs only",
                               "templates/attention/fmha_varlen_sm90.cu.j2 is written for 16-bit Q, K, V (V head-dim "
                               "contiguous, no descale factors); the FP8 template has no varlen variant"),
    "ATTN-RENDER-VARLEN-SPLIT-KV": ("variable-length kernels are not split along the KV length",
                                    "templates/attention/fmha_varlen_sm90.cu.j2 has no split mainloop or combine; "
                                    "templates/attention/fmha_sm90_splitkv.cu.j2 has no per-sequence lengths"),
    "ATTN-RENDER-TMA-OPTIONS": ("schedule tma takes one MMA warpgroup, no persistence, no separate Q load, f32 accumulation",
                                "88 fmha_collective_tma.hpp: one TiledMma (KernelTmaWarpSpecialized builder), "
                                "IndividualTileScheduler, one ElementAccumulator"),
    "ATTN-RENDER-TMA-TILE-Q": ("schedule tma takes tile_q 64 (one 64-row WGMMA atom per thread)",
                               "88 fmha_collective_tma.hpp:410 and :483 static_assert size<1>(layout_qk_input) == 1; "
                               "nvcc failed 128x64 and 128x96 tma kernels on the H200 run"),
    "ATTN-RENDER-TMA-GQA": ("schedule tma cannot share KV heads (grouped problems)",
                            "88 fmha_collective_tma.hpp: LayoutQKV is fixed to (int, _1, (int, int))"),
    "ATTN-RENDER-WS-CLUSTER": ("warp-specialized schedules run without clusters",
                               "88 fmha_collective_tma_warpspecialized.hpp: ClusterShape = Shape<_1,_1,_1>"),
    "ATTN-RENDER-WS-BLOCKS-PER-SM": ("warp-specialized schedules run one CTA per SM, except the split-KV kernel with "
                                     "one consumer warpgroup",
                                     "88 fmha_kernel_tma_warpspecialized.hpp: MinBlocksPerMultiprocessor = 1; "
                                     "templates/attention/fmha_sm90_splitkv.cu.j2 DecodeFmhaKernel sets its own"),
    "ATTN-RENDER-PINGPONG-OPTIONS": ("ws_pingpong is persistent and loads Q separately",
                                     "88 fmha_kernel_builder.hpp: the Pingpong builder adds kIsPersistent and kLoadsQSeparately"),
    "ATTN-RENDER-ONE-SPELLING": ("ws_cooperative with persistent and loads_q_separately is the ws_pingpong kernel",
                                 "88 fmha_kernel_builder.hpp (the same instantiation): one config per kernel"),
    "ATTN-RENDER-88-STAGES": ("stages_q >= mma_warpgroups and stages_kv >= 2 (warp-specialized)",
                              "88 fmha_collective_tma_warpspecialized.hpp:81-82 static_asserts"),
    "ATTN-RENDER-88-TILE-Q": ("tile_q / mma_warpgroups is a multiple of 64 (one WGMMA M per warpgroup)",
                              "88 TileShapeQK = tile_q / NumMmaWarpGroups; PTX ISA wgmma M = 64"),
    "ATTN-RENDER-SPLIT-SCHEDULE": ("kv_splits > 1 needs a warp-specialized schedule",
                                   "templates/attention/fmha_sm90_splitkv.cu.j2: SplitKvMainloop derives from "
                                   "FmhaMainloopTmaWarpSpecialized (fmha_collective_tma.hpp's loads are another collective)"),
    "ATTN-RENDER-SPLIT-CAUSAL": ("kv_splits > 1 renders no causal mask",
                                 "cutegen/ops/attention/splitkv.py CAUSAL_NOTE: top-left causal reads at most "
                                 "ceil((q_block + 1) x tile_q / tile_kv) KV tiles, nothing long to split"),
    "ATTN-RENDER-TILE-ORDER": ("tile_order longest_first is rendered for the 16-bit, unsplit, fixed-length "
                               "warp-specialized kernel only",
                               "templates/attention/fmha_sm90.cu.j2 derives its two schedulers from 88's "
                               "fmha_tile_scheduler.hpp; fmha_kernel_tma.hpp fixes IndividualTileScheduler, and the "
                               "varlen, split-KV and FP8 templates keep their own schedulers"),
}


def head_tile(problem: AttentionProblem) -> int:
    """The tile's head mode: the head dim rounded up to a 16-element WGMMA K step (TMA zero-fills the rest)."""
    return -(-problem.head_dim // WGMMA_K_16BIT) * WGMMA_K_16BIT


def backend_refusals(problem: AttentionProblem, config: AttentionConfig, backend: str = BACKEND) -> list[str]:
    """What the explicit CUTLASS template cannot build of (problem, config): ``"RULE-ID: reason"`` each."""
    out: list[str] = []

    def refuse(rule: str, detail: str) -> None:
        out.append(f"{rule}: {detail} ({REFUSALS[rule][1]})")

    if backend != BACKEND:
        return [f"ATTN-RENDER-BACKEND: backend {backend!r} is not one of attention's ({BACKEND})"]
    p, c = problem, config
    if p.dtype == "e4m3" and c.schedule == "tma":
        refuse("ATTN-RENDER-FP8-SCHEDULE", "dtype e4m3, schedule tma")
    if p.dtype == "e4m3" and getattr(c, "kv_splits", 1) > 1:
        refuse("ATTN-RENDER-FP8-SPLIT-KV", f"dtype e4m3, kv_splits {c.kv_splits}")
    if p.dtype != "e4m3" and p.v_is_transposed:
        refuse("ATTN-RENDER-V-LAYOUT", f"dtype {p.dtype}, v_transposed true")
    if p.head_dim_v is not None:
        refuse("ATTN-RENDER-HEAD-DIM-V", f"head_dim {p.head_dim}, head_dim_v {p.head_dim_v}")
    if p.varlen and c.schedule == "tma":
        refuse("ATTN-RENDER-VARLEN-TMA", "varlen true, schedule tma")
    if p.varlen and p.dtype == "e4m3":
        refuse("ATTN-RENDER-VARLEN-FP8", "varlen true, dtype e4m3")
    if p.varlen and getattr(c, "kv_splits", 1) > 1:
        refuse("ATTN-RENDER-VARLEN-SPLIT-KV", f"varlen true, kv_splits {c.kv_splits}")
    grouped = p.heads_q != p.heads_kv
    if c.schedule == "tma":
        bad = [f"{k}={v}" for k, v, ok in (("mma_warpgroups", c.mma_warpgroups, c.mma_warpgroups == 1),
                                            ("persistent", c.persistent, not c.persistent),
                                            ("loads_q_separately", c.loads_q_separately, not c.loads_q_separately),
                                            ("acc_qk", c.acc_qk, c.acc_qk == "f32")) if not ok]
        if bad:
            refuse("ATTN-RENDER-TMA-OPTIONS", ", ".join(bad))
        if c.tile_q != WGMMA_M:
            refuse("ATTN-RENDER-TMA-TILE-Q", f"tile_q {c.tile_q}")
        if grouped:
            refuse("ATTN-RENDER-TMA-GQA", f"heads_q {p.heads_q}, heads_kv {p.heads_kv}")
    else:
        if c.cluster_m != 1:
            refuse("ATTN-RENDER-WS-CLUSTER", f"cluster_m {c.cluster_m}")
        if c.blocks_per_sm != 1 and not (c.kv_splits > 1 and c.mma_warpgroups == 1):
            refuse("ATTN-RENDER-WS-BLOCKS-PER-SM", f"blocks_per_sm {c.blocks_per_sm}, mma_warpgroups "
                                                   f"{c.mma_warpgroups}, kv_splits {c.kv_splits}")
        if c.schedule == "ws_pingpong" and not (c.persistent and c.loads_q_separately):
            refuse("ATTN-RENDER-PINGPONG-OPTIONS", f"persistent={c.persistent}, loads_q_separately={c.loads_q_separately}")
        if c.schedule == "ws_cooperative" and c.persistent and c.loads_q_separately:
            refuse("ATTN-RENDER-ONE-SPELLING", "spell it schedule ws_pingpong")
        if c.stages_q < c.mma_warpgroups or c.stages_kv < 2:
            refuse("ATTN-RENDER-88-STAGES", f"stages_q {c.stages_q}, mma_warpgroups {c.mma_warpgroups}, stages_kv {c.stages_kv}")
    if c.tile_q % (c.mma_warpgroups * WGMMA_M):
        refuse("ATTN-RENDER-88-TILE-Q", f"tile_q {c.tile_q} over {c.mma_warpgroups} warpgroup(s)")
    if c.kv_splits > 1 and c.schedule == "tma":
        refuse("ATTN-RENDER-SPLIT-SCHEDULE", f"kv_splits {c.kv_splits}, schedule tma")
    if c.kv_splits > 1 and p.causal:
        refuse("ATTN-RENDER-SPLIT-CAUSAL", f"kv_splits {c.kv_splits}, causal true")
    tile_order = getattr(c, "tile_order", "forward")
    if tile_order != "forward" and (c.schedule == "tma" or p.varlen or p.dtype == "e4m3" or c.kv_splits > 1):
        refuse("ATTN-RENDER-TILE-ORDER", f"tile_order {tile_order}, schedule {c.schedule}, varlen "
                                         f"{str(p.varlen).lower()}, dtype {p.dtype}, kv_splits {c.kv_splits}")
    return out


# --- the template context ----------------------------------------------------------------------------
def _describe(problem: AttentionProblem, config: AttentionConfig, khash: str) -> str:
    from ... import __version__
    return json.dumps({"backend": BACKEND, "config": config.to_dict(), "cutegen": __version__, "hash": khash,
                       "problem": problem.kernel_key()}, sort_keys=True, separators=(",", ":"))


def kernel_hash(problem: AttentionProblem, config: AttentionConfig) -> str:
    from ...manifest import kernel_hash as digest
    return digest(problem, config, BACKEND)


def _config_lines(problem: AttentionProblem, config: AttentionConfig) -> list[str]:
    c = config
    lines = [f"tile {c.tile_q} x {c.tile_kv} x {head_tile(problem)} (Q rows x KV rows x head dim {problem.head_dim})",
             f"schedule {c.schedule}, {c.mma_warpgroups} MMA warpgroup(s)",
             f"stages: Q {c.stages_q}, K/V {c.stages_kv}",
             f"persistent {str(c.persistent).lower()}, loads Q separately {str(c.loads_q_separately).lower()}",
             f"cluster {c.cluster_m}x1x1, {c.blocks_per_sm} CTA(s) per SM, Q K^T accumulates in {c.acc_qk}"]
    if problem.dtype == "e4m3":
        lines.append(f"e4m3 Q, K, V^T with descale factors, O in {problem.output_dtype}")
    if c.tile_order != "forward":
        lines.append(f"tile order {c.tile_order}: the Q blocks with the most causal KV tiles are handed out first")
    if c.kv_splits > 1:
        lines.append(f"KV length split into at most {c.kv_splits} chunks of whole {c.tile_kv}-key tiles, "
                     f"float32 partials combined by LSE")
    return lines


def _context(problem: AttentionProblem, config: AttentionConfig) -> dict[str, Any]:
    from ... import __version__
    khash = kernel_hash(problem, config)
    c = config
    return {
        "version": __version__, "kernel_hash": khash, "problem_class": problem.kernel_class_name,
        "config_name": c.short_name(), "config_lines": _config_lines(problem, config),
        "element": ELEMENT[problem.dtype], "element_out": ELEMENT[problem.output_dtype],
        "dtype": problem.dtype, "dtype_out": problem.output_dtype, "acc_qk": c.acc_qk, "element_acc_qk": ACC[c.acc_qk],
        "head_dim": problem.head_dim, "head_tile": head_tile(problem), "causal": problem.causal,
        "grouped": problem.heads_q != problem.heads_kv, "tile_q": c.tile_q, "tile_kv": c.tile_kv,
        "warp_specialized": c.warp_specialized, "schedule": c.schedule, "mma_warpgroups": c.mma_warpgroups,
        "stages_q": c.stages_q, "stages_kv": c.stages_kv, "persistent": c.persistent,
        "loads_q_separately": c.loads_q_separately, "cluster_m": c.cluster_m, "blocks_per_sm": c.blocks_per_sm,
        "describe_json": _describe(problem, config, khash), "smem_limit": SMEM_LIMIT, "kv_splits": c.kv_splits,
        "tile_order": c.tile_order,
    }


def _environment():
    from ...core.templates import environment
    return environment()


def varlen_header_text() -> str:
    """The varlen C++ header (templates/attention/varlen/fmha_varlen_sm90.hpp) as the renderer inlines it."""
    import cutegen.templates as templates_pkg
    from pathlib import Path
    return (Path(templates_pkg.__file__).parent / VARLEN_HEADER).read_text()


def render_source(problem: AttentionProblem, config: AttentionConfig) -> str:
    context = _context(problem, config)
    if problem.varlen:
        return _environment().get_template(VARLEN_TEMPLATE).render(**context, varlen_header=varlen_header_text())
    if problem.dtype == "e4m3":
        template = TEMPLATE_FP8
    else:
        template = TEMPLATE_SPLIT_KV if config.kv_splits > 1 else TEMPLATE
    return _environment().get_template(template).render(**context)


def render(problem: AttentionProblem, config: AttentionConfig, backend: str = BACKEND, *,
           cost: Any = None, toolchain: dict[str, Any] | None = None, legality: Any = None):
    """kernel.cu and manifest.json for (problem, config), as a ``cutegen.render.RenderedKernel`` (the one kernel
    directory writer every operation uses); a one-line CutegenError for what the template refuses."""
    if not isinstance(problem, AttentionProblem):
        raise FieldError("problem", f"expected an AttentionProblem, got {type(problem).__name__}")
    if not isinstance(config, AttentionConfig):
        raise FieldError("config", f"expected an AttentionConfig, got {type(config).__name__}")
    if backend != BACKEND:
        raise FieldError("backend", f"{backend!r} is not one of {BACKEND}")
    reasons = backend_refusals(problem, config, backend)
    if reasons:
        raise CutegenError("the attention renderer cannot build this configuration: " + "; ".join(reasons))
    from ... import manifest as manifest_mod
    source = render_source(problem, config)
    if toolchain is None:
        toolchain = {"cutlass": manifest_mod.cutlass_version(), "nvcc": manifest_mod.nvcc_version()}
    man = manifest_mod.build_manifest(problem=problem, config=config, backend=backend, source=source,
                                      legality=legality if legality is not None else {"checked_by": "renderer refusals"},
                                      cost=cost, toolchain=toolchain)
    man["op"] = "attention"
    man["abi"] = ("cutegen_attention_varlen" if problem.varlen else
                  "cutegen_attention_fp8" if problem.dtype == "e4m3" else "cutegen_attention")
    man["include_dirs"] = [SOURCE_88]
    from ...render import RenderedKernel
    return RenderedKernel(problem, config, backend, man["kernel_hash"],
                          {"kernel.cu": source, "manifest.json": manifest_mod.dumps(man)}, man)
