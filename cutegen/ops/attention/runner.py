"""Attention's GPU half: tensors, the float32 reference, the validation cases, the C ABI's refusal probes, the op
under ``torch.compile`` / a CUDA graph, the timer, and the peers ``cutegen validate --op attention`` and ``cutegen
bench --op attention`` run (``cutegen.run.ops``). ``bench/attention_bench.py`` uses the same functions.

Imports torch only inside functions: the CPU side (the plan's extra kernels, the peers' names) loads it without.
"""
from __future__ import annotations

import math
import os
import statistics
import time

def _torch():
    import torch
    return torch


def make_tensor(B, H, S, D, layout, dtype, seed, device="cuda"):
    """(B, H, S, D) logical, stored in ``layout`` order; values N(0, 1) (never zeros)."""
    torch = _torch()
    g = torch.Generator(device=device).manual_seed(seed)
    if layout == "bshd":
        return torch.randn(B, S, H, D, generator=g, device=device, dtype=torch.float32).to(dtype).transpose(1, 2)
    return torch.randn(B, H, S, D, generator=g, device=device, dtype=torch.float32).to(dtype)


def reference(q, k, v, causal, scale, batches=None, heads=None):
    """float32 O and LSE (natural log) of softmax(scale q k^T [top-left causal]) v, for the given batch and
    query-head indices (all by default); GQA by query head h -> KV head h // (Hq / Hkv), as SDPA."""
    torch = _torch()
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    batches = range(B) if batches is None else batches
    heads = range(Hq) if heads is None else heads
    outs, lses = [], []
    for b in batches:
        ob, lb = [], []
        for h in heads:
            qf = q[b, h].float()
            kf = k[b, h // G].float()
            vf = v[b, h // G].float()
            s = (qf @ kf.t()) * scale
            if causal:
                keep = torch.ones(Sq, Skv, dtype=torch.bool, device=q.device).tril()
                s = s.masked_fill(~keep, float("-inf"))
            lb.append(torch.logsumexp(s, -1))
            ob.append(torch.softmax(s, -1) @ vf)
        outs.append(torch.stack(ob))
        lses.append(torch.stack(lb))
    return torch.stack(outs), torch.stack(lses)


def compare(o, lse, ref_o, ref_lse, tol):
    """Max errors: O relative to max(1, max |ref|), LSE absolute."""
    torch = _torch()
    o = o.float()
    finite = bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all())
    scale = max(1.0, float(ref_o.abs().max()))
    err_o = float((o - ref_o).abs().max()) / scale
    err_lse = float((lse - ref_lse).abs().max())
    return {"err_o": err_o, "err_lse": err_lse, "finite": finite,
            "ok": finite and err_o <= tol and err_lse <= 2e-2}


def validation_cases(key):
    """(B, Hq, Hkv, Sq, Skv, layout, scale) per kernel key: ragged, unequal, batch, both layouts, scale;
    grouped kernels add GQA, MQA, group 1 and decode-like (packed) calls."""
    cases = [(1, 1, 1, 1, 1, "bhsd", None), (2, 3, 3, 13, 13, "bshd", None), (1, 2, 2, 127, 127, "bhsd", None),
             (2, 2, 2, 200, 333, "bshd", None), (1, 2, 2, 333, 200, "bhsd", None), (3, 2, 2, 128, 256, "bhsd", 0.3),
             (1, 3, 3, 1000, 1000, "bshd", None), (2, 2, 2, 64, 64, "bhsd", 0.05)]
    if key["grouped"]:
        cases += [(2, 8, 2, 200, 333, "bhsd", None), (2, 8, 1, 129, 257, "bhsd", None), (1, 8, 2, 300, 300, "bshd", None),
                  (3, 32, 8, 1, 1000, "bhsd", None), (2, 32, 8, 7, 777, "bhsd", None), (1, 16, 2, 16, 4096, "bshd", None),
                  (2, 4, 4, 100, 100, "bhsd", None)]
    return cases


def _abi_call(lib, q, k, v, o, lse, scale, D=None, workspace=None, ws_bytes=0, ptr_q=None):
    torch = _torch()
    B, Hq, Sq, Dq = q.shape
    stream = torch.cuda.current_stream().cuda_stream
    return lib.cutegen_attention(ptr_q if ptr_q is not None else q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                 o.data_ptr(), lse.data_ptr() if lse is not None else None,
                                 B, Hq, k.shape[1], Sq, k.shape[2], D if D is not None else Dq,
                                 *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
                                 float(scale), workspace, ws_bytes, stream)


def probes(lib, key):
    """The ABI's refusals: (name, status, rule expected) -> what came back."""
    torch = _torch()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D = key["head_dim"]
    out = []

    def probe(name, want_status, want_rule, status):
        msg = lib.cutegen_last_error().decode() if status else ""
        out.append({"probe": name, "status": status, "message": msg, "want_status": want_status, "want_rule": want_rule,
                    "ok": status == want_status and (want_rule is None or msg.startswith(want_rule))})

    q = make_tensor(2, 4, 64, D, "bhsd", dtype, 1)
    k = make_tensor(2, 4, 64, D, "bhsd", dtype, 2)
    v = make_tensor(2, 4, 64, D, "bhsd", dtype, 3)
    o = torch.empty_like(q)
    lse = torch.empty(2, 4, 64, device="cuda", dtype=torch.float32)
    s = 1 / math.sqrt(D)
    probe("misaligned Q base", 1, "E18", _abi_call(lib, q, k, v, o, lse, s, ptr_q=q.data_ptr() + q.element_size()))
    probe("head_dim + 8", 1, "ATTN-ABI-HEAD-DIM", _abi_call(lib, q, k, v, o, lse, s, D=D + 8))
    padded = torch.empty(2, 4, 64, D + 4, device="cuda", dtype=dtype)[..., :D]
    padded.copy_(q)
    probe("sequence stride D+4 elements", 1, "TMA-GMEM-STRIDE-16B", _abi_call(lib, padded, k, v, o, lse, s))
    probe("no LSE, no workspace", 2, "ATTN-ABI-WORKSPACE", _abi_call(lib, q, k, v, o, None, s))
    need = int(lib.cutegen_attention_workspace_size(2, 4, 64))
    ws = torch.empty(need, dtype=torch.uint8, device="cuda")
    o.zero_()
    st = _abi_call(lib, q, k, v, o, None, s, workspace=ws.data_ptr(), ws_bytes=need)
    torch.cuda.synchronize()
    ref_o, ref_l = reference(q, k, v, key["causal"], s)
    good = st == 0 and compare(o, ref_l, ref_o, ref_l, 0.02)["ok"]
    out.append({"probe": "no LSE, queried workspace", "status": st, "want_status": 0, "ok": bool(good),
                "workspace_bytes": need})
    k2, v2 = k[:, :2], v[:, :2]
    if key["grouped"]:
        qb = make_tensor(2, 4, 64, D, "bshd", dtype, 4)
        kb = make_tensor(2, 2, 64, D, "bshd", dtype, 5)
        vb = make_tensor(2, 2, 64, D, "bshd", dtype, 6)
        ob = torch.empty_like(qb)
        probe("GQA, BSHD, batch 2", 1, "ATTN-ABI-GQA-STRIDES", _abi_call(lib, qb, kb, vb, ob, lse, s))
    else:
        probe("GQA heads on an MHA kernel", 1, "ATTN-ABI-GQA-KERNEL", _abi_call(lib, q, k2.contiguous(), v2.contiguous(), o, lse, s))
    probe("heads_kv 3 of heads_q 4", 1, "ATTN-ABI-GQA-GROUPS",
          _abi_call(lib, q, k[:, :3].contiguous(), v[:, :3].contiguous(), o, lse, s))
    torch.cuda.synchronize()
    return out


def validate_kernel(kdir: str) -> dict:
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    lib, desc = load_library(kdir)
    key = desc["problem"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D = key["head_dim"]
    op = AttentionKernels([kdir])
    rec = {"kernel": kdir, "hash": desc["hash"], "key": key, "config": desc["config"], "cases": []}
    t0 = time.time()
    for i, (B, Hq, Hkv, Sq, Skv, layout, scale) in enumerate(validation_cases(key)):
        if not key["grouped"] and Hq != Hkv:
            continue
        q = make_tensor(B, Hq, Sq, D, layout, dtype, 10 * i + 1)
        k = make_tensor(B, Hkv, Skv, D, layout, dtype, 10 * i + 2)
        v = make_tensor(B, Hkv, Skv, D, layout, dtype, 10 * i + 3)
        s = 1 / math.sqrt(D) if scale is None else scale
        case = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Skv": Skv, "layout": layout, "scale": s}
        try:
            o, lse = torch.ops.cutegen.attention_fwd(q, k, v, op.pick(key["dtype"], D, key["causal"], Hq != Hkv), s)
            torch.cuda.synchronize()
            ref_o, ref_l = reference(q, k, v, key["causal"], s)
            case.update(compare(o, lse, ref_o, ref_l, 0.02))
        except Exception as e:  # noqa: BLE001 - a refusal or CUDA error is this case's result
            case.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:400]})
        rec["cases"].append(case)
    rec["probes"] = probes(lib, key)
    rec["ok"] = all(c["ok"] for c in rec["cases"]) and all(p["ok"] for p in rec["probes"])
    rec["seconds"] = round(time.time() - t0, 2)
    return rec


def compile_and_graph(kdir: str) -> dict:
    """The op under torch.compile(fullgraph) and replayed from a CUDA graph, both against eager."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    _, desc = load_library(kdir)
    key = desc["problem"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D = key["head_dim"]
    Hkv = 2 if key["grouped"] else 4
    op = AttentionKernels([kdir])
    q = make_tensor(2, 4, 256, D, "bhsd", dtype, 7)
    k = make_tensor(2, Hkv, 300, D, "bhsd", dtype, 8)
    v = make_tensor(2, Hkv, 300, D, "bhsd", dtype, 9)

    def f(q, k, v):
        return op(q, k, v, is_causal=key["causal"], enable_gqa=key["grouped"]) * 2.0

    out = {}
    eager = f(q, k, v)
    try:
        compiled = torch.compile(f, fullgraph=True)
        out["torch_compile"] = {"ok": bool(torch.equal(compiled(q, k, v), eager))}
    except Exception as e:  # noqa: BLE001
        out["torch_compile"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            f(q, k, v)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static = f(q, k, v)
        q.copy_(make_tensor(2, 4, 256, D, "bhsd", dtype, 17))
        g.replay()
        torch.cuda.synchronize()
        out["cuda_graph"] = {"ok": bool(torch.equal(static, f(q, k, v)))}
    except Exception as e:  # noqa: BLE001
        out["cuda_graph"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
    return out



def _unpacked(call):
    os.environ["CUTEGEN_ATTENTION_PACK_GQA"] = "0"
    try:
        return call()
    finally:
        del os.environ["CUTEGEN_ATTENTION_PACK_GQA"]


def _time_ms(fn, rounds=5, min_ms=60.0):
    return statistics.median(_time_rounds(fn, rounds, min_ms))


def _time_rounds(fn, rounds=5, min_ms=60.0):
    """Milliseconds per call in each of ``rounds`` rounds of back-to-back calls (CUDA events), each round about
    ``min_ms`` long."""
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
    return per




# --- the operation's runner (cutegen.run.ops: `cutegen validate --op attention`, `cutegen bench --op attention`) -----
RUN_FIELDS: tuple[str, ...] = ()       # every suite field of an attention case is a problem field
SLICE_TOLERANCE = 0.02                 # the bench's check of each contender's output (O, relative to max |ref|)
LIBRARY_PEERS = ("sdpa_cudnn", "sdpa_flash")


def peer_kernels(problem) -> dict:
    """The CUTLASS 88 example's own kernels for the head dim ("cutlass88", "cutlass88-2", ...): the example's
    fixed choices, rendered by the same template, are the peer a search has to beat."""
    from .config import EXAMPLE_CONFIGS, EXAMPLE_CONFIGS_FP8
    table = EXAMPLE_CONFIGS_FP8 if problem.dtype == "e4m3" else EXAMPLE_CONFIGS
    return {f"cutlass88{'' if i == 0 else f'-{i + 1}'}": c for i, c in enumerate(table.get(problem.head_dim, ()))}


def floor_bytes(problem, options=None) -> int:
    """Q, K and V read once and O written once (``AttentionProblem.bytes_min``)."""
    return problem.bytes_min


def validate(problem, kernel_dir) -> dict:
    """The kernel's cases (``validation_cases``: ragged and unequal lengths, batch, both layouts, GQA/MQA and
    decode-like packing for grouped kernels, a custom scale, the LSE) through the op against the float32
    reference, then the C ABI's refusals; the kernel's own class decides the cases, so ``problem`` only names it."""
    rec = validate_kernel(str(kernel_dir))
    errs = [c["err_o"] for c in rec["cases"] if "err_o" in c]
    return {"ok": rec["ok"], "cases": rec["cases"], "probes": rec["probes"],
            "max_rel_error": max(errs) if errs else None, "tolerance": 0.02}


def peer_calls(p, q, k, v) -> dict:
    """The library peers on the same tensors: SDPA with only its cuDNN backend, and with only its flash backend
    (``torch.nn.attention.sdpa_kernel``), the problem's mask, scale and GQA."""
    torch = _torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gqa = p.heads_q != p.heads_kv
    calls = {}
    for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=p.causal,
                                                                        scale=p.softmax_scale, enable_gqa=gqa)
        calls[name] = run
    return calls


def bench(problem, kernels: dict, options: dict) -> dict:
    """Every kernel (role -> directory) through the op, and SDPA's cuDNN and flash backends, on the same tensors at
    the problem's size; each checked first on a slice (last batch, first and last query heads) against the float32
    reference; CUDA events, the median of 5 rounds of back-to-back calls (``min_ms`` each, option)."""
    torch = _torch()
    from .torch_op import AttentionKernels
    p = problem
    min_ms = float(options.get("min_ms", 60.0))
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[p.dtype]
    q = make_tensor(p.batch, p.heads_q, p.seqlen_q, p.head_dim, p.layout, dtype, 1)
    k = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 2)
    v = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 3)
    gqa = p.heads_q != p.heads_kv
    scale = p.softmax_scale
    heads = sorted({0, p.heads_q - 1})
    ref_o, _ = reference(q, k, v, p.causal, scale, batches=[p.batch - 1], heads=heads)
    contenders = {}
    for role, kdir in kernels.items():
        op = AttentionKernels([kdir])
        contenders[role] = lambda op=op: op(q, k, v, is_causal=p.causal, scale=scale, enable_gqa=gqa)
    contenders.update(peer_calls(p, q, k, v))
    results = {}
    for name, fn in contenders.items():
        rec = {"method": f"CUDA events, median of 5 rounds of back-to-back calls, >= {min_ms:g} ms each"}
        try:
            o = fn()
            torch.cuda.synchronize()
            sub = o[p.batch - 1:p.batch, heads]
            err = float((sub.float() - ref_o).abs().max()) / max(1.0, float(ref_o.abs().max()))
            ok = bool(torch.isfinite(sub).all()) and err <= SLICE_TOLERANCE
            rec["verify"] = {"ok": ok, "rel_error": err, "slice": f"batch {p.batch - 1}, heads {heads}"}
            if not ok:
                rec.update(status="wrong", reason=f"error {err:.3g} against the float32 reference")
            else:
                times = _time_rounds(fn, 5, min_ms)
                rec.update(status="ok", times_ms=times, median_ms=statistics.median(times))
        except Exception as e:  # noqa: BLE001 - a peer that cannot run this shape says so
            rec.update(status="error", reason=f"{type(e).__name__}: {e}"[:300])
        results[name] = rec
        o = None
    q = k = v = contenders = None
    torch.cuda.empty_cache()
    return {"flops": p.flops, "bytes": floor_bytes(p), "results": results}


def sanitize_case(problem, kernel_dir) -> dict:
    """One small call through the C ABI (B 2, Hq 4, Sq 200, Skv 333, BHSD; GQA with 2 KV heads if the kernel is
    grouped; causal as the kernel is) against the float32 reference: what compute-sanitizer runs."""
    torch = _torch()
    from .torch_op import load_library
    lib, desc = load_library(str(kernel_dir))
    key = desc["problem"]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[key["dtype"]]
    D = key["head_dim"]
    Hkv = 2 if key["grouped"] else 4
    q = make_tensor(2, 4, 200, D, "bhsd", dtype, 1)
    k = make_tensor(2, Hkv, 333, D, "bhsd", dtype, 2)
    v = make_tensor(2, Hkv, 333, D, "bhsd", dtype, 3)
    o = torch.empty_like(q)
    lse = torch.empty(2, 4, 200, device="cuda", dtype=torch.float32)
    # the queried workspace: a split-KV kernel keeps its partials there (an unsplit one needs none with an LSE)
    need = int(lib.cutegen_attention_workspace_size(2, 4, 200))
    ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
    st = _abi_call(lib, q, k, v, o, lse, 1 / math.sqrt(D), workspace=ws.data_ptr(), ws_bytes=need)
    torch.cuda.synchronize()
    ref_o, ref_l = reference(q, k, v, key["causal"], 1 / math.sqrt(D))
    res = compare(o, lse, ref_o, ref_l, 0.02)
    return {"status": st, **res, "ok": st == 0 and res["ok"]}
