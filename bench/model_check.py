"""Does the learned model pick better than the prior on shapes it has never seen? Candidates for the GPU.

Here (needs egglog and the results database; the seed is enough):
    python bench/model_check.py prepare [--suite bench/heldout.toml] [--device h100-sxm] [--out bench/heldout]
        per problem: the prior's top 2, the learned model's top 2 for the device kind, and the prior's best
        of one more tile shape (so the regret is not measured among the prior's favourites only);
        renders each distinct kernel once to <out>/kernels/<hash>/ and writes <out>/index.json in
        bench/calibrate.py's format (plus "origin" and each model's prediction) for `calibrate.py run`.
On the GPU machine: bash bench/gpu_results.sh (builds, then `calibrate.py run`, then `table`).
    python bench/model_check.py table RESULT.json
        per problem: measured time of the prior's pick, the learned pick, the best candidate, cuBLAS.
Back here: cutegen db import RESULT.json; python bench/model_quality.py.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

TOP = 2           # distinct kernels: 50 at 4 + 4 + 2 over 10 problems, 40 at 3 + 3 + 1; one GPU call builds ~25
EXTRA_TILES = 1


def prepare(args) -> int:
    from cutegen.suites import load_suite
    from cutegen.render import render
    from cutegen.results import ResultsDB
    from cutegen.search import search
    from cutegen.search.learned import Predictor

    import tempfile

    # default: the committed seed alone (an empty user database merged with it), so the candidates do not
    # depend on whoever's cache runs this
    db = ResultsDB(args.db) if args.db else ResultsDB(Path(tempfile.mkdtemp()) / "empty.sqlite")
    predictor = Predictor.from_db(args.device, db)
    if not predictor.learned:
        print(f"no learned model for {args.device}: the database holds too little", file=sys.stderr)
        return 2
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    index, written = [], set()
    for name, problem in load_suite(args.suite):
        prior = search(problem, top_k=32)
        learned = search(problem, top_k=TOP, device=args.device, predictor=predictor)
        picks: list[tuple[str, object]] = [("prior", r) for r in prior.ranked[:TOP]]
        picks += [("learned", r) for r in learned.ranked]
        tiles = {r.config.tile_shape for _, r in picks}
        extra = 0
        for r in prior.ranked[TOP:]:
            if extra < EXTRA_TILES and r.config.tile_shape not in tiles:
                tiles.add(r.config.tile_shape)
                picks.append(("other", r))
                extra += 1
        seen: dict[str, dict] = {}
        for origin, r in picks:
            k = render(problem, r.config, cost={"predicted_us": r.cost, **(r.breakdown or {})})
            if k.kernel_hash in seen:
                seen[k.kernel_hash]["origin"].append(origin)
                continue
            if k.kernel_hash not in written:
                k.write(out / "kernels" / k.kernel_hash)
                written.add(k.kernel_hash)
            pred = predictor.predict(problem, [(r.config, r.breakdown["stages"])])[0]
            seen[k.kernel_hash] = {"name": name, "problem": problem.to_dict(), "rank": len(seen),
                                   "config": r.config.to_dict(), "kernel": k.kernel_hash, "origin": [origin],
                                   "predicted_us": r.breakdown["predicted_us"], "breakdown": r.breakdown,
                                   "learned_us": pred.us, "learned_source": pred.source, "learned_sigma": pred.sigma}
        # the picks: rank 0 of each model, named so the table needs no search on the GPU machine
        for entry in seen.values():
            entry["prior_pick"] = entry["config"] == prior.ranked[0].config.to_dict()
            entry["learned_pick"] = entry["config"] == learned.ranked[0].config.to_dict()
        index += seen.values()
        print(f"{name}: {len(seen)} candidates ({', '.join(sorted({o for e in seen.values() for o in e['origin']}))})"
              f"{'' if learned.ranked[0].config == prior.ranked[0].config else '  learned pick differs'}")
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    print(f"{len(index)} candidates, {len(written)} distinct kernels -> {out}")
    return 0


def table(args) -> int:
    entries = json.loads(Path(args.file).read_text())
    ms = lambda r: r["median_ms"] * 1000 if r and r.get("status") == "ok" and r.get("verify", {}).get("ok") else None  # noqa: E731
    rows, ratios = [], {"prior": [], "learned": []}
    for e in entries:
        res = e.get("results", {})
        times = {c["rank"]: ms(res.get(f"rank{c['rank']}")) for c in e["candidates"]}
        good = [t for t in times.values() if t]
        if not good:
            rows.append((e["name"], None, None, None, ms(res.get("cublas"))))
            continue
        best = min(good)
        pick = {who: next((times[c["rank"]] for c in e["candidates"] if c.get(f"{who}_pick")), None)
                for who in ("prior", "learned")}
        for who in ratios:
            if pick[who]:
                ratios[who].append(pick[who] / best)
        rows.append((e["name"], pick["prior"], pick["learned"], best, ms(res.get("cublas"))))
    f = lambda v: "-" if v is None else f"{v:9.1f}"  # noqa: E731
    print(f"{'problem':32s} {'prior us':>9s} {'learned':>9s} {'best':>9s} {'cuBLAS':>9s}")
    for r in rows:
        print(f"{r[0]:32s} " + " ".join(f(v) for v in r[1:]))
    for who, xs in ratios.items():
        if xs:
            print(f"{who} pick / best measured: geomean {math.exp(sum(map(math.log, xs)) / len(xs)):.3f}, "
                  f"worst {max(xs):.3f} over {len(xs)} problems")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--suite", default="bench/heldout.toml")
    p.add_argument("--device", default="h100-sxm")
    p.add_argument("--db", default=None, help="results database (default: the committed seed alone)")
    p.add_argument("--out", default="bench/heldout")
    t = sub.add_parser("table")
    t.add_argument("file")
    args = ap.parse_args(argv)
    return prepare(args) if args.cmd == "prepare" else table(args)


if __name__ == "__main__":
    sys.exit(main())
