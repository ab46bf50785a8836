"""Split-KV ("flash-decoding") attention kernels (issue 25, decode-like calls): plan here, build, validate and time
on the H200 (bench/gpu_decode.sh runs it there).

  python bench/decode_bench.py plan [--out out/decode-plan]        # CPU: render the split kernels (+ the search's picks)
  python bench/decode_bench.py validate PLAN --json OUT.json       # GPU: every built kernel vs float32, one worker each
  python bench/decode_bench.py sanitize-case KERNEL_DIR            # GPU: one small ragged call (compute-sanitizer)
  python bench/decode_bench.py op-checks KERNEL_DIR                # GPU: torch.compile(fullgraph) and CUDA-graph replay
  python bench/decode_bench.py time PLAN --json OUT.json           # GPU: op vs SDPA cuDNN / flash, one process

``plan`` renders, per kernel class (bf16, grouped, no mask; head dims 128 and 64), the unsplit kernel the attention
search picks for decode today and split-KV kernels over a sweep of ``kv_splits`` and tiles, plus the search's own
pick per timed shape where the search prices splits (``cutegen.core.search``); each kernel once.

``validate`` runs each kernel through the PyTorch op (``cutegen::attention_fwd``) on decode-like calls: seqlen_q 1,
4 and 16; seqlen_kv 8192, 32768 and ragged ones (not a multiple of the KV tile or of the split count); GQA 32/8 and
64/8 and group 1; BSHD and BHSD; O and the LSE against a float32 reference; and the C ABI's refusals (workspace too
small, Q strides a split kernel cannot read as rows, misaligned base).

``time`` times every validated kernel through the op against SDPA's cuDNN and flash backends on the same tensors
(CUDA events, contenders interleaved per round, median), and reports TFLOP/s and the fraction of the HBM floor:
K and V read once (plus Q and O) at 4.8 TB/s over the measured time; then each contender's GPU time alone, its
calls replayed from a CUDA graph (``graph_us``), which leaves out the host path.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
H200_HBM_TBPS = 4.8

# Timed shapes: decode-like calls of the issue (B8, GQA 32/8 and 64/8, a few queries vs an 8k-32k KV cache).
SHAPES = {
    "b8_hq32_hkv8_q1_kv8192_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=128),
    "b8_hq32_hkv8_q4_kv8192_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=4, seqlen_kv=8192, head_dim=128),
    "b8_hq32_hkv8_q16_kv8192_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=16, seqlen_kv=8192, head_dim=128),
    "b8_hq32_hkv8_q1_kv32768_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=32768, head_dim=128),
    "b8_hq32_hkv8_q16_kv32768_d128": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=16, seqlen_kv=32768, head_dim=128),
    "b8_hq64_hkv8_q1_kv8192_d128": dict(batch=8, heads_q=64, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=128),
    "b8_hq64_hkv8_q16_kv8192_d128": dict(batch=8, heads_q=64, heads_kv=8, seqlen_q=16, seqlen_kv=8192, head_dim=128),
    "b8_hq32_hkv8_q1_kv8192_d64": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=64),
    "b8_hq32_hkv8_q16_kv32768_d64": dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=16, seqlen_kv=32768, head_dim=64),
    # few problems (8 CTAs unsplit) and many (256: the search offers no split, ATTN space offers_kv_splits)
    "b1_hq32_hkv8_q1_kv32768_d128": dict(batch=1, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=32768, head_dim=128),
    "b1_hq64_hkv8_q4_kv16384_d128": dict(batch=1, heads_q=64, heads_kv=8, seqlen_q=4, seqlen_kv=16384, head_dim=128),
    "b32_hq32_hkv8_q1_kv8192_d128": dict(batch=32, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=128),
}
# Kernels per head dim: (role, config fields). "unsplit" is the kernel the decode shapes ran on in H200 runs 1-2.
SWEEP = {
    128: [("unsplit", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5)),
          ("split4", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=4)),
          ("split8", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=8)),
          ("split16", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=16)),
          ("split32", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=32)),
          ("split8-kv64", dict(tile_q=128, tile_kv=64, schedule="ws_cooperative", stages_kv=8, kv_splits=8)),
          ("split8-pp", dict(tile_q=128, tile_kv=128, schedule="ws_pingpong", persistent=True,
                             loads_q_separately=True, stages_kv=4, kv_splits=8))],
    64: [("unsplit", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5)),
         ("split4", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=4)),
         ("split8", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=8))],
}
MAX_KERNELS = 16                    # one round of 16 nvcc jobs on the device

# --set decode2 (bench/gpu_decode2.sh): Llama-3.1-8B (Hq 32 / Hkv 8) and 70B (Hq 64 / Hkv 8) decode steps, one query
# per sequence, B1 and B8, KV 8k and 32k; plus head dim 64 and one 16-query call.
SHAPES2 = {
    f"{model}_b{b}_q1_kv{kv}": dict(batch=b, heads_q=hq, heads_kv=8, seqlen_q=1, seqlen_kv=kv, head_dim=128)
    for model, hq in (("llama8b", 32), ("llama70b", 64)) for b in (1, 8) for kv in (8192, 32768)
}
SHAPES2["b8_hq32_hkv8_q1_kv8192_d64"] = dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=64)
SHAPES2["llama8b_b8_q16_kv8192"] = dict(batch=8, heads_q=32, heads_kv=8, seqlen_q=16, seqlen_kv=8192, head_dim=128)
_WG1 = dict(tile_q=64, tile_kv=128, schedule="ws_cooperative", mma_warpgroups=1, stages_q=1)
# run 3's best split kernels (128-row tiles, two consumer warpgroups), and the one-consumer-warpgroup decode kernel
# (DecodeFmhaKernel: 64-row tiles) with one CTA per SM (5 K/V stages) or two (3 stages)
SWEEP2 = {
    128: [("split4", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=4)),
          ("split16", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=16)),
          ("split2", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=2)),
          ("wg1-split4", dict(_WG1, stages_kv=5, kv_splits=4)),
          ("wg1-split16", dict(_WG1, stages_kv=5, kv_splits=16)),
          ("wg1-bps2-split2", dict(_WG1, stages_kv=3, blocks_per_sm=2, kv_splits=2)),
          ("wg1-bps2-split4", dict(_WG1, stages_kv=3, blocks_per_sm=2, kv_splits=4)),
          ("wg1-bps2-split8", dict(_WG1, stages_kv=3, blocks_per_sm=2, kv_splits=8)),
          ("wg1-bps2-split16", dict(_WG1, stages_kv=3, blocks_per_sm=2, kv_splits=16)),
          ("wg1-bps2-split32", dict(_WG1, stages_kv=3, blocks_per_sm=2, kv_splits=32))],
    64: [("split2", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=2)),
         ("wg1-bps2-split4", dict(_WG1, stages_kv=5, blocks_per_sm=2, kv_splits=4)),
         ("wg1-bps2-split16", dict(_WG1, stages_kv=5, blocks_per_sm=2, kv_splits=16))],
}
# decode2 round 2: round 1's fastest kernels per shape class again (their C ABI now keeps the last call's launch),
# and more K/V bytes in flight per SM: 6 stages of 128 keys with one CTA per SM, 6 stages of 64 keys with two, 12 of
# 64 with one (round 1: the 5- and 3-stage kernels stream at 0.80 of the floor at B8 KV 8k, 0.68 at B1 KV 32k)
SWEEP2_R2 = {
    128: [("r1-b8", dict(_WG1, stages_kv=3, blocks_per_sm=2, kv_splits=4)),
          ("r1-b1", dict(_WG1, stages_kv=5, kv_splits=16)),
          ("r1-b8-wg2", dict(tile_q=128, tile_kv=128, schedule="ws_cooperative", stages_kv=5, kv_splits=2)),
          ("kv6-split2", dict(_WG1, stages_kv=6, kv_splits=2)),
          ("kv6-split16", dict(_WG1, stages_kv=6, kv_splits=16)),
          ("t64-kv6-bps2-split4", dict(_WG1, tile_kv=64, stages_kv=6, blocks_per_sm=2, kv_splits=4)),
          ("t64-kv6-bps2-split32", dict(_WG1, tile_kv=64, stages_kv=6, blocks_per_sm=2, kv_splits=32)),
          ("t64-kv12-split16", dict(_WG1, tile_kv=64, stages_kv=12, kv_splits=16)),
          ("t64-kv12-split2", dict(_WG1, tile_kv=64, stages_kv=12, kv_splits=2))],
    64: [("r1-b8", dict(_WG1, stages_kv=5, blocks_per_sm=2, kv_splits=4)),
         ("kv6-bps2-split2", dict(_WG1, stages_kv=6, blocks_per_sm=2, kv_splits=2))],
}
SETS = {"decode": (SHAPES, SWEEP), "decode2": (SHAPES2, SWEEP2), "decode2-r2": (SHAPES2, SWEEP2_R2)}


def _key_problem(head_dim):
    from cutegen.ops.attention.problem import AttentionProblem
    return AttentionProblem(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=head_dim,
                            layout="bhsd")


# --- plan (CPU) -------------------------------------------------------------------------------------------
def plan(args) -> int:
    from cutegen.ops.attention.config import AttentionConfig
    from cutegen.ops.attention.problem import AttentionProblem
    from cutegen.ops.attention.render import render
    out = Path(args.out)
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    kernels: dict[str, dict] = {}          # dir name -> {config, head_dim, roles}

    def add(head_dim, role, config):
        p = _key_problem(head_dim)
        r = render(p, config)
        name = f"d{head_dim}_{config.short_name()}_{r.kernel_hash[:8]}"
        if name not in kernels:
            r.write(out / "kernels" / name)
            kernels[name] = {"dir": f"kernels/{name}", "head_dim": head_dim, "config": config.to_dict(), "roles": []}
        if role not in kernels[name]["roles"]:
            kernels[name]["roles"].append(role)
        return name

    shapes, sweep = SETS[args.set]
    for head_dim, entries in sweep.items():
        for role, fields in entries:
            add(head_dim, role, AttentionConfig(**fields))
    picks = {}
    if not args.no_search:
        from cutegen.core.search import search
        for shape, fields in shapes.items():
            p = AttentionProblem(**fields, layout="bhsd")
            t0 = time.time()
            try:
                cfg = search(p, top_k=1).ranked[0].config
            except Exception as e:  # noqa: BLE001 - a plan without the search's pick still times the sweep
                print(f"search failed for {shape}: {type(e).__name__}: {e}")
                continue
            if len(kernels) >= MAX_KERNELS and not any(k["config"] == cfg.to_dict() and k["head_dim"] == p.head_dim
                                                       for k in kernels.values()):
                print(f"{shape}: the search's pick {cfg.short_name()} is not in the sweep and the plan is full")
                continue
            picks[shape] = {"dir": kernels[add(p.head_dim, "cutegen", cfg)]["dir"], "config": cfg.to_dict(),
                            "search_s": round(time.time() - t0, 3)}
            print(f"{shape}: search picks {cfg.short_name()} ({picks[shape]['search_s']} s)")
    doc = {"set": args.set, "shapes": shapes, "kernels": kernels, "search_picks": picks}
    (out / "plan.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    (out / "dirs.txt").write_text("".join(f"{out / k['dir']}\n" for k in kernels.values()))
    print(f"{len(kernels)} kernels in {out}")
    return 0


# --- GPU helpers ------------------------------------------------------------------------------------------
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


def reference(q, k, v, scale):
    """float32 O and LSE (natural log) of softmax(scale q k^T) v; GQA query head h reads KV head h // (Hq / Hkv)."""
    torch = _torch()
    B, Hq, Sq, D = q.shape
    G = Hq // k.shape[1]
    kf = k.float().repeat_interleave(G, dim=1)
    vf = v.float().repeat_interleave(G, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), kf) * scale
    return torch.softmax(s, -1) @ vf, torch.logsumexp(s, -1)


def compare(o, lse, ref_o, ref_lse, tol=0.02):
    torch = _torch()
    finite = bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all())
    scale = max(1.0, float(ref_o.abs().max()))
    err_o = float((o.float() - ref_o).abs().max()) / scale
    err_lse = float((lse - ref_lse).abs().max())
    return {"err_o": err_o, "err_lse": err_lse, "finite": finite, "ok": finite and err_o <= tol and err_lse <= 2e-2}


# (B, Hq, Hkv, Sq, Skv, layout, scale): Sq 1/4/16; Skv 8192, 32768 and ragged (not a multiple of the tile or of the
# split count: 8191, 1000, 333, 4097, 129, 1); GQA 32/8, 64/8, group 1, MQA; both layouts.
CASES = [
    (2, 32, 8, 1, 8192, "bhsd", None), (2, 32, 8, 4, 8192, "bhsd", None), (2, 32, 8, 16, 8192, "bhsd", None),
    (1, 32, 8, 1, 32768, "bhsd", None), (1, 32, 8, 16, 32768, "bhsd", None), (1, 64, 8, 1, 8192, "bhsd", None),
    (2, 64, 8, 16, 8192, "bhsd", None), (3, 32, 8, 1, 8191, "bhsd", None), (2, 32, 8, 4, 1000, "bhsd", 0.3),
    (2, 32, 8, 16, 4097, "bhsd", None), (1, 8, 2, 3, 333, "bhsd", None), (2, 8, 1, 1, 129, "bhsd", None),
    (2, 4, 4, 16, 5000, "bhsd", None), (1, 4, 4, 1, 1, "bhsd", None), (2, 32, 8, 1, 3000, "bshd", 0.05),
    (2, 32, 8, 4, 2049, "bshd", None), (1, 16, 2, 200, 700, "bhsd", None),
]


def _abi(lib, q, k, v, o, lse, scale, workspace=None, ws_bytes=0, ptr_q=None, D=None):
    torch = _torch()
    return lib.cutegen_attention(ptr_q if ptr_q is not None else q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                 lse.data_ptr() if lse is not None else None, q.shape[0], q.shape[1], k.shape[1],
                                 q.shape[2], k.shape[2], D or q.shape[3], *q.stride()[:3], *k.stride()[:3],
                                 *v.stride()[:3], *o.stride()[:3], float(scale), workspace, ws_bytes,
                                 torch.cuda.current_stream().cuda_stream)


def probes(lib, desc):
    """The split ABI's refusals and its workspace contract."""
    torch = _torch()
    dtype = torch.bfloat16 if desc["problem"]["dtype"] == "bf16" else torch.float16
    D = desc["problem"]["head_dim"]
    out = []

    def probe(name, want_status, want_rule, status):
        msg = lib.cutegen_last_error().decode() if status else ""
        out.append({"probe": name, "status": status, "message": msg[:300], "want_status": want_status,
                    "want_rule": want_rule, "ok": status == want_status and (want_rule is None or msg.startswith(want_rule))})

    q = make_tensor(2, 8, 4, D, "bhsd", dtype, 1)
    k = make_tensor(2, 2, 1000, D, "bhsd", dtype, 2)
    v = make_tensor(2, 2, 1000, D, "bhsd", dtype, 3)
    o = torch.empty_like(q)
    lse = torch.empty(2, 8, 4, device="cuda", dtype=torch.float32)
    s = 1 / math.sqrt(D)
    from cutegen.ops.attention import splitkv
    queried = int(lib.cutegen_attention_workspace_size(2, 8, 4))
    # this call (seqlen_kv 1000) runs min(kv_splits, KV tiles) splits and needs their partials exactly
    runs = splitkv.effective_splits(1000, desc["config"]["tile_kv"], desc["config"]["kv_splits"])
    need = splitkv.workspace_bytes(2, 8, 4, D, runs)
    out.append({"probe": "queried workspace covers the call", "queried": queried, "need": need,
                "ok": queried >= need and queried == splitkv.workspace_bytes(2, 8, 4, D, desc["config"]["kv_splits"])})
    ws = torch.empty(queried, dtype=torch.uint8, device="cuda")
    probe("no workspace", 2, "ATTN-ABI-WORKSPACE", _abi(lib, q, k, v, o, lse, s))
    probe("workspace 1 byte short", 2, "ATTN-ABI-WORKSPACE", _abi(lib, q, k, v, o, lse, s, ws.data_ptr(), need - 1))
    probe("misaligned Q base", 1, "E18", _abi(lib, q, k, v, o, lse, s, ws.data_ptr(), need,
                                              ptr_q=q.data_ptr() + q.element_size()))
    # seqlen_q 4, BSHD, batch 1 (no batch-stride rule): the group's heads are not seqlen_q rows apart
    qb = make_tensor(1, 8, 4, D, "bshd", dtype, 4)
    probe("GQA seqlen_q 4 BSHD Q", 1, "ATTN-ABI-SPLIT-PACK",
          _abi(lib, qb, k[:1], v[:1], o[:1], lse[:1], s, ws.data_ptr(), need))
    probe("head_dim + 8", 1, "ATTN-ABI-HEAD-DIM", _abi(lib, q, k, v, o, lse, s, ws.data_ptr(), need, D=D + 8))
    o.zero_()
    st = _abi(lib, q, k, v, o, None, s, ws.data_ptr(), need)     # no LSE pointer: O only, exact workspace
    torch.cuda.synchronize()
    ref_o, ref_l = reference(q, k, v, s)
    res = compare(o, ref_l, ref_o, ref_l)
    out.append({"probe": "no LSE, exact workspace", "status": st, "want_status": 0, "ok": st == 0 and res["ok"],
                "err_o": res["err_o"], "workspace_bytes": need})
    # the C ABI keeps the last call's launch (LaunchMemo): the same arguments again launch the kept Params (new K
    # values in the same memory must be read, not remembered); another scale, then another O, must rebuild them
    _abi(lib, q, k, v, o, lse, s, ws.data_ptr(), need)              # the launch the next call repeats
    for name, scale2, o2 in (("repeat call (kept launch)", s, o), ("repeat call, other scale", 0.3, o),
                             ("repeat call, other O", 0.3, torch.empty_like(q))):
        k.copy_(make_tensor(2, 2, 1000, D, "bhsd", dtype, len(out) + 40))
        o2.zero_()
        st = _abi(lib, q, k, v, o2, lse, scale2, ws.data_ptr(), need)
        torch.cuda.synchronize()
        ref_o, ref_l = reference(q, k, v, scale2)
        res = compare(o2, lse, ref_o, ref_l)
        out.append({"probe": name, "status": st, "want_status": 0, "ok": st == 0 and res["ok"], "err_o": res["err_o"],
                    "err_lse": res["err_lse"]})
    return out


def validate_kernel(kdir: str) -> dict:
    torch = _torch()
    from cutegen.ops.attention.torch_op import load_library
    lib, desc = load_library(kdir)
    key = desc["problem"]
    dtype = torch.bfloat16 if key["dtype"] == "bf16" else torch.float16
    D = key["head_dim"]
    rec = {"kernel": kdir, "hash": desc["hash"], "config": desc["config"], "cases": []}
    from cutegen.ops.attention.torch_op import AttentionKernels
    op = AttentionKernels([kdir])
    t0 = time.time()
    for i, (B, Hq, Hkv, Sq, Skv, layout, scale) in enumerate(CASES):
        q = make_tensor(B, Hq, Sq, D, layout, dtype, 10 * i + 1)
        k = make_tensor(B, Hkv, Skv, D, layout, dtype, 10 * i + 2)
        v = make_tensor(B, Hkv, Skv, D, layout, dtype, 10 * i + 3)
        s = 1 / math.sqrt(D) if scale is None else scale
        case = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Skv": Skv, "layout": layout, "scale": s}
        try:
            o, lse = torch.ops.cutegen.attention_fwd(q, k, v, str(Path(kdir) / "kernel.so"), s)
            torch.cuda.synchronize()
            ref_o, ref_l = reference(q, k, v, s)
            case.update(compare(o, lse, ref_o, ref_l))
            # the SDPA-style op's eager fast path: its first call (torch_op._run) and its second (the call plan)
            for which in ("op_first", "op_plan"):
                o2 = op(q, k, v, scale=s, enable_gqa=True)
                torch.cuda.synchronize()
                got = compare(o2, ref_l, ref_o, ref_l)
                case[which] = {"err_o": got["err_o"], "ok": got["ok"]}
                case["ok"] = case["ok"] and got["ok"]
        except Exception as e:  # noqa: BLE001 - a refusal or CUDA error is this case's result
            case.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:400]})
        rec["cases"].append(case)
    if int(desc["config"].get("kv_splits", 1)) > 1:
        rec["probes"] = probes(lib, desc)
    rec["cases_ok"] = all(c["ok"] for c in rec["cases"])
    rec["ok"] = rec["cases_ok"] and all(p["ok"] for p in rec.get("probes", []))
    rec["seconds"] = round(time.time() - t0, 2)
    return rec


def validate_worker(args) -> int:
    rec = validate_kernel(args.kernel)
    print("RESULT " + json.dumps(rec, sort_keys=True))
    return 0 if rec["ok"] else 1


def validate(args) -> int:
    """One worker process per kernel (a crash or hang costs that kernel only), ``--parallel`` at a time."""
    plan_doc = json.loads((Path(args.plan) / "plan.json").read_text())
    dirs = [Path(args.plan) / k["dir"] for k in plan_doc["kernels"].values()]
    dirs = [d for d in dirs if (d / "kernel.so").is_file()]
    deadline = time.time() + args.deadline
    results, running = [], []
    pending = list(dirs)
    while pending or running:
        while pending and len(running) < args.parallel and time.time() < deadline:
            d = pending.pop(0)
            proc = subprocess.Popen([sys.executable, __file__, "validate-worker", str(d)], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            running.append((d, proc, time.time()))
        if pending and time.time() >= deadline and not running:
            results += [{"kernel": str(d), "verdict": "skipped (deadline)"} for d in pending]
            pending = []
        for item in list(running):
            d, proc, started = item
            if proc.poll() is None and time.time() - started < args.timeout:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                rec = {"kernel": str(d), "verdict": "hang", "seconds": args.timeout}
            else:
                text = proc.stdout.read()
                line = next((l for l in text.splitlines() if l.startswith("RESULT ")), None)
                if line is None:
                    rec = {"kernel": str(d), "verdict": "crash", "tail": text[-1500:]}
                else:
                    rec = json.loads(line[len("RESULT "):])
                    rec["verdict"] = "pass" if rec["ok"] else "fail"
            running.remove(item)
            results.append(rec)
            bad = [c for c in rec.get("cases", []) + rec.get("probes", []) if not c.get("ok")]
            print(f"{rec['verdict']}: {Path(d).name}" + (f"  first failure: {json.dumps(bad[0])[:400]}" if bad else ""),
                  flush=True)
        time.sleep(0.2)
    Path(args.json).write_text(json.dumps({"results": results}, indent=1, sort_keys=True) + "\n")
    return 0


def sanitize_case(args) -> int:
    """One small ragged call (B2, GQA 8/2, Sq 3, Skv 1000: the last split's last tile is partial) for memcheck."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import load_library
    lib, desc = load_library(args.kernel)
    D = desc["problem"]["head_dim"]
    dtype = torch.bfloat16 if desc["problem"]["dtype"] == "bf16" else torch.float16
    q = make_tensor(2, 8, 3, D, "bhsd", dtype, 1)
    k = make_tensor(2, 2, 1000, D, "bhsd", dtype, 2)
    v = make_tensor(2, 2, 1000, D, "bhsd", dtype, 3)
    o = torch.empty_like(q)
    lse = torch.empty(2, 8, 3, device="cuda", dtype=torch.float32)
    need = int(lib.cutegen_attention_workspace_size(2, 8, 3))
    ws = torch.empty(need, dtype=torch.uint8, device="cuda")
    st = _abi(lib, q, k, v, o, lse, 1 / math.sqrt(D), ws.data_ptr(), need)
    torch.cuda.synchronize()
    ref_o, ref_l = reference(q, k, v, 1 / math.sqrt(D))
    res = compare(o, lse, ref_o, ref_l)
    print(json.dumps({"kernel": args.kernel, "status": st, **res}))
    return 0 if st == 0 and res["ok"] else 1


def op_checks(args) -> int:
    """The op under torch.compile(fullgraph=True) and replayed from a CUDA graph, against eager."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import AttentionKernels, load_library
    _, desc = load_library(args.kernel)
    D = desc["problem"]["head_dim"]
    dtype = torch.bfloat16 if desc["problem"]["dtype"] == "bf16" else torch.float16
    op = AttentionKernels([args.kernel])
    q = make_tensor(2, 32, 1, D, "bhsd", dtype, 7)
    k = make_tensor(2, 8, 4000, D, "bhsd", dtype, 8)
    v = make_tensor(2, 8, 4000, D, "bhsd", dtype, 9)

    def f(q, k, v):
        return op(q, k, v, enable_gqa=True) * 2.0

    out = {"kernel": args.kernel}
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
        q.copy_(make_tensor(2, 32, 1, D, "bhsd", dtype, 17))
        k.copy_(make_tensor(2, 8, 4000, D, "bhsd", dtype, 18))
        g.replay()
        torch.cuda.synchronize()
        fresh = f(q, k, v)
        out["cuda_graph"] = {"ok": bool(torch.equal(static, fresh)) and not bool(torch.equal(static, eager))}
    except Exception as e:  # noqa: BLE001
        out["cuda_graph"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
    print("op-checks " + json.dumps(out, sort_keys=True))
    return 0 if out["torch_compile"]["ok"] and out["cuda_graph"]["ok"] else 1


def _time_round(fns, reps):
    """One round: each contender's mean ms over ``reps`` back-to-back calls, contenders one after the other."""
    torch = _torch()
    out = {}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name, fn in fns.items():
        start.record()
        for _ in range(reps[name]):
            fn()
        end.record()
        end.synchronize()
        out[name] = start.elapsed_time(end) / reps[name]
    return out


def _graph_us(fn, calls=20, replays=5):
    """Microseconds per call of ``fn`` replayed from a CUDA graph of ``calls`` calls (median of ``replays``): the
    GPU time without the host path (the op's Python and C ABI, the TMA descriptor encodes)."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = []
    for _ in range(replays):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) * 1e3 / calls)
    del g
    return statistics.median(per)


def _host_us(fn, calls=20, rounds=5):
    """Host microseconds per call: ``calls`` calls issued back to back (their launches queue; the GPU runs them
    after), wall clock, best of ``rounds``; the GPU drained between rounds."""
    torch = _torch()
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return {"host_us": best * 1e6}


def _bare_call(lib_path, q, k, v, scale):
    """The kernel's C ABI call with every argument worked out beforehand (O, workspace allocated once): the host
    cost of the C side alone (checks, TMA descriptor encodes, two launches) plus ctypes."""
    torch = _torch()
    from cutegen.ops.attention.torch_op import _kernel
    kern = _kernel(lib_path)
    B, Hq, Sq, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device)
    ws_bytes = int(kern.workspace_size(B, Hq, Sq))
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=q.device)
    stream = torch.cuda.current_stream().cuda_stream
    args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), B, Hq, k.shape[1], Sq, k.shape[2], D,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], float(scale), ws.data_ptr(), ws_bytes,
            stream)
    call = kern.call

    def run():
        if call(*args) != 0:
            raise RuntimeError(kern.lib.cutegen_last_error().decode())
        return o, lse, ws                     # keeps the buffers alive while the closure lives
    return run


def time_plan(args) -> int:
    torch = _torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from cutegen.ops.attention.problem import AttentionProblem
    from cutegen.ops.attention.torch_op import AttentionKernels
    plan_dir = Path(args.plan)
    plan_doc = json.loads((plan_dir / "plan.json").read_text())
    valid = set()
    for path in args.validated or []:
        if Path(path).is_file():
            # timed: every validation case right (an ABI-refusal probe that failed is reported, not a wrong O)
            valid |= {Path(r["kernel"]).name for r in json.loads(Path(path).read_text())["results"]
                      if r.get("cases_ok")}
    deadline = time.time() + args.deadline
    dev = torch.cuda.get_device_properties(0)
    doc = {"device": dev.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "hbm_floor": "bytes_min (Q, K, V read once, O written once) / 4.8 TB/s; hbm_fraction = floor / measured",
           "shapes": []}
    for shape, fields in plan_doc["shapes"].items():
        if time.time() > deadline:
            doc["shapes"].append({"name": shape, "skipped": "deadline"})
            continue
        p = AttentionProblem(**fields, layout="bhsd")
        dtype = torch.bfloat16
        q = make_tensor(p.batch, p.heads_q, p.seqlen_q, p.head_dim, "bhsd", dtype, 1)
        k = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, "bhsd", dtype, 2)
        v = make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, "bhsd", dtype, 3)
        scale = p.softmax_scale
        ref_o, _ = reference(q[-1:], k[-1:], v[-1:], scale)
        floor_us = p.bytes_min / (H200_HBM_TBPS * 1e6)
        row = {"name": shape, "problem": fields, "flops": p.flops, "hbm_floor_us": floor_us, "contenders": {}}
        fns = {}
        for name, entry in plan_doc["kernels"].items():
            if entry["head_dim"] != p.head_dim or not (plan_dir / entry["dir"] / "kernel.so").is_file():
                continue
            if name not in valid:
                row["contenders"][name] = {"skipped": "not validated"}
                continue
            op = AttentionKernels([plan_dir / entry["dir"]])
            fns[name] = lambda op=op: op(q, k, v, scale=scale, enable_gqa=True)
            row["contenders"][name] = {"roles": entry["roles"], "config": entry["config"]}
        for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            def run(backend=backend):
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
            fns[name] = run
            row["contenders"][name] = {}
        usable, reps = {}, {}
        for name, fn in fns.items():
            rec = row["contenders"][name]
            try:
                o = fn()
                torch.cuda.synchronize()
                err = float((o[-1:].float() - ref_o).abs().max()) / max(1.0, float(ref_o.abs().max()))
                rec["err_o"] = err
                rec["ok"] = bool(torch.isfinite(o).all()) and err <= 0.02
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(3):
                    fn()
                e.record()
                e.synchronize()
                one = max(s.elapsed_time(e) / 3, 1e-3)
                reps[name] = max(5, min(400, int(25.0 / one)))
                usable[name] = fn
            except Exception as ex:  # noqa: BLE001 - a peer that cannot run this shape says so
                rec.update({"ok": False, "error": f"{type(ex).__name__}: {ex}"[:300]})
        rounds = [_time_round(usable, reps) for _ in range(args.rounds)]
        for name in usable:
            ms = statistics.median(r[name] for r in rounds)
            row["contenders"][name].update({"ms": ms, "us": ms * 1e3, "tflops": p.flops / (ms * 1e-3) / 1e12,
                                            "hbm_fraction": floor_us / (ms * 1e3)})
        for name, fn in usable.items():        # host time per call: issue 20 calls back to back (the GPU queue absorbs them)
            row["contenders"][name].update(_host_us(fn))
        for name, entry in plan_doc["kernels"].items():
            if name in usable:                 # the same kernel through the custom op and through the bare C ABI
                lib_path = str(plan_dir / entry["dir"] / "kernel.so")
                row["contenders"][name]["host_custom_op_us"] = _host_us(
                    lambda: torch.ops.cutegen.attention_fwd(q, k, v, lib_path, scale))["host_us"]
                row["contenders"][name]["host_abi_us"] = _host_us(_bare_call(lib_path, q, k, v, scale))["host_us"]
        for name, fn in usable.items():        # GPU time alone: the same calls replayed from a CUDA graph
            try:
                us = _graph_us(fn)
                row["contenders"][name].update({"graph_us": us, "graph_hbm_fraction": floor_us / us})
            except Exception as ex:  # noqa: BLE001 - a contender that cannot be captured says so
                row["contenders"][name]["graph_error"] = f"{type(ex).__name__}: {ex}"[:200]
        base = row["contenders"].get("sdpa_cudnn", {}).get("ms")
        for r in row["contenders"].values():
            if base and r.get("ms"):
                r["vs_cudnn"] = base / r["ms"]
        ours = {n: r for n, r in row["contenders"].items() if not n.startswith("sdpa") and r.get("ms") and r.get("ok")}
        if ours:
            row["best_cutegen"] = min(ours, key=lambda n: ours[n]["ms"])
        pick = plan_doc.get("search_picks", {}).get(shape)
        if pick:
            row["search_pick"] = Path(pick["dir"]).name
        doc["shapes"].append(row)
        cells = "  ".join(f"{n}: {r['us']:.1f} us {r['hbm_fraction']:.2f} (graph {r.get('graph_us', float('nan')):.1f} us "
                          f"{r.get('graph_hbm_fraction', float('nan')):.2f}; host {r.get('host_us', float('nan')):.1f} us)"
                          for n, r in row["contenders"].items() if r.get("ms"))
        print(f"{shape} (floor {floor_us:.1f} us): {cells}", flush=True)
        q = k = v = o = fns = usable = None
        torch.cuda.empty_cache()
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")   # each shape: a kill keeps the rest
    Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


STUB_C = r"""
#include <stdint.h>
#include <stddef.h>
static const char* desc = "{\"hash\":\"stub\",\"problem\":{\"op\":\"attention\",\"dtype\":\"bf16\",\"head_dim\":128,"
    "\"causal\":false,\"varlen\":false,\"grouped\":true},\"config\":{\"kv_splits\":16}}";
int cutegen_attention(const void* q, const void* k, const void* v, void* o, float* lse, int64_t b, int64_t hq,
    int64_t hkv, int64_t sq, int64_t skv, int64_t d, int64_t s1, int64_t s2, int64_t s3, int64_t s4, int64_t s5,
    int64_t s6, int64_t s7, int64_t s8, int64_t s9, int64_t s10, int64_t s11, int64_t s12, float scale, void* ws,
    size_t wsb, void* stream) { return 0; }
size_t cutegen_attention_workspace_size(int64_t b, int64_t h, int64_t s) { return (size_t)(b * h * s * 16 * 129 * 4 + 512); }
const char* cutegen_describe(void) { return desc; }
const char* cutegen_last_error(void) { return ""; }
"""


def host_cost_cpu(args) -> int:
    """The op's Python host cost per call on this machine, without a GPU: a stand-in library (same C signature,
    returns 0, compiled with cc) and CPU tensors of a decode call (B1, Hq 32 / Hkv 8, Sq 1, Skv 4096, D 128; the
    CUDA-only calls of the hot path answered by stubs). Times: the custom op (``torch.ops.cutegen.attention_fwd``),
    the SDPA-style op through it (``eager_fast_path`` off), the op's eager fast path, and the bare ctypes call."""
    import tempfile
    import timeit
    from unittest import mock
    torch = _torch()
    from cutegen.ops.attention import torch_op
    tmp = Path(tempfile.mkdtemp(prefix="cutegen-stub-"))
    (tmp / "stub.c").write_text(STUB_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(tmp / "kernel.so"), str(tmp / "stub.c")], check=True)
    lib_path = str(tmp / "kernel.so")
    q = torch.randn(1, 32, 1, 128).to(torch.bfloat16)
    k = torch.randn(1, 8, 4096, 128).to(torch.bfloat16)
    v = torch.randn(1, 8, 4096, 128).to(torch.bfloat16)
    op = torch_op.AttentionKernels([lib_path])
    kern = torch_op._kernel(lib_path)
    fixed = (q.data_ptr(), k.data_ptr(), v.data_ptr(), q.data_ptr(), None, 1, 32, 8, 1, 4096, 128,
             *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *q.stride()[:3], 0.088, None, 0, 0)
    n = args.calls
    out = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "torch": torch.__version__, "calls": n}
    with mock.patch.object(torch._C, "_cuda_getCurrentRawStream", lambda i: 0, create=True), \
            mock.patch.object(torch._C, "_cuda_getDevice", lambda: 0, create=True), \
            mock.patch.object(torch.cuda, "current_device", lambda: 0), \
            mock.patch.object(torch.cuda, "is_current_stream_capturing", lambda: False):
        cases = {
            "custom_op": lambda: torch.ops.cutegen.attention_fwd(q, k, v, lib_path, 0.088),
            "op_through_custom_op": None,
            "op_fast_path": lambda: op(q, k, v, enable_gqa=True),
            "ctypes_call": lambda: kern.call(*fixed),
        }

        def through():
            op.eager_fast_path = False
            try:
                return op(q, k, v, enable_gqa=True)
            finally:
                op.eager_fast_path = True
        cases["op_through_custom_op"] = through
        for name, fn in cases.items():
            fn()
            best = min(timeit.repeat(fn, number=n, repeat=5)) / n
            out[name + "_us"] = round(best * 1e6, 2)
            print(f"{name}: {best * 1e6:.1f} us per call", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def summarize(args) -> int:
    """A markdown table of a GPU run's results.json (or time.json): per shape the HBM floor, the best validated
    cutegen kernel by GPU time (graph replay) and by end-to-end time through the op, SDPA cuDNN and flash, the
    fractions of the floor and the ratios to cuDNN, and the host microseconds per call."""
    doc = json.loads(Path(args.results).read_text())
    doc = doc.get("time", doc)
    nan = float("nan")
    print("| shape | floor us | best kernel (graph) | graph us | floor frac | cuDNN graph us (frac) | vs cuDNN (graph) | "
          "best e2e kernel | e2e us | cuDNN e2e us | vs cuDNN (e2e) | host us: op / custom op / C ABI / cuDNN |")
    print("|" + "---|" * 12)
    for row in doc.get("shapes", []):
        if "contenders" not in row:
            print(f"| {row.get('name')} | skipped: {row.get('skipped')} |")
            continue
        c = row["contenders"]
        ours = {n: r for n, r in c.items() if not n.startswith("sdpa") and r.get("ok") and r.get("graph_us")}
        cudnn = c.get("sdpa_cudnn", {})
        floor = row["hbm_floor_us"]
        if not ours:
            print(f"| {row['name']} | {floor:.1f} | none validated |")
            continue
        g = min(ours, key=lambda n: ours[n]["graph_us"])
        e = min(ours, key=lambda n: ours[n].get("us", nan))
        cg, ce = cudnn.get("graph_us", nan), cudnn.get("us", nan)
        r = ours[g]
        print(f"| {row['name']} | {floor:.1f} | {g.split('_', 1)[1].rsplit('_', 1)[0]} | {r['graph_us']:.1f} | "
              f"{floor / r['graph_us']:.2f} | {cg:.1f} ({floor / cg:.2f}) | {cg / r['graph_us']:.2f}x | "
              f"{e.split('_', 1)[1].rsplit('_', 1)[0]} | {ours[e]['us']:.1f} | {ce:.1f} | {ce / ours[e]['us']:.2f}x | "
              f"{ours[e].get('host_us', nan):.1f} / {ours[e].get('host_custom_op_us', nan):.1f} / "
              f"{ours[e].get('host_abi_us', nan):.1f} / {cudnn.get('host_us', nan):.1f} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="render the sweep and the search's picks (CPU)")
    p.add_argument("--out", default="out/decode-plan")
    p.add_argument("--no-search", action="store_true", help="render the sweep only")
    p.add_argument("--set", choices=sorted(SETS), default="decode",
                   help="decode: H200 runs 1-3's shapes and sweep; decode2: Llama-8B/70B decode steps and the "
                        "one-consumer-warpgroup kernels (bench/gpu_decode2.sh round 1); decode2-r2: round 2")
    p = sub.add_parser("validate", help="every built kernel against float32 (GPU)")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--parallel", type=int, default=3)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per kernel before it counts as a hang")
    p.add_argument("--deadline", type=float, default=100.0, help="no kernel starts after this many seconds")
    p = sub.add_parser("validate-worker")
    p.add_argument("kernel")
    for name in ("sanitize-case", "op-checks"):
        p = sub.add_parser(name)
        p.add_argument("kernel")
    p = sub.add_parser("time", help="op vs SDPA cuDNN/flash (GPU)")
    p.add_argument("plan")
    p.add_argument("--json", required=True)
    p.add_argument("--validated", nargs="*")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--deadline", type=float, default=60.0)
    p = sub.add_parser("summarize", help="a markdown table of a GPU run's results.json")
    p.add_argument("results")
    p = sub.add_parser("host-cost-cpu", help="the op's Python host cost per call, no GPU (a stand-in library)")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json")
    args = ap.parse_args(argv)
    return {"plan": plan, "validate": validate, "validate-worker": validate_worker, "sanitize-case": sanitize_case,
            "op-checks": op_checks, "time": time_plan,
            "host-cost-cpu": host_cost_cpu, "summarize": summarize}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
