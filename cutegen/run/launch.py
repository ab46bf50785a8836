"""The launch contract: what must hold of a call before it may reach the GPU."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import KernelConfig
from ..dtypes import DTYPES
from ..errors import CutegenError
from ..problem import GemmProblem
from ..legality.rule import RuleSet, Violation  # pure Python; no egglog (cutegen.run maps the folder)
from .geometry import INT_MAX, LaunchArgs, MatrixGeometry, Operand, geometries

# ------------------------------------------------------------------------------------------------
# The launch contract: what must hold of a call before it may reach the GPU
# ------------------------------------------------------------------------------------------------
#
# These are the problem-dependent rules of the rulebook, evaluated on the call's actual integers
# (pointers, leading dimensions, batch strides) rather than on a GemmProblem, which knows none of
# them. Each rule names its rulebook ID; the kernels' own check (templates/cutegen_abi.inc.j2)
# prefixes its refusal message with the same ID, and validation asserts that both agree.


LAUNCH_RULES = RuleSet("launch")


@dataclass(frozen=True)
class LaunchContext:
    problem: GemmProblem     # the kernel's problem: types, layouts, void C, bias
    args: LaunchArgs

    @property
    def operands(self) -> list[tuple[MatrixGeometry, Operand | None]]:
        g = geometries(self.problem, self.args.m, self.args.n, self.args.k)
        out = [(g["A"], self.args.a), (g["B"], self.args.b)]
        if "C" in g:
            out.append((g["C"], self.args.c))
        out.append((g["D"], self.args.d))
        return out

    def strides_checked(self, op: Operand) -> list[tuple[str, int]]:
        """The strides a TMA descriptor is built from: ld, and the batch stride when batch > 1
        (for a single matrix the ABI ignores the batch stride and the kernel uses the packed size)."""
        out = [("leading dimension", op.ld)]
        if self.args.batch > 1:
            out.append(("batch stride", op.batch_stride))
        return out


@LAUNCH_RULES.rule(
    "LAUNCH-EXTENT-RANGE", rulebook="A07",
    summary="1 <= M, N, K, batch <= 2^31-1 (CUTLASS's problem shape is int; TMA global dims are >= 1)",
    source="cutegen/abi.py; templates/cutegen_abi.inc.j2 (ABI-EXTENT); DRV cuTensorMapEncodeTiled globalDim")
def _extent_range(ctx: LaunchContext) -> str | None:
    a = ctx.args
    bad = [f"{name}={v}" for name, v in (("M", a.m), ("N", a.n), ("K", a.k), ("batch", a.batch))
           if not 1 <= v <= INT_MAX]
    return f"{', '.join(bad)} outside [1, 2^31-1]" if bad else None


@LAUNCH_RULES.rule(
    "LAUNCH-NULL-POINTER", rulebook="ABI",
    summary="A, B and D are not NULL; C is not NULL when the kernel has a C and beta != 0; "
            "bias is not NULL when the problem has a bias",
    source="cutegen/abi.py (C may be NULL only when C is void or beta == 0)")
def _null_pointers(ctx: LaunchContext) -> str | None:
    a = ctx.args
    bad = [name for name, p in (("A", a.a.ptr), ("B", a.b.ptr), ("D", a.d.ptr)) if p == 0]
    if ctx.problem.dtype_c != "void" and a.beta != 0.0 and (a.c is None or a.c.ptr == 0):
        bad.append(f"C (beta={a.beta:g})")
    if ctx.problem.bias and a.bias == 0:
        bad.append("bias")
    return f"NULL pointer for {', '.join(bad)}" if bad else None


@LAUNCH_RULES.rule(
    "TMA-GLOBAL-ADDRESS-ALIGN", rulebook="E18",
    summary="every base pointer (A, B, D, and C when given) is aligned to one vector of its operand: "
            "16 bytes for TMA operands, alignment x element bytes for cp.async and no-smem operands",
    source="rulebook E18/A06: cuTensorMapEncodeTiled globalAddress % 16 == 0; CUTLASS can_implement "
           "does not check it (cute/atom/copy_traits_sm90_tma.hpp:1041-1069 only asserts); cp.async and "
           "the no-smem epilogue access whole vectors (cute/arch/copy_sm80.hpp)")
def _address_align(ctx: LaunchContext) -> str | None:
    bad = []
    for g, op in ctx.operands:
        need = g.tma_alignment * g.element_bytes
        if op is not None and op.ptr != 0 and op.ptr % need:
            bad.append(f"{g.name}=0x{op.ptr:x} (address % {need} = {op.ptr % need})")
    return f"pointer not aligned to its vector: {', '.join(bad)}" if bad else None


def _alignment_reasons(ctx: LaunchContext, names: tuple[str, ...]) -> list[str]:
    bad = []
    for g, op in ctx.operands:
        if g.name not in names:
            continue
        a = g.tma_alignment
        if g.contiguous % a:
            bad.append(f"{g.name} contiguous extent {g.contiguous_name}={g.contiguous} % {a} = {g.contiguous % a}")
        if op is None or op.ptr == 0:
            continue  # no C given (beta == 0): only its extent is checked
        for what, s in ctx.strides_checked(op):
            if s % a:
                bad.append(f"{g.name} {what} {s} % {a} = {s % a}")
    return bad


@LAUNCH_RULES.rule(
    "CUTLASS-MAINLOOP-TMA-ALIGNMENT", rulebook="E15",
    summary="A's and B's contiguous extents, leading dimensions and (batch > 1) batch strides are "
            "multiples of 128 / bits(element) elements",
    source="rulebook E15: sm90_mma_tma_gmma_ss_warpspecialized.hpp:242-261 (can_implement, extents); "
           "copy_traits_sm90_tma.hpp:970-977 (strides a multiple of 16 bytes)")
def _mainloop_alignment(ctx: LaunchContext) -> str | None:
    bad = _alignment_reasons(ctx, ("A", "B"))
    return "; ".join(bad) + " (16 bytes of elements needed)" if bad else None


@LAUNCH_RULES.rule(
    "CUTLASS-EPILOGUE-TMA-ALIGNMENT", rulebook="E16",
    summary="D's (and a non-void C's) contiguous extent, leading dimension and (batch > 1) batch stride "
            "are multiples of 128 / bits(element) elements",
    source="rulebook E16: sm90_epilogue_tma_warpspecialized.hpp:324-379 (can_implement); "
           "copy_traits_sm90_tma.hpp:970-977")
def _epilogue_alignment(ctx: LaunchContext) -> str | None:
    bad = _alignment_reasons(ctx, ("C", "D"))
    return "; ".join(bad) + " (16 bytes of elements needed)" if bad else None


@LAUNCH_RULES.rule(
    "CUTLASS-EPILOGUE-VOID-C-BETA", rulebook="E16",
    summary="a kernel without C (dtype_c void) is called with beta == 0",
    source="rulebook E16: sm90_epilogue_tma_warpspecialized.hpp:366-375 (beta_implementable)")
def _void_c_beta(ctx: LaunchContext) -> str | None:
    if ctx.problem.dtype_c == "void" and ctx.args.beta != 0.0:
        return f"beta={ctx.args.beta:g} but the kernel has no C operand (dtype_c void)"
    return None


@LAUNCH_RULES.rule(
    "LAUNCH-STRIDE-NO-OVERLAP", rulebook="A10",
    summary="ld >= contiguous extent and (batch > 1) batch stride >= ld * outer extent, for every operand",
    source="rulebook A10 (advisory for the driver); cutegen/abi.py: matrices are stored as the problem says",
    enforced=False)
def _no_overlap(ctx: LaunchContext) -> str | None:
    bad = []
    for g, op in ctx.operands:
        if op is None or op.ptr == 0:
            continue
        if op.ld < g.contiguous:
            bad.append(f"{g.name} leading dimension {op.ld} < contiguous extent {g.contiguous_name}={g.contiguous}")
        elif ctx.args.batch > 1 and op.batch_stride < op.ld * g.outer:
            bad.append(f"{g.name} batch stride {op.batch_stride} < one matrix {op.ld}x{g.outer}")
    return "; ".join(bad) if bad else None


@LAUNCH_RULES.rule(
    "TMA-GLOBAL-STRIDE-RANGE", rulebook="A08",
    summary="every stride a TMA descriptor is built from is below 2^40 bytes",
    source="rulebook A08: cuTensorMapEncodeTiled globalStrides < 2^40; copy_traits_sm90_tma.hpp:970-977")
def _stride_range(ctx: LaunchContext) -> str | None:
    bad = []
    for g, op in ctx.operands:
        if op is None or op.ptr == 0:
            continue
        for what, s in ctx.strides_checked(op):
            if s * g.element_bytes >= 2**40 or s < 0:
                bad.append(f"{g.name} {what} {s} elements = {s * g.element_bytes} bytes")
    return "; ".join(bad) + " (must be in [0, 2^40) bytes)" if bad else None


@LAUNCH_RULES.rule(
    "LAUNCH-BIAS-ALIGN", rulebook="ABI",
    summary="the bias pointer is aligned to its element (D's type)",
    source="templates/cutegen_abi.inc.j2 (ABI-BIAS-ALIGN); CUDA: loads of a type need its alignment")
def _bias_align(ctx: LaunchContext) -> str | None:
    if ctx.problem.bias and ctx.args.bias:
        size = DTYPES[ctx.problem.dtype_d].bits // 8
        if ctx.args.bias % size:
            return f"bias=0x{ctx.args.bias:x} is not aligned to {size} bytes"
    return None


# Rules whose breach a kernel must itself refuse with status 1 (abi.CANNOT_IMPLEMENT) before it
# launches anything: the refusal probes of `cutegen validate` check agreement on these.
KERNEL_REFUSES = frozenset({"LAUNCH-EXTENT-RANGE", "LAUNCH-NULL-POINTER", "TMA-GLOBAL-ADDRESS-ALIGN",
                            "CUTLASS-MAINLOOP-TMA-ALIGNMENT", "CUTLASS-EPILOGUE-TMA-ALIGNMENT",
                            "CUTLASS-EPILOGUE-VOID-C-BETA", "LAUNCH-STRIDE-NO-OVERLAP",
                            "TMA-GLOBAL-STRIDE-RANGE", "LAUNCH-BIAS-ALIGN"})


class LaunchRefused(CutegenError):
    """A call breaks the launch contract; it was not sent to the GPU."""

    def __init__(self, violations: Sequence[Violation]):
        self.violations = list(violations)
        super().__init__("refused before launch: " + "; ".join(
            f"{v.rule_id}{f' ({rulebook_id(v.rule_id)})' if rulebook_id(v.rule_id) else ''}: {v.reason}"
            for v in self.violations))


class KernelStatusError(CutegenError):
    """cutegen_gemm returned a non-zero status (abi.STATUS)."""

    def __init__(self, status: int, message: str):
        from ..abi import STATUS
        self.status, self.message = status, message
        super().__init__(f"kernel returned status {status} ({STATUS.get(status, 'unknown')}): {message}")


def rulebook_id(rule_id: str) -> str:
    for r in LAUNCH_RULES:
        if r.id == rule_id:
            return r.rulebook
    return ""


def preflight(problem: GemmProblem, args: LaunchArgs, config: KernelConfig | None = None) -> list[Violation]:
    """Every rule the call breaks, launch contract first, then cutegen.legality's problem rules."""
    violations = LAUNCH_RULES.evaluate(LaunchContext(problem, args))
    if config is not None and not any(v.rule_id == "LAUNCH-EXTENT-RANGE" for v in violations):
        violations += legality_problem_violations(problem.replace(m=args.m, n=args.n, k=args.k, lda=0, ldb=0, ldc=0,
                                                                  batch=args.batch), config)
    return violations


def checked_gemm(lib, problem: GemmProblem, args: LaunchArgs, workspace: int, workspace_bytes: int,
                 stream: int, config: KernelConfig | None = None) -> None:
    """Call ``cutegen_gemm`` of a bound library (abi.bind) only if the launch contract holds.

    Raises LaunchRefused, naming every broken rule, without calling the library; raises
    KernelStatusError when the library itself returns a non-zero status.
    """
    violations = preflight(problem, args, config)
    if violations:
        raise LaunchRefused(violations)
    status = int(lib.cutegen_gemm(*args.abi_tuple(), workspace or None, workspace_bytes, stream or None))
    if status != 0:
        raw = lib.cutegen_last_error()
        raise KernelStatusError(status, raw.decode(errors="replace") if raw else "")


def legality_problem_violations(problem: GemmProblem, config: KernelConfig) -> list[Violation]:
    """The legality rules of ``cutegen.legality`` for the kernel's config at the call's size.

    ``check_config`` evaluates every rule at the given problem: the problem-dependent ones (CUTLASS
    can_implement extents, E15/E16; the tensor maps the kernel encodes at these global sizes) can
    break at a size other than the manifest's. The launch rules above add what depends on pointers
    and strides, which no GemmProblem carries.
    """
    fn = _legality_entry()
    if fn is None:
        return []
    out = fn(problem, config)
    out = getattr(out, "violations", out) or []
    return [v for v in out if isinstance(v, Violation) and v.enforced]


_LEGALITY_ENTRY: Any = False


def _legality_entry():
    """``cutegen.legality.check_config`` (None if the legality package cannot be imported)."""
    global _LEGALITY_ENTRY
    if _LEGALITY_ENTRY is False:
        try:
            from ..legality import check_config
            _LEGALITY_ENTRY = check_config
        except ImportError:
            _LEGALITY_ENTRY = None
    return _LEGALITY_ENTRY


def kernel_message_rule(message: str) -> str:
    """The rule ID a kernel's refusal message starts with ("E18: A pointer ..." -> "E18")."""
    head = message.strip().split(":", 1)[0].strip()
    return head if head and " " not in head else ""


def refusal_agrees(violations: Sequence[Violation], kernel_status: int, kernel_message: str) -> tuple[bool, str]:
    """Did the kernel refuse (status 1) a call the launch contract refuses, naming one of its rules?"""
    if kernel_status != 1:
        return False, f"kernel returned status {kernel_status}, expected 1 (cannot implement)"
    named = kernel_message_rule(kernel_message)
    ids = {v.rule_id for v in violations} | {rulebook_id(v.rule_id) for v in violations}
    # The kernel's can_implement message spans E15-E17; ABI-* are the ABI's own checks.
    if named == "E15-E17":
        named_ok = bool(ids & {"E15", "E16", "E17"})
    elif named.startswith("ABI-"):
        named_ok = bool(ids & {"ABI", "A07"})
    else:
        named_ok = named in ids
    if not named_ok:
        return False, f"kernel refused naming {named or 'no rule'} ({kernel_message!r}); preflight found " \
                      f"{sorted(v.rule_id for v in violations)}"
    return True, f"both refused ({named})"
