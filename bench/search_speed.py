"""Time the search on every problem of bench/suite.toml; print a table and the worst case.

Each problem runs in a fresh Python process (so peak RSS and the first-call cost are honest:
imports and caches are included in the process, the search's own ``search_seconds`` excludes
only the interpreter start and imports). Usage:

    /work/venv/bin/python bench/search_speed.py [--suite bench/suite.toml] [--top-k 5] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from cutegen.problem import GemmProblem
from cutegen.search import search
spec = json.loads(sys.argv[1])
p = GemmProblem.from_dict({k: spec[k] for k in ("m", "n", "k", "dtype", "layout", "lda", "ldb", "ldc") if k in spec})
t1 = time.perf_counter()
r = search(p, top_k=int(sys.argv[2]))
t2 = time.perf_counter()
print(json.dumps({"search_seconds": r.search_seconds, "with_imports_seconds": t2 - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "nodes": r.egraph_nodes, "classes": r.egraph_classes, "iterations": r.iterations,
                  "judged": r.candidates_judged, "legal": r.candidates_legal, "total": r.candidates_total,
                  "best": r.ranked[0].config.short_name() if r.ranked else None,
                  "best_tflops": r.ranked[0].breakdown["predicted_tflops"] if r.ranked else None}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--suite", default=os.path.join(here, "suite.toml"))
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args()
    with open(args.suite, "rb") as f:
        problems = tomllib.load(f)["problem"]
    rows = []
    hdr = (f"{'problem':24s} {'search s':>8s} {'+import s':>9s} {'RSS MB':>7s} {'nodes':>6s} {'classes':>7s} "
           f"{'judged':>6s} {'legal':>5s}  best (predicted TFLOP/s)")
    print(hdr)
    print("-" * len(hdr))
    for spec in problems:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec), str(args.top_k)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{spec['name']:24s} FAILED: {proc.stderr.strip().splitlines()[-1:]}")
            rows.append({"name": spec["name"], "error": proc.stderr})
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["name"] = spec["name"]
        rows.append(r)
        print(f"{spec['name']:24s} {r['search_seconds']:8.3f} {r['with_imports_seconds']:9.3f} {r['peak_rss_mb']:7.1f} "
              f"{r['nodes']:6d} {r['classes']:7d} {r['judged']:6d} {r['legal']:5d}  {r['best']} ({r['best_tflops']})")
    ok = [r for r in rows if "error" not in r]
    if ok:
        worst_t = max(ok, key=lambda r: r["search_seconds"])
        worst_m = max(ok, key=lambda r: r["peak_rss_mb"])
        print(f"\nworst time: {worst_t['name']} {worst_t['search_seconds']:.3f} s "
              f"({worst_t['with_imports_seconds']:.3f} s with imports); "
              f"worst memory: {worst_m['name']} {worst_m['peak_rss_mb']:.1f} MB; "
              f"{len(ok)}/{len(rows)} problems searched")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, sort_keys=True)
    failed = len(ok) != len(rows) or any(r["search_seconds"] >= 1.0 or r["peak_rss_mb"] >= 1024 for r in ok)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
