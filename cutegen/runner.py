"""Running built kernels: the launch contract, validation plans, tolerances and the watchdog.

A kernel is a shared library with the C ABI of ``cutegen.abi`` and, beside it, a ``manifest.json``
(problem + config). Everything here is plain Python and runs without a GPU: the GPU work itself
(torch tensors, ctypes calls, CUDA events) lives in ``cutegen._runner_worker`` and runs in a spawned
child process, so that a kernel which hangs or faults costs one child, not the whole run.

Nothing here imports torch, egglog or the search at module level: the GPU machine has neither
egglog nor this package installed (it runs the working tree through ``PYTHONPATH``).
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from .config import KernelConfig
from .dtypes import DTYPES
from .errors import CutegenError, FieldError
from .problem import GemmProblem

# Dense bf16/f16 tensor-core peak of an H100 SXM by the datasheet (989.4 TFLOP/s); the figure every
# TFLOP/s number is held against.
H100_SXM_DENSE_BF16_PEAK_TFLOPS = 989.4

# ------------------------------------------------------------------------------------------------
# Tolerances
# ------------------------------------------------------------------------------------------------

# Relative Frobenius error allowed against a float32 reference computed from the same (already
# quantized) inputs, by element type. Issue 5: 1e-2 for 16- and 8-bit inputs, 1e-3 for tf32.
TOLERANCE = {"bf16": 1e-2, "f16": 1e-2, "e4m3": 1e-2, "e5m2": 1e-2, "tf32": 1e-3}


def tolerance(problem: GemmProblem) -> float:
    """The loosest tolerance of the types the result passes through.

    A tf32 GEMM written to bf16 is rounded to 8 mantissa bits at the end (about 1e-3 relative by
    itself), so D's type counts as well as the inputs'; an f32 D adds no rounding of its own.
    """
    types = [problem.dtype_a, problem.dtype_b]
    if problem.dtype_d != "f32":
        types.append(problem.dtype_d)
    tol = max(TOLERANCE[t] for t in types)
    if problem.fp8_fast_accum:
        tol = max(tol, FP8_FAST_ACCUM_TOLERANCE)
    return tol


# FP8 fast accumulation keeps the sum in the WGMMA accumulator alone (no promotion into a second f32
# copy). The CuTe DSL FP8 kernels accumulate that way and stayed inside 1e-2 on the H200 up to
# K = 32768 (NOTES.md, DSL vs C++), so the FP8 tolerance stands; the validation plan checks it per kernel.
FP8_FAST_ACCUM_TOLERANCE = 1e-2


# ------------------------------------------------------------------------------------------------
# One call of cutegen_gemm, as integers
# ------------------------------------------------------------------------------------------------

INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Operand:
    """Where one matrix of a call lives: base address, leading dimension, batch stride (elements)."""
    ptr: int
    ld: int
    batch_stride: int


@dataclass(frozen=True)
class LaunchArgs:
    """The arguments of one ``cutegen_gemm`` call, less the workspace and the stream."""
    m: int
    n: int
    k: int
    batch: int
    a: Operand
    b: Operand
    c: Operand | None      # None: NULL C pointer
    d: Operand
    alpha: float = 1.0
    beta: float = 0.0
    bias: int = 0          # device address of the bias vector, 0 for NULL

    def abi_tuple(self) -> tuple:
        """Positional arguments of cutegen_gemm up to and including ``bias`` (abi.GEMM_ARGTYPES)."""
        c = self.c or Operand(0, 0, 0)
        return (self.a.ptr, self.b.ptr, c.ptr, self.d.ptr, self.m, self.n, self.k, self.batch,
                self.a.ld, self.b.ld, c.ld, self.d.ld,
                self.a.batch_stride, self.b.batch_stride, c.batch_stride, self.d.batch_stride,
                self.alpha, self.beta, self.bias)


@dataclass(frozen=True)
class MatrixGeometry:
    """A logical rows x cols matrix of a GEMM operand and the extents its storage order implies."""
    name: str              # A, B, C or D
    dtype: str
    rows: int
    cols: int
    row_major: bool
    alignment: int = 0     # elements the kernel reads/writes this operand in; 0: 16 bytes' worth (TMA)

    @property
    def contiguous(self) -> int:
        """Extent of the mode with stride 1: the minimum leading dimension."""
        return self.cols if self.row_major else self.rows

    @property
    def outer(self) -> int:
        return self.rows if self.row_major else self.cols

    @property
    def contiguous_name(self) -> str:
        return {("A", True): "K", ("A", False): "M", ("B", True): "N", ("B", False): "K",
                ("C", True): "N", ("C", False): "M", ("D", True): "N", ("D", False): "M"}[(self.name, self.row_major)]

    @property
    def tma_alignment(self) -> int:
        """The kernel's alignment of this operand (elements): what it needs of every extent and stride.
        16 bytes' worth for TMA operands; a cp.async mainloop or no-smem epilogue takes the problem's."""
        return self.alignment or 128 // DTYPES[self.dtype].bits

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype].bits // 8


def geometries(problem: GemmProblem, m: int, n: int, k: int) -> dict[str, MatrixGeometry]:
    """A (M x K), B (K x N), C and D (M x N) of ``problem``'s types and layouts at size m, n, k."""
    al = (problem.alignment_a, problem.alignment_b, problem.alignment_c)
    out = {
        "A": MatrixGeometry("A", problem.dtype_a, m, k, problem.layout_a == "row", al[0]),
        "B": MatrixGeometry("B", problem.dtype_b, k, n, problem.layout_b == "row", al[1]),
        "D": MatrixGeometry("D", problem.dtype_d, m, n, problem.layout_c == "row", al[2]),
    }
    if problem.dtype_c != "void":
        out["C"] = MatrixGeometry("C", problem.dtype_c, m, n, problem.layout_c == "row", al[2])
    return out


def packed_operand(geom: MatrixGeometry, ptr: int, ld_pad: int = 0, batch_pad: int = 0) -> Operand:
    """An operand stored densely (plus optional padding, in elements) starting at ``ptr``."""
    ld = geom.contiguous + ld_pad
    return Operand(ptr, ld, ld * geom.outer + batch_pad)


def operand_storage_elements(geom: MatrixGeometry, op: Operand, batch: int) -> int:
    """Elements from the operand's base to one past its last element."""
    last = (batch - 1) * op.batch_stride + (geom.outer - 1) * op.ld + geom.contiguous
    return last


# ------------------------------------------------------------------------------------------------
# The launch contract: what must hold of a call before it may reach the GPU
# ------------------------------------------------------------------------------------------------
#
# These are the problem-dependent rules of the rulebook, evaluated on the call's actual integers
# (pointers, leading dimensions, batch strides) rather than on a GemmProblem, which knows none of
# them. Each rule names its rulebook ID; the kernels' own check (templates/cutegen_abi.inc.j2)
# prefixes its refusal message with the same ID, and validation asserts that both agree.

def _map_repo_subpackages() -> None:
    """Make ``cutegen.legality`` (and search, templates) importable from a bare working tree.

    pyproject maps the root folders legality/, search/ and templates/ into the cutegen package;
    an install does that, ``PYTHONPATH=.`` (how the GPU machine runs the tree) does not. This
    finder goes last on sys.meta_path, so an installed mapping always wins.
    """
    import importlib.abc
    import importlib.util
    import sys

    root = Path(__file__).resolve().parent.parent
    mapping = {f"cutegen.{sub}": root / sub for sub in ("legality", "search", "templates")
               if (root / sub / "__init__.py").exists()}
    if not mapping or any(getattr(f, "_cutegen_repo_layout", False) for f in sys.meta_path):
        return

    class RepoLayoutFinder(importlib.abc.MetaPathFinder):
        _cutegen_repo_layout = True

        def find_spec(self, fullname, path=None, target=None):
            folder = mapping.get(fullname)
            if folder is None:
                return None
            return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])

    sys.meta_path.append(RepoLayoutFinder())


_map_repo_subpackages()

from .legality.rule import RuleSet, Violation  # noqa: E402  (pure Python; no egglog)

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
        from .abi import STATUS
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
            from .legality import check_config
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


# ------------------------------------------------------------------------------------------------
# Validation plans: which sizes to run a kernel at
# ------------------------------------------------------------------------------------------------

def dim_units(problem: GemmProblem) -> dict[str, int]:
    """The multiple each of M, N, K must be for the launch contract (16 bytes along contiguous modes)."""
    units = {"m": 1, "n": 1, "k": 1}
    dims = {"A": ("m", "k"), "B": ("k", "n"), "C": ("m", "n"), "D": ("m", "n")}
    for g in geometries(problem, 1, 1, 1).values():
        rows_dim, cols_dim = dims[g.name]
        d = cols_dim if g.row_major else rows_dim
        units[d] = math.lcm(units[d], g.tma_alignment)
    return units


def ceil_to(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def ragged_extent(tile: int, unit: int, whole_tiles: int) -> int:
    """``whole_tiles`` full tiles plus a partial one, the total a multiple of ``unit``.

    The remainder is about half a tile so that both the mainloop's residue and the epilogue's
    predication are exercised; when ``unit`` is a multiple of the tile no ragged extent exists and
    the result is whole tiles only.
    """
    rem = ceil_to(tile // 2 + 1, unit)
    if rem % tile == 0:
        rem = unit if unit % tile else 0
    return whole_tiles * tile + rem if whole_tiles * tile + rem > 0 else unit


@dataclass(frozen=True)
class Case:
    """One call to run: its size, scalars and storage (padding and pointer offsets in elements)."""
    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    alpha: float = 1.0
    beta: float = 0.0
    ld_pad: dict = field(default_factory=dict)       # operand -> extra elements per leading dimension
    batch_pad: dict = field(default_factory=dict)    # operand -> extra elements per batch
    offset: dict = field(default_factory=dict)       # operand -> base pointer offset in elements
    expect: tuple = ()                               # rule IDs a refusal probe must be refused with
    seed: int = 0
    plan: dict = field(default_factory=dict)         # LaunchPlan of a stream-K kernel; {}: cutegen_gemm
    repeat: int = 1                                  # launches on one workspace, each result checked

    @property
    def is_probe(self) -> bool:
        return bool(self.expect)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["expect"] = list(self.expect)
        if not self.plan:
            del d["plan"]
        if self.repeat == 1:
            del d["repeat"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        d = dict(d)
        d["expect"] = tuple(d.get("expect", ()))
        return cls(**d)


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``MxNxK`` or ``MxNxKxB`` -> (m, n, k, batch)."""
    parts = text.lower().split("x")
    if len(parts) not in (3, 4) or not all(p.strip().isdigit() for p in parts):
        raise FieldError("--shapes", f"expected MxNxK or MxNxKxBATCH, got {text!r}")
    vals = [int(p) for p in parts] + ([1] if len(parts) == 3 else [])
    for name, v in zip(("M", "N", "K", "batch"), vals):
        if not 1 <= v <= INT_MAX:
            raise FieldError("--shapes", f"{name}={v} in {text!r} is outside [1, 2^31-1]")
    return tuple(vals)  # type: ignore[return-value]


def tile_extents(config: KernelConfig) -> tuple[int, int, int]:
    """The CTA tile along the caller's (M, N, K): a swap-AB kernel's tile M mode runs along N."""
    tm, tn, tk = config.tile_shape
    return (tn, tm, tk) if getattr(config, "swap_ab", False) else (tm, tn, tk)


def problem_ld_pads(problem: GemmProblem) -> dict[str, int]:
    """Case.ld_pad for a problem with stated leading dimensions (lda/ldb/ldc; C and D share ldc)."""
    out = {}
    for op, names in (("a", ("A",)), ("b", ("B",)), ("c", ("C", "D"))):
        pad = problem.leading_dimension(op) - problem.contiguous_extent(op)[1]
        for name in names:
            if pad:
                out[name] = pad
    return out


def validation_cases(problem: GemmProblem, config: KernelConfig, shapes: Iterable[tuple] = (),
                     include_manifest: bool = True, max_manifest_macs: int = 2**38,
                     launch_plan: dict | None = None) -> list[Case]:
    """The sizes one kernel is validated at.

    Its own problem size (unless larger than ``max_manifest_macs`` multiply-adds), ragged extents in
    all three of M, N, K (not multiples of the CTA tile, still multiples of the 16-byte units),
    batch 2 and 3 with padded leading dimensions and batch strides, a problem smaller than one
    tile, and the caller's ``shapes``. alpha and beta differ from 1 and 0 where C exists so that
    both scalars are exercised. A stream-K kernel adds ``plan_cases`` and runs its manifest case with
    the manifest's ``launch_plan``.
    """
    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    has_c = problem.dtype_c != "void"
    beta = 0.5 if has_c else 0.0
    cases: list[Case] = []
    if include_manifest and problem.m * problem.n * problem.k * problem.batch <= max_manifest_macs:
        cases.append(Case("manifest", problem.m, problem.n, problem.k, problem.batch,
                          problem.alpha, problem.beta, ld_pad=problem_ld_pads(problem), seed=1))
    cases.append(Case("ragged", ragged_extent(tm, u["m"], 2), ragged_extent(tn, u["n"], 1),
                      ragged_extent(tk, u["k"], 3), 1, 0.75, beta, seed=2))
    cases.append(Case("ragged_batch2", ragged_extent(tm, u["m"], 1), ragged_extent(tn, u["n"], 2),
                      ragged_extent(tk, u["k"], 1), 2, 1.0, beta, seed=3))
    pads = {}
    bpads = {}
    for g in geometries(problem, 1, 1, 1).values():
        pads[g.name] = g.tma_alignment            # one 16-byte unit of padding per row/column
        bpads[g.name] = 2 * g.tma_alignment
    cases.append(Case("padded_batch3", ceil_to(tm + 1, u["m"]), ceil_to(tn + 1, u["n"]), ceil_to(2 * tk + 1, u["k"]),
                      3, 1.25, beta, ld_pad=pads, batch_pad=bpads, seed=4))
    cases.append(Case("sub_tile", u["m"], u["n"], u["k"], 1, 1.0, beta, seed=5))
    geo = geometries(problem, 1, 1, 1)
    narrow = {name: g.tma_alignment for name, g in geo.items() if g.tma_alignment * g.element_bytes < 16}
    if narrow:
        # Operands below 16 bytes (cp.async mainloop, no-smem epilogue): leading dimensions one vector
        # past packed, base pointers one vector past 16-byte alignment, odd extents where allowed.
        cases.append(Case("unaligned_ld", ragged_extent(tm, u["m"], 1) + u["m"], ragged_extent(tn, u["n"], 1) + u["n"],
                          ragged_extent(tk, u["k"], 2) + u["k"], 2, 1.0, beta, ld_pad=dict(narrow),
                          batch_pad={name: 3 * a for name, a in narrow.items()}, offset=dict(narrow), seed=6))
    for i, s in enumerate(shapes):
        m, n, k, b = s
        cases.append(Case(f"shape_{m}x{n}x{k}x{b}", m, n, k, b, 1.0, beta, seed=100 + i))
    if config.tile_scheduler == "stream_k":
        if launch_plan and cases and cases[0].name == "manifest":
            cases[0] = replace(cases[0], plan=dict(launch_plan))
        cases += plan_cases(problem, config)
    if getattr(config, "split_k_slices", 1) > 1:
        cases = split_k_reduce_cases(problem, config, cases)
    return cases


def split_k_reduce_cases(problem: GemmProblem, config: KernelConfig, cases: list[Case]) -> list[Case]:
    """The cases of a split-K kernel with a separate reduction (cutegen/split_k_reduce.py), from the standard ones.

    Each standard case of its own making (ragged, batched, padded, sub-tile) keeps its K as the extent of
    every slice: K = s x that (SPLITK-REDUCE-SLICES-DIVIDE-K), so each slice ends in the ragged k-block the
    ordinary kernel is validated with, and a slice's stride stays a multiple of the 16-byte unit
    (SPLITK-REDUCE-SLICE-STRIDE-ALIGN). The manifest case and the caller's shapes are left as given (the
    preflight refuses a K the rules refuse). Added: slices of whole k-blocks, and the relaunch case: one
    workspace (the partials' region) reused for STREAMK_RELAUNCHES launches, each checked.
    """
    s = config.split_k_slices
    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    beta = 0.5 if problem.dtype_c != "void" else 0.0
    own = {"ragged", "ragged_batch2", "padded_batch3", "sub_tile", "unaligned_ld"}
    out = [replace(c, k=c.k * s) if c.name in own else c for c in cases]
    m, n = ragged_extent(tm, u["m"], 1), ragged_extent(tn, u["n"], 2)
    out.append(Case("slices_whole_kblocks", m, n, s * 2 * ceil_to(tk, u["k"]), 1, 1.5, beta, seed=240))
    out.append(Case("relaunch_slices", m, n, s * ragged_extent(tk, u["k"], 2), 2, 0.75, beta, seed=241,
                    repeat=STREAMK_RELAUNCHES))
    return out


STREAMK_RELAUNCHES = 20


def plan_cases(problem: GemmProblem, config: KernelConfig) -> list[Case]:
    """Every decomposition and split count a stream-K kernel allows, on a ragged M, N and K with
    beta != 0 (where C exists), and the relaunch case: one workspace, many launches, each checked.

    The shape has 4 whole tiles along M by 3 along N plus a ragged edge (so some tiles are partial and
    the tile count does not divide the SMs' worth) and 5 k-blocks with a ragged last one, so split
    counts 2..5 are every count the plan rules allow there (SM90-SPLITK-SPLITS-KTILES).
    """
    from .launch_plan import LaunchPlan, k_tiles

    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    beta = 0.5 if problem.dtype_c != "void" else 0.0
    m, n, k = ragged_extent(tm, u["m"], 4), ragged_extent(tn, u["n"], 3), ragged_extent(tk, u["k"], 4)
    plans = [LaunchPlan("heuristic"), LaunchPlan("data_parallel"), LaunchPlan("stream_k"),
             LaunchPlan("stream_k", reduction="nondeterministic")]
    plans += [LaunchPlan("split_k", s) for s in range(2, k_tiles(k, tk) + 1)]
    plans += [LaunchPlan("split_k", 2, "nondeterministic"), LaunchPlan("heuristic", 2)]
    cases = []
    for i, plan in enumerate(plans):
        name = "plan_" + plan.label().replace(" ", "_")
        cases.append(Case(name, m, n, k, 1, 0.75, beta, seed=200 + i, plan=plan.to_dict()))
    # batch 2 through stream-K: the scheduler's work units cross the batch boundary
    cases.append(Case("plan_stream_k_batch2", ragged_extent(tm, u["m"], 2), n, k, 2, 1.0, beta, seed=230,
                      plan=LaunchPlan("stream_k").to_dict()))
    # SM90-STREAMK-TMA-EPILOGUE-HANG: relaunching on a stale workspace hung on an H100; the ABI
    # re-initializes it on every call, which this case proves by relaunching on one workspace
    cases.append(Case("relaunch_stream_k", m, n, k, 1, 1.0, beta, seed=231,
                      plan=LaunchPlan("stream_k").to_dict(), repeat=STREAMK_RELAUNCHES))
    return cases


def refusal_probes(problem: GemmProblem, config: KernelConfig) -> list[Case]:
    """Calls the launch contract refuses, each breaking one rule; the kernel must refuse them too.

    Sizes are aligned (so only the intended rule breaks) and small (one or two tiles).
    """
    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    slices = getattr(config, "split_k_slices", 1)
    # a split-K-reduce kernel: K = slices x one slice's extent, so only the intended rule breaks
    m, n, k = ceil_to(tm + 1, u["m"]), ceil_to(tn + 1, u["n"]), slices * ceil_to(tk + 1, u["k"])
    g = geometries(problem, m, n, k)
    # A staged operand (cutegen/staging.py) is copied by cudaMemcpy2DAsync, which takes any pointer,
    # pitch and batch stride, into an aligned workspace: nothing about its alignment can be refused.
    staged = {"A": config.stage_a, "B": config.stage_b}

    def aligned(op: str, geo) -> bool:
        return geo[op].tma_alignment > 1 and not staged.get(op, False)

    # Each probe breaks one operand's alignment by one element, so it exists only where that operand's
    # alignment is above one element (an alignment-1 operand of a cp.async kernel takes any pointer,
    # leading dimension and batch stride).
    probes = [case for case, op in (
        (Case("probe_ptr_A", m, n, k, offset={"A": 1}, expect=("TMA-GLOBAL-ADDRESS-ALIGN",), seed=11), "A"),
        (Case("probe_ptr_D", m, n, k, offset={"D": 1}, expect=("TMA-GLOBAL-ADDRESS-ALIGN",), seed=12), "D"),
        (Case("probe_ld_B", m, n, k, ld_pad={"B": 1}, expect=("CUTLASS-MAINLOOP-TMA-ALIGNMENT",), seed=13), "B"),
        (Case("probe_ld_D", m, n, k, ld_pad={"D": 1}, expect=("CUTLASS-EPILOGUE-TMA-ALIGNMENT",), seed=14), "D"),
        (Case("probe_batch_stride_A", m, n, k, batch=2, batch_pad={"A": 1},
              expect=("CUTLASS-MAINLOOP-TMA-ALIGNMENT",), seed=15), "A"),
    ) if aligned(op, g)]
    # An extent that is not a multiple of the 16-byte unit, with the leading dimension padded back
    # to a multiple so that only the extent rule breaks: a probe only while an operand that is read
    # in place (not staged) has that extent contiguous.
    a = g["A"]
    if a.tma_alignment > 1:
        dim = "k" if a.row_major else "m"
        bad = {"m": m, "n": n, "k": k}
        bad[dim] += 1
        ga = geometries(problem, bad["m"], bad["n"], bad["k"])
        pads = {name: ceil_to(gg.contiguous, gg.tma_alignment) - gg.contiguous for name, gg in ga.items()}
        if any(aligned(x, ga) and ga[x].contiguous % ga[x].tma_alignment for x in ("A", "B")):
            probes.append(Case(f"probe_extent_{dim.upper()}", bad["m"], bad["n"], bad["k"], ld_pad=pads,
                               expect=("CUTLASS-MAINLOOP-TMA-ALIGNMENT",), seed=16))
    d = g["D"]
    if d.tma_alignment > 1:
        dim = "n" if d.row_major else "m"
        bad = {"m": m, "n": n, "k": k}
        bad[dim] += 1
        gd = geometries(problem, bad["m"], bad["n"], bad["k"])
        pads = {name: ceil_to(gg.contiguous, gg.tma_alignment) - gg.contiguous for name, gg in gd.items()}
        expect = ["CUTLASS-EPILOGUE-TMA-ALIGNMENT"]
        # Moving an M or N extent of D can move one of A's or B's contiguous extents too.
        if any(aligned(x, gd) and gd[x].contiguous % gd[x].tma_alignment for x in ("A", "B")):
            expect.append("CUTLASS-MAINLOOP-TMA-ALIGNMENT")
        probes.append(Case(f"probe_extent_D_{dim.upper()}", bad["m"], bad["n"], bad["k"], ld_pad=pads,
                           expect=tuple(expect), seed=17))
    if problem.dtype_c == "void":
        probes.append(Case("probe_void_c_beta", m, n, k, beta=1.0, expect=("CUTLASS-EPILOGUE-VOID-C-BETA",), seed=18))
    if slices > 1:
        probes += split_k_reduce_probes(problem, config, m, n)
    return probes


def split_k_reduce_probes(problem: GemmProblem, config: KernelConfig, m: int, n: int) -> list[Case]:
    """A K the slices cannot split evenly, and a K they split into slices whose stride is not 16 bytes,
    each with K itself a multiple of the 16-byte unit (so only the form's rule breaks); a probe exists only
    where such a K does (legality/split_k_reduce.py)."""
    s = config.split_k_slices
    tk = tile_extents(config)[2]
    uk = dim_units(problem)["k"]
    whole = s * ceil_to(tk + 1, uk)
    out = []
    if uk % s:                       # K = s x X + uk: a multiple of uk, not of s
        out.append(Case("probe_split_k_divide_k", m, n, whole + uk, expect=("SPLITK-REDUCE-SLICES-DIVIDE-K",),
                        seed=19))
    if uk > 1 and s % uk == 0:        # K = s x (X + 1): a multiple of uk and of s, K/s one element off the unit
        out.append(Case("probe_split_k_slice_stride", m, n, whole + s,
                        expect=("SPLITK-REDUCE-SLICE-STRIDE-ALIGN",), seed=20))
    return out


def case_operands(problem: GemmProblem, case: Case, bases: dict[str, int]) -> dict[str, Operand]:
    """The operands of ``case`` laid out from the given base addresses (bytes) of each buffer."""
    out = {}
    for name, g in geometries(problem, case.m, case.n, case.k).items():
        op = packed_operand(g, 0, case.ld_pad.get(name, 0), case.batch_pad.get(name, 0))
        ptr = bases[name] + case.offset.get(name, 0) * g.element_bytes
        out[name] = Operand(ptr, op.ld, op.batch_stride)
    return out


def case_launch_args(problem: GemmProblem, case: Case, bases: dict[str, int], bias: int = 0) -> LaunchArgs:
    ops = case_operands(problem, case, bases)
    return LaunchArgs(case.m, case.n, case.k, case.batch, ops["A"], ops["B"], ops.get("C"), ops["D"],
                      case.alpha, case.beta, bias)


# ------------------------------------------------------------------------------------------------
# Finding built kernels
# ------------------------------------------------------------------------------------------------

@dataclass
class KernelInfo:
    """A built kernel: its library and what its manifest says it computes."""
    library: Path
    problem: GemmProblem
    config: KernelConfig
    hash: str = ""
    backend: str = ""
    directory: Path | None = None
    manifest: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        where = self.directory.name if self.directory else self.library.name
        backend = f"{self.backend} " if self.backend else ""
        return f"{where} [{backend}{self.config.short_name()}]"

    def to_dict(self) -> dict:
        return {"library": str(self.library), "directory": str(self.directory) if self.directory else None,
                "problem": self.problem.to_dict(), "config": self.config.to_dict(), "hash": self.hash,
                "backend": self.backend}


class KernelNotFound(CutegenError):
    pass


def _problem_and_config(doc: dict, where: str) -> tuple[GemmProblem, KernelConfig]:
    if "problem" not in doc or "config" not in doc:
        raise FieldError(where, "needs both 'problem' and 'config'")
    return (GemmProblem.from_dict(doc["problem"], f"{where}.problem"),
            KernelConfig.from_dict(doc["config"], f"{where}.config"))


def _library_in(directory: Path, manifest: dict) -> Path | None:
    """The kernel library of a built kernel directory.

    The manifest's ``library`` (relative to the directory) wins; otherwise the one ``*.so`` in the
    directory or its ``build/``; several candidates are an error unless one carries the hash.
    """
    named = manifest.get("library")
    build = manifest.get("build")
    if not named and isinstance(build, dict):
        named = build.get("library")
    if named:
        p = Path(named)
        p = p if p.is_absolute() else directory / p
        return p if p.exists() else None
    found = sorted(directory.glob("*.so")) + sorted((directory / "build").glob("*.so"))
    if len(found) == 1:
        return found[0]
    h = str(manifest.get("hash", ""))
    tagged = [p for p in found if h and h in p.name]
    if len(tagged) == 1:
        return tagged[0]
    if found:
        raise KernelNotFound(f"{directory}: several libraries ({', '.join(p.name for p in found)}); "
                             "name one in manifest.json 'library'")
    return None


def load_kernel_info(path: str | os.PathLike) -> KernelInfo:
    """A kernel from a built directory (with manifest.json) or a library path (manifest beside it)."""
    p = Path(path)
    if p.is_dir():
        mpath = p / "manifest.json"
        if not mpath.exists():
            raise KernelNotFound(f"{p}: no manifest.json")
        manifest = _read_json(mpath)
        lib = _library_in(p, manifest)
        if lib is None:
            raise KernelNotFound(f"{p}: no built library (*.so) — run `cutegen build {p}` first")
        directory = p
    elif p.is_file():
        lib, directory = p, p.parent
        mpath = p.parent / "manifest.json"
        if not mpath.exists():
            raise KernelNotFound(f"{p}: no manifest.json beside the library")
        manifest = _read_json(mpath)
    else:
        raise KernelNotFound(f"{p}: no such file or directory")
    prob, cfg = _problem_and_config(manifest, str(mpath))
    return KernelInfo(lib.resolve(), prob, cfg, str(manifest.get("hash", "")), str(manifest.get("backend", "")),
                      directory.resolve(), manifest)


def discover_kernels(paths: Iterable[str | os.PathLike]) -> tuple[list[KernelInfo], list[tuple[str, str]]]:
    """Every kernel under ``paths`` (a kernel directory, a library, or a folder of kernel directories).

    Returns the kernels found, sorted by path, and (path, reason) for those that could not be used.
    """
    found: list[KernelInfo] = []
    problems: list[tuple[str, str]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and not (p / "manifest.json").exists():
            subdirs = sorted(x.parent for x in p.rglob("manifest.json"))
            if not subdirs:
                problems.append((str(p), "no manifest.json under it"))
            for d in subdirs:
                try:
                    found.append(load_kernel_info(d))
                except (CutegenError, ValueError) as e:
                    problems.append((str(d), str(e)))
            continue
        try:
            found.append(load_kernel_info(p))
        except (CutegenError, ValueError) as e:
            problems.append((str(p), str(e)))
    found.sort(key=lambda k: str(k.directory or k.library))
    return found, problems


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FieldError(str(path), f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FieldError(str(path), "expected a JSON object")
    return doc


# ------------------------------------------------------------------------------------------------
# The watchdog: a spawned child process per kernel run, killed when it does not answer in time
# ------------------------------------------------------------------------------------------------

@dataclass
class Reply:
    """What became of one request to a worker child."""
    status: str                  # ok | error | hang | crash
    value: Any = None
    message: str = ""
    seconds: float = 0.0
    fatal: bool = False          # the child's CUDA context is unusable; it was replaced

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _child_main(conn, env: dict) -> None:  # runs in the spawned child
    os.environ.update(env)
    from . import _runner_worker
    _runner_worker.serve(conn)


class _main_importable_by_spawn:
    """A spawned child re-runs the parent's ``__main__`` file; when that is no file (a script on
    stdin, ``python -c``), hide it for the start so the child does not fail looking for it."""

    def __enter__(self):
        import sys
        self.main = sys.modules.get("__main__")
        self.saved = getattr(self.main, "__file__", None)
        if self.saved is not None and not os.path.isfile(self.saved):
            del self.main.__file__
        else:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.main.__file__ = self.saved


class Worker:
    """A spawned child that runs requests one at a time under a per-request timeout.

    A request that does not answer in time is a hang: the child is killed (SIGKILL) and the next
    request gets a fresh child. A child that dies, or reports that its CUDA context is broken (a
    sticky fault), is replaced the same way. The start-up (importing torch, creating the CUDA
    context) has its own, longer timeout and does not count against a request.
    """

    def __init__(self, startup_timeout: float = 180.0, env: dict | None = None, init: dict | None = None):
        self.startup_timeout = startup_timeout
        self.env = dict(env or {})
        self.init = init            # request sent first to every new child (e.g. {"op": "init"})
        self.init_reply: Reply | None = None
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None
        self.restarts = 0

    # -- lifecycle -----------------------------------------------------------------------------
    def _start(self) -> Reply | None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_child_main, args=(child, self.env), daemon=True)
        with _main_importable_by_spawn():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        if self.init is not None:
            reply = self._roundtrip(self.init, self.startup_timeout)
            self.init_reply = reply
            if not reply.ok:
                self.kill()
                return reply
        return None

    def kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(timeout=20)

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send({"op": "exit"})
                self._proc.join(timeout=10)
            except (OSError, BrokenPipeError):
                pass
        self.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # -- requests ------------------------------------------------------------------------------
    def request(self, task: dict, timeout: float) -> Reply:
        if not self.alive():
            if self._proc is not None:
                self.kill()
            failed = self._start()
            if failed is not None:
                return Reply("crash" if failed.status != "hang" else "hang", failed.value,
                             f"worker start-up failed: {failed.message}", failed.seconds, True)
        reply = self._roundtrip(task, timeout)
        if reply.status in ("hang", "crash") or reply.fatal:
            self.kill()
            self.restarts += 1
        return reply

    def _roundtrip(self, task: dict, timeout: float) -> Reply:
        t0 = time.monotonic()
        try:
            self._conn.send(task)
        except (OSError, BrokenPipeError) as e:
            return Reply("crash", None, f"could not send to worker: {e}", 0.0, True)
        deadline = t0 + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return Reply("hang", None, f"no answer within {timeout:g} s; worker pid {self.pid} killed",
                             time.monotonic() - t0, True)
            try:
                ready = self._conn.poll(min(left, 0.5))
            except (OSError, EOFError):
                ready = True
            if ready:
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    code = self._proc.exitcode if self._proc is not None else None
                    if self._proc is not None:
                        self._proc.join(timeout=5)
                        code = self._proc.exitcode
                    return Reply("crash", None, f"worker died (exit code {code})", time.monotonic() - t0, True)
                secs = time.monotonic() - t0
                if msg.get("ok"):
                    return Reply("ok", msg.get("value"), "", secs, bool(msg.get("fatal")))
                return Reply("error", msg.get("value"), msg.get("error", ""), secs, bool(msg.get("fatal")))
            if self._proc is not None and not self._proc.is_alive() and not self._conn.poll(0):
                return Reply("crash", None, f"worker died (exit code {self._proc.exitcode})",
                             time.monotonic() - t0, True)


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
