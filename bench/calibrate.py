"""Measure the search's top-k candidates of every suite problem against cuBLAS: the data that
calibrates search/cost.py and shows where the cost model ranks wrongly.

Here (needs egglog):
    python bench/calibrate.py prepare --suite bench/suite.toml --top-k 4 --out bench/calib
        renders each distinct candidate kernel once to bench/calib/kernels/<hash>/ and writes
        bench/calib/index.json (problem, rank, config, predicted cost and breakdown, kernel hash).
On the GPU machine (no egglog; the kernels built first with cutegen.build):
    python bench/calibrate.py run bench/calib --out $OUT/calibration.json [--deadline S]
        times cuBLAS and every candidate of each problem in one process with the benchmark's method
        (same input sets, verified once, CUDA events, median).
Back here:
    python bench/calibrate.py report calibration.json
        per problem: measured rank vs predicted rank, best measured vs the search's pick, vs cuBLAS.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def prepare(args) -> int:
    from cutegen.suites import load_suite
    from cutegen.render import render
    from cutegen.search import search

    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    index = []
    written = set()
    for name, problem in load_suite(args.suite):
        result = search(problem, top_k=args.top_k)
        for rank, r in enumerate(result.ranked):
            k = render(problem, r.config, cost={"predicted_us": r.cost, **(r.breakdown or {})})
            if k.kernel_hash not in written:
                k.write(out / "kernels" / k.kernel_hash)
                written.add(k.kernel_hash)
            index.append({"name": name, "problem": problem.to_dict(), "rank": rank, "config": r.config.to_dict(),
                          "predicted_us": r.cost, "breakdown": r.breakdown, "kernel": k.kernel_hash})
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"{len(index)} candidates, {len(written)} distinct kernels -> {out}")
    return 0


def run(args) -> int:
    from cutegen import runner as R
    from cutegen.problem import GemmProblem

    root = Path(args.calib)
    index = json.loads((root / "index.json").read_text())
    by_problem: dict[str, list[dict]] = {}
    for c in index:
        by_problem.setdefault(c["name"], []).append(c)
    t0 = time.monotonic()
    results = []
    worker = R.Worker(startup_timeout=180, init={"op": "init"})
    try:
        for name, cands in by_problem.items():
            if args.deadline and time.monotonic() - t0 > args.deadline:
                print(f"SKIP {name}: deadline", flush=True)
                continue
            problem = GemmProblem.from_dict(cands[0]["problem"])
            contenders = [{"name": "cublas"}]
            if args.baselines:
                lib = Path(args.baselines) / problem.name / "kernel.so"
                contenders.append({"name": "cutlass_builder", "library": str(lib) if lib.is_file() else None,
                                   "reason": "not built"})
            for c in cands:
                lib = root / "kernels" / c["kernel"] / "kernel.so"
                contenders.append({"name": f"rank{c['rank']}", "library": str(lib) if lib.is_file() else None,
                                   "reason": "not built"})
            reply = worker.request({"op": "bench_problem", "problem": problem.to_dict(), "contenders": contenders,
                                    "warmup": args.warmup, "iters": args.iters, "l2_multiple": 4}, args.timeout)
            entry = {"name": name, "problem": problem.to_dict(), "candidates": cands}
            if reply.ok:
                entry["results"] = reply.value["results"]
                entry["device"] = reply.value.get("device")
            else:
                entry["error"] = f"{reply.status}: {reply.message}"
            results.append(entry)
            Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(summary_line(entry), flush=True)
    finally:
        worker.close()
    return 0


def _ms(res: dict | None) -> float | None:
    if not res or res.get("status") != "ok":
        return None
    for key in ("median_ms", "ms"):
        if key in res:
            return float(res[key])
    return None


def summary_line(entry: dict) -> str:
    if "error" in entry:
        return f"{entry['name']}: {entry['error']}"
    res = entry["results"]
    cub = _ms(res.get("cublas"))
    base = _ms(res.get("cutlass_builder"))
    parts = [f"{entry['name']}: cublas {cub if cub is None else round(cub * 1e3, 1)} us, cutlass builder "
             f"{'-' if base is None else round(base * 1e3, 1)} us"]
    for c in entry["candidates"]:
        ms = _ms(res.get(f"rank{c['rank']}"))
        ratio = "-" if (ms is None or cub is None) else f"{cub / ms:.2f}x"
        cfg = c["config"]
        short = (f"{'x'.join(map(str, cfg['tile_shape']))} c{'x'.join(map(str, cfg['cluster_shape'][:2]))} "
                 f"{cfg['mainloop_schedule'][:4]} {cfg['epilogue_schedule'][:8]} s{cfg['stages']} {cfg['tile_scheduler'][:4]}")
        status = res.get(f"rank{c['rank']}", {}).get("status")
        parts.append(f"  r{c['rank']} pred {c['predicted_us']:.1f}us meas {'-' if ms is None else round(ms * 1e3, 1)}us "
                     f"{ratio} [{short}] {'' if status == 'ok' else status}")
    return "\n".join(parts)


def report(args) -> int:
    results = json.loads(Path(args.file).read_text())
    gm_pick, gm_best, n = 0.0, 0.0, 0
    for entry in results:
        print(summary_line(entry))
        if "error" in entry:
            continue
        res = entry["results"]
        cub = _ms(res.get("cublas"))
        times = [(c["rank"], _ms(res.get(f"rank{c['rank']}"))) for c in entry["candidates"]]
        times = [(r, t) for r, t in times if t is not None]
        if cub is None or not times:
            continue
        pick = dict(times).get(0)
        best = min(t for _, t in times)
        if pick is not None:
            gm_pick += math.log(cub / pick)
            gm_best += math.log(cub / best)
            n += 1
    if n:
        print(f"\ngeomean vs cuBLAS over {n} problems: search pick {math.exp(gm_pick / n):.3f}x, "
              f"best of top-k {math.exp(gm_best / n):.3f}x")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--suite", default="bench/suite.toml")
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--out", default="bench/calib")
    p.set_defaults(fn=prepare)
    p = sub.add_parser("run")
    p.add_argument("calib")
    p.add_argument("--out", required=True)
    p.add_argument("--deadline", type=float, default=0)
    p.add_argument("--baselines", default="", help="folder of <problem.name>/kernel.so CUTLASS builder baselines")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.set_defaults(fn=run)
    p = sub.add_parser("report")
    p.add_argument("file")
    p.set_defaults(fn=report)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
