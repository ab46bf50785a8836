"""FP8 (e4m3) attention kernels (issue 25): plan here, build, validate and time on the H200.

  python bench/fp8_attention_bench.py plan [--out out/fp8attn-plan]       # CPU: search + render every kernel
  python bench/fp8_attention_bench.py validate PLAN --json OUT.json        # GPU: every FP8 kernel vs float32
  python bench/fp8_attention_bench.py time PLAN --json OUT.json            # GPU: FP8 vs bf16 vs SDPA cuDNN, one process

``plan`` searches each shape of SHAPES twice with ``cutegen.core.search``: in e4m3 (f32 accumulation, the default)
and in bf16 (the peer: cutegen's own 16-bit kernel on the same shape), and renders the picks, the CUTLASS 88
example's FP8 kernel for the head dim, the search's pick when the problem allows an f16 Q K^T accumulator
(``allow_f16_qk_acc``: an accuracy trade), and grouped (GQA) FP8 kernels for validation.

``validate`` runs each FP8 kernel in its own process (a crash or hang costs that kernel only): ragged and unequal
sequence lengths, causal as the kernel is, batch, BSHD and BHSD strides, V given transposed (V^T) or in SDPA's
layout (the op transposes), GQA/MQA and decode-like calls (grouped kernels), a custom scale, the log-sum-exp.
Inputs are N(0, 1) x amplitude, quantized per tensor to e4m3 with descale = amax / 448 (the full e4m3 range, as
FlashAttention-3's callers do); the reference is float32 softmax(scale Q K^T) V of the **dequantized** inputs, so
the error is the kernel's own (P rounded to e4m3 for P V, the accumulators), not the inputs' quantization. Both
errors are stated: max |O - ref| / max |ref| and mean |O - ref| / mean |ref|; the LSE's max absolute error.
Then the FP8 ABI's refusals, and the op under torch.compile(fullgraph) with the V transpose inside the graph.

``time`` times, per shape, through the op: the FP8 kernels with V^T given (the kernel alone) and with an
SDPA-layout V (the op's transposed copy counted), the transpose alone, cutegen's bf16 kernel, and SDPA cuDNN bf16,
on the same (bf16-derived) inputs, CUDA events, contenders interleaved over rounds, median; TFLOP/s count useful
FLOPs (``AttentionProblem.flops``: causal counts the kept pairs). The FP8 accuracy at the shape's own size (two
heads of the last batch) is stated beside the times.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

# name -> problem fields (dtype set per kernel); the timed shapes of the FP8 target
SHAPES = {
    "b4_h32_s4096_d128": dict(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128),
    "b4_h32_s4096_d128_causal": dict(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128,
                                     causal=True),
    "b2_h16_s4096_d256": dict(batch=2, heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_kv=4096, head_dim=256),
}
# grouped FP8 kernels, validated (not timed): GQA causal and not (the decode-like packing is the latter's)
GQA_SHAPES = {
    "gqa_b4_hq32_hkv8_s4096_d128_causal": dict(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096,
                                               head_dim=128, causal=True, layout="bhsd"),
    "gqa_b4_hq32_hkv8_s4096_d128": dict(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096,
                                        head_dim=128, layout="bhsd"),
}
E4M3_MAX = 448.0
# FP8 validation: max and mean relative error of O, LSE absolute. P rounded to e4m3 for P V alone gives about 0.02-0.03
# of both on these inputs (a float32 emulation: softmax's P in e4m3, row sums in f32, O in bf16); the bounds leave
# room for the kernel's accumulation order
TOL_MAX, TOL_MEAN, TOL_LSE = 0.10, 0.05, 0.05
DEVICE = "cuda"


def _problem(fields, **extra):
    from cutegen.ops.attention.problem import AttentionProblem
    return AttentionProblem(**{**fields, **extra})


# --- plan (CPU) -------------------------------------------------------------------------------------------
def plan(args) -> int:
    from cutegen.core import registry
    from cutegen.core.search import search
    from cutegen.ops.attention.config import EXAMPLE_CONFIGS_FP8, AttentionConfig
    from cutegen.ops.attention.render import backend_refusals, render

    op_cost = registry.get("attention").cost
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    kernels: dict[str, str] = {}
    shapes = []

    def add(role, problem, config, predicted=None):
        refused = backend_refusals(problem, config)
        broken = [str(v) for v in registry.check(problem, config) if getattr(v, "enforced", True)]
        if refused or broken:
            return {"role": role, "config": config.to_dict(), "refused": refused + broken}
        predicted = op_cost(problem, config) if predicted is None else predicted
        r = render(problem, config, cost={"model": "the attention operation's cost (core search)",
                                          "predicted_us": predicted})
        rel = f"kernels/{problem.kernel_class_name}_{config.short_name()}"
        if rel not in kernels:
            r.write(out / rel)
            kernels[rel] = r.kernel_hash
        return {"role": role, "dir": rel, "hash": r.kernel_hash, "config": config.to_dict(),
                "dtype": problem.dtype, "predicted_us": predicted,
                "predicted_tflops": problem.flops / (predicted * 1e-6) / 1e12}

    def pick(problem):
        t0 = time.perf_counter()
        found = search(problem, 4)
        return found, time.perf_counter() - t0

    for name, fields in {**SHAPES, **GQA_SHAPES}.items():
        timed = name in SHAPES
        entries, searches = [], {}
        fp8 = _problem(fields, dtype="e4m3")
        found, seconds = pick(fp8)
        searches["e4m3"] = {"seconds": round(seconds, 4), "legal": found.candidates_legal,
                            "candidates": found.candidates_total}
        if not found.ranked:
            print(f"{name}: the e4m3 search found nothing legal")
            return 1
        entries.append(add("fp8", fp8, found.ranked[0].config, found.ranked[0].cost))
        if timed:
            # the example's f32 FP8 kernels (head 128: 128x256 cooperative and 128x128 ping-pong; head 256: 128x128
            # cooperative and ping-pong): a 128-row KV tile beside the search's pick in case the 128x256 form
            # serializes its WGMMAs (228 registers by the count, where 16-bit kernels do)
            for i, c in enumerate(c for c in EXAMPLE_CONFIGS_FP8.get(fp8.head_dim, ()) if c.acc_qk == "f32"):
                entries.append(add(f"fp8-example{'' if i == 0 else f'-{i + 1}'}", fp8, c))
            if fp8.head_dim == 128:
                # a 192-key tile: fewer softmax passes per FLOP than 128, under the 228 registers that serialize
                entries.append(add("fp8-192", fp8, AttentionConfig(128, 192, "ws_cooperative", stages_kv=4)))
            if not fp8.causal and fp8.head_dim == 128:
                allowed = _problem(fields, dtype="e4m3", allow_f16_qk_acc=True)
                found16, seconds16 = pick(allowed)
                searches["e4m3_allow_f16_qk_acc"] = {"seconds": round(seconds16, 4), "legal": found16.candidates_legal}
                entries.append(add("fp8-accf16", allowed, found16.ranked[0].config, found16.ranked[0].cost))
            bf16 = _problem(fields, dtype="bf16")
            found_b, seconds_b = pick(bf16)
            searches["bf16"] = {"seconds": round(seconds_b, 4), "legal": found_b.candidates_legal}
            entries.append(add("bf16", bf16, found_b.ranked[0].config, found_b.ranked[0].cost))
        shapes.append({"name": name, "timed": timed, "fields": fields, "flops": fp8.flops, "search": searches,
                       "kernels": entries})
        print(f"{name}: " + "; ".join(f"{e['role']} {e.get('dir', 'REFUSED ' + str(e.get('refused')))}"
                                       for e in entries))
    (out / "plan.json").write_text(json.dumps({"shapes": shapes, "kernels": kernels}, indent=1, sort_keys=True) + "\n")
    (out / "dirs.txt").write_text("".join(f"{out / d}\n" for d in sorted(kernels)))
    print(f"{len(kernels)} kernel directories under {out}/kernels")
    return 0


# --- the GPU half -------------------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def quantize(x, amax_target=E4M3_MAX):
    """Per-tensor e4m3 quantization: (x8, descale) with x ~= x8.float() * descale (descale = amax / 448)."""
    torch = _torch()
    descale = max(float(x.abs().max()) / amax_target, 1e-12)
    x8 = (x.float() / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, descale


def dequantize(x8, descale):
    return x8.float() * descale


def make_logical(B, H, S, D, layout, seed, amplitude=1.0, dtype=None):
    """(B, H, S, D) logical float32 (or ``dtype``) N(0, amplitude^2), stored in ``layout`` order (never zeros)."""
    torch = _torch()
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    if layout == "bshd":
        t = torch.randn(B, S, H, D, generator=g, device=DEVICE, dtype=torch.float32).transpose(1, 2)
    else:
        t = torch.randn(B, H, S, D, generator=g, device=DEVICE, dtype=torch.float32)
    t = t * amplitude
    return t if dtype is None else t.to(dtype)


def quantize_like(x, full_range=True):
    """Quantize keeping x's memory order (a BSHD view stays a BSHD view). ``full_range`` False: descale 1 (the
    values as they are, |x| well inside e4m3's range), as the example's FP8 runs feed an f16 accumulator."""
    x8, d = quantize(x, E4M3_MAX if full_range else max(float(x.abs().max()), 1e-12))
    if x.stride(1) == x.shape[3] and x.dim() == 4 and x.shape[1] > 1:      # BSHD view
        x8 = x8.transpose(1, 2).contiguous().transpose(1, 2)
    return x8, d


def errors(o, ref_o, lse=None, ref_lse=None):
    torch = _torch()
    o = o.float()
    diff = (o - ref_o).abs()
    out = {"finite": bool(torch.isfinite(o).all()),
           "err_max_rel": float(diff.max()) / max(float(ref_o.abs().max()), 1e-30),
           "err_mean_rel": float(diff.mean()) / max(float(ref_o.abs().mean()), 1e-30)}
    if lse is not None:
        out["err_lse"] = float((lse - ref_lse).abs().max())
        out["finite"] = out["finite"] and bool(torch.isfinite(lse).all())
    return out


def validation_cases(key):
    """(B, Hq, Hkv, Sq, Skv, layout, scale, amplitude, v_transposed) per kernel key."""
    cases = [(1, 1, 1, 1, 1, "bhsd", None, 1.0, True), (2, 3, 3, 13, 13, "bshd", None, 1.0, False),
             (1, 2, 2, 127, 127, "bhsd", None, 3.0, True), (2, 2, 2, 200, 333, "bshd", None, 1.0, False),
             (1, 2, 2, 333, 200, "bhsd", None, 0.5, True), (3, 2, 2, 128, 256, "bhsd", 0.3, 1.0, False),
             (1, 3, 3, 1000, 1000, "bshd", None, 2.0, True), (2, 2, 2, 64, 64, "bhsd", 0.05, 1.0, False),
             (1, 2, 2, 4096, 4096, "bhsd", None, 1.0, True)]
    if key["grouped"]:
        cases += [(2, 8, 2, 200, 333, "bhsd", None, 1.0, True), (2, 8, 1, 129, 257, "bhsd", None, 1.0, False),
                  (1, 8, 2, 300, 300, "bshd", None, 1.0, True), (3, 32, 8, 1, 1000, "bhsd", None, 1.0, False),
                  (2, 32, 8, 7, 777, "bhsd", None, 1.0, True), (1, 16, 2, 16, 4096, "bshd", None, 1.0, False)]
    return cases


def validate_kernel(kdir: str) -> dict:
    torch = _torch()
    from cutegen.ops.attention.runner import reference
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    lib, desc = load_library(kdir)
    key = desc["problem"]
    D = key["head_dim"]
    f16_acc = desc["config"]["acc_qk"] == "f16"
    op = AttentionKernels([kdir])
    rec = {"kernel": kdir, "hash": desc["hash"], "key": key, "config": desc["config"], "cases": []}
    t0 = time.time()
    cases = [c + (not f16_acc,) for c in validation_cases(key)]
    if f16_acc:   # the trade the consent rule is about, recorded beside (not counted): full-range inputs
        cases += [(1, 2, 2, 1000, 1000, "bhsd", None, 1.0, True, True)]
    for i, (B, Hq, Hkv, Sq, Skv, layout, scale, amp, vt_given, full_range) in enumerate(cases):
        if not key["grouped"] and Hq != Hkv:
            continue
        s = 1 / math.sqrt(D) if scale is None else scale
        case = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Skv": Skv, "layout": layout, "scale": s, "amplitude": amp,
                "v_transposed": vt_given, "full_range": full_range}
        info_only = f16_acc and full_range
        if info_only:
            case["info_only"] = "f16 Q K^T accumulator with full-range (amax/448) inputs: may overflow f16"
        try:
            q8, dq = quantize_like(make_logical(B, Hq, Sq, D, layout, 10 * i + 1, amp), full_range)
            k8, dk = quantize_like(make_logical(B, Hkv, Skv, D, layout, 10 * i + 2, amp), full_range)
            v8, dv = quantize_like(make_logical(B, Hkv, Skv, D, layout, 10 * i + 3, amp), full_range)
            case["descale"] = [dq, dk, dv]
            from cutegen.ops.attention.torch_op import transpose_v
            vin = transpose_v(v8) if vt_given else v8
            lib_path = op.pick("e4m3", D, key["causal"], Hq != Hkv)
            vt = vin if vt_given else transpose_v(v8)
            o, lse = torch.ops.cutegen.attention_fwd_fp8(q8, k8, vt, lib_path, s, dq, dk, dv)
            o_op = op(q8, k8, vin, is_causal=key["causal"], scale=s, enable_gqa=Hq != Hkv, descale_q=dq,
                      descale_k=dk, descale_v=dv, v_transposed=vt_given)
            torch.cuda.synchronize()
            ref_o, ref_l = reference(dequantize(q8, dq), dequantize(k8, dk), dequantize(v8, dv), key["causal"], s)
            case.update(errors(o, ref_o, lse, ref_l))
            case["op_equal"] = bool(torch.equal(o, o_op))
            case["out_dtype"] = str(o.dtype)
            lse_tol = TOL_LSE * (4 if f16_acc else 1)
            case["ok"] = (case["finite"] and case["err_max_rel"] <= TOL_MAX and case["err_mean_rel"] <= TOL_MEAN
                          and case["err_lse"] <= lse_tol and case["op_equal"])
        except Exception as e:  # noqa: BLE001 - a refusal or CUDA error is this case's result
            case.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:400]})
        rec["cases"].append(case)
    rec["probes"] = probes(lib, key)
    counted = [c for c in rec["cases"] if "info_only" not in c]
    rec["ok"] = all(c["ok"] for c in counted) and all(p["ok"] for p in rec["probes"])
    errs = [c for c in counted if "err_max_rel" in c]
    if errs:
        rec["worst_err_max_rel"] = max(c["err_max_rel"] for c in errs)
        rec["worst_err_mean_rel"] = max(c["err_mean_rel"] for c in errs)
        rec["worst_err_lse"] = max(c["err_lse"] for c in errs)
    rec["seconds"] = round(time.time() - t0, 2)
    return rec


def probes(lib, key):
    """The FP8 ABI's refusals: each names its rule."""
    torch = _torch()
    D = key["head_dim"]
    out = []
    q = torch.zeros(1, 2, 64, D, device="cuda", dtype=torch.float8_e4m3fn)
    k = torch.zeros(1, 2, 64, D, device="cuda", dtype=torch.float8_e4m3fn)
    vt = torch.zeros(1, 2, D, 64, device="cuda", dtype=torch.float8_e4m3fn)
    o = torch.empty(1, 2, 64, D, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(1, 2, 64, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream

    def call(vt_strides=None, descales=(1.0, 1.0, 1.0), skv=64, vt_ptr=None):
        return lib.cutegen_attention_fp8(q.data_ptr(), k.data_ptr(), vt_ptr or vt.data_ptr(), o.data_ptr(),
                                         lse.data_ptr(), 1, 2, 2, 64, skv, D, *q.stride()[:3], *k.stride()[:3],
                                         *(vt_strides or vt.stride()[:3]), *o.stride()[:3], 1.0 / math.sqrt(D),
                                         *descales, None, 0, stream)

    for name, kwargs, rule in (("descale_v 0", dict(descales=(1.0, 1.0, 0.0)), "ATTN-ABI-DESCALE"),
                               ("descale_q nan", dict(descales=(float("nan"), 1.0, 1.0)), "ATTN-ABI-DESCALE"),
                               ("V^T row stride 48 < seqlen_kv 64", dict(vt_strides=(2 * D * 48, D * 48, 48)),
                                "ATTN-ABI-VT-ROW"),
                               ("V^T row stride 72 (not 16-element)", dict(vt_strides=(2 * D * 72, D * 72, 72)),
                                "TMA-GMEM-STRIDE-16B"),
                               ("misaligned V^T base", dict(vt_ptr=vt.data_ptr() + 8), "E18")):
        status = call(**kwargs)
        msg = lib.cutegen_last_error().decode() if status else ""
        out.append({"probe": name, "status": status, "message": msg, "want_rule": rule,
                    "ok": status == 1 and msg.startswith(rule)})
    torch.cuda.synchronize()
    return out


def compile_check(kdir: str) -> dict:
    """The FP8 op under torch.compile(fullgraph=True), the V transpose inside the graph, against eager."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    _, desc = load_library(kdir)
    key = desc["problem"]
    D = key["head_dim"]
    Hkv = 2 if key["grouped"] else 4
    op = AttentionKernels([kdir])
    q8, dq = quantize(make_logical(2, 4, 256, D, "bhsd", 7))
    k8, dk = quantize(make_logical(2, Hkv, 300, D, "bhsd", 8))
    v8, dv = quantize(make_logical(2, Hkv, 300, D, "bhsd", 9))

    def f(q, k, v):
        return op(q, k, v, is_causal=key["causal"], enable_gqa=key["grouped"], descale_q=dq, descale_k=dk,
                  descale_v=dv) * 2.0

    try:
        eager = f(q8, k8, v8)
        compiled = torch.compile(f, fullgraph=True)
        return {"ok": bool(torch.equal(compiled(q8, k8, v8), eager)), "kernel": kdir}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "kernel": kdir, "error": f"{type(e).__name__}: {e}"[:400]}


def validate_one(args) -> int:
    rec = validate_kernel(args.kernel)
    if args.compile:
        rec["torch_compile"] = compile_check(args.kernel)
        rec["ok"] = rec["ok"] and rec["torch_compile"]["ok"]
    print("RESULT " + json.dumps(rec, sort_keys=True), flush=True)
    return 0 if rec["ok"] else 1


def validate(args) -> int:
    """Every FP8 kernel of the plan in its own process, ``--jobs`` at a time, ``--timeout`` s each."""
    plan_dir = Path(args.plan)
    plan_doc = json.loads((plan_dir / "plan.json").read_text())
    fp8_dirs = sorted({e["dir"] for s in plan_doc["shapes"] for e in s["kernels"] if e.get("dtype") == "e4m3"
                       and "dir" in e})
    dirs = [str(plan_dir / d) for d in fp8_dirs if (plan_dir / d / "kernel.so").is_file()]
    missing = [d for d in fp8_dirs if not (plan_dir / d / "kernel.so").is_file()]
    t0 = time.time()
    deadline, hard = t0 + args.deadline, t0 + max(args.hard, args.deadline)
    results, running, queue = [], [], list(dirs)
    first = dirs[0] if dirs else None
    import tempfile
    logs = Path(tempfile.mkdtemp(prefix="fp8attn-validate-"))
    while queue or running:
        while queue and len(running) < args.jobs and time.time() < deadline:
            d = queue.pop(0)
            cmd = [sys.executable, __file__, "validate-one", d] + (["--compile"] if d == first else [])
            log = logs / f"{len(results) + len(running)}-{Path(d).name}.txt"
            with open(log, "w") as f:           # a file, not a pipe: a chatty worker never blocks on it
                running.append((d, time.time(), subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT), log))
        if queue and time.time() >= deadline and not running:
            break
        time.sleep(0.5)
        for item in list(running):
            d, started, proc, log = item
            late = time.time() - started >= args.timeout or time.time() >= hard
            if proc.poll() is None and not late:
                continue
            verdict = None
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                verdict = "hang" if time.time() - started >= args.timeout else "not finished (hard deadline)"
            out = log.read_text(errors="replace")
            running.remove(item)
            line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                rec = {"kernel": d, "ok": False, "verdict": verdict or "crash",
                       "error": (f"no result after {time.time() - started:.0f} s" if verdict else out[-600:])}
            else:
                rec = json.loads(line[len("RESULT "):])
                rec["verdict"] = "pass" if rec["ok"] else "fail"
            results.append(rec)
            print(f"{rec['verdict']}: {Path(d).name} ({rec.get('seconds', '-')} s) worst err max "
                  f"{rec.get('worst_err_max_rel', float('nan')):.4f} mean {rec.get('worst_err_mean_rel', float('nan')):.4f} "
                  f"lse {rec.get('worst_err_lse', float('nan')):.4f}"
                  + (f" torch.compile {rec['torch_compile']['ok']}" if "torch_compile" in rec else "")
                  + (f"\n  error {rec['error']}" if "error" in rec else "")
                  + "".join(f"\n  case {c}" for c in rec.get("cases", []) if not c["ok"])
                  + "".join(f"\n  probe {p}" for p in rec.get("probes", []) if not p["ok"]), flush=True)
    for d in queue:
        results.append({"kernel": d, "ok": False, "verdict": "not run", "error": "deadline"})
    summary = {"kernels": len(fp8_dirs), "built": len(dirs), "not_built": missing,
               **{v: sum(r["verdict"] == v for r in results) for v in ("pass", "fail", "hang", "crash", "not run")},
               "tolerance": {"err_max_rel": TOL_MAX, "err_mean_rel": TOL_MEAN, "err_lse": TOL_LSE},
               "error_definition": "vs float32 softmax(scale Q K^T) V of the dequantized e4m3 inputs; max|O-ref|/"
                                   "max|ref| and mean|O-ref|/mean|ref|; LSE max absolute"}
    Path(args.json).write_text(json.dumps({"summary": summary, "results": results}, indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary))
    return 0 if summary["pass"] == len(fp8_dirs) else 1


def _time_round(fn, reps):
    torch = _torch()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def time_plan(args) -> int:
    torch = _torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from cutegen.ops.attention.runner import reference
    from cutegen.ops.attention.torch_op import AttentionKernels, transpose_v
    plan_dir = Path(args.plan)
    plan_doc = json.loads((plan_dir / "plan.json").read_text())
    verdicts = None             # kernel name -> validation verdict; a kernel that hung or crashed is not timed,
    if args.validated and Path(args.validated).is_file():     # one that computed wrong is timed and marked
        verdicts = {Path(r["kernel"]).name: r.get("verdict") for r in
                    json.loads(Path(args.validated).read_text())["results"]}
    deadline = time.time() + args.deadline
    dev = torch.cuda.get_device_properties(0)
    doc = {"device": dev.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "flops": "AttentionProblem.flops: 4 B H S^2 D, causal counts the kept (top-left) pairs",
           "inputs": "bf16 N(0,1); FP8 = per-tensor e4m3 of the same values (descale amax/448)", "shapes": []}
    for shape in plan_doc["shapes"]:
        if not shape["timed"]:
            continue
        if time.time() > deadline:
            doc["shapes"].append({"name": shape["name"], "skipped": "deadline"})
            continue
        p = _problem(shape["fields"], dtype="e4m3")
        B, H, S, D = p.batch, p.heads_q, p.seqlen_q, p.head_dim
        q = make_logical(B, H, S, D, p.layout, 1, dtype=torch.bfloat16)
        k = make_logical(B, p.heads_kv, p.seqlen_kv, D, p.layout, 2, dtype=torch.bfloat16)
        v = make_logical(B, p.heads_kv, p.seqlen_kv, D, p.layout, 3, dtype=torch.bfloat16)
        q8, dq = quantize_like(q)
        k8, dk = quantize_like(k)
        v8, dv = quantize_like(v)
        vt8 = transpose_v(v8)
        scale = p.softmax_scale
        sl = (slice(B - 1, B), [0, H - 1])
        ref_bf16 = reference(q, k, v, p.causal, scale, batches=[B - 1], heads=[0, H - 1])[0]
        ref_fp8 = reference(dequantize(q8, dq), dequantize(k8, dk), dequantize(v8, dv), p.causal, scale,
                            batches=[B - 1], heads=[0, H - 1])[0]
        row = {"name": shape["name"], "problem": p.to_dict(), "flops": p.flops, "contenders": {},
               "descale": [dq, dk, dv]}
        contenders = {}
        for entry in shape["kernels"]:
            if "dir" not in entry or not (plan_dir / entry["dir"] / "kernel.so").is_file():
                row["contenders"][entry["role"]] = {"skipped": "not built", **{k_: entry[k_] for k_ in ("config",)}}
                continue
            verdict = None if verdicts is None or entry["dtype"] != "e4m3" else verdicts.get(Path(entry["dir"]).name)
            if verdicts is not None and entry["dtype"] == "e4m3" and verdict not in ("pass", "fail"):
                row["contenders"][entry["role"]] = {"dir": entry["dir"], "skipped": f"validation verdict {verdict}"}
                continue
            op = AttentionKernels([plan_dir / entry["dir"]])
            meta = {"dir": entry["dir"], "config": entry["config"], "predicted_tflops": entry.get("predicted_tflops")}
            if verdict is not None:
                meta["validation"] = verdict
            if entry["dtype"] == "e4m3":
                contenders[entry["role"] + " (V^T given)"] = (meta, ref_fp8, lambda op=op: op(
                    q8, k8, vt8, is_causal=p.causal, scale=scale, descale_q=dq, descale_k=dk, descale_v=dv,
                    v_transposed=True))
                if entry["role"] == "fp8":
                    contenders["fp8 (op transposes V)"] = (meta, ref_fp8, lambda op=op: op(
                        q8, k8, v8, is_causal=p.causal, scale=scale, descale_q=dq, descale_k=dk, descale_v=dv))
            else:
                contenders[entry["role"]] = (meta, ref_bf16, lambda op=op: op(q, k, v, is_causal=p.causal,
                                                                              scale=scale))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=p.causal, scale=scale)
        contenders["sdpa_cudnn_bf16"] = ({}, ref_bf16, cudnn)
        contenders["transpose_v_alone"] = ({}, None, lambda: transpose_v(v8))
        reps, runnable = {}, {}
        for name, (meta, ref, fn) in contenders.items():
            rec = dict(meta)
            try:
                o = fn()
                torch.cuda.synchronize()
                if ref is not None:
                    rec.update(errors(o[sl[0], sl[1]], ref))
                one = _time_round(fn, 1)
                reps[name] = max(3, min(100, int(40.0 / max(one, 1e-3))))
                runnable[name] = fn
                rec["ms_rounds"] = []
            except Exception as e:  # noqa: BLE001 - a contender that cannot run this shape says so
                rec.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
            row["contenders"][name] = rec
        for _ in range(args.rounds):                    # interleaved: every contender once per round
            for name, fn in runnable.items():
                row["contenders"][name]["ms_rounds"].append(_time_round(fn, reps[name]))
        for name in runnable:
            rec = row["contenders"][name]
            rec["ms"] = statistics.median(rec["ms_rounds"])
            if not name.startswith("transpose_v"):
                rec["tflops"] = p.flops / (rec["ms"] * 1e-3) / 1e12
        c = row["contenders"]
        bf16_ms = c.get("bf16", {}).get("ms")
        cudnn_ms = c.get("sdpa_cudnn_bf16", {}).get("ms")
        for name, rec in c.items():
            if rec.get("tflops"):
                if bf16_ms:
                    rec["vs_cutegen_bf16"] = bf16_ms / rec["ms"]
                if cudnn_ms:
                    rec["vs_cudnn_bf16"] = cudnn_ms / rec["ms"]
        doc["shapes"].append(row)
        print(f"{shape['name']}: " + "  ".join(
            f"{n} {r['tflops']:.0f} TFLOP/s" + (f" (x{r['vs_cutegen_bf16']:.2f} bf16)" if r.get("vs_cutegen_bf16") else "")
            + (f" err {r['err_max_rel']:.3f}/{r['err_mean_rel']:.4f}" if "err_max_rel" in r else "")
            for n, r in c.items() if r.get("tflops"))
            + "".join(f"  {n} {c[n]['ms'] * 1e3:.0f} us" for n in ("transpose_v_alone", "transpose_v_naive")
                      if c.get(n, {}).get("ms")), flush=True)
        q = k = v = q8 = k8 = v8 = vt8 = contenders = runnable = None
        torch.cuda.empty_cache()
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="search + render the FP8 kernels and their bf16 peers (CPU)")
    p.add_argument("--out", default="out/fp8attn-plan")
    p = sub.add_parser("validate", help="every FP8 kernel of a built plan against float32 (GPU)")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--jobs", type=int, default=2, help="kernels validated at once, one process each")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one kernel may take")
    p.add_argument("--deadline", type=float, default=70.0, help="seconds after which no kernel starts")
    p.add_argument("--hard", type=float, default=0.0, help="seconds after which running kernels are stopped too")
    p = sub.add_parser("validate-one", help="one kernel; prints RESULT <json>")
    p.add_argument("kernel")
    p.add_argument("--compile", action="store_true", help="also the op under torch.compile(fullgraph=True)")
    p = sub.add_parser("time", help="FP8 vs cutegen bf16 vs SDPA cuDNN bf16 through the op, one process (GPU)")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--validated", help="validate's JSON: FP8 kernels that hung or crashed there are not timed; "
                                       "those that failed are timed and marked")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--deadline", type=float, default=60.0)
    args = ap.parse_args(argv)
    return {"plan": plan, "validate": validate, "validate-one": validate_one, "time": time_plan}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
