"""The H100 recalibration (branch costfit): samples costed as the search costs them, the three new prior
terms, and the calibration's database reader with family held-out scores."""
from __future__ import annotations

import pytest

from cutegen.config import KernelConfig
from cutegen.problem import GemmProblem
from cutegen.results import Measurement, ResultsDB
from cutegen.search import calibration as cal
from cutegen.search import cost as costmod
from cutegen.search.learned.samples import complete, from_measurements, oriented
from cutegen.swap_ab import transposed

PP = dict(mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
SWAP = KernelConfig((64, 8, 256), (1, 1, 1), swap_ab=True, **PP)
SK = KernelConfig((128, 128, 64), (1, 2, 1), mainloop_schedule="cooperative",
                  epilogue_schedule="tma_warp_specialized_cooperative", tile_scheduler="stream_k")
DECODE = GemmProblem(1, 4096, 4096, layout_a="row", layout_b="col")


def _meas(problem, config, us, kind="h100-sxm", method="cuda-events/median/warmup10/iters50/l2x4"):
    return Measurement(problem=problem, config=config, backend="cutlass", device_name="NVIDIA H100 80GB HBM3",
                       device_kind=kind, sm_count=132, timing_method=method, times_us=(us,), median_us=us,
                       validated=True, source="test")


def test_a_swapped_kernel_is_costed_on_the_transposed_problem():
    p, c = oriented(DECODE, SWAP)
    assert p == transposed(DECODE) and not c.swap_ab
    s = from_measurements([_meas(DECODE, SWAP, 17.8)])[0]
    assert s.problem == transposed(DECODE) and s.stated_problem == DECODE
    done = complete(p, c)
    assert s.prior_us == pytest.approx(costmod.config_cost(p, *done)[0])
    # costed on the stated problem the 64-row tile mode would lie over M = 1: several times dearer
    wrong = complete(DECODE, SWAP.replace(swap_ab=False))
    assert wrong is None or costmod.config_cost(DECODE, *wrong)[0] > 1.5 * s.prior_us


def test_stream_k_benchmarks_are_samples_and_validation_runs_are_not():
    p = GemmProblem(128, 4096, 14336, layout_a="row", layout_b="col")
    assert complete(p, SK) is not None                 # the relaunch warning is moot under the ABI
    got = from_measurements([_meas(p, SK, 62.1), _meas(p, SK, 70.0, method="validate:single-call")])
    assert len(got) == 1 and got[0].measured_us == 62.1


def test_hbm_efficiency_prices_decode_above_the_brief_bandwidth():
    p = GemmProblem(8192, 1, 8192)
    _, bd = costmod.cost_arrays(p, [64], [8], [256], [1], [1], [2], [0], [0], [6])
    brief = (8192 * 8192 + 2 * 8192) * 2 / costmod.HBM_BYTES_PER_S * 1e6
    assert costmod.HBM_EFFICIENCY < 1.0
    assert bd["hbm_floor_us"][0] == pytest.approx(brief / costmod.HBM_EFFICIENCY)


def _cost(problem, tile, cluster, sched=2, epi=0, scheduler=0, stages=8):
    t, parts = costmod.cost_arrays(problem, [tile[0]], [tile[1]], [tile[2]], [cluster[0]], [cluster[1]], [sched],
                                   [epi], [scheduler], [stages])
    return float(t[0]), parts


def test_a_four_cta_cluster_costs_short_k_blocks_a_release_wait_and_long_ones_nothing():
    small = GemmProblem(64, 4096, 4096)
    two, p2 = _cost(small, (64, 32, 128), (1, 2))
    four, p4 = _cost(small, (64, 32, 128), (1, 4))
    assert p4["mma_us_per_kblock"][0] < costmod.CLUSTER_WIDE_WAIT_US
    assert four > two * 1.05            # measured 21.2 vs 18.0 us on the H100
    big = GemmProblem(128, 28672, 4096)
    _, q2 = _cost(big, (128, 256, 64), (1, 2), sched=1, epi=1, stages=4)
    _, q8 = _cost(big, (128, 256, 64), (1, 8), sched=1, epi=1, stages=4)
    assert q8["mma_us_per_kblock"][0] > costmod.CLUSTER_WIDE_WAIT_US
    extra = q8["cluster_sync_us_per_kblock"][0] - q2["cluster_sync_us_per_kblock"][0]
    assert extra == pytest.approx(costmod.CLUSTER_SYNC_US * 2)   # only the saturating wait, no release wait


def test_the_stream_k_fix_up_chain_grows_with_the_ctas_sharing_a_tile():
    def chain_cost(m, link):
        old = costmod.STREAMK_LINK_US
        costmod.STREAMK_LINK_US = link
        try:
            parts = _cost(GemmProblem(m, 4096, 14336), (128, 128, 64), (1, 2), sched=1, epi=1, scheduler=1, stages=6)[1]
            return float(parts["mainloop_us"][0])
        finally:
            costmod.STREAMK_LINK_US = old
    # M = 128: 32 tiles over 132 CTAs, up to ceil(132 / 32) = 5 per tile, 4 links; M = 8192: tiles >> CTAs, the split tiles of the
    # last wave get about one CTA each
    few = chain_cost(128, 10.0) - chain_cost(128, 0.0)
    many = chain_cost(8192, 10.0) - chain_cost(8192, 0.0)
    assert few == pytest.approx(40.0) and many <= 10.0


def test_calibration_reads_the_db_and_scores_families_held_out(tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    rows = []
    for m in (16, 64, 128, 512):
        p = GemmProblem(m, 4096, 4096, layout_a="row", layout_b="col")
        for cfg, us in ((KernelConfig((64, 64, 128), (1, 2, 1), **PP), 20.0 + m / 50),
                        (KernelConfig((128, 128, 64), (2, 1, 1), **PP), 22.0 + m / 60),
                        (KernelConfig((64, 32, 128), (1, 4, 1), **PP), 25.0 + m / 40)):
            rows.append(_meas(p, cfg, us))
        rows.append(_meas(p, KernelConfig((64, 64, 128), (1, 2, 1), **PP), 99.0, method="validate:single-call"))
    db.add_many(rows)
    recs = cal.load_db(db, "h100-sxm")
    assert len(recs) == 12 and all(r[5] == "h100-sxm" for r in recs)     # the validation runs are not records
    pred = [costmod.config_cost(r[0], r[1], r[2])[0] for r in recs]
    s = cal.score_predictions(recs, pred)
    assert s["problems"] == 4 and s["regret_geomean"] >= 1.0 and s["mean_abs_log_error"] > 0
    before = {k: getattr(costmod, k) for k in cal.KNOBS}
    cv = cal.family_of("m")
    assert {cv(r) for r in recs} == {"m=16", "m=64", "m=128", "m=512"}
    out = cal.held_out(recs * 3, "m", knobs=("CLUSTER_WIDE_WAIT_US",))     # 36 records: 27 to train per fold
    assert out["after"]["records"] == 36 and out["before"]["records"] == 36
    assert {k: getattr(costmod, k) for k in cal.KNOBS} == before                # the module's constants restored


def test_synchronous_copies_pay_a_load_latency_per_copy_per_thread():
    """1- and 2-byte cp.async vectors: each producer thread waits for each of its copies (the H100 ran
    bf16 2048x2048x2047 at 2,093 us, 384 copies a thread a k-block)."""
    odd = GemmProblem(2048, 2048, 2047, layout_a="row", layout_b="col")
    assert odd.alignment_a * 16 < 32                      # odd K: 2-byte vectors
    even = GemmProblem(2048, 2048, 2048, layout_a="row", layout_b="col")
    t_odd, p_odd = _cost(odd, (256, 128, 128), (1, 1), sched=1 + 3, epi=2, stages=3)
    t_even, _ = _cost(even.replace(alignment_a=4, alignment_b=4), (256, 128, 128), (1, 1), sched=1 + 3, epi=2, stages=3)
    copies = (256 * 128 + 128 * 128) / 128                # per producer thread (cooperative: 128 producers)
    assert p_odd["pipeline_us_per_kblock"][0] >= copies * costmod.SYNC_ELEMENT_US
    assert 1000 < t_odd < 4000 and t_odd > 5 * t_even   # measured 2,093 us; 8-byte vectors stay asynchronous


def test_pick_quality_scores_each_models_pick_among_the_measured(tmp_path, capsys):
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("pick_quality", Path(__file__).parents[1] / "bench" / "pick_quality.py")
    pq = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pq)
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    rows = []
    for m in (64, 128, 512):
        p = GemmProblem(m, 4096, 4096, layout_a="row", layout_b="col")
        for cfg, us in ((KernelConfig((64, 64, 128), (1, 2, 1), **PP), 30.0),
                        (KernelConfig((128, 128, 64), (2, 1, 1), **PP), 20.0),
                        (KernelConfig((64, 32, 128), (1, 4, 1), **PP), 40.0)):
            rows.append(Measurement(**{**_meas(p, cfg, us).__dict__, "cublas_us": 25.0}))
    db.add_many(rows)
    assert pq.main(["--db", str(tmp_path / "r.sqlite"), "--no-seed", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["h100-sxm"]
    assert r["problems"] == 3
    for row in r["rows"]:
        assert row["best_us"] == 20.0 and row["best_x_cublas"] == pytest.approx(1.25)
        for name in ("prior", "learned"):
            assert row[name]["us"] in (20.0, 30.0, 40.0)
            assert row[name]["x_best"] == pytest.approx(row[name]["us"] / 20.0)
            assert row[name]["x_cublas"] == pytest.approx(25.0 / row[name]["us"])
