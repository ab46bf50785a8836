"""The default ranking (issue 24 part 3, cutegen.search.ranking): which device kind, learned or prior, stated in
the manifest and --explain, reproduced by regen from each manifest, and the fitted model cached. CPU only.

Most tests rank with a small synthetic database (test_learned_model.fixture: 84 measurements of a known
correction on the h200) so that no test fits the correction on the whole seed."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cutegen.cli import main
from cutegen.errors import FieldError
from cutegen.results import ResultsDB
from cutegen.results import device as devmod
from cutegen.search import ranking
from cutegen.search.learned import cache
from test_learned_model import _meas, fixture

ROOT = Path(__file__).resolve().parents[1]
SUITE = '[[problem]]\nname = "p"\nm = 1024\nn = 4096\nk = 1024\ndtype = "bf16"\nlayout = "tn"\n'


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(devmod, "local_device_kind", lambda: None)


@pytest.fixture(scope="module")
def samples():
    return fixture()


def _db(path, samples, kind="h200"):
    db = ResultsDB(path, seed=None)
    db.add_many([_meas(s, kind) for s in samples])
    return db


def test_device_kind_order(monkeypatch):
    """--device, then the GPU present, then $CUTEGEN_DEVICE, then the target's default kind."""
    monkeypatch.setattr(devmod, "local_device_kind", lambda: "h200")
    monkeypatch.setenv("CUTEGEN_DEVICE", "h20")
    assert ranking.resolve_kind("h100-pcie") == ("h100-pcie", "--device")
    assert ranking.resolve_kind(None) == ("h200", "the GPU present")
    monkeypatch.setattr(devmod, "local_device_kind", lambda: None)
    assert ranking.resolve_kind(None) == ("h20", "$CUTEGEN_DEVICE")
    monkeypatch.delenv("CUTEGEN_DEVICE")
    assert ranking.resolve_kind(None) == ("h100-sxm", "the sm90a target's default")
    with pytest.raises(FieldError, match="target"):
        ranking.resolve_kind(None, target="sm100a")


def test_gpu_detection_without_torch(tmp_path, monkeypatch):
    """nvidia-smi's answer per $CUDA_VISIBLE_DEVICES (index or UUID); none visible, none; a wedged nvidia-smi is
    killed after the timeout; with no nvidia-smi installed the driver API answers."""
    detect = devmod.local_device_kind
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "0, GPU-aaaa-1, NVIDIA H100 80GB HBM3"\necho "1, GPU-bbbb-2, NVIDIA H200"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        for visible, want in ((None, "h100-sxm"), ("1", "h200"), ("GPU-bbbb-2,0", "h200"), ("", None), ("7", None)):
            if visible is None:
                monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
            else:
                monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
            detect.cache_clear()
            assert detect() == want, visible
        smi.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
        monkeypatch.setattr(devmod, "DETECT_TIMEOUT_S", 0.5)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        detect.cache_clear()
        t0 = time.monotonic()
        assert detect() is None and time.monotonic() - t0 < 10
        smi.unlink()
        monkeypatch.setattr(devmod, "_driver_device_kind", lambda ordinal: f"driver-{ordinal}")
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        detect.cache_clear()
        assert detect() == "driver-1"
    finally:
        detect.cache_clear()


def test_choose_learned_measured_or_prior(tmp_path, samples, no_gpu, monkeypatch):
    monkeypatch.delenv("CUTEGEN_WAVE_TILES", raising=False)
    db = _db(tmp_path / "r.sqlite", samples)
    r = ranking.choose(device="h200", db=db)
    assert r.method == "learned" and r.label == "learned h200" and r.predictor.learned
    # a new search has wave tiles on (cutegen.search.ranking.wave_tiles_for_new_searches), and says so
    assert r.cost_fields() == {"ranking": "learned h200", "device_kind": "h200", "wave_tiles": True}
    assert r.search_kwargs() == {"device": "h200", "predictor": r.predictor, "wave_tiles": True}
    assert "ranking learned h200 (device kind h200 from --device; 84 measured samples" in r.describe()
    p = ranking.choose(device="h200", db=db, prior=True)
    assert p.label == "prior" and p.search_kwargs() == {"device": "h200", "predictor": None, "wave_tiles": True}
    assert p.cost_fields() == {"ranking": "prior", "device_kind": "h200", "wave_tiles": True}
    # the database holds only another kind's measurements: the prior, saying why
    q = ranking.choose(device="h100-sxm", db=db)
    assert q.method == "prior" and "holds no measurement of h100-sxm" in q.describe()
    # four of the kind: too few to fit; the measured configurations answer for themselves
    few = _db(tmp_path / "few.sqlite", samples[:4])
    m = ranking.choose(device="h200", db=few)
    assert m.method == "measured" and m.label == "measured h200" and m.predictor.exact and not m.predictor.learned
    with pytest.raises(FieldError, match="device"):
        ranking.choose(device="rtx-9000", db=db)


def test_manifest_rankings_read_back(samples, tmp_path, monkeypatch):
    # every committed manifest predates stated rankings: the prior as calibrated, and nothing written for it
    committed = json.loads(next((ROOT / "generated" / "sm90a").glob("*/manifest.json")).read_text())
    legacy = ranking.from_cost_record(committed["cost"])
    assert legacy.method == "prior" and legacy.device_kind is None and legacy.cost_fields() == {}
    assert ranking.from_cost_record({"ranking": "prior", "device_kind": "h20"}).search_kwargs() == \
        {"device": "h20", "predictor": None, "wave_tiles": False}
    for bad in ({"ranking": "learned h100-sxm", "device_kind": "h200"}, {"ranking": "best", "device_kind": "h200"},
                {"ranking": "prior"}):
        with pytest.raises(FieldError, match="cost.ranking"):
            ranking.from_cost_record(bad)
    # a learned manifest whose database no longer supports a fit is an error, not a silent prior
    empty = ResultsDB(tmp_path / "none.sqlite", seed=None)
    with pytest.raises(FieldError, match="holds no measurement of h200"):
        ranking.from_cost_record({"ranking": "learned h200", "device_kind": "h200"}, db=empty)


def test_predictor_fitted_once_per_database_content(tmp_path, samples, monkeypatch):
    monkeypatch.setenv("CUTEGEN_CACHE", str(tmp_path / "cache"))
    cache.clear_memory()
    db = _db(tmp_path / "r.sqlite", samples)
    start = dict(cache.stats)
    a = cache.predictor("h200", db)
    assert cache.predictor("h200", db) is a
    assert cache.stats["fits"] == start["fits"] + 1 and cache.stats["memory_hits"] == start["memory_hits"] + 1
    cache.clear_memory()                                   # as a new process: from disk, no fit
    b = cache.predictor("h200", db)
    assert cache.stats["fits"] == start["fits"] + 1 and cache.stats["disk_loads"] == start["disk_loads"] + 1
    assert b.correction.forest is None                     # loaded without scikit-learn's objects
    s = samples[40]
    assert b.predict(s.problem, [(s.config, s.stages)]) == a.predict(s.problem, [(s.config, s.stages)])
    # one more measurement: another key, another fit; a corrupt file is fitted over
    db.add(_meas(replace(s, measured_us=s.measured_us * 2)))
    cache.predictor("h200", db)
    assert cache.stats["fits"] == start["fits"] + 2
    for f in cache.cache_dir().glob("*.pkl"):
        f.write_bytes(b"not a pickle")
    cache.clear_memory()
    assert cache.predictor("h200", db).learned and cache.stats["fits"] == start["fits"] + 3
    cache.clear_memory()


def test_search_and_generate_state_the_ranking(tmp_path, samples, monkeypatch, capsys, no_gpu):
    monkeypatch.delenv("CUTEGEN_WAVE_TILES", raising=False)
    db = _db(tmp_path / "r.sqlite", samples)
    monkeypatch.setattr(ranking, "open_db", lambda path=None: db)
    monkeypatch.setenv("CUTEGEN_DEVICE", "h200")
    problem = ["--m", "1024", "--n", "4096", "--k", "1024"]
    assert main(["search", *problem, "--top-k", "2", "--json", "--explain"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranking"] == {"ranking": "learned h200", "device_kind": "h200", "kind_from": "$CUTEGEN_DEVICE",
                              "samples_of_kind": 84, "samples": 84, "wave_tiles": True}
    assert out["explain"]["ranking"] == out["ranking"]
    assert out["ranked"][0]["prediction"]["source"] in ("measured", "learned")
    assert main(["search", *problem, "--top-k", "2", "--prior"]) == 0
    text = capsys.readouterr().out
    assert "ranking prior (device kind h200 from $CUTEGEN_DEVICE; --prior)" in text and "[learned]" not in text
    for extra, stated in (([], "learned h200"), (["--prior"], "prior"), (["--prior", "--device", "h20"], "prior")):
        d = tmp_path / f"k{len(extra)}"
        assert main(["generate", *problem, "--no-build", "-o", str(d), *extra]) == 0
        cost = json.loads((d / "manifest.json").read_text())["cost"]
        assert cost["ranking"] == stated and cost["device_kind"] == ("h20" if "h20" in extra else "h200")
        assert ("prediction" in cost) == (stated != "prior")
    said = capsys.readouterr().out
    assert "why      ranking learned h200 (device kind h200 from $CUTEGEN_DEVICE" in said


def test_regen_reproduces_each_manifests_ranking(tmp_path, samples, monkeypatch, capsys, no_gpu):
    """A learned tree regenerates to the same bytes whatever the machine (another kind in the environment, another
    user database): regen ranks as the manifest states, with the seed alone; re-ranking is deliberate."""
    db = _db(tmp_path / "seed.sqlite", samples)
    monkeypatch.setattr(ranking, "seed_db", lambda: db)
    suite, out = tmp_path / "s.toml", tmp_path / "tree"
    suite.write_text(SUITE)
    base = ["regen", "--suite", str(suite), "--out", str(out)]
    assert main(base + ["--ranking", "learned", "--device", "h200"]) == 0
    manifest = next(out.glob("sm90a/*/manifest.json"))
    cost = json.loads(manifest.read_text())["cost"]
    assert cost["ranking"] == "learned h200" and cost["device_kind"] == "h200"
    monkeypatch.setenv("CUTEGEN_DEVICE", "h100-sxm")
    monkeypatch.setattr(ranking, "open_db", lambda path=None: pytest.fail("regen must not read a user database"))
    capsys.readouterr()
    assert main(base + ["--check"]) == 0
    assert "; learned h200]" in capsys.readouterr().out
    assert main(base + ["--check", "--ranking", "prior", "--device", "h200"]) == 1
    assert str(manifest) in capsys.readouterr().err
    # a problem with no manifest yet is ranked as generate would (here: $CUTEGEN_DEVICE's kind, h100-sxm, which
    # the database has no measurement of: the prior, stated)
    fresh = tmp_path / "fresh"
    assert main(["regen", "--suite", str(suite), "--out", str(fresh)]) == 0
    cost = json.loads(next(fresh.glob("sm90a/*/manifest.json")).read_text())["cost"]
    assert cost["ranking"] == "prior" and cost["device_kind"] == "h100-sxm"


def test_pack_ranks_by_the_target_kinds_measurements(tmp_path, samples, monkeypatch, capsys, no_gpu):
    db = _db(tmp_path / "r.sqlite", samples)
    monkeypatch.setattr(ranking, "open_db", lambda path=None: db)
    monkeypatch.setenv("CUTEGEN_DEVICE", "h200")              # the default target: the resolved kind
    shapes = tmp_path / "s.toml"
    shapes.write_text('[[shape]]\nname = "p"\ndtype = "bf16"\nlayout = "tn"\nm = 1024\nn = 4096\nk = 1024\n')
    out = tmp_path / "o"
    assert main(["pack", str(shapes), "-o", str(out), "--max-kernels", "1"]) == 0
    assert "ranking learned h200 (device kind h200 from --target" in capsys.readouterr().err
    rows = json.loads((out / "h200" / "pack.json").read_text())["coverage"]["rows"]
    assert rows and {r["source"] for r in rows} <= {"measured", "learned"}
    assert main(["pack", str(shapes), "-o", str(out), "--max-kernels", "1", "--prior"]) == 0
    rows = json.loads((out / "h200" / "pack.json").read_text())["coverage"]["rows"]
    assert {r["source"] for r in rows} == {"predicted"}
    assert main(["pack", str(shapes), "-o", str(out), "--prior", "--db", str(tmp_path / "r.sqlite")]) == 2
    assert "--prior" in capsys.readouterr().err
