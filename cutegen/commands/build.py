"""cutegen build: compile rendered kernels (kernel directories or .cu files) through the cache."""
from __future__ import annotations

import argparse
import sys

from .._fields import finite_float
from ..errors import CutegenError

HELP = "compile rendered kernels with nvcc (content-addressed cache, parallel, bounded by memory)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="KERNEL",
                   help="kernel directories (kernel.cu + manifest.json), folders of them, or .cu files")
    p.add_argument("--jobs", "-j", type=int,
                   help="parallel compiles (default: half the cores, at most MemAvailable / 3.5 GB)")
    p.add_argument("--cache", metavar="DIR", help="cache directory (default: $CUTEGEN_CACHE or ~/.cache/cutegen)")
    p.add_argument("--timeout", type=finite_float, help="seconds before one nvcc is killed (default: none)")
    from .. import executor
    executor.add_arguments(p)


def expand(paths: list[str]) -> list[str]:
    """A folder without kernel.cu stands for every kernel directory under it."""
    from pathlib import Path
    out: list[str] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and not (p / "kernel.cu").is_file() and not (p / "kernel.py").is_file():
            found = sorted(str(c.parent) for c in p.rglob("manifest.json")
                           if (c.parent / "kernel.cu").is_file() or (c.parent / "kernel.py").is_file())
            if not found:
                raise CutegenError(f"{p}: no kernel.cu under it")
            out += found
        else:
            out.append(raw)
    return out


def _build_dsl(paths: list[str], cache) -> int:
    """CuTe DSL kernel directories (kernel.py) build through cutegen.dsl, one at a time."""
    from ..dsl import build_dsl
    from ..manifest import load
    failed = 0
    for raw in paths:
        m = load(raw)
        try:
            print(f"built   {build_dsl(m.problem, m.config, raw, cache=cache, cost=m.data.get('cost'))}")
        except CutegenError as e:
            failed += 1
            print(f"failed  {raw}: {e}", file=sys.stderr)
    return failed


def run(args: argparse.Namespace) -> int:
    from pathlib import Path
    from ..build import build
    cache = Path(args.cache) if args.cache else None
    paths = expand(args.paths)
    dsl = [p for p in paths if Path(p).is_dir() and (Path(p) / "kernel.py").is_file()
           and not (Path(p) / "kernel.cu").is_file()]
    failed = _build_dsl(dsl, cache) if dsl else 0
    paths = [p for p in paths if p not in dsl]
    if not paths:
        return 1 if failed else 0
    from .. import executor as X
    from ..progress import Steps
    with X.from_args(args) as ex:
        # Locally a bar (terminal) or a line per kernel (log); a cluster run draws the executor's own line.
        with Steps("build", len(paths), stream=sys.stderr if ex.name == "local" else None) as steps:
            summary = build(paths, jobs=args.jobs, cache=cache, progress=steps if ex.name == "local" else sys.stderr,
                            timeout=args.timeout, executor=ex)
        for r in summary.results:
            if r.ok:
                print(f"{r.status:7s} {r.library}")
        print(summary.line())
        if ex.name != "local":
            print(ex.summary.text(), file=sys.stderr)
    return 0 if summary.ok and not failed else 1
