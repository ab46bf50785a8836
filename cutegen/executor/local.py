"""The default executor: this process and the builder's own bounded thread pool, as before."""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Sequence

from .outcome import KINDS, RunSummary, TaskOutcome
from .tasks import run_task


class Executor:
    """What ``build``, ``regen``, ``bench``, ``tune`` and ``pack`` fan out through.

    - ``compile(builder, jobs) -> list[BuildResult]``: one result per job, in order;
    - ``map(fn, items, kind="cpu", names=None) -> list[TaskOutcome]``: CPU work (search, render);
    - ``map_gpu(fn, items, names=None) -> list[TaskOutcome]``: GPU work, one task per GPU at a time.
    ``fn`` must be a module-level function (Dask pickles it by reference). Outcomes come back in
    the order of ``items``; a failure is an outcome with ``status="failed"``, never an exception.
    """
    name = "?"

    def __init__(self) -> None:
        self.summary = RunSummary(self.name)

    def compile(self, builder, jobs: list) -> list:
        raise NotImplementedError

    def map(self, fn: Callable, items: Sequence[Any], *, kind: str = "cpu",
            names: Sequence[str] | None = None, details: Sequence[dict | None] | None = None) -> list[TaskOutcome]:
        raise NotImplementedError

    def share(self, obj: Any) -> Any:
        """A stand-in for ``obj`` to put inside many items (a model every task needs): ``obj`` itself here;
        on Dask one task holding it, whose result a worker fetches once, not one copy per task."""
        return obj

    def map_gpu(self, fn: Callable, items: Sequence[Any], *, names: Sequence[str] | None = None,
                details: Sequence[dict | None] | None = None) -> list[TaskOutcome]:
        return self.map(fn, items, kind="gpu", names=names, details=details)

    def gpu_slots(self) -> int:
        """How many GPU tasks run at once (one per GPU worker): a caller that writes results between tasks
        submits this many per ``map_gpu`` call. Here one: this process's GPU."""
        return 1

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _names(items: Sequence[Any], names: Iterable[str] | None) -> list[str]:
    return list(names) if names is not None else [f"task-{i}" for i in range(len(items))]


class LocalExecutor(Executor):
    """Compiles with ``Builder.build`` (its thread pool, bounded by cores and memory); runs CPU and GPU
    tasks one after the other in this process, as the commands did before executors existed."""
    name = "local"

    def __init__(self, progress=sys.stderr) -> None:
        super().__init__()
        self.progress = progress

    def compile(self, builder, jobs: list) -> list:
        results = builder.build(jobs).results
        self.summary.add([TaskOutcome(r.name, "compile", "done" if r.ok else "failed", r,
                                      "" if r.ok else r.message.splitlines()[0] if r.message else r.status)
                          for r in results])
        return results

    def map(self, fn, items, *, kind="cpu", names=None, details=None):
        from ..progress import Steps
        outcomes = []
        # One step per task: a bar with an estimate on a terminal, a line per task in a log.
        with Steps(KINDS.get(kind, kind), len(items), stream=self.progress) as steps:
            for i, (item, name) in enumerate(zip(items, _names(items, names))):
                detail = details[i] if details else None
                try:
                    info = run_task(fn, item)
                    outcomes.append(TaskOutcome(name, kind, "done", info["value"], "", info["worker"], info["host"],
                                                info["pid"], info["gpu"] if kind == "gpu" else None,
                                                info["started"], info["finished"], detail=detail))
                    steps.step(name)
                except Exception as e:  # noqa: BLE001 - the outcome carries it; the run goes on
                    outcomes.append(TaskOutcome(name, kind, "failed", None, f"{type(e).__name__}: {e}",
                                                detail=detail))
                    steps.step(f"{name}: FAILED")
        self.summary.add(outcomes)
        return outcomes
