"""DSL screening: time candidates as CuTe DSL kernels (seconds to compile) and nvcc only the finalists.

Screening is sound only where a DSL kernel times like the C++ kernel of the same configuration, so the
DSL's order of the candidates is the C++ order. ``families`` measures that per configuration family from
the DSL-vs-C++ comparisons (``bench/results/*dsl-compare*.json``: the same configuration through both
backends, same inputs, one process). A family is screenable when it has comparisons on at least
``MIN_SHAPES`` different problem shapes, all agree numerically, and the DSL/C++ time ratio spans at most ``MAX_SPREAD`` (max/min):
then the DSL ranks within the family as the C++ kernels would, up to that spread.

What the H200 data of 2026-11-22 shows (33 timed comparisons; ``python -m cutegen.tuning.screening``):
bf16 cooperative kernels of 100 us or more (M >= 1000) time within 0.95-1.01x of C++ (spread 1.06,
12 rows): screenable. No comparison has M <= 256 and 100 us or more: decode shapes are not screened. Below 100 us the comparison's back-to-back launches expose the C++ ABI's per-call host
work (NOTES.md), ratios 0.70-0.94: not screenable. fp8 DSL kernels accumulate in the WGMMA accumulator
only, without CUTLASS's two-level promotion, and run 0.32-0.86x the C++ time: not screenable.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..config import KernelConfig
from ..problem import GemmProblem

MIN_SHAPES = 3
MAX_SPREAD = 1.10
LONG_US = 100.0        # the size class boundary: a C++ kernel time of at least this many microseconds
SMALL_M = 256          # M at or below this is another regime (bandwidth-bound, few tiles): its own family
DATA_GLOB = "*dsl-compare*.json"


def family(problem: GemmProblem, config: KernelConfig, us: float) -> tuple[str, str, str, str]:
    """(input type, mainloop schedule, epilogue schedule, size class) of a kernel that takes ``us``.

    The size class is "long"/"short" by time, prefixed "small-m-" for M <= SMALL_M: a decode GEMM that
    takes long because its weights are large is not the regime the long comparisons measured."""
    size = "long" if us >= LONG_US else "short"
    return (problem.dtype_a, config.mainloop_schedule, config.epilogue_schedule,
            f"small-m-{size}" if problem.m <= SMALL_M else size)


@dataclass
class Family:
    key: tuple
    ratios: list[float]            # DSL time / C++ time, one per comparison
    agree: bool                    # every comparison agreed within the dtype's tolerance
    shapes: set = field(default_factory=set)   # the (M, N, K) compared

    @property
    def spread(self) -> float:
        return max(self.ratios) / min(self.ratios)

    @property
    def screenable(self) -> bool:
        return self.agree and len(self.shapes) >= MIN_SHAPES and self.spread <= MAX_SPREAD

    def to_dict(self) -> dict:
        return {"family": list(self.key), "rows": len(self.ratios), "shapes": len(self.shapes), "agree": self.agree,
                "ratio_min": round(min(self.ratios), 4), "ratio_max": round(max(self.ratios), 4),
                "ratio_geomean": round(math.exp(sum(map(math.log, self.ratios)) / len(self.ratios)), 4),
                "spread": round(self.spread, 4), "screenable": self.screenable}


def families(rows: list[dict]) -> dict[tuple, Family]:
    """Families from DSL-comparison rows (the ``rows`` of bench/dsl_compare.py's output)."""
    out: dict[tuple, Family] = {}
    for r in rows:
        ms = r.get("median_ms") or {}
        if not ms.get("dsl") or not ms.get("cutlass"):
            continue
        p = GemmProblem.from_dict(r["problem"])
        c = KernelConfig.from_dict(r["config"])
        key = family(p, c, ms["cutlass"] * 1e3)
        f = out.setdefault(key, Family(key, [], True))
        f.ratios.append(ms["dsl"] / ms["cutlass"])
        f.shapes.add((p.m, p.n, p.k))
        f.agree = f.agree and bool(r.get("agree"))
    return dict(sorted(out.items()))


def load_rows(results_dir: str | Path) -> list[dict]:
    rows = []
    for path in sorted(Path(results_dir).glob(DATA_GLOB)):
        rows.extend(json.loads(path.read_text()).get("rows", []))
    return rows


def default_families() -> dict[tuple, Family]:
    """The families measured by the comparisons committed under bench/results/."""
    return families(load_rows(Path(__file__).resolve().parents[2] / "bench" / "results"))


def screenable(problem: GemmProblem, config: KernelConfig, predicted_us: float | None,
               fams: dict[tuple, Family]) -> bool:
    """May this candidate be screened through the DSL? Its family (by the search's predicted time) must be."""
    if predicted_us is None:
        return False
    f = fams.get(family(problem, config, predicted_us))
    return f is not None and f.screenable


def finalists(dsl_us: dict[str, float], keep: int) -> list[str]:
    """The ``keep`` fastest screened candidates by their DSL time (ties by name)."""
    return [n for n, _ in sorted(dsl_us.items(), key=lambda kv: (kv[1], kv[0]))[:keep]]


def main() -> int:
    fams = default_families()
    print(f"{'input':6} {'mainloop':12} {'epilogue':34} {'size':14} {'rows':>4} {'shapes':>6} {'DSL/C++ min':>11} "
          f"{'max':>6} {'spread':>6}  screenable")
    for f in fams.values():
        d = f.to_dict()
        print(f"{f.key[0]:6} {f.key[1]:12} {f.key[2]:34} {f.key[3]:14} {d['rows']:>4} {d['shapes']:>6} {d['ratio_min']:>11.3f} "
              f"{d['ratio_max']:>6.3f} {d['spread']:>6.3f}  {'yes' if f.screenable else 'no'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
