"""Test-suite policy: GPU tests skip without a Hopper GPU; nothing else may skip in CI.

- ``@pytest.mark.gpu`` tests are skipped here, at setup, when torch (the ``gpu`` extra) or a
  Hopper (sm_90) CUDA device is missing, with the reason. GPU test modules must not skip
  themselves at import (no module-level ``importorskip``): a skip raised while collecting a
  module carries no marker, so it counts as a CPU skip below.
- ``--no-cpu-skips`` (``.ci/run`` passes it) makes the run fail when any test without the
  ``gpu`` marker is skipped, or a module is skipped at collection. Every skip and its reason is
  printed at the end of the run, allowed or not, so that what did not run is always visible.
"""
from __future__ import annotations

import functools
import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--no-cpu-skips", action="store_true",
                     help="fail the run if a test not marked gpu is skipped (CI)")


@functools.lru_cache(maxsize=1)
def gpu_missing() -> str | None:
    """Why the gpu tests cannot run here (None when they can)."""
    try:
        import torch
    except ImportError:
        return "needs torch, the gpu extra (pip install -e '.[gpu]')"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU; none is visible to torch"
    major, minor = torch.cuda.get_device_capability(0)
    if major != 9:
        return f"needs a Hopper GPU (sm_90); device 0 is sm_{major}{minor}"
    return None


@pytest.fixture(autouse=True, scope="session")
def _own_results_database(tmp_path_factory):
    """Searches rank by the results database by default (cutegen.search.ranking): tests read the committed seed
    and an empty user database of their own, never the developer's (~/.cache/cutegen/results.sqlite), and rank
    for the target's default kind unless they say otherwise (no $CUTEGEN_DEVICE from the shell)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CUTEGEN_RESULTS_DB", str(tmp_path_factory.mktemp("results") / "results.sqlite"))
    mp.delenv("CUTEGEN_DEVICE", raising=False)
    yield
    mp.undo()


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None:
        why = gpu_missing()
        if why:
            pytest.skip(why)


class SkipLedger:
    def __init__(self):
        self.allowed: list[tuple[str, str]] = []     # (nodeid, reason) of gpu-marked tests
        self.forbidden: list[tuple[str, str]] = []   # everything else

    @staticmethod
    def reason(report) -> str:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            return str(longrepr[2]).removeprefix("Skipped: ")
        return str(longrepr)

    def add(self, report, gpu: bool) -> None:
        (self.allowed if gpu else self.forbidden).append((report.nodeid, self.reason(report)))


LEDGER = SkipLedger()
_CONFIG: list = []   # the session's config (a collect report carries none)


def pytest_configure(config):
    LEDGER.__init__()
    _CONFIG[:] = [config]
    _worker_nvcc_lock(os.environ)


def _worker_nvcc_lock(env) -> None:
    """Under pytest-xdist each worker takes its own nvcc lock (cutegen.build's, unless the caller set one), so the
    two workers of `-n 2` compile side by side: with one shared lock the second worker idled while the first
    compiled, and the compile tests ran one at a time on a 2-core machine that takes two compiles at once.
    The CMake pack tests keep the shared default lock (one compile at a time among them)."""
    from cutegen.build import DEFAULT_LOCK
    worker = env.get("PYTEST_XDIST_WORKER")
    if worker and "CUTEGEN_NVCC_LOCK" not in env:
        env["CUTEGEN_NVCC_LOCK"] = f"{DEFAULT_LOCK}.{worker}"


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        LEDGER.add(report, "gpu" in report.keywords)


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report):
    if report.skipped:  # a whole module skipped while importing: it has no marker to look at
        LEDGER.add(report, False)
        config = _CONFIG[0] if _CONFIG else None
        if config is not None and hasattr(config, "workerinput") and config.getoption("--no-cpu-skips"):
            # Under pytest-xdist (-n) a worker sends the controller only failed collect reports, so a module
            # skipped at import would never reach the controller's ledger: make it a collection error here.
            report.outcome = "failed"
            report.longrepr = f"module skipped at collection (--no-cpu-skips): {SkipLedger.reason(report)}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    ledger = LEDGER
    strict = config.getoption("--no-cpu-skips")
    tr = terminalreporter
    if ledger.allowed or ledger.forbidden:
        tr.section("skipped tests and why")
        # gpu skips, one line per file and reason (the GPU suite has one test per kernel)
        groups: dict[tuple[str, str], int] = {}
        for nodeid, why in ledger.allowed:
            key = (nodeid.split("::")[0], why)
            groups[key] = groups.get(key, 0) + 1
        for (path, why), n in groups.items():
            tr.line(f"allowed (gpu)  {path}: {n} test(s): {why}")
        for nodeid, why in ledger.forbidden:
            tr.line(f"{'FORBIDDEN' if strict else 'cpu skip '}      {nodeid}: {why}")
    tr.line(f"skips: {len(ledger.allowed)} gpu-marked (allowed), {len(ledger.forbidden)} other"
            + (" -- a test that can run on a CPU must not skip (--no-cpu-skips)" if strict and ledger.forbidden
               else ""))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if config.getoption("--no-cpu-skips") and LEDGER.forbidden and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A real Dask cluster on 127.0.0.1 (tests/dask_cluster.py), shared by the executor tests: two workers
    under nannies, two threads each, each with one "GPU" of its own (CUDA_VISIBLE_DEVICES=0, 1), memory
    for one 3.5 GB compile (MEM_GB=4) and a cache of its own (``cluster.worker_caches``)."""
    pytest.importorskip("distributed", reason="the cluster extra (dask.distributed) is not installed")
    from dask_cluster import Cluster
    tmp = tmp_path_factory.mktemp("dask")
    caches = [tmp / f"cache-w{i}" for i in range(2)]
    c = Cluster(tmp, [{"resources": {"GPU": 1, "MEM_GB": 4},
                       "env": {"CUDA_VISIBLE_DEVICES": str(i), "CUTEGEN_CACHE": str(caches[i])}} for i in range(2)])
    c.worker_caches = caches
    try:
        yield c.start()
    finally:
        c.close()
