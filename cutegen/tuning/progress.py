"""What a tuning run shows while it runs: what compiles, what is timed, the best so far (``rich``).

Without ``rich`` (the GPU machine has only what is carried there) the same events print as plain
lines; either way every event is one line a log file keeps.
"""
from __future__ import annotations

import re
import sys

_BUILD_LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+?): (built|cached|FAILED)")


class Display:
    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self._progress = self._console = None
        self._tasks: dict[str, int] = {}
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        self._console = Console(file=self.stream, highlight=False)
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=self._console, transient=False,
                                  disable=quiet)

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

    # -- events -------------------------------------------------------------------------------------
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
