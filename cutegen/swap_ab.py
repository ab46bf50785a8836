"""Swap AB: D = A B is the same function as D^T = B^T A^T.

A kernel with ``config.swap_ab`` is compiled for the *transposed* problem: its A operand is the
problem's B read as an N x K matrix, its B operand the problem's A read as K x M, its C and D the
problem's C and D read as N x M. No byte moves: a row-major M x K matrix *is* a column-major K x M
matrix with the same leading dimension, so each operand keeps its pointer, leading dimension and
batch stride, and only the roles (A <-> B, M <-> N) and the majorness words flip. The tile's M mode
then runs along the problem's N, so a problem with small M and large N fills the 64-row WGMMA
M mode with N and puts its few rows in the tile's N mode (multiples of 8).

Callers never see the swap: the C ABI (templates/cutegen_abi.inc.j2) takes the original problem's
pointers and strides and exchanges them before it builds CUTLASS's arguments.
"""
from __future__ import annotations

from .config import KernelConfig
from .problem import GemmProblem

_FLIP = {"row": "col", "col": "row"}


def transposed(problem: GemmProblem) -> GemmProblem:
    """The problem D^T = B^T A^T computes: (N, M, K), operands exchanged, every majorness flipped.

    Involutive: ``transposed(transposed(p)) == p``. A per-row bias would become a per-column one,
    which the templates do not spell; ``legality.swap_ab`` rules that out (SWAP-AB-BIAS) before any
    caller gets here, so the bias flag is carried as it is.
    """
    return problem.replace(
        m=problem.n, n=problem.m,
        dtype_a=problem.dtype_b, dtype_b=problem.dtype_a,
        layout_a=_FLIP[problem.layout_b], layout_b=_FLIP[problem.layout_a], layout_c=_FLIP[problem.layout_c],
        alignment_a=problem.alignment_b, alignment_b=problem.alignment_a,
        lda=problem.ldb, ldb=problem.lda)      # the leading dimensions travel with their operands


def kernel_problem(problem: GemmProblem, config: KernelConfig) -> GemmProblem:
    """The problem the kernel's CUTLASS types are written for: transposed when the config swaps, its
    staged operands 16-byte aligned when it stages (cutegen/staging.py), the batched K-slice GEMM with f32
    partials when it reduces separately (cutegen/split_k_reduce.py)."""
    from .split_k_reduce import sliced_problem
    from .staging import staged_problem
    problem = sliced_problem(problem, config)
    problem = staged_problem(problem, config)
    return transposed(problem) if config.swap_ab else problem
