"""``cutegen pack`` and ``cutegen tune`` through a real Dask cluster on 127.0.0.1 (the session's ``cluster``
fixture, tests/conftest.py), without a GPU or nvcc: the pack's searches run on the workers and its files
are byte-identical to a local run; tuning's GPU half (a stand-in timer and validator, tests/executor_fakes.py)
runs as GPU tasks, the client alone records, and a timing cut short by a killed worker is not recorded."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import executor_fakes as F
from cutegen import executor as X
from cutegen.cli import main
from cutegen.errors import CutegenError
from cutegen.tuning import Plan, Tuner, make_plan
from cutegen.tuning.remote import RemoteGPU
from test_tune import PROBLEM, FakeBuilder, new_db

pytest.importorskip("distributed", reason="the cluster extra (dask.distributed) is not installed")
from dask_cluster import Cluster  # noqa: E402

SHAPES = """
[[shape]]
name = "proj"
dtype = "bf16"
layout = "tn"
m = [1, 128]
n = 4096
k = 4096

[[shape]]
name = "half"
dtype = "f16"
layout = "nn"
m = [64, 512]
n = 1024
k = 2048
weight = 2.0
"""


@pytest.fixture
def ex(cluster):
    cluster.wait_workers(2)  # a test that killed a worker leaves the nanny restarting it
    e = X.dask_executor(cluster.address, progress=None)
    yield e
    e.close()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- pack ---------------------------------------------------------------------------------------------
def test_pack_through_dask_is_byte_identical_to_local(cluster, tmp_path, capsys):
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(SHAPES)
    db = str(tmp_path / "results.sqlite")       # the seed's H200 data: the learned model ships to the workers
    common = ["pack", str(shapes), "--max-kernels", "3", "--target", "h200", "--db", db]
    assert main(common + ["-o", str(tmp_path / "local")]) == 0
    local_err = capsys.readouterr().err
    assert main(common + ["-o", str(tmp_path / "dask"), "--executor", "dask", "--scheduler", cluster.address]) == 0
    err = capsys.readouterr().err
    local, remote = _tree(tmp_path / "local"), _tree(tmp_path / "dask")
    assert sorted(local) == sorted(remote) and len([p for p in local if p.endswith("kernel.cu")]) >= 4
    assert [p for p in local if local[p] != remote[p]] == []
    # every search ran on a worker: per target, one per (class, N, K) and M range the pack searches (issue 22:
    # not one per sampled shape) and one per class's fallback
    from cutegen.packs import check_size, shapes as pack_shapes, targets
    packs = [json.loads(local["h200/pack.json"])]
    assert {r["source"] for r in packs[0]["coverage"]["rows"]} & {"measured", "learned"}   # the database counted
    points = pack_shapes.expand(pack_shapes.load(shapes), targets.target("h200").sms)
    searches = check_size(str(shapes), points) + len(packs[0]["classes"])
    assert f"executor dask: {searches} task(s)" in err and f"CPU task: {searches} done, 0 failed" in err
    assert "ran on tcp://127.0.0.1:" in err and "executor" not in local_err


def test_pack_search_failure_on_a_worker_is_a_clear_error(ex):
    from cutegen.packs import select
    assert select.run_searches(str, [1, 2], ["a", "b"], ex) == ["1", "2"]
    with pytest.raises(CutegenError, match=r"1 of 2 searches failed on the dask executor; first: bad: ValueError: "
                                           r"bad input 1"):
        select.run_searches(F.raises_on_one, [1, 2], ["bad", "fine"], ex)


# --- tune ---------------------------------------------------------------------------------------------
TIMES = {"search1": 120.0, "search2": 90.0, "search3": 100.0, "nvmmh": 80.0}
OPTIONS = {"times": TIMES, "bad": ["nvmmh"], "fail": ["search2"]}


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    make_plan([(PROBLEM.name, PROBLEM)], d, top_k=3, device_kind="h100-sxm", single=True)
    return d


def _tune(plan_dir, out, db, timer, validator=None):
    return Tuner(Plan.load(plan_dir), plan_dir, out, db=db, single=True, builder=FakeBuilder(fail={"cutlass_default"}),
                 timer=timer, validator=validator)


def _kind(records) -> list[tuple]:
    return sorted((m.kernel_hash, m.backend, m.device_kind, m.median_us, m.times_us, m.validated, m.cublas_us)
                  for m in records)


def test_tune_through_dask_matches_local(ex, cluster, plan_dir, tmp_path):
    local_db, remote_db = new_db(tmp_path / "l"), new_db(tmp_path / "r")
    [lo] = _tune(plan_dir, tmp_path / "local", local_db, *F.tune_gpu(**OPTIONS)).run()
    tuner = _tune(plan_dir, tmp_path / "dask", remote_db, RemoteGPU(ex, F.tune_gpu, OPTIONS))
    [ro] = tuner.run()
    # the same winner, statuses and ratios; the same records in kind; the same kernel directory, byte for byte
    assert lo.chosen["name"] == ro.chosen["name"] == "search3"
    assert {k: v for k, v in ro.to_dict().items() if k not in ("ran_on", "directory")} == \
        {k: v for k, v in lo.to_dict().items() if k != "directory"}
    assert _kind(remote_db.measurements()) == _kind(local_db.measurements()) and len(local_db.measurements()) == 3
    assert remote_db.transactions == local_db.transactions == 1
    assert _tree(tmp_path / "dask") == _tree(tmp_path / "local")
    # it ran on a GPU worker, from libraries shipped by content into that worker's own cache
    assert ro.ran_on["worker"].startswith("tcp://127.0.0.1:") and ro.ran_on["gpu"] in ("0", "1")
    assert ro.ran_on["finished"] >= ro.ran_on["started"] > 0 and lo.ran_on is None
    from cutegen.executor.tasks import library_bytes
    for name in ("search1", "search2", "search3", "nvmmh"):   # built here; cutlass_default failed to build
        sha, _ = library_bytes(plan_dir / PROBLEM.name / name / "kernel.so")
        assert any((c / "artifacts" / sha[:2] / sha / "kernel.so").is_file() for c in cluster.worker_caches), name
    assert tuner.seconds["build"] >= 0 and tuner.seconds["time"] > 0
    text = ex.summary.text()
    assert "GPU time: 2 done, 0 failed" in text and "(GPU " in text   # the device query, then the problem


def test_tune_timing_cut_short_by_a_killed_worker_is_not_recorded(ex, cluster, plan_dir, tmp_path):
    log = tmp_path / "timings"
    db = new_db(tmp_path)
    timer = RemoteGPU(ex, F.tune_gpu, dict(OPTIONS, seconds=3.0, log=str(log)))
    timer.device()                                 # the device query first, so the kill hits the timing
    box = {}
    t = threading.Thread(target=lambda: box.update(out=_tune(plan_dir, tmp_path / "k", db, timer).run()))
    t.start()
    deadline = time.monotonic() + 60
    while not (log.is_file() and "start" in log.read_text()):
        assert time.monotonic() < deadline, cluster.tail()
        time.sleep(0.05)
    killed = int(log.read_text().split()[2])
    assert killed in cluster.worker_pids()
    Cluster.kill_tree(killed)                      # SIGKILL mid-timing
    t.join(timeout=120)
    [o] = box["out"]
    lines = log.read_text().splitlines()
    # the interrupted timing started and never ended; the one recorded is the attempt that finished
    assert f"start {PROBLEM.name} {killed}" in lines and f"end {PROBLEM.name} {killed}" not in lines
    assert o.chosen["name"] == "search3" and o.ran_on["pid"] != killed and o.ran_on["retried"] >= 1
    assert f"end {PROBLEM.name} {o.ran_on['pid']}" in lines
    # one attempt's records, written once, by this client
    from cutegen.results import ResultsDB
    assert len(ResultsDB(tmp_path / "results.sqlite", seed=None).measurements()) == 3 and db.transactions == 1
    assert "1 worker death(s); then done on" in ex.summary.text()


def test_tune_command_through_dask_without_a_gpu_fails_clearly(cluster, plan_dir, tmp_path, capsys):
    """The command's wiring: with --executor dask the GPU half is asked of a GPU worker (here: none has a
    real GPU, so the runner cannot start there) and nothing is built or recorded."""
    db = tmp_path / "results.sqlite"
    rc = main(["tune", "--from-plan", str(plan_dir), "-o", str(tmp_path / "k"), "--db", str(db), "--quiet",
               "--executor", "dask", "--scheduler", cluster.address])
    err = capsys.readouterr().err
    assert rc == 2 and "the GPU worker did not start" in err
    assert not (tmp_path / "k").exists()


def test_tune_deadline_and_timing_only_requests_through_dask(ex, plan_dir, tmp_path):
    # a problem whose GPU task starts past the deadline is skipped there: nothing timed, nothing recorded
    db = new_db(tmp_path)
    tuner = Tuner(Plan.load(plan_dir), plan_dir, tmp_path / "k", db=db, single=True, builder=FakeBuilder(),
                  timer=RemoteGPU(ex, F.tune_gpu, OPTIONS), deadline=time.monotonic() - 1)
    [o] = tuner.run()
    assert o.source == "skipped" and "deadline" in o.notes[0] and db.transactions == 0
    # timing only (the DSL screen's request): the results, the library shipped by content
    lib = tmp_path / "search1.so"
    lib.write_bytes(b"fake library of search1")
    res = RemoteGPU(ex, F.tune_gpu, OPTIONS)(PROBLEM, [{"name": "search1", "library": str(lib)}, {"name": "cublas"}])
    assert res["search1"]["median_ms"] == pytest.approx(0.12) and res["cublas"]["status"] == "ok"
    assert res["search1"]["library_seen"] != str(lib)   # the worker's own copy


def test_a_shared_object_travels_once_and_is_resolved_inside_items(ex):
    big = {"model": b"m" * 100_000}
    handle = ex.share(big)
    assert type(handle).__name__ == "Future"            # not the bytes: what the items carry is small
    outs = ex.map(F.second_len, [("a", handle), ("b", handle)], names=["a", "b"])
    assert [o.value for o in outs] == [1, 1] and all(o.ok for o in outs)
    assert X.LocalExecutor(progress=None).share(big) is big


def test_a_shared_object_outlives_the_worker_that_held_it(ex, cluster):
    import os
    handle = ex.share({"model": b"m" * 1000})
    assert ex.map(F.second_len, [("a", handle)], names=["a"])[0].value == 1
    [holder] = ex.client.who_has(handle)[handle.key]
    pid = ex.client.run(os.getpid, workers=[holder])[holder]
    Cluster.kill_tree(pid)                           # the only copy of the shared object dies with it
    out = ex.map(F.second_len, [("b", handle)], names=["b"])[0]
    assert out.ok and out.value == 1 and out.pid != pid
