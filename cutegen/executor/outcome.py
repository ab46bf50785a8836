"""What became of one task, and the run's closing summary (what ran where, retried, failed)."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

KINDS = {"compile": "CPU compile", "gpu": "GPU time", "cpu": "CPU task"}


@dataclass
class TaskOutcome:
    """One task as the client saw it end.

    ``status`` is "done" (the function returned; its value is in ``value``) or "failed" (it raised
    on every attempt, was cancelled, or killed its workers: ``error`` says which). ``retried``
    counts the extra attempts: Dask's exception retries plus reschedules after a worker died.
    ``started``/``finished`` are the worker's wall clock (epoch seconds) of the attempt that counted.
    """
    name: str
    kind: str                       # compile | gpu | cpu
    status: str                     # done | failed
    value: Any = None
    error: str = ""
    worker: str = "local"           # Dask worker address, or "local"
    host: str = ""
    pid: int = 0
    gpu: str | None = None          # CUDA_VISIBLE_DEVICES of the worker, for GPU tasks
    started: float = 0.0
    finished: float = 0.0
    retried: int = 0
    killed_workers: int = 0         # times a worker died holding this task (running it or assigned it)
    detail: dict | None = None      # the configuration/problem to report a failure with

    @property
    def ok(self) -> bool:
        return self.status == "done"

    def record(self) -> dict:
        """JSON-ready facts (no value): for logs and the tests' overlap checks."""
        return {k: getattr(self, k) for k in ("name", "kind", "status", "error", "worker", "host", "pid", "gpu",
                                              "started", "finished", "retried", "killed_workers")}


@dataclass
class RunSummary:
    """Every outcome of a run, and the lines that close it."""
    executor: str = "local"
    outcomes: list[TaskOutcome] = field(default_factory=list)

    def add(self, outcomes: list[TaskOutcome]) -> None:
        self.outcomes.extend(outcomes)

    def lines(self) -> list[str]:
        if not self.outcomes:
            return [f"executor {self.executor}: no tasks"]
        out = [f"executor {self.executor}: {len(self.outcomes)} task(s)"]
        for kind in sorted({o.kind for o in self.outcomes}):
            mine = [o for o in self.outcomes if o.kind == kind]
            st = Counter(o.status for o in mine)
            out.append(f"  {KINDS.get(kind, kind)}: {st['done']} done, {st['failed']} failed, "
                       f"{sum(o.retried > 0 for o in mine)} retried")
        where = Counter((o.worker, o.gpu) for o in self.outcomes if o.ok)
        for (worker, gpu), n in sorted(where.items(), key=lambda kv: (-kv[1], str(kv[0]))):
            out.append(f"  ran on {worker}{f' (GPU {gpu})' if gpu is not None else ''}: {n}")
        for o in self.outcomes:
            if o.retried:
                why = f"{o.killed_workers} worker death(s)" if o.killed_workers else "raised"
                out.append(f"  retried {o.name} ({KINDS.get(o.kind, o.kind)}): {o.retried} time(s), {why}; "
                           f"{'then done on ' + o.worker if o.ok else 'then failed'}")
        for o in self.outcomes:
            if not o.ok:
                out.append(f"  FAILED {o.name} ({KINDS.get(o.kind, o.kind)}): {o.error}")
                if o.detail:
                    out.append(f"    {json.dumps(o.detail, sort_keys=True)}")
        return out

    def text(self) -> str:
        return "\n".join(self.lines())
