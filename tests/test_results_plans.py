"""Measurements remember the launch plan a stream-K kernel ran under (schema 2), and the cost models cost
them under it (issue 11)."""
from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from cutegen.cli import main
from cutegen.errors import CutegenError, FieldError
from cutegen.launch_plan import LaunchPlan
from cutegen.results import Measurement, ResultsDB
from cutegen.results.db import _row
from cutegen.results.importers import load
from cutegen.results.schema import MIGRATIONS, SCHEMA_VERSION
from cutegen.search import calibration
from cutegen.search import cost as costmod
from cutegen.search.learned.device import rates
from cutegen.search.learned.samples import complete, from_measurements, oriented

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
LLM_H100 = RESULTS / "2026-11-24-nvidia-h100-80gb-hbm3-llm.json"
H200 = RESULTS / "2026-11-22-nvidia-h200.json"
SPLIT2 = {"decomposition": "split_k", "splits": 2, "reduction": "deterministic"}


def _split_k2():
    """The H100 bench record of llama70b_o_m128 (bf16 TN 128x8192x8192): a stream-K kernel run as split-K x2."""
    return next(m for m in load(LLM_H100) if m.source.endswith("#llama70b_o_m128_bf16/cutegen"))


def _v1_database(path: Path, ms) -> None:
    """A results database as cutegen wrote it before plans were kept: migration 1 only, version 1."""
    conn = sqlite3.connect(path, isolation_level=None)
    for stmt in MIGRATIONS[0].split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    cols = ("record_key, problem_id, config_id, kernel_hash, backend, device_name, device_kind, sm_count, "
            "sm_clock_mhz, driver, cuda, cutlass, cutegen, timing_method, times_us, median_us, validated, "
            "max_rel_error, cublas_us, source, measured_at")
    conn.execute("ALTER TABLE problems ADD COLUMN op TEXT NOT NULL DEFAULT 'gemm'")   # _row files problems as schema
    for m in ms:                                                                      # 3 does; gone again below
        conn.execute(f"INSERT INTO measurements ({cols}) VALUES ({', '.join('?' * 21)})", _row(conn, m)[:21])
    conn.execute("ALTER TABLE problems DROP COLUMN op")
    conn.close()


def test_bench_import_keeps_the_plan():
    m = _split_k2()
    assert m.launch_plan == SPLIT2 and m.plan == LaunchPlan("split_k", 2)
    ms = load(LLM_H100)
    # only stream-K kernels run under a plan; the others (and the builder baseline) have none
    assert all((x.launch_plan is not None) == (x.config.tile_scheduler == "stream_k" and x.backend == "cutlass")
               for x in ms)
    assert sum(x.launch_plan is not None for x in ms) == 13


def test_plan_round_trips_through_the_database_and_jsonl(tmp_path, capsys):
    m = _split_k2()
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    db.add(m)
    (back,) = db.measurements()
    assert back == m and back.launch_plan == SPLIT2
    raw = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT launch_plan FROM measurements").fetchone()[0]
    assert raw == '{"decomposition":"split_k","reduction":"deterministic","splits":2}'     # canonical JSON
    db.close()
    out = tmp_path / "all.jsonl"
    assert main(["db", "export", "--db", str(tmp_path / "r.sqlite"), "--no-seed", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["launch_plan"] == SPLIT2
    assert main(["db", "import", str(out), "--db", str(tmp_path / "again.sqlite")]) == 0
    assert ResultsDB(tmp_path / "again.sqlite", seed=None).measurements() == [m]


def test_same_kernel_under_two_plans_is_two_records(tmp_path):
    m = _split_k2()
    sk = replace(m, launch_plan={"decomposition": "stream_k"})        # completed to the canonical three fields
    assert sk.launch_plan == {"decomposition": "stream_k", "splits": 1, "reduction": "deterministic"}
    bare = replace(m, launch_plan=None)
    assert len({m.record_key, sk.record_key, bare.record_key}) == 3
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    assert len(set(db.add_many([m, sk, m]))) == 2
    assert sorted(x.plan.label() for x in db.measurements()) == ["split_k x2", "stream_k"]


def test_plan_less_records_keep_their_keys():
    """Keys of records without a plan are what they were before plans were kept (the version-1 seed's), so
    re-importing an old file into an old cache adds nothing."""
    m = next(x for x in load(H200) if x.source.endswith("#sq1024_bf16_tn/cutegen"))
    assert m.launch_plan is None and m.record_key == "ebe81880e47b8365344ccdebc02abae1"
    tune = next(x for x in load(RESULTS / "2026-11-24-nvidia-h100-80gb-hbm3-tune-records.jsonl")
                if x.source.endswith("#llama8b_down_m1_bf16/search1"))
    # a stream-K tune record whose plan no manifest recorded: left without one, its key unchanged
    assert tune.config.tile_scheduler == "stream_k" and tune.launch_plan is None
    assert tune.record_key == "d59de72c7cada6c6579bac7e847e0c9f"
    assert _split_k2().planless_key == replace(_split_k2(), launch_plan=None).record_key


def test_a_bad_plan_is_named():
    with pytest.raises(FieldError, match="launch_plan.splits"):
        replace(_split_k2(), launch_plan={"decomposition": "split_k", "splits": 0})
    with pytest.raises(FieldError, match="launch_plan.tiles"):
        Measurement.from_dict({**_split_k2().to_dict(), "launch_plan": {"tiles": 3}})


def test_migration_from_version_1_keeps_every_record(tmp_path):
    ms = load(H200) + [replace(_split_k2(), launch_plan=None)]
    path = tmp_path / "old.sqlite"
    _v1_database(path, ms)
    db = ResultsDB(path, seed=None)
    got = db.measurements()                       # opening it for writing migrates it
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3     # 3: problems.op, measurements.peers_us
    assert got == ms and all(x.launch_plan is None for x in got)
    assert {x.record_key for x in got} == {r for (r,) in sqlite3.connect(path).execute(
        "SELECT record_key FROM measurements")}
    db.add(_split_k2())                           # and it takes planned records from then on: this one is
    rows = sqlite3.connect(path).execute("SELECT count(*) FROM measurements").fetchone()[0]   # the old run again,
    assert rows == len(ms) + 1                                                               # now with its plan,
    got = db.measurements()                                                                  # which stands for both
    assert len(got) == len(ms) and got[-1] == _split_k2()


def test_a_read_only_version_1_database_reads_with_no_plans(tmp_path):
    ms = load(H200)
    old = tmp_path / "seed-v1.sqlite"
    _v1_database(old, ms)
    before = old.read_bytes()
    assert ResultsDB(old, seed=None, readonly=True).measurements() == ms
    merged = ResultsDB(tmp_path / "user.sqlite", seed=old)             # as the committed seed is read
    assert merged.measurements() == ms and merged.count() == len(ms)
    assert old.read_bytes() == before
    sqlite3.connect(old).execute("PRAGMA user_version = 7").connection.commit()
    with pytest.raises(CutegenError, match="schema 7, this cutegen reads 1 or 2"):
        ResultsDB(old, seed=None, readonly=True).measurements()


def test_a_run_stored_with_and_without_its_plan_is_read_once(tmp_path):
    """A user's cache that imported a bench file before plans were kept, merged with a seed that knows them."""
    m = _split_k2()
    user = ResultsDB(tmp_path / "user.sqlite", seed=None)
    user.add(replace(m, launch_plan=None))
    user.close()
    seed = ResultsDB(tmp_path / "seed.sqlite", seed=None)
    seed.add(m)
    seed.close()
    assert ResultsDB(tmp_path / "user.sqlite", seed=tmp_path / "seed.sqlite").measurements() == [m]


def test_a_split_k_sample_is_costed_under_its_plan():
    m = _split_k2()
    (s,) = from_measurements([m])
    problem, config = oriented(m.problem, m.config)
    cfg, stages = complete(problem, config)
    dev = rates(m.device_kind)
    under_plan = costmod.config_cost(problem, cfg, stages, plan=LaunchPlan("split_k", 2), device=dev)[0]
    as_stream_k = costmod.config_cost(problem, cfg, stages, device=dev)[0]
    assert s.plan == LaunchPlan("split_k", 2) and s.prior_us == pytest.approx(under_plan)
    assert abs(under_plan - as_stream_k) > 0.5        # the two decompositions price differently here
    # without a plan: today's behaviour, the stream-K decomposition
    (bare,) = from_measurements([replace(m, launch_plan=None)])
    assert bare.plan is None and bare.prior_us == pytest.approx(as_stream_k)


def test_calibration_costs_database_records_under_their_plans(tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    m = _split_k2()
    db.add_many([m, replace(m, launch_plan={"decomposition": "stream_k"}, source=m.source + "/sk", median_us=70.0)])
    recs = calibration.load_db(db)
    assert [r[7].label() for r in recs] == ["split_k x2", "stream_k"]
    s = from_measurements([m])[0]
    assert calibration._cost(recs[0]) == pytest.approx(s.prior_us)
    # the same configuration under two plans: two alternatives of one choice, not one median
    assert calibration.score_predictions(recs, [1.0, 2.0])["regret_geomean"] == pytest.approx(1.0)


def test_calibration_reads_a_database_without_writing_it(tmp_path, monkeypatch, capsys):
    """`calibration --db bench/results/seed.sqlite` scores the committed seed: its bytes (and schema) stay."""
    import cutegen.results.db as dbmod

    old = tmp_path / "v1.sqlite"
    _v1_database(old, load(H200))
    before = old.read_bytes()
    monkeypatch.setattr(dbmod, "REPO_SEED", tmp_path / "no-seed.sqlite")
    assert calibration.main(["--db", str(old)]) == 0
    assert "h200: this model" in capsys.readouterr().out
    assert old.read_bytes() == before and not (tmp_path / "v1.sqlite-wal").exists()
