"""CuTe DSL vs CUTLASS C++: the same configuration through both backends, same inputs, same timing.

Two steps, because the DSL is installed only here and the GPU machine has only torch and nvcc:

  here:        python bench/dsl_compare.py prepare [--suite bench/suite.toml] [--out out/dsl]
               For every suite problem: pick one configuration both backends can express (the searched
               kernel's, from generated/sm90a/<problem>/manifest.json, when the DSL takes it; otherwise the
               first legal one of a short fixed list), build the DSL kernel.so here (AOT, no GPU) and render
               the C++ kernel.cu of the same configuration. Writes out/dsl/plan.json and one directory per
               problem: dsl/ (kernel.so, kernel.py, abi.cpp, manifest.json, build.json) and cutlass/
               (kernel.cu, manifest.json). Problems neither configuration fits are listed with the reasons.

  GPU machine: python bench/dsl_compare.py run [--out out/dsl]        (carry out/dsl; writes $OUT/dsl_compare.json)
               Builds the C++ kernels (cutegen.build, its cache: CUTEGEN_CACHE), then per problem runs both
               libraries on the same random inputs (uniform [-1, 1), quantized to the operand types), checks
               each against a float32 reference and against each other within the dtype's tolerance
               (cutegen.runner.tolerance), and times both with CUDA events: median of --iters (>= 50) runs
               after --warmup runs, the two backends interleaved per round.

Neither step imports egglog or the search.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _import_cutegen():
    """cutegen from the working tree, mirroring pyproject's package mapping when not installed."""
    try:
        import cutegen.problem  # noqa: F401
        return
    except ImportError:
        pass
    import tempfile
    stage = Path(tempfile.mkdtemp(prefix="cutegen-pkg-"))
    (stage / "cutegen").mkdir()
    for f in (REPO / "cutegen").iterdir():
        (stage / "cutegen" / f.name).symlink_to(f)
    for sub in ("legality", "search", "templates"):
        (stage / "cutegen" / sub).symlink_to(REPO / sub)
    sys.path.insert(0, str(stage))


# Fallback configurations, tried in order when the searched one is not expressible by the DSL.
FALLBACKS = (
    {"tile_shape": (128, 256, 64), "cluster_shape": (1, 2, 1)},
    {"tile_shape": (128, 128, 64), "cluster_shape": (1, 1, 1)},
    {"tile_shape": (128, 128, 128), "cluster_shape": (1, 1, 1)},
    {"tile_shape": (64, 128, 64), "cluster_shape": (1, 1, 1), "mainloop_schedule": "warp_specialized",
     "epilogue_schedule": "tma_warp_specialized"},
)


def _candidates(problem):
    from cutegen.config import KernelConfig
    picked = REPO / "generated" / problem.target / problem.name / "manifest.json"
    if picked.is_file():
        doc = json.loads(picked.read_text())
        yield "searched", KernelConfig.from_dict(doc["config"])
    for fb in FALLBACKS:
        yield "fallback", KernelConfig(**fb)


def choose(problem):
    """(origin, completed config, []) for the first candidate both backends take, or (None, None, reasons)."""
    from cutegen import dsl
    from cutegen.errors import CutegenError
    from cutegen.render import check_legality, complete_config
    reasons = []
    for origin, cfg in _candidates(problem):
        try:
            full = complete_config(problem, cfg)
            check_legality(problem, full)
        except CutegenError as e:
            reasons.append(f"{origin} {cfg.short_name()}: C++ refuses: {e}")
            continue
        why = dsl.dsl_supports(problem, full)
        if why:
            reasons.append(f"{origin} {full.short_name()}: DSL refuses: {'; '.join(why)}")
            continue
        return origin, full, reasons
    return None, None, reasons


def prepare(args) -> int:
    _import_cutegen()
    from cutegen import dsl
    from cutegen.suites import load_suite
    from cutegen.render import render
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = {"suite": str(args.suite), "cute_dsl": dsl.dsl_version(), "problems": []}
    # A C++ kernel takes M, N, K, batch, alpha and beta at run time: problems that differ only in those
    # share one library (one nvcc run on the GPU machine instead of one per problem).
    cutlass_dirs: dict[str, Path] = {}
    for name, problem in load_suite(args.suite):
        if args.only and name not in args.only:
            continue
        origin, cfg, reasons = choose(problem)
        entry = {"name": name, "problem": problem.to_dict()}
        if cfg is None:
            entry["skipped"] = reasons
            print(f"{name}: SKIPPED, no configuration both backends express", flush=True)
            plan["problems"].append(entry)
            continue
        d = out / name
        start = time.monotonic()
        try:
            so = dsl.build_dsl(problem, cfg, d / "dsl")
        except Exception as e:  # a build failure is a finding: record it, go on
            entry.update(config=cfg.to_dict(), origin=origin, dsl_build_error=str(e)[-2000:])
            print(f"{name}: DSL BUILD FAILED: {str(e)[-300:]}", flush=True)
            plan["problems"].append(entry)
            continue
        wall = time.monotonic() - start
        generic = {k: v for k, v in problem.to_dict().items() if k not in ("m", "n", "k", "batch", "alpha", "beta")}
        key = json.dumps({"problem": generic, "config": cfg.to_dict()}, sort_keys=True)
        if key not in cutlass_dirs:
            cutlass_dirs[key] = d / "cutlass"
            render(problem, cfg, "cutlass").write(d / "cutlass")
        build = json.loads((d / "dsl" / "build.json").read_text())
        entry.update(config=cfg.to_dict(), config_name=cfg.short_name(), origin=origin, not_taken=reasons,
                     dsl_library=str(so.relative_to(out)), cutlass_dir=str(cutlass_dirs[key].relative_to(out)),
                     dsl_compile_here=build["timings"], dsl_build_wall_s=round(wall, 2),
                     dsl_library_bytes=build["library_bytes"])
        t = build["timings"]
        print(f"{name}: {origin} {cfg.short_name()}: DSL compile {t['compile_s']} s + export {t['export_s']} s "
              f"+ link {t['link_s']} s, {build['library_bytes']} bytes", flush=True)
        plan["problems"].append(entry)
    (out / "plan.json").write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    total = sum(p.get("dsl_library_bytes", 0) for p in plan["problems"])
    print(f"wrote {out / 'plan.json'}; DSL libraries {total / 2**20:.1f} MiB to carry", flush=True)
    return 0


# --- the GPU side ----------------------------------------------------------------------------------
TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "e4m3": "float8_e4m3fn",
                "e5m2": "float8_e5m2"}


def _storage(torch, rows, cols, contiguous_cols, dtype, batch, rand, device):
    """A (batch, rows, cols) logical matrix stored packed, K- or MN-contiguous; returns (logical view, ld)."""
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    shape = (batch, rows, cols) if contiguous_cols else (batch, cols, rows)
    if rand:
        x = (torch.rand(shape, device=device, dtype=torch.float32) * 2 - 1).to(tdt)
    else:
        x = torch.full(shape, float("nan"), device=device, dtype=torch.float32).to(tdt)
    view = x if contiguous_cols else x.transpose(1, 2)
    return x, view, (cols if contiguous_cols else rows)


def _rel_err(torch, got, ref):
    got, ref = got.float(), ref.float()
    if not torch.isfinite(got).all():
        return float("inf")
    return (torch.linalg.norm(got - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


def run(args) -> int:
    # As bench/run_gpu.sh sets them: the carried CUTLASS headers and the shared build cache, so the
    # C++ kernels the benchmark already built are cache hits here.
    headers = REPO / "oracles" / ".cutlass"
    if "CUTEGEN_CUTLASS_INCLUDE" not in os.environ and (headers / "include").is_dir():
        os.environ["CUTEGEN_CUTLASS_INCLUDE"] = str(headers)
    os.environ.setdefault("CUTEGEN_CACHE", "/tmp/cutegen-cache")
    _import_cutegen()
    import torch
    from cutegen import abi
    from cutegen.build import build
    from cutegen.problem import GemmProblem
    from cutegen.runner import tolerance
    out = Path(args.out)
    plan = json.loads((out / "plan.json").read_text())
    dest = Path(os.environ.get("OUT", out))
    dest.mkdir(parents=True, exist_ok=True)
    cutlass_dirs = sorted({e["cutlass_dir"] for e in plan["problems"] if "dsl_library" in e})
    print(f"building {len(cutlass_dirs)} C++ kernels (cutegen.build, --jobs {args.jobs})", flush=True)
    summary = build([out / c for c in cutlass_dirs], jobs=args.jobs, timeout=args.build_timeout)
    cpp_builds = {str(r.name): r for r in summary.results} if hasattr(summary, "results") else {}
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False   # the float32 reference is float32
    rows = []
    for e in plan["problems"]:
        row = {"name": e["name"], "problem": e["problem"], "config": e.get("config"),
               "config_name": e.get("config_name"), "origin": e.get("origin")}
        rows.append(row)
        if "dsl_library" not in e:
            row["skipped"] = e.get("skipped") or e.get("dsl_build_error")
            continue
        row["dsl_compile_here_s"] = e["dsl_compile_here"]
        cdir = out / e["cutlass_dir"]
        res = next((r for k, r in cpp_builds.items() if k.endswith(e["cutlass_dir"]) or k == str(cdir)), None)
        if res is not None:
            row["cutlass_build"] = {"status": res.status, "seconds": round(res.seconds, 1)}
        if not (cdir / "kernel.so").is_file():
            row["skipped"] = f"C++ kernel did not build: {getattr(res, 'message', '')[-500:]}"
            continue
        try:
            row.update(_compare(torch, abi, GemmProblem.from_dict(e["problem"]), out / e["dsl_library"],
                                cdir / "kernel.so", tolerance, device, args))
        except Exception as ex:  # record and go on with the next problem
            row["error"] = f"{type(ex).__name__}: {ex}"
        print(json.dumps({k: row.get(k) for k in ("name", "config_name", "agree", "tflops", "error",
                                                   "skipped")}), flush=True)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": time.strftime("%Y-%m-%d"), "cute_dsl": plan.get("cute_dsl"), "iters": args.iters,
              "warmup": args.warmup, "method": "CUDA events, median per backend, backends interleaved per round",
              "rows": rows}
    (dest / "dsl_compare.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"\n{'problem':44} {'config':40} {'DSL TF/s':>9} {'C++ TF/s':>9} {'agree':>6} {'DSL compile here':>17}")
    for r in rows:
        tf = r.get("tflops") or {}
        comp = (r.get("dsl_compile_here_s") or {}).get("compile_s")
        print(f"{r['name'][:44]:44} {str(r.get('config_name'))[:40]:40} {tf.get('dsl', float('nan')):9.1f} "
              f"{tf.get('cutlass', float('nan')):9.1f} {str(r.get('agree', '-')):>6} {str(comp):>17}")
    print(f"wrote {dest / 'dsl_compare.json'}")
    return 0


def _compare(torch, abi, problem, dsl_so, cpp_so, tolerance, device, args) -> dict:
    libs = {"dsl": abi.bind(ctypes.CDLL(str(dsl_so))), "cutlass": abi.bind(ctypes.CDLL(str(cpp_so)))}
    m, n, k, batch = problem.m, problem.n, problem.k, problem.batch
    torch.manual_seed(0)
    a_st, a, lda = _storage(torch, m, k, problem.a_k_major, problem.dtype_a, batch, True, device)
    b_st, b, ldb = _storage(torch, k, n, not problem.b_k_major, problem.dtype_b, batch, True, device)
    c_row = problem.layout_c == "row"
    c_st = c = None
    ldc = n if c_row else m
    if problem.dtype_c != "void":
        c_st, c, ldc = _storage(torch, m, n, c_row, problem.dtype_c, batch, True, device)
    bias = (torch.rand(m, device=device) * 2 - 1).to(getattr(torch, TORCH_DTYPES[problem.dtype_d])) \
        if problem.bias else None
    alpha, beta = problem.alpha, (problem.beta if problem.dtype_c != "void" else 0.0)
    ref = alpha * torch.matmul(a.float(), b.float())
    if c is not None and beta != 0.0:
        ref = ref + beta * c.float()
    if bias is not None:
        ref = ref + bias.float()[None, :, None]
    if problem.activation == "relu":
        ref = torch.relu(ref)
    elif problem.activation == "gelu":
        ref = torch.nn.functional.gelu(ref)
    stream = torch.cuda.current_stream().cuda_stream
    outs, timings, alive = {}, {}, []   # alive: D and workspace tensors the timed calls point into
    for name, lib in libs.items():
        d_st, d, ldd = _storage(torch, m, n, c_row, problem.dtype_d, batch, False, device)
        ws_bytes = lib.cutegen_workspace_size(m, n, k, batch)
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=device)
        call = (a_st.data_ptr(), b_st.data_ptr(), c_st.data_ptr() if c_st is not None else None, d_st.data_ptr(),
                m, n, k, batch, lda, ldb, ldc, ldd, a_st[0].numel(), b_st[0].numel(), m * n, m * n,
                alpha, beta, bias.data_ptr() if bias is not None else None, ws.data_ptr(), ws_bytes, stream)
        status = lib.cutegen_gemm(*call)
        torch.cuda.synchronize()
        if status != 0:
            raise RuntimeError(f"{name}: cutegen_gemm returned {status}: {lib.cutegen_last_error().decode()}")
        outs[name] = d.clone()
        timings[name] = call
        alive += [d_st, ws]
    tol = tolerance(problem)
    errs = {name: _rel_err(torch, d, ref) for name, d in outs.items()}
    cross = _rel_err(torch, outs["dsl"], outs["cutlass"])
    # Time: warmup, then rounds alternating the two backends, one event pair per call.
    for _ in range(args.warmup):
        for name, lib in libs.items():
            lib.cutegen_gemm(*timings[name])
    samples = {name: [] for name in libs}
    for _ in range(args.iters):
        for name, lib in libs.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            lib.cutegen_gemm(*timings[name])
            e.record()
            e.synchronize()
            samples[name].append(s.elapsed_time(e))
    med = {name: statistics.median(v) for name, v in samples.items()}
    return {"rel_err_vs_ref": errs, "rel_err_dsl_vs_cutlass": cross, "tolerance": tol,
            "agree": bool(cross <= tol and all(v <= tol for v in errs.values())),
            "median_ms": med, "tflops": {nm: problem.flops / (ms * 1e-3) / 1e12 for nm, ms in med.items()},
            "samples": len(samples["dsl"])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    pp = sub.add_parser("prepare", help="here: build the DSL kernels, render the C++ ones")
    pp.add_argument("--suite", default=str(REPO / "bench" / "suite.toml"))
    pp.add_argument("--out", default=str(REPO / "out" / "dsl"))
    pp.add_argument("--only", action="append", default=[])
    pr = sub.add_parser("run", help="GPU machine: build C++, validate and time both")
    pr.add_argument("--out", default=str(REPO / "out" / "dsl"))
    pr.add_argument("--iters", type=int, default=50)
    pr.add_argument("--warmup", type=int, default=10)
    pr.add_argument("--jobs", type=int, default=16)
    pr.add_argument("--build-timeout", type=float, default=240)
    a = p.parse_args(argv)
    if a.step == "run" and a.iters < 50:
        p.error("--iters: the comparison takes the median of at least 50 runs")
    return prepare(a) if a.step == "prepare" else run(a)


if __name__ == "__main__":
    sys.exit(main())
