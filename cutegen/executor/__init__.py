"""Where the fan-out of ``build``, ``regen``, ``bench``, ``tune`` and ``pack`` runs: here, or on Dask.

``--executor local`` (the default) is what cutegen always did: the builder's own thread pool,
bounded by cores and memory, and GPU work in this process. ``--executor dask --scheduler ADDRESS``
(``tcp://HOST:PORT``, a scheduler JSON file, or ``$CUTEGEN_DASK_SCHEDULER``) sends the work to a
``dask.distributed`` cluster (``pip install 'cutegen[cluster]'``).

API for commands (a new command wires in with one call each)::

    from cutegen import executor as X
    X.add_arguments(parser)                  # --executor local|dask, --scheduler ADDRESS|FILE
    with X.from_args(args) as ex:            # an Executor; closes its Dask client at the end
        summary = cutegen.build.build(paths, jobs=..., executor=ex)   # compile fan-out
        outs = ex.map(fn, items, kind="cpu", names=[...])             # CPU work (search, render)
        outs = ex.map_gpu(fn, items, names=[...], details=[...])      # GPU timing, 1 task per GPU
        model = ex.share(obj)                # inside many items: sent to the cluster once, not per task
        print(ex.summary.text())             # what ran where, what was retried, what failed

``map``/``map_gpu`` call ``fn(item)`` (``fn`` a module-level function; ``item`` picklable) and return
``TaskOutcome``s in the order of ``items``: ``.ok``, ``.value``, ``.error``, ``.worker``, ``.gpu``
(the worker's ``CUDA_VISIBLE_DEVICES``), ``.started``/``.finished`` (worker wall clock), ``.retried``.
A failure is an outcome, never an exception; ``details[i]`` (e.g. the problem and configuration) is
printed with it in the summary. Only a finished task's value comes back: a timing that a worker's
death interrupted is re-run elsewhere and the interrupted one is never seen, so record measurements
from outcome values only (the client alone writes the results database and the cache).

A GPU task that needs a built library on a machine without a shared file system ships it by
content: ``sha, data = tasks.library_bytes(path)`` on the client, ``tasks.materialize(sha, data)``
on the worker (its own cache, by content hash).

Cluster side: start workers with resources, e.g. per host
``dask worker tcp://S:8786 --nworkers 1 --nthreads 4 --resources "MEM_GB=14"`` for compiles (each
compile asks for the builder's estimate, 3.5) and, per GPU, ``CUDA_VISIBLE_DEVICES=i dask worker
tcp://S:8786 --nthreads 1 --resources "GPU=1"`` with ``DASK_DISTRIBUTED__WORKER__DAEMON=False`` (the
GPU task starts its watchdog child process, which a nanny's daemonic worker may not); start the scheduler with
``DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1`` so a kernel that kills its worker twice is
reported (KilledWorker) instead of tried three more times.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import FieldError
from .local import Executor, LocalExecutor
from .outcome import RunSummary, TaskOutcome

ENV_SCHEDULER = "CUTEGEN_DASK_SCHEDULER"
EXECUTORS = ("local", "dask")

__all__ = ["Executor", "LocalExecutor", "RunSummary", "TaskOutcome", "add_arguments", "from_args", "dask_executor"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("executor")
    g.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where the fan-out runs: this machine (local, default) or a Dask cluster (dask)")
    g.add_argument("--scheduler", metavar="ADDRESS|FILE",
                   help=f"Dask scheduler: tcp://HOST:PORT or a scheduler JSON file (default: ${ENV_SCHEDULER})")


def dask_executor(scheduler: str, **kwargs) -> Executor:
    """A Dask executor for ``tcp://HOST:PORT`` (any ``proto://``) or a scheduler file."""
    from .cluster import DaskExecutor
    if "://" in scheduler:
        return DaskExecutor(scheduler, **kwargs)
    if os.path.isfile(scheduler):
        return DaskExecutor(scheduler_file=scheduler, **kwargs)
    raise FieldError("--scheduler", f"{scheduler!r} is neither an address (tcp://HOST:PORT) nor an existing "
                                    f"scheduler file")


def from_args(args: argparse.Namespace, progress=sys.stderr) -> Executor:
    kind = getattr(args, "executor", None) or "local"
    scheduler = getattr(args, "scheduler", None)
    if kind == "local":
        if scheduler:
            raise FieldError("--scheduler", "given with --executor local; add --executor dask")
        return LocalExecutor(progress=progress)
    if kind != "dask":
        raise FieldError("--executor", f"{kind!r} is not one of {', '.join(EXECUTORS)}")
    scheduler = scheduler or os.environ.get(ENV_SCHEDULER)
    if not scheduler:
        raise FieldError("--scheduler", f"--executor dask needs a scheduler: --scheduler tcp://HOST:PORT, "
                                        f"a scheduler file, or ${ENV_SCHEDULER}")
    return dask_executor(scheduler, progress=progress)
