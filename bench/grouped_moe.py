#!/usr/bin/env python3
"""The MoE suite of grouped GEMM (issue 26; cutegen/ops/grouped_gemm): plan here, validate and time on the GPU.

    python bench/grouped_moe.py plan --out out/grouped-plan          # here: search + render (bench/moe.toml)
    python bench/grouped_moe.py run out/grouped-plan --json R.json   # GPU: validate, probe, graph, time
    python bench/grouped_moe.py sanitize out/grouped-plan --kernel H # GPU, under compute-sanitizer

``plan`` searches every case of bench/moe.toml (``cutegen.core.search``: the grouped operation's space,
rules and cost), and renders the pick and the runners-up of each case, plus a few fixed alternatives
(``torch._grouped_mm``'s own two sm90 tiles), one kernel directory per distinct
kernel under ``<out>/kernels/<hash>`` (a kernel serves every problem of its class: dtype, scale, layout),
and writes ``<out>/plan.json``. The GPU side needs only torch and the built libraries (no egglog).

``run`` (GPU, one process):
  1. validate: every built kernel against a float32 per-group reference on ragged group sizes (empty
     groups, 1-token groups, sizes not a multiple of the tile, every token in one group, very uneven
     routing) with N and K not multiples of the tile, through the C ABI into an output filled with a
     sentinel, so that a write outside the groups' rows is caught; then refusal probes (K not 16-byte
     rows, a misaligned base, a workspace one byte short, too many groups);
  2. the op: ``torch.ops.cutegen_grouped.grouped_mm`` under ``torch.compile`` (aot_eager) and captured in
     a CUDA graph, replayed with new group sizes, against eager;
  3. time: each case at its size, every kernel of its class (the plan's pick marked) through the op,
     checked against a float32 reference once, beside ``torch._grouped_mm``, a loop of ``torch.matmul``
     over the groups and ``torch.bmm`` on the groups padded to the largest, in the same process; ms,
     TFLOP/s (useful FLOPs) and the fraction of the floor max(bytes / 4.8e12, flops / peak), bytes being
     every used expert's weights, the tokens and the output.
``results.json`` is rewritten after every step, so a run stopped at its deadline keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = Path(__file__).with_name("moe.toml")
CASE_KEYS = {"name", "groups", "tokens", "n", "k", "layout", "dtype", "scale", "distribution", "fill", "fp8_fast_accum"}
TOP_K = 3                             # the pick and two runners-up per case (the grouped search ranks more
                                      # distinct kernels than the trivial list did: 4 per case made 43 > MAX_KERNELS)
# Fixed alternatives rendered beside the search's, for the offs layout: torch._grouped_mm's two sm90
# configurations (aten/src/ATen/native/cuda/GroupMM.cu: 128x256x64 cooperative and 64x128x128 ping-pong,
# cluster 2x1).
EXTRA_CONFIGS = {
    "bf16": [dict(tile_m=128, tile_n=256, tile_k=64, cluster_m=2, schedule="ptr_cooperative"),
             dict(tile_m=64, tile_n=128, tile_k=128, cluster_m=2, schedule="ptr_pingpong")],
}
MAX_KERNELS = 48            # three rounds of 16 nvcc jobs on the GPU machine (40 was two and a half)


def fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"grouped_moe: {message}", file=sys.stderr)
    sys.exit(2)


# --- the suite -------------------------------------------------------------------------------------------
def load_suite(path: Path = SUITE) -> list[dict]:
    import tomllib          # here only: the GPU side never reads the suite
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{path}: {e}")
    cases = data.get("case")
    if not isinstance(cases, list) or not cases:
        fail(f"{path}: no [[case]] tables")
    seen = set()
    out = []
    for i, c in enumerate(cases):
        where = f"{path.name}: case[{i}]"
        unknown = sorted(set(c) - CASE_KEYS)
        if unknown:
            fail(f"{where}.{unknown[0]}: unknown field")
        name = c.get("name")
        if not isinstance(name, str) or not name.replace("_", "").isalnum() or name in seen:
            fail(f"{where}.name: {name!r} is missing, not [A-Za-z0-9_] or repeated")
        seen.add(name)
        fill = c.get("fill")
        if fill is not None and (c.get("layout") != "masked" or not isinstance(fill, int) or not 0 <= fill <= c["tokens"]):
            fail(f"{where}.fill: only a masked case takes fill, 0 <= fill <= tokens (max_m); got {fill!r}")
        out.append(dict(c))
    return out


def problem_of(case: dict):
    from cutegen.core import registry
    body = {k: v for k, v in case.items() if k not in ("name", "fill")}
    return registry.problem_from_dict({**body, "op": "grouped_gemm"}, f"{SUITE.name}: {case['name']}")


# --- plan (here) -----------------------------------------------------------------------------------------
def cmd_plan(args) -> int:
    from cutegen.core import registry
    from cutegen.core.search import search
    from cutegen.errors import CutegenError
    from cutegen.ops.grouped_gemm.config import GroupedGemmConfig

    out = Path(args.out)
    cases = load_suite(Path(args.suite))
    kernels: dict[str, dict] = {}
    rendered: dict[str, object] = {}
    plan_cases = []

    def add(problem, config, why: str) -> str | None:
        try:
            kernel = registry.render(problem, config)
        except CutegenError as e:
            print(f"  not rendered ({why}): {config.short_name()}: {e}")
            return None
        h = kernel.kernel_hash
        if h not in kernels:
            kernels[h] = {"dir": f"kernels/{h}", "config": config.to_dict(), "config_name": config.short_name(),
                          "class": problem.kernel_class_name, "order": len(kernels), "why": why}
            rendered[h] = kernel
        return h

    for case in cases:
        p = problem_of(case)
        res = search(p, top_k=args.top_k)
        if not res.ranked:
            fail(f"{case['name']}: no legal configuration ({dict(getattr(res, 'pruned_by_rule', {}))})")
        ranked = []
        for i, r in enumerate(res.ranked):
            h = add(p, r.config, "pick" if i == 0 else f"rank {i + 1}")
            if h:
                ranked.append({"kernel": h, "cost_us": round(r.cost, 3), "config_name": r.config.short_name()})
        if not ranked:
            fail(f"{case['name']}: the search's configurations do not render")
        plan_cases.append({"name": case["name"], "problem": p.to_dict(), "problem_name": p.name,
                           "class": p.kernel_class_name, "fill": case.get("fill"), "pick": ranked[0]["kernel"],
                           "ranked": ranked, "candidates": getattr(res, "candidates_total", None),
                           "legal": getattr(res, "candidates_legal", None)})
    # the fixed alternatives, once per class
    for cls_problem in {pc["class"]: pc for pc in plan_cases}.values():
        p = registry.problem_from_dict(cls_problem["problem"])
        for extra in EXTRA_CONFIGS.get(p.dtype, ()):
            c = GroupedGemmConfig(**extra)
            if p.layout != "offs" or p.scale == "block128" or registry.check(p, c):
                continue
            add(p, c, "fixed alternative")
    if len(kernels) > MAX_KERNELS:
        fail(f"{len(kernels)} kernels is more than the GPU run builds ({MAX_KERNELS}); lower --top-k")
    # compute-sanitizer's kernel: the pick of the first decode case that swaps (narrow token tiles, the
    # most partial tiles), else the first pick; built first on the GPU
    swapped = [pc["pick"] for pc in plan_cases if "decode" in pc["name"] and kernels[pc["pick"]]["config"]["swap_ab"]]
    sanitize_kernel = (swapped or [plan_cases[0]["pick"]])[0]
    picks = list(dict.fromkeys([sanitize_kernel] + [pc["pick"] for pc in plan_cases]))
    build_order = picks + [h for h in sorted(kernels, key=lambda h: kernels[h]["order"]) if h not in picks]
    # what each case times: its own ranked kernels, the picks of the other cases of its class and the fixed
    # alternatives (a dozen at most, so the timing fits the GPU call)
    class_picks: dict[str, list[str]] = {}
    for pc in plan_cases:
        class_picks.setdefault(pc["class"], []).append(pc["pick"])
    fixed = [h for h, k in kernels.items() if k["why"] == "fixed alternative"]
    for pc in plan_cases:
        own = [r["kernel"] for r in pc["ranked"]]
        others = class_picks[pc["class"]] + [h for h in fixed if kernels[h]["class"] == pc["class"]]
        pc["kernels"] = list(dict.fromkeys(own + others))
    # whole or not at all: the plan is written into a fresh folder that replaces the old one
    import shutil
    import tempfile
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    for h, kernel in rendered.items():
        kernel.write(tmp / kernels[h]["dir"])
    (tmp / "plan.json").write_text(json.dumps({"suite": str(Path(args.suite).name), "cases": plan_cases,
                                               "kernels": kernels, "sanitize_kernel": sanitize_kernel,
                                               "build_order": build_order}, indent=1, sort_keys=True) + "\n")
    (tmp / "build_order.txt").write_text("".join(f"{kernels[h]['dir']}\n" for h in build_order))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"plan: {len(plan_cases)} cases, {len(kernels)} kernels -> {out}; sanitize "
          f"{kernels[sanitize_kernel]['config_name']} ({sanitize_kernel})")
    for pc in plan_cases:
        print(f"  {pc['name']:36s} pick {kernels[pc['pick']]['config_name']:32s} "
              f"({pc['ranked'][0]['cost_us']:.1f} us predicted), {len(pc['kernels'])} kernels of {pc['class']}")
    return 0


# --- GPU helpers -------------------------------------------------------------------------------------------
# --- the GPU half: moved to the grouped operation (cutegen/ops/grouped_gemm/runner.py), which `cutegen validate
# --op grouped_gemm` and `cutegen bench --op grouped_gemm` run too ----------------------------------------
from cutegen.ops.grouped_gemm.runner import (  # noqa: E402,F401 - this script's names, kept
    HBM_BYTES_PER_S, PEAK_FLOPS, DEVICE, _cumsum, _torch, dequantized, floor_seconds, graph_time, make_operands,
    peer_calls, probes, reference, rel_error, sizes_for, time_fn, valid_rows_mask, validate_kernel, validation_problem)


class Results:
    def __init__(self, path: Path, plan: dict):
        self.path = path
        self.data = {"device": None, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "kernels": {}, "probes": {}, "op": {}, "cases": [], "notes": []}
        self.plan = plan

    def save(self):
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.path)


def load_kernels(plan_dir: Path, plan: dict, results: Results) -> dict:
    from cutegen.ops.grouped_gemm import torch_op
    handles = {}
    for h, k in sorted(plan["kernels"].items(), key=lambda kv: kv[1]["order"]):
        so = plan_dir / k["dir"] / "kernel.so"
        if not so.is_file():
            results.data["kernels"][h] = {"config_name": k["config_name"], "class": k["class"], "built": False}
            continue
        try:
            handles[h] = torch_op.load(so)
            results.data["kernels"][h] = {"config_name": k["config_name"], "class": k["class"], "built": True}
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            results.data["kernels"][h] = {"config_name": k["config_name"], "class": k["class"], "built": True,
                                          "load_error": str(e)}
    return handles


def op_checks(torch_op, handles: dict, plan: dict, results: Results) -> None:
    """The op under torch.compile and inside a CUDA graph (replayed with new group sizes)."""
    torch = _torch()
    from cutegen.core import registry
    for pc in plan["cases"]:
        if pc["class"] not in ("grouped_bf16_offs", "grouped_bf16_masked") or pc["pick"] not in handles:
            continue
        key = pc["class"]
        if key in results.data["op"]:
            continue
        p0 = registry.problem_from_dict(pc["problem"])
        p = validation_problem(p0, {})
        h = handles[pc["pick"]]
        rec = {"kernel": pc["pick"]}
        try:
            sizes1 = [0, 1, 130, 3, 200, 0, 150, 116] if p.layout == "offs" else [0, 1, 130, 3, 160, 0, 150, 116]
            sizes2 = [300, 0, 0, 17, 1, 0, 200, 82] if p.layout == "offs" else [160, 0, 0, 17, 1, 0, 160, 82]
            x, w, sz, _, _ = make_operands(p, sizes1, 11)
            b = w.transpose(-2, -1)
            fn = (lambda: torch_op.grouped_mm(x, b, sz, h)) if p.layout == "offs" else \
                (lambda: torch_op.grouped_mm_masked(x, b, sz, h))
            eager = fn()
            ref = reference(p, x, w, sizes1, None, None)
            mask = valid_rows_mask(p, sizes1, eager.shape, eager.device)
            rec["eager_rel_error"] = rel_error(eager[mask], ref[mask])
            compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
            got = compiled()
            rec["compile_rel_error"] = rel_error(got[mask], ref[mask])
            # CUDA graph: capture once, then change the sizes on the device and replay
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_out = fn()
            g.replay()
            torch.cuda.synchronize()
            rec["graph_rel_error"] = rel_error(static_out[mask], ref[mask])
            # new sizes in place (same total rows for offs), new data in place
            x2, _, sz2, _, _ = make_operands(p, sizes2, 12)
            if p.layout == "offs" and x2.shape != x.shape:
                raise RuntimeError("the replay's sizes must keep T")
            x.copy_(x2)
            sz.copy_(sz2)
            g.replay()
            torch.cuda.synchronize()
            ref2 = reference(p, x, w, sizes2, None, None)
            mask2 = valid_rows_mask(p, sizes2, static_out.shape, static_out.device)
            rec["graph_replay_new_sizes_rel_error"] = rel_error(static_out[mask2], ref2[mask2])
            tol = registry.tolerance(p)
            rec["ok"] = all(rec[k] <= tol for k in ("eager_rel_error", "compile_rel_error", "graph_rel_error",
                                                    "graph_replay_new_sizes_rel_error"))
        except Exception as e:  # noqa: BLE001
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {e}"
        results.data["op"][key] = rec
        print(f"op {key}: {'ok' if rec.get('ok') else 'FAILED'} {json.dumps({k: v for k, v in rec.items() if k != 'kernel'})}",
              flush=True)
        results.save()


def time_case(torch_op, handles: dict, pc: dict, plan: dict, deadline: float) -> dict:
    torch = _torch()
    from cutegen.core import registry
    p = registry.problem_from_dict(pc["problem"])
    sizes = sizes_for(p, pc.get("fill"))
    rows = sum(sizes)
    flops = 2 * rows * p.n * p.k
    floor_s = floor_seconds(p, sizes)
    x, w, sz, sx, sw = make_operands(p, sizes, 1)
    b = w.transpose(-2, -1)
    ref = reference(p, x, w, sizes, sx, sw)
    tol = registry.tolerance(p)
    rec = {"name": pc["name"], "problem": pc["problem"], "sizes_max": max(sizes), "sizes_min": min(sizes),
           "empty_groups": sum(1 for m in sizes if m == 0), "rows": rows, "flops": flops,
           "floor_ms": floor_s * 1e3, "pick": pc["pick"], "kernels": {}, "peers": {},
           "predicted_us": {r["kernel"]: r["cost_us"] for r in pc["ranked"]}}

    def entry(ms: float) -> dict:
        return {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12, "of_floor": floor_s * 1e3 / ms}

    mask = valid_rows_mask(p, sizes, (x.shape[0], p.n), x.device)
    own = {r["kernel"] for r in pc["ranked"]}
    for h in pc["kernels"]:
        if h not in handles:
            continue
        if time.time() > deadline:
            rec["kernels"][h] = {"skipped": "deadline"}
            continue
        handle = handles[h]
        if p.layout == "offs":
            fn = lambda: torch_op.grouped_mm(x, b, sz, handle, sx, sw)  # noqa: E731
        else:
            fn = lambda: torch_op.grouped_mm_masked(x, b, sz, handle, sx, sw)  # noqa: E731
        try:
            got = fn()
            torch.cuda.synchronize()
            err = rel_error(got[mask], ref[mask])
            r = entry(time_fn(fn))
            if h in own:        # graph replay (no host overhead) for the case's own ranked kernels
                r["ms_graph"] = graph_time(fn, got.numel() * 2)
            r["rel_error"] = err
            r["ok"] = err <= tol
            r["config_name"] = plan["kernels"][h]["config_name"]
        except Exception as e:  # noqa: BLE001
            r = {"error": f"{type(e).__name__}: {e}", "ok": False}
        rec["kernels"][h] = r
    # peers, in the same process (the operation's runner: the same calls `cutegen bench --op grouped_gemm` times)
    peers = peer_calls(p, x, w, sz, sw, sizes)
    for name, fn in peers.items():
        try:
            r = entry(time_fn(fn))
            if name in ("torch_grouped_mm", "torch_scaled_grouped_mm"):
                r["ms_graph"] = graph_time(fn, rows * p.n * 2)
        except Exception as e:  # noqa: BLE001
            r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        rec["peers"][name] = r
    ok = {h: r for h, r in rec["kernels"].items() if r.get("ok")}
    if ok:
        best = min(ok, key=lambda h: ok[h]["ms"])
        rec["best"] = best
    return rec


def print_case(rec: dict, plan: dict) -> None:
    def fmt(r):
        return f"{r['ms']:.4f} ms {r['tflops']:6.1f} TF/s {r['of_floor']:.2f} floor" if "ms" in r else r.get("error", r.get("skipped", "?"))
    pick = rec["kernels"].get(rec["pick"], {})
    best = rec["kernels"].get(rec.get("best"), {})
    print(f"{rec['name']}: rows {rec['rows']} (groups {rec['sizes_min']}..{rec['sizes_max']}, "
          f"{rec['empty_groups']} empty), floor {rec['floor_ms']:.4f} ms", flush=True)
    print(f"  pick  {plan['kernels'].get(rec['pick'], {}).get('config_name', '?'):32s} {fmt(pick)}"
          f"{'  graph ' + format(pick['ms_graph'], '.4f') if 'ms_graph' in pick else ''}", flush=True)
    if rec.get("best"):
        print(f"  best  {plan['kernels'][rec['best']]['config_name']:32s} {fmt(best)}", flush=True)
    for name, r in rec["peers"].items():
        print(f"  {name:38s} {fmt(r)}", flush=True)
    bad = [h for h, r in rec["kernels"].items() if "ok" in r and not r["ok"]]
    if bad:
        print(f"  WRONG OR FAILED: {', '.join(plan['kernels'][h]['config_name'] for h in bad)}", flush=True)


def cmd_run(args) -> int:
    torch = _torch()
    from cutegen.core import registry
    from cutegen.ops.grouped_gemm import torch_op

    plan_dir = Path(args.plan)
    plan = json.loads((plan_dir / "plan.json").read_text())
    results = Results(Path(args.json), plan)
    results.data["device"] = torch.cuda.get_device_name(0)
    results.data["torch"] = torch.__version__
    deadline = time.time() + args.deadline
    handles = load_kernels(plan_dir, plan, results)
    print(f"{len(handles)} of {len(plan['kernels'])} kernels loaded", flush=True)
    results.save()

    # 1. validate every kernel, then the probes on one kernel per class
    class_problem = {pc["class"]: registry.problem_from_dict(pc["problem"]) for pc in plan["cases"]}
    for h, handle in handles.items():
        k = plan["kernels"][h]
        p = validation_problem(class_problem[k["class"]], k["config"])
        try:
            cases = validate_kernel(torch_op, handle, p, k["config"], registry.tolerance(p), seed=3)
            ok = all(c["ok"] for c in cases.values())
        except Exception as e:  # noqa: BLE001
            cases, ok = {"error": f"{type(e).__name__}: {e}"}, False
        results.data["kernels"][h].update({"validated": ok, "cases": cases})
        worst = max((c.get("rel_error", 0.0) for c in cases.values() if isinstance(c, dict)), default=0.0)
        print(f"validate {k['config_name']:32s} {k['class']:24s} {'PASS' if ok else 'FAIL'} (worst rel error {worst:.2e})",
              flush=True)
        if not ok:
            print(f"  {json.dumps(cases)[:600]}", flush=True)
    done = set()
    for h, handle in handles.items():
        cls = plan["kernels"][h]["class"]
        if cls in done:
            continue
        done.add(cls)
        p = validation_problem(class_problem[cls], {})
        try:
            results.data["probes"][cls] = probes(torch_op, handle, p)
        except Exception as e:  # noqa: BLE001
            results.data["probes"][cls] = {"error": f"{type(e).__name__}: {e}"}
        print(f"probes {cls}: {json.dumps(results.data['probes'][cls])[:400]}", flush=True)
    results.save()

    # 2. the op under torch.compile and in a CUDA graph
    op_checks(torch_op, handles, plan, results)

    # 3. time
    for pc in plan["cases"]:
        if time.time() > deadline:
            results.data["notes"].append(f"deadline: {pc['name']} and later cases not timed")
            print(f"deadline reached before {pc['name']}", flush=True)
            break
        try:
            rec = time_case(torch_op, handles, pc, plan, deadline)
        except Exception as e:  # noqa: BLE001
            rec = {"name": pc["name"], "error": f"{type(e).__name__}: {e}"}
            print(f"{pc['name']}: {rec['error']}", flush=True)
        else:
            print_case(rec, plan)
        results.data["cases"].append(rec)
        results.save()
        torch.cuda.empty_cache()
    results.data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results.save()
    return 0


def cmd_sanitize(args) -> int:
    """Every ragged case of one kernel (run under compute-sanitizer; PYTORCH_NO_CUDA_MEMORY_CACHING=1 so each
    tensor is its own allocation and an access past it is caught): the operation runner's ``sanitize_case``."""
    from cutegen.core import registry
    from cutegen.ops.grouped_gemm.runner import sanitize_case
    plan_dir = Path(args.plan)
    plan = json.loads((plan_dir / "plan.json").read_text())
    k = plan["kernels"][args.kernel]
    pc = next(pc for pc in plan["cases"] if pc["class"] == k["class"])
    res = sanitize_case(registry.problem_from_dict(pc["problem"]), plan_dir / k["dir"])
    print(json.dumps({"kernel": args.kernel, "config_name": k["config_name"], **res}))
    return 0 if res["ok"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="search and render the suite's kernels (here)")
    p.add_argument("--out", default="out/grouped-plan")
    p.add_argument("--suite", default=str(SUITE))
    p.add_argument("--top-k", type=int, default=TOP_K)
    p.set_defaults(fn=cmd_plan)
    r = sub.add_parser("run", help="validate, probe, check the op and time (GPU)")
    r.add_argument("plan")
    r.add_argument("--json", required=True)
    r.add_argument("--deadline", type=float, default=240.0, help="seconds after which no case starts timing")
    r.set_defaults(fn=cmd_run)
    s = sub.add_parser("sanitize", help="one kernel's ragged cases (run under compute-sanitizer)")
    s.add_argument("plan")
    s.add_argument("--kernel", required=True)
    s.set_defaults(fn=cmd_sanitize)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
