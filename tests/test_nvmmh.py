"""nvMatmulHeuristics as a contender: the mapping to KernelConfig, the rule report, the real library's answers."""
from __future__ import annotations

import pytest

from cutegen.errors import FieldError
from cutegen.nvmmh import Proposal, judge, layout_name, pick, precision, to_config
from cutegen.problem import GemmProblem


def P(**kw):
    base = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"}
    base.update(kw)
    return GemmProblem.from_dict(base)


def prop(cta=(128, 256, 64), cluster=(2, 1), stages=4, split_k=1, swizzle=1, order=0, rank=0):
    return Proposal(rank, cta, cluster, stages, split_k, swizzle, order)


def test_precision_strings_follow_cutlass():
    assert precision(P()) == "TST"
    assert precision(P(dtype="f16")) == "HSH"
    assert precision(P(dtype="e4m3")) == "QQTST"               # A, B, C, compute, D
    assert precision(P(dtype="e4m3", dtype_c="void")) == "QQTST"  # no C: D's type stands for it
    assert precision(P(dtype="e5m2", dtype_d="f16", dtype_c="f16")) == "RRHSH"
    with pytest.raises(FieldError, match="dtype_a"):
        precision(P(dtype="tf32"))


def test_layout_letters_are_storage_order_per_operand():
    assert layout_name(P()) == "TN_ROW_MAJOR"                  # A row-major (T), B column-major (N)
    assert layout_name(P(layout="nt")) == "NT_ROW_MAJOR"
    assert layout_name(P(layout="nn", layout_c="col")) == "NN_COL_MAJOR"


def test_mapping_to_config():
    cfg, rules, _ = to_config(P(), prop(cta=(256, 128, 64), cluster=(1, 2), stages=4, order=1, swizzle=2))
    assert not rules
    assert cfg.tile_shape == (256, 128, 64) and cfg.cluster_shape == (1, 2, 1) and cfg.stages == 4
    assert (cfg.mainloop_schedule, cfg.epilogue_schedule) == ("cooperative", "tma_warp_specialized_cooperative")
    assert (cfg.raster_order, cfg.raster_swizzle) == ("along_n", 2)
    cfg, _, _ = to_config(P(), prop(cta=(64, 32, 128), cluster=(1, 2), stages=8))
    assert (cfg.mainloop_schedule, cfg.epilogue_schedule, cfg.raster_order) == \
        ("pingpong", "tma_warp_specialized", "along_m")   # Tile_M % 128 != 0: not cooperative (E09)


@pytest.mark.parametrize("kw, rule", [({"split_k": 2}, "NVMMH-SPLIT-K"), ({"swizzle": 3}, "NVMMH-SWIZZLE"),
                                      ({"order": 2}, "NVMMH-RASTER")])
def test_unmappable_proposals_name_why(kw, rule):
    cfg, rules, reasons = to_config(P(), prop(**kw))
    assert cfg is None and rules == [rule] and reasons[0].startswith(rule)


def test_rule_report_both_sides_of_the_smem_boundary():
    # e4m3 128x128x128 cooperative: 7 stages overflow once the TMA epilogue's 33,792 B are added (nvMMH's
    # own top-1 for 4096^3 e4m3 on an H100 SXM); 6 stages fit.
    over = judge(P(dtype="e4m3"), prop(cta=(128, 128, 128), stages=7))
    assert not over.legal and over.rules == ["RES-SMEM-CAPACITY"] and "33792" in over.reasons[0]
    fits = judge(P(dtype="e4m3"), prop(cta=(128, 128, 128), stages=6))
    assert fits.legal and fits.config.stages == 6 and fits.config.is_complete


def test_pick_reports_rejected_and_uses_the_next_legal():
    props = [prop(cta=(128, 128, 128), stages=7, rank=0), prop(split_k=4, rank=1),
             prop(cta=(128, 128, 128), stages=7, rank=2),              # the same config again: judged once
             prop(cta=(128, 128, 128), stages=5, rank=3), prop(rank=4)]
    pk = pick(P(dtype="e4m3"), "h100-sxm", propose=lambda p, kind, n: props)
    assert pk.chosen.proposal.rank == 3 and pk.chosen.config.stages == 5
    assert [j.rules for j in pk.rejected] == [["RES-SMEM-CAPACITY"], ["NVMMH-SPLIT-K"]]
    d = pk.to_dict()
    assert d["chosen_rank"] == 3 and d["proposals"] == 4 and d["rejected"][0]["rules"] == ["RES-SMEM-CAPACITY"]
    assert "rank 0 rejected" in pk.summary() and "RES-SMEM-CAPACITY" in pk.summary()


# --- the library itself (pip nvidia-matmul-heuristics==0.1.0.27, the `heuristics` extra; runs on a CPU) ----
def test_library_bf16_tn_and_nt_top1_is_legal():
    for layout in ("tn", "nt"):
        pk = pick(P(layout=layout), "h100-sxm")
        assert pk.layout == f"{layout.upper()}_ROW_MAJOR"
        assert pk.chosen is not None and pk.chosen.proposal.rank == 0, pk.summary()
        cfg = pk.chosen.config
        assert cfg.is_complete and cfg.tile_shape[0] * cfg.tile_shape[1] >= 128 * 128


def test_library_e4m3_top1_breaks_smem_and_the_next_legal_one_is_used():
    pk = pick(P(dtype="e4m3"), "h100-sxm")
    assert pk.precision == "QQTST"
    assert pk.rejected and pk.rejected[0].proposal.rank == 0
    assert {r for j in pk.rejected for r in j.rules} <= {"RES-SMEM-CAPACITY", "WGMMA-ACCUMULATOR-REGISTERS"}
    assert "RES-SMEM-CAPACITY" in pk.rejected[0].rules
    assert pk.chosen is not None and pk.chosen.proposal.rank > 0 and pk.chosen.legal


def test_library_small_m_and_device_kinds():
    pk = pick(P(m=16), "h200")
    assert pk.gpu == "H200_SXM" and pk.chosen is not None
    assert pk.chosen.config.tile_shape[0] == 64        # a 16-row problem gets a 64-row (ping-pong) tile
    from cutegen.errors import CutegenError
    with pytest.raises(CutegenError, match="no nvMatmulHeuristics GPU"):
        pick(P(), "a100")


def test_render_picks_for_a_suite(tmp_path):
    import json
    from cutegen.nvmmh.__main__ import main
    rc = main(["--only", "sq4096_e4m3_tn", "--only", "sq1024_bf16_tn", "--out", str(tmp_path / "k"),
               "--report", str(tmp_path / "r.json")])
    assert rc == 0
    rep = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())}
    e4 = rep["sq4096_e4m3_tn"]
    assert e4["chosen_rank"] > 0 and e4["rejected"][0]["rules"] == ["RES-SMEM-CAPACITY"]
    man = json.loads((tmp_path / "k" / GemmProblem.from_dict(e4["problem"]).name / "manifest.json").read_text())
    assert man["config"] == e4["config"] and man["cost"]["model"] == "nvMatmulHeuristics"
    assert man["legality"]["legal"] is True
