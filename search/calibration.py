"""Compare the cost model with measured kernel times, and fit its knobs to them.

Records are JSON lines with ``problem``, ``config`` and a measured time (``time_ms``, or ``us``),
as the configuration oracle (``tests/data/config_oracle_*.jsonl``) and the GPU bench write them.
Only records that ran correctly and that the search would consider legal (no violations, no
warnings) are used: the search never ranks the others.

    /work/venv/bin/python -m cutegen.search.calibration FILE.jsonl [--fit]

prints the rank agreement (Spearman) and the median |log(predicted / measured)|, and with
``--fit`` a coordinate-descent fit of the knobs in ``cutegen.search.cost`` (printed, not written:
a person decides whether the fitted constants go into cost.py). A ``.json`` file is read as a
``bench/calibrate.py run`` result (each problem's measured top-k candidates and the CollectiveBuilder
baseline); several files may be given and are scored together.

``score`` reports, besides the Spearman over all records, per problem (records of one shape are the
alternatives of one choice): how often the model's cheapest measured kernel is the measured fastest
within PICK_TOLERANCE, the geomean slowdown of its pick over the fastest, and the mean Spearman.

H200 2026-11-22 figures (63 oracle records, 98 bench records):
  committed model          oracle Spearman 0.735, picks 6/7; bench Spearman 0.953, picks 5/8,
                           pick regret 1.198 (it preferred no-smem pingpong for 8192x3072x1024)
  calibrated model         oracle Spearman 0.809, picks 6/7; bench Spearman 0.919, picks 7/8,
                           pick regret 1.026 (the miss is cube4000_nt: one config at 175-205 us by raster)
  held out (fit the knobs on one data set, starting from the committed constants, score the other;
  the structural changes -- unhidden no-smem epilogue, saturating cluster wait, swizzle padding -- in):
    oracle -> bench        Spearman 0.960 -> 0.903, picks 7/8 -> 7/8, log error 0.070 -> 0.084
    bench -> oracle        Spearman 0.758 -> 0.769, picks 6/7 -> 5/7, log error 0.19 -> 0.27
  i.e. the knobs fitted on one harness do not carry to the other; the gains come from the structure.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from . import cost as costmod

# The knobs a fit may move. The launch cost and the TMA latency stay physical figures (a fit on
# differently-timed data sets drives them to sub-microsecond values no kernel launch reaches).
KNOBS = ("L2_BYTES_PER_S", "KBLOCK_OVERHEAD_US", "CLUSTER_SYNC_US", "TILE_SWITCH_US",
         "STORE_BYTES_PER_S", "NOSMEM_EPILOGUE_FACTOR", "INSTRUCTION_N_HALF", "PINGPONG_EPILOGUE_HIDDEN",
         "HBM_EFFICIENCY", "STREAMK_LINK_US", "CLUSTER_WIDE_WAIT_US", "SYNC_ELEMENT_US")
CAPPED = {"PINGPONG_EPILOGUE_HIDDEN": 1.0, "HBM_EFFICIENCY": 1.0}     # shares: a fit may not pass 1


def load(path: str) -> list[tuple]:
    """(problem, completed config, stages, measured us) for every usable record."""
    from cutegen.config import KernelConfig
    from cutegen.legality import check_config
    from cutegen.problem import GemmProblem

    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("outcome", "correct") != "correct":
                continue
            us = r.get("us") or (r["time_ms"] * 1000.0 if r.get("time_ms") else None)
            if not us:
                continue
            p = GemmProblem.from_dict(r["problem"])
            rep = check_config(p, KernelConfig.from_dict(r["config"]))
            if not rep.legal or rep.warnings or rep.config is None:
                continue
            out.append((p, rep.config, rep.stages, float(us), "oracle:" + _problem_key(p)))
    return out


# The CUTLASS CollectiveBuilder baseline that bench/calibrate.py times next to the search's picks.
BUILDER_CONFIG = {"tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1], "mainloop_schedule": "cooperative",
                  "epilogue_schedule": "tma_warp_specialized_cooperative", "stages": "auto",
                  "tile_scheduler": "persistent"}
# Registers an MMA thread has for its accumulators before ptxas spills (WGMMA-ACCUMULATOR-REGISTERS).
SPILL_REGISTERS = 232


def _problem_key(p) -> str:
    """Records of one problem shape are alternatives for one choice (the oracle's records differ in
    incidental fields such as the bias or the C type)."""
    return f"{p.m}x{p.n}x{p.k}x{p.batch}:{p.dtype_a}:{p.layout_a}{p.layout_b}"


def load_bench(path: str) -> list[tuple]:
    """Records from a ``bench/calibrate.py run`` result: each problem's measured candidates and the
    CollectiveBuilder baseline. FP8 kernels whose doubled (two-level) accumulator reaches the spill
    budget are dropped: they spilled on the GPU, and the legality rule now removes them from the search."""
    from cutegen.config import KernelConfig
    from cutegen.legality import check_config
    from cutegen.problem import GemmProblem

    with open(path) as f:
        entries = json.load(f)
    out = []
    for e in entries:
        p = GemmProblem.from_dict(e["problem"])
        res = e.get("results", {})
        fp8 = p.dtype_a in ("e4m3", "e5m2")
        runs = [(c["config"], res.get(f"rank{c['rank']}")) for c in e["candidates"]]
        runs.append((BUILDER_CONFIG, res.get("cutlass_builder")))
        for cfg, r in runs:
            if not r or r.get("status") != "ok" or not r.get("median_ms"):
                continue
            rep = check_config(p, KernelConfig.from_dict(cfg))
            if rep.config is None or rep.stages is None:
                continue
            _, bd = costmod.config_cost(p, rep.config, rep.stages)
            if fp8 and 2 * bd["accumulator_registers"] >= SPILL_REGISTERS:
                continue
            out.append((p, rep.config, rep.stages, r["median_ms"] * 1000.0, "bench:" + e["name"]))
    return out


PICK_TOLERANCE = 0.05     # run-to-run spread: the oracle repeats one kernel at 32.0-37.4 us, the bench one at 174.6-204.5 us by raster


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def score(records) -> dict:
    """Spearman over all records; within each problem (group), the mean Spearman and whether the
    model's cheapest measured kernel is the measured fastest (within PICK_TOLERANCE)."""
    pred = _costs(records)
    meas = [r[3] for r in records]
    logerr = [abs(math.log(x / y)) for x, y in zip(pred, meas)]
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r[4] if len(r) > 4 else "all", []).append(i)
    within, hits, picks, regret, missed = [], 0, 0, [], []
    for key, idx in groups.items():
        m = np.array([meas[i] for i in idx])
        q = np.array([pred[i] for i in idx])
        if len(idx) < 2 or m.max() / m.min() < 1.0 + PICK_TOLERANCE:
            continue                      # nothing to choose between: every kernel ran the same
        picks += 1
        chosen = m[int(np.argmin(q))]
        hits += chosen <= m.min() * (1.0 + PICK_TOLERANCE)
        if chosen > m.min() * (1.0 + PICK_TOLERANCE):
            missed.append(f"{key}: picked {chosen:.1f} us, fastest {m.min():.1f} us")
        regret.append(chosen / m.min())
        if len(set(q.round(6))) > 1:
            within.append(spearman(q, m))
    return {"records": len(records), "spearman": round(spearman(pred, meas), 4),
            "median_abs_log_error": round(float(np.median(logerr)), 4),
            "mean_abs_log_error": round(float(np.mean(logerr)), 4), "missed": missed,
            "groups_with_a_choice": picks, "fastest_picked": int(hits),
            "geomean_pick_regret": round(float(np.exp(np.mean(np.log(regret)))) if regret else 1.0, 4),
            "mean_within_problem_spearman": round(float(np.mean(within)), 4) if within else None}


def objective(s: dict) -> tuple:
    """What the search needs first: the fastest kernel of each problem picked and the kernels of one
    problem ranked right; then the ranking across problems; the absolute error only breaks ties."""
    picked = s["fastest_picked"] / s["groups_with_a_choice"] if s["groups_with_a_choice"] else 0.0
    within = s["mean_within_problem_spearman"] or 0.0
    return round(picked + within + s["spearman"] - 0.5 * s["median_abs_log_error"], 4)


def fit(records, rounds: int = 3, knobs=KNOBS) -> dict:
    """Coordinate descent on ``knobs`` (multiplicative steps), maximising ``objective``."""
    def objective_now():
        return objective(score(records))

    best = objective_now()
    for _ in range(rounds):
        for name in knobs:
            for factor in (0.25, 0.5, 0.7, 0.85, 1.2, 1.4, 2.0, 4.0):
                old = getattr(costmod, name)
                if name in CAPPED and old * factor > CAPPED[name]:
                    continue
                setattr(costmod, name, old * factor)
                val = objective_now()
                if val > best:
                    best = val
                else:
                    setattr(costmod, name, old)
    return {name: getattr(costmod, name) for name in knobs}


def load_db(db=None, device_kind: str | None = None) -> list[tuple]:
    """Records from the results database (cutegen.results): validated benchmark timings of the bench
    harness (never a validation run's single call, nor the warm-L2 oracle or interleaved DSL comparison,
    whose times sit on another scale), one device kind or all. A swap-AB kernel is costed as the search
    costs it, on the transposed problem; its group is the problem as stated, so both orientations are
    alternatives of one choice. The sixth field is the device kind (the prior's rates for it); the eighth the
    launch plan a stream-K record ran under (None: costed as the stream-K decomposition)."""
    from cutegen.results import ResultsDB

    from .learned.samples import from_measurements

    db = db if db is not None else ResultsDB(seed=True)
    out = []
    for s in from_measurements(db.measurements(device_kind=device_kind, op="gemm"), device_kind):
        if s.harness != "bench":
            continue
        out.append((s.problem, s.config, s.stages, s.measured_us, "db:" + _problem_key(s.stated_problem),
                    s.device_kind, s.stated_problem, s.plan))
    return out


def family_of(grouping: str, models: dict | None = None):
    """Shape families for held-out scores: all problems of one M (``m``: the M the caller asked for,
    before any swap), or all layers of one model (``model``: ``models`` maps a problem's (n, k) to its
    model, e.g. from bench/llm.toml; other problems are the family "other")."""
    if grouping == "m":
        return lambda r: f"m={r[6].m}"
    if grouping == "model":
        return lambda r: (models or {}).get((r[6].n, r[6].k), "other")
    raise ValueError(f"unknown grouping {grouping!r} (m, model)")


def held_out(records, grouping: str, models: dict | None = None, rounds: int = 1, knobs=KNOBS,
             start_from: dict | None = None) -> dict:
    """Fit the knobs on every family but one, score that family with them; the held-out records of all
    folds scored together, next to the constants as they stand on the same records. ``start_from``: values
    each fold's fit starts from instead of the committed ones (far from them, so the held-out figure does not
    inherit constants chosen with the held-out family in view). The module's constants are restored afterwards."""
    key = family_of(grouping, models)
    start = {name: getattr(costmod, name) for name in set(KNOBS) | set(knobs)}
    origin = {**start, **(start_from or {})}
    fams = sorted({key(r) for r in records})
    held, before, after = [], [], []
    try:
        for f in fams:
            train = [r for r in records if key(r) != f]
            test = [r for r in records if key(r) == f]
            if len(train) < 20 or not test:
                continue
            for name, v in origin.items():
                setattr(costmod, name, v)
            fit(train, rounds=rounds, knobs=knobs)
            held += test
            after += _costs(test)
            for name, v in start.items():
                setattr(costmod, name, v)
            before += _costs(test)
    finally:
        for name, v in start.items():
            setattr(costmod, name, v)
    return {"grouping": grouping, "families": len(fams), "before": score_predictions(held, before),
            "after": score_predictions(held, after)}


def _plan(r):
    return r[7] if len(r) > 7 else None


def _cost(r) -> float:
    """The prior's time for record ``r``: its device kind's rates and its launch plan."""
    return costmod.config_cost(r[0], r[1], r[2], plan=_plan(r), device=_rates(r))[0]


def _costs(records) -> list[float]:
    """``_cost`` of every record, one vectorised cost_arrays call per (problem, device kind) instead of one per
    record (the held-out refits score thousands of records per knob step): the same numbers, element for element.
    Staged kernels (their copies priced on the caller's problem) and split-K-reduce kernels (the batched slice GEMM
    and its reduction) go one by one through config_cost."""
    from cutegen.split_k_reduce import slices
    from cutegen.staging import staged_operands

    out: list[float | None] = [None] * len(records)
    groups: dict = {}
    for i, r in enumerate(records):
        if staged_operands(r[1]) or slices(r[1]) > 1:     # their own problem (copies, K slices): config_cost
            out[i] = _cost(r)
        else:
            groups.setdefault((r[0], r[5] if len(r) > 5 else None), []).append(i)
    for (problem, _), idx in groups.items():
        cols = {k: [] for k in ("tm", "tn", "tk", "cm", "cn", "s", "e", "sc", "st", "ra", "sw", "dec", "sp", "in")}
        for i in idx:
            r = records[i]
            c, plan = r[1], _plan(r)
            s_, e_, sc_ = costmod.config_codes(c)
            dec, sp = (costmod.DECOMP_STREAM_K, 1) if plan is None else plan.codes()[:2]
            for k, v in zip(cols, (*c.tile_shape, *c.cluster_shape[:2], s_, e_, sc_, r[2],
                                   costmod.RASTERS.index(c.raster_order), c.raster_swizzle, dec, sp,
                                   costmod.instruction_n_of(c))):
                cols[k].append(v)
        total, _ = costmod.cost_arrays(problem, cols["tm"], cols["tn"], cols["tk"], cols["cm"], cols["cn"], cols["s"],
                                       cols["e"], cols["sc"], cols["st"], cols["ra"], cols["sw"],
                                       device=_rates(records[idx[0]]), decomposition=cols["dec"], splits=cols["sp"],
                                       instr_n=cols["in"])     # the instruction it ran (config_cost's)
        for i, t in zip(idx, np.asarray(total).reshape(-1)):
            out[i] = float(t)
    return out  # type: ignore[return-value]


def _rates(r):
    from .learned.device import rates

    return rates(r[5]) if len(r) > 5 else None


def score_predictions(records, pred) -> dict:
    """Mean |ln(pred / measured)|, mean within-problem Spearman (>= 3 configurations) and the geomean
    top-1 regret among the measured configurations of each problem (>= 2), for given predictions."""
    meas = np.array([r[3] for r in records])
    pred = np.asarray(pred, dtype=np.float64)
    groups: dict = {}
    for i, r in enumerate(records):
        # one alternative: a configuration in one orientation under one launch plan
        alt = r[1].to_json() + str(r[0] != r[6] if len(r) > 6 else "") + (_plan(r).label() if _plan(r) else "")
        groups.setdefault(r[4], {}).setdefault(alt, []).append(i)
    rhos, regrets = [], []
    for configs in groups.values():
        m = np.array([np.median(meas[v]) for v in configs.values()])
        q = np.array([np.median(pred[v]) for v in configs.values()])
        if len(m) >= 3 and len(set(q.round(6))) > 1 and len(set(m)) > 1:
            rhos.append(spearman(q, m))
        if len(m) >= 2:
            regrets.append(m[int(np.argmin(q))] / m.min())
    return {"records": len(records), "problems": len(groups),
            "mean_abs_log_error": round(float(np.mean(np.abs(np.log(pred / meas)))), 4) if len(records) else None,
            "spearman": round(float(np.mean(rhos)), 3) if rhos else None,
            "regret_geomean": round(float(np.exp(np.mean(np.log(regrets)))), 4) if regrets else None,
            "regret_worst": round(float(max(regrets)), 3) if regrets else None}


def baseline_module(path: str):
    """Another version of search/cost.py (e.g. ``git show main~3:search/cost.py > old.py``), loaded as its own
    module, so the same records can be scored by the model before a change and after it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cutegen_baseline_cost", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def baseline_predictions(records, mod) -> list[float]:
    """``mod``'s predictions for ``records``: on the kinds its constants describe (h100-sxm and h200, which
    the models before this one costed as their own) with no device rates, on any other kind with its SM count,
    brief bandwidth and peak."""
    from cutegen.results.device import KINDS

    out = []
    for r in records:
        kind = r[5] if len(r) > 5 else None
        k = KINDS.get(kind or "")
        dev = None if k is None or kind in ("h100-sxm", "h200") else mod.Rates(k.sm_count, k.hbm_gbps * 1e9,
                                                                                 k.dense_bf16_tflops / 989.4)
        # a plan only where the record has one: a baseline from before launch plans takes none
        out.append(mod.config_cost(r[0], r[1], r[2], device=dev, **({"plan": _plan(r)} if _plan(r) else {}))[0])
    return out


def llm_models(path: str) -> dict:
    """(n, k) -> model name prefix ("llama8b", ...) of a suite file's problems (bench/llm.toml)."""
    import tomllib

    with open(path, "rb") as f:
        suite = tomllib.load(f)
    return {(p["n"], p["k"]): p["name"].split("_")[0] for p in suite.get("problem", [])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*", help="oracle/bench JSON lines, or bench/calibrate.py run .json results")
    ap.add_argument("--db", nargs="?", const="", default=None,
                    help="also read the results database (PATH, or the default merged with the seed)")
    ap.add_argument("--device", help="with --db: one device kind (h100-sxm, h200, ...)")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--knobs", default=",".join(KNOBS), help="comma list of the knobs a fit may move")
    ap.add_argument("--held-out", default="", help="comma list of m,model: fit without each family, score it")
    ap.add_argument("--models", default="bench/llm.toml", help="suite naming each (n, k)'s model, for model")
    ap.add_argument("--start-from", default="", help="NAME=VALUE,...: where each held-out fold's fit starts")
    ap.add_argument("--baseline", help="another search/cost.py to score the same records with (before/after)")
    args = ap.parse_args(argv)
    recs = []
    for path in args.records:
        recs += load_bench(path) if path.endswith(".json") else load(path)
    if args.db is not None:
        from cutegen.results import ResultsDB

        # read-only: scoring never writes, so the committed seed read as --db keeps its bytes (and its schema)
        recs += load_db(ResultsDB(args.db or None, seed=True, readonly=True), args.device)
    if not recs:
        print("no usable records (correct, legal, timed)", file=sys.stderr)
        return 2
    print("model as committed:", json.dumps(score(recs)))
    kinds = sorted({r[5] for r in recs if len(r) > 5})
    for kind in kinds or [None]:
        sub = [r for r in recs if kind is None or (len(r) > 5 and r[5] == kind)]
        now = score_predictions(sub, [_cost(r) for r in sub])
        line = f"{kind or 'all'}: this model {json.dumps(now)}"
        if args.baseline:
            line += f"\n{kind or 'all'}: baseline   {json.dumps(score_predictions(sub, baseline_predictions(sub, baseline_module(args.baseline))))}"
        print(line)
    if args.held_out:
        models = llm_models(args.models) if "model" in args.held_out else None
        for g in args.held_out.split(","):
            origin = {k: float(v) for k, v in (kv.split("=") for kv in args.start_from.split(",") if kv)}
            print(f"held out by {g}:", json.dumps(held_out(recs, g, models, knobs=args.knobs.split(","),
                                                           start_from=origin)))
    if args.fit:
        knobs = fit(recs, knobs=args.knobs.split(","))
        print("fitted knobs:", json.dumps({k: round(v, 6) for k, v in knobs.items()}))
        print("model fitted:   ", json.dumps(score(recs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
