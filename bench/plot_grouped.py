#!/usr/bin/env python3
"""Plot and tabulate a grouped GEMM MoE run (bench/grouped_moe.py run's results.json).

    python bench/plot_grouped.py bench/results/grouped/results.json --png bench/results/grouped/moe_h200.png --md table.md

One bar group per case: the fraction of the floor (max(bytes / 4.8 TB/s, flops / peak)) reached by the
search's pick, the best validated kernel of the case, torch._grouped_mm, the loop of torch.matmul and padded
torch.bmm, all timed through their Python entry points in one process. The table (markdown) has the same
numbers, the pick over torch._grouped_mm and the geomean.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

SERIES = (("pick", "cutegen pick"), ("best", "cutegen best measured"), ("torch_grouped_mm", "torch._grouped_mm"),
          ("matmul_loop", "loop of torch.matmul"), ("padded_bmm", "padded torch.bmm"))


def rows(results: dict) -> list[dict]:
    out = []
    for c in results.get("cases", []):
        if "kernels" not in c:
            continue
        pick = c["kernels"].get(c["pick"], {})
        best = c["kernels"].get(c.get("best"), {})
        r = {"name": c["name"], "floor_ms": c["floor_ms"], "rows": c["rows"], "empty": c["empty_groups"],
             "pick": pick if pick.get("ok") else {}, "best": best, "pick_graph_ms": pick.get("ms_graph")}
        for k in ("torch_grouped_mm", "matmul_loop", "padded_bmm", "torch_scaled_grouped_mm"):
            r[k] = c["peers"].get(k, {})
        r["pick_name"] = pick.get("config_name", "?")
        r["best_name"] = best.get("config_name", "?")
        r["torch_graph_ms"] = c["peers"].get("torch_grouped_mm", {}).get("ms_graph")
        out.append(r)
    return out


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def markdown(rs: list[dict]) -> str:
    lines = ["| case | rows (empty groups) | floor ms | pick | pick ms (graph) | of floor | best ms | torch._grouped_mm ms (graph) "
             "| of floor | loop ms | bmm ms | pick / torch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for r in rs:
        p, t = r["pick"], r["torch_grouped_mm"]
        ratio = t["ms"] / p["ms"] if p.get("ms") and t.get("ms") else None
        if ratio:
            ratios.append(ratio)
        lines.append(
            f"| {r['name']} | {r['rows']} ({r['empty']}) | {r['floor_ms']:.3f} | {r['pick_name']} | "
            f"{fmt(p.get('ms'))} ({fmt(r['pick_graph_ms'])}) | {fmt(p.get('of_floor'), '.2f')} | "
            f"{fmt(r['best'].get('ms'))} | {fmt(t.get('ms'))} ({fmt(r['torch_graph_ms'])}) | {fmt(t.get('of_floor'), '.2f')} | "
            f"{fmt(r['matmul_loop'].get('ms'))} | {fmt(r['padded_bmm'].get('ms'))} | {fmt(ratio, '.2f')} |")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"\ngeomean pick / torch._grouped_mm speed over {len(ratios)} cases: {geo:.2f}x")
    return "\n".join(lines) + "\n"


def plot(rs: list[dict], png: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(rs)
    width = 0.8 / len(SERIES)
    fig, ax = plt.subplots(figsize=(max(10, 0.75 * n + 3), 5.5))
    for j, (key, label) in enumerate(SERIES):
        vals = [r[key].get("of_floor") or 0.0 for r in rs]
        ax.bar([i + (j - (len(SERIES) - 1) / 2) * width for i in range(n)], vals, width, label=label)
    ax.axhline(0.8, color="k", lw=0.8, ls="--")
    ax.text(n - 0.5, 0.81, "target 0.80 (uniform)", ha="right", va="bottom", fontsize=8)
    ax.set_xticks(range(n))
    ax.set_xticklabels([r["name"] for r in rs], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("fraction of the floor (higher is better)")
    ax.set_ylim(0, 1.05)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--png")
    ap.add_argument("--md")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.results).read_text())
    rs = rows(data)
    if not rs:
        print("plot_grouped: no timed cases in the results", file=sys.stderr)
        return 1
    md = markdown(rs)
    print(md)
    if args.md:
        Path(args.md).write_text(md)
    if args.png:
        plot(rs, Path(args.png), f"Grouped GEMM, MoE suite, {data.get('device', '?')} (torch {data.get('torch', '?')}): "
                                 "time through the op vs the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
