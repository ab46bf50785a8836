"""Held-out quality of the learned cost model, per device kind, next to the analytic prior alone.

    python bench/model_quality.py [--db PATH] [--no-seed] [--device KIND] [--json]

Reads the results database (default: the user's database merged with bench/results/seed.sqlite), turns
every validated CUTLASS benchmark into a sample (cutegen.search.learned.samples) and cross-validates the
correction by whole shape families (cutegen.search.learned.quality): all problems of one M, one shape,
one model's layers (bench/llm.toml: llama8b, llama70b, the rest), one input type, one suite (bench/suite.toml,
bench/coverage.toml, the rest). The model never sees the family it is scored on.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def suites() -> dict:
    from cutegen.problem import GemmProblem

    out = {}
    for name in ("suite", "coverage"):
        path = ROOT / "bench" / f"{name}.toml"
        if path.exists():
            for p in tomllib.loads(path.read_text()).get("problem", []):
                fields = {k: v for k, v in p.items() if k not in ("name", "note", "model", "tags")}
                try:
                    out[GemmProblem.from_dict(fields)] = name
                except Exception:  # noqa: BLE001 - a suite entry this cutegen cannot parse is no family
                    pass
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db")
    ap.add_argument("--no-seed", action="store_true")
    ap.add_argument("--device", help="one device kind (default: every kind with data)")
    ap.add_argument("--groupings", default="m,model,shape,dtype,suite")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scored", choices=("all", "stream_k"), default="all",
                    help="which held-out samples are scored (stream_k: the stream-K kernels'; training is unchanged)")
    args = ap.parse_args(argv)
    scored = None if args.scored == "all" else (lambda s: s.config.tile_scheduler == "stream_k")

    from cutegen.results import ResultsDB
    from cutegen.search.learned.quality import cross_validate, transfer
    from cutegen.search.learned.samples import from_measurements

    db = ResultsDB(args.db, seed=None if args.no_seed else True)
    ms = db.measurements(device_kind=args.device)
    kinds = sorted({m.device_kind for m in ms})
    from cutegen.search.calibration import llm_models

    ctx = {"suites": suites(), "models": llm_models(str(ROOT / "bench" / "llm.toml"))}
    report, by_kind = {}, {}
    for kind in kinds:
        samples = by_kind[kind] = from_measurements([m for m in ms if m.device_kind == kind], kind)
        if not samples:
            continue
        rows = {}
        others = [s for m_kind in kinds if m_kind != kind
                  for s in from_measurements([m for m in ms if m.device_kind == m_kind], m_kind)]
        for g in args.groupings.split(","):
            t0 = time.perf_counter()
            rows[g] = cross_validate(samples, g, ctx, scored=scored)
            rows[g]["seconds"] = round(time.perf_counter() - t0, 1)
            if others:
                # as the search uses it: this kind's data plus every other kind's, the family held out of all
                rows[g + "+other"] = cross_validate(samples, g, ctx, others=others, scored=scored)
        report[kind] = {"samples": len(samples), "bench_samples": sum(s.harness == "bench" for s in samples),
                        "problems": len({s.stated_problem for s in samples}), "cv": rows}
    for kind in report:
        # the other kinds' data, as if this kind had none: what a fresh device kind would get
        for other in report:
            if other != kind:
                # the samples of ``other`` re-costed with this kind's prior, so the correction is what it learned
                from cutegen.search.learned.samples import sample
                train = [sample(s.problem, s.config, s.stages, kind, s.measured_us, s.harness, s.source, plan=s.plan)
                         for s in by_kind[other]]
                test = [s for s in by_kind[kind] if scored is None or scored(s)]
                report[kind].setdefault("transfer", {})[other] = transfer(train, test)
    if args.json:
        json.dump(report, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    f = lambda v, d=3: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    for kind, r in report.items():
        print(f"\n{kind}: {r['samples']} samples ({r['bench_samples']} bench harness), {r['problems']} problems")
        print(f"  {'held out':12s} {'folds':>5s} {'n':>4s} | {'|ln err|':>17s} | {'spearman':>13s} | "
              f"{'regret geomean':>15s} | {'regret worst':>13s} | in sigma")
        print(f"  {'':12s} {'':5s} {'':4s} | {'learned':>8s} {'prior':>8s} | {'learned':>6s} {'prior':>6s} | "
              f"{'learned':>7s} {'prior':>7s} | {'learned':>6s} {'prior':>6s}")
        for g, row in r["cv"].items():
            L, P = row["learned"], row["prior"]
            print(f"  {g:12s} {row['folds']:5d} {L['samples']:4d} | {f(L['log_error']):>8s} {f(P['log_error']):>8s} | "
                  f"{f(L['spearman'], 2):>6s} {f(P['spearman'], 2):>6s} | {f(L['regret_geomean']):>7s} "
                  f"{f(P['regret_geomean']):>7s} | {f(L['regret_worst'], 2):>6s} {f(P['regret_worst'], 2):>6s} | "
                  f"{f(L.get('within_sigma'), 2):>8s}"
                  + (f"   (no training data without: {', '.join(row['skipped'])})" if row["skipped"] else ""))
        for other, row in r.get("transfer", {}).items():
            L, P = row["learned"], row["prior"]
            print(f"  {'from ' + other:18s} {L['samples']:4d} | {f(L['log_error']):>8s} {f(P['log_error']):>8s} | "
                  f"{f(L['spearman'], 2):>6s} {f(P['spearman'], 2):>6s} | {f(L['regret_geomean']):>7s} "
                  f"{f(P['regret_geomean']):>7s} | {f(L['regret_worst'], 2):>6s} {f(P['regret_worst'], 2):>6s}"
                  f"   (fitted on {other} only)")
    if not report:
        print("no usable measurements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
