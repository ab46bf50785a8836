"""``cutegen search``: the legality-aware e-graph search for one GEMM problem."""
from __future__ import annotations

import json
import sys

from cutegen.errors import FieldError

HELP = "search the legal Hopper kernel configurations of a GEMM (or grouped GEMM) problem and rank them by cost"


def add_arguments(p) -> None:
    p.add_argument("--op", default="gemm", choices=("gemm", "grouped_gemm"),
                   help="the operation: gemm (default; needs --m, --n, --k) or grouped_gemm (needs --groups, "
                        "--tokens, --n, --k)")
    p.add_argument("--m", type=int)
    p.add_argument("--n", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="bf16", help="input type of A and B: bf16 f16 tf32 e4m3 e5m2")
    p.add_argument("--dtype-c", default=None, help="C type (f32 bf16 f16 void); default follows --dtype")
    p.add_argument("--dtype-d", default=None, help="D type (f32 bf16 f16); default follows --dtype")
    p.add_argument("--layout", default="tn", help="tn nt nn tt (A then B; t = row-major)")
    p.add_argument("--fp8-fast-accum", action="store_true",
                   help="FP8 only: fast accumulation (one WGMMA accumulator, like torch._scaled_mm(use_fast_accum=True))")
    from .generate import add_ld_arguments
    add_ld_arguments(p)
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--backend", default="cutlass", choices=("cutlass", "cutlass_builder", "dsl"),
                   help="the renderer the result is for; dsl also prunes what the CuTe DSL backend refuses")
    from .generate import add_ranking_arguments
    add_ranking_arguments(p)
    p.add_argument("--explain", action="store_true",
                   help="rewrite chain, cost breakdown, why runners-up lose, where each prediction came from")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    from .search_grouped import add_arguments as add_grouped_arguments
    add_grouped_arguments(p)


def problem_from_args(args):
    from cutegen.problem import GemmProblem

    from .generate import ld_fields

    missing = [f"--{n}" for n in ("m", "n", "k") if getattr(args, n) is None]
    if missing:
        raise FieldError(missing[0], f"a GEMM search needs {', '.join(missing)}")
    data = {"m": args.m, "n": args.n, "k": args.k, "batch": args.batch, "dtype": args.dtype, "layout": args.layout,
            **ld_fields(args)}
    if args.dtype_c is not None:
        data["dtype_c"] = args.dtype_c
    if args.dtype_d is not None:
        data["dtype_d"] = args.dtype_d
    if getattr(args, "fp8_fast_accum", False):
        data["fp8_fast_accum"] = True
    return GemmProblem.from_dict(data, where="problem")


def label(cfg) -> str:
    """short_name plus the scheduler's raster order and swizzle when they are not the defaults."""
    extra = ""
    if cfg.raster_order != "heuristic" or cfg.raster_swizzle != 1:
        extra = f"_{cfg.raster_order}_swz{cfg.raster_swizzle}"
    return cfg.short_name() + extra


def device_from_args(args):
    """(device kind, learned.Predictor or None) of the ranking --device/--prior/--db choose (what
    ``cutegen search`` ranks with)."""
    from .generate import ranking_from_args
    r = ranking_from_args(args)
    return r.device_kind, r.search_kwargs()["predictor"]


def run(args) -> int:
    if args.op == "grouped_gemm":
        from .search_grouped import run as run_grouped
        return run_grouped(args)
    from cutegen.search import search

    if args.top_k < 1 or args.top_k > 100:
        raise FieldError("top_k", f"expected 1 to 100, got {args.top_k}")
    from .generate import ranking_from_args

    problem = problem_from_args(args)
    ranking = ranking_from_args(args, problem.target)
    result = search(problem, top_k=args.top_k, explain=args.explain, backend=args.backend,
                    **ranking.search_kwargs())
    if not result.ranked:
        raise FieldError("problem", f"no legal configuration for {problem.name} among the "
                         f"{result.candidates_judged} cheapest candidates judged; rules that rejected them: "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(result.pruned_by_rule.items())))
    if args.json:
        out = result.to_dict()
        out["ranking"] = ranking_dict(ranking)
        if args.explain:
            out["explain"] = explain_dict(result)
            out["explain"]["ranking"] = ranking_dict(ranking)
        json.dump(out, sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    print(f"problem {problem.name}: {result.candidates_total} reachable candidates, "
          f"{result.candidates_judged} judged by the rules, {result.candidates_legal} legal; "
          f"e-graph {result.egraph_nodes} nodes / {result.egraph_classes} classes, "
          f"{result.iterations} iterations, {result.search_seconds:.3f} s")
    print(ranking.describe())
    for i, r in enumerate(result.ranked):
        tflops = problem.flops / (r.cost * 1e-6) / 1e12
        src = f"  [{r.prediction.source}]" if r.prediction is not None else ("  [prior]" if args.explain else "")
        print(f"  {i + 1}. {label(r.config):58s} {r.cost:10.2f} us  {tflops:7.1f} TFLOP/s (predicted){src}"
              + (f"  plan {r.plan.label()}" if r.plan is not None else ""))
    if result.pruned_by_rule:
        print("pruned by rule: " + ", ".join(f"{k}={v}" for k, v in sorted(result.pruned_by_rule.items())))
    if args.explain:
        print_explain(result)
    return 0


def ranking_dict(ranking) -> dict:
    """What --json states of the ranking: its label, the device kind, where the kind came from, and why a
    learned ranking was not used where it was not."""
    out = {"ranking": ranking.label, "device_kind": ranking.device_kind, "kind_from": ranking.kind_from,
           "wave_tiles": ranking.wave_tiles}
    if ranking.note:
        out["note"] = ranking.note
    p = ranking.predictor
    if ranking.method != "prior" and p is not None:
        out.update(samples_of_kind=p.samples, samples=p.training_samples)
    return out


def _why_more(best: dict, other: dict) -> list[str]:
    """The cost terms in which a runner-up is worse than the winner, largest first."""
    keys = ("waves", "mma_us_per_kblock", "load_us_per_kblock", "pipeline_us_per_kblock", "epilogue_us_per_tile",
            "kblocks", "ragged_waste", "instruction_efficiency", "accumulator_registers", "active_ctas", "mainloop_us",
            "dram_us")
    out = []
    for k in keys:
        a, b = best.get(k), other.get(k)
        if a is None or b is None or a == b:
            continue
        out.append(f"{k} {a:g} -> {b:g}")
    return out


def explain_dict(result) -> dict:
    from cutegen.dtypes import DTYPES
    from cutegen.search.layout_rewrites import smem_layout

    best = result.ranked[0]
    cfg = best.config
    from cutegen.swap_ab import kernel_problem
    p = kernel_problem(result.problem, cfg)     # a swap-AB kernel's A and B are the caller's B and A
    tm, tn, tk = cfg.tile_shape
    st = cfg.stages
    layouts = {}
    for op, atom, mn, dt in (("A", cfg.smem_layout_a, tm, p.dtype_a), ("B", cfg.smem_layout_b, tn, p.dtype_b)):
        lay = smem_layout(atom.major, atom.swizzle_bytes, DTYPES[dt].bits, mn, tk, st)
        lay["cute"] = cute_text(lay["layout"])
        layouts[op] = lay
    cm, cn = cfg.cluster_shape[:2]
    chain = [f"Root = Impl(K(tile, Cl({cm}, {cn}), Pol(...), {cfg.raster_order}, {cfg.raster_swizzle}))  "
             "[expand: judged legal by check_config, priced by the cost model, extracted]"]
    chain += [form if form.startswith(("problem:", "Pol(", "temporal", "  Tp(")) else f"tile = {form}" for form in best.chain
              if not form.startswith("ClusterSplit") or f", {cm}, {cn})  [" in form]
    chain.append(f"Pol({cfg.mainloop_schedule}, {cfg.epilogue_schedule}, {cfg.tile_scheduler}, auto) = "
                 f"Pol(..., {st})  [expand: StageCountAutoCarveout resolves auto]")
    if best.plan is not None:
        form = {"data_parallel": "DataParallel", "stream_k": "StreamKPlan"}.get(best.plan.decomposition,
                                                                             f"SplitK({best.plan.splits})")
        chain.append(f"Run(K, DataParallel) = Run(K, {form})  [plans: extracted the cheapest launch of the "
                     f"kernel's Run e-class; run-time plan {best.plan.label()}]")
    runners = [{"config": label(r.config), "cost": round(r.cost, 3), "delta_us": round(r.cost - best.cost, 3),
                "worse_in": _why_more(best.breakdown, r.breakdown)} for r in result.ranked[1:]]
    rejected = [{"config": KernelConfigName(x["config"]), "rules": x["rules"], "reasons": x["reasons"]}
                for x in result.rejected[:8]]
    return {"chosen": label(cfg), "rewrite_chain": chain, "smem_layouts": layouts,
            "cost_breakdown": best.breakdown, "runners_up": runners, "rejected_near_top": rejected,
            "predictions": [provenance(r) for r in result.ranked]}


def provenance(r) -> dict:
    """Where a ranked candidate's predicted time came from: a measurement of exactly this problem and
    configuration on the device kind, the learned correction of the prior, or the analytic prior alone."""
    p = r.prediction
    out = {"config": label(r.config), "source": p.source if p is not None else "prior", "us": round(r.cost, 3),
           "prior_us": round(p.prior_us if p is not None else r.cost, 3)}
    if p is not None:
        out.update({k: v for k, v in p.to_dict().items() if k in ("sigma", "distance", "measurements")})
    return out


def cute_text(term: str) -> str:
    """``Sw<b,m,s> o (shapes):(strides)`` for an extracted swizzled layout term."""
    from cutegen.search.layout_rewrites import parse_swlayout

    (b, m, s), off, modes = parse_swlayout(term)
    shapes = ",".join(str(x) for x, _ in modes)
    strides = ",".join(str(d) for _, d in modes)
    lay = f"({shapes}):({strides})"
    return f"Sw<{b},{m},{s}> o {lay}" if b else (f"{off} + {lay}" if off else lay)


def KernelConfigName(d: dict) -> str:  # noqa: N802 - reads as a constructor of a name
    from cutegen.config import KernelConfig

    return label(KernelConfig.from_dict(d))


def print_explain(result) -> None:
    e = explain_dict(result)
    print(f"\nchosen: {e['chosen']}")
    print("rewrite chain:")
    for line in e["rewrite_chain"]:
        print(f"  {line}")
    print("shared-memory layouts (tile_to_shape rewritten to CuTe form):")
    for op, lay in e["smem_layouts"].items():
        print(f"  {op}: {lay['term']} = {lay['cute']}")
        sbo = f", SBO {lay['wgmma_sbo_bytes']} B" if lay["wgmma_sbo_bytes"] else ""
        print(f"     {lay['swizzle']}, TMA box {lay['tma_box']} x{lay['tma_issues_per_stage']} per stage, "
              f"WGMMA descriptor {lay['wgmma_layout_type']}{sbo}")
    print("cost breakdown:")
    for k, v in e["cost_breakdown"].items():
        print(f"  {k:26s} {v}")
    print("predictions (measured: this problem and configuration timed on the device kind; learned: the prior "
          "corrected by the model fitted on the results database, sigma its log-space uncertainty, distance to the "
          "nearest training sample in units of their spacing; prior: search/cost.py alone):")
    for p in e["predictions"]:
        extra = ""
        if p["source"] == "measured":
            extra = f", median of {p['measurements']}"
        elif p["source"] == "learned":
            extra = f", sigma {p['sigma']:.2f}, distance {p['distance']:.2f}"
        print(f"  {p['config']:58s} {p['us']:10.2f} us  {p['source']:8s} (prior {p['prior_us']:.2f} us{extra})")
    print("runners-up:")
    for r in e["runners_up"]:
        why = "; ".join(r["worse_in"]) or "equal terms; ordered by the configuration text"
        print(f"  {r['config']:58s} +{r['delta_us']:.3f} us: {why}")
    if e["rejected_near_top"]:
        print("rejected near the top (cheaper or close, but illegal):")
        for r in e["rejected_near_top"]:
            print(f"  {r['config']:58s} {'; '.join(r['reasons'])}")
