"""Plot a pack's GPU results (bench/gpu_pack.py's JSON): time ratio to torch.matmul against M, one line per
(N, K); sampled shapes as dots, off-sample shapes as crosses, held-out shapes (never measured while tuning) as
triangles, each point labelled with the kernel index that served it (F: the unaligned fallback, T: torch.matmul
inside the op).

    python bench/plot_pack.py RESULTS.json OUT.png [--title TEXT]
    python bench/plot_pack.py bench/packs/<set>/<kind>/pack.json OUT.png     # a measured pack's tuning-run times
"""
from __future__ import annotations

import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _summary(rows: list[dict]) -> dict:
    import math
    xs = [r["speedup"] for r in rows]
    return {"shapes": len(xs), "geomean": math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None}


def main(argv: list[str]) -> int:
    src, dst = argv[:2]
    title = argv[argv.index("--title") + 1] if "--title" in argv else None
    res = json.load(open(src))
    if "coverage" in res:
        # a measured pack's record (pack --tune: bench/packs/<set>/<kind>/pack.json): the tuning run's times of the
        # kernel serving each shape, timed through gemm_kernel, not yet through the op
        rows = [{"m": r["m"], "n": r["n"], "k": r["k"], "speedup": r["cublas_ratio"], "kernel": r["kernel"] or "?",
                 "sampled": r.get("point", "sampled") == "sampled"}
                for r in res["coverage"]["rows"] if r.get("cublas_ratio")]
        res = {"time": rows, "pack": res["name"] + " (measured selection, tuning run)",
               "device": res["target"]["kind"], "sampled_summary": _summary([r for r in rows if r["sampled"]]),
               "off-sample_summary": _summary([r for r in rows if not r["sampled"]])}
    rows = res["time"]
    nks = sorted({(r["n"], r["k"]) for r in rows})
    fig, ax = plt.subplots(figsize=(11, 6))
    for n, k in nks:
        pts = sorted((r for r in rows if (r["n"], r["k"]) == (n, k)), key=lambda r: r["m"])
        line, = ax.plot([r["m"] for r in pts], [r["speedup"] for r in pts], lw=1, label=f"N={n} K={k}")
        for r in pts:
            marker = "^" if r.get("held_out") else ("o" if r.get("sampled", True) else "x")
            ax.plot(r["m"], r["speedup"], marker, color=line.get_color(), ms=4)
            if r.get("path") == "torch.matmul fallback":
                tag = "T"
            elif r.get("kernel", "").startswith("vendor"):
                tag = "V"                      # the vendor tactic: cuBLASLt through the pack's plan API
            else:
                m = re.match(r"k(\d+)_", r.get("kernel", ""))
                tag = ("F" if "fallback" in r.get("kernel", "") else m.group(1).lstrip("0") or "0") if m else "?"
            ax.annotate(tag, (r["m"], r["speedup"]), fontsize=5, xytext=(2, 2), textcoords="offset points")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(0.9, color="grey", lw=0.6, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("torch.matmul time / pack op time (> 1: the pack is faster)")
    summ = res.get("sampled_summary") or {}
    off = res.get("off-sample_summary") or {}
    held = res.get("held-out_summary") or {}
    tail = f", held-out {held.get('geomean') or 0:.3f}" if held.get("shapes") else ""
    ax.set_title(title or f"{res['pack']} on {res['device']}: geomean sampled {summ.get('geomean') or 0:.3f}, "
                          f"off-sample {off.get('geomean') or 0:.3f}{tail}\n(o sampled, x off-sample, ^ held-out: "
                          "never measured while tuning; labels: the kernel that served it, V: cuBLASLt, T: torch.matmul)",
                 fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(dst, dpi=150)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
