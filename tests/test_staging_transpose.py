"""The transposing stage (cutegen/staging.py, legality/staging.py S07-S09): FP8 and TF32 outside TN.

WGMMA reads 8-bit and tf32 operands from shared memory only K-major; CUTLASS 4.2 sends every other
majorness to its register-A mainloop, which the explicit template does not spell (and which faulted
for fp8). A staged MN-major operand of such a problem is written K-major into the workspace by the
ABI's own transpose kernel, and the kernel is an ordinary TN TMA kernel. Here: the search answers
every (e4m3, e5m2, tf32) x (nt, nn, tt) problem, each rule on both sides of its boundary, the
workspace and cost accounting, and what the rendered ABI and manifest say.
"""
from __future__ import annotations

import pytest

from cutegen import GemmProblem, KernelConfig
from cutegen import staging as S
from cutegen.dsl import dsl_supports
from cutegen.legality import check_config
from cutegen.legality.staging import check_staging
from cutegen.problem import BLAS_LAYOUTS
from cutegen.search import cost as costmod
from cutegen.search import search

TILE = dict(tile_shape=(128, 128, 128), mainloop_schedule="cooperative",
            epilogue_schedule="tma_warp_specialized_cooperative")
OUT = {"e4m3": "bf16", "e5m2": "bf16", "tf32": "f32", "bf16": "bf16"}


def prob(m, n, k, dtype="e4m3", layout="nn", **kw):
    la, lb = BLAS_LAYOUTS[layout]
    return GemmProblem(m=m, n=n, k=k, dtype_a=dtype, dtype_b=dtype, dtype_c=OUT[dtype], dtype_d=OUT[dtype],
                       layout_a=la, layout_b=lb, **kw)


def ids(problem, workspace=None, **cfg):
    return {v.rule_id for v in check_staging(problem, KernelConfig(**{**TILE, **cfg}), workspace)}


A_T = dict(stage_a=True, stage_transpose_a=True)
B_T = dict(stage_b=True, stage_transpose_b=True)


def test_fields_stay_out_of_the_hash_at_their_default():
    plain = KernelConfig(**TILE, stage_a=True)
    assert "stage_transpose_a" not in plain.to_dict() and "stage_transpose_b" not in plain.to_dict()
    assert KernelConfig(**TILE, stage_a=True, stage_transpose_a=False).hash == plain.hash
    t = KernelConfig(**TILE, **A_T)
    assert t.hash != plain.hash and t.to_dict()["stage_transpose_a"] is True
    assert t.short_name().endswith("_stageAT")
    assert KernelConfig(**TILE, **A_T, stage_b=True).short_name().endswith("_stageAT_stageB")
    assert KernelConfig.from_dict(t.to_dict()) == t
    with pytest.raises(Exception, match="stage_transpose_b"):
        KernelConfig(**TILE, stage_transpose_b=1)


def test_needs_transpose_is_8_bit_and_tf32_mn_major_only():
    for dtype in ("e4m3", "e5m2", "tf32"):
        for layout, want in (("tn", set()), ("nn", {"a"}), ("tt", {"b"}), ("nt", {"a", "b"})):
            assert {op for op in "ab" if S.needs_transpose(prob(256, 256, 256, dtype, layout), op)} == want
    for layout in BLAS_LAYOUTS:           # 16-bit MN-major operands are read directly
        assert not any(S.needs_transpose(prob(256, 256, 256, "bf16", layout), op) for op in "ab")


def test_transpose_dtype_boundary():
    assert ids(prob(1024, 1024, 1024, "e4m3", "nn"), **A_T) == set()
    assert ids(prob(1024, 1024, 1024, "tf32", "tt"), **B_T) == set()
    # 16-bit MN-major: the direct TMA kernel is legal; transposing it is refused
    assert ids(prob(1024, 1024, 1024, "bf16", "nn"), **A_T) == {"STAGE-TRANSPOSE-DTYPE"}
    # already K-major: nothing to transpose
    assert ids(prob(1024, 1024, 1024, "e4m3", "tn"), **A_T) == {"STAGE-TRANSPOSE-DTYPE"}
    assert ids(prob(1024, 1024, 1024, "e4m3", "nn"), **B_T) == {"STAGE-TRANSPOSE-DTYPE"}


def test_transpose_staged_boundary():
    p = prob(1024, 1024, 1024, "e4m3", "nn")
    assert "STAGE-TRANSPOSE-STAGED" not in ids(p, **A_T)
    assert ids(p, stage_transpose_a=True) == {"STAGE-TRANSPOSE-STAGED"}
    rep = check_config(p, KernelConfig(**TILE, stage_transpose_a=True))
    assert not rep.legal and [v.rule_id for v in rep.violations] == ["STAGE-TRANSPOSE-STAGED"]


def test_transpose_needed_boundary():
    nn = prob(1000, 1024, 1024, "e4m3", "nn")      # A's rows (M = 1000) are 8-byte aligned: staging it was legal before
    assert ids(nn, stage_a=True) == {"STAGE-TRANSPOSE-NEEDED"}
    assert ids(nn, **A_T) == set()
    # aligned (M = 1024): the copy is needed for the majorness, so it is not "pointless" (STAGE-ALIGNED)
    assert ids(prob(1024, 1024, 1024, "e4m3", "nn"), stage_a=True) == {"STAGE-TRANSPOSE-NEEDED"}
    # a 16-bit MN-major operand staged for its alignment keeps its majorness
    assert ids(prob(1001, 1024, 1024, "bf16", "nn"), stage_a=True) == set()


def test_transposition_is_staging_for_the_other_rules():
    p = prob(1024, 1024, 1024, "e4m3", "nn")
    # STAGE-ALIGNED does not apply: an aligned MN-major operand is transposed for its majorness
    assert p.alignment_a == 16 and "STAGE-ALIGNED" not in ids(p, **A_T)
    # not with swap-AB, not with a cp.async mainloop
    assert "STAGE-SWAP-AB" in ids(p, **A_T, swap_ab=True)
    assert "STAGE-CP-ASYNC" in ids(p, **A_T, mainloop_load="cp_async")
    # STAGE-PITCH is cudaMemcpy2D's: the transpose kernel takes any leading dimension
    wide = p.replace(lda=2**31, alignment_a=0)
    assert "STAGE-PITCH" not in ids(wide, **A_T)
    assert "STAGE-PITCH" in ids(prob(1024, 1024, 1024, "bf16", "nn").replace(lda=2**30 + 1, alignment_a=0),
                                stage_a=True)


def test_tma_stride_of_the_transposed_copy():
    # the copy of A is K-major: rows staged_ld(K) apart, batches staged_ld(K) x M apart; 2^40 B is the limit
    k = 2**20
    ok = prob(2**20 - 16, 256, k, "e4m3", "nn", batch=2)
    bad = prob(2**20, 256, k, "e4m3", "nn", batch=2)
    assert "STAGE-TMA-STRIDE" not in ids(ok, **A_T)
    assert "STAGE-TMA-STRIDE" in ids(bad, **A_T)


def test_copy_view_workspace_and_staged_problem():
    p = prob(1000, 1500, 777, "e4m3", "nt")
    cfg = KernelConfig(**TILE, **A_T, **B_T)
    view = S.copy_view(p, cfg)
    assert (view.layout_a, view.layout_b) == ("row", "col") and view.alignment_a == view.alignment_b == 16
    # A's copy: 1000 rows of K = 777 rounded up to 784 bytes; B's: 1500 rows
    assert S.workspace_layout(p, cfg) == {"a": (0, 784 * 1000), "b": (784 * 1000 + 128, 784 * 1500)}
    need = S.staging_workspace_bytes(p, cfg)
    assert need == 784000 + 128 + 1176000 + 64
    assert ids(p, need, **A_T, **B_T) == set()
    assert ids(p, need - 1, **A_T, **B_T) == {"STAGE-WORKSPACE"}
    sp = S.staged_problem(p, cfg)
    assert (sp.layout_a, sp.layout_b, sp.k, sp.m, sp.n) == ("row", "col", 784, 1000, 1500)
    assert S.staged_problem(sp, KernelConfig(**TILE)) == sp
    # batched: each batch's copy back to back
    pb = p.replace(batch=3)
    assert S.workspace_layout(pb, cfg)["a"] == (0, 784 * 1000 * 3)
    # tf32 (4-byte): K rounded up to 4 elements
    assert S.staged_ld(S.copy_view(prob(64, 64, 777, "tf32", "nn"), KernelConfig(**TILE, **A_T)), "a") == 780


def test_transpose_cost_is_dearer_than_a_row_copy_of_the_same_bytes():
    assert max(costmod.STAGE_TRANSPOSE_EFFICIENCY.values()) < costmod.STAGE_COPY_EFFICIENCY
    nn = prob(4096, 4096, 4096, "e4m3", "nn")
    tn = prob(4096, 4096, 4100, "e4m3", "tn").replace(k=4096)   # same bytes, a plain copy
    t = costmod.staging_us(nn, ("a",))
    want = 2 * 4096 * 4096 / (costmod.HBM_BYTES_PER_S * costmod.STAGE_TRANSPOSE_EFFICIENCY[1]) * 1e6
    assert t == pytest.approx(want + costmod.STAGE_COPY_LAUNCH_US)
    assert t > costmod.staging_us(tn, ("a",))
    # the measured rates: a 4-byte element transposes at more bytes per second than a 1-byte one
    tf = prob(2048, 2048, 2048, "tf32", "nn")            # 4x the bytes per element of an e4m3 2048^3
    e4 = prob(2048, 2048, 2048, "e4m3", "nn")
    assert costmod.staging_us(tf, ("a",)) < 4 * costmod.staging_us(e4, ("a",))


SHAPES = ((2048, 2048, 2048), (1000, 1500, 777), (1, 4096, 4096), (1, 1001, 333))


@pytest.mark.parametrize("dtype", ("e4m3", "e5m2", "tf32"))
@pytest.mark.parametrize("layout", ("nt", "nn", "tt"))
def test_search_answers_fp8_and_tf32_outside_tn(dtype, layout):
    for m, n, k in SHAPES:
        p = prob(m, n, k, dtype, layout)
        res = search(p, top_k=2)
        assert res.ranked, f"{p.name}: no kernel; rules {res.pruned_by_rule}"
        for r in res.ranked:
            cfg = r.config
            assert set(S.transposed_operands(cfg)) == {op for op in "ab" if S.needs_transpose(p, op)}
            assert cfg.mainloop_load == "tma" and not cfg.swap_ab
            assert check_config(p, cfg).legal
            assert r.breakdown["staging_us"] > 0


def test_explain_shows_the_transposing_stage():
    res = search(prob(1024, 1024, 1000, "e4m3", "nn"), top_k=1, explain=True)
    step = res.ranked[0].chain[0]
    assert "KMajor(A)" in step and "transpose" in step
    assert "Restride(A), B) for B" in step           # B (K = 1000: 8-byte rows) is restrided, not transposed


def test_packs_and_the_dsl_backend_get_no_transposing_kernel():
    p = prob(1024, 1024, 1024, "e4m3", "nn")
    # a pack's plan entry points run without the ABI's copies: its search leaves staging out
    res = search(p, top_k=1, staging=False)
    assert res.ranked == [] and {"SM90-RS-ROUTE", "CUTLASS-EXPLICIT-RS"} & set(res.pruned_by_rule)
    assert search(p, top_k=1, backend="dsl").ranked == []
    cfg = search(p, top_k=1).ranked[0].config
    assert any(r.startswith("DSL-STAGING") for r in dsl_supports(p, cfg))


def test_16_bit_mn_major_keeps_its_direct_kernel():
    res = search(prob(1024, 1024, 1024, "bf16", "nn"), top_k=3)
    assert res.ranked and not any(r.config.stage_a or r.config.stage_b for r in res.ranked)


def test_rendered_abi_manifest_and_describe_say_what_is_transposed():
    import cutegen.render as render_mod
    p = prob(2048, 2048, 2047, "e4m3", "nn")
    cfg = KernelConfig(**TILE, **A_T, stage_b=True)
    k1 = render_mod.render(p, cfg)
    k2 = render_mod.render(p, cfg)
    assert k1.files == k2.files                        # deterministic
    src = k1.source
    assert "cutegen_stage_transpose<Bits><<<" in src and "stage_transpose<ElementA>(\"A\"" in src
    assert "stage_copy<ElementB>(\"B\"" in src and "stage_transpose<ElementB>" not in src
    assert "(A transposed into the workspace: K-major" in src and "copies of A and B (A transposed) need" in src
    assert "MainloopSm90TmaGmmaWarpSpecializedFP8" in src and "RS" not in k1.manifest["config"].get("mainloop_schedule", "")
    man = k1.manifest["staging"]
    assert man["operands"] == "A,B" and man["transposed"] == "A" and "transpose kernel" in man["how"]
    assert man["staged_ld"] == {"a": 2048, "b": 2048}
    assert '\\"transposed_operands\\":\\"A\\"' in src
    # the kernel's types are TN: A K-major (RowMajor), as the staged view says
    assert k1.manifest["problem"]["layout_a"] == "col"               # the caller's problem is recorded
    ctx = render_mod.template_context(p, k1.config, "cutlass")
    assert ctx["a_k_major"] and ctx["b_k_major"] and ctx["transposed_ops"] == ["a"]


def test_a_plain_staged_kernel_renders_without_the_transpose():
    import cutegen.render as render_mod
    src = render_mod.render(GemmProblem(m=2048, n=2048, k=2047),
                            KernelConfig(tile_shape=(128, 128, 64), stage_a=True, stage_b=True)).source
    assert "cutegen_stage_transpose" not in src and "transposed_operands" not in src


def test_the_bare_rate_benchmark_times_the_abi_kernel_verbatim():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]

    def kernel(path):
        text = (root / path).read_text()
        body = text.split("// >>> cutegen_stage_transpose")[1].split("// <<< cutegen_stage_transpose")[0]
        return body.split("\n", 1)[1]
    template = kernel("templates/cutegen_abi.inc.j2")
    assert "__global__" in template and "tile[32][33]" in template
    assert kernel("bench/stage_transpose_rate.cu") == template


def test_layouts_suite_is_fp8_and_tf32_outside_tn_and_searchable():
    from pathlib import Path

    from cutegen.suites import load_suite
    suite = load_suite(Path(__file__).resolve().parents[1] / "bench" / "layouts.toml")
    assert 6 <= len(suite) <= 8
    for name, p in suite:
        assert p.dtype_a in ("e4m3", "e5m2", "tf32") and p.blas_layout != "tn", name
        cfg = search(p, top_k=1).ranked[0].config
        assert S.transposed_operands(cfg), name


@pytest.mark.parametrize("problem", [dict(m=2048, n=2048, k=2048, dtype="e5m2", layout="tt"),
                                     dict(m=1000, n=1500, k=777, dtype="e4m3", layout="nn"),
                                     dict(m=1000, n=1500, k=777, dtype="tf32", layout="nt"),
                                     dict(m=512, n=1024, k=8191, dtype="e4m3", layout="nt", beta=0.5)],
                         ids=lambda d: f"{d['dtype']}_{d['layout']}_{d['m']}")
def test_every_validation_case_of_a_transposing_kernel_passes_preflight(problem):
    # what bench/gpu_transpose.sh will run (cutegen validate): every case must be launchable (the
    # launch contract and the legality rules at the case's size), every probe refused for its rule
    import cutegen.render as render_mod
    from cutegen import runner as R
    p = GemmProblem.from_dict(problem)
    cfg = search(p, top_k=1).ranked[0].config
    if p.k == 8191:      # the stream-K form the GPU script adds by hand: every launch plan
        cfg = KernelConfig(tile_shape=(128, 128, 128), cluster_shape=(1, 2, 1), tile_scheduler="stream_k",
                           **{k: v for k, v in TILE.items() if k != "tile_shape"}, **A_T, **B_T)
    kernel = render_mod.render(p, cfg)
    cases = R.validation_cases(p, kernel.config, (), launch_plan=kernel.manifest.get("launch_plan"))
    assert {"ragged", "ragged_batch2", "padded_batch3", "sub_tile"} <= {c.name for c in cases}
    bases = {"A": 1 << 30, "B": 2 << 30, "C": 3 << 30, "D": 4 << 30}
    for c in cases:
        assert R.preflight(p, R.case_launch_args(p, c, bases), kernel.config) == [], c.name
    for c in R.refusal_probes(p, kernel.config):
        ids = {v.rule_id for v in R.preflight(p, R.case_launch_args(p, c, bases), kernel.config)}
        assert ids & set(c.expect), c.name
        staged = {op.upper() for op in S.staged_operands(cfg)}
        assert not staged & set(c.offset), c.name      # a staged operand takes any pointer: no probe of it


def test_a_pack_never_takes_a_staged_kernel_from_the_database():
    # a measured staged/transposing kernel must not join a pack's candidates: its plan entry points make
    # none of the ABI's copies (cutegen/packs/select.py)
    from types import SimpleNamespace

    from cutegen.packs import select
    p = prob(1024, 1024, 1024, "e4m3", "nn")
    plain = KernelConfig(**TILE)
    staged = KernelConfig(**TILE, **A_T)

    class DB:
        def measurements(self, device_kind=None, problem=None):
            return [SimpleNamespace(validated=True, backend="cutlass", is_benchmark=True, config=c)
                    for c in (plain, staged)]
    got = select._measured(DB(), SimpleNamespace(kind="h100-sxm"), p)
    assert list(got.values()) == [plain]
