"""Split-K with a separate reduction (cutegen/split_k_reduce.py, legality/split_k_reduce.py): the rules on both
sides of their bounds, the config field's hash neutrality, the sliced view, the fresh render, the cost term,
the search's offer and the runner's cases."""
from __future__ import annotations

import json

import pytest

from cutegen import split_k_reduce as skr
from cutegen.config import KernelConfig
from cutegen.errors import CutegenError, FieldError, IllegalConfig
from cutegen.legality import check_config, check_split_k_reduce, all_rules
from cutegen.problem import GemmProblem
from cutegen.render import render
from cutegen.search import cost as costmod

TN = GemmProblem(m=256, n=256, k=65536)                        # bf16 TN: A and B K-major, D row-major
NT = GemmProblem(m=256, n=256, k=65536, layout_a="col", layout_b="row")   # A and B MN-major


def cfg(s=8, **kw):
    base = dict(tile_shape=(128, 64, 64), cluster_shape=(1, 2, 1), mainloop_schedule="pingpong",
                epilogue_schedule="tma_warp_specialized", split_k_slices=s)
    base.update(kw)
    return KernelConfig(**base)


def ids(problem, config, workspace_bytes=None, enforced=True):
    return [v.rule_id for v in check_split_k_reduce(problem, config, workspace_bytes) if v.enforced == enforced]


# --- the config field ------------------------------------------------------------------------------------

def test_field_is_left_out_of_the_hash_at_one_slice():
    plain = KernelConfig(tile_shape=(128, 64, 64))
    assert "split_k_slices" not in plain.to_dict()
    assert plain.hash == KernelConfig.from_dict(plain.to_dict()).hash
    sliced = plain.replace(split_k_slices=8)
    assert sliced.to_dict()["split_k_slices"] == 8 and sliced.hash != plain.hash
    assert sliced.short_name().endswith("_slicek8") and not plain.short_name().endswith("_slicek1")


@pytest.mark.parametrize("value", [0, 65, 2.5, "8"])
def test_field_bounds(value):
    with pytest.raises(FieldError) as e:
        KernelConfig(tile_shape=(128, 64, 64), split_k_slices=value)
    assert e.value.field == "split_k_slices"


def test_field_bounds_inside():
    assert KernelConfig(tile_shape=(128, 64, 64), split_k_slices=64).split_k_slices == 64   # MAX_SPLIT_K_SLICES
    assert KernelConfig(tile_shape=(128, 64, 64), split_k_slices=1).split_k_slices == 1


# --- the rules, both sides of each bound -------------------------------------------------------------------

def test_one_slice_is_judged_by_no_form_rule():
    assert check_split_k_reduce(TN.replace(k=65537), cfg(1)) == []


def test_slices_divide_k():
    # s = 16: K = 65536 splits (K % s = 0); K = 65544 (a multiple of 8, so only this rule moves) does not (8)
    assert "SPLITK-REDUCE-SLICES-DIVIDE-K" not in ids(TN, cfg(16))
    assert ids(TN.replace(k=65544), cfg(16)) == ["SPLITK-REDUCE-SLICES-DIVIDE-K"]


def test_slice_stride_align_k_major_and_mn_major():
    # s = 8, bf16: K/s = 8192 -> 16384 B (a multiple of 16); K = 65544 -> K/s = 8193 -> 16386 B (not)
    assert ids(TN, cfg(8)) == []
    assert ids(TN.replace(k=65544), cfg(8)) == ["SPLITK-REDUCE-SLICE-STRIDE-ALIGN"]
    # the same K on MN-major operands: the slice stride is 8193 leading dimensions of 256 x 2 B: aligned
    assert ids(NT.replace(k=65544), cfg(8)) == []


def test_slice_stride_range_exact_bound():
    # NT, s = 2, K = 2^15: K/s = 2^14 leading dimensions of A; bf16. lda = 2^25 -> 2^14 * 2^25 * 2 = 2^40 B
    # (the bound itself: illegal); lda = 2^25 - 8 -> 2^40 - 2^18 B (legal)
    p = NT.replace(k=2**15)
    assert ids(p.replace(lda=2**25), cfg(2)) == ["SPLITK-REDUCE-SLICE-STRIDE-RANGE"]
    assert ids(p.replace(lda=2**25 - 8), cfg(2)) == []


def test_partial_stride_range_exact_bound():
    # row-major D: a partial is partial_ld (N rounded up to 4) x M f32; M = N = 2^19 -> 2^38 * 4 = 2^40 B
    big = GemmProblem(m=2**19, n=2**19, k=64)
    assert ids(big, cfg(2)) == ["SPLITK-REDUCE-PARTIAL-STRIDE-RANGE"]
    assert ids(big.replace(n=2**19 - 8), cfg(2)) == []   # (2^19 - 8) * 2^19 * 4 < 2^40


def test_epilogue_bias_and_activation():
    assert ids(TN.replace(bias=True), cfg()) == ["SPLITK-REDUCE-EPILOGUE"]
    assert ids(TN.replace(activation="relu"), cfg()) == ["SPLITK-REDUCE-EPILOGUE"]
    assert ids(TN, cfg()) == []


def test_scheduler_load_swap_staging():
    assert ids(TN, cfg(tile_scheduler="stream_k")) == ["SPLITK-REDUCE-SCHEDULER"]
    assert ids(TN, cfg(mainloop_load="cp_async")) == ["SPLITK-REDUCE-MAINLOOP-LOAD"]
    assert ids(TN, cfg(swap_ab=True)) == ["SPLITK-REDUCE-SWAP-AB"]
    assert ids(TN, cfg(stage_a=True)) == ["SPLITK-REDUCE-STAGING"]
    assert ids(TN, cfg(tile_scheduler="persistent", mainloop_load="tma", swap_ab=False, stage_a=False)) == []


def test_workspace_exact_bound():
    need = skr.workspace_bytes(TN, cfg(8))
    assert need == 8 * 256 * 256 * 4                       # 8 f32 partials of 256 x 256, already 256-B aligned
    assert ids(TN, cfg(8), workspace_bytes=need) == []
    assert ids(TN, cfg(8), workspace_bytes=need - 1) == ["SPLITK-REDUCE-WORKSPACE"]


def test_slice_kblock_is_a_warning_at_its_bound():
    # Tile_K = 64: K/s = 64 holds one k-block (no note); K/s = 56 does not (a note, not enforced)
    assert ids(TN.replace(k=8 * 64), cfg(8), enforced=False) == []
    assert ids(TN.replace(k=8 * 56), cfg(8), enforced=False) == ["SPLITK-REDUCE-SLICE-KBLOCK"]
    report = check_config(TN.replace(k=8 * 56), cfg(8))
    assert report.legal and "SPLITK-REDUCE-SLICE-KBLOCK" in [v.rule_id for v in report.warnings]


def test_rules_are_listed_with_sources():
    rules = {r.id: r for r in all_rules() if r.contract == "split_k_reduce"}
    assert len(rules) == 11 and all(r.source and r.summary for r in rules.values())


# --- check_config: the form's rules, then the sliced GEMM ------------------------------------------------------

def test_check_config_judges_the_sliced_gemm():
    report = check_config(TN, cfg(8))
    assert report.legal and report.config.split_k_slices == 8
    bad = check_config(TN.replace(k=65544), cfg(16))
    assert not bad.legal and [v.rule_id for v in bad.violations] == ["SPLITK-REDUCE-SLICES-DIVIDE-K"]


def test_sliced_problem():
    p = GemmProblem(m=200, n=250, k=65600, alignment_c=2, ldc=256)
    v = skr.sliced_problem(p, cfg(8))
    assert (v.k, v.batch, v.dtype_c, v.dtype_d, v.beta, v.alpha) == (8200, 8, "void", "f32", 0.0, 1.0)
    assert v.ldc == skr.partial_ld(p) == 252 and v.alignment_c == 4
    assert v.lda == 65600 and v.ldb == 65600     # a slice is a view of the caller's rows
    assert skr.sliced_problem(p, cfg(1)) is p
    col = p.replace(layout_c="col", ldc=0, alignment_c=0)
    assert skr.output_extents(col) == (200, 250) and skr.partial_ld(col) == 200


# --- rendering (fresh) -----------------------------------------------------------------------------------------

def test_render_fresh_sliced_kernel():
    r = render(TN.replace(beta=0.5), cfg(8))
    src = r.files["kernel.cu"]
    assert "using ElementC = void;" in src and "using ElementD = float;" in src      # the sliced GEMM's types
    assert "constexpr int kSlices = 8;" in src
    assert "using ElementOutD = cutlass::bfloat16_t;" in src and "using ElementOutC = cutlass::bfloat16_t;" in src
    assert "cutegen_split_k_reduce<true>" in src and "SPLITK-REDUCE-WORKSPACE" in src
    assert "SPLITK-REDUCE-SLICES-DIVIDE-K" in src and "SPLITK-REDUCE-SLICE-STRIDE-ALIGN" in src
    man = json.loads(r.files["manifest.json"])
    assert man["config"]["split_k_slices"] == 8
    assert man["split_k_reduce"]["workspace_bytes"] == 8 * 256 * 256 * 4 and man["split_k_reduce"]["slices"] == 8
    assert json.loads(r.files["manifest.json"]) == man   # deterministic JSON
    assert render(TN.replace(beta=0.5), cfg(8)).files == r.files


def test_render_void_c_has_no_c_path():
    src = render(TN.replace(dtype_c="void"), cfg(4)).files["kernel.cu"]
    assert "cutegen_split_k_reduce<false>" in src and "cutegen_split_k_reduce<true>" not in src
    assert "using ElementOutC = void;" in src and "beta must be 0" in src


def test_ordinary_kernel_renders_no_reduction():
    src = render(TN, cfg(1)).files["kernel.cu"]
    assert "cutegen_split_k_reduce" not in src and "kSlices" not in src and "split_k_slices" not in src


def test_render_refuses_an_illegal_form_and_other_backends():
    with pytest.raises(IllegalConfig) as e:
        render(TN.replace(k=65544), cfg(16))
    assert "SPLITK-REDUCE-SLICES-DIVIDE-K" in str(e.value)
    with pytest.raises(IllegalConfig) as e:
        render(TN, cfg(8, mainloop_schedule="cooperative", epilogue_schedule="tma_warp_specialized_cooperative",
                        tile_shape=(128, 64, 64)), backend="cutlass_builder")
    assert "CUTLASS-BUILDER-SPLIT-K-REDUCE" in str(e.value)
    from cutegen.collective_builder import complete
    from cutegen.dsl import dsl_supports
    done = complete(skr.sliced_problem(TN, cfg(8)), cfg(8))
    assert any(r.startswith("DSL-SPLIT-K-REDUCE") for r in dsl_supports(TN, done))


# --- cost --------------------------------------------------------------------------------------------------------

def test_reduction_cost_at_its_anchor():
    # cuBLAS's splitKreduce_kernel at 256 x 256, 16 f32 partials, bf16 D, no C read: 4.42 us (H200 ncu)
    anchor = TN.replace(dtype_c="void")
    assert skr.moved_bytes(anchor, 16) == 256 * 256 * (16 * 4 + 2)
    assert costmod.split_k_reduce_us(anchor, 16) == pytest.approx(4.42, abs=0.05)
    # more slices read more partials; C adds its bytes
    assert costmod.split_k_reduce_us(anchor, 8) < costmod.split_k_reduce_us(anchor, 16)
    assert costmod.split_k_reduce_us(TN, 16) > costmod.split_k_reduce_us(anchor, 16)


def test_config_cost_is_the_sliced_gemm_plus_the_reduction():
    from cutegen.legality import check_config as cc
    rep = cc(TN, cfg(8))
    total, bd = costmod.config_cost(TN, rep.config, rep.stages)
    inner, _ = costmod.config_cost(skr.sliced_problem(TN, cfg(8)), rep.config.replace(split_k_slices=1), rep.stages)
    assert total == pytest.approx(inner + costmod.split_k_reduce_us(TN, 8))
    assert bd["split_k_slices"] == 8 and bd["split_k_reduce_us"] > 0


# --- the search's offer -----------------------------------------------------------------------------------------

def test_forms_gate_bounds():
    from cutegen.search.engine import split_k_reduce_forms
    # depth: K >= 16 (M + N) = 8192 offers (slices with K/s >= 512: 2..16); K = 8128 does not
    assert split_k_reduce_forms(TN.replace(k=8192), "cutlass") == (2, 4, 8, 16)
    assert split_k_reduce_forms(TN.replace(k=8128), "cutlass") == ()
    # width: 1024 x 1024 has 64 tiles of 128 x 128 (< 132 / 2): offered; 1152 x 1024 has 72: not
    deep = GemmProblem(m=1024, n=1024, k=65536)
    assert split_k_reduce_forms(deep, "cutlass") != ()
    assert split_k_reduce_forms(deep.replace(m=1152), "cutlass") == ()
    # only the explicit backend renders it; bias is refused by the form's rules
    assert split_k_reduce_forms(TN, "dsl") == () and split_k_reduce_forms(TN.replace(bias=True), "cutlass") == ()
    # K = 65544 splits into 2 (32772 % 8 = 4 elements: 8 B, not 16) nor 4, 8, ...: no slice count passes
    assert split_k_reduce_forms(TN.replace(k=65544), "cutlass") == ()


def test_search_picks_the_form_for_tiny_mn_huge_k():
    from cutegen.search.engine import search
    r = search(TN, top_k=2)
    best = r.ranked[0]
    assert best.config.split_k_slices > 1 and best.plan is None
    assert best.breakdown["split_k_reduce_us"] > 0 and best.breakdown["split_k_slices"] == best.config.split_k_slices
    assert check_config(TN, best.config).legal
    # and not where it is not offered: the DSL backend's search has no sliced kernel
    assert all(x.config.split_k_slices == 1 for x in search(TN, top_k=2, backend="dsl").ranked)


# --- the runner's cases ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("s", [8, 16])
def test_validation_cases_are_legal_and_cover_the_form(s):
    from cutegen.runner import refusal_probes, validation_cases
    config = cfg(s)
    cases = validation_cases(TN, config)
    names = {c.name for c in cases}
    assert {"ragged", "ragged_batch2", "padded_batch3", "relaunch_slices", "slices_whole_kblocks"} <= names
    for c in cases:
        assert c.k % s == 0, c
        assert check_config(TN.replace(m=c.m, n=c.n, k=c.k, batch=c.batch), config).legal, c
    relaunch = next(c for c in cases if c.name == "relaunch_slices")
    assert relaunch.repeat == 20 and relaunch.beta == 0.5 and relaunch.batch == 2
    ragged = next(c for c in cases if c.name == "ragged")
    assert (ragged.k // s) % config.tile_shape[2] != 0           # each slice ends in a partial k-block
    probes = {c.name: c for c in refusal_probes(TN, config)}
    # bf16 K unit 8: s = 8 has no aligned K it cannot divide, but a slice stride probe; s = 16 has both
    assert ("probe_split_k_divide_k" in probes) == (s == 16)
    assert "probe_split_k_slice_stride" in probes
    for name in ("probe_split_k_divide_k", "probe_split_k_slice_stride"):
        if name in probes:
            c = probes[name]
            rep = check_config(TN.replace(m=c.m, n=c.n, k=c.k), config)
            assert [v.rule_id for v in rep.violations] == list(c.expect) and c.k % 8 == 0


def test_sanitizer_case_splits_evenly_and_fills_the_sms():
    from types import SimpleNamespace
    from cutegen.commands.validate import sanitizer_case
    for s in (4, 16):
        config = cfg(s)
        case = sanitizer_case(SimpleNamespace(problem=TN, config=config))
        assert case.name == "sanitize_slices" and case.k % s == 0 and case.beta == 0.5
        assert (case.k // s) % config.tile_shape[2] != 0                      # each slice ends ragged
        tiles = -(-case.m // 128) * -(-case.n // 64) * s
        assert tiles >= 3 * 132                                                # several tiles per SM
        assert check_config(TN.replace(m=case.m, n=case.n, k=case.k), config).legal


def test_every_rule_has_a_rulebook_row():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "legality" / "RULEBOOK-split-k-reduce.md").read_text()
    for r in all_rules():
        if r.contract == "split_k_reduce":
            assert f"| {r.rulebook} | `{r.id}`" in text, r.id


def test_search_at_a_chosen_slice_count():
    from cutegen.search.engine import search_split_k_reduce
    assert search_split_k_reduce(TN.replace(k=65544), 16) == []            # SPLITK-REDUCE-SLICES-DIVIDE-K
    best = search_split_k_reduce(TN, 4)[0]
    assert best.config.split_k_slices == 4 and best.config.tile_scheduler == "persistent"
    assert best.cost == pytest.approx(costmod.config_cost(TN, best.config, best.breakdown["stages"])[0], rel=1e-6)
