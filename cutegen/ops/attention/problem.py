"""AttentionProblem: O = softmax(scale * Q K^T + mask) V, forward, per (batch, query head).

Shapes (logical): Q is (batch, heads_q, seqlen_q, head_dim), K is (batch, heads_kv, seqlen_kv, head_dim),
V is (batch, heads_kv, seqlen_kv, head_dim_v), O is (batch, heads_q, seqlen_q, head_dim_v); the optional
log-sum-exp is (batch, heads_q, seqlen_q) in float32. Query head ``h`` reads KV head
``h // (heads_q // heads_kv)`` (MHA: heads_kv == heads_q; GQA: a divisor; MQA: heads_kv == 1), which is
``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``'s grouping.

``layout`` is the storage order of each tensor: ``bshd`` (batch, sequence, head, dim; flash-attention's and
an LLM projection's natural order) or ``bhsd`` (batch, head, sequence, dim; a contiguous SDPA tensor). The
head dim is always contiguous.

``varlen``: the batch is a set of sequences of different lengths, packed along the sequence axis and
delimited by cumulative offsets (flash-attention's ``cu_seqlens_q`` / ``cu_seqlens_k``); ``seqlen_q`` and
``seqlen_kv`` are then the maxima per sequence. Packed tensors are (total_tokens, heads, dim), so a varlen
problem has layout ``bshd``.

Causal mask alignment: **top-left**, as SDPA's ``is_causal=True`` (``torch.ones(L, S).tril(diagonal=0)``):
query ``i`` attends to key ``j`` iff ``j <= i``, whatever seqlen_q and seqlen_kv are. With
``seqlen_q > seqlen_kv`` the last queries see every key; with ``seqlen_q < seqlen_kv`` the keys past
``seqlen_q - 1`` are never seen (flash-attention >= 2.1 aligns bottom-right instead; that is not this).
A **varlen** problem is flash-attention's ``flash_attn_varlen_func`` and aligns causal **bottom-right per
sequence** (query i sees key j iff j <= i + len_k - len_q; ``cutegen.ops.attention.varlen``).

The output element type is the input's for bf16 and f16; for e4m3 inputs it is ``dtype_out``, bf16 (default)
or f16 (an e4m3 O would lose too much: the kernel's epilogue writes the 16-bit type directly). Softmax and both
accumulations are float32 unless a config says otherwise (``AttentionConfig.acc_qk``).

FP8 (``dtype`` e4m3, FlashAttention-3's convention): Q, K, V hold e4m3 values with one float descale factor
per tensor, a run-time argument (``descale_q``, ``descale_k``, ``descale_v``; real value = stored x descale):
the kernel computes softmax(scale * descale_q * descale_k * Q K^T) V * descale_v. 8-bit WGMMA reads both
shared-memory operands K-major only, and P V's K is the KV sequence, so the kernel reads V **transposed**:
``v_transposed`` (None: the dtype's natural layout, True for e4m3, False otherwise) says V is stored as
(batch, heads_kv, head_dim, seqlen_kv) with the KV sequence contiguous (V^T; strides (b, h, d) in elements,
the head-dim stride a multiple of 16 elements: pad seqlen_kv to 16). The PyTorch op makes that copy when
given an SDPA-layout V (``cutegen.ops.attention.torch_op``). ``allow_f16_qk_acc``: the caller accepts a
Q K^T accumulated in f16 (faster on 8-bit and f16 inputs, less accurate: the search may pick it only then;
rule ATTN-ACC-QK-F16-CONSENT).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..._fields import as_choice, as_float, as_int, reject_unknown
from ...core.op import op_fields
from ...errors import FieldError

OP = "attention"
DTYPES = ("bf16", "f16", "e4m3")
LAYOUTS = ("bshd", "bhsd")
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "e4m3": 1}
OUTPUT_DTYPE = {"bf16": "bf16", "f16": "f16", "e4m3": "bf16"}     # the default output type per input type
OUTPUT_DTYPES_FP8 = ("bf16", "f16")            # what an e4m3 kernel may write (dtype_out)
HEAD_DIM_MIN, HEAD_DIM_MAX, HEAD_DIM_MULTIPLE = 8, 256, 8
INT_MAX = 2**31 - 1
# The fields the compiled kernel depends on; sizes, the scale and the layout (strides) are run-time
# arguments of the C ABI.
KERNEL_FIELDS = ("head_dim", "head_dim_v", "dtype", "causal", "varlen", "return_lse")


def causal_pairs(seqlen_q: int, seqlen_kv: int) -> int:
    """The (query, key) pairs a top-left causal mask keeps: sum over i < seqlen_q of min(i + 1, seqlen_kv)."""
    full = min(seqlen_q, seqlen_kv)                 # rows 0..full-1 see i + 1 keys
    return full * (full + 1) // 2 + (seqlen_q - full) * seqlen_kv


@dataclass(frozen=True)
class AttentionProblem:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_kv: int
    head_dim: int
    head_dim_v: int | None = None      # None: head_dim
    dtype: str = "bf16"
    causal: bool = False
    scale: float | None = None         # None: 1 / sqrt(head_dim)
    layout: str = "bshd"
    varlen: bool = False
    return_lse: bool = False
    dtype_out: str | None = None       # None: OUTPUT_DTYPE[dtype]; e4m3 inputs may choose bf16 or f16
    v_transposed: bool | None = None   # None: the dtype's natural V layout (V^T for e4m3)
    allow_f16_qk_acc: bool = False     # the caller accepts an f16 Q K^T accumulator (a config choice)

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        for name in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_kv"):
            set_(name, as_int(name, getattr(self, name), lo=1, hi=INT_MAX))
        for name in ("head_dim", "head_dim_v"):
            value = getattr(self, name)
            if value is None and name == "head_dim_v":
                continue
            value = as_int(name, value, lo=HEAD_DIM_MIN, hi=HEAD_DIM_MAX)
            if value % HEAD_DIM_MULTIPLE:
                raise FieldError(name, f"{value} is not a multiple of {HEAD_DIM_MULTIPLE} (16-byte rows for TMA)")
            set_(name, value)
        if self.head_dim_v is not None and self.head_dim_v == self.head_dim:
            set_("head_dim_v", None)         # one spelling per problem: the default is left unset
        if self.heads_q % self.heads_kv:
            raise FieldError("heads_kv", f"{self.heads_kv} does not divide heads_q={self.heads_q} "
                                         f"(each KV head serves a whole group of query heads)")
        as_choice("dtype", self.dtype, DTYPES)
        as_choice("layout", self.layout, LAYOUTS)
        for name in ("causal", "varlen", "return_lse"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"expected true or false, got {getattr(self, name)!r}")
        if self.dtype_out is not None:
            as_choice("dtype_out", self.dtype_out, DTYPES)
            if self.dtype == "e4m3":
                if self.dtype_out not in OUTPUT_DTYPES_FP8:
                    raise FieldError("dtype_out", f"{self.dtype_out!r}: an e4m3 kernel writes O in bf16 or f16 "
                                                  f"(an 8-bit O loses too much)")
            elif self.dtype_out != self.dtype:
                raise FieldError("dtype_out", f"{self.dtype_out!r}: a {self.dtype} kernel writes O in {self.dtype}")
            if self.dtype_out == OUTPUT_DTYPE[self.dtype]:
                set_("dtype_out", None)      # one spelling per problem
        for name in ("v_transposed",):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise FieldError(name, f"expected true, false or null, got {value!r}")
        if self.v_transposed is not None and self.v_transposed == (self.dtype == "e4m3"):
            set_("v_transposed", None)       # the dtype's natural layout is left unset
        if not isinstance(self.allow_f16_qk_acc, bool):
            raise FieldError("allow_f16_qk_acc", f"expected true or false, got {self.allow_f16_qk_acc!r}")
        if self.scale is not None:
            scale = as_float("scale", self.scale)
            if scale <= 0.0:
                raise FieldError("scale", f"{scale} is not positive")
            set_("scale", scale)
        if self.varlen and self.layout != "bshd":
            raise FieldError("layout", f"{self.layout!r}: varlen sequences are packed as (total_tokens, heads, dim), "
                                       f"layout 'bshd'")
        # every offset of the largest tensor must fit the kernel's 32-bit strides
        for name, heads, seq, dim in (("q", self.heads_q, self.seqlen_q, self.head_dim),
                                      ("k", self.heads_kv, self.seqlen_kv, self.head_dim),
                                      ("v", self.heads_kv, self.seqlen_kv, self.dv),
                                      ("o", self.heads_q, self.seqlen_q, self.dv)):
            elems = self.batch * heads * seq * dim
            if elems > INT_MAX:
                raise FieldError("batch", f"{name.upper()} has {elems} elements, above 2^31-1 "
                                          f"(the kernel's strides and offsets are 32-bit)")

    # --- derived facts -------------------------------------------------------------------------------
    @property
    def dv(self) -> int:
        """The head dim of V and O."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def softmax_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1: MHA)."""
        return self.heads_q // self.heads_kv

    @property
    def output_dtype(self) -> str:
        return OUTPUT_DTYPE[self.dtype] if self.dtype_out is None else self.dtype_out

    @property
    def v_is_transposed(self) -> bool:
        """V stored as (batch, heads_kv, head_dim, seqlen_kv), the KV sequence contiguous (V^T)."""
        return (self.dtype == "e4m3") if self.v_transposed is None else self.v_transposed

    @property
    def pairs(self) -> int:
        """(query, key) pairs computed per (batch, query head): all, or those the causal mask keeps."""
        return causal_pairs(self.seqlen_q, self.seqlen_kv) if self.causal else self.seqlen_q * self.seqlen_kv

    @property
    def flops(self) -> int:
        """Useful FLOPs: 2 per multiply-add of Q K^T (head_dim) and of P V (head_dim_v) over the pairs
        kept: 4 * B * Hq * Sq * Skv * D unmasked with D == Dv; causal counts the kept pairs exactly.
        With varlen the figure is that of the padded batch (every sequence at the maximum lengths); a
        run with real lengths counts its own (``flops_of_lengths``)."""
        return 2 * self.batch * self.heads_q * self.pairs * (self.head_dim + self.dv)

    def flops_of_lengths(self, seqlens_q, seqlens_kv) -> int:
        """Useful FLOPs of a varlen batch with these lengths per sequence (causal: bottom-right per sequence,
        cutegen.ops.attention.varlen)."""
        from .varlen import pairs as varlen_pairs
        pairs = varlen_pairs(seqlens_q, seqlens_kv, self.causal)
        return 2 * self.heads_q * pairs * (self.head_dim + self.dv)

    @property
    def bytes_min(self) -> int:
        """Bytes every kernel must move at least: Q, K, V read once, O (and the LSE) written once."""
        eb = ELEMENT_BYTES[self.dtype]
        q = self.batch * self.heads_q * self.seqlen_q * self.head_dim * eb
        kv = self.batch * self.heads_kv * self.seqlen_kv * (self.head_dim + self.dv) * eb
        o = self.batch * self.heads_q * self.seqlen_q * self.dv * ELEMENT_BYTES[self.output_dtype]
        lse = self.batch * self.heads_q * self.seqlen_q * 4 if self.return_lse else 0
        return q + kv + o + lse

    def kernel_key(self) -> dict[str, Any]:
        """What a compiled kernel for this problem depends on (not its sizes, scale or strides)."""
        # grouped: a GQA/MQA kernel (K and V heads shared by groups of query heads) is another kernel
        key = {"op": OP, **{f: getattr(self, f) for f in KERNEL_FIELDS}, "grouped": self.heads_q != self.heads_kv}
        # FP8 additions, present only where they are not the defaults (every 16-bit key keeps its bytes)
        if self.dtype == "e4m3":
            key["dtype_out"] = self.output_dtype
        if self.v_transposed is not None:
            key["v_transposed"] = self.v_transposed
        return key

    @property
    def kernel_class_name(self) -> str:
        """``name`` without sizes: every problem with this name runs on the same kernels."""
        parts = ["attn", f"d{self.head_dim}"]
        if self.head_dim_v is not None:
            parts.append(f"dv{self.head_dim_v}")
        parts.append(self.dtype)
        parts += _fp8_name_parts(self)
        if self.heads_q != self.heads_kv:
            parts.append("gqa")
        parts += [flag for flag in ("causal", "varlen", "lse") if getattr(self, _FLAG_FIELD[flag])]
        return "_".join(parts)

    @property
    def name(self) -> str:
        """Stable, file-system-safe: attn_b4_hq32_hkv8_sq4096_skv4096_d128_bf16_causal. The scale is a
        run-time argument of the kernel and stays out (as GEMM's alpha does)."""
        parts = ["attn", f"b{self.batch}", f"hq{self.heads_q}", f"hkv{self.heads_kv}",
                 f"sq{self.seqlen_q}", f"skv{self.seqlen_kv}", f"d{self.head_dim}"]
        if self.head_dim_v is not None:
            parts.append(f"dv{self.head_dim_v}")
        parts.append(self.dtype)
        parts += _fp8_name_parts(self)
        if self.allow_f16_qk_acc:
            parts.append("f16accok")
        if self.layout != "bshd":
            parts.append(self.layout)
        parts += [flag for flag in ("causal", "varlen", "lse") if getattr(self, _FLAG_FIELD[flag])]
        return "_".join(parts)

    # --- JSON ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": OP}
        for f in _FIELDS:
            value = getattr(self, f)
            if f in _OMITTED_AT_NONE and value is None:
                continue
            if f == "allow_f16_qk_acc" and not value:
                continue               # omitted at its default: problem files without it keep their bytes
            out[f] = value
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "problem") -> "AttentionProblem":
        data = op_fields(data, where, OP)
        reject_unknown(where, data, _FIELDS)
        for required in ("batch", "heads_q", "seqlen_q", "seqlen_kv", "head_dim"):
            if required not in data:
                raise FieldError(f"{where}.{required}", "missing")
        data.setdefault("heads_kv", data["heads_q"])
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def replace(self, **changes) -> "AttentionProblem":
        return replace(self, **changes)


def _fp8_name_parts(p: AttentionProblem) -> list[str]:
    """Name parts of the FP8 fields where they differ from the defaults (no 16-bit name changes)."""
    parts = []
    if p.dtype_out is not None:
        parts.append(f"o{p.dtype_out}")
    if p.v_transposed is not None:
        parts.append("vt" if p.v_transposed else "vsd")
    return parts


_FIELDS = tuple(AttentionProblem.__dataclass_fields__)
_OMITTED_AT_NONE = frozenset({"head_dim_v", "scale", "dtype_out", "v_transposed"})
_FLAG_FIELD = {"causal": "causal", "varlen": "varlen", "lse": "return_lse"}
