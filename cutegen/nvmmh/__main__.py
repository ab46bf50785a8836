"""``python -m cutegen.nvmmh --suite bench/suite.toml --out DIR``: render nvMMH's first legal pick per problem.

Writes ``DIR/<problem name>/`` (kernel.cu + manifest.json; the manifest's cost holds nvMMH's estimate and
the rule report of every proposal ranked above the pick), the folder ``cutegen bench --nvmmh DIR`` times
after ``cutegen build``. Prints, per problem, the pick and every rejected proposal with its rule.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import CutegenError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cutegen.nvmmh", description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="bench/suite.toml")
    p.add_argument("--only", action="append", default=[], metavar="NAME")
    p.add_argument("--out", default="generated/nvmmh/sm90a", help="one directory per problem name")
    p.add_argument("--device-kind", default="h100-sxm", help="the GPU nvMMH models [h100-sxm]")
    p.add_argument("--count", type=int, default=32, help="proposals asked for per problem [32]")
    p.add_argument("--report", metavar="JSON", help="also write every pick and rejection as JSON")
    args = p.parse_args(argv)
    from ..suites import select_suite
    from ..render import render
    from . import pick

    try:
        report = []
        for name, problem in select_suite(args.suite, args.only):
            pk = pick(problem, args.device_kind, args.count)
            print(f"{name}: {pk.summary()}")
            entry = {"name": name, "problem": problem.to_dict(), **pk.to_dict()}
            if pk.chosen is not None:
                cost = {"model": "nvMatmulHeuristics", "predicted_us": pk.chosen.proposal.estimated_us,
                        "nvmmh": pk.to_dict()}
                kernel = render(problem, pk.chosen.config, "cutlass", cost=cost)
                kernel.write(Path(args.out) / problem.name)
                entry["directory"] = str(Path(args.out) / problem.name)
            report.append(entry)
        if args.report:
            from .._atomic import atomic_write
            try:
                atomic_write(args.report, (json.dumps(report, indent=1) + "\n").encode())
            except OSError as e:
                raise CutegenError(f"--report: cannot write {args.report}: {e.strerror}") from None
    except CutegenError as e:
        print(f"cutegen.nvmmh: error: {e}", file=sys.stderr)
        return 2
    chosen = sum(1 for r in report if r.get("directory"))
    print(f"{chosen} of {len(report)} problems have a legal nvMMH pick under {args.out}")
    return 0 if chosen == len(report) else 1


if __name__ == "__main__":
    sys.exit(main())
