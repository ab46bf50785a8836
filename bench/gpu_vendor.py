"""The GPU check of a pack's vendor tactic (issue 22 part 3; bench/gpu_vendor.sh runs both halves).

    python bench/gpu_vendor.py plan OUT_DIR                 # here (search: egglog): the pack's sources
    python3 bench/gpu_vendor.py check PACK_DIR EXT.so OUT_JSON  # the GPU machine (torch only)

plan: a pack of four classes, bf16 with A and B each row- or column-major (D row-major: what the PyTorch op
computes), N in {4096, 14336}, K = 4096, M sampled at 16 and 256, one generated kernel per class, no unaligned
fallback. Its dispatch comes from a synthetic measured file (SYNTHETIC.json beside the pack): at M = 16 each
kernel ties torch.matmul, at M = 256 it takes 100x as long, so from M = 17 up every (N, K) of every class runs
on cuBLASLt, and M <= 16 on the class's kernel. The timings are made up; what the check measures is real.

check, through torch.ops.cutegen (the pack's op), for every class and both N at M from 8 to 8192:
  1. the tactic: explain() names vendor_cublaslt_c<class> from M = 17 and the class's kernel up to 16;
  2. the result against torch.matmul and a float32 reference (no torch.matmul fallback counted);
  3. the time of the op against torch.matmul (same cuBLAS underneath: the vendor should be within a few
     percent), CUDA-event medians over 7 alternating rounds of 20 calls; and the vendor entry alone
     (cutegen::gemm_kernel);
  4. CUDA graph capture of the op on vendor shapes, replayed on new inputs, validated and timed against a
     captured torch.matmul;
  5. host cost per call (op, plan API, torch.matmul) on a vendor shape.
Exit status 1 when a tactic, a result or a graph replay is wrong, or the vendor shapes' geomean time is more
than 5% off torch.matmul's.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

CLASSES = (("tn", True, False), ("nn", False, False), ("nt", False, True), ("tt", True, True))  # (layout, A row, B row)
NS, K = (4096, 14336), 4096
SAMPLED_M = (16, 256)
VENDOR_FROM = 17            # where the synthetic measurements put the boundary (tests/test_pack_vendor.py's rule)
TOL = 2e-2                  # bf16 output of a float32 accumulation: max |err| / max |ref|
TIME_TOL = 0.05             # the vendor shapes' geomean within 5% of torch.matmul


def plan(out_dir: str) -> int:
    from pathlib import Path

    from cutegen import packs
    from cutegen.packs import render, select, shapes, targets
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    toml = "".join(f'[[shape]]\nname = "{lay}"\ndtype = "bf16"\nlayout = "{lay}"\nm = {list(SAMPLED_M)}\n'
                   f'n = {list(NS)}\nk = {K}\n' for lay, _, _ in CLASSES)
    shapes_file = out / "vendor.toml"
    shapes_file.write_text(toml)
    t = targets.target("h200")
    points = shapes.expand(shapes.load(shapes_file), t.sms)
    sel = select.select(points, t, max_kernels=len(CLASSES), tolerance=0.03, say=print)
    names = [render.kernel_name(sel, j) for j in range(len(sel.kernels))]
    measured = {"pack": "vendor_pack", "note": "synthetic (bench/gpu_vendor.py): the kernels tie torch.matmul at M = 16 "
                "and take 100x as long at M = 256", "time": [
                    {"m": m, "n": n, "k": K, "matmul_us": 1.0, "per_kernel_us": {nm: 1.0 if m == 16 else 100.0 for nm in names}}
                    for n in NS for m in SAMPLED_M]}
    (out / "SYNTHETIC.json").write_text(json.dumps(measured, indent=1))
    pts = render.apply_measured(sel, str(out / "SYNTHETIC.json"), "vendor_pack")
    files = render.pack_files(sel, {}, "vendor_pack", shapes_file.name, measured=pts)
    meta = json.loads(files["pack.json"])
    segs = meta["vendor"]["segments"]
    assert len(segs) == len(CLASSES) * len(NS) and all(g["m_first"] == VENDOR_FROM for g in segs), segs
    packs.write(out / "pack", files)
    print(f"{out / 'pack'}: {len(sel.kernels)} kernels and cuBLASLt for M >= {VENDOR_FROM} in {len(segs)} segments")
    return 0


# ---- the device half (torch only) ------------------------------------------------------------------------------

def check(pack_dir: str, so: str, out_json: str) -> int:
    import importlib.util

    import torch
    meta = json.load(open(os.path.join(pack_dir, "pack.json")))
    spec = importlib.util.spec_from_file_location("pack_torch", os.path.join(pack_dir, "torch", f"{meta['name']}_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ops = mod.load(so)
    names = list(ops.kernel_names())
    gen = torch.Generator(device="cuda").manual_seed(0)

    def operands(m, n, a_row, b_row):
        a = torch.randn(m, K, device="cuda", generator=gen) if a_row else torch.randn(K, m, device="cuda", generator=gen).t()
        b = torch.randn(K, n, device="cuda", generator=gen) if b_row else torch.randn(n, K, device="cuda", generator=gen).t()
        return a.to(torch.bfloat16), b.to(torch.bfloat16)

    def rel(x, ref):
        return float((x.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6))

    def time_pair(f, g, iters=20, warm=5, rounds=7):
        """End-to-end medians of CUDA-event times of f and g over `rounds` alternating rounds of `iters` calls each
        (the order swapped every round, from an idle queue), the median over all calls: host jitter falls on both
        alike (bench/gpu_pack.py's TIMING)."""
        tf, tg = [], []
        for r in range(rounds):
            for fn, acc in (((f, tf), (g, tg)) if r % 2 == 0 else ((g, tg), (f, tf))):
                for _ in range(warm if r == 0 else 2):
                    fn()
                evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
                torch.cuda.synchronize()
                for s, e in evs:
                    s.record()
                    fn()
                    e.record()
                torch.cuda.synchronize()
                acc += [s.elapsed_time(e) * 1e3 for s, e in evs]
        return statistics.median(tf), statistics.median(tg)

    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "pack": meta["name"], "kernels": names, "shapes": [], "graph": [], "host": [],
           "timing": "end to end: 7 alternating rounds of 20 calls of each contender (order swapped every round, CUDA "
                     "events from an idle queue), the median over all calls"}
    bad = []
    fb0 = ops.pack_fallbacks()
    for cls, (lay, a_row, b_row) in enumerate(CLASSES):
        ms = [8, 16, 17, 24, 64, 100, 256, 1000, 4096, 8192]
        if not a_row:                                   # M is A's contiguous extent: a multiple of 8 elements
            ms = [m for m in ms if m % 8 == 0]
        for n in NS:
            for m in ms:
                a, b = operands(m, n, a_row, b_row)
                why = ops.explain(a, b)
                want_vendor = m >= VENDOR_FROM
                tactic_ok = why.startswith(f"vendor_cublaslt_c{cls}: ") if want_vendor else why.startswith("k")
                before = ops.pack_fallbacks()
                out = ops.gemm(a, b)
                mm = torch.matmul(a, b)
                ref = a.float() @ b.float()
                row = {"class": lay, "m": m, "n": n, "k": K, "vendor": want_vendor, "explain": why[:160],
                       "tactic_ok": tactic_ok, "rel_err": rel(out, ref), "rel_err_matmul": rel(mm, ref),
                       "diff_vs_matmul": rel(out, mm.float()), "fallback": ops.pack_fallbacks() > before}
                row["ok"] = tactic_ok and row["rel_err"] <= TOL and not row["fallback"]
                row["op_us"], row["matmul_us"] = time_pair(lambda: ops.gemm(a, b), lambda: torch.matmul(a, b))
                row["speedup"] = row["matmul_us"] / row["op_us"]
                if want_vendor:
                    vi = names.index(f"vendor_cublaslt_c{cls}")
                    kout = ops.gemm_kernel(a, b, vi)
                    row["vendor_entry_rel_err"] = rel(kout, ref)
                    row["vendor_entry_us"], _ = time_pair(lambda: ops.gemm_kernel(a, b, vi), lambda: None, rounds=1)
                    row["ok"] = row["ok"] and row["vendor_entry_rel_err"] <= TOL
                res["shapes"].append(row)
                if not row["ok"]:
                    bad.append(row)
                print(f"{lay} m{m}n{n}k{K}: {'vendor' if want_vendor else 'kernel'} tactic_ok={tactic_ok} "
                      f"err {row['rel_err']:.2e} op {row['op_us']:.1f} us matmul {row['matmul_us']:.1f} us "
                      f"({row['speedup']:.3f}x)", flush=True)
    res["fallbacks"] = ops.pack_fallbacks() - fb0

    for cls, (lay, a_row, b_row) in enumerate(CLASSES):          # 4. CUDA graphs on vendor shapes
        for m in (64, 1000):
            a, b = operands(m, NS[0], a_row, b_row)
            ops.gemm(a, b)                                       # plan outside the capture
            torch.matmul(a, b)
            torch.cuda.synchronize()
            g, gm = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = ops.gemm(a, b)
            with torch.cuda.graph(gm):
                out_mm = torch.matmul(a, b)
            a2, b2 = operands(m, NS[0], a_row, b_row)
            a.copy_(a2)
            b.copy_(b2)
            g.replay()
            gm.replay()
            torch.cuda.synchronize()
            err = rel(out, a.float() @ b.float())
            t_g, t_m = time_pair(g.replay, gm.replay)
            entry = {"class": lay, "m": m, "n": NS[0], "rel_err": err, "ok": err <= TOL, "replay_us": t_g,
                     "matmul_replay_us": t_m, "speedup": t_m / t_g, "explain": ops.explain(a, b)[:80]}
            res["graph"].append(entry)
            if not entry["ok"]:
                bad.append(entry)

    for m in (17, 64, 256):                                       # 5. host cost on vendor shapes (tn)
        a, b = operands(m, NS[0], True, False)
        out = torch.empty(m, NS[0], device="cuda", dtype=torch.bfloat16)
        entry = {"m": m, "n": NS[0], "explain": ops.explain(a, b)[:40]}
        for what, fn in (("op", lambda: ops.gemm(a, b)), ("matmul", lambda: torch.matmul(a, b))):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            entry[f"{what}_host_us"] = (t1 - t0) / 200 * 1e6
        ops.host_cost(a, b, out, 20)
        torch.cuda.synchronize()
        entry["plan_api_host_us"] = ops.host_cost(a, b, out, 200)
        torch.cuda.synchronize()
        res["host"].append(entry)

    vend = [r["speedup"] for r in res["shapes"] if r["vendor"]]
    kern = [r["speedup"] for r in res["shapes"] if not r["vendor"]]
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None  # noqa: E731
    res["summary"] = {
        "shapes": len(res["shapes"]), "wrong": len([r for r in res["shapes"] if not r["ok"]]),
        "vendor_shapes": len(vend), "vendor_geomean_vs_matmul": geo(vend), "vendor_min": min(vend, default=None),
        "vendor_max": max(vend, default=None), "vendor_within_3pct": sum(1 for x in vend if abs(x - 1) <= 0.03),
        "vendor_within_5pct": sum(1 for x in vend if abs(x - 1) <= 0.05),
        "kernel_shapes": len(kern), "kernel_geomean_vs_matmul": geo(kern),
        "graph_ok": sum(1 for g in res["graph"] if g["ok"]), "graphs": len(res["graph"]),
        "graph_vendor_geomean_vs_matmul": geo([g["speedup"] for g in res["graph"]])}
    time_ok = vend and abs(res["summary"]["vendor_geomean_vs_matmul"] - 1.0) <= TIME_TOL
    res["summary"]["time_ok"] = bool(time_ok)
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res["summary"], indent=1))
    for h in res["host"]:
        print(f"host us per call, m{h['m']}: op {h['op_host_us']:.2f}, plan API {h['plan_api_host_us']:.2f}, "
              f"torch.matmul {h['matmul_host_us']:.2f} ({h['explain']})")
    for r in bad[:10]:
        print("WRONG:", r)
    return 1 if bad or not time_ok else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "plan":
        sys.exit(plan(sys.argv[2]))
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:]))
    sys.exit(__doc__)
