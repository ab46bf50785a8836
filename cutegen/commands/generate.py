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

HELP = "search, render and compile a kernel for a GEMM problem (the default command)"


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


# The search's choice (``cutegen._api.choose``) and its label live in the Python API; ``label`` stays
# for the commands and scripts that import it from here.
label = config_label


def run(args: argparse.Namespace) -> int:
    from .._api import generate

    problem = problem_from_args(args)
    config = None
    if args.config is not None:
        try:
            config = KernelConfig.from_dict(loads_json(args.config), where="--config")
        except json.JSONDecodeError as e:
            raise FieldError("--config", f"not valid JSON: {e}") from None
    result = generate(problem, args.output, config=config, backend=args.backend, build=not args.no_build,
                      jobs=args.jobs, progress=sys.stderr, say=lambda line: print(line, flush=True))
    if not result.ok:
        print(result.build.message, file=sys.stderr)
        return 1
    return 0
