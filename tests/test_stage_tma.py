"""The one-stage TMA descriptor form (cutegen/stage_tma.py, templates/cutegen_stage_tma_mainloop.inc.j2): tiles
whose rows per stage are an odd number of 8-row SW128 atoms (Tile_N = 136, 200, 232: cuBLAS's wave-sized tiles,
NOTES.md "the diagnosis") compile, are legal where the form covers them, are rendered fresh with the form, and
are priced with the instruction they render with."""
import pytest

from cutegen import render, stage_tma
from cutegen.config import KernelConfig
from cutegen.legality import check_config
from cutegen.problem import GemmProblem
from cutegen.swap_ab import kernel_problem

P257 = GemmProblem.from_dict({"m": 257, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})
P200 = GemmProblem.from_dict({"m": 200, "n": 14336, "k": 4096, "dtype": "bf16", "layout": "tn"})
SQ = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})


def _cfg(tile, cluster=(1, 1, 1), stages=4, sched="cooperative", swap=False, **kw):
    epi = "tma_warp_specialized_cooperative" if sched == "cooperative" else "tma_warp_specialized"
    d = {"tile_shape": list(tile), "cluster_shape": list(cluster), "stages": stages, "mainloop_schedule": sched,
         "epilogue_schedule": epi, "tile_scheduler": "persistent", "swap_ab": swap,
         "mma_instruction": [64, tile[1], 16 if tile[2] * 2 <= 128 else 16]}
    d.update(kw)
    return KernelConfig.from_dict(d)


def _rules(problem, cfg):
    rep = check_config(problem, cfg)
    return [v.rule_id for v in rep.violations + rep.warnings]


def test_stock_collective_fails_where_nvcc_failed():
    """nvcc 13.0 + CUTLASS 4.2 on the stock 64x136x64 s8 swap-AB kernel (2026-11-26): cute/layout.hpp:1077
    "Stride Divisibility Condition" composing the stage mode (8):(8704) with the swizzle's projection
    (16,64,2):(1,0,1024), i.e. stride 8704 / 16 = 544 against the 64-wide mode, from the Params' stage slice
    SmemLayoutB{}(_,_,Int<0>{}) (sm90_mma_tma_gmma_ss_warpspecialized.hpp:188)."""
    cfg = render.complete_config(P257, _cfg((64, 136, 64), (2, 1, 1), 8, "pingpong", swap=True))
    kp = kernel_problem(P257, cfg)
    errors = stage_tma.stock_slice_errors(kp, cfg, 16, 16)
    assert errors == [("B", "Stride Divisibility Condition: stride 544 vs shape 64")]
    # 8 rows more: an even number of atoms, the stock collective slices it
    assert stage_tma.stock_slice_errors(kp, cfg.replace(tile_shape=(64, 144, 64)), 16, 16) == []


@pytest.mark.parametrize("problem,tile,cluster,stages,sched", [
    (P257, (64, 136, 64), (2, 1, 1), 8, "pingpong"),       # cuBLAS nvjet 64x136_64x8 2x1 for 257x4096x4096
    (P200, (128, 200, 64), (4, 1, 1), 5, "cooperative"),   # 128x200_64x5 4x1 for M = 200
    (SQ, (128, 232, 64), (2, 1, 1), 4, "cooperative"),     # 128x232_64x4 2x1 (2040x3584x3584's tile)
])
def test_cublas_tiles_are_legal_through_the_form(problem, tile, cluster, stages, sched):
    cfg = _cfg(tile, cluster, stages, sched, swap=problem is not SQ)
    assert "SM90-SMEM-STAGE-SLICE" not in _rules(problem, cfg)
    assert check_config(problem, cfg).legal, check_config(problem, cfg).to_dict()["reasons"]
    # rendered fresh: the kernel carries cutegen's mainloop, and no CollectiveBuilder cross-check
    src = render.render(problem, render.complete_config(problem, cfg), "cutlass").source
    assert "struct CollectiveMainloop : StockMainloop" in src
    assert "SmemLayoutStageB{}, TileShape{}, ClusterShape{}" in src
    assert "BuilderMainloop" not in src


def test_form_scope_boundaries():
    """SM90-SMEM-STAGE-SLICE now fires only where the form cannot build the kernel; each bound of the form's
    predicate (stage_tma.why_not) on both sides, with the rule's own ID."""
    inside = _cfg((128, 200, 64))
    assert "SM90-SMEM-STAGE-SLICE" not in _rules(SQ, inside)
    # Tile_K = 128 bf16: two SW128 atoms along K (Tile_K x bits = 2048, not 1024)
    two_atoms = _cfg((128, 200, 128), stages=2)
    rep = check_config(SQ, two_atoms)
    slice_v = [v for v in rep.violations if v.rule_id == "SM90-SMEM-STAGE-SLICE"]
    assert slice_v and "Tile_K x bits = 1024" in str(slice_v[0])
    # the same tile with a K-major SW64 atom (64-byte rows)
    sw64 = _cfg((128, 200, 64), smem_layout_a="K_SW64", smem_layout_b="K_SW64")
    assert "SM90-SMEM-STAGE-SLICE" in _rules(SQ, sw64)
    # the form covers it at 2 stages of Tile_K = 64 (inside) but not 2 stages of Tile_K = 128 (above)
    assert "SM90-SMEM-STAGE-SLICE" not in _rules(SQ, _cfg((128, 200, 64), stages=2))
    # cp.async: another collective
    unaligned = SQ.replace(k=4092)
    cp = _cfg((128, 200, 64), mainloop_load="cp_async", epilogue_schedule="no_smem")
    rep = check_config(unaligned, cp)
    slice_v = [v for v in rep.violations if v.rule_id == "SM90-SMEM-STAGE-SLICE"]
    assert slice_v and "cp.async" in str(slice_v[0])
    # an even number of atoms never needed the form: the stock collective renders it
    even = render.complete_config(SQ, _cfg((128, 208, 64)))
    assert not stage_tma.needed(SQ, even, 16, 16, False)
    assert "StockMainloop" not in render.render(SQ, even, "cutlass").source


def test_form_is_16_bit_only():
    cfg = render.complete_config(SQ, _cfg((128, 200, 64)))
    assert stage_tma.why_not(SQ, cfg, 16, 16, False) is None
    assert "16-bit" in stage_tma.why_not(SQ, cfg, 32, 32, False)
    assert "two-level" in stage_tma.why_not(SQ, cfg, 16, 16, True)


def test_odd_stage_count_with_8_rows():
    """128x8x64 with 13 stages broke the stock stage slice (the stage mode (13):(512)); its B stage is one
    1024-byte atom, so the form builds it (nvcc 13.0: the one-stage mainloop compiles it)."""
    assert check_config(SQ, _cfg((128, 8, 64), stages=13)).legal
    cfg = render.complete_config(SQ, _cfg((128, 8, 64), stages=13))
    assert stage_tma.needed(SQ, cfg, 16, 16, False)
    cfg12 = render.complete_config(SQ, _cfg((128, 8, 64), stages=12))
    assert not stage_tma.needed(SQ, cfg12, 16, 16, False)


def test_instruction_pricing():
    import numpy as np
    from cutegen.search import cost as costmod

    # the search's instruction with wave tiles on: the full tile width for every multiple of 8 up to 256 (the odd
    # multiples and the even non-standard widths, which ss_op_selector splits into m64n8 / m64n16 / m64n32)
    widths = np.array([8, 16, 24, 128, 136, 144, 160, 200, 208, 224, 232, 240, 256])
    assert list(costmod.search_instruction_n(widths)) == list(widths)
    assert list(costmod._ss_op_n(widths)) == [8, 16, 8, 128, 8, 16, 32, 8, 16, 32, 8, 16, 256]
    # a config is priced with the instruction it renders: 17 m64n8 instructions cost more than one m64n136
    narrow = render.complete_config(P257, _cfg((64, 136, 64), (2, 1, 1), 8, "pingpong", swap=True,
                                               mma_instruction=[64, 8, 16]))
    wide = narrow.replace(mma_instruction=(64, 136, 16))
    assert costmod.instruction_n_of(narrow) == 8 and costmod.instruction_n_of(wide) == 136
    (c_narrow, bd_n), (c_wide, bd_w) = (costmod.config_cost(kernel_problem(P257, c), c, 8) for c in (narrow, wide))
    assert bd_w["instruction_efficiency"] > bd_n["instruction_efficiency"] and c_wide < c_narrow
    # waves are the tile's: 2 x 64 = 128 CTAs of 64x136 for 257 x 4096 (one wave on 132 SMs)
    assert bd_w["tiles"] == 128 and bd_w["waves"] == 1


def test_search_offers_wave_tiles_only_when_asked():
    from cutegen.search.engine import search

    from cutegen.search.cost import STANDARD_INSTRUCTION_N

    ranked_on = search(P200, 16, wave_tiles=True).ranked
    ranked_off = search(P200, 16, wave_tiles=False).ranked
    on = ranked_on[0].config
    # the pick is a width the selector has no instruction for, with its own full-width one (wavefix's repricing
    # moved it from 200 to 224: both are wave tiles)
    assert on.tile_shape[1] not in STANDARD_INSTRUCTION_N and on.mma_instruction[1] == on.tile_shape[1]
    assert any(r.config.tile_shape[1] % 16 == 8 for r in ranked_on)               # odd multiples of 8 are offered
    assert all(r.config.tile_shape[1] % 16 == 0 for r in ranked_off)              # and only when asked


@pytest.mark.compile
def test_form_kernel_compiles(tmp_path):
    """The 64x136x64 s8 2x1 ping-pong swap-AB kernel (cuBLAS's tile for 257x4096x4096) through cutegen.build."""
    from cutegen.build import build

    cfg = render.complete_config(P257, _cfg((64, 136, 64), (2, 1, 1), 8, "pingpong", swap=True))
    render.render(P257, cfg, "cutlass").write(tmp_path / "k")
    summary = build([tmp_path / "k"], jobs=1)
    assert summary.ok, summary.line()


def test_other_backends_refuse_the_form():
    from cutegen.dsl import dsl_supports

    form = render.complete_config(SQ, _cfg((128, 200, 64)))
    stock = render.complete_config(SQ, _cfg((128, 208, 64)))
    assert [r.split(":")[0] for r in render.builder_supports(SQ, form)] == ["CUTLASS-BUILDER-STAGE-SLICE"]
    assert render.builder_supports(SQ, stock) == []
    assert any(r.startswith("DSL-STAGE-SLICE") for r in dsl_supports(SQ, form))
    assert not any(r.startswith("DSL-STAGE-SLICE") for r in dsl_supports(SQ, stock))


def test_grouped_gemm_keeps_refusing_what_only_the_gemm_form_builds():
    """The grouped template uses CUTLASS's ptr-array collective, which slices the stage as the stock one does:
    check_grouped still refuses Tile_N = 200 bf16 (SM90-SMEM-STAGE-SLICE) and keeps 208 and e4m3 200."""
    from cutegen.legality.grouped_gemm import check_grouped
    from cutegen.ops.grouped_gemm.config import GroupedGemmConfig as C
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem as P

    p = P(8, 4096, 4096, 4096, dtype="bf16")
    rules = [v.rule_id for v in check_grouped(p, C(128, 200, 64)).violations]
    assert "SM90-SMEM-STAGE-SLICE" in rules
    assert "SM90-SMEM-STAGE-SLICE" not in [v.rule_id for v in check_grouped(p, C(128, 208, 64)).violations]
    e4 = P(8, 4096, 4096, 4096, dtype="e4m3")
    assert "SM90-SMEM-STAGE-SLICE" not in [v.rule_id for v in check_grouped(e4, C(128, 200, 128)).violations]


def test_shared_memory_model_matches_nvcc_for_the_form():
    """oracles/stage_tma_smem_probe.py: nvcc 13.0 evaluated sizeof(GemmKernel::SharedStorage) of each kernel,
    rendered with the form, against the model's bytes; the model is recomputed here, fresh."""
    import json
    from pathlib import Path

    rows = [json.loads(line) for line in
            (Path(__file__).resolve().parent.parent / "oracles" / "stage_tma_smem_probe_results.jsonl").read_text().splitlines()]
    assert len(rows) >= 6
    for r in rows:
        problem = GemmProblem.from_dict(r["problem"])
        cfg = KernelConfig.from_dict({"tile_scheduler": "persistent", **r["config"]})
        rep = check_config(problem, render.complete_config(problem, cfg))
        assert r["verdict"] == "equal", r
        assert rep.smem_bytes == r["kernel_bytes"] and rep.stages == r["stages"], (r["config"], rep.smem_bytes)
