"""Legality of an attention backward configuration on CUTLASS 4.2's Hopper FMHA backward (example 88).

The kernel is ``FmhaKernelTmaWarpSpecialized`` over ``FmhaBwdMainloopTmaWarpSpecialized`` and
``FmhaBwdEpilogueKV`` (``examples/88_hopper_fmha``: ``collective/fmha_collective_bwd_tma_warpspecialized.hpp``,
``collective/fmha_epilogue_bwd.hpp``, ``device/fmha_device_bwd.hpp``; paths relative to the wheel's
``cutlass_library/source``). Its only choices are the TileShape (BlockQO = ``tile_q``, BlockKV = ``tile_kv``, the
head dim); everything else is fixed by the collective: two MMA warpgroups of ``tile_kv / 2`` keys each, 4 Q/dO
stages, 2 K/V stages per MMA warpgroup, float32 accumulators. Five GEMMs per (KV block, Q tile), per warpgroup:

* S = K Q^T and dP = V dO^T: M = tile_kv / 2, N = tile_q, K = head dim (SS);
* dV += P dO and dK += dS Q: M = tile_kv / 2, N = head dim, K = tile_q (P from registers: RS; dS from smem);
* dQ = dS^T K: M = tile_q, N = head dim, K = tile_kv / 2 per warpgroup (the second warpgroup issues both halves).

``check_backward(problem, config)`` evaluates ``BWD_RULES``; each rule has a stable ID, an exact predicate, a
one-line reason with the offending values and its source. The problem and config are read by field name
(``AttentionProblem``, ``cutegen.ops.attention.backward.AttentionBackwardConfig``); this module imports neither.
The rulebook rows are legality/RULEBOOK-attention.md's section "Backward".
"""
from __future__ import annotations

from typing import Any

from .rule import RuleSet, Violation

_EX = "examples/88_hopper_fmha"
_COLL = f"{_EX}/collective/fmha_collective_bwd_tma_warpspecialized.hpp"
_KERN = f"{_EX}/kernel/fmha_kernel_tma_warpspecialized.hpp"
_MAIN = f"{_EX}/88_hopper_fmha.cu"
_PTX = "PTX ISA 9.1 §9.7.15"

SMEM_PER_BLOCK = 232448            # sm_90 opt-in shared memory per block (rulebook D02)
WGMMA_M = 64
DTYPES = ("bf16", "f16")
# The head dims and tiles the example instantiates (88_hopper_fmha.cu run_bwd_32/64/128: "tma ws cooperative ...")
EXAMPLE_TILES = {32: ((64, 128), (128, 128)), 64: ((64, 128), (128, 128)), 128: ((64, 128),)}
HEAD_DIMS = tuple(EXAMPLE_TILES)
# Accumulator registers per MMA thread (float32 dK, dV, S, dP fragments) the example's kernels hold at most:
# 64x128 at head 128 and 128x128 at head 64 both hold 192 of the 240 setmaxnreg gives a consumer (kernel :131-133)
ACCUMULATOR_REGISTERS_MAX = 192
THREADS_PER_WARPGROUP = 128

# sizeof(Kernel::SharedStorage) - sizeof(CollectiveMainloop::SharedStorage): the epilogue's storage and the pipeline
# barriers, 512 bytes on every configuration nvcc 13.0 measured (oracles/attention_backward_smem_probe.cu, 9 rows:
# bf16 and f16, heads 32-128, tiles 64x128, 128x128, 64x256; tests/test_attention_backward.py pins them)
EPILOGUE_AND_BARRIERS = 512


def _mainloop_bytes(tile_q: int, tile_kv: int, d: int, esize: int) -> int:
    """The collective's SharedStorage (collective :144-175): K/K'/V (a union: tile_kv/2 x d x 4 stages), dS (tile_q x
    tile_kv), Q/dO/Q'/dO' (a union: tile_q x d x 4 stages), the float32 dQ staging (tile_q x d x 2) and LSE/sum_OdO
    (a union: float tile_q x 4)."""
    kv = (tile_kv // 2) * d * 4 * esize
    ds = tile_q * tile_kv * esize
    q = tile_q * d * 4 * esize
    dq = tile_q * d * 2 * 4
    lse = tile_q * 4 * 4
    return kv + ds + q + dq + lse


def shared_memory_bytes(problem: Any, config: Any) -> int:
    """``sizeof(Kernel::SharedStorage)`` in bytes: the mainloop's storage plus the epilogue's and the barriers'
    (byte-equal to nvcc on the probe's 9 configurations)."""
    return _mainloop_bytes(config.tile_q, config.tile_kv, problem.head_dim, 2) + EPILOGUE_AND_BARRIERS


def accumulator_registers(problem: Any, config: Any) -> int:
    """float32 accumulator registers per MMA thread: dK and dV ((tile_kv / 2) x d each) and S and dP
    ((tile_kv / 2) x tile_q each), over the 128 threads of a warpgroup."""
    half = config.tile_kv // 2
    return (2 * half * problem.head_dim + 2 * half * config.tile_q) // THREADS_PER_WARPGROUP


BWD_RULES = RuleSet("attention_backward")


@BWD_RULES.rule("ATTN-BWD-DTYPE", summary="dtype is bf16 or f16",
                source=f"{_MAIN}:1124-1127 (no FP8 backward); {_COLL} (16-bit GMMA, float accumulators)")
def _dtype(ctx):
    if ctx.problem.dtype not in DTYPES:
        return f"dtype {ctx.problem.dtype}: the backward is 16-bit only (the example has no FP8 backward)"
    return None


@BWD_RULES.rule("ATTN-BWD-HEAD-DIM", summary="head_dim is one of 32, 64, 128 (the example's backward instantiations)",
                source=f"{_MAIN}:990-1035 run_bwd_32/64/128; templates/attention/fmha_bwd_sm90.cu.j2 sum_OdO "
                       "(head_dim / 32 elements per lane)")
def _head_dim(ctx):
    d = ctx.problem.head_dim
    if d not in HEAD_DIMS:
        return f"head_dim {d} is not one of {', '.join(map(str, HEAD_DIMS))}"
    return None


@BWD_RULES.rule("ATTN-BWD-HEAD-DIM-V", summary="head_dim_v equals head_dim",
                source=f"{_COLL}:73-76 (one head mode for all five GEMMs)")
def _head_dim_v(ctx):
    dv = getattr(ctx.problem, "head_dim_v", None)
    if dv is not None and dv != ctx.problem.head_dim:
        return f"head_dim_v {dv} != head_dim {ctx.problem.head_dim}"
    return None


@BWD_RULES.rule("ATTN-BWD-KV-TILE-M", summary="tile_kv / 2 is a multiple of 64 (the M of S, dP, dV, dK per warpgroup)",
                source=f"{_COLL}:73-76 TileShapeNM = BlockKV / NumMmaWarpGroups; {_PTX} wgmma M = 64")
def _kv_tile(ctx):
    half = ctx.config.tile_kv // 2
    if ctx.config.tile_kv % 2 or half % WGMMA_M:
        return f"tile_kv {ctx.config.tile_kv}: {half} keys per MMA warpgroup is not a multiple of {WGMMA_M}"
    return None


@BWD_RULES.rule("ATTN-BWD-Q-TILE-M", summary="tile_q is a multiple of 64 (the M of dQ = dS^T K)",
                source=f"{_COLL}:80 TileShapeMD = (BlockQO, D, BlockKV / 2); {_PTX} wgmma M = 64")
def _q_tile(ctx):
    if ctx.config.tile_q % WGMMA_M:
        return f"tile_q {ctx.config.tile_q} is not a multiple of {WGMMA_M}"
    return None


@BWD_RULES.rule("ATTN-BWD-SMEM-CAPACITY", summary=f"sizeof(SharedStorage) <= {SMEM_PER_BLOCK} bytes",
                source=f"{_COLL}:144-175; {_KERN}:72-102; CUDA guide (sm_90 opt-in 227 KB)", rulebook="D02")
def _smem(ctx):
    need = shared_memory_bytes(ctx.problem, ctx.config)
    if need > SMEM_PER_BLOCK:
        return (f"tile {ctx.config.tile_q}x{ctx.config.tile_kv} at head_dim {ctx.problem.head_dim} needs {need} bytes "
                f"of shared memory, more than {SMEM_PER_BLOCK}")
    return None


@BWD_RULES.rule("ATTN-BWD-REGISTERS",
                summary=f"float32 dK, dV, S, dP accumulator registers per MMA thread <= {ACCUMULATOR_REGISTERS_MAX}",
                source=f"{_KERN}:131-133 (setmaxnreg 240 per consumer); {_MAIN}:1007-1030 (the example's largest: 192)")
def _registers(ctx):
    regs = accumulator_registers(ctx.problem, ctx.config)
    if regs > ACCUMULATOR_REGISTERS_MAX:
        return (f"tile {ctx.config.tile_q}x{ctx.config.tile_kv} at head_dim {ctx.problem.head_dim}: {regs} accumulator "
                f"registers per MMA thread, more than the {ACCUMULATOR_REGISTERS_MAX} the example's kernels hold of 240")
    return None


@BWD_RULES.rule("ATTN-BWD-EXAMPLE-TILE", summary="(tile_q, tile_kv) is one the example instantiates for the head dim",
                source=f"{_MAIN}:990-1035", enforced=False)
def _example_tile(ctx):
    tiles = EXAMPLE_TILES.get(ctx.problem.head_dim, ())
    if (ctx.config.tile_q, ctx.config.tile_kv) not in tiles:
        return (f"tile {ctx.config.tile_q}x{ctx.config.tile_kv} at head_dim {ctx.problem.head_dim} is not one of the "
                f"example's ({', '.join(f'{q}x{k}' for q, k in tiles) or 'none'}): it needs its own GPU validation")
    return None


class _Context:
    def __init__(self, problem: Any, config: Any):
        self.problem = problem
        self.config = config


def check_backward(problem: Any, config: Any) -> list[Violation]:
    """The enforced rules (problem, config) breaks, in declaration order (the notes, ``enforced`` False, are left
    out: ``notes_backward``)."""
    return [v for v in BWD_RULES.evaluate(_Context(problem, config)) if v.enforced]


def notes_backward(problem: Any, config: Any) -> list[Violation]:
    return [v for v in BWD_RULES.evaluate(_Context(problem, config)) if not v.enforced]


RULESETS = (BWD_RULES,)
