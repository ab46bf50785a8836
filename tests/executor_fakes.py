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


# --- a stand-in for tuning's GPU half on a worker (cutegen.tuning.remote) ---------------------------
class TuneTimer:
    """Times by candidate name (microseconds), as tests/test_tune.py's FakeTimer; each library must be the
    bytes the client built (shipped by content); ``seconds``: how long one problem's timing takes."""

    def __init__(self, times: dict, cublas_us: float, bad: list, seconds: float, log: str | None):
        self.times, self.cublas_us, self.bad, self.seconds, self.log = times, cublas_us, set(bad), seconds, log

    def device(self) -> dict:
        return {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "torch_cuda": "13.0"}

    def __call__(self, problem, contenders):
        if self.log:
            mark(self.log, f"start {problem.name} {os.getpid()}")
        time.sleep(self.seconds)
        out = {}
        for c in contenders:
            name = c["name"]
            if name == "cublas":
                us = self.cublas_us
            elif c.get("library") is None:
                out[name] = {"status": "missing", "reason": c.get("reason", "")}
                continue
            else:
                data = Path(c["library"]).read_bytes()
                if data != b"fake library of " + name.encode():
                    raise AssertionError(f"{c['library']} holds {data[:40]!r}, not {name}'s library")
                if name in self.bad:
                    out[name] = {"status": "failed_verification", "reason": "relative error 0.5 >= 0.01",
                                 "verify": {"ok": False, "rel_err": 0.5}}
                    continue
                us = self.times[name]
            out[name] = {"status": "ok", "median_ms": us / 1e3, "times_ms": [us / 1e3] * 50,
                         "verify": {"ok": True, "rel_err": 1e-3}, "library_seen": c.get("library")}
        if self.log:
            mark(self.log, f"end {problem.name} {os.getpid()}")
        return out


class TuneValidator:
    def __init__(self, fail: list):
        self.fail = set(fail)

    def __call__(self, directory, problem, config, library):
        assert Path(library).is_file()
        if Path(directory).name in self.fail:
            return False, "ragged_m: relative Frobenius error 3.1e-01 >= tolerance 0.01"
        return True, "9/9 cases"


def tune_gpu(times: dict, cublas_us: float = 110.0, bad: list = (), fail: list = (), seconds: float = 0.0,
             log: str | None = None):
    """The factory ``tuning.remote`` calls on a worker (``gpu.runner_gpu``'s stand-in)."""
    return TuneTimer(times, cublas_us, list(bad), seconds, log), TuneValidator(list(fail))


def raises_on_one(item: int) -> int:
    if item == 1:
        raise ValueError(f"bad input {item}")
    return item


# --- the dry run of bench/gpu_dask_tune.py: a stand-in GPU for any plan ----------------------------
class DryTimer:
    """Every built contender "verified" and timed at a time derived from its library's bytes (so both
    executors see the same times); cuBLAS at 100 us. Takes RunnerTimer's arguments and ignores them."""

    def __init__(self, **_):
        pass

    def device(self) -> dict:
        return {"name": "NVIDIA H100 80GB HBM3 (dry run)", "sm_count": 132, "torch_cuda": "13.0"}

    def __call__(self, problem, contenders):
        import hashlib
        out = {}
        for c in contenders:
            if c["name"] == "cublas":
                us = 100.0
            elif c.get("library") is None:
                out[c["name"]] = {"status": "missing", "reason": c.get("reason", "")}
                continue
            else:
                us = 50.0 + int(hashlib.sha256(Path(c["library"]).read_bytes()).hexdigest()[:4], 16) % 100
            out[c["name"]] = {"status": "ok", "median_ms": us / 1e3, "times_ms": [us / 1e3] * 50,
                              "verify": {"ok": True, "rel_err": 0.0}}
        return out

    def close(self) -> None:
        pass


class DryValidator:
    def __init__(self, **_):
        pass

    def __call__(self, directory, problem, config, library):
        return Path(library).is_file(), "dry run: the library is there, nothing ran"

    def close(self) -> None:
        pass


def dry_gpu(**_):
    return DryTimer(), DryValidator()


def second_len(item: tuple) -> int:
    """len() of the item's second member: a shared object, resolved on the worker."""
    assert isinstance(item[1], dict), type(item[1])
    return len(item[1])
