"""Attention's candidate configurations, their check and a first cost, for ``cutegen.core.search``.

This is the small, explicit space the operation is searched over until the e-graph's attention space,
its legality rules (legality/attention*) and its pipeline-priced cost model take over: every candidate is
judged by the renderer's refusals (``render.backend_refusals``) and by a shared-memory estimate, and ranked
by a roofline cost with the tile's own waste (Q rows past seqlen_q, KV rows past seqlen_kv, causal tiles on
the diagonal, waves over the SMs). It ranks; it does not claim to predict microseconds well.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from .config import AttentionConfig
from .problem import ELEMENT_BYTES, AttentionProblem
from .render import backend_refusals, head_tile

SMEM_BYTES = 232448 - 1024        # H100/H200 opt-in per block, less the pipelines' barriers (a margin)
SM_COUNT = 132                    # H100 SXM / H200
PEAK_TFLOPS_16BIT = 989.0         # dense bf16/f16 WGMMA
HBM_TBPS = 4.8                    # H200
LAUNCH_US = 4.0


@dataclass(frozen=True)
class SpaceViolation:
    """A candidate's broken constraint, shaped like ``cutegen.legality.rule.Violation`` for the core search."""
    rule_id: str
    reason: str
    enforced: bool = True

    def __str__(self) -> str:
        return f"{self.rule_id}: {self.reason}"


def smem_estimate(problem: AttentionProblem, config: AttentionConfig) -> int:
    """Shared-memory bytes of the 88 kernel: Q stages (one warpgroup's rows each), K/V stages (one buffer per
    stage: K and V tiles alternate in it, a union in the collective's SharedStorage), and the epilogue's O
    staging: per consumer warpgroup a 64 x 32 tile, two stages (CUTLASS's EpilogueTileAuto and StagesD for a
    16-bit TMA store), beside the mainloop's when persistent, in a union with it otherwise."""
    eb = ELEMENT_BYTES[problem.dtype]
    d = head_tile(problem)
    rows_q = config.tile_q // config.mma_warpgroups if config.warp_specialized else config.tile_q
    mainloop = config.stages_q * rows_q * d * eb + config.stages_kv * config.tile_kv * d * eb
    epilogue = config.mma_warpgroups * 64 * 32 * ELEMENT_BYTES[problem.output_dtype] * 2
    return mainloop + epilogue if config.persistent else max(mainloop, epilogue)


def candidates(problem: AttentionProblem) -> Iterator[AttentionConfig]:
    # 64 query rows per consumer warpgroup, as every 88 kernel: its Q K^T and P V accumulators take
    # tile_kv / 2 + head_dim / 2 registers per thread, and 128 rows would double both
    for tile_q, wg in ((128, 2), (64, 1)):
        for tile_kv in (64, 128, 176, 192):
            for stages_kv in (2, 3, 4, 5):
                for schedule in ("ws_cooperative", "ws_pingpong"):
                    persistent = schedule == "ws_pingpong"
                    yield AttentionConfig(tile_q, tile_kv, schedule, mma_warpgroups=wg, stages_q=wg,
                                          stages_kv=stages_kv, persistent=persistent, loads_q_separately=persistent)
    for tile_kv in (64, 128):
        for stages_kv in (2, 3, 4):
            yield AttentionConfig(64, tile_kv, "tma", mma_warpgroups=1, stages_q=1, stages_kv=stages_kv,
                                  blocks_per_sm=2)


def space(problem: AttentionProblem) -> Iterator[AttentionConfig]:
    seen = set()
    for c in candidates(problem):
        if c not in seen:
            seen.add(c)
            yield c


def check(problem: AttentionProblem, config: AttentionConfig) -> list:
    out = [SpaceViolation(r.split(":", 1)[0], r.split(":", 1)[1].strip()) for r in backend_refusals(problem, config)]
    smem = smem_estimate(problem, config)
    if smem > SMEM_BYTES:
        out.append(SpaceViolation("ATTN-SPACE-SMEM-ESTIMATE", f"about {smem} bytes of shared memory > {SMEM_BYTES}"))
    return out


def cost(problem: AttentionProblem, config: AttentionConfig) -> float:
    """Predicted microseconds: the tiles' WGMMA work at a tile-shape efficiency, over the SMs in waves,
    or the bytes at HBM speed, whichever is longer, plus a launch."""
    p, c = problem, config
    q_tiles = math.ceil(p.seqlen_q / c.tile_q)
    kv_tiles = math.ceil(p.seqlen_kv / c.tile_kv)
    if p.causal:
        # tiles visited per Q tile: up to the diagonal (88 CausalFusion.get_trip_count)
        visits = sum(min(kv_tiles, math.ceil((m + 1) * c.tile_q / c.tile_kv)) for m in range(q_tiles))
    else:
        visits = q_tiles * kv_tiles
    ctas = q_tiles * p.batch * p.heads_q
    tile_flops = 2 * c.tile_q * c.tile_kv * (head_tile(p) + head_tile(p))
    # efficiency: bigger MMA tiles amortize the softmax; warp specialization overlaps loads and math
    eff = 0.55 if not c.warp_specialized else 0.68
    eff *= min(1.0, (c.tile_kv / 128) ** 0.15) * min(1.0, (c.tile_q / 128) ** 0.2)
    eff *= 1.0 if c.stages_kv >= 4 else 0.97 if c.stages_kv == 3 else 0.9
    eff *= 1.02 if c.persistent else 1.0
    per_cta_us = (visits / q_tiles) * tile_flops / (PEAK_TFLOPS_16BIT * 1e6 / SM_COUNT * eff)
    slots = SM_COUNT * (c.blocks_per_sm if not c.warp_specialized else 1)
    waves = ctas / slots if c.persistent else math.ceil(ctas / slots)
    compute_us = waves * per_cta_us * (c.blocks_per_sm if not c.warp_specialized else 1)
    memory_us = p.bytes_min / (HBM_TBPS * 1e6)
    return LAUNCH_US + max(compute_us, memory_us)
