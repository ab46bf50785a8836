"""Read the GPU result files cutegen writes into Measurements, each with its true device, date and method.

Formats (recognised by their shape, so old files import as they are):
  - ``cutegen-bench/1``      bench/run_gpu.sh: per problem, the pick, the CUTLASS builder baseline and cuBLAS;
  - calibration lists       bench/calibrate.py: per problem, the search's top-k candidates and cuBLAS;
  - DSL comparisons          bench/dsl_compare.py: the C++ and CuTe DSL kernels of one configuration;
  - ``cutegen-validate/1``   cutegen validate: correctness runs. Their only time is one wall-clock call
                             at 0.1 ms resolution, kept under the method ``validate:single-call`` so the
                             record says it ran correctly; ``Measurement.is_benchmark`` is False for it;
  - config oracle JSON lines oracles/run_config_oracle.sh (tests/data/config_oracle_*.jsonl): CollectiveBuilder
                             kernels, each timed as the mean of 5 launches after 2 warm-ups, no L2 rotation;
  - JSON lines               ``cutegen db export``: one Measurement per line.
A contender that did not run (status other than ``ok``) has no time and is not a measurement: skipped.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .._fields import loads_json
from ..config import KernelConfig
from ..errors import CutegenError
from ..manifest import kernel_hash
from ..problem import GemmProblem
from .device import device_kind
from .measurement import Measurement

VALIDATE_METHOD = "validate:single-call"


def _us(ms) -> tuple[float, ...]:
    return tuple(round(t * 1000.0, 4) for t in ms or ())


def _date_from_name(path: Path) -> str:
    m = re.match(r"(\d{4}-\d{2}-\d{2})", path.name)
    if not m:
        raise CutegenError(f"{path}: the file holds no date and its name does not start with one (YYYY-MM-DD)")
    return m.group(1)


def _device(dev: Any) -> dict[str, Any]:
    """Device facts as far as the file records them."""
    if isinstance(dev, str):
        return {"device_name": dev, "sm_count": None, "device_kind": device_kind(dev)}
    name, sms = dev.get("name", ""), dev.get("sm_count")
    return {"device_name": name, "sm_count": sms, "device_kind": device_kind(name, sms)}


def _from_bench(path: Path, d: dict) -> list[Measurement]:
    v, meth = d.get("versions", {}), d.get("method", {})
    method = (f"cuda-events/{meth.get('statistic', 'median')}/warmup{meth.get('warmup')}/iters{meth.get('iters')}"
              f"/l2x{meth.get('l2_multiple')}")
    common = dict(**_device(d["device"]), driver=v.get("driver"), cuda=v.get("torch_cuda"), cutlass=v.get("cutlass"),
                  cutegen=v.get("cutegen"), timing_method=method, measured_at=d["date"])
    out = []
    for p in d["problems"]:
        problem = GemmProblem.from_dict(p["problem"])
        res = p.get("results", {})
        cub = res.get("cublas", {})
        cublas_us = cub["median_ms"] * 1000.0 if cub.get("status") == "ok" else None
        for name, k in p.get("kernels", {}).items():
            r = res.get(name, {})
            if r.get("status") != "ok" or "config" not in k:
                continue
            verify = r.get("verify", {})
            out.append(Measurement(problem=problem, config=KernelConfig.from_dict(k["config"]),
                                   kernel_hash=k.get("hash", ""), backend=k.get("backend", "cutlass"),
                                   times_us=_us(r.get("times_ms")), median_us=r["median_ms"] * 1000.0,
                                   validated=bool(verify.get("ok")), max_rel_error=verify.get("rel_err"),
                                   cublas_us=cublas_us, source=f"{path.name}#{p.get('name', problem.name)}/{name}",
                                   # the plan the worker ran it under (cutegen_gemm_plan), where it had one
                                   launch_plan=r.get("launch_plan") or None, **common))
    return out


def _from_calibration(path: Path, d: list) -> list[Measurement]:
    date = _date_from_name(path)
    out = []
    for entry in d:
        dev = entry.get("device", {})
        problem = GemmProblem.from_dict(entry["problem"])
        res = entry.get("results", {})
        cub = res.get("cublas", {})
        cublas_us = cub["median_ms"] * 1000.0 if cub.get("status") == "ok" else None
        for c in entry.get("candidates", []):
            r = res.get(f"rank{c['rank']}", {})
            if r.get("status") != "ok":
                continue
            verify = r.get("verify", {})
            times = _us(r.get("times_ms"))
            out.append(Measurement(
                problem=problem, config=KernelConfig.from_dict(c["config"]), kernel_hash=c.get("kernel", ""),
                backend="cutlass", **_device(dev), driver=None, cuda=dev.get("torch_cuda"), cutlass=None, cutegen=None,
                # bench/calibrate.py times through the bench worker's op with L2 rotation x4; the file keeps the
                # sample, so its size is the iteration count; the warm-up count is not recorded.
                timing_method=f"cuda-events/median/iters{len(times)}/l2x4", times_us=times,
                median_us=r["median_ms"] * 1000.0, validated=bool(verify.get("ok")),
                max_rel_error=verify.get("rel_err"), cublas_us=cublas_us,
                source=f"{path.name}#{entry.get('name', problem.name)}/rank{c['rank']}", measured_at=date))
    return out


def _from_dsl_compare(path: Path, d: dict) -> list[Measurement]:
    method = f"cuda-events/median/warmup{d.get('warmup')}/iters{d.get('iters')}/interleaved"
    out = []
    for row in d["rows"]:
        problem = GemmProblem.from_dict(row["problem"])
        config = KernelConfig.from_dict(row["config"])
        for backend, med in (row.get("median_ms") or {}).items():
            if not med:
                continue
            err = (row.get("rel_err_vs_ref") or {}).get(backend)
            tol = row.get("tolerance")
            out.append(Measurement(
                problem=problem, config=config, kernel_hash=kernel_hash(problem, config, backend), backend=backend,
                **_device(d.get("device", "")), driver=None, cuda=d.get("cuda"),
                cutlass=d.get("cute_dsl") if backend == "dsl" else None, cutegen=None, timing_method=method,
                median_us=med * 1000.0, validated=err is not None and tol is not None and err <= tol,
                max_rel_error=err, source=f"{path.name}#{row.get('name', problem.name)}/{backend}",
                measured_at=d.get("date") or _date_from_name(path)))
    return out


def _from_validate(path: Path, d: dict) -> list[Measurement]:
    dev = d.get("device", {})
    out = []
    for k in d.get("kernels", []):
        if "config" not in k or "problem" not in k:
            continue
        problem = GemmProblem.from_dict(k["problem"])
        for case in k.get("cases", []):
            if case.get("case") != "manifest" or not case.get("kernel_seconds"):
                continue
            out.append(Measurement(
                problem=problem, config=KernelConfig.from_dict(k["config"]), kernel_hash=k.get("hash", ""),
                backend=k.get("backend", "cutlass"), **_device(dev), driver=None, cuda=dev.get("torch_cuda"),
                cutlass=None, cutegen=None, timing_method=VALIDATE_METHOD,
                times_us=(case["kernel_seconds"] * 1e6,), median_us=case["kernel_seconds"] * 1e6,
                validated=k.get("verdict") == "pass" and bool(case.get("ok")), max_rel_error=case.get("rel_err"),
                source=f"{path.name}#{k.get('kernel', problem.name)}", measured_at=d["date"],
                launch_plan=case.get("plan") or None))     # the manifest's plan, where the kernel has one
    return out


def _from_oracle(path: Path, i: int, r: dict) -> Measurement | None:
    if r.get("outcome") != "correct" or not r.get("time_ms"):
        return None                      # did not compile, launch or compute correctly: no time to keep
    problem = GemmProblem.from_dict(r["problem"])
    config = KernelConfig.from_dict(r["config"])
    return Measurement(
        problem=problem, config=config, kernel_hash=kernel_hash(problem, config, "cutlass_builder"),
        backend="cutlass_builder", **_device(r.get("device", "")), driver=r.get("driver"),
        cuda=str(r["cuda_runtime"]) if r.get("cuda_runtime") else None, cutlass=r.get("cutlass"), cutegen=None,
        # oracles/config_probe.cu: cudaEvent around each of 5 launches after 2 warm-ups, mean, same inputs
        timing_method="cuda-events/mean/warmup2/iters5/same-inputs", times_us=(),
        median_us=r["time_ms"] * 1000.0, validated=True, max_rel_error=r.get("rel_err"),
        source=f"{path.name}#{r.get('id', i)}", measured_at=r["date"])


def _from_jsonl(path: Path, text: str) -> list[Measurement]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                d = loads_json(line)
            except json.JSONDecodeError as e:
                raise CutegenError(f"{path}:{i}: not JSON: {e.msg}") from None
            if isinstance(d, dict) and "outcome" in d and "kernel" in d:
                m = _from_oracle(path, i, d)
                if m is not None:
                    out.append(m)
            else:
                out.append(Measurement.from_dict(d, where=f"{path.name}:{i}"))
    return out


def load(path: str | Path) -> list[Measurement]:
    """Every measurement in one result file; CutegenError names a file whose format is not known, or the
    file, and the field where it can, of one that is malformed (never a KeyError or TypeError)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CutegenError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise CutegenError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    try:
        return _load_text(path, text)
    except CutegenError as e:                  # already names the field (FieldError is a ValueError too)
        raise CutegenError(f"{path}: {e}" if str(path) not in str(e) else str(e)) from None
    except KeyError as e:
        raise CutegenError(f"{path}: malformed result file: a record lacks the field {e.args[0]!r}") from None
    except (TypeError, AttributeError, ValueError, IndexError, OverflowError) as e:
        # a field of the wrong type (a string where a table is, a list where a number is, ...)
        raise CutegenError(f"{path}: malformed result file: {type(e).__name__}: {e}") from None


def _load_text(path: Path, text: str) -> list[Measurement]:
    if path.suffix == ".jsonl":
        return _from_jsonl(path, text)
    try:
        d = loads_json(text)
    except json.JSONDecodeError as e:
        raise CutegenError(f"{path}: not JSON: {e.msg} (line {e.lineno})") from None
    if isinstance(d, list) and d and isinstance(d[0], dict) and "candidates" in d[0]:
        return _from_calibration(path, d)
    if isinstance(d, dict):
        schema = str(d.get("schema", ""))
        if schema.startswith("cutegen-bench/"):
            return _from_bench(path, d)
        if schema.startswith("cutegen-validate/"):
            return _from_validate(path, d)
        if "rows" in d and "method" in d:
            return _from_dsl_compare(path, d)
    raise CutegenError(f"{path}: not a result file cutegen knows (bench, calibration, DSL comparison, validate "
                       "or exported JSON lines)")
