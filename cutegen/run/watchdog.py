"""The watchdog: a spawned child process per kernel run, killed when it does not answer in time."""
from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any

# ------------------------------------------------------------------------------------------------
# The watchdog: a spawned child process per kernel run, killed when it does not answer in time
# ------------------------------------------------------------------------------------------------

@dataclass
class Reply:
    """What became of one request to a worker child."""
    status: str                  # ok | error | hang | crash
    value: Any = None
    message: str = ""
    seconds: float = 0.0
    fatal: bool = False          # the child's CUDA context is unusable; it was replaced

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _child_main(conn, env: dict) -> None:  # runs in the spawned child
    os.environ.update(env)
    from .. import _runner_worker
    _runner_worker.serve(conn)


class _main_importable_by_spawn:
    """A spawned child re-runs the parent's ``__main__`` file; when that is no file (a script on
    stdin, ``python -c``), hide it for the start so the child does not fail looking for it."""

    def __enter__(self):
        import sys
        self.main = sys.modules.get("__main__")
        self.saved = getattr(self.main, "__file__", None)
        if self.saved is not None and not os.path.isfile(self.saved):
            del self.main.__file__
        else:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.main.__file__ = self.saved


class Worker:
    """A spawned child that runs requests one at a time under a per-request timeout.

    A request that does not answer in time is a hang: the child is killed (SIGKILL) and the next
    request gets a fresh child. A child that dies, or reports that its CUDA context is broken (a
    sticky fault), is replaced the same way. The start-up (importing torch, creating the CUDA
    context) has its own, longer timeout and does not count against a request.
    """

    def __init__(self, startup_timeout: float = 180.0, env: dict | None = None, init: dict | None = None):
        self.startup_timeout = startup_timeout
        self.env = dict(env or {})
        self.init = init            # request sent first to every new child (e.g. {"op": "init"})
        self.init_reply: Reply | None = None
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None
        self.restarts = 0

    # -- lifecycle -----------------------------------------------------------------------------
    def _start(self) -> Reply | None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_child_main, args=(child, self.env), daemon=True)
        with _main_importable_by_spawn():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        if self.init is not None:
            reply = self._roundtrip(self.init, self.startup_timeout)
            self.init_reply = reply
            if not reply.ok:
                self.kill()
                return reply
        return None

    def kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(timeout=20)

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send({"op": "exit"})
                self._proc.join(timeout=10)
            except (OSError, BrokenPipeError):
                pass
        self.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # -- requests ------------------------------------------------------------------------------
    def request(self, task: dict, timeout: float) -> Reply:
        if not self.alive():
            if self._proc is not None:
                self.kill()
            failed = self._start()
            if failed is not None:
                return Reply("crash" if failed.status != "hang" else "hang", failed.value,
                             f"worker start-up failed: {failed.message}", failed.seconds, True)
        reply = self._roundtrip(task, timeout)
        if reply.status in ("hang", "crash") or reply.fatal:
            self.kill()
            self.restarts += 1
        return reply

    def _roundtrip(self, task: dict, timeout: float) -> Reply:
        t0 = time.monotonic()
        try:
            self._conn.send(task)
        except (OSError, BrokenPipeError) as e:
            return Reply("crash", None, f"could not send to worker: {e}", 0.0, True)
        deadline = t0 + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return Reply("hang", None, f"no answer within {timeout:g} s; worker pid {self.pid} killed",
                             time.monotonic() - t0, True)
            try:
                ready = self._conn.poll(min(left, 0.5))
            except (OSError, EOFError):
                ready = True
            if ready:
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    code = self._proc.exitcode if self._proc is not None else None
                    if self._proc is not None:
                        self._proc.join(timeout=5)
                        code = self._proc.exitcode
                    return Reply("crash", None, f"worker died (exit code {code})", time.monotonic() - t0, True)
                secs = time.monotonic() - t0
                if msg.get("ok"):
                    return Reply("ok", msg.get("value"), "", secs, bool(msg.get("fatal")))
                return Reply("error", msg.get("value"), msg.get("error", ""), secs, bool(msg.get("fatal")))
            if self._proc is not None and not self._proc.is_alive() and not self._conn.poll(0):
                return Reply("crash", None, f"worker died (exit code {self._proc.exitcode})",
                             time.monotonic() - t0, True)
