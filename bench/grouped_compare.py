#!/usr/bin/env python3
"""The grouped search's new picks against its old ones and torch._grouped_mm, in one process (issue 26).

    python bench/grouped_compare.py plan --out out/profile-compare     # here: search + render
    (GPU) python bench/grouped_moe.py run out/profile-compare --json R.json   # validate + time, as the MoE bench

``plan`` searches the bf16 cases of bench/moe.toml listed in CASES with this tree's search (top ``--top-k``),
adds each case's old pick (the kernel H200 run 2 timed as the pick: ``OLD_RESULTS``) and writes a plan in
bench/grouped_moe.py's format: every kernel is validated on the ragged cases, and each case times its new
ranked kernels, its old pick, the other cases' picks of the class, and torch._grouped_mm, the loop of
torch.matmul and padded bmm beside them. The old pick is marked ``why: "old pick"`` in the plan's kernels.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

OLD_RESULTS = BENCH / "results" / "grouped" / "2026-11-26-h200-run2-results.json"
# the bf16 offs cases of the suite (the masked decode case is another kernel class)
CASES = ("mixtral_w1_prefill_uniform", "mixtral_w1_prefill_skewed", "mixtral_w2_prefill_uniform",
         "dsv3_gate_up_prefill_uniform", "dsv3_gate_up_prefill_skewed", "dsv3_down_prefill_uniform",
         "qwen3_gate_up_prefill_uniform", "qwen3_down_prefill_skewed", "gptoss_gate_up_prefill_uniform",
         "gptoss_gate_up_prefill_skewed",
         # decode: the cluster term and the raster order move these picks too
         "mixtral_w1_decode_uniform", "dsv3_gate_up_decode_uniform", "dsv3_gate_up_decode64_skewed",
         "qwen3_gate_up_decode_uniform", "qwen3_down_decode_skewed", "gptoss_down_decode_uniform")
# timed beside the picks on the prefill cases: torch._grouped_mm's own prefill tile through cutegen's kernel
# (128x256x64, 2x1 cluster, the heuristic raster), the fastest kernel of H200 run 2 on DeepSeek-V3 gate-up and
# Mixtral w2 uniform, which the search does not pick
PREFILL_EXTRA = (dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=2),)
# the other kernel classes of the suite (FP8 per-tensor and block-scaled, the masked layout), and the one bf16
# decode case whose final pick no earlier run built
OTHER_CASES = ("mixtral_w1_prefill_uniform_e4m3", "dsv3_gate_up_prefill_uniform_e4m3",
               "mixtral_w1_prefill_uniform_e4m3_fastacc", "dsv3_gate_up_prefill_uniform_e4m3_fastacc",
               "dsv3_gate_up_prefill_uniform_block128", "dsv3_gate_up_decode_uniform_block128",
               "dsv3_gate_up_decode_masked", "qwen3_down_decode_skewed")
MAX_KERNELS = 16           # one round of 16 nvcc jobs on the GPU machine


def old_picks(path: Path = OLD_RESULTS) -> dict[str, str]:
    """case name -> the config name of the kernel the run timed as its pick."""
    data = json.loads(path.read_text())
    return {c["name"]: data["kernels"][c["pick"]]["config_name"] for c in data["cases"] if c.get("pick")}


def cmd_plan(args) -> int:
    import grouped_model_check as gmc
    import grouped_moe as gm
    from cutegen.core import registry
    from cutegen.core.search import search

    out = Path(args.out)
    suite = {c["name"]: c for c in gm.load_suite()}
    old = old_picks(Path(args.old))
    kernels: dict[str, dict] = {}
    rendered: dict[str, object] = {}
    cases = []

    def add(problem, config, why: str) -> str:
        kernel = registry.render(problem, config)
        h = kernel.kernel_hash
        if h not in kernels:
            kernels[h] = {"dir": f"kernels/{h}", "config": config.to_dict(), "config_name": config.short_name(),
                          "class": problem.kernel_class_name, "order": len(kernels), "why": why}
            rendered[h] = kernel
        return h

    names = CASES if args.cases == "bf16" else OTHER_CASES
    for name in names:
        p = gm.problem_of(suite[name])
        res = search(p, top_k=args.top_k if "prefill" in name else 1)
        ranked = []
        for i, r in enumerate(res.ranked):
            ranked.append({"kernel": add(p, r.config, "pick" if i == 0 else f"rank {i + 1}"),
                           "cost_us": round(r.cost, 3), "config_name": r.config.short_name()})
        old_cfg = gmc.config_of(old[name]) if name in old else None
        old_h = add(p, old_cfg, "old pick") if old_cfg is not None else None
        cases.append({"name": name, "problem": p.to_dict(), "problem_name": p.name, "class": p.kernel_class_name,
                      "fill": suite[name].get("fill"), "pick": ranked[0]["kernel"], "ranked": ranked,
                      "old_pick": old_h, "old_pick_name": old.get(name)})
    if len(kernels) > MAX_KERNELS:
        print(f"grouped_compare: {len(kernels)} kernels is more than one build round ({MAX_KERNELS}); lower --top-k",
              file=sys.stderr)
        return 2
    from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
    first_prefill = next(gm.problem_of(suite[n]) for n in CASES if "prefill" in n)
    extra = [add(first_prefill, GroupedGemmConfig(**f), "fixed alternative") for f in PREFILL_EXTRA] \
        if args.cases == "bf16" else []
    picks = list(dict.fromkeys(c["pick"] for c in cases))
    classes = {c["name"]: c["class"] for c in cases}
    kind = lambda name: ("prefill" if "prefill" in name else "decode", classes[name])  # noqa: E731
    for c in cases:
        # its own ranked kernels, its old pick, and the new picks of the other cases of its kind (prefill, decode)
        same_kind = [o["pick"] for o in cases if kind(o["name"]) == kind(c["name"])]
        same_kind += extra if kind(c["name"])[0] == "prefill" else []
        c["kernels"] = list(dict.fromkeys([r["kernel"] for r in c["ranked"]] + ([c["old_pick"]] if c["old_pick"] else [])
                                          + same_kind))
    build_order = picks + [h for h in sorted(kernels, key=lambda h: kernels[h]["order"]) if h not in picks]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    for h, kernel in rendered.items():
        kernel.write(tmp / kernels[h]["dir"])
    (tmp / "plan.json").write_text(json.dumps({"suite": "moe.toml", "cases": cases, "kernels": kernels,
                                               "sanitize_kernel": picks[0], "build_order": build_order},
                                              indent=1, sort_keys=True) + "\n")
    (tmp / "build_order.txt").write_text("".join(f"{kernels[h]['dir']}\n" for h in build_order))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"compare plan: {len(cases)} cases, {len(kernels)} kernels -> {out}")
    for c in cases:
        moved = "" if c["pick"] == c["old_pick"] else "   (was " + str(c["old_pick_name"]) + ")"
        print(f"  {c['name']:34s} pick {kernels[c['pick']]['config_name']:32s} {c['ranked'][0]['cost_us']:8.1f} us{moved}")
    return 0


def compare_table(plan: dict, results: dict) -> tuple[str, dict]:
    """Markdown: per case the old pick, the new pick, the fastest validated kernel and torch._grouped_mm (ms and
    fraction of the floor), and the geomean of new over old; and the same as a dict."""
    import math
    names = {h: k["config_name"] for h, k in plan["kernels"].items()}
    valid = {h for h, k in results.get("kernels", {}).items() if k.get("validated")}
    rows, ratios, summary = [], [], {}
    for rec in results.get("cases", []):
        pc = next((c for c in plan["cases"] if c["name"] == rec["name"]), None)
        if pc is None or "kernels" not in rec:
            continue
        ks = rec["kernels"]

        def cell(h):
            r = ks.get(h) or {}
            if "ms" not in r:
                return "-", None
            mark = "" if (r.get("ok") and h in valid) else " WRONG" if r.get("ok") is False else " (not validated)"
            return f"{r['ms']:.4f} ({r['of_floor']:.2f}){mark}", r["ms"]
        old_s, old_ms = cell(pc.get("old_pick"))
        new_s, new_ms = cell(pc["pick"])
        ok = {h: r for h, r in ks.items() if r.get("ok") and h in valid and "ms" in r}
        best = min(ok, key=lambda h: ok[h]["ms"]) if ok else None
        torch_r = rec.get("peers", {}).get("torch_scaled_grouped_mm") or rec.get("peers", {}).get("torch_grouped_mm", {})
        torch_s = f"{torch_r['ms']:.4f} ({torch_r['of_floor']:.2f})" if "ms" in torch_r else "-"
        best_s = f"{names[best]} {ok[best]['ms']:.4f} ({ok[best]['of_floor']:.2f})" if best else "-"
        if old_ms and new_ms:
            ratios.append(old_ms / new_ms)
        summary[rec["name"]] = {"old": old_ms, "new": new_ms, "best": ok[best]["ms"] if best else None,
                                "torch_grouped_mm": torch_r.get("ms"), "floor_ms": rec.get("floor_ms"),
                                "new_pick": names.get(pc["pick"]), "old_pick": pc.get("old_pick_name")}
        rows.append(f"| {rec['name']} | {pc.get('old_pick_name') or '-'} {old_s} | {names[pc['pick']]} {new_s} | "
                    f"{best_s} | {torch_s} |")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    md = ["| case | old pick ms (of floor) | new pick ms (of floor) | fastest validated | torch._(scaled_)grouped_mm |",
          "|---|---|---|---|---|", *rows, "",
          f"new pick over old pick: geomean speedup {geo:.3f}x over {len(ratios)} cases" if geo else "no pair timed"]
    return "\n".join(md) + "\n", {"cases": summary, "geomean_old_over_new": geo}


def cmd_summarize(args) -> int:
    plan = json.loads((Path(args.plan) / "plan.json").read_text())
    results = json.loads(Path(args.results).read_text())
    md, doc = compare_table(plan, results)
    if args.out:
        Path(args.out).write_text(md)
    print(md)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="search, add the old picks, render (here)")
    p.add_argument("--out", default="out/profile-compare")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--old", default=str(OLD_RESULTS), help="a grouped_moe results.json whose picks are the old ones")
    p.add_argument("--cases", choices=("bf16", "other"), default="bf16",
                   help="bf16: the bf16 offs cases (CASES); other: FP8, block128, masked and one decode (OTHER_CASES)")
    p.set_defaults(fn=cmd_plan)
    s = sub.add_parser("summarize", help="old pick vs new pick vs torch._grouped_mm, from grouped_moe's results")
    s.add_argument("plan")
    s.add_argument("results")
    s.add_argument("--out", help="write the markdown table here too")
    s.set_defaults(fn=cmd_summarize)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
