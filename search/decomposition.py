"""The launch plan of a stream-K kernel, chosen per problem by the cost model.

A stream-K kernel (tile_scheduler "stream_k") is one compiled kernel with several run-time
decompositions of the k-loop (cutegen/launch_plan.py): whole tiles (data-parallel), every tile's
k-loop in s pieces summed through the workspace (split-K: ``Loop(k) = Reduce(Loop(k/s), s)``), or the
k-blocks of all tiles spread evenly over the CTAs (stream-K). They compute the same D; the plan with
the smallest predicted time wins. Split counts are bounded by the legality rules of
``cutegen.legality.stream_k`` (at most the k-blocks of one tile).
"""
from __future__ import annotations

import numpy as np

from . import cost as costmod

SPLIT_COUNTS = (2, 3, 4, 6, 8, 12, 16)
# (decomposition code, splits) of every plan the search weighs; data-parallel first so that a tie
# keeps the plan with no workspace
PLANS = ((costmod.DECOMP_DATA_PARALLEL, 1), (costmod.DECOMP_STREAM_K, 1)) + tuple(
    (costmod.DECOMP_SPLIT_K, s) for s in SPLIT_COUNTS)


def min_plan_cost(problem, tm, tn, tk, cm, cn, sched, epi, scheduler, stages, raster=0, swizzle=1):
    """(cost, plan index into PLANS) per row: the cheapest plan of each stream-K row; persistent rows
    cost as ``cost_arrays`` prices them (plan index 0).

    One ``cost_arrays`` call: the plans broadcast as a leading axis, so only the plan-dependent terms
    are computed once per plan (the search ranks ~10^5 rows in well under a second)."""
    decomp = np.array([d for d, _ in PLANS])[:, None]
    splits = np.array([s for _, s in PLANS])[:, None]
    total, _ = costmod.cost_arrays(problem, tm, tn, tk, cm, cn, sched, epi, scheduler, stages, raster, swizzle,
                                   decomposition=decomp, splits=splits)
    k_tiles = np.ceil(problem.k / np.asarray(tk, dtype=np.float64))
    # SM90-SPLITK-SPLITS-KTILES: no more pieces than k-blocks; persistent rows see one plan only
    usable = (splits <= k_tiles) & ((np.asarray(scheduler) == 1) | (np.arange(len(PLANS))[:, None] == 0))
    total = np.where(usable, np.broadcast_to(total, usable.shape), np.inf)
    best_i = np.argmin(total, axis=0)          # first minimum: data-parallel wins a tie
    return np.take_along_axis(total, best_i[None, :], axis=0)[0], best_i


def plan_of(index: int):
    from cutegen.launch_plan import DECOMPOSITIONS, LaunchPlan

    decomp, splits = PLANS[int(index)]
    return LaunchPlan(decomposition=DECOMPOSITIONS[decomp], splits=splits)


def best_plan(problem, config, stages: int):
    """(plan, cost, breakdown) of the cheapest legal plan for one stream-K configuration; for a
    persistent configuration the default plan and its cost."""
    from cutegen.launch_plan import LaunchPlan
    from cutegen.legality.stream_k import check_plan

    if config.tile_scheduler != "stream_k":
        cost, bd = costmod.config_cost(problem, config, stages)
        return LaunchPlan(), cost, bd
    options = []
    for i in range(len(PLANS)):
        plan = plan_of(i)
        if check_plan(problem, config, plan)[0]:
            continue
        cost, bd = costmod.config_cost(problem, config, stages, plan)
        options.append((cost, i, plan, bd))
    cost, _, plan, bd = min(options, key=lambda x: x[:2])
    bd = dict(bd)
    bd["plans_considered"] = {p.label(): round(c, 3) for c, _, p, _ in sorted(options, key=lambda x: x[1])}
    return plan, cost, bd
