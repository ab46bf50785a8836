"""The GEMM problem's command-line flags (--m/--n/--k, --dtype, --layout, ..., --problem JSON), shared by
generate, search and tune. Apart from generate so that a command reusing them does not import the Python API
(``cutegen._api`` calls the tune command, which takes these flags)."""
from __future__ import annotations

import argparse
import json

from .._fields import finite_float
from .._fields import loads_json
from ..errors import FieldError
from ..problem import ACTIVATIONS, BLAS_LAYOUTS, C_DTYPES, DEFAULT_PROBLEM, GemmProblem, OUTPUT_DTYPES
from ..dtypes import INPUT_DTYPES


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
    g.add_argument("--beta", type=finite_float, default=0.0)
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
    if args.problem is not None:        # an empty --problem is invalid JSON, not "no problem given"
        try:
            data = loads_json(args.problem)
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
