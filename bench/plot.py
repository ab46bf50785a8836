"""Ratios per problem of a `cutegen bench` results file, as a PNG.

    python bench/plot.py bench/results/2026-11-22-nvidia-h100-80gb-hbm3.json [OUT.png]

cutegen's speed relative to cuBLAS (CUDA events, and CUDA-graph time where measured) and to the
CUTLASS CollectiveBuilder baseline, per problem, around 1.0; below it, for decode shapes (M <= 16),
the fraction of the HBM floor each contender reaches. Needs matplotlib (not the generator).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SERIES = (("cutegen", "cutegen (search-picked)", "#1b9e77"),
          ("cublas", "cuBLAS (torch)", "#7570b3"),
          ("cutlass_builder", "CUTLASS builder 128x256x64 2x1x1 coop", "#d95f02"))


def plot(doc: dict, out_path) -> Path:
    """Ratios, not TFLOP/s: a decode GEMM's TFLOP/s bar is invisible next to a square one's.

    Top: cutegen's speed relative to cuBLAS (CUDA events; and inside a CUDA graph where the bench
    measured one) and to the CUTLASS builder, per problem, on a log scale around 1.0, with the 0.9x
    line. Bottom, when the document has HBM floors (M <= 16): the fraction of the HBM floor each
    contender reaches."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = doc["problems"]
    names = [p["name"] for p in problems]
    n = len(problems)
    floors = [(j, p) for j, p in enumerate(problems) if p.get("fraction_of_hbm_floor")]
    rows = 2 if floors else 1
    fig, axes = plt.subplots(rows, 1, figsize=(max(8.0, 0.28 * n + 3), 5.0 * rows), squeeze=False)
    ax = axes[0][0]
    series = (("ratio_vs_cublas", "x cuBLAS (CUDA events)", "#7570b3", "o"),
              ("ratio_vs_cublas_graph", "x cuBLAS (inside a CUDA graph)", "#1b9e77", "D"),
              ("ratio_vs_cutlass", "x CUTLASS builder 128x256x64 2x1x1 coop", "#d95f02", "s"))
    values = []
    for key, label, color, marker in series:
        xs = [j for j, p in enumerate(problems) if p.get(key)]
        ys = [problems[j][key] for j in xs]
        values += ys
        if xs:
            ax.plot(xs, ys, linestyle="none", marker=marker, markersize=5, color=color, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.9, color="grey", linestyle="--", linewidth=0.8)
    ax.set_yscale("log")
    if values:
        ax.set_ylim(min(values + [0.8]) * 0.9, max(values + [1.25]) * 1.1)
    ax.set_xticks(range(n))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel("cutegen speed / contender's (higher is better)")
    s = doc.get("summary", {})
    g = (s.get("vs_cublas") or {}).get("geomean")
    gg = (s.get("vs_cublas_graph") or {}).get("geomean")
    gc = (s.get("vs_cutlass") or {}).get("geomean")
    title = f"cutegen vs cuBLAS and CUTLASS on {doc.get('device', {}).get('name', '?')}, {doc.get('date', '')[:10]}"
    parts = [f"geomean x cuBLAS {g:.3f}" if g else "", f"graph-timed {gg:.3f}" if gg else "",
             f"x CUTLASS {gc:.3f}" if gc else ""]
    if any(parts):
        title += "\n" + ", ".join(x for x in parts if x)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", which="both", alpha=0.3)
    if floors:
        bx = axes[1][0]
        width = 0.27
        for i, (key, label, color) in enumerate(SERIES):
            xs = [k + (i - 1) * width for k, (_, p) in enumerate(floors) if p["fraction_of_hbm_floor"].get(key)]
            ys = [p["fraction_of_hbm_floor"][key] for _, p in floors if p["fraction_of_hbm_floor"].get(key)]
            bx.bar(xs, ys, width, label=label, color=color)
        bx.axhline(1.0, color="black", linewidth=0.8)
        bx.set_xticks(range(len(floors)))
        bx.set_xticklabels([p["name"] for _, p in floors], rotation=45, ha="right", fontsize=7)
        bx.set_ylabel("fraction of the HBM floor reached")
        bx.set_title(f"M <= 16: bytes of A, B, C, D over {doc.get('hbm_label') or 'the HBM bandwidth'} "
                     "/ time (graph time where measured)", fontsize=9)
        bx.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=110)
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
