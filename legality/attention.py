"""Legality of a fused-attention (FMHA forward) configuration on CUTLASS 4.2's Hopper FMHA example.

The kernels are those of ``examples/88_hopper_fmha`` (in the ``nvidia-cutlass`` wheel under
``cutlass_library/source``; paths below are relative to that folder): ``KernelTma`` (one warpgroup
that loads and computes, ``kernel/fmha_kernel_tma.hpp`` + ``collective/fmha_collective_tma.hpp``)
and the warp-specialized cooperative / ping-pong kernel (``kernel/fmha_kernel_tma_warpspecialized.hpp``
+ ``collective/fmha_collective_tma_warpspecialized.hpp``). Both build Q K^T and P V with the SM90 GEMM
CollectiveBuilder (``KernelTmaWarpSpecialized``, one warpgroup per TiledMma), so the shared hardware
contracts apply to two GEMM contexts:

* Q K^T: M = tile_q / mma_warpgroups (each consumer warpgroup owns a slice of the Q tile), N = tile_kv,
  K = head_dim; Q and K from shared memory (SS);
* P V: M = tile_q / mma_warpgroups, N = head_dim (the TileShape's third mode serves both GEMMs),
  K = tile_kv; P from registers (``convert_to_gmma_rs``: the register-A "RS" form), V from shared memory.

Five rule sets, one per contract, each rule with a stable ID, an exact predicate, a one-line reason
with the offending values and its source:

* ``ATTN_WGMMA_RULES`` (attention_wgmma): the instruction shapes and types of both GEMMs;
* ``ATTN_TMA_RULES`` (attention_tma): the tensor maps of Q, K, V and O, judged by ``tensor_map``'s rules;
* ``ATTN_RESOURCE_RULES`` (attention_resources): ``sizeof(SharedStorage)``, setmaxnreg, accumulator
  registers;
* ``ATTN_FMHA_RULES`` (attention_fmha88): the example's own static_asserts, options and protocol limits.

``check_attention(problem, config)`` evaluates them all. The context reads the problem and config by
field name (``cutegen.ops.attention.problem.AttentionProblem`` / ``config.AttentionConfig``); this module
imports neither (legality knows nothing of the operation package, the search or rendering).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from math import gcd
from typing import Any

from cutegen import smem
from cutegen.dtypes import DTYPES

from .rule import RuleSet, Violation, evaluate_all

_EX = "examples/88_hopper_fmha"
_COLL_WS = f"{_EX}/collective/fmha_collective_tma_warpspecialized.hpp"
_COLL_TMA = f"{_EX}/collective/fmha_collective_tma.hpp"
_KERN_WS = f"{_EX}/kernel/fmha_kernel_tma_warpspecialized.hpp"
_KERN_TMA = f"{_EX}/kernel/fmha_kernel_tma.hpp"
_BUILDER = f"{_EX}/kernel/fmha_kernel_builder.hpp"
_EPI = f"{_EX}/collective/fmha_epilogue.hpp"
_PTX = "PTX ISA 9.1 §9.7.15"

THREADS_PER_WARPGROUP = 128
SMEM_PER_BLOCK = smem.SM90_SMEM_CAPACITY          # 232,448 B (rulebook D02)
SMEM_PER_SM = 233472                              # 228 KiB per SM; the driver reserves 1 KiB per block
SMEM_RESERVED_PER_BLOCK = 1024
DECODE_SETMAXNREG_CAP = 240                         # DecodeFmhaKernel (split template): the 2-warpgroup kernels' value
REGISTERS_PER_SM = 65536
LOAD_REGISTER_REQUIREMENT = 40 - 2 * 8            # fmha_kernel_tma_warpspecialized.hpp:131
SS_OP_N = (256, 192, 128, 96, 64, 32, 16, 8)      # cute ss_op_selector without extended shapes
OUTPUT_DTYPE = {"bf16": "bf16", "f16": "f16", "e4m3": "bf16"}
# The head dims the example instantiates (88_hopper_fmha.cu run_fwd_32/64/128/256; FP8 only 128 and 256).
EXAMPLE_HEAD_DIMS = {"bf16": (32, 64, 128, 256), "f16": (32, 64, 128, 256), "e4m3": (128, 256)}
WS_SCHEDULES = ("ws_cooperative", "ws_pingpong")


HEAD_TILE_STEP = 16


def head_tile(head_dim: int) -> int:
    """The kernel's head mode for a head dim: rounded up to 16 elements (cutegen.ops.attention.render.head_tile)."""
    return -(-head_dim // HEAD_TILE_STEP) * HEAD_TILE_STEP


class AttentionContext:
    """Derived facts of one (problem, config) pair, each computed once."""

    def __init__(self, problem: Any, config: Any):
        self.problem = problem
        self.config = config
        p, c = problem, config
        self.dtype = p.dtype
        self.bits = DTYPES[p.dtype].bits
        self.esize = self.bits // 8
        self.wgmma_k = DTYPES[p.dtype].wgmma_k
        self.head_dim = p.head_dim
        self.head_dim_v = p.head_dim if getattr(p, "head_dim_v", None) is None else p.head_dim_v
        # The TileShape's head mode: the head dim rounded up to a 16-element step (the renderer's head_tile;
        # TMA zero-fills the columns past head_dim). Both GEMMs and the shared memory use it.
        self.d = head_tile(self.head_dim)
        self.dv = head_tile(self.head_dim_v)
        self.ws = c.schedule in WS_SCHEDULES
        self.mma_wgs = c.mma_warpgroups
        # Q K^T and P V per consumer warpgroup (TileShapeQK = BlockQO / NumMmaWarpGroups, :87-92); the tma
        # kernel has one TiledMma over the whole tile (fmha_collective_tma.hpp:73).
        self.tm_wg = c.tile_q // self.mma_wgs if self.ws else c.tile_q
        self.threads = (self.mma_wgs + 1) * THREADS_PER_WARPGROUP if self.ws else THREADS_PER_WARPGROUP
        self.out_dtype = getattr(p, "output_dtype", None) or OUTPUT_DTYPE[p.dtype]
        # split-KV (config kv_splits > 1): the kernel's epilogue stores a float32 partial O per split
        # (templates/attention/fmha_sm90_splitkv.cu.j2: FmhaFwdEpilogue<float, ...>); a combine kernel writes O
        self.kv_splits = int(getattr(c, "kv_splits", 1))
        self.epilogue_dtype = "f32" if self.kv_splits > 1 else self.out_dtype

    # --- WGMMA ----------------------------------------------------------------------------------------
    @cached_property
    def qk_instruction_n(self) -> int | None:
        return next((n for n in SS_OP_N if self.config.tile_kv % n == 0), None)

    @cached_property
    def pv_instruction_n(self) -> int | None:
        return next((n for n in SS_OP_N if self.d % n == 0), None)

    # --- registers ------------------------------------------------------------------------------------
    @cached_property
    def mma_register_requirement(self) -> int | None:
        """setmaxnreg of the consumer warpgroups (fmha_kernel_tma_warpspecialized.hpp:131-133); None for tma."""
        if not self.ws:
            return None
        if self.decode_kernel:
            # templates/attention/fmha_sm90_splitkv.cu.j2 DecodeFmhaKernel: its own launch bounds (blocks_per_sm)
            # and the consumer's setmaxnreg capped at 240 (the two-warpgroup kernels' value)
            blocks = self.config.blocks_per_sm
            supply = (REGISTERS_PER_SM // self.threads // blocks // 8) * 8 * self.threads // THREADS_PER_WARPGROUP
            return min(DECODE_SETMAXNREG_CAP, ((supply - LOAD_REGISTER_REQUIREMENT) // self.mma_wgs // 8) * 8)
        supply = (REGISTERS_PER_SM // self.threads // 1 // 8) * 8 * self.threads // THREADS_PER_WARPGROUP
        return ((supply - LOAD_REGISTER_REQUIREMENT) // self.mma_wgs // 8) * 8

    @property
    def decode_kernel(self) -> bool:
        """The split-KV template's one-consumer-warpgroup kernel (DecodeFmhaKernel): warp-specialized, kv_splits > 1,
        mma_warpgroups 1. It sets its own launch bounds (blocks_per_sm 1 or 2) and setmaxnreg."""
        return self.ws and self.kv_splits > 1 and self.mma_wgs == 1

    @cached_property
    def register_budget(self) -> int:
        """Registers one consumer thread may hold: its setmaxnreg, or without one (the tma kernel)
        the share of the register file __launch_bounds__(128, blocks_per_sm) leaves, at most 255."""
        if self.ws:
            return self.mma_register_requirement
        per_thread = REGISTERS_PER_SM // (self.threads * self.config.blocks_per_sm) // 8 * 8
        return min(255, per_thread)

    @cached_property
    def registers(self) -> dict:
        """32-bit registers per consumer thread: S = Q K^T accumulator, P = S converted to the input type
        (the RS operand of P V), O = P V accumulator (f32), the softmax row max and sum (two rows per thread
        per 64-row WGMMA atom)."""
        t = THREADS_PER_WARPGROUP
        s = self.tm_wg * self.config.tile_kv // t
        s_regs = s // 2 if self.config.acc_qk == "f16" else s
        p_regs = s * self.bits // 32
        o_regs = self.tm_wg * self.dv // t
        softmax = 2 * 2 * (self.tm_wg // 64)
        return {"s": s_regs, "p": p_regs, "o": o_regs, "softmax": softmax,
                "total": s_regs + p_regs + o_regs + softmax}

    # --- shared memory --------------------------------------------------------------------------------
    @cached_property
    def epilogue_plan(self) -> smem.EpiloguePlan | None:
        """The TMA epilogue the example builds per warpgroup tile (fmha_epilogue.hpp:49-57: TmaWarpSpecialized,
        EpilogueTileAuto, void C, O in the output type)."""
        return _epilogue_plan(self.tm_wg, self.dv, self.epilogue_dtype, self.config.tile_kv)

    @cached_property
    def smem_parts(self) -> dict | None:
        """sizeof of each member of the kernel's SharedStorage, and the total (None: no epilogue fits)."""
        c = self.config
        return _smem_parts(self.epilogue_plan, self.tm_wg, self.d, self.dv, self.esize, self.epilogue_dtype, c.tile_kv,
                           c.stages_q, c.stages_kv, self.ws, self.mma_wgs, bool(c.persistent))

    @property
    def smem_bytes(self) -> int | None:
        parts = self.smem_parts
        return None if parts is None else parts["total"]

    # --- tensor maps ----------------------------------------------------------------------------------
    @cached_property
    def tensor_maps(self) -> dict:
        """The (data type, dims, byte strides, box, swizzle) of each descriptor the kernel encodes, innermost
        first: (head dim, sequence, head, batch). FP8 V is read transposed, sequence innermost (the example's
        StrideV for 1-byte types, 88_hopper_fmha.cu:253-255: WGMMA takes 8-bit B K-major only)."""
        return _tensor_maps(self.problem, self.tm_wg, self.config.tile_kv, self.head_dim, self.head_dim_v, self.d,
                            self.dtype, self.out_dtype)


@lru_cache(maxsize=4096)
def _epilogue_plan(tm: int, n: int, out_dtype: str, tile_kv: int) -> smem.EpiloguePlan | None:
    n_perf = 64 if DTYPES[out_dtype].bits == 8 and n % 64 == 0 else 32
    epi = (min(64, tm), gcd(min(n_perf, n), n))
    try:
        return smem.epilogue_plan("void", out_dtype, "row", (tm, n, tile_kv), epi)
    except ValueError:
        return None


@lru_cache(maxsize=65536)
def _smem_parts(plan, tm_wg: int, d: int, dv: int, esize: int, out_dtype: str, tile_kv: int, stages_q: int,
                stages_kv: int, ws: bool, mma_wgs: int, persistent: bool) -> dict | None:
    """The byte model of the kernels' SharedStorage (checked against nvcc: oracles/attention_smem_probe.py)."""
    if plan is None:
        return None
    al = smem.round_up
    q = al(tm_wg * d * stages_q * esize, 16)
    kv = al(max(tile_kv * d, dv * tile_kv) * stages_kv * esize, 16)
    mainloop = q + kv                                     # {smem_q; union{smem_k; smem_v}} (collective :131-137)
    epi_t, epi_align = smem.epilogue_tensor_bytes("void", out_dtype, plan)
    epi_pipe = smem.STAGE_PIPELINE_BYTES * plan.stages_c
    b = smem.BARRIER_BYTES
    align = max(16, epi_align)
    if ws:
        if persistent:                                    # TensorStorageStruct (kernel :72-75)
            tensors = al(al(mainloop, epi_align) + mma_wgs * epi_t, align)
        else:                                             # TensorStorageUnion (kernel :76-79)
            tensors = al(max(mainloop, mma_wgs * epi_t), align)
        # inner and outer pipelines, the reducer's PipelineAsync<2>, the order barrier, the load-warp barrier
        pipes = [2 * b * stages_kv, 2 * b * stages_q, 2 * b * 2, b * 2 * mma_wgs, b, epi_pipe]
    else:
        tensors = al(max(mainloop, epi_t), align)         # union {mainloop; epilogue} (fmha_kernel_tma.hpp:71-74)
        pipes = [2 * b * stages_kv, 2 * b * stages_q, epi_pipe]
    end = tensors
    for size in pipes:                                    # each alignas(16)
        end = al(end, 16) + size
    return {"q": q, "kv": kv, "mainloop": mainloop, "epilogue": epi_t, "tensors": tensors, "total": al(end, align)}


@lru_cache(maxsize=4096)
def _tensor_maps(p: Any, tm_wg: int, tile_kv: int, d: int, dv: int, tile_d: int, dtype: str, out_dtype: str) -> dict:
    """The descriptors of one (problem, rows per warpgroup, tile_kv): cached, a search asks for few. Global dims
    are the tensors' (head_dim), boxes the tile's (its head mode ``tile_d``, whose smem atom sets the box width)."""
    out = {}
    bits = DTYPES[dtype].bits
    layout = getattr(p, "layout", "bshd")
    for name, heads, seq, dim, dt, rows in (
            ("Q", p.heads_q, p.seqlen_q, d, dtype, tm_wg),
            ("K", p.heads_kv, p.seqlen_kv, d, dtype, tile_kv),
            ("V", p.heads_kv, p.seqlen_kv, dv, dtype, tile_kv),
            ("O", p.heads_q, p.seqlen_q, dv, out_dtype, min(64, tm_wg))):
        eb = DTYPES[dt].bits // 8
        if layout == "bhsd":
            strides = (dim * eb, seq * dim * eb, heads * seq * dim * eb)
        else:
            strides = (heads * dim * eb, dim * eb, seq * heads * dim * eb)
        dims = (dim, seq, heads, p.batch)
        box_inner_extent = tile_d
        if name == "V" and bits == 8:
            # V^T (D, S) per (batch, head), sequence contiguous; its rows are padded to 16 bytes (the documented
            # V^T layout: a TMA stride is a multiple of 16 B; the op's transposed copy pads, the ABI checks it)
            row = -(-seq * eb // 16) * 16
            dims = (seq, dim, heads, p.batch)
            strides = (row, dim * row, heads * dim * row)
            rows, box_inner_extent = tile_d, tile_kv
        swz = smem.largest_swizzle(box_inner_extent, DTYPES[dt].bits) or "INTER"
        width = smem.SWIZZLE_BYTES[swz] // eb
        box = (min(width, box_inner_extent), rows, 1, 1)
        tma_type = {"bf16": "BFLOAT16", "f16": "FLOAT16", "e4m3": "UINT8"}[dt]
        out[name] = (tma_type, dims, strides, box, swz)
    return out


@lru_cache(maxsize=4096)
def _tensor_map_reason(key: tuple) -> str | None:
    from .cutlass_sm90 import tensor_map_of
    from .tensor_map import check_tensor_map
    tm = tensor_map_of(*key)
    bad = [v for v in check_tensor_map(tm) if v.enforced]
    if not bad:
        return None
    return f"box {list(tm.box_dim)} over dims {list(tm.global_dim)} strides {list(tm.global_strides)} B: " + \
        "; ".join(str(v) for v in bad)


# ==================================================================================== WGMMA ==========
ATTN_WGMMA_RULES = RuleSet("attention_wgmma")
_w = ATTN_WGMMA_RULES.rule


@_w("ATTN-QK-TILE-M", rulebook="B20/E03", source=f"{_COLL_WS}:87-100 (TileShapeQK); cute/arch/mma_sm90.hpp "
    "ss_op_selector static_assert(Tile_M % 64 == 0)",
    summary="the Q K^T tile of each consumer warpgroup, tile_q / mma_warpgroups (tile_q for tma), is a positive "
            "multiple of 64 (the WGMMA M)")
def _qk_tile_m(c: AttentionContext):
    q = c.config.tile_q
    if q % c.mma_wgs or c.tm_wg % 64:
        return (f"tile_q={q} over {c.mma_wgs} consumer warpgroup(s) = {q / c.mma_wgs:g} rows each, not a multiple "
                f"of the WGMMA M 64")
    return None


@_w("ATTN-QK-WGMMA-K", rulebook="B04", source=f"{_PTX}.2 (K = 16 for f16/bf16, 32 for e4m3); ss_op_selector "
    "static_assert(Tile_K % K == 0); the renderer's head_tile (head_dim rounded up to 16)",
    summary="the head tile (head_dim rounded up to 16 elements: the K of Q K^T) is a multiple of the WGMMA K of the "
            "input type: 16 (bf16, f16: always), 32 (e4m3)")
def _qk_k(c: AttentionContext):
    if c.d % c.wgmma_k:
        return (f"head tile {c.d} (head_dim={c.head_dim}) is not a multiple of the {c.dtype} WGMMA K {c.wgmma_k}")
    return None


@_w("ATTN-PV-WGMMA-K", rulebook="B04", source=f"{_PTX}.2; {_COLL_WS}:102-112 (P V: K = tile_kv)",
    summary="tile_kv (the K of P V) is a multiple of the WGMMA K of the input type: 16 (bf16, f16), 32 (e4m3)")
def _pv_k(c: AttentionContext):
    if c.config.tile_kv % c.wgmma_k:
        return f"tile_kv={c.config.tile_kv} is not a multiple of the {c.dtype} WGMMA K {c.wgmma_k}"
    return None


@_w("ATTN-PV-WGMMA-N", rulebook="B04", source=f"{_PTX}.2 (N = 8..256 step 8); {_COLL_WS}:92 (TileShapePV N = "
    "the TileShape's head dim)",
    summary="the head tile (the N of P V) is a multiple of 8 in [8, 256]")
def _pv_n(c: AttentionContext):
    if c.d % 8 or not 8 <= c.d <= 256:
        return f"head tile {c.d} (head_dim={c.head_dim}): the P V WGMMA N must be a multiple of 8 in [8, 256]"
    return None


@_w("ATTN-ACC-QK-TYPE", rulebook="B05", source=f"{_PTX}.3 (bf16 accumulates in f32 only; f16 and e4m3 in f16 or "
    "f32); 88_hopper_fmha.cu:962 (the f16 Q K^T accumulator is an FP8 option)",
    summary="acc_qk f16 only with f16 or e4m3 inputs (bf16 WGMMA has no f16 accumulator)")
def _acc_type(c: AttentionContext):
    if c.config.acc_qk == "f16" and c.dtype == "bf16":
        return "acc_qk=f16 with bf16 inputs: wgmma .bf16 accumulates in .f32 only (ptxas rejects it)"
    return None


@_w("ATTN-PV-RS-OPERAND", rulebook="B06/B07", source=f"{_PTX}.5.2 (A in registers is K-major); {_COLL_WS}:112 "
    "convert_to_gmma_rs; :418 make_acc_into_op (the S accumulator's N becomes P's K in whole WGMMA K steps)",
    summary="P V reads P from registers: the S accumulator tile (tile_kv columns) splits into whole P V k-steps, "
            "tile_kv % WGMMA K == 0 and the Q K^T instruction N (widest ss_op_selector N dividing tile_kv) is a "
            "multiple of that K")
def _rs_operand(c: AttentionContext):
    n = c.qk_instruction_n
    if n is None or n % c.wgmma_k:
        return (f"Q K^T instruction N={n} (tile_kv={c.config.tile_kv}) is not a multiple of the {c.dtype} WGMMA "
                f"K {c.wgmma_k}: S does not convert into whole register-A fragments of P V")
    return None


# ==================================================================================== TMA ============
ATTN_TMA_RULES = RuleSet("attention_tma")


def _descriptor_rule(operand: str):
    def check(c: AttentionContext):
        why = _tensor_map_reason(c.tensor_maps[operand])
        return None if why is None else f"{operand}'s tensor map, {why}"
    return check


for _op, _what in (("Q", "Q (head_dim x seqlen_q x heads_q x batch)"),
                   ("K", "K (head_dim x seqlen_kv x heads_kv x batch)"),
                   ("V", "V (head_dim x seqlen_kv, or transposed seqlen_kv x head_dim for e4m3)"),
                   ("O", "O (head_dim x seqlen_q in the output type)")):
    ATTN_TMA_RULES.rule(
        f"ATTN-TMA-{_op}", rulebook="A03-A19",
        source=f"cuTensorMapEncodeTiled via legality/tensor_map.py; {_COLL_WS}:148-150 (TMA_Q/K/V from the two "
               f"GEMM collectives); {_EPI}:49-57 (O through the TMA epilogue)",
        summary=f"the tensor map of {_what}, strides per layout (bshd / bhsd), passes every enforced tensor-map "
                f"rule (16-byte strides, box dims <= 256, inner box within the swizzle span)")(_descriptor_rule(_op))


# ==================================================================================== resources ======
ATTN_RESOURCE_RULES = RuleSet("attention_resources")
_r = ATTN_RESOURCE_RULES.rule


@_r("ATTN-SMEM-CAPACITY", rulebook="D02", source=f"{_KERN_WS}:72-100 and {_KERN_TMA}:70-83 (SharedStorage); "
    f"{_COLL_WS}:131-137; CUDA PG §20.8.3 (227 KiB per block)",
    summary="sizeof(SharedStorage) (Q stages + K/V stages, with the epilogue per warpgroup and the barriers) "
            "<= 232,448 bytes")
def _smem_cap(c: AttentionContext):
    parts = c.smem_parts
    if parts is None:
        return None
    if parts["total"] > SMEM_PER_BLOCK:
        cfg = c.config
        return (f"shared storage {parts['total']} B (Q {parts['q']} B = {cfg.stages_q} stage(s) of {c.tm_wg}x{c.d}, "
                f"K/V {parts['kv']} B = {cfg.stages_kv} stages of {cfg.tile_kv}x{c.d}, epilogue {parts['epilogue']} "
                f"B) > {SMEM_PER_BLOCK} B")
    return None


@_r("ATTN-EPILOGUE-TILE", rulebook="E19", source=f"{_EPI}:49-57; epilogue/collective/builders/sm90_builder.inl "
    "(EpilogueTileAuto; no smem atom -> static_assert)",
    summary="the O epilogue tile (min(64, rows) x gcd(min(32, head_dim), head_dim)) has a GMMA smem atom")
def _epi_tile(c: AttentionContext):
    if c.epilogue_plan is None:
        return f"no epilogue smem atom for a {c.tm_wg}x{c.dv} O tile"
    return None


@_r("ATTN-SETMAXNREG-RANGE", rulebook="B18", source=f"PTX ISA 9.1 §9.7.19.5 (setmaxnreg: 24..256, multiple of 8); "
    f"{_KERN_WS}:131-133 (MmaRegisterRequirement); EMP:jit setmaxnreg 264 -> INVALID_PTX; "
    f"templates/attention/fmha_sm90_splitkv.cu.j2 DecodeFmhaKernel (its own blocks_per_sm and a cap of 240)",
    summary="the consumer warpgroups' setmaxnreg, ((65536 / threads / blocks / 8) * 8 * threads / 128 - 24) / "
            "mma_warpgroups rounded down to 8 (blocks 1; the split-KV one-warpgroup kernel: its blocks_per_sm, "
            "capped at 240), is in [24, 256]")
def _setmaxnreg(c: AttentionContext):
    r = c.mma_register_requirement
    if r is not None and not 24 <= r <= 256:
        return (f"{c.mma_wgs} consumer warpgroup(s) of {c.threads} threads get setmaxnreg {r}: outside [24, 256] "
                f"(ptxas rejects it)")
    return None


@_r("ATTN-REGISTERS", rulebook="B10", enforced=False,
    source=f"{_KERN_WS}:131-133 (setmaxnreg {240} for 2 consumer warpgroups); {_KERN_TMA}:108 (__launch_bounds__ "
           f"min blocks); {_COLL_WS}:388-418 (acc_pv, acc_qk, acc_qk_fixed live together); PG: 255 per thread",
    summary="S (tile_q/wg x tile_kv / 128, halved for an f16 accumulator) + P (S in the input type) + O "
            "(tile_q/wg x head_dim / 128) + softmax row state registers per consumer thread stay below its "
            "budget (setmaxnreg, or min(255, 65536 / (128 x blocks_per_sm))); above it spills (PERF)")
def _registers(c: AttentionContext):
    r = c.registers
    if r["total"] >= c.register_budget:
        return (f"S {r['s']} + P {r['p']} + O {r['o']} + softmax {r['softmax']} = {r['total']} registers per "
                f"consumer thread, not below the {c.register_budget}-register budget: spills")
    return None


# nvcc 13.0 (ptxas C7512, "wgmma.mma_async instructions are serialized due to insufficient register resources")
# on three bf16 warp-specialized kernels with 2 consumer warpgroups, each at 228 registers by the count above:
# head 64 128x256 cooperative and ping-pong (H200 build, 2026-11-26, bench/results/attention run 1) and head 256
# 128x128 cooperative (this machine, 2026-11-26); head 32 128x256 at 212 and head 128 128x128 at 164 built
# clean. The boundary lies in (212, 228]: the rule refuses from the first count seen to serialize. e4m3 too
# (helper fp8attn, this machine, 2026-11-26): head 128 128x256 cooperative persistent, f32 accumulation, 128 + 32
# + 64 + 4 = 228, serialized (C7512); the same head with 128x128 ping-pong (164) built clean, no spills. The
# CUTLASS 88 example's own FP8 128x256 kernel is that form: nvcc 13.0 serializes it.
SERIALIZED_AT_REGISTERS = 228


@_r("ATTN-WGMMA-SERIALIZED", rulebook="B10 (nvcc evidence)",
    source="ptxas C7512 on the H200 build of 2026-11-26 (bench/results/attention/2026-11-26-h200-run1-build.txt: "
           "attn_d64_bf16_128x256_ws{coop,pp}) and a head-256 128x128 cooperative build here; head 32 128x256 "
           "(212 registers) built clean; e4m3 head 128 128x256 (228) serialized here, 128x128 (164) clean",
    summary=f"S + P + O + softmax registers per consumer thread below {SERIALIZED_AT_REGISTERS} (any input type); "
            "from there ptxas serializes the WGMMAs (the build refuses the kernel)")
def _serialized(c: AttentionContext):
    r = c.registers
    if r["total"] >= SERIALIZED_AT_REGISTERS:
        return (f"S {r['s']} + P {r['p']} + O {r['o']} + softmax {r['softmax']} = {r['total']} registers per "
                f"consumer thread >= {SERIALIZED_AT_REGISTERS}: ptxas serializes the WGMMAs (C7512; seen at 228 "
                f"for head 64 128x256 and head 256 128x128)")
    return None


@_r("ATTN-BLOCKS-PER-SM-SMEM", rulebook="D03", enforced=False,
    source=f"{_KERN_TMA}:51,108 (kBlocksPerSM: __launch_bounds__ min blocks); CUDA PG §20.8.3 (228 KiB per SM, "
           f"1 KiB reserved per block)",
    summary="blocks_per_sm=2 (tma, or the split-KV one-warpgroup kernel) only if two blocks fit an SM: "
            "2 x (sizeof(SharedStorage) + 1024) <= 233,472")
def _bps_smem(c: AttentionContext):
    if (c.ws and not c.decode_kernel) or c.config.blocks_per_sm != 2 or c.smem_bytes is None:
        return None
    need = 2 * (c.smem_bytes + SMEM_RESERVED_PER_BLOCK)
    if need > SMEM_PER_SM:
        return (f"blocks_per_sm=2 needs 2 x ({c.smem_bytes} + {SMEM_RESERVED_PER_BLOCK}) = {need} B > "
                f"{SMEM_PER_SM} B per SM: one block per SM runs (PERF)")
    return None


# ==================================================================================== the example's kernel
ATTN_FMHA_RULES = RuleSet("attention_fmha88")
_f = ATTN_FMHA_RULES.rule


@_f("ATTN-HEAD-DIM-V-EQUAL", source=f"{_COLL_WS}:92 (TileShapePV = select<0,2,1>(TileShapeQK): one head dim for "
    f"both GEMMs); {_KERN_WS}:209 (K and V stages armed with kInnerLoadBytes, K's bytes)",
    summary="head_dim_v == head_dim (the example's TileShape has one head dim; V stages are armed with K's bytes)")
def _dv_equal(c: AttentionContext):
    if c.head_dim_v != c.head_dim:
        return (f"head_dim_v={c.head_dim_v} != head_dim={c.head_dim}: the 88 kernels have one head dim (a V stage "
                f"armed with {c.config.tile_kv * c.d * c.esize} B would receive {c.config.tile_kv * c.dv * c.esize} B)")
    return None


@_f("ATTN-HEAD-DIM-EXAMPLE", enforced=False, source="88_hopper_fmha.cu:918-985 (run_fwd_32/64/128/256; FP8 "
    "builds 128 and 256 only)",
    summary="head_dim is one the example instantiates (32/64/128/256 for bf16 and f16, 128/256 for e4m3); others "
            "are legal where WGMMA (ATTN-QK-WGMMA-K), TMA and shared memory allow, but not compiled by the example")
def _head_dim_example(c: AttentionContext):
    dims = EXAMPLE_HEAD_DIMS[c.dtype]
    if c.head_dim not in dims:
        return (f"head_dim={c.head_dim} ({c.dtype}) is not one the example instantiates ({', '.join(map(str, dims))}): "
                f"allowed by the hardware rules, needs its own GPU validation")
    return None


@_f("ATTN-CAN-IMPLEMENT", enforced=False, source=f"{_COLL_WS}:189-195 and {_COLL_TMA}:175-181 (can_implement: "
    "D <= head tile, D % Alignment == 0, Q % Alignment == 0, Alignment = 16 B / element)",
    summary="the example's can_implement: head_dim and seqlen_q are multiples of 16 bytes of elements (8 for bf16/f16, "
            "16 for e4m3); cutegen's C ABI does not call can_implement, so this is a note: its GPU validation with "
            "ragged seqlen_q decides")
def _can_implement(c: AttentionContext):
    align = 16 // c.esize
    bad = [f"{n}={v}" for n, v in (("head_dim", c.head_dim), ("seqlen_q", c.problem.seqlen_q)) if v % align]
    if bad:
        return f"{', '.join(bad)} not a multiple of {align} ({c.dtype}): the example's can_implement refuses it"
    return None


@_f("ATTN-PINGPONG-FLAGS", source=f"{_BUILDER}:134-156 (KernelTmaWarpSpecializedPingpong = the cooperative "
    "kernel with kIsPersistent and kLoadsQSeparately)",
    summary="schedule ws_pingpong has persistent=true and loads_q_separately=true (the builder forces both)")
def _pingpong_flags(c: AttentionContext):
    cfg = c.config
    if cfg.schedule == "ws_pingpong" and not (cfg.persistent and cfg.loads_q_separately):
        return (f"ws_pingpong with persistent={cfg.persistent}, loads_q_separately={cfg.loads_q_separately}: "
                f"the builder always sets both (the config would not describe its kernel)")
    return None


@_f("ATTN-WS-CLUSTER", source=f"{_COLL_WS}:80 (ClusterShape = Shape<_1,_1,_1>; kClusterM is read only by "
    f"{_COLL_TMA}:62)",
    summary="the warp-specialized schedules run without a cluster: cluster_m == 1")
def _ws_cluster(c: AttentionContext):
    if c.ws and c.config.cluster_m != 1:
        return f"{c.config.schedule} with cluster_m={c.config.cluster_m}: its ClusterShape is 1x1x1"
    return None


@_f("ATTN-WS-BLOCKS-PER-SM", source=f"{_KERN_WS}:127 (MinBlocksPerMultiprocessor = 1; kBlocksPerSM is read only "
    f"by {_KERN_TMA}:51); templates/attention/fmha_sm90_splitkv.cu.j2 DecodeFmhaKernel (MinBlocksPerMultiprocessor = "
    f"blocks_per_sm)",
    summary="the warp-specialized schedules run one block per SM: blocks_per_sm == 1, except the split-KV kernel "
            "with one consumer warpgroup (kv_splits > 1, mma_warpgroups 1), whose launch bounds take blocks_per_sm")
def _ws_bps(c: AttentionContext):
    if c.ws and c.config.blocks_per_sm != 1 and not c.decode_kernel:
        return (f"{c.config.schedule} with blocks_per_sm={c.config.blocks_per_sm}, mma_warpgroups={c.mma_wgs}, "
                f"kv_splits={c.kv_splits}: the kernel's launch bounds say 1 (only the split-KV one-warpgroup kernel "
                f"sets its own)")
    return None


@_f("ATTN-TMA-ONE-WARPGROUP", source=f"{_COLL_TMA}:172 (MaxThreadsPerBlock = size(TiledMmaQK): the builder's "
    "KernelTmaWarpSpecialized TiledMma is one warpgroup)",
    summary="schedule tma runs one warpgroup: mma_warpgroups == 1")
def _tma_one_wg(c: AttentionContext):
    if not c.ws and c.mma_wgs != 1:
        return f"tma with mma_warpgroups={c.mma_wgs}: the kernel is one 128-thread warpgroup"
    return None


@_f("ATTN-TMA-NOT-PERSISTENT", source=f"{_KERN_TMA}:56 (IndividualTileScheduler); {_COLL_TMA}:248-252 (warp 0 "
    "loads Q itself)",
    summary="schedule tma is neither persistent nor loads Q separately")
def _tma_flags(c: AttentionContext):
    cfg = c.config
    if not c.ws and (cfg.persistent or cfg.loads_q_separately):
        return (f"tma with persistent={cfg.persistent}, loads_q_separately={cfg.loads_q_separately}: one tile per "
                f"block, Q loaded by warp 0")
    return None


@_f("ATTN-STAGES-Q", source=f"{_COLL_WS}:81 static_assert(StagesQ::value >= NumMmaWarpGroups)",
    summary="warp-specialized: stages_q >= mma_warpgroups (each consumer warpgroup holds its own Q slice)")
def _stages_q(c: AttentionContext):
    if c.ws and c.config.stages_q < c.mma_wgs:
        return f"stages_q={c.config.stages_q} < mma_warpgroups={c.mma_wgs}"
    return None


@_f("ATTN-WS-STAGES-KV", source=f"{_COLL_WS}:82 static_assert(Stages >= 2); :438-484 (a consumer holds K_j, V_j and "
    "V_{j-1} before it releases V_{j-1}); legality/attention_pipeline.py: the explorer finds PIPE-DEADLOCK at 2",
    summary="warp-specialized: stages_kv >= 3 (the static_assert allows 2, which deadlocks from the second KV tile "
            "on: the consumer waits for V_j while it still holds V_{j-1} and K_j)")
def _ws_stages_kv(c: AttentionContext):
    if c.ws and c.config.stages_kv < 3:
        return (f"stages_kv={c.config.stages_kv}: a consumer holds 3 K/V stages at once (V_(j-1), K_j, V_j); "
                f"with fewer the producer never gets one back (deadlock)")
    return None


@_f("ATTN-TMA-STAGES-KV", source=f"{_COLL_TMA}:269-276 (the prologue fills every stage, K for even i, V for odd); "
    ":371-440 (the loop waits for K_j before it loads K_(j+1)); legality/attention_pipeline.py: the explorer finds "
    "PIPE-DEADLOCK at 2 and PIPE-READ-BEFORE-LOAD (K where V is expected) at odd counts",
    summary="schedule tma: stages_kv is even and >= 4 (the prologue must hold K_0, V_0, K_1, V_1; an odd count "
            "desynchronises the K/V alternation of the ring)")
def _tma_stages_kv(c: AttentionContext):
    s = c.config.stages_kv
    if not c.ws and (s < 4 or s % 2):
        why = "odd: the ring's K/V alternation breaks (a V read gets a K tile)" if s % 2 else \
            "the first loop iteration waits for K_1, which the prologue did not load (deadlock)"
        return f"stages_kv={s}: {why}"
    return None


def cluster_trips_unequal(causal: bool, tile_q: int, tile_kv: int, cluster_m: int) -> bool:
    """Whether the ``cluster_m`` consecutive Q blocks of a tma cluster can run different KV trip counts.

    Under the causal mask Q block b runs ceil((b + 1) * tile_q / tile_kv) tiles (fmha_fusion.hpp:136-146); the
    blocks c*j .. c*j + c - 1 of a cluster end their diagonals inside one KV tile, so their counts agree for every
    j, exactly when tile_kv is a multiple of cluster_m * tile_q (their diagonal ends lie in one interval
    (j/n, (j+1)/n] of the KV tiles, n = tile_kv / (cluster_m * tile_q)). The H200 run of 2026-11-26 validated the
    64 x 128 cluster-2 causal kernel (equal trips: 128 = 2 x 64) on every case."""
    return bool(causal) and cluster_m > 1 and tile_kv % (cluster_m * tile_q) != 0


@_f("ATTN-CLUSTER-CAUSAL", source=f"{_COLL_TMA}:233,259-266 (K/V multicast to the cluster's CTAs; each CTA's trip "
    f"count from its own Q block); {_EX}/collective/fmha_fusion.hpp:136-146 (causal trip count grows with the Q block); "
    "the H200 run of 2026-11-26 (bench/results/attention/2026-11-26-h200-run3-*): 64 x 128 with cluster_m 2 and the "
    "causal mask, whose two Q blocks run equal trips, validated on every case",
    summary="cluster_m > 1 with the causal mask only if tile_kv is a multiple of cluster_m x tile_q: otherwise the Q "
            "blocks of one cluster run different KV trip counts, and the longer one waits for multicast halves never "
            "sent")
def _cluster_causal(c: AttentionContext):
    cfg = c.config
    if cluster_trips_unequal(getattr(c.problem, "causal", False), cfg.tile_q, cfg.tile_kv, cfg.cluster_m):
        return (f"cluster_m={cfg.cluster_m} with the causal mask and tile_kv={cfg.tile_kv}, not a multiple of "
                f"{cfg.cluster_m} x tile_q={cfg.cluster_m * cfg.tile_q}: the Q blocks of a cluster need different KV "
                f"tile counts, the multicast K/V loads of the shorter one stop (hang)")
    return None


@_f("ATTN-CLUSTER-EXIT", source=f"{_KERN_TMA}:206-221 (no cluster sync, no producer tail after the epilogue); "
    f"{_COLL_TMA}:365,430,503 (consumer_release signals every CTA the stage was multicast from); CUDA PG "
    "(distributed shared memory: every access to a peer's shared memory completes before either block exits); "
    "legality/attention_pipeline.py fmha_tma_cluster: the explorer finds PIPE-ARRIVE-AFTER-EXIT",
    summary="cluster_m == 1: with two CTAs one CTA's last releases arrive on the other's empty barriers after that "
            "CTA may have exited (the tma kernel has no cluster sync or producer tail at exit)")
def _cluster_exit(c: AttentionContext):
    if not c.ws and c.config.cluster_m > 1:
        return (f"cluster_m={c.config.cluster_m}: a CTA's consumer_release of its last K/V stages reaches the peer "
                f"CTA's barriers with nothing keeping the peer alive (dangling mbarrier arrive after exit)")
    return None


# ==================================================================================== FP8 (e4m3) =====
# The rules an 8-bit (e4m3) attention kernel adds (helper fp8attn, issue 25). The shared ones already cover it:
# ATTN-QK-WGMMA-K / ATTN-PV-WGMMA-K (K = 32: head dims and tile_kv multiples of 32), ATTN-TMA-V (V^T's
# descriptor), ATTN-SMEM-CAPACITY (1-byte stages; the smem probe oracle has e4m3 rows), ATTN-REGISTERS (P in a
# quarter of S's registers).
ATTN_FP8_RULES = RuleSet("attention_fp8")
_8 = ATTN_FP8_RULES.rule


@_8("ATTN-FP8-V-K-MAJOR", rulebook="B06", source=f"{_PTX} (wgmma.mma_async imm-trans-a/imm-trans-b: the transpose exists for "
    ".f16/.bf16 only, so 8-bit A and B are K-major); 88_hopper_fmha.cu:253-255 (StrideV (_1, int, (int, int)) for 1-byte elements)",
    summary="e4m3 inputs need V stored transposed (problem v_transposed: the KV sequence, P V's K, contiguous); "
            "16-bit inputs are read with V's head dim contiguous")
def _fp8_v_k_major(c: AttentionContext):
    vt = getattr(c.problem, "v_is_transposed", c.dtype == "e4m3")
    if c.dtype == "e4m3" and not vt:
        return ("e4m3 with V stored (seqlen_kv, head_dim), head dim contiguous: 8-bit WGMMA reads B (V, K = the KV "
                "sequence) K-major only; store V^T (v_transposed) or let the op transpose it")
    return None


@_8("ATTN-ACC-QK-F16-CONSENT", rulebook="B05", source=f"{_PTX}.3 (.f16 accumulator: 11-bit significand); "
    "88_hopper_fmha.cu:962 (the FP8 kAccQK = half_t kernel); FlashAttention-3 keeps fp32 accumulation",
    summary="acc_qk f16 only when the problem allows it (allow_f16_qk_acc): an f16 Q K^T accumulator rounds every "
            "partial sum to 11 bits and overflows past 65504, a real accuracy trade the caller must choose")
def _acc_qk_consent(c: AttentionContext):
    if c.config.acc_qk == "f16" and not getattr(c.problem, "allow_f16_qk_acc", False):
        return ("acc_qk=f16 but the problem does not allow an f16 Q K^T accumulator (allow_f16_qk_acc false): "
                "the default is f32")
    return None


@_8("ATTN-FP8-SCHEDULE", rulebook="B06", source=f"{_COLL_TMA}:75-78 (LayoutQKV fixed to (int, _1, (int, int)): "
    "V head-dim contiguous, no transposed V)",
    summary="e4m3 runs on the warp-specialized schedules (ws_cooperative, ws_pingpong): the tma mainloop has one "
            "layout for Q, K and V and cannot read V^T")
def _fp8_schedule(c: AttentionContext):
    if c.dtype == "e4m3" and not c.ws:
        return f"e4m3 with schedule {c.config.schedule}: the tma mainloop reads V head-dim contiguous only"
    return None


# ============================================================================ split-KV (decode) =====
# The split-KV kernel (config kv_splits > 1; templates/attention/fmha_sm90_splitkv.cu.j2): the KV length cut
# into chunks of whole KV tiles run by separate CTAs, float32 partial O and LSE per split in the workspace, a
# combine kernel after. cutegen/ops/attention/splitkv.py mirrors its arithmetic.
_SPLIT_TPL = "templates/attention/fmha_sm90_splitkv.cu.j2"
INT32_MAX = 2**31 - 1
ATTN_SPLIT_RULES = RuleSet("attention_split_kv")
_s = ATTN_SPLIT_RULES.rule


def split_kv_tiles(seqlen_kv: int, tile_kv: int) -> int:
    """KV tiles of a sequence: the most splits that each get one (the ABI runs min(kv_splits, tiles))."""
    return -(-seqlen_kv // tile_kv)


@_s("ATTN-SPLIT-SCHEDULE", source=f"{_SPLIT_TPL} (SplitKvMainloop derives from {_COLL_WS}'s "
    "FmhaMainloopTmaWarpSpecialized; the tma kernel's loads are another collective, fmha_collective_tma.hpp)",
    summary="kv_splits > 1 needs a warp-specialized schedule (ws_cooperative or ws_pingpong)")
def _split_schedule(c: AttentionContext):
    if c.kv_splits > 1 and not c.ws:
        return f"kv_splits={c.kv_splits} with schedule {c.config.schedule}: the split mainloop is the warp-specialized one"
    return None


@_s("ATTN-SPLIT-CAUSAL", source="cutegen/ops/attention/problem.py (causal is top-left, SDPA's is_causal); "
    f"{_EX}/collective/fmha_fusion.hpp:136-146 (CausalFusion::get_trip_count <= ceil((q_block + 1) x tile_q / tile_kv))",
    summary="kv_splits > 1 only without the causal mask: top-left causal reads at most ceil((q_block + 1) x tile_q / "
            "tile_kv) KV tiles per Q block, so the keys past seqlen_q are never read and there is no long walk to split "
            "(the split kernel renders no mask)")
def _split_causal(c: AttentionContext):
    if c.kv_splits > 1 and getattr(c.problem, "causal", False):
        return (f"kv_splits={c.kv_splits} with causal true: a Q block of {c.config.tile_q} rows reads at most "
                f"ceil((q_block + 1) x {c.config.tile_q} / {c.config.tile_kv}) KV tiles (top-left mask)")
    return None


@_s("ATTN-SPLIT-TILES", source=f"{_SPLIT_TPL} kv_split_of (split j runs tiles [floor(j T / S), floor((j + 1) T / S))); "
    "cutegen/ops/attention/splitkv.py split_ranges",
    summary="kv_splits <= ceil(seqlen_kv / tile_kv): every split owns at least one KV tile (beyond that the ABI "
            "runs min(kv_splits, tiles) splits, so a larger count is the same kernel with a larger workspace)")
def _split_tiles(c: AttentionContext):
    if c.kv_splits <= 1:
        return None
    tiles = split_kv_tiles(c.problem.seqlen_kv, c.config.tile_kv)
    if c.kv_splits > tiles:
        return (f"kv_splits={c.kv_splits} > {tiles} KV tiles of {c.config.tile_kv} keys in seqlen_kv="
                f"{c.problem.seqlen_kv}: {c.kv_splits - tiles} split(s) would have no key")
    return None


@_s("ATTN-SPLIT-WORKSPACE", source=f"{_SPLIT_TPL} (StrideO of the partial O: (head dim, _1, (splits x rows x head "
    f"dim, rows x head dim)), int); {_EPI}:62-66 (the epilogue's strides are int)",
    summary="kv_splits x group x seqlen_q x head_dim_v <= 2^31 - 1: the partial O of one (batch, KV head) across its "
            "splits is addressed with the 88 epilogue's 32-bit strides")
def _split_workspace(c: AttentionContext):
    if c.kv_splits <= 1:
        return None
    p = c.problem
    elems = c.kv_splits * (p.heads_q // p.heads_kv) * p.seqlen_q * c.head_dim_v
    if elems > INT32_MAX:
        return (f"kv_splits={c.kv_splits} x group {p.heads_q // p.heads_kv} x seqlen_q {p.seqlen_q} x head_dim_v "
                f"{c.head_dim_v} = {elems} partial-O elements per (batch, KV head) > 2^31 - 1")
    return None


# ==================================================================================== the check ======
RULESETS: list[RuleSet] = [ATTN_WGMMA_RULES, ATTN_TMA_RULES, ATTN_RESOURCE_RULES, ATTN_FMHA_RULES, ATTN_SPLIT_RULES,
                           ATTN_FP8_RULES]
# Warnings that do not make a configuration unfit for the search (both are still reported): a head dim the
# example does not compile is what the search is for; can_implement is not called by cutegen's ABI.
NOTE_ONLY = frozenset({"ATTN-HEAD-DIM-EXAMPLE", "ATTN-CAN-IMPLEMENT"})


@dataclass
class AttentionReport:
    legal: bool
    violations: list[Violation]
    warnings: list[Violation] = field(default_factory=list)
    smem_bytes: int | None = None
    registers: dict = field(default_factory=dict)

    @property
    def search_legal(self) -> bool:
        """Legal, and no warning but the notes: what the search may rank (spills are PERF, pruned)."""
        return self.legal and all(w.rule_id in NOTE_ONLY for w in self.warnings)

    def to_dict(self) -> dict:
        return {"legal": self.legal, "rules": [v.rule_id for v in self.violations],
                "warnings": [v.rule_id for v in self.warnings], "smem_bytes": self.smem_bytes,
                "registers": self.registers, "reasons": [str(v) for v in self.violations + self.warnings]}


def check_attention(problem: Any, config: Any) -> AttentionReport:
    """Every attention rule on (problem, config): enforced violations, then warnings."""
    ctx = AttentionContext(problem, config)
    vs = evaluate_all(RULESETS, ctx)
    enforced = [v for v in vs if v.enforced]
    return AttentionReport(not enforced, enforced, [v for v in vs if not v.enforced], ctx.smem_bytes,
                           ctx.registers)


_ENFORCED_FIRST: list | None = None


def first_pruning_violation(ctx: AttentionContext) -> Violation | None:
    """The first rule that makes ``ctx`` unfit for the search (an enforced rule, then a warning other than the
    notes), or None: the search's cheap judge (the rules in rule-set order, enforced ones first)."""
    global _ENFORCED_FIRST
    if _ENFORCED_FIRST is None:
        rules = [r for rs in RULESETS for r in rs]
        _ENFORCED_FIRST = [r for r in rules if r.enforced] + \
            [r for r in rules if not r.enforced and r.id not in NOTE_ONLY]
    for r in _ENFORCED_FIRST:
        v = r.evaluate(ctx)
        if v is not None:
            return v
    return None


def all_attention_rules() -> list:
    return [r for rs in RULESETS for r in rs]


__all__ = ["AttentionContext", "AttentionReport", "check_attention", "first_pruning_violation", "RULESETS", "NOTE_ONLY",
           "ATTN_WGMMA_RULES", "ATTN_TMA_RULES", "ATTN_RESOURCE_RULES", "ATTN_FMHA_RULES", "ATTN_SPLIT_RULES",
           "ATTN_FP8_RULES", "all_attention_rules", "split_kv_tiles"]
