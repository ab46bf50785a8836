"""The pipeline's temporal choices on the GPU: DSL kernels per protocol vs today's C++ kernel.

  here:        python bench/temporal_compare.py prepare [--out out/temporal] [--only NAME ...]
               For a few suite problems (TEMPORAL_PROBLEMS): the configuration bench/dsl_compare.py picks,
               and per temporal choice the pipeline checker accepts (today's protocol; release lag 0; a
               prefetch distance of stages - 1 and of 2) a DSL kernel.so built here (AOT, no GPU), plus the
               C++ kernel.cu of today's protocol (CUTLASS fixes it: CUTLASS-TEMPORAL). Writes
               out/temporal/plan.json in bench/dsl_compare.py's format, one entry per (problem, protocol),
               named PROBLEM@PROTOCOL.
  GPU machine: bash bench/gpu_temporal.sh (carry out/temporal and oracles/.cutlass): bench/dsl_compare.py run
               on that plan (each DSL kernel checked against a float32 reference and against the C++
               kernel, then timed, interleaved), and a table of the best and worst protocol per problem.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

TEMPORAL_PROBLEMS = ("sq4096_bf16_tn", "sq8192_bf16_tn", "cube4000_bf16_tn")
# and a ping-pong kernel of the first (the order choice exists only there), as PROBLEM_pp@PROTOCOL
PINGPONG = dict(tile_shape=(128, 128, 64), cluster_shape=(1, 2, 1), mainloop_schedule="pingpong",
                epilogue_schedule="tma_warp_specialized")


def variants(stages: int, pingpong: bool = False) -> list[tuple[str, dict]]:
    out = [("today", {}), ("rl0", {"release_lag": 0})]
    if pingpong:
        out.append(("ordrel", {"pingpong_order": "after_release"}))
    for d in sorted({stages - 1, 2}, reverse=True):
        if 2 <= d < stages:
            out.append((f"pf{d}", {"prefetch_distance": d}))
    return out


def prepare(args) -> int:
    from dsl_compare import _import_cutegen, choose
    _import_cutegen()
    from cutegen import KernelConfig, dsl
    from cutegen.commands.regen import load_suite

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = {"suite": str(args.suite), "cute_dsl": dsl.dsl_version(), "problems": []}
    for name, problem in load_suite(args.suite):
        if name not in (args.only or TEMPORAL_PROBLEMS):
            continue
        origin, cfg, reasons = choose(problem)
        if cfg is None:
            plan["problems"].append({"name": name, "problem": problem.to_dict(), "skipped": reasons})
            continue
        kernels = [(name, cfg, False)]
        if name == TEMPORAL_PROBLEMS[0]:
            from cutegen.collective_builder import complete
            kernels.append((f"{name}_pp", complete(problem, KernelConfig.from_dict(PINGPONG)), True))
        for kname, kcfg, pp in kernels:
            _prepare_kernel(plan, out, kname, problem, kcfg, origin, pp)
    (out / "plan.json").write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out / 'plan.json'}")
    return 0


def _prepare_kernel(plan, out, name, problem, cfg, origin, pingpong) -> None:
    """One kernel's C++ build directory and a DSL library per protocol the checker accepts."""
    from cutegen import dsl
    from cutegen.legality.pipeline import check_pipeline
    from cutegen.pipelines import pipeline_of
    from cutegen.render import render

    cdir = out / name / "cutlass"
    render(problem, cfg, "cutlass").write(cdir)
    for label, fields in variants(int(cfg.stages), pingpong):
        v = cfg.replace(**fields)
        term, rebuild = pipeline_of(problem, v, "dsl")
        verdict = check_pipeline(term, rebuild=rebuild)
        entry = {"name": f"{name}@{label}", "problem": problem.to_dict(), "config": v.to_dict(),
                 "config_name": v.short_name(), "origin": origin, "checker_legal": verdict.legal,
                 "checker_rules": [x.rule_id for x in verdict.violations]}
        if not verdict.legal:
            entry["skipped"] = f"checker: {entry['checker_rules']}"
            plan["problems"].append(entry)
            continue
        start = time.monotonic()
        try:
            so = dsl.build_dsl(problem, v, out / name / label)
        except Exception as e:  # a build failure is a finding
            entry["dsl_build_error"] = str(e)[-2000:]
            plan["problems"].append(entry)
            print(f"{name}@{label}: DSL BUILD FAILED: {str(e)[-300:]}", flush=True)
            continue
        build = json.loads((out / name / label / "build.json").read_text())
        entry.update(dsl_library=str(so.relative_to(out)), cutlass_dir=str(cdir.relative_to(out)),
                     dsl_compile_here=build["timings"], dsl_build_wall_s=round(time.monotonic() - start, 2),
                     dsl_library_bytes=build["library_bytes"])
        print(f"{name}@{label}: {v.short_name()} built in {entry['dsl_build_wall_s']} s", flush=True)
        plan["problems"].append(entry)


def cublas(args) -> int:
    """cuBLAS (torch.matmul) on each plan problem, CUDA events, median of --iters after --warmup."""
    import statistics

    import torch
    plan = json.loads((Path(args.out) / "plan.json").read_text())
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}
    res = {}
    for e in plan["problems"]:
        base, p = e["name"].partition("@")[0], e["problem"]
        if base in res or p.get("dtype") not in dt or p.get("batch", 1) != 1:
            continue
        m, n, k, t = p["m"], p["n"], p["k"], dt[p["dtype"]]
        lay = p.get("layout", "tn")
        a = torch.rand((m, k) if lay[0] == "t" else (k, m), device="cuda", dtype=t)
        b = torch.rand((n, k) if lay[1] == "n" else (k, n), device="cuda", dtype=t)
        fa = (lambda: a) if lay[0] == "t" else (lambda: a.t())
        fb = (lambda: b.t()) if lay[1] == "n" else (lambda: b)
        for _ in range(args.warmup):
            torch.matmul(fa(), fb())
        times = []
        for _ in range(args.iters):
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s0.record()
            torch.matmul(fa(), fb())
            s1.record()
            torch.cuda.synchronize()
            times.append(s0.elapsed_time(s1) * 1e3)
        us = statistics.median(times)
        res[base] = {"median_us": round(us, 3), "tflops": round(2.0 * m * n * k / (us * 1e-6) / 1e12, 1)}
        print(base, res[base], flush=True)
    Path(args.json).write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    return 0


def table(args) -> int:
    """Best and worst protocol per problem from dsl_compare.json (DSL TFLOP/s; C++ is today's protocol)."""
    rows = json.loads(Path(args.result).read_text())["rows"]
    blas = json.loads(Path(args.cublas).read_text()) if args.cublas and Path(args.cublas).is_file() else {}
    per: dict = {}
    for r in rows:
        base, _, label = r["name"].partition("@")
        tf = (r.get("tflops") or {})
        if r.get("agree") and "dsl" in tf:
            per.setdefault(base, []).append((tf["dsl"], label, tf.get("cutlass")))
    print("TFLOP/s; DSL kernels per protocol (validated: agree with the float32 reference and the C++ kernel)")
    print(f"{'problem':24} {'best protocol':>20} {'worst protocol':>20} {'C++ today':>10} {'cuBLAS':>8}")
    for base, xs in sorted(per.items()):
        xs.sort(reverse=True)
        cb = blas.get(base, {}).get("tflops", float("nan"))
        print(f"{base:24} {xs[0][1]:>12} {xs[0][0]:7.1f} {xs[-1][1]:>12} {xs[-1][0]:7.1f} "
              f"{xs[0][2] or float('nan'):10.1f} {cb:8.1f}")
    bad = [r["name"] for r in rows if not r.get("agree")]
    if bad:
        print("not validated or not run (left out of the table):", ", ".join(bad))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--suite", default=str(REPO / "bench" / "suite.toml"))
    p.add_argument("--out", default=str(REPO / "out" / "temporal"))
    p.add_argument("--only", nargs="*")
    c = sub.add_parser("cublas")
    c.add_argument("--out", default=str(REPO / "out" / "temporal"))
    c.add_argument("--json", required=True)
    c.add_argument("--iters", type=int, default=50)
    c.add_argument("--warmup", type=int, default=10)
    t = sub.add_parser("table")
    t.add_argument("result")
    t.add_argument("--cublas")
    args = ap.parse_args(argv)
    return {"prepare": prepare, "cublas": cublas, "table": table}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
