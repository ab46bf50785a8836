"""Each tensor-map rule on both sides of its boundary, the record and its strict parser."""
from __future__ import annotations

import dataclasses

import pytest

from cutegen.errors import FieldError
from cutegen.legality.tensor_map import (
    TENSOR_MAP_RULES, TensorMap, check_tensor_map, is_legal, smem_destination_ok, tensor_map_verdict,
)

# Rulebook H #1: bf16 4096x4096 row-major, box 64x128, 128B swizzle: legal on the H100.
BASE = dict(
    data_type="CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", rank=2, global_address=0x7F0000000010,
    global_dim=[4096, 4096], global_strides=[8192], box_dim=[64, 128], element_strides=[1, 1],
    interleave="CU_TENSOR_MAP_INTERLEAVE_NONE", swizzle="CU_TENSOR_MAP_SWIZZLE_128B",
    l2_promotion="CU_TENSOR_MAP_L2_PROMOTION_L2_128B", oob_fill="CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
)

# A rank-3 base for the interleaved rules.
BASE3 = dict(BASE, rank=3, global_dim=[8, 64, 64], global_strides=[32, 2048], box_dim=[8, 8, 8],
             element_strides=[1, 1, 1], interleave="CU_TENSOR_MAP_INTERLEAVE_32B",
             swizzle="CU_TENSOR_MAP_SWIZZLE_32B", global_address=0x7F0000000020)


def ids(d: dict) -> set[str]:
    return {v.rule_id for v in check_tensor_map(TensorMap.from_dict(d))}


def test_bases_are_legal():
    for d in (BASE, BASE3):
        assert tensor_map_verdict(d) == {"legal": True, "rules": [], "warnings": []}


# (rule id, parameters on the legal side, parameters on the illegal side). Each pair differs
# only at the rule's boundary.
BOUNDARIES = [
    ("TMA-DATA-TYPE-ENUM", dict(data_type=12), dict(data_type=16)),
    ("TMA-DATA-TYPE-PACKED-SM90", dict(data_type=12), dict(data_type=13)),
    ("TMA-DATA-TYPE-PACKED-SM90", dict(data_type=12), dict(data_type="CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B")),
    ("TMA-RANK-RANGE", dict(rank=1, global_dim=[4096], global_strides=[], box_dim=[64], element_strides=[1]),
     dict(rank=0, global_dim=[], global_strides=[], box_dim=[], element_strides=[])),
    ("TMA-RANK-RANGE", dict(rank=5, global_dim=[64, 2, 2, 2, 2], global_strides=[128, 256, 512, 1024],
                            box_dim=[64, 1, 1, 1, 1], element_strides=[1] * 5),
     dict(rank=6, global_dim=[64, 2, 2, 2, 2, 2], global_strides=[128, 256, 512, 1024, 2048],
          box_dim=[64, 1, 1, 1, 1, 1], element_strides=[1] * 6)),
    ("TMA-RANK-INTERLEAVED", dict(interleave="CU_TENSOR_MAP_INTERLEAVE_NONE"),
     dict(interleave="CU_TENSOR_MAP_INTERLEAVE_16B")),
    ("TMA-GLOBAL-ADDRESS-ALIGN", dict(global_address=16), dict(global_address=8)),
    ("TMA-GLOBAL-ADDRESS-ALIGN", dict(global_address=0x7F0000000000), dict(global_address=0x7F0000000018)),
    ("TMA-GLOBAL-DIM-RANGE", dict(global_dim=[1, 4096]), dict(global_dim=[0, 4096])),
    ("TMA-GLOBAL-DIM-RANGE", dict(global_dim=[2**32, 4096], global_strides=[2**33]),
     dict(global_dim=[2**32 + 1, 4096], global_strides=[2**33 + 16])),
    ("TMA-GLOBAL-DIM-RANGE", dict(global_dim=[4096, 2**32]), dict(global_dim=[4096, 2**32 + 1])),
    ("TMA-GLOBAL-STRIDE-ALIGN", dict(global_strides=[8208]), dict(global_strides=[8200])),
    ("TMA-GLOBAL-STRIDE-MAX", dict(global_strides=[2**40 - 16]), dict(global_strides=[2**40])),
    ("TMA-BOX-DIM-RANGE", dict(box_dim=[64, 1]), dict(box_dim=[64, 0])),
    ("TMA-BOX-DIM-RANGE", dict(box_dim=[64, 256]), dict(box_dim=[64, 257])),
    ("TMA-BOX-DIM-RANGE", dict(swizzle=0, box_dim=[256, 128]), dict(swizzle=0, box_dim=[257, 128])),
    ("TMA-BOX-INNER-16B", dict(swizzle=0, box_dim=[8, 128]), dict(swizzle=0, box_dim=[4, 128])),
    ("TMA-BOX-INNER-16B", dict(swizzle=0, box_dim=[16, 128]), dict(swizzle=0, box_dim=[12, 128])),
    ("TMA-ELEMENT-STRIDE-RANGE", dict(element_strides=[1, 8]), dict(element_strides=[1, 9])),
    ("TMA-ELEMENT-STRIDE-RANGE", dict(element_strides=[1, 1]), dict(element_strides=[1, 0])),
    ("TMA-ELEMENT-STRIDE-RANGE", dict(element_strides=[8, 1]), dict(element_strides=[9, 1])),
    ("TMA-ELEMENT-STRIDE-RANGE", dict(element_strides=[1, 1]), dict(element_strides=[0, 1])),
    ("TMA-INTERLEAVE-ENUM", dict(interleave=0), dict(interleave=3)),
    ("TMA-SWIZZLE-ENUM", dict(swizzle=3), dict(swizzle=7)),
    ("TMA-SWIZZLE-ATOM-SM90", dict(swizzle="CU_TENSOR_MAP_SWIZZLE_128B"),
     dict(swizzle="CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B")),
    ("TMA-SWIZZLE-ATOM-SM90", dict(swizzle=3), dict(swizzle=6)),
    ("TMA-BOX-INNER-SWIZZLE-SPAN", dict(box_dim=[64, 128]), dict(box_dim=[72, 128])),
    ("TMA-BOX-INNER-SWIZZLE-SPAN", dict(swizzle="CU_TENSOR_MAP_SWIZZLE_64B", box_dim=[32, 128]),
     dict(swizzle="CU_TENSOR_MAP_SWIZZLE_64B", box_dim=[40, 128])),
    ("TMA-BOX-INNER-SWIZZLE-SPAN", dict(swizzle="CU_TENSOR_MAP_SWIZZLE_32B", box_dim=[16, 128]),
     dict(swizzle="CU_TENSOR_MAP_SWIZZLE_32B", box_dim=[24, 128])),
    ("TMA-BOX-INNER-SWIZZLE-SPAN", dict(data_type="CU_TENSOR_MAP_DATA_TYPE_FLOAT32", global_strides=[16384],
                                        box_dim=[32, 128]),
     dict(data_type="CU_TENSOR_MAP_DATA_TYPE_FLOAT32", global_strides=[16384], box_dim=[36, 128])),
    ("TMA-L2-PROMOTION-ENUM", dict(l2_promotion=3), dict(l2_promotion=4)),
    ("TMA-OOB-FILL-ENUM", dict(oob_fill=1), dict(oob_fill=2)),
    ("TMA-OOB-NAN-FLOAT-ONLY", dict(oob_fill="CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"),
     dict(oob_fill="CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA", data_type="CU_TENSOR_MAP_DATA_TYPE_UINT16")),
    ("TMA-OOB-NAN-FLOAT-ONLY", dict(oob_fill=1, data_type="CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ",
                                    global_strides=[16384], box_dim=[32, 128]),
     dict(oob_fill=1, data_type="CU_TENSOR_MAP_DATA_TYPE_INT32", global_strides=[16384], box_dim=[32, 128])),
    ("TMA-GLOBAL-STRIDE-OVERLAP", dict(global_strides=[8192]), dict(global_strides=[8176])),
]


@pytest.mark.parametrize("rule_id,legal_side,illegal_side", BOUNDARIES,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BOUNDARIES)])
def test_rule_boundary(rule_id, legal_side, illegal_side):
    assert rule_id not in ids(dict(BASE, **legal_side))
    broken = ids(dict(BASE, **illegal_side))
    assert rule_id in broken


INTERLEAVED_BOUNDARIES = [
    ("TMA-RANK-INTERLEAVED", dict(), dict(rank=2, global_dim=[8, 64], global_strides=[32], box_dim=[8, 8],
                                          element_strides=[1, 1])),
    # INTERLEAVE_32B needs 32-B aligned addresses and strides (A06, A08).
    ("TMA-GLOBAL-ADDRESS-ALIGN", dict(global_address=32), dict(global_address=48)),
    ("TMA-GLOBAL-STRIDE-ALIGN", dict(global_strides=[32, 2048]), dict(global_strides=[48, 2048])),
    ("TMA-GLOBAL-STRIDE-ALIGN", dict(global_strides=[32, 2048]), dict(global_strides=[32, 2064])),
    ("TMA-INTERLEAVE32-SWIZZLE32", dict(swizzle=1), dict(swizzle=3)),
]


@pytest.mark.parametrize("rule_id,legal_side,illegal_side", INTERLEAVED_BOUNDARIES,
                         ids=[f"{b[0]}-il-{i}" for i, b in enumerate(INTERLEAVED_BOUNDARIES)])
def test_interleaved_rule_boundary(rule_id, legal_side, illegal_side):
    assert rule_id not in ids(dict(BASE3, **legal_side))
    assert rule_id in ids(dict(BASE3, **illegal_side))


def test_interleaved_maps_keep_the_16b_rule_but_not_the_span_rule():
    # The driver text exempts interleaved maps from both; the H200 enforced the 16-B multiple
    # for them all the same, and not the swizzle span.
    d = dict(BASE3, interleave="CU_TENSOR_MAP_INTERLEAVE_16B", swizzle=3, box_dim=[104, 8, 8],
             global_dim=[104, 64, 64], global_strides=[208, 13312], global_address=16)
    assert ids(d) == set()                                               # bf16: 208 B, beyond the 128-B span
    assert "TMA-BOX-INNER-SWIZZLE-SPAN" in ids(dict(d, interleave=0, rank=3))  # the same box, not interleaved
    assert ids(dict(d, box_dim=[100, 8, 8])) == {"TMA-BOX-INNER-16B"}    # 200 B


def test_box_shared_memory_limit_counts_floor_of_box_over_stride():
    u8 = dict(BASE, data_type="CU_TENSOR_MAP_DATA_TYPE_UINT8", rank=3, swizzle=0, global_dim=[256, 4096, 64],
              global_strides=[256, 1048576], element_strides=[1, 1, 1])
    assert ids(dict(u8, box_dim=[256, 228, 4])) == set()                    # 233,472 B = 228 KiB
    assert ids(dict(u8, box_dim=[256, 229, 4])) == {"TMA-BOX-SMEM-BYTES", "TMA-BOX-SMEM-BYTES-TRAVERSED"}
    # element_strides 2 on a box of 9: the driver counts floor(9/2) = 4 (legal), TMA writes 5 rows.
    v = tensor_map_verdict(dict(u8, box_dim=[256, 228, 9], element_strides=[1, 1, 2]))
    assert v == {"legal": True, "rules": [], "warnings": ["TMA-BOX-SMEM-BYTES-TRAVERSED"]}
    assert "TMA-BOX-SMEM-BYTES" in ids(dict(u8, box_dim=[256, 228, 10], element_strides=[1, 1, 2]))
    # element_strides[0] counts too (the driver text says it is ignored without interleave).
    assert ids(dict(u8, box_dim=[256, 229, 4], element_strides=[2, 1, 1])) == set()


def test_16b_packed_types_need_32b_alignment_and_box_128():
    d = dict(BASE, data_type="CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B", swizzle=0, global_dim=[256, 64],
             global_strides=[256], box_dim=[128, 8], global_address=32)
    got = ids(d)
    assert got == {"TMA-DATA-TYPE-PACKED-SM90"}
    assert "TMA-GLOBAL-ADDRESS-ALIGN" in ids(dict(d, global_address=48))
    assert "TMA-GLOBAL-STRIDE-ALIGN" in ids(dict(d, global_strides=[272]))
    assert "TMA-BOX-INNER-PACKED" in ids(dict(d, box_dim=[64, 8]))
    assert "TMA-GLOBAL-DIM-PACKED" in ids(dict(d, global_dim=[192, 64]))
    # 16U4_ALIGN8B: global_dim[0] even is enough.
    d8 = dict(d, data_type=13, global_dim=[2, 64], box_dim=[32, 8])
    assert "TMA-GLOBAL-DIM-PACKED" not in ids(d8)
    assert "TMA-GLOBAL-DIM-PACKED" in ids(dict(d8, global_dim=[3, 64]))


def test_warnings_do_not_make_a_map_illegal():
    v = tensor_map_verdict(dict(BASE, global_strides=[4096]))
    assert v == {"legal": True, "rules": [], "warnings": ["TMA-GLOBAL-STRIDE-OVERLAP"]}
    v = tensor_map_verdict(dict(BASE3, swizzle="CU_TENSOR_MAP_SWIZZLE_128B"))
    assert v == {"legal": True, "rules": [], "warnings": ["TMA-INTERLEAVE32-SWIZZLE32"]}


def test_every_broken_rule_is_listed_in_rule_order():
    v = tensor_map_verdict(dict(BASE, swizzle=5, box_dim=[0, 300], l2_promotion=9))
    order = [r.id for r in TENSOR_MAP_RULES]
    assert v["legal"] is False
    # box_dim[0] = 0 is 0 bytes: a multiple of 16 and within the span, so only the range rule fires.
    assert set(v["rules"]) == {"TMA-SWIZZLE-ATOM-SM90", "TMA-BOX-DIM-RANGE", "TMA-L2-PROMOTION-ENUM"}
    assert v["rules"] == sorted(v["rules"], key=order.index)


def test_reasons_print_the_offending_values():
    vs = check_tensor_map(TensorMap.from_dict(dict(BASE, box_dim=[72, 128])))
    (v,) = vs
    assert v.rule_id == "TMA-BOX-INNER-SWIZZLE-SPAN"
    assert "72" in v.reason and "144" in v.reason and "128" in v.reason


def test_rules_are_complete_and_documented():
    rules = list(TENSOR_MAP_RULES)
    assert len({r.id for r in rules}) == len(rules)
    for r in rules:
        assert r.id.startswith("TMA-") and r.summary and r.source and r.rulebook
    covered = {r.rulebook for r in rules}
    assert {"A03", "A05", "A06", "A07", "A08", "A10", "A11", "A12", "A13", "A14", "A15", "A16", "A17",
            "A18", "A19"} <= covered
    not_enforced = {r.rulebook for r in rules if not r.enforced}
    assert {"A10", "A17"} <= not_enforced


# --------------------------------------------------------------------------- the record

def test_construction_with_names_ints_and_defaults():
    a = TensorMap(data_type="BFLOAT16", global_dim=(4096, 4096), global_strides=(8192,), box_dim=(64, 128),
                  swizzle="CU_TENSOR_MAP_SWIZZLE_128B", global_address=16)
    b = TensorMap(data_type=9, rank=2, global_dim=[4096, 4096], global_strides=[8192], box_dim=[64, 128],
                  element_strides=[1, 1], swizzle=3, global_address=16)
    assert a == b and a.rank == 2 and a.element_strides == (1, 1) and a.swizzle == 3
    assert is_legal(a)
    assert TensorMap.from_dict(a.to_dict()) == a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.rank = 3  # type: ignore[misc]


def test_unknown_address_skips_the_address_rule():
    tm = TensorMap(data_type=9, global_dim=(4096, 4096), global_strides=(8192,), box_dim=(64, 128))
    assert tm.global_address is None and is_legal(tm)


@pytest.mark.parametrize("change,field", [
    (dict(rank="2"), "rank"),
    (dict(rank=-1), "rank"),
    (dict(global_dim=[4096, -1]), "global_dim[1]"),
    (dict(global_dim=[4096, "7"]), "global_dim[1]"),
    (dict(global_dim=[4096]), "global_dim"),
    (dict(global_dim=[4096, 2**64]), "global_dim[1]"),
    (dict(global_strides=[]), "global_strides"),
    (dict(global_strides=8192), "global_strides"),
    (dict(box_dim=[64, 2**32]), "box_dim[1]"),
    (dict(element_strides=[1, 1.5]), "element_strides[1]"),
    (dict(swizzle="CU_TENSOR_MAP_SWIZZLE_256B"), "swizzle"),
    (dict(swizzle=-1), "swizzle"),
    (dict(swizzle=True), "swizzle"),
    (dict(data_type=None), "data_type"),
    (dict(global_address=-16), "global_address"),
    (dict(global_address=2**64), "global_address"),
    (dict(global_address="0x10"), "global_address"),
    (dict(extra=1), "extra"),
])
def test_parser_names_the_field(change, field):
    with pytest.raises(FieldError) as e:
        TensorMap.from_dict(dict(BASE, **change))
    assert e.value.field == field


@pytest.mark.parametrize("key", list(BASE))
def test_parser_requires_every_key(key):
    d = dict(BASE)
    del d[key]
    with pytest.raises(FieldError) as e:
        TensorMap.from_dict(d)
    assert e.value.field == key and "missing" in e.value.message


def test_out_of_enum_integers_are_rules_not_parse_errors():
    v = tensor_map_verdict(dict(BASE, data_type=255, interleave=7, l2_promotion=4, oob_fill=2, swizzle=8))
    assert v["legal"] is False
    assert {"TMA-DATA-TYPE-ENUM", "TMA-INTERLEAVE-ENUM", "TMA-L2-PROMOTION-ENUM", "TMA-OOB-FILL-ENUM",
            "TMA-SWIZZLE-ENUM"} <= set(v["rules"])


def test_smem_destination_alignment_is_128_bytes():
    assert smem_destination_ok(0) and smem_destination_ok(128) and smem_destination_ok(384)
    assert not smem_destination_ok(64) and not smem_destination_ok(16) and not smem_destination_ok(1024 + 32)


def test_global_address_upper_bound():
    from cutegen.legality.tensor_map import GLOBAL_ADDRESS_LIMIT
    assert ids(dict(BASE, global_address=GLOBAL_ADDRESS_LIMIT - 16)) == set()
    assert ids(dict(BASE, global_address=GLOBAL_ADDRESS_LIMIT)) == {"TMA-GLOBAL-ADDRESS-MAX"}
    # Observed on the H200: 0, a typical device address and 2^57-16 are taken; 2^57 and 2^63 are not.
    assert GLOBAL_ADDRESS_LIMIT == 2**57
    assert ids(dict(BASE, global_address=2**57 - 16)) == set()
    assert ids(dict(BASE, global_address=0x7F0000008D00)) == set()
    assert ids(dict(BASE, global_address=0)) == set()
    assert "TMA-GLOBAL-ADDRESS-MAX" in ids(dict(BASE, global_address=2**63))
