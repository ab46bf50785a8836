"""Split-K with a separate reduction (cutegen/split_k_reduce.py, issue 24 part 2): plan here, time there.

  python bench/splitk_reduce.py plan [--out out/splitk-reduce-plan]     # CPU: search + render (needs egglog)
  python bench/splitk_reduce.py time PLAN --json OUT.json               # GPU: one process, torch + ctypes

``plan`` searches every problem of bench/splitk_reduce.toml and renders, per problem:
  form/<name>   the search's pick (the split-K-reduce form where it wins the model);
  form2/<name>  the best kernel of the form at half the pick's slice count (twice where half is not offered);
  prev/<name>   the search's pick with the form left out (``search(..., staging=False)``): what main picks
                today, a stream-K kernel with its launch plan.
``time`` loads every built kernel (kernel.so beside its manifest) in one process, checks it at the
problem's own size against a float32 reference (beta = 0, and beta = 0.5 with C where C exists), times it
beside cuBLAS (torch.matmul, beta = 0) with CUDA events (contenders interleaved, median of rounds),
rechecks D after the timed relaunches (one workspace for all of them), and asks each form kernel for a
workspace one byte short (status 2 naming SPLITK-REDUCE-WORKSPACE) and, where one exists, a K its slices
cannot split (status 1 naming SPLITK-REDUCE-SLICES-DIVIDE-K).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

ROOTS = ("form", "form2", "prev")


def plan(args) -> int:
    from cutegen.render import render
    from cutegen.search.engine import search, search_split_k_reduce, split_k_reduce_forms
    from cutegen.suites import load_suite

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.toml").write_text(Path(args.suite).read_text())
    listing = []
    for name, problem in load_suite(args.suite):
        picks = {}
        ranked = search(problem, 3).ranked
        if ranked:
            picks["form"] = ranked[0]
            s = ranked[0].config.split_k_slices
            # the form at half the pick's slices (twice where half is not offered): does s matter as modelled?
            offered = split_k_reduce_forms(problem, "cutlass")
            other = s // 2 if s // 2 in offered else s * 2
            if s > 1 and other > 1:
                alt = search_split_k_reduce(problem, other, 1)
                if alt:
                    picks["form2"] = alt[0]
        prev = search(problem, 1, staging=False).ranked      # the form left out: today's pick
        if prev:
            picks["prev"] = prev[0]
        for root, x in picks.items():
            cost = {"model": "cutegen.search.cost", "predicted_us": x.cost, "breakdown": x.breakdown}
            if x.plan is not None:
                cost["launch_plan"] = x.plan.to_dict()
            r = render(problem, x.config, "cutlass", cost=cost)
            d = out / root / name
            r.write(d)
            listing.append({"problem": name, "root": root, "dir": str(d), "config": x.config.short_name(),
                            "slices": x.config.split_k_slices, "predicted_us": round(x.cost, 2),
                            "launch_plan": x.plan.label() if x.plan else None})
            print(f"{name:28s} {root:5s} {x.config.short_name():48s} predicted {x.cost:7.1f} us"
                  + (f"  plan {x.plan.label()}" if x.plan else ""))
        print(f"{name:28s} forms offered: {split_k_reduce_forms(problem, 'cutlass')}")
    (out / "plan.json").write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n")
    return 0


# --- the GPU half ------------------------------------------------------------------------------------------

def _torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def _operands(torch, p, gen):
    """A (M x K), B (K x N) and C (M x N) as the problem lays them out, random normal values."""
    dev = "cuda"
    ta, tb = _torch_dtype(torch, p.dtype_a), _torch_dtype(torch, p.dtype_b)
    a = torch.randn(p.m, p.k, generator=gen, device=dev).to(ta)
    b = torch.randn(p.k, p.n, generator=gen, device=dev).to(tb)
    a_store = a if p.layout_a == "row" else a.t().contiguous()            # row: M x K, K contiguous
    b_store = b.t().contiguous() if p.layout_b == "col" else b             # col: stored N x K
    c = None
    if p.dtype_c != "void":
        c = torch.randn(p.m, p.n, generator=gen, device=dev).to(_torch_dtype(torch, p.dtype_c))
    return a, b, a_store, b_store, c


def _out(torch, p):
    shape = (p.m, p.n) if p.layout_c == "row" else (p.n, p.m)
    return torch.full(shape, float("nan"), device="cuda", dtype=_torch_dtype(torch, p.dtype_d))


def _logical(d, p):
    return d if p.layout_c == "row" else d.t()


def _rel_err(torch, d, ref):
    d = d.double()
    if torch.isnan(d).any():
        return float("inf")
    return (torch.linalg.vector_norm(d - ref.double()) / torch.linalg.vector_norm(ref.double())).item()


class Kernel:
    def __init__(self, directory: Path):
        from cutegen import abi
        from cutegen.launch_plan import LaunchPlan
        from cutegen.manifest import load

        self.dir = directory
        self.man = load(directory)
        self.problem, self.config = self.man.problem, self.man.config
        self.lib = abi.bind(ctypes.CDLL(str(directory / "kernel.so")))
        self.plan = LaunchPlan.from_dict(self.man.data.get("launch_plan")) if abi.has_plan(self.lib) else None

    def workspace_size(self, m, n, k, batch=1) -> int:
        if self.plan is not None:
            return int(self.lib.cutegen_workspace_size_plan(m, n, k, batch, *self.plan.codes()))
        return int(self.lib.cutegen_workspace_size(m, n, k, batch))

    def call(self, torch, p, a_store, b_store, c, d, alpha, beta, ws, ws_bytes, k=None):
        k = p.k if k is None else k
        lda = a_store.stride(0)
        ldb = b_store.stride(0)
        ldd = d.stride(0)
        ldc = ldd
        cptr = None
        if c is not None and beta != 0.0:
            cs = c if p.layout_c == "row" else c.t().contiguous()
            self._c_keep = cs
            cptr, ldc = cs.data_ptr(), cs.stride(0)
        head = [a_store.data_ptr(), b_store.data_ptr(), cptr, d.data_ptr(), p.m, p.n, k, 1, lda, ldb, ldc, ldd,
                0, 0, 0, 0, float(alpha), float(beta), None]
        stream = torch.cuda.current_stream().cuda_stream
        if self.plan is not None:
            status = self.lib.cutegen_gemm_plan(*head, *self.plan.codes(), ws, ws_bytes, stream)
        else:
            status = self.lib.cutegen_gemm(*head, ws, ws_bytes, stream)
        msg = self.lib.cutegen_last_error().decode(errors="replace") if status else ""
        return int(status), msg


def _time(torch, fn, iters: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def time_plan(args) -> int:
    import torch
    from cutegen.runner import tolerance
    from cutegen.suites import load_suite

    plan_dir = Path(args.plan)
    suite = dict(load_suite(plan_dir / "suite.toml"))
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "iters": args.iters, "rounds": args.rounds,
           "note": "one process; contenders interleaved per round; beta = 0 when timed; no L2 rotation",
           "problems": []}
    t_end = time.monotonic() + args.deadline
    for name, p in suite.items():
        if time.monotonic() > t_end:
            doc["problems"].append({"name": name, "skipped": "deadline"})
            continue
        entry = {"name": name, "m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype_a, "layout": p.blas_layout,
                 "contenders": {}}
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1234)
        a, b, a_store, b_store, c = _operands(torch, p, gen)
        ref = a.float() @ b.float()
        ref_beta = ref * 1.0 + (0.5 * c.float() if c is not None else 0.0)
        tol = tolerance(p)
        kernels = {}
        for root in ROOTS:
            d = plan_dir / root / name
            if (d / "kernel.so").is_file():
                try:
                    kernels[root] = Kernel(d)
                except Exception as e:  # noqa: BLE001 - recorded, the others still run
                    entry["contenders"][root] = {"error": f"load: {e}"}
        bufs = {}
        for root, kern in kernels.items():
            res = {"config": kern.config.short_name(), "slices": kern.config.split_k_slices,
                   "launch_plan": kern.plan.label() if kern.plan else None}
            entry["contenders"][root] = res
            wsb = kern.workspace_size(p.m, p.n, p.k)
            ws = torch.empty(max(wsb, 1), dtype=torch.uint8, device="cuda")
            res["workspace_bytes"] = wsb
            d = _out(torch, p)
            st, msg = kern.call(torch, p, a_store, b_store, c, d, 1.0, 0.0, ws.data_ptr(), wsb)
            torch.cuda.synchronize()
            res["status"], res["message"] = st, msg
            if st:
                continue
            res["rel_err"] = _rel_err(torch, _logical(d, p), ref)
            ok = res["rel_err"] < tol
            if c is not None:
                d2 = _out(torch, p)
                st2, msg2 = kern.call(torch, p, a_store, b_store, c, d2, 1.0, 0.5, ws.data_ptr(), wsb)
                torch.cuda.synchronize()
                res["rel_err_beta"] = _rel_err(torch, _logical(d2, p), ref_beta) if st2 == 0 else None
                ok = ok and st2 == 0 and res["rel_err_beta"] is not None and res["rel_err_beta"] < tol
            res["ok"], res["tol"] = ok, tol
            if kern.config.split_k_slices > 1:
                short = kern.call(torch, p, a_store, b_store, c, _out(torch, p), 1.0, 0.0, ws.data_ptr(), wsb - 1)
                res["probe_workspace_short"] = {"status": short[0], "message": short[1][:160],
                                                "ok": short[0] == 2 and short[1].startswith("SPLITK-REDUCE-WORKSPACE")}
                s = kern.config.split_k_slices
                if (p.k - 8) % s:
                    bad_k = p.k - 8        # a multiple of 8 (16 bytes of 16-bit elements) the slices cannot split
                    probe = kern.call(torch, p, a_store, b_store, c, _out(torch, p), 1.0, 0.0, ws.data_ptr(), wsb,
                                      k=bad_k)
                    res["probe_divide_k"] = {"k": bad_k, "status": probe[0], "message": probe[1][:160],
                                             "ok": probe[0] == 1 and probe[1].startswith("SPLITK-REDUCE-SLICES-DIVIDE-K")}
                torch.cuda.synchronize()
            if ok:
                bufs[root] = (kern, d, ws, wsb)
        # timing: cuBLAS and every correct kernel, interleaved
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
                samples[k].append(_time(torch, fn, args.iters))
        us = {k: statistics.median(v) for k, v in samples.items()}
        entry["cublas_us"] = us["cublas"]
        for root, (kern, d, ws, wsb) in bufs.items():
            res = entry["contenders"][root]
            res["us"] = us[root]
            res["tflops"] = 2.0 * p.m * p.n * p.k / (us[root] * 1e-6) / 1e12
            res["vs_cublas"] = us["cublas"] / us[root]
            res["relaunch_rel_err"] = _rel_err(torch, _logical(d, p), ref)   # after every timed relaunch
            res["relaunch_ok"] = res["relaunch_rel_err"] < tol
        doc["problems"].append(entry)
        line = f"{name:28s} cuBLAS {us['cublas']:8.2f} us"
        for root in ROOTS:
            r = entry["contenders"].get(root)
            if r and "us" in r:
                line += f" | {root} {r['config']} {r['us']:.2f} us ({r['vs_cublas']:.3f}x)"
            elif r:
                line += f" | {root} FAILED {r.get('status')} {r.get('message', r.get('error', ''))[:80]}"
        print(line, flush=True)
        del a, b, a_store, b_store, c, ref, ref_beta, bufs, kernels
        torch.cuda.empty_cache()
    ratios = [e["contenders"]["form"]["vs_cublas"] for e in doc["problems"]
              if "vs_cublas" in e.get("contenders", {}).get("form", {})]
    prev = [e["contenders"]["prev"]["vs_cublas"] for e in doc["problems"]
            if "vs_cublas" in e.get("contenders", {}).get("prev", {})]
    geo = lambda xs: statistics.geometric_mean(xs) if xs else None  # noqa: E731
    doc["summary"] = {"form_vs_cublas_geomean": geo(ratios), "prev_vs_cublas_geomean": geo(prev),
                      "all_ok": all(r.get("ok") and r.get("relaunch_ok", True)
                                    and r.get("probe_workspace_short", {}).get("ok", True)
                                    and r.get("probe_divide_k", {}).get("ok", True)
                                    for e in doc["problems"] for r in e.get("contenders", {}).values())}
    print(json.dumps(doc["summary"]))
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0 if doc["summary"]["all_ok"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="search and render the kernels (CPU)")
    p.add_argument("--suite", default="bench/splitk_reduce.toml")
    p.add_argument("--out", default="out/splitk-reduce-plan")
    t = sub.add_parser("time", help="check and time the built kernels against cuBLAS (GPU)")
    t.add_argument("plan")
    t.add_argument("--json", required=True)
    t.add_argument("--iters", type=int, default=50)
    t.add_argument("--rounds", type=int, default=5)
    t.add_argument("--warmup", type=int, default=10)
    t.add_argument("--deadline", type=float, default=120.0, help="start no problem after this many seconds")
    args = ap.parse_args(argv)
    return plan(args) if args.cmd == "plan" else time_plan(args)


if __name__ == "__main__":
    sys.exit(main())
