"""The launch plan of a stream-K kernel, chosen per problem by the cost model.

A stream-K kernel (tile_scheduler "stream_k") is one compiled kernel with several run-time
decompositions of the k-loop (cutegen/launch_plan.py): whole tiles (data-parallel), every tile's
k-loop in s pieces summed through the workspace (split-K: ``Loop(k) = Reduce(Loop(k/s), s)``), or the
k-blocks of all tiles spread evenly over the CTAs (stream-K). They compute the same D; the plan with
the smallest predicted time wins. Split counts are bounded by the legality rules of
``cutegen.legality.stream_k`` (at most the k-blocks of one tile).

In the e-graph (``PLAN_SORTS`` / ``PLAN_RULES``) a launch is ``Run(kernel, plan)``; the rewrites

    Run(x, DataParallel) = Run(x, StreamKPlan)          the k-blocks respread over the CTAs
    Run(x, DataParallel) = Run(x, SplitK(s))            the k-loop in s pieces plus a reduction

fire for every plan the rules allow (``PlanFact`` facts carry the legal plans and their predicted
cost into egglog's cost table of ``Run``), and egglog's extractor picks the cheapest launch of the
e-class (``extract_plan``). Ranking the whole space uses the same costs vectorised (``min_plan_cost``).
"""
from __future__ import annotations

import numpy as np

from . import cost as costmod

SPLIT_COUNTS = (2, 3, 4, 6, 8, 12, 16)
# (decomposition code, splits) of every plan the search weighs; data-parallel first so that a tie
# keeps the plan with no workspace
PLANS = ((costmod.DECOMP_DATA_PARALLEL, 1), (costmod.DECOMP_STREAM_K, 1)) + tuple(
    (costmod.DECOMP_SPLIT_K, s) for s in SPLIT_COUNTS)


def min_plan_cost(problem, tm, tn, tk, cm, cn, sched, epi, scheduler, stages, raster=0, swizzle=1, device=None,
                  instr_n=None):
    """(cost, plan index into PLANS) per row: the cheapest plan of each stream-K row; persistent rows
    cost as ``cost_arrays`` prices them (plan index 0).

    The plans of the stream-K rows broadcast as a leading axis of one ``cost_arrays`` call, so the
    plan-independent terms are computed once (the search ranks ~10^5 rows in a fraction of a second)."""
    n = len(np.atleast_1d(np.asarray(tm)))
    cols = [np.broadcast_to(np.asarray(x), (n,)) for x in (tm, tn, tk, cm, cn, sched, epi, scheduler, stages,
                                                             raster, swizzle)]
    instr = None if instr_n is None else np.broadcast_to(np.asarray(instr_n), (n,))
    best, _ = costmod.cost_arrays(problem, *cols, device=device, decomposition=costmod.DECOMP_DATA_PARALLEL,
                                  instr_n=instr)
    best = np.array(best, dtype=np.float64)
    best_i = np.zeros(n, dtype=np.int64)
    # only cooperative stream-K rows: the other schedules cannot take the stream-K scheduler
    # (SM90-STREAMK-COOPERATIVE judges them illegal), so pricing their plans would be wasted work
    # (a schedule code also carries the mainloop's load: code % len(SCHEDULES) is the schedule)
    sk = np.flatnonzero((cols[7] == 1) & (cols[5] % len(costmod.SCHEDULES) == costmod.SCHEDULES.index("cooperative")))
    if sk.size:
        sub = [c[sk] for c in cols]
        decomp = np.array([d for d, _ in PLANS])[:, None]
        splits = np.array([s for _, s in PLANS])[:, None]
        total, _ = costmod.cost_arrays(problem, *sub, device=device, decomposition=decomp, splits=splits,
                                       instr_n=None if instr is None else instr[sk])
        k_tiles = np.ceil(problem.k / sub[2].astype(np.float64))
        # SM90-SPLITK-SPLITS-KTILES: no more pieces than k-blocks. Data-parallel is left out: a stream-K
        # kernel running whole tiles is its persistent twin (same tile, cluster and policy, always in the
        # space) plus the stream-K scheduler's machinery, so it is searched for the plans that split.
        usable = (splits <= k_tiles) & (decomp != costmod.DECOMP_DATA_PARALLEL)
        total = np.where(usable, np.broadcast_to(total, (len(PLANS), sk.size)), np.inf)
        i = np.argmin(total, axis=0)
        best[sk] = np.take_along_axis(total, i[None, :], axis=0)[0]
        best_i[sk] = i
    return best, best_i


def plan_of(index: int):
    from cutegen.launch_plan import DECOMPOSITIONS, LaunchPlan

    decomp, splits = PLANS[int(index)]
    return LaunchPlan(decomposition=DECOMPOSITIONS[decomp], splits=splits)


def best_plan(problem, config, stages: int, device=None):
    """(plan, cost, breakdown) of the cheapest legal plan for one stream-K configuration, without the
    e-graph (``cutegen check``-style callers); for a persistent configuration the default plan."""
    from cutegen.launch_plan import LaunchPlan

    if config.tile_scheduler != "stream_k":
        cost, bd = costmod.config_cost(problem, config, stages, device=device)
        return LaunchPlan(), cost, bd
    options = plan_options(problem, config, stages, device)
    _, plan = min(options, key=lambda x: x[0])      # first minimum: data-parallel wins a tie
    cost, bd = costmod.config_cost(problem, config, stages, plan, device=device)
    bd["plans_considered"] = {p.label(): round(c, 3) for c, p in options}
    return plan, cost, bd


# --- the plan terms of the e-graph --------------------------------------------------------------------

PLAN_SORTS = """
(datatype Plan (DataParallel) (StreamKPlan) (SplitK i64))
(datatype Launch (Run Kernel Plan))
(datatype Launches (LNil) (LCons Launch Launches))
;; tile m n k, cluster cm cn, policy s e sc, raster r, swizzle w, decomposition code, splits, cost units
(relation PlanFact (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(function cost_table_Run (Kernel Plan) i64 :merge (min old new))
"""

PLAN_RULES = """
(ruleset plans)
(rule ((PlanFact m n k cm cn s e sc r w 1 1 ps) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= x (K t c (Pol s e sc 0) r w)))
      ((set (cost_table_Run x (DataParallel)) ps)) :ruleset plans)
;; without a DataParallel fact (the search leaves whole tiles to the persistent twin) the root launch
;; is priced out, so extraction takes one of the plans that split
(rule ((PlanFact m n k cm cn s e sc r w d sp ps) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= x (K t c (Pol s e sc 0) r w)))
      ((set (cost_table_Run x (DataParallel)) 1000000000000000)) :ruleset plans)
(rule ((PlanFact m n k cm cn s e sc r w 3 1 ps) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= x (K t c (Pol s e sc 0) r w)))
      ((union (Run x (DataParallel)) (Run x (StreamKPlan))) (set (cost_table_Run x (StreamKPlan)) ps)) :ruleset plans)
(rule ((PlanFact m n k cm cn s e sc r w 2 sp ps) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= x (K t c (Pol s e sc 0) r w)))
      ((union (Run x (DataParallel)) (Run x (SplitK sp))) (set (cost_table_Run x (SplitK sp)) ps)) :ruleset plans)
"""


def plan_options(problem, config, stages: int, device=None, data_parallel: bool = True) -> list:
    """(cost, plan) of every plan the rules allow for one stream-K configuration (one vectorised call);
    ``data_parallel=False`` leaves out whole tiles, as the search does (``min_plan_cost``)."""
    from cutegen.legality.stream_k import check_plan

    plans = [plan_of(i) for i in range(len(PLANS))]
    keep = [i for i, p in enumerate(plans) if not check_plan(problem, config, p)[0]
            and (data_parallel or p.decomposition != "data_parallel")]
    t, c = config.tile_shape, config.cluster_shape
    s, e, sc = costmod.config_codes(config)
    total, _ = costmod.cost_arrays(problem, [t[0]], [t[1]], [t[2]], [c[0]], [c[1]], [s], [e], [sc], [stages],
                                   [costmod.RASTERS.index(config.raster_order)], [config.raster_swizzle],
                                   device=device, decomposition=np.array([PLANS[i][0] for i in keep])[:, None],
                                   splits=np.array([PLANS[i][1] for i in keep])[:, None],
                                   instr_n=[costmod.instruction_n_of(config)])
    return [(float(total[j, 0]), plans[i]) for j, i in enumerate(keep)]


def extract_plans(egg, problem, picks: list, device=None) -> dict:
    """The cheapest launch of each picked stream-K kernel, by egglog's extractor over its Run e-class.

    ``picks``: (key, config, stages) with key = (tile, cluster, policy, raster, swizzle). Returns
    key -> (plan, cost, breakdown). One extraction for all picks: a list term whose elements are the
    picks' Run e-classes (extraction chooses the cheapest term of each element independently)."""
    from cutegen.launch_plan import LaunchPlan

    from .schedule_rewrites import cost_units, units_per_us

    rows, options = [], {}
    for key, config, stages in picks:
        options[key] = {p: c for c, p in plan_options(problem, config, stages, device, data_parallel=False)}
    per_us = units_per_us(c for opts in options.values() for c in opts.values())
    for key, _, _ in picks:
        for p, c in options[key].items():
            code, splits, _ = p.codes()
            rows.append((*key[0], *key[1], *key[2], key[3], key[4], code, splits, cost_units(c, per_us)))
    if not rows:
        return {}
    egg.input("PlanFact", sorted(rows))
    egg.run("(run-schedule (saturate (run plans)))")
    runs = []
    for key, _, _ in picks:
        (m, n, k), (cm, cn), (s, e, sc) = key[0], key[1], key[2]
        runs.append(f"(Run (K (CtaTile {m} {n} {k}) (Cl {cm} {cn}) (Pol {s} {e} {sc} 0) {key[3]} {key[4]}) "
                    "(DataParallel))")
    listing = "(LNil)"
    for r in reversed(runs):
        listing = f"(LCons {r} {listing})"
    text = egg.extract(listing)
    chosen = [_plan_from_term(t, LaunchPlan) for t in _run_terms(text)]
    out = {}
    for (key, config, stages), plan in zip(picks, chosen):
        cost, bd = costmod.config_cost(problem, config, stages, plan, device=device)
        bd["plans_considered"] = {p.label(): round(c, 3) for p, c in options[key].items()}
        out[key] = (plan, cost, bd)
    return out


def _run_terms(text: str) -> list[str]:
    """The ``(Run ...)`` subterms of an extracted list, in order (each ends with its plan term)."""
    out, i = [], 0
    while True:
        i = text.find("(Run ", i)
        if i < 0:
            return out
        depth, j = 0, i
        while True:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        out.append(text[i:j])
        i = j


def _plan_from_term(term: str, LaunchPlan):  # noqa: N803 - the class, passed in
    tail = term[:-1].rsplit("(", 1)[1].rstrip(") ")
    if tail == "DataParallel":
        return LaunchPlan("data_parallel")
    if tail == "StreamKPlan":
        return LaunchPlan("stream_k")
    name, splits = tail.split()
    assert name == "SplitK", term
    return LaunchPlan("split_k", int(splits))
