"""The tuning curve from the results database: best of the search's first k, for k = 1, 2, 4, 8, 16.

    python bench/tuning_curve.py [--db PATH] [--device-kind h100-sxm] [--suite bench/llm.toml] [--json OUT]
                                 [--plot OUT.png]

Reads every ranked candidate the database holds (``cutegen tune`` runs and the calibration files it
imported), groups them by run, and prints per device kind how far best-of-k is from the best measured
and from cuBLAS (``cutegen.tuning.curve``). ``--suite`` keeps only that suite's problems. The plot
needs matplotlib (present on the GPU machine with torch; optional here).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tree, when not installed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", help="results database (default: $CUTEGEN_RESULTS_DB or the user cache, plus the seed)")
    p.add_argument("--no-seed", action="store_true", help="leave the repository's seed database out")
    p.add_argument("--device-kind", help="only this kind (default: every kind, each its own curve)")
    p.add_argument("--suite", help="only the problems of this suite file")
    p.add_argument("--ks", default="1,2,4,8,16", help="values of k [1,2,4,8,16]")
    p.add_argument("--json", metavar="OUT", help="also write the curve as JSON")
    p.add_argument("--plot", metavar="PNG", help="also plot it (matplotlib)")
    args = p.parse_args(argv)
    from cutegen.results import ResultsDB
    from cutegen.tuning.curve import curve, format_curve, runs

    ms = ResultsDB(args.db, seed=None if args.no_seed else True).measurements(device_kind=args.device_kind)
    if args.suite:
        from cutegen.suites import load_suite
        wanted = {prob for _, prob in load_suite(args.suite)}
        ms = [m for m in ms if m.problem in wanted]
    ks = tuple(int(x) for x in args.ks.split(","))
    c = curve(runs(ms), ks)
    if not c:
        print("no ranked candidates in the database (run `cutegen tune`, or import calibration results)")
        return 1
    print(format_curve(c))
    if args.json:
        Path(args.json).write_text(json.dumps(c, indent=1) + "\n")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for kind, rows in c.items():
            pts = [(r["k"], r["best_of_k_over_best"]) for r in rows if r["runs"] and r["best_of_k_over_best"]]
            ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", label=kind)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (search candidates measured)")
        ax.set_ylabel("best of k / best measured (geomean)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
