"""The default builder, timer and validator of a tuning run: cutegen's own, on the GPU machine.

Each is a small adapter over machinery that already exists, so tuning times exactly as ``cutegen
bench`` does and validates exactly as ``cutegen validate`` does:

- ``Builder``: ``cutegen.build.build`` (content-addressed cache, parallel nvcc, the machine-wide lock;
  the Dask executor when one is given);
- ``RunnerTimer``: one ``bench_problem`` request per problem to a ``runner.Worker`` child, all
  candidates, cuBLAS and the contenders on the same input sets in one process; a candidate that hangs
  or crashes the child is isolated by timing each contender alone;
- ``RunnerValidator``: ``commands.validate.validate_one`` (ragged sizes, batches, padded strides,
  refusal probes) for the kernel about to be written.
"""
from __future__ import annotations

import io
import re
import time
from pathlib import Path
from types import SimpleNamespace

from .. import runner as R
from ..config import KernelConfig
from ..errors import CutegenError
from ..problem import GemmProblem


class _LineSink(io.TextIOBase):
    """A text stream that hands every complete line to ``say`` (build progress -> the tuning display)."""

    def __init__(self, say):
        self.say, self.buf = say, ""

    def write(self, s: str) -> int:
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if line.strip():
                self.say(line)
        return len(s)


class Builder:
    """``builder(dirs) -> {dir: (ok, message)}`` through ``cutegen.build.build``.

    ``deadline`` (a ``time.monotonic()`` value): build in batches of twice the parallel jobs and start
    no batch after it; the rest is reported not built. The caller orders ``dirs`` most important first.
    """

    def __init__(self, jobs: int | None = None, executor=None, timeout: float | None = None, say=print,
                 deadline: float | None = None):
        self.jobs, self.executor, self.timeout, self.say, self.deadline = jobs, executor, timeout, say, deadline

    def _build(self, dirs: list[Path]) -> list:
        from ..build import build
        kwargs = {"executor": self.executor} if self.executor is not None else {}
        try:
            return build([str(d) for d in dirs], jobs=self.jobs, progress=_LineSink(self.say),
                         timeout=self.timeout, **kwargs).results
        except TypeError as e:
            if kwargs and "executor" in str(e):
                raise CutegenError("this cutegen.build has no executor support (--executor needs issue 13)") from None
            raise

    def __call__(self, dirs: list[Path]) -> dict[str, tuple[bool, str]]:
        if self.deadline is None or self.executor is not None:
            return {str(d): (r.ok, r.message) for d, r in zip(dirs, self._build(dirs))}
        out: dict[str, tuple[bool, str]] = {}
        for batch in self._batches(dirs):
            if time.monotonic() > self.deadline:
                left = [d for d in dirs if str(d) not in out]
                for d in left:
                    out[str(d)] = (False, "not built: the build deadline passed")
                self.say(f"build deadline reached: {len(left)} kernel directories not built")
                break
            out.update({str(d): (r.ok, r.message) for d, r in zip(batch, self._build(batch))})
        return out

    def _batches(self, dirs: list[Path]) -> list[list[Path]]:
        """Consecutive batches holding twice the parallel jobs' worth of distinct sources each (directories
        with a source already in an earlier batch ride along: they are cache hits)."""
        import hashlib
        from ..build import default_jobs
        step = 2 * (self.jobs or default_jobs())
        batches: list[list[Path]] = [[]]
        seen: set[str] = set()
        fresh = 0
        for d in dirs:
            cu = Path(d) / "kernel.cu"
            key = hashlib.sha256(cu.read_bytes()).hexdigest() if cu.is_file() else str(d)
            if key not in seen:
                if fresh == step:
                    batches.append([])
                    fresh = 0
                seen.add(key)
                fresh += 1
            batches[-1].append(d)
        return [b for b in batches if b]


class RunnerTimer:
    """Times the contenders of one problem in the runner's worker child (``op_bench_problem``)."""

    def __init__(self, warmup: int = 10, iters: int = 50, l2_multiple: int = 4, timeout: float = 240.0,
                 startup_timeout: float = 180.0):
        self.task = {"warmup": warmup, "iters": iters, "l2_multiple": l2_multiple}
        self.timeout = timeout
        self.worker = R.Worker(startup_timeout=startup_timeout, init={"op": "init"})

    def device(self) -> dict:
        """The GPU the worker sees (name, sm_count, torch, cublas, ...); starts the worker."""
        if self.worker.init_reply is None or not self.worker.alive():
            reply = self.worker.request({"op": "ping"}, 60)
            if not reply.ok:
                raise CutegenError(f"the GPU worker did not start: {reply.message}")
        init = self.worker.init_reply
        if init is None or not init.ok:
            raise CutegenError(f"the GPU worker did not start: {init.message if init else 'no reply'}")
        return dict(init.value)

    def _request(self, problem: GemmProblem, contenders: list[dict]):
        task = {"op": "bench_problem", "problem": problem.to_dict(), "contenders": contenders, **self.task}
        return self.worker.request(task, self.timeout)

    def __call__(self, problem: GemmProblem, contenders: list[dict]) -> dict[str, dict]:
        reply = self._request(problem, contenders)
        if reply.ok:
            return dict(reply.value["results"])
        # One of them took the child down (or hung): time each alone so the others still count.
        out = {}
        full, self.timeout = self.timeout, min(self.timeout, 30.0)   # bounded: a second hang costs 30 s, not 240
        try:
            for c in contenders:
                r = self._request(problem, [c])
                out[c["name"]] = dict(r.value["results"][c["name"]]) if r.ok else \
                    {"status": r.status, "reason": (r.message or r.status).strip().splitlines()[0]}
        finally:
            self.timeout = full
        return out

    def close(self) -> None:
        self.worker.close()


class RunnerValidator:
    """``validator(directory, problem, config, library) -> (ok, reason)`` with cutegen validate's cases."""

    def __init__(self, timeout: float = 45.0, startup_timeout: float = 180.0, say=print):
        self.args = SimpleNamespace(no_manifest_shape=False, no_probes=False, seed=0, timeout=timeout)
        self.worker = R.Worker(startup_timeout=startup_timeout, init={"op": "init"})
        self.say = say

    def __call__(self, directory: Path, problem: GemmProblem, config: KernelConfig, library: str) -> tuple[bool, str]:
        from ..commands.validate import validate_one
        info = R.KernelInfo(Path(library), problem, config, directory=Path(directory))
        rec = validate_one(self.worker, info, [], self.args, lambda s: None)
        cases = [c for c in rec["cases"] if c.get("kind") == "case" and not c.get("refused")]
        passed = sum(bool(c.get("ok")) for c in cases)
        ok = rec["verdict"] == "pass"
        return ok, (f"{passed}/{len(cases)} cases" if ok else rec["reason"])

    def close(self) -> None:
        self.worker.close()


def device_info_line(info: dict) -> str:
    return re.sub(r"\s+", " ", f"{info.get('name')} ({info.get('sm_count')} SMs), torch {info.get('torch')}, "
                               f"cuBLAS {info.get('cublas')}")


def runner_gpu(warmup: int = 10, iters: int = 50, l2_multiple: int = 4, timeout: float = 240.0,
               validate_timeout: float = 45.0, startup_timeout: float = 180.0) -> tuple[RunnerTimer, RunnerValidator]:
    """The timer and validator a cluster's GPU worker builds for ``tuning.remote`` (the same as a local run's)."""
    import multiprocessing
    if multiprocessing.current_process().daemon:
        # The runner's watchdog child cannot start from a daemonic process (a nanny's worker by default).
        raise CutegenError("this Dask worker is daemonic and cannot start the runner's child: start GPU workers "
                           "with DASK_DISTRIBUTED__WORKER__DAEMON=False (or --no-nanny)")
    return (RunnerTimer(warmup=warmup, iters=iters, l2_multiple=l2_multiple, timeout=timeout,
                        startup_timeout=startup_timeout),
            RunnerValidator(timeout=validate_timeout, startup_timeout=startup_timeout, say=lambda s: None))
