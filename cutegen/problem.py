"""GemmProblem: D = alpha * op(A) @ op(B) + beta * C (+ bias, activation), batched.

Layouts are spelled per operand as storage order of the logical matrix:
A is M x K, B is K x N, C and D are M x N. ``row`` means the last logical index is
contiguous. BLAS-style two-letter names (``tn``) follow CUTLASS: the first letter is A
(``t`` = row-major, K contiguous), the second is B (``n`` = column-major, K contiguous).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ._fields import as_choice, as_float, as_int, reject_unknown
from .dtypes import ACC_DTYPES, DTYPES, INPUT_DTYPES, OUTPUT_DTYPES
from .errors import FieldError

LAYOUTS = ("row", "col")
ACTIVATIONS = ("none", "relu", "gelu")
TARGETS = ("sm90a",)
C_DTYPES = OUTPUT_DTYPES + ("void",)
BLAS_LAYOUTS = {"tn": ("row", "col"), "nt": ("col", "row"), "nn": ("col", "col"), "tt": ("row", "row")}
# The fields a compiled kernel depends on. M, N, K, batch, alpha and beta are run-time arguments:
# one kernel serves every size, so they stay out of its name and hash.
KERNEL_FIELDS = ("dtype_a", "dtype_b", "dtype_c", "dtype_d", "dtype_acc", "layout_a", "layout_b", "layout_c",
                 "alignment_a", "alignment_b", "alignment_c", "bias", "activation", "target")
# Fields that enter the kernel key, the name and the JSON only when they leave their default, so
# every kernel rendered before they existed keeps its bytes and its hash.
OPTIONAL_KERNEL_FIELDS = {"fp8_fast_accum": False}
FP8_DTYPES = ("e4m3", "e5m2")


def default_alignment(dtype_name: str) -> int:
    """Elements per 16 bytes: the alignment TMA needs (rulebook E02)."""
    return 128 // DTYPES[dtype_name].bits


def pow2_alignment(cap: int, *values: int) -> int:
    """The largest power of two <= ``cap`` that divides every value: the widest vector (in elements)
    every row of an operand can be loaded with when its extent and leading dimension are these."""
    a = cap
    while a > 1 and any(v % a for v in values):
        a //= 2
    return a


# The problem `cutegen` and `cutegen generate` make when given none (the Python API's too).
DEFAULT_PROBLEM = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"}


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    batch: int = 1
    dtype_a: str = "bf16"
    dtype_b: str = "bf16"
    dtype_c: str = "bf16"
    dtype_d: str = "bf16"
    dtype_acc: str = "f32"
    layout_a: str = "row"
    layout_b: str = "col"
    layout_c: str = "row"
    alignment_a: int = 0          # elements; 0 = 16 bytes' worth
    alignment_b: int = 0
    alignment_c: int = 0
    lda: int = 0                  # leading dimensions in elements; 0 = packed (the contiguous extent)
    ldb: int = 0
    ldc: int = 0                  # C's and D's
    alpha: float = 1.0
    beta: float = 0.0
    bias: bool = False            # per-row (M) bias vector added before the activation
    activation: str = "none"
    target: str = "sm90a"
    # FP8 only, off unless asked for (torch._scaled_mm(use_fast_accum=True)): accumulate in the WGMMA
    # accumulator alone (CUTLASS's ...FP8FastAccum schedules) instead of promoting into a second f32
    # copy every few k-blocks. Faster and half the accumulator registers; rounding error grows with K.
    fp8_fast_accum: bool = False

    def __post_init__(self):
        for name, lo in (("m", 1), ("n", 1), ("k", 1), ("batch", 1)):
            object.__setattr__(self, name, as_int(name, getattr(self, name), lo=lo, hi=2**31 - 1))
        as_choice("dtype_a", self.dtype_a, INPUT_DTYPES)
        as_choice("dtype_b", self.dtype_b, INPUT_DTYPES)
        as_choice("dtype_c", self.dtype_c, C_DTYPES)
        as_choice("dtype_d", self.dtype_d, OUTPUT_DTYPES)
        as_choice("dtype_acc", self.dtype_acc, ACC_DTYPES)
        for name in ("layout_a", "layout_b", "layout_c"):
            as_choice(name, getattr(self, name), LAYOUTS)
        as_choice("activation", self.activation, ACTIVATIONS)
        as_choice("target", self.target, TARGETS)
        # Alignments (elements) are derived from what each operand's rows really are: the largest
        # power of two, at most 16 bytes' worth, dividing its contiguous extent and its leading
        # dimension. A stated alignment the leading dimension contradicts is an error; one the packed
        # extent contradicts is kept (the kernel then serves other sizes of the class, and the rule
        # SM90-PROBLEM-ALIGNMENT says why it cannot serve this one).
        for op in ("a", "b", "c"):
            name, ld_name = f"alignment_{op}", f"ld{op}"
            ld = as_int(ld_name, getattr(self, ld_name), lo=0, hi=2**40 - 1)
            object.__setattr__(self, ld_name, ld)
            extent_name, extent = self.contiguous_extent(op)
            if ld and ld < extent:
                raise FieldError(ld_name, f"{ld} is smaller than the contiguous extent {extent_name}={extent} "
                                          f"(rows would overlap)")
            cap = default_alignment(self.dtype_d if op == "c" else getattr(self, f"dtype_{op}"))
            # at most 16 bytes' worth: TMA and cp.async move at most 16 bytes per row segment, so a wider
            # stated alignment means nothing to any kernel (and would split kernel classes for nothing)
            value = as_int(name, getattr(self, name), lo=0, hi=cap)
            if value == 0:
                value = pow2_alignment(cap, extent, *((ld,) if ld else ()))
            if value & (value - 1):
                raise FieldError(name, f"{value} is not a power of two")
            if ld and ld % value:
                raise FieldError(name, f"{value} elements does not divide {ld_name}={ld}: rows of "
                                       f"{op.upper()} start {ld % value} element(s) off the stated alignment")
            object.__setattr__(self, name, value)
        if self.bias or self.activation != "none":
            narrow = [f"alignment_{op}={getattr(self, f'alignment_{op}')}" for op, dt in
                      (("a", self.dtype_a), ("b", self.dtype_b), ("c", self.dtype_d))
                      if getattr(self, f"alignment_{op}") * DTYPES[dt].bits < 128]
            if narrow:
                # Bias and activations exist only in CUTLASS 4.2's SM90 TMA epilogue, which needs 16-byte
                # rows of C/D, and no cp.async mainloop pairs with it (SM90-NOSMEM-FUSION,
                # SM90-CPASYNC-EPILOGUE): no SM90 kernel computes this problem.
                field = "bias" if self.bias else "activation"
                raise FieldError(field, f"a fused bias or activation needs every operand 16-byte aligned "
                                        f"(TMA mainloop and epilogue); this problem has {', '.join(narrow)}")
        object.__setattr__(self, "alpha", as_float("alpha", self.alpha))
        object.__setattr__(self, "beta", as_float("beta", self.beta))
        if not isinstance(self.bias, bool):
            raise FieldError("bias", f"expected true or false, got {self.bias!r}")
        if self.dtype_c == "void" and self.beta != 0.0:
            raise FieldError("beta", "beta must be 0 when dtype_c is void (there is no C to read)")
        if not isinstance(self.fp8_fast_accum, bool):
            raise FieldError("fp8_fast_accum", f"expected true or false, got {self.fp8_fast_accum!r}")
        if self.fp8_fast_accum and not (self.dtype_a in FP8_DTYPES and self.dtype_b in FP8_DTYPES):
            raise FieldError("fp8_fast_accum", f"fast accumulation is an FP8 numerics choice; dtype_a={self.dtype_a}, "
                                               f"dtype_b={self.dtype_b} (CUTLASS's FP8FastAccum schedules take e4m3/e5m2 only)")

    # --- derived facts -------------------------------------------------------------
    def contiguous_extent(self, operand: str) -> tuple[str, int]:
        """(name, value) of the extent with stride 1 of operand a, b or c (C and D share a layout)."""
        if operand == "a":
            return ("K", self.k) if self.layout_a == "row" else ("M", self.m)
        if operand == "b":
            return ("K", self.k) if self.layout_b == "col" else ("N", self.n)
        return ("N", self.n) if self.layout_c == "row" else ("M", self.m)

    def leading_dimension(self, operand: str) -> int:
        """The operand's leading dimension in elements (packed: its contiguous extent)."""
        return getattr(self, f"ld{operand}") or self.contiguous_extent(operand)[1]

    @property
    def a_k_major(self) -> bool:
        return self.layout_a == "row"

    @property
    def b_k_major(self) -> bool:
        return self.layout_b == "col"

    @property
    def blas_layout(self) -> str:
        return ("t" if self.layout_a == "row" else "n") + ("n" if self.layout_b == "col" else "t")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch

    def kernel_key(self) -> dict[str, Any]:
        """What a compiled kernel for this problem depends on (not its sizes or scalars)."""
        key = {f: getattr(self, f) for f in KERNEL_FIELDS}
        key.update(self._optional_set())
        return key

    def _optional_set(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f, default in OPTIONAL_KERNEL_FIELDS.items() if getattr(self, f) != default}

    @property
    def kernel_class_name(self) -> str:
        """``name`` without the sizes: every problem with this name runs on the same kernels."""
        return "_".join(p for p in self.name.split("_") if not re.fullmatch(r"m\d+n\d+k\d+(ld[abc]\d+)*|b\d+", p))

    @property
    def name(self) -> str:
        """Stable, file-system-safe name: the key of generated/<target>/<name>/."""
        parts = [f"{self.dtype_a}" if self.dtype_a == self.dtype_b else f"{self.dtype_a}{self.dtype_b}",
                 self.blas_layout, f"m{self.m}n{self.n}k{self.k}"
                 + "".join(f"ld{op}{getattr(self, f'ld{op}')}" for op in "abc" if getattr(self, f"ld{op}"))]
        if self.batch != 1:
            parts.append(f"b{self.batch}")
        parts.append(f"c{self.dtype_c}d{self.dtype_d}")
        if self.layout_c != "row":
            parts.append("ccol")
        if self.bias:
            parts.append("bias")
        if self.activation != "none":
            parts.append(self.activation)
        if self.fp8_fast_accum:
            parts.append("fastacc")
        for fld in ("alignment_a", "alignment_b", "alignment_c"):
            dt = {"alignment_a": self.dtype_a, "alignment_b": self.dtype_b, "alignment_c": self.dtype_d}[fld]
            if getattr(self, fld) != default_alignment(dt):
                parts.append(f"{fld[-1]}{getattr(self, fld)}")
        return "_".join(parts)

    # --- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for f, default in OPTIONAL_KERNEL_FIELDS.items():
            if out[f] == default:
                del out[f]
        for ld in ("lda", "ldb", "ldc"):     # packed (the default) stays out: old JSON keeps its bytes
            if not out[ld]:
                del out[ld]
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "problem") -> "GemmProblem":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        data = dict(data)
        if "layout" in data:
            lay = as_choice(f"{where}.layout", data.pop("layout"), BLAS_LAYOUTS)
            data.setdefault("layout_a", BLAS_LAYOUTS[lay][0])
            data.setdefault("layout_b", BLAS_LAYOUTS[lay][1])
        if "dtype" in data:
            dt = data.pop("dtype")
            for key in ("dtype_a", "dtype_b"):
                data.setdefault(key, dt)
            if dt in ("e4m3", "e5m2", "tf32"):
                data.setdefault("dtype_c", "bf16" if dt != "tf32" else "f32")
                data.setdefault("dtype_d", "bf16" if dt != "tf32" else "f32")
            else:
                data.setdefault("dtype_c", dt)
                data.setdefault("dtype_d", dt)
        reject_unknown(where, data, cls.__dataclass_fields__)
        for required in ("m", "n", "k"):
            if required not in data:
                raise FieldError(f"{where}.{required}", "missing")
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def replace(self, **changes) -> "GemmProblem":
        return replace(self, **changes)
