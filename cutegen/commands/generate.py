"""cutegen generate: search, render and (with nvcc) compile a kernel for one GEMM problem."""
from __future__ import annotations

import argparse
import json
import sys

from .._api import config_label
from .._fields import loads_json
from ..config import KernelConfig
from ..errors import FieldError
# the problem's flags live apart (tune takes them too); re-exported here, where callers have always found them
from ._problem_args import add_ld_arguments, add_problem_arguments, ld_fields, problem_from_args  # noqa: F401

HELP = "search, render and compile a kernel for a GEMM problem (the default command), or another operation's"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", metavar="NAME", default="gemm",
                   help="operation (default gemm; grouped_gemm: one launch of E GEMMs sharing N and K, its "
                        "problem given as --problem JSON, e.g. {\"groups\": 8, \"tokens\": 16384, \"n\": 14336, "
                        "\"k\": 4096}); an operation other than gemm is searched by its own space, rules and cost "
                        "and written to out/<op>/<problem name> unless -o says where")
    p.add_argument("--top-k", type=int, default=3, metavar="K",
                   help="operations other than gemm: how many ranked candidates the report lists (default 3)")
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
    add_wave_tiles_argument(g)


def add_wave_tiles_argument(g) -> None:
    """--wave-tiles / --no-wave-tiles (cutegen.search.ranking.wave_tiles_for_new_searches)."""
    g.add_argument("--wave-tiles", action=argparse.BooleanOptionalAction, default=None,
                   help="tiles of any N a multiple of 8 up to 256 (136, 144, 200, 232, ...: sized to the problem's "
                        "waves) with their full-width WGMMA, priced so (default: on, unless $CUTEGEN_WAVE_TILES=0; "
                        "the manifest states it, and regen re-ranks each kernel as its manifest states)")


def ranking_from_args(args, target: str = "sm90a"):
    """The cutegen.search.ranking.Ranking that --device/--prior/--db (and the machine) choose."""
    from .._api import default_ranking
    return default_ranking(device=getattr(args, "device", None), prior=getattr(args, "prior", False),
                           db=getattr(args, "db", None), target=target, wave_tiles=getattr(args, "wave_tiles", None))


# The search's choice (``cutegen._api.choose``) and its label live in the Python API; ``label`` stays
# for the commands and scripts that import it from here.
label = config_label


def run(args: argparse.Namespace) -> int:
    from .._api import generate

    if args.op != "gemm":
        return run_operation(args)
    problem = problem_from_args(args)
    config = None
    if args.config is not None:
        try:
            config = KernelConfig.from_dict(loads_json(args.config), where="--config")
        except json.JSONDecodeError as e:
            raise FieldError("--config", f"not valid JSON: {e}") from None
    ranking = ranking_from_args(args, problem.target) if config is None else None
    result = generate(problem, args.output, config=config, backend=args.backend, build=not args.no_build,
                      jobs=args.jobs, progress=sys.stderr, say=lambda line: print(line, flush=True),
                      ranking=ranking)
    if not result.ok:
        print(result.build.message, file=sys.stderr)
        return 1
    return 0


def run_operation(args: argparse.Namespace) -> int:
    """``generate --op NAME`` for an operation other than GEMM, through the registry alone: its problem
    (``--problem`` JSON), its search (``cutegen.core.search``), its renderer and the build."""
    from pathlib import Path

    from ..core import registry
    from ..core.search import search

    try:
        op = registry.get(args.op)
    except FieldError as e:
        raise FieldError("--op", e.message) from None
    gemm_flags = [f"--{f}" for f in ("m", "n", "k") if getattr(args, f) is not None]
    if gemm_flags or args.problem is None:
        raise FieldError("--problem", f"--op {op.name} takes its problem as --problem JSON "
                                      f"({', '.join(gemm_flags) + ' are GEMM flags' if gemm_flags else 'none given'})")
    try:
        data = loads_json(args.problem)
    except json.JSONDecodeError as e:
        raise FieldError("--problem", f"not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise FieldError("--problem", f"expected an object, got {type(data).__name__}")
    problem = registry.problem_from_dict({**data, "op": op.name}, "--problem")
    if args.config is not None:
        try:
            config = registry.config_from_dict(op, loads_json(args.config), "--config")
        except json.JSONDecodeError as e:
            raise FieldError("--config", f"not valid JSON: {e}") from None
        cost, lines = None, ["configuration given (no search)"]
    else:
        if isinstance(args.top_k, bool) or args.top_k < 1:
            raise FieldError("--top-k", f"expected a positive integer, got {args.top_k}")
        result = search(problem, top_k=args.top_k)
        if not result.ranked:
            pruned = ", ".join(f"{k} x{v}" for k, v in sorted(getattr(result, "pruned_by_rule", {}).items()))
            raise FieldError("--problem", f"no legal {op.name} configuration{' (pruned: ' + pruned + ')' if pruned else ''}")
        config, cost = result.ranked[0].config, result.ranked[0].cost
        lines = [f"searched {getattr(result, 'candidates_total', '?')} candidates, "
                 f"{getattr(result, 'candidates_legal', '?')} legal; ranked:"]
        lines += [f"  {i + 1}. {r.config.short_name() if hasattr(r.config, 'short_name') else r.config.to_dict()}"
                  f"  {r.cost:.1f} us" for i, r in enumerate(result.ranked)]
    backend = args.backend if args.backend != "cutlass" or "cutlass" in op.backends else None
    kernel = registry.render(problem, config, backend, cost=cost)
    directory = Path(args.output) if args.output else Path("out") / op.name / problem.name
    kernel.write(directory)
    print(f"{op.name}: {problem.name}", flush=True)
    for line in lines:
        print(line, flush=True)
    print(f"kernel {kernel.kernel_hash} -> {directory}", flush=True)
    if args.no_build:
        return 0
    from ..build import build as build_kernels, find_nvcc
    if find_nvcc() is None:
        print("build skipped: nvcc not found (run `cutegen build` where it is)", flush=True)
        return 0
    res = build_kernels([directory], jobs=args.jobs, progress=sys.stderr).results[0]
    if not res.ok:
        print(res.message, file=sys.stderr)
        return 1
    print(f"library: {res.library}", flush=True)
    return 0
