"""``cutegen search --op grouped_gemm``: the grouped GEMM (mixture-of-experts) search for one problem."""
from __future__ import annotations

import json
import sys

from cutegen.errors import FieldError

OP = "grouped_gemm"


def add_arguments(p) -> None:
    g = p.add_argument_group("grouped GEMM (--op grouped_gemm; --n, --k and --dtype as above, bf16 or e4m3)")
    g.add_argument("--groups", type=int, help="experts E (groups of the launch)")
    g.add_argument("--tokens", type=int,
                   help="offs: the expected total rows T (tokens x top-k); masked: the per-group capacity")
    g.add_argument("--token-layout", default="offs", choices=("offs", "masked"),
                   help="offs: one X[T, K] with int32 offsets (torch._grouped_mm); masked: X[E, capacity, K] with "
                        "per-group counts (DeepGEMM)")
    g.add_argument("--scale", default="none", choices=("none", "tensor", "block128"),
                   help="e4m3 only: per-tensor scales, or DeepSeek-V3's 1x128 / 128x128 block scales")
    g.add_argument("--distribution", default="uniform",
                   help="expected routing the cost model prices: uniform, skewed (Zipf), worst (every token in one "
                        "group), or a histogram of E comma-separated fractions summing to 1")


def _distribution(text: str):
    if text in ("uniform", "skewed", "worst"):
        return text
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise FieldError("distribution", f"{text!r} is neither uniform, skewed, worst nor comma-separated "
                                         "fractions") from None


def problem_from_args(args):
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem

    missing = [f"--{n}" for n in ("groups", "tokens", "n", "k") if getattr(args, n) is None]
    if missing:
        raise FieldError(missing[0], f"--op {OP} needs {', '.join(missing)}")
    return GroupedGemmProblem.from_dict({
        "groups": args.groups, "n": args.n, "k": args.k, "tokens": args.tokens, "layout": args.token_layout,
        "dtype": args.dtype, "scale": args.scale, "distribution": _distribution(args.distribution)})


def explain_dict(result) -> dict:
    best = result.ranked[0]
    keys = ("tiles", "waves", "per_tile_us", "kblock_us", "partial_tile_waste", "descriptor_switches",
            "mainloop_us", "dram_us", "load_us_per_kblock", "mma_us_per_kblock")
    runners = []
    for r in result.ranked[1:]:
        worse = [f"{k} {best.breakdown[k]:g} -> {r.breakdown[k]:g}" for k in keys
                 if best.breakdown.get(k) != r.breakdown.get(k)]
        runners.append({"config": r.config.short_name(), "cost": round(r.cost, 3),
                        "delta_us": round(r.cost - best.cost, 3), "worse_in": worse})
    return {"chosen": best.config.short_name(), "rewrite_chain": best.chain, "cost_breakdown": best.breakdown,
            "group_sizes": list(result.problem.group_sizes), "runners_up": runners,
            "rejected_near_top": result.rejected[:8]}


def run(args) -> int:
    from cutegen.core import search as core_search

    if args.top_k < 1 or args.top_k > 100:
        raise FieldError("top_k", f"expected 1 to 100, got {args.top_k}")
    problem = problem_from_args(args)
    result = core_search.search(problem, args.top_k, explain=args.explain)
    if not result.ranked:
        raise FieldError("problem", f"no legal grouped configuration for {problem.name} among the "
                         f"{result.candidates_judged} cheapest candidates judged; rules that rejected them: "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(result.pruned_by_rule.items())))
    if args.json:
        out = result.to_dict()
        if args.explain:
            out["explain"] = explain_dict(result)
        json.dump(out, sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    print(f"problem {problem.name}: {result.candidates_total} reachable candidates, {result.candidates_judged} "
          f"judged by the rules, {result.candidates_legal} legal; e-graph {result.egraph_nodes} nodes / "
          f"{result.egraph_classes} classes, {result.iterations} iterations, {result.search_seconds:.3f} s")
    print(f"orientations: {', '.join(result.orientations)}; scheduler classes: "
          + ", ".join(f"{k} (judged as {v})" for k, v in result.raster_classes.items()))
    for i, r in enumerate(result.ranked):
        b = r.breakdown
        print(f"  {i + 1}. {r.config.short_name():36s} {r.cost:10.2f} us  {b['predicted_tflops']:7.1f} TFLOP/s  "
              f"{b['fraction_of_floor']:.3f} of the floor ({b['floor_us']:.1f} us)  (predicted)")
    if result.pruned_by_rule:
        print("pruned by rule: " + ", ".join(f"{k}={v}" for k, v in sorted(result.pruned_by_rule.items())))
    print(f"pruned by the cost bound (priced, never judged): {result.candidates_total - result.candidates_judged}")
    if args.explain:
        e = explain_dict(result)
        print(f"\nchosen: {e['chosen']}")
        print(f"expected group sizes ({problem.distribution if isinstance(problem.distribution, str) else 'histogram'}): "
              f"{e['group_sizes'][:16]}{' ...' if len(e['group_sizes']) > 16 else ''}")
        print("rewrite chain:")
        for line in e["rewrite_chain"]:
            print(f"  {line}")
        print("cost breakdown:")
        for k, v in e["cost_breakdown"].items():
            print(f"  {k:26s} {v}")
        print("runners-up:")
        for r in e["runners_up"]:
            print(f"  {r['config']:36s} +{r['delta_us']:.3f} us: {'; '.join(r['worse_in']) or 'equal terms'}")
        if e["rejected_near_top"]:
            print("rejected near the top (cheaper or close, but illegal):")
            for r in e["rejected_near_top"]:
                name = f"{r['config']['tile_m']}x{r['config']['tile_n']}x{r['config']['tile_k']}"
                print(f"  {name:14s} {'; '.join(r['reasons'])}")
    return 0
