"""Plot bench/attention_bench.py's time.json: TFLOP/s per shape for cutegen's kernels, the CUTLASS 88 example's
kernels (rendered by cutegen) and SDPA's cuDNN and flash backends.

  python bench/plot_attention.py bench/results/attention/time.json -o bench/results/attention/tflops.png
"""
from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

GROUPS = (("cutegen", "cutegen pick", "#1f77b4"), ("cutegen-best", "best cutegen-rendered kernel", "#aec7e8"),
          ("example", "CUTLASS 88 example kernel", "#2ca02c"), ("sdpa_cudnn", "SDPA cuDNN", "#d62728"),
          ("sdpa_flash", "SDPA flash", "#ff7f0e"))


def rows(doc):
    out = []
    for shape in doc["shapes"]:
        c = shape.get("contenders", {})
        ours = {n: r["tflops"] for n, r in c.items() if n.startswith(("cutegen", "example", "alt")) and r.get("tflops")}
        vals = {"cutegen": c.get("cutegen", {}).get("tflops"),
                "cutegen-best": max(ours.values()) if ours else None,
                "example": c.get("example", {}).get("tflops"),
                "sdpa_cudnn": c.get("sdpa_cudnn", {}).get("tflops"),
                "sdpa_flash": c.get("sdpa_flash", {}).get("tflops")}
        out.append((shape["name"], vals))
    return out


def main(argv=None) -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("time_json")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.time_json).read_text())
    data = rows(doc)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(data)), 5))
    width = 0.8 / len(GROUPS)
    for g, (key, label, color) in enumerate(GROUPS):
        xs = [i + (g - (len(GROUPS) - 1) / 2) * width for i in range(len(data))]
        ys = [v.get(key) or 0.0 for _, v in data]
        ax.bar(xs, ys, width, label=label, color=color)
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels([textwrap.fill(n.replace("_", " "), 14).replace(" ", "_") for n, _ in data], fontsize=7)
    ax.set_ylabel("TFLOP/s (useful FLOPs; causal: kept pairs)")
    ax.set_title(f"Attention forward, bf16, {doc.get('device', '?')} (torch {doc.get('torch', '?')}, one process)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
