"""The executor without nvcc: arguments, the summary, and a real Dask cluster on 127.0.0.1 running fake
tasks (GPU-resource scheduling, retries, a worker killed mid-task, a task that kills its worker twice)."""
from __future__ import annotations

import argparse
import os
import threading
import time

import pytest

import executor_fakes as F
from cutegen import executor as X
from cutegen.errors import CutegenError, FieldError
from cutegen.executor.outcome import RunSummary, TaskOutcome

distributed = pytest.importorskip("distributed", reason="the cluster extra (dask.distributed) is not installed")
from dask_cluster import Cluster  # noqa: E402


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    X.add_arguments(p)
    return p.parse_args(list(argv))


# --- arguments ----------------------------------------------------------------------------------
def test_default_is_local(monkeypatch):
    monkeypatch.setenv(X.ENV_SCHEDULER, "tcp://127.0.0.1:1")  # ignored without --executor dask
    ex = X.from_args(_args())
    assert isinstance(ex, X.LocalExecutor) and ex.name == "local"


def test_dask_needs_a_scheduler(monkeypatch):
    monkeypatch.delenv(X.ENV_SCHEDULER, raising=False)
    with pytest.raises(FieldError, match="--scheduler"):
        X.from_args(_args("--executor", "dask"))
    with pytest.raises(FieldError, match="given with --executor local"):
        X.from_args(_args("--scheduler", "tcp://127.0.0.1:8786"))
    with pytest.raises(FieldError, match="neither an address"):
        X.from_args(_args("--executor", "dask", "--scheduler", "/no/such/scheduler.json"))


def test_unreachable_scheduler_is_a_clear_error():
    t0 = time.monotonic()
    with pytest.raises(CutegenError, match="cannot reach a Dask scheduler"):
        X.dask_executor("tcp://127.0.0.1:9", connect_timeout=2, progress=None)
    assert time.monotonic() - t0 < 30


def test_local_map_keeps_order_and_reports_failures():
    ex = X.LocalExecutor(progress=None)
    outs = ex.map(F.always_raises, [1], names=["bad"], details=[{"config": {"tile": 1}}])
    outs += ex.map(F.timed_sleep, [{"name": "a", "seconds": 0}, {"name": "b", "seconds": 0}], kind="gpu")
    assert [o.status for o in outs] == ["failed", "done", "done"]
    assert outs[0].error.startswith("ValueError: bad input")
    assert [o.value["name"] for o in outs[1:]] == ["a", "b"] and outs[1].worker == "local"
    text = ex.summary.text()
    assert "FAILED bad (CPU task): ValueError" in text and '"tile": 1' in text and "GPU time: 2 done, 0 failed" in text


def test_summary_says_where_retried_and_failed():
    s = RunSummary("dask", [
        TaskOutcome("k1", "compile", "done", worker="tcp://a:1", retried=1, killed_workers=1),
        TaskOutcome("k2", "compile", "done", worker="tcp://b:1"),
        TaskOutcome("t1", "gpu", "done", worker="tcp://g:1", gpu="0"),
        TaskOutcome("k3", "compile", "failed", error="killed its worker on every attempt",
                    retried=2, killed_workers=2, detail={"config": {"tile_shape": [64, 64, 64]}}),
    ])
    text = s.text()
    assert "CPU compile: 2 done, 1 failed, 2 retried" in text
    assert "GPU time: 1 done, 0 failed, 0 retried" in text
    assert "ran on tcp://g:1 (GPU 0): 1" in text and "ran on tcp://a:1: 1" in text
    assert "retried k1 (CPU compile): 1 time(s), 1 worker death(s); then done on tcp://a:1" in text
    assert "FAILED k3 (CPU compile): killed its worker" in text and '"tile_shape": [64, 64, 64]' in text


def test_progress_line_counts_per_kind(tmp_path):
    from cutegen.executor.progress import Progress, counts_line
    line = counts_line({"compile": {"queued": 3, "running": 2, "done": 1, "failed": 0},
                        "gpu": {"queued": 0, "running": 1, "done": 4, "failed": 1}}, "http://h:8787/status")
    assert line == ("CPU compile: 3 queued, 2 running, 1 done, 0 failed | GPU time: 0 queued, 1 running, 4 done, "
                    "1 failed | dashboard http://h:8787/status")
    with open(tmp_path / "log", "w") as f:  # not a terminal: printed on change, throttled, last line at close
        p = Progress(f, None, every=3600)
        p.update({"gpu": {"queued": 2}})
        p.update({"gpu": {"queued": 1, "running": 1}})   # within the throttle: not printed ...
        p.close()                                         # ... but the last state is
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines == ["GPU time: 2 queued, 0 running, 0 done, 0 failed",
                     "GPU time: 1 queued, 1 running, 0 done, 0 failed"]


# --- a real cluster -------------------------------------------------------------------------------
@pytest.fixture
def ex(cluster):
    cluster.wait_workers(2)  # a test that killed a worker leaves the nanny restarting it
    e = X.dask_executor(cluster.address, progress=None)
    yield e
    e.close()


def _overlaps(intervals):
    intervals = sorted(intervals)
    return [(a, b) for a, b in zip(intervals, intervals[1:]) if b[0] < a[1]]


def test_gpu_tasks_never_share_a_gpu(ex, tmp_path):
    items = [{"name": f"t{i}", "seconds": 0.4} for i in range(8)]
    outs = ex.map_gpu(F.timed_sleep, items, names=[i["name"] for i in items])
    assert all(o.ok for o in outs), [o.error for o in outs]
    assert [o.value["name"] for o in outs] == [i["name"] for i in items]  # in the order given
    per_gpu: dict[str, list] = {}
    for o in outs:
        assert o.gpu == o.value["gpu"] and o.worker.startswith("tcp://127.0.0.1:")
        per_gpu.setdefault(o.gpu, []).append((o.value["start"], o.value["end"]))
    # Two threads per worker, but one GPU each: never two timings at once on one GPU ...
    assert all(not _overlaps(iv) for iv in per_gpu.values()), per_gpu
    # ... and both GPUs were used.
    assert sorted(per_gpu) == ["0", "1"]


def test_compile_tasks_are_bounded_by_memory(ex):
    # MEM_GB=4 per worker and 3.5 per compile: one compile per worker at a time despite two threads.
    from cutegen.executor.cluster import MEMORY_RESOURCE, compile_memory_gb
    from cutegen.executor.tasks import run_task
    need = compile_memory_gb()
    assert need == 3.5
    items = [{"name": f"c{i}", "seconds": 0.4} for i in range(6)]
    outs = ex._run("compile", [(F.timed_sleep, i) for i in items], [i["name"] for i in items],
                   [f"fake-compile-{time.time_ns()}-{k}" for k in range(6)], {MEMORY_RESOURCE: need}, None)
    assert run_task  # the same wrapper the real compile task goes through
    per_worker: dict[str, list] = {}
    for o in outs:
        assert o.ok
        per_worker.setdefault(o.worker, []).append((o.value["start"], o.value["end"]))
    assert all(not _overlaps(iv) for iv in per_worker.values()), per_worker


def test_running_counts_at_most_a_workers_slots(ex):
    # Dask calls a task "processing" once it is assigned, also while it waits on the worker for its GPU:
    # the live line counts at most threads (bounded by the resource) per worker as running.
    slots = ex._slots({"GPU": 1})
    assert len(slots) == 2 and set(slots.values()) == {1}
    assert set(ex._slots(None).values()) == {2} and set(ex._slots({"MEM_GB": 3.5}).values()) == {1}


def test_missing_resource_is_refused_not_waited_for(ex):
    with pytest.raises(CutegenError, match="no Dask worker declares MEM_GB >= 64"):
        ex._require("MEM_GB", 64)


def test_a_task_that_raises_is_retried_and_counted(ex, tmp_path):
    outs = ex.map(F.fails_once, [{"marker": str(tmp_path / "m")}], names=["flaky"])
    assert outs[0].ok and outs[0].value == "ok"
    assert outs[0].retried == 1 and outs[0].killed_workers == 0
    bad = ex.map(F.always_raises, [7], names=["bad"], details=[{"config": "c"}])[0]
    assert not bad.ok and "ValueError: bad input 7" in bad.error and bad.retried == ex.retries
    assert "retried flaky (CPU task): 1 time(s), raised; then done" in ex.summary.text()


def test_worker_killed_mid_task_loses_nothing(ex, cluster, tmp_path):
    log = tmp_path / "log"
    item = {"name": "long", "seconds": 3.0, "log": str(log)}
    box = {}
    t = threading.Thread(target=lambda: box.update(out=ex.map_gpu(F.timed_sleep, [item], names=["long"])[0]))
    t.start()
    deadline = time.monotonic() + 60
    while not (log.is_file() and "start" in log.read_text()):
        assert time.monotonic() < deadline, cluster.tail()
        time.sleep(0.05)
    killed = int(log.read_text().split()[2])
    assert killed in cluster.worker_pids()
    Cluster.kill_tree(killed)  # SIGKILL mid-"timing"
    t.join(timeout=120)
    out = box["out"]
    assert out.ok, out.error
    assert out.value["pid"] != killed and out.pid != killed
    assert out.killed_workers == 1 and out.retried >= 1
    lines = log.read_text().split("\n")
    # The interrupted attempt started and never ended; the recorded one is the attempt that finished.
    assert f"start long {killed}" in lines and f"end long {killed}" not in lines
    assert f"end long {out.value['pid']}" in lines
    assert "1 worker death(s); then done on" in ex.summary.text()


def test_a_task_that_kills_its_worker_twice_is_reported(ex, cluster, tmp_path):
    log = tmp_path / "deaths"
    out = ex.map(F.kills_its_worker, [{"log": str(log)}], names=["faulty kernel"],
                 details=[{"problem": "bf16 tn", "config": {"tile_shape": [64, 64, 64]}}])[0]
    assert not out.ok and "KilledWorker" in out.error
    assert log.read_text().count("start") == 2  # allowed-failures=1: two deaths, then given up
    text = ex.summary.text()
    assert "FAILED faulty kernel (CPU task): killed its worker" in text and '"tile_shape": [64, 64, 64]' in text
    cluster.wait_workers(2)  # the nannies bring the workers back


# --- commands through the cluster -----------------------------------------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_regen_check_through_dask_finds_no_drift(cluster, monkeypatch, capsys):
    """The searches of `regen --check` run on the workers; the client compares: no byte may change."""
    from cutegen.cli import main
    monkeypatch.chdir(ROOT)
    argv = ["regen", "--check", "--only", "sq1024_bf16_tn", "--only", "sq2048_bf16_tn"]
    assert main(argv + ["--executor", "dask", "--scheduler", cluster.address]) == 0
    err = capsys.readouterr().err
    assert "executor dask: 4 task(s)" in err and "CPU task: 4 done, 0 failed" in err
    # A drifted file is found through the cluster too.
    out = ROOT / "generated"
    import shutil
    tmp_out = __import__("tempfile").mkdtemp(prefix="regen-dask-")
    try:
        from cutegen.commands.regen import baseline_dir, kernel_dir, select_suite
        problem = select_suite("bench/suite.toml", ["sq1024_bf16_tn"])[0][1]
        for d in (kernel_dir, baseline_dir):
            shutil.copytree(d(out, problem), d(__import__("pathlib").Path(tmp_out), problem))
        cu = kernel_dir(__import__("pathlib").Path(tmp_out), problem) / "kernel.cu"
        cu.write_text(cu.read_text() + "// drift\n")
        assert main(["regen", "--check", "--only", "sq1024_bf16_tn", "--out", tmp_out,
                     "--executor", "dask", "--scheduler", cluster.address]) == 1
        assert f"{problem.name}/kernel.cu" in capsys.readouterr().err
    finally:
        shutil.rmtree(tmp_out, ignore_errors=True)


def test_bench_through_dask_matches_local_in_kind(cluster, tmp_path, monkeypatch):
    """Without a GPU, both runs end the same way per problem and contender; the dask one on a GPU worker."""
    import json
    from cutegen.cli import main
    monkeypatch.chdir(ROOT)
    common = ["bench", "--only", "sq1024_bf16_tn", "--no-plot", "--kernels", str(tmp_path / "none"),
              "--baselines", str(tmp_path / "none"), "--startup-timeout", "60", "--timeout", "30"]
    main(common + ["--out", str(tmp_path / "local")])
    main(common + ["--out", str(tmp_path / "dask"), "--executor", "dask", "--scheduler", cluster.address])
    docs = [json.loads(next((tmp_path / d).glob("*.json")).read_text()) for d in ("local", "dask")]
    kinds = [[(e["name"], {c: (r["status"], r.get("reason", "")[:60]) for c, r in e["results"].items()})
              for e in d["problems"]] for d in docs]
    assert kinds[0] == kinds[1] and kinds[0][0][0] == "sq1024_bf16_tn"
    ran = docs[1]["problems"][0]["ran_on"]  # where and when the GPU task ran; the local run has no such record
    assert ran["gpu"] in ("0", "1") and ran["worker"].startswith("tcp://") and ran["finished"] >= ran["started"] > 0
    assert "ran_on" not in docs[0]["problems"][0]
