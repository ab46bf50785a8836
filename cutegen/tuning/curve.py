"""The tuning curve: how much the best of the search's first k candidates gains as k grows.

A *run* is one measurement of a problem's ranked candidates in one process: a ``cutegen tune`` run
(source ``cutegen-tune <start>#<problem>/search<rank>``, rank from 1) or a calibration file
(``<file>#<problem>/rank<rank>``, rank from 0). For each run and k, best-of-k is the fastest validated
candidate among the first k; the curve reports, per k, the geometric mean over the runs measured at
least k deep (ranks 1..k all timed) of best-of-k / best of the run (1.0: nothing left to gain) and of
cuBLAS / best-of-k.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

_RANK = (re.compile(r"/search(\d+)$"), 1), (re.compile(r"/rank(\d+)$"), 0)


def search_rank(source: str) -> int | None:
    """The search rank (1 = first pick) a record's source names, or None (not a ranked candidate)."""
    for pattern, base in _RANK:
        m = pattern.search(source)
        if m:
            return int(m.group(1)) - base + 1
    return None


@dataclass
class Run:
    key: str                       # source prefix + problem: one process, one problem
    device_kind: str
    problem: object
    ranked: dict[int, float]       # rank -> median us (validated candidates only)
    cublas_us: float | None
    tried: set = field(default_factory=set)   # ranks timed, validated or not

    def best_of(self, k: int) -> float | None:
        vals = [us for r, us in self.ranked.items() if r <= k]
        return min(vals) if vals else None

    def best(self) -> float | None:
        """The best of the complete first ``depth`` (later ranks past a gap do not count)."""
        return self.best_of(self.depth)

    @property
    def depth(self) -> int:
        """How deep the run is complete: ranks 1..depth all measured (a gap, e.g. a candidate not built in
        time, ends it, so best-of-k is never taken over a partial first k)."""
        d = 0
        while d + 1 in self.tried:
            d += 1
        return d


def runs(measurements) -> list[Run]:
    groups: dict[tuple, Run] = {}
    for m in measurements:
        rank = search_rank(m.source)
        if rank is None or not getattr(m, "is_benchmark", True):
            continue
        key = (m.device_kind, m.source.rsplit("/", 1)[0])
        run = groups.setdefault(key, Run(key[1], m.device_kind, m.problem, {}, m.cublas_us))
        run.tried.add(rank)
        if not m.validated:   # timed but wrong: it ran, so it does not end the run; it cannot be the best
            continue
        run.ranked[rank] = min(m.median_us, run.ranked.get(rank, math.inf))
        if run.cublas_us is None:
            run.cublas_us = m.cublas_us
    return sorted(groups.values(), key=lambda r: (r.device_kind, r.key))


def _geo(vals):
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def curve(all_runs: list[Run], ks=(1, 2, 4, 8, 16)) -> dict[str, list[dict]]:
    """Per device kind, per k: runs counted (those measured at least k deep), geomean of best-of-k over the
    best measured, geomean x cuBLAS of best-of-k, and how many runs already had their best within k."""
    out: dict[str, list[dict]] = {}
    by_kind = defaultdict(list)
    for r in all_runs:
        by_kind[r.device_kind].append(r)
    for kind, rs in sorted(by_kind.items()):
        rows = []
        for k in ks:
            deep = [r for r in rs if r.depth >= k]
            slow = [r.best_of(k) / r.best() for r in deep if r.best_of(k)]
            vs_cublas = [r.cublas_us / r.best_of(k) for r in deep if r.cublas_us and r.best_of(k)]
            rows.append({"k": k, "runs": len(deep), "best_of_k_over_best": _geo(slow),
                         "x_cublas": _geo(vs_cublas),
                         "best_found": sum(1 for x in slow if x <= 1.0 + 1e-12)})
        out[kind] = rows
    return out


def format_curve(c: dict[str, list[dict]]) -> str:
    lines = []
    for kind, rows in c.items():
        lines.append(f"{kind}:")
        lines.append(f"  {'k':>3}  {'runs':>4}  {'best-of-k / best':>16}  {'x cuBLAS':>8}  {'best already found':>18}")
        for r in rows:
            if not r["runs"]:
                lines.append(f"  {r['k']:>3}  {0:>4}  {'(no run measured this deep)':>16}")
                continue
            geo = f"{r['best_of_k_over_best']:.4f}" if r["best_of_k_over_best"] else "-"
            cub = f"{r['x_cublas']:.3f}" if r["x_cublas"] else "-"
            lines.append(f"  {r['k']:>3}  {r['runs']:>4}  {geo:>16}  {cub:>8}  {r['best_found']:>9} of {r['runs']}")
    return "\n".join(lines)
