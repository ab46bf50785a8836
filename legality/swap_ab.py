"""Swap AB (cutegen/swap_ab.py): what a kernel that computes D^T = B^T A^T may and may not do.

A swapped configuration is judged in two steps (``cutegen.legality.check_config``): the rules
here, on the problem as the caller states it; then every other rule on the transposed problem,
which is the problem the kernel's CUTLASS types are written for (``swap_ab.transposed``). The
contracts of TMA, WGMMA and CUTLASS do not know about the swap; they see an ordinary GEMM.
"""
from __future__ import annotations

from .rule import RuleSet

SWAP_AB_RULES = RuleSet("swap_ab")
_rule = SWAP_AB_RULES.rule


class SwapContext:
    """The problem as the caller states it and the configuration as requested."""

    __slots__ = ("problem", "config")

    def __init__(self, problem, config):
        self.problem = problem
        self.config = config


@_rule("SWAP-AB-BIAS",
       source="cutegen/render.py _fusion: the templates spell LinCombPerRowBiasEltAct only; under D^T = B^T A^T "
              "the problem's rows are the kernel's columns (CUTLASS 4.2 epilogue/fusion/operations.hpp "
              "has LinCombPerColBias*, not rendered)",
       summary="a swapped kernel has no bias: the problem's per-row (M) bias would be a per-column bias of "
               "the transposed kernel, which cutegen does not render")
def _bias(c):
    if c.config.swap_ab and c.problem.bias:
        return (f"swap_ab with bias={c.problem.bias}: the per-row bias of M={c.problem.m} rows would be a "
                "per-column bias of the transposed kernel, which is not rendered; do not swap this problem")
    return None


def check_swap(problem, config):
    """The swap rules a configuration breaks on the caller's problem (empty when it does not swap)."""
    if not config.swap_ab:
        return []
    ctx = SwapContext(problem, config)
    return [v for v in (r.evaluate(ctx) for r in SWAP_AB_RULES.rules) if v is not None]
