"""The Dask executor: tasks go to a ``dask.distributed`` scheduler; results come back to this client.

- Resources: a compile task asks for ``MEM_GB`` (the builder's per-compile memory estimate), a GPU
  task for ``GPU: 1``; Dask runs a task only on a worker that declared enough of them
  (``dask worker ... --resources "MEM_GB=28,GPU=1"``), so no worker is oversubscribed and each GPU
  times one kernel at a time. A run refuses to start when no connected worker declares the
  resource at all (it would wait forever).
- Faults: ``retries=`` (Dask's) for tasks that raise; a worker that dies mid-task has its task
  rescheduled by the scheduler, up to its ``distributed.scheduler.allowed-failures`` (set it to 1 so
  that a kernel which kills its worker twice is given up: ``KilledWorker``). Only a finished
  task's value reaches the client, so an interrupted timing is never recorded.
- Keys: a compile task's Dask key is its cache key, so two clients asking for the same kernel at
  once share one compile.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import CutegenError
from .local import Executor, _names
from .outcome import TaskOutcome
from ..progress import Progress
from .tasks import compile_kernel, identity, run_task

GPU_RESOURCE = "GPU"
MEMORY_RESOURCE = "MEM_GB"
DEFAULT_RETRIES = 2


def compile_memory_gb() -> float:
    """The builder's own per-compile memory estimate, in the unit of the MEM_GB resource."""
    from ..build import GB, MEMORY_PER_COMPILE
    return MEMORY_PER_COMPILE / GB


def _scheduler_faults(keys: list[str], dask_scheduler=None) -> dict:
    """Runs on the scheduler: per task, worker deaths while it ran and exception retries left."""
    out = {}
    for k in keys:
        ts = dask_scheduler.tasks.get(k)
        if ts is not None:
            out[k] = {"suspicious": ts.suspicious, "retries_left": ts.retries}
    return out


class DaskExecutor(Executor):
    name = "dask"

    def __init__(self, address: str | None = None, *, scheduler_file: str | None = None, client=None,
                 retries: int = DEFAULT_RETRIES, connect_timeout: float = 30.0, progress=sys.stderr,
                 poll: float = 0.25):
        super().__init__()
        try:
            import distributed
        except ImportError:
            raise CutegenError("--executor dask needs dask.distributed: pip install 'cutegen[cluster]'") from None
        self._distributed = distributed
        self.retries = retries
        self.poll = poll
        self.progress_stream = progress
        self._own_client = client is None
        where = scheduler_file or address
        if client is None:
            try:
                client = distributed.Client(address=address, scheduler_file=scheduler_file,
                                            timeout=connect_timeout, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as e:
                raise CutegenError(f"--scheduler {where}: cannot reach a Dask scheduler "
                                   f"within {connect_timeout:g} s ({type(e).__name__}: {e})") from None
        self.client = client

    # -- cluster facts --------------------------------------------------------------------------
    @property
    def dashboard(self) -> str | None:
        import socket
        from urllib.parse import urlparse
        try:
            if "dashboard" not in self.client.scheduler_info().get("services", {}):
                return None
            link = self.client.dashboard_link
            url = urlparse(link)
            # The scheduler names its dashboard port even when it serves none (--no-dashboard): ask it.
            socket.create_connection((url.hostname, url.port), timeout=0.5).close()
            return link
        except Exception:  # noqa: BLE001 - the address is a nicety
            return None

    def worker_resources(self) -> dict[str, dict[str, float]]:
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) else self.client.scheduler_info()
        return {addr: dict(w.get("resources") or {}) for addr, w in info.get("workers", {}).items()}

    def _require(self, resource: str, amount: float) -> None:
        res = self.worker_resources()
        if not any(r.get(resource, 0) >= amount for r in res.values()):
            have = ", ".join(f"{a} {r or '{}'}" for a, r in sorted(res.items())) or "no workers"
            raise CutegenError(f"no Dask worker declares {resource} >= {amount:g} (have: {have}); start workers "
                               f"with --resources \"{resource}=N\" or these tasks would wait forever")

    def _slots(self, resources: dict | None) -> dict[str, int]:
        """Per worker, how many of these tasks it can run at once: its threads, bounded by its resources."""
        try:
            info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) else self.client.scheduler_info()
        except Exception:  # noqa: BLE001 - progress only
            return {}
        out = {}
        for addr, w in info.get("workers", {}).items():
            n = int(w.get("nthreads") or 1)
            for r, need in (resources or {}).items():
                n = min(n, int((w.get("resources") or {}).get(r, 0) // need))
            out[addr] = n
        return out

    def gpu_slots(self) -> int:
        """The GPU tasks the cluster runs at once: every worker's slots for one GPU each (at least 1)."""
        return max(1, sum(self._slots({GPU_RESOURCE: 1}).values()))

    # -- the one submission loop ----------------------------------------------------------------
    def _run(self, kind: str, calls: list[tuple], names: list[str], keys: list[str], resources: dict | None,
             details: Sequence[dict | None] | None) -> list[TaskOutcome]:
        """Submit ``run_task(*call)`` per item, follow them with a live line, collect in order."""
        futures = [self.client.submit(run_task, *call, key=key, resources=resources, retries=self.retries,
                                      pure=False) for call, key in zip(calls, keys)]
        by_key = {f.key: i for i, f in enumerate(futures)}
        caps = self._slots(resources)
        progress = Progress(self.progress_stream, self.dashboard)
        outcomes: list[TaskOutcome | None] = [None] * len(futures)
        try:
            pending = set(range(len(futures)))
            failed = 0
            while pending:
                for i in [i for i in pending if futures[i].done()]:
                    pending.discard(i)
                    outcomes[i] = self._outcome(kind, names[i], futures[i], details[i] if details else None)
                    failed += not outcomes[i].ok
                    if not outcomes[i].ok:
                        progress.log(f"FAILED {names[i]}: {outcomes[i].error}")
                try:
                    # Dask counts a task as processing once it is assigned to a worker, also while it waits
                    # there for a thread or its resource: at most the worker's slots of them are running.
                    running = sum(min(caps.get(w, len(ks)),
                                      sum(1 for k in ks if k in by_key and by_key[k] in pending))
                                  for w, ks in self.client.processing().items())
                except Exception:  # noqa: BLE001 - progress only
                    running = 0
                done = len(futures) - len(pending)
                progress.update({kind: {"queued": len(pending) - running, "running": running,
                                        "done": done - failed, "failed": failed}})
                if pending:
                    time.sleep(self.poll)
            self._add_fault_counts(futures, outcomes)
        finally:
            progress.close()
            for f in futures:
                f.release()
        self.summary.add(outcomes)
        return outcomes

    def _outcome(self, kind: str, name: str, future, detail: dict | None) -> TaskOutcome:
        if future.status == "finished":
            info = future.result()
            return TaskOutcome(name, kind, "done", info["value"], "", info["worker"], info["host"], info["pid"],
                               info["gpu"], info["started"], info["finished"], detail=detail)
        if future.status == "cancelled":
            return TaskOutcome(name, kind, "failed", error="cancelled", detail=detail)
        exc = future.exception()
        if isinstance(exc, self._distributed.KilledWorker):
            error = f"killed its worker on every attempt (Dask KilledWorker: {exc})"
        else:
            error = f"{type(exc).__name__}: {exc}"
        return TaskOutcome(name, kind, "failed", error=error, detail=detail)

    def _add_fault_counts(self, futures, outcomes: list[TaskOutcome]) -> None:
        try:
            faults = self.client.run_on_scheduler(_scheduler_faults, [f.key for f in futures])
        except Exception:  # noqa: BLE001 - bookkeeping only; the results stand
            return
        for f, o in zip(futures, outcomes):
            got = faults.get(f.key)
            if got is None:
                continue
            o.killed_workers = int(got["suspicious"])
            o.retried = o.killed_workers + max(0, self.retries - int(got["retries_left"] or 0))

    # -- the executor API -----------------------------------------------------------------------
    def share(self, obj):
        # A Future: Dask replaces it inside a task's arguments (nested too) by the object, on the worker.
        # A task, not client.scatter: scattered data dies with the worker holding it, while a task's result
        # is computed again from its arguments (kept by the scheduler) when that worker dies.
        return self.client.submit(identity, obj, pure=False)

    def map(self, fn, items, *, kind="cpu", names=None, details=None):
        names = _names(items, names)
        resources = {GPU_RESOURCE: 1} if kind == "gpu" else None
        if resources:
            self._require(GPU_RESOURCE, 1)
        stamp = f"{os.getpid()}-{time.time_ns()}"
        keys = [f"cutegen-{kind}-{stamp}-{i}" for i in range(len(items))]
        return self._run(kind, [(fn, item) for item in items], names, keys, resources, details)

    def compile(self, builder, jobs: list) -> list:
        """Client: cache hits locally, the rest compiled on workers, artifacts stored here by key."""
        from ..build import BuildResult, _install, _read_stats, cache_key
        results: list[BuildResult | None] = [None] * len(jobs)
        keys = [cache_key(j.source, nvcc_version=builder.nvcc_version, cutlass_version=builder.cutlass_version)
                for j in jobs]
        todo: dict[str, int] = {}        # cache key -> first job that needs it
        for i, (job, key) in enumerate(zip(jobs, keys)):
            if (builder.entry(key) / "kernel.so").is_file():
                results[i] = BuildResult(job.name, "cached", builder.entry(key) / "kernel.so", 0.0, key,
                                         stats=_read_stats(builder.entry(key)))
            else:
                todo.setdefault(key, i)
        if todo:
            need = compile_memory_gb()
            self._require(MEMORY_RESOURCE, need)
            order = list(todo.items())
            calls = [(compile_kernel, jobs[i].name, jobs[i].source, jobs[i].manifest, key, builder.nvcc_version,
                      builder.cutlass_version, builder.timeout) for key, i in order]
            details = [_job_detail(jobs[i]) for _, i in order]
            outcomes = self._run("compile", calls, [jobs[i].name for _, i in order],
                                 [f"cutegen-compile-{key}" for key, _ in order],
                                 {MEMORY_RESOURCE: need}, details)
            artifacts = {key: o for (key, _), o in zip(order, outcomes)}
            for i, (job, key) in enumerate(zip(jobs, keys)):
                if results[i] is not None:
                    continue
                o = artifacts[key]
                if not o.ok:
                    msg = o.error + ("\n  " + json.dumps(o.detail, sort_keys=True) if o.detail else "")
                    results[i] = BuildResult(job.name, "failed", None, 0.0, key, msg)
                    continue
                a = o.value
                if a["status"] == "failed":
                    results[i] = BuildResult(job.name, "failed", None, a["seconds"], key, a["message"], a["log"])
                    continue
                lib = store_artifact(builder, a)
                status = a["status"] if i == todo[key] else "cached"
                results[i] = BuildResult(job.name, status, lib, a["seconds"] if status == "built" else 0.0, key,
                                         "", a["log"] if status == "built" else "", a["stats"])
        for job, r in zip(jobs, results):
            if not r.ok and self.progress_stream is not None:
                print(f"{job.name}: FAILED\n{r.message}", file=self.progress_stream, flush=True)
            if r.ok and job.out_dir is not None:
                dest = job.out_dir / "kernel.so"
                _install(r.library, dest)
                r.library = dest
        return results

    def close(self) -> None:
        if self._own_client:
            self.client.close()


def _takes_n_workers(client) -> bool:
    import inspect
    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _job_detail(job) -> dict | None:
    """What a failure report names: the kernel's problem and configuration (from its manifest)."""
    if not job.manifest:
        return {"kernel": job.name}
    return {"kernel": job.name, "problem": job.manifest.get("problem"), "config": job.manifest.get("config")}


def store_artifact(builder, artifact: dict) -> Path:
    """Write a worker's artifact into the client's cache under its key (atomically, once)."""
    import hashlib
    data = artifact["library"]
    if hashlib.sha256(data).hexdigest() != artifact["sha256"]:
        raise CutegenError(f"artifact {artifact['key']}: bytes do not match their sha256")
    entry = builder.entry(artifact["key"])
    if not (entry / "kernel.so").is_file():
        entry.parent.mkdir(parents=True, exist_ok=True)
        from .._atomic import scratch_directory
        with scratch_directory(".incoming-", root=entry.parent) as tmp:
            lib = Path(tmp, "kernel.so")
            lib.write_bytes(data)
            builder._store(entry, lib, artifact["record"])
    return entry / "kernel.so"

