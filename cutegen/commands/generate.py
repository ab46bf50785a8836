"""cutegen generate: search, render and (with nvcc) compile a kernel for one GEMM problem."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import KernelConfig
from ..errors import CutegenError, FieldError
from ..problem import ACTIVATIONS, BLAS_LAYOUTS, C_DTYPES, GemmProblem, OUTPUT_DTYPES
from ..dtypes import INPUT_DTYPES

HELP = "search, render and compile a kernel for a GEMM problem (the default command)"
DEFAULT_PROBLEM = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"}


def add_problem_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("problem (default: 4096x4096x4096 bf16 TN)")
    g.add_argument("--m", type=int, help="rows of A and D")
    g.add_argument("--n", type=int, help="columns of B and D")
    g.add_argument("--k", type=int, help="the reduction extent")
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--dtype", choices=INPUT_DTYPES, default="bf16", help="A and B element type")
    g.add_argument("--layout", choices=tuple(BLAS_LAYOUTS), default="tn",
                   help="tn: A row-major, B column-major (both K-contiguous); nt, nn, tt likewise")
    g.add_argument("--dtype-c", choices=C_DTYPES, help="C's type (default: by dtype; void: no C)")
    g.add_argument("--dtype-d", choices=OUTPUT_DTYPES, help="D's type (default: by dtype)")
    g.add_argument("--layout-c", choices=("row", "col"), default="row")
    g.add_argument("--beta", type=float, default=0.0)
    g.add_argument("--bias", action="store_true", help="add a per-row (M) bias")
    g.add_argument("--activation", choices=ACTIVATIONS, default="none")
    g.add_argument("--fp8-fast-accum", action="store_true",
                   help="FP8 only: accumulate in the WGMMA accumulator alone, like torch._scaled_mm(use_fast_accum=True) "
                        "(faster, larger tiles fit; error grows with K)")
    add_ld_arguments(g)
    g.add_argument("--problem", metavar="JSON", help="the whole problem as a JSON object (overrides the above)")


def add_ld_arguments(g) -> None:
    """--lda/--ldb/--ldc: leading dimensions in elements (0: packed). Each operand's alignment, and so
    whether TMA can load it, is derived from its leading dimension and contiguous extent."""
    for op in ("a", "b", "c"):
        g.add_argument(f"--ld{op}", type=int, default=0, metavar="ELEMENTS",
                       help=f"leading dimension of {op.upper()}{' and D' if op == 'c' else ''} (default: packed)")


def ld_fields(args) -> dict:
    return {f"ld{op}": getattr(args, f"ld{op}") for op in "abc" if getattr(args, f"ld{op}", 0)}


def problem_from_args(args: argparse.Namespace) -> GemmProblem:
    if args.problem:
        try:
            data = json.loads(args.problem)
        except json.JSONDecodeError as e:
            raise FieldError("--problem", f"not valid JSON: {e}") from None
        return GemmProblem.from_dict(data, where="--problem")
    given = [x for x in (args.m, args.n, args.k) if x is not None]
    if given and len(given) != 3:
        raise FieldError("--m/--n/--k", "give all three extents or none (none: 4096x4096x4096)")
    data = dict(DEFAULT_PROBLEM)
    if given:
        data.update(m=args.m, n=args.n, k=args.k)
    data.update(dtype=args.dtype, layout=args.layout, batch=args.batch, layout_c=args.layout_c,
                beta=args.beta, bias=args.bias, activation=args.activation, **ld_fields(args))
    if getattr(args, "fp8_fast_accum", False):
        data["fp8_fast_accum"] = True
    if args.dtype_c:
        data["dtype_c"] = args.dtype_c
    if args.dtype_d:
        data["dtype_d"] = args.dtype_d
    return GemmProblem.from_dict(data, where="problem")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_problem_arguments(p)
    p.add_argument("-o", "--output", metavar="DIR",
                   help="kernel directory (default: generated/<target>/<problem name>)")
    p.add_argument("--backend", choices=("cutlass", "cutlass_builder", "dsl"), default="cutlass",
                   help="cutlass: explicit CuTe types (default); cutlass_builder: CUTLASS's CollectiveBuilder "
                        "baseline; dsl: CuTe DSL")
    p.add_argument("--config", metavar="JSON", help="render this configuration instead of searching")
    p.add_argument("--no-build", action="store_true", help="render only, even if nvcc is present")
    p.add_argument("--jobs", type=int, help="parallel compiles (default: from cores and memory)")
    add_ranking_arguments(p)


def add_ranking_arguments(p) -> None:
    """--device, --prior, --db: which ranking the search uses (cutegen.search.ranking)."""
    g = p.add_argument_group("ranking (default: the measurements of the device kind, where the results database "
                             "holds any; the manifest and --explain state which)")
    g.add_argument("--device", metavar="KIND",
                   help="device kind to rank for (h100-sxm, h100-pcie, h200, h20, ...; default: the GPU present, "
                        "else $CUTEGEN_DEVICE, else the target's default kind, h100-sxm for sm90a): its SM count, "
                        "bandwidth and peak price the analytic prior, and its measurements train the correction")
    g.add_argument("--prior", action="store_true",
                   help="rank by the analytic prior alone (search/cost.py), even where the kind has measurements")
    g.add_argument("--db", metavar="PATH",
                   help="results database (default: $CUTEGEN_RESULTS_DB, else the user cache dir), merged with "
                        "the committed seed bench/results/seed.sqlite")


def ranking_from_args(args, target: str = "sm90a"):
    """The cutegen.search.ranking.Ranking that --device/--prior/--db (and the machine) choose."""
    from ..search import ranking
    db = ranking.open_db(args.db) if getattr(args, "db", None) else None
    return ranking.choose(device=getattr(args, "device", None), prior=getattr(args, "prior", False), db=db,
                          target=target)


def label(config: KernelConfig) -> str:
    """short_name plus the raster settings it leaves out."""
    extra = "" if config.raster_order == "heuristic" and config.raster_swizzle == 1 else \
        f" raster {config.raster_order} swizzle {config.raster_swizzle}"
    return config.short_name() + extra


def choose(problem: GemmProblem, top_k: int = 3, backend: str = "cutlass",
           ranking=None) -> tuple[KernelConfig, object, list[str]]:
    """The search's best configuration, the cost record for the manifest, and the reasons to print.

    ``ranking`` (cutegen.search.ranking.Ranking; None: the prior as calibrated, unstated) is what the
    search ranks by; the cost record states it. The cost record holds only what the model predicts
    (deterministic), never search timings, so that the manifest's bytes depend on the problem, the
    configuration and the ranking (for a learned one: the measurements it learned from) alone.
    """
    from ..search import search  # egglog lives behind this import
    result = search(problem, top_k, backend=backend, **(ranking.search_kwargs() if ranking is not None else {}))
    if not result.ranked:
        raise CutegenError(f"the search found no legal configuration for {problem.name} "
                           f"(pruned: {dict(result.pruned_by_rule) or 'nothing'})")
    best = result.ranked[0]
    bd = dict(best.breakdown or {})
    why = [f"search: {result.candidates_legal} legal of {result.candidates_judged} judged "
           f"({result.candidates_total} in the e-graph's space, {result.egraph_nodes} e-nodes, "
           f"{result.search_seconds:.2f} s); picked the cheapest by the cost model"]
    if ranking is not None:
        why.append(ranking.describe())
    line = f"predicted {best.cost:.1f} us"
    if "predicted_tflops" in bd:
        line += f" = {bd['predicted_tflops']:.0f} TFLOP/s"
    for key in ("waves", "stages", "instruction_efficiency", "mainloop_us", "epilogue_us_per_tile"):
        if key in bd:
            line += f", {key} {bd[key]:g}"
    if best.prediction is not None:
        line += f" ({best.prediction.source}; the prior alone {best.prediction.prior_us:.1f} us)"
    why.append(line)
    for other in result.ranked[1:]:
        delta = (other.cost / best.cost - 1) * 100 if best.cost else 0.0
        why.append(f"runner-up {label(other.config)}: {other.cost:.1f} us (+{delta:.1f}%)")
    if result.pruned_by_rule:
        top = sorted(result.pruned_by_rule.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        why.append("pruned by rule: " + ", ".join(f"{rule} {n}" for rule, n in top))
    if best.chain:
        why.append("rewrite chain: " + " -> ".join(best.chain))
    cost = {"model": "cutegen.search.cost", "predicted_us": best.cost, "breakdown": bd,
            **(ranking.cost_fields() if ranking is not None else {})}
    if ranking is not None and ranking.method != "prior" and best.prediction is not None:
        cost["prediction"] = best.prediction.to_dict()   # measured, learned or prior; sigma; distance
    if best.plan is not None:   # a stream-K kernel: the run-time decomposition the search chose
        cost["launch_plan"] = best.plan.to_dict()
        why.append(f"launch plan {best.plan.label()} (of {', '.join(bd.get('plans_considered', {}))})")
    return best.config, cost, why


def run(args: argparse.Namespace) -> int:
    from .. import render as render_mod
    from ..build import build, find_nvcc

    problem = problem_from_args(args)
    if args.config:
        try:
            config = KernelConfig.from_dict(json.loads(args.config), where="--config")
        except json.JSONDecodeError as e:
            raise FieldError("--config", f"not valid JSON: {e}") from None
        cost, why = None, ["configuration given with --config (no search)"]
    else:
        config, cost, why = choose(problem, backend=args.backend, ranking=ranking_from_args(args, problem.target))
    kernel = render_mod.render(problem, config, args.backend, cost=cost)
    out = Path(args.output) if args.output else Path("generated") / problem.target / problem.name
    kernel.write(out)
    print(f"kernel   {out / ('kernel.py' if args.backend == 'dsl' else 'kernel.cu')}")
    print(f"manifest {out / 'manifest.json'}")
    print(f"problem  {problem.name}")
    print(f"config   {label(kernel.config)} (hash {kernel.kernel_hash})")
    for line in why:
        print(f"why      {line}")
    legality = kernel.manifest.get("legality") or {}
    warned = set(legality.get("warnings") or [])
    for reason in legality.get("reasons") or []:
        if reason.split(":", 1)[0] in warned:  # documented but not enforced rules: legal, said aloud
            print(f"warning  {reason}")
    if args.no_build:
        return 0
    if find_nvcc() is None:
        print("build    skipped: nvcc not found (run `cutegen build` where it is)")
        return 0
    if args.backend == "dsl":
        from ..dsl import build_dsl
        print(f"library  {build_dsl(problem, kernel.config, out, cost=cost)}")
        return 0
    summary = build([out], jobs=args.jobs, progress=sys.stderr)
    result = summary.results[0]
    if not result.ok:
        print(result.message, file=sys.stderr)
        return 1
    print(f"library  {result.library} ({result.status}, {result.seconds:.1f} s)")
    return 0
