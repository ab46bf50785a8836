"""Measured dispatch (issue 22, part of ``pack --tune``): a pack's rows and its M segments from GPU times.

Input: the JSON ``bench/gpu_pack.py`` writes for a built pack (``time`` rows: M, N, K, ``per_kernel_us`` of
every kernel of the pack that ran the shape, ``matmul_us`` of torch.matmul), at the sampled shapes and at
off-sample M values. For each (N, K) of the set the measured winner at each measured M is known; between
two measured M whose winners differ, the boundary is where the two kernels' measured curves cross, their
times interpolated linearly in log2(M) between the two points (not a power of two). Below the first and
above the last measured M the nearest winner holds. A shape of the set that was measured runs on its
measured winner; the coverage table then says measured, with torch.matmul's time and the ratio.

The kernels are the pack's own (the selection is unchanged; which kernel serves which M is what changes),
so the file must come from the same pack: its name and kernel names are checked.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CutegenError, FieldError

MAX_SEGMENTS = 64          # per (N, K): more measured winner changes than this is refused


@dataclass(frozen=True)
class Point:
    m: int
    times: dict[int, float]        # kernel index -> measured microseconds
    matmul_us: float | None


@dataclass(frozen=True)
class Segment:
    lo: int                        # first M of the segment (the next segment's lo - 1 is its last)
    kernel: int
    why: str


def load(path: str | Path, pack_name: str, kernel_names: list[str]) -> dict[tuple[int, int], list[Point]]:
    """(N, K) -> measured points, M ascending, from a bench/gpu_pack.py results file of this pack."""
    path = Path(path)
    try:
        res = json.loads(path.read_text())
    except FileNotFoundError:
        raise CutegenError(f"--measured: {path}: no such file") from None
    except json.JSONDecodeError as e:
        raise FieldError(f"{path}", f"not valid JSON: {e}") from None
    if res.get("pack") != pack_name:
        raise FieldError(f"{path.name}:pack", f"measured pack {res.get('pack')!r}, not this pack ({pack_name!r})")
    index = {n: i for i, n in enumerate(kernel_names)}
    out: dict[tuple[int, int], dict[int, Point]] = {}
    for j, row in enumerate(res.get("time") or []):
        per = row.get("per_kernel_us")
        if not per:
            continue
        unknown = sorted(set(per) - set(index))
        if unknown:
            raise FieldError(f"{path.name}:time[{j}]", f"kernels {unknown[:3]} are not this pack's (made from another "
                                                       "selection: rebuild and measure this pack)")
        times = {index[n]: float(t) for n, t in per.items() if t is not None and t > 0}
        if times:
            out.setdefault((int(row["n"]), int(row["k"])), {})[int(row["m"])] = Point(
                int(row["m"]), times, row.get("matmul_us"))
    return {nk: [pts[m] for m in sorted(pts)] for nk, pts in out.items()}


def _winner(p: Point) -> int:
    return min(p.times.items(), key=lambda kv: (kv[1], kv[0]))[0]


def crossing(m0: int, a0: float, b0: float, m1: int, a1: float, b1: float) -> int:
    """The first M above m0 at which kernel B is no slower than A, their times linear in log2(M) between
    (m0: a0, b0) and (m1: a1, b1), where A won at m0 (a0 < b0) and B at m1 (b1 <= a1); within (m0, m1]."""
    x0, x1 = math.log2(m0), math.log2(m1)
    d0, d1 = a0 - b0, a1 - b1                      # d0 < 0 <= d1
    x = x0 + (x1 - x0) * (-d0) / (d1 - d0) if d1 != d0 else x1
    return min(max(math.ceil(2.0 ** x - 1e-9), m0 + 1), m1)


def segments(points: list[Point]) -> list[Segment]:
    """The M segments of one (N, K): the measured winner of each point, a boundary at the crossing of the
    two curves wherever consecutive winners differ."""
    if not points:
        return []
    out = [Segment(1, _winner(points[0]), f"measured fastest at M={points[0].m}")]
    for p, q in zip(points, points[1:]):
        a, b = _winner(p), _winner(q)
        if a == b:
            continue
        if a in q.times and b in p.times:
            lo = crossing(p.m, p.times[a], p.times[b], q.m, q.times[a], q.times[b])
            why = (f"measured: from M={lo} (where the curves measured at M={p.m} and M={q.m} cross) this kernel is "
                   "the fastest")
        else:       # one of them did not run at the other point: the boundary at the geometric midpoint
            lo = min(max(math.ceil(math.sqrt(p.m * q.m)), p.m + 1), q.m)
            why = f"measured fastest at M={q.m} (boundary at the geometric midpoint of M={p.m} and M={q.m})"
        out.append(Segment(lo, b, why))
    if len(out) > MAX_SEGMENTS:
        raise CutegenError(f"--measured: {len(out)} segments for one (N, K); at most {MAX_SEGMENTS}")
    return out
