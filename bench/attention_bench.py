"""Attention kernels (issue 25): plan here, build, validate and time on the H200.

  python bench/attention_bench.py plan [--out out/attention-plan]      # CPU: search + render every kernel
  python bench/attention_bench.py validate PLAN --json OUT.json         # GPU: every built kernel vs float32
  python bench/attention_bench.py time PLAN --json OUT.json             # GPU: op vs SDPA cuDNN/flash, one process
  python bench/attention_bench.py sanitize-case KERNEL_DIR              # GPU: one small call (compute-sanitizer)

``plan`` searches each shape of SHAPES with ``cutegen.core.search`` (attention's space, checks and cost) and
renders, per shape: the search's first three picks ("cutegen", "cutegen-2", "cutegen-3"), the CUTLASS 88
example's own kernels for the head dim ("example", "example-2", ...; the example's first one is the "88
example" peer), and alternatives for the search to learn from. Kernels are size-independent: one directory
per (kernel key, config), shared by the shapes that use it.

``validate`` runs each built kernel in a worker process (a crash or hang costs that kernel only) through the
PyTorch op and the raw C ABI: ragged and unequal sequence lengths, causal or not, batch, BSHD and BHSD strides,
GQA/MQA groups and the decode-like packing (grouped kernels), a custom scale, the log-sum-exp, against a float32
reference; then the ABI's refusals (misaligned pointer, wrong head dim, strides, GQA on an MHA kernel, workspace).
``op-checks`` runs one kernel's op under ``torch.compile`` and inside a CUDA graph.

``time`` times, per shape, every validated kernel through the op (``AttentionKernels``) and SDPA's cuDNN and
flash backends (``torch.nn.attention.sdpa_kernel``) on the same tensors with CUDA events (contenders
interleaved, median of rounds), after checking the op's output at the shape's own size on a slice against the
float32 reference. TFLOP/s count the useful FLOPs (``AttentionProblem.flops``: causal counts the kept pairs).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> problem fields. Prefill shapes of the issue (H200 cuDNN figures there), a GQA prefill (Llama-3.1-8B
# heads) and decode-like calls (a few queries against an 8k KV cache, GQA).
SHAPES = {
    "b4_h32_s4096_d128": dict(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128),
    "b4_h32_s4096_d128_causal": dict(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128,
                                     causal=True),
    "b8_h16_s2048_d64": dict(batch=8, heads_q=16, heads_kv=16, seqlen_q=2048, seqlen_kv=2048, head_dim=64),
    "b8_h16_s2048_d64_causal": dict(batch=8, heads_q=16, heads_kv=16, seqlen_q=2048, seqlen_kv=2048, head_dim=64,
                                    causal=True),
    "b2_h16_s4096_d256": dict(batch=2, heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_kv=4096, head_dim=256),
    "b2_h16_s4096_d256_causal": dict(batch=2, heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_kv=4096, head_dim=256,
                                     causal=True),
    "b4_hq32_hkv8_s4096_d128_causal": dict(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096,
                                           head_dim=128, causal=True, layout="bhsd"),
    "decode_b8_hq32_hkv8_q1_kv8192_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192,
                                               head_dim=128, layout="bhsd"),
    "decode_b8_hq32_hkv8_q16_kv8192_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=16, seqlen_kv=8192,
                                                head_dim=128, layout="bhsd"),
}
# Alternatives beside the search's picks and the example's kernels (measured data for the search to learn
# from), per kernel class (head dim, causal); decode-like shapes take none. The plan stays at 32 kernels:
# two rounds of 16 nvcc jobs on the GPU machine.
ALTERNATIVES = {
    (128, False): [dict(tile_q=128, tile_kv=176, schedule="ws_cooperative", stages_kv=3),
                   dict(tile_q=128, tile_kv=64, schedule="ws_pingpong", persistent=True, loads_q_separately=True)],
    (128, True): [dict(tile_q=128, tile_kv=176, schedule="ws_cooperative", stages_kv=3)],
    (64, False): [dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5),
                  dict(tile_q=64, tile_kv=128, schedule="tma", mma_warpgroups=1, stages_q=1, stages_kv=6, blocks_per_sm=2)],
}
SEARCH_PICKS = 2          # the search's first picks of distinct (tile_q, tile_kv, schedule)
H200_HBM_TBPS = 4.8


def _problem(fields):
    from cutegen.ops.attention.problem import AttentionProblem
    return AttentionProblem(**fields)


# --- plan (CPU) -------------------------------------------------------------------------------------------
def plan(args) -> int:
    from cutegen.core import registry
    from cutegen.core.search import search
    from cutegen.ops.attention.config import EXAMPLE_CONFIGS, AttentionConfig
    from cutegen.ops.attention.render import backend_refusals, render

    op_cost = registry.get("attention").cost          # the operation's cost model (the search's)
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    shapes, kernels = [], {}
    only = set(args.shapes.split(",")) if args.shapes else None
    unknown = sorted(only - set(SHAPES)) if only else []
    if unknown:
        raise SystemExit(f"--shapes: unknown shape {unknown[0]!r} (known: {', '.join(SHAPES)})")
    for name, fields in SHAPES.items():
        if only is not None and name not in only:
            continue
        problem = _problem(fields)
        t0 = time.perf_counter()
        searched = search(problem, 12)
        seconds = time.perf_counter() - t0
        picks, shapes_seen = [], set()
        for r in searched.ranked:
            form = (r.config.tile_q, r.config.tile_kv, r.config.schedule)
            if form not in shapes_seen and len(picks) < SEARCH_PICKS:
                shapes_seen.add(form)
                picks.append(r)
        entries = [(f"cutegen{'' if i == 0 else f'-{i + 1}'}", r.config, r.cost) for i, r in enumerate(picks)]
        for i, c in enumerate(EXAMPLE_CONFIGS.get(problem.head_dim, ())):
            entries.append((f"example{'' if i == 0 else f'-{i + 1}'}", c, None))
        decode = problem.seqlen_q < 64
        for i, fields_c in enumerate(() if decode else ALTERNATIVES.get((problem.head_dim, problem.causal), ())):
            entries.append((f"alt-{i + 1}", AttentionConfig(**fields_c), None))
        listed, seen = [], set()
        for role, config, predicted in entries:
            refused = backend_refusals(problem, config)
            if refused:
                listed.append({"role": role, "config": config.to_dict(), "refused": refused})
                continue
            # the operation's legality rules (legality/attention.py): an illegal alternative is listed, not built
            broken_rules = [str(v) for v in registry.check(problem, config) if getattr(v, "enforced", True)]
            if broken_rules:
                listed.append({"role": role, "config": config.to_dict(), "illegal": broken_rules})
                continue
            if config in seen:
                continue
            seen.add(config)
            predicted = op_cost(problem, config) if predicted is None else predicted
            r = render(problem, config, cost={"model": "the attention operation's cost (core search)",
                                              "predicted_us": predicted})
            rel = f"kernels/{problem.kernel_class_name}_{config.short_name()}"
            if rel not in kernels:
                r.write(out / rel)
                kernels[rel] = r.kernel_hash
            listed.append({"role": role, "dir": rel, "hash": r.kernel_hash, "config": config.to_dict(),
                           "predicted_us": predicted})
        shapes.append({"name": name, "problem": problem.to_dict(), "flops": problem.flops,
                       "search": {"seconds": round(seconds, 4), "candidates": searched.candidates_total,
                                  "legal": searched.candidates_legal, "pruned_by_rule": searched.pruned_by_rule},
                       "kernels": listed})
        print(f"{name}: search {seconds * 1e3:.1f} ms, {searched.candidates_legal}/{searched.candidates_total} legal; "
              f"{sum('dir' in k for k in listed)} kernels, {sum('refused' in k for k in listed)} refused, "
              f"{sum('illegal' in k for k in listed)} illegal"
              + "".join(f"\n  {k['role']} illegal: {k['illegal'][0]}" for k in listed if "illegal" in k))
    (out / "plan.json").write_text(json.dumps({"shapes": shapes, "kernels": kernels}, indent=1, sort_keys=True) + "\n")
    (out / "dirs.txt").write_text("".join(f"{out / d}\n" for d in sorted(kernels)))
    print(f"{len(kernels)} kernel directories under {out}/kernels")
    return 0


# Evidence for the rules the temporal checker and the headers gave (legality/attention.py), each on both sides:
# rendered although the rules refuse them (the renderer builds them), run with a short timeout per kernel.
# (rule, problem fields, config fields, what the rule predicts when broken)
PROBES = [
    ("ATTN-WS-STAGES-KV", dict(head_dim=128), dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=2),
     "hang"),
    ("ATTN-WS-STAGES-KV", dict(head_dim=128), dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=3),
     None),
    ("ATTN-TMA-STAGES-KV", dict(head_dim=64), dict(tile_q=64, tile_kv=128, schedule="tma", mma_warpgroups=1, stages_q=1,
                                                    stages_kv=2, blocks_per_sm=2), "hang"),
    ("ATTN-TMA-STAGES-KV", dict(head_dim=64), dict(tile_q=64, tile_kv=128, schedule="tma", mma_warpgroups=1, stages_q=1,
                                                    stages_kv=3, blocks_per_sm=2), "wrong result"),
    ("ATTN-TMA-STAGES-KV", dict(head_dim=64), dict(tile_q=64, tile_kv=128, schedule="tma", mma_warpgroups=1, stages_q=1,
                                                    stages_kv=5, blocks_per_sm=2), "wrong result"),
    ("ATTN-CLUSTER-CAUSAL", dict(head_dim=64, causal=True), dict(tile_q=64, tile_kv=128, schedule="tma",
                                                                  mma_warpgroups=1, stages_q=1, stages_kv=4,
                                                                  blocks_per_sm=2, cluster_m=2), "wrong result or hang"),
    ("ATTN-CLUSTER-CAUSAL", dict(head_dim=64), dict(tile_q=64, tile_kv=128, schedule="tma", mma_warpgroups=1, stages_q=1,
                                                     stages_kv=4, blocks_per_sm=2, cluster_m=2), None),
]


def plan_probes(args) -> int:
    from cutegen.core import registry
    from cutegen.ops.attention.config import AttentionConfig
    from cutegen.ops.attention.render import backend_refusals, render
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    probes, kernels = [], {}
    for rule, pfields, cfields, predicted in PROBES:
        problem = _problem(dict(batch=2, heads_q=4, heads_kv=4, seqlen_q=1024, seqlen_kv=1024, **pfields))
        config = AttentionConfig(**cfields)
        assert not backend_refusals(problem, config), backend_refusals(problem, config)
        broken = [str(v) for v in registry.check(problem, config) if v.rule_id == rule]
        assert bool(broken) == (predicted is not None), (rule, config, broken)
        r = render(problem, config)
        rel = f"kernels/{problem.kernel_class_name}_{config.short_name()}"
        r.write(out / rel)
        kernels[rel] = r.kernel_hash
        probes.append({"rule": rule, "dir": rel, "config": config.to_dict(), "problem": problem.to_dict(),
                       "rule_says": broken[0] if broken else "legal", "predicted": predicted or "pass"})
        print(f"{rel}: {rule} {'broken' if broken else 'kept'}; predicted {predicted or 'pass'}")
    (out / "plan.json").write_text(json.dumps({"shapes": [], "kernels": kernels, "probes": probes}, indent=1,
                                              sort_keys=True) + "\n")
    (out / "dirs.txt").write_text("".join(f"{out / d}\n" for d in sorted(kernels)))
    return 0


# --- the GPU half: moved to the attention operation (cutegen/ops/attention/runner.py), which `cutegen validate
# --op attention` and `cutegen bench --op attention` run too ---------------------------------------------
from cutegen.ops.attention.runner import (  # noqa: E402,F401 - this script's names, kept
    _abi_call, _time_ms, _torch, _unpacked, compare, compile_and_graph, make_tensor, peer_calls, probes, reference,
    validate_kernel, validation_cases)


def op_checks(args) -> int:
    out = {"kernel": args.kernel, **compile_and_graph(args.kernel)}
    print("op-checks " + json.dumps(out, sort_keys=True))
    return 0 if all(v["ok"] for k, v in out.items() if k != "kernel") else 1


def validate_worker(args) -> int:
    """Validate the kernels named on stdin, one JSON line each on stdout (the parent restarts after a crash)."""
    for line in sys.stdin:
        kdir = line.strip()
        if not kdir:
            continue
        print(json.dumps({"start": kdir}), flush=True)
        try:
            rec = validate_kernel(kdir)
        except Exception as e:  # noqa: BLE001 - the kernel's result, not the worker's end
            rec = {"kernel": kdir, "ok": False, "cases": [], "probes": [], "seconds": 0,
                   "error": f"{type(e).__name__}: {e}"[:400]}
        poisoned = False
        try:
            _torch().cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a sticky CUDA error: this process cannot run another kernel
            rec["ok"] = False
            rec["error"] = "; ".join(x for x in (rec.get("error"), f"CUDA context lost: {e}"[:300]) if x)
            poisoned = True
        print(json.dumps({"result": rec}), flush=True)
        if poisoned:
            os._exit(3)
    return 0


def validate(args) -> int:
    plan_dir = Path(args.plan)
    dirs = [str(plan_dir / d) for d in sorted(json.loads((plan_dir / "plan.json").read_text())["kernels"])]
    dirs = [d for d in dirs if (Path(d) / "kernel.so").is_file()]
    index, count = (int(x) for x in args.shard.split("/"))
    dirs = dirs[index::count]
    deadline = time.time() + args.deadline
    results, pending = {}, list(dirs)
    while pending and time.time() < deadline:
        cmd = [sys.executable, __file__, "validate-worker"]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        produced = False
        proc.stdin.write("".join(d + "\n" for d in pending))
        proc.stdin.close()
        current, started = None, time.time()
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if not sel.select(timeout=1.0):
                if current and time.time() - started > args.timeout:
                    proc.kill()
                    results[current] = {"kernel": current, "ok": False, "verdict": "hang",
                                        "error": f"no result after {args.timeout} s"}
                    pending.remove(current)
                    break
                if time.time() > deadline:
                    proc.kill()
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                if not produced:           # the worker cannot start (import error): no point restarting it
                    for d in list(pending):
                        results[d] = {"kernel": d, "ok": False, "verdict": "crash",
                                      "error": f"worker exited with {proc.returncode} before any kernel"}
                    pending.clear()
                if current and current in pending:
                    results[current] = {"kernel": current, "ok": False, "verdict": "crash",
                                        "error": f"worker exited with {proc.returncode} during this kernel"}
                    pending.remove(current)
                break
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue                   # a library's own print, not the worker's record
            produced = True
            if "start" in msg:
                current, started = msg["start"], time.time()
            else:
                rec = msg["result"]
                rec["verdict"] = "pass" if rec["ok"] else "fail"
                results[rec["kernel"]] = rec
                pending.remove(rec["kernel"])
                current = None
                print(f"{rec['verdict']}: {rec['kernel']} ({rec['seconds']} s)" +
                      "".join(f"\n  case {c}" for c in rec["cases"] if not c["ok"]) +
                      "".join(f"\n  probe {p}" for p in rec["probes"] if not p["ok"]), flush=True)
        sel.close()
    for d in pending:
        results[d] = {"kernel": d, "ok": False, "verdict": "not run", "error": "deadline"}
    summary = {v: sorted(k for k, r in results.items() if r["verdict"] == v) for v in ("pass", "fail", "hang", "crash", "not run")}
    doc = {"summary": {"kernels": len(dirs), **{v: len(ks) for v, ks in summary.items()}, "failing": summary["fail"]
                       + summary["hang"] + summary["crash"]}, "results": [results[k] for k in sorted(results)]}
    probes = json.loads((plan_dir / "plan.json").read_text()).get("probes", [])
    for probe in probes:
        rec = results.get(str(plan_dir / probe["dir"]))
        if rec is None:
            continue
        probe["verdict"] = rec["verdict"]
        # confirmed: the rule's side (broken: the kernel does not pass; kept: it passes); as_predicted: and the way
        # it fails is the one the rule names (a deadlock times out: "hang"; a wrong result: "fail")
        probe["confirmed"] = (rec["verdict"] == "pass") == (probe["predicted"] == "pass")
        kinds = {"pass": {"pass"}, "hang": {"hang"}, "wrong result": {"fail"}, "wrong result or hang": {"fail", "hang"}}
        probe["as_predicted"] = rec["verdict"] in kinds.get(probe["predicted"], set())
        print(f"probe {probe['rule']} {Path(probe['dir']).name}: predicted {probe['predicted']}, got {rec['verdict']}"
              f" -> {'confirmed' if probe['confirmed'] else 'NOT confirmed'}"
              f"{'' if probe['as_predicted'] else ' (not the predicted way)'}", flush=True)
    if probes:
        doc["probes"] = [p for p in probes if "verdict" in p]
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps(doc["summary"]))
    return 0 if summary["pass"] and not doc["summary"]["failing"] else 1


def time_plan(args) -> int:
    torch = _torch()
    from cutegen.ops.attention.problem import AttentionProblem
    from cutegen.ops.attention.torch_op import AttentionKernels
    plan_dir = Path(args.plan)
    plan_doc = json.loads((plan_dir / "plan.json").read_text())
    valid = None
    if args.validated is not None:
        valid = set()
        for path in args.validated:
            if Path(path).is_file():
                vdoc = json.loads(Path(path).read_text())
                valid |= {Path(r["kernel"]).name for r in vdoc["results"] if r.get("verdict") == "pass"}
    deadline = time.time() + args.deadline
    dev = torch.cuda.get_device_properties(0)
    doc = {"device": dev.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "flops": "AttentionProblem.flops: 2 * B * Hq * pairs * (D + Dv); causal counts the kept (top-left) pairs",
           "shapes": []}
    for shape in plan_doc["shapes"]:
        if time.time() > deadline:
            doc["shapes"].append({"name": shape["name"], "skipped": "deadline"})
            continue
        p = AttentionProblem.from_dict(shape["problem"])
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[p.dtype]
        q = make_tensor(p.batch, p.heads_q, p.seqlen_q, p.head_dim, p.layout, dtype, 1)
        k = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 2)
        v = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 3)
        gqa = p.heads_q != p.heads_kv
        scale = p.softmax_scale
        ref_o, ref_l = reference(q, k, v, p.causal, scale, batches=[p.batch - 1], heads=[0, p.heads_q - 1])
        rows = {"name": shape["name"], "problem": shape["problem"], "flops": p.flops, "contenders": {}}
        hbm_floor_us = p.bytes_min / (H200_HBM_TBPS * 1e6)
        rows["hbm_floor_us"] = hbm_floor_us
        contenders = {}
        for entry in shape["kernels"]:
            if "dir" not in entry or not (plan_dir / entry["dir"] / "kernel.so").is_file():
                continue
            if valid is not None and Path(entry["dir"]).name not in valid:
                rows["contenders"][entry["role"]] = {"dir": entry["dir"], "skipped": "not validated"}
                continue
            op = AttentionKernels([plan_dir / entry["dir"]])
            contenders[entry["role"]] = (entry["dir"], lambda op=op: op(q, k, v, is_causal=p.causal, scale=scale,
                                                                       enable_gqa=gqa))
            if gqa and not p.causal and p.seqlen_q < entry["config"]["tile_q"]:
                # decode-like: the same kernel without folding the group's query heads into rows (the ABI's
                # CUTEGEN_ATTENTION_PACK_GQA switch, read on every call)
                contenders[entry["role"] + "-nopack"] = (entry["dir"], lambda op=op: _unpacked(
                    lambda: op(q, k, v, is_causal=p.causal, scale=scale, enable_gqa=gqa)))
        for name, run in peer_calls(p, q, k, v).items():       # SDPA cuDNN and flash (the operation's runner)
            contenders[name] = (None, run)
        for name, (kdir, fn) in contenders.items():
            rec = {"dir": kdir} if kdir else {}
            try:
                o = fn()
                torch.cuda.synchronize()
                sub = o[p.batch - 1:p.batch, [0, p.heads_q - 1]]
                err = float((sub.float() - ref_o).abs().max()) / max(1.0, float(ref_o.abs().max()))
                rec["err_o"] = err
                rec["ok"] = bool(torch.isfinite(sub).all()) and err <= 0.02
                ms = _time_ms(fn)
                rec.update({"ms": ms, "tflops": p.flops / (ms * 1e-3) / 1e12,
                            "hbm_fraction": hbm_floor_us / (ms * 1e3)})
            except Exception as e:  # noqa: BLE001 - a peer that cannot run this shape says so
                rec.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
            rows["contenders"][name] = rec
        base = rows["contenders"].get("sdpa_cudnn", {}).get("ms")
        ours = {n: r for n, r in rows["contenders"].items() if n.startswith(("cutegen", "example", "alt")) and r.get("ms")}
        rows["hbm_note"] = "hbm_fraction: bytes_min (Q, K, V read once, O written once) at 4.8 TB/s over the time"
        if ours:
            best = min(ours, key=lambda n: ours[n]["ms"])
            rows["best_cutegen_kernel"] = best
        for n, r in rows["contenders"].items():
            if base and r.get("ms"):
                r["vs_cudnn"] = base / r["ms"]
        ex = rows["contenders"].get("example", {}).get("ms")
        if ex and rows["contenders"].get("cutegen", {}).get("ms"):
            rows["cutegen_vs_example"] = ex / rows["contenders"]["cutegen"]["ms"]
        doc["shapes"].append(rows)
        line = "  ".join(f"{n} {r['tflops']:.0f}" for n, r in rows["contenders"].items() if r.get("tflops"))
        print(f"{shape['name']}: TFLOP/s {line}", flush=True)
        q = k = v = o = contenders = None       # free this shape's tensors before the next one's
        torch.cuda.empty_cache()
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


def sanitize_case(args) -> int:
    """One small call per layout (ragged, causal as the kernel is, GQA if grouped) for compute-sanitizer."""
    from cutegen.ops.attention.runner import sanitize_case as case
    res = case(None, args.kernel)
    print(json.dumps(res))
    return 0 if res["ok"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--out", default="out/attention-plan")
    p.add_argument("--shapes", help="comma-separated names of SHAPES to plan (default: all)")
    p = sub.add_parser("plan-probes")
    p.add_argument("--out", default="out/attention-probes")
    p = sub.add_parser("validate")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--timeout", type=float, default=90.0, help="seconds one kernel may take")
    p.add_argument("--deadline", type=float, default=150.0, help="seconds for all of them")
    p.add_argument("--shard", default="0/1", metavar="I/N", help="validate every N-th built kernel from the I-th")
    p = sub.add_parser("validate-worker")
    p = sub.add_parser("op-checks", help="the op under torch.compile and in a CUDA graph, one kernel; JSON on stdout")
    p.add_argument("kernel")
    p = sub.add_parser("time")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--validated", nargs="*", default=None,
                   help="validate's JSON files: time only the kernels that passed in one of them")
    p.add_argument("--deadline", type=float, default=150.0)
    p = sub.add_parser("sanitize-case")
    p.add_argument("kernel")
    args = ap.parse_args(argv)
    return {"plan": plan, "plan-probes": plan_probes, "validate": validate, "validate-worker": validate_worker, "time": time_plan,
            "sanitize-case": sanitize_case, "op-checks": op_checks}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
