"""The GPU half of the test-only "vscale" operation (tests/toy_op.py) on the CPU: what ``Operation.runner`` names for
``cutegen validate --op`` / ``cutegen bench --op`` (cutegen.run.ops). It "runs" a rendered kernel by reading the
scale out of its kernel.cu and applying it with numpy, so a kernel rendered wrong (or edited) fails validation; its
timings are the toy's cost model (deterministic), its peer ("torch.mul") the bytes at 3.35 TB/s."""
from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import numpy as np

import toy_op

RUN_FIELDS = ("repeat",)
CALLS = {"validate": 0, "bench": 0}
# The toy with this runner and a kernel peer ("naive"); a worker child registers it from here (cutegen._runner_worker)
OPERATION = dataclasses.replace(toy_op.OPERATION, runner="toy_op_runner", peers=("torch.mul", "naive"))


def peer_kernels(problem) -> dict:
    return {"naive": toy_op.ScaleConfig(32, 1)}     # one thread per element: the kernel a search should beat


def floor_bytes(problem, options=None) -> int:
    return 2 * problem.n * toy_op.BYTES[problem.dtype]


def _run(kernel_dir, x):
    text = (Path(kernel_dir) / "kernel.cu").read_text()
    scale = float(re.search(r"\(([-0-9.e+]+)f \* \(float\)", text).group(1))
    return (scale * x.astype(np.float32)).astype(x.dtype)


def validate(problem, kernel_dir) -> dict:
    CALLS["validate"] += 1
    if "HANG" in (Path(kernel_dir) / "kernel.cu").read_text():
        time.sleep(600)                    # a kernel that never finishes: the watchdog's case
    config = json.loads((Path(kernel_dir) / "manifest.json").read_text())["config"]
    cases = []
    for n in toy_op.validation_cases(problem, toy_op.ScaleConfig(**config)):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        err = float(np.max(np.abs(_run(kernel_dir, x) - problem.scale * x)) / max(1.0, float(np.max(np.abs(x)))))
        cases.append({"n": n, "err": err, "ok": err <= 1e-6})
    return {"ok": all(c["ok"] for c in cases), "cases": cases, "probes": [],
            "max_rel_error": max(c["err"] for c in cases)}


def bench(problem, kernels: dict, options: dict) -> dict:
    CALLS["bench"] += 1
    results = {}
    for role, kdir in kernels.items():
        config = toy_op.ScaleConfig(**json.loads((Path(kdir) / "manifest.json").read_text())["config"])
        us = toy_op.cost(problem, config) * options.get("repeat", 1)
        results[role] = {"status": "ok", "median_ms": us / 1e3, "times_ms": [us / 1e3] * 3,
                         "verify": {"ok": True, "rel_error": 0.0}, "method": "the toy's cost model"}
    peer_us = toy_op.LAUNCH_US + floor_bytes(problem) / toy_op.HBM_BYTES_PER_US
    results["torch.mul"] = {"status": "ok", "median_ms": peer_us / 1e3, "times_ms": [peer_us / 1e3],
                            "verify": {"ok": True}}
    return {"flops": problem.n, "bytes": floor_bytes(problem), "results": results}


def sanitize_case(problem, kernel_dir) -> dict:
    """What compute-sanitizer runs: the validation cases once more."""
    return {"ok": validate(problem, kernel_dir)["ok"]}
