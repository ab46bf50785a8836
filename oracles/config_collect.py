"""Gather the configuration oracle's evidence into one JSON line per case, and print a summary.

    python3 oracles/config_collect.py BUILD_DIR OUT.jsonl

BUILD_DIR is what run_config_oracle.sh filled: cases.json, env.txt, <kernel>/compile.{log,rc,time},
runs/<case>.{out,err,rc,time}. Standard library only (runs on the GPU machine).

Outcomes (the question each answers):
  compile_error   nvcc rejected the kernel (first error line and every static_assert message kept)
  launch_failure  it compiled, but can_implement, initialize (shared memory, cluster attribute), run,
                  or the first synchronize failed (``stage`` says which)
  hang            the probe was still running at the watchdog (exit 124/137)
  wrong           it ran, and D has non-finite elements or a relative Frobenius error over the tolerance
  correct         it ran and D matches the float reference
  infra_error     the oracle itself could not answer (compile timeout, skipped for the time budget,
                  probe crash without a result): never evidence about the configuration
"""
from __future__ import annotations

import json
import os
import re
import sys

OUTCOMES = ("compile_error", "launch_failure", "hang", "wrong", "correct", "infra_error")
# Relative Frobenius error bounds (issue 5): 1e-2 for 16- and 8-bit inputs, 1e-3 for tf32.
TOLERANCE = {"bf16": 1e-2, "f16": 1e-2, "e4m3": 1e-2, "e5m2": 1e-2, "tf32": 1e-3}

_SA = re.compile(r'static assertion failed with "((?:[^"\\]|\\.)*)"')
_ERR = re.compile(r"\berror\b", re.IGNORECASE)
_PTXAS_WARN = re.compile(r"(C75\d\d|wgmma[^\n]*serializ|serializ[^\n]*wgmma)", re.IGNORECASE)
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _times(path: str) -> float | None:
    text = _read(path)
    if not text:
        return None
    try:
        t0, t1 = (float(x) for x in text.split()[:2])
        return round(t1 - t0, 2)
    except ValueError:
        return None


def parse_compile_log(log: str) -> dict:
    lines = log.splitlines()
    first_error = next((ln.strip() for ln in lines if _ERR.search(ln) and "warning" not in ln.lower()), None)
    asserts: list[str] = []
    for m in _SA.finditer(log):
        msg = m.group(1)
        if msg not in asserts:
            asserts.append(msg)
    warnings = []
    for ln in lines:
        if _PTXAS_WARN.search(ln) and ln.strip() not in warnings:
            warnings.append(ln.strip())
    # registers / spills of the GEMM kernel (cutlass::device_kernel<...>), not of the helper kernels
    regs = spill_st = spill_ld = None
    current = None
    for ln in lines:
        m = _ENTRY.search(ln)
        if m:
            current = m.group(1)
            continue
        if current and "device_kernel" in current:
            m = _SPILL.search(ln)
            if m:
                spill_st, spill_ld = int(m.group(1)), int(m.group(2))
            m = _REGS.search(ln)
            if m:
                regs = int(m.group(1))
    return {"first_error": first_error, "static_asserts": asserts, "ptxas_warnings": warnings,
            "registers": regs, "spill_stores": spill_st, "spill_loads": spill_ld}


def parse_probe_output(text: str) -> tuple[dict, str | None]:
    """Merge the probe's JSON lines (later phases override); return (fields, last phase)."""
    fields: dict = {}
    phase = None
    for ln in text.splitlines():
        ln = ln.strip()
        if not ln.startswith("{"):
            continue
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError:
            continue
        phase = obj.pop("phase", phase)
        fields.update(obj)
    return fields, phase


def classify(case: dict, compile_rc: str | None, compile_info: dict, run_rc: str | None,
             probe: dict, phase: str | None) -> tuple[str, str | None]:
    """(outcome, stage): stage names where a failure happened."""
    if compile_rc is None:
        return "infra_error", "compile not recorded"
    if compile_rc == "skipped":
        return "infra_error", "compile skipped (time budget)"
    if compile_rc in ("124", "137"):
        return "infra_error", "compile timeout"
    if compile_rc != "0":
        first = compile_info.get("first_error") or ""
        if re.match(r"\S*config_probe\.cu\(\d+\)", first) and not compile_info.get("static_asserts"):
            # an error located in the probe's own code is a probe bug, not CUTLASS's answer
            return "infra_error", "probe source error"
        if first or compile_info.get("static_asserts"):
            return "compile_error", "compile"
        return "infra_error", f"compiler exit {compile_rc} without an error line"
    if run_rc is None:
        return "infra_error", "not run"
    if run_rc == "skipped":
        return "infra_error", "run skipped (time budget)"
    if run_rc in ("124", "137"):
        return "hang", f"after phase {phase or 'none'}"
    if "cuda_error" in probe:
        return "launch_failure", f"cuda call {probe.get('cuda_error_call')} after phase {phase}"
    if probe.get("can_implement") not in (None, "Success"):
        return "launch_failure", "can_implement"
    if probe.get("initialize") not in (None, "Success"):
        return "launch_failure", "initialize"
    if probe.get("run") not in (None, "Success"):
        return "launch_failure", "run"
    if probe.get("sync") not in (None, "cudaSuccess"):
        return "launch_failure", "sync"
    if "rel_err" in probe or "nonfinite" in probe:
        tol = TOLERANCE[case["problem"]["dtype_a"]]
        rel = probe.get("rel_err")
        if probe.get("nonfinite", 0) or rel is None or rel > tol:
            return "wrong", "result"
        return "correct", None
    return "infra_error", f"probe exit {run_rc} after phase {phase or 'none'}"


def load_env(build: str) -> dict:
    env = {}
    for ln in (_read(os.path.join(build, "env.txt")) or "").splitlines():
        if "=" in ln:
            k, v = ln.split("=", 1)
            env[k.strip()] = v.strip()
    return env


def collect(build: str) -> list[dict]:
    with open(os.path.join(build, "cases.json")) as f:
        cases = json.load(f)
    env = load_env(build)
    records = []
    for case in cases:
        kdir = os.path.join(build, case["kernel"])
        crc = (_read(os.path.join(kdir, "compile.rc")) or "").strip() or None
        info = parse_compile_log(_read(os.path.join(kdir, "compile.log")) or "")
        rbase = os.path.join(build, "runs", case["id"])
        rrc = (_read(rbase + ".rc") or "").strip() or None
        probe, phase = parse_probe_output(_read(rbase + ".out") or "")
        outcome, stage = classify(case, crc, info, rrc, probe, phase)
        stderr_tail = (_read(rbase + ".err") or "").strip().splitlines()[-5:]
        rec = {
            "id": case["id"], "group": case["group"], "why": case["why"], "kernel": case["kernel"],
            "problem": case["problem"], "config": case["config"],
            "outcome": outcome, "stage": stage,
            "compile": {"rc": crc, "seconds": _times(os.path.join(kdir, "compile.time")), **info},
            "run": {"rc": rrc, "seconds": _times(rbase + ".time"), "last_phase": phase,
                    "stderr_tail": stderr_tail},
            "smem_kernel": probe.get("smem_kernel"), "smem_mainloop": probe.get("smem_mainloop"),
            "smem_epilogue": probe.get("smem_epilogue"), "stages": probe.get("stages"),
            "threads": probe.get("threads"),
            "can_implement": probe.get("can_implement"), "initialize": probe.get("initialize"),
            "run_status": probe.get("run"), "sync": probe.get("sync"),
            "cuda_error": probe.get("cuda_error"), "cuda_error_call": probe.get("cuda_error_call"),
            "workspace_bytes": probe.get("workspace_bytes"),
            "rel_err": probe.get("rel_err"), "tolerance": TOLERANCE[case["problem"]["dtype_a"]],
            "nonfinite": probe.get("nonfinite"), "elements": probe.get("elements"),
            "time_ms": probe.get("time_ms"), "tflops": probe.get("tflops"),
            "timing_reinitialize": probe.get("timing_reinitialize"),
            "device": probe.get("device") or env.get("nvidia_smi", "").split(",")[0] or None,
            "driver": env.get("nvidia_smi", "").split(",")[-1].strip() or None,
            "cuda_driver_api": probe.get("cuda_driver_api"), "cuda_runtime": probe.get("cuda_runtime"),
            "nvcc": env.get("nvcc"), "cutlass": env.get("cutlass_version"), "date": env.get("date_utc"),
        }
        records.append(rec)
    return records


def summary(records: list[dict]) -> str:
    rows = [f"{'case':<92} {'outcome':<14} {'st':>3} {'smem':>7} {'rel_err':>9} {'TF/s':>6}  detail"]
    for r in records:
        detail = r["stage"] or ""
        if r["outcome"] == "compile_error":
            detail = (r["compile"]["static_asserts"] or [r["compile"]["first_error"] or ""])[0][:90]
        rel = f"{r['rel_err']:.1e}" if isinstance(r["rel_err"], (int, float)) else "-"
        tf = f"{r['tflops']:.0f}" if isinstance(r["tflops"], (int, float)) else "-"
        rows.append(f"{r['id'][:92]:<92} {r['outcome']:<14} {r['stages'] if r['stages'] is not None else '-':>3} "
                    f"{r['smem_kernel'] if r['smem_kernel'] is not None else '-':>7} {rel:>9} {tf:>6}  {detail}")
    counts = {o: sum(r["outcome"] == o for r in records) for o in OUTCOMES}
    rows.append("totals: " + ", ".join(f"{o} {n}" for o, n in counts.items()) + f" (of {len(records)})")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build, out = argv
    records = collect(build)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    print(summary(records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
