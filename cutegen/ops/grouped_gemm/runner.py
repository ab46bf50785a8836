"""Grouped GEMM's GPU half: operands, the float32 per-group reference, the ragged validation cases into a
sentinel-filled output, the C ABI's refusal probes, the timers, the floor, and the peers (``torch._grouped_mm``, a
loop of ``torch.matmul``, padded ``torch.bmm``) that ``cutegen validate --op grouped_gemm`` and ``cutegen bench --op
grouped_gemm`` run (``cutegen.run.ops``). ``bench/grouped_moe.py`` uses the same functions.

Imports torch only inside functions.
"""
from __future__ import annotations

import math

HBM_BYTES_PER_S = 4.8e12              # H200 datasheet
PEAK_FLOPS = {"bf16": 989e12, "e4m3": 1979e12}


def _torch():
    import torch
    return torch


def floor_seconds(p, sizes) -> float:
    used = sum(1 for m in sizes if m)
    rows = sum(sizes)
    eb = 2 if p.dtype == "bf16" else 1
    bytes_ = used * p.n * p.k * eb + rows * p.k * eb + rows * p.n * 2
    return max(bytes_ / HBM_BYTES_PER_S, 2 * rows * p.n * p.k / PEAK_FLOPS[p.dtype])


DEVICE = "cuda"     # tests run the validator on the CPU with a stand-in launch


def make_operands(p, sizes, seed: int, device: str | None = None, extra_rows: int = 0):
    """X (offs: (T, K), T = sum(sizes) + extra_rows no group owns; masked: (E, max_m, K)), W (E, N, K),
    the sizes (int32: cumulative ends or counts) and the scales (e4m3); random, never zeros."""
    torch = _torch()
    device = device or DEVICE
    g = torch.Generator(device=device).manual_seed(seed)
    e = p.groups
    if p.layout == "offs":
        x = torch.randn(sum(sizes) + extra_rows, p.k, device=device, generator=g)
        sz = torch.tensor(list(_cumsum(sizes)), dtype=torch.int32, device=device)
    else:
        x = torch.randn(e, p.tokens, p.k, device=device, generator=g)
        sz = torch.tensor(list(sizes), dtype=torch.int32, device=device)
    w = torch.randn(e, p.n, p.k, device=device, generator=g) / math.sqrt(p.k)
    if p.scale == "block128":      # a float per row and 128 of K for X, per 128 x 128 block of each W_i
        kb, nb = -(-p.k // 128), -(-p.n // 128)
        sx = torch.rand(*x.shape[:-1], kb, device=device, generator=g) + 0.5
        sw = torch.rand(e, nb, kb, device=device, generator=g) + 0.5
        return x.to(torch.float8_e4m3fn), (w * 8).to(torch.float8_e4m3fn), sz, sx, sw
    if p.dtype == "e4m3":
        sx = torch.tensor([0.5], device=device)
        sw = torch.rand(e, device=device, generator=g) + 0.5
        return x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), sz, sx, sw
    return x.to(torch.bfloat16), w.to(torch.bfloat16), sz, None, None


def _cumsum(sizes):
    total = 0
    for m in sizes:
        total += m
        yield total


def dequantized(p, x, w, sx, sw):
    """X and W in float32 with block scales applied (block128); otherwise as they are."""
    xf, wf = x.float(), w.float()
    if p.scale == "block128":
        xf = xf * sx.repeat_interleave(128, dim=-1)[..., :p.k]
        wf = wf * sw.repeat_interleave(128, dim=1).repeat_interleave(128, dim=2)[:, :p.n, :p.k]
    return xf, wf


def reference(p, x, w, sizes, sx, sw):
    """float32 per-group matmul of the same (already quantized) inputs; (rows, N) for offs (the groups'
    rows in order), (E, max_m, N) for masked with rows past the counts zero."""
    torch = _torch()
    if p.scale == "block128":
        x, w = dequantized(p, x, w, sx, sw)
        sx = sw = None
    if p.layout == "offs":
        out = torch.zeros(x.shape[0], p.n, dtype=torch.float32, device=x.device)
        start = 0
        for i, m in enumerate(sizes):
            if m:
                r = x[start:start + m].float() @ w[i].float().T
                out[start:start + m] = r * (sx[0] * sw[i] if sx is not None else 1.0)
            start += m
        return out
    out = torch.zeros(p.groups, p.tokens, p.n, dtype=torch.float32, device=x.device)
    for i, m in enumerate(sizes):
        if m:
            out[i, :m] = (x[i, :m].float() @ w[i].float().T) * (sx[0] * sw[i] if sx is not None else 1.0)
    return out


def rel_error(got, ref) -> float:
    torch = _torch()
    num = torch.linalg.vector_norm((got.float() - ref).flatten()).item()
    den = torch.linalg.vector_norm(ref.flatten()).item()
    return num / den if den else num


def valid_rows_mask(p, sizes, shape, device):
    torch = _torch()
    if p.layout == "offs":
        mask = torch.zeros(shape[0], dtype=torch.bool, device=device)
        mask[:sum(sizes)] = True
        return mask
    mask = torch.zeros(p.groups, p.tokens, dtype=torch.bool, device=device)
    for i, m in enumerate(sizes):
        mask[i, :m] = True
    return mask



def validation_problem(cls_problem, config: dict):
    """A small problem of the kernel's class whose N and K are no multiples of the tile."""
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem
    k = 208 if cls_problem.dtype == "e4m3" else 200        # 16-byte rows, not a multiple of tile_k
    tokens = 160 if cls_problem.layout == "masked" else 600
    return GroupedGemmProblem(8, 264, k, tokens, layout=cls_problem.layout, dtype=cls_problem.dtype,
                              scale=cls_problem.scale)


def validate_kernel(torch_op, handle: int, p, config: dict, tol: float, seed: int) -> dict:
    """Every ragged case through the C ABI into a sentinel-filled output."""
    from cutegen.ops.grouped_gemm.validate import ragged_cases
    torch = _torch()
    k = torch_op.kernel(handle)
    token_tile = config["tile_n"] if config["swap_ab"] else config["tile_m"]
    total = 600 if p.layout == "offs" else 8 * 100
    cases = ragged_cases(p.groups, token_tile, total)
    out = {}
    sentinel = 7.0
    for name, sizes in cases.items():
        if p.layout == "masked":
            sizes = [min(m, p.tokens) for m in sizes]
        # offs: 24 trailing rows no group owns must stay as they were
        x, w, sz, sx, sw = make_operands(p, sizes, seed, extra_rows=24 if p.layout == "offs" else 0)
        shape = (x.shape[0], p.n) if p.layout == "offs" else (p.groups, p.tokens, p.n)
        d = torch.full(shape, sentinel, dtype=torch.bfloat16, device=x.device)
        status, msg = torch_op.launch(k, x, w.transpose(-2, -1), d, sz, sx, sw)
        if status != 0:
            out[name] = {"ok": False, "status": status, "error": msg, "sizes": sizes}
            continue
        if d.is_cuda:
            torch.cuda.synchronize()
        ref = reference(p, x, w, sizes, sx, sw)
        mask = valid_rows_mask(p, sizes, d.shape, d.device)
        err = rel_error(d[mask], ref[mask]) if sum(sizes) else 0.0
        untouched = bool((d[~mask] == sentinel).all().item()) if (~mask).any() else True
        finite = bool(torch.isfinite(d[mask].float()).all().item())
        out[name] = {"ok": err <= tol and untouched and finite, "rel_error": err, "untouched_outside": untouched,
                     "finite": finite, "sizes": sizes}
    return out


def probes(torch_op, handle: int, p) -> dict:
    """Calls the C ABI must refuse, each with its rule ID (and a status the ABI documents)."""
    torch = _torch()
    k = torch_op.kernel(handle)
    sizes = [16] * p.groups
    x, w, sz, sx, sw = make_operands(p, sizes, 5)
    d = torch.empty((x.shape[0], p.n) if p.layout == "offs" else (p.groups, p.tokens, p.n),
                    dtype=torch.bfloat16, device=x.device)
    out = {}

    def probe(name, want_status, want_rule, **kw):
        status, msg = torch_op.launch(k, kw.get("a", x), kw.get("b", w.transpose(-2, -1)), kw.get("d", d), sz,
                                      sx, sw, workspace_shortfall=kw.get("short", 0))
        out[name] = {"status": status, "message": msg,
                     "agreed": status == want_status and (want_rule is None or msg.startswith(want_rule))}

    probe("workspace_one_byte_short", 2, None, short=1)
    # a base one element off 16 bytes: the tokens start at element 1 (K - 8 columns keep rows 16-byte multiples)
    off = 16 // x.element_size()
    if p.layout == "offs":
        xs = x.view(-1)[1:1 + (x.shape[0]) * (p.k - off)].view(x.shape[0], p.k - off)
        ws = w[:, :, :p.k - off]
        probe("misaligned_x_base", 1, "GROUPED-ABI-PTR-ALIGN", a=xs, b=ws.transpose(-2, -1))
        # K whose rows are not a multiple of 16 bytes
        probe("k_rows_not_16_bytes", 1, "GROUPED-ABI-ROW-ALIGN", a=x[:, :p.k - 1], b=w[:, :, :p.k - 1].transpose(-2, -1))
    status = k.lib.cutegen_grouped_workspace_size(2000)
    out["workspace_size_2000_groups_is_0"] = {"status": int(status), "agreed": status == 0}
    return out


def time_fn(fn, *, min_ms: float = 25.0, warmup: int = 2, max_iters: int = 200) -> float:
    """Mean milliseconds per call of ``fn`` (CUDA events around back-to-back calls)."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    iters = int(min(max_iters, max(5, min_ms / one)))
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters


def graph_time(fn, out_bytes: int = 0) -> float:
    """Mean milliseconds per call replayed from a CUDA graph (no host overhead): each captured call keeps
    its own output in the graph's pool, so the calls per graph are bounded by ~4 GB of outputs."""
    torch = _torch()
    iters = max(3, min(20, int(4e9 // max(1, out_bytes))))
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters):
            fn()
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    g.replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters



def sizes_for(p, fill) -> list[int]:
    if p.layout == "masked":
        return [fill if fill is not None else p.tokens] * p.groups if p.distribution == "uniform" else \
            [min(p.tokens, m) for m in p.group_sizes]
    return list(p.group_sizes)




# --- the operation's runner (cutegen.run.ops: `cutegen validate --op grouped_gemm`, `cutegen bench --op grouped_gemm`)
RUN_FIELDS: tuple[str, ...] = ("fill",)    # masked cases: rows filled per expert (a run option, not the problem's)


def peer_kernels(problem) -> dict:
    """None: the peers are libraries (``torch._grouped_mm``, a loop of ``torch.matmul``, padded ``torch.bmm``)."""
    return {}


def flops(problem, options=None) -> int:
    """Useful FLOPs of the run: 2 x rows x N x K over the group sizes it draws (a masked case's ``fill`` rows)."""
    return 2 * sum(sizes_for(problem, (options or {}).get("fill"))) * problem.n * problem.k


def floor_bytes(problem, options=None) -> int:
    """Every used expert's weights, the tokens and the output, once (the run's group sizes)."""
    sizes = sizes_for(problem, (options or {}).get("fill"))
    eb = 2 if problem.dtype == "bf16" else 1
    rows = sum(sizes)
    return sum(1 for m in sizes if m) * problem.n * problem.k * eb + rows * problem.k * eb + rows * problem.n * 2


def _manifest_config(kernel_dir) -> dict:
    import json
    from pathlib import Path
    return json.loads((Path(kernel_dir) / "manifest.json").read_text())["config"]


def validate(problem, kernel_dir) -> dict:
    """The kernel's ragged cases (empty groups, 1-token groups, sizes off the tile, all in one group, very uneven) on
    a small problem of its class whose N and K are no multiples of the tile, through the C ABI into a sentinel-filled
    output, against the float32 per-group reference; then the ABI's refusal probes."""
    from pathlib import Path

    from ...core import registry
    from . import torch_op
    config = _manifest_config(kernel_dir)
    handle = torch_op.load(Path(kernel_dir) / "kernel.so")
    p = validation_problem(problem, config)
    tol = registry.tolerance(p)
    cases = validate_kernel(torch_op, handle, p, config, tol, seed=3)
    refusals = probes(torch_op, handle, p)
    case_list = [{"case": n, **c} for n, c in cases.items()]
    probe_list = [{"probe": n, "ok": bool(r.get("agreed")), **r} for n, r in refusals.items()]
    errs = [c["rel_error"] for c in case_list if "rel_error" in c]
    return {"ok": all(c["ok"] for c in case_list) and all(x["ok"] for x in probe_list), "cases": case_list,
            "probes": probe_list, "max_rel_error": max(errs) if errs else None, "tolerance": tol}


def sanitize_case(problem, kernel_dir) -> dict:
    """The kernel's ragged cases (no probes): what compute-sanitizer runs (with PYTORCH_NO_CUDA_MEMORY_CACHING=1 each
    tensor is its own allocation, so an access past one is caught)."""
    from pathlib import Path

    from ...core import registry
    from . import torch_op
    config = _manifest_config(kernel_dir)
    handle = torch_op.load(Path(kernel_dir) / "kernel.so")
    p = validation_problem(problem, config)
    cases = validate_kernel(torch_op, handle, p, config, registry.tolerance(p), seed=4)
    return {"ok": all(c["ok"] for c in cases.values()),
            "cases": {n: c.get("rel_error", c.get("error")) for n, c in cases.items()}}


def bench(problem, kernels: dict, options: dict) -> dict:
    """Every kernel (role -> directory) through the op and the peers on the same operands at the problem's size
    and expected group sizes (``fill`` for masked cases), each checked once against the float32 per-group reference;
    the mean of back-to-back calls between CUDA events (``time_fn``)."""
    torch = _torch()
    from pathlib import Path

    from ...core import registry
    from . import torch_op
    p = problem
    sizes = sizes_for(p, options.get("fill"))
    rows = sum(sizes)
    x, w, sz, sx, sw = make_operands(p, sizes, 1)
    b = w.transpose(-2, -1)
    ref = reference(p, x, w, sizes, sx, sw)
    tol = registry.tolerance(p)
    mask = valid_rows_mask(p, sizes, (x.shape[0], p.n), x.device)
    method = "CUDA events around back-to-back calls (>= 25 ms), mean"
    results = {}
    for role, kdir in kernels.items():
        rec = {"method": method}
        try:
            handle = torch_op.load(Path(kdir) / "kernel.so")
            if p.layout == "offs":
                fn = lambda handle=handle: torch_op.grouped_mm(x, b, sz, handle, sx, sw)  # noqa: E731
            else:
                fn = lambda handle=handle: torch_op.grouped_mm_masked(x, b, sz, handle, sx, sw)  # noqa: E731
            got = fn()
            torch.cuda.synchronize()
            err = rel_error(got[mask], ref[mask]) if rows else 0.0
            rec["verify"] = {"ok": err <= tol, "rel_error": err, "tolerance": tol}
            if err <= tol:
                ms = time_fn(fn)
                rec.update(status="ok", median_ms=ms, times_ms=[ms], graph_ms=graph_time(fn, got.numel() * 2))
            else:
                rec.update(status="wrong", reason=f"relative error {err:.3g} > {tol}")
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            rec.update(status="error", reason=f"{type(e).__name__}: {e}"[:300])
        results[role] = rec
    for name, fn in peer_calls(p, x, w, sz, sw, sizes).items():
        rec = {"method": method, "verify": {"ok": True, "note": "a library peer, timed on the same operands"}}
        try:
            ms = time_fn(fn)
            rec.update(status="ok", median_ms=ms, times_ms=[ms])
        except Exception as e:  # noqa: BLE001
            rec.update(status="error", reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
        results[name] = rec
    torch.cuda.empty_cache()
    return {"flops": flops(p, options), "bytes": floor_bytes(p, options), "rows": rows,
            "floor_ms": floor_seconds(p, sizes) * 1e3, "results": results}


def peer_calls(p, x, w, sz, sw, sizes) -> dict:
    """The peers on the case's operands: ``torch._grouped_mm`` (offs form; masked rows compacted into it), a loop of
    ``torch.matmul`` over the non-empty groups, ``torch.bmm`` on the groups padded to the largest (when it fits in
    8 GiB), and ``torch._scaled_grouped_mm`` for e4m3 with per-tensor scales."""
    torch = _torch()
    rows = sum(sizes)
    xb = x if p.dtype == "bf16" else x.float().to(torch.bfloat16)
    wb = w if p.dtype == "bf16" else w.float().to(torch.bfloat16)      # timing peers: the values do not matter
    bb = wb.transpose(-2, -1)
    offs_host = list(_cumsum(sizes))
    if p.layout == "offs":
        xo, szo = xb, sz
    else:
        xo = torch.cat([xb[i, :m] for i, m in enumerate(sizes)]) if rows else xb[0, :0]
        szo = torch.tensor(offs_host, dtype=torch.int32, device=x.device)
    peers = {"torch_grouped_mm": lambda: torch._grouped_mm(xo, bb, offs=szo)}
    starts = [0] + offs_host[:-1]
    nonempty = [(i, s, m) for i, (s, m) in enumerate(zip(starts, sizes)) if m]
    peers["matmul_loop"] = lambda: [torch.matmul(xo[s:s + m], wb[i].T) for i, s, m in nonempty]
    mmax = max(sizes)
    if mmax and p.groups * mmax * (p.k + p.n) * 2 < 8 * 2**30:
        if p.layout == "masked":
            xpad = xb
        else:
            xpad = torch.zeros(p.groups, mmax, p.k, dtype=torch.bfloat16, device=x.device)
            for i, s, m in nonempty:
                xpad[i, :m] = xo[s:s + m]
        peers["padded_bmm"] = lambda: torch.bmm(xpad, bb)
    if p.scale == "tensor" and hasattr(torch, "_scaled_grouped_mm") and p.layout == "offs":
        sa_row = torch.full((x.shape[0],), 0.5, device=x.device)
        sb_row = sw[:, None].expand(p.groups, p.n).contiguous()
        peers["torch_scaled_grouped_mm"] = lambda: torch._scaled_grouped_mm(
            x, w.transpose(-2, -1), sa_row, sb_row, offs=sz, out_dtype=torch.bfloat16)
    return peers
