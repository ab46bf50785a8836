"""What long commands show while they run: one module for every progress display (``rich``).

- :class:`Steps`: a known number of steps (kernels to build, problems to render, bench or validate). On a
  terminal, a bar with the count, the elapsed time and an estimate of the time left; anywhere else (a CI
  log, a pipe, a file) one plain line per finished step, ``[n/N] text``, so a log keeps every step.
- :class:`Display`: ``cutegen tune``'s stages (compile, time) and its best-so-far lines.
- :class:`Progress`: the executor's live line (queued / running / done / failed per kind of task).

The plain-line mode needs nothing but the standard library: the GPU machine runs carried code that may
lack ``rich``, and every display falls back to lines there.
"""
from __future__ import annotations

import re
import sys
import threading
import time
from typing import IO


def _console(stream: IO[str], **kw):
    """A rich Console on ``stream``, or None when rich is not installed."""
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream, highlight=False, **kw)


def _is_terminal(stream: IO[str], console) -> bool:
    if console is not None:
        return console.is_terminal
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}" if s >= 60 else f"{s} s"


class Steps:
    """Progress through ``total`` steps: a bar with an estimate on a terminal, a line per step elsewhere.

    ``step(text)`` marks one step done (``text`` says which and how it went); ``log(text)`` prints a line
    that is not a step (a warning, a failure's compiler output). Safe to call from several threads.
    ``total`` may be given late (:meth:`set_total`), once the work is known. ``quiet`` prints nothing.
    ``stream`` defaults to the current ``sys.stderr``; ``stream=None`` is quiet as well, so a caller's
    ``progress=None`` keeps meaning "silent".
    """

    def __init__(self, description: str, total: int | None = None, *, stream: "IO[str] | None | str" = "stderr",
                 quiet: bool = False) -> None:
        if stream == "stderr":   # looked up now, not when this module was imported (tests swap sys.stderr)
            stream = sys.stderr
        self.description = description
        self.total = total
        self.done = 0
        self.quiet = quiet or stream is None
        self.stream = stream
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._bar = self._task = None
        self._console = None if self.quiet else _console(stream)
        self.terminal = not self.quiet and _is_terminal(stream, self._console)
        if self.terminal and self._console is not None:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                                     console=self._console, transient=False)
            self._task = self._bar.add_task(description, total=total)
            self._bar.start()

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> "Steps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    # -- events ----------------------------------------------------------------------------------
    def set_total(self, total: int) -> None:
        with self._lock:
            self.total = total
            if self._bar is not None:
                self._bar.update(self._task, total=total)

    def step(self, text: str = "") -> None:
        with self._lock:
            self.done += 1
            if self.quiet:
                return
            if self._bar is not None:
                self._bar.update(self._task, advance=1)
                if text:
                    self._bar.console.print(text, markup=False)
                return
            print(self.line(text), file=self.stream, flush=True)

    def line(self, text: str) -> str:
        """The plain line of the latest step: ``[n/N] text``."""
        total = "?" if self.total is None else self.total
        return f"[{self.done}/{total}] {text}".rstrip()

    def log(self, text: str) -> None:
        with self._lock:
            if self.quiet:
                return
            if self._bar is not None:
                self._bar.console.print(text, markup=False)
            else:
                print(text, file=self.stream, flush=True)

    def estimate(self) -> float | None:
        """Seconds left at the mean pace so far; None before the first step or without a total."""
        if not self.done or self.total is None:
            return None
        elapsed = time.monotonic() - self._started
        return elapsed / self.done * max(0, self.total - self.done)

    def summary(self) -> str:
        return f"{self.description}: {self.done} steps in {_seconds(time.monotonic() - self._started)}"


# -- cutegen tune ---------------------------------------------------------------------------------
_BUILD_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+?): (built|cached|FAILED)")


class Display:
    """What a tuning run shows while it runs: what compiles, what is timed, the best so far.

    Without ``rich`` the same events print as plain lines; either way every event is one line a log
    file keeps.
    """

    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self._progress = None
        self._tasks: dict[str, int] = {}
        self._console = _console(self.stream)
        if self._console is None:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
            TimeElapsedColumn
        self._progress = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self._console, transient=False, disable=quiet)

    def __enter__(self):
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()

    def log(self, text: str) -> None:
        if self.quiet:
            return
        if self._console is not None:
            self._console.print(text, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def stage(self, key: str, description: str, total: int) -> None:
        if self._progress is not None:
            self._tasks[key] = self._progress.add_task(description, total=total)
        self.log(f"{description}: {total}")

    def advance(self, key: str, description: str | None = None) -> None:
        if self._progress is not None and key in self._tasks:
            kw = {"description": description} if description else {}
            self._progress.update(self._tasks[key], advance=1, **kw)

    def build_line(self, line: str) -> None:
        """A line of cutegen.build's progress: compiling ..., [n/N] name: built|cached|FAILED."""
        if _BUILD_LINE.match(line):
            self.advance("build")
        self.log(f"build  {line}")

    def timing(self, name: str, n: int) -> None:
        self.log(f"time   {name}: {n} contenders and cuBLAS")

    def best_so_far(self, name: str, best: str, best_us: float, cublas_us: float | None) -> None:
        vs = f", {cublas_us / best_us:.3f}x cuBLAS" if cublas_us else ""
        self.advance("time", f"timing (best so far: {name} {best} {best_us:.1f} us{vs})")
        self.log(f"best   {name}: {best} {best_us:.1f} us{vs}")


# -- the executor's live line ---------------------------------------------------------------------
def counts_line(counts: dict[str, dict[str, int]], dashboard: str | None = None) -> str:
    """``compile: 3 queued, 2 running, 1 done, 0 failed | ... | dashboard URL``."""
    from .executor.outcome import KINDS
    parts = []
    for kind, c in counts.items():
        parts.append(f"{KINDS.get(kind, kind)}: {c.get('queued', 0)} queued, {c.get('running', 0)} running, "
                     f"{c.get('done', 0)} done, {c.get('failed', 0)} failed")
    line = " | ".join(parts)
    return f"{line} | dashboard {dashboard}" if dashboard else line


class Progress:
    """The executor's live line. ``update(counts)`` redraws; ``log(text)`` prints a line above it;
    ``close()`` leaves the last.

    rich draws it in place on a terminal; elsewhere the same line is printed when the counts change, at
    most every ``every`` seconds, so a log stays readable.
    """

    def __init__(self, stream: IO[str] | None = sys.stderr, dashboard: str | None = None, every: float = 5.0):
        self.dashboard = dashboard
        self.every = every
        self._last_text = ""
        self._last_time = float("-inf")  # the first line prints at once
        self._live = None
        self._console = None
        if stream is None:
            return
        from rich.console import Console
        self._console = Console(file=stream, highlight=False, soft_wrap=True)
        if self._console.is_terminal:
            from rich.live import Live
            self._live = Live("", console=self._console, refresh_per_second=4, transient=False)
            self._live.start()

    def update(self, counts: dict[str, dict[str, int]]) -> None:
        if self._console is None:
            return
        text = counts_line(counts, self.dashboard)
        if self._live is not None:
            self._live.update(text)
        elif text != self._last_text and time.monotonic() - self._last_time >= self.every:
            self._console.print(text, markup=False)
            self._last_time = time.monotonic()
        self._last_text = text

    def log(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, markup=False)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self._console is not None and self._last_text:
            self._console.print(self._last_text, markup=False)
