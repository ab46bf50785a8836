"""Analytic cost of a Hopper GEMM kernel configuration: predicted microseconds on an H100 SXM.

The model is vectorised (numpy) so the search can rank every reachable candidate before it
spends time on legality. Terms, each reported in the breakdown:

* waves     -- CTA tiles (rounded up to whole clusters, then to whole swizzle strips as CUTLASS's
               persistent scheduler pads its grid) over the CTAs that can be resident at once;
               clusters larger than 2 cannot always fill every SM (GPC granularity).
* mma       -- per k-block WGMMA time at the peak rate, scaled by the instruction's efficiency
               (a narrow N re-reads A from shared memory for fewer FLOPs).
* load      -- per k-block bytes of A and B each CTA pulls through L2; TMA multicast divides the
               A bytes by cluster N and the B bytes by cluster M.
* pipeline  -- a k-block costs at least latency / (stages - 1): a shallow pipeline cannot hide TMA.
* epilogue  -- bytes of D (and C) per tile; ping-pong overlaps a TMA-store epilogue with the other
               warpgroup's mainloop; the no-smem epilogue is far slower and stays exposed.
* ragged    -- implicit: partial tiles compute (and load) whole tiles; reported as wasted fraction.
* stream_k  -- a stream-K kernel runs the launch plan it is given (cutegen/launch_plan.py):
               data-parallel (whole tiles), split-K by s (every tile's k-loop in s pieces, s times
               the work units) or stream-K (the k-blocks of all tiles spread evenly over the CTAs).
               Split tiles pay the reduction: each non-final piece writes its f32 partial tile to
               the workspace and the tile's final piece reads it back, plus a fix-up wait.
* dram      -- the tiles a wave touches at once (raster order and swizzle, as CUTLASS's persistent
               scheduler walks them) must come from HBM once per wave: fewer distinct A rows and B
               columns per wave means less DRAM traffic.

Peak rates are H100/H200 SXM figures (132 SMs, 989 TFLOP/s dense bf16; HBM kept at the H100's
3.35 TB/s); the L2 and store rates and the per-k-block, per-tile, cluster and no-smem-epilogue costs
were fitted to H200 measurements of 2026-11-22 (see the comment on each).
"""
from __future__ import annotations

import numpy as np

SMS = 132
PEAK_FLOPS = {8: 1978.9e12, 16: 989.4e12, 32: 494.7e12}     # dense, by input width in bits
HBM_BYTES_PER_S = 3.35e12
TMA_LATENCY_US = 1.5
LAUNCH_US = 4.0
NON_PERSISTENT_TILE_US = 1.2 # per tile of the non-persistent warp-specialized kernel (launch, prologue)
STREAMK_FIXUP_US = 3.0
STREAMK_EFFICIENCY = 0.96
CLUSTER_SYNC_SATURATION = 4  # cluster size past which the wait for the slowest CTA stops growing:
                             # the oracle's 2048^3 128x128 kernels run 2x2, 4x1, 1x4 at 47 us and
                             # 4x2, 1x8, 8x1, 4x4 at 46-51 us (H200 2026-11-22)

# Fitted: ``python -m cutegen.search.calibration`` coordinate descent on the union of
# tests/data/config_oracle_h200.jsonl (63 usable records) and
# bench/results/2026-11-22-calibration-h200.json (98 records, spilled FP8 kernels dropped),
# H200 2026-11-22 (cross-data-set held-out scores are in the calibration module's docstring). The
# launch, TMA latency, HBM and peak rates stay physical figures.
L2_BYTES_PER_S = 9.0e12      # NOT settled (unchanged H100 guess): the fit prefers 10.7e12 only for the
                             # oracle's absolute times (log error 0.12 vs 0.20); every rank figure is
                             # the same from 9.0e12 to 10.7e12. Below ~9.5e12 a 128x256 1x1 tile is
                             # L2-bound, so the model keeps TMA multicast (2x1, CUTLASS's choice, 0.92-0.99x
                             # cuBLAS measured) on big squares; an unmeasured 1x1 would win above it
STORE_BYTES_PER_S = 3.6e12   # fitted (was 3.0e12): TMA store of D through shared memory
NOSMEM_EPILOGUE_FACTOR = 10.4  # fitted (was 1.3): the no-smem epilogue stores each thread's fragment
                             # a few bytes at a time; the oracle's matched 2048^3 128x128x64 pairs run
                             # it at 0.55-0.6x the whole kernel (coop 301 vs 502, pingpong 279 vs 483
                             # TFLOP/s) and the bench's 8192x3072x1024 pingpong no-smem at 0.54x the
                             # TMA-epilogue CollectiveBuilder kernel
PINGPONG_EPILOGUE_HIDDEN = 0.85  # share of a TMA epilogue ping-pong overlaps (unchanged; the fit kept it);
                             # the no-smem epilogue is not hidden: pingpong+no-smem measured no better
                             # than cooperative+no-smem (279 vs 301 TFLOP/s)
KBLOCK_OVERHEAD_US = 0.05    # set by hand (was 0.03; the fit, blind to the search's free choice of
                             # k-tile, drifts to 0.005): the oracle's 128x128x{16,32,64} sweep costs
                             # ~0.1 us per extra k-block; 0.05 keeps the median log error at 0.1 and
                             # stops the search picking k=32 tiles the oracle measured 17% slower
CLUSTER_SYNC_US = 0.006      # per k-block, per extra CTA (up to CLUSTER_SYNC_SATURATION) whose
                             # empty-barrier arrival a stage waits for; the fit kept it
TILE_SWITCH_US = 0.25        # fitted (was 0.35): per tile a persistent CTA starts
INSTRUCTION_N_HALF = 40.0    # fitted (was 20): efficiency 1 / (1 + this / N) of wgmma m64nNk; the
                             # oracle's 64x128 pingpong (356-371) vs 128x128 coop (502) needs narrow
                             # tiles dearer than the H100 guess
# H100 SXM, 2026-11-24 (bench/results/2026-11-24-*-llm.json and the tune runs, seed.sqlite): three terms the
# H200 fit could not see, because its suite has no decode, no stream-K benchmark and few small tiles.
HBM_EFFICIENCY = 0.86        # share of the brief's HBM bandwidth a streaming GEMM sustains: decode GEMMs that
                             # read 134-940 MB of weights ran at 2.77-2.91 TB/s of the H100's 3.35 (e.g.
                             # 1x57344x8192 bf16: 329 us); the model read them 15-20% fast
STREAMK_LINK_US = 3.0        # per extra CTA sharing one tile under stream-K: CUTLASS's deterministic fix-up
                             # (ReductionMode::Deterministic) chains the partials of a tile in order, each
                             # waiting for its predecessor's workspace write, then reading, adding and writing
                             # a whole f32 tile; with fewer tiles than CTAs every tile is split over
                             # CTAs / tiles of them. The measured stream-K kernels at M = 1-128 ran 20-33%
                             # slower than the model, those with tiles >> CTAs within 4%
CLUSTER_WIDE_WAIT_US = 0.3   # a stage multicast to 4 or more CTAs is refilled only after the last of them
                             # released it: a cross-SM round trip per k-block that overlaps that k-block's
                             # MMA and is exposed only when the MMA is shorter. 4-CTA clusters of small
                             # tiles (64x32, 64x64, 64x96, 128x128x128) ran 17-44% slower than the same tile
                             # on 2 CTAs, while 128x256x64 on 1x8 and 64x256x64 on 1x4 did not
# H200, 2026-11-26 (helper `wavecal`, NOTES.md "Wave tiles priced"): terms for tiles whose N is not one of CUTLASS's
# standard widths, checked on held-out M folds of the seed's h200 records, the diagnosis' full-width records and the
# pad run's wave tiles (bench/wave_calibration.py). No committed kernel has any of them (every one stores whole
# 32-byte sectors, 0 excess subtiles, a standard instruction), so none moves a committed price. SECTOR_BYTES (the
# partial-sector store, module-level below) is structural; the two knobs below are what every fold's fit chose or
# the neutral value where the fit was not trusted.
EPILOGUE_SUBTILE_US = 0.3    # per TMA-epilogue subtile beyond ceil(Tile_N / 32) per row block (EpilogueTileAuto takes
                             # gcd(32, Tile_N) columns: 176 stores 11 subtiles of 16 per 64 rows where 128 stores 4 of
                             # 32), part of the epilogue's time. wavecal fitted 0 on large-K data, where ping-pong hid
                             # it; the mid-size suite's small-K ping-pong wave tiles (128x152/168/176/200/208 at K = 128,
                             # 264, 384: 1.6-2.8x the model) expose it. Fitted per held-out M fold on the seed's h200
                             # records + the mid-size runs 1-2 (NOTES.md "Wave tiles repriced"): 0.3 in 20 of 32 folds
NONSTANDARD_N_EFFICIENCY = 1.0  # factor on the efficiency of a WGMMA whose N is none of 8, 16, 32, 64, 96, 128, 192,
                             # 256 (the full-width instruction of a wave tile). The folds fit 1.1 (the grid's edge),
                             # pulled by the pad run's warm-L2 times (no input rotation); the three bench-harness
                             # full-width records (64x144, 128x208, 128x240) sit within 4% of 1.0: kept at 1.0
PINGPONG_HIDE_CAPPED = True     # ping-pong hides at most one tile's mainloop of its epilogue (cost_arrays)
LAST_WAVE_OWN_RATE = False   # price a partial last wave's k-blocks at its own busy CTAs: an experiment, off (it moves
                             # every committed kernel's price; scored on the seed in NOTES.md "Wave tiles priced":
                             # lower error, no better picks)
MEMORY_OVERLAP_NORM = 4.0    # the mainloop and the DRAM stream overlap as the p-norm of the two times: p -> inf
                             # is perfect overlap (the max), p = 1 none (the sum)
# Resident CTAs by cluster size: a cluster must fit in one GPC, so big clusters strand SMs.
ACTIVE_CTAS = {1: 132, 2: 132, 4: 128, 8: 120, 16: 112}
# ... and the fewest: CUTLASS launches cudaOccupancyMaxActiveClusters clusters (KernelHardwareInfo, our ABI's
# hardware_info), which counts whole clusters per GPC, and a 132-SM part's GPCs hold 14-18 SMs as the chip was
# harvested: 29-32 clusters of 4. The H200 of 2026-11-22 (seed) kept 32 resident (1024^3 64x128 2x2, 128 tiles: one
# wave); the H200 of 2026-11-26 (bench/results/suites midsize runs) fewer than 32 and at least 30: 256x144 4x1 with 128
# tiles ran two rounds (qwen2.5 QKV M = 1000: 93.4 us, 89.4 us, predicted 47.9; phi3m QKV: 134.5, 131.4, 136.8 with
# 256x152), 64x192x128 1x4 and 2x4 with 120 tiles one. A data-parallel kernel that claims one wave is priced at the
# mean of its waves on the two (a claim that holds on one chip of two is a coin toss); the busy-CTA terms keep ACTIVE_CTAS
FEWEST_ACTIVE_CTAS = {4: 120}

SCHEDULES = ("warp_specialized", "cooperative", "pingpong")
# A schedule code carries the mainloop's load too: code = schedule index + len(SCHEDULES) * load index,
# so 0-2 are the TMA mainloops and 3-5 their cp.async twins (search/schedule_rewrites.py).
LOADS = ("tma", "cp_async")

# cp.async mainloop (legality/cp_async.py). Not yet measured: priced from what the producer must do,
# to be fitted once bench/unaligned.toml has run on a GPU.
# * Issue: TMA moves a whole box per instruction; cp.async moves one vector per thread, so each k-block
#   costs (Tile_M x Tile_K / alignment_a + Tile_N x Tile_K / alignment_b) / 32 warp-instructions
#   through the SM's load/store units, about one per cycle (Hopper LSU, 32 lanes).
# * Latency: cp.async is asynchronous, so stages hide it as they hide TMA's. A 1- or 2-byte vector is
#   a synchronous load: the producer waits for each k-block's loads before it commits the stage, so
#   every k-block pays the global-memory latency once (not divided by the stages).
# * Bookkeeping: CP_ASYNC_KBLOCK_US per k-block (below).
# * No multicast: cp.async kernels run 1x1 clusters (the L2 term already counts that).
SM_CLOCK_HZ = 1.755e9
MAX_SM_CLOCK_HZ = 1.98e9     # H100/H200 SXM: the most an SM clocks (nvidia-smi clocks.max.sm);
                             # SM_CLOCK_HZ is what a GEMM that keeps every SM's tensor cores busy sustains
                             # under the power cap. Fewer busy SMs draw less power, so the clock rises: with
                             # dynamic power ~ f^3 (voltage tracking frequency) and the cap fixed, a fraction b
                             # of the SMs runs at b^(-1/3) times the full-load clock, up to MAX_CLOCK_RATIO
                             # (b <= 0.70). Seen on the H100 (2026-11-24 LLM tune runs): single-wave persistent
                             # kernels on 32-80 SMs ran 15-23% faster than the model without it, while stream-K
                             # on all 132 SMs of the same problems ran 5-18% slower: the model had stream-K
                             # winning problems it loses (llama70b_o_m128, qkv_m128, 8b_down_m512)
MAX_CLOCK_RATIO = MAX_SM_CLOCK_HZ / SM_CLOCK_HZ
CP_ASYNC_CYCLES_PER_WARP_COPY = 1.0
SYNC_COPY_LATENCY_US = 0.5
SYNC_ELEMENT_US = 0.34       # per element a producer thread copies synchronously (1-/2-byte vectors):
                             # H100 2026-11-24 (bench/results/...-unaligned.json): bf16 TN 2048x2048x2047,
                             # 256x128x128 cooperative, one wave of 16 k-blocks in 2.09 ms = 130 us per
                             # k-block for 384 elements per thread (0.34 us); bf16 NT 4095x4096x4096
                             # (A only 2-byte), 128x256x128, 128 k-blocks in 6.47 ms: 0.39 us per element
CP_ASYNC_KBLOCK_US = 0.05    # per k-block: 128-256 producer threads each arrive on the stage's barrier
                             # and run the predicated copy loop, where TMA issues one instruction; priced
                             # like KBLOCK_OVERHEAD_US, the other per-k-block bookkeeping
EPILOGUES = ("tma_warp_specialized", "tma_warp_specialized_cooperative", "no_smem")
SCHEDULERS = ("persistent", "stream_k")
RASTERS = ("heuristic", "along_m", "along_n")


def effective_swizzle(tiles_m, tiles_n, max_swizzle):
    """get_log_swizzle_size of tile_scheduler_params.h: the swizzle the scheduler really uses."""
    lo = np.minimum(tiles_m, tiles_n)
    return np.where((max_swizzle >= 8) & (lo >= 6), 8,
                    np.where((max_swizzle >= 4) & (lo >= 3), 4, np.where((max_swizzle >= 2) & (lo >= 2), 2, 1)))


def effective_raster(problem, tile, cluster, raster: int, swizzle: int) -> tuple[str, int]:
    """What the persistent scheduler really does with (raster, swizzle) for this problem and tile:
    heuristic resolves to along_m or along_n, and the swizzle is capped by the grid. Two settings
    with the same effective pair run the same tile order."""
    blocks_m = -(-(-(-problem.m // tile[0])) // cluster[0]) * cluster[0]     # CTAs, whole clusters
    blocks_n = -(-(-(-problem.n // tile[1])) // cluster[1]) * cluster[1]
    s = int(effective_swizzle(np.array(blocks_m), np.array(blocks_n), np.array(swizzle)))
    blocks_m = -(-blocks_m // (s * cluster[0])) * s * cluster[0]
    blocks_n = -(-blocks_n // (s * cluster[1])) * s * cluster[1]
    along_m = (blocks_n > blocks_m) if raster == 0 else raster == 1
    return ("along_m" if along_m else "along_n"), s


def wave_footprint(tiles_m, tiles_n, active, raster, swizzle):
    """(rows, cols) of tiles one wave of ``active`` CTAs touches.

    Raster along M walks M fastest inside strips ``swizzle`` tiles wide along N (and vice versa);
    ``heuristic`` is AlongM when there are more tiles along N (get_rasterization_order).
    """
    along_m = np.where(raster == 0, tiles_n > tiles_m, raster == 1)
    major = np.where(along_m, tiles_m, tiles_n)
    minor = np.where(along_m, tiles_n, tiles_m)
    s = np.minimum(effective_swizzle(tiles_m, tiles_n, swizzle), minor)
    strip = s * major
    fits = active <= strip
    along = np.where(fits, np.minimum(major, np.ceil(active / s)), major)
    across = np.where(fits, s, np.minimum(minor, s * np.ceil(active / strip)))
    rows = np.where(along_m, along, across)
    cols = np.where(along_m, across, along)
    return rows, cols


def clock_boost(busy_ctas, capacity):
    """SM clock relative to SM_CLOCK_HZ when ``busy_ctas`` CTAs (one per SM) run the tensor cores:
    the power cap allows b^(-1/3) for a busy fraction b, up to the maximum clock (MAX_CLOCK_RATIO).
    ``capacity`` is the CTAs the cluster shape can keep resident: SMs a cluster shape strands (4 of 132
    with 4-CTA clusters) are not counted as freed power (no measurement shows it), only SMs the problem
    leaves without a tile."""
    b = np.clip(np.asarray(busy_ctas, dtype=np.float64) / np.asarray(capacity, dtype=np.float64), 1e-3, 1.0)
    return np.minimum(b ** (-1.0 / 3.0), MAX_CLOCK_RATIO)


STANDARD_INSTRUCTION_N = (8, 16, 32, 64, 96, 128, 192, 256)   # the widths CUTLASS's ss_op_selector names


def instruction_efficiency(n):
    """Fraction of peak one warpgroup reaches with wgmma m64nNk: A is re-read per instruction; a width none of
    ss_op_selector's (STANDARD_INSTRUCTION_N) runs at NONSTANDARD_N_EFFICIENCY of that."""
    n = np.asarray(n, dtype=np.float64)
    odd = ~np.isin(n, STANDARD_INSTRUCTION_N)
    return np.where(odd, NONSTANDARD_N_EFFICIENCY, 1.0) / (1.0 + INSTRUCTION_N_HALF / n)


SECTOR_BYTES = 32.0     # the L2/DRAM write granule


def _epilogue_subtile_n(tm, tn, sched, d_bits=16):
    """Columns of EpilogueTileAuto's subtile (see excess_epilogue_subtiles)."""
    tn_i = np.asarray(tn).astype(np.int64)
    sched = np.asarray(sched) % len(SCHEDULES)
    n_perf = np.where((d_bits == 8) & (tn_i % 64 == 0) & (sched != 1), 64, 32)
    return np.gcd(np.minimum(n_perf, tn_i), tn_i)


def excess_epilogue_subtiles(tm, tn, sched, d_bits=16):
    """TMA-epilogue subtiles per tile beyond ceil(Tile_N / 32) per row block: CUTLASS's EpilogueTileAuto
    (sm90_compute_tile_shape_or_override) stores a cooperative tile in min(128, Tile_M) x gcd(32, Tile_N)
    subtiles and any other in min(64, Tile_M) x gcd(N_perf, Tile_N) (N_perf 64 for an 8-bit D with Tile_N % 64
    == 0, else 32). Zero for every standard width (8, 16, 32, 64, 96, 128, 192, 224, 256): the store-bandwidth
    term was fitted on those; an odd multiple of 8 stores Tile_N / 8 subtiles of 8 columns."""
    tm = np.asarray(tm, dtype=np.float64)
    tn_i = np.asarray(tn).astype(np.int64)
    sched = np.asarray(sched) % len(SCHEDULES)
    epi_m = np.minimum(np.where(sched == 1, 128.0, 64.0), tm)
    epi_n = _epilogue_subtile_n(tm, tn_i, sched, d_bits)
    per_block = tn_i // np.maximum(epi_n, 1) - np.ceil(tn_i / 32.0)
    return np.maximum(per_block, 0.0) * np.ceil(tm / epi_m)


def _ss_op_n(tn):
    """CUTLASS ss_op_selector: the widest of 256,192,128,96,64,32,16,8 dividing Tile_N."""
    tn = np.asarray(tn)
    out = np.full(tn.shape, 8)
    for n in (16, 32, 64, 96, 128, 192, 256):
        out = np.where(tn % n == 0, n, out)
    return out


def search_instruction_n(tn):
    """The WGMMA N the search gives a tile with wave tiles on (search/engine.py ``_make_config``): the whole tile
    width, one instruction, for every multiple of 8 up to 256 (any of them is a WGMMA N). CUTLASS's ss_op_selector
    (``_ss_op_n``) takes the widest of 256, 192, 128, 96, 64, 32, 16, 8 dividing Tile_N: the same for those widths,
    but it splits an odd multiple of 8 (136, 200, 232) into Tile_N / 8 m64n8 instructions and the even non-standard
    widths into m64n16 (144, 208, 240) or m64n32 (160, 224): the issue 24 diagnosis measured 128x208 at 83.9 us with
    m64n16 and 45.0 us with m64n208, 64x144 34.0 against 26.1, 128x240 162.7 against 76.6 (H200). The odd multiples
    became reachable with the one-stage TMA form (cutegen/stage_tma.py). Every standard width keeps its instruction
    and its price."""
    tn = np.asarray(tn)
    return np.where((tn % 8 == 0) & (tn > 8) & (tn <= 256), tn, _ss_op_n(tn))


def instruction_n_of(config):
    """The WGMMA N a configuration renders with: its own instruction, else the builder's choice."""
    if getattr(config, "mma_instruction", None):
        return int(config.mma_instruction[1])
    return int(_ss_op_n(np.asarray([config.tile_shape[1]]))[0])


# launch-plan decomposition codes (cutegen.launch_plan.DECOMPOSITIONS) for stream-K kernels
DECOMP_HEURISTIC, DECOMP_DATA_PARALLEL, DECOMP_SPLIT_K, DECOMP_STREAM_K = range(4)
PARTIAL_BYTES_PER_ELEMENT = 4.0   # the workspace holds f32 accumulators (ElementAccumulator)


def cost_arrays(problem, tm, tn, tk, cm, cn, sched, epi, scheduler, stages, raster=0, swizzle=1, device=None,
                decomposition=DECOMP_STREAM_K, splits=1, instr_n=None):
    """Vectorised cost. Integer arrays (codes index SCHEDULES / EPILOGUES / SCHEDULERS / RASTERS).

    ``device``: a ``Rates`` (SM count, HBM bandwidth, tensor peak) of another device kind; None is the
    model as calibrated (132 SMs). ``decomposition`` and ``splits`` are the launch plan of stream-K
    kernels (scheduler code 1); persistent kernels ignore them. The default prices the stream-K
    decomposition. ``instr_n``: the WGMMA N of each row (None: CUTLASS's ss_op_selector width, which is
    what a configuration without an explicit instruction renders with). Returns (total_us, parts) where
    parts is a dict of arrays, one per term.
    """
    sms = SMS if device is None else device.sms
    hbm = (HBM_BYTES_PER_S if device is None else device.hbm_bytes_per_s) * HBM_EFFICIENCY
    peak_scale = 1.0 if device is None else device.peak_scale
    from cutegen.dtypes import DTYPES

    tm, tn, tk, cm, cn = (np.asarray(x, dtype=np.float64) for x in (tm, tn, tk, cm, cn))
    sched, epi, scheduler = (np.asarray(x) for x in (sched, epi, scheduler))
    load = sched // len(SCHEDULES)            # 0 TMA, 1 cp.async
    sched = sched % len(SCHEDULES)
    stages = np.asarray(stages, dtype=np.float64)
    M, N, K, L = problem.m, problem.n, problem.k, problem.batch
    in_bytes = DTYPES[problem.dtype_a].bits / 8
    out_bytes = DTYPES[problem.dtype_d].bits / 8
    c_bytes = 0.0 if problem.dtype_c == "void" or problem.beta == 0.0 else DTYPES[problem.dtype_c].bits / 8
    peak_sm = PEAK_FLOPS[DTYPES[problem.dtype_a].bits] * peak_scale / sms

    # waves: tiles rounded up to whole clusters, then (PersistentTileSchedulerSm90Params::initialize)
    # to whole swizzle strips of clusters along both modes; the padded tiles are real work units that
    # run the mainloop on zero-filled TMA boxes (the bench's 128x8192x8192 64x128 2x2 kernel ran 1.7x
    # slower with swizzle 2, which pads 2 tile rows to 4)
    tiles_m = np.ceil(np.ceil(M / tm) / cm) * cm
    tiles_n = np.ceil(np.ceil(N / tn) / cn) * cn
    swz = effective_swizzle(tiles_m, tiles_n, np.asarray(swizzle))
    tiles_m = np.ceil(tiles_m / (swz * cm)) * swz * cm
    tiles_n = np.ceil(tiles_n / (swz * cn)) * swz * cn
    tiles = tiles_m * tiles_n * L
    csize = (cm * cn).astype(np.int64)
    lookup = np.full(max(int(csize.max(initial=1)), 16) + 1, 100.0)
    for c, n in ACTIVE_CTAS.items():
        # fewer SMs strand proportionally as many; whole clusters only (132 SMs: the table as it is)
        lookup[c] = n if sms == SMS else max(c, (n * sms // SMS) // c * c)
    active_all = lookup[csize]                 # CTAs resident at once on the whole GPU
    active = np.minimum(active_all, np.maximum(tiles, 1.0))
    # the resident clusters of 4 depend on the chip's GPC harvest (FEWEST_ACTIVE_CTAS): a data-parallel kernel's
    # waves are the mean of its waves on the two chips measured
    fewest = lookup.copy()
    for c, n in FEWEST_ACTIVE_CTAS.items():
        fewest[c] = n if sms == SMS else max(c, (n * sms // SMS) // c * c)
    active_fewest = np.minimum(fewest[csize], np.maximum(tiles, 1.0))

    # mainloop per k-block
    kblocks = np.ceil(K / tk)
    instr = _ss_op_n(tn.astype(np.int64)) if instr_n is None else np.asarray(instr_n)
    eff = instruction_efficiency(instr)
    eff = np.where(sched == 0, eff * 0.92, eff)       # one consumer warpgroup: no math/issue overlap
    # accumulator registers per MMA thread (cooperative splits M over two warpgroups): past ~160 of
    # the 232-240 a consumer owns, the compiler runs out of room to pipeline fragments and addresses
    acc = tm * tn / np.where(sched == 1, 256.0, 128.0)
    # cp.async kernels set no register split: consumers get 168 registers, not 232, so the same
    # accumulator is that much more pressure (scaled, not measured)
    acc = np.where(load == 1, acc * 232.0 / 168.0, acc)
    eff = eff * (1.0 - 0.3 * np.clip((acc - 160.0) / 72.0, 0.0, 1.0))
    t_mma = 2.0 * tm * tn * tk / (peak_sm * eff) * 1e6
    # TMA clips a box at the tensor's edge and zero-fills the rest in shared memory: rows past M (or
    # columns past N) of a tile that overhangs the problem are never read (a 64-row tile over M = 16
    # loads 16 rows), though the WGMMA still computes the whole tile
    rows_a, cols_b = np.minimum(tm, M), np.minimum(tn, N)
    bytes_cta = (rows_a * tk / cn + cols_b * tk / cm) * in_bytes
    busy = np.minimum(active, tiles)
    latency = TMA_LATENCY_US * (1.0 + 0.05 * (cm * cn - 1.0))   # a multicast stage waits for the slowest CTA
    t_pipe = latency / np.maximum(stages - 1.0, 0.5)
    # cp.async: the producer's per-thread copies (see CP_ASYNC_* above)
    vectors = tm * tk / problem.alignment_a + tn * tk / problem.alignment_b
    t_issue = vectors / 32.0 * CP_ASYNC_CYCLES_PER_WARP_COPY / SM_CLOCK_HZ * 1e6
    # 1-/2-byte vectors are synchronous loads, one element after another per producer thread: each
    # pays about a DRAM round trip (SYNC_ELEMENT_US, measured below)
    sync_elems = (tm * tk * (problem.alignment_a * DTYPES[problem.dtype_a].bits < 32)
                  + tn * tk * (problem.alignment_b * DTYPES[problem.dtype_b].bits < 32))
    producers = np.where(sched == 0, 256.0, 128.0)
    t_sync = sync_elems / producers * SYNC_ELEMENT_US
    t_pipe = np.where(load == 1, t_pipe + np.where(sync_elems > 0, SYNC_COPY_LATENCY_US + t_issue + t_sync, 0.0), t_pipe)
    # a multicast stage is refilled only when every CTA of the cluster has released it: the wait for
    # the slowest grows with the cluster and saturates (4 CTAs already cost as much as 8 or 16)
    sync = CLUSTER_SYNC_US * np.minimum(cm * cn - 1.0, CLUSTER_SYNC_SATURATION - 1.0)
    # clusters of 4+: the round trip of the cluster-wide release, where the MMA does not cover it
    wide = np.clip((np.minimum(cm * cn, 4.0) - 2.0) / 2.0, 0.0, 1.0)
    sync = sync + wide * np.maximum(CLUSTER_WIDE_WAIT_US - t_mma, 0.0)

    def kblock_us(busy_ctas):
        """One k-block with ``busy_ctas`` CTAs pulling their operands through L2 at once."""
        t_load_ = bytes_cta * busy_ctas / L2_BYTES_PER_S * 1e6
        t_load_ = np.where(load == 1, np.maximum(t_load_, t_issue), t_load_)
        t_mma_ = t_mma / clock_boost(busy_ctas, active_all)
        return (np.maximum(np.maximum(t_mma_, t_load_), t_pipe) + KBLOCK_OVERHEAD_US + sync
                + np.where(load == 1, CP_ASYNC_KBLOCK_US, 0.0)), t_load_

    t_k, t_load = kblock_us(busy)

    # epilogue per tile
    t_epi = tm * tn * (out_bytes + c_bytes) * busy / STORE_BYTES_PER_S * 1e6
    # a TMA-epilogue subtile narrower than a 32-byte sector along D's contiguous mode (D N-contiguous, the
    # subtile gcd(32, Tile_N) = 8 columns of a 16-bit D: 16-byte row pieces) writes partial sectors: each costs
    # a whole sector of store bandwidth. A swap-AB kernel's D is M-contiguous (its subtile's 64-128 rows): no loss.
    # Priced where it was measured, a wave tile (Tile_N none of the standard widths) with its full-width
    # instruction (pad run 2). Not priced: the same tiles with ss_op_selector's m64n8 (never picked: 17
    # instructions for 136) and Tile_N = 8 (unswapped 8-column tiles: the grouped GEMM's proxy), so the one seed
    # record of the first kind (an oracle 128x200 m64n8), the learned fit on the seed, the grouped model and the
    # committed packs ranked by them do not move; a measurement of either would say whether they should
    seg = _epilogue_subtile_n(tm, tn, sched, DTYPES[problem.dtype_d].bits) * out_bytes
    wave_tile = (instr == tn) & ~np.isin(tn, STANDARD_INSTRUCTION_N)
    narrow = (epi != 2) & (problem.layout_c == "row") & (seg < SECTOR_BYTES) & wave_tile
    t_epi = np.where(narrow, t_epi * SECTOR_BYTES / np.maximum(seg, 1.0), t_epi)
    t_epi = np.where(epi == 2, t_epi * NOSMEM_EPILOGUE_FACTOR, t_epi)
    # narrow TMA-epilogue subtiles (Tile_N not a multiple of 32): a fixed cost per extra subtile (each is a
    # register-to-smem write, fence, named barrier and TMA store of its own), part of the epilogue's time
    t_epi = t_epi + np.where(epi != 2, EPILOGUE_SUBTILE_US * excess_epilogue_subtiles(
        tm, tn, sched, DTYPES[problem.dtype_d].bits), 0.0)
    # ping-pong overlaps an asynchronous TMA store with the other warpgroup's mainloop, so it hides at most that
    # mainloop (one tile's k-blocks): at small K an epilogue longer than the mainloop stays exposed (4096x4096x264,
    # 8192x2048x128: 128x168/176/200 ping-pong ran 1.6-2.5x the model that hid 85% of it). The no-smem epilogue's
    # direct stores occupy the math warps and the load/store path, so they stay exposed
    pp_tma = (sched == 2) & (epi != 2)
    if PINGPONG_HIDE_CAPPED:
        hidden_us = np.where(pp_tma, np.minimum(PINGPONG_EPILOGUE_HIDDEN * t_epi, kblocks * t_k), 0.0)
    else:
        hidden_us = np.where(pp_tma, PINGPONG_EPILOGUE_HIDDEN * t_epi, 0.0)
    t_epi_exposed = t_epi - hidden_us

    per_tile = kblocks * t_k + t_epi_exposed + np.where(sched == 0, NON_PERSISTENT_TILE_US, TILE_SWITCH_US)
    waves = np.ceil(tiles / active)
    # one wave on the chip that holds ACTIVE_CTAS, two on the one that holds FEWEST_ACTIVE_CTAS: the mean. Scope: the
    # one-wave claim only (the measured case); a many-wave kernel's extra wave on a smaller chip is not priced, so the
    # committed decode kernels (896 tiles of 1x4, HBM-bound, within noise of their 1x8 rivals) keep their rank
    waves = np.where(tiles <= active_all, 0.5 * (waves + np.ceil(tiles / active_fewest)), waves)
    fill = TMA_LATENCY_US + t_k                               # first k-block of each CTA
    t_dp = waves * per_tile + fill
    if LAST_WAVE_OWN_RATE:      # an experiment, off (NOTES.md "Wave tiles priced"): a partial last wave's k-blocks
        last = np.maximum(tiles - (waves - 1.0) * active, 1.0)     # run with fewer CTAs pulling through L2, at a
        t_k_last, _ = kblock_us(np.minimum(last, busy))              # higher clock (clock_boost)
        t_dp = t_dp - kblocks * (t_k - t_k_last)

    # partial-tile reduction through the workspace: a non-final piece writes tm x tn f32 partials and
    # the final piece reads them back. Every split tile's traffic shares the GPU's store bandwidth,
    # so the term is total partial bytes over the whole-GPU rate (not divided among the CTAs).
    partial_tile_us = 2.0 * tm * tn * PARTIAL_BYTES_PER_ELEMENT / STORE_BYTES_PER_S * 1e6

    # stream-K: the k-blocks of all tiles spread evenly, plus a fix-up for split tiles. The tiles of
    # the last partial wave are the split ones (CUTLASS's get_num_sk_tiles); their k-blocks spread
    # over every CTA, so about one partial per CTA beyond one final piece per split tile.
    # With fewer tiles than CTAs every tile is split, over every CTA that can get a k-block.
    total_blocks = tiles * kblocks
    active_sk = np.minimum(active_all, np.maximum(total_blocks, 1.0))
    t_k_sk, _ = kblock_us(active_sk)
    sk_tiles = np.where(tiles % active_all != 0, tiles % active_all, 0.0)
    sk_partials = np.where(sk_tiles > 0, np.maximum(active_sk - sk_tiles, 0.0), 0.0)
    # the deterministic fix-up chains the pieces of a split tile: CTAs per split tile - 1 links in series
    chain = np.where(sk_tiles > 0, np.maximum(np.ceil(active_sk / np.maximum(sk_tiles, 1.0)) - 1.0, 0.0), 0.0)
    t_sk = (np.ceil(total_blocks / active_sk) * t_k_sk / STREAMK_EFFICIENCY
            + t_epi_exposed * np.ceil(tiles / active)
            + np.where(sk_tiles > 0, STREAMK_FIXUP_US + 2 * t_epi, 0.0) + TILE_SWITCH_US + TMA_LATENCY_US + t_k_sk
            + sk_partials * partial_tile_us + chain * STREAMK_LINK_US)

    # split-K by s: s work units per tile, each ceil(kblocks / s) k-blocks; s - 1 partials per tile,
    # and the deterministic turnstile makes a tile's final piece wait for the others (fix-up)
    s = np.maximum(np.asarray(splits, dtype=np.float64), 1.0)
    units = tiles * s
    active_split = np.minimum(active_all, units)
    t_k_split, _ = kblock_us(active_split)
    per_unit = np.ceil(kblocks / s) * t_k_split + TILE_SWITCH_US
    t_split = (np.ceil(units / active_split) * per_unit + np.ceil(tiles / active) * t_epi_exposed
               + tiles * (s - 1.0) * partial_tile_us + (s - 1.0) * STREAMK_LINK_US
               + np.where(s > 1, STREAMK_FIXUP_US, 0.0) + TMA_LATENCY_US + t_k_split)

    decomp = np.asarray(decomposition)
    # heuristic: CUTLASS picks stream-K when the last wave is partial and data-parallel otherwise
    # (select_decomposition_mode), or split-K when asked for splits > 1
    t_heur = np.where(s > 1, t_split, np.where(sk_tiles > 0, t_sk, t_dp))
    t_streamk_kernel = np.select([decomp == DECOMP_DATA_PARALLEL, decomp == DECOMP_SPLIT_K, decomp == DECOMP_STREAM_K],
                                 [t_dp, t_split, t_sk], t_heur)
    t_main = np.where(scheduler == 1, t_streamk_kernel, t_dp)

    # DRAM: each wave reads the A rows and B columns of the tiles it covers
    rows, cols = wave_footprint(tiles_m / cm, tiles_n / cn, active / (cm * cn), np.asarray(raster), swz)
    unique = (np.minimum(rows * cm * tm, M) + np.minimum(cols * cn * tn, N)) * tk * in_bytes
    t_dram = np.where((scheduler == 1) & (decomp != DECOMP_DATA_PARALLEL), np.ceil(tiles / active), waves) \
        * kblocks * unique / hbm * 1e6

    # compulsory DRAM traffic is a floor no tiling beats
    t_hbm = (M * K + N * K) * L * in_bytes / hbm * 1e6 + M * N * L * (out_bytes + c_bytes) / hbm * 1e6
    # smooth maximum: a memory-bound problem still prefers the kernel with the shorter mainloop
    total = (t_main ** MEMORY_OVERLAP_NORM + np.maximum(t_hbm, t_dram) ** MEMORY_OVERLAP_NORM) \
        ** (1.0 / MEMORY_OVERLAP_NORM) + LAUNCH_US
    ragged = 1.0 - (M * N * L) / (np.ceil(M / tm) * tm * np.ceil(N / tn) * tn * L)
    parts = {
        "waves": waves, "tiles": tiles, "active_ctas": active, "kblocks": kblocks,
        "mma_us_per_kblock": t_mma, "load_us_per_kblock": t_load, "pipeline_us_per_kblock": t_pipe,
        "epilogue_us_per_tile": t_epi_exposed, "instruction_efficiency": eff, "accumulator_registers": acc, "ragged_waste": ragged,
        "cluster_sync_us_per_kblock": sync, "mainloop_us": t_main, "hbm_floor_us": np.broadcast_to(t_hbm, np.shape(t_main)),
        "dram_us": t_dram, "wave_tile_rows": rows * cm, "wave_tile_cols": cols * cn,
        "reduction_us": np.where(scheduler == 1, np.select(
            [decomp == DECOMP_SPLIT_K, decomp == DECOMP_STREAM_K],
            [tiles * (s - 1.0) * partial_tile_us, sk_partials * partial_tile_us], 0.0), 0.0),
        "workspace_bytes": np.where(scheduler == 1, np.select(
            [decomp == DECOMP_SPLIT_K, decomp == DECOMP_STREAM_K],
            [tiles * (s - 1.0), sk_partials], 0.0), 0.0) * tm * tn * PARTIAL_BYTES_PER_ELEMENT,
    }
    if np.any(load == 1):      # only cp.async candidates report it: TMA breakdowns keep their keys
        parts["cp_async_issue_us_per_kblock"] = np.where(load == 1, t_issue, 0.0)
    return total, parts


# Operand staging (cutegen/staging.py): the C ABI copies an unaligned A or B into the workspace with
# cudaMemcpy2DAsync before the kernel. Priced as the bytes it reads and writes over HBM bandwidth at
# STAGE_COPY_EFFICIENCY, plus a launch per copy. Neither constant is measured yet: bench/gpu_stage.sh
# times the bare copy at the unaligned suites' sizes so they can be checked.
STAGE_COPY_EFFICIENCY = 0.7   # a device-to-device 2-D copy of rows a few KB long: below a stream's peak
STAGE_COPY_LAUNCH_US = 2.0    # per cudaMemcpy2DAsync on the stream ahead of the kernel


# A transposing stage (an MN-major 8-bit or tf32 operand written K-major) is the ABI's own 32x32-tile
# transpose kernel: the same bytes as a row copy, but each warp reads and writes 32-element rows of
# the tile (32 B for fp8: one sector per request), so it reaches less of the bandwidth, the less the
# narrower the element. Measured on the H100 (2026-11-24, bench/gpu_transpose.sh, bench/results/
# runs/2026-11-24-nvidia-h100-80gb-hbm3-transpose-copy.jsonl), bytes read + written over time at 16-134 MB:
# 1-byte elements 613-617 GB/s, 2-byte 1,027, 4-byte 1,728-1,820: 0.18 / 0.31 / 0.53 of 3.35 TB/s.
STAGE_TRANSPOSE_EFFICIENCY = {1: 0.18, 2: 0.31, 4: 0.53}


def staging_us(problem, operands, device=None) -> float:
    """Predicted microseconds of the staged copies of ``operands`` ('a', 'b') of ``problem``; an
    operand a kernel can only read K-major (cutegen.staging.needs_transpose) is copied transposed."""
    from cutegen.staging import element_bytes, moved_bytes, needs_transpose

    if not operands:
        return 0.0
    hbm = HBM_BYTES_PER_S if device is None else device.hbm_bytes_per_s
    moved = sum(moved_bytes(problem, op) for op in operands if not needs_transpose(problem, op))
    t_us = sum(moved_bytes(problem, op) / (hbm * STAGE_TRANSPOSE_EFFICIENCY[element_bytes(problem, op)])
               for op in operands if needs_transpose(problem, op)) * 1e6
    return moved / (hbm * STAGE_COPY_EFFICIENCY) * 1e6 + STAGE_COPY_LAUNCH_US * len(operands) + t_us


# Split-K with a separate reduction (cutegen/split_k_reduce.py): the kernel is the batched slice GEMM
# (priced by cost_arrays on split_k_reduce.sliced_problem: K/s deep, s batches, its f32 partials written as
# its D), then the ABI's reduction kernel reads every partial once, C where it exists, and writes D, plus a
# second launch on the stream. Anchored on the one measurement of such a pass: cuBLAS's
# splitKreduce_kernel after its 128x64 split-K kernel at 256 x 256 x 65536 bf16 on the H200 (2026-11-26,
# bench/results/runs/2026-11-26-nvidia-h200-diagnose-ncu.txt: 16 f32 partials of 256 x 256 read and a bf16
# D written, 4.33 MB, in 4.42 us): with SPLIT_K_REDUCE_LAUNCH_US for the launch and ramp (the staging
# copy's figure) the rest is 4.33 MB in 2.42 us, 0.53 of HBM_BYTES_PER_S. cutegen's own reduction kernel is
# not timed yet: bench/gpu_splitk_reduce.sh times the whole form against cuBLAS.
SPLIT_K_REDUCE_LAUNCH_US = 2.0
SPLIT_K_REDUCE_EFFICIENCY = 0.53


def split_k_reduce_us(problem, s: int, device=None) -> float:
    """Predicted microseconds of the separate reduction of ``s`` f32 partials of ``problem`` (its M x N x batch)."""
    from cutegen.split_k_reduce import moved_bytes

    hbm = HBM_BYTES_PER_S if device is None else device.hbm_bytes_per_s
    return moved_bytes(problem, s) / (hbm * SPLIT_K_REDUCE_EFFICIENCY) * 1e6 + SPLIT_K_REDUCE_LAUNCH_US


def config_codes(config) -> tuple[int, int, int]:
    load = LOADS.index(getattr(config, "mainloop_load", "tma"))
    return (SCHEDULES.index(config.mainloop_schedule) + len(SCHEDULES) * load, EPILOGUES.index(config.epilogue_schedule),
            SCHEDULERS.index(config.tile_scheduler))


class Rates:
    """What the model needs of a device kind other than the one it was calibrated on."""

    def __init__(self, sms: int, hbm_bytes_per_s: float, peak_scale: float):
        self.sms, self.hbm_bytes_per_s, self.peak_scale = int(sms), float(hbm_bytes_per_s), float(peak_scale)

    def __repr__(self) -> str:
        return f"Rates(sms={self.sms}, hbm={self.hbm_bytes_per_s:.3g}, peak_scale={self.peak_scale:.3g})"


def config_cost(problem, config, stages: int, plan=None, device=None) -> tuple[float, dict]:
    """Cost and breakdown of one configuration (stages resolved), under ``plan`` (a LaunchPlan) for a
    stream-K kernel (None: the stream-K decomposition); ``device`` as in cost_arrays."""
    from cutegen.split_k_reduce import sliced_problem, slices
    from cutegen.staging import staged_operands, staged_problem

    if slices(config) > 1:   # the batched slice GEMM, then the separate reduction (cutegen/split_k_reduce.py)
        reduce_us = split_k_reduce_us(problem, slices(config), device)
        total, breakdown = config_cost(sliced_problem(problem, config), config.replace(split_k_slices=1), stages,
                                       None, device)
        breakdown["split_k_slices"] = slices(config)
        breakdown["split_k_reduce_us"] = round(reduce_us, 4)
        breakdown["predicted_us"] = round(total + reduce_us, 3)
        breakdown["predicted_tflops"] = round(problem.flops / ((total + reduce_us) * 1e-6) / 1e12, 1)
        return total + reduce_us, breakdown
    ops = staged_operands(config)
    if ops:       # the kernel reads the aligned copies; the copies are priced on the caller's problem
        copy_us = staging_us(problem, ops, device)
        total, breakdown = config_cost(staged_problem(problem, config), config.replace(stage_a=False, stage_b=False),
                                       stages, plan, device)
        breakdown["staging_us"] = round(copy_us, 4)
        breakdown["predicted_us"] = round(total + copy_us, 3)
        breakdown["predicted_tflops"] = round(problem.flops / ((total + copy_us) * 1e-6) / 1e12, 1)
        return total + copy_us, breakdown
    s, e, sc = config_codes(config)
    t = config.tile_shape
    c = config.cluster_shape
    decomp, splits = (DECOMP_STREAM_K, 1) if plan is None else plan.codes()[:2]
    total, parts = cost_arrays(problem, [t[0]], [t[1]], [t[2]], [c[0]], [c[1]], [s], [e], [sc], [stages],
                               [RASTERS.index(config.raster_order)], [config.raster_swizzle], device=device,
                               decomposition=[decomp], splits=[splits], instr_n=[instruction_n_of(config)])
    breakdown = {k: round(float(np.asarray(v).reshape(-1)[0]), 4) for k, v in parts.items()
                 if sc == 1 or k not in ("reduction_us", "workspace_bytes")}   # no reduction without stream-K
    breakdown["stages"] = stages
    breakdown["predicted_us"] = round(float(total[0]), 3)
    breakdown["predicted_tflops"] = round(problem.flops / (float(total[0]) * 1e-6) / 1e12, 1)
    return float(total[0]), breakdown


# --- the pipeline's temporal choices (search/temporal.py) ------------------------------------------------
# Estimated, not fitted: no H100 measurement of these choices exists yet (bench/gpu_temporal.sh takes them).
WGMMA_DRAIN_US = 128.0 / SM_CLOCK_HZ * 1e6     # a consumer that releases after warpgroup_wait<0> lets the tensor
                                               # cores drain before its next batch: ~128 cycles per k-block


def temporal_cost(breakdown: dict, stages: int, prefetch: int, release_lag: int, order: str) -> tuple[float, dict]:
    """Extra microseconds of a temporal choice over today's protocol (prefetch = stages, release lag 1,
    order hand-over after the MMAs), from a kernel's ``config_cost`` breakdown.

    * Latency hiding: today ``t_pipe = latency / (stages - 1)`` (the loads in flight while one stage is
      read). The producer may run min(prefetch, stages) k-blocks ahead of the last release, and a
      consumer holds release_lag + 1 stages, so min(prefetch, stages) - release_lag loads hide TMA's
      latency (stages - 1 today).
    * Release after warpgroup_wait<0> (lag 0): each k-block pays the WGMMA drain.
    * Ping-pong hand-over after the tail's releases: the other warpgroup starts its mainloop one
      k-block's MMA later per tile.
    """
    d = min(prefetch or stages, stages)
    if d == stages and release_lag == 1 and order == "after_mma":
        return 0.0, {}                      # today's protocol: the model as it is, to the bit
    t_mma, t_load = breakdown["mma_us_per_kblock"], breakdown["load_us_per_kblock"]
    t_pipe = breakdown["pipeline_us_per_kblock"]
    latency = t_pipe * max(stages - 1.0, 0.5)
    t_pipe_new = latency / max(d - release_lag, 0.5)
    per_k = max(t_mma, t_load, t_pipe_new) - max(t_mma, t_load, t_pipe) + (WGMMA_DRAIN_US if release_lag == 0 else 0.0)
    per_tile = t_mma if order == "after_release" else 0.0
    waves, kblocks = breakdown["waves"], breakdown["kblocks"]
    extra = waves * (kblocks * per_k + per_tile)
    return extra, {"pipeline_us_per_kblock": round(t_pipe_new, 4), "temporal_us": round(extra, 4)}
