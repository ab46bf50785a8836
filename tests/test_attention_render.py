"""Attention rendering (CPU): deterministic kernels on the CUTLASS 88 FMHA collectives, the renderer's refusals
on both sides of each boundary, the C ABI the template exports, the core search over attention's space, and
the build's include path for the 88 headers."""
from __future__ import annotations

import importlib
import json
import re

import pytest

from cutegen.core import registry
from cutegen.core import search as core_search
from cutegen.errors import CutegenError
from cutegen.ops.attention import abi
from cutegen.ops.attention.config import EXAMPLE_CONFIGS, AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.render import REFUSALS, backend_refusals, head_tile, render

MHA = AttentionProblem(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128)
GQA_CAUSAL = AttentionProblem(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096, head_dim=128,
                              causal=True, layout="bhsd")
PINGPONG = AttentionConfig(schedule="ws_pingpong", persistent=True, loads_q_separately=True)
TMA = AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2)


def test_render_is_deterministic_and_size_independent():
    a = render(MHA, AttentionConfig())
    b = render(MHA, AttentionConfig())
    assert a.files == b.files
    # sizes and the scale are run-time arguments: another size of the same kernel class is the same kernel
    c = render(MHA.replace(batch=1, seqlen_q=17, seqlen_kv=999, heads_q=8, heads_kv=8, scale=0.5), AttentionConfig())
    assert c.files["kernel.cu"] == a.files["kernel.cu"] and c.kernel_hash == a.kernel_hash
    assert render(MHA, PINGPONG).kernel_hash != a.kernel_hash
    assert render(MHA.replace(causal=True), AttentionConfig()).kernel_hash != a.kernel_hash


def test_rendered_source_spells_out_the_config():
    src = render(GQA_CAUSAL, PINGPONG).source
    assert "using TileShape = Shape<Int<128>, Int<128>, Int<kHeadTile>>;" in src
    assert "constexpr int kHeadTile = 128;" in src
    for option in ("Option<Tag::kNumMmaWarpGroups, Int<2>>", "Option<Tag::kStagesQ, Int<2>>",
                   "Option<Tag::kStagesKV, Int<5>>", "Option<Tag::kIsPersistent, true_type>",
                   "Option<Tag::kLoadsQSeparately, true_type>"):
        assert option in src
    assert "PersistentTileScheduler" in src and "FmhaKernelTmaWarpSpecialized" in src
    # grouped: K and V share their head across the group through a static 0 stride (the 88 README's GQA layout)
    assert "using StrideK = cute::tuple<int, _1, cute::tuple<int, _0>>;" in src
    # causal: the example's CausalFusion with the keys past seqlen_kv masked too
    assert "struct Mask : cutlass::fmha::collective::CausalFusion" in src
    assert "get<1>(pos) >= get<3>(problem_size)" in src
    # the masked tiles start at the first KV tile the Q block's diagonal touches (any tile_q, tile_kv pair)
    assert "int(get<0>(blk_coord)) * int(get<0>(tile_shape)) / int(get<1>(tile_shape))" in src
    plain = render(AttentionProblem(8, 16, 16, 2048, 2048, 64), TMA).source
    assert "FmhaKernelTma<" in plain and "FmhaKernelTmaWarpSpecialized" not in plain
    assert "using Mask = cutlass::fmha::collective::ResidualFusion;" in plain
    assert "using StrideK = cute::tuple<int, _1, cute::tuple<int, int>>;" in plain
    assert "Option<Tag::kBlocksPerSM, Int<2>>" in plain


def test_head_tile_rounds_to_the_wgmma_k_step():
    assert head_tile(MHA.replace(head_dim=80)) == 80
    assert head_tile(MHA.replace(head_dim=72)) == 80
    assert head_tile(MHA.replace(head_dim=8)) == 16


def test_manifest_and_describe():
    r = render(GQA_CAUSAL, PINGPONG)
    m = r.manifest
    assert m["op"] == "attention" and m["abi"] == "cutegen_attention"
    assert m["problem"]["op"] == "attention" and m["config"] == PINGPONG.to_dict()
    assert m["include_dirs"] == ["examples/88_hopper_fmha"]
    literal = re.search(r"kDescribe\[\] = (.*?);\n", r.source, re.S).group(1)
    text = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literal)).encode().decode("unicode_escape")
    described = json.loads(text)                              # what cutegen_describe returns
    assert described["hash"] == r.kernel_hash and described["problem"] == GQA_CAUSAL.kernel_key()
    assert described["config"] == PINGPONG.to_dict() and described["problem"]["grouped"] is True


def test_write_is_whole_and_idempotent(tmp_path):
    r = render(MHA, AttentionConfig())
    changed = r.write(tmp_path / "k")
    assert sorted(p.name for p in changed) == ["kernel.cu", "manifest.json"]
    assert r.write(tmp_path / "k") == []
    (tmp_path / "k" / "kernel.cu").write_text("tampered")
    assert [p.name for p in r.write(tmp_path / "k")] == ["kernel.cu"]


def test_abi_symbols_and_argument_count_agree_with_abi_py():
    src = render(MHA, AttentionConfig()).source
    exported = re.findall(r"CUTEGEN_EXPORT [\w\s*]*?\b(cutegen_\w+)\(", src)
    declared = re.findall(r'extern "C" [\w\s*]*?\b(cutegen_\w+)\(', abi.C_DECLARATIONS)
    assert sorted(exported) == sorted(declared)
    signature = re.search(r"CUTEGEN_EXPORT int cutegen_attention\((.*?)\)\s*\{", src, re.S).group(1)
    assert len([a for a in signature.split(",") if a.strip()]) == len(abi.ATTENTION_ARGTYPES) == 27


def test_registry_renders_and_refuses_through_the_op():
    assert registry.render(MHA, AttentionConfig()).kernel_hash == render(MHA, AttentionConfig()).kernel_hash
    assert registry.backend_refusals(MHA, TMA.replace(mma_warpgroups=2), "cutlass")[0].startswith("ATTN-RENDER-TMA-OPTIONS")
    with pytest.raises(CutegenError, match="ATTN-RENDER-FP8-SCHEDULE"):     # e4m3 renders on the ws schedules only
        render(MHA.replace(dtype="e4m3"), TMA)


# --- refusals: each on both sides of its boundary -------------------------------------------------------
def _ids(problem, config):
    return [r.split(":", 1)[0] for r in backend_refusals(problem, config)]


@pytest.mark.parametrize("rule, inside, outside", [
    # e4m3: warp-specialized schedules only (the tma mainloop has no V^T); 16-bit kernels read V head-dim contiguous
    ("ATTN-RENDER-FP8-SCHEDULE", (MHA.replace(dtype="e4m3"), AttentionConfig()), (MHA.replace(dtype="e4m3"), TMA)),
    ("ATTN-RENDER-V-LAYOUT", (MHA.replace(dtype="e4m3", v_transposed=True), AttentionConfig()),
     (MHA.replace(v_transposed=True), AttentionConfig())),
    ("ATTN-RENDER-HEAD-DIM-V", (MHA.replace(head_dim_v=128), AttentionConfig()),
     (MHA.replace(head_dim_v=120), AttentionConfig())),
    # varlen runs on the warp-specialized kernels (templates/attention/varlen/); schedule tma has no varlen variant
    ("ATTN-RENDER-VARLEN-TMA", (MHA.replace(varlen=True), AttentionConfig()), (MHA.replace(varlen=True), TMA)),
    ("ATTN-RENDER-VARLEN-TMA", (MHA, TMA), (MHA.replace(varlen=True), TMA)),
    ("ATTN-RENDER-TMA-OPTIONS", (MHA, TMA), (MHA, TMA.replace(mma_warpgroups=2, tile_q=128))),
    ("ATTN-RENDER-TMA-OPTIONS", (MHA, TMA), (MHA, TMA.replace(acc_qk="f16"))),
    ("ATTN-RENDER-TMA-OPTIONS", (MHA, TMA), (MHA, TMA.replace(persistent=True))),
    ("ATTN-RENDER-TMA-GQA", (MHA.replace(heads_kv=32), TMA), (MHA.replace(heads_kv=16), TMA)),
    # one 64-row atom per thread: tile_q 64 builds, 128 (one warpgroup, two atoms) hits the static_assert
    ("ATTN-RENDER-TMA-TILE-Q", (MHA, TMA), (MHA, TMA.replace(tile_q=128))),
    ("ATTN-RENDER-WS-CLUSTER", (MHA, AttentionConfig(cluster_m=1)), (MHA, AttentionConfig(cluster_m=2))),
    ("ATTN-RENDER-WS-BLOCKS-PER-SM", (MHA, AttentionConfig(blocks_per_sm=1)), (MHA, AttentionConfig(blocks_per_sm=2))),
    ("ATTN-RENDER-PINGPONG-OPTIONS", (MHA, PINGPONG), (MHA, PINGPONG.replace(persistent=False))),
    ("ATTN-RENDER-PINGPONG-OPTIONS", (MHA, PINGPONG), (MHA, PINGPONG.replace(loads_q_separately=False))),
    ("ATTN-RENDER-ONE-SPELLING", (MHA, AttentionConfig(persistent=True)),
     (MHA, AttentionConfig(persistent=True, loads_q_separately=True))),
    # static_asserts 81-82: stages_q >= mma_warpgroups (2), stages_kv >= 2
    ("ATTN-RENDER-88-STAGES", (MHA, AttentionConfig(stages_q=2)), (MHA, AttentionConfig(stages_q=1))),
    ("ATTN-RENDER-88-STAGES", (MHA, AttentionConfig(stages_kv=2)), (MHA, AttentionConfig(stages_kv=1))),
    # 64 rows per warpgroup: tile_q 128 over 2 is legal, 192 over 2 (96) is not, 64 over 2 (32) is not
    ("ATTN-RENDER-88-TILE-Q", (MHA, AttentionConfig(tile_q=128)), (MHA, AttentionConfig(tile_q=192))),
    ("ATTN-RENDER-88-TILE-Q", (MHA, AttentionConfig(tile_q=128)), (MHA, AttentionConfig(tile_q=64))),
    ("ATTN-RENDER-88-TILE-Q", (MHA, AttentionConfig(tile_q=64, mma_warpgroups=1, stages_q=1)),
     (MHA, AttentionConfig(tile_q=96, mma_warpgroups=1, stages_q=1))),
])
def test_refusal_boundaries(rule, inside, outside):
    assert rule in REFUSALS
    assert rule not in _ids(*inside)
    assert rule in _ids(*outside)


def test_every_refusal_names_its_source_and_values():
    r = backend_refusals(MHA, AttentionConfig(stages_kv=1))
    assert r == ["ATTN-RENDER-88-STAGES: stages_q 2, mma_warpgroups 2, stages_kv 1 "
                 "(88 fmha_collective_tma_warpspecialized.hpp:81-82 static_asserts)"]
    assert backend_refusals(MHA, AttentionConfig(), "dsl")[0].startswith("ATTN-RENDER-BACKEND")


def test_the_example_configs_render():
    for d, configs in EXAMPLE_CONFIGS.items():
        for c in configs:
            assert backend_refusals(MHA.replace(head_dim=d), c) == [], (d, c)


# --- search --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [MHA, GQA_CAUSAL, AttentionProblem(8, 16, 16, 2048, 2048, 64, causal=True),
                                     AttentionProblem(8, 32, 8, 1, 8192, 128, layout="bhsd")])
def test_core_search_ranks_only_renderable_configs(problem):
    # (the search's speed is tests/test_attention_search.py's; here: what it returns can be rendered)
    found = core_search.search(problem, 5)
    assert len(found.ranked) == 5 and found.candidates_legal <= found.candidates_total
    costs = [r.cost for r in found.ranked]
    assert costs == sorted(costs)
    for r in found.ranked:
        assert backend_refusals(problem, r.config) == []
    again = core_search.search(problem, 5)
    assert [r.config for r in again.ranked] == [r.config for r in found.ranked]


def _space_ranking(problem):
    """space.py's own ranking (the explicit candidate list the core search walked before the e-graph)."""
    space = importlib.import_module("cutegen.ops.attention.space")   # the module, not the package's space()
    legal = [c for c in space.space(problem) if not space.check(problem, c)]
    return sorted(legal, key=lambda c: (space.cost(problem, c), c.to_json()))


def test_space_prunes_tma_for_grouped_problems():
    space = importlib.import_module("cutegen.ops.attention.space")
    assert all(c.schedule != "tma" for c in _space_ranking(GQA_CAUSAL))
    tma = [c for c in space.space(GQA_CAUSAL) if c.schedule == "tma"]
    assert tma and all("ATTN-RENDER-TMA-GQA" in [v.rule_id for v in space.check(GQA_CAUSAL, c)] for c in tma)
    assert any(c.schedule == "tma" for c in _space_ranking(MHA.replace(head_dim=64)))


def test_space_prefers_small_q_tiles_for_decode():
    assert _space_ranking(AttentionProblem(8, 32, 8, 1, 8192, 128, layout="bhsd"))[0].tile_q == 64
    assert _space_ranking(MHA)[0].tile_q == 128


# --- build include path ------------------------------------------------------------------------------------
def test_build_finds_the_88_headers(tmp_path):
    from cutegen.toolchain import cutlass_include_dirs, example_include_dirs
    found = example_include_dirs(cutlass_include_dirs()[0])
    assert len(found) == 1 and found[0].endswith("examples/88_hopper_fmha")
    (tmp_path / "include").mkdir()
    assert example_include_dirs(tmp_path / "include") == []


def test_space_smem_estimate_prunes_on_both_sides_of_the_limit():
    from cutegen.ops.attention.space import SMEM_BYTES, check, smem_estimate
    inside = AttentionConfig(tile_kv=176, stages_kv=4)       # Q 2 x 64 x 128 x 2 B + K/V 4 x 176 x 128 x 2 B
    outside = AttentionConfig(tile_kv=176, stages_kv=5)      # one K/V stage more: 45056 B more
    assert smem_estimate(MHA, inside) == 32768 + 180224 <= SMEM_BYTES
    assert smem_estimate(MHA, outside) == 32768 + 225280 > SMEM_BYTES
    assert "ATTN-SPACE-SMEM-ESTIMATE" not in [v.rule_id for v in check(MHA, inside)]
    assert "ATTN-SPACE-SMEM-ESTIMATE" in [v.rule_id for v in check(MHA, outside)]
    # persistent kernels keep the epilogue's staging beside the mainloop's: 2 warpgroups x 64 x 32 x 2 B x 2
    pers = PINGPONG.replace(tile_kv=176, stages_kv=4)
    assert smem_estimate(MHA, pers) == 32768 + 180224 + 16384


def test_cost_counts_the_causal_diagonal():
    from cutegen.ops.attention.space import cost
    c = AttentionConfig()
    full, causal = cost(MHA, c), cost(MHA.replace(causal=True), c)
    assert 0.45 < causal / full < 0.6          # about half the tiles (128-row Q tiles over 128-row KV tiles)
