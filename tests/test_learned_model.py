"""The learned cost model: fit on a synthetic fixture with a known correction, its uncertainty, the
predictor's provenance, the held-out scoring, and the device kinds' rates. CPU only, seconds."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cutegen.config import KernelConfig
from cutegen.problem import GemmProblem
from cutegen.results import Measurement, ResultsDB
from cutegen.search import cost as costmod
from cutegen.search.learned import Correction, Predictor, rates
from cutegen.search.learned.quality import cross_validate, fit_correction, folds, held_out, leaks, score
from cutegen.search.learned.samples import Sample, complete, sample, samples_for

CONFIGS = [KernelConfig((128, 256, 64), (2, 1, 1)), KernelConfig((128, 256, 64), (1, 2, 1)),
           KernelConfig((128, 128, 64), (1, 1, 1)), KernelConfig((128, 128, 64), (2, 1, 1)),
           KernelConfig((128, 128, 64), (1, 1, 1), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized"),
           KernelConfig((64, 128, 64), (1, 2, 1), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized"),
           KernelConfig((128, 64, 64), (1, 1, 1), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")]
SHAPES = [(m, n, k) for m in (1024, 2048, 4096, 8192) for n, k in ((2048, 4096), (4096, 1024), (8192, 2048))]


def truth(s) -> float:
    """The known correction the fixture hides: ping-pong runs 1.5x the prior, 128x256 tiles 0.8x."""
    c = 0.0
    if s.config.mainloop_schedule == "pingpong":
        c += math.log(1.5)
    if s.config.tile_shape[1] == 256:
        c += math.log(0.8)
    return c


def fixture(shapes=SHAPES, kind="h200"):
    out = []
    for m, n, k in shapes:
        p = GemmProblem(m, n, k)
        for cfg in CONFIGS:
            done = complete(p, cfg)
            assert done is not None, cfg.short_name()
            s = sample(p, *done, kind)
            out.append(Sample(s.problem, s.config, s.stages, s.prior_us, s.breakdown, s.prior_us * math.exp(truth(s)),
                              "bench", f"fixture#{p.name}"))
    return out


@pytest.fixture(scope="module")
def samples():
    return fixture()


def test_fit_recovers_known_correction_on_held_out_m(samples):
    train = [s for s in samples if s.problem.m != 2048]
    test = [s for s in samples if s.problem.m == 2048]
    corr, sigma, dist = Correction().fit(train).predict(test)
    want = np.array([truth(s) for s in test])
    assert np.max(np.abs(corr - want)) < 0.08                      # the correction, within a few percent
    assert np.mean(np.abs(corr - want)) < 0.3 * np.mean(np.abs(want))
    assert np.all(sigma > 0) and np.all(dist < 2.0)


def test_cross_validation_beats_the_prior_on_the_fixture(samples):
    r = cross_validate(samples, "m")
    assert r["folds"] == 4 and r["learned"]["samples"] == len(samples)
    assert r["learned"]["log_error"] < 0.05 < r["prior"]["log_error"]
    assert r["learned"]["regret_geomean"] <= r["prior"]["regret_geomean"]


def test_held_out_evaluation_never_sees_the_fold(samples):
    """Poisoning one family's measured times (x3) leaves that family's held-out predictions exactly as they were;
    a variant that trains on every sample (the leak the held-out figures must never contain) is caught on every
    family, as is a split that hands the fold to its own training."""
    families = sorted({f"m={s.problem.m}" for s in samples})
    assert len(families) == 4
    assert leaks(samples, "m") == []
    train_on_all = lambda ss, only: held_out(ss, "m", only=only, fit=lambda train: fit_correction(ss))  # noqa: E731
    assert sorted(leaks(samples, "m", train_on_all)) == families
    # a leak of one family only (the fold's own samples added back to its training) is caught on that family
    def one_leak(ss, only):
        fit = lambda train: fit_correction(list(train) + [s for s in ss if s.problem.m == 2048])  # noqa: E731
        return held_out(ss, "m", only=only, fit=fit)
    assert leaks(samples, "m", one_leak) == ["m=2048"]
    # the model predicts from the held-out samples without their times, and its training holds none of them
    seen = []
    def recording(train):
        seen.append(train)
        inner = fit_correction(train)
        def predict(test):
            assert all(math.isnan(s.measured_us) for s in test)
            return inner(test)
        return predict
    held_out(samples, "m", fit=recording)
    assert len(seen) == 4
    for (g, train, test), fitted in zip(folds(samples, "m"), seen):
        assert train == fitted and test and not any(f"m={s.problem.m}" == g for s in fitted)


def test_far_from_the_data_it_is_less_sure_and_shrinks_to_the_prior(samples):
    model = Correction().fit(samples)
    near = [s for s in samples if s.problem.m == 4096][:3]
    far_p = GemmProblem(64, 64, 65536, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16")
    far = [sample(far_p, *complete(far_p, KernelConfig((64, 64, 128), (1, 1, 1), mainloop_schedule="pingpong",
                                                       epilogue_schedule="tma_warp_specialized")), "h200")]
    c_near, s_near, d_near = model.predict(near)
    c_far, s_far, d_far = model.predict(far)
    assert d_far[0] > 2 * max(d_near) and s_far[0] > 2 * max(s_near)
    # the raw forest would say ping-pong is 1.5x slower; far outside the data that is mostly withheld
    assert abs(c_far[0]) < 0.5 * math.log(1.5)


def _meas(s, kind="h200", us=None, method="cuda-events/median/warmup10/iters50/l2x4"):
    return Measurement(problem=s.problem, config=s.config, device_name="NVIDIA H200", device_kind=kind,
                       timing_method=method, median_us=us or s.measured_us, validated=True, source=s.source,
                       measured_at="2026-11-23")


def test_predictor_provenance(samples):
    ms = [_meas(s) for s in samples if s.problem.m != 2048]
    pred = Predictor("h200", ms)
    assert pred.learned
    seen = next(s for s in samples if s.problem.m == 4096)
    new = next(s for s in samples if s.problem.m == 2048 and s.config.mainloop_schedule == "pingpong")
    a, b = pred.predict(seen.problem, [(seen.config, seen.stages)])[0], pred.predict(new.problem, [(new.config, new.stages)])[0]
    assert a.source == "measured" and a.us == pytest.approx(seen.measured_us) and a.measurements == 1
    assert b.source == "learned" and abs(math.log(b.us / new.measured_us)) < 0.08 and b.sigma > 0
    # a CollectiveBuilder-style partial configuration is completed as the rules complete it
    partial = pred.predict_measurement_config(new.problem, CONFIGS[5])
    assert partial is not None and partial.source == "learned"
    assert pred.predict_measurement_config(new.problem, KernelConfig((64, 128, 64), (1, 1, 1))) is None  # coop M=64
    # a warm-L2 (same-inputs) time is no measurement of the bench's scale; too little data fits nothing
    few = Predictor("h200", [_meas(seen, method="cuda-events/mean/warmup2/iters5/same-inputs")])
    p = few.predict(seen.problem, [(seen.config, seen.stages)])[0]
    assert p.source == "prior" and p.us == pytest.approx(seen.prior_us)
    assert Predictor("h100-sxm", ms).predict(seen.problem, [(seen.config, seen.stages)])[0].source == "prior"


def test_search_ranks_by_the_learned_correction(samples):
    """A correction that makes the prior's pick slow moves the search's pick, and says so."""
    from cutegen.search import search

    p = GemmProblem(4096, 4096, 4096)
    prior_pick = search(p, top_k=3).ranked[0]
    fake = [Sample(s.problem, s.config, s.stages, s.prior_us, s.breakdown,
                   s.prior_us * (3.0 if s.config.tile_shape == prior_pick.config.tile_shape else 1.0), "bench", s.source)
            for s in fixture([(m, n, k) for m in (2048, 8192) for n, k in ((4096, 4096), (8192, 4096))])]
    # the prior's tile must be in the training data for the forest to know it
    fake += [Sample(p.replace(m=1024), prior_pick.config, prior_pick.breakdown["stages"], c.prior_us, c.breakdown,
                    c.prior_us * 3.0, "bench", "fixture")
             for c in [sample(p.replace(m=1024), prior_pick.config, prior_pick.breakdown["stages"], "h200")]] * 3
    ms = [_meas(s) for s in fake]
    res = search(p, top_k=3, device="h200", predictor=Predictor("h200", ms))
    top = res.ranked[0]
    assert top.prediction is not None and top.prediction.source == "learned"
    assert top.config.tile_shape != prior_pick.config.tile_shape
    # ranked by cost, a swapped kernel as if SWAP_MARGIN dearer (search/engine.py _merge)
    from cutegen.search.engine import SWAP_MARGIN
    ranked_by = [r.cost * (1 + SWAP_MARGIN if getattr(r.config, "swap_ab", False) else 1) for r in res.ranked]
    assert ranked_by == sorted(ranked_by)


def test_batched_samples_equal_one_by_one():
    """The search predicts its candidates through one vectorised prior call (samples_for): the same prior, the
    same breakdown, key for key, as costing each alone, stream-K and another kind's rates included."""
    import dataclasses

    p = GemmProblem(1000, 4096, 1024)
    cands = [complete(p, c) for c in CONFIGS + [KernelConfig((128, 128, 64), (1, 1, 1), tile_scheduler="stream_k")]]
    assert all(cands) and cands[-1][0].tile_scheduler == "stream_k"
    for kind in ("h100-sxm", "h20"):
        one = [dataclasses.replace(sample(p, c, st, kind), measured_us=0.0) for c, st in cands]
        batch = [dataclasses.replace(s, measured_us=0.0) for s in samples_for(p, cands, kind)]
        assert batch == one
    assert samples_for(p, cands, "h20")[0].prior_us > 2 * samples_for(p, cands, "h100-sxm")[0].prior_us


def test_score_regret_and_spearman():
    p1, p2 = GemmProblem(1024, 1024, 1024), GemmProblem(2048, 2048, 2048)
    mk = lambda p, cfg, meas: Sample(p, cfg, 4, 1.0, {}, meas, "bench", "")  # noqa: E731
    s = [mk(p1, CONFIGS[0], 10.0), mk(p1, CONFIGS[1], 12.0), mk(p1, CONFIGS[2], 11.0),
         mk(p2, CONFIGS[0], 20.0), mk(p2, CONFIGS[1], 25.0)]
    r = score(s, [3.0, 1.0, 2.0, 1.0, 2.0])        # p1: picks the 12 us kernel (regret 1.2); p2: right pick
    assert r["regret_geomean"] == pytest.approx(math.sqrt(1.2)) and r["regret_worst"] == pytest.approx(1.2)
    assert r["spearman"] == pytest.approx(-1.0) and r["spearman_problems"] == 1
    assert r["log_error"] == pytest.approx(np.mean(np.abs(np.log([3 / 10, 1 / 12, 2 / 11, 1 / 20, 2 / 25]))))


def test_device_rates():
    assert rates("h100-sxm") is None and rates(None) is None and rates("x") is None
    h200 = rates("h200")          # its own bandwidth since the prior scales every kind's by HBM_EFFICIENCY
    assert h200.sms == 132 and h200.peak_scale == 1.0 and h200.hbm_bytes_per_s == 4.8e12
    pcie, h20 = rates("h100-pcie"), rates("h20")
    assert pcie.sms == 114 and h20.sms == 78 and h20.peak_scale < 0.2
    p, cfg = GemmProblem(8192, 8192, 8192), complete(GemmProblem(8192, 8192, 8192), CONFIGS[0])
    base, _ = costmod.config_cost(p, *cfg)
    slow, bd = costmod.config_cost(p, *cfg, device=pcie)
    assert slow > base * 1.1 and bd["active_ctas"] <= 114
    assert costmod.config_cost(p, *cfg, device=h20)[0] > 4 * base


def test_cli_device_explain_says_measured(tmp_path, capsys):
    from cutegen.cli import main

    db = tmp_path / "r.sqlite"
    assert main(["search", "--m", "2048", "--n", "2048", "--k", "2048", "--top-k", "2", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["ranked"][0]
    p, cfg = GemmProblem(2048, 2048, 2048), KernelConfig.from_dict(top["config"])
    ResultsDB(db, seed=None).add(Measurement(problem=p, config=cfg, device_name="Test GPU",
                                             device_kind="test-gpu-132sm", timing_method="cuda-events/median/l2x4",
                                             median_us=1.0, validated=True, measured_at="2026-11-23"))
    args = ["search", "--m", "2048", "--n", "2048", "--k", "2048", "--top-k", "2", "--device", "test-gpu-132sm",
            "--db", str(db), "--explain", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    preds = out["explain"]["predictions"]
    assert preds[0]["source"] == "measured" and preds[0]["us"] == 1.0
    assert all(x["source"] == "prior" for x in preds[1:])
    assert out["ranked"][0]["prediction"]["source"] == "measured"
    assert main(["search", "--m", "64", "--n", "64", "--k", "64", "--device", "rtx-9000", "--db", str(db)]) == 2
    assert "device" in capsys.readouterr().err
