"""The vendor tactic's tuning step: which of cuBLASLt's algorithms each vendor shape should run (issue 22 part 3).

    python bench/gpu_vendor_algos.py plan OUT_DIR [ALGOS.json[.gz]]   # here (egglog): the LM pack's vendor source
    python3 bench/gpu_vendor_algos.py measure PLAN_DIR EXT.so OUT_JSON [--end-epoch T]   # the GPU machine (torch)

plan: renders the LM pack from its committed records (examples/pack/llm.toml, bench/packs/llm/h200/
measurements.jsonl.gz: the pack `cutegen pack --tune --records` makes, vendor tactic on) and writes beside its
src/vendor_cublaslt.cpp and include/cutegen_pack.h the shapes to time, ``shapes.json``: every shape of the LM
pack that runs on cuBLASLt (its vendor exact shapes: the measured points of its vendor segments) and 20 mid-M
shapes of another model family (Qwen2.5-7B/-14B projections, M 100-1000, not in the LM set).

measure (bench/gpu_vendor_algos.sh builds EXT.so: bench/vendor_algos_ext.cpp + the pack's vendor source, linked
with cuBLASLt): per shape, in one process, x (M x K, row-major) @ W^T (column-major) in bf16: the heuristic's list
(the first 8 for 256-byte-aligned operands, through the pack's plan entry points), each algorithm checked
against a float32 reference and timed, torch.matmul timed, and the pack's own choice (index -1) timed: CUDA-event
medians of 20 calls after 5 behind a spin kernel, contenders in turn, three rounds, the lowest median each. The
JSON is ``cutegen pack --vendor-algorithms``'s input (cutegen/packs/vendor.py, ALGORITHMS_FORMAT) with the
per-shape record (each algorithm's time and description, torch.matmul's, the chosen one) and a summary.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

TOP_K = 8                    # cutegen/packs/vendor.py TOP_K (the template's kTopK)
ROUNDS, WARMUP, ITERS = 3, 5, 20
SPIN_CYCLES_PER_CALL = 100_000
TOL = 2e-2
MARGIN = 0.02                # cutegen/packs/vendor.py ALGO_MARGIN
PROFILE_UNTIL_S = 120        # kernel names (torch.profiler) for the shapes timed in the first two minutes
CLS = 0                      # the LM pack's one class: bf16, A row-major, B column-major, D row-major
FORMAT = "cutegen-vendor-algorithms/1"
# 20 mid-M shapes of Qwen2.5-7B/-14B's projections (N, K) that the LM set does not hold, at M the LM pack was
# not tuned at
OTHER_NK = ((3584, 3584), (4608, 3584), (37888, 3584), (3584, 18944), (5120, 5120), (7168, 5120), (27648, 5120),
            (5120, 13824))
OTHER_M = (100, 160, 300, 600, 1000)


def plan(out_dir: str, algorithms: str | None = None) -> int:
    from pathlib import Path

    from cutegen import packs
    from cutegen.problem import GemmProblem
    repo = Path(__file__).resolve().parent.parent
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from cutegen.packs import tune
    # the committed LM pack (bench/packs/llm/h200): as its record says, from its measurements
    records = tune.read_records(str(repo / "bench/packs/llm/h200/measurements.jsonl.gz"))
    # with ``algorithms`` (a previous run of this script): the vendor source holds the measured table, and the
    # pack's own plan (index -1) runs the table's choice (the second run checks it in a fresh process)
    files = packs.make_tuned_pack(str(repo / "examples/pack/llm.toml"), "h200", records, name="llm_pack", say=print,
                                  vendor_algorithms=algorithms)
    committed = json.loads((repo / "bench/packs/llm/h200/pack.json").read_text())
    routes = {k: v for k, v in json.loads(files["pack.json"])["vendor"].items() if k != "algorithms"}
    assert routes == committed["vendor"], "the LM pack's vendor routes moved"
    meta = json.loads(files["pack.json"])
    assert "src/vendor_cublaslt.cpp" in files, "the LM pack has no vendor tactic"
    for rel in ("src/vendor_cublaslt.cpp", "include/cutegen_pack.h", "pack.json"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(files[rel])
    cls0 = meta["classes"][CLS]["describe"]
    def problem(m, n, k):
        return GemmProblem(m=m, n=n, k=k, dtype_a="bf16", dtype_b="bf16", dtype_c="bf16", dtype_d="bf16",
                           layout_a="row", layout_b="col", layout_c="row").to_dict()
    lm = {(e["m"], e["n"], e["k"]) for e in meta["vendor"]["exact_shapes"] if e["class"] == CLS and e["batch"] == 1}
    lm_nk = {(n, k) for _, n, k in lm}
    other = [(m, n, k) for n, k in OTHER_NK for m in OTHER_M if (n, k) not in lm_nk][:20]
    shapes = [{"set": "llm-vendor", "problem": problem(m, n, k)} for m, n, k in sorted(lm)]
    shapes += [{"set": "qwen2.5-mid-m", "problem": problem(m, n, k)} for m, n, k in other]
    (out / "shapes.json").write_text(json.dumps({"class": cls0, "shapes": shapes}, indent=1) + "\n")
    print(f"{out}: the LM pack's vendor source, {len(lm)} LM vendor shapes and {len(other)} other mid-M shapes")
    return 0


# ---- the device half (torch only) ------------------------------------------------------------------------------

def _time_all(torch, fns: dict) -> dict:
    """{name: lowest of ROUNDS CUDA-event medians} for every contender, each timed behind a spin kernel in turn."""
    best = {k: math.inf for k in fns}
    sleep = getattr(torch.cuda, "_sleep", None)
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            for _ in range(WARMUP):
                fn()
            evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(ITERS)]
            torch.cuda.synchronize()
            if sleep is not None:
                sleep(SPIN_CYCLES_PER_CALL * ITERS)
            for s, e in evs:
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize()
            best[name] = min(best[name], statistics.median(s.elapsed_time(e) * 1e3 for s, e in evs))
    return best


def _kernel_names(torch, fns: dict) -> dict:
    """{name: the CUDA kernels one call launches} for every contender, from one profiler session: each call
    follows a spin kernel (torch.cuda._sleep), which marks where the next contender's kernels start."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for fn in fns.values():
            torch.cuda._sleep(1)
            fn()
        torch.cuda.synchronize()
    evs = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and
                  "memcpy" not in e.name.lower() and "memset" not in e.name.lower()),
                 key=lambda e: e.time_range.start)
    groups: list[list[str]] = []
    for e in evs:
        if "spin_kernel" in e.name:
            groups.append([])
        elif groups:
            groups[-1].append(e.name[:160])
    return dict(zip(fns, groups)) if len(groups) == len(fns) else {}


def choose(times: dict[int, float]) -> int:
    """One shape's choice, as cutegen/packs/vendor.py's choose_algorithm makes it for a single point."""
    if not times:
        return 0
    best = min(sorted(times), key=lambda i: times[i])
    return best if 0 not in times or times[0] > times[best] * (1.0 + MARGIN) else 0


def _one_shape(torch, ops, s: dict, gen, t0: float, state: dict) -> dict:
    """One shape: the list, each algorithm validated and timed, torch.matmul and the pack's own choice timed."""
    p = s["problem"]
    m, n, k = p["m"], p["n"], p["k"]
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16).t()
    ref = a.float() @ b.float()
    scale = float(ref.abs().max().clamp_min(1e-6))
    count = int(ops.count(CLS, m, n, k))
    algos, fns = [], {"matmul": lambda: torch.matmul(a, b), "pack": lambda: ops.run(a, b, CLS, -1)}
    for i in range(min(count, TOP_K)):
        d = ops.run(a, b, CLS, i)
        err = float((d.float() - ref).abs().max()) / scale
        algos.append({"index": i, "describe": str(ops.describe(CLS, m, n, k, i)), "rel_err": err, "ok": err <= TOL})
        if err <= TOL:
            fns[i] = (lambda j: (lambda: ops.run(a, b, CLS, j)))(i)
    times = _time_all(torch, fns)
    kernels = {}
    if state["profile"] and time.time() - t0 < PROFILE_UNTIL_S:
        try:                        # which kernels torch.matmul and each algorithm launch (names, not times)
            kernels = _kernel_names(torch, fns)
        except Exception as e:      # noqa: BLE001 - no CUPTI: the names are a diagnosis, not the result
            state["profile"] = False
            print(f"(no kernel names: {str(e).splitlines()[0][:120]})")
    for al in algos:
        if al["index"] in times:
            al["us"] = round(times[al["index"]], 3)
    ok_times = {al["index"]: al["us"] for al in algos if "us" in al}
    chosen = choose(ok_times)
    row = {"set": s["set"], "problem": p, "m": m, "n": n, "k": k, "algorithms": algos, "count": count,
           "matmul_us": round(times["matmul"], 3), "pack_us": round(times["pack"], 3),
           "pack_describe": str(ops.describe(CLS, m, n, k, -1)), "chosen": chosen,
           "first_us": ok_times.get(0), "chosen_us": ok_times.get(chosen),
           "kernels": {str(key): v for key, v in kernels.items()}}
    if kernels:
        row["matmul_runs_index"] = [i for i in ok_times if kernels.get(i) == kernels.get("matmul")]
    if ok_times:
        row["first_vs_matmul"] = round(times["matmul"] / ok_times[0], 4) if 0 in ok_times else None
        row["chosen_vs_matmul"] = round(times["matmul"] / ok_times[chosen], 4)
    all_us = " ".join("%.1f" % al.get("us", float("nan")) for al in algos)
    print(f"{s['set']} m{m}n{n}k{k}: {count} algorithms, matmul {row['matmul_us']:.1f} us, first "
          f"{row['first_us'] or float('nan'):.1f}, chosen #{chosen} {row['chosen_us'] or float('nan'):.1f} us "
          f"({row.get('chosen_vs_matmul') or float('nan'):.3f}x matmul); all: {all_us}; "
          f"matmul runs {row.get('matmul_runs_index')}", flush=True)
    return row


def measure(plan_dir: str, so: str, out_json: str, end_epoch: float | None = None) -> int:
    import gc

    import torch
    torch.ops.load_library(so)
    ops = torch.ops.cutegen_vendor_algos
    spec = json.load(open(os.path.join(plan_dir, "shapes.json")))
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = {"format": FORMAT, "device": torch.cuda.get_device_name(0), "cublaslt_version": int(ops.version()),
           "top_k": TOP_K, "torch": torch.__version__, "cuda": torch.version.cuda,
           "timing": f"cuda-events median of {ITERS} after {WARMUP} behind a spin kernel, contenders in turn, lowest of "
                     f"{ROUNDS} rounds; same inputs (L2 warm)", "class": spec["class"], "shapes": [], "skipped": []}
    gc.disable()
    t0 = time.time()
    profile_state = {"profile": True}
    for s in spec["shapes"]:
        p = s["problem"]
        m, n, k = p["m"], p["n"], p["k"]
        if end_epoch and time.time() > end_epoch:
            res["skipped"].append([m, n, k])
            continue
        try:
            row = _one_shape(torch, ops, s, gen, t0, profile_state)
        except RuntimeError as e:                     # a shape the vendor refuses: said, and the next one
            res["skipped"].append([m, n, k, str(e).splitlines()[0][:200]])
            print(f"{s['set']} m{m}n{n}k{k}: {str(e).splitlines()[0][:200]}")
            continue
        res["shapes"].append(row)
        if len(res["shapes"]) % 10 == 0:            # a run cut short keeps what it measured
            with open(out_json, "w") as f:
                json.dump(res, f, indent=1)
        gc.collect()
    gc.enable()

    def geo(xs):
        xs = [x for x in xs if x]
        return round(math.exp(sum(map(math.log, xs)) / len(xs)), 4) if xs else None
    summ = {"seconds": round(time.time() - t0, 1), "shapes": len(res["shapes"]), "skipped": len(res["skipped"]),
            "wrong": sum(1 for r in res["shapes"] for al in r["algorithms"] if not al["ok"])}
    for name in ("llm-vendor", "qwen2.5-mid-m", None):
        rows = [r for r in res["shapes"] if name is None or r["set"] == name]
        key = name or "all"
        summ[key] = {"shapes": len(rows), "first_vs_matmul_geomean": geo(r.get("first_vs_matmul") for r in rows),
                     "chosen_vs_matmul_geomean": geo(r.get("chosen_vs_matmul") for r in rows),
                     "first_min": min((r["first_vs_matmul"] for r in rows if r.get("first_vs_matmul")), default=None),
                     "chosen_min": min((r["chosen_vs_matmul"] for r in rows if r.get("chosen_vs_matmul")), default=None),
                     "first_under_0.97": sum(1 for r in rows if (r.get("first_vs_matmul") or 9) < 0.97),
                     "chosen_under_0.97": sum(1 for r in rows if (r.get("chosen_vs_matmul") or 9) < 0.97),
                     "chosen_not_first": sum(1 for r in rows if r["chosen"] != 0),
                     # the pack's own plan (index -1: the table's choice where the plan holds one)
                     "pack_vs_matmul_geomean": geo(r["matmul_us"] / r["pack_us"] for r in rows),
                     "pack_vs_matmul_min": min((r["matmul_us"] / r["pack_us"] for r in rows), default=None),
                     "pack_vs_first_geomean": geo(r["first_us"] / r["pack_us"] for r in rows if r.get("first_us")),
                     "pack_takes_measured_choice": sum(1 for r in rows if "measured fastest" in r["pack_describe"]),
                     "pack_index_not_first": sum(1 for r in rows if not r["pack_describe"].startswith("index=0 "))}
    res["summary"] = summ
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(summ, indent=1))
    return 1 if summ["wrong"] or not res["shapes"] else 0


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "plan":
        sys.exit(plan(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None))
    if len(sys.argv) in (5, 7) and sys.argv[1] == "measure":
        end = float(sys.argv[6]) if len(sys.argv) == 7 and sys.argv[5] == "--end-epoch" else None
        sys.exit(measure(sys.argv[2], sys.argv[3], sys.argv[4], end))
    sys.exit(__doc__)
