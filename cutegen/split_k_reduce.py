"""Split-K with a separate reduction: D = alpha * sum_i A_i B_i + beta * C over s K-slices.

For a tiny M x N with a huge K (256 x 256 x 65536) a data-parallel kernel has a handful of output
tiles for 132 SMs, so the K loop must be split. cutegen's stream-K kernels split it inside one
launch (CUTLASS's ``PersistentTileSchedulerSm90StreamK``, cutegen/launch_plan.py): the pieces of a
tile meet through the workspace in a serialized fix-up, the last piece waiting for the others. On
the H200 (2026-11-26, bench/results/diagnose/2026-11-26-nvidia-h200-diagnose.json) that kernel ran 42.1 us at
36% of DRAM peak where cuBLAS ran a split-K GEMM (21.8 us, 66% of DRAM peak) and then a separate
``splitKreduce_kernel`` (4.4 us): 26.3 us. This form is cuBLAS's: the GEMM writes every slice's f32
partial tile to the workspace with no waiting, and a second, tiny kernel sums them.

Why not CUTLASS's own separate reduction. CUTLASS 4.2's SM90 stream-K scheduler has the machinery
(``requires_separate_reduction``, ``separate_reduction_units_``, ``WorkTileInfo::setup_separate_reduction``:
gemm/kernel/sm90_tile_scheduler_stream_k.hpp:105-137, 389-391, 554-580; the cooperative kernel asks
``TileScheduler::requires_separate_reduction`` at sm90_gemm_tma_warpspecialized_cooperative.hpp:707),
but no argument reaches it: ``should_perform_separate_reduction`` is hard-wired to ``false``
("Separate reduction is temporarily disabled, pending fixes", gemm/kernel/tile_scheduler_params.h:1273-1276),
so ``separate_reduction_units_`` stays 0 for every ``Arguments``. Even enabled it would run the
reduction units inside the same launch, for stream-K decompositions only, not split-K. So the form is
built from pieces cutegen already has:

1. **A batched GEMM over the slices.** Slice i of A (B) starts i * K/s elements along K: for a
   K-major operand that is a batch stride of K/s elements, for an MN-major one K/s leading
   dimensions. The kernel is an ordinary persistent CUTLASS kernel written for ``sliced_problem``:
   K/s deep, s (x the caller's batch) batches, no C (void), D in f32 with rows of ``partial_ld``
   (the contiguous extent rounded up to 16 bytes), written into the workspace. TMA zero-fills past
   each slice's K extent (its descriptor's K is K/s), so a K that is not a multiple of the CTA
   tile's K is exact; K itself must split evenly (rule SPLITK-REDUCE-SLICES-DIVIDE-K: the slices are
   one batched launch, all K/s deep).
2. **A reduction kernel in the C ABI** (templates/cutegen_abi_split_k_reduce.inc.j2, like the
   staging transpose kernel): D = alpha * sum of the s partials (in slice order: deterministic) +
   beta * C, converted to D's type, every element once; any M, N, leading dimension and batch stride.

``split_k_slices`` (config field, omitted from the hash at 1) is the slice count: a compile-time
choice of the form, so ``cutegen_gemm`` keeps its signature and the runner, packs and bench call it
like any other kernel; the search picks s per problem (search/engine.py ``split_k_reduce_forms``).

Workspace (``cutegen_workspace_size`` reports it): the partials, batch-major then slice-major,
``batch * s * outer * partial_ld`` f32 values padded to 256 bytes, then CUTLASS's own workspace.
"""
from __future__ import annotations

from .problem import GemmProblem
from .smem import round_up

PARTIAL_DTYPE = "f32"
PARTIAL_BYTES = 4                   # f32 partials: the accumulator's type
PARTIAL_UNIT = 16 // PARTIAL_BYTES  # elements per 16 bytes: TMA stores rows of 16-byte multiples (A08)
WORKSPACE_ALIGN = 256               # the partials' region starts and ends where a cudaMalloc'd buffer would
INT_MAX = 2**31 - 1


def slices(config) -> int:
    """The slice count s of a configuration (1: the ordinary kernel)."""
    return int(getattr(config, "split_k_slices", 1))


def is_sliced(config) -> bool:
    return slices(config) > 1


def slice_k(k: int, s: int) -> int:
    """K extent of one slice (the batched GEMM's K); exact when s divides K (SPLITK-REDUCE-SLICES-DIVIDE-K)."""
    return -(-k // s)


def output_extents(problem: GemmProblem) -> tuple[int, int]:
    """(contiguous, outer) extents of D as stored: (N, M) for row-major D, (M, N) for column-major."""
    return (problem.n, problem.m) if problem.layout_c == "row" else (problem.m, problem.n)


def partial_ld(problem: GemmProblem) -> int:
    """Leading dimension (elements) of one partial: D's contiguous extent rounded up to 16 bytes of f32."""
    return round_up(output_extents(problem)[0], PARTIAL_UNIT)


def partial_stride(problem: GemmProblem) -> int:
    """Elements from one partial to the next (slice and batch): partial_ld x outer extent."""
    return partial_ld(problem) * output_extents(problem)[1]


def partial_bytes(problem: GemmProblem, s: int) -> int:
    """Bytes of every partial of every batch (unpadded)."""
    return problem.batch * s * partial_stride(problem) * PARTIAL_BYTES


def workspace_bytes(problem: GemmProblem, config) -> int:
    """Workspace bytes the partials take (0 for an ordinary kernel), padded to WORKSPACE_ALIGN; the ABI's
    ``cutegen_workspace_size`` adds CUTLASS's own (0 for the persistent scheduler)."""
    if not is_sliced(config):
        return 0
    return round_up(partial_bytes(problem, slices(config)), WORKSPACE_ALIGN)


def slice_stride_elements(problem: GemmProblem, op: str, s: int) -> int:
    """Elements from slice i of operand ``op`` ('a' or 'b') to slice i + 1: K/s along a K-major operand,
    K/s leading dimensions along an MN-major one. It is the batch stride of the batched GEMM's TMA
    descriptor for that operand."""
    k_major = problem.a_k_major if op == "a" else problem.b_k_major
    ks = slice_k(problem.k, s)
    return ks if k_major else ks * problem.leading_dimension(op)


def sliced_problem(problem: GemmProblem, config) -> GemmProblem:
    """The problem the kernel's CUTLASS types are written for: K/s deep, batch x s batches, no C, D in
    f32 with 16-byte rows (the workspace's partials), alpha 1 and beta 0. Unchanged for an ordinary
    kernel. The A and B leading dimensions stay the caller's (a slice is a view, not a copy)."""
    s = slices(config)
    if s <= 1:
        return problem
    return problem.replace(
        k=slice_k(problem.k, s), batch=min(problem.batch * s, INT_MAX),
        lda=problem.leading_dimension("a"), ldb=problem.leading_dimension("b"),
        dtype_c="void", dtype_d=PARTIAL_DTYPE, alignment_c=PARTIAL_UNIT, ldc=partial_ld(problem),
        alpha=1.0, beta=0.0)


def moved_bytes(problem: GemmProblem, s: int) -> int:
    """Bytes the reduction kernel reads and writes: every partial once, C when beta may be non-zero, D once."""
    from .dtypes import DTYPES

    out = problem.m * problem.n * problem.batch
    c = 0 if problem.dtype_c == "void" else DTYPES[problem.dtype_c].bits // 8
    return out * (s * PARTIAL_BYTES + c + DTYPES[problem.dtype_d].bits // 8)


def describe(problem: GemmProblem, config) -> dict:
    """What the manifest records of the form."""
    s = slices(config)
    return {
        "slices": s,
        "how": ("the kernel computes the K extent in slices of K/s as one batched GEMM (slice i of A and B "
                "starts i * K/s along K) writing f32 partials into the workspace; the C ABI's reduction kernel "
                "then writes D = alpha * (sum of the partials, in slice order) + beta * C"),
        "partial_ld": partial_ld(problem),
        "workspace_bytes": workspace_bytes(problem, config),
    }
