"""The live line: queued / running / done / failed per kind, and the dashboard address.

rich draws it in place on a terminal; elsewhere (CI logs, a pipe) the same line is printed when the
counts change, at most every few seconds, so a log stays readable.
"""
from __future__ import annotations

import sys
import time
from typing import IO

from .outcome import KINDS


def counts_line(counts: dict[str, dict[str, int]], dashboard: str | None = None) -> str:
    parts = []
    for kind, c in counts.items():
        parts.append(f"{KINDS.get(kind, kind)}: {c.get('queued', 0)} queued, {c.get('running', 0)} running, "
                     f"{c.get('done', 0)} done, {c.get('failed', 0)} failed")
    line = " | ".join(parts)
    return f"{line} | dashboard {dashboard}" if dashboard else line


class Progress:
    """``update(counts)`` redraws; ``log(text)`` prints a line above it; ``close()`` leaves the last."""

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
