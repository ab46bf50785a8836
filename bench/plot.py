"""TFLOP/s by problem for the three contenders of a `cutegen bench` results file, as a PNG.

    python bench/plot.py bench/results/2026-11-22-nvidia-h100-80gb-hbm3.json [OUT.png]

Grouped bars (cutegen, cuBLAS, CUTLASS CollectiveBuilder) per problem, the datasheet peak as a
line, and the ratio to cuBLAS above each cutegen bar. Needs matplotlib (not the generator).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SERIES = (("cutegen", "cutegen (search-picked)", "#1b9e77"),
          ("cublas", "cuBLAS (torch)", "#7570b3"),
          ("cutlass_builder", "CUTLASS builder 128x256x64 2x1x1 coop", "#d95f02"))


def plot(doc: dict, out_path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = doc["problems"]
    names = [p["name"] for p in problems]
    n = len(problems)
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * n + 3), 5.5))
    for i, (key, label, color) in enumerate(SERIES):
        xs, ys = [], []
        for j, p in enumerate(problems):
            tf = p["results"].get(key, {}).get("tflops")
            if tf:
                xs.append(j + (i - 1) * width)
                ys.append(tf)
        ax.bar(xs, ys, width, label=label, color=color)
        if key == "cutegen":
            for x, y, p in zip(xs, ys, [p for p in problems if p["results"].get(key, {}).get("tflops")]):
                r = p.get("ratio_vs_cublas")
                if r:
                    ax.annotate(f"{r:.2f}x", (x, y), textcoords="offset points", xytext=(0, 3),
                                ha="center", fontsize=7)
    peak = doc.get("peak_tflops")
    if peak:
        ax.axhline(peak, color="grey", linestyle="--", linewidth=1)
        ax.text(n - 0.5, peak, f"{peak:g} TFLOP/s dense bf16 peak (datasheet)", ha="right", va="bottom",
                fontsize=8, color="grey")
    ax.set_xticks(range(n))
    ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("TFLOP/s (median of timed runs)")
    s = doc.get("summary", {})
    g = s.get("vs_cublas", {}).get("geomean")
    gc = s.get("vs_cutlass", {}).get("geomean")
    title = f"cutegen vs cuBLAS vs CUTLASS on {doc.get('device', {}).get('name', '?')}, {doc.get('date', '')[:10]}"
    if g:
        title += f"\ngeomean x cuBLAS {g:.3f}" + (f", x CUTLASS {gc:.3f}" if gc else "")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    tops = [p["results"][k]["tflops"] for p in problems for k, _, _ in SERIES if p["results"].get(k, {}).get("tflops")]
    ax.set_ylim(0, max(tops + [peak or 0, 1.0]) * 1.3)
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(argv[0])
    doc = json.loads(src.read_text())
    out = Path(argv[1]) if len(argv) > 1 else src.with_suffix(".png")
    print(plot(doc, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
