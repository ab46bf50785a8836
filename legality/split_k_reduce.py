"""Split-K with a separate reduction (cutegen/split_k_reduce.py): what the form requires.

A configuration with ``split_k_slices = s > 1`` is judged in two steps (``cutegen.legality.check_config``):
the rules here, on the problem as the caller states it; then every other rule on
``split_k_reduce.sliced_problem``, the batched GEMM (K/s deep, s batches, f32 D in the workspace, no C)
the kernel's CUTLASS types are written for.

The slices are batches of one TMA descriptor per operand: slice i starts ``slice_stride_elements``
after slice i - 1, and that distance is the descriptor's batch stride (cuTensorMapEncodeTiled
``globalStrides``: multiples of 16 bytes below 2^40, rulebook A08). The reduction kernel of the C ABI
applies alpha, beta and C only: no bias, no activation.

Evaluated on ``SplitKReduceContext``; every rule holds for a configuration with one slice.
"""
from __future__ import annotations

from .rule import RuleSet

SPLIT_K_REDUCE_RULES = RuleSet("split_k_reduce")
_rule = SPLIT_K_REDUCE_RULES.rule
_DRV = "CUDA Driver API cuTensorMapEncodeTiled: globalStrides[i] % 16 == 0 and < 2^40 (rulebook A08)"
_ABI = "templates/cutegen_abi_split_k_reduce.inc.j2"
TMA_STRIDE_LIMIT = 2**40


class SplitKReduceContext:
    """The problem as the caller states it, the configuration, and (for SPLITK-REDUCE-WORKSPACE) the bytes
    of workspace a caller passes (None: not a call, only a configuration)."""

    __slots__ = ("problem", "config", "workspace_bytes", "s")

    def __init__(self, problem, config, workspace_bytes: int | None = None):
        from cutegen.split_k_reduce import slices
        self.problem = problem
        self.config = config
        self.workspace_bytes = workspace_bytes
        self.s = slices(config)


def _bytes(problem, op: str) -> int:
    from cutegen.dtypes import DTYPES
    return DTYPES[getattr(problem, f"dtype_{op}")].bits // 8


@_rule("SPLITK-REDUCE-SLICES-DIVIDE-K", rulebook="R01",
       source=f"cutegen/split_k_reduce.py: the s slices are the batches of one batched GEMM, so every slice has "
              f"the same K extent K/s; with a remainder the last slice's TMA box would read the next row's "
              f"elements (its descriptor's K extent is K/s, not what is left of K). {_ABI} refuses such K",
       summary="K % split_k_slices == 0")
def _divide_k(c):
    k = c.problem.k
    if c.s > 1 and k % c.s:
        return (f"K={k} is not a multiple of split_k_slices={c.s} (K % s = {k % c.s}): the slices are one "
                f"batched GEMM of equal K extents")
    return None


@_rule("SPLITK-REDUCE-SLICE-STRIDE-ALIGN", rulebook="R02",
       source=f"{_DRV}; the slice stride is the batch stride of A's and B's TMA descriptors "
              "(cutegen/split_k_reduce.py slice_stride_elements)",
       summary="for A and B, the slice stride (K/s elements along a K-major operand, K/s leading dimensions "
               "along an MN-major one) is a multiple of 16 bytes")
def _slice_align(c):
    from cutegen.split_k_reduce import slice_stride_elements
    if c.s <= 1 or c.problem.k % c.s:
        return None                     # SPLITK-REDUCE-SLICES-DIVIDE-K says why
    for op in ("a", "b"):
        e = _bytes(c.problem, op)
        stride = slice_stride_elements(c.problem, op, c.s) * e
        if stride % 16:
            return (f"{op.upper()}'s slice stride {stride // e} elements x {e} B = {stride} B is not a multiple of "
                    f"16 B (K={c.problem.k}, split_k_slices={c.s}, K/s={c.problem.k // c.s})")
    return None


@_rule("SPLITK-REDUCE-SLICE-STRIDE-RANGE", rulebook="R03",
       source=f"{_DRV}; the slice stride is the batch stride of A's and B's TMA descriptors",
       summary="for A and B, the slice stride in bytes is below 2^40")
def _slice_range(c):
    from cutegen.split_k_reduce import slice_stride_elements
    if c.s <= 1:
        return None
    for op in ("a", "b"):
        stride = slice_stride_elements(c.problem, op, c.s) * _bytes(c.problem, op)
        if stride >= TMA_STRIDE_LIMIT:
            return f"{op.upper()}'s slice stride of {stride} B is 2^40 bytes or more"
    return None


@_rule("SPLITK-REDUCE-PARTIAL-STRIDE-RANGE", rulebook="R04",
       source=f"{_DRV}; the partials are the batched GEMM's D: rows partial_ld apart, partials partial_ld x "
              "outer extent apart (cutegen/split_k_reduce.py)",
       summary="one f32 partial (partial_ld x D's outer extent x 4 bytes) is below 2^40 bytes")
def _partial_range(c):
    from cutegen.split_k_reduce import PARTIAL_BYTES, partial_stride
    if c.s > 1 and partial_stride(c.problem) * PARTIAL_BYTES >= TMA_STRIDE_LIMIT:
        return f"one f32 partial of {partial_stride(c.problem) * PARTIAL_BYTES} B is 2^40 bytes or more"
    return None


@_rule("SPLITK-REDUCE-EPILOGUE", rulebook="R05",
       source=f"{_ABI}: the reduction kernel computes D = alpha * sum + beta * C only; the GEMM writes raw f32 "
              "partials, so no bias or activation can be applied before the slices are summed",
       summary="a split-K-reduce kernel's problem has no bias and activation none")
def _epilogue(c):
    p = c.problem
    if c.s > 1 and (p.bias or p.activation != "none"):
        return (f"bias={p.bias}, activation={p.activation}: the separate reduction applies alpha, beta and C "
                "only")
    return None


@_rule("SPLITK-REDUCE-SCHEDULER", rulebook="R06",
       source=f"{_ABI}: the slices already split K; the stream-K scheduler would split or respread them again "
              "through its own workspace, and the form's ABI passes no launch plan (cutegen/launch_plan.py)",
       summary="a split-K-reduce kernel uses tile_scheduler persistent")
def _scheduler(c):
    if c.s > 1 and c.config.tile_scheduler != "persistent":
        return f"split_k_slices={c.s} with tile_scheduler={c.config.tile_scheduler}: the form runs the persistent scheduler"
    return None


@_rule("SPLITK-REDUCE-MAINLOOP-LOAD", rulebook="R07",
       source="cutegen/split_k_reduce.py: the slices are addressed as batches of A's and B's TMA descriptors "
              "(rules R02, R03 are TMA's); the cp.async mainloop is not rendered for the form",
       summary="a split-K-reduce kernel reads A and B by TMA (mainloop_load tma)")
def _load(c):
    if c.s > 1 and c.config.mainloop_load != "tma":
        return f"split_k_slices={c.s} with mainloop_load={c.config.mainloop_load}: the form slices TMA descriptors"
    return None


@_rule("SPLITK-REDUCE-SWAP-AB", rulebook="R08",
       source=f"{_ABI}: the form's ABI does not render the swap-AB exchange (cutegen/swap_ab.py); swapping "
              "is pointless here anyway, D's partials are reduced in D's own layout",
       summary="a split-K-reduce kernel does not also swap A and B")
def _swap(c):
    if c.s > 1 and c.config.swap_ab:
        return f"split_k_slices={c.s} with swap_ab: the separate reduction is not rendered for swapped kernels"
    return None


@_rule("SPLITK-REDUCE-STAGING", rulebook="R09",
       source=f"{_ABI}: the form's ABI does not render operand staging (cutegen/staging.py); a staged copy and "
              "the partials would share the workspace",
       summary="a split-K-reduce kernel stages no operand")
def _staging(c):
    cfg = c.config
    if c.s > 1 and (cfg.stage_a or cfg.stage_b or cfg.stage_transpose_a or cfg.stage_transpose_b):
        return f"split_k_slices={c.s} with a staged operand: staging is not rendered for the form"
    return None


@_rule("SPLITK-REDUCE-WORKSPACE", rulebook="R10",
       source=f"{_ABI} gemm(): the f32 partials live in the caller's workspace, ahead of CUTLASS's own; "
              "cutegen_workspace_size reports both (cutegen/split_k_reduce.py workspace_bytes)",
       summary="a call passes at least batch x s x partial_ld x outer x 4 bytes (padded to 256) of workspace")
def _workspace(c):
    from cutegen.split_k_reduce import workspace_bytes
    if c.workspace_bytes is None or c.s <= 1:
        return None
    need = workspace_bytes(c.problem, c.config)
    if c.workspace_bytes < need:
        return (f"workspace of {c.workspace_bytes} B is smaller than the {need} B the {c.s} f32 partials of "
                f"{c.problem.m}x{c.problem.n} (batch {c.problem.batch}) need")
    return None


@_rule("SPLITK-REDUCE-SLICE-KBLOCK", rulebook="R11", enforced=False,
       source="cutegen/split_k_reduce.py: a slice shorter than one k-block of the CTA tile computes zero-filled "
              "k-block columns (TMA fills past the slice's K) and writes a whole partial for little work",
       summary="K/s >= Tile_K (a slice holds at least one whole k-block); below it the form is legal but wasteful")
def _kblock(c):
    if c.s > 1 and c.problem.k % c.s == 0 and c.problem.k // c.s < c.config.tile_shape[2]:
        return (f"K/s = {c.problem.k // c.s} < Tile_K={c.config.tile_shape[2]}: each slice is less than one k-block")
    return None


def check_split_k_reduce(problem, config, workspace_bytes: int | None = None):
    """The split-K-reduce rules a configuration (and, given, a call's workspace) breaks, enforced or not;
    empty for a configuration with one slice."""
    ctx = SplitKReduceContext(problem, config, workspace_bytes)
    if ctx.s <= 1:
        return []
    return [v for v in (r.evaluate(ctx) for r in SPLIT_K_REDUCE_RULES.rules) if v is not None]
