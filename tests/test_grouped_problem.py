"""Grouped GEMM's problem and config: fields, one-line errors, names, JSON round trips, the registry."""
from __future__ import annotations

import json

import pytest

from cutegen.core import registry
from cutegen.core.op import config_hash
from cutegen.core.search import search
from cutegen.errors import FieldError
from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
from cutegen.ops.grouped_gemm.problem import MAX_GROUPS, GroupedGemmProblem, split_tokens
from cutegen.ops.grouped_gemm.validate import ragged_cases

MIXTRAL_W1 = dict(groups=8, tokens=16384, n=14336, k=4096)


def test_name_flops_and_dict_of_the_spec_example():
    p = GroupedGemmProblem(**MIXTRAL_W1)
    assert p.name == "grouped_e8_t16384_n14336_k4096_bf16_offs_uniform"
    assert p.flops == 2 * 16384 * 14336 * 4096
    d = p.to_dict()
    assert d["op"] == "grouped_gemm" and d["distribution"] == "uniform"
    assert GroupedGemmProblem.from_dict(json.loads(json.dumps(d))) == p
    assert registry.problem_from_dict(d) == p
    assert p.kernel_class_name == "grouped_bf16_offs"


def test_names_differ_by_layout_dtype_scale_and_distribution():
    base = GroupedGemmProblem(**MIXTRAL_W1)
    others = [base.replace(layout="masked"), base.replace(dtype="e4m3"),
              base.replace(dtype="e4m3", scale="tensor"), base.replace(dtype="e4m3", scale="block128"),
              base.replace(distribution="skewed"), base.replace(distribution=(0.5, 0.5) + (0.0,) * 6),
              base.replace(distribution=(0.25, 0.75) + (0.0,) * 6)]
    names = {base.name} | {o.name for o in others}
    assert len(names) == 1 + len(others)
    assert "e4m3block128" in base.replace(dtype="e4m3", scale="block128").name
    for nm in names:
        assert all(ch.isalnum() or ch == "_" for ch in nm)


@pytest.mark.parametrize("field,value,message", [
    ("groups", 0, r"^problem\.groups: 0 is below the minimum 1$"),
    ("groups", MAX_GROUPS + 1, rf"^problem\.groups: {MAX_GROUPS + 1} is above the maximum {MAX_GROUPS}$"),
    ("n", 0, r"^problem\.n: 0 is below the minimum 1$"),
    ("k", "x", r"^problem\.k: expected an integer"),
    ("tokens", -1, r"^problem\.tokens: -1 is below the minimum 1$"),
    ("layout", "contiguous", r"^problem\.layout: 'contiguous' is not one of offs, masked$"),
    ("dtype", "f16", r"^problem\.dtype: 'f16' is not one of bf16, e4m3$"),
    ("scale", "row", r"^problem\.scale: 'row' is not one of none, tensor, block128$"),
    ("distribution", "zipf", r"^problem\.distribution: 'zipf' is not one of uniform, skewed, worst$"),
    ("distribution", [0.5, 0.5], r"^problem\.distribution: a histogram needs one fraction per group: 2 given, groups=8$"),
    ("distribution", [0.5] * 8, r"^problem\.distribution: the fractions sum to 4, not 1"),
    ("distribution", [-0.1, 1.1] + [0] * 6, r"^problem\.distribution\[0\]: expected a finite fraction >= 0"),
    ("bogus", 1, r"^problem\.bogus: unknown field$"),
])
def test_bad_fields_are_one_line_errors_naming_the_field(field, value, message):
    data = {"op": "grouped_gemm", **MIXTRAL_W1, field: value}
    with pytest.raises(FieldError, match=message):
        registry.problem_from_dict(data)


def test_groups_limit_is_inclusive_and_missing_fields_are_named():
    assert GroupedGemmProblem(MAX_GROUPS, 128, 128, 4096).groups == MAX_GROUPS
    assert GroupedGemmProblem(1, 128, 128, 1).groups == 1
    with pytest.raises(FieldError, match=r"^problem\.tokens: missing$"):
        GroupedGemmProblem.from_dict({"groups": 8, "n": 64, "k": 64})


def test_only_fp8_scales():
    assert GroupedGemmProblem(**MIXTRAL_W1, dtype="e4m3", scale="tensor").scale == "tensor"
    assert GroupedGemmProblem(**MIXTRAL_W1, dtype="e4m3").scale == "none"
    with pytest.raises(FieldError, match=r"^scale: 'tensor' scales an FP8 operand; dtype=bf16 takes only 'none'$"):
        GroupedGemmProblem(**MIXTRAL_W1, scale="tensor")


def test_distributions_give_sizes_that_sum_to_the_tokens():
    p = GroupedGemmProblem(**MIXTRAL_W1)
    assert p.group_sizes == (2048,) * 8
    skew = p.replace(distribution="skewed").group_sizes
    assert sum(skew) == 16384 and skew[0] > skew[1] > skew[7] > 0
    assert p.replace(distribution="worst").group_sizes == (16384,) + (0,) * 7
    hist = p.replace(distribution=(0.5, 0.25, 0.25) + (0.0,) * 5).group_sizes
    assert hist == (8192, 4096, 4096, 0, 0, 0, 0, 0)
    assert split_tokens(10, (1 / 3, 1 / 3, 1 / 3)) == (4, 3, 3)     # largest remainder, lower index first


def test_masked_tokens_are_the_capacity_per_group():
    p = GroupedGemmProblem(32, 4096, 7168, 64, layout="masked")
    assert p.max_m == 64 and p.group_sizes == (64,) * 32 and p.flops == 2 * 32 * 64 * 4096 * 7168
    worst = p.replace(distribution="worst")
    assert worst.group_sizes == (64,) + (0,) * 31 and worst.flops == 2 * 64 * 4096 * 7168


def test_config_round_trip_hash_and_errors():
    c = GroupedGemmConfig(128, 256, 64, 2, 1, "ptr_cooperative", False, None, "along_n")
    d = c.to_dict()
    assert set(d) == {"tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "schedule", "swap_ab", "stages", "raster"}
    assert GroupedGemmConfig.from_dict(json.loads(c.to_json())) == c
    assert len(c.hash) == 16 and c.hash == config_hash(c)
    assert c.replace(swap_ab=True).hash != c.hash and c.replace(stages=4).hash != c.hash
    assert registry.config_from_dict("grouped_gemm", d) == c
    for data, message in (({"tile_m": 96}, r"^config\.tile_m: 96 is not one of 64, 128, 256$"),
                          ({"tile_n": 12}, r"^config\.tile_n: 12 is not one of multiples of 8"),
                          ({"schedule": "cooperative"}, r"^config\.schedule: 'cooperative' is not one of"),
                          ({"swap_ab": 1}, r"^config\.swap_ab: expected true or false, got 1$"),
                          ({"stages": 0}, r"^config\.stages: 0 is below the minimum 1$"),
                          ({"raster": "zigzag"}, r"^config\.raster: 'zigzag' is not one of"),
                          ({"cluster_n": 3}, r"^config\.cluster_n: 3 is not one of 1, 2, 4, 8$"),
                          ({"tiles": 1}, r"^config\.tiles: unknown field$")):
        with pytest.raises(FieldError, match=message):
            GroupedGemmConfig.from_dict(data)


def test_registered_and_searched_by_the_core():
    op = registry.get("grouped_gemm")
    p = GroupedGemmProblem(**MIXTRAL_W1)
    assert registry.operation_of(p) is op and "grouped_gemm" in registry.names()
    assert registry.db_columns(p) == {"kernel_class": "grouped_bf16_offs", "m": 16384, "n": 14336, "k": 4096,
                                      "batch": 8}
    ranked = search(p, top_k=3).ranked
    assert len(ranked) == 3 and ranked[0].cost <= ranked[1].cost <= ranked[2].cost
    # decode: one token per expert ranks a swapped config (tokens on the narrow tile_n) first
    decode = search(GroupedGemmProblem(32, 4096, 7168, 32), top_k=1).ranked[0].config
    assert decode.swap_ab


def test_ragged_cases_cover_the_edges():
    cases = ragged_cases(8, 128, 1000)
    assert 0 in cases["empty_groups"] and cases["one_token"] == [1] * 8
    assert any(m % 128 for m in cases["ragged_tile"]) and sum(cases["all_in_one"]) == 1000
    assert cases["very_uneven"][-1] == 0 and sum(cases["very_uneven"]) == 1000
    assert all(len(v) == 8 and min(v) >= 0 for v in cases.values())


def test_fp8_fast_accum_is_an_fp8_choice_left_out_while_false():
    p = GroupedGemmProblem(**MIXTRAL_W1, dtype="e4m3", scale="tensor")
    fast = p.replace(fp8_fast_accum=True)
    assert "fp8_fast_accum" not in p.to_dict() and fast.to_dict()["fp8_fast_accum"] is True
    assert fast.name.endswith("_e4m3tensorfastacc_offs_uniform") and fast.kernel_key()["fp8_fast_accum"] is True
    assert GroupedGemmProblem.from_dict(fast.to_dict()) == fast
    for bad in (dict(dtype="bf16"), dict(dtype="e4m3", scale="block128")):
        with pytest.raises(FieldError, match=r"^fp8_fast_accum: fast accumulation is an FP8 numerics choice"):
            GroupedGemmProblem(**MIXTRAL_W1, fp8_fast_accum=True, **bad)
