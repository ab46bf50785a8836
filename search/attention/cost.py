"""The analytic cost of an FMHA forward kernel (CUTLASS 88's collectives), priced from its pipeline.

Per CTA tile (tile_q query rows of one batch and query head) the kernel runs ``trips`` KV tiles; per KV tile:

* **tensor cores**: Q K^T (2 tile_q tile_kv head_dim FLOPs) and P V (2 tile_q tile_kv head_dim_v) at the SM90
  dense rate per SM (989 TFLOP/s bf16/f16 over 132 SMs at the clock the GEMM model sustains: 4096 FLOP per
  SM clock; 8192 for e4m3), each divided by the WGMMA efficiency of its instruction width N (narrow
  instructions issue more often for the same work);
* **softmax**: one exp2 per score on the MUFU (16 per SM per clock, the FlashAttention-3 paper's figure),
  plus about 4 FP32 operations per score (scale, max, subtract, sum; 128 lanes per SM) and the O rescale;
* **overlap** by schedule: two consumer warpgroups (ws_*) interleave one's softmax with the other's GEMMs,
  T = max(mma, softmax) + OVERLAP_LOSS x min(mma, softmax); one warpgroup (tma) serializes them except the
  softmax steps the collective interleaves with P V (fmha_collective_tma.hpp:412-426), unless a second block
  shares the SM (blocks_per_sm=2 and the shared memory fits two);
* **loads**: the K and V tile bytes through L2 at the SM's share of L2 bandwidth (the CTAs of one head read
  the same K/V; HBM sees them about once, priced separately as the problem's minimal bytes over HBM), and the
  TMA latency not covered by the fills the ring holds ahead of the consumer (stages_kv - 3 for ws, which hold
  three stages; stages_kv - 2 for tma);
* HBM: the problem's minimal bytes at the H200's 4.8 TB/s (the bound of decode-like calls);
* per tile: the prologue (Q and the first K land: one TMA latency, hidden for a persistent kernel except at
  its first tile) and the epilogue (O through shared memory and a TMA store).

Tiles over SMs: a persistent kernel assigns tile t to CTA t mod grid (the example's PersistentTileScheduler,
m-block fastest, or cutegen's longest-first walk), priced exactly as the busiest SM's sum; a non-persistent grid is
list-scheduled by the hardware (ceil(tiles / slots) waves of equal tiles; with the causal mask's unequal tiles, in
launch order: ``list_schedule_makespan``). Causal trip counts follow the top-left mask of the problem. A decode-like
grouped problem on BHSD tensors is priced as the C ABI runs it: one (group x seqlen_q)-row problem per KV head.

A split-KV kernel (config ``kv_splits`` > 1, cutegen.ops.attention.splitkv) is priced as it runs: every
(batch, KV head) one problem of group x seqlen_q rows (always packed), ``S = min(kv_splits, KV tiles)`` times as
many CTA tiles, each walking ceil(T / S) KV tiles, its epilogue storing float32; it streams at the HBM bound it
reaches (HBM_EFFICIENCY; Little's law over the CTAs' K/V bytes in flight), blended with the SMs' own time
(STREAM_BLEND), plus a cost per wave of CTAs (SPLIT_WAVE_US) -- refitted on the H200's CUDA-graph times (constants
below) -- then the combine: its launch
(COMBINE_FIXED_US, an estimate) and its HBM traffic (the partials written and read once, O written).

FP8 (e4m3): the tensor rate doubles, and each score costs FP8_CONVERT_OPS_PER_SCORE more FP32-pipe operations:
P converted to e4m3 (cvt.e4m3x2 packs) and rearranged from the accumulator's layout into the 8-bit register-A
operand's (4 consecutive K values per register). Fitted to one figure: the issue's CUTLASS 88 FP8 kernel 128x256
with f32 accumulation, 732 TFLOP/s (H100, B4 H32 S4096 D128); held out, the same kernel with an f16 Q K^T
accumulator (861 measured): the model says about 840. On the H200 (fp8attn runs 1-2) it is 7-25 % optimistic.

Constants are physical figures but these (beside the split-KV ones): FP8_CONVERT_OPS_PER_SCORE (above; refitted
to the same figure, 2.4, when the H200 terms below came in), and four fitted by ``calibration.fit_h200`` on every
committed H200 timing of a kernel with a known configuration (``search/attention/measured.py``: 124 prefill-like
records over 25 shapes and 12 runs; leave-one-shape-out errors in NOTES.md and tests/test_attention_search.py):

* OVERLAP_LOSS (0.30; first fitted on the issue's H100 figures, the H200 fit agrees);
* CTA_LAUNCH_CLK (4000): a non-persistent CTA tile's start before its first load (launch, barrier init,
  descriptor prefetch), on top of the prologue's TMA latency and Q bytes. With 1 CTA per SM (the K/V ring fills
  the shared memory) nothing overlaps it; it is what makes short-sequence causal prefill (S 512: 2.5 KV tiles per
  CTA tile) cost more per FLOP, and what a persistent kernel saves;
* PERSISTENT_KV_SHARE (0.10): measured, not derived: at the same tile and stages, the example's persistent kernel
  runs each KV tile about 10 % slower than its non-persistent twin (head 128: +4.6 %, head 256: +4.7 to +11 %
  end to end; the Nsight profile shows barrier stalls and 66 % against 73 % tensor-pipe busy); the mechanism is
  not identified, so this is a measured share, not a pipeline term;
* QUEUE_LOSS (0.3): the producer's loads and the consumers' KV tiles run at nearly the same rate (a KV tile's K
  and V at the SM's L2 share take about as long as its MMAs), so the ring between them is a finite buffer whose
  stalls fall with its depth: per KV tile, a share QUEUE_LOSS x balance / (ahead + 2), balance = the slower of
  loads and MMAs over the faster. It separates 4 from 5 K/V stages (measured 3-12 % apart at head 128).

Tile order (config ``tile_order``): a non-persistent grid is priced by in-order list scheduling
(``list_schedule_makespan``: block i starts near the work launched before it over the slots), so launching each
(batch, head)'s longest causal Q block first shortens the tail; a persistent kernel by the exact tile-to-CTA
assignment of its scheduler (``persistent_m_blocks``), so the longest-first walk's balance is priced.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..cost import SM_CLOCK_HZ, SMS

# The H200's datasheet HBM bandwidth: the attention targets are H200 figures, and a decode-like call is priced
# against it (the GEMM model keeps the H100's 3.35 TB/s, search/cost.py). Prefill never reaches this bound.
HBM_BYTES_PER_S = 4.8e12

TENSOR_FLOPS_PER_SM_CLK = {16: 4096.0, 8: 8192.0}    # dense, by input bits
MUFU_PER_SM_CLK = 16.0                               # exp2 (FlashAttention-3, §3.1)
FP32_PER_SM_CLK = 128.0
SOFTMAX_OPS_PER_SCORE = 4.0
FP8_CONVERT_OPS_PER_SCORE = 2.2                      # fitted: the 88 FP8 figure (module docstring)
OVERLAP_LOSS = 0.35                                  # fitted: calibration.fit_overlap_loss()
INTERLEAVE_SHARE = 0.3                               # the softmax share tma's interleaved P V hides
L2_BYTES_PER_S = 7.0e12
TMA_LATENCY_CLK = 1200.0
# Fitted on every committed H200 timing (search/attention/measured.py; leave-one-shape-out in NOTES.md):
CTA_LAUNCH_CLK = 3000.0          # a non-persistent CTA's start before its first TMA load (launch, barrier init)
PERSISTENT_KV_SHARE = 0.04       # what a persistent kernel's KV tile costs more than a non-persistent one's
QSEP_KV_SHARE = 0.04              # ... more with a separate Q load warp (ws_pingpong)
Q_PREFETCH_KV_SHARE = 0.06        # ... more with Q stages beyond one per consumer warpgroup
SPILL_HBM_SHARE = 1.0            # of a spilled walk level's K/V bytes, the share that comes from HBM (the rest hits L2)
TWO_BLOCK_LAUNCH_SHARE = 0.25     # the share of a CTA's launch left exposed when a second block shares the SM
L2_LATENCY_CLK = 1200.0          # one loaded L2 round trip (the ring's useful depth: Little's law)
QUEUE_LOSS = 0.3                 # the ring's stall share at balanced load and compute, over (ahead + 2) slots

EPILOGUE_LATENCY_CLK = 800.0
LAUNCH_US = 3.0
COMBINE_FIXED_US = 2.0          # the split kernel's second launch (combine) on the same stream: an estimate, not fitted
# Split-KV streaming. Fitted by hand on H200 run 2 (end-to-end times), then refitted (a grid search over the three
# constants below, mean |ln(model / measured)|) on the GPU-only (CUDA-graph) times of every split kernel of H200
# run 3 and decode2 run 1: 94 + 88 kernel-shape pairs, two-warpgroup 128-row and one-warpgroup 64-row kernels, B1-B32,
# KV 8k-32k, head dims 64 and 128 (bench/results/decode/2026-11-26-h200-run3-results.json,
# 2026-11-26-h200-decode2-run1-results.json): mean |ln| 0.072 (0.132 with run 2's constants); on every one of the 22
# shapes the model's fastest measured kernel is within 0.8 % of the measured fastest. The refit dropped run 2's
# one-wave imbalance (0.17: run 2's end-to-end times carried host time) and blends the SM-bound and HBM-bound
# stream times instead of taking the larger: a grid whose CTAs stream near their own compute limit (128 CTAs of
# two-warpgroup 128-row tiles at B8) loses to both.
HBM_EFFICIENCY = 0.93           # share of 4.8 TB/s a split kernel's K/V stream reaches
SPLIT_WAVE_US = 3.0             # per wave of split CTAs (prologue, pipeline fill, the partial O's store)
ONE_WAVE_IMBALANCE = 0.0        # a one-wave grid's wait for its slowest SM, as a share of the stream (refit: none)
HBM_LATENCY_US = 1.05           # loaded HBM latency a CTA's bytes in flight cover (fitted on run 3: 4 vs 5 K/V stages)
STREAM_BLEND = 8.0              # the split stream: max(sm, hbm) x ((sm / max)^p + (hbm / max)^p)^(1/p)
SMEM_PER_SM = 233472
L2_BYTES = 50 << 20             # the H200's L2 (GH100: 50 MB)
# A varlen problem is priced at its maximum lengths (its sizes are the maxima; the lengths are device data). On
# ragged lengths the persistent scheduler's static round robin leaves its busiest SM above the mean, which the
# hardware's dynamic CTA scheduling does not: measured on the H200 (bench/results/attention/
# 2026-11-26-h200-varlen-run3-time.json), the persistent twin of the same varlen kernel was 8% (head 64, 16 ragged
# sequences) and 12% (head 128, 8) slower than the non-persistent one. The smaller loss is the price.
VARLEN_PERSISTENT_IMBALANCE = 0.08


def wgmma_efficiency(n: int) -> float:
    """Share of the tensor peak a 64xN WGMMA stream reaches: issue overhead of ~16 columns per instruction."""
    return n / (n + 16.0)


def instruction_n(extent: int) -> int:
    return next(n for n in (256, 192, 128, 96, 64, 32, 16, 8) if extent % n == 0)


def packs_gqa(problem, config) -> bool:
    """The C ABI's decode-like GQA packing (templates/attention/fmha_sm90.cu.j2, FA3's PackGQA): without a mask,
    a warp-specialized grouped kernel with fewer query rows than a Q tile, on BHSD tensors, runs one
    (group x seqlen_q)-row problem per KV head instead of one seqlen_q-row problem per query head."""
    group = problem.heads_q // problem.heads_kv
    return (group > 1 and not problem.causal and config.schedule != "tma" and problem.seqlen_q < config.tile_q
            and getattr(problem, "layout", "bshd") == "bhsd")


def kv_splits_of(problem, config) -> int:
    """The KV splits a call of ``problem`` runs with ``config`` (1: the unsplit kernel)."""
    requested = getattr(config, "kv_splits", 1)
    if requested <= 1:
        return 1
    return max(1, min(requested, math.ceil(problem.seqlen_kv / config.tile_kv)))


def kernel_rows_heads(problem, config) -> tuple[int, int]:
    """(query rows per problem, problems) as the kernel sees them: (seqlen_q, batch x heads_q), or packed (the
    split-KV kernel always packs: one problem per (batch, KV head))."""
    if getattr(config, "kv_splits", 1) > 1 or packs_gqa(problem, config):
        return problem.seqlen_q * (problem.heads_q // problem.heads_kv), problem.batch * problem.heads_kv
    return problem.seqlen_q, problem.batch * problem.heads_q


@lru_cache(maxsize=4096)
def trip_counts(problem, tile_q: int, tile_kv: int, rows: int | None = None, splits: int = 1) -> np.ndarray:
    """KV tiles each Q block (m-block) runs: all of them, or under the top-left causal mask those up to its
    last row (at least one). ``rows``: the kernel's query rows when the ABI packs GQA (default seqlen_q).
    ``splits``: a split-KV kernel's splits (no mask): the longest split's tiles, ceil(T / splits)."""
    n_m = math.ceil((problem.seqlen_q if rows is None else rows) / tile_q)
    n_kv = math.ceil(problem.seqlen_kv / tile_kv)
    if splits > 1:
        return np.full(n_m, math.ceil(n_kv / splits), dtype=np.int64)
    if not problem.causal:
        return np.full(n_m, n_kv, dtype=np.int64)
    last_row = np.minimum((np.arange(n_m) + 1) * tile_q, problem.seqlen_q)     # rows 0 .. last_row - 1
    return np.clip(np.ceil(last_row / tile_kv).astype(np.int64), 1, n_kv)


def config_cost(problem, config, smem_bytes: int | None = None) -> tuple[float, dict]:
    """Predicted microseconds and the terms that make them."""
    bits = 8 if problem.dtype == "e4m3" else 16
    esize = bits // 8
    d, dv = problem.head_dim, problem.dv
    tq, tkv = config.tile_q, config.tile_kv
    ws = config.schedule != "tma"
    wgs = config.mma_warpgroups if ws else 1
    persistent = ws and config.persistent
    order = getattr(config, "tile_order", "forward")
    rate = TENSOR_FLOPS_PER_SM_CLK[bits]

    # --- one KV tile of one CTA, in SM clocks ---------------------------------------------------------
    n_qk = instruction_n(tkv)
    n_pv = instruction_n(d)
    mma = 2.0 * tq * tkv * d / rate / wgmma_efficiency(n_qk) + 2.0 * tq * tkv * dv / rate / wgmma_efficiency(n_pv)
    scores = tq * tkv
    softmax = scores / MUFU_PER_SM_CLK + scores * SOFTMAX_OPS_PER_SCORE / FP32_PER_SM_CLK + tq * dv / FP32_PER_SM_CLK
    if bits == 8:
        softmax += scores * FP8_CONVERT_OPS_PER_SCORE / FP32_PER_SM_CLK
    if config.acc_qk == "f16":
        softmax *= 0.85          # half the accumulator registers to convert and scan
    # two blocks per SM: the tma kernel, or the split-KV template's one-consumer-warpgroup kernel (DecodeFmhaKernel)
    decode_kernel = ws and wgs == 1 and getattr(config, "kv_splits", 1) > 1
    two_blocks = ((not ws or decode_kernel) and config.blocks_per_sm == 2 and smem_bytes is not None
                  and 2 * (smem_bytes + 1024) <= SMEM_PER_SM)
    paired = two_blocks
    if two_blocks and decode_kernel:
        # the decode kernel's grid: with no more CTAs than SMs each runs alone on its SM (H200 decode2 run 1:
        # B1 16-128 CTAs ran a KV tile per 1.15 us at 5 stages, as one warpgroup alone)
        rows_, heads_ = kernel_rows_heads(problem, config)
        splits_ = kv_splits_of(problem, config)
        paired = len(trip_counts(problem, tq, tkv, rows_, splits_)) * heads_ * splits_ > SMS

    def overlapped(softmax_clk: float) -> float:
        if ws and wgs >= 2:
            return max(mma, softmax_clk) + OVERLAP_LOSS * min(mma, softmax_clk)
        if paired:
            # two blocks per SM interleave like two warpgroups: each block's KV tile takes the pair's time
            return 2.0 * (max(mma, softmax_clk) + OVERLAP_LOSS * min(mma, softmax_clk))
        return mma + (1.0 - INTERLEAVE_SHARE) * softmax_clk

    compute = overlapped(softmax)
    overlap = ("two consumer warpgroups" if ws and wgs >= 2 else "two blocks per SM" if paired else
               "one warpgroup (softmax interleaved with P V)")
    clk = SM_CLOCK_HZ
    load_bytes = tkv * (d + dv) * esize
    l2_per_sm_clk = L2_BYTES_PER_S / SMS / clk
    load = load_bytes / l2_per_sm_clk * (2.0 if paired else 1.0)
    ahead = max(0, config.stages_kv - (3 if ws else 2))          # fills in flight beyond what the consumer holds
    exposed = max(0.0, TMA_LATENCY_CLK - ahead / 2.0 * max(compute, load))
    # the producer's loads and the consumers' KV tiles are two stages of one stream at nearly the same rate (a
    # KV tile's bytes at the SM's L2 share take about as long as its MMAs): the ring between them is a finite
    # buffer, and each stalls the other by a share that falls with the buffer's depth (ahead + 2 slots)
    balance = min(compute, load) / max(compute, load)
    # Little's law bounds what depth buys: stages beyond the bytes one loaded L2 round trip covers at the SM's L2
    # share never fill, so they neither help the stream nor cut the stalls
    useful_ahead = max(1, math.ceil(L2_LATENCY_CLK * l2_per_sm_clk / (tkv * d * esize)))
    queue = QUEUE_LOSS * balance / (min(ahead, useful_ahead) + 2)
    per_kv = max(compute, load) * (1.0 + queue) + exposed
    if persistent:
        # measured, not derived (module docstring): a persistent kernel's KV tiles run slower than its
        # non-persistent twin's, more so with a separate Q load warp or Q stages beyond one per consumer
        share = PERSISTENT_KV_SHARE
        share += QSEP_KV_SHARE if config.loads_q_separately else 0.0
        share += Q_PREFETCH_KV_SHARE if config.stages_q > wgs else 0.0
        per_kv *= 1.0 + share

    # --- one CTA tile ----------------------------------------------------------------------------------
    splits = kv_splits_of(problem, config)
    q_bytes = tq * d * esize
    out_bytes = tq * dv * (4 if splits > 1 else 2)        # a split's partial O is float32
    prologue = TMA_LATENCY_CLK + q_bytes / l2_per_sm_clk
    # a new CTA: launch, barrier init, before its first load; a co-resident second block computes meanwhile
    launch = 0.0 if persistent else CTA_LAUNCH_CLK * (TWO_BLOCK_LAUNCH_SHARE if two_blocks else 1.0)
    epilogue = EPILOGUE_LATENCY_CLK + out_bytes / l2_per_sm_clk
    rows, heads = kernel_rows_heads(problem, config)
    heads *= splits                                        # the split index is one more grid mode
    trips = trip_counts(problem, tq, tkv, rows, splits)
    if persistent:
        q_ahead = config.stages_q >= 2 * wgs
        tile_fixed = (0.25 if q_ahead else 0.5) * prologue + epilogue
    else:
        tile_fixed = launch + prologue + epilogue
    work_m = tile_fixed + trips * per_kv                         # clocks per m-block
    n_m = len(trips)
    n_tiles = n_m * heads
    slots = SMS * (config.blocks_per_sm if two_blocks else 1)
    if persistent:
        grid = min(n_tiles, SMS)
        group = problem.heads_q // problem.heads_kv if rows == problem.seqlen_q else 1
        counts, trip_sums, spilled = _persistent_assignment(problem, tq, tkv, grid, rows, heads, splits, order,
                                                            max(1, heads // group))
        # a spilled level's K/V comes from HBM, once per (batch, KV head): the group's query heads share it
        hbm_per_sm_clk = HBM_BYTES_PER_S * HBM_EFFICIENCY / SMS / clk
        per_kv_spilled = max(per_kv, SPILL_HBM_SHARE * (load_bytes / group) / hbm_per_sm_clk * (1.0 + queue) + exposed)
        busiest = float((counts * tile_fixed + (trip_sums - spilled) * per_kv + spilled * per_kv_spilled).max()) \
            + 0.5 * prologue
        schedule = f"persistent: {grid} CTAs, busiest SM {busiest:.0f} clk"
        if problem.varlen:
            busiest *= 1.0 + VARLEN_PERSISTENT_IMBALANCE
            schedule += f" (+{VARLEN_PERSISTENT_IMBALANCE:.0%}: ragged lengths on a static round robin)"
    elif trips.min() == trips.max():
        waves = math.ceil(n_tiles / slots)
        busiest = waves * float(work_m[0])
        schedule = f"{waves} wave(s) of {slots} slots"
    else:
        busiest = list_schedule_makespan(work_m if order == "forward" else work_m[::-1], heads, slots)
        schedule = f"list-scheduled over {slots} slots in launch order ({order}; unequal causal tiles)"
    t_sm_us = busiest / clk * 1e6
    hbm_us = problem.bytes_min / HBM_BYTES_PER_S * 1e6
    combine_us = 0.0
    if splits > 1:
        from cutegen.ops.attention.splitkv import combine_bytes
        combine_us = COMBINE_FIXED_US + combine_bytes(problem.batch, problem.heads_q, problem.seqlen_q, dv, splits,
                                                      2 if problem.dtype != "e4m3" else 2) / HBM_BYTES_PER_S * 1e6
    if splits > 1:
        # A split kernel streams K and V at the HBM bound: the bandwidth it reaches (HBM_EFFICIENCY), a fixed cost
        # per wave of CTAs (prologue, pipeline fill, the partial O's store), and with a single wave the slowest
        # SM's share (the hardware cannot rebalance a grid that fits at once). Fitted on H200 run 2.
        # Little's law per CTA: the stages beyond the three the consumer holds (V_(j-1), K_j, V_j) are the bytes in
        # flight; at HBM_LATENCY_US they cap one CTA's stream (4 stages of 128 x 128 keep one 32 KB tile ahead)
        ahead_bytes = max(1, config.stages_kv - 3) * tkv * d * esize
        active = min(n_tiles, slots)
        rate = min(HBM_BYTES_PER_S * HBM_EFFICIENCY, active * ahead_bytes / (HBM_LATENCY_US * 1e-6))
        hbm_eff_us = problem.bytes_min / rate * 1e6
        split_waves = math.ceil(n_tiles / slots)
        top = max(t_sm_us, hbm_eff_us)
        stream_us = top * ((t_sm_us / top) ** STREAM_BLEND + (hbm_eff_us / top) ** STREAM_BLEND) ** (1.0 / STREAM_BLEND)
        imbalance_us = ONE_WAVE_IMBALANCE * stream_us if split_waves == 1 else 0.0
        # ties (HBM-bound kernels of equal waves): more bytes in flight up to the 64 KB measured to be enough (run 3:
        # 5 stages of 128 x 128, 64 KB ahead, beat 4 stages, 32 KB, by 4-12 %; 8 stages of 128 x 64, 80 KB, tied 5 of
        # 128 x 128); under 0.1 us, a tie-breaker only
        total_us = (stream_us + split_waves * SPLIT_WAVE_US + imbalance_us + LAUNCH_US + combine_us
                    - min(ahead_bytes, 65536) * 1e-9)
    else:
        # a tie-breaker only (under 0.01 us): of kernels the model prices alike, the one with fewer K/V stages
        # (shared memory that buys nothing)
        total_us = max(t_sm_us, hbm_us) + LAUNCH_US + combine_us + 1e-3 * config.stages_kv * 1e-3
    breakdown = {
        "mma_clk_per_kv_tile": round(mma, 1), "softmax_clk_per_kv_tile": round(softmax, 1),
        "load_clk_per_kv_tile": round(load, 1), "exposed_latency_clk": round(exposed, 1),
        "per_kv_tile_clk": round(per_kv, 1), "overlap": overlap, "bound": "tensor" if mma >= max(softmax, load) else
        ("softmax" if softmax >= load else "loads"),
        "kv_tiles_per_cta": [int(trips.min()), int(trips.max())], "cta_tiles": n_tiles, "schedule": schedule,
        "sm_us": round(t_sm_us, 3), "packed_gqa": rows != problem.seqlen_q, "hbm_us": round(hbm_us, 3), "instruction_n": [n_qk, n_pv],
        "kv_splits": splits, "combine_us": round(combine_us, 3),
        "split_waves": math.ceil(n_tiles / slots) if splits > 1 else None,
    }
    return total_us, breakdown


def list_schedule_makespan(work_in_launch_order: np.ndarray, heads: int, slots: int) -> float:
    """Finish time of a non-persistent grid whose (batch, head)s each launch their m-blocks in the given order
    (blockIdx.x fastest), on ``slots`` equal slots that take the next block as one frees: block i starts near
    (work launched before it) / slots, so the grid ends at max_i (prefix_i / slots + w_i). The sequence repeats per
    (batch, head), so the maximum is over the last one's blocks: (heads - 1) W / slots + max_m (P_m / slots + w_m)."""
    w = np.asarray(work_in_launch_order, dtype=float)
    before = np.cumsum(w) - w
    return float((heads - 1) * w.sum() / slots + (before / slots + w).max())


def persistent_m_blocks(n_m: int, n_bh: int, order: str = "forward") -> np.ndarray:
    """The m-block of each persistent tile t = 0 .. n_m x n_bh - 1, as the scheduler decodes it: forward, the
    example's PersistentTileScheduler (m-block fastest); longest_first, cutegen's (m-block slowest, from the last,
    over every (batch', head') pair)."""
    t = np.arange(n_m * n_bh)
    if order == "forward":
        return t % n_m
    return n_m - 1 - t // n_bh


def walk_spills_l2(problem, tile_kv: int, trips: np.ndarray, kv_pairs: int) -> np.ndarray:
    """Per m-block, whether the persistent longest-first walk's K/V working set overflows L2: the walk runs one
    m-level of every (batch, KV head) at a time, each reading the K and V of its first trips x tile_kv keys, so a
    level needs kv_pairs x that many bytes resident to serve its next reader from L2 (the forward orders run one
    head's m-blocks together: their K/V stays in L2)."""
    esize = 1 if problem.dtype == "e4m3" else 2
    per_pair = trips * tile_kv * (problem.head_dim + problem.dv) * esize
    return kv_pairs * per_pair > L2_BYTES
@lru_cache(maxsize=4096)
def _persistent_assignment(problem, tile_q: int, tile_kv: int, grid: int, rows: int,
                           heads: int, splits: int = 1, order: str = "forward",
                           kv_pairs: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per persistent CTA: how many tiles it takes, their KV trips in total, and the trips of those whose K/V the
    longest-first walk reads past L2 (tile t to CTA t mod grid; the tile's m-block by ``persistent_m_blocks``:
    fmha_tile_scheduler.hpp get_block_coord, or cutegen's longest-first scheduler)."""
    trips = trip_counts(problem, tile_q, tile_kv, rows, splits)
    n_m = len(trips)
    t = np.arange(n_m * heads)
    cta = t % grid
    m = persistent_m_blocks(n_m, heads, order)
    spills = (walk_spills_l2(problem, tile_kv, trips, kv_pairs) if order != "forward" and kv_pairs
              else np.zeros(n_m, dtype=bool))
    return (np.bincount(cta, minlength=grid).astype(float),
            np.bincount(cta, weights=trips[m].astype(float), minlength=grid),
            np.bincount(cta, weights=(trips * spills)[m].astype(float), minlength=grid))


def tflops(problem, us: float) -> float:
    return problem.flops / (us * 1e-6) / 1e12
