"""Wave tiles (issue 24): every tile N a multiple of 8 up to 256 with its full-width WGMMA, priced with the
partial-sector epilogue store and the excess-subtile term (search/cost.py), on for new searches, stated in the
manifest, and re-ranked by regen as the manifest states (NOTES.md "Wave tiles priced")."""
import json

import numpy as np
import pytest

from cutegen import render
from cutegen.cli import main
from cutegen.config import KernelConfig
from cutegen.errors import FieldError
from cutegen.legality import check_config
from cutegen.problem import GemmProblem
from cutegen.search import cost as costmod
from cutegen.search import ranking
from cutegen.search.engine import _make_config, search

SQ = GemmProblem.from_dict({"m": 2048, "n": 2048, "k": 2048, "dtype": "bf16", "layout": "tn"})
P200 = GemmProblem.from_dict({"m": 200, "n": 14336, "k": 4096, "dtype": "bf16", "layout": "tn"})
COOP = (1, 1, 0)      # cooperative, its TMA epilogue, persistent


@pytest.mark.parametrize("tn", [144, 160, 208, 224, 240])
def test_even_nonstandard_tiles_get_their_full_width(tn):
    """With wave tiles on the search names m64nNk16 for 144..240 (legal by every rule, rendered so); off, it leaves
    the instruction to ss_op_selector (m64n16 / m64n32), as before."""
    on = _make_config((128, tn, 64), (1, 1), COOP, wgmma_k=16)
    off = _make_config((128, tn, 64), (1, 1), COOP)
    assert on.mma_instruction == (64, tn, 16) and off.mma_instruction is None
    rep = check_config(SQ, on)
    assert rep.legal and not rep.warnings, rep.to_dict()["reasons"]
    src = render.render(SQ, render.complete_config(SQ, on), "cutlass").source
    assert f"64x{tn}x16" in src
    assert render.complete_config(SQ, off).mma_instruction[1] == costmod._ss_op_n(np.array([tn]))[0] < tn


def test_standard_widths_keep_their_instruction():
    for tn in (64, 96, 128, 192, 256):
        assert _make_config((128, tn, 64), (1, 1), COOP, wgmma_k=16).mma_instruction is None


def test_excess_subtiles_zero_for_every_standard_width():
    """EpilogueTileAuto's gcd(32, N) columns: 0 extra subtiles where N is a multiple of 32 or under it, 12 for
    64x136 (17 of 8 columns against 5), 21 for a cooperative 128x232, 2 row blocks for a ping-pong 128-row tile."""
    std = np.array([8, 16, 32, 64, 96, 128, 160, 192, 224, 256])
    assert list(costmod.excess_epilogue_subtiles(np.full(std.shape, 128), std, np.full(std.shape, 1))) == [0] * 10
    assert costmod.excess_epilogue_subtiles([64], [136], [2])[0] == 12
    assert costmod.excess_epilogue_subtiles([128], [232], [1])[0] == 21
    assert costmod.excess_epilogue_subtiles([128], [136], [2])[0] == 24
    assert costmod.excess_epilogue_subtiles([128], [144], [1])[0] == 4         # 9 of 16 columns against 5


def _epi(problem, tile, swap=False):
    cfg = render.complete_config(problem, KernelConfig.from_dict({
        "tile_shape": list(tile), "cluster_shape": [1, 1, 1], "stages": 4, "mainloop_schedule": "cooperative",
        "epilogue_schedule": "tma_warp_specialized_cooperative", "tile_scheduler": "persistent",
        "mma_instruction": [64, tile[1], 16]}))
    p = problem.replace(layout_c="col") if swap else problem
    return costmod.config_cost(p, cfg, 4)[1]["epilogue_us_per_tile"]


def test_partial_sector_epilogue_store(monkeypatch):
    """An 8-column subtile of a 16-bit N-contiguous D writes 16-byte row pieces: a whole 32-byte sector each, twice
    the bytes. 16 columns (32 bytes) and an M-contiguous D (a swap-AB kernel's) store whole sectors. (The per-subtile
    cost, the same for both orientations, is set aside: it is tested below.)"""
    monkeypatch.setattr(costmod, "EPILOGUE_SUBTILE_US", 0.0)
    row232, col232 = _epi(SQ, (128, 232, 64)), _epi(SQ, (128, 232, 64), swap=True)
    assert row232 == pytest.approx(2.0 * col232, rel=1e-3)
    row240, col240 = _epi(SQ, (128, 240, 64)), _epi(SQ, (128, 240, 64), swap=True)
    assert row240 == pytest.approx(col240, rel=1e-6)


def test_learned_samples_price_the_instruction_they_render():
    """samples_for (the learned ranking's candidates) and calibration._costs price a config's own WGMMA, as
    config_cost does: a wave tile is not priced as ss_op_selector's m64n8."""
    from cutegen.search import calibration
    from cutegen.search.learned.samples import samples_for

    cfg = render.complete_config(SQ, _make_config((128, 200, 64), (1, 1), COOP, wgmma_k=16))
    narrow = cfg.replace(mma_instruction=(64, 8, 16))
    want = [costmod.config_cost(SQ, c, 4)[0] for c in (cfg, narrow)]
    got = [s.prior_us for s in samples_for(SQ, [(cfg, 4), (narrow, 4)], None)]
    assert got == pytest.approx(want) and want[0] < want[1]
    recs = [(SQ, c, 4, 1.0, "g") for c in (cfg, narrow)]
    assert calibration._costs(recs) == pytest.approx(want)


def test_ranking_carries_the_option(monkeypatch):
    monkeypatch.delenv("CUTEGEN_WAVE_TILES", raising=False)
    assert ranking.wave_tiles_for_new_searches() is True
    assert ranking.wave_tiles_for_new_searches(False) is False
    monkeypatch.setenv("CUTEGEN_WAVE_TILES", "0")
    assert ranking.wave_tiles_for_new_searches() is False
    assert ranking.wave_tiles_for_new_searches(True) is True
    r = ranking.choose(device="h200", prior=True, wave_tiles=True)
    assert r.search_kwargs()["wave_tiles"] is True and r.cost_fields()["wave_tiles"] is True
    assert "wave_tiles" not in ranking.choose(device="h200", prior=True, wave_tiles=False).cost_fields()
    # a manifest without the field was made without wave tiles; with it, as it says; anything else is an error
    assert ranking.from_cost_record({"model": "cutegen.search.cost"}).search_kwargs()["wave_tiles"] is False
    assert ranking.from_cost_record({}).cost_fields() == {}
    stated = ranking.from_cost_record({"ranking": "prior", "device_kind": "h200", "wave_tiles": True})
    assert stated.wave_tiles is True and stated.cost_fields() == {"ranking": "prior", "device_kind": "h200",
                                                                  "wave_tiles": True}
    assert ranking.from_cost_record({"wave_tiles": True}).cost_fields() == {"wave_tiles": True}
    with pytest.raises(FieldError, match="cost.wave_tiles"):
        ranking.from_cost_record({"ranking": "prior", "device_kind": "h200", "wave_tiles": "yes"})


def test_search_picks_a_wave_tile_only_with_the_option():
    on = search(P200, 1, wave_tiles=True, device="h200").ranked[0].config
    off = search(P200, 1, wave_tiles=False, device="h200").ranked[0].config
    assert on.tile_shape[1] not in costmod.STANDARD_INSTRUCTION_N and on.mma_instruction[1] == on.tile_shape[1]
    assert off.tile_shape[1] in costmod.STANDARD_INSTRUCTION_N


def test_generate_states_wave_tiles_and_regen_keeps_them(tmp_path, monkeypatch, capsys):
    """generate: on by default (stated), off with --no-wave-tiles (nothing stated); regen --check reproduces both
    trees from what their manifests state, whatever $CUTEGEN_WAVE_TILES says."""
    from cutegen.results import device as devmod

    monkeypatch.setattr(devmod, "local_device_kind", lambda: None)
    monkeypatch.delenv("CUTEGEN_WAVE_TILES", raising=False)
    trees = {}
    for name, extra in (("on", []), ("off", ["--no-wave-tiles"])):
        out = tmp_path / name
        assert main(["generate", "--m", "200", "--n", "14336", "--k", "4096", "--no-build", "--prior",
                     "--device", "h200", "-o", str(out / "k"), *extra]) == 0
        trees[name] = json.loads((out / "k" / "manifest.json").read_text())
    assert trees["on"]["cost"]["wave_tiles"] is True and "wave_tiles" not in trees["off"]["cost"]
    assert trees["on"]["config"]["tile_shape"][1] not in costmod.STANDARD_INSTRUCTION_N
    assert trees["off"]["config"]["tile_shape"][1] in costmod.STANDARD_INSTRUCTION_N
    # regen: a tree made each way re-ranks as its manifests state
    from cutegen.commands.regen import ranking_for
    monkeypatch.setenv("CUTEGEN_WAVE_TILES", "0")
    assert ranking_for(tmp_path / "on" / "k", None).wave_tiles is True
    monkeypatch.setenv("CUTEGEN_WAVE_TILES", "1")
    assert ranking_for(tmp_path / "off" / "k", None).wave_tiles is False
    assert ranking_for(tmp_path / "off" / "k", {"mode": "prior", "device": "h200"}).wave_tiles is False
    assert ranking_for(tmp_path / "none", {"mode": "prior", "device": "h200"}).wave_tiles is True


PACK_SHAPES = """
[[shape]]
name = "proj"
dtype = "bf16"
layout = "tn"
m = [200]
n = 14336
k = 4096
"""


def test_pack_states_wave_tiles_and_check_keeps_what_it_states(tmp_path, monkeypatch, capsys):
    """A new pack searches with wave tiles (pack.json states it); --no-wave-tiles makes one without (nothing stated,
    the bytes of every pack before the option); --check re-selects each as its pack.json states."""
    from cutegen.results import device as devmod

    monkeypatch.setattr(devmod, "local_device_kind", lambda: None)
    monkeypatch.delenv("CUTEGEN_WAVE_TILES", raising=False)
    shapes = tmp_path / "s.toml"
    shapes.write_text(PACK_SHAPES)
    made = {}
    for name, extra in (("on", []), ("off", ["--no-wave-tiles"])):
        base = ["pack", str(shapes), "-o", str(tmp_path / name), "--target", "h200", "--prior", "--max-kernels", "1",
                "--summary-only"]
        assert main(base + extra) == 0
        made[name] = json.loads((tmp_path / name / "h200" / "pack.json").read_text())
        # --check without the flag: as pack.json states, whatever $CUTEGEN_WAVE_TILES says
        monkeypatch.setenv("CUTEGEN_WAVE_TILES", "1" if name == "off" else "0")
        assert main(base + ["--check"]) == 0
        monkeypatch.delenv("CUTEGEN_WAVE_TILES")
    assert made["on"]["wave_tiles"] is True and "wave_tiles" not in made["off"]
    tn = {k: v["kernels"][0]["config"]["tile_shape"][1] for k, v in made.items()}
    assert tn["on"] not in costmod.STANDARD_INSTRUCTION_N and tn["off"] in costmod.STANDARD_INSTRUCTION_N
    # checked the other way, it is out of date
    capsys.readouterr()
    assert main(["pack", str(shapes), "-o", str(tmp_path / "off"), "--target", "h200", "--prior", "--max-kernels",
                 "1", "--summary-only", "--check", "--wave-tiles"]) == 1
    assert "pack.json" in capsys.readouterr().out


def test_last_wave_experiment_is_off_and_moves_only_partial_waves(monkeypatch):
    """cost.LAST_WAVE_OWN_RATE (off): on, a partial last wave's k-blocks run at its own busy CTAs (cheaper); a grid of
    whole waves is priced the same either way."""
    assert costmod.LAST_WAVE_OWN_RATE is False
    partial = GemmProblem.from_dict({"m": 2040, "n": 3584, "k": 3584, "dtype": "bf16", "layout": "tn"})  # 224 tiles
    whole = GemmProblem.from_dict({"m": 128 * 12, "n": 256 * 11, "k": 4096, "dtype": "bf16", "layout": "tn"})  # 132
    cfg = render.complete_config(SQ, KernelConfig.from_dict({
        "tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1], "stages": 4, "mainloop_schedule": "cooperative",
        "epilogue_schedule": "tma_warp_specialized_cooperative", "tile_scheduler": "persistent"}))
    off = [costmod.config_cost(p, cfg, 4)[0] for p in (partial, whole)]
    monkeypatch.setattr(costmod, "LAST_WAVE_OWN_RATE", True)
    on = [costmod.config_cost(p, cfg, 4)[0] for p in (partial, whole)]
    assert on[0] < off[0] and on[1] == pytest.approx(off[1], rel=1e-12)


@pytest.mark.compile
@pytest.mark.parametrize("tile,sched", [((128, 224, 64), "cooperative"), ((128, 176, 64), "pingpong")])
def test_full_width_even_nonstandard_compiles(tmp_path, tile, sched):
    """The first picks' even non-standard widths with their full-width WGMMA (m64n224, m64n176) through the stock
    collective (their stages slice: an even number of 8-row atoms), built by nvcc."""
    from cutegen.build import build

    pol = (1, 1, 0) if sched == "cooperative" else (2, 0, 0)
    cfg = render.complete_config(SQ, _make_config(tile, (2, 1), pol, wgmma_k=16))
    assert cfg.mma_instruction == (64, tile[1], 16)
    render.render(SQ, cfg, "cutlass").write(tmp_path / "k")
    summary = build([tmp_path / "k"], jobs=1)
    assert summary.ok, summary.line()


# --- the mid-size suite's mispriced picks (NOTES.md "Wave tiles repriced") ------------------------------------------
SMALL_K = GemmProblem.from_dict({"m": 8192, "n": 2048, "k": 128, "dtype": "bf16", "layout": "tn"})
PP = (2, 0, 0)        # ping-pong, its TMA epilogue, persistent


def _cost(problem, tile, cluster, sched, stages=5):
    cfg = _make_config(tile, cluster, sched, wgmma_k=16)
    cfg = render.complete_config(problem, cfg.replace(stages=stages))
    return costmod.config_cost(problem, cfg, stages)[1]


def test_excess_subtiles_cost_their_time(monkeypatch):
    """EPILOGUE_SUBTILE_US per excess subtile is part of a cooperative tile's (unhidden) epilogue: 128x176 stores 11
    subtiles of 16 columns where 6 would do (5 excess); 128x192 none, so its epilogue does not move."""
    def epi(tile, us):
        monkeypatch.setattr(costmod, "EPILOGUE_SUBTILE_US", us)
        return _cost(SQ, tile, (2, 1), COOP)["epilogue_us_per_tile"]
    assert epi((128, 176, 64), 0.3) - epi((128, 176, 64), 0.0) == pytest.approx(5 * 0.3, abs=1e-3)
    assert epi((128, 192, 64), 0.3) == epi((128, 192, 64), 0.0)


def test_excess_subtile_cost_is_the_committed_fit():
    assert costmod.EPILOGUE_SUBTILE_US == 0.3 and costmod.PINGPONG_HIDE_CAPPED is True
    assert costmod.FEWEST_ACTIVE_CTAS == {4: 120} and costmod.ACTIVE_CTAS[4] == 128


@pytest.mark.parametrize("k, capped_moves", [(128, True), (384, True), (4096, False)])
def test_pingpong_hides_at_most_the_other_mainloop(monkeypatch, k, capped_moves):
    """Ping-pong overlaps a tile's epilogue with the other warpgroup's mainloop, so it hides at most that mainloop:
    128x168 (42 subtiles of 8 columns) at K = 128 and 384 (2 and 6 k-blocks) exposes its epilogue beyond the
    (1 - PINGPONG_EPILOGUE_HIDDEN) share; at K = 4096 (64 k-blocks) the mainloop covers the hidden share and the
    price is the uncapped one."""
    p = SMALL_K.replace(k=k)
    with_cap = _cost(p, (128, 168, 64), (2, 1), PP)["epilogue_us_per_tile"]
    monkeypatch.setattr(costmod, "PINGPONG_HIDE_CAPPED", False)
    without = _cost(p, (128, 168, 64), (2, 1), PP)["epilogue_us_per_tile"]
    if capped_moves:
        assert with_cap > 1.5 * without
    else:
        assert with_cap == pytest.approx(without, rel=1e-9)


QWEN_QKV_1000 = GemmProblem.from_dict({"m": 1000, "n": 4608, "k": 3584, "dtype": "bf16", "layout": "tn"})


def test_four_cta_clusters_one_wave_claim_is_priced_for_both_chips():
    """256x144 in 4x1 clusters over qwen2.5 QKV M = 1000 is 128 tiles: one wave on a chip holding 32 clusters of 4,
    two on the 2026-11-26 H200 (93.4 us against 47.9 predicted): 1.5 waves. 112 tiles (28 clusters) fit both
    chips: 1 wave. The same 128 tiles in 2x1 clusters (66 of 2 fit any 132-SM part): 1 wave. Many waves: not
    scoped (896 tiles of 1x4 stay at ceil(896 / 128) = 7)."""
    assert _cost(QWEN_QKV_1000, (256, 144, 64), (4, 1), COOP, 4)["waves"] == 1.5
    assert _cost(QWEN_QKV_1000, (256, 144, 64), (2, 1), COOP, 4)["waves"] == 1.0
    p112 = QWEN_QKV_1000.replace(n=112 // 4 * 144)           # 4 x 28 tiles
    assert _cost(p112, (256, 144, 64), (4, 1), COOP, 4)["waves"] == 1.0
    p120 = QWEN_QKV_1000.replace(n=120 // 4 * 144)           # 4 x 30 tiles: 30 clusters fit the smaller chip
    assert _cost(p120, (256, 144, 64), (4, 1), COOP, 4)["waves"] == 1.0
    p124 = QWEN_QKV_1000.replace(n=124 // 4 * 144)           # 31 clusters: one more than the smaller chip holds
    assert _cost(p124, (256, 144, 64), (4, 1), COOP, 4)["waves"] == 1.5
    many = GemmProblem.from_dict({"m": 128, "n": 896 * 64, "k": 4096, "dtype": "bf16", "layout": "tn"})
    assert _cost(many, (128, 64, 64), (1, 4), PP, 6)["waves"] == 7.0
