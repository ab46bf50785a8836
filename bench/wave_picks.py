"""Which first picks wave tiles change (issue 24): each suite problem searched as a new search would be (the default
ranking for ``--device``, learned from the committed seed) with wave tiles on and off.

    python bench/wave_picks.py bench/midsize.toml bench/heldout.toml bench/llm.toml --device h200 --json OUT.json

Prints one line per problem whose first pick differs (name, off pick, on pick, the ranking's predicted us of each).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    from cutegen._api import config_label
    from cutegen.search import ranking
    from cutegen.search.engine import search
    from cutegen.suites import load_suite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="+")
    ap.add_argument("--device", default="h200")
    ap.add_argument("--prior", action="store_true", help="rank by the prior alone")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rk = ranking.choose(device=args.device, prior=args.prior, db=ranking.seed_db())
    print(rk.describe(), file=sys.stderr)
    rows = []
    for path in args.suites:
        for name, problem in load_suite(path):
            picks = {}
            for wave in (False, True):
                kw = {**rk.search_kwargs(), "wave_tiles": wave}
                best = search(problem, 1, **kw).ranked[0]
                picks[wave] = (config_label(best.config), round(best.cost, 2))
            row = {"suite": path, "name": name, "off": picks[False][0], "off_us": picks[False][1],
                   "on": picks[True][0], "on_us": picks[True][1], "changed": picks[False][0] != picks[True][0]}
            rows.append(row)
            if row["changed"]:
                print(f"{Path(path).stem:9s} {name:34s} {row['off']:52s} {row['off_us']:8.2f} -> {row['on']:52s} "
                      f"{row['on_us']:8.2f}", flush=True)
    changed = [r for r in rows if r["changed"]]
    print(f"{len(changed)} of {len(rows)} first picks change ({rk.label})", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"ranking": rk.label, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
