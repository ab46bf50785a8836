"""The rendered FMHA kernel's pipeline protocol, read back from a fresh rendering, is the checked term's; a mutation
of the rendered source (stage count, element type, consumer warpgroups, persistence) is caught."""
from __future__ import annotations

import pytest

from cutegen.errors import CutegenError
from cutegen.legality.attention_pipeline import check_terms, fmha_warp_specialized
from cutegen.ops.attention.config import AttentionConfig
from cutegen.ops.attention.pipeline_readback import mismatches, protocol_of_source
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.render import render_source

CASES = [
    (AttentionProblem(2, 8, 8, 1024, 1024, 128), AttentionConfig()),
    (AttentionProblem(2, 8, 2, 1024, 1024, 64), AttentionConfig(128, 64, "ws_pingpong", stages_kv=4, persistent=True,
                                                                 loads_q_separately=True)),
    (AttentionProblem(2, 8, 8, 1024, 1024, 72, dtype="f16"), AttentionConfig(128, 128, stages_kv=3)),
    (AttentionProblem(2, 8, 8, 1024, 1024, 64), AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1,
                                                                 stages_kv=4, blocks_per_sm=2)),
]


@pytest.mark.parametrize("problem,config", CASES)
def test_rendered_protocol_is_the_checked_terms(problem, config):
    source = render_source(problem, config)
    assert mismatches(problem, config, source) == []


@pytest.mark.parametrize("old,new,field", [
    ("Option<Tag::kStagesKV, Int<5>>", "Option<Tag::kStagesKV, Int<4>>", "stages_kv"),
    ("Option<Tag::kStagesQ, Int<2>>", "Option<Tag::kStagesQ, Int<3>>", "stages_q"),
    ("Option<Tag::kNumMmaWarpGroups, Int<2>>", "Option<Tag::kNumMmaWarpGroups, Int<1>>", "consumers"),
    ("Option<Tag::kIsPersistent, false_type>", "Option<Tag::kIsPersistent, true_type>", "persistent"),
    ("using Element = cutlass::bfloat16_t;", "using Element = cutlass::float_e4m3_t;", "bytes_kv"),
    ("constexpr int kHeadTile = 128;", "constexpr int kHeadTile = 112;", "bytes_q"),
])
def test_mutated_source_is_caught(old, new, field):
    problem, config = CASES[0]
    source = render_source(problem, config)
    assert old in source
    found = mismatches(problem, config, source.replace(old, new))
    assert any(m.startswith(field + ":") for m in found), found


def test_read_back_term_is_checked():
    """The term built from the read-back parameters is what the checker proves; a rendered 2-stage ring deadlocks."""
    problem, config = CASES[0]
    p = protocol_of_source(render_source(problem, config).replace("kStagesKV, Int<5>", "kStagesKV, Int<2>"))
    term = fmha_warp_specialized(stages_kv=p.stages_kv, stages_q=p.stages_q, kv_tiles=(3,), bytes_q=p.bytes_q,
                                 bytes_k=p.bytes_kv, bytes_v=p.bytes_v, consumers=p.consumers)
    assert "PIPE-DEADLOCK" in {v.rule_id for v in check_terms([term]).violations}


def test_unreadable_source_is_one_line_error():
    with pytest.raises(CutegenError, match="ATTN-PIPELINE-MATCH"):
        protocol_of_source("int main() {}")
