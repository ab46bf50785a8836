"""The pipeline checker's speed: every interleaving vs the symmetry and partial-order reductions together, per
explored term.

  python bench/pipeline_speed.py [--max-states N] [--json FILE]

For each case (one CTA at the default bounds ``cutegen check pipeline`` uses, and 2-CTA clusters),
explores the same terms with no reduction (``reduce=False, symmetry=False``) and with both
(``reduce=True, symmetry=True``) in this process and prints states,
seconds and the ratios, whether both found the same rules, and whether the reduced check of the whole
configuration (every k-block count of the default bounds) ends under TARGET_S. CPU figures of the
machine it runs on; the checker is pure Python, one core.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from cutegen import GemmProblem, KernelConfig
from cutegen.legality.pipeline import Bounds
from cutegen.legality.pipeline_explore import explore
from cutegen.legality.pipeline_builders import tma_warp_specialized
from cutegen.pipelines import pipeline_of, protocol

TARGET_S = 1.0
BF16 = GemmProblem.from_dict({"m": 8192, "n": 3072, "k": 1024, "dtype": "bf16", "layout": "tn"})
PP = dict(mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
CASES = [  # name, config, backend, explore the cluster, bounds (stages, k-block counts, tiles or None)
    ("coop 1 CTA (default bounds)", dict(tile_shape=(128, 256, 64)), "dsl", False, None),
    ("pingpong 1 CTA (default bounds)", dict(tile_shape=(128, 128, 64), **PP), "cutlass", False, None),
    ("coop 2x1 cluster, 2 stages, k 1/3, 1 tile", dict(tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1)),
     "dsl", True, (2, (1, 3), 1)),
    ("ws 1x2 cluster, 2 stages, k 1/3, 1 tile", dict(tile_shape=(64, 128, 64), cluster_shape=(1, 2, 1),
                                                     mainloop_schedule="warp_specialized",
                                                     epilogue_schedule="tma_warp_specialized"),
     "dsl", True, (2, (1, 3), 1)),
    ("coop 2x1 cluster (default bounds)", dict(tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1)), "dsl", True, None),
]


def terms(config: dict, backend: str, cluster: bool, bounds):
    """The explored terms: ``check_pipeline``'s default bounds (``bounds`` None), or (stages, k-block
    counts, tiles) for the cluster cases the full exploration can still finish."""
    cfg = KernelConfig.from_dict(config)
    if bounds is None:
        term, rebuild = pipeline_of(BF16, cfg, backend, explore_cluster=cluster)
        b = Bounds()
        stages = min(b.stages, term.stages)
        return [rebuild(stages=stages, k_blocks=k) for k in b.k_values(stages)]
    st, ks, tiles = bounds
    p = protocol(BF16, cfg, backend)
    for key in ("readers_per_fill", "stages", "order_epilogue"):   # not parameters of the mainloop term
        p.pop(key, None)
    p["tiles"] = tiles
    return [tma_warp_specialized(stages=st, k_blocks=k, **p) for k in ks]


def run_case(name, config, backend, cluster, bounds, max_states):
    row = {"case": name}
    for mode in (False, True):
        states, secs, complete, rules = 0, 0.0, True, set()
        for t in terms(config, backend, cluster, bounds):
            t0 = time.perf_counter()
            e = explore(t, max_states=max_states, reduce=mode, symmetry=mode)
            secs += time.perf_counter() - t0
            states += e.states
            complete &= e.complete
            rules |= set(e.findings)
        row["reduced" if mode else "full"] = {"states": states, "seconds": round(secs, 3), "complete": complete,
                                              "rules": sorted(rules)}
    f, r = row["full"], row["reduced"]
    row["state_ratio"] = round(f["states"] / max(r["states"], 1), 2)
    row["time_ratio"] = round(f["seconds"] / max(r["seconds"], 1e-9), 2)
    row["same_rules"] = f["rules"] == r["rules"] if f["complete"] and r["complete"] else None
    row["under_target"] = r["complete"] and r["seconds"] < TARGET_S
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-states", type=int, default=100_000)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'case':44} {'full states':>11} {'s':>7} {'reduced':>9} {'s':>7} {'states x':>8} {'time x':>7} "
          f"{'same':>5} {'<1s':>4}")
    for case in CASES:
        row = run_case(*case, args.max_states)
        rows.append(row)
        f, r = row["full"], row["reduced"]
        inc = lambda d: "" if d["complete"] else "+"          # noqa: E731  (+: cut at --max-states)
        print(f"{row['case'][:44]:44} {f['states']:>10}{inc(f)} {f['seconds']:7.2f} {r['states']:>8}{inc(r)} "
              f"{r['seconds']:7.2f} {row['state_ratio']:8.2f} {row['time_ratio']:7.2f} {str(row['same_rules']):>5} "
              f"{'yes' if row['under_target'] else 'no':>4}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
