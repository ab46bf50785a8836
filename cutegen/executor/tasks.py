"""Functions that run on a worker (local process or Dask worker); importable without dask.

A worker compiles into its own cache (``CUTEGEN_CACHE`` of the worker process, else the default)
and returns the artifact by content: the cache key the client computed, the library's bytes and
the build record. The client checks the key and writes its own cache; nothing a worker does
touches the client's files, so a worker that dies mid-task leaves the client's cache as it was.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import CutegenError


def where() -> dict:
    """Who runs this task: Dask worker address (or "local"), host, pid, GPU (CUDA_VISIBLE_DEVICES)."""
    address = "local"
    try:
        from distributed import get_worker
        address = get_worker().address
    except (ImportError, ValueError):
        pass
    return {"worker": address, "host": socket.gethostname(), "pid": os.getpid(),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def run_task(fn: Callable, *args: Any) -> dict:
    """Call ``fn(*args)`` and say where and when. An exception propagates (Dask retries it)."""
    info = where()
    info["started"] = time.time()
    info["value"] = fn(*args)
    info["finished"] = time.time()
    return info


def identity(obj: Any) -> Any:
    """The task behind ``Executor.share``: its result is the object, recomputable if its worker dies."""
    return obj


# --- compiling -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _builder(cache: str, timeout: float | None):
    from ..build import Builder
    # jobs=1: this worker runs one compile per task; the scheduler's MEM_GB resource decides how many
    # run on the worker at once. The builder's slot lock still serializes with other nvcc users here.
    return Builder(jobs=1, cache=Path(cache), progress=None, timeout=timeout)


def compile_kernel(name: str, source: str, manifest: dict | None, key: str, nvcc_version: str,
                   cutlass_version: str | None, timeout: float | None) -> dict:
    """Compile one kernel in this worker's cache; return the artifact (key, bytes, build record)."""
    from ..build import Job, cache_dir
    builder = _builder(str(cache_dir()), timeout)
    if (builder.nvcc_version, builder.cutlass_version) != (nvcc_version, cutlass_version):
        # Another toolchain makes other bytes under the client's key: refuse rather than mix them.
        raise CutegenError(f"toolchain differs from the client's: worker nvcc {builder.nvcc_version!r}, "
                           f"CUTLASS {builder.cutlass_version!r}; client nvcc {nvcc_version!r}, "
                           f"CUTLASS {cutlass_version!r}")
    result = builder.build_one(Job(name, source, None, manifest))
    if result.key != key:
        raise CutegenError(f"{name}: worker cache key {result.key} is not the client's {key}")
    artifact = {"key": key, "status": result.status, "seconds": result.seconds, "message": result.message,
                "log": result.log, "stats": result.stats, "library": None, "record": None, "sha256": None}
    if result.ok:
        entry = builder.entry(key)
        data = (entry / "kernel.so").read_bytes()
        artifact.update(library=data, sha256=hashlib.sha256(data).hexdigest(),
                        record=json.loads((entry / "build.json").read_text()))
    return artifact


# --- shipping a built library to a GPU worker ------------------------------------------------------
def library_bytes(path: str | os.PathLike) -> tuple[str, bytes]:
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest(), data


def materialize(sha256: str, data: bytes) -> Path:
    """Put a library under this worker's cache by its content hash (once); return its path."""
    from .._atomic import atomic_write
    from ..build import cache_dir
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CutegenError(f"library bytes do not match their sha256 {sha256}")
    path = cache_dir() / "artifacts" / sha256[:2] / sha256 / "kernel.so"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, mode=0o755)
    return path
