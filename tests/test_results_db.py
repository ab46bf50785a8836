"""The results database: round trip, idempotence, seed merge, concurrent writers, a killed writer."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from cutegen.config import KernelConfig
from cutegen.errors import CutegenError, FieldError
from cutegen.problem import GemmProblem
from cutegen.results import Measurement, ResultsDB, default_path, device_kind
from cutegen.results.schema import SCHEMA_VERSION

P = GemmProblem(4096, 4096, 4096)
C = KernelConfig((128, 256, 64), (2, 1, 1))


def meas(median=10.0, problem=P, config=C, kind="h200", source="t", **kw) -> Measurement:
    return Measurement(problem=problem, config=config, kernel_hash="abc", device_name="NVIDIA H200",
                       device_kind=kind, sm_count=132, timing_method="cuda-events", times_us=(median, median + 1),
                       median_us=median, validated=True, source=source, measured_at="2026-11-22", **kw)


def test_device_kind_names():
    assert device_kind("NVIDIA H100 80GB HBM3", 132) == "h100-sxm"
    assert device_kind("NVIDIA H100 PCIe", 114) == "h100-pcie"
    assert device_kind("NVIDIA H100", 114) == "h100-pcie"          # the SM count tells the forms apart
    assert device_kind("NVIDIA H200") == "h200"
    assert device_kind("NVIDIA H20", 78) == "h20"
    assert device_kind("NVIDIA GeForce RTX 4090", 128) == "geforce-rtx-4090-128sm"


def test_round_trip_and_idempotent(tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    m = meas(cublas_us=9.5, max_rel_error=1e-3)
    i = db.add(m)
    assert db.add(m) == i                       # the same record twice is stored once
    got = db.measurements()
    assert got == [m]
    assert db.measurements(device_kind="h100-sxm") == []
    assert db.measurements(problem=P.replace(m=2048)) == []
    assert db.measurements("h200", P) == [m]


def test_best_ignores_unvalidated(tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)
    fast_wrong = Measurement(**{**meas(1.0).__dict__, "validated": False})
    db.add_many([meas(12.0), meas(8.0, config=C.replace(stages=4)), fast_wrong])
    assert db.best(P, "h200").median_us == 8.0
    assert db.best(P, "h100-sxm") is None


def test_bad_measurement_names_field():
    with pytest.raises(FieldError, match="median_us"):
        meas(median=0.0)
    with pytest.raises(FieldError, match="device_kind"):
        meas(kind="")


def test_add_many_is_one_transaction(tmp_path):
    db = ResultsDB(tmp_path / "r.sqlite", seed=None)

    class Boom(Exception):
        pass

    def gen():
        yield meas(1.0)
        raise Boom

    with pytest.raises(Boom):
        db.add_many(gen())
    assert db.measurements() == []


def test_seed_merged_read_only_user_first(tmp_path):
    seed_path = tmp_path / "seed.sqlite"
    with ResultsDB(seed_path, seed=None) as s:
        s.add_many([meas(5.0, source="seed"), meas(6.0)])
    os.chmod(seed_path, 0o444)
    db = ResultsDB(tmp_path / "user.sqlite", seed=seed_path)
    db.add(meas(6.0))                            # also in the seed: returned once
    db.add(meas(7.0))
    got = [m.median_us for m in db.measurements()]
    assert got == [6.0, 7.0, 5.0]
    assert db.best(P, "h200").median_us == 5.0   # the seed's record counts
    assert ResultsDB(seed_path, seed=None).count() == 2


def test_unwritable_place_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "r.sqlite").write_bytes(b"this is not a database, it is text" * 40)
    with pytest.raises(CutegenError, match="r.sqlite"):
        ResultsDB(ro / "r.sqlite", seed=None).measurements()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CutegenError, match="results database"):
        ResultsDB(blocker / "sub" / "r.sqlite", seed=None).add(meas())


def test_default_path_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEGEN_RESULTS_DB", str(tmp_path / "x.sqlite"))
    assert default_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("CUTEGEN_RESULTS_DB")
    assert default_path().name == "results.sqlite" and "cutegen" in str(default_path())


def test_schema_version_and_newer_schema_refused(tmp_path):
    path = tmp_path / "r.sqlite"
    ResultsDB(path, seed=None).add(meas())
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(CutegenError, match="newer"):
        ResultsDB(path, seed=None).measurements()


_WRITER = textwrap.dedent("""
    import sys, time
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem
    from cutegen.results import Measurement, ResultsDB
    path, tag, batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    db = ResultsDB(path, seed=None)
    for b in range(batches):
        db.add_many([Measurement(problem=GemmProblem(64 * (i + 1), 128, 256), config=KernelConfig((128, 128, 64)),
                                 device_kind="h200", median_us=1.0 + i, source=f"{tag}-{b}",
                                 measured_at="2026-11-23") for i in range(size)])
        print(b, flush=True)
""")


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_concurrent_writers_every_record_lands(tmp_path):
    path = tmp_path / "r.sqlite"
    writers, batches, size = 6, 15, 20
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"w{w}", str(batches), str(size)],
                              env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for w in range(writers)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM measurements").fetchone()[0] == writers * batches * size
    per_source = dict(conn.execute("SELECT source, count(*) FROM measurements GROUP BY source").fetchall())
    assert len(per_source) == writers * batches and set(per_source.values()) == {size}
    assert len(ResultsDB(path, seed=None).measurements()) == writers * batches * size


def test_killed_mid_transaction_leaves_none_of_it(tmp_path):
    """SIGKILL a writer holding an open transaction with rows inserted: none of them survive."""
    path = tmp_path / "r.sqlite"
    ResultsDB(path, seed=None).add(meas(3.0))
    code = textwrap.dedent("""
        import sys, time
        from cutegen.results import ResultsDB, Measurement
        from cutegen.results.db import _row, _COLUMNS
        from cutegen.config import KernelConfig
        from cutegen.problem import GemmProblem
        db = ResultsDB(sys.argv[1], seed=None)
        conn = db._open()
        conn.execute("BEGIN IMMEDIATE")
        sql = f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        for i in range(500):
            conn.execute(sql, _row(conn, Measurement(problem=GemmProblem(8 * (i + 1), 64, 64),
                         config=KernelConfig((128, 128, 64)), device_kind="h200", median_us=1.0,
                         source="killed", measured_at="2026-11-23")))
        print("inserted", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], env=_env(), stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"inserted"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    db = ResultsDB(path, seed=None)
    db.add(meas(4.0))                            # the lock is gone: a new writer gets in
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [m.source for m in db.measurements()] == ["t", "t"]
    assert conn.execute("SELECT count(*) FROM problems").fetchone()[0] == 1   # its new problems went too


def test_killed_at_random_moments_batches_all_or_none(tmp_path):
    """SIGKILL writers at arbitrary points of a stream of committed batches: each batch is whole or absent."""
    path = tmp_path / "r.sqlite"
    size = 50
    for delay in (0.4, 0.9, 1.5):
        p = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"d{delay}", "1000", str(size)],
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert p.stdout.readline()               # at least one batch committed
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    counts = [c for (c,) in conn.execute("SELECT count(*) FROM measurements GROUP BY source")]
    assert counts and set(counts) == {size}


def test_readonly_open_leaves_the_file_byte_for_byte(tmp_path):
    import hashlib
    import shutil

    from cutegen.results import ResultsDB
    from cutegen.results.db import REPO_SEED
    copy = tmp_path / "seed.sqlite"
    shutil.copy(REPO_SEED, copy)
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    with ResultsDB(copy, seed=None, readonly=True) as db:
        assert db.count() > 0 and db.measurements()
        with pytest.raises(CutegenError, match="read-only"):
            db.add_many(db.measurements()[:1])
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed.sqlite"]      # no -wal / -shm left behind
    with ResultsDB(tmp_path / "missing.sqlite", seed=None, readonly=True) as db:   # nothing measured yet
        assert db.count() == 0
    assert not (tmp_path / "missing.sqlite").exists()
