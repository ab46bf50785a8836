"""The attention (CUTLASS 88 FMHA) rules: every rule on both sides of its boundary, the shared-memory byte model
against nvcc's sizeof, and the example's own kernels legal."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cutegen.legality import attention as A
from cutegen.legality.attention import AttentionContext, check_attention
from cutegen.ops.attention.config import EXAMPLE_CONFIGS, EXAMPLE_CONFIGS_FP8, AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem

ROOT = Path(__file__).resolve().parents[1]
TMA1 = dict(schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=4)
PP = dict(schedule="ws_pingpong", persistent=True, loads_q_separately=True)


def P(**kw):
    base = dict(batch=2, heads_q=8, heads_kv=8, seqlen_q=4096, seqlen_kv=4096, head_dim=128)
    base.update(kw)
    return AttentionProblem(**base)


def C(**kw):
    return AttentionConfig(**kw)


def found(p, c) -> set[str]:
    r = check_attention(p, c)
    return {v.rule_id for v in r.violations + r.warnings}


# (rule, problem kwargs, config kwargs inside the boundary, config/problem kwargs just outside)
CASES = [
    # 2 consumer warpgroups: 128 rows = 64 each (WGMMA M) vs 96 = 48 each
    ("ATTN-QK-TILE-M", {}, {}, ({}, dict(tile_q=96))),
    ("ATTN-QK-TILE-M", {"head_dim": 64}, dict(tile_q=64, **TMA1), ({}, dict(tile_q=48, **TMA1))),
    # the head tile (head_dim rounded up to 16) is the K of Q K^T: e4m3 K = 32 (96 in; 80 and 112 out)
    ("ATTN-QK-WGMMA-K", {"head_dim": 96, "dtype": "e4m3"}, {}, ({"head_dim": 80, "dtype": "e4m3"}, {})),
    ("ATTN-QK-WGMMA-K", {"head_dim": 96, "dtype": "e4m3"}, {}, ({"head_dim": 112, "dtype": "e4m3"}, {})),
    # tile_kv is the K of P V: e4m3 K = 32 (64 in, 48 out)
    ("ATTN-PV-WGMMA-K", {"dtype": "e4m3"}, dict(tile_kv=64), ({"dtype": "e4m3"}, dict(tile_kv=48))),
    ("ATTN-PV-RS-OPERAND", {"dtype": "e4m3"}, dict(tile_kv=64), ({"dtype": "e4m3"}, dict(tile_kv=48))),
    # an f16 Q K^T accumulator: f16 inputs yes, bf16 no
    ("ATTN-ACC-QK-TYPE", {"dtype": "f16"}, dict(acc_qk="f16"), ({"dtype": "bf16"}, dict(acc_qk="f16"))),
    # an e4m3 head of 16 B (head_dim 16) is a legal stride; 8 B (head_dim 8) is not
    ("ATTN-TMA-Q", {"dtype": "e4m3", "head_dim": 16}, {}, ({"dtype": "e4m3", "head_dim": 8}, {})),
    ("ATTN-TMA-K", {"dtype": "e4m3", "head_dim": 16}, {}, ({"dtype": "e4m3", "head_dim": 8}, {})),
    # head dim 256, 128x64 cooperative: 5 K/V stages = 229,888 B (the example's), 6 = 262,656 B
    ("ATTN-SMEM-CAPACITY", {"head_dim": 256}, dict(tile_kv=64), ({"head_dim": 256}, dict(tile_kv=64, stages_kv=6))),
    # one consumer warpgroup: setmaxnreg 488 (> 256); two: 240
    ("ATTN-SETMAXNREG-RANGE", {}, dict(tile_q=128, mma_warpgroups=2), ({}, dict(tile_q=64, mma_warpgroups=1,
                                                                                     stages_q=1))),
    # 2 warpgroups, head 128: tile_kv 192 = 96 + 48 + 64 + 4 = 212 < 240; 256 = 128 + 64 + 64 + 4 = 260
    ("ATTN-REGISTERS", {}, dict(tile_kv=192), ({}, dict(tile_kv=256, stages_kv=3))),
    # ptxas serializes from 228 registers (bf16): head 32 128x256 = 128 + 64 + 16 + 4 = 212 builds; head 64 = 228
    ("ATTN-WGMMA-SERIALIZED", {"head_dim": 32}, dict(tile_kv=256, stages_kv=3),
     ({"head_dim": 64}, dict(tile_kv=256, stages_kv=3))),
    # head 256: 128x64 = 32 + 16 + 128 + 4 = 180 builds; 128x128 = 64 + 32 + 128 + 4 = 228 does not
    ("ATTN-WGMMA-SERIALIZED", {"head_dim": 256}, dict(tile_kv=64), ({"head_dim": 256}, dict(tile_kv=128, stages_kv=3))),
    # tma, 2 blocks per SM: head 64 (74,240 B: 2 x 75,264 <= 233,472) vs head 128 (147,968 B)
    ("ATTN-BLOCKS-PER-SM-SMEM", {"head_dim": 64}, dict(blocks_per_sm=2, **TMA1),
     ({"head_dim": 128}, dict(blocks_per_sm=2, tile_q=64, **TMA1))),
    # can_implement: seqlen_q a multiple of 8 (bf16): 4096 in, 4100 out; e4m3 head_dim 16 in, 8 out
    ("ATTN-CAN-IMPLEMENT", {"seqlen_q": 4096}, {}, ({"seqlen_q": 4100}, {})),
    ("ATTN-CAN-IMPLEMENT", {"dtype": "e4m3", "head_dim": 16}, {}, ({"dtype": "e4m3", "head_dim": 8}, {})),
    ("ATTN-HEAD-DIM-V-EQUAL", {"head_dim_v": 128}, {}, ({"head_dim_v": 64}, {})),
    ("ATTN-HEAD-DIM-EXAMPLE", {"head_dim": 128}, {}, ({"head_dim": 96}, {})),
    ("ATTN-HEAD-DIM-EXAMPLE", {"head_dim": 128, "dtype": "e4m3"}, {}, ({"head_dim": 64, "dtype": "e4m3"}, {})),
    ("ATTN-PINGPONG-FLAGS", {}, dict(stages_kv=3, **PP), ({}, dict(schedule="ws_pingpong", persistent=True))),
    ("ATTN-WS-CLUSTER", {}, dict(cluster_m=1), ({}, dict(cluster_m=2))),
    ("ATTN-WS-BLOCKS-PER-SM", {}, dict(blocks_per_sm=1), ({}, dict(blocks_per_sm=2))),
    ("ATTN-TMA-ONE-WARPGROUP", {"head_dim": 64}, dict(tile_q=64, **TMA1),
     ({"head_dim": 64}, dict(tile_q=128, schedule="tma", mma_warpgroups=2, stages_q=2, stages_kv=4))),
    ("ATTN-TMA-NOT-PERSISTENT", {"head_dim": 64}, dict(tile_q=64, **TMA1),
     ({"head_dim": 64}, dict(tile_q=64, persistent=True, **TMA1))),
    ("ATTN-STAGES-Q", {}, dict(stages_q=2), ({}, dict(stages_q=1))),
    ("ATTN-WS-STAGES-KV", {}, dict(stages_kv=3), ({}, dict(stages_kv=2))),
    ("ATTN-TMA-STAGES-KV", {"head_dim": 64}, dict(tile_q=64, **TMA1),
     ({"head_dim": 64}, dict(tile_q=64, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=3))),
    ("ATTN-TMA-STAGES-KV", {"head_dim": 64}, dict(tile_q=64, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=6),
     ({"head_dim": 64}, dict(tile_q=64, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=5))),
    ("ATTN-TMA-STAGES-KV", {"head_dim": 64}, dict(tile_q=64, **TMA1),
     ({"head_dim": 64}, dict(tile_q=64, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=2))),
    ("ATTN-CLUSTER-EXIT", {"head_dim": 64}, dict(tile_q=64, cluster_m=1, **TMA1),
     ({"head_dim": 64}, dict(tile_q=64, cluster_m=2, **TMA1))),
    ("ATTN-CLUSTER-CAUSAL", {"head_dim": 64, "causal": False}, dict(tile_q=64, tile_kv=64, cluster_m=2, **TMA1),
     ({"head_dim": 64, "causal": True}, dict(tile_q=64, tile_kv=64, cluster_m=2, **TMA1))),
    # causal: tile_kv 128 = 2 x 64 gives both Q blocks of a cluster one trip count (the H200 run validated it);
    # 64 (and 192 = 3 x 64) does not
    ("ATTN-CLUSTER-CAUSAL", {"head_dim": 64, "causal": True}, dict(tile_q=64, tile_kv=128, cluster_m=2, **TMA1),
     ({"head_dim": 64, "causal": True}, dict(tile_q=64, tile_kv=192, cluster_m=2, **TMA1))),
]


@pytest.mark.parametrize("rule,p_in,c_in,outside", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_two_sided(rule, p_in, c_in, outside):
    p_out, c_out = outside
    inside = found(P(**p_in), C(**c_in))
    assert rule not in inside, inside
    out = found(P(**(p_out or p_in)), C(**(c_out or c_in)))
    assert rule in out, out


def _ctx(p=None, c=None, **derived):
    ctx = AttentionContext(p or P(), c or C())
    ctx.__dict__.update(derived)          # cached_property values: the exact bound of a derived number
    return ctx


def _rule(rule_id):
    return next(r for r in A.all_attention_rules() if r.id == rule_id)


def test_smem_exact_bound():
    rule = _rule("ATTN-SMEM-CAPACITY")
    parts = dict(q=1, kv=1, mainloop=2, epilogue=1, tensors=2)
    assert rule.evaluate(_ctx(smem_parts=dict(parts, total=232448))) is None
    v = rule.evaluate(_ctx(smem_parts=dict(parts, total=232449)))
    assert v is not None and "232449 B" in v.reason


def test_registers_exact_bound():
    rule = _rule("ATTN-REGISTERS")        # 2 consumer warpgroups: setmaxnreg 240
    assert rule.evaluate(_ctx(registers=dict(s=0, p=0, o=0, softmax=0, total=239))) is None
    assert rule.evaluate(_ctx(registers=dict(s=0, p=0, o=0, softmax=0, total=240))) is not None
    # tma, no setmaxnreg: 255 for 1 or 2 blocks per SM (65536 / 256 = 256 -> capped at 255)
    tma = C(tile_q=64, blocks_per_sm=2, **TMA1)
    assert AttentionContext(P(head_dim=64), tma).register_budget == 255


def test_blocks_per_sm_exact_bound():
    rule = _rule("ATTN-BLOCKS-PER-SM-SMEM")
    c = C(tile_q=64, blocks_per_sm=2, **TMA1)
    parts = dict(q=1, kv=1, mainloop=2, epilogue=1, tensors=2)
    assert rule.evaluate(_ctx(P(head_dim=64), c, smem_parts=dict(parts, total=115712))) is None   # 2 x 116,736
    assert rule.evaluate(_ctx(P(head_dim=64), c, smem_parts=dict(parts, total=115713))) is not None


def test_pv_wgmma_n_and_epilogue_tile_bounds():
    # the problem type keeps head_dim in [8, 256] step 8; the rules' own bounds through a context
    n = _rule("ATTN-PV-WGMMA-N")
    for d, broken in ((256, False), (264, True), (8, False), (4, True)):
        ctx = _ctx()
        ctx.d = d
        assert (n.evaluate(ctx) is not None) is broken, d
    epi = _rule("ATTN-EPILOGUE-TILE")
    for dv, broken in ((8, False), (4, True)):
        ctx = AttentionContext(P(), C())
        ctx.dv = dv
        assert (epi.evaluate(ctx) is not None) is broken, dv


def test_tma_o_descriptor_bound():
    rule = _rule("ATTN-TMA-O")
    ctx = _ctx()
    good = ctx.tensor_maps["O"]
    assert rule.evaluate(ctx) is None
    bad = (good[0], good[1], (good[2][0] + 8,) + good[2][1:], good[3], good[4])    # row stride 16 B + 8
    v = rule.evaluate(_ctx(tensor_maps=dict(ctx.tensor_maps, O=bad)))
    assert v is not None and "TMA-GLOBAL-STRIDE-ALIGN" in v.reason


def test_tma_vt_descriptor_bound():
    """FP8 V is read transposed (V^T, the KV sequence contiguous) with rows padded to 16 bytes, the documented V^T
    layout: seqlen_kv 4104 gives a 4112-byte row stride (legal); the same descriptor with the unpadded 4104 is not."""
    rule = _rule("ATTN-TMA-V")
    ctx = _ctx(P(dtype="e4m3", seqlen_kv=4104), C())
    good = ctx.tensor_maps["V"]
    assert good[1][0] == 4104 and good[2][0] == 4112
    assert rule.evaluate(ctx) is None
    bad = (good[0], good[1], (4104,) + good[2][1:], good[3], good[4])
    v = rule.evaluate(_ctx(P(dtype="e4m3", seqlen_kv=4104), C(), tensor_maps=dict(ctx.tensor_maps, V=bad)))
    assert v is not None and "TMA-GLOBAL-STRIDE-ALIGN" in v.reason


def test_smem_model_matches_nvcc():
    """Every row of oracles/attention_smem_probe_results.jsonl: sizeof(Kernel::SharedStorage), threads and the
    consumers' setmaxnreg as nvcc computed them for the example's FmhaBuilder (CUTLASS 4.2, nvcc 13.0)."""
    rows = [json.loads(line) for line in (ROOT / "oracles/attention_smem_probe_results.jsonl").read_text().splitlines()]
    assert len(rows) == 24
    for r in rows:
        ctx = AttentionContext(P(head_dim=r["head_dim"], dtype=r["dtype"]), AttentionConfig.from_dict(r["config"]))
        assert ctx.smem_bytes == r["smem"], r
        assert ctx.threads == r["threads"], r
        assert (ctx.mma_register_requirement or -1) == r["mma_regs"], r


@pytest.mark.parametrize("dtype,table", [("bf16", EXAMPLE_CONFIGS), ("f16", EXAMPLE_CONFIGS), ("e4m3", EXAMPLE_CONFIGS_FP8)])
def test_example_kernels_are_legal(dtype, table):
    for d, configs in table.items():
        for c in configs:
            # the example's f16 Q K^T accumulator kernels are legal where the problem allows one
            r = check_attention(P(head_dim=d, dtype=dtype, allow_f16_qk_acc=c.acc_qk == "f16"), c)
            if dtype == "e4m3" and (d, c.tile_kv, c.acc_qk) == (128, 256, "f32"):
                # 228 registers: nvcc 13.0 serializes the example's FP8 128x256 f32 kernel (built here, 2026-11-26)
                assert [v.rule_id for v in r.violations] == ["ATTN-WGMMA-SERIALIZED"], r.violations
                continue
            assert r.legal and r.search_legal, (d, c.short_name(), [str(v) for v in r.violations + r.warnings])


def test_head_tile_is_the_renderers():
    """legality pads the head dim exactly as the renderer's TileShape does (bf16 72 -> 80: legal, zero-filled)."""
    from cutegen.ops.attention.render import head_tile as rendered
    for d in range(8, 257, 8):
        assert A.head_tile(d) == rendered(P(head_dim=d)), d
    assert check_attention(P(head_dim=72), C()).legal


def test_rule_ids_are_unique_and_sourced():
    rules = A.all_attention_rules()
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    assert all(r.id.startswith("ATTN-") and r.source and r.summary for r in rules)
    from cutegen.legality import all_rules
    assert not set(ids) & {r.id for r in all_rules()}      # no clash with GEMM's IDs


def test_every_rule_is_in_the_rulebook_section():
    book = (ROOT / "legality" / "RULEBOOK-attention.md").read_text()
    rows = {}
    for line in book.splitlines():
        if line.startswith("| F"):
            for name in line.split("|")[2].replace("`", "").split(","):
                name = name.split("(")[0].strip()
                rows[name if name.startswith("ATTN-") else "ATTN-TMA" + name] = line
    missing = [r.id for r in A.all_attention_rules() if r.id not in rows]
    assert not missing, missing


def test_cli_check_config_attention(tmp_path, capsys):
    """`cutegen check config` reads attention problems too: the explained verdict, the JSON-lines verdict, and a
    one-line error naming the field."""
    from cutegen.cli import main
    problem = {"op": "attention", "batch": 1, "heads_q": 2, "seqlen_q": 1024, "seqlen_kv": 1024, "head_dim": 128}
    f = tmp_path / "a.json"
    f.write_text(json.dumps({"problem": problem, "config": {"tile_q": 128, "tile_kv": 128}}))
    assert main(["check", "config", str(f)]) == 0
    assert capsys.readouterr().out.startswith("LEGAL: attn_b1_hq2")
    f.write_text(json.dumps({"problem": problem, "config": {"tile_q": 128, "tile_kv": 256}}))
    assert main(["check", "config", str(f)]) == 1
    assert "violates ATTN-SMEM-CAPACITY" in capsys.readouterr().out
    lines = tmp_path / "a.jsonl"
    lines.write_text(json.dumps({"problem": problem, "config": {"tile_q": 128, "tile_kv": 256}}) + "\n" +
                     json.dumps({"problem": dict(problem, heads_kv=3), "config": {"tile_q": 128, "tile_kv": 128}}) + "\n")
    assert main(["check", "config", "--jsonl", str(lines)]) == 1
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert out[0]["rules"] == ["ATTN-SMEM-CAPACITY", "ATTN-WGMMA-SERIALIZED"] and out[0]["smem_bytes"] == 360960
    assert out[1]["error"].startswith("line 2: problem.heads_kv")
