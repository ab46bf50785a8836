"""``cutegen tune``: the search's top k measured on the GPU; the measured best becomes the kernel.

One problem (the flags of ``cutegen generate``) or a suite (``--suite``, the TOML of bench/suite.toml).
Search and rendering need egglog; building, validating and timing need the GPU. On one machine with
both, ``cutegen tune`` does everything. Across two: ``--plan-only --workdir DIR`` here, carry DIR,
then ``--from-plan DIR`` on the GPU machine. Problems this device kind has measured already are
answered from the results database without a GPU (``--force`` measures again).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .._fields import finite_float
from ..errors import CutegenError, FieldError
from ._problem_args import add_problem_arguments, problem_from_args

HELP = "time the search's top k with cuBLAS, nvMMH's pick and the CUTLASS default on the GPU; keep the best"


def _executor_module():
    try:
        from .. import executor
        return executor
    except ImportError:  # the Dask executor (issue 13) is not in this tree yet
        return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_problem_arguments(p)
    p.add_argument("--suite", metavar="TOML", help="tune every problem of this suite file (bench/suite.toml format)")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="only these suite problems (repeatable)")
    p.add_argument("--top-k", type=int, default=8, help="search candidates measured per problem [8]")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="the tuned kernel directory (one problem; default tuned/sm90a/<problem>) or the folder "
                        "of one directory per problem (--suite; default tuned/sm90a)")
    p.add_argument("--workdir", default="out/tune", help="where the candidates are rendered and built [out/tune]")
    p.add_argument("--plan-only", action="store_true", help="search and render the candidates, then stop (CPU half)")
    p.add_argument("--from-plan", metavar="DIR", help="measure the plan in DIR (GPU half; no search needed)")
    p.add_argument("--device-kind", help="h100-sxm, h100-pcie, h200, h20, ...: the search ranks for it (learned "
                                         "from the database where it has measurements, as `cutegen search --device`), "
                                         "nvMMH models it, the database is asked about it (default: the GPU's; "
                                         "the prior and nvMMH's h100-sxm without one)")
    p.add_argument("--force", action="store_true", help="measure even what the database already answers")
    p.add_argument("--db", metavar="PATH", help="results database (default: $CUTEGEN_RESULTS_DB or the user cache)")
    p.add_argument("--records", metavar="JSONL", help="also write every measurement, one JSON line each "
                                                       "(`cutegen db import` reads it)")
    p.add_argument("--summary", metavar="JSON", help="also write every outcome (winner, ratios, failures) as JSON")
    p.add_argument("--no-nvmmh", action="store_true", help="leave nvMatmulHeuristics' pick out")
    p.add_argument("--no-default", action="store_true", help="leave the CUTLASS default (128x256x64) out")
    p.add_argument("--screen", choices=("none", "dsl"), default="none",
                   help="dsl: time the candidates of families the CuTe DSL times faithfully as DSL kernels first "
                        "(built here, seconds each) and compile only the finalists with nvcc")
    p.add_argument("--finalists", type=int, default=2, help="screened candidates compiled per problem [2]")
    p.add_argument("--jobs", type=int, help="parallel compiles (default: from cores and memory)")
    p.add_argument("--build-deadline", type=finite_float, default=0.0, metavar="SECONDS",
                   help="start no compile batch this many seconds after tune started; the rest is reported "
                        "not built (0: none)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls per contender [10]")
    p.add_argument("--iters", type=int, default=50, help="timed calls per contender, at least 50 [50]")
    p.add_argument("--timeout", type=finite_float, default=240.0, help="seconds per problem's timing before it is a hang")
    p.add_argument("--deadline", type=finite_float, default=0.0, metavar="SECONDS",
                   help="start timing no problem this many seconds after tune started; the rest are reported "
                        "skipped (0: none)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    ex = _executor_module()
    if ex is not None:
        ex.add_arguments(p)


def _problems(args) -> tuple[list, bool]:
    if args.suite:
        if args.m is not None or args.problem:
            raise FieldError("--suite", "give a suite or one problem, not both")
        from ..suites import select_suite
        return select_suite(args.suite, args.only), False
    if args.only:
        raise FieldError("--only", "needs --suite")
    p = problem_from_args(args)
    return [(p.name, p)], True


def _local_device_kind() -> str | None:
    from .bench import _run_text
    name = _run_text(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).strip().splitlines()
    if not name:
        return None
    try:
        from ..results import device_kind
    except ImportError:
        return None
    return device_kind(name[0])


def run(args: argparse.Namespace) -> int:
    from ..progress import Display
    from ..tuning import records_document, records_lines

    t0 = time.monotonic()
    for opt, value in (("-o/--output", args.output), ("--workdir", None if args.from_plan else args.workdir)):
        if value and Path(value).exists() and not Path(value).is_dir():   # found now, not after the GPU work
            raise CutegenError(f"{opt}: {value} exists and is not a directory")
    if args.iters < 50:
        raise FieldError("--iters", f"{args.iters} is below 50")
    with Display(quiet=args.quiet) as display:
        plan, plan_dir = plan_from_args(args, display)
        if args.plan_only:
            display.log(f"plan written to {plan_dir / 'plan.json'}: "
                        f"{sum(len(p.candidates) for p in plan.problems)} kernels for {len(plan.problems)} problems")
            return 0
        outcomes, tuner, executor, versions = measure_plan(args, plan, plan_dir, display, t0)
    from .._atomic import atomic_write
    if executor is not None:
        print(executor.summary.text(), file=sys.stderr)   # what ran where, what was retried, what failed
    if args.records:
        atomic_write(Path(args.records), records_lines(tuner.records).encode())
        print(f"wrote {args.records} ({len(tuner.records)} measurements)")
    if args.summary:
        doc = records_document(outcomes, tuner.records, tuner._device, versions, seconds=tuner.seconds,
                               executor=executor.summary.lines() if executor is not None else None)
        atomic_write(Path(args.summary), (json.dumps(doc, indent=1, default=str) + "\n").encode())
        print(f"wrote {args.summary}")
    print(format_table(outcomes))
    return 0 if all(o.chosen for o in outcomes) else 1


def plan_from_args(args: argparse.Namespace, display, problems: list | None = None):
    """The tuning plan (``--from-plan``'s, or searched and rendered now) and its folder.

    ``problems`` (``[(name, GemmProblem)]``, from the Python API) replaces the problem flags and ``--suite``."""
    from ..tuning import Plan, make_plan
    if args.from_plan:
        if args.suite or args.m is not None or args.problem or problems:
            raise FieldError("--from-plan", "the plan names its problems; give no problem or suite")
        plan_dir = Path(args.from_plan)
        return Plan.load(plan_dir), plan_dir
    if problems is not None:
        single = len(problems) == 1 and not args.suite
    else:
        problems, single = _problems(args)
    plan_dir = Path(args.workdir)
    kind = args.device_kind or _local_device_kind() or "h100-sxm"
    screen = None
    if args.screen == "dsl":
        if args.finalists < 1:
            raise FieldError("--finalists", f"expected at least 1, got {args.finalists}")
        from ..tuning.plan import dsl_screen
        screen = dsl_screen()
    search = None
    if args.device_kind:   # rank as `cutegen search --device KIND` does (learned, where measured)
        from ..tuning.plan import device_search
        search = device_search(args.device_kind, args.db)
    plan = make_plan(problems, plan_dir, top_k=args.top_k, device_kind=kind, with_nvmmh=not args.no_nvmmh,
                     search=search, with_default=not args.no_default, single=single, screen=screen,
                     finalists=args.finalists, say=display.log)
    return plan, plan_dir


def measure_plan(args: argparse.Namespace, plan, plan_dir: Path, display, t0: float):
    """Build, time, validate and record the plan's candidates; writes each winner's kernel directory.

    Returns ``(outcomes, tuner, executor or None, versions)``; the executor is closed."""
    from ..tuning import Tuner
    single = plan.single
    out = Path(args.output) if args.output else \
        (Path("tuned/sm90a") / plan.problems[0].problem.name if single else Path("tuned/sm90a"))
    try:
        from ..results import ResultsDB
    except ImportError:
        raise CutegenError("the results database (cutegen.results, issue 11 part 1) is not installed") from None
    from ..tuning.gpu import Builder, RunnerTimer, RunnerValidator, runner_gpu
    ex = _executor_module()
    executor = ex.from_args(args) if ex is not None and getattr(args, "executor", "local") != "local" else None
    if executor is not None:
        # Each problem's timing and validation is one GPU task on the cluster (resource GPU=1);
        # the records, the cache and the kernel directories are written here only.
        from ..tuning.remote import RemoteGPU
        timer = RemoteGPU(executor, runner_gpu, {"warmup": args.warmup, "iters": args.iters,
                                                 "timeout": args.timeout})
        validator = None
    else:
        timer = RunnerTimer(warmup=args.warmup, iters=args.iters, timeout=args.timeout)
        validator = RunnerValidator(say=display.log)
    versions = _versions()
    try:
        tuner = Tuner(plan, plan_dir, out, db=ResultsDB(args.db), builder=Builder(
            args.jobs, executor, say=display.build_line,
            deadline=t0 + args.build_deadline if args.build_deadline > 0 else None),
                      timer=timer, validator=validator, device_kind=args.device_kind, force=args.force,
                      single=single, display=display, versions=versions,
                      deadline=t0 + args.deadline if args.deadline > 0 else None)
        outcomes = tuner.run()
    finally:
        timer.close()
        if validator is not None:
            validator.close()
        if executor is not None:
            executor.close()
    return outcomes, tuner, executor, versions


def _versions() -> dict:
    from .. import manifest
    from .bench import driver_version
    return {"driver": driver_version(), "cutlass": manifest.cutlass_version(), "nvcc": manifest.nvcc_version()}


def _f(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def format_table(outcomes) -> str:
    """The closing table: per problem the kernel written, its time and the ratios to the others."""
    rows = [("problem", "chosen", "us", "x first", "x cuBLAS", "x nvMMH", "x default", "from")]
    for o in outcomes:
        d = o.to_dict()
        ch = o.chosen or {}
        rows.append((o.name, f"{ch.get('name', '-')} {ch.get('config_name', '')}".strip(), _f(ch.get("median_us"), ".1f"),
                     _f(d["speedup_vs_first_pick"]), _f(d["speedup_vs_cublas"]), _f(d["speedup_vs_nvmmh"]),
                     _f(d["speedup_vs_cutlass_default"]), o.source))
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i]) for i, c in enumerate(r)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    from ..runner import geometric_mean
    for key, label in (("speedup_vs_cublas", "cuBLAS"), ("speedup_vs_first_pick", "the first pick"),
                       ("speedup_vs_nvmmh", "nvMMH's pick")):
        vals = [o.to_dict()[key] for o in outcomes if o.to_dict()[key]]
        if vals:
            lines.append(f"geomean x {label}: {geometric_mean(vals):.3f} over {len(vals)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cutegen tune", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except CutegenError as e:
        print(f"cutegen tune: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
