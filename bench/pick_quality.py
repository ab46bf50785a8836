"""Would the search's first pick have been good? Measured answers without a GPU.

    python bench/pick_quality.py [--db PATH] [--no-seed] [--device KIND] [--family m|model] [--json]

For every problem of the results database with at least 3 measured configurations (validated bench-harness
timings of CUTLASS kernels, the samples of cutegen.search.learned), each model picks the configuration it
predicts fastest among those measured, and the pick's measured time is compared with the measured best
and with cuBLAS's time measured in the same runs:

  prior    the analytic model alone (search/cost.py), as the search ranks without data
  learned  the prior with the learned correction, fitted on every device kind's samples except the
           problem's whole family (all problems of its M, or all layers of its model), so it never saw
           the shape it picks for

The search's own pick can be a configuration nobody measured; this scores the ranking only where the
truth is known. "x best" is the pick's time over the fastest measured (1.0 = it picked the fastest);
"x cuBLAS" is cuBLAS's time over the pick's (above 1.0 = faster than cuBLAS); "x nvMMH" is the time of
nvMatmulHeuristics' top-1 (its legal pick, timed by `cutegen tune` in the same run) over the pick's.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MIN_CANDIDATES = 3


def family_key(family: str, models: dict):
    if family == "m":
        return lambda p: f"m={p.m}"
    return lambda p: models.get((p.n, p.k), "other")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db")
    ap.add_argument("--no-seed", action="store_true")
    ap.add_argument("--device", help="one device kind (default: every kind with data)")
    ap.add_argument("--family", choices=("m", "model"), default="m", help="what is held out of the learned fit")
    ap.add_argument("--models", default=str(ROOT / "bench" / "llm.toml"))
    ap.add_argument("--baseline", help="another search/cost.py: its picks too, as \"baseline\" (the prior before a change)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from cutegen.results import ResultsDB
    from cutegen.search.calibration import baseline_module, baseline_predictions, llm_models
    from cutegen.search.learned.model import Correction
    from cutegen.search.learned.samples import from_measurements

    db = ResultsDB(args.db, seed=None if args.no_seed else True, readonly=True)
    ms = db.measurements()
    everything = from_measurements(ms)
    key = family_key(args.family, llm_models(args.models) if args.family == "model" else {})
    cublas: dict = defaultdict(list)
    for m in ms:
        if m.cublas_us and m.is_benchmark:
            cublas[(m.device_kind, m.problem)].append(m.cublas_us)
    nvmmh: dict = defaultdict(list)      # nvMMH's pick as `cutegen tune` timed it (source ".../nvmmh")
    for m in ms:
        if m.is_benchmark and m.validated and m.source.endswith("/nvmmh"):
            nvmmh[(m.device_kind, m.problem)].append(m.median_us)
    base = baseline_module(args.baseline) if args.baseline else None
    models = ("baseline", "prior", "learned") if base else ("prior", "learned")
    report = {}
    kinds = [args.device] if args.device else sorted({s.device_kind for s in everything})
    for kind in kinds:
        cells: dict = defaultdict(lambda: defaultdict(list))
        for s in everything:
            if s.device_kind == kind and s.harness == "bench":
                # a kernel under another launch plan is another alternative (its time and its price differ)
                cells[s.stated_problem][(s.problem != s.stated_problem, s.config.to_json(),
                                         s.plan.label() if s.plan else "")].append(s)
        problems = {p: c for p, c in cells.items() if len(c) >= MIN_CANDIDATES}
        fits = {}
        for fam in sorted({key(p) for p in problems}):
            train = [s for s in everything if key(s.stated_problem) != fam]
            fits[fam] = Correction().fit(train)
        rows = []
        for p, configs in sorted(problems.items(), key=lambda kv: (kv[0].dtype_a, kv[0].n, kv[0].k, kv[0].m)):
            reps = [v[0] for v in configs.values()]
            meas = np.array([np.median([s.measured_us for s in v]) for v in configs.values()])
            prior = np.array([s.prior_us for s in reps])
            corr, _, _ = fits[key(p)].predict(reps)
            learned = prior * np.exp(corr)
            cb = float(np.median(cublas[(kind, p)])) if cublas.get((kind, p)) else None
            nv = float(np.median(nvmmh[(kind, p)])) if nvmmh.get((kind, p)) else None
            row = {"problem": f"{p.m}x{p.n}x{p.k} {p.dtype_a} {p.layout_a[0]}{p.layout_b[0]}", "candidates": len(meas),
                   "best_us": float(meas.min()), "cublas_us": cb, "nvmmh_us": nv}
            preds = {"prior": prior, "learned": learned}
            if base:
                preds["baseline"] = np.array(baseline_predictions(
                    [(s.problem, s.config, s.stages, s.measured_us, "", kind, s.stated_problem, s.plan) for s in reps],
                    base))
            for name, pred in preds.items():
                t = float(meas[int(np.argmin(pred))])
                row[name] = {"us": t, "x_best": t / float(meas.min()), "x_cublas": (cb / t) if cb else None,
                             "x_nvmmh": (nv / t) if nv else None}
            row["best_x_cublas"] = cb / float(meas.min()) if cb else None
            rows.append(row)
        summary = {}
        for name in models:
            xb = [r[name]["x_best"] for r in rows]
            xc = [r[name]["x_cublas"] for r in rows if r[name]["x_cublas"]]
            xn = [r[name]["x_nvmmh"] for r in rows if r[name]["x_nvmmh"]]
            summary[name] = {"x_nvmmh_geomean": float(np.exp(np.mean(np.log(xn)))) if xn else None, "with_nvmmh": len(xn),
                             "x_best_geomean": float(np.exp(np.mean(np.log(xb)))) if xb else None,
                             "x_best_worst": max(xb) if xb else None,
                             "picked_best": sum(x <= 1.0 + 1e-9 for x in xb),
                             "x_cublas_geomean": float(np.exp(np.mean(np.log(xc)))) if xc else None,
                             "under_0.9_cublas": sum(x < 0.9 for x in xc), "with_cublas": len(xc)}
        xc = [r["best_x_cublas"] for r in rows if r["best_x_cublas"]]
        summary["best_measured"] = {"x_cublas_geomean": float(np.exp(np.mean(np.log(xc)))) if xc else None,
                                    "under_0.9_cublas": sum(x < 0.9 for x in xc)}
        report[kind] = {"family_held_out": args.family, "problems": len(rows), "rows": rows, "summary": summary}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0
    f = lambda v, d=3: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"  # noqa: E731
    for kind, r in report.items():
        print(f"\n{kind}: {r['problems']} problems with >= {MIN_CANDIDATES} measured configurations; "
              f"learned fitted without the problem's {r['family_held_out']} family")
        print(f"  {'problem':28s} {'n':>3s} | {'x best':>15s} | {'x cuBLAS':>22s}")
        print(f"  {'':28s} {'':3s} | {'prior':>7s} {'learned':>7s} | {'prior':>7s} {'learned':>7s} {'best':>6s}")
        for row in r["rows"]:
            P, L = row["prior"], row["learned"]
            print(f"  {row['problem']:28s} {row['candidates']:3d} | {f(P['x_best']):>7s} {f(L['x_best']):>7s} | "
                  f"{f(P['x_cublas']):>7s} {f(L['x_cublas']):>7s} {f(row['best_x_cublas']):>6s}")
        s = r["summary"]
        for name in models:
            x = s[name]
            print(f"  {name:8s}: x best geomean {f(x['x_best_geomean'])} (worst {f(x['x_best_worst'], 2)}, picked the "
                  f"fastest {x['picked_best']}/{r['problems']}); x cuBLAS geomean {f(x['x_cublas_geomean'])}, "
                  f"{x['under_0.9_cublas']}/{x['with_cublas']} under 0.9x; x nvMMH geomean {f(x['x_nvmmh_geomean'])} "
                  f"over {x['with_nvmmh']}")
        print(f"  best measured: x cuBLAS geomean {f(s['best_measured']['x_cublas_geomean'])}, "
              f"{s['best_measured']['under_0.9_cublas']} under 0.9x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
