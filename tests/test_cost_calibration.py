"""The calibration harness: which measurements it uses and what its agreement figures mean."""
import os

import pytest

from cutegen import GemmProblem
from cutegen.config import KernelConfig
from cutegen.legality import check_config
from cutegen.search import calibration as CAL
from cutegen.search import cost as C

HERE = os.path.dirname(__file__)
BENCH = os.path.join(HERE, "..", "bench", "results", "2026-11-22-calibration-h200.json")
ORACLE = os.path.join(HERE, "data", "config_oracle_h200.jsonl")


def _record(problem, cfg, us, group="g"):
    rep = check_config(problem, KernelConfig.from_dict(cfg))
    assert rep.config is not None
    return (problem, rep.config, rep.stages, us, group)


COOP = {"tile_shape": [128, 256, 64], "cluster_shape": [1, 1, 1], "mainloop_schedule": "cooperative",
        "epilogue_schedule": "tma_warp_specialized_cooperative", "stages": "auto", "tile_scheduler": "persistent"}
NOSMEM = dict(COOP, tile_shape=[128, 128, 64], epilogue_schedule="no_smem")


def test_score_counts_a_pick_only_when_the_cheapest_predicted_is_the_fastest_measured():
    p = GemmProblem(4096, 4096, 4096)
    cheap = C.config_cost(p, check_config(p, KernelConfig.from_dict(COOP)).config,
                          check_config(p, KernelConfig.from_dict(COOP)).stages)[0]
    dear = C.config_cost(p, check_config(p, KernelConfig.from_dict(NOSMEM)).config,
                         check_config(p, KernelConfig.from_dict(NOSMEM)).stages)[0]
    assert cheap < dear
    agree = CAL.score([_record(p, COOP, 100.0), _record(p, NOSMEM, 200.0)])
    disagree = CAL.score([_record(p, COOP, 200.0), _record(p, NOSMEM, 100.0)])
    assert (agree["fastest_picked"], disagree["fastest_picked"]) == (1, 0)
    assert agree["groups_with_a_choice"] == disagree["groups_with_a_choice"] == 1
    assert disagree["geomean_pick_regret"] == pytest.approx(2.0)


def test_a_group_whose_kernels_ran_alike_is_no_choice():
    p = GemmProblem(4096, 4096, 4096)
    s = CAL.score([_record(p, COOP, 100.0), _record(p, NOSMEM, 101.0)])
    assert s["groups_with_a_choice"] == 0


@pytest.mark.skipif(not os.path.exists(BENCH), reason="H200 calibration results not present")
def test_bench_records_drop_the_spilled_fp8_kernels_and_keep_the_builder_baseline():
    recs = CAL.load_bench(BENCH)
    assert recs
    for p, cfg, stages, us, group in recs:
        if p.dtype_a in ("e4m3", "e5m2"):
            acc = C.config_cost(p, cfg, stages)[1]["accumulator_registers"]
            assert 2 * acc < CAL.SPILL_REGISTERS, (group, cfg.short_name())
    groups = {r[4] for r in recs}
    assert "bench:sq2048_e4m3_tn" not in groups          # every kernel of it spilled
    builders = [r for r in recs if r[1].tile_shape == (128, 256, 64) and r[1].cluster_shape[:2] == (2, 1)
                and r[4] == "bench:mlp8k3k_bf16_tn"]
    assert builders


def _misordered(recs, ratio=1.5):
    groups = {}
    for r in recs:
        groups.setdefault(r[4], []).append((C.config_cost(r[0], r[1], r[2])[0], r[3], r[1].short_name()))
    wrong, pairs = [], 0
    for g, rows in groups.items():
        for pa, ma, na in rows:
            for pb, mb, nb in rows:
                if mb > ratio * ma:
                    pairs += 1
                    if not pa < pb:
                        wrong.append(f"{g}: {na} {ma:.1f} us vs {nb} {mb:.1f} us")
    return pairs, wrong


@pytest.mark.skipif(not os.path.exists(BENCH), reason="H200 calibration results not present")
def test_the_model_orders_every_bench_pair_the_gpu_separated_by_1_5x():
    """Not the fitted figures: any two kernels of one problem whose measured times differ by more than
    1.5x (far beyond run-to-run noise) must be ordered the same way by the model. The pairs are the
    no-smem pingpong kernels against the CollectiveBuilder kernel and the swizzle-padded grids."""
    pairs, wrong = _misordered(CAL.load_bench(BENCH))
    assert pairs >= 10
    assert not wrong, wrong


@pytest.mark.skipif(not os.path.exists(ORACLE), reason="configuration oracle data not present")
@pytest.mark.xfail(strict=True, reason="known miss: the oracle's 2048^3 128x128x16 kernel (67 us) is predicted "
                   "faster than 43-44 us kernels; a per-k-block cost large enough to fix it overshoots the "
                   "absolute times of every other kernel")
def test_the_model_orders_every_oracle_pair_the_gpu_separated_by_1_5x():
    pairs, wrong = _misordered(CAL.load(ORACLE))
    assert pairs >= 10
    assert not wrong, wrong
