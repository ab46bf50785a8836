"""GroupedGemmProblem: one launch of E GEMMs that share N and K, D_i = X_i @ W_i^T (mixture of experts).

Expert i multiplies its own share of the tokens, X_i (M_i x K), by its own weights W_i (N x K, K-major:
the rows of a stacked ``W[E, N, K]``, like ``nn.Linear``'s weight), giving D_i (M_i x N, bf16). The
group sizes M_i are known only at run time, on the device; the kernel never needs them at generation
time. Two layouts of the tokens:

``offs``
    ``torch._grouped_mm``'s convention: one contiguous token matrix ``X[T, K]`` (rows of group i are
    ``offs[i-1]:offs[i]``, ``offs[-1] = 0``) and int32 cumulative *end* offsets ``offs[E]`` on the
    device; the output is ``D[T, N]`` in the same rows. ``tokens`` is T, the expected total (the cost
    model's input; a launch may bring any T).
``masked``
    DeepGEMM's masked form, CUDA-graph friendly for decode: ``X[E, max_m, K]`` with a per-group count
    ``counts[E]`` (int32, device) of the valid rows; ``D[E, max_m, N]``, rows past the count untouched.
    ``tokens`` is the per-group capacity ``max_m``.

``distribution`` is how routing is expected to spread the tokens over the groups: ``uniform``,
``skewed`` (a Zipf law, fraction of group i proportional to 1/(i+1)^1.6), ``worst`` (every token in one
group), or a histogram: a tuple of E non-negative fractions summing to 1. It feeds the cost model only.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from ..._fields import as_choice, as_int, reject_unknown
from ...core.op import op_fields
from ...errors import FieldError

OP = "grouped_gemm"
LAYOUTS = ("offs", "masked")
DTYPES = ("bf16", "e4m3")
OUTPUT_DTYPE = "bf16"
SCALES = ("none", "tensor", "block128")
NAMED_DISTRIBUTIONS = ("uniform", "skewed", "worst")
TARGETS = ("sm90a",)
# The most groups one problem may have. The largest MoE layers in use route over 256 (DeepSeek-V3) to
# 512 experts; 1024 leaves room. What a kernel can take (its pointer arrays and per-group tensor maps in
# the workspace) is a legality rule of the grouped rule set, not this domain check.
MAX_GROUPS = 1024
INT_MAX = 2**31 - 1
# A histogram's fractions must sum to 1 within this (they are usually measured counts divided by a sum).
HISTOGRAM_SUM_TOLERANCE = 1e-6
# The Zipf exponent of "skewed" routing (fraction of expert i proportional to 1 / (i + 1) ** s). 1.6 is what
# the issue's own skewed floors imply (NOTES.md, grpsearch): about 38 of 128 experts used at 256 rows, all 128
# at 16,384 and 32,768 rows.
SKEW_EXPONENT = 1.6
# Fields a compiled kernel depends on; E, T, N and K are run-time arguments (one kernel serves them all).
KERNEL_FIELDS = ("dtype", "scale", "layout", "target")


def _fractions_of(distribution: Any, groups: int) -> tuple[float, ...]:
    if distribution == "uniform":
        return tuple(1.0 / groups for _ in range(groups))
    if distribution == "skewed":
        w = [1.0 / (i + 1) ** SKEW_EXPONENT for i in range(groups)]
        s = sum(w)
        return tuple(x / s for x in w)
    if distribution == "worst":
        return (1.0,) + (0.0,) * (groups - 1)
    return tuple(distribution)


def split_tokens(total: int, fractions: tuple[float, ...]) -> tuple[int, ...]:
    """``total`` rows over the groups in proportion to ``fractions`` (largest remainder, ties to the
    lower index): the integer sizes sum to ``total`` exactly and are deterministic."""
    raw = [total * f for f in fractions]
    sizes = [math.floor(r) for r in raw]
    rest = total - sum(sizes)
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - sizes[i]), i))
    for i in order[:rest]:
        sizes[i] += 1
    return tuple(sizes)


@dataclass(frozen=True)
class GroupedGemmProblem:
    groups: int                      # E: experts (groups) of the launch
    n: int                           # output features, shared by every group
    k: int                           # input features (the reduction), shared
    tokens: int                      # offs: expected total rows T; masked: per-group capacity max_m
    layout: str = "offs"
    dtype: str = "bf16"              # of X and W; the output is bf16
    scale: str = "none"              # e4m3 only: per-tensor, or DeepSeek-V3's 1x128 / 128x128 blocks
    distribution: Any = "uniform"    # NAMED_DISTRIBUTIONS or a tuple of E fractions (cost model input)
    target: str = "sm90a"
    # FP8 without block scales only, off unless asked for (GemmProblem.fp8_fast_accum; torch._scaled_mm's
    # use_fast_accum): accumulate in the WGMMA accumulator alone (CUTLASS's ...FP8FastAccum schedules) instead
    # of promoting into a second f32 copy. Left out of the dict, name and kernel key while False.
    fp8_fast_accum: bool = False

    def __post_init__(self):
        object.__setattr__(self, "groups", as_int("groups", self.groups, lo=1, hi=MAX_GROUPS))
        for name in ("n", "k", "tokens"):
            object.__setattr__(self, name, as_int(name, getattr(self, name), lo=1, hi=INT_MAX))
        as_choice("layout", self.layout, LAYOUTS)
        as_choice("dtype", self.dtype, DTYPES)
        as_choice("scale", self.scale, SCALES)
        if self.scale != "none" and self.dtype != "e4m3":
            raise FieldError("scale", f"{self.scale!r} scales an FP8 operand; dtype={self.dtype} takes only 'none'")
        as_choice("target", self.target, TARGETS)
        if not isinstance(self.fp8_fast_accum, bool):
            raise FieldError("fp8_fast_accum", f"expected true or false, got {self.fp8_fast_accum!r}")
        if self.fp8_fast_accum and (self.dtype != "e4m3" or self.scale == "block128"):
            raise FieldError("fp8_fast_accum", f"fast accumulation is an FP8 numerics choice without block scales "
                                               f"(CUTLASS's ...FP8FastAccum schedules); dtype={self.dtype}, scale={self.scale}")
        object.__setattr__(self, "distribution", self._parse_distribution(self.distribution))

    def _parse_distribution(self, value: Any) -> Any:
        if isinstance(value, str):
            return as_choice("distribution", value, NAMED_DISTRIBUTIONS)
        if not isinstance(value, (list, tuple)):
            raise FieldError("distribution", f"expected one of {', '.join(NAMED_DISTRIBUTIONS)} or a list of "
                                             f"{self.groups} fractions, got {value!r}")
        if len(value) != self.groups:
            raise FieldError("distribution", f"a histogram needs one fraction per group: {len(value)} given, "
                                             f"groups={self.groups}")
        out = []
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise FieldError(f"distribution[{i}]", f"expected a finite fraction >= 0, got {v!r}")
            out.append(float(v))
        total = sum(out)
        if abs(total - 1.0) > HISTOGRAM_SUM_TOLERANCE:
            raise FieldError("distribution", f"the fractions sum to {total:.9g}, not 1 "
                                             f"(within {HISTOGRAM_SUM_TOLERANCE:g})")
        return tuple(out)

    # --- derived facts -------------------------------------------------------------
    @property
    def op(self) -> str:
        return OP

    @property
    def max_m(self) -> int:
        """The masked layout's per-group capacity (rows of X[E, max_m, K]); for offs, the total."""
        return self.tokens

    @property
    def fractions(self) -> tuple[float, ...]:
        """The expected share of the tokens each group gets (sums to 1)."""
        return _fractions_of(self.distribution, self.groups)

    @property
    def total_tokens(self) -> int:
        """Rows multiplied in one launch as the cost model sees it: T (offs), or the expected sum of the
        masked counts (``sum(group_sizes)``)."""
        return self.tokens if self.layout == "offs" else sum(self.group_sizes)

    @property
    def group_sizes(self) -> tuple[int, ...]:
        """The expected M_i: offs, T split by the distribution; masked, E * max_m split the same way, each
        capped at the capacity max_m (uniform: every group full; worst: one full group, the rest empty)."""
        if self.layout == "offs":
            return split_tokens(self.tokens, self.fractions)
        return tuple(min(self.tokens, m) for m in split_tokens(self.groups * self.tokens, self.fractions))

    @property
    def flops(self) -> int:
        """Useful FLOPs, ``2 * total_tokens * n * k``: offs, 2 * T * n * k; masked, the expected rows of
        the counts (capacity E * max_m at most) rather than the padding."""
        return 2 * self.total_tokens * self.n * self.k

    @property
    def element_bytes(self) -> int:
        return 2 if self.dtype == "bf16" else 1

    def kernel_key(self) -> dict[str, Any]:
        """What a compiled kernel depends on (not E, T, N, K or the distribution)."""
        key = {f: getattr(self, f) for f in KERNEL_FIELDS}
        if self.fp8_fast_accum:
            key["fp8_fast_accum"] = True
        return key

    @property
    def kernel_class_name(self) -> str:
        """``name`` without sizes or distribution: every problem with it runs on the same kernels."""
        return f"grouped_{self._dtype_part()}_{self.layout}"

    def _dtype_part(self) -> str:
        part = self.dtype if self.scale == "none" else f"{self.dtype}{self.scale}"
        return part + ("fastacc" if self.fp8_fast_accum else "")

    def _distribution_part(self) -> str:
        if isinstance(self.distribution, str):
            return self.distribution
        digest = hashlib.sha256(repr(self.distribution).encode()).hexdigest()[:8]
        return f"hist{digest}"

    @property
    def name(self) -> str:
        """Stable, file-system-safe, e.g. ``grouped_e8_t16384_n14336_k4096_bf16_offs_uniform``."""
        return (f"grouped_e{self.groups}_t{self.tokens}_n{self.n}_k{self.k}_{self._dtype_part()}_"
                f"{self.layout}_{self._distribution_part()}")

    # --- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        dist = self.distribution if isinstance(self.distribution, str) else list(self.distribution)
        out = {"op": OP, "groups": self.groups, "n": self.n, "k": self.k, "tokens": self.tokens,
               "layout": self.layout, "dtype": self.dtype, "scale": self.scale, "distribution": dist,
               "target": self.target}
        if self.fp8_fast_accum:
            out["fp8_fast_accum"] = True
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "problem") -> "GroupedGemmProblem":
        data = op_fields(data, where, OP)
        reject_unknown(where, data, cls.__dataclass_fields__)
        for required in ("groups", "n", "k", "tokens"):
            if required not in data:
                raise FieldError(f"{where}.{required}", "missing")
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def replace(self, **changes) -> "GroupedGemmProblem":
        from dataclasses import replace
        return replace(self, **changes)
