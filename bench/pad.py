"""Tiles sized to the waves (issue 24 part 2): the one-stage TMA descriptor form (cutegen/stage_tma.py) that
makes Tile_N = 136, 200, 232 (odd multiples of 8) compile, on the GPU. Plan here, time there.

  python bench/pad.py plan [--out out/pad-plan]          # CPU: search + render (needs egglog)
  python bench/pad.py time PLAN --json OUT.json          # GPU: one process, torch + ctypes

``plan`` renders, under PLAN:
  form/<name>   cuBLAS's own tile for the three diagnose shapes, through the form (the configurations
                bench/diagnose_cublas.py maps cuBLAS's nvjet kernels to: swap-AB, full-width WGMMA);
  alt/<name>    the same kernels with the no-smem epilogue;
  val/<name>    validated, not timed: 64x136 at 1x2, an f16 kernel, an unswapped 128x200 (the form on the
                caller's own B), 64x200 ping-pong (run 1, bench/results/pad, validated the 1x1 and 1x2 variants
                of 128x200 and 128x232, 64x136 at 1x1 and 128x8x64 at 13 stages);
  pick/<name>   the search's pick with wave tiles (``search(..., wave_tiles=True)``: odd-multiple-of-8 tiles
                with their full-width WGMMA), for the diagnose shapes and the held-out shapes (fixed below
                before any run);
  prev/<name>   the search's pick as main makes it (``_as_main``: no one-stage form, every tile priced and
                rendered with ss_op_selector's instruction): today's pick. Left out where it is the pick.
``time`` loads every built form/pick/prev kernel, checks each at the problem's own size (beta 0 and 0.5)
against a float32 reference, times it beside cuBLAS (torch.matmul) with CUDA events (contenders
interleaved per round, median of rounds), and rechecks D after the timed relaunches.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DIAGNOSE = ("m257_n4096_k4096_bf16", "m200_n14336_k4096_bf16", "m2040_n3584_k3584_bf16")
# held out: bench/midsize.toml problems that bench/midsize_diagnose.toml does not hold, fixed 2026-11-26 before
# any GPU run of the form (mid-size M where a wave-sized odd multiple of 8 could cover M: 129, 136 and 1000 = 5 x
# 200 rows; one large wave-quantized shape)
HELD_OUT = ("gemma2_9b_o_m136_bf16", "qwen25_7b_qkv_m129_bf16", "qwen25_7b_qkv_m1000_bf16", "m4200_n4200_k4096_bf16")
TIMED_ROOTS = ("form", "alt", "pick", "prev")

# cuBLAS's kernel per diagnose shape (H200, torch.profiler, NOTES.md "the diagnosis") as cutegen's swap-AB form
CUBLAS_TILES = {
    "m257_n4096_k4096_bf16": dict(tile=(64, 136, 64), cluster=(2, 1, 1), stages=8, sched="pingpong"),
    "m200_n14336_k4096_bf16": dict(tile=(128, 200, 64), cluster=(4, 1, 1), stages=5, sched="cooperative"),
    "m2040_n3584_k3584_bf16": dict(tile=(128, 232, 64), cluster=(2, 1, 1), stages=4, sched="cooperative"),
}


def _config(tile, cluster, stages, sched, swap=True):
    from cutegen.config import KernelConfig

    epi = "tma_warp_specialized_cooperative" if sched == "cooperative" else "tma_warp_specialized"
    return KernelConfig.from_dict({"tile_shape": list(tile), "cluster_shape": list(cluster), "stages": stages,
                                   "mainloop_schedule": sched, "epilogue_schedule": epi,
                                   "tile_scheduler": "persistent", "swap_ab": swap,
                                   "mma_instruction": [64, tile[1], 16]})


def _is_form(problem, config) -> bool:
    from cutegen import render
    from cutegen.dtypes import DTYPES
    from cutegen.swap_ab import kernel_problem
    from cutegen import stage_tma

    cfg = render.complete_config(problem, config)
    kp = kernel_problem(problem, cfg)
    return stage_tma.needed(kp, cfg, DTYPES[kp.dtype_a].bits, DTYPES[kp.dtype_b].bits, False)


@contextlib.contextmanager
def _as_main():
    """The search as main has it: no one-stage form (SM90-SMEM-STAGE-SLICE refuses every tile CuTe cannot
    slice); with ``wave_tiles=False`` every tile is priced and rendered with ss_op_selector's instruction."""
    from cutegen import stage_tma

    saved = stage_tma.why_not
    stage_tma.why_not = lambda *a, **k: "bench/pad.py: the form left out (main's search)"
    try:
        yield
    finally:
        stage_tma.why_not = saved


def plan(args) -> int:
    from cutegen.render import render, check_legality, complete_config
    from cutegen.search.engine import search
    from cutegen.suites import load_suite
    from cutegen.problem import GemmProblem

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suite = dict(load_suite(args.suite))
    names = list(DIAGNOSE) + list(HELD_OUT)
    listing = []

    def emit(root, name, problem, config, cost=None, note=""):
        config = complete_config(problem, config)
        rep = check_legality(problem, config)
        if not rep.legal:
            print(f"{name:28s} {root:5s} ILLEGAL {config.short_name()}: {rep.to_dict()['reasons']}")
            return
        r = render(problem, config, "cutlass", cost=cost)
        d = out / root / name
        r.write(d)
        listing.append({"problem": name, "root": root, "dir": str(d), "config": config.short_name(),
                        "form": _is_form(problem, config), "note": note,
                        "predicted_us": None if cost is None else round(cost["predicted_us"], 2)})
        print(f"{name:28s} {root:5s} {config.short_name():48s} form={_is_form(problem, config)!s:5s} {note}")

    toml = []
    for name in names:
        p = suite[name]
        toml.append((name, p))
        pick = search(p, 1, wave_tiles=True).ranked[0]
        emit("pick", name, p, pick.config, {"model": "cutegen.search.cost", "predicted_us": pick.cost,
                                            "breakdown": pick.breakdown})
        with _as_main():
            prev = search(p, 1, wave_tiles=False).ranked[0]
        if prev.config.to_json() != pick.config.to_json():
            emit("prev", name, p, prev.config, {"model": "cutegen.search.cost", "predicted_us": prev.cost,
                                                "breakdown": prev.breakdown})
        if name in CUBLAS_TILES:
            t = CUBLAS_TILES[name]
            emit("form", name, p, _config(t["tile"], t["cluster"], t["stages"], t["sched"]), note="cuBLAS's tile")
            # the same kernel with the no-smem epilogue: Tile_N = 8 x odd leaves the TMA epilogue 8-column
            # subtiles (EpilogueTileAuto: gcd(32, N) = 8; an explicit tile needs N % 16 == 0)
            emit("alt", name, p, _config(t["tile"], t["cluster"], t["stages"], t["sched"]).replace(
                epilogue_schedule="no_smem"), note="cuBLAS's tile, no-smem epilogue")
            if name == "m257_n4096_k4096_bf16":   # run 1 validated the 1x1 and 1x2 variants of the other two
                emit("val", f"{name}_c1x2", p, _config(t["tile"], (1, 2, 1), t["stages"], t["sched"]),
                     note="cluster variant")
    # f16 through the form, and the form on an unswapped B (the caller's own N = 1000 = 5 x 200)
    f16 = suite["m257_n4096_k4096_bf16"].replace(dtype_a="f16", dtype_b="f16", dtype_c="f16", dtype_d="f16")
    emit("val", "m257_n4096_k4096_f16", f16, _config((64, 136, 64), (2, 1, 1), 8, "pingpong"), note="f16")
    plain = GemmProblem.from_dict({"m": 4096, "n": 1000, "k": 4096, "dtype": "bf16", "layout": "tn"})
    emit("val", "m4096_n1000_k4096_bf16", plain, _config((128, 200, 64), (2, 1, 1), 5, "cooperative", swap=False),
         note="unswapped")
    # the configuration oracle's stock compile errors the form now builds (tests/test_legality_config_oracle.py):
    # 64x200x64 ping-pong (run 1 validated 128x8x64 at its 13 auto stages)
    sq = GemmProblem.from_dict({"m": 2048, "n": 2048, "k": 2048, "dtype": "bf16", "layout": "tn"})
    emit("val", "m2048_n2048_k2048_bf16_64x200_pp", sq, _config((64, 200, 64), (1, 1, 1), 6, "pingpong", swap=False),
         note="ping-pong 200")
    (out / "suite.toml").write_text("".join(
        f'[[problem]]\nname = "{n}"\nm = {p.m}\nn = {p.n}\nk = {p.k}\ndtype = "{p.dtype_a}"\nlayout = "{p.blas_layout}"\n\n'
        for n, p in toml))
    (out / "plan.json").write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n")
    print(f"{len(listing)} kernels under {out}")
    return 0


# --- the GPU half ------------------------------------------------------------------------------------------

def _time_primed(torch, fn, iters: int) -> float:
    """Microseconds per call of ``fn``, GPU time only: a spin kernel queued first keeps the GPU busy while the
    host queues every timed call (as cutegen's runner does, cutegen/_runner_worker.py time_calls), so the C ABI's
    host work through ctypes (run 1: about 5 us per call) does not show up as idle gaps; per-call CUDA events,
    the median call."""
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    torch.cuda._sleep(int(SPIN_CYCLES_PER_CALL * iters))
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends)) * 1000.0


SPIN_CYCLES_PER_CALL = 100_000     # ~50 us of spinning per queued call: more than the host needs to queue one


def time_plan(args) -> int:
    import torch
    from cutegen.runner import tolerance
    from cutegen.suites import load_suite
    from splitk_reduce import Kernel, _logical, _operands, _out, _rel_err

    plan_dir = Path(args.plan)
    suite = dict(load_suite(plan_dir / "suite.toml"))
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "iters": args.iters, "rounds": args.rounds,
           "note": "one process; contenders interleaved per round; each round the median of per-call CUDA events "
                   "behind a spin kernel (GPU time, host launch work hidden); beta = 0 when timed; no L2 rotation "
                   "(the same inputs every call, for every contender)",
           "diagnose": list(DIAGNOSE), "held_out": list(HELD_OUT), "problems": []}
    t_end = time.monotonic() + args.deadline
    for name, p in suite.items():
        if time.monotonic() > t_end:
            doc["problems"].append({"name": name, "skipped": "deadline"})
            continue
        entry = {"name": name, "m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype_a, "layout": p.blas_layout,
                 "held_out": name in HELD_OUT, "contenders": {}}
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1234)
        a, b, a_store, b_store, c = _operands(torch, p, gen)
        ref = a.float() @ b.float()
        tol = tolerance(p)
        kernels = {}
        for root in TIMED_ROOTS:
            d = plan_dir / root / name
            if (d / "kernel.so").is_file():
                try:
                    kernels[root] = Kernel(d)
                except Exception as e:  # noqa: BLE001 - recorded, the others still run
                    entry["contenders"][root] = {"error": f"load: {e}"}
            elif (d / "manifest.json").is_file():
                entry["contenders"][root] = {"error": "not built"}
        bufs = {}
        for root, kern in kernels.items():
            res = {"config": kern.config.short_name()}
            entry["contenders"][root] = res
            wsb = kern.workspace_size(p.m, p.n, p.k)
            ws = torch.empty(max(wsb, 1), dtype=torch.uint8, device="cuda")
            d = _out(torch, p)
            st, msg = kern.call(torch, p, a_store, b_store, c, d, 1.0, 0.0, ws.data_ptr(), wsb)
            torch.cuda.synchronize()
            res["status"], res["message"] = st, msg
            if st:
                continue
            res["rel_err"] = _rel_err(torch, _logical(d, p), ref)
            ok = res["rel_err"] < tol
            # beta = 0.5 with a C the kernel reads (the suite's C is void: D's type stands in)
            cc = torch.randn(p.m, p.n, generator=gen, device="cuda").to(d.dtype)
            d2 = _out(torch, p)
            st2, _ = kern.call(torch, p, a_store, b_store, cc, d2, 1.0, 0.5, ws.data_ptr(), wsb)
            torch.cuda.synchronize()
            if st2 == 0:
                res["rel_err_beta"] = _rel_err(torch, _logical(d2, p), ref + 0.5 * cc.float())
                ok = ok and res["rel_err_beta"] < tol
            else:
                res["beta_status"] = st2      # a void-C kernel refuses beta != 0 (status, not a failure)
            res["ok"], res["tol"] = ok, tol
            if ok:
                bufs[root] = (kern, d, ws, wsb)
        bt = b_store.t() if p.layout_b == "col" else b_store
        at = a_store if p.layout_a == "row" else a_store.t()
        dc = torch.empty(p.m, p.n, device="cuda", dtype=at.dtype)
        fns = {"cublas": lambda: torch.matmul(at, bt, out=dc)}
        for root, (kern, d, ws, wsb) in bufs.items():
            fns[root] = (lambda kern=kern, d=d, ws=ws, wsb=wsb:
                         kern.call(torch, p, a_store, b_store, c, d, 1.0, 0.0, ws.data_ptr(), wsb))
        for fn in fns.values():
            for _ in range(args.warmup):
                fn()
        torch.cuda.synchronize()
        samples = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, fn in fns.items():
                samples[k].append(_time_primed(torch, fn, args.iters))
        us = {k: statistics.median(v) for k, v in samples.items()}
        entry["cublas_us"] = us["cublas"]
        for root, (kern, d, ws, wsb) in bufs.items():
            res = entry["contenders"][root]
            res["us"] = us[root]
            res["tflops"] = 2.0 * p.m * p.n * p.k / (us[root] * 1e-6) / 1e12
            res["vs_cublas"] = us["cublas"] / us[root]
            res["relaunch_rel_err"] = _rel_err(torch, _logical(d, p), ref)
            res["relaunch_ok"] = res["relaunch_rel_err"] < tol
        doc["problems"].append(entry)
        line = f"{name:28s} cuBLAS {us['cublas']:8.2f} us"
        for root in TIMED_ROOTS:
            r = entry["contenders"].get(root)
            if r and "us" in r:
                line += f" | {root} {r['config']} {r['us']:.2f} us ({r['vs_cublas']:.3f}x)"
            elif r:
                line += f" | {root} FAILED {r.get('status')} {r.get('message', r.get('error', ''))[:80]}"
        print(line, flush=True)
        del a, b, a_store, b_store, c, ref, bufs, kernels
        torch.cuda.empty_cache()
    geo = lambda xs: statistics.geometric_mean(xs) if xs else None  # noqa: E731

    def ratios(root, held):
        return [e["contenders"][root]["vs_cublas"] for e in doc["problems"]
                if e.get("held_out") == held and "vs_cublas" in e.get("contenders", {}).get(root, {})]
    doc["summary"] = {f"{root}_vs_cublas_geomean_{which}": geo(ratios(root, held))
                      for root in TIMED_ROOTS for which, held in (("diagnose", False), ("held_out", True))}
    doc["summary"]["all_ok"] = all(r.get("ok") and r.get("relaunch_ok", True)
                                   for e in doc["problems"] for r in e.get("contenders", {}).values())
    print(json.dumps(doc["summary"]))
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0 if doc["summary"]["all_ok"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="search and render the kernels (CPU)")
    p.add_argument("--suite", default="bench/midsize.toml")
    p.add_argument("--out", default="out/pad-plan")
    t = sub.add_parser("time", help="check and time the built kernels against cuBLAS (GPU)")
    t.add_argument("plan")
    t.add_argument("--json", required=True)
    t.add_argument("--iters", type=int, default=50)
    t.add_argument("--rounds", type=int, default=5)
    t.add_argument("--warmup", type=int, default=10)
    t.add_argument("--deadline", type=float, default=60.0, help="start no problem after this many seconds")
    args = ap.parse_args(argv)
    return plan(args) if args.cmd == "plan" else time_plan(args)


if __name__ == "__main__":
    sys.exit(main())
