"""AttentionProblem and AttentionConfig: fields, one-line errors, names, FLOPs, JSON round trips."""
from __future__ import annotations

import json

import pytest

from cutegen.errors import FieldError
from cutegen.ops.attention.config import EXAMPLE_CONFIGS, EXAMPLE_CONFIGS_FP8, AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem, causal_pairs

BASE = dict(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096, head_dim=128)


def test_name_and_defaults():
    p = AttentionProblem(**BASE, causal=True)
    assert p.name == "attn_b4_hq32_hkv8_sq4096_skv4096_d128_bf16_causal"
    assert p.dv == 128 and p.group_size == 4 and p.output_dtype == "bf16"
    assert p.softmax_scale == pytest.approx(128 ** -0.5)
    q = AttentionProblem(**{**BASE, "head_dim_v": 64}, layout="bhsd", varlen=False, return_lse=True, dtype="f16")
    assert q.name == "attn_b4_hq32_hkv8_sq4096_skv4096_d128_dv64_f16_bhsd_lse"
    # every character file-system safe
    assert all(c.isalnum() or c == "_" for c in q.name)


def test_head_dim_v_equal_to_head_dim_is_unset():
    p = AttentionProblem(**{**BASE, "head_dim_v": 128})
    assert p.head_dim_v is None and p == AttentionProblem(**BASE)
    assert "head_dim_v" not in p.to_dict()


def test_to_dict_round_trip_carries_op():
    p = AttentionProblem(**BASE, causal=True, scale=0.125, return_lse=True)
    d = p.to_dict()
    assert d["op"] == "attention" and d["scale"] == 0.125
    assert AttentionProblem.from_dict(json.loads(json.dumps(d))) == p
    assert "scale" not in AttentionProblem(**BASE).to_dict()


def test_from_dict_heads_kv_defaults_to_heads_q():
    p = AttentionProblem.from_dict({k: v for k, v in BASE.items() if k != "heads_kv"})
    assert p.heads_kv == 32


def test_registry_reads_it_back():
    from cutegen.core import registry
    p = AttentionProblem(**BASE)
    assert registry.problem_from_dict(p.to_dict()) == p
    assert registry.operation_of(p).name == "attention"


@pytest.mark.parametrize("change, field, words", [
    ({"batch": 0}, "problem.batch", "below the minimum 1"),
    ({"heads_q": 32, "heads_kv": 6}, "problem.heads_kv", "does not divide heads_q=32"),
    ({"head_dim": 100}, "problem.head_dim", "not a multiple of 8"),
    ({"head_dim": 264}, "problem.head_dim", "above the maximum 256"),
    ({"head_dim": 0}, "problem.head_dim", "below the minimum 8"),
    ({"head_dim_v": 12}, "problem.head_dim_v", "not a multiple of 8"),
    ({"dtype": "f32"}, "problem.dtype", "not one of bf16, f16, e4m3"),
    ({"layout": "sbhd"}, "problem.layout", "not one of bshd, bhsd"),
    ({"causal": 1}, "problem.causal", "expected true or false"),
    ({"scale": 0.0}, "problem.scale", "not positive"),
    ({"scale": "x"}, "problem.scale", "expected a number"),
    ({"varlen": True, "layout": "bhsd"}, "problem.layout", "packed"),
    ({"seqlen_kv": 2**30}, "problem.batch", "above 2^31-1"),
    ({"bogus": 1}, "problem.bogus", "unknown field"),
    ({"op": "gemm"}, "problem.op", "is not 'attention'"),
])
def test_field_errors_name_the_field(change, field, words):
    with pytest.raises(FieldError) as e:
        AttentionProblem.from_dict({**BASE, **change})
    assert e.value.field == field and words in e.value.message and "\n" not in str(e.value)


def test_head_dim_bounds_both_sides():
    AttentionProblem(**{**BASE, "head_dim": 8})
    AttentionProblem(**{**BASE, "head_dim": 256})
    for bad in (7, 257):
        with pytest.raises(FieldError):
            AttentionProblem(**{**BASE, "head_dim": bad})


def test_missing_field():
    with pytest.raises(FieldError) as e:
        AttentionProblem.from_dict({k: v for k, v in BASE.items() if k != "seqlen_kv"})
    assert e.value.field == "problem.seqlen_kv"


def test_causal_pairs_is_sdpa_top_left():
    for sq, skv in ((1, 1), (5, 5), (3, 7), (7, 3), (1, 8192), (16, 8192), (4096, 4096)):
        expect = sum(1 for i in range(sq) for j in range(skv) if j <= i) if sq * skv < 10**6 else None
        if expect is not None:
            assert causal_pairs(sq, skv) == expect, (sq, skv)
    assert causal_pairs(4096, 4096) == 4096 * 4097 // 2


def test_flops():
    p = AttentionProblem(**BASE)
    assert p.flops == 4 * 4 * 32 * 4096 * 4096 * 128
    c = AttentionProblem(**BASE, causal=True)
    assert c.flops == 4 * 4 * 32 * (4096 * 4097 // 2) * 128
    v = AttentionProblem(**{**BASE, "head_dim_v": 64})
    assert v.flops == 2 * 4 * 32 * 4096 * 4096 * (128 + 64)
    assert p.flops_of_lengths([100, 50], [100, 50]) == 4 * 32 * (100 * 100 + 50 * 50) * 128


def test_kernel_key_leaves_sizes_out():
    a = AttentionProblem(**BASE)
    b = AttentionProblem(**{**BASE, "seqlen_q": 17, "batch": 1, "heads_q": 16}, scale=0.3, layout="bhsd")
    assert a.kernel_key() == b.kernel_key() and a.kernel_class_name == b.kernel_class_name
    assert AttentionProblem(**BASE, causal=True).kernel_key() != a.kernel_key()
    # a GQA/MQA kernel is another kernel than an MHA one (K/V strides), whatever the group size
    mha = AttentionProblem(**{**BASE, "heads_kv": 32})
    assert mha.kernel_key()["grouped"] is False and a.kernel_key()["grouped"] is True
    assert a.kernel_class_name == "attn_d128_bf16_gqa" and mha.kernel_class_name == "attn_d128_bf16"


# --- config -----------------------------------------------------------------------------------------
def test_config_defaults_are_the_example_d128_kernel():
    c = AttentionConfig()
    assert (c.tile_q, c.tile_kv, c.schedule, c.mma_warpgroups, c.stages_q, c.stages_kv) == \
        (128, 128, "ws_cooperative", 2, 2, 5)
    assert c.short_name() == "128x128_wscoop_wg2_q2kv5"
    assert EXAMPLE_CONFIGS[128][0] == c


def test_config_round_trip_and_hash():
    for cfgs in (*EXAMPLE_CONFIGS.values(), *EXAMPLE_CONFIGS_FP8.values()):
        for c in cfgs:
            back = AttentionConfig.from_dict(json.loads(c.to_json()))
            assert back == c and back.hash == c.hash and len(c.hash) == 16
            int(c.hash, 16)
    a, b = AttentionConfig(), AttentionConfig(stages_kv=4)
    assert a.hash != b.hash
    from cutegen.core.op import config_hash
    assert config_hash(a) == a.hash


@pytest.mark.parametrize("change, field, words", [
    ({"tile_q": 100}, "config.tile_q", "not a multiple of 16"),
    ({"tile_kv": 512}, "config.tile_kv", "above the maximum 256"),
    ({"tile_kv": 0}, "config.tile_kv", "below the minimum 16"),
    ({"schedule": "pingpong"}, "config.schedule", "not one of tma, ws_cooperative, ws_pingpong"),
    ({"mma_warpgroups": 3}, "config.mma_warpgroups", "above the maximum 2"),
    ({"cluster_m": 0}, "config.cluster_m", "below the minimum 1"),
    ({"acc_qk": "bf16"}, "config.acc_qk", "not one of f32, f16"),
    ({"persistent": "yes"}, "config.persistent", "expected true or false"),
    ({"stages_kv": 0}, "config.stages_kv", "below the minimum 1"),
    ({"blocks_per_sm": 4}, "config.blocks_per_sm", "above the maximum 2"),
    ({"tile_m": 4}, "config.tile_m", "unknown field"),
])
def test_config_field_errors(change, field, words):
    with pytest.raises(FieldError) as e:
        AttentionConfig.from_dict({**AttentionConfig().to_dict(), **change})
    assert e.value.field == field and words in e.value.message


def test_config_from_dict_needs_its_tile():
    with pytest.raises(FieldError) as e:
        AttentionConfig.from_dict({})
    assert e.value.field == "config.tile_q" and e.value.message == "missing"
    with pytest.raises(FieldError) as e:
        AttentionConfig.from_dict({"tile_q": 128})
    assert e.value.field == "config.tile_kv"
    assert AttentionConfig.from_dict({"tile_q": 128, "tile_kv": 128}) == AttentionConfig()
