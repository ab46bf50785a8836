"""GPU half of bench/gpu_pack.sh: validate and time a built kernel pack's PyTorch op against torch.matmul.

    python3 bench/gpu_pack.py PACK_DIR EXTENSION.so OUT_JSON [--budget-s 240] [--off-sample 3,24,...]
        [--held-out 5,40,...] [--no-per-kernel]

Needs only torch (no cutegen import: the GPU machine has no egglog). Phases, each checked against the
budget so the run ends in time:
  1. validate every shape of pack.json's coverage table and shapes outside it (M off the sample
     points, N/K outside the set, unaligned N and K, a padded and an unaligned leading dimension,
     a misaligned base pointer) against a float32 reference on random inputs;
  2. time each set shape end to end through the op and through torch.matmul (CUDA events, same
     inputs, 7 alternating rounds of 20 calls, the median over all calls: TIMING), and primed (GPU time
     alone), and with --off-sample every listed M
     (fixed before the pack was made, none a sample point) at every (N, K) of the set: validated first,
     then timed the same way; each timed row names the kernel that served it (or the fallback), and
     (budget permitting) the time of every kernel of the pack at that shape (cutegen::gemm_kernel, past the
     dispatcher): the best kernel per shape against cuBLAS, and where none comes within 3% of it;
  3. capture the op in a CUDA graph for M = 1, 16, 128, replay on new inputs, validate;
  4. host cost per call for M = 1, 16, 128 (N = K = 4096): 200 back-to-back calls then one
     synchronize, through the op, through the bare plan API (cutegen::host_cost) and torch.matmul;
  5. torch.compile(fullgraph=True) of a function calling the op (the fake implementation).
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import time

import torch

TOL = 2e-2          # bf16 output of a float32 accumulation: max |err| / max |ref|


def load_op(pack_dir: str, so: str):
    name = json.load(open(os.path.join(pack_dir, "pack.json")))["name"]
    spec = importlib.util.spec_from_file_location("pack_torch", os.path.join(pack_dir, "torch", f"{name}_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load(so)


def operands(m, n, k, *, lda=None, offset=0, gen=None):
    """x (M x K, row-major, leading dimension lda) and b = W^T (K x N, column-major) as a model has them."""
    lda = lda or k
    buf = torch.randn(m * lda + offset, device="cuda", dtype=torch.float32, generator=gen).to(torch.bfloat16)
    a = buf[offset:offset + m * lda].view(m, lda)[:, :k]
    w = torch.randn(n, k, device="cuda", dtype=torch.float32, generator=gen).to(torch.bfloat16)
    return a, w.t()


def rel_err(out, a, b, ref=None):
    ref = a.float() @ b.float() if ref is None else ref
    return float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


def time_us(fn, iters=20, warm=5, primed=False):
    """Median microseconds between CUDA events. ``primed``: a spin kernel queued first, so the host has issued every
    timed call before the GPU reaches them: GPU time alone. Unprimed (the default, end to end from an idle queue): a
    call whose host path is about as long as its kernel shows its host time too (torch.matmul's is 10-16 us, the
    op's 7 us; pack --tune times primed)."""
    for _ in range(warm):
        fn()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    if primed:
        torch.cuda.synchronize()
        torch.cuda._sleep(100_000 * iters)
    for s, e in evs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in evs)


ROUNDS = 7
TIMING = (f"end to end (op_us, matmul_us): the op and torch.matmul in {ROUNDS} alternating rounds of 20 calls each (5 "
          "warm-up calls before a round's first block, 2 before the other; the order swapped every round), CUDA events "
          "around each call from an idle queue (host time included where it is as long as the kernel), the median over "
          f"all {ROUNDS * 20} calls of each, so host jitter falls on both alike; *_gpu_us: primed behind a spin kernel, "
          "median of 20 after 5 (GPU time alone, as pack --tune times)")


def time_rounds(f, g, rounds=ROUNDS, iters=20, warm=5):
    """End-to-end medians of ``f`` and ``g`` (microseconds) over ``rounds`` alternating rounds (TIMING), and each
    round's medians (the spread run to run)."""
    calls = {0: [], 1: []}
    per_round = {0: [], 1: []}
    for r in range(rounds):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            fn = (f, g)[which]
            for _ in range(warm if r == 0 else 2):
                fn()
            evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
            torch.cuda.synchronize()
            for s, e in evs:
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize()
            ts = [s.elapsed_time(e) * 1e3 for s, e in evs]
            calls[which] += ts
            per_round[which].append(round(statistics.median(ts), 3))
    return statistics.median(calls[0]), statistics.median(calls[1]), per_round[0], per_round[1]


def main():
    pack_dir, so, out_json = sys.argv[1:4]
    budget = float(sys.argv[sys.argv.index("--budget-s") + 1]) if "--budget-s" in sys.argv else 240.0
    t_start = time.time()
    left = lambda: budget - (time.time() - t_start)  # noqa: E731
    meta = json.load(open(os.path.join(pack_dir, "pack.json")))
    ops = load_op(pack_dir, so)
    names = list(ops.kernel_names())
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "pack": meta["name"],
           "target": meta["target"]["kind"], "kernels": len(meta["kernels"]), "validate": [], "time": [],
           "graph": [], "host": [], "compile": None, "skipped": [], "timing": TIMING}
    rows = meta["coverage"]["rows"]
    set_shapes = [(r["m"], r["n"], r["k"], r["shape"]) for r in rows]
    outside = [(m, n, k, f"{what} m{m}n{n}k{k}") for m, n, k, what in (
        (3, 6144, 4096, "M off the samples"), (1000, 5000, 4096, "N outside the set"),
        (77, 4096, 3000, "K outside the set"), (7, 4095, 4096, "unaligned N"), (33, 4096, 4095, "unaligned K"))]
    print(f"phase 1: validate {len(set_shapes)} set shapes + {len(outside) + 3} outside", flush=True)
    fb0 = ops.pack_fallbacks()
    for m, n, k, label in set_shapes + outside:
        if left() < budget * 0.55:
            res["skipped"].append(f"validate {label} m{m}n{n}k{k}")
            continue
        a, b = operands(m, n, k, gen=gen)
        before = ops.pack_fallbacks()
        out = ops.gemm(a, b)
        err = rel_err(out, a, b)
        res["validate"].append({"shape": label, "m": m, "n": n, "k": k,
                                "rel_err": err, "ok": err <= TOL, "explain": ops.explain(a, b),
                                "path": "torch.matmul fallback" if ops.pack_fallbacks() > before else "pack"})
    for what, kw in (("padded lda 4104", {"lda": 4104}), ("unaligned lda 4097", {"lda": 4097}),
                     ("base pointer off by 2 bytes", {"offset": 1})):
        a, b = operands(64, 4096, 4096, gen=gen, **kw)
        before = ops.pack_fallbacks()
        out = ops.gemm(a, b)
        err = rel_err(out, a, b)
        res["validate"].append({"shape": f"{what} m64n4096k4096", "m": 64, "n": 4096, "k": 4096, "rel_err": err,
                                "ok": err <= TOL, "explain": ops.explain(a, b),
                                "path": "torch.matmul fallback" if ops.pack_fallbacks() > before else "pack"})
    res["fallbacks"] = ops.pack_fallbacks() - fb0

    off = [int(x) for x in sys.argv[sys.argv.index("--off-sample") + 1].split(",")] if "--off-sample" in sys.argv else []
    nks = sorted({(n, k) for _, n, k, _ in set_shapes})
    samples = {(m, n, k) for m, n, k, _ in set_shapes}
    # a measured pack (pack --tune) holds its off-sample points too: each row says which it is
    sampled_points = {(r["m"], r["n"], r["k"]) for r in rows if r.get("point", "sampled") == "sampled"}
    off_shapes = [(m, n, k, f"off-sample m{m}n{n}k{k}") for n, k in nks for m in off if (m, n, k) not in samples]
    # --held-out: M values never measured while tuning (pack --tune times the sampled and off-sample ones)
    held = [int(x) for x in sys.argv[sys.argv.index("--held-out") + 1].split(",")] if "--held-out" in sys.argv else []
    off_shapes += [(m, n, k, f"held-out m{m}n{n}k{k}") for n, k in nks for m in held
                   if (m, n, k) not in samples and m not in off]
    per_kernel = "--no-per-kernel" not in sys.argv
    print(f"phase 2: time {len(set_shapes)} set shapes and {len(off_shapes)} off-sample shapes", flush=True)
    for m, n, k, label in set_shapes + off_shapes:
        if left() < budget * 0.2:
            res["skipped"].append(f"time {label}")
            continue
        a, b = operands(m, n, k, gen=gen)
        ref = a.float() @ b.float()
        before = ops.pack_fallbacks()
        out = ops.gemm(a, b)
        err = rel_err(out, a, b, ref)
        t_op, t_mm, r_op, r_mm = time_rounds(lambda: ops.gemm(a, b), lambda: torch.matmul(a, b))
        g_op = time_us(lambda: ops.gemm(a, b), primed=True)      # GPU time alone (host hidden), as pack --tune times
        g_mm = time_us(lambda: torch.matmul(a, b), primed=True)
        row = {"shape": label, "m": m, "n": n, "k": k, "op_us": t_op, "matmul_us": t_mm,
               "speedup": t_mm / t_op, "sampled": (m, n, k) in sampled_points, "rel_err": err,
               "op_us_rounds": r_op, "matmul_us_rounds": r_mm,
               "held_out": label.startswith("held-out"),
               "op_gpu_us": g_op, "matmul_gpu_us": g_mm, "speedup_gpu": g_mm / g_op,
               "ok": err <= TOL, "kernel": ops.explain(a, b).split(":")[0],
               "path": "torch.matmul fallback" if ops.pack_fallbacks() > before else "pack"}
        # every kernel of the pack at this shape, through the same op past the dispatcher (what a measured
        # selection would choose from, issue 22): validated once, then timed like the op
        if per_kernel and left() > budget * 0.35:
            row["per_kernel_us"] = {}
            for i, kname in enumerate(names):
                try:
                    kout = ops.gemm_kernel(a, b, i)
                except RuntimeError:
                    continue                         # the kernel cannot run this shape (its own checks)
                kerr = rel_err(kout, a, b, ref)
                row["per_kernel_us"][kname] = time_us(lambda: ops.gemm_kernel(a, b, i)) if kerr <= TOL else None
                if kerr > TOL:
                    row.setdefault("per_kernel_bad", {})[kname] = kerr
            timed = {kn: t for kn, t in row["per_kernel_us"].items() if t is not None}
            if timed:
                row["best_kernel"], row["best_kernel_us"] = min(timed.items(), key=lambda x: x[1])
        res["time"].append(row)

    print("phase 3: CUDA graph", flush=True)
    for m in (1, 16, 128):
        a, b = operands(m, 4096, 4096, gen=gen)
        ops.gemm(a, b)                                   # plan outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = ops.gemm(a, b)
        a2, b2 = operands(m, 4096, 4096, gen=gen)
        a.copy_(a2)
        b.copy_(b2)
        g.replay()
        torch.cuda.synchronize()
        err = rel_err(out, a, b)
        t_graph = time_us(g.replay)
        res["graph"].append({"m": m, "rel_err": err, "ok": err <= TOL, "replay_us": t_graph})

    print("phase 4: host cost", flush=True)
    for m in (1, 16, 128):
        a, b = operands(m, 4096, 4096, gen=gen)
        out = torch.empty(m, 4096, device="cuda", dtype=torch.bfloat16)
        entry = {"m": m}
        for what, fn in (("op", lambda: ops.gemm(a, b)), ("matmul", lambda: torch.matmul(a, b))):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            entry[f"{what}_host_us"] = (t1 - t0) / 200 * 1e6
            entry[f"{what}_total_us"] = (t2 - t0) / 200 * 1e6
        ops.host_cost(a, b, out, 20)
        torch.cuda.synchronize()
        entry["plan_api_host_us"] = ops.host_cost(a, b, out, 200)
        torch.cuda.synchronize()
        res["host"].append(entry)

    print("phase 5: torch.compile", flush=True)
    try:
        f = torch.compile(lambda x, y: ops.gemm(x, y), fullgraph=True)
        a, b = operands(64, 4096, 4096, gen=gen)
        err = rel_err(f(a, b), a, b)
        res["compile"] = {"ok": err <= TOL, "rel_err": err}
    except Exception as e:  # reported, not hidden
        res["compile"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}

    sp = [t["speedup"] for t in res["time"]]
    res["geomean_speedup"] = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None
    res["min_speedup"] = min(sp) if sp else None
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)
    for what, rows in (("sampled", [t for t in res["time"] if t["sampled"]]),
                       ("off-sample", [t for t in res["time"] if not t["sampled"] and not t.get("held_out")]),
                       ("held-out", [t for t in res["time"] if t.get("held_out")]),
                       ("all", res["time"])):
        ratios = [t["speedup"] for t in rows]
        gpu = [t["speedup_gpu"] for t in rows if t.get("speedup_gpu")]
        res[f"{what}_gpu_time_summary"] = {
            "shapes": len(gpu), "geomean": math.exp(sum(map(math.log, gpu)) / len(gpu)) if gpu else None,
            "min": min(gpu) if gpu else None, "under_0.9": sum(1 for r in gpu if r < 0.9),
            "under_0.97": sum(1 for r in gpu if r < 0.97), "under_0.75": sum(1 for r in gpu if r < 0.75)}
        res[f"{what}_summary"] = {
            "shapes": len(ratios),
            "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
            "min": min(ratios) if ratios else None, "under_0.9": sum(1 for r in ratios if r < 0.9),
            "under_0.97": sum(1 for r in ratios if r < 0.97), "under_0.75": sum(1 for r in ratios if r < 0.75)}
    # what measuring every kernel shows: the best kernel of the pack per shape against cuBLAS (a measured
    # selection's ceiling with these kernels), and the shapes where no kernel comes within 3% of cuBLAS
    # (where a vendor tactic would route to cuBLASLt)
    measured = [t for t in res["time"] if t.get("best_kernel_us")]
    if measured:
        best = [t["matmul_us"] / t["best_kernel_us"] for t in measured]
        res["best_kernel_summary"] = {
            "shapes": len(measured), "geomean_vs_matmul": math.exp(sum(map(math.log, best)) / len(best)),
            "min_vs_matmul": min(best), "chosen_is_best": sum(1 for t in measured if t["kernel"] == t["best_kernel"]),
            "no_kernel_within_3pct_of_matmul": sum(1 for r in best if r < 0.97),
            # an estimate: the best kernel where it is within 3% of cuBLAS, else cuBLAS at its own time
            "estimate_best_or_vendor_geomean": math.exp(sum(math.log(r if r >= 0.97 else 1.0) for r in best)
                                                        / len(best))}
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)
    bad = [v for v in res["validate"] + res["graph"] + res["time"] if not v["ok"]]
    print(f"\nvalidated {len(res['validate']) - len([v for v in res['validate'] if not v['ok']])}/"
          f"{len(res['validate'])} shapes (fallbacks to torch.matmul: {res['fallbacks']}); graph "
          f"{sum(g['ok'] for g in res['graph'])}/{len(res['graph'])}; torch.compile {res['compile']}")
    for v in res["validate"]:
        if v["path"] != "pack" or not v["ok"]:
            print(f"  {v['shape']}: {v['path']}, rel err {v['rel_err']:.2e}; {v['explain'][:160]}")
    print("\nhost cost per call (us): M | op host | op total | plan API host | matmul host | matmul total")
    for h in res["host"]:
        print(f"  {h['m']:4d} | {h['op_host_us']:7.2f} | {h['op_total_us']:7.2f} | {h['plan_api_host_us']:7.2f} | "
              f"{h['matmul_host_us']:7.2f} | {h['matmul_total_us']:7.2f}")
    print(f"\nend to end through the op vs torch.matmul: {len(sp)} shapes, geomean {res['geomean_speedup']}, "
          f"min {res['min_speedup']}; under 0.9x: {sum(1 for s in sp if s < 0.9)}")
    for what in ("sampled", "off-sample", "held-out", "all", "all_gpu_time", "best_kernel"):
        print(f"  {what}: {res.get(what + '_summary')}")
    worst = sorted(res["time"], key=lambda t: t["speedup"])[:8]
    for t in worst:
        print(f"  {t['shape']}: op {t['op_us']:.1f} us, matmul {t['matmul_us']:.1f} us, {t['speedup']:.3f}x")
    if res["skipped"]:
        print(f"skipped for time: {len(res['skipped'])}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
