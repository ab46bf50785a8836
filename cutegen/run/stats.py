"""Small helpers shared by validate and bench: means, TFLOP/s, JSON."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

# ------------------------------------------------------------------------------------------------
# Small helpers shared by validate and bench
# ------------------------------------------------------------------------------------------------

def geometric_mean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values]
    if not vals:
        return None
    if any(not (v > 0) or math.isinf(v) for v in vals):
        raise ValueError(f"geometric mean needs positive finite values, got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def tflops(flops: int, seconds: float) -> float:
    if not seconds > 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return flops / seconds / 1e12


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def json_default(o):
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
