"""The statistics pack reports share (tuning, coverage): one geometric mean, so every figure rounds alike."""
from __future__ import annotations

import math


def geo(vals) -> float:
    """The geometric mean of the positive values (NaN when there are none)."""
    vals = [v for v in vals if v and v > 0]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan")
