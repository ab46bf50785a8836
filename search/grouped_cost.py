"""Analytic cost of a grouped GEMM kernel (issue 26) under an expected, possibly uneven, routing.

The distribution is an input of the problem (``GroupedGemmProblem.distribution``): ``uniform``, ``skewed``
(a Zipf law, expert i gets a share proportional to 1 / (i + 1)), ``worst`` (every token in one expert) or a
measured histogram of per-expert fractions. ``problem.group_sizes`` turns it into the expected rows M_i of
each group (largest-remainder rounding: they sum to the tokens exactly); the model prices those M_i, not
their mean. Terms, each in the breakdown:

* tiles      -- per group ``ceil(M_i / tile) x ceil(N / tile)`` in the kernel's orientation (swap-AB puts
                the tokens on the tile's N mode), each count rounded up to whole clusters as the group
                scheduler does (sm90_tile_scheduler_group.hpp:275-276); empty groups have none. A partial
                tile computes a whole tile: ``partial_tile_waste`` is the computed-but-unused share.
* waves      -- the scheduler deals the linearised tiles of every group round-robin to the persistent
                CTAs (one per SM, fewer with big clusters: cost.ACTIVE_CTAS); all tiles have K / tile_k
                k-blocks, so the busiest CTA runs ``ceil(tiles / CTAs)`` of them.
* per tile   -- GEMM's per-k-block model (search/cost.py ``cost_arrays``: WGMMA time and efficiency by tile
                and schedule, accumulator pressure, pipeline depth, cluster waits, epilogue per tile), read
                from a proxy GEMM of the same tile with every CTA busy and rescaled to the CTAs the grouped
                launch keeps busy (L2 load and store traffic scale with them, the clock with the power cap,
                exactly as cost_arrays scales them); the A and B bytes per k-block are the rows a group's
                tiles really load (TMA clips at M_i).
* descriptors-- each CTA rewrites its A/B (and D) tensor maps when its next tile is in another group
                (legality/grouped_gemm.py): ``DESCRIPTOR_UPDATE_US`` per switch on the busiest CTA's path.
* dram       -- the bytes each wave's tiles touch in HBM (the X rows and W rows of the tiles a wave covers,
                per group, in the scheduler's raster order), summed over waves; at least the compulsory
                bytes: every used expert's W once, X and D once (``hbm_floor_us``).
* cluster    -- per tile, ``CLUSTER_SKEW_PER_EPILOGUE`` epilogues for a CTA of a 2+ CTA cluster (the cluster runs
                its tiles in step), the one term calibrated on measured grouped kernels (H200 run 2 and the
                profile runs).
* total      -- mainloop and DRAM overlap as cost.py's p-norm, plus the launch and the ABI's prep kernel.

``floor_us`` is the issue's floor on the device's datasheet: max(bytes of the used experts' weights, X
and D at the HBM peak, useful FLOPs at the tensor peak); ``fraction_of_floor`` = floor / predicted.
DESCRIPTOR_UPDATE_US and GROUP_PREP_US are estimates; every other term is GEMM's H200-calibrated model.
"""
from __future__ import annotations

import math
import numpy as np

from . import cost as costmod

# Estimated, not measured (no grouped kernel has run): per group switch a CTA's producer rewrites two maps
# in shared memory, waits for its bulk groups, copies them to global with a release fence and acquires
# them before the next TMA; the epilogue does the same for D after its stores drain. About a microsecond.
DESCRIPTOR_UPDATE_US = 1.0
# The C ABI's prep kernel (pointer, stride and shape arrays from the device offsets) is one more launch.
GROUP_PREP_US = 2.0
# Calibrated on the H200 (the only constant here fitted to grouped kernels): a CTA of a 2+ CTA cluster waits, per
# tile, for the slowest CTA of its cluster (their mainloops multicast into each other's stages, so they run in
# step): the skew is about an epilogue, the part of a tile that differs most between CTAs (stores draining, the
# tensor-map update at a group switch). Per tile it pays this many times its epilogue: 3.0 us on a 128x256 tile
# (2.4 us epilogue), ~0.2 us on a swap-AB decode tile. Chosen from a grid (0-2 x, and a constant 0-4 us) against
# every timed prefill kernel of bench/results/grouped/2026-11-26-h200-run2-results.json and
# bench/results/profile/2026-11-26-h200-run1-profile.json (17 cases): the model's cheapest timed kernel over the
# measured fastest, geomean 1.030 -> 1.012 (run 2) and 1.019 -> 1.007 (profile run 1), worst 1.073 -> 1.037; held
# out, the profile's compare run (bench/results/profile/2026-11-26-h200-run2-compare.json, 10 cases) 1.017 -> 1.009.
# 2 x sends Mixtral w1 skewed to a 1x1 cluster that measured 18% slower. A constant 3 us per tile ranks prefill the
# same but moved decode picks off 2-CTA clusters that measured 2-6% faster in the compare run: this form leaves them.
CLUSTER_SKEW_PER_EPILOGUE = 1.25
DEFAULT_DEVICE = "h200"          # issue 26's targets are H200 figures
SCHEDULES = ("ptr_cooperative", "ptr_pingpong")


def _device(device):
    from .learned.device import rates
    from cutegen.results.device import KINDS
    kind = device if isinstance(device, str) or device is None else None
    kind = kind or DEFAULT_DEVICE
    return kind, rates(kind), KINDS.get(kind)


def kernel_extents(problem, swap_ab: bool, sizes=None) -> tuple[np.ndarray, np.ndarray]:
    """Per group (rows along the kernel's M mode, columns along its N mode)."""
    m = np.asarray(problem.group_sizes if sizes is None else sizes, dtype=np.int64)
    n = np.full_like(m, problem.n)
    return (n, m) if swap_ab else (m, n)


def group_tiles(problem, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int, swap_ab: bool, sizes=None):
    """(tiles along M, tiles along N) per group, rounded to whole clusters; 0 x 0 for an empty group."""
    km, kn = kernel_extents(problem, swap_ab, sizes)
    tm = -(-km // tile_m)
    tn = -(-kn // tile_n)
    tm = -(-tm // cluster_m) * cluster_m
    tn = -(-tn // cluster_n) * cluster_n
    empty = (km == 0) | (kn == 0)
    return np.where(empty, 0, tm), np.where(empty, 0, tn)


PROXY_EXTENT = 1 << 16      # rows and columns of the proxy GEMM: far more tiles than CTAs for any tile
_PROXY_KEYS = ("mma_us_per_kblock", "pipeline_us_per_kblock", "cluster_sync_us_per_kblock", "epilogue_us_per_tile",
               "active_ctas", "instruction_efficiency", "accumulator_registers")


def proxy_terms(problem, configs, stages, device=None) -> list[dict]:
    """Per-k-block and per-tile terms of GEMM's model (``cost.cost_arrays``) for each config's tile, cluster,
    schedule and stages with every CTA busy: one vectorised call on a proxy GEMM of ``PROXY_EXTENT`` rows and
    columns (only its tile counts and full-tile loads are read), K as the problem's."""
    from cutegen.problem import GemmProblem

    kind, rates, _ = _device(device)
    proxy = GemmProblem(m=PROXY_EXTENT, n=PROXY_EXTENT, k=problem.k, dtype_a=problem.dtype, dtype_b=problem.dtype,
                        dtype_c="void", dtype_d="bf16", layout_a="row", layout_b="col", layout_c="row")
    coop = [c.schedule == "ptr_cooperative" for c in configs]
    sched = [costmod.SCHEDULES.index("cooperative" if x else "pingpong") for x in coop]
    epi = [costmod.EPILOGUES.index("tma_warp_specialized_cooperative" if x else "tma_warp_specialized") for x in coop]
    _, parts = costmod.cost_arrays(
        proxy, [c.tile_m for c in configs], [c.tile_n for c in configs], [c.tile_k for c in configs],
        [c.cluster_m for c in configs], [c.cluster_n for c in configs], sched, epi, [0] * len(configs),
        [max(int(st), 1) for st in stages], device=rates)
    cols = {key: np.broadcast_to(np.asarray(parts[key], dtype=np.float64), (len(configs),)) for key in _PROXY_KEYS}
    return [{key: float(cols[key][i]) for key in _PROXY_KEYS} for i in range(len(configs))]


def _segments(starts: np.ndarray, counts: np.ndarray, wave: int):
    """(group, offset in group, length) of every piece of a group's tile range inside one wave of ``wave``
    consecutive linear tiles: the linear order cut at every group boundary and every wave boundary."""
    ends = starts + counts
    total = int(ends[-1])
    cuts = np.union1d(np.concatenate([starts, ends]), np.arange(0, total + wave, wave))
    cuts = cuts[cuts <= total]
    lo, hi = cuts[:-1], cuts[1:]
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    g = np.searchsorted(ends, lo, side="right")
    return g, lo - starts[g], hi - lo


def wave_bytes(problem, config, tiles_m, tiles_n, active: int, sizes=None) -> float:
    """Bytes the waves read from HBM: per wave and group, the distinct kernel-A rows and kernel-B rows of the
    tiles it covers (K elements each), clipped at the group's extents. ``heuristic`` raster is AlongN for a
    grouped launch (the group sizes are on the device: problem blocks (sm_count, 1)), walking the kernel's N
    tiles fastest; ``along_m`` walks M fastest."""
    counts = tiles_m * tiles_n
    if counts.sum() == 0:
        return 0.0
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    g, off, length = _segments(starts, counts, max(int(active), 1))
    along_m = config.raster == "along_m"
    fast = np.where(along_m, tiles_m[g], tiles_n[g])
    first, last = off // fast, (off + length - 1) // fast
    distinct_slow = last - first + 1
    distinct_fast = np.minimum(length, fast)
    dm, dn = (distinct_fast, distinct_slow) if along_m else (distinct_slow, distinct_fast)
    km, kn = kernel_extents(problem, config.swap_ab, sizes)
    rows_a = np.minimum(dm * config.tile_m, km[g])
    rows_b = np.minimum(dn * config.tile_n, kn[g])
    return float(((rows_a + rows_b) * problem.k * problem.element_bytes).sum())


def descriptor_switches(tiles_per_group: np.ndarray, active: int) -> int:
    """Group switches on the busiest CTA (CTA 0: tiles 0, G, 2G, ... of the linear order), counting the first
    update: how many times it rewrites its tensor maps."""
    total = int(tiles_per_group.sum())
    if total == 0:
        return 0
    ends = np.cumsum(tiles_per_group)
    own = np.arange(0, total, max(int(active), 1))
    groups = np.searchsorted(ends, own, side="right")
    return int(1 + np.count_nonzero(np.diff(groups)))


def floor_us(problem, device=None, sizes=None) -> tuple[float, dict]:
    """The issue's floor on the device's datasheet: max((used experts' W + X + D bytes) / HBM peak, useful
    FLOPs / tensor peak), with its parts. FP8 is held to the FP8 tensor peak (twice bf16's)."""
    kind, _, spec = _device(device)
    hbm = (spec.hbm_gbps if spec else costmod.HBM_BYTES_PER_S / 1e9) * 1e9
    peak = (spec.dense_bf16_tflops if spec else 989.4) * 1e12 * (2.0 if problem.dtype == "e4m3" else 1.0)
    sizes = problem.group_sizes if sizes is None else sizes
    used = int(np.count_nonzero(sizes))
    rows = int(np.sum(sizes))
    eb = problem.element_bytes
    weights = used * problem.n * problem.k * eb
    acts = rows * problem.k * eb + rows * problem.n * 2
    t_bytes = (weights + acts) / hbm * 1e6
    t_flops = 2.0 * rows * problem.n * problem.k / peak * 1e6
    return max(t_bytes, t_flops), {"floor_bytes": weights + acts, "floor_weight_bytes": weights,
                                   "floor_bytes_us": round(t_bytes, 4), "floor_flops_us": round(t_flops, 4),
                                   "experts_used": used, "floor_device": kind}


def grouped_cost(problem, config, stages: int, device=None, sizes=None, terms=None) -> tuple[float, dict]:
    """Predicted microseconds of ``config`` (its stages resolved) on ``problem``'s expected group sizes (or
    ``sizes``), and the breakdown of every term. ``terms``: this config's ``proxy_terms`` (a search computes
    them for every candidate in one call)."""
    from cutegen.dtypes import DTYPES

    sizes = np.asarray(problem.group_sizes if sizes is None else sizes, dtype=np.int64)
    kind, rates, _ = _device(device)
    sms = costmod.SMS if rates is None else rates.sms
    hbm_raw = costmod.HBM_BYTES_PER_S if rates is None else rates.hbm_bytes_per_s
    hbm = hbm_raw * costmod.HBM_EFFICIENCY
    tm_, tn_, tk = config.tile
    cm, cn = config.cluster_m, config.cluster_n
    if terms is None:
        terms = proxy_terms(problem, [config], [stages], kind)[0]
    tiles_m, tiles_n = group_tiles(problem, tm_, tn_, cm, cn, config.swap_ab, sizes)
    per_group = tiles_m * tiles_n
    tiles = int(per_group.sum())
    active_all = int(terms["active_ctas"]) if sms == costmod.SMS else max(cm * cn, sms // (cm * cn) * (cm * cn))
    busy = max(min(active_all, tiles), 1)
    in_bytes = DTYPES[problem.dtype].bits / 8
    km, kn = kernel_extents(problem, config.swap_ab, sizes)
    # rows each tile really loads (TMA clips a box at the group's edge), averaged over the tiles
    if tiles:
        full_m = np.minimum(km, tiles_m * tm_)            # rows covered by the group's (cluster-rounded) tiles
        full_n = np.minimum(kn, tiles_n * tn_)
        rows_a = float((full_m * tiles_n).sum()) / tiles
        rows_b = float((full_n * tiles_m).sum()) / tiles
        useful = float((km * kn).sum())
        computed = float((per_group * tm_ * tn_).sum())
    else:
        rows_a = rows_b = useful = computed = 0.0
    scale_bytes = 0.0
    if problem.scale == "block128":
        from cutegen.legality.grouped_gemm import scale_bytes_per_stage
        scale_bytes = scale_bytes_per_stage(problem, config)
    bytes_cta = (rows_a * tk / cn + rows_b * tk / cm) * in_bytes + scale_bytes
    t_load = bytes_cta * busy / costmod.L2_BYTES_PER_S * 1e6
    t_mma = terms["mma_us_per_kblock"] / float(costmod.clock_boost(busy, active_all))
    t_pipe = terms["pipeline_us_per_kblock"]
    t_k = max(t_mma, t_load, t_pipe) + costmod.KBLOCK_OVERHEAD_US + terms["cluster_sync_us_per_kblock"]
    # the epilogue's store share grows with the CTAs storing at once (cost_arrays: x busy / STORE rate)
    t_epi = terms["epilogue_us_per_tile"] * busy / max(terms["active_ctas"], 1.0)
    kblocks = math.ceil(problem.k / tk)
    lockstep = CLUSTER_SKEW_PER_EPILOGUE * t_epi if cm * cn > 1 else 0.0
    per_tile = kblocks * t_k + t_epi + costmod.TILE_SWITCH_US + lockstep
    waves = math.ceil(tiles / active_all) if tiles else 0
    switches = descriptor_switches(per_group, active_all)
    t_desc = switches * DESCRIPTOR_UPDATE_US
    t_main = waves * per_tile + (costmod.TMA_LATENCY_US + t_k if tiles else 0.0) + t_desc
    # HBM: the compulsory bytes (each used expert's W once, X and D once) and the waves' footprints
    used = int(np.count_nonzero(sizes))
    rows_total = int(sizes.sum())
    compulsory = (used * problem.n * problem.k * in_bytes + rows_total * problem.k * in_bytes
                  + rows_total * problem.n * 2)
    t_hbm = compulsory / hbm * 1e6
    t_dram = wave_bytes(problem, config, tiles_m, tiles_n, active_all, sizes) / hbm * 1e6
    p = costmod.MEMORY_OVERLAP_NORM
    total = (t_main ** p + max(t_hbm, t_dram) ** p) ** (1.0 / p) + costmod.LAUNCH_US + GROUP_PREP_US
    floor, floor_parts = floor_us(problem, kind, sizes)
    flops = 2.0 * rows_total * problem.n * problem.k
    breakdown = {
        "tiles": tiles, "waves": waves, "active_ctas": active_all, "busy_ctas": busy, "kblocks": kblocks,
        "groups_used": used, "mma_us_per_kblock": round(t_mma, 4), "load_us_per_kblock": round(t_load, 4),
        "pipeline_us_per_kblock": round(t_pipe, 4), "kblock_us": round(t_k, 4),
        "epilogue_us_per_tile": round(t_epi, 4), "cluster_lockstep_us_per_tile": round(lockstep, 4),
        "per_tile_us": round(per_tile, 4),
        "instruction_efficiency": round(terms["instruction_efficiency"], 4),
        "accumulator_registers": terms["accumulator_registers"],
        "partial_tile_waste": round(1.0 - useful / computed, 4) if computed else 0.0,
        "descriptor_switches": switches, "descriptor_us": round(t_desc, 4),
        "mainloop_us": round(t_main, 4), "dram_us": round(t_dram, 4), "hbm_floor_us": round(t_hbm, 4),
        "stages": int(stages), "predicted_us": round(total, 3),
        "predicted_tflops": round(flops / (total * 1e-6) / 1e12, 1) if total else 0.0,
        "floor_us": round(floor, 4), "fraction_of_floor": round(floor / total, 4) if total else 0.0,
        **floor_parts,
    }
    return total, breakdown
