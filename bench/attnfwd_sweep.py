"""Attention forward sweep (issue 25, helper attnfwd): which 88-kernel form wins where, measured in one process.

  python bench/attnfwd_sweep.py plan [--out out/attnfwd-plan]          # CPU: render the sweep's kernels
  python bench/attnfwd_sweep.py time PLAN --validated V.json --json T.json  # GPU: interleaved timing vs SDPA cuDNN
  python bench/attnfwd_sweep.py merge A.json B.json --json OUT.json     # one validation file from two chains

The forms under test, per kernel class (head dim, causal, grouped), chosen from what the H200 runs and the Nsight
profile left open (NOTES.md "Where the time goes"):
- persistent or not at the same stages (the example's 128x128 q2kv5 against its persistent twin);
- tile order for causal: the example's forward order against ``longest_first`` (cutegen's two derived schedulers,
  templates/attention/fmha_sm90.cu.j2), non-persistent and persistent;
- the search's current picks where they are new forms (128x192 q2kv4 at head 128; 128x128 q4kv5 persistent at
  head 64), and a 192-key tile at head 64;
- the CUTLASS 88 example's own kernel for the head dim (role ``example``: the peer).

Every kernel is validated first (bench/attention_bench.py validate: ragged lengths, causal, GQA, layouts, LSE
against float32); ``time`` times only the validated ones, each checked again at the shape's own size on a slice.
Timing interleaves the contenders of a shape round by round (CUDA events, back-to-back calls, about 25 ms a
round, median of 7 rounds), so a clock drift during the shape hits every contender alike.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SHAPES = {
    "b4_h32_s4096_d128": dict(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128),
    "b2_h16_s8192_d128": dict(batch=2, heads_q=16, heads_kv=16, seqlen_q=8192, seqlen_kv=8192, head_dim=128),
    "b1_h32_s16384_d128": dict(batch=1, heads_q=32, heads_kv=32, seqlen_q=16384, seqlen_kv=16384, head_dim=128),
    "b8_h16_s2048_d64": dict(batch=8, heads_q=16, heads_kv=16, seqlen_q=2048, seqlen_kv=2048, head_dim=64),
}
SHAPES.update({f"{k}_causal": dict(v, causal=True) for k, v in list(SHAPES.items())})
# Llama-3.1-8B heads, causal prefill of 16k tokens (bench/attention_llama.toml's cases), BHSD as transformers passes
for s, b in ((512, 32), (1024, 16), (2048, 8)):
    SHAPES[f"llama8b_s{s}_causal"] = dict(batch=b, heads_q=32, heads_kv=8, seqlen_q=s, seqlen_kv=s, head_dim=128,
                                          causal=True, layout="bhsd")

EX = dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_q=2, stages_kv=5)        # the 88 example, D128
TMA64 = dict(tile_q=64, tile_kv=128, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2)
# (head_dim, causal, grouped) -> [(role, config fields)]; 18 kernels in all
VARIANTS = {
    (128, False, False): [("example", EX), ("persistent", dict(EX, persistent=True)),
                          ("128x192", dict(EX, tile_kv=192, stages_kv=4))],
    (128, True, False): [("example", EX), ("longest_first", dict(EX, tile_order="longest_first")),
                         ("persistent_lf", dict(EX, persistent=True, tile_order="longest_first")),
                         ("128x192", dict(EX, tile_kv=192, stages_kv=4))],
    (64, False, False): [("example", TMA64), ("persistent_q4", dict(EX, stages_q=4, persistent=True)),
                         ("128x192_persistent_q4", dict(EX, tile_kv=192, stages_q=4, persistent=True))],
    (64, True, False): [("example", TMA64), ("128x128", EX), ("longest_first", dict(EX, tile_order="longest_first")),
                        ("persistent_q4_lf", dict(EX, stages_q=4, persistent=True, tile_order="longest_first"))],
    (128, True, True): [("example", EX), ("longest_first", dict(EX, tile_order="longest_first")),
                        ("persistent", dict(EX, persistent=True)),
                        ("persistent_lf", dict(EX, persistent=True, tile_order="longest_first"))],
}
ROUNDS = 7
ROUND_MS = 25.0


def _problem(fields):
    from cutegen.ops.attention.problem import AttentionProblem
    return AttentionProblem(**fields)


def kernel_class(problem) -> tuple:
    return (problem.head_dim, problem.causal, problem.heads_q != problem.heads_kv)


def plan(args) -> int:
    from cutegen.core import registry
    from cutegen.ops.attention.config import AttentionConfig
    from cutegen.ops.attention.render import backend_refusals, render

    op_cost = registry.get("attention").cost
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    shapes, kernels = [], {}
    for name, fields in SHAPES.items():
        problem = _problem(fields)
        listed = []
        for role, cfields in VARIANTS[kernel_class(problem)]:
            config = AttentionConfig(**cfields)
            refused = backend_refusals(problem, config)
            broken = [str(v) for v in registry.check(problem, config) if getattr(v, "enforced", True)]
            if refused or broken:           # the plan is fixed: a refusal here is a bug of this script
                raise SystemExit(f"{name} {role} {config.short_name()}: {(refused + broken)[0]}")
            rel = f"kernels/{problem.kernel_class_name}_{config.short_name()}"
            if rel not in kernels:
                r = render(problem, config, cost={"model": "the attention operation's cost (core search)",
                                                  "predicted_us": op_cost(problem, config)})
                r.write(out / rel)
                kernels[rel] = r.kernel_hash
            listed.append({"role": role, "dir": rel, "hash": kernels[rel], "config": config.to_dict(),
                           "predicted_us": round(op_cost(problem, config), 3)})
        shapes.append({"name": name, "problem": problem.to_dict(), "flops": problem.flops, "kernels": listed})
        print(f"{name}: " + ", ".join(f"{k['role']} {Path(k['dir']).name.split('_')[-1]} {k['predicted_us']:.0f} us"
                                      for k in listed))
    (out / "plan.json").write_text(json.dumps({"shapes": shapes, "kernels": kernels}, indent=1, sort_keys=True) + "\n")
    (out / "dirs.txt").write_text("".join(f"{out / d}\n" for d in sorted(kernels)))
    print(f"{len(kernels)} kernel directories under {out}/kernels")
    return 0


def merge(args) -> int:
    """Two validation chains' JSON files as one (the results of both, the summary recounted)."""
    results, probes = [], []
    for path in args.inputs:
        if Path(path).is_file():
            doc = json.loads(Path(path).read_text())
            results += doc.get("results", [])
            probes += doc.get("probes", [])
    verdicts = ("pass", "fail", "hang", "crash", "not run")
    summary = {"kernels": len(results), **{v: sum(r.get("verdict") == v for r in results) for v in verdicts},
               "failing": sorted(Path(r["kernel"]).name for r in results if r.get("verdict") in ("fail", "hang", "crash"))}
    Path(args.json).write_text(json.dumps({"summary": summary, "results": sorted(results, key=lambda r: r["kernel"])},
                                          indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary))
    return 0


def _rounds(torch, fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def time_plan(args) -> int:
    from cutegen.ops.attention.runner import _torch, make_tensor, peer_calls, reference
    from cutegen.ops.attention.problem import AttentionProblem
    from cutegen.ops.attention.torch_op import AttentionKernels
    torch = _torch()
    plan_dir = Path(args.plan)
    plan_doc = json.loads((plan_dir / "plan.json").read_text())
    valid = set()
    for path in args.validated:
        if Path(path).is_file():
            valid |= {Path(r["kernel"]).name for r in json.loads(Path(path).read_text())["results"]
                      if r.get("verdict") == "pass"}
    deadline = time.time() + args.deadline
    dev = torch.cuda.get_device_properties(0)
    doc = {"device": dev.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "flops": "AttentionProblem.flops: causal counts the kept (top-left) pairs",
           "method": f"contenders interleaved: {ROUNDS} rounds, each contender ~{ROUND_MS:.0f} ms of back-to-back calls "
                     "per round (CUDA events); median of rounds", "shapes": []}
    order = sorted(plan_doc["shapes"], key=lambda s: s["name"].startswith("llama"))   # issue shapes first
    for shape in order:
        if time.time() > deadline:
            doc["shapes"].append({"name": shape["name"], "skipped": "deadline"})
            continue
        p = AttentionProblem.from_dict(shape["problem"])
        dtype = torch.bfloat16
        q = make_tensor(p.batch, p.heads_q, p.seqlen_q, p.head_dim, p.layout, dtype, 1)
        k = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 2)
        v = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 3)
        gqa = p.heads_q != p.heads_kv
        ref_o, _ = reference(q, k, v, p.causal, p.softmax_scale, batches=[p.batch - 1], heads=[0, p.heads_q - 1])
        rows = {"name": shape["name"], "problem": shape["problem"], "flops": p.flops, "contenders": {}}
        calls = {}
        for entry in shape["kernels"]:
            name = Path(entry["dir"]).name
            rec = {"role": entry["role"], "dir": entry["dir"], "config": entry["config"],
                   "predicted_us": entry["predicted_us"]}
            rows["contenders"][entry["role"]] = rec
            if not (plan_dir / entry["dir"] / "kernel.so").is_file():
                rec["skipped"] = "not built"
                continue
            if name not in valid:
                rec["skipped"] = "not validated"
                continue
            op = AttentionKernels([plan_dir / entry["dir"]])
            calls[entry["role"]] = lambda op=op: op(q, k, v, is_causal=p.causal, scale=p.softmax_scale, enable_gqa=gqa)
        peers = peer_calls(p, q, k, v)
        calls["sdpa_cudnn"] = peers["sdpa_cudnn"]
        rows["contenders"]["sdpa_cudnn"] = {"role": "sdpa_cudnn"}
        live = {}
        for role, fn in calls.items():
            rec = rows["contenders"][role]
            try:
                o = fn()
                torch.cuda.synchronize()
                sub = o[p.batch - 1:p.batch, [0, p.heads_q - 1]]
                err = float((sub.float() - ref_o).abs().max()) / max(1.0, float(ref_o.abs().max()))
                rec["err_o"] = err
                if not (bool(torch.isfinite(sub).all()) and err <= 0.02):
                    rec["error"] = f"wrong result at this size: {err:.3g} of max|O|"
                    continue
                fn()
                torch.cuda.synchronize()
                one = _rounds(torch, fn, 1)
                live[role] = (fn, max(2, min(400, int(ROUND_MS / max(one, 1e-3)))))
                rec["times_ms"] = []
            except Exception as e:  # noqa: BLE001 - a contender that cannot run this shape says so
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
        for _ in range(ROUNDS):
            for role, (fn, reps) in live.items():
                rows["contenders"][role]["times_ms"].append(_rounds(torch, fn, reps))
        for role in live:
            rec = rows["contenders"][role]
            rec["ms"] = statistics.median(rec["times_ms"])
            rec["tflops"] = p.flops / (rec["ms"] * 1e-3) / 1e12
        base = rows["contenders"]["sdpa_cudnn"].get("ms")
        ex = rows["contenders"].get("example", {}).get("ms")
        for rec in rows["contenders"].values():
            if rec.get("ms") and base:
                rec["vs_cudnn"] = base / rec["ms"]
            if rec.get("ms") and ex:
                rec["vs_example"] = ex / rec["ms"]
        ours = {r: c for r, c in rows["contenders"].items() if r != "sdpa_cudnn" and c.get("ms")}
        if ours:
            rows["fastest"] = min(ours, key=lambda r: ours[r]["ms"])
        doc["shapes"].append(rows)
        print(f"{shape['name']}: " + "  ".join(
            f"{r} {c['ms'] * 1e3:.0f}us {c.get('vs_cudnn', 0):.3f}x" for r, c in rows["contenders"].items()
            if c.get("ms")) + "".join(f"\n  {r}: {c.get('skipped') or c.get('error')}" for r, c in rows["contenders"].items()
                                       if not c.get("ms")), flush=True)
        q = k = v = o = calls = live = peers = None
        torch.cuda.empty_cache()
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")   # what is done so far
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--out", default="out/attnfwd-plan")
    p = sub.add_parser("time")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--validated", nargs="+", required=True, help="validate's JSON files: time what passed")
    p.add_argument("--deadline", type=float, default=90.0, help="no shape starts after this many seconds")
    p = sub.add_parser("merge")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    return {"plan": plan, "time": time_plan, "merge": merge}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
