"""What the correction sees: the problem's shape, the configuration's choices, and the prior's own terms.

The prior's breakdown carries most of the physics (waves, instruction efficiency, load/MMA balance,
pipeline depth, epilogue share, DRAM floor), so the correction learns where those terms are wrong rather
than relearning the GPU. Times enter as logs and shares of the prior's total, so the features mean the same
for a 10 us and a 10 ms problem.
"""
from __future__ import annotations

import math

import numpy as np

from cutegen.dtypes import DTYPES
from cutegen.results.device import KINDS

NAMES = (
    "log2_m", "log2_n", "log2_k", "log2_batch", "input_bits",
    "tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n",
    "cooperative", "pingpong", "warp_specialized", "no_smem_epilogue", "stream_k", "stages",
    "log_prior_us", "waves", "wave_efficiency", "log2_tiles", "log2_kblocks", "instruction_efficiency",
    "accumulator_registers", "load_over_mma", "pipeline_over_mma", "epilogue_share", "mainloop_share",
    "memory_floor_share", "ragged_waste", "log_flops_per_byte", "harness_same_inputs", "harness_interleaved",
    "device_sms", "device_hbm_gbps",
    # what the H100 runs of 2026-11-24 showed the prior misjudging (search/cost.py): the mainloop's load,
    # the cluster's size, how much of the last wave is filled, how long each CTA's k-loop is, and how many
    # CTAs share one tile under stream-K (the fix-up chain) with its reduction's share of the time
    "cp_async", "cluster_size", "cluster_wide", "last_wave_fill", "log2_kblocks_per_cta",
    "streamk_ctas_per_tile", "reduction_share", "tile_rows_used",
)


def row(s) -> list[float]:
    p, c, bd = s.problem, s.config, s.breakdown
    t, cl = c.tile_shape, c.cluster_shape
    prior = max(s.prior_us, 1e-3)
    mma = max(bd["mma_us_per_kblock"], 1e-9)
    bits = DTYPES[p.dtype_a].bits
    bytes_moved = (p.m * p.k + p.n * p.k) * p.batch * bits / 8 + p.m * p.n * p.batch * DTYPES[p.dtype_d].bits / 8
    waves = bd["waves"]
    return [
        math.log2(p.m), math.log2(p.n), math.log2(p.k), math.log2(p.batch), bits,
        t[0], t[1], t[2], cl[0], cl[1],
        c.mainloop_schedule == "cooperative", c.mainloop_schedule == "pingpong",
        c.mainloop_schedule == "warp_specialized", c.epilogue_schedule == "no_smem", c.tile_scheduler == "stream_k",
        s.stages,
        math.log(prior), waves, bd["tiles"] / max(waves * bd["active_ctas"], 1.0), math.log2(max(bd["tiles"], 1.0)),
        math.log2(max(bd["kblocks"], 1.0)), bd["instruction_efficiency"],
        bd["accumulator_registers"], bd["load_us_per_kblock"] / mma, bd["pipeline_us_per_kblock"] / mma,
        bd["epilogue_us_per_tile"] * waves / prior, bd["mainloop_us"] / prior,
        max(bd["hbm_floor_us"], bd["dram_us"]) / prior, bd["ragged_waste"],
        math.log(p.flops / bytes_moved), s.harness == "same-inputs", s.harness == "interleaved",
        *_device(s.device_kind),
        getattr(c, "mainloop_load", "tma") == "cp_async", cl[0] * cl[1], cl[0] * cl[1] >= 4,
        _last_wave_fill(bd), math.log2(max(bd["kblocks"] * bd["tiles"] / max(min(bd["active_ctas"], bd["tiles"]), 1.0), 1.0)),
        (bd["active_ctas"] / bd["tiles"] if c.tile_scheduler == "stream_k" and bd["tiles"] < bd["active_ctas"] else 0.0),
        bd.get("reduction_us", 0.0) / prior, min(1.0, p.m / t[0]),
    ]


def _last_wave_fill(bd) -> float:
    """Share of the CTAs the last wave keeps busy (1.0: every wave full)."""
    active = max(bd["active_ctas"], 1.0)
    rest = bd["tiles"] % active
    return 1.0 if rest == 0 else rest / active


def _device(kind: str) -> tuple[float, float]:
    """SM count and brief bandwidth: how the correction tells device kinds apart when it learns from several
    (an unknown kind reads as the calibrated one, 132 SMs at 3.35 TB/s)."""
    k = KINDS.get(kind)
    return (k.sm_count, k.hbm_gbps) if k else (132.0, 3350.0)


def matrix(samples) -> np.ndarray:
    return np.array([row(s) for s in samples], dtype=np.float64).reshape(len(samples), len(NAMES))
