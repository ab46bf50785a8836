"""Summarize a configuration-oracle JSONL file as Markdown (for oracles/README.md and the lead's report).

    python3 oracles/config_report.py tests/data/config_oracle_h100.jsonl

Prints: outcomes per group, every static_assert message with its cases, every launch failure, hang
and wrong result, shared-memory figures of the kernels that compiled, and the rulebook's E07 stage
formula against the stages CUTLASS actually resolved for ``"auto"``.
"""
from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict

OUTCOMES = ("compile_error", "launch_failure", "hang", "wrong", "correct", "infra_error")
BITS = {"bf16": 16, "f16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8}
SMEM_CAPACITY = 232448


def _ceil(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def e07_auto_stages(rec: dict) -> int:
    """Rulebook E07: floor((232448 - roundup(carveout,128)) / (roundup(stage bytes,128) + 16))."""
    tm, tn, tk = rec["config"]["tile_shape"]
    p = rec["problem"]
    stage = (tm * tk * BITS[p["dtype_a"]] + tn * tk * BITS[p["dtype_b"]]) // 8
    return (SMEM_CAPACITY // 128 * 128 - _ceil(rec["smem_epilogue"], 128)) // (_ceil(stage, 128) + 16)


def report(recs: list[dict]) -> str:
    out = []
    counts = Counter(r["outcome"] for r in recs)
    out.append(f"{len(recs)} cases; " + ", ".join(f"{o} {counts.get(o, 0)}" for o in OUTCOMES))
    env = next((r for r in recs if r.get("device")), None)
    if env:
        out.append(f"device {env['device']}, driver {env['driver']}, {env['nvcc']}, CUTLASS {env['cutlass']}, "
                   f"{env['date']}")
    out.append("\n| group | " + " | ".join(OUTCOMES) + " |\n|---|" + "---|" * len(OUTCOMES))
    by_group: dict[str, Counter] = defaultdict(Counter)
    for r in recs:
        by_group[r["group"]][r["outcome"]] += 1
    for g, c in by_group.items():
        out.append(f"| {g} | " + " | ".join(str(c.get(o, 0)) for o in OUTCOMES) + " |")

    out.append("\nstatic_asserts seen:")
    sa: dict[str, list[str]] = defaultdict(list)
    for r in recs:
        if r["outcome"] == "compile_error":
            msgs = r["compile"]["static_asserts"] or [f"(no static_assert) {r['compile']['first_error']}"]
            for m in msgs[:1]:
                sa[m].append(r["kernel"])
    for m, ks in sa.items():
        out.append(f"- \"{m}\": {', '.join(sorted(set(ks)))}")

    for outcome in ("launch_failure", "hang", "wrong", "infra_error"):
        rows = [r for r in recs if r["outcome"] == outcome]
        if rows:
            out.append(f"\n{outcome}:")
        for r in rows:
            out.append(f"- {r['id']}: stage {r['stage']}; smem {r['smem_kernel']}, stages {r['stages']}, "
                       f"can_implement {r['can_implement']}, initialize {r['initialize']}, run {r['run_status']}, "
                       f"sync {r['sync']}, rel_err {r['rel_err']}, nonfinite {r['nonfinite']}")

    out.append("\nshared memory of compiled kernels (bytes: kernel = mainloop + epilogue + scheduler/barriers):")
    out.append("| kernel | stages | kernel | mainloop | epilogue | other | regs | spill st | outcome(s) |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    seen = {}
    for r in recs:
        if isinstance(r["smem_kernel"], int):
            seen.setdefault(r["kernel"], []).append(r)
    for k, rs in seen.items():
        r = rs[0]
        parts = (r["smem_kernel"], r["smem_mainloop"], r["smem_epilogue"])
        other = parts[0] - parts[1] - parts[2] if all(isinstance(x, int) for x in parts) else "-"
        outs = ",".join(sorted({x["outcome"] for x in rs}))
        out.append(f"| {k} | {r['stages']} | {r['smem_kernel']} | {r['smem_mainloop']} | {r['smem_epilogue']} | "
                   f"{other} | {r['compile']['registers']} | {r['compile']['spill_stores']} | {outs} |")

    out.append("\nE07 auto-stage formula vs resolved stages (auto cases only):")
    for k, rs in seen.items():
        r = rs[0]
        if r["config"]["stages"] != "auto" or not isinstance(r["smem_epilogue"], int):
            continue
        pred = e07_auto_stages(r)
        mark = "ok" if pred == r["stages"] else "MISMATCH"
        out.append(f"- {k}: E07 {pred}, CUTLASS {r['stages']} {mark}")

    warn = sorted({w for r in recs for w in r["compile"]["ptxas_warnings"]})
    out.append(f"\nptxas warnings ({len(warn)} distinct):")
    out.extend(f"- {w}" for w in warn)
    perf = sorted((r for r in recs if r["outcome"] == "correct" and isinstance(r["tflops"], (int, float))),
                  key=lambda r: -r["tflops"])
    if perf:
        out.append("\nTFLOP/s of correct cases (informative): best "
                   + "; ".join(f"{r['id']} {r['tflops']:.0f}" for r in perf[:5])
                   + " | worst " + "; ".join(f"{r['id']} {r['tflops']:.0f}" for r in perf[-5:]))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    print(report(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
