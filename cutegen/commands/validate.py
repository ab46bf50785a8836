"""``cutegen validate``: run built kernels on the GPU against a float32 reference, under a watchdog.

For each kernel (a built directory with manifest.json and the library, or a folder of them): its own
problem size, ragged M/N/K, batches 2 and 3 with padded strides, a sub-tile problem and any
``--shapes``; then refusal probes (misaligned pointers, leading dimensions, extents) that the launch
contract must refuse before launch, with the kernel's own status 1 agreeing. Every request runs in a
spawned child with a timeout: a kernel that does not finish is reported as a hang with its
configuration, the child is killed, and the run goes on with the next kernel.

Also runnable without the rest of the CLI: ``python -m cutegen.commands.validate ...``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .._fields import finite_float
from .. import runner as R
from ..core import registry
from ..errors import CutegenError

HELP = "validate built kernels on the GPU (random inputs vs float32 reference, ragged shapes, watchdog)"

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernels", nargs="*", metavar="KERNEL_DIR_OR_SO",
                   help="built kernel directories (manifest.json + library), libraries, or folders of them; with "
                        "--op other than gemm: one plan folder (``cutegen bench --op NAME --plan``) or a folder of "
                        "``cutegen generate`` outputs, one per problem name")
    add_op_arguments(p)
    p.add_argument("--shapes", nargs="*", default=[], metavar="MxNxK[xB]",
                   help="extra sizes to run every kernel at (its dtypes and layouts)")
    p.add_argument("--no-probes", action="store_true", help="skip the refusal probes")
    p.add_argument("--no-manifest-shape", action="store_true",
                   help="do not run each kernel at its own (possibly large) problem size")
    p.add_argument("--timeout", type=finite_float, default=60.0,
                   help="seconds one launch (with its reference) may take before it counts as a hang [60]")
    p.add_argument("--startup-timeout", type=finite_float, default=180.0,
                   help="seconds a worker child may take to import torch and create its CUDA context [180]")
    p.add_argument("--workers", type=int, default=1,
                   help="kernels validated at once, each in its own child process on the one GPU [1]")
    p.add_argument("--fresh-child", action="store_true",
                   help="a new child process for every kernel (default: one child, replaced after a hang or fault)")
    p.add_argument("--seed", type=int, default=0, help="varies the random inputs [0]")
    p.add_argument("--sanitize", action="store_true",
                   help="also run compute-sanitizer (memcheck, racecheck, synccheck) on a small problem; with --op, "
                        "on each search pick (role cutegen) through the operation's sanitize_case")
    p.add_argument("--sanitize-only", action="store_true", help="run only compute-sanitizer")
    p.add_argument("--sanitize-tools", default=",".join(SANITIZER_TOOLS),
                   help="comma-separated compute-sanitizer tools [memcheck,racecheck,synccheck]")
    p.add_argument("--sanitize-timeout", type=finite_float, default=240.0, help="seconds per sanitizer tool [240]")
    p.add_argument("--sanitize-parallel", action="store_true",
                   help="run the sanitizer tools at the same time (each its own process on the one GPU)")
    p.add_argument("--deadline", type=finite_float, default=0.0,
                   help="stop starting new kernels after this many seconds (0: no limit); the rest are reported skipped")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")


def add_op_arguments(p: argparse.ArgumentParser) -> None:
    """--op and the problem of an operation other than GEMM (cutegen.run.ops)."""
    g = p.add_argument_group("any operation (--op attention, --op grouped_gemm; cutegen.run.ops)")
    g.add_argument("--op", default="gemm",
                   help="the operation (default gemm: this command's own worker); another runs the operation's GPU "
                        "half in a watchdog child: its cases, float32 reference and refusal probes (--timeout is per "
                        "kernel, all its cases)")
    g.add_argument("--suite", dest="op_suite", metavar="TOML",
                   help="with --op: the problems, [[case]] tables of a name and the problem's fields")
    g.add_argument("--problem", action="append", default=[], metavar="JSON",
                   help="with --op: one problem as a JSON object (repeatable)")
    g.add_argument("--only", dest="op_only", action="append", default=[], metavar="NAME",
                   help="with --op: only these problems of the suite (repeatable)")
    g.add_argument("--build", action="store_true", help="with --op: build the kernels that have no library first")
    g.add_argument("--jobs", type=int, default=2, help="with --build: nvcc jobs at once [2]")
    g.add_argument("--in-process", action="store_true",
                   help="with --op: run the operation's GPU half in this process, not in a watchdog child (a hang or "
                        "fault then ends the run; --timeout is not enforced)")


def run_op(args: argparse.Namespace) -> int:
    """``cutegen validate --op NAME PLAN``: every kernel of the problems through the operation's validation."""
    from ..run import ops
    if len(args.kernels) != 1:
        raise CutegenError(f"--op {args.op}: give one plan folder (got {len(args.kernels)} paths)")
    if args.json and Path(args.json).is_dir():
        raise CutegenError(f"--json: {args.json} is a directory (a file name was expected)")
    cases = ops.load_cases(args.op, args.op_suite, args.problem, args.op_only)
    say = (lambda *a, **k: None) if args.quiet else print
    if args.build:
        index = ops.load_index(args.kernels[0])
        dirs = [k["dir"] for c in cases for k in ops.kernels_for(args.kernels[0], index, c)[0].values()]
        ops.build_dirs(dirs, args.jobs, say)
    tools = [t.strip() for t in args.sanitize_tools.split(",") if t.strip()]
    for t in tools:
        if t not in SANITIZER_TOOLS + ("initcheck",):
            raise CutegenError(f"--sanitize-tools: unknown tool {t!r} (memcheck, racecheck, synccheck, initcheck)")
    doc = None
    if not args.sanitize_only:
        doc = ops.validate(args.op, cases, args.kernels[0], json_path=args.json, deadline=args.deadline,
                           timeout=args.timeout, startup_timeout=args.startup_timeout, isolate=not args.in_process,
                           say=print)
    if args.sanitize or args.sanitize_only:
        op = ops.operation(args.op)
        index = ops.load_index(args.kernels[0])
        picks: dict[str, object] = {}           # the search's picks (role "cutegen"), each kernel once
        for c in cases:
            k = ops.kernels_for(args.kernels[0], index, c)[0].get("cutegen")
            if k is not None:
                picks.setdefault(k["dir"], c.problem)
        san = [sanitize_op_kernel(op, p, d, tools, args.sanitize_timeout, say, args.sanitize_parallel)
               for d, p in picks.items()]
        doc = doc or {"schema": ops.VALIDATE_SCHEMA, "op": args.op, "kernels": [], "summary": {"ok": True}}
        doc["sanitizer"] = san
        doc["summary"]["sanitizer_clean"] = all(s.get("verdict") == "clean" for s in san)
        doc["summary"]["ok"] = doc["summary"]["ok"] and doc["summary"]["sanitizer_clean"]
        if args.json:
            from .._atomic import atomic_write
            atomic_write(args.json, (json.dumps(doc, indent=1, default=str) + "\n").encode())
    return 0 if doc["summary"]["ok"] else 1


def run(args: argparse.Namespace) -> int:
    if getattr(args, "op", "gemm") != "gemm":
        return run_op(args)
    if not args.kernels:
        raise CutegenError("no kernel to validate: give built kernel directories, libraries or folders of them")
    if args.workers < 1:
        raise CutegenError(f"--workers: {args.workers} is below 1")
    kernels, unusable = R.discover_kernels(args.kernels)
    if args.json and Path(args.json).is_dir():      # found now, not after the GPU work
        raise CutegenError(f"--json: {args.json} is a directory (a file name was expected)")
    shapes = [R.parse_shape(s) for s in args.shapes]
    tools = [t.strip() for t in args.sanitize_tools.split(",") if t.strip()]
    for t in tools:
        if t not in SANITIZER_TOOLS + ("initcheck",):
            raise CutegenError(f"--sanitize-tools: unknown tool {t!r} (memcheck, racecheck, synccheck, initcheck)")
    if not kernels:   # one line: the reason (one input) or the count and the first reason (several)
        if len(unusable) == 1:
            raise CutegenError(f"no kernel to validate: {unusable[0][1]}")
        first = f": {unusable[0][1]}" + (f" (and {len(unusable) - 1} more)" if len(unusable) > 1 else "") \
            if unusable else ""
        raise CutegenError(f"no kernel to validate{first}")
    say = (lambda *a, **k: None) if args.quiet else print
    report = {"schema": "cutegen-validate/1", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "unusable": [{"path": p, "reason": w} for p, w in unusable], "kernels": [], "device": None}
    for path, why in unusable:
        print(f"UNUSABLE {path}: {why}")
    t_start = time.monotonic()
    if not args.sanitize_only:
        report["kernels"] = validate_kernels(kernels, shapes, args, say, t_start)
        report["device"] = _LAST_DEVICE.get("info")
    if args.sanitize or args.sanitize_only:
        report["sanitizer"] = [sanitize_kernel(k, tools, args.sanitize_timeout, say, args.sanitize_parallel)
                               for k in kernels]
    report["summary"] = summarize(report)
    if args.json:
        from .._atomic import atomic_write
        try:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(args.json, (json.dumps(report, indent=1, default=R.json_default) + "\n").encode())
        except OSError as e:
            raise CutegenError(f"--json: cannot write {args.json}: {e.strerror}") from None
    print_summary(report)
    return 0 if report["summary"]["ok"] else 1


_LAST_DEVICE: dict = {}


def _new_worker(args) -> R.Worker:
    return R.Worker(startup_timeout=args.startup_timeout, init={"op": "init"})


def validate_kernels(kernels, shapes, args, say, t_start) -> list[dict]:
    """Every kernel, on ``args.workers`` worker children at once (each kernel on one of them)."""
    import queue
    import threading
    todo: "queue.Queue[tuple[int, R.KernelInfo]]" = queue.Queue()
    for item in enumerate(kernels):
        todo.put(item)
    results: list[dict | None] = [None] * len(kernels)
    from ..progress import Steps
    steps = Steps("validate", len(kernels), quiet=getattr(args, "quiet", False))  # a bar, or a line per kernel

    def drain():
        worker = _new_worker(args)
        try:
            while True:
                try:
                    i, info = todo.get_nowait()
                except queue.Empty:
                    return
                if args.deadline and time.monotonic() - t_start > args.deadline:
                    results[i] = _kernel_record(info, [], "skipped", f"deadline of {args.deadline:g} s reached")
                    say(f"SKIP  {info.label}: deadline reached")
                    steps.step(f"{info.label}: skipped")
                    continue
                if args.fresh_child:
                    worker.close()
                    worker = _new_worker(args)
                results[i] = validate_one(worker, info, shapes, args, say)
                steps.step(f"{info.label}: {results[i]['verdict']}")
                if worker.init_reply is not None and worker.init_reply.ok:
                    _LAST_DEVICE["info"] = worker.init_reply.value
        finally:
            worker.close()

    threads = [threading.Thread(target=drain, daemon=True) for _ in range(max(1, min(args.workers, len(kernels))))]
    with steps:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return [r for r in results if r is not None]


def _kernel_record(info: R.KernelInfo, cases: list, verdict: str, reason: str = "") -> dict:
    return {"kernel": info.label, **info.to_dict(), "cases": cases, "verdict": verdict, "reason": reason}


def validate_one(worker: R.Worker, info: R.KernelInfo, shapes, args, say) -> dict:
    """Every case and probe of one kernel; stops at the first hang or crash of the kernel."""
    problem, config = info.problem, info.config
    # the cases, probes and tolerance come from the kernel's operation (cutegen/ops/<op>)
    plan = registry.validation_cases(problem, config, shapes, include_manifest=not args.no_manifest_shape,
                                     launch_plan=info.manifest.get("launch_plan"))
    if not args.no_probes:
        plan += registry.refusal_probes(problem, config)
    tol = registry.tolerance(problem)
    cases = []
    verdict, reason = "pass", ""
    for case in plan:
        task = {"op": "validate_case", "library": str(info.library), "problem": problem.to_dict(),
                "config": config.to_dict(), "case": case.to_dict(), "tolerance": tol, "seed": args.seed}
        reply = worker.request(task, args.timeout)
        where = f"{info.label} {case.name} M={case.m} N={case.n} K={case.k} batch={case.batch}"
        if reply.status in ("hang", "crash"):
            kind = "HANG" if reply.status == "hang" else "CRASH"
            cases.append({"case": case.name, "m": case.m, "n": case.n, "k": case.k, "batch": case.batch,
                          "ok": False, "status": reply.status, "reason": reply.message,
                          "seconds": round(reply.seconds, 2)})
            verdict = reply.status
            reason = f"{kind} in case {case.name}: {reply.message}; config {config.to_json()}"
            print(f"{kind:5} {where}: {reply.message}\n      config {config.to_json()}")
            break  # the rest of this kernel's cases would most likely do the same
        if reply.status == "error":
            msg = reply.message.strip().splitlines()[0] if reply.message else "error"
            cases.append({"case": case.name, "m": case.m, "n": case.n, "k": case.k, "batch": case.batch,
                          "ok": False, "status": "error", "reason": reply.message, "fatal": reply.fatal})
            verdict, reason = "fail", reason or f"{case.name}: {msg}"
            print(f"ERROR {where}: {msg}")
            if "in load_library" in reply.message:
                break  # the library does not load: every other case would say the same
            continue
        rec = dict(reply.value)
        rec["seconds"] = round(reply.seconds, 3)
        if reply.fatal:
            rec["ok"] = False
            rec["reason"] = (rec.get("reason", "") + "; CUDA context broken afterwards (sticky fault)").strip("; ")
        cases.append(rec)
        if rec.get("refused"):
            say(f"REFUSED {where}: {rec['reason']}")
            continue
        if rec.get("ok"):
            detail = f"rel_err {rec['rel_err']:.2e} < {rec['tol']:g}" if rec.get("kind") == "case" else rec.get("reason", "")
            say(f"ok    {where}: {detail}")
        else:
            verdict, reason = "fail", reason or f"{case.name}: {rec.get('reason', '')}"
            print(f"FAIL  {where}: {rec.get('reason', '')}")
    return _kernel_record(info, cases, verdict, reason)


# ------------------------------------------------------------------------------------------------
# compute-sanitizer
# ------------------------------------------------------------------------------------------------

def sanitizer_case(info: R.KernelInfo) -> R.Case:
    """A small problem for the sanitizer: ragged in M, N and K, batch 2, C read when it exists."""
    tm, tn, tk = info.config.tile_shape
    u = R.dim_units(info.problem)
    beta = 0.5 if info.problem.dtype_c != "void" else 0.0
    slices = getattr(info.config, "split_k_slices", 1)
    if slices > 1:
        # split-K with a separate reduction (cutegen/split_k_reduce.py): K is slices x a ragged slice, and the
        # slices' batches give every SM of a 132-SM part about three tiles (ping-pong's second warpgroup runs)
        n_tiles = 4
        m_tiles = max(2, -(-3 * 132 // (n_tiles * slices)))
        return R.Case("sanitize_slices", R.ragged_extent(tm, u["m"], m_tiles - 1),
                      R.ragged_extent(tn, u["n"], n_tiles - 1), slices * R.ragged_extent(tk, u["k"], 2), 1, 1.0, beta,
                      seed=21)
    if info.config.mainloop_schedule == "pingpong":
        # ping-pong's second math warpgroup runs only when a persistent CTA takes several tiles: give
        # every SM of a 132-SM part three (ragged in M, N, K; one batch), or the sanitizer never sees it
        n_tiles = 8
        m_tiles = -(-3 * 132 // n_tiles)
        return R.Case("sanitize_multitile", R.ragged_extent(tm, u["m"], m_tiles - 1),
                      R.ragged_extent(tn, u["n"], n_tiles - 1), R.ragged_extent(tk, u["k"], 2), 1, 1.0, beta, seed=21)
    return R.Case("sanitize", R.ragged_extent(tm, u["m"], 1), R.ragged_extent(tn, u["n"], 1),
                  R.ragged_extent(tk, u["k"], 2), 2, 1.0, beta, seed=21)


_SUMMARY = re.compile(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: [^\n]*)")


def sanitize_kernel(info: R.KernelInfo, tools, timeout: float, say, parallel: bool = False) -> dict:
    """compute-sanitizer over a child Python that runs one small case of the kernel."""
    exe = shutil.which("compute-sanitizer")
    out = {"kernel": info.label, "library": str(info.library), "tools": {}}
    if exe is None:
        out["verdict"] = "unavailable"
        out["reason"] = "compute-sanitizer is not on the PATH"
        print(f"SANITIZE {info.label}: compute-sanitizer not found")
        return out
    case = sanitizer_case(info)
    out["case"] = case.to_dict()
    task = {"op": "validate_case", "library": str(info.library), "problem": info.problem.to_dict(),
            "config": info.config.to_dict(), "case": case.to_dict()}
    return _sanitize_task(out, task, info.label, exe, tools, timeout, say, parallel)


def _sanitize_task(out: dict, task: dict, label: str, exe: str, tools, timeout: float, say, parallel: bool) -> dict:
    """Every tool over ``python -m cutegen._runner_worker --once`` running ``task``; ``out`` gets the verdicts."""
    with tempfile.TemporaryDirectory(prefix="cutegen-sanitize-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps(task))
        env = dict(os.environ)
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"   # one allocation per tensor: memcheck sees overruns
        env["CUTEGEN_SANITIZER"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(_package_root()), env.get("PYTHONPATH", "")] if p)

        def one(tool: str) -> dict:
            cmd = [exe, "--tool", tool, "--error-exitcode", "86", "--print-limit", "20",
                   sys.executable, "-m", "cutegen._runner_worker", "--once", str(req)]
            t0 = time.monotonic()
            rc, text = run_with_timeout(cmd, timeout, env)
            secs = round(time.monotonic() - t0, 1)
            return {"verdict": sanitizer_verdict(rc), "exit_code": rc, "seconds": secs,
                    "summary": "; ".join(_SUMMARY.findall(text)), "tail": text[-3000:]}

        if parallel and len(tools) > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(len(tools)) as pool:
                results = dict(zip(tools, pool.map(one, tools)))
        else:
            results = {t: one(t) for t in tools}
        verdicts = []
        for tool in tools:
            r = results[tool]
            out["tools"][tool] = r
            verdicts.append(r["verdict"])
            line = f"SANITIZE {tool:9} {label}: {r['verdict']} ({r['seconds']:g} s) {r['summary']}"
            (say if r["verdict"] == "clean" else print)(line)
    out["verdict"] = "clean" if verdicts and all(v == "clean" for v in verdicts) else \
        next(v for v in ("errors", "failed", "timeout") if v in verdicts)
    return out


def sanitize_op_kernel(op, problem, kernel_dir: str, tools, timeout: float, say, parallel: bool = False) -> dict:
    """compute-sanitizer over a child Python running the operation's ``sanitize_case`` on one kernel (its runner's
    small call against the float32 reference)."""
    exe = shutil.which("compute-sanitizer")
    out = {"kernel": str(kernel_dir), "tools": {}}
    if exe is None:
        print(f"SANITIZE {kernel_dir}: compute-sanitizer not found")
        return {**out, "verdict": "unavailable", "reason": "compute-sanitizer is not on the PATH"}
    task = {"op": "op_runner", "runner": op.runner, "fn": "sanitize_case", "problem": problem.to_dict(),
            "args": [str(kernel_dir)]}
    return _sanitize_task(out, task, Path(kernel_dir).name, exe, tools, timeout, say, parallel)


def sanitizer_verdict(exit_code: int | None) -> str:
    """clean: the tool found nothing and the case passed; errors: the tool reported errors (exit 86);
    failed: the driver failed (wrong result, refused, or the tool could not run); timeout."""
    if exit_code is None:
        return "timeout"
    return {0: "clean", 86: "errors"}.get(exit_code, "failed")


def run_with_timeout(cmd, timeout: float, env=None) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; on timeout kill the whole group (the sanitizer and the
    Python under it). Returns (exit code or None on timeout, stdout+stderr)."""
    import signal
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout)
        return proc.returncode, text or ""
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            text, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            text = ""
        return None, (text or "") + f"\n[killed after {timeout:g} s]"


def _package_root() -> Path:
    return Path(R.__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------------
# Summary
# ------------------------------------------------------------------------------------------------

def summarize(report: dict) -> dict:
    ks = report.get("kernels", [])
    by = {v: [k["kernel"] for k in ks if k["verdict"] == v] for v in ("pass", "fail", "hang", "crash", "skipped")}
    cases = [c for k in ks for c in k["cases"]]
    probes = [c for c in cases if c.get("kind") == "probe"]
    runs = [c for c in cases if c.get("kind") == "case" and not c.get("refused")]
    san = report.get("sanitizer") or []
    san_bad = [s["kernel"] for s in san if s.get("verdict") not in ("clean",)]
    ok = not (by["fail"] or by["hang"] or by["crash"] or san_bad or report.get("unusable"))
    return {"ok": ok, "kernels": len(ks), **{k: v for k, v in by.items()},
            "cases_run": len(runs), "cases_passed": sum(1 for c in runs if c.get("ok")),
            "probes": len(probes), "probes_agreed": sum(1 for c in probes if c.get("ok")),
            "refused": sum(1 for c in cases if c.get("refused")),
            "max_rel_err": max((c["rel_err"] for c in runs if isinstance(c.get("rel_err"), float)), default=None),
            "sanitizer_not_clean": san_bad, "unusable": len(report.get("unusable", []))}


def print_summary(report: dict) -> None:
    s = report["summary"]
    if not s["kernels"] and report.get("sanitizer") is not None:  # --sanitize-only
        for k in report["sanitizer"]:
            print(f"sanitizer: {k['kernel']}: {k['verdict']}")
        return
    print(f"validate: {s['kernels']} kernels: {len(s['pass'])} pass, {len(s['fail'])} fail, "
          f"{len(s['hang'])} hang, {len(s['crash'])} crash, {len(s['skipped'])} skipped; "
          f"{s['cases_passed']}/{s['cases_run']} cases, {s['probes_agreed']}/{s['probes']} refusal probes agreed"
          + (f", max rel err {s['max_rel_err']:.2e}" if s["max_rel_err"] is not None else ""))
    for v in ("fail", "hang", "crash"):
        for k in s[v]:
            print(f"  {v.upper()}: {k}")
    for k in s["sanitizer_not_clean"]:
        print(f"  SANITIZER: {k}")
    if s["unusable"]:
        print(f"  {s['unusable']} path(s) unusable (see above)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cutegen validate", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except CutegenError as e:
        print(f"cutegen validate: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
