"""The longest-first tile order (config ``tile_order``): config, renderer refusal on both sides, the schedulers'
m-block decode, its price, its place in the search, and its protocol (unchanged) read back from the rendered code."""
from __future__ import annotations

import numpy as np
import pytest

from cutegen.errors import FieldError
from cutegen.ops.attention.config import AttentionConfig
from cutegen.ops.attention.pipeline_readback import mismatches
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.render import backend_refusals, render_source
from cutegen.search.attention.cost import (L2_BYTES, config_cost, list_schedule_makespan, persistent_m_blocks,
                                           walk_spills_l2, _persistent_assignment)
from cutegen.search.attention.engine import candidates, config_of, key_of, search

CAUSAL = AttentionProblem(8, 16, 16, 2048, 2048, 64, causal=True)
LLAMA = AttentionProblem(32, 32, 8, 512, 512, 128, causal=True, layout="bhsd")
LF = dict(tile_order="longest_first")


def test_config_field_json_and_name():
    c = AttentionConfig(128, 128, **LF)
    assert c.short_name().endswith("_lf") and c.to_dict()["tile_order"] == "longest_first"
    assert AttentionConfig.from_dict(c.to_dict()) == c
    plain = AttentionConfig(128, 128)
    assert "tile_order" not in plain.to_dict()          # the example's order: the JSON (and hash) of before
    with pytest.raises(FieldError, match="tile_order"):
        AttentionConfig(128, 128, tile_order="shortest_first")


@pytest.mark.parametrize("problem,config,refused", [
    (CAUSAL, AttentionConfig(128, 128, **LF), False),
    (CAUSAL, AttentionConfig(128, 128, persistent=True, **LF), False),
    (CAUSAL, AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2, **LF), True),
    (CAUSAL, AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2), False),
    (AttentionProblem(2, 4, 4, 1024, 1024, 128, causal=True, varlen=True), AttentionConfig(128, 128, **LF), True),
    (AttentionProblem(2, 4, 4, 1024, 1024, 128, causal=True, varlen=True), AttentionConfig(128, 128), False),
    (AttentionProblem(8, 32, 8, 1, 8192, 128, layout="bhsd"), AttentionConfig(128, 128, kv_splits=4, **LF), True),
])
def test_render_refusal_both_sides(problem, config, refused):
    rules = [r.split(":")[0] for r in backend_refusals(problem, config)]
    assert ("ATTN-RENDER-TILE-ORDER" in rules) == refused, rules


def test_rendered_schedulers():
    src = render_source(CAUSAL, AttentionConfig(128, 128, **LF))
    assert "struct TileScheduler : cutlass::fmha::kernel::IndividualTileScheduler" in src
    assert "int(gridDim.x) - 1 - int(blockIdx.x)" in src
    src = render_source(CAUSAL, AttentionConfig(128, 128, persistent=True, **LF))
    assert "struct TileScheduler : cutlass::fmha::kernel::PersistentTileScheduler" in src
    assert "int(params.divmod_m_block.divisor) - 1 - m_rev" in src
    plain = render_source(CAUSAL, AttentionConfig(128, 128))
    assert "using TileScheduler = cutlass::fmha::kernel::IndividualTileScheduler;" in plain
    assert "struct TileScheduler" not in plain


@pytest.mark.parametrize("persistent", [False, True])
def test_protocol_is_the_examples(persistent):
    """The order changes which Q block a CTA takes, not its barriers: the rendered kernel's protocol is the checked
    term's (the same parameters as the forward-order twin)."""
    c = AttentionConfig(128, 128, persistent=persistent, **LF)
    assert mismatches(CAUSAL, c, render_source(CAUSAL, c)) == []


def _persistent_decode(n_m, n_b, n_h):
    """The C++ get_block_coord of the persistent longest-first scheduler, line by line: (m-block, batch', head')."""
    out = []
    for t in range(n_m * n_b * n_h):
        rest, bidh = divmod(t, n_h)          # params.divmod_h(rest, bidh, rest): head' fastest
        rest, bidb = divmod(rest, n_b)
        out.append((n_m - 1 - rest, bidb, bidh))
    return out


@pytest.mark.parametrize("n_m,n_b,n_h", [(4, 256, 4), (32, 4, 32), (128, 1, 32), (5, 7, 3), (1, 5, 2)])
def test_persistent_longest_first_visits_every_tile_once(n_m, n_b, n_h):
    tiles = _persistent_decode(n_m, n_b, n_h)
    assert sorted(tiles) == sorted((m, b, h) for m in range(n_m) for b in range(n_b) for h in range(n_h))
    assert list(persistent_m_blocks(n_m, n_b * n_h, "longest_first")) == [m for m, _, _ in tiles]
    assert tiles[0][0] == n_m - 1                     # the longest Q block first
    assert list(persistent_m_blocks(n_m, n_b * n_h)) == [t % n_m for t in range(n_m * n_b * n_h)]


def test_the_walk_spills_l2_where_a_level_of_every_pair_does_not_fit():
    """The longest-first walk reads one m-level of every (batch, KV head) at a time: Llama-8B S512 (256 KV pairs)
    overflows L2 only at its last level (4 KV tiles of K and V: 64 MB), B4 H32 S4096 at all but its first 6."""
    trips = np.arange(1, 5)
    assert list(walk_spills_l2(LLAMA, 128, trips, 32 * 8)) == [False, False, False, True]
    mha = AttentionProblem(4, 32, 32, 4096, 4096, 128, causal=True)
    spills = walk_spills_l2(mha, 128, np.arange(1, 33), 4 * 32)
    assert not spills[:6].any() and spills[6:].all()
    assert 128 * 6 * 128 * 256 * 2 <= L2_BYTES < 128 * 7 * 128 * 256 * 2


def test_persistent_longest_first_balances_the_round_robin():
    """With 4 m-blocks and a 132-CTA grid, the example's order gives CTA i the m-block i mod 4 every time; the
    longest-first walk gives every CTA a mix: its busiest CTA runs fewer KV tiles."""
    rows, heads = 512, 32 * 32
    _, fwd, _ = _persistent_assignment(LLAMA, 128, 128, 132, rows, heads, 1, "forward", 256)
    _, lf, _ = _persistent_assignment(LLAMA, 128, 128, 132, rows, heads, 1, "longest_first", 256)
    assert fwd.sum() == lf.sum()
    assert lf.max() < 0.7 * fwd.max()


def test_list_schedule_makespan_two_sided():
    """Launch order matters only when blocks are unequal: equal blocks give the same end either way; a causal
    ramp launched longest-first ends earlier than forward, never before the balanced time total / slots."""
    equal = np.full(16, 10.0)
    assert list_schedule_makespan(equal, 8, 4) == list_schedule_makespan(equal[::-1], 8, 4)
    ramp = np.arange(1.0, 129.0)
    fwd, lf = list_schedule_makespan(ramp, 32, 132), list_schedule_makespan(ramp[::-1], 32, 132)
    assert lf < fwd and lf >= ramp.sum() * 32 / 132


def test_cost_prices_the_order_only_under_the_mask():
    causal = AttentionProblem(1, 32, 32, 16384, 16384, 128, causal=True)
    plain = AttentionProblem(1, 32, 32, 16384, 16384, 128)
    for problem, persistent in ((causal, False), (LLAMA, True)):
        c = AttentionConfig(128, 128, persistent=persistent)
        fwd, lf = config_cost(problem, c, 200000)[0], config_cost(problem, c.replace(**LF), 200000)[0]
        assert lf < fwd
    c = AttentionConfig(128, 128)
    assert config_cost(plain, c, 200000)[0] == pytest.approx(config_cost(plain, c.replace(**LF), 200000)[0])
    # the persistent walk is the same walk without a mask (equal tiles: no balance to win, only L2 to lose)
    c = AttentionConfig(128, 128, persistent=True)
    assert config_cost(plain, c, 200000)[0] <= config_cost(plain, c.replace(**LF), 200000)[0]
    # the persistent walk over every head at one m-level reads B1 H32 S16384's K/V past L2: priced dearer there
    c = AttentionConfig(128, 128, persistent=True)
    assert config_cost(causal, c.replace(**LF), 200000)[0] > config_cost(causal, c.replace(**LF, persistent=False),
                                                                         200000)[0]


def test_search_offers_the_order_for_causal_only():
    assert any(c.tile_order == "longest_first" for c in candidates(CAUSAL))
    assert not any(c.tile_order == "longest_first" for c in candidates(AttentionProblem(8, 16, 16, 2048, 2048, 64)))
    for c in [c for c in candidates(CAUSAL) if c.tile_order == "longest_first"][:50]:
        assert config_of(key_of(c)).tile_order == "longest_first"
    r = search(CAUSAL, 3)
    assert r.ranked and all(not backend_refusals(CAUSAL, x.config) for x in r.ranked)


@pytest.mark.parametrize("config", [AttentionConfig(128, 128, persistent=True, **LF),
                                    AttentionConfig(128, 128, stages_q=4, stages_kv=4, persistent=True, **LF)],
                         ids=lambda c: c.short_name())
def test_persistent_longest_first_sequence_passes_the_temporal_checker(config):
    """A persistent CTA under the longest-first walk runs its tiles' KV trips in falling order (3, 2, 1 here); the
    checker explores that sequence on the kernel's protocol term: no PIPE rule broken. A too-shallow ring on the
    same sequence (2 K/V stages: ATTN-WS-STAGES-KV) is still caught."""
    from cutegen.legality.attention_pipeline import check_attention_pipeline
    report = check_attention_pipeline(CAUSAL, config, trips=[(3, 2, 1)])
    assert [v.rule_id for v in report.violations if v.enforced] == []
    shallow = check_attention_pipeline(CAUSAL, config.replace(stages_q=2, stages_kv=2), trips=[(3, 2, 1)])
    assert any(v.rule_id.startswith("PIPE-") for v in shallow.violations if v.enforced)


def test_measured_records_load_and_names_parse():
    """search/attention/measured.py reads every committed H200 timing with a known config; a kernel directory's name
    parses back to its config (short_name round trip), a name with an unknown flag does not parse."""
    from cutegen.search.attention import measured
    records = measured.load()
    assert len([t for t in records if not t.decode]) >= 190
    assert {t.source for t in records} >= {"2026-11-26-h200-attnfwd-run1-time", "2026-11-26-h200-run1-time"}
    for t in records:
        assert measured.config_from_name(f"attn_d{t.problem.head_dim}_bf16_{t.config.short_name()}") == t.config
    assert measured.config_from_name("attn_d128_bf16_128x128_wscoop_wg2_q2kv5_frobnicate") is None
    # call 2's persistent longest-first records ran another scheduler than the template renders: left out
    assert not any(t.source in measured.SUPERSEDED_PERSISTENT_LF and t.config.persistent
                   and t.config.tile_order == "longest_first" for t in records)
