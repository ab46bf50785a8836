"""Variable-length attention (issue 25, varlen): plan here, build, validate, sanitize and time on the H200.

  python bench/varlen_bench.py plan [--out out/varlen-plan]        # CPU: search + render the varlen and dense kernels
  python bench/varlen_bench.py validate PLAN --json OUT.json        # GPU: every built varlen kernel vs float32
  python bench/varlen_bench.py sanitize-case KERNEL_DIR             # GPU: one ragged call (compute-sanitizer)
  python bench/varlen_bench.py time PLAN --json OUT.json            # GPU: varlen vs dense vs SDPA cuDNN, one process

``plan`` searches each kernel class of CLASSES as a varlen problem (``cutegen.core.search``: attention's space,
rules, the renderer's refusals and the cost, which prices a varlen problem at its maximum lengths), takes the
first pick, and renders it twice: as the varlen kernel (templates/attention/fmha_varlen_sm90.cu.j2) and as the
dense kernel of the same configuration (the peer "at the same useful FLOPs").

``validate`` runs each varlen kernel in its own process (a hang or crash costs that kernel only) through
``AttentionKernels.flash_attn_varlen_func`` and the raw C ABI: ragged lengths including 0 and 1, lengths that are
no multiple of the tiles, len_q != len_k both ways (bottom-right causal: rows with no key), decode-like sequences,
GQA and MHA calls, a strided (qkv-packed) layout, a custom scale, a max_seqlen above the longest sequence, the LSE,
rows outside every sequence left untouched; the ABI's refusals; ``torch.compile`` and CUDA-graph replay.

``time`` times, per timing shape, on the same tensors and in one process with CUDA events: the varlen kernel on a
ragged batch; the varlen kernel on an equal-length batch (its overhead against the dense kernel on the same work);
the dense kernel of the same configuration at the dense shape whose useful FLOPs match the ragged batch (B = the
number of sequences, S = the rounded root mean square of the lengths); SDPA cuDNN at that dense shape; SDPA cuDNN
on the ragged batch padded to its longest sequence (what a caller without varlen pays: max^2 work, wrong rows
ignored); SDPA cuDNN per sequence (one call each). TFLOP/s count useful FLOPs (causal: kept bottom-right pairs).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# kernel class -> problem fields (the sizes are the varlen problem's maxima: what the search prices)
CLASSES = {
    "d128": dict(batch=8, heads_q=32, heads_kv=32, seqlen_q=6144, seqlen_kv=6144, head_dim=128),
    "d128_causal": dict(batch=8, heads_q=32, heads_kv=32, seqlen_q=6144, seqlen_kv=6144, head_dim=128, causal=True),
    "d64": dict(batch=16, heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_kv=4096, head_dim=64),
    "d64_causal": dict(batch=16, heads_q=16, heads_kv=16, seqlen_q=4096, seqlen_kv=4096, head_dim=64, causal=True),
    "gqa_d128_causal": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=6144, seqlen_kv=6144, head_dim=128, causal=True),
}

# timing shapes: kernel class, heads, and the ragged lengths (seeded draws; Q and KV lengths equal, as in prefill)
TWIN_CLASSES = ("d128", "d64")


def _lengths(seed, count, lo, hi):
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(count)]


TIMING = {      # in the order they run (the ones runs 2-3 did not finish first)
    "gqa_d128_causal_ragged_8x256-6144": ("gqa_d128_causal", 32, 8, _lengths(1, 8, 256, 6144)),
    "d128_short_64x1-512": ("d128", 32, 32, _lengths(3, 64, 1, 512)),
    "d128_ragged_8x256-6144": ("d128", 32, 32, _lengths(1, 8, 256, 6144)),
    "d64_ragged_16x128-4096": ("d64", 16, 16, _lengths(2, 16, 128, 4096)),
    "d128_causal_ragged_8x256-6144": ("d128_causal", 32, 32, _lengths(1, 8, 256, 6144)),
    "d64_causal_ragged_16x128-4096": ("d64_causal", 16, 16, _lengths(2, 16, 128, 4096)),
}


def _problem(fields):
    from cutegen.ops.attention.problem import AttentionProblem
    return AttentionProblem(**fields)


def pairs_of(lens_q, lens_k, causal):
    """Useful (query, key) pairs: all, or the bottom-right causal ones (query i sees keys j <= i + lk - lq)."""
    total = 0
    for lq, lk in zip(lens_q, lens_k):
        if not causal:
            total += lq * lk
        else:
            total += sum(max(0, min(lk, i + 1 + lk - lq)) for i in range(lq)) if lq != lk else lq * (lq + 1) // 2
    return total


# --- plan (CPU) ---------------------------------------------------------------------------------------------------
def plan(args) -> int:
    from cutegen.core.search import search
    from cutegen.ops.attention.render import backend_refusals, render
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    classes, kernels = {}, {}
    for name, fields in CLASSES.items():
        problem = _problem({**fields, "varlen": True})
        t0 = time.perf_counter()
        found = search(problem, 5)
        seconds = time.perf_counter() - t0
        if not found.ranked:
            raise SystemExit(f"{name}: the search found no legal varlen configuration")
        config = found.ranked[0].config
        entry = {"problem": problem.to_dict(), "config": config.to_dict(), "search_seconds": round(seconds, 3),
                 "predicted_us": found.ranked[0].cost}
        roles = [("varlen", problem, config), ("dense", problem.replace(varlen=False), config)]
        if name in TWIN_CLASSES:
            # the same kernel with the other scheduler: static persistent round robin against the hardware's
            # dynamic CTA scheduling, on ragged batches (run 2: the persistent head-64 pick lost 9% to dense there)
            twin = config.replace(persistent=not config.persistent)
            if not backend_refusals(problem, twin):
                roles.append(("varlen_twin", problem, twin))
        for role, p, cfg in roles:
            r = render(p, cfg, cost={"model": "attention cost (core search), varlen priced at its maxima",
                                     "predicted_us": found.ranked[0].cost})
            rel = f"kernels/{p.kernel_class_name}_{cfg.short_name()}"
            if rel not in kernels:
                r.write(out / rel)
                kernels[rel] = r.kernel_hash
            entry[role] = rel
            if role == "varlen_twin":
                entry["twin_config"] = cfg.to_dict()
        classes[name] = entry
        print(f"{name}: search {seconds * 1e3:.0f} ms, pick {config.short_name()}: {entry['varlen']}, {entry['dense']}")
    (out / "plan.json").write_text(json.dumps({"classes": classes, "kernels": kernels,
                                               "timing": {k: list(v) for k, v in TIMING.items()}},
                                              indent=1, sort_keys=True) + "\n")
    (out / "dirs.txt").write_text("".join(f"{out / d}\n" for d in sorted(kernels)))
    print(f"{len(kernels)} kernel directories under {out}/kernels")
    return 0


# --- GPU helpers --------------------------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def packed_batch(lens_q, lens_k, Hq, Hkv, D, dtype, seed, qkv_packed=False):
    """q (total_q, Hq, D), k, v (total_k, Hkv, D) N(0, 1) and int32 offsets on the GPU. ``qkv_packed``: q, k and v
    are views into one (total, 3, H, D) tensor (flash-attention's qkvpacked layout: row stride 3 x H x D)."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    if qkv_packed:
        assert lens_q == lens_k and Hq == Hkv
        qkv = torch.randn(tq, 3, Hq, D, generator=g, device="cuda").to(dtype)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    else:
        q = torch.randn(tq, Hq, D, generator=g, device="cuda").to(dtype)
        k = torch.randn(tk, Hkv, D, generator=g, device="cuda").to(dtype)
        v = torch.randn(tk, Hkv, D, generator=g, device="cuda").to(dtype)
    cu_q = torch.tensor([0] + list(_accumulate(lens_q)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(_accumulate(lens_k)), dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k


def _accumulate(xs):
    s = 0
    for x in xs:
        s += x
        yield s


def reference(q, k, v, lens_q, lens_k, causal, scale):
    """float32 O (total_q, Hq, D) and LSE (Hq, total_q) per sequence; causal bottom-right; a row with no visible key
    gives O = 0 and LSE = +inf (flash-attention's convention, and the kernel's)."""
    torch = _torch()
    Hq, Hkv = q.shape[1], k.shape[1]
    G = Hq // Hkv
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full((Hq, q.shape[0]), float("inf"), dtype=torch.float32, device=q.device)
    sq = sk = 0
    for lq, lk in zip(lens_q, lens_k):
        if lq and lk:
            qf = q[sq:sq + lq].float().transpose(0, 1)                                  # (Hq, lq, D)
            kf = k[sk:sk + lk].float().transpose(0, 1).repeat_interleave(G, 0)         # (Hq, lk, D)
            vf = v[sk:sk + lk].float().transpose(0, 1).repeat_interleave(G, 0)
            s = (qf @ kf.transpose(1, 2)) * scale
            if causal:
                i = torch.arange(lq, device=q.device)[:, None]
                j = torch.arange(lk, device=q.device)[None, :]
                s = s.masked_fill(j > i + (lk - lq), float("-inf"))
            l_ = torch.logsumexp(s, -1)                                                 # (Hq, lq); -inf: no key
            p = torch.exp(s - torch.where(torch.isinf(l_), torch.zeros_like(l_), l_)[..., None])
            ob = p @ vf
            empty = torch.isinf(l_)
            ob[empty] = 0.0
            o[sq:sq + lq] = ob.transpose(0, 1)
            lse[:, sq:sq + lq] = torch.where(empty, torch.full_like(l_, float("inf")), l_)
        sq += lq
        sk += lk
    return o, lse


def compare(o, lse, ref_o, ref_lse, rows, tol=0.02):
    """Max errors over the sequences' rows: O relative to max(1, max |ref|); LSE absolute, +inf exactly where the
    reference has it."""
    torch = _torch()
    o, ref_o = o[:rows].float(), ref_o[:rows]
    lse, ref_lse = lse[:, :rows], ref_lse[:, :rows]
    finite_o = bool(torch.isfinite(o).all())
    inf_ref = torch.isinf(ref_lse)
    same_inf = bool((torch.isinf(lse) == inf_ref).all()) and bool((lse[inf_ref] > 0).all()) if rows else True
    err_o = float((o - ref_o).abs().max()) / max(1.0, float(ref_o.abs().max())) if rows else 0.0
    fin = ~inf_ref
    err_lse = float((lse[fin] - ref_lse[fin]).abs().max()) if bool(fin.any()) else 0.0
    return {"err_o": err_o, "err_lse": err_lse, "finite_o": finite_o, "lse_inf_rows_match": same_inf,
            "ok": finite_o and same_inf and err_o <= tol and err_lse <= 2e-2}


# (name, lens_q, lens_k, Hq, Hkv, scale, extra): ragged with 0 and 1, not multiples of the tiles, unequal both ways
def validation_cases(key):
    G = 4 if key["grouped"] else 1
    cases = [
        ("ragged-0-1", [1, 0, 130, 257, 64, 1000], [1, 0, 130, 257, 64, 1000], 2 * G, 2, None, {}),
        ("q-longer", [7, 300, 0, 129, 200], [13, 200, 50, 129, 0], 2 * G, 2, None, {}),
        ("k-longer-decode", [1, 1, 16, 3, 5], [513, 1, 1000, 0, 77], 2 * G, 2, 0.3, {}),
        ("one-seq", [1], [1], 1 * G, 1, None, {}),
        ("max-above", [100, 33], [90, 250], 2 * G, 2, None, {"max_extra": 50}),
        ("batch-24", [((7 * i) % 200) + (i % 3) for i in range(24)], [((11 * i) % 300) + 1 for i in range(24)],
         3 * G, 3, 0.05, {}),
        # the timing shapes' lengths (run 1 faulted on the causal kernel at these sizes, not on the small cases)
        ("long-timing-lengths", [1356, 4918, 772], [1356, 4918, 772], 2 * G, 2, None, {}),
        ("long-unequal", [4918, 300, 2049], [300, 4918, 2049], 2 * G, 2, None, {}),
    ]
    if key["grouped"]:
        cases.append(("mha-call-on-gqa-kernel", [50, 300], [50, 300], 4, 4, None, {}))
        # run 3's fault (the first load construction): 8 equal sequences of 3255 tokens, 32/8 heads
        cases.append(("equal-8x3255-32/8", [3255] * 8, [3255] * 8, 32, 8, None, {}))
        cases.append(("mqa", [129, 64], [200, 64], 8, 1, None, {}))
    else:
        cases.append(("qkv-packed-strides", [77, 0, 300], [77, 0, 300], 3, 3, None, {"qkv_packed": True}))
    return cases


def _abi(lib, q, k, v, o, lse, cu_q, cu_k, B, Hq, Hkv, max_q, max_k, D, scale, ptr_q=None):
    import torch
    stream = torch.cuda.current_stream().cuda_stream
    return lib.cutegen_attention_varlen(
        ptr_q if ptr_q is not None else q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
        lse.data_ptr() if lse is not None else None, cu_q.data_ptr(), cu_k.data_ptr(), B, Hq, Hkv, max_q, max_k,
        q.shape[0], k.shape[0], D, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        o.stride(0), o.stride(1), float(scale), None, 0, stream)


def validate_kernel(kdir: str) -> dict:
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    t0 = time.time()
    lib, desc = load_library(kdir)
    key = desc["problem"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D, causal = key["head_dim"], key["causal"]
    op = AttentionKernels([kdir])
    cases, probes = [], []
    for name, lq, lk, Hq, Hkv, scale, extra in validation_cases(key):
        q, k, v, cu_q, cu_k = packed_batch(lq, lk, Hq, Hkv, D, dtype, seed=len(cases) + 1,
                                           qkv_packed=extra.get("qkv_packed", False))
        s = 1 / math.sqrt(D) if scale is None else scale
        mq, mk = max(lq) + extra.get("max_extra", 0), max(lk) + extra.get("max_extra", 0)
        rec = {"case": name, "lens_q": lq, "lens_k": lk, "heads": [Hq, Hkv], "scale": s}
        try:
            o, lse = op.flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, softmax_scale=s, causal=causal,
                                               return_lse=True)
            torch.cuda.synchronize()
            ref_o, ref_l = reference(q, k, v, lq, lk, causal, s)
            rec.update(compare(o, lse, ref_o, ref_l, sum(lq)))
        except Exception as e:  # noqa: BLE001 - the case's verdict
            rec.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
        cases.append(rec)
    # the raw ABI: rows outside every sequence (a trailing region of O) are never written; LSE NULL is allowed
    lq, lk = [40, 0, 129], [60, 5, 129]
    q, k, v, cu_q, cu_k = packed_batch(lq, lk, 2, 2, D, dtype, seed=99)
    q = torch.cat([q, torch.randn(30, 2, D, device="cuda").to(dtype)])           # 30 trailing rows in no sequence
    o = torch.full(q.shape, 7.0, dtype=dtype, device="cuda")
    st = _abi(lib, q, k, v, o, None, cu_q, cu_k, 3, 2, 2, max(lq), max(lk), D, 1 / math.sqrt(D))
    torch.cuda.synchronize()
    ref_o, _ = reference(q, k, v, lq + [30], lk + [0], causal, 1 / math.sqrt(D))
    err = float((o[:sum(lq)].float() - ref_o[:sum(lq)]).abs().max()) / max(1.0, float(ref_o.abs().max()))
    untouched = bool((o[sum(lq):] == 7.0).all())
    cases.append({"case": "abi-trailing-rows-lse-null", "status": st, "err_o": err, "trailing_untouched": untouched,
                  "ok": st == 0 and err <= 0.02 and untouched})

    def probe(name, want_status, want_rule, status):
        msg = lib.cutegen_last_error().decode() if status else ""
        probes.append({"probe": name, "status": status, "message": msg[:200],
                       "ok": status == want_status and (want_rule is None or msg.startswith(want_rule))})

    q, k, v, cu_q, cu_k = packed_batch([64, 9], [64, 9], 4, 4, D, dtype, seed=7)
    o = torch.empty_like(q)
    probe("wrong head dim", 1, "ATTN-ABI-HEAD-DIM", _abi(lib, q, k, v, o, None, cu_q, cu_k, 2, 4, 4, 64, 64, D + 8, 0.1))
    probe("misaligned q", 1, "E18", _abi(lib, q, k, v, o, None, cu_q, cu_k, 2, 4, 4, 64, 64, D, 0.1,
                                         ptr_q=q.data_ptr() + 2))
    probe("null offsets", 1, "ATTN-ABI-VARLEN-OFFSETS",
          lib.cutegen_attention_varlen(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), None, None, None, 2, 4, 4,
                                       64, 64, q.shape[0], k.shape[0], D, q.stride(0), q.stride(1), k.stride(0),
                                       k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1), 0.1, None, 0,
                                       torch.cuda.current_stream().cuda_stream))
    if not key["grouped"]:
        probe("gqa on an mha kernel", 1, "ATTN-ABI-GQA-KERNEL",
              _abi(lib, q, k[:, :2], v[:, :2], o, None, cu_q, cu_k, 2, 4, 2, 64, 64, D, 0.1))
    probe("ok call", 0, None, _abi(lib, q, k, v, o, None, cu_q, cu_k, 2, 4, 4, 64, 64, D, 0.1))
    torch.cuda.synchronize()
    ok = all(c["ok"] for c in cases) and all(p["ok"] for p in probes)
    return {"kernel": kdir, "ok": ok, "cases": cases, "probes": probes, "seconds": round(time.time() - t0, 1)}


def op_checks(kdir: str) -> dict:
    """torch.compile(fullgraph) and CUDA-graph replay of the varlen op give the eager bytes."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    _, desc = load_library(kdir)
    key = desc["problem"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D = key["head_dim"]
    Hq, Hkv = (8, 2) if key["grouped"] else (4, 4)
    lq = [100, 1, 300]
    q, k, v, cu_q, cu_k = packed_batch(lq, lq, Hq, Hkv, D, dtype, seed=5)
    op = AttentionKernels([kdir])

    def f(q, k, v, cu_q, cu_k):
        return op.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 300, 300, causal=key["causal"])

    eager = f(q, k, v, cu_q, cu_k)
    out = {}
    try:
        compiled = torch.compile(f, fullgraph=True)
        out["compile_equal"] = bool(torch.equal(compiled(q, k, v, cu_q, cu_k), eager))
    except Exception as e:  # noqa: BLE001
        out["compile_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        static = f(q, k, v, cu_q, cu_k)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = f(q, k, v, cu_q, cu_k)
        graph.replay()
        torch.cuda.synchronize()
        out["graph_equal"] = bool(torch.equal(static, eager))
    except Exception as e:  # noqa: BLE001
        out["graph_error"] = f"{type(e).__name__}: {e}"[:300]
    out["ok"] = out.get("compile_equal") is True and out.get("graph_equal") is True
    return out


def validate(args) -> int:
    """Each varlen kernel in its own process (``--timeout`` each, ``--parallel`` at once); one JSON file."""
    plan_dir = Path(args.plan)
    doc = json.loads((plan_dir / "plan.json").read_text())
    dirs = sorted({str(plan_dir / c[role]) for c in doc["classes"].values() for role in ("varlen", "varlen_twin")
                   if role in c})
    results, running, pending = {}, {}, [d for d in dirs if (Path(d) / "kernel.so").is_file()]
    for d in dirs:
        if d not in pending:
            results[d] = {"kernel": d, "ok": False, "verdict": "not built"}
    deadline = time.time() + args.deadline
    first = pending[0] if pending else None
    while pending or running:
        while pending and len(running) < args.parallel and time.time() < deadline:
            d = pending.pop(0)
            cmd = [sys.executable, __file__, "validate-one", d] + (["--op-checks"] if d == first else [])
            running[d] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), time.time())
        if not running:
            break
        time.sleep(0.5)
        for d, (proc, started) in list(running.items()):
            if proc.poll() is None and time.time() - started > args.timeout:
                proc.kill()
                proc.wait()
                results[d] = {"kernel": d, "ok": False, "verdict": "hang", "error": f"no result after {args.timeout} s"}
                del running[d]
            elif proc.poll() is not None:
                text = proc.stdout.read()
                rec = None
                for line in text.splitlines():
                    if line.startswith("{\"result\""):
                        rec = json.loads(line)["result"]
                if rec is None:
                    rec = {"kernel": d, "ok": False, "verdict": "crash", "error": text[-600:]}
                else:
                    rec["verdict"] = "pass" if rec["ok"] else "fail"
                results[d] = rec
                del running[d]
                print(f"{rec['verdict']}: {Path(d).name} ({rec.get('seconds', '?')} s)"
                      + "".join(f"\n  case {json.dumps(c)}" for c in rec.get("cases", []) if not c["ok"])
                      + "".join(f"\n  probe {json.dumps(p)}" for p in rec.get("probes", []) if not p["ok"])
                      + (f"\n  op-checks {json.dumps(rec['op_checks'])}" if "op_checks" in rec else "")
                      + (f"\n  error {rec['error'][-400:]}" if rec.get("error") else ""), flush=True)
    for d in pending:
        results[d] = {"kernel": d, "ok": False, "verdict": "not run", "error": "deadline"}
    verdicts = [r["verdict"] for r in results.values()]
    out = {"summary": {v: verdicts.count(v) for v in sorted(set(verdicts))}, "results": [results[k] for k in sorted(results)]}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(json.dumps(out["summary"]))
    return 0 if verdicts and all(v == "pass" for v in verdicts) else 1


def validate_one(args) -> int:
    try:
        rec = validate_kernel(args.kernel)
        if args.op_checks:      # reported beside the verdict: a torch.compile problem does not stop the timing
            rec["op_checks"] = op_checks(args.kernel)
    except Exception as e:  # noqa: BLE001 - the kernel's verdict
        rec = {"kernel": args.kernel, "ok": False, "cases": [], "probes": [], "error": f"{type(e).__name__}: {e}"[:500]}
    print(json.dumps({"result": rec}), flush=True)
    return 0


def sanitize_case(args) -> int:
    """One ragged call (lengths 0, 1, unequal, past the tiles) for compute-sanitizer memcheck."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    _, desc = load_library(args.kernel)
    key = desc["problem"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D = key["head_dim"]
    Hq, Hkv = (8, 2) if key["grouped"] else (4, 4)
    lq, lk = ([0, 1, 200, 129, 7, 1500], [5, 1, 333, 0, 300, 1500]) if args.long else ([0, 1, 200, 129, 7], [5, 1, 333, 0, 300])
    q, k, v, cu_q, cu_k = packed_batch(lq, lk, Hq, Hkv, D, dtype, seed=11)
    o, lse = AttentionKernels([args.kernel]).flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk),
                                                                   causal=key["causal"], return_lse=True)
    torch.cuda.synchronize()
    res = compare(o, lse, *reference(q, k, v, lq, lk, key["causal"], 1 / math.sqrt(D)), sum(lq))
    print(json.dumps(res))
    return 0 if res["ok"] else 1


def _time_ms(fn, rounds=5, min_ms=40.0):
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)
    reps = max(3, min(200, int(min_ms / one)))
    per = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / reps)
    return statistics.median(per)


def time_plan(args) -> int:
    """Each timing shape in its own process (a fault costs that shape only); one JSON of all of them."""
    plan_dir = Path(args.plan)
    deadline = time.time() + args.deadline
    shapes, head = [], None
    for name in TIMING:
        if time.time() > deadline:
            shapes.append({"name": name, "skipped": "deadline"})
            continue
        part = Path(args.json).with_suffix(f".{name}.part.json")
        cmd = [sys.executable, __file__, "time-shape", str(plan_dir), "--json", str(part), "--shape", name]
        if args.validated:
            cmd += ["--validated", args.validated]
        text, rc = _run_shape(cmd, max(10.0, deadline + 30 - time.time()))
        if part.is_file():
            doc = json.loads(part.read_text())
            part.unlink()
            head = head or {k: v for k, v in doc.items() if k != "shapes"}
            shapes += doc["shapes"]
        else:
            shapes.append({"name": name, "error": f"time-shape exited {rc}: " + text[-600:]})
        failed = rc != 0 or any("error" in c for sh in shapes[-1:] for c in sh.get("contenders", {}).values())
        if failed and time.time() < deadline + 20:
            # which call faults: the same shape once more, every launch synchronous, each contender called once
            env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
            dtext, drc = _run_shape(cmd + ["--once"], 60.0, env)
            if part.is_file():
                diag = json.loads(part.read_text())
                part.unlink()
                shapes[-1]["diagnosis_launch_blocking"] = {n: c for sh in diag["shapes"] for n, c in sh.get("contenders", {}).items()}
            shapes[-1]["diagnosis_exit"] = drc
    Path(args.json).write_text(json.dumps({**(head or {}), "shapes": shapes}, indent=1, sort_keys=True) + "\n")
    return 0


_NOISE = ("TMA Desc", "format ", "dim ", "gmem_", "global", "boxDim", "elementStrides", "interleave", "swizzle",
          "l2Promotion", "oobFill", "  File ", "    ", "Search for", "CUDA kernel errors", "For debugging",
          "Compile with", "Traceback")


def _run_shape(cmd, timeout, env=None):
    """Run one time-shape process; print its output without the tensor-map dumps and traceback frames."""
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
        text, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")), "timeout"
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(_NOISE)]
    print(("[CUDA_LAUNCH_BLOCKING=1 once] " if env else "") + "\n".join(lines[-20:]), flush=True)
    return "\n".join(lines), rc


def time_shape(args) -> int:
    torch = _torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from cutegen.ops.attention.torch_op import AttentionKernels
    plan_dir = Path(args.plan)
    doc_plan = json.loads((plan_dir / "plan.json").read_text())
    valid = None
    if args.validated and Path(args.validated).is_file():
        valid = {Path(r["kernel"]).name for r in json.loads(Path(args.validated).read_text())["results"]
                 if r.get("verdict") == "pass"}
    dev = torch.cuda.get_device_properties(0)
    doc = {"device": dev.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "flops": "2 x Hq x useful pairs x 2D; causal pairs bottom-right per sequence (equal lengths here: the "
                    "same as top-left)", "shapes": []}
    for name, (cls, Hq, Hkv, lens) in TIMING.items():
        if name != args.shape:
            continue
        entry = doc_plan["classes"][cls]
        vdir, ddir = plan_dir / entry["varlen"], plan_dir / entry["dense"]
        causal = entry["problem"]["causal"]
        D = entry["problem"]["head_dim"]
        dtype = torch.bfloat16
        rec = {"name": name, "class": cls, "config": entry["config"], "lens": lens, "heads": [Hq, Hkv], "head_dim": D,
               "causal": causal, "contenders": {}}
        if not (vdir / "kernel.so").is_file() or (valid is not None and vdir.name not in valid):
            rec["skipped"] = "varlen kernel not built or not validated"
            doc["shapes"].append(rec)
            continue
        B = len(lens)
        s_rms = int(round(math.sqrt(sum(x * x for x in lens) / B)))
        flops_ragged = 4 * Hq * pairs_of(lens, lens, causal) * D
        flops_dense = 4 * Hq * pairs_of([s_rms] * B, [s_rms] * B, causal) * D
        rec.update({"dense_shape": [B, Hq, Hkv, s_rms, D], "flops_ragged": flops_ragged, "flops_dense": flops_dense})
        scale = 1 / math.sqrt(D)
        q, k, v, cu_q, cu_k = packed_batch(lens, lens, Hq, Hkv, D, dtype, seed=1)
        qe, ke, ve, cu_qe, cu_ke = packed_batch([s_rms] * B, [s_rms] * B, Hq, Hkv, D, dtype, seed=2)
        vop = AttentionKernels([vdir])
        # the dense peer on the equal-length batch's values as contiguous BHSD tensors (copied once, outside the
        # timing: a grouped dense kernel takes BHSD strides without a copy; cuDNN takes either)
        qd, kd, vd = (t.view(B, s_rms, t.shape[1], D).transpose(1, 2).contiguous() for t in (qe, ke, ve))
        gqa = Hq != Hkv
        contenders = {
            "varlen_ragged": (flops_ragged, lambda: vop.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens), max(lens),
                                                                               causal=causal)),
            "varlen_equal": (flops_dense, lambda: vop.flash_attn_varlen_func(qe, ke, ve, cu_qe, cu_ke, s_rms, s_rms,
                                                                             causal=causal)),
        }
        tdir = plan_dir / entry["varlen_twin"] if "varlen_twin" in entry else None
        if tdir is not None and (tdir / "kernel.so").is_file() and (valid is None or tdir.name in valid):
            top = AttentionKernels([tdir])
            rec["twin_config"] = entry["twin_config"]
            contenders["varlen_ragged_twin"] = (flops_ragged, lambda: top.flash_attn_varlen_func(
                q, k, v, cu_q, cu_k, max(lens), max(lens), causal=causal))
        if (ddir / "kernel.so").is_file():
            dop = AttentionKernels([ddir])
            contenders["dense_same_config"] = (flops_dense, lambda: dop(qd, kd, vd, is_causal=causal, enable_gqa=gqa))

        def cudnn(qq, kk, vv):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=gqa)

        contenders["sdpa_cudnn_dense"] = (flops_dense, lambda: cudnn(qd, kd, vd))
        mx = max(lens)
        qp = torch.randn(B, Hq, mx, D, device="cuda").to(dtype)
        kp = torch.randn(B, Hkv, mx, D, device="cuda").to(dtype)
        vp = torch.randn(B, Hkv, mx, D, device="cuda").to(dtype)
        contenders["sdpa_cudnn_padded"] = (flops_ragged, lambda: cudnn(qp, kp, vp))
        offs = [0] + list(_accumulate(lens))
        # contiguous (1, H, len, D) copies made once, outside the timing (run 2 faulted in a process that called
        # cuDNN on strided per-sequence views; the diagnosis run says which call)
        seqs = [tuple(t[a:b].transpose(0, 1)[None].contiguous() for t in (q, k, v)) for a, b in zip(offs[:-1], offs[1:])]
        contenders["sdpa_cudnn_per_sequence"] = (flops_ragged, lambda: [cudnn(*s) for s in seqs])
        torch.cuda.synchronize()            # a fault so far is not the kernels'
        # correctness of the timed ragged call on a slice (last sequence, first and last head)
        try:
            o = contenders["varlen_ragged"][1]()
            torch.cuda.synchronize()
            rec["varlen_first_call"] = "ok"
            a, b = offs[-2], offs[-1]
            ref_o, _ = reference(q[a:b], k[a:b], v[a:b], [lens[-1]], [lens[-1]], causal, scale)
            rec["varlen_err_o"] = float((o[a:b].float() - ref_o).abs().max()) / max(1.0, float(ref_o.abs().max()))
        except Exception as e:  # noqa: BLE001
            rec["varlen_error"] = f"{type(e).__name__}: {e}"[:300]
            print(f"{name} first varlen call or its reference: {rec['varlen_error']}", flush=True)
        for cname, (flops, fn) in contenders.items():
            r = {}
            try:
                if args.once:       # diagnosis (CUDA_LAUNCH_BLOCKING=1): one call, a fault raises at its launch
                    fn()
                    torch.cuda.synchronize()
                    r = {"once": "ok"}
                else:
                    ms = _time_ms(fn)
                    torch.cuda.synchronize()
                    r = {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}
            except Exception as e:  # noqa: BLE001 - a peer that cannot run says so
                r = {"error": f"{type(e).__name__}: {e}"[:300]}
                print(f"{name} {cname}: {r['error']}", flush=True)
            rec["contenders"][cname] = r
            if "error" in r:
                break               # the context is likely lost: the contenders after this one would only fail
        c = rec["contenders"]
        if c.get("varlen_ragged", {}).get("tflops") and c.get("dense_same_config", {}).get("tflops"):
            rec["ragged_vs_dense_tflops"] = c["varlen_ragged"]["tflops"] / c["dense_same_config"]["tflops"]
        if c.get("varlen_ragged_twin", {}).get("tflops") and c.get("dense_same_config", {}).get("tflops"):
            rec["twin_ragged_vs_dense_tflops"] = c["varlen_ragged_twin"]["tflops"] / c["dense_same_config"]["tflops"]
        if c.get("varlen_equal", {}).get("ms") and c.get("dense_same_config", {}).get("ms"):
            rec["equal_vs_dense_time"] = c["dense_same_config"]["ms"] / c["varlen_equal"]["ms"]
        if c.get("varlen_ragged", {}).get("tflops") and c.get("sdpa_cudnn_dense", {}).get("tflops"):
            rec["ragged_vs_cudnn_dense_tflops"] = c["varlen_ragged"]["tflops"] / c["sdpa_cudnn_dense"]["tflops"]
        for peer in ("sdpa_cudnn_padded", "sdpa_cudnn_per_sequence"):
            if c.get("varlen_ragged", {}).get("ms") and c.get(peer, {}).get("ms"):
                rec[f"speedup_vs_{peer}"] = c[peer]["ms"] / c["varlen_ragged"]["ms"]
        doc["shapes"].append(rec)
        print(f"{name}: " + "  ".join(f"{n} {r['tflops']:.0f}" for n, r in c.items() if r.get("tflops"))
              + f"  ragged/dense {rec.get('ragged_vs_dense_tflops', float('nan')):.3f}"
              + f"  equal/dense {rec.get('equal_vs_dense_time', float('nan')):.3f}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


# fault bisection (run 3: the GQA causal kernel faulted on 8 equal sequences of 3255 tokens, 32/8 heads, after the
# ragged batch of the same heads passed): (kernel class, lens, Hq, Hkv), each call in its own process
PROBE_CASES = [
    ("gqa_d128_causal", [3255] * 8, 32, 8),      # run 3's fault
    ("gqa_d128_causal", [3255] * 8, 8, 2),
    ("gqa_d128_causal", [3255] * 1, 32, 8),
    ("gqa_d128_causal", [3256] * 8, 32, 8),
    ("gqa_d128_causal", [3200] * 8, 32, 8),
    ("gqa_d128_causal", [3255] * 8, 32, 32),
    ("gqa_d128_causal", [3255] * 4, 32, 8),
    ("gqa_d128_causal", [1356, 4918, 772, 2345, 1221, 4314, 3938, 4124], 32, 8),   # passed in run 3
    ("d128_causal", [3255] * 8, 32, 32),                                           # passed in run 3
    ("d128", _lengths(3, 64, 1, 512), 32, 32),                                     # run 2's short shape
    ("d128", [320] * 64, 32, 32),
]


def probe_one(args) -> int:
    """One varlen call of a PROBE_CASES entry, synchronized, then its error against the float32 reference."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels
    plan_dir = Path(args.plan)
    cls, lens, Hq, Hkv = PROBE_CASES[args.case]
    entry = json.loads((plan_dir / "plan.json").read_text())["classes"][cls]
    causal, D = entry["problem"]["causal"], entry["problem"]["head_dim"]
    q, k, v, cu_q, cu_k = packed_batch(lens, lens, Hq, Hkv, D, torch.bfloat16, seed=3)
    rec = {"case": args.case, "class": cls, "batch": len(lens), "lens": lens if len(lens) <= 8 else f"{len(lens)} seqs",
           "heads": [Hq, Hkv]}
    try:
        o, lse = AttentionKernels([plan_dir / entry["varlen"]]).flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max(lens), max(lens), causal=causal, return_lse=True)
        torch.cuda.synchronize()
        rec["call"] = "ok"
        b = len(lens) - 1
        a = sum(lens[:-1])
        ref_o, ref_l = reference(q[a:], k[a:], v[a:], lens[-1:], lens[-1:], causal, 1 / math.sqrt(D))
        rec.update(compare(o[a:], lse[:, a:], ref_o, ref_l, lens[-1]))
        rec["checked_sequence"] = b
    except Exception as e:  # noqa: BLE001 - the verdict
        rec["call"] = f"{type(e).__name__}: {e}"[:240]
    print(json.dumps({"probe": rec}), flush=True)
    return 0


def probe(args) -> int:
    """Every PROBE_CASES entry in its own process with CUDA_LAUNCH_BLOCKING=1; then compute-sanitizer memcheck on
    the first one that faults."""
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    results, first_fault = [], None
    for i in range(len(PROBE_CASES)):
        cmd = [sys.executable, __file__, "probe-one", args.plan, "--case", str(i)]
        try:
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                 timeout=60).stdout
        except subprocess.TimeoutExpired:
            out = '{"probe": {"case": %d, "call": "timeout (60 s)"}}' % i
        rec = next((json.loads(line)["probe"] for line in out.splitlines() if line.startswith('{"probe"')),
                   {"case": i, "call": "no result: " + out[-300:]})
        results.append(rec)
        print(json.dumps(rec), flush=True)
        if rec.get("call") != "ok" and first_fault is None:
            first_fault = i
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"probes": results}, indent=1) + "\n")     # kept if memcheck is cut short
    if first_fault is not None and args.sanitize:
        cmd = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "8", sys.executable, __file__, "probe-one",
               args.plan, "--case", str(first_fault)]
        try:
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.sanitize_timeout).stdout
        except subprocess.TimeoutExpired as e:
            out = (e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")) + "\n(memcheck timed out)"
        keep = [line for line in out.splitlines() if line.startswith("=========") or line.startswith('{"probe"')]
        print("\n".join(keep[:80]), flush=True)
        results.append({"memcheck_case": first_fault, "memcheck": keep[:80]})
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"probes": results}, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--out", default="out/varlen-plan")
    p = sub.add_parser("validate")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one kernel may take")
    p.add_argument("--deadline", type=float, default=90.0, help="no kernel starts after this many seconds")
    p.add_argument("--parallel", type=int, default=3, help="kernels validated at once")
    p = sub.add_parser("validate-one")
    p.add_argument("kernel")
    p.add_argument("--op-checks", action="store_true")
    p = sub.add_parser("sanitize-case")
    p.add_argument("kernel")
    p.add_argument("--long", action="store_true", help="add a 1500-token sequence")
    p = sub.add_parser("time")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--validated", help="validate's JSON: time only the varlen kernels that passed")
    p.add_argument("--deadline", type=float, default=60.0, help="no shape starts after this many seconds")
    p = sub.add_parser("time-shape")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--shape", required=True, choices=sorted(TIMING))
    p.add_argument("--validated")
    p.add_argument("--once", action="store_true", help="diagnosis: call each contender once, no timing")
    p = sub.add_parser("probe", help="fault bisection: PROBE_CASES, one process each, CUDA_LAUNCH_BLOCKING=1")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--sanitize", action="store_true", help="memcheck the first faulting case")
    p.add_argument("--sanitize-timeout", type=float, default=90.0)
    p = sub.add_parser("probe-one")
    p.add_argument("plan")
    p.add_argument("--case", type=int, required=True)
    args = ap.parse_args(argv)
    return {"plan": plan, "validate": validate, "validate-one": validate_one, "sanitize-case": sanitize_case,
            "time": time_plan, "time-shape": time_shape, "probe": probe, "probe-one": probe_one}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
