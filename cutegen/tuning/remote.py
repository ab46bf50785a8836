"""Tuning's GPU half as GPU tasks of an executor (``cutegen tune --executor dask``).

``RemoteGPU`` stands where ``gpu.RunnerTimer`` stands in a ``Tuner``: ``device()``, ``timer(problem,
contenders)`` (the DSL screen) and ``measure(requests)``, which sends each problem as one task needing
the ``GPU`` resource (``Executor.map_gpu``): the libraries go by content, each once (``tasks.library_bytes``
and ``Executor.share`` here, ``tasks.materialize`` into the worker's own cache there, so no shared file
system is needed), the worker
times every contender and validates the fastest verified kernel, the next when it fails, exactly as the
local run does (``measure.time_and_validate``), and the reply comes back to the client, which alone
writes the results database, the cache and the output directories. A worker that dies mid-timing
never replies: Dask runs the task again elsewhere and only the attempt that finished is recorded.

The worker's timer and validator come from ``factory(**options)`` (a module-level function, pickled by
reference: ``gpu.runner_gpu`` for the real ones) and are kept for the worker process's lifetime, so its
runner children start once, not per problem.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import CutegenError
from ..problem import GemmProblem

# -- on the worker ---------------------------------------------------------------------------------
_INSTANCES: dict[tuple, tuple] = {}      # (factory, options) -> (timer, validator), per worker process
_LOCK = threading.Lock()                 # one GPU request at a time per process, whatever its threads


def _instances(factory: Callable, options: dict) -> tuple:
    key = (factory.__module__, factory.__qualname__, json.dumps(options, sort_keys=True))
    if key not in _INSTANCES:
        _INSTANCES[key] = factory(**options)
    return _INSTANCES[key]


def device_task(item: dict) -> dict:
    """The GPU a worker's timer sees (name, sm_count, ...); starts its runner child."""
    with _LOCK:
        timer, _ = _instances(item["factory"], item["options"])
        return dict(timer.device())


def gpu_task(item: dict) -> dict:
    """One problem on a GPU worker: its libraries materialized by content, timed, validated; the reply."""
    from ..config import KernelConfig
    from ..executor.tasks import materialize
    from .measure import time_and_validate
    if item.get("deadline_epoch") and time.time() > item["deadline_epoch"]:
        return {"status": "skipped", "message": "the timing deadline passed before this problem started"}
    here: dict[str, str] = {}               # the client's library path -> this worker's copy
    for path, (sha, data) in item["libraries"].items():
        here[path] = str(materialize(sha, data))
    contenders = [dict(c, library=here[c["library"]]) if c.get("library") else dict(c) for c in item["contenders"]]
    kernels = {n: (Path(d), KernelConfig.from_dict(cfg), here.get(lib, lib))
               for n, (d, cfg, lib) in item["kernels"].items()}
    problem = GemmProblem.from_dict(item["problem"])
    with _LOCK:
        timer, validator = _instances(item["factory"], item["options"])
        value = time_and_validate(timer, validator if item["validate"] else None, problem, contenders, kernels)
        value["device"] = dict(timer.device())
    value["status"] = "done"
    return value


# -- on the client ---------------------------------------------------------------------------------
class RemoteGPU:
    """A ``Tuner``'s timer whose work runs as GPU tasks of ``executor``."""

    def __init__(self, executor, factory: Callable, options: dict | None = None):
        self.executor, self.factory, self.options = executor, factory, dict(options or {})
        self._device: dict | None = None

    def device(self) -> dict:
        if self._device is None:
            [o] = self.executor.map_gpu(device_task, [{"factory": self.factory, "options": self.options}],
                                        names=["device"])
            if not o.ok:
                raise CutegenError(f"the GPU worker did not start its runner: {o.error}")
            self._device = o.value
        return self._device

    def _libraries(self, contender_lists) -> dict:
        """{client path: (sha256, bytes)} of every library named, each shared once (``Executor.share``): a
        library several problems time (the CUTLASS default) travels to the cluster once."""
        from ..executor.tasks import library_bytes
        paths = dict.fromkeys(c["library"] for cs in contender_lists for c in cs if c.get("library"))
        return {p: self.executor.share(library_bytes(p)) for p in paths}

    def _item(self, problem: GemmProblem, contenders: list[dict], kernels: dict, validate: bool,
              deadline_epoch: float | None, shared: dict) -> dict:
        libs = {c["library"]: shared[c["library"]] for c in contenders if c.get("library")}
        return {"factory": self.factory, "options": self.options, "problem": problem.to_dict(),
                "contenders": contenders, "libraries": libs, "validate": validate, "deadline_epoch": deadline_epoch,
                "kernels": {n: (str(d), cfg.to_dict(), lib) for n, (d, cfg, lib) in kernels.items()}}

    def __call__(self, problem: GemmProblem, contenders: list[dict]) -> dict[str, dict]:
        """Time only (the DSL screen): one GPU task; a lost task is a crash of every contender."""
        shared = self._libraries([contenders])
        [o] = self.executor.map_gpu(gpu_task, [self._item(problem, contenders, {}, False, None, shared)],
                                    names=[problem.name], details=[{"problem": problem.to_dict()}])
        if not o.ok:
            return {c["name"]: {"status": "crash", "reason": f"the GPU task failed: {o.error}"} for c in contenders}
        return o.value["results"]

    def measure(self, requests: list[tuple], deadline_epoch: float | None = None) -> list:
        """``requests``: (name, problem, contenders, kernels) per problem; one ``TaskOutcome`` each, in order.
        Its value is ``time_and_validate``'s reply plus the worker's device, or a skip past the deadline."""
        shared = self._libraries([c for _, _, c, _ in requests])
        items = [self._item(p, c, k, True, deadline_epoch, shared) for _, p, c, k in requests]
        return self.executor.map_gpu(gpu_task, items, names=[n for n, *_ in requests],
                                     details=[{"problem": p.to_dict()} for _, p, _, _ in requests])

    def close(self) -> None:
        pass  # the executor's owner closes it; the workers keep their runner children
