"""Operand staging: D = A B with an unaligned A is the same GEMM on A', a restrided copy of A.

TMA reads an operand only when its global strides are multiples of 16 bytes (tensor maps, rule A08;
``SM90-TMA-ALIGNMENT``). When A's (or B's) leading dimension or contiguous extent is not, the C ABI
of a kernel with ``config.stage_a`` (``stage_b``) first copies the caller's operand into the
caller-provided workspace with ``cudaMemcpy2DAsync`` (device to device, any source pitch, capturable
in a CUDA graph), giving it the leading dimension ``staged_ld``: the contiguous extent rounded up to
16 bytes. The copy keeps the extents: TMA zero-fills a box past the tensor's extent, so an odd K
needs no zero padding, and the padding columns of the copy are never read. The kernel is then an
ordinary TMA kernel compiled for 16-byte alignment of that operand.

CUTLASS's ``can_implement`` checks an operand's contiguous *extent* against the alignment as a
stand-in for its strides (NOTES.md, E15/E16). For a staged operand the strides are aligned by
construction and the extent need not be, so the ABI asks ``can_implement`` about the extents rounded
up to the alignment (``staged_problem`` is that view: the problem the kernel's types, rules and cost
are judged on) and runs the real ones.

Workspace layout (the ABI's ``cutegen_workspace_size`` reports the sum): the staged copy of A, then
of B, each padded to ``WORKSPACE_ALIGN`` bytes, then CUTLASS's own workspace (stream-K partials).

Transposing stage (``config.stage_transpose_a`` / ``_b``): WGMMA reads 8-bit and tf32 operands from
shared memory only K-major, and CUTLASS 4.2 sends every other majorness of them to its register-A
mainloop (rules SM90-RS-ROUTE, SM90-RS-TRANSPOSE-B-K128; it faulted for fp8, NOTES.md E05). A staged
MN-major operand of such a problem is instead written K-major into the workspace by a small tiled
transpose kernel of the ABI (32x32 tiles through shared memory), so the kernel is an ordinary TN TMA
kernel. ``copy_view`` is the problem with the copies' layouts (transposed operands K-major), the view
every size of the workspace is computed on; ``staged_problem`` starts from it.
"""
from __future__ import annotations

from .dtypes import DTYPES
from .problem import GemmProblem, default_alignment
from .smem import round_up

STAGE_BYTES = 16          # TMA's global-stride granule (cuTensorMapEncodeTiled: globalStrides % 16 == 0)
WORKSPACE_ALIGN = 256     # each region of the workspace starts where a cudaMalloc'd buffer would
OPERANDS = ("a", "b")


def staged_operands(config) -> tuple[str, ...]:
    """The operands ('a', 'b') the configuration stages."""
    return tuple(op for op in OPERANDS if getattr(config, f"stage_{op}", False))


def transposed_operands(config) -> tuple[str, ...]:
    """The staged operands whose copy is transposed (written K-major)."""
    return tuple(op for op in staged_operands(config) if getattr(config, f"stage_transpose_{op}", False))


def needs_k_major(problem: GemmProblem) -> bool:
    """Does WGMMA read this problem's operands from shared memory only K-major? Everything but two
    16-bit inputs (CUTLASS's is_use_rmem_A routes any other majorness to the RS mainloop)."""
    return not (DTYPES[problem.dtype_a].bits == 16 and DTYPES[problem.dtype_b].bits == 16)


def k_major(problem: GemmProblem, op: str) -> bool:
    return problem.a_k_major if op == "a" else problem.b_k_major


def needs_transpose(problem: GemmProblem, op: str) -> bool:
    """Must a kernel for ``problem`` read ``op`` through a transposing stage (8-bit / tf32, MN-major)?"""
    return needs_k_major(problem) and not k_major(problem, op)


def stage_flags(problem: GemmProblem, ops) -> dict[str, bool]:
    """The KernelConfig fields that stage ``ops`` of ``problem``: each staged, and transposed where the
    problem needs it (the only legal copy of such an operand; STAGE-TRANSPOSE-NEEDED)."""
    out = {}
    for op in ops:
        out[f"stage_{op}"] = True
        if needs_transpose(problem, op):
            out[f"stage_transpose_{op}"] = True
    return out


_K_MAJOR_LAYOUT = {"a": "row", "b": "col"}


def copy_view(problem: GemmProblem, config) -> GemmProblem:
    """The problem with each transposed operand as its copy stores it: K-major, rows ``staged_ld``
    apart (16-byte aligned, so stated at 16 bytes' alignment). Unchanged (the same object) when
    nothing is transposed."""
    ops = transposed_operands(config)
    if not ops:
        return problem
    changes: dict = {}
    for op in ops:
        changes.update({f"layout_{op}": _K_MAJOR_LAYOUT[op], f"ld{op}": 0,
                        f"alignment_{op}": default_alignment(getattr(problem, f"dtype_{op}"))})
    return problem.replace(**changes)


def element_bytes(problem: GemmProblem, op: str) -> int:
    return DTYPES[getattr(problem, f"dtype_{op}")].bits // 8


def tma_aligned(problem: GemmProblem, op: str) -> bool:
    """Are the operand's rows already 16-byte aligned (staging them would buy nothing)?"""
    return getattr(problem, f"alignment_{op}") * DTYPES[getattr(problem, f"dtype_{op}")].bits % 128 == 0


def outer_extent(problem: GemmProblem, op: str) -> int:
    """The operand's extent with the leading-dimension stride: the rows of the copy."""
    if op == "a":
        return problem.m if problem.layout_a == "row" else problem.k
    return problem.n if problem.layout_b == "col" else problem.k


def staged_ld(problem: GemmProblem, op: str) -> int:
    """Leading dimension (elements) of the staged copy: the contiguous extent rounded up to 16 bytes."""
    return round_up(problem.contiguous_extent(op)[1], STAGE_BYTES // element_bytes(problem, op))


def copy_bytes(problem: GemmProblem, op: str) -> int:
    """Bytes of one staged copy in the workspace (every batch, padding columns included)."""
    return staged_ld(problem, op) * outer_extent(problem, op) * problem.batch * element_bytes(problem, op)


def moved_bytes(problem: GemmProblem, op: str) -> int:
    """Bytes the copy reads plus writes: each row's contiguous extent, once each way."""
    return 2 * problem.contiguous_extent(op)[1] * outer_extent(problem, op) * problem.batch * element_bytes(problem, op)


def workspace_layout(problem: GemmProblem, config) -> dict[str, tuple[int, int]]:
    """{op: (offset, bytes)} of each staged copy in the workspace; CUTLASS's own follows at
    ``staging_workspace_bytes``."""
    problem = copy_view(problem, config)
    out, offset = {}, 0
    for op in staged_operands(config):
        n = copy_bytes(problem, op)
        out[op] = (offset, n)
        offset += round_up(n, WORKSPACE_ALIGN)
    return out


def staging_workspace_bytes(problem: GemmProblem, config) -> int:
    """Workspace bytes the staged copies take (0 without staging), each padded to WORKSPACE_ALIGN."""
    return sum(round_up(n, WORKSPACE_ALIGN) for _, n in workspace_layout(problem, config).values())


def staged_problem(problem: GemmProblem, config) -> GemmProblem:
    """The problem as the kernel sees it: each staged operand 16-byte aligned and packed at
    ``staged_ld``, its contiguous extent rounded up to the alignment (the view CUTLASS's
    ``can_implement`` is asked about; see the module docstring). Unchanged without staging;
    idempotent."""
    ops = staged_operands(config)
    if not ops:
        return problem
    from .errors import FieldError

    problem = copy_view(problem, config)
    changes: dict = {}
    rounded: dict = {}
    for op in ops:
        align = default_alignment(getattr(problem, f"dtype_{op}"))
        changes[f"alignment_{op}"] = align
        changes[f"ld{op}"] = 0
        dim, ext = problem.contiguous_extent(op)
        rounded[dim.lower()] = max(rounded.get(dim.lower(), 0), round_up(ext, align))
    try:
        return problem.replace(**changes, **rounded)
    except FieldError:
        # an operand that is not staged has an explicit leading dimension the rounded extent would
        # overrun: keep the real extents (the rules then judge the real, unrounded view)
        return problem.replace(**changes)


def describe(config) -> str:
    """The words cutegen_describe and the manifest use: 'A', 'B', 'A,B' or ''."""
    return ",".join(op.upper() for op in staged_operands(config))


def describe_transposed(config) -> str:
    """The transposed operands in the same words: 'A', 'B', 'A,B' or ''."""
    return ",".join(op.upper() for op in transposed_operands(config))
