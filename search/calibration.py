"""Compare the cost model with measured kernel times, and fit its knobs to them.

Records are JSON lines with ``problem``, ``config`` and a measured time (``time_ms``, or ``us``),
as the configuration oracle (``tests/data/config_oracle_*.jsonl``) and the GPU bench write them.
Only records that ran correctly and that the search would consider legal (no violations, no
warnings) are used: the search never ranks the others.

    /work/venv/bin/python -m cutegen.search.calibration FILE.jsonl [--fit]

prints the rank agreement (Spearman) and the median |log(predicted / measured)|, and with
``--fit`` a coordinate-descent fit of the knobs in ``cutegen.search.cost`` (printed, not written:
a person decides whether the fitted constants go into cost.py).
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from . import cost as costmod

KNOBS = ("L2_BYTES_PER_S", "TMA_LATENCY_US", "KBLOCK_OVERHEAD_US", "CLUSTER_SYNC_US", "TILE_SWITCH_US",
         "STORE_BYTES_PER_S", "NOSMEM_EPILOGUE_FACTOR", "INSTRUCTION_N_HALF", "LAUNCH_US")


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
            out.append((p, rep.config, rep.stages, float(us)))
    return out


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def score(records) -> dict:
    pred = [costmod.config_cost(p, c, s)[0] for p, c, s, _ in records]
    meas = [m for *_, m in records]
    logerr = [abs(math.log(x / y)) for x, y in zip(pred, meas)]
    return {"records": len(records), "spearman": round(spearman(pred, meas), 4),
            "median_abs_log_error": round(float(np.median(logerr)), 4)}


def fit(records, rounds: int = 3) -> dict:
    """Coordinate descent on the knobs, maximising Spearman then minimising the log error."""
    def objective():
        s = score(records)
        return (s["spearman"], -s["median_abs_log_error"])

    best = objective()
    for _ in range(rounds):
        for name in KNOBS:
            for factor in (0.5, 0.7, 0.85, 1.2, 1.4, 2.0):
                old = getattr(costmod, name)
                setattr(costmod, name, old * factor)
                val = objective()
                if val > best:
                    best = val
                else:
                    setattr(costmod, name, old)
    return {name: getattr(costmod, name) for name in KNOBS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records")
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args(argv)
    recs = load(args.records)
    if not recs:
        print("no usable records (correct, legal, timed)", file=sys.stderr)
        return 2
    print("model as committed:", json.dumps(score(recs)))
    if args.fit:
        knobs = fit(recs)
        print("fitted knobs:", json.dumps({k: round(v, 6) for k, v in knobs.items()}))
        print("model fitted:   ", json.dumps(score(recs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
