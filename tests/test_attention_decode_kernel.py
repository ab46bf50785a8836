"""The split-KV template's one-consumer-warpgroup decode kernel (DecodeFmhaKernel, CPU): its rules on both sides
(setmaxnreg, blocks per SM, the two-CTA shared-memory bound), the fresh rendering (its launch bounds and setmaxnreg,
its operator() against the example's, the two-warpgroup split kernel untouched by it), and its pipeline term (the
rendered protocol is the checked term's; the checker finds the 2-stage deadlock with one consumer too)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cutegen.legality import attention as A
from cutegen.legality.attention import AttentionContext, check_attention
from cutegen.legality.attention_pipeline import check_attention_pipeline
from cutegen.ops.attention.config import AttentionConfig
from cutegen.ops.attention.pipeline_readback import mismatches
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.ops.attention.render import backend_refusals, render_source

DECODE = AttentionProblem(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=128, layout="bhsd")
WG1 = dict(tile_q=64, tile_kv=128, mma_warpgroups=1, stages_q=1)
ONE_CTA = AttentionConfig(**WG1, stages_kv=5, kv_splits=4)
TWO_CTAS = AttentionConfig(**WG1, stages_kv=3, blocks_per_sm=2, kv_splits=4)


def found(p, c) -> set[str]:
    r = check_attention(p, c)
    return {v.rule_id for v in r.violations + r.warnings}


# --- rules --------------------------------------------------------------------------------------------------
def test_setmaxnreg_of_the_decode_kernel_is_in_range_and_the_unsplit_one_warpgroup_kernel_is_not():
    # the example's kernel with one consumer warpgroup asks setmaxnreg 488; the split template's own kernel caps it
    unsplit = AttentionConfig(**WG1, stages_kv=5)
    assert AttentionContext(DECODE, unsplit).mma_register_requirement == 488
    assert "ATTN-SETMAXNREG-RANGE" in found(DECODE, unsplit)
    assert AttentionContext(DECODE, ONE_CTA).mma_register_requirement == 240
    assert AttentionContext(DECODE, TWO_CTAS).mma_register_requirement == 232     # (256 - 24) / 8 * 8
    assert "ATTN-SETMAXNREG-RANGE" not in found(DECODE, ONE_CTA) | found(DECODE, TWO_CTAS)


def test_blocks_per_sm_two_only_for_the_split_one_warpgroup_kernel():
    assert "ATTN-WS-BLOCKS-PER-SM" not in found(DECODE, TWO_CTAS)
    # two consumer warpgroups (split or not), or one without the split: the example's launch bounds say 1
    assert "ATTN-WS-BLOCKS-PER-SM" in found(DECODE, AttentionConfig(blocks_per_sm=2, kv_splits=4))
    assert "ATTN-WS-BLOCKS-PER-SM" in found(DECODE, AttentionConfig(**WG1, stages_kv=3, blocks_per_sm=2))
    assert not [r for r in backend_refusals(DECODE, TWO_CTAS) if r.startswith("ATTN-RENDER-WS-BLOCKS-PER-SM")]
    assert [r for r in backend_refusals(DECODE, AttentionConfig(blocks_per_sm=2, kv_splits=4))
            if r.startswith("ATTN-RENDER-WS-BLOCKS-PER-SM")]


def test_two_ctas_per_sm_fit_with_three_stages_not_four():
    # head 128, 64-row Q (16 KB) + 3 x 32 KB K/V stages: 115,712 B, 2 x (115,712 + 1,024) = 233,472 B per SM exactly
    assert AttentionContext(DECODE, TWO_CTAS).smem_bytes == 115712
    assert "ATTN-BLOCKS-PER-SM-SMEM" not in found(DECODE, TWO_CTAS)
    assert "ATTN-BLOCKS-PER-SM-SMEM" in found(DECODE, TWO_CTAS.replace(stages_kv=4))


def test_the_decode_kernel_configs_are_legal():
    for c in (ONE_CTA, TWO_CTAS):
        r = check_attention(DECODE, c)
        assert r.legal, [str(v) for v in r.violations]


# --- rendering ------------------------------------------------------------------------------------------------
def test_rendered_decode_kernel_sets_its_launch_bounds_and_setmaxnreg():
    src = render_source(DECODE, TWO_CTAS)
    assert "constexpr int kBlocksPerSm = 2;" in src
    assert "struct DecodeFmhaKernel : BaseKernel {" in src and "using Kernel = DecodeFmhaKernel;" in src
    assert "static const int MinBlocksPerMultiprocessor = kBlocksPerSm;" in src
    assert "cute::min(240u," in src
    assert "Option<Tag::kNumMmaWarpGroups, Int<1>>" in src
    assert "constexpr int kBlocksPerSm = 1;" in render_source(DECODE, ONE_CTA)
    two = render_source(DECODE, AttentionConfig(kv_splits=4))          # the two-warpgroup split kernel: the example's
    assert "DecodeFmhaKernel" not in two and "using Kernel = BaseKernel;" in two


def _example_header() -> Path | None:
    import os
    roots = [os.environ.get("CUTEGEN_CUTLASS_INCLUDE", ""), str(Path(__file__).resolve().parents[1] / "oracles/.cutlass")]
    try:
        import cutlass_library
        roots.append(str(Path(cutlass_library.__file__).parent / "source"))
    except ImportError:
        pass
    for r in roots:
        p = Path(r) / "examples/88_hopper_fmha/kernel/fmha_kernel_tma_warpspecialized.hpp"
        if r and p.is_file():
            return p
    return None


def test_decode_kernel_operator_is_the_examples():
    header = _example_header()
    if header is None:
        pytest.fail("no CUTLASS 88 example headers (pip install nvidia-cutlass, or oracles/prepare_cutlass_headers.sh)")
    text = header.read_text()
    start = text.index("  CUTLASS_DEVICE void operator()(const Params &params, char* smem) {")
    body = text[start:text.index("#endif\n  }\n};", start)]
    src = render_source(DECODE, TWO_CTAS)
    mine = src[src.index("  CUTLASS_DEVICE void operator()(const Params &params, char* smem) {"):]
    mine = mine[:mine.index("#endif\n  }\n};")]
    # the only change: two names qualified with cutlass:: (the copy lives outside the example's namespace)
    unqualified = re.sub(r"(epi_load_pipeline_params\.\w+_arv_count = )cutlass::", r"\1", mine)
    assert unqualified == body
    assert mine != body


# --- the pipeline term --------------------------------------------------------------------------------------
def test_decode_kernel_protocol_is_the_checked_term():
    for c in (ONE_CTA, TWO_CTAS):
        assert mismatches(DECODE, c, render_source(DECODE, c)) == []
        r = check_attention_pipeline(DECODE, c)
        assert r.legal and r.complete, [str(v) for v in r.violations]
    # one consumer holds V_(j-1), K_j and V_j at once too: two K/V stages deadlock
    r = check_attention_pipeline(DECODE, TWO_CTAS.replace(stages_kv=2))
    assert "PIPE-DEADLOCK" in {v.rule_id for v in r.violations}


def test_a_mutated_consumer_count_in_the_decode_kernel_is_caught():
    src = render_source(DECODE, TWO_CTAS)
    bad = src.replace("Option<Tag::kNumMmaWarpGroups, Int<1>>", "Option<Tag::kNumMmaWarpGroups, Int<2>>")
    assert any(m.startswith("consumers:") for m in mismatches(DECODE, TWO_CTAS, bad))
