"""A real Dask cluster on 127.0.0.1 for the executor tests: one ``dask scheduler`` and N ``dask worker``
processes (each under a nanny, as deployed), started here, bounded in time, always torn down.

Each worker process gets its own environment (resources, CUDA_VISIBLE_DEVICES, CUTEGEN_CACHE), and
the tests' folder on PYTHONPATH so that workers can import the fake tasks of ``executor_fakes``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent
START_TIMEOUT = 90.0


class Cluster:
    def __init__(self, tmp: Path, workers: list[dict], allowed_failures: int = 1, nthreads: int = 2):
        self.tmp = Path(tmp)
        self.spec = workers
        self.nthreads = nthreads
        self.allowed_failures = allowed_failures
        self.procs: list[subprocess.Popen] = []
        self.scheduler_file = self.tmp / "scheduler.json"
        self.logs: list[Path] = []

    # -- lifecycle -------------------------------------------------------------------------------
    def _env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        # A kernel that kills its worker twice is given up (KilledWorker), as cutegen documents.
        env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = str(self.allowed_failures)
        # Workers start the GPU watchdog child (multiprocessing): their processes must not be daemonic.
        env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
        env.update(extra or {})
        return env

    def _spawn(self, args: list[str], log_name: str, env: dict) -> subprocess.Popen:
        log = self.tmp / log_name
        self.logs.append(log)
        f = open(log, "w")
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        f.close()
        self.procs.append(p)
        return p

    def start(self) -> "Cluster":
        self._spawn([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--no-dashboard", "--scheduler-file", str(self.scheduler_file)], "scheduler.log", self._env())
        self._wait(lambda: self.scheduler_file.is_file(), "scheduler file")
        for i, w in enumerate(self.spec):
            res = ",".join(f"{k}={v}" for k, v in w.get("resources", {}).items())
            args = [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(self.scheduler_file),
                    "--host", "127.0.0.1", "--nthreads", str(w.get("nthreads", self.nthreads)), "--name", f"w{i}",
                    "--no-dashboard", "--local-directory", str(self.tmp / f"w{i}-space")]
            if res:
                args += ["--resources", res]
            self._spawn(args, f"worker{i}.log", self._env(w.get("env")))
        self.wait_workers(len(self.spec))
        return self

    def _wait(self, ready, what: str, timeout: float = START_TIMEOUT) -> None:
        end = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > end:
                raise TimeoutError(f"{what} not ready in {timeout:g} s; logs: {self.tail()}")
            time.sleep(0.2)

    def wait_workers(self, n: int, timeout: float = START_TIMEOUT) -> None:
        from distributed import Client
        with Client(scheduler_file=str(self.scheduler_file), timeout=30, set_as_default=False) as c:
            self._wait(lambda: len(c.scheduler_info(n_workers=-1)["workers"]) >= n, f"{n} workers", timeout)

    @property
    def address(self) -> str:
        return json.loads(self.scheduler_file.read_text())["address"]

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)

    def tail(self, n: int = 15) -> str:
        out = []
        for log in self.logs:
            if log.is_file():
                out.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-n:]))
        return "\n".join(out)

    # -- faults ----------------------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """Pids of the worker processes (the nannies' children), not of the nannies."""
        pids = []
        for p in self.procs[1:]:
            try:
                pids += [c.pid for c in psutil.Process(p.pid).children() if "python" in c.name().lower()]
            except psutil.NoSuchProcess:
                pass
        return pids

    @staticmethod
    def kill_tree(pid: int) -> None:
        """SIGKILL a worker and everything it started (nvcc runs in its own session): a machine dying."""
        try:
            proc = psutil.Process(pid)
            kids = proc.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for p in [proc, *kids]:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
