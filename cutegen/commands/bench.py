"""``cutegen bench``: the search-picked kernel against cuBLAS and hand-written CUTLASS, per problem.

For every problem of the suite, three contenders run in one process with one method
(``_runner_worker.time_calls``: CUDA events around each call, warm-up, >= 50 timed calls, median,
rotating among input sets that together are several times the L2): the kernel under
``--kernels`` (``<dir>/<problem name>``), cuBLAS through torch on the same dtypes and layouts
(``torch._scaled_mm`` with unit scales for fp8), and the CollectiveBuilder baseline (tile
128x256x64, cluster 2x1x1, cooperative, auto stages) under ``--baselines``. Each contender's result
is verified once against a float32 reference before it is timed. Writes
``<out>/<date>-<device>.json`` and a PNG plot beside it.

With ``--executor dask`` each problem is one GPU task (resource ``GPU=1``) on the cluster's GPU workers;
the libraries travel by content, and each entry records where and when it ran (``ran_on``).

Also runnable without the rest of the CLI: ``python -m cutegen.commands.bench ...``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from .._fields import finite_float
from .._fields import loads_json
from .. import runner as R
from ..core import registry
from ..errors import CutegenError, FieldError
from ..problem import GemmProblem

HELP = "benchmark the generated kernels against cuBLAS and the CUTLASS CollectiveBuilder baseline"

SCHEMA = "cutegen-bench/1"
CONTENDERS = ("cutegen", "cublas", "cutlass_builder")
# Timed when their kernels are given (--nvmmh): nvMatmulHeuristics' first legal pick (cutegen.nvmmh).
OPTIONAL_CONTENDERS = ("nvmmh",)
PEAK_LABEL = "H100 SXM dense bf16/f16 datasheet peak"
BASELINE_CONFIG = {"tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1], "stages": "auto",
                   "mainloop_schedule": "cooperative", "epilogue_schedule": "tma_warp_specialized_cooperative",
                   "tile_scheduler": "persistent"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default=None,
                   help="problem list [bench/suite.toml]; with --op: [[case]] tables of a name and the problem's fields")
    p.add_argument("--kernels", default=None,
                   help="folder of built search-picked kernels, one directory per problem name [generated/sm90a]; "
                        "with --op: the plan folder (--plan writes it)")
    p.add_argument("--baselines", default="generated/baseline/sm90a",
                   help="folder of built CollectiveBuilder baselines [generated/baseline/sm90a]")
    p.add_argument("--nvmmh", metavar="DIR",
                   help="folder of built nvMatmulHeuristics picks, one directory per problem name "
                        "(python -m cutegen.nvmmh --suite ... --out DIR); adds the nvMMH column")
    p.add_argument("--out", default="bench/results", help="where the JSON and PNG go [bench/results]")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="only these suite problems (repeatable)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls per contender [10]")
    p.add_argument("--iters", type=int, default=50, help="timed calls per contender, at least 50 [50]")
    p.add_argument("--l2-multiple", type=int, default=4,
                   help="rotate among input sets totalling at least this many times the L2 [4]")
    p.add_argument("--timeout", type=finite_float, default=240.0, help="seconds per problem before it counts as a hang [240]")
    p.add_argument("--startup-timeout", type=finite_float, default=180.0, help="seconds for the worker to start [180]")
    p.add_argument("--deadline", type=finite_float, default=0.0,
                   help="stop starting new problems after this many seconds (0: none); the rest are reported skipped")
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--skip-failed", metavar="VALIDATE_JSON",
                   help="do not time libraries that hung or crashed in this `cutegen validate --json` report")
    p.add_argument("--versions-from", metavar="DIR",
                   help="CUTLASS include folder to read the version from (default: $CUTEGEN_CUTLASS_INCLUDE or the wheel)")
    from .. import executor
    executor.add_arguments(p)  # dask: one problem per GPU worker at a time (resource GPU=1)
    g = p.add_argument_group("any operation (--op attention, --op grouped_gemm; cutegen.run.ops)")
    g.add_argument("--op", default="gemm",
                   help="the operation (default gemm); another is timed through its runner, kernels and peers of a "
                        "problem in one worker process on the same inputs (attention: SDPA cuDNN and flash, the "
                        "CUTLASS 88 example's kernels; grouped_gemm: torch._grouped_mm, a loop of torch.matmul, "
                        "padded bmm); --timeout is per problem; --iters, --warmup and --l2-multiple are GEMM's (the "
                        "runner times in rounds, --min-ms)")
    g.add_argument("--problem", action="append", default=[], metavar="JSON",
                   help="with --op: one problem as a JSON object (repeatable; besides or instead of --suite)")
    g.add_argument("--plan", action="store_true",
                   help="with --op: search and render the problems' kernels into --kernels and stop (no GPU; needs "
                        "egglog): the pick, --top-k runners-up and the operation's peer kernels")
    g.add_argument("--top-k", type=int, default=1, help="with --plan: the search's picks rendered per problem [1]")
    g.add_argument("--build", action="store_true", help="with --op: build the kernels that have no library first")
    g.add_argument("--jobs", type=int, default=2, help="with --build: nvcc jobs at once [2]")
    g.add_argument("--db", metavar="PATH",
                   help="with --op: the results database the timings are filed in and reused from "
                        "('default': $CUTEGEN_RESULTS_DB or the user cache file; omitted or 'none': no database)")
    g.add_argument("--no-reuse", action="store_true",
                   help="with --op and --db: time every problem even where the database holds it")
    g.add_argument("--validated", nargs="*", metavar="VALIDATE_JSON",
                   help="with --op: time only the kernels that passed in these `cutegen validate --op` reports")
    g.add_argument("--in-process", action="store_true",
                   help="with --op: run the operation's GPU half in this process, not in a watchdog child (a hang or "
                        "fault then ends the run; --timeout is not enforced)")
    g.add_argument("--min-ms", type=finite_float, default=None,
                   help="with --op: milliseconds per timing round (the runner's default otherwise)")


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------

from ..suites import load_suite, select_suite  # noqa: E402,F401 - the one reader of suite files


def find_kernel(root: Path, problem: GemmProblem) -> tuple[R.KernelInfo | None, str]:
    """The built kernel for ``problem`` under ``root`` (``root/<problem name>``), or why there is none."""
    d = Path(root) / problem.name
    if not d.is_dir():
        return None, f"no kernel directory {d}"
    try:
        info = R.load_kernel_info(d)
    except (CutegenError, ValueError) as e:
        return None, str(e)
    if info.problem != problem:
        return None, f"{d}/manifest.json is for another problem ({info.problem.name})"
    return info, ""


# ------------------------------------------------------------------------------------------------
# Arithmetic on the results
# ------------------------------------------------------------------------------------------------

# Datasheet HBM bandwidth (bytes/s) by device, matched in order on the device name (most specific
# first): the floor of a memory-bound GEMM is the bytes it must move over this.
HBM_BANDWIDTH = (("H200", 4.8e12, "H200 HBM3e datasheet 4.8 TB/s"),
                 ("H100 PCIe", 2.0e12, "H100 PCIe HBM2e datasheet 2.0 TB/s"),
                 ("H100 NVL", 3.9e12, "H100 NVL HBM3 datasheet 3.9 TB/s"),
                 ("H100", 3.35e12, "H100 SXM HBM3 datasheet 3.35 TB/s"),
                 ("H800", 3.35e12, "H800 SXM HBM3 datasheet 3.35 TB/s"),
                 ("H20", 4.0e12, "H20 HBM3 datasheet 4.0 TB/s"))
FLOOR_MAX_M = 16        # the fraction of the HBM floor is reported for M (or N) up to this


def hbm_bandwidth(device_name: str | None) -> tuple[float | None, str | None]:
    """(bytes/s, label) of the device's HBM from the datasheet table; (None, None) when unknown."""
    name = (device_name or "").upper()
    for key, bw, label in HBM_BANDWIDTH:
        if key.upper() in name:
            return bw, label
    return None, None


def hbm_bytes(problem: dict) -> int:
    """Bytes a GEMM must move through HBM at least: A, B and D once, C once when beta != 0."""
    from ..dtypes import DTYPES
    m, n, k, b = problem["m"], problem["n"], problem["k"], problem.get("batch", 1)
    size = lambda dt: DTYPES[dt].bits // 8 if dt != "tf32" else 4  # noqa: E731 - tf32 is stored as f32
    total = (m * k * size(problem["dtype_a"]) + k * n * size(problem["dtype_b"]) + m * n * size(problem["dtype_d"])) * b
    if problem.get("dtype_c", "void") != "void" and problem.get("beta", 0.0) != 0.0:
        total += m * n * size(problem["dtype_c"]) * b
    return total


def _ratio_text(entry: dict) -> str:
    """cutegen's time against cuBLAS's for a progress line (the medians, as ``derive`` ratios them)."""
    times = {c: r.get("median_ms") for c, r in entry.get("results", {}).items() if r.get("status") == "ok"}
    ours, cublas = times.get("cutegen"), times.get("cublas")
    return f"{cublas / ours:.3f}x cuBLAS" if ours and cublas else "no ratio to cuBLAS"


def derive(entry: dict, peak_tflops: float = R.H100_SXM_DENSE_BF16_PEAK_TFLOPS,
           hbm_bytes_per_s: float | None = None) -> dict:
    """Add TFLOP/s per contender, the ratios of cutegen to both baselines and the fraction of peak;
    where graph times exist, the graph-timed ratio to cuBLAS; for M <= FLOOR_MAX_M (given the device's
    HBM bandwidth) the HBM floor and the fraction of it each contender reaches (graph time if any)."""
    flops = entry["flops"]
    for res in entry["results"].values():
        if res.get("status") == "ok" and res.get("median_ms"):
            res["tflops"] = R.tflops(flops, res["median_ms"] * 1e-3)
    get = lambda name: entry["results"].get(name, {}).get("tflops")  # noqa: E731
    ours, cublas, cutlass = get("cutegen"), get("cublas"), get("cutlass_builder")
    entry["ratio_vs_cublas"] = ours / cublas if ours and cublas else None
    entry["ratio_vs_cutlass"] = ours / cutlass if ours and cutlass else None
    if "nvmmh" in entry["results"]:
        nv = get("nvmmh")
        entry["ratio_vs_nvmmh"] = ours / nv if ours and nv else None
    entry["fraction_of_peak"] = {name: entry["results"][name]["tflops"] / peak_tflops
                                 for name in entry["results"] if entry["results"][name].get("tflops")}
    graph = lambda name: entry["results"].get(name, {}).get("graph_median_ms")  # noqa: E731
    g_ours, g_cublas = graph("cutegen"), graph("cublas")
    entry["ratio_vs_cublas_graph"] = g_cublas / g_ours if g_ours and g_cublas else None
    prob = entry.get("problem") or {}
    if hbm_bytes_per_s and prob and min(prob.get("m", 0), prob.get("n", 0)) <= FLOOR_MAX_M:
        floor_ms = hbm_bytes(prob) / hbm_bytes_per_s * 1e3
        entry["hbm_floor_ms"] = floor_ms
        entry["fraction_of_hbm_floor"] = {
            name: floor_ms / (res.get("graph_median_ms") or res["median_ms"])
            for name, res in entry["results"].items() if res.get("status") == "ok" and res.get("median_ms")}
    return entry


def summarize(entries: list[dict], target_ratio: float = 0.9) -> dict:
    """Geometric means of the ratios over the problems where both sides ran, overall and per input type."""
    def geo(key, subset):
        vals = [e[key] for e in subset if e.get(key)]
        g = R.geometric_mean(vals)
        return {"geomean": g, "n": len(vals)}

    groups: dict[str, list[dict]] = {}
    for e in entries:
        groups.setdefault(e["problem"]["dtype_a"], []).append(e)
    out = {
        "problems": len(entries),
        "vs_cublas": geo("ratio_vs_cublas", entries),
        "vs_cutlass": geo("ratio_vs_cutlass", entries),
        "vs_cublas_graph": geo("ratio_vs_cublas_graph", entries),
        "small_m_vs_cublas_graph": geo("ratio_vs_cublas_graph", [e for e in entries if min(
            e["problem"].get("m", 0), e["problem"].get("n", 0)) <= FLOOR_MAX_M]),
        "vs_nvmmh": geo("ratio_vs_nvmmh", entries),
        "by_dtype": {dt: {"vs_cublas": geo("ratio_vs_cublas", es), "vs_cutlass": geo("ratio_vs_cutlass", es)}
                     for dt, es in sorted(groups.items())},
        "below_target_vs_cublas": sorted(e["name"] for e in entries
                                         if e.get("ratio_vs_cublas") is not None and e["ratio_vs_cublas"] < target_ratio),
        "target_ratio": target_ratio,
        "not_measured": sorted(e["name"] for e in entries
                               if e["results"].get("cutegen", {}).get("status") != "ok"),
    }
    for name in CONTENDERS + OPTIONAL_CONTENDERS:
        vals = [e["results"][name]["tflops"] for e in entries if e["results"].get(name, {}).get("tflops")]
        out.setdefault("geomean_tflops", {})[name] = R.geometric_mean(vals)
    return out


def check_result_doc(doc) -> list[str]:
    """What is wrong with a results document (empty when it has the schema bench/plot.py reads)."""
    errs: list[str] = []

    def need(obj, key, types, where):
        if not isinstance(obj, dict) or key not in obj:
            errs.append(f"{where}.{key}: missing")
            return None
        if not isinstance(obj[key], types):
            errs.append(f"{where}.{key}: expected {types}, got {type(obj[key]).__name__}")
            return None
        return obj[key]

    if not isinstance(doc, dict):
        return ["document: expected an object"]
    if doc.get("schema") != SCHEMA:
        errs.append(f"schema: expected {SCHEMA!r}, got {doc.get('schema')!r}")
    need(doc, "date", str, "doc")
    dev = need(doc, "device", dict, "doc")
    if dev is not None:
        need(dev, "name", str, "device")
    ver = need(doc, "versions", dict, "doc")
    if ver is not None:
        for k in ("cutegen", "nvcc", "cutlass", "torch", "driver", "cublas", "python"):
            if k not in ver:
                errs.append(f"versions.{k}: missing")
    meth = need(doc, "method", dict, "doc")
    if meth is not None:
        it = need(meth, "iters", int, "method")
        if isinstance(it, int) and it < 50:
            errs.append(f"method.iters: {it} < 50")
    need(doc, "peak_tflops", (int, float), "doc")
    probs = need(doc, "problems", list, "doc")
    for i, e in enumerate(probs or []):
        w = f"problems[{i}]"
        need(e, "name", str, w)
        need(e, "problem", dict, w)
        fl = need(e, "flops", int, w)
        res = need(e, "results", dict, w)
        for name in CONTENDERS:
            r = need(res or {}, name, dict, f"{w}.results") if res is not None else None
            if r is None:
                continue
            st = need(r, "status", str, f"{w}.results.{name}")
            if st == "ok":
                med = need(r, "median_ms", (int, float), f"{w}.results.{name}")
                tf = need(r, "tflops", (int, float), f"{w}.results.{name}")
                times = need(r, "times_ms", list, f"{w}.results.{name}")
                if isinstance(times, list) and meth and isinstance(meth.get("iters"), int) and len(times) != meth["iters"]:
                    errs.append(f"{w}.results.{name}.times_ms: {len(times)} values, method.iters is {meth['iters']}")
                if isinstance(med, (int, float)) and isinstance(tf, (int, float)) and isinstance(fl, int) and med > 0:
                    expect = fl / (med * 1e-3) / 1e12
                    if not math.isclose(tf, expect, rel_tol=1e-6):
                        errs.append(f"{w}.results.{name}.tflops: {tf} != flops / median ({expect})")
                ver_ = r.get("verify")
                if not isinstance(ver_, dict) or ver_.get("ok") is False:
                    errs.append(f"{w}.results.{name}: timed without a passing verification")
        for k in ("ratio_vs_cublas", "ratio_vs_cutlass"):
            if k not in (e if isinstance(e, dict) else {}):
                errs.append(f"{w}.{k}: missing")
    summ = need(doc, "summary", dict, "doc")
    if summ is not None:
        for k in ("vs_cublas", "vs_cutlass", "below_target_vs_cublas"):
            if k not in summ:
                errs.append(f"summary.{k}: missing")
    return errs


def result_filename(date: _dt.datetime, device_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown-device"
    return f"{date.strftime('%Y-%m-%d')}-{slug}.json"


# ------------------------------------------------------------------------------------------------
# Versions
# ------------------------------------------------------------------------------------------------

def _run_text(cmd, timeout=20) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def nvcc_version() -> str | None:
    m = re.search(r"release [\d.]+, V([\d.]+)", _run_text(["nvcc", "--version"]))
    return m.group(1) if m else None


def driver_version() -> str | None:
    out = _run_text(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).strip()
    return out.splitlines()[0] if out else None


def cutlass_version(include_dir: str | None = None) -> str | None:
    candidates = [include_dir, os.environ.get("CUTEGEN_CUTLASS_INCLUDE")]
    try:
        import cutlass_library  # noqa: F401 - only to find the wheel's headers
        candidates.append(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))
    except ImportError:
        pass
    for inc in candidates:
        if not inc:
            continue
        for base in (Path(inc), Path(inc) / "include"):
            vh = base / "cutlass" / "version.h"
            if vh.is_file():
                text = vh.read_text(errors="replace")
                parts = [re.search(rf"#define CUTLASS_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
                if all(parts):
                    return ".".join(p.group(1) for p in parts)
    return None


def versions(device: dict | None, include_dir: str | None) -> dict:
    from .. import __version__
    device = device or {}
    return {"cutegen": __version__, "nvcc": nvcc_version(), "cutlass": cutlass_version(include_dir),
            "torch": device.get("torch"), "torch_cuda": device.get("torch_cuda"), "cublas": device.get("cublas"),
            "driver": driver_version(), "driver_api": device.get("driver_api"),
            "python": platform.python_version()}


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------

def run_op(args: argparse.Namespace) -> int:
    """``cutegen bench --op NAME``: plan (--plan), or build, time and file an operation other than GEMM."""
    from ..run import ops
    if getattr(args, "executor", "local") != "local":
        raise FieldError("--executor", f"--op {args.op} runs on this machine's GPU only (no cluster executor yet)")
    if args.nvmmh or args.skip_failed:
        raise FieldError("--nvmmh" if args.nvmmh else "--skip-failed", "a GEMM option; --op takes --validated")
    cases = ops.load_cases(args.op, args.suite, args.problem, args.only)
    if not args.kernels:
        raise FieldError("--kernels", f"give the plan folder of --op {args.op} (cutegen bench --op {args.op} --plan "
                                      f"--kernels DIR writes one)")
    if args.plan:
        ops.plan(args.op, cases, args.kernels, top_k=args.top_k)
        return 0
    if args.build:
        index = ops.load_index(args.kernels)
        dirs = [k["dir"] for c in cases for k in ops.kernels_for(args.kernels, index, c)[0].values()]
        ops.build_dirs(dirs, args.jobs)
    db = None
    if args.db and args.db != "none":
        from ..results import ResultsDB
        db = ResultsDB(None if args.db == "default" else args.db, seed=None)
    try:
        options = {"min_ms": args.min_ms} if args.min_ms else {}
        doc, _ = ops.bench(args.op, cases, args.kernels, args.out, db=db,
                           validated=ops.passed_in(args.validated or []), deadline=args.deadline,
                           options=options, plot=not args.no_plot, suite=str(args.suite or ""),
                           reuse=not args.no_reuse, timeout=args.timeout, startup_timeout=args.startup_timeout,
                           isolate=not args.in_process)
    finally:
        if db is not None:
            db.close()
    return 0 if not doc["summary"]["not_measured"] else 1


def run(args: argparse.Namespace) -> int:
    if getattr(args, "op", "gemm") != "gemm":
        return run_op(args)
    args.suite = args.suite or "bench/suite.toml"
    args.kernels = args.kernels or "generated/sm90a"
    if args.iters < 50:
        raise FieldError("--iters", f"{args.iters} is below 50 (issue 5 asks for at least 50 timed runs)")
    if args.warmup < 1:
        raise FieldError("--warmup", f"{args.warmup} is below 1")
    suite = select_suite(args.suite, args.only)
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    entries: list[dict] = []
    device = None
    from .._atomic import atomic_write, ensure_directory
    out_dir = ensure_directory(args.out, "--out")
    vers = None

    def write() -> tuple[dict, Path]:
        # Written after every problem, so a run cut short still leaves every figure measured so far.
        done = [dict(e) for e in entries]
        left = [skipped_entry(n, p, "not reached") for n, p in suite[len(entries):]]
        doc = make_document(done + left, device, started, vers, warmup=args.warmup, iters=args.iters,
                            l2_multiple=args.l2_multiple, suite=str(args.suite), seconds=time.monotonic() - t0)
        path = out_dir / result_filename(started, doc["device"]["name"])
        atomic_write(path, (json.dumps(doc, indent=1, default=R.json_default) + "\n").encode())
        return doc, path

    if getattr(args, "executor", "local") != "local":
        from .. import executor as X
        with X.from_args(args) as ex:
            entries[:], device = bench_remote(ex, suite, args, t0)
            print(ex.summary.text(), file=sys.stderr)
        vers = versions(device, args.versions_from)
    from ..progress import Steps
    worker = R.Worker(startup_timeout=args.startup_timeout, init={"op": "init"})
    try:
        with Steps("bench", len(suite) - len(entries)) as steps:   # a bar on a terminal, a line per problem
            for name, problem in suite[len(entries):]:
                if args.deadline and time.monotonic() - t0 > args.deadline:
                    entries.append(skipped_entry(name, problem, f"deadline of {args.deadline:g} s reached"))
                    print(f"SKIP  {name}: deadline reached", flush=True)
                    steps.step(f"{name}: skipped")
                    continue
                entries.append(bench_problem(worker, name, problem, args))
                steps.step(f"{name}: {_ratio_text(entries[-1])}")
                if worker.init_reply is not None and worker.init_reply.ok:
                    device = worker.init_reply.value
                if vers is None and device is not None:
                    vers = versions(device, args.versions_from)
                write()
    finally:
        worker.close()
    if vers is None:
        vers = versions(device, args.versions_from)
    doc, path = write()
    print(f"wrote {path}")
    if not args.no_plot:
        png = path.with_suffix(".png")
        try:
            plot_module().plot(doc, png)
            print(f"wrote {png}")
        except ImportError as e:
            print(f"plot skipped ({e}); run: python bench/plot.py {path}", file=sys.stderr)
    print(format_table(doc))
    return 0 if all(e["results"].get("cutegen", {}).get("status") == "ok" for e in entries) else 1


def make_document(entries: list[dict], device: dict | None, started: _dt.datetime, versions_: dict, *,
                  warmup: int, iters: int, l2_multiple: int, suite: str, seconds: float) -> dict:
    """The results file: device, versions, method, every figure, the derived ratios and the summary."""
    device = device or {}
    hbm_bw, hbm_label = hbm_bandwidth(device.get("name"))
    for e in entries:
        derive(e, hbm_bytes_per_s=hbm_bw)
    return {
        "schema": SCHEMA,
        "date": started.isoformat(timespec="seconds"),
        "device": {"name": device.get("name") or "unknown",
                   **{k: device.get(k) for k in ("compute_capability", "sm_count", "memory_gib", "l2_bytes")}},
        "versions": versions_,
        "method": {"timer": "CUDA events around each call, host queue primed behind a spin kernel",
                   "warmup": warmup, "iters": iters, "statistic": "median", "l2_multiple": l2_multiple,
                   "rotation": "input sets (A, B, C, D) rotated per call; together >= l2_multiple x L2",
                   "verification": "each contender once against a float32 reference before timing",
                   "baseline_config": BASELINE_CONFIG,
                   "cublas": "torch.matmul/addmm/baddbmm on the same strided views; torch._scaled_mm "
                             "(unit scales) for fp8"},
        "peak_tflops": R.H100_SXM_DENSE_BF16_PEAK_TFLOPS,
        "peak_label": PEAK_LABEL,
        "hbm_bytes_per_s": hbm_bw,
        "hbm_label": hbm_label,
        "suite": suite,
        "problems": entries,
        "summary": summarize(entries),
        "seconds": round(seconds, 1),
    }


def skipped_entry(name: str, problem: GemmProblem, reason: str) -> dict:
    return {"name": name, "problem": problem.to_dict(), "flops": problem.flops,
            "results": {c: {"status": "skipped", "reason": reason} for c in CONTENDERS}}


def failed_in_validation(path) -> dict[str, str]:
    """library path -> verdict, for the kernels a validate report saw hang or crash."""
    if not path:
        return {}
    try:
        doc = loads_json(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise FieldError("--skip-failed", f"cannot read {path}: {e}") from None
    return {str(Path(k["library"]).resolve()): k["verdict"] for k in doc.get("kernels", [])
            if k.get("verdict") in ("hang", "crash") and k.get("library")}


def bench_problem(worker: R.Worker, name: str, problem: GemmProblem, args) -> dict:
    task, kernels = problem_request(problem, args)
    return entry_from_reply(name, problem, worker.request(task, args.timeout), kernels)


def problem_request(problem: GemmProblem, args) -> tuple[dict, dict]:
    """The worker request that benchmarks one problem, and the kernels it names (contender -> KernelInfo)."""
    ours, why_ours = find_kernel(Path(args.kernels), problem)
    base, why_base = find_kernel(Path(args.baselines), problem)
    failed = failed_in_validation(getattr(args, "skip_failed", None))
    if ours and str(ours.library) in failed:
        ours, why_ours = None, f"not timed: {failed[str(ours.library)]} in validation"
    if base and str(base.library) in failed:
        base, why_base = None, f"not timed: {failed[str(base.library)]} in validation"
    contenders = [
        {"name": "cutegen", "library": str(ours.library) if ours else None, "reason": why_ours,
         **({"launch_plan": ours.manifest["launch_plan"]} if ours and ours.manifest.get("launch_plan") else {})},
        # the peers the worker times in-process come from the problem's operation (GEMM: cuBLAS)
        *({"name": peer} for peer in registry.peers(problem)),
        {"name": "cutlass_builder", "library": str(base.library) if base else None, "reason": why_base},
    ]
    nv = None
    if getattr(args, "nvmmh", None):
        nv, why_nv = find_kernel(Path(args.nvmmh), problem)
        if nv and str(nv.library) in failed:
            nv, why_nv = None, f"not timed: {failed[str(nv.library)]} in validation"
        contenders.append({"name": "nvmmh", "library": str(nv.library) if nv else None, "reason": why_nv})
    task = {"op": "bench_problem", "problem": problem.to_dict(), "contenders": contenders,
            "warmup": args.warmup, "iters": args.iters, "l2_multiple": args.l2_multiple}
    kernels = {"cutegen": ours, "cutlass_builder": base}
    if getattr(args, "nvmmh", None):
        kernels["nvmmh"] = nv
    return task, kernels


def entry_from_reply(name: str, problem: GemmProblem, reply: "R.Reply", kernels: dict) -> dict:
    if reply.ok:
        entry = dict(reply.value)
    else:
        what = {"hang": "HANG", "crash": "CRASH"}.get(reply.status, "ERROR")
        msg = reply.message.strip().splitlines()[0] if reply.message else reply.status
        print(f"{what} {name}: {msg}", flush=True)
        entry = skipped_entry(name, problem, f"{reply.status}: {msg}")
        for c in entry["results"].values():
            c["status"] = reply.status
    entry["name"] = name
    entry.pop("device", None)
    entry["kernels"] = {c: k.to_dict() if k else None for c, k in kernels.items()}
    for c, res in entry["results"].items():
        if res.get("status") != "ok":
            print(f"  {name} {c}: {res.get('status')} {res.get('reason', '')}", flush=True)
    return entry


# ------------------------------------------------------------------------------------------------
# On a cluster: one problem per GPU task (cutegen.executor), libraries shipped by content
# ------------------------------------------------------------------------------------------------

_GPU_CHILD: dict = {}


def remote_bench_task(item: dict) -> dict:
    """Runs on a GPU worker: the same request, in this worker's own watchdog child (kept between tasks)."""
    import multiprocessing
    import threading
    from ..executor.tasks import materialize
    if multiprocessing.current_process().daemon:
        # The watchdog child cannot start from a daemonic process (a nanny's worker by default).
        raise CutegenError("this Dask worker is daemonic and cannot start the watchdog child: start GPU workers "
                           "with DASK_DISTRIBUTED__WORKER__DAEMON=False (or --no-nanny)")
    if item["deadline_epoch"] and time.time() > item["deadline_epoch"]:
        return {"status": "skipped", "message": "deadline reached before this problem started"}
    task = dict(item["task"])
    task["contenders"] = [dict(c) for c in task["contenders"]]
    for c in task["contenders"]:
        if c.get("library"):
            sha, data = item["libraries"][c["library"]]
            c["library"] = str(materialize(sha, data))
    lock = _GPU_CHILD.setdefault("lock", threading.Lock())
    with lock:
        worker = _GPU_CHILD.get("worker")
        if worker is None:
            worker = _GPU_CHILD["worker"] = R.Worker(startup_timeout=item["startup_timeout"], init={"op": "init"})
        reply = worker.request(task, item["timeout"])
        device = worker.init_reply.value if worker.init_reply is not None and worker.init_reply.ok else None
    return {"status": reply.status, "value": reply.value, "message": reply.message, "device": device}


def bench_remote(ex, suite, args, t0: float) -> tuple[list[dict], dict | None]:
    """Every problem as a GPU task of ``ex``; entries in suite order, and the device of the first reply."""
    from ..executor.tasks import library_bytes
    items, kernels = [], []
    for name, problem in suite:
        task, kernels_ = problem_request(problem, args)
        libs = {c["library"]: library_bytes(c["library"]) for c in task["contenders"] if c.get("library")}
        items.append({"task": task, "libraries": libs, "timeout": args.timeout,
                      "startup_timeout": args.startup_timeout,
                      "deadline_epoch": time.time() - (time.monotonic() - t0) + args.deadline if args.deadline else 0})
        kernels.append(kernels_)
    outcomes = ex.map_gpu(remote_bench_task, items, names=[n for n, _ in suite],
                          details=[{"problem": p.to_dict()} for _, p in suite])
    entries, device = [], None
    for (name, problem), named, o in zip(suite, kernels, outcomes):
        if o.ok and o.value["status"] == "skipped":
            entries.append(skipped_entry(name, problem, o.value["message"]))
            continue
        reply = (R.Reply(o.value["status"], o.value["value"], o.value["message"]) if o.ok
                 else R.Reply("crash", None, f"worker lost: {o.error}"))
        device = device or (o.value.get("device") if o.ok else None)
        entry = entry_from_reply(name, problem, reply, named)
        # Which GPU timed it and when (worker clock): no GPU may time two problems at once (issue 15).
        entry["ran_on"] = {"worker": o.worker, "host": o.host, "gpu": o.gpu, "started": o.started,
                           "finished": o.finished, "retried": o.retried}
        entries.append(entry)
    return entries, device


def plot_module():
    """bench/plot.py, loaded by path (bench/ is not a package)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "plot.py"
    if not path.is_file():
        raise ImportError(f"{path} not found")
    spec = importlib.util.spec_from_file_location("cutegen_bench_plot", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def format_table(doc: dict) -> str:
    """The closing table: TFLOP/s of each contender, the ratios, and the geometric means."""
    nv = any("nvmmh" in e["results"] for e in doc["problems"])   # the nvMMH columns only when it ran
    rows = [("problem", "cutegen", "cuBLAS", "CUTLASS") + (("nvMMH",) if nv else ()) +
            ("x cuBLAS", "x CUTLASS") + (("x nvMMH",) if nv else ()) + ("% peak", "x cuBLAS graph", "% HBM floor")]
    names = CONTENDERS + (OPTIONAL_CONTENDERS if nv else ())
    for e in doc["problems"]:
        t = {c: e["results"].get(c, {}).get("tflops") for c in names}
        st = {c: e["results"].get(c, {}).get("status") for c in names}
        cell = lambda c: _fmt(t[c]) if t[c] is not None else (st[c] or "-")  # noqa: E731
        frac = (e.get("fraction_of_peak") or {}).get("cutegen")
        floor = ((e.get("fraction_of_hbm_floor") or {}).get("cutegen") or 0) * 100 or None
        rows.append((e["name"], cell("cutegen"), cell("cublas"), cell("cutlass_builder")) +
                    ((cell("nvmmh"),) if nv else ()) +
                    (_fmt(e.get("ratio_vs_cublas"), ".3f"), _fmt(e.get("ratio_vs_cutlass"), ".3f")) +
                    ((_fmt(e.get("ratio_vs_nvmmh"), ".3f"),) if nv else ()) +
                    (_fmt(frac * 100 if frac else None, ".1f"), _fmt(e.get("ratio_vs_cublas_graph"), ".3f"),
                     _fmt(floor, ".1f")))
    s = doc["summary"]
    g = s["geomean_tflops"]
    rows.append(("geomean", _fmt(g.get("cutegen")), _fmt(g.get("cublas")), _fmt(g.get("cutlass_builder"))) +
                ((_fmt(g.get("nvmmh")),) if nv else ()) +
                (_fmt(s["vs_cublas"]["geomean"], ".3f"), _fmt(s["vs_cutlass"]["geomean"], ".3f")) +
                ((_fmt((s.get("vs_nvmmh") or {}).get("geomean"), ".3f"),) if nv else ()) +
                ("", _fmt((s.get("vs_cublas_graph") or {}).get("geomean"), ".3f"), ""))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    for dt, g in s["by_dtype"].items():
        lines.append(f"{dt}: geomean x cuBLAS {_fmt(g['vs_cublas']['geomean'], '.3f')} over {g['vs_cublas']['n']}, "
                     f"x CUTLASS {_fmt(g['vs_cutlass']['geomean'], '.3f')} over {g['vs_cutlass']['n']}")
    smg = (s.get("small_m_vs_cublas_graph") or {})
    if smg.get("n"):
        lines.append(f"M <= {FLOOR_MAX_M}: graph-timed geomean x cuBLAS {_fmt(smg.get('geomean'), '.3f')} over {smg['n']}"
                     f"; HBM floor against {doc.get('hbm_label') or 'unknown bandwidth'}")
    if s["below_target_vs_cublas"]:
        lines.append(f"below {s['target_ratio']}x cuBLAS: {', '.join(s['below_target_vs_cublas'])}")
    lines.append(f"TFLOP/s held against {doc['peak_tflops']} ({doc.get('peak_label', '')}); device {doc['device']['name']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cutegen bench", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except CutegenError as e:
        print(f"cutegen bench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
