"""cutegen attention: search, render and build fused-attention kernels (the CUTLASS 88 Hopper FMHA family)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._fields import finite_float, loads_json
from ..errors import CutegenError, FieldError

HELP = "fused attention (forward): search, render and build a kernel for an attention problem"


def add_problem_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the attention problem (or --problem JSON)")
    g.add_argument("--problem", metavar="JSON", help="the whole problem as JSON (the fields of AttentionProblem: "
                                                     "batch, heads_q, seqlen_q, seqlen_kv and head_dim at least); "
                                                     "the flags below override its fields")
    g.add_argument("--batch", type=int, help="batch size (default 4)")
    g.add_argument("--heads-q", type=int, help="query heads (default 32)")
    g.add_argument("--heads-kv", type=int, help="key/value heads, a divisor of --heads-q: GQA, or MQA at 1 "
                                                "(default: --heads-q)")
    g.add_argument("--seqlen-q", type=int, help="query sequence length (default 4096)")
    g.add_argument("--seqlen-kv", type=int, help="key/value sequence length (default: --seqlen-q)")
    g.add_argument("--head-dim", type=int, help="head dim of Q and K, a multiple of 8 up to 256 (default 128)")
    g.add_argument("--head-dim-v", type=int, help="head dim of V and O (default: --head-dim)")
    g.add_argument("--dtype", choices=("bf16", "f16", "e4m3"), help="element type of Q, K, V (default bf16)")
    g.add_argument("--causal", action="store_true", help="top-left causal mask (SDPA's is_causal)")
    g.add_argument("--scale", type=finite_float, help="softmax scale (default 1/sqrt(head dim))")
    g.add_argument("--layout", choices=("bshd", "bhsd"), help="storage order of Q, K, V, O (default bshd)")
    g.add_argument("--varlen", action="store_true", help="variable sequence lengths by cumulative offsets")
    g.add_argument("--return-lse", action="store_true", help="also return the log-sum-exp")
    g.add_argument("--dtype-out", choices=("bf16", "f16"),
                   help="e4m3 only: the output type of O (default bf16); 16-bit kernels write their input type. "
                        "FP8 kernels read V transposed (V^T, the KV sequence contiguous, rows padded to 16 "
                        "elements) and take per-tensor descale factors at run time (cutegen/ops/attention/abi.py)")
    g.add_argument("--allow-f16-qk-acc", action="store_true",
                   help="let the search pick an f16 Q K^T accumulator (e4m3/f16 inputs; faster, less accurate, and "
                        "it overflows past 65504: full-range e4m3 inputs can reach that); default f32")


def problem_from_args(args: argparse.Namespace):
    from ..ops.attention.problem import AttentionProblem
    data: dict = {}
    if args.problem is not None:
        try:
            data = loads_json(args.problem)
        except json.JSONDecodeError as e:
            raise FieldError("--problem", f"not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise FieldError("--problem", f"expected a JSON object, got {type(data).__name__}")
    flags = {"batch": args.batch, "heads_q": args.heads_q, "heads_kv": args.heads_kv, "seqlen_q": args.seqlen_q,
             "seqlen_kv": args.seqlen_kv, "head_dim": args.head_dim, "head_dim_v": args.head_dim_v,
             "dtype": args.dtype, "scale": args.scale, "layout": args.layout}
    data.update({k: v for k, v in flags.items() if v is not None})
    if getattr(args, "dtype_out", None) is not None:
        data["dtype_out"] = args.dtype_out
    for flag in ("causal", "varlen", "return_lse", "allow_f16_qk_acc"):
        if getattr(args, flag, False):
            data[flag] = True
    if args.problem is None:      # flags alone: the defaults fill in; a --problem JSON must be whole
        for k, v in {"batch": 4, "heads_q": 32, "seqlen_q": 4096, "head_dim": 128}.items():
            data.setdefault(k, v)
        data.setdefault("seqlen_kv", data["seqlen_q"])
    return AttentionProblem.from_dict(data, where="problem")


def _search(problem, top_k: int, explain: bool = False):
    from ..core.search import search
    found = search(problem, top_k, explain=True) if explain else search(problem, top_k)
    if not found.ranked:
        pruned = ", ".join(f"{k} x{v}" for k, v in sorted(found.pruned_by_rule.items()))
        raise CutegenError(f"no renderable attention kernel for {problem.name} "
                           f"({found.candidates_total} candidates; pruned by {pruned or 'nothing'})")
    return found


def _add_generate(p: argparse.ArgumentParser) -> None:
    add_problem_arguments(p)
    p.add_argument("-o", "--output", metavar="DIR", help="kernel directory (default: out/attention/<problem name>)")
    p.add_argument("--config", metavar="JSON", help="render this AttentionConfig instead of searching (with "
                   "--backward: an AttentionBackwardConfig, {\"tile_q\": 64, \"tile_kv\": 128})")
    p.add_argument("--backward", action="store_true",
                   help="the problem's backward kernel (dQ, dK, dV; bf16/f16, head dim 32, 64 or 128): the CUTLASS 88 "
                        "example's backward tile for the head dim unless --config gives one; no search (rules "
                        "ATTN-BWD-*, cutegen.ops.attention.backward)")
    p.add_argument("--top-k", type=int, default=5, help="how many ranked configurations to report (default 5)")
    p.add_argument("--no-build", action="store_true", help="render only, even if nvcc is present")
    p.add_argument("--jobs", type=int, help="parallel compiles (default: from cores and memory)")


def _run_generate(args: argparse.Namespace) -> int:
    from ..ops.attention.config import AttentionConfig
    from ..ops.attention.render import backend_refusals, render
    problem = problem_from_args(args)
    if args.top_k < 1:
        raise FieldError("--top-k", f"{args.top_k} is below the minimum 1")
    if args.backward:
        return _run_generate_backward(args, problem)
    if args.config is not None:
        try:
            config = AttentionConfig.from_dict(loads_json(args.config), where="--config")
        except json.JSONDecodeError as e:
            raise FieldError("--config", f"not valid JSON: {e}") from None
        refused = backend_refusals(problem, config)
        if refused:
            raise CutegenError("the attention renderer cannot build this configuration: " + "; ".join(refused))
        cost = None
        print(f"{problem.name}: config given: {config.short_name()}")
    else:
        found = _search(problem, args.top_k)
        config = found.ranked[0].config
        cost = {"model": "the attention operation's search (cutegen.core.search)", "predicted_us": found.ranked[0].cost}
        print(f"{problem.name}: searched {found.candidates_total} candidates in {found.search_seconds * 1e3:.1f} ms, "
              f"{found.candidates_legal} renderable"
              + "".join(f"; {k} pruned {v}" for k, v in sorted(found.pruned_by_rule.items())))
        for i, r in enumerate(found.ranked):
            print(f"  {'pick' if i == 0 else f'#{i + 1} '} {r.config.short_name():40s} {r.cost:10.1f} us predicted")
    out = Path(args.output or Path("out") / "attention" / problem.name)
    rendered = render(problem, config, cost=cost)
    changed = rendered.write(out)
    print(f"rendered {out} (kernel {rendered.kernel_hash}; {len(changed)} file(s) changed)")
    return _build_rendered(out, args)


def _run_generate_backward(args: argparse.Namespace, problem) -> int:
    from ..ops.attention.backward import AttentionBackwardConfig, default_config, render
    if args.config is not None:
        try:
            config = AttentionBackwardConfig.from_dict(loads_json(args.config), where="--config")
        except json.JSONDecodeError as e:
            raise FieldError("--config", f"not valid JSON: {e}") from None
    else:
        config = default_config(problem)
    out = Path(args.output or Path("out") / "attention" / f"{problem.name}_bwd")
    rendered = render(problem, config)
    changed = rendered.write(out)
    print(f"{problem.name}: backward {config.short_name()}: rendered {out} (kernel {rendered.kernel_hash}; "
          f"{len(changed)} file(s) changed)")
    return _build_rendered(out, args)


def _build_rendered(out: Path, args: argparse.Namespace) -> int:
    """Compile a rendered kernel directory unless --no-build (or where nvcc is missing: rendered only)."""
    if args.no_build:
        return 0
    from ..build import build, find_nvcc
    if find_nvcc() is None:
        print("nvcc not found: rendered only (cutegen build DIR compiles it where nvcc is)")
        return 0
    summary = build([out], jobs=args.jobs, progress=sys.stderr)
    print(summary.line())
    if not summary.ok:
        print(summary.results[0].message, file=sys.stderr)
        return 1
    return 0


def _add_search(p: argparse.ArgumentParser) -> None:
    add_problem_arguments(p)
    p.add_argument("--top-k", type=int, default=5, help="how many ranked configurations (default 5)")
    p.add_argument("--json", action="store_true", help="the ranking as JSON")
    p.add_argument("--explain", action="store_true",
                   help="why the winner: its rewrite chain and cost terms, what each rule pruned, the runners-up")


def _run_search(args: argparse.Namespace) -> int:
    problem = problem_from_args(args)
    if args.top_k < 1:
        raise FieldError("--top-k", f"{args.top_k} is below the minimum 1")
    found = _search(problem, args.top_k, explain=args.explain)
    if args.explain and hasattr(found, "explain"):
        print(found.explain())
        return 0
    if args.json:
        print(json.dumps(found.to_dict(), indent=1, sort_keys=True))
        return 0
    print(f"{problem.name}: {found.candidates_legal}/{found.candidates_total} renderable, "
          f"{found.search_seconds * 1e3:.1f} ms")
    for i, r in enumerate(found.ranked):
        print(f"  {i + 1}. {r.config.short_name():40s} {r.cost:10.1f} us predicted  {r.config.to_json()}")
    return 0


SUBCOMMANDS = {
    "generate": ("search, render and build one attention kernel", _add_generate, _run_generate),
    "search": ("rank attention configurations for a problem", _add_search, _run_search),
}
