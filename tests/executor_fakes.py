"""Fake tasks for the executor tests: imported by the Dask workers (tests/ is on their PYTHONPATH)."""
from __future__ import annotations

import os
import time
from pathlib import Path


def mark(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())


def timed_sleep(item: dict) -> dict:
    """A stand-in for a GPU timing (or a compile): records its own start and end, then returns them."""
    start = time.time()
    if item.get("log"):
        mark(item["log"], f"start {item['name']} {os.getpid()}")
    time.sleep(item["seconds"])
    end = time.time()
    if item.get("log"):
        mark(item["log"], f"end {item['name']} {os.getpid()}")
    return {"name": item["name"], "start": start, "end": end, "pid": os.getpid(),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def fails_once(item: dict) -> str:
    """Raises on its first attempt (anywhere in the cluster), succeeds on the next."""
    marker = Path(item["marker"])
    if not marker.exists():
        marker.write_text("failed once")
        raise RuntimeError("transient failure (first attempt)")
    return "ok"


def always_raises(item: dict) -> None:
    raise ValueError(f"bad input {item}")


def kills_its_worker(item: dict) -> None:
    """Dies the way a faulting kernel takes its worker down."""
    mark(item["log"], f"start {os.getpid()}")
    os._exit(1)
