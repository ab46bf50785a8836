"""The cp.async mainloop: problem-model alignments, its rules on both sides of each boundary, its
cost against TMA, its rendering, and the launch contract of a kernel built for unaligned operands."""
from __future__ import annotations

import pytest

from cutegen.config import KernelConfig
from cutegen.errors import FieldError
from cutegen.legality import ConfigContext, check_config
from cutegen.legality.cp_async import tiled_copy_threads
from cutegen.problem import GemmProblem
from cutegen import collective_builder as cb

CP = dict(mainloop_load="cp_async", epilogue_schedule="no_smem")


def rules(problem, **cfg):
    rep = check_config(problem, KernelConfig(**cfg))
    return [v.rule_id for v in rep.violations]


# --- the problem model ------------------------------------------------------------------------------

def test_alignment_is_derived_from_extents_and_leading_dimensions():
    p = GemmProblem(m=1024, n=1001, k=2048)
    assert (p.alignment_a, p.alignment_b, p.alignment_c) == (8, 8, 1)
    p = GemmProblem(m=1024, n=1024, k=2046, dtype_a="e4m3", dtype_b="e4m3")
    assert (p.alignment_a, p.alignment_b) == (2, 2)
    p = GemmProblem(m=64, n=64, k=64, lda=68, ldc=66)
    assert (p.alignment_a, p.alignment_b, p.alignment_c) == (4, 8, 2)
    # MN-major operands take M and N
    p = GemmProblem(m=1001, n=1002, k=64, layout_a="col", layout_b="row", layout_c="col")
    assert (p.alignment_a, p.alignment_b, p.alignment_c) == (1, 2, 1)


def test_stated_alignment_the_ld_contradicts_is_a_field_error():
    with pytest.raises(FieldError, match="alignment_a"):
        GemmProblem(m=64, n=64, k=64, lda=68, alignment_a=8)
    assert GemmProblem(m=64, n=64, k=64, lda=72, alignment_a=8).alignment_a == 8
    with pytest.raises(FieldError, match="ldb"):
        GemmProblem(m=64, n=64, k=64, ldb=63)
    with pytest.raises(FieldError, match="problem.ldc"):
        GemmProblem.from_dict({"m": 8, "n": 8, "k": 8, "ldc": -1})


def test_new_fields_stay_out_of_json_name_and_kernel_key_at_their_defaults():
    p = GemmProblem(m=64, n=64, k=64)
    assert "lda" not in p.to_dict() and "ld" not in p.name
    assert set(p.kernel_key()) == set(GemmProblem(m=64, n=64, k=64, lda=72).kernel_key())
    q = GemmProblem(m=64, n=64, k=64, lda=72)
    assert q.to_dict()["lda"] == 72 and "lda72" in q.name and "lda" not in q.kernel_class_name
    assert GemmProblem.from_dict(q.to_dict()) == q
    c = KernelConfig(tile_shape=(128, 128, 64))
    assert "mainloop_load" not in c.to_dict() and c.hash == KernelConfig.from_dict(c.to_dict()).hash
    d = c.replace(mainloop_load="cp_async")
    assert d.to_dict()["mainloop_load"] == "cp_async" and d.hash != c.hash and d.short_name().endswith("_cpasync")
    with pytest.raises(FieldError, match="mainloop_load"):
        KernelConfig(tile_shape=(128, 128, 64), mainloop_load="ldg")


# --- rules, both sides of each boundary -------------------------------------------------------------

ODD_K = GemmProblem(m=1024, n=1024, k=2047)


def test_cp_async_takes_what_tma_cannot():
    assert "SM90-TMA-ALIGNMENT" in rules(ODD_K, tile_shape=(128, 128, 64), epilogue_schedule="no_smem")
    assert rules(ODD_K, tile_shape=(128, 128, 64), **CP) == []


def test_cluster_rule():
    assert rules(ODD_K, tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1), **CP) == []
    assert rules(ODD_K, tile_shape=(128, 128, 64), cluster_shape=(2, 1, 1), **CP) == ["SM90-CPASYNC-CLUSTER"]
    aligned = GemmProblem(m=1024, n=1024, k=2048)
    assert "SM90-CPASYNC-CLUSTER" not in rules(aligned, tile_shape=(128, 128, 64), cluster_shape=(2, 1, 1))


def test_epilogue_rule():
    assert rules(ODD_K, tile_shape=(128, 128, 64), **CP) == []
    assert rules(ODD_K, tile_shape=(128, 128, 64), mainloop_load="cp_async") == ["SM90-CPASYNC-EPILOGUE"]


def test_tiled_copy_rule_boundary():
    # bf16 TN, 8-element vectors, Tile_K = 32: 4 threads along K, 32 rows per pass -> Tile_N % 32
    aligned = GemmProblem(m=1024, n=1024, k=2048)
    assert tiled_copy_threads(128, 32, 32, 8, True) == (4, 32)
    assert rules(aligned, tile_shape=(64, 32, 32), mainloop_schedule="pingpong", **CP) == []
    assert rules(aligned, tile_shape=(64, 16, 32), mainloop_schedule="pingpong", **CP) == ["SM90-CPASYNC-TILED-COPY"]
    # two load warpgroups for the plain warp-specialized kernel: 256 threads, 64 rows per pass
    assert rules(aligned, tile_shape=(64, 32, 32), mainloop_schedule="warp_specialized", **CP) == \
        ["SM90-CPASYNC-TILED-COPY"]
    assert rules(aligned, tile_shape=(64, 64, 32), mainloop_schedule="warp_specialized", **CP) == []


def test_tiled_copy_matches_the_builder_formula():
    # make_simt_gmem_tiled_copy: threads_major = min(threads, extent / alignment)
    assert tiled_copy_threads(128, 128, 64, 1, True) == (64, 2)
    assert tiled_copy_threads(128, 128, 64, 8, False) == (16, 8)
    assert isinstance(tiled_copy_threads(128, 64, 8, 16, True), str)      # 8 / 16 = 0 threads


def test_can_implement_counts_the_kernels_vector_not_16_bytes():
    # cp.async can_implement: check_alignment<NumValSrc> on (M, K, L)
    p = GemmProblem(m=1024, n=1024, k=2046, alignment_a=4, alignment_b=2)   # 2046 % 4 = 2
    assert "SM90-CAN-IMPLEMENT-AB" in rules(p, tile_shape=(128, 128, 64), **CP)
    p = GemmProblem(m=1024, n=1024, k=2046)                                 # derived: 2 and 2
    assert rules(p, tile_shape=(128, 128, 64), **CP) == []


def test_problem_alignment_rule():
    assert rules(GemmProblem(m=1024, n=1001, k=2048, alignment_c=8), tile_shape=(128, 128, 64),
                 epilogue_schedule="no_smem") == ["SM90-PROBLEM-ALIGNMENT"]
    assert rules(GemmProblem(m=1024, n=1001, k=2048), tile_shape=(128, 128, 64), epilogue_schedule="no_smem") == []
    assert rules(GemmProblem(m=1024, n=1000, k=2048, ldc=1004, alignment_c=4), tile_shape=(128, 128, 64),
                 epilogue_schedule="no_smem") == []


def test_load_warpgroups_count_in_the_thread_total():
    cfg = cb.complete(ODD_K, KernelConfig(tile_shape=(64, 128, 64), mainloop_schedule="warp_specialized", **CP))
    assert ConfigContext(ODD_K, cfg).threads == 384
    tma = cb.complete(GemmProblem(m=64, n=64, k=64), KernelConfig(tile_shape=(64, 128, 64),
                                                                   mainloop_schedule="warp_specialized"))
    assert ConfigContext(GemmProblem(m=64, n=64, k=64), tma).threads == 256


# --- cost -------------------------------------------------------------------------------------------

def test_cp_async_costs_more_than_tma_and_narrow_vectors_more_than_wide():
    from cutegen.search.cost import config_cost
    aligned = GemmProblem(m=4096, n=4096, k=4096)
    cfg = KernelConfig(tile_shape=(128, 256, 64), epilogue_schedule="no_smem")
    tma, _ = config_cost(aligned, cfg, 4)
    cp16, _ = config_cost(aligned, cfg.replace(mainloop_load="cp_async"), 4)
    cp8, _ = config_cost(GemmProblem(m=4096, n=4096, k=4096, lda=4100), cfg.replace(mainloop_load="cp_async"), 4)
    cp2, bd = config_cost(GemmProblem(m=4096, n=4096, k=4095), cfg.replace(mainloop_load="cp_async"), 4)
    assert tma < cp16 <= cp8 < cp2
    assert bd["cp_async_issue_us_per_kblock"] > 0


# --- rendering --------------------------------------------------------------------------------------

def _render(problem, **cfg):
    from cutegen.render import render
    return render(problem, KernelConfig(**cfg), "cutlass", toolchain={"cutlass": "4.2.0", "nvcc": "13.0"}).source


def test_render_cp_async_kernel_spells_the_copy():
    src = _render(GemmProblem(m=4096, n=4096, k=4096, lda=4100), tile_shape=(128, 256, 64), **CP)
    assert "KernelCpAsyncWarpSpecializedCooperative" in src
    assert "MainloopSm90CpAsyncGmmaWarpSpecialized<Stages" in src
    assert "SM80_CP_ASYNC_CACHEALWAYS_ZFILL<cute::uint_byte_t<8>>, ElementA>" in src
    assert "SM80_CP_ASYNC_CACHEALWAYS_ZFILL<cute::uint_byte_t<16>>, ElementB>" in src
    assert "static_assert(cute::is_same_v<BuilderMainloop, CollectiveMainloop>" in src   # 4+ bytes: checked
    assert "kPtrAlign" in src and "SM90_TMA_LOAD" not in src.split("// --- mainloop")[0].split("// --- gmem")[1]
    src = _render(ODD_K, tile_shape=(128, 128, 64), **CP)
    assert "UniversalCopy<cute::uint_byte_t<2>>, ElementA>" in src
    assert "BuilderMainloop" not in src               # the builder static_asserts 4-byte vectors
    aligned = _render(GemmProblem(m=4096, n=4096, k=4096), tile_shape=(128, 256, 64))
    assert "kPtrAlign" not in aligned and "CpAsync" not in aligned


def test_builder_backend_refuses_two_byte_cp_async():
    from cutegen.errors import IllegalConfig
    from cutegen.render import render
    with pytest.raises(IllegalConfig, match="CUTLASS-BUILDER-CPASYNC-4B"):
        render(ODD_K, KernelConfig(tile_shape=(128, 128, 64), **CP), "cutlass_builder",
               toolchain={"cutlass": "4.2.0", "nvcc": "13.0"})


# --- the launch contract of an unaligned kernel -----------------------------------------------------

def test_launch_contract_follows_the_kernels_alignment():
    from cutegen import runner as R
    p = GemmProblem(m=1024, n=1024, k=1024, lda=1028)                      # alignment_a = 4
    case = R.Case("x", 1000, 1001, 1024, ld_pad={"A": 4})
    bases = {"A": 1 << 20, "B": 1 << 30, "C": 1 << 34, "D": 1 << 38}
    ids = lambda c: [v.rule_id for v in R.preflight(p, R.case_launch_args(p, c, bases))]  # noqa: E731
    # N = 1001 breaks D's 16-byte rows (alignment_c = 8 for this class); lda = 1028 is fine for A's 4
    assert ids(case) == ["CUTLASS-EPILOGUE-TMA-ALIGNMENT"]
    assert ids(R.Case("x", 1000, 1000, 1024, ld_pad={"A": 4}, offset={"A": 4})) == []   # 8-byte aligned A
    assert ids(R.Case("x", 1000, 1000, 1024, offset={"A": 2})) == ["TMA-GLOBAL-ADDRESS-ALIGN"]
    assert ids(R.Case("x", 1000, 1000, 1024, offset={"B": 4})) == ["TMA-GLOBAL-ADDRESS-ALIGN"]  # B stays 16 B
    assert ids(R.Case("x", 1000, 1000, 1018)) == ["CUTLASS-MAINLOOP-TMA-ALIGNMENT"]        # 1018 % 4
    odd = GemmProblem(m=7, n=9, k=3)                                         # every alignment 1
    assert [v.rule_id for v in R.preflight(odd, R.case_launch_args(odd, R.Case("y", 5, 3, 1, offset={"A": 1}),
                                                                    bases))] == []
    cfg = KernelConfig(tile_shape=(128, 128, 64), **CP)
    names = [c.name for c in R.validation_cases(ODD_K, cfg)]
    assert "unaligned_ld" in names
    assert "unaligned_ld" not in [c.name for c in R.validation_cases(GemmProblem(m=64, n=64, k=64),
                                                                      KernelConfig(tile_shape=(128, 128, 64)))]


def test_validation_plans_of_the_unaligned_suite_agree_with_the_launch_contract():
    """Dry run of what `cutegen validate` does with every kernel under generated/unaligned: each
    case passes the launch contract, each refusal probe breaks exactly the rules it expects."""
    from pathlib import Path
    from cutegen import runner as R
    from cutegen.suites import load_suite
    from cutegen.manifest import load
    root = Path(__file__).resolve().parents[1]
    dirs = sorted(p.parent for p in (root / "generated" / "unaligned").rglob("manifest.json"))
    assert len(dirs) >= 6
    kernels = [(d.name, load(d / "manifest.json").problem, load(d / "manifest.json").config) for d in dirs]
    # each takes a cp.async mainloop or stages its unaligned operands for a TMA one (cutegen/staging.py)
    assert sum(cfg.mainloop_load == "cp_async" or cfg.stage_a or cfg.stage_b for _, _, cfg in kernels) >= 8
    bases = {"A": 1 << 20, "B": 1 << 30, "C": 1 << 34, "D": 1 << 38}
    unaligned_ld = 0
    for name, p, cfg in kernels:
        for case in R.validation_cases(p, cfg):
            v = R.preflight(p, R.case_launch_args(p, case, bases), cfg)
            assert v == [], f"{name} {case.name}: {v}"
            unaligned_ld += case.name == "unaligned_ld"
        for probe in R.refusal_probes(p, cfg):
            got = {x.rule_id for x in R.preflight(p, R.case_launch_args(p, probe, bases)) if x.enforced}
            assert got == set(probe.expect), f"{name} {probe.name}: {got}"
    assert unaligned_ld == len(kernels)     # every kernel of the suites has a narrow operand


def test_accumulator_budget_without_setmaxnreg():
    # 256x192 cooperative: 192 accumulator registers per thread; a TMA consumer has 232 after setmaxnreg,
    # a cp.async kernel's 384 threads share the register file: 168 each
    aligned = GemmProblem(m=4096, n=4096, k=4096)
    tma = check_config(aligned, KernelConfig(tile_shape=(256, 192, 64), epilogue_schedule="no_smem"))
    cp = check_config(aligned, KernelConfig(tile_shape=(256, 192, 64), **CP))
    assert "WGMMA-ACCUMULATOR-REGISTERS" not in [v.rule_id for v in tma.warnings]
    spill = [v for v in cp.warnings if v.rule_id != "SM90-CPASYNC-SYNCCHECK"]
    # 192 registers: over the 168-register budget (spills) and over the 144 at which ptxas serializes a cp.async
    # kernel's wgmma (tests/test_legality_gpu_probes.py)
    assert sorted(v.rule_id for v in spill) == ["WGMMA-ACCUMULATOR-REGISTERS", "WGMMA-ACCUMULATOR-SERIALIZED"]
    assert "168" in str(next(v for v in spill if v.rule_id == "WGMMA-ACCUMULATOR-REGISTERS"))
    ok = check_config(aligned, KernelConfig(tile_shape=(256, 128, 64), **CP))   # 128 < 168
    assert ok.legal and [v.rule_id for v in ok.warnings] == ["SM90-CPASYNC-SYNCCHECK"]


def test_cp_async_synccheck_warning_both_sides():
    """SM90-CPASYNC-SYNCCHECK: a warning (not enforced) on every cp.async kernel, never on a TMA one."""
    from cutegen.legality import check_config
    problem = GemmProblem(m=2048, n=2048, k=2047)
    cfg = KernelConfig(tile_shape=(128, 128, 64), mainloop_schedule="cooperative", epilogue_schedule="no_smem",
                       mainloop_load="cp_async")
    report = check_config(problem, cfg)
    assert "SM90-CPASYNC-SYNCCHECK" in [w.rule_id for w in report.warnings]
    assert "SM90-CPASYNC-SYNCCHECK" not in [v.rule_id for v in report.violations]
    tma = check_config(GemmProblem(m=2048, n=2048, k=2048), cfg.replace(mainloop_load="tma"))
    assert "SM90-CPASYNC-SYNCCHECK" not in [w.rule_id for w in tma.warnings + tma.violations]


# --- the wrong-result combination: cp.async mainloop + stream-K scheduler (issue 23, part 1) ---------

# K = 8190 is not a multiple of Tile_K = 64 (8190 = 127 * 64 + 62); K = 8192 is (128 k-blocks).
RAGGED_K = GemmProblem(m=128, n=1001, k=8190)
WHOLE_K = GemmProblem(m=128, n=1001, k=8192)
CP_COOP = dict(tile_shape=(128, 128, 64), mainloop_schedule="cooperative", **CP)


def test_cp_async_stream_k_config_is_illegal_whatever_k():
    # the kernel takes K (and, on cutegen_gemm, the heuristic plan) at run time: illegal for every K
    for p in (RAGGED_K, WHOLE_K):
        assert rules(p, tile_scheduler="stream_k", **CP_COOP) == ["SM90-CPASYNC-STREAMK"]
        # the persistent scheduler: the same cp.async kernel is legal
        assert rules(p, tile_scheduler="persistent", **CP_COOP) == []
    # a TMA mainloop with the stream-K scheduler is not this rule's (A is 16-byte aligned at K = 8192)
    tma = dict(tile_shape=(128, 128, 64), mainloop_schedule="cooperative", epilogue_schedule="no_smem")
    assert "SM90-CPASYNC-STREAMK" not in rules(WHOLE_K, tile_scheduler="stream_k", **tma)
    assert rules(WHOLE_K, tile_scheduler="stream_k", **tma) == []
    rep = check_config(RAGGED_K, KernelConfig(tile_scheduler="stream_k", **CP_COOP))
    assert "Tile_K=64" in str(rep.violations[0]) and "cp_async" in str(rep.violations[0])


def test_cp_async_split_plan_rule_is_exactly_the_failing_launches():
    from cutegen.launch_plan import LaunchPlan
    from cutegen.legality.stream_k import check_plan

    sk = KernelConfig(tile_scheduler="stream_k", **CP_COOP)

    def broken(problem, config, plan):
        return "SM90-CPASYNC-SPLIT-KRESIDUE" in {v.rule_id for v in check_plan(problem, config, plan)[0]}

    splitting = (LaunchPlan("split_k", 2), LaunchPlan("stream_k"), LaunchPlan("heuristic"))
    for plan in splitting:
        assert broken(RAGGED_K, sk, plan)            # K % 64 = 62: wrong results on the GPU
        assert not broken(WHOLE_K, sk, plan)         # K % 64 = 0: no residue to mispredicate
        assert not broken(RAGGED_K, sk.replace(mainloop_load="tma", epilogue_schedule="no_smem"), plan)
    # a plan that does not split runs every tile from k = 0
    assert not broken(RAGGED_K, sk, LaunchPlan("data_parallel"))
    # the persistent scheduler only runs the default plan, which on it never splits
    assert not broken(RAGGED_K, sk.replace(tile_scheduler="persistent"), LaunchPlan())
    # the reason names the values
    v = check_plan(RAGGED_K, sk, LaunchPlan("split_k", 2))[0]
    assert any("K=8190" in str(x) and "Tile_K=64" in str(x) for x in v)


@pytest.mark.parametrize("m,n,k", [(128, 1001, 8190), (1000, 1001, 2046)])
def test_search_ranks_no_cp_async_stream_k_candidate(m, n, k):
    # before the rule the search ranked 28 and 2 such candidates in its top 100
    from search import search

    r = search(GemmProblem(m=m, n=n, k=k), top_k=100)
    assert len(r.ranked) == 100
    assert sum(c.config.mainloop_load == "cp_async" for c in r.ranked) > 0   # cp.async is still searched
    assert [c for c in r.ranked if c.config.mainloop_load == "cp_async" and c.config.tile_scheduler == "stream_k"] == []


def test_search_mask_drops_cp_async_stream_k_rows_before_ranking():
    # the search's pre-ranking mask agrees with the rule: every cp.async row with the stream-K scheduler
    # is dropped, and cp.async rows with the persistent scheduler (1x1 cluster) are kept
    import numpy as np

    from search import cost as costmod
    from search.engine import SearchSpace, problem_mask

    space = SearchSpace(RAGGED_K)
    clusters = np.array(space.clusters, dtype=np.int64)
    pols = np.array(space.policies, dtype=np.int64)
    ci, pi = (a.ravel() for a in np.meshgrid(np.arange(len(clusters)), np.arange(len(pols)), indexing="ij"))
    keep = problem_mask(RAGGED_K, clusters, pols, ci, pi)
    cp = pols[pi, 0] >= len(costmod.SCHEDULES)
    one = (clusters[ci, 0] == 1) & (clusters[ci, 1] == 1)
    sk = pols[pi, 2] == costmod.SCHEDULERS.index("stream_k")
    assert (cp & sk).any() and (cp & ~sk & one).any()
    assert not keep[cp & sk].any()
    assert keep[cp & ~sk & one].all()


def test_wrong_result_rules_are_in_their_rulebook_section():
    from pathlib import Path

    from cutegen.legality import all_rules

    book = (Path(__file__).resolve().parents[1] / "legality" / "RULEBOOK-wrong-results.md").read_text()
    by_id = {r.id: r for r in all_rules()}
    for rid, row in (("SM90-CPASYNC-STREAMK", "W01"), ("SM90-CPASYNC-SPLIT-KRESIDUE", "W02")):
        assert by_id[rid].rulebook == row and by_id[rid].enforced
        assert f"| {row} | `{rid}`" in book
