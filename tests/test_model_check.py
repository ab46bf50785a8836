"""bench/model_check.py and bench/heldout.toml: the held-out check of the learned model (no GPU needed)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from cutegen.suites import load_suite
from cutegen.results import ResultsDB

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("model_check", ROOT / "bench" / "model_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_heldout_shapes_are_in_no_result_but_their_own_run(tmp_path):
    # Held out from everything the model was fitted on: the only records of these shapes are the
    # held-out run's own (bench/results/*-heldout-*.json), imported after it was measured.
    # Later runs (the language-model suite shares some shapes) do not count: held out means held out of
    # what the model was fitted on before the held-out run.
    shapes = [(p.m, p.n, p.k) for _, p in load_suite(ROOT / "bench" / "heldout.toml")]
    ms = ResultsDB(tmp_path / "empty.sqlite").measurements()
    start = min(m.measured_at for m in ms if "heldout" in m.source)
    others = {(m.problem.m, m.problem.n, m.problem.k)
              for m in ms if "heldout" not in m.source and m.measured_at < start}
    assert len(shapes) == 10 and not set(shapes) & others
    suite = {(p.m, p.n, p.k) for _, p in load_suite(ROOT / "bench" / "suite.toml")}
    assert not set(shapes) & suite


def test_table_reads_picks_and_ignores_unverified(tmp_path, capsys):
    cands = [{"rank": 0, "prior_pick": True, "learned_pick": False}, {"rank": 1, "prior_pick": False, "learned_pick": True},
             {"rank": 2, "prior_pick": False, "learned_pick": False}]
    ok = lambda ms: {"status": "ok", "median_ms": ms, "verify": {"ok": True}}  # noqa: E731
    res = {"rank0": ok(0.012), "rank1": ok(0.010), "rank2": {"status": "ok", "median_ms": 0.001, "verify": {"ok": False}},
           "cublas": ok(0.011)}
    f = tmp_path / "r.json"
    f.write_text(json.dumps([{"name": "p", "candidates": cands, "results": res}]))
    assert _module().table(type("A", (), {"file": str(f)})) == 0
    out = capsys.readouterr().out
    assert "prior pick / best measured: geomean 1.200" in out      # the wrong 1 us kernel is not the best
    assert "learned pick / best measured: geomean 1.000" in out
