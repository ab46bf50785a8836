"""The tensor-map contract: what ``cuTensorMapEncodeTiled`` accepts on sm_90.

A ``TensorMap`` is the argument list of ``cuTensorMapEncodeTiled`` (without the output
object), as integers. ``TENSOR_MAP_RULES`` is every requirement of rulebook section A that the
encode call can check, each with a stable ID. ``legal`` (no enforced rule broken) answers
exactly "will the driver accept this on sm_90?"; the rules that are documented but that the
driver does not enforce are ``enforced=False`` and only warn.

Ground truth is the driver: ``legal`` agrees with ``cuTensorMapEncodeTiled`` on every case of
the oracle sweeps (``oracles/tensor_map_oracle.py``; answers of an H200, CC 9.0, driver
580.159.04, in ``tests/data/tensor_map_oracle*_h200.jsonl.gz``; ``oracles/README.md``). Where a
document and the driver disagree, the comment on the rule says so. Three rules are in no
document: the box's shared-memory size, the 16-B inner box of interleaved maps, and the
largest global address.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cutegen.errors import FieldError

from .rule import RuleSet, Violation

# --------------------------------------------------------------------------- the enums
# Names and values exactly as CUDA's cuda.h / the Driver API (§6.30) spell them.

DATA_TYPE_NAMES = (
    "UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT64",
    "BFLOAT16", "FLOAT32_FTZ", "TFLOAT32", "TFLOAT32_FTZ", "16U4_ALIGN8B", "16U4_ALIGN16B",
    "16U6_ALIGN16B",
)
INTERLEAVE_NAMES = ("NONE", "16B", "32B")
SWIZZLE_NAMES = ("NONE", "32B", "64B", "128B", "128B_ATOM_32B", "128B_ATOM_32B_FLIP_8B", "128B_ATOM_64B")
L2_PROMOTION_NAMES = ("NONE", "L2_64B", "L2_128B", "L2_256B")
OOB_FILL_NAMES = ("NONE", "NAN_REQUEST_ZERO_FMA")

_ENUMS = {
    "data_type": ("CU_TENSOR_MAP_DATA_TYPE_", DATA_TYPE_NAMES),
    "interleave": ("CU_TENSOR_MAP_INTERLEAVE_", INTERLEAVE_NAMES),
    "swizzle": ("CU_TENSOR_MAP_SWIZZLE_", SWIZZLE_NAMES),
    "l2_promotion": ("CU_TENSOR_MAP_L2_PROMOTION_", L2_PROMOTION_NAMES),
    "oob_fill": ("CU_TENSOR_MAP_FLOAT_OOB_FILL_", OOB_FILL_NAMES),
}

# Bits per element. The packed types hold 16 values in an 8-B (16U4_ALIGN8B) or 16-B container.
ELEMENT_BITS = (8, 16, 32, 32, 64, 64, 16, 32, 64, 16, 32, 32, 32, 4, 8, 8)
FLOAT_TYPES = frozenset((6, 7, 8, 9, 10, 11, 12))          # FLOAT16 .. TFLOAT32_FTZ
PACKED_TYPES = frozenset((13, 14, 15))
PACKED_16B_TYPES = frozenset((14, 15))                      # 16U4_ALIGN16B, 16U6_ALIGN16B
INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B = 0, 1, 2
SWIZZLE_NONE = 0
SWIZZLE_SPAN_BYTES = {1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}

U32_LIMIT = 2**32
U64_LIMIT = 2**64


def enum_name(field: str, value: int) -> str:
    prefix, names = _ENUMS[field]
    return prefix + names[value] if 0 <= value < len(names) else str(value)


def enum_value(field: str, value: Any) -> int:
    """An enum given as the driver's name (``CU_TENSOR_MAP_SWIZZLE_128B``), its suffix
    (``128B``) or an integer. Integers outside the enum are kept: the driver decides them."""
    prefix, names = _ENUMS[field]
    if isinstance(value, bool):
        raise FieldError(field, f"expected an enum name or integer, got {value!r}")
    if isinstance(value, int):
        if not 0 <= value < U32_LIMIT:
            raise FieldError(field, f"{value} does not fit the 32-bit C enum")
        return value
    if isinstance(value, str):
        key = value[len(prefix):] if value.startswith(prefix) else value
        if key in names:
            return names.index(key)
        raise FieldError(field, f"{value!r} is not a {prefix.rstrip('_')} name "
                                f"({', '.join(prefix + n for n in names)})")
    raise FieldError(field, f"expected an enum name or integer, got {value!r}")


def _int(field: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(field, f"expected a non-negative integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise FieldError(field, f"expected a non-negative integer, got {value!r}")
        value = int(value)
    if value < 0:
        raise FieldError(field, f"{value} is negative")
    if value >= limit:
        raise FieldError(field, f"{value} does not fit its C type (must be < 2^{limit.bit_length() - 1})")
    return value


def _ints(field: str, value: Any, length: int, limit: int) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise FieldError(field, f"expected a list of {length} integers, got {value!r}")
    if len(value) != length:
        raise FieldError(field, f"has {len(value)} entries, the rank needs {length}")
    return tuple(_int(f"{field}[{i}]", v, limit) for i, v in enumerate(value))


FIELDS = ("data_type", "rank", "global_address", "global_dim", "global_strides", "box_dim",
          "element_strides", "interleave", "swizzle", "l2_promotion", "oob_fill")


@dataclass(frozen=True)
class TensorMap:
    """The arguments of ``cuTensorMapEncodeTiled``; enums as their integer values.

    Construct with ints or enum names; ``rank`` defaults to ``len(global_dim)``,
    ``element_strides`` to all ones. ``global_address=None`` means the address is not known
    yet (a configuration-level check): the address rule is then not evaluated.
    """
    data_type: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    rank: int | None = None
    global_address: int | None = None
    interleave: int = INTERLEAVE_NONE
    swizzle: int = SWIZZLE_NONE
    l2_promotion: int = 0
    oob_fill: int = 0

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        for f in ("data_type", "interleave", "swizzle", "l2_promotion", "oob_fill"):
            set_(f, enum_value(f, getattr(self, f)))
        gdim = tuple(self.global_dim)
        rank = len(gdim) if self.rank is None else self.rank
        set_("rank", _int("rank", rank, U32_LIMIT))
        set_("global_dim", _ints("global_dim", gdim, rank, U64_LIMIT))
        set_("global_strides", _ints("global_strides", tuple(self.global_strides), max(rank - 1, 0), U64_LIMIT))
        set_("box_dim", _ints("box_dim", tuple(self.box_dim), rank, U32_LIMIT))
        estr = (1,) * rank if self.element_strides is None else tuple(self.element_strides)
        set_("element_strides", _ints("element_strides", estr, rank, U32_LIMIT))
        if self.global_address is not None:
            set_("global_address", _int("global_address", self.global_address, U64_LIMIT))

    @classmethod
    def from_dict(cls, d: Any) -> "TensorMap":
        """The strict reader for `cutegen check tensor-map` input: every key required, no
        unknown keys, integers where integers go; errors name the field."""
        if not isinstance(d, dict):
            raise FieldError("input", f"expected a JSON object, got {type(d).__name__}")
        for k in FIELDS:
            if k not in d:
                raise FieldError(k, "missing")
        unknown = sorted(set(d) - set(FIELDS))
        if unknown:
            raise FieldError(unknown[0], "unknown field")
        rank = _int("rank", d["rank"], U32_LIMIT)
        for k in ("global_dim", "global_strides", "box_dim", "element_strides"):
            if not isinstance(d[k], (list, tuple)):
                raise FieldError(k, f"expected a list of integers, got {d[k]!r}")
        return cls(data_type=d["data_type"], rank=rank, global_address=d["global_address"],
                   global_dim=d["global_dim"], global_strides=d["global_strides"], box_dim=d["box_dim"],
                   element_strides=d["element_strides"], interleave=d["interleave"], swizzle=d["swizzle"],
                   l2_promotion=d["l2_promotion"], oob_fill=d["oob_fill"])

    def to_dict(self) -> dict:
        return {
            "data_type": enum_name("data_type", self.data_type),
            "rank": self.rank,
            "global_address": self.global_address,
            "global_dim": list(self.global_dim),
            "global_strides": list(self.global_strides),
            "box_dim": list(self.box_dim),
            "element_strides": list(self.element_strides),
            "interleave": enum_name("interleave", self.interleave),
            "swizzle": enum_name("swizzle", self.swizzle),
            "l2_promotion": enum_name("l2_promotion", self.l2_promotion),
            "oob_fill": enum_name("oob_fill", self.oob_fill),
        }

    # Facts the rules share ------------------------------------------------------------
    @property
    def element_bits(self) -> int | None:
        return ELEMENT_BITS[self.data_type] if self.data_type < len(ELEMENT_BITS) else None

    @property
    def needs_32b_alignment(self) -> bool:
        return self.interleave == INTERLEAVE_32B or self.data_type in PACKED_16B_TYPES

    @property
    def inner_box_bits(self) -> int | None:
        bits = self.element_bits
        if bits is None or self.rank < 1:
            return None
        return self.box_dim[0] * bits

    def name(self, field: str) -> str:
        return enum_name(field, getattr(self, field))


TENSOR_MAP_RULES = RuleSet("tensor_map")
_rule = TENSOR_MAP_RULES.rule
_DRV = "CUDA Driver API §6.30 cuTensorMapEncodeTiled"


def _fmt_bytes(bits: int) -> str:
    return f"{bits // 8}" if bits % 8 == 0 else f"{bits / 8}"


@_rule("TMA-DATA-TYPE-ENUM", rulebook="A03", source=f"{_DRV} (CUtensorMapDataType)",
       summary="data_type is a CUtensorMapDataType value (0..15)")
def _data_type_enum(t: TensorMap):
    if t.data_type >= len(DATA_TYPE_NAMES):
        return f"data_type={t.data_type} is not a CUtensorMapDataType (0..{len(DATA_TYPE_NAMES) - 1})"
    return None


@_rule("TMA-DATA-TYPE-PACKED-SM90", rulebook="A03",
       source="PTX ISA §9.7.9.28 target notes (sub-byte types need sm_100a+); EMP H100: 13..15 always rejected",
       summary="data_type is not a packed sub-byte type (16U4_ALIGN8B, 16U4_ALIGN16B, 16U6_ALIGN16B) on sm_90")
def _data_type_packed(t: TensorMap):
    if t.data_type in PACKED_TYPES:
        return f"data_type={t.name('data_type')} is a packed sub-byte type, not supported on sm_90"
    return None


@_rule("TMA-RANK-RANGE", rulebook="A05", source=_DRV,
       summary="1 <= rank <= 5")
def _rank_range(t: TensorMap):
    if not 1 <= t.rank <= 5:
        return f"rank={t.rank} is outside 1..5"
    return None


@_rule("TMA-RANK-INTERLEAVED", rulebook="A05", source=f"{_DRV}; PTX ISA §5.5.6",
       summary="interleave != NONE requires rank >= 3")
def _rank_interleaved(t: TensorMap):
    if t.interleave != INTERLEAVE_NONE and t.rank < 3:
        return f"rank={t.rank} < 3 with interleave={t.name('interleave')}"
    return None


@_rule("TMA-GLOBAL-ADDRESS-ALIGN", rulebook="A06", source=_DRV,
       summary="global_address % 16 == 0; % 32 == 0 with INTERLEAVE_32B or a 16-B packed type")
def _address_align(t: TensorMap):
    if t.global_address is None:
        return None
    a = 32 if t.needs_32b_alignment else 16
    if t.global_address % a:
        return f"global_address={t.global_address:#x} is not {a}-byte aligned (offset {t.global_address % a})"
    return None


# Not in any document: the driver takes global addresses below 2^57 only (a 57-bit virtual
# address). Sweep 2 (H200): 2^k-32, 2^k-16, 2^k, 2^k+16, 2^k+32 for k = 40..64 and canonical-high
# addresses, each with a 16-B and a ~2^52-B tensor: everything up to 2^57-16 accepted, everything
# from 2^57 rejected, whatever the tensor's extent (the end of the tensor is not checked).
GLOBAL_ADDRESS_LIMIT = 2**57


@_rule("TMA-GLOBAL-ADDRESS-MAX", rulebook="A06", source="EMP H200 driver 580.159.04, oracle sweeps 1-2",
       summary="global_address < 2^57")
def _address_max(t: TensorMap):
    if t.global_address is not None and t.global_address >= GLOBAL_ADDRESS_LIMIT:
        return f"global_address={t.global_address:#x} is not below 2^57 ({GLOBAL_ADDRESS_LIMIT:#x})"
    return None


@_rule("TMA-GLOBAL-DIM-RANGE", rulebook="A07", source=_DRV,
       summary="every global_dim[i] is in 1..2^32")
def _global_dim_range(t: TensorMap):
    for i, d in enumerate(t.global_dim):
        if not 1 <= d <= 2**32:
            return f"global_dim[{i}]={d} is outside 1..2^32"
    return None


@_rule("TMA-GLOBAL-DIM-PACKED", rulebook="A07", source=_DRV,
       summary="global_dim[0] % 128 == 0 for 16U4_ALIGN16B/16U6_ALIGN16B, % 2 == 0 for 16U4_ALIGN8B")
def _global_dim_packed(t: TensorMap):
    if t.rank < 1 or t.data_type not in PACKED_TYPES:
        return None
    m = 128 if t.data_type in PACKED_16B_TYPES else 2
    if t.global_dim[0] % m:
        return f"global_dim[0]={t.global_dim[0]} is not a multiple of {m} for {t.name('data_type')}"
    return None


@_rule("TMA-GLOBAL-STRIDE-ALIGN", rulebook="A08", source=_DRV,
       summary="every global_strides[i] % 16 == 0; % 32 == 0 with INTERLEAVE_32B or a 16-B packed type")
def _stride_align(t: TensorMap):
    a = 32 if t.needs_32b_alignment else 16
    for i, s in enumerate(t.global_strides):
        if s % a:
            return f"global_strides[{i}]={s} is not a multiple of {a}"
    return None


@_rule("TMA-GLOBAL-STRIDE-MAX", rulebook="A08", source=_DRV,
       summary="every global_strides[i] < 2^40")
def _stride_max(t: TensorMap):
    for i, s in enumerate(t.global_strides):
        if s >= 2**40:
            return f"global_strides[{i}]={s} is not below 2^40"
    return None


@_rule("TMA-GLOBAL-STRIDE-OVERLAP", rulebook="A10", enforced=False,
       source=f"{_DRV} (strides = previous extent + padding); EMP H100: not enforced",
       summary="global_strides[0] >= global_dim[0]*esize and global_strides[i] >= global_strides[i-1]*global_dim[i]")
def _stride_overlap(t: TensorMap):
    bits = t.element_bits
    if bits is None:
        return None
    prev = -(-t.global_dim[0] * bits // 8) if t.rank >= 1 else 0
    for i, s in enumerate(t.global_strides):
        if s < prev:
            return f"global_strides[{i}]={s} < {prev} bytes spanned by the dimension below: rows overlap"
        prev = s * t.global_dim[i + 1]
    return None


@_rule("TMA-BOX-DIM-RANGE", rulebook="A11", source=_DRV,
       summary="every box_dim[i] is in 1..256")
def _box_range(t: TensorMap):
    for i, b in enumerate(t.box_dim):
        if not 1 <= b <= 256:
            return f"box_dim[{i}]={b} is outside 1..256"
    return None


@_rule("TMA-BOX-INNER-16B", rulebook="A12",
       source=f"{_DRV}; PTX ISA §5.5.3.1; EMP H200 sweep 1: enforced for interleaved maps too "
              "(the driver text says only for INTERLEAVE_NONE)",
       summary="box_dim[0]*esize % 16 == 0, whatever the interleave")
def _box_inner_16b(t: TensorMap):
    # The driver text limits this to INTERLEAVE_NONE; the driver rejected every interleaved map
    # with an inner box of 1..12, 17..30, 33..40, 60, 65..72, 88, 120, 129..136, 255, 510, 1020 or
    # 2040 bytes and accepted 16-B multiples (sweep 1: 1,033 interleaved cases, no exception).
    bits = t.inner_box_bits
    if bits is None:
        return None
    if bits % 128:
        return (f"box_dim[0]={t.box_dim[0]} x {_fmt_bytes(t.element_bits)} B = {_fmt_bytes(bits)} B "
                f"is not a multiple of 16 B")
    return None


@_rule("TMA-BOX-INNER-PACKED", rulebook="A12", source=_DRV,
       summary="box_dim[0] == 128 for 16U4_ALIGN16B and 16U6_ALIGN16B")
def _box_inner_packed(t: TensorMap):
    if t.rank >= 1 and t.data_type in PACKED_16B_TYPES and t.box_dim[0] != 128:
        return f"box_dim[0]={t.box_dim[0]} must be 128 for {t.name('data_type')}"
    return None


@_rule("TMA-ELEMENT-STRIDE-RANGE", rulebook="A13",
       source=f"{_DRV}; EMP H100: element_strides[0] is range-checked although the text says it is ignored",
       summary="every element_strides[i] is in 1..8, including element_strides[0]")
def _estride_range(t: TensorMap):
    for i, e in enumerate(t.element_strides):
        if not 1 <= e <= 8:
            return f"element_strides[{i}]={e} is outside 1..8"
    return None


# The largest box the driver accepts: not in any document. Sweep 1 (H200, driver 580.159.04):
# with B = esize * prod(floor(box_dim[i] / element_strides[i])), every accepted map had
# B <= 233,472 and every rejected one (otherwise legal) B >= 233,536, over 8,900 boxes of
# 64 KiB .. 6 MiB, every rank, interleave and swizzle, nine dtypes. 233,472 B = 228 KiB, the
# H100/H200 shared memory per SM (cuDeviceGetAttribute 81). The count is floor, not the ceil the
# Driver API gives for elements loaded: two interleaved maps with a dimension where
# box_dim < element_strides (floor 0) were accepted at 258,048 and 1,048,576 ceil-counted bytes;
# element_strides[0] takes part although the text says it is ignored for INTERLEAVE_NONE
# (counting box_dim[0] whole mislabels 14 non-interleaved maps). Sweep 2 (5,721 cases) confirmed
# floor: 3,615 accepted maps count within 228 KiB by floor and above it by ceil, and 613 maps
# with a floor-0 dimension were accepted at ceil counts up to 32 GiB. Sweep 3 pinned the bytes:
# all 996 maps at 233,472 accepted; all 1,197 at the eight counts a box can form between 233,472
# and 233,520 (the smallest is 233,478) rejected.
SMEM_BOX_LIMIT_BYTES = 233472


def box_bytes_floor(t: TensorMap) -> int | None:
    """esize * prod(floor(box_dim[i] / element_strides[i])): the driver's count of a box's bytes."""
    bits = t.element_bits
    if bits is None or any(e == 0 for e in t.element_strides):
        return None
    n = 1
    for b, e in zip(t.box_dim, t.element_strides):
        n *= b // e
    return n * bits // 8


def box_bytes_traversed(t: TensorMap) -> int | None:
    """esize * prod(ceil(box_dim[i] / element_strides[i])): the bytes TMA writes to shared memory
    (Driver API: ceil(boxDim[i] / elementStrides[i]) elements along dimension i)."""
    bits = t.element_bits
    if bits is None or any(e == 0 for e in t.element_strides):
        return None
    n = 1
    for b, e in zip(t.box_dim, t.element_strides):
        n *= -(-b // e)
    return n * bits // 8


@_rule("TMA-BOX-SMEM-BYTES", rulebook="H",
       source="EMP H200 driver 580.159.04, oracle sweeps 1-3 (no document states it)",
       summary="esize * prod(floor(box_dim[i] / element_strides[i])) <= 233472 (228 KiB)")
def _box_smem_bytes(t: TensorMap):
    b = box_bytes_floor(t)
    if b is not None and b > SMEM_BOX_LIMIT_BYTES:
        return (f"box {list(t.box_dim)} / element_strides {list(t.element_strides)} counts {b} B "
                f"> {SMEM_BOX_LIMIT_BYTES} B (228 KiB)")
    return None


@_rule("TMA-BOX-SMEM-BYTES-TRAVERSED", rulebook="H", enforced=False,
       source="Driver API (ceil(boxDim/elementStrides) elements are loaded) + the 228-KiB driver limit",
       summary="esize * prod(ceil(box_dim[i] / element_strides[i])) <= 233472: what TMA writes fits in shared memory")
def _box_smem_traversed(t: TensorMap):
    # The driver counts with floor; a box it accepts can still write more than 228 KiB.
    b = box_bytes_traversed(t)
    if b is not None and b > SMEM_BOX_LIMIT_BYTES:
        return f"box {list(t.box_dim)} / element_strides {list(t.element_strides)} writes {b} B > {SMEM_BOX_LIMIT_BYTES} B"
    return None


@_rule("TMA-INTERLEAVE-ENUM", rulebook="A14", source=_DRV,
       summary="interleave is NONE, 16B or 32B (0..2)")
def _interleave_enum(t: TensorMap):
    if t.interleave >= len(INTERLEAVE_NAMES):
        return f"interleave={t.interleave} is not a CUtensorMapInterleave (0..2)"
    return None


@_rule("TMA-SWIZZLE-ENUM", rulebook="A15", source=_DRV,
       summary="swizzle is a CUtensorMapSwizzle value (0..6)")
def _swizzle_enum(t: TensorMap):
    if t.swizzle >= len(SWIZZLE_NAMES):
        return f"swizzle={t.swizzle} is not a CUtensorMapSwizzle (0..6)"
    return None


@_rule("TMA-SWIZZLE-ATOM-SM90", rulebook="A15",
       source="PTX ISA §5.5.7 + §9.7.9.28 (.swizzle_atomicity is sm_100a+); EMP H100: 4..6 rejected",
       summary="swizzle is not one of the 128B_ATOM_* modes (4..6) on sm_90")
def _swizzle_atom(t: TensorMap):
    if 4 <= t.swizzle <= 6:
        return f"swizzle={t.name('swizzle')} needs sm_100a or later"
    return None


@_rule("TMA-BOX-INNER-SWIZZLE-SPAN", rulebook="A16", source=f"{_DRV}; CUDA PG §10.29.3.2 Table 12",
       summary="interleave == NONE and swizzle != NONE require box_dim[0]*esize <= swizzle span (32/64/128 B)")
def _box_inner_span(t: TensorMap):
    bits = t.inner_box_bits
    span = SWIZZLE_SPAN_BYTES.get(t.swizzle)
    if bits is None or span is None or t.interleave != INTERLEAVE_NONE:
        return None
    if bits > span * 8:
        return (f"box_dim[0]={t.box_dim[0]} x {_fmt_bytes(t.element_bits)} B = {_fmt_bytes(bits)} B "
                f"exceeds the {span}-B span of {t.name('swizzle')}")
    return None


@_rule("TMA-INTERLEAVE32-SWIZZLE32", rulebook="A17", enforced=False,
       source=f"{_DRV} ('When interleave is INTERLEAVE_32B, swizzle must be SWIZZLE_32B'); EMP H100: not enforced",
       summary="interleave == 32B requires swizzle == 32B")
def _il32_sw32(t: TensorMap):
    if t.interleave == INTERLEAVE_32B and t.swizzle != 1:
        return f"interleave=CU_TENSOR_MAP_INTERLEAVE_32B with swizzle={t.name('swizzle')}, documented: SWIZZLE_32B only"
    return None


@_rule("TMA-L2-PROMOTION-ENUM", rulebook="A18", source=_DRV,
       summary="l2_promotion is NONE, L2_64B, L2_128B or L2_256B (0..3)")
def _l2_enum(t: TensorMap):
    if t.l2_promotion >= len(L2_PROMOTION_NAMES):
        return f"l2_promotion={t.l2_promotion} is not a CUtensorMapL2promotion (0..3)"
    return None


@_rule("TMA-OOB-FILL-ENUM", rulebook="A19", source=_DRV,
       summary="oob_fill is NONE or NAN_REQUEST_ZERO_FMA (0..1)")
def _oob_enum(t: TensorMap):
    if t.oob_fill >= len(OOB_FILL_NAMES):
        return f"oob_fill={t.oob_fill} is not a CUtensorMapFloatOOBfill (0..1)"
    return None


@_rule("TMA-OOB-NAN-FLOAT-ONLY", rulebook="A19", source=f"{_DRV}; PTX ISA §5.5.3.3",
       summary="oob_fill == NAN_REQUEST_ZERO_FMA requires a floating-point, non-packed data_type")
def _oob_nan_float(t: TensorMap):
    if t.oob_fill == 1 and t.data_type < len(DATA_TYPE_NAMES) and t.data_type not in FLOAT_TYPES:
        return f"oob_fill=NAN_REQUEST_ZERO_FMA with non-float data_type={t.name('data_type')}"
    return None


# --------------------------------------------------------------------------- entry points

def check_tensor_map(tm: TensorMap) -> list[Violation]:
    """Every rule the map breaks, enforced or not, in rule order."""
    return TENSOR_MAP_RULES.evaluate(tm)


def is_legal(tm: TensorMap) -> bool:
    """Will cuTensorMapEncodeTiled accept this map on sm_90?"""
    return not any(v.enforced for v in check_tensor_map(tm))


def tensor_map_verdict(d: dict) -> dict:
    """The `cutegen check tensor-map` answer for one input object (raises FieldError)."""
    vs = check_tensor_map(TensorMap.from_dict(d))
    rules = [v.rule_id for v in vs if v.enforced]
    return {"legal": not rules, "rules": rules, "warnings": [v.rule_id for v in vs if not v.enforced]}


def smem_destination_ok(addr: int) -> bool:
    """A21: the shared-memory destination of a tile-mode cp.async.bulk.tensor must be 128-B
    aligned (CUDA PG §10.29.2 Table 10; H100: 16/32/64-B-aligned destinations fault with
    CUDA_ERROR_MISALIGNED_ADDRESS). PTX §5.5.3.1 says 16 B; the hardware says 128."""
    return addr % 128 == 0


def rules_by_id() -> dict:
    return {r.id: r for r in TENSOR_MAP_RULES}


__all__ = [
    "TensorMap", "TENSOR_MAP_RULES", "check_tensor_map", "is_legal", "tensor_map_verdict",
    "smem_destination_ok", "enum_value", "enum_name", "box_bytes_floor", "box_bytes_traversed",
    "SMEM_BOX_LIMIT_BYTES", "GLOBAL_ADDRESS_LIMIT",
]
