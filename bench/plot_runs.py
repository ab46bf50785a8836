"""Plots of two GPU result sets that came without one.

    python bench/plot_runs.py decode RESULTS.json OUT.png   # bench/gpu_decode.sh: fraction of the HBM floor per shape
    python bench/plot_runs.py pad TIME.json OUT.png         # bench/gpu_pad.sh: each contender's time over cuBLAS's

decode: GPU time (CUDA-graph replay) as a fraction of the HBM floor (K and V read once at the datasheet bandwidth),
for the fastest split-KV kernel, the fastest unsplit kernel, SDPA cuDNN and SDPA flash, per shape.
pad: cuBLAS's time over each contender's (above 1: faster than cuBLAS), per problem.
"""
from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _bars(ax, names, series: dict[str, list], ylabel: str, ref: float | None = None):
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [v if v is not None else 0.0 for v in values], width, label=label)
    if ref is not None:
        ax.axhline(ref, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def decode(path: str, out: str) -> None:
    d = json.load(open(path))
    t = d["time"]
    names, split, unsplit, cudnn, flash = [], [], [], [], []
    for s in t["shapes"]:
        c = s["contenders"]

        def best(pred):
            vals = [v.get("graph_hbm_fraction") for k, v in c.items() if pred(k, v) and v.get("graph_hbm_fraction")]
            return max(vals) if vals else None
        names.append(s["name"])
        split.append(best(lambda k, v: "split" in k))
        unsplit.append(best(lambda k, v: not k.startswith("sdpa") and "split" not in k))
        cudnn.append((c.get("sdpa_cudnn") or {}).get("graph_hbm_fraction"))
        flash.append((c.get("sdpa_flash") or {}).get("graph_hbm_fraction"))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    _bars(ax, names, {"cutegen split-KV (best)": split, "cutegen unsplit (best)": unsplit,
                      "SDPA cuDNN": cudnn, "SDPA flash": flash}, "GPU time / HBM floor (higher is better)", 0.9)
    ax.set_title(f"decode-like attention, {t.get('device', '')} ({t.get('date', '')}, torch {t.get('torch', '')})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def pad(path: str, out: str) -> None:
    d = json.load(open(path))
    names, series = [], {}
    for p in d["problems"]:
        names.append(p.get("name") or p.get("problem"))
        for role, v in p["contenders"].items():
            series.setdefault(role, [])
    for p in d["problems"]:
        for role in series:
            v = p["contenders"].get(role)
            series[role].append(v.get("vs_cublas") if v and v.get("ok") else None)
    labels = {"form": "cuBLAS's tile, one-stage TMA form", "alt": "the same, no-smem epilogue",
              "pick": "search pick, wave tiles on", "prev": "search pick, wave tiles off (main)"}
    series = {labels.get(k, k): v for k, v in series.items()}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    _bars(ax, names, series, "cuBLAS time / contender time", 1.0)
    ax.set_title(f"tiles sized to the waves, {d.get('device', '')} ({d.get('date', '')}, torch {d.get('torch', '')})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("decode", "pad"):
        sys.exit(__doc__)
    {"decode": decode, "pad": pad}[sys.argv[1]](sys.argv[2], sys.argv[3])
