"""Grouped GEMM's validation: tolerance and the ragged group-size cases every kernel is checked on.

Imports nothing heavy: the GPU driver (bench/grouped_driver.py) and the CPU tests share it.
"""
from __future__ import annotations

from .problem import GroupedGemmProblem, split_tokens

# Relative Frobenius error against a float32 per-group matmul of the same (already quantized) inputs:
# the GEMM tolerance of 16- and 8-bit inputs (cutegen.run.tolerance.TOLERANCE).
TOLERANCE = {"bf16": 1e-2, "e4m3": 1e-2}


def tolerance(problem: GroupedGemmProblem) -> float:
    return TOLERANCE[problem.dtype]


def ragged_cases(groups: int, tile_m: int, total: int) -> dict[str, list[int]]:
    """Per-group row counts that probe what a grouped kernel gets wrong: empty groups, 1-token groups,
    counts that are not a multiple of the tile, every token in one group and very uneven routing.

    ``total`` is about the tokens of the whole launch (the counts of each case sum to it or near it);
    every list has ``groups`` entries, each >= 0.
    """
    e = groups
    cases: dict[str, list[int]] = {}
    # empty groups: every other group gets nothing (the first and last group too when e > 2)
    share = max(1, total // max(1, (e + 1) // 2))
    cases["empty_groups"] = [0 if i % 2 == 0 and e > 1 else share for i in range(e)]
    cases["one_token"] = [1] * e
    # not a multiple of the tile: tile_m + 1, 2 * tile_m - 1, 3, tile_m - 1, ... cycling
    odd = [tile_m + 1, 2 * tile_m - 1, 3, max(1, tile_m - 1), 17]
    cases["ragged_tile"] = [odd[i % len(odd)] for i in range(e)]
    cases["all_in_one"] = [total if i == e // 2 else 0 for i in range(e)]
    # very uneven: a Zipf law with exponent 2, the last group empty
    w = [1.0 / (i + 1) ** 2 for i in range(e)]
    sizes = list(split_tokens(total, tuple(x / sum(w) for x in w)))
    if e > 1:
        sizes[0] += sizes[-1]
        sizes[-1] = 0
    cases["very_uneven"] = sizes
    return cases
