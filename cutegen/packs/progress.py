"""A progress bar with the time left (``rich``), for the long loops of ``cutegen pack``: search, and the
build and measurement of ``bench/gpu_pack.py``. Disabled (a no-op) when there is no description."""
from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def bar(description: str | None, total: int, stream=None):
    """Yields ``advance(n=1)``. Shown on stderr while the loop runs; on a stream that is not a terminal
    rich prints the finished bar once, so a log keeps the count and the time it took."""
    if not description or total <= 0:
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    console = Console(file=stream or sys.stderr, highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("left"), TimeRemainingColumn(), console=console) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.update(task, advance=n)
