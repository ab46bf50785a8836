"""Compile and run probes for two legality gaps the H200 diagnosis run found (2026-11-26).

1. ``serialize``: a 192x144x64 ping-pong kernel (swap-AB, 64x16x16 instructions, 216 f32 accumulator
   registers per consumer thread) passed every rule and ptxas serialized its wgmma (C7512), which
   cutegen's build treats as a failure. Where is the boundary? A sweep of one-warpgroup (ping-pong)
   tiles and two-warpgroup (cooperative) tiles around it, compiled only.
2. ``interleave``: kernels whose A and B shared-memory atoms are the unswizzled ``K_INTER`` passed every
   rule and faulted with "misaligned address" at tile N = 136, 200 and 232 (3 of 3). The same atom at
   even multiples of 8 (128, 144) and the odd ones again, built and validated.

GPU machine:  python bench/probe_forms.py --out DIR [--jobs 16]     (writes DIR/probes.json)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SQ = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"}


def _cfg(tm, tn, tk, sched, cluster=(1, 1), stages="auto", **extra):
    epi = "tma_warp_specialized_cooperative" if sched == "cooperative" else "tma_warp_specialized"
    return {"tile_shape": [tm, tn, tk], "cluster_shape": [*cluster, 1], "stages": stages, "mainloop_schedule": sched,
            "epilogue_schedule": epi, "tile_scheduler": "persistent", **extra}


def probes() -> list[dict]:
    out = []
    for tn in (112, 128, 136, 144, 152, 160):
        out.append({"name": f"serialize_pp_192x{tn}", "kind": "serialize", "problem": SQ,
                    "config": _cfg(192, tn, 64, "pingpong")})
    for tn in (176, 192, 208, 224, 240):
        out.append({"name": f"serialize_pp_128x{tn}", "kind": "serialize", "problem": SQ,
                    "config": _cfg(128, tn, 64, "pingpong")})
    for tn in (192, 208, 224, 240):
        out.append({"name": f"serialize_coop_256x{tn}", "kind": "serialize", "problem": SQ,
                    "config": _cfg(256, tn, 64, "cooperative")})
    # the failing kernel itself, as the diagnosis rendered it (swap-AB, problem 257 x 37888 x 4096)
    out.append({"name": "serialize_pp_192x144_swapab_257x37888", "kind": "serialize",
                "problem": {"m": 257, "n": 37888, "k": 4096, "dtype": "bf16", "layout": "tn"},
                "config": _cfg(192, 144, 64, "pingpong", (1, 2), 5, swap_ab=True, raster_order="along_n")})
    inter = {"smem_layout_a": "K_INTER", "smem_layout_b": "K_INTER"}
    for tm, tn, sched in ((64, 128, "pingpong"), (64, 144, "pingpong"), (64, 136, "pingpong"),
                          (128, 128, "cooperative"), (128, 200, "cooperative")):
        out.append({"name": f"interleave_{sched[:4]}_{tm}x{tn}", "kind": "interleave",
                    "problem": {"m": 1000, "n": 2000, "k": 1024, "dtype": "bf16", "layout": "tn"},
                    "config": _cfg(tm, tn, 64, sched, **inter)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--validate-timeout", type=float, default=120.0)
    args = ap.parse_args(argv)
    from cutegen.build import build
    from cutegen.config import KernelConfig
    from cutegen.legality import check_config
    from cutegen.problem import GemmProblem
    from cutegen.render import render
    out = Path(args.out)
    kdir = Path("/tmp/cutegen-probes")
    records = []
    for p in probes():
        problem = GemmProblem.from_dict(p["problem"], where=p["name"])
        cfg = KernelConfig.from_dict(p["config"], p["name"])
        rep = check_config(problem, cfg)
        rec = {**p, "legal": rep.legal, "rules": [v.rule_id for v in rep.violations],
               "warnings": [v.rule_id for v in rep.warnings],
               "completed": rep.config.to_dict() if rep.config is not None else None}
        if rep.legal:
            kernel = render(problem, cfg, "cutlass")
            kernel.write(kdir / p["name"])
            rec["directory"] = str(kdir / p["name"])
        records.append(rec)
        print(f"{p['name']}: {'legal' if rep.legal else 'illegal ' + ','.join(rec['rules'])}", flush=True)
    t0 = time.time()
    dirs = [r["directory"] for r in records if r.get("directory")]
    summary = build(dirs, jobs=args.jobs)
    by_dir = dict(zip(dirs, summary.results))   # build() keeps the order of its paths
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    for r in records:
        if not r.get("directory"):
            continue
        res = by_dir.get(r["directory"])
        r["build"] = {"ok": res.ok, "status": res.status, "stats": res.stats, "message": res.message[:1500]} if res else None
        if r["kind"] == "interleave" and res is not None and res.ok:
            try:
                cp = subprocess.run([sys.executable, "-m", "cutegen.commands.validate", r["directory"], "--no-probes",
                                     "--json", str(kdir / (r["name"] + ".validate.json"))],
                                    capture_output=True, text=True, timeout=args.validate_timeout)
                r["validate"] = {"rc": cp.returncode, "tail": (cp.stdout + cp.stderr)[-1500:]}
            except subprocess.TimeoutExpired:
                r["validate"] = {"rc": None, "tail": "timeout"}
        b = r.get("build") or {}
        v = r.get("validate") or {}
        print(f"{r['name']}: build {'ok' if b.get('ok') else 'FAILED'}"
              + (f"; validate rc {v.get('rc')}" if v else ""), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probes.json").write_text(json.dumps({"probes": records}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
