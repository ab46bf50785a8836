"""Where does cuBLAS win? Time cutegen's kernels with cuBLAS's own choices (issue 24, part 1).

cuBLAS is column-major: ``torch.matmul(x, W.t())`` (x M x K, W N x K) asks it for out^T = W x^T, so its
"M" is the problem's N and its tile ``AxB`` is A along N and B along M. That is exactly cutegen's
swap-AB kernel (cutegen/swap_ab.py: the tile's M mode runs along the problem's N), so every cuBLAS
Hopper kernel name ``nvjet_sm90_tst_<A>x<B>_<K>x<stages>_<cA>x<cB>_<raster>...`` maps to one cutegen
configuration: swap_ab, tile (A, B, K), cluster (cA, cB), that stage count. The mapped configuration is
judged by cutegen's own rules; an illegal one names the rule (the form the space lacks), a legal one is
built and timed beside cuBLAS and the search's picks by ``cutegen tune --from-plan``.

  GPU:  python bench/diagnose_cublas.py cublas --plan DIR --out cublas.json   # kernel names + times
        python bench/diagnose_cublas.py mimic  --plan DIR --cublas cublas.json --out mimic.json
        (cutegen tune --from-plan DIR ...)                                     # builds + times everything
        python bench/diagnose_cublas.py table  --plan DIR --cublas cublas.json --mimic mimic.json \
               --tune tune.json --out diagnosis.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from cutegen.dtypes import dtype

NVJET = re.compile(r"_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_([vh])(?:_|$)")


def parse_nvjet(name: str) -> dict | None:
    """The tile, stages, cluster and raster a cuBLAS sm90 kernel name states (None: not an nvjet GEMM)."""
    if "nvjet" not in name:
        return None
    m = NVJET.search(name)
    if not m:
        return None
    a, b, k, stages, ca, cb, raster = m.groups()
    coop = "coopA" if "coopA" in name else "coopB" if "coopB" in name else None
    return {"tile_a": int(a), "tile_b": int(b), "tile_k": int(k), "stages": int(stages),
            "cluster_a": int(ca), "cluster_b": int(cb), "raster": raster, "coop": coop}


def mimic_configs(problem, info: dict, full_width: bool = False) -> list[tuple[str, dict]]:
    """cutegen configurations (as KernelConfig dicts) that spell cuBLAS's kernel, exact first, then the
    nearest variants, so an illegal exact form still gets a measured neighbour:
    ``exact``: swap-AB (cuBLAS's A runs along the problem's N, cutegen's swapped M mode), cuBLAS's tile,
    cluster, stages and raster; ``auto_stages``; ``unswizzled``: the exact tile with an unswizzled
    (interleaved) K-major smem atom, which CuTe can slice per stage at any multiple of 8 rows (the
    swizzled atoms cannot at odd multiples of 8: SM90-SMEM-STAGE-SLICE); ``rounded``: tile A to a
    multiple of 64 (WGMMA's M) and tile B up to a multiple of 16, auto stages; ``rounded_1x1``: no cluster.
    With ``full_width`` every form also names its WGMMA instruction: 64 x (tile B) x 16, one instruction
    across the whole tile as cuBLAS's kernels use. Left to CUTLASS's CollectiveBuilder (``ss_op_selector``),
    a tile B that is not one of its listed widths gets 8-, 16- or 32-wide instructions (144 -> 64x16x16),
    which the first H200 run measured 1.4-3.7x slower than the search's picks."""
    a, b, k = info["tile_a"], info["tile_b"], info["tile_k"]

    def cfg(ta, tb, stages, cluster, **extra):
        sched = "cooperative" if ta % 128 == 0 else "pingpong"
        epi = "tma_warp_specialized_cooperative" if sched == "cooperative" else "tma_warp_specialized"
        inst = {"mma_instruction": [64, tb, 256 // dtype(problem.dtype_a).bits]} if full_width and tb <= 256 else {}
        return {"tile_shape": [ta, tb, k], "cluster_shape": [*cluster, 1], "stages": stages,
                "mainloop_schedule": sched, "epilogue_schedule": epi, "tile_scheduler": "persistent",
                "swap_ab": True, "raster_order": "along_m" if info["raster"] == "v" else "along_n", **inst, **extra}

    cluster = (info["cluster_a"], info["cluster_b"])
    ra = max(64, 64 * round(a / 64))
    rb = -(-b // 16) * 16
    return [("exact", cfg(a, b, info["stages"], cluster)),
            ("auto_stages", cfg(a, b, "auto", cluster)),
            ("unswizzled", cfg(a, b, "auto", cluster, smem_layout_a="K_INTER", smem_layout_b="K_INTER")),
            ("rounded", cfg(ra, rb, "auto", cluster)),
            ("rounded_1x1", cfg(ra, rb, "auto", (1, 1)))]


def _problems(plan_dir):
    from cutegen.tuning import Plan
    return Plan.load(plan_dir)


def cmd_cublas(args) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile
    plan = _problems(args.plan)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}
    out = {}
    for pp in plan.problems:
        p = pp.problem
        if p.dtype_a not in dt or p.layout_a != "row" or p.layout_b != "col":
            continue
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(p.m, p.k, device="cuda", generator=g).to(dt[p.dtype_a])
        w = torch.randn(p.n, p.k, device="cuda", generator=g).to(dt[p.dtype_a])
        for _ in range(3):
            torch.matmul(x, w.t())
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.matmul(x, w.t())
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(20):
            start.record()
            torch.matmul(x, w.t())
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1000)
        times.sort()
        gemm = [n for n in names if "nvjet" in n or "gemm" in n.lower() or "splitK" in n]
        out[pp.name] = {"kernels": gemm or names, "parsed": next((parse_nvjet(n) for n in gemm if parse_nvjet(n)), None),
                        "split_k_reduce": any("splitKreduce" in n for n in names), "cublas_us": times[len(times) // 2]}
        print(f"{pp.name}: {out[pp.name]['cublas_us']:.1f} us  {' + '.join(out[pp.name]['kernels'])}", flush=True)
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                          "problems": out}, indent=1, sort_keys=True) + "\n")
    return 0


def cmd_mimic(args) -> int:
    """Judge every mapped configuration; render the first legal one of each problem into the plan."""
    from cutegen.config import KernelConfig
    from cutegen.errors import CutegenError
    from cutegen.legality import check_config
    from cutegen.render import render
    from cutegen.tuning.plan import Candidate
    plan = _problems(args.plan)
    cublas = json.loads(Path(args.cublas).read_text())["problems"]
    report = {}
    for pp in plan.problems:
        info = (cublas.get(pp.name) or {}).get("parsed")
        if not info:
            report[pp.name] = {"note": "no nvjet kernel to map"}
            continue
        tried, rendered = [], []
        for label, d in mimic_configs(pp.problem, info, args.full_width):
            if args.full_width and label == "unswizzled":
                continue   # K_INTER faults (run 1); bench/probe_forms.py probes it on its own
            try:
                cfg = KernelConfig.from_dict(d, "mimic")
                rep = check_config(pp.problem, cfg)
                rules = [v.rule_id for v in rep.violations]
            except CutegenError as e:
                tried.append({"form": label, "config": d, "legal": False, "rules": [str(e)]})
                continue
            tried.append({"form": label, "config": d, "legal": not rules, "rules": rules})
            if rules or len(rendered) == 2 or (rendered and not label.startswith("rounded")) \
                    or any(r.startswith("rounded") for r in rendered):
                continue
            rendered.append(label)
            label = f"{label}_fw" if args.full_width else label
            rel = f"{pp.name}/mimic_{label}"
            kernel = render(pp.problem, cfg, "cutlass")
            kernel.write(Path(args.plan) / rel)
            pp.candidates.append(Candidate(f"mimic_{label}", "search", "cutlass", kernel.config, rel,
                                           kernel.kernel_hash, None, None))
        report[pp.name] = {"cublas": info, "tried": tried}
        print(f"{pp.name}: " + "; ".join(f"{t['form']} {'legal' if t['legal'] else 'ILLEGAL ' + ','.join(t['rules'])}"
                                         for t in tried), flush=True)
    plan.write(Path(args.plan))
    Path(args.out).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 0


def cmd_profile(args) -> int:
    """cuBLAS's kernel for one problem, launched a few times (for Nsight Compute to catch)."""
    import torch
    pp = next(p for p in _problems(args.plan).problems if p.name == args.problem)
    p = pp.problem
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[p.dtype_a]
    x = torch.randn(p.m, p.k, device="cuda").to(dt)
    w = torch.randn(p.n, p.k, device="cuda").to(dt)
    for _ in range(3):
        torch.matmul(x, w.t())
    torch.cuda.synchronize()
    return 0


def cmd_table(args) -> int:
    """One row per problem: cuBLAS's kernel and time (timed by tune in the same process as every candidate),
    the search's first pick, the best measured (tuned), and each mapped cuBLAS configuration with its status."""
    plan = _problems(args.plan)
    cublas = json.loads(Path(args.cublas).read_text())
    mimic = json.loads(Path(args.mimic).read_text())
    outcomes = {o["name"]: o for o in json.loads(Path(args.tune).read_text())["problems"]}
    rows = []
    for pp in plan.problems:
        cb = cublas["problems"].get(pp.name, {})
        o = outcomes.get(pp.name, {})
        cands = {c["name"]: c for c in o.get("candidates", [])}
        timed = {n: c["median_us"] for n, c in cands.items() if c.get("median_us")}
        first = cands.get("search1", {})
        rows.append({
            "problem": pp.name, "m": pp.problem.m, "n": pp.problem.n, "k": pp.problem.k,
            "cublas_kernel": " + ".join(cb.get("kernels", [])), "cublas_us": o.get("cublas_us"),
            "first_pick": first.get("config_name"), "first_pick_us": first.get("median_us"),
            "tuned": min(timed, key=timed.get) if timed else None, "tuned_us": min(timed.values()) if timed else None,
            "mimics": {n: {"config": c["config_name"], "us": c.get("median_us"), "status": c.get("status"),
                           "reason": c.get("reason", "")[:200]} for n, c in cands.items() if n.startswith("mimic_")},
            "mimic_refusals": [{"form": t["form"], "rules": t["rules"]} for t in mimic.get(pp.name, {}).get("tried", [])
                               if not t["legal"]]})
    meta = dict(kv.split("=", 1) for kv in (args.meta or []))
    Path(args.out).write_text(json.dumps({"device": cublas.get("device"), "torch": cublas.get("torch"), **meta,
                                          "rows": rows}, indent=1, sort_keys=True) + "\n")
    if args.png:
        _plot(rows, args.png, f"{cublas.get('device')}: cutegen / cuBLAS time ratio (> 1: cutegen faster)")
    f = lambda v: f"{v:8.1f}" if v else "       -"
    print(f"{'problem':30} {'cuBLAS':>8} {'pick':>8} {'tuned':>8} {'mimics (us)':24} cuBLAS kernel")
    for r in rows:
        mims = " ".join(f"{n[6:]}={v['us']:.1f}" if v["us"] else f"{n[6:]}={v['status']}" for n, v in r["mimics"].items())
        print(f"{r['problem'][:30]:30} {f(r['cublas_us'])} {f(r['first_pick_us'])} {f(r['tuned_us'])} {mims:24} "
              f"{r['cublas_kernel'][:60]}")
    return 0


def _plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["problem"].replace("_bf16", "") for r in rows]
    series = {"first pick": [r["first_pick_us"] for r in rows], "tuned (best measured)": [r["tuned_us"] for r in rows],
              "cuBLAS's tile in cutegen (best mapping)": [min((v["us"] for v in r["mimics"].values() if v["us"]),
                                                              default=None) for r in rows]}
    fig, ax = plt.subplots(figsize=(11, 4.5))
    w = 0.27
    for i, (label, ts) in enumerate(series.items()):
        xs = [j + (i - 1) * w for j in range(len(rows))]
        ys = [r["cublas_us"] / t if t and r["cublas_us"] else 0 for r, t in zip(rows, ts)]
        ax.bar(xs, ys, w, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("cuBLAS time / cutegen time")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cublas"); c.add_argument("--plan", required=True); c.add_argument("--out", required=True)
    c = sub.add_parser("mimic"); c.add_argument("--plan", required=True); c.add_argument("--cublas", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--full-width", action="store_true", help="name a WGMMA instruction as wide as the tile")
    c = sub.add_parser("profile"); c.add_argument("--plan", required=True); c.add_argument("--problem", required=True)
    c = sub.add_parser("table")
    for f in ("--plan", "--cublas", "--mimic", "--tune", "--out"):
        c.add_argument(f, required=True)
    c.add_argument("--png", help="also plot the ratios to this file")
    c.add_argument("--meta", nargs="*", metavar="KEY=VALUE", help="run facts to record (date, driver, ...)")
    args = ap.parse_args(argv)
    return {"cublas": cmd_cublas, "mimic": cmd_mimic, "profile": cmd_profile, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
