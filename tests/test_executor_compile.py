"""Real nvcc builds through a real Dask cluster on 127.0.0.1 (two workers, one shared worker cache).

Three of the cheapest kernels this repository renders (64x64x64 warp-specialized bf16 TN, no cluster,
3/4/5 stages: 49-59 s each with nvcc 13.0 on the 2-core development machine) are built once locally
and once through Dask, with one worker SIGKILLed (with its nvcc) in the middle of a compile. Every
compile here takes the machine-wide nvcc lock, so the two workers never compile at the same time.

nvcc does not produce the same bytes twice (it names internal symbols after its temporary files),
so "identical to a local build" means: the same cache keys, the same library size, exported
symbols and compile statistics; and byte for byte, the client's cache entry (library and build
record) is the worker's.
"""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import cutegen.render as render_mod
from cutegen import GemmProblem, KernelConfig
from cutegen import build as build_mod
from cutegen import executor as X

pytestmark = pytest.mark.compile
distributed = pytest.importorskip("distributed", reason="the cluster extra (dask.distributed) is not installed")
if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)
from dask_cluster import Cluster  # noqa: E402

STAGES = (3, 4, 5)


def _kernel(stages: int):
    p = GemmProblem.from_dict({"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16", "layout": "tn"})
    cfg = KernelConfig(tile_shape=(64, 64, 64), cluster_shape=(1, 1, 1), stages=stages,
                       mainloop_schedule="warp_specialized", epilogue_schedule="tma_warp_specialized")
    return render_mod.render(p, cfg)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels")
    dirs = []
    for s in STAGES:
        d = root / f"ws64-s{s}"
        _kernel(s).write(d)
        dirs.append(d)
    return dirs


def _copy(dirs, root: Path):
    out = []
    for d in dirs:
        dest = root / d.name
        dest.mkdir(parents=True)
        for f in ("kernel.cu", "manifest.json"):
            shutil.copy(d / f, dest / f)
        out.append(dest)
    return out


@pytest.fixture(scope="module")
def local(kernels, tmp_path_factory):
    """The local build, through $CUTEGEN_CACHE (CI: a fresh one per run), so a re-run here is cheap."""
    dirs = _copy(kernels, tmp_path_factory.mktemp("local"))
    summary = build_mod.build(dirs, jobs=1, progress=None)
    assert summary.ok, [r.message for r in summary.results]
    return summary


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dask-compile")
    shared = tmp / "worker-cache"  # both workers share it, as workers on one host or a shared FS would
    c = Cluster(tmp, [{"resources": {"MEM_GB": 4}, "env": {"CUTEGEN_CACHE": str(shared)}, "nthreads": 1}
                      for _ in range(2)])
    try:
        c.start()
        c.worker_cache = shared
        yield c
    finally:
        c.close()


def _nvcc_under(pids: list[int]) -> int | None:
    """The worker (of ``pids``) that has a compiler running under it, if any."""
    import psutil
    for pid in pids:
        try:
            kids = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        if any(k.name() in ("nvcc", "cicc", "ptxas", "cudafe++", "gcc", "cc1plus") for k in kids):
            return pid
    return None


@pytest.fixture(scope="module")
def remote(kernels, cluster, tmp_path_factory):
    """The same three kernels through Dask into a fresh client cache; one worker dies mid-compile."""
    dirs = _copy(kernels, tmp_path_factory.mktemp("remote"))
    client_cache = tmp_path_factory.mktemp("client-cache")
    ex = X.dask_executor(cluster.address, progress=None)
    box = {}
    t = threading.Thread(target=lambda: box.update(summary=build_mod.build(dirs, cache=client_cache, progress=None,
                                                                           executor=ex)))
    t.start()
    killed, deadline = None, time.monotonic() + 900  # the machine-wide nvcc lock may be busy for a while
    while killed is None and t.is_alive() and time.monotonic() < deadline:
        killed = _nvcc_under(cluster.worker_pids())
        time.sleep(0.5)
    assert killed is not None, "no compile seen on a worker"
    time.sleep(5)  # well inside the compile (about a minute)
    Cluster.kill_tree(killed)
    t.join(timeout=1500)
    assert not t.is_alive(), "the Dask build did not finish"
    ex.close()
    return {"summary": box["summary"], "cache": client_cache, "outcomes": list(ex.summary.outcomes),
            "text": ex.summary.text(), "killed": killed}


def _exports(lib) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def test_dask_build_survives_a_killed_worker_and_matches_local(local, remote, cluster):
    summary = remote["summary"]
    assert summary.ok, [r.message for r in summary.results]
    assert [r.status for r in summary.results] == ["built"] * 3
    # The killed compile was rescheduled, and the summary says so. Dask counts a death against every task
    # the dead worker held (the one compiling and any already assigned to it, waiting), hence ">= 1".
    assert sum(o.killed_workers > 0 for o in remote["outcomes"]) >= 1, remote["text"]
    assert "1 worker death(s); then done on" in remote["text"]
    for lr, rr in zip(local.results, summary.results):
        assert rr.key == lr.key
        entry = Path(remote["cache"]) / rr.key[:2] / rr.key
        worker_entry = cluster.worker_cache / rr.key[:2] / rr.key
        # Content-addressed transport: the client's cache entry is the worker's, byte for byte.
        for f in ("kernel.so", "build.json"):
            assert (entry / f).read_bytes() == (worker_entry / f).read_bytes()
        assert (Path(rr.library).read_bytes() == (entry / "kernel.so").read_bytes())  # installed in the kernel dir
        # And it is the same kernel as the local build (nvcc's own per-run symbol names aside).
        assert Path(rr.library).stat().st_size == Path(lr.library).stat().st_size
        assert rr.stats == lr.stats and rr.stats["ptx_wgmma_mma_async"] > 0
        if shutil.which("nm"):
            assert _exports(rr.library) == _exports(lr.library)
    print(f"\nlocal compile seconds: {[round(r.seconds, 1) for r in local.results]}; "
          f"dask: {[round(r.seconds, 1) for r in summary.results]}\n{remote['text']}")


def test_a_second_client_sees_the_cache_hits(remote, kernels, cluster, tmp_path):
    # Same client cache: every kernel is a hit here, no task is sent.
    again = X.dask_executor(cluster.address, progress=None)
    try:
        dirs = _copy(kernels, tmp_path / "again")
        s = build_mod.build(dirs, cache=remote["cache"], progress=None, executor=again)
        assert [r.status for r in s.results] == ["cached"] * 3 and again.summary.outcomes == []
        # An empty client cache: the workers' cache answers, nothing is compiled, same bytes come back.
        fresh = tmp_path / "fresh-cache"
        t0 = time.monotonic()
        s2 = build_mod.build(_copy(kernels, tmp_path / "fresh"), cache=fresh, progress=None, executor=again)
        assert [r.status for r in s2.results] == ["cached"] * 3, [r.message for r in s2.results]
        assert time.monotonic() - t0 < 40  # no nvcc ran (one compile is about a minute)
        for r in s2.results:
            assert (fresh / r.key[:2] / r.key / "kernel.so").read_bytes() == \
                (Path(remote["cache"]) / r.key[:2] / r.key / "kernel.so").read_bytes()
    finally:
        again.close()
