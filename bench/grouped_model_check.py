"""The grouped cost model (search/grouped_cost.py) against measured grouped kernels: nothing is fitted to them.

    .venv/bin/python bench/grouped_model_check.py bench/results/grouped/2026-11-26-h200-run1-results.json

For every case and every kernel that validated and was timed: predicted and measured time, their ratio; per
case, whether the model's cheapest timed kernel is the fastest measured one (and the time it would lose if not).
"""
from __future__ import annotations

import json
import math
import re
import sys

NAME = re.compile(r"^(\d+)x(\d+)x(\d+)_c(\d+)x(\d+)_(coop|pp)_s(\d+|auto)((?:_[a-z]+)*)$")


def config_of(name: str):
    from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
    m = NAME.match(name)
    if not m:
        return None
    tm, tn, tk, cm, cn, sched, st, rest = m.groups()
    flags = rest.split("_")[1:]
    raster = "along_m" if "alongm" in flags else "along_n" if "alongn" in flags else "heuristic"
    return GroupedGemmConfig(int(tm), int(tn), int(tk), int(cm), int(cn),
                             "ptr_cooperative" if sched == "coop" else "ptr_pingpong", "swap" in flags,
                             None if st == "auto" else int(st), raster)


RUN_SKEW_EXPONENT = 1.0      # the Zipf exponent "skewed" had when run 1 was drawn (problem.py has 1.6 since)


def run_sizes(problem, case) -> list[int] | None:
    """The group sizes the run timed: problem.group_sizes under the exponent of the run; None where they do not
    reproduce the recorded largest and smallest group (the case is then left out)."""
    from cutegen.ops.grouped_gemm import problem as problem_mod
    saved = problem_mod.SKEW_EXPONENT
    problem_mod.SKEW_EXPONENT = RUN_SKEW_EXPONENT
    try:
        sizes = list(problem.group_sizes)
    finally:
        problem_mod.SKEW_EXPONENT = saved
    if problem.layout == "masked" and problem.distribution == "uniform":
        sizes = [case["sizes_max"]] * problem.groups
    if max(sizes) != case["sizes_max"] or min(sizes) != case["sizes_min"] or sum(sizes) != case["rows"]:
        return None
    return sizes


def main(argv=None) -> int:
    from cutegen.legality.grouped_gemm import grouped_stages
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem
    from cutegen.search.grouped_cost import grouped_cost

    path = (argv or sys.argv[1:])[0]
    data = json.load(open(path))
    ratios, regrets, hits, cases, picks = [], [], 0, 0, []
    print(f"{'case':34s} {'kernel':34s} {'pred ms':>8s} {'meas ms':>8s} {'pred/meas':>9s}")
    for case in data["cases"]:
        p = GroupedGemmProblem.from_dict(case["problem"])
        sizes = run_sizes(p, case)
        if sizes is None:
            print(f"{case['name']:34s} left out: its group sizes are not reproduced")
            continue
        timed = []
        for h, k in case["kernels"].items():
            cfg = config_of(k.get("config_name", "")) if k.get("ok") and "ms" in k else None
            if cfg is None:
                continue
            us, _ = grouped_cost(p, cfg, grouped_stages(p, cfg), "h200", sizes)
            timed.append((us / 1000, k["ms"], k["config_name"]))
            ratios.append(us / 1000 / k["ms"])
            if h == case.get("pick"):
                picks.append(us / 1000 / k["ms"])
            print(f"{case['name']:34s} {k['config_name']:34s} {us / 1000:8.3f} {k['ms']:8.3f} {us / 1000 / k['ms']:9.3f}")
        if len(timed) >= 2:
            cases += 1
            model_pick = min(timed)
            best = min(t[1] for t in timed)
            hits += model_pick[1] == best
            regrets.append(model_pick[1] / best)
    logs = [abs(math.log(r)) for r in ratios]
    print(f"\n{len(ratios)} timed kernels: predicted/measured median {sorted(ratios)[len(ratios) // 2]:.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}, mean |ln| {sum(logs) / len(logs):.3f}")
    plog = [abs(math.log(r)) for r in picks]
    print(f"the search's {len(picks)} picks: predicted/measured {min(picks):.3f}-{max(picks):.3f}, median "
          f"{sorted(picks)[len(picks) // 2]:.3f}, mean |ln| {sum(plog) / len(plog):.3f}")
    print(f"{cases} cases with 2+ timed kernels: the model's cheapest is the fastest measured in {hits}; "
          f"its measured time over the best: geomean {math.exp(sum(map(math.log, regrets)) / len(regrets)):.3f}, "
          f"worst {max(regrets):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
