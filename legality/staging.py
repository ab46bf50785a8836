"""Operand staging (cutegen/staging.py): when the C ABI may copy A or B into the workspace first.

A staged configuration is judged in two steps (``cutegen.legality.check_config``): the rules here,
on the problem as the caller states it; then every other rule on ``staging.staged_problem``, the
16-byte aligned view the kernel's TMA mainloop is written for. The copy is ``cudaMemcpy2DAsync``
(device to device): its contract is the CUDA Runtime API's, and the copy it makes must satisfy the
tensor-map stride rules the kernel's TMA descriptors are encoded with.

Evaluated on ``StagingContext``; every rule holds for a configuration that stages nothing.
"""
from __future__ import annotations

from .rule import RuleSet

STAGING_RULES = RuleSet("staging")
_rule = STAGING_RULES.rule
_RT = "CUDA Runtime API 13.0, cudaMemcpy2DAsync"
# cudaDeviceProp::memPitch, "the maximum pitch in bytes allowed by the memory copy functions that
# involve memory regions allocated through cudaMallocPitch()"; cudaMemcpy2D "returns an error if
# dpitch or spitch exceeds the maximum allowed". 2^31 - 1 on every CUDA device to date (Hopper
# included); bench/gpu_stage.sh prints the device's value.
MAX_PITCH_BYTES = 2**31 - 1
TMA_STRIDE_LIMIT = 2**40          # cuTensorMapEncodeTiled: globalStrides[i] < 2^40 (rulebook A08)


class StagingContext:
    """The problem as the caller states it, the configuration, and (for STAGE-WORKSPACE) the bytes
    of workspace a caller passes (None: not a call, only a configuration)."""

    __slots__ = ("problem", "config", "workspace_bytes")

    def __init__(self, problem, config, workspace_bytes: int | None = None):
        self.problem = problem
        self.config = config
        self.workspace_bytes = workspace_bytes


def _ops(c):
    from cutegen.staging import staged_operands
    return staged_operands(c.config)


def _transposed(c):
    from cutegen.staging import transposed_operands
    return transposed_operands(c.config)


def _flagged_transposes(c):
    """Operands whose stage_transpose_* is set, staged or not."""
    return tuple(op for op in ("a", "b") if getattr(c.config, f"stage_transpose_{op}", False))


@_rule("STAGE-ALIGNED", rulebook="S01", source="cutegen/staging.py: staging exists to give TMA 16-byte strides "
       "(cuTensorMapEncodeTiled globalStrides % 16 == 0, rulebook A08); a copy of rows that already have them "
       "costs bandwidth and buys nothing",
       summary="an operand that needs no transposition is staged only when its rows are not 16-byte aligned "
               "(alignment x bits % 128 != 0)")
def _aligned(c):
    from cutegen.staging import needs_transpose, tma_aligned
    for op in _ops(c):
        if op in _transposed(c) or needs_transpose(c.problem, op):
            continue                    # staged for its majorness, not its alignment (STAGE-TRANSPOSE-NEEDED)
        if tma_aligned(c.problem, op):
            align = getattr(c.problem, f"alignment_{op}")
            return (f"stage_{op}: {op.upper()} is already 16-byte aligned (alignment_{op}={align} elements of "
                    f"{getattr(c.problem, f'dtype_{op}')}); staging it is pointless")
    return None


@_rule("STAGE-CP-ASYNC", rulebook="S02", source="cutegen/staging.py: the copy exists so that a TMA mainloop can read the "
       "operand; the cp.async mainloop reads any alignment itself (legality/cp_async.py)",
       summary="a staged operand is read by a TMA mainloop (mainloop_load=tma)")
def _cp_async(c):
    if _ops(c) and c.config.mainloop_load != "tma":
        return (f"stage_{'/'.join(_ops(c))} with mainloop_load={c.config.mainloop_load}: the copy is for a TMA "
                "mainloop; cp.async reads the unaligned operand as it is")
    return None


@_rule("STAGE-SWAP-AB", rulebook="S03", source="templates/cutegen_abi.inc.j2: the ABI stages the caller's operands and is not "
       "rendered together with the swap-AB exchange (cutegen/swap_ab.py)",
       summary="a staged kernel does not also swap A and B")
def _swap(c):
    if _ops(c) and c.config.swap_ab:
        return "stage_a/stage_b with swap_ab: staging is not rendered for swapped kernels"
    return None


@_rule("STAGE-PITCH", rulebook="S04", source=f"{_RT}: 'width must not exceed either dpitch or spitch'; cudaErrorInvalidPitchValue "
       "when dpitch or spitch exceeds the maximum allowed (cudaDeviceProp::memPitch = 2^31-1 bytes)",
       summary="a copy made with cudaMemcpy2D (not transposed) has source pitch (ld x bytes) and staged pitch "
               "(staged_ld x bytes) at most 2^31-1 bytes")
def _pitch(c):
    from cutegen.staging import element_bytes, staged_ld
    p = c.problem
    for op in _ops(c):
        if op in _transposed(c):
            continue                    # copied by the ABI's transpose kernel, not cudaMemcpy2D
        e = element_bytes(p, op)
        for what, ld in (("source", p.leading_dimension(op)), ("staged", staged_ld(p, op))):
            if ld * e > MAX_PITCH_BYTES:
                return (f"stage_{op}: {what} pitch {ld} x {e} B = {ld * e} B exceeds cudaMemcpy2D's maximum pitch "
                        f"{MAX_PITCH_BYTES} B")
    return None


@_rule("STAGE-TMA-STRIDE", rulebook="S05", source="CUDA Driver API cuTensorMapEncodeTiled: globalStrides[i] a "
       "multiple of 16 and < 2^40 (the staged copy's leading dimension and batch stride are the staged "
       "operand's TMA strides)",
       summary="the staged copy's strides (staged_ld and, batched, staged_ld x rows) are multiples of 16 bytes "
               "below 2^40 bytes")
def _tma_stride(c):
    from cutegen.staging import copy_view, element_bytes, outer_extent, staged_ld
    p = copy_view(c.problem, c.config)      # the copy's own layout (K-major where it is transposed)
    for op in _ops(c):
        e = element_bytes(p, op)
        strides = [("leading dimension", staged_ld(p, op) * e)]
        if p.batch > 1:
            strides.append(("batch stride", staged_ld(p, op) * outer_extent(p, op) * e))
        for what, s in strides:
            if s % 16 or s >= TMA_STRIDE_LIMIT:
                return f"stage_{op}: the staged copy's {what} of {s} B is not a multiple of 16 B below 2^40 B"
    return None


@_rule("STAGE-WORKSPACE", rulebook="S06", source="templates/cutegen_abi.inc.j2 gemm(): the staged copies live in the caller's "
       "workspace, ahead of CUTLASS's own; cutegen_workspace_size reports both (cutegen/staging.py)",
       summary="a call passes at least the staged copies' bytes (each padded to 256 B) of workspace")
def _workspace(c):
    from cutegen.staging import staging_workspace_bytes
    if c.workspace_bytes is None or not _ops(c):
        return None
    need = staging_workspace_bytes(c.problem, c.config)
    if c.workspace_bytes < need:
        return (f"workspace of {c.workspace_bytes} B is smaller than the {need} B the staged copies of "
                f"{'/'.join(o.upper() for o in _ops(c))} need")
    return None


_TR = ("cutegen/staging.py: the transposing stage exists because WGMMA reads 8-bit and tf32 operands from shared "
       "memory only K-major (PTX ISA wgmma.mma_async: the imm-trans-a/imm-trans-b operands exist only in the "
       ".f16/.bf16 forms; "
       "CUTLASS 4.2 sm90_common.inl is_use_rmem_A routes every other majorness to the RS mainloop)")


@_rule("STAGE-TRANSPOSE-DTYPE", rulebook="S07", source=_TR + "; a 16-bit or K-major operand is read by TMA as it is",
       summary="an operand is transposed only when the problem's dtypes need K-major operands (not two 16-bit "
               "inputs) and the operand is MN-major")
def _transpose_dtype(c):
    from cutegen.staging import k_major, needs_k_major
    p = c.problem
    for op in _flagged_transposes(c):
        if k_major(p, op):
            return (f"stage_transpose_{op}: {op.upper()} is already K-major (layout_{op}="
                    f"{getattr(p, f'layout_{op}')}); there is nothing to transpose")
        if not needs_k_major(p):
            return (f"stage_transpose_{op}: dtype_a={p.dtype_a}, dtype_b={p.dtype_b} are 16-bit: WGMMA reads an "
                    f"MN-major {op.upper()} from shared memory directly (a TMA kernel without the copy is legal and faster)")
    return None


@_rule("STAGE-TRANSPOSE-STAGED", rulebook="S08", source="cutegen/config.py: stage_transpose_a/b say how a staged "
       "operand is copied; the copy exists only with stage_a/b",
       summary="stage_transpose_a (b) is set only together with stage_a (b)")
def _transpose_staged(c):
    for op in _flagged_transposes(c):
        if not getattr(c.config, f"stage_{op}", False):
            return f"stage_transpose_{op} without stage_{op}: only a staged operand is copied, so only one can be transposed"
    return None


@_rule("STAGE-TRANSPOSE-NEEDED", rulebook="S09", source=_TR + "; rule SM90-RS-ROUTE (NOTES.md E05: non-TN fp8 "
       "faulted in the RS mainloop)",
       summary="a staged MN-major operand of a problem that needs K-major operands (8-bit, tf32) is transposed")
def _transpose_needed(c):
    from cutegen.staging import needs_transpose
    p = c.problem
    for op in _ops(c):
        if needs_transpose(p, op) and op not in _transposed(c):
            return (f"stage_{op} without stage_transpose_{op}: {op.upper()} is MN-major (layout_{op}="
                    f"{getattr(p, f'layout_{op}')}) {getattr(p, f'dtype_{op}')}, and a copy that keeps it MN-major "
                    "is still not readable by WGMMA from shared memory")
    return None


def check_staging(problem, config, workspace_bytes: int | None = None):
    """The staging rules a configuration (and, given, a call's workspace) breaks; empty when it stages
    nothing."""
    probe = StagingContext(problem, config)
    if not _ops(probe) and not _flagged_transposes(probe):
        return []
    ctx = StagingContext(problem, config, workspace_bytes)
    return [v for v in (r.evaluate(ctx) for r in STAGING_RULES.rules) if v is not None]
