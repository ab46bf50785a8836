"""GPU half of bench/gpu_pack_moe.sh: validate and time a built pack's MoE op (torch.ops.cutegen.grouped_mm and
grouped_mm_masked) against a float32 reference and torch._grouped_mm, in one process.

    python3 bench/gpu_pack_moe.py PACK_DIR EXTENSION.so OUT_JSON [--budget-s 150]

Needs only torch (no cutegen import: the GPU machine has no egglog). For every [[moe]] layer of pack.json:
  1. dispatch: torch.ops.cutegen.grouped_explain names the kernel pack.json's segments give each token count
     (the sampled ones, and one on each side of every segment boundary);
  2. validate against a float32 reference per group, with empty groups, 1-token groups, everything in one expert,
     uneven (Zipf s = 1.6) and uniform routing, token counts off the tile sizes; rows past offs[-1] (offs) and
     past each count (masked) are not checked (not written, as torch._grouped_mm); offs layers are also compared
     with torch._grouped_mm on the same inputs (bf16 vs bf16);
  3. a CUDA graph captured once and replayed with new group sizes written into the same offs/counts tensor;
  4. torch.compile(fullgraph=True) of a function calling the op, against eager;
  5. time the op and torch._grouped_mm (offs; masked: torch.bmm over the full capacity) at the sampled token
     counts, interleaved, CUDA events, median of 15 after 3 warm-up calls; the floor from pack.json.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import time

import torch

TOL = 2e-2          # bf16 output of a float32 accumulation: max |err| / max |ref| of the group's rows
SKEW = 1.6          # cutegen.ops.grouped_gemm.problem.SKEW_EXPONENT


def load_op(pack_dir: str, so: str):
    name = json.load(open(os.path.join(pack_dir, "pack.json")))["name"]
    spec = importlib.util.spec_from_file_location("pack_torch", os.path.join(pack_dir, "torch", f"{name}_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load(so)


def split(total: int, fractions: list[float]) -> list[int]:
    """cutegen.ops.grouped_gemm.problem.split_tokens: largest remainder, ties to the lower index."""
    raw = [total * f for f in fractions]
    sizes = [math.floor(r) for r in raw]
    rest = total - sum(sizes)
    for i in sorted(range(len(raw)), key=lambda i: (-(raw[i] - sizes[i]), i))[:rest]:
        sizes[i] += 1
    return sizes


def fractions(routing, e: int) -> list[float]:
    if routing == "uniform":
        return [1.0 / e] * e
    if routing == "skewed":
        w = [1.0 / (i + 1) ** SKEW for i in range(e)]
        return [x / sum(w) for x in w]
    if routing == "worst":
        return [1.0] + [0.0] * (e - 1)
    return list(routing)


def cases(total: int, e: int) -> dict[str, list[int]]:
    """Group sizes summing to ``total``: uniform, skewed, all in the last expert, and one with empty groups
    and 1-token groups (every third expert empty, every third from the second gets 1 token, the rest share)."""
    out = {"uniform": split(total, fractions("uniform", e)), "skewed": split(total, fractions("skewed", e)),
           "one_expert": [0] * (e - 1) + [total]}
    sizes = [0] * e
    ones = [i for i in range(e) if i % 3 == 1]
    left = total
    for i in ones:
        if left > 0:
            sizes[i], left = 1, left - 1
    rest = [i for i in range(e) if i % 3 == 2] or [e - 1]
    for j, i in enumerate(rest):
        sizes[i] += left // len(rest) + (1 if j < left % len(rest) else 0)
    out["empty_and_ones"] = sizes
    return out


def expected_kernel(layer: dict, tokens: int) -> str:
    k = layer["segments"][0]["kernel"]
    for s in layer["segments"]:
        if s["tokens_first"] <= tokens:
            k = s["kernel"]
    return k


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    if ref.numel() == 0:
        return 0.0
    return float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


def reference_offs(x, w, sizes):
    """float32 per group, and the rows that are defined (below offs[-1])."""
    outs, start = [], 0
    for i, m in enumerate(sizes):
        outs.append(x[start:start + m].float() @ w[i].float().t())
        start += m
    return torch.cat(outs, 0), start


def time_us(fn, iters=15, warm=3) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(ts)


def validate_layer(ops, layer, w, gen, info, fail, t_end) -> None:
    """Dispatch, validation and a CUDA graph of one layer."""
    name, e, k, layout = layer["name"], layer["experts"], layer["k"], layer["layout"]
    masked, b = layout == "masked", w.transpose(-2, -1)
    samples = [s["tokens"] for s in layer["samples"]]
    # 1. dispatch: the explain string names the kernel the segments give
    probe = sorted(set(samples) | {s["tokens_first"] for s in layer["segments"]} |
                   {max(1, s["tokens_first"] - 1) for s in layer["segments"]})
    for t in probe:
        a = torch.empty((e, t, k) if masked else (t, k), device="cuda", dtype=torch.bfloat16)
        got = ops.grouped_explain(a, b, masked)
        want = expected_kernel(layer, t)
        info["dispatch"].append({"tokens": t, "kernel": got.split(":")[0], "expected": want})
        if not got.startswith(want + ":"):
            fail(f"{name}: tokens {t} dispatched to {got!r}, pack.json says {want}")
    # 2. validation against float32 (and torch._grouped_mm for offs)
    totals = sorted({1, 2, 7, 100, 333, 1000} | {t for t in samples if t in (64, 4096)} | {max(samples)})
    for t in totals:
        if time.time() > t_end - 100:
            fail(f"{name}: validation stopped at tokens {t} (budget)")
            break
        if masked:
            x = torch.randn(e, t, k, device="cuda", generator=gen).to(torch.bfloat16)
            for label, counts in (("full", [t] * e),
                                  ("empty_and_ones", [0 if i % 3 == 0 else (1 if i % 3 == 1 else t) for i in range(e)]),
                                  ("uneven", [min(t, c) for c in split(e * t, fractions("skewed", e))])):
                cnt = torch.tensor(counts, device="cuda", dtype=torch.int32)
                out = ops.grouped_mm_masked(x, b, cnt)
                err = max((rel_err(out[i, :c], x[i, :c].float() @ w[i].float().t()) for i, c in enumerate(counts) if c),
                          default=0.0)
                info["validated"] += 1
                info["max_rel_err"] = max(info["max_rel_err"], err)
                if not err <= TOL:
                    fail(f"{name}: masked capacity {t} {label}: rel err {err:.3g}")
        else:
            x = torch.randn(t, k, device="cuda", generator=gen).to(torch.bfloat16)
            for label, sizes in cases(t, e).items():
                offs = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
                out = ops.grouped_mm(x, b, offs)
                ref, rows = reference_offs(x, w, sizes)
                err = rel_err(out[:rows], ref)
                peer = torch._grouped_mm(x, b, offs=offs)
                vs = rel_err(out[:rows], peer[:rows].float())
                info["validated"] += 1
                info["max_rel_err"] = max(info["max_rel_err"], err)
                info["max_rel_vs_torch"] = max(info["max_rel_vs_torch"], vs)
                if not err <= TOL or not vs <= TOL:
                    fail(f"{name}: tokens {t} {label}: rel err {err:.3g}, vs torch._grouped_mm {vs:.3g}")
    # 3. CUDA graph: captured once, replayed with new group sizes written into the same tensor
    t = min(64, max(samples)) if masked else 256
    try:
        if masked:
            x = torch.randn(e, t, k, device="cuda", generator=gen).to(torch.bfloat16)
            sizes_t = torch.full((e,), t, device="cuda", dtype=torch.int32)
            call = lambda: ops.grouped_mm_masked(x, b, sizes_t)  # noqa: E731
        else:
            x = torch.randn(t, k, device="cuda", generator=gen).to(torch.bfloat16)
            sizes_t = torch.tensor(cases(t, e)["uniform"], device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
            call = lambda: ops.grouped_mm(x, b, sizes_t)  # noqa: E731
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            call()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = call()
        worst = 0.0
        for label in ("skewed", "empty_and_ones", "one_expert"):
            if masked:
                counts = {"skewed": [min(t, c) for c in split(e * t // 2, fractions("skewed", e))],
                          "empty_and_ones": [0 if i % 3 == 0 else (1 if i % 3 == 1 else t) for i in range(e)],
                          "one_expert": [0] * (e - 1) + [t]}[label]
                sizes_t.copy_(torch.tensor(counts, device="cuda", dtype=torch.int32))
                g.replay()
                err = max((rel_err(static_out[i, :c], x[i, :c].float() @ w[i].float().t())
                           for i, c in enumerate(counts) if c), default=0.0)
            else:
                sizes = cases(t, e)[label]
                sizes_t.copy_(torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32))
                g.replay()
                ref, rows = reference_offs(x, w, sizes)
                err = rel_err(static_out[:rows], ref)
            worst = max(worst, err)
        torch.cuda.synchronize()
        info["graph"] = {"tokens": t, "replays": 3, "max_rel_err": worst, "ok": worst <= TOL}
        if worst > TOL:
            fail(f"{name}: CUDA graph replay with new group sizes: rel err {worst:.3g}")
    except Exception as ex:  # noqa: BLE001 - recorded, the run goes on
        fail(f"{name}: CUDA graph: {type(ex).__name__}: {str(ex).splitlines()[0][:300]}")


def compile_layer(ops, layer, w, gen, fail) -> dict:
    """torch.compile(fullgraph=True) of a function calling the op, against eager."""
    name, e, k = layer["name"], layer["experts"], layer["k"]
    b = w.transpose(-2, -1)
    try:
        torch._dynamo.reset()
        if layer["layout"] == "masked":
            f = torch.compile(lambda x, b, c: torch.ops.cutegen.grouped_mm_masked(x, b, c) * 2, fullgraph=True)
            x = torch.randn(e, 32, k, device="cuda", generator=gen).to(torch.bfloat16)
            c = torch.tensor([(7 * i) % 33 for i in range(e)], device="cuda", dtype=torch.int32)
            got, want = f(x, b, c), ops.grouped_mm_masked(x, b, c) * 2
            same = all(torch.equal(got[i, :int(c[i])], want[i, :int(c[i])]) for i in range(e))
        else:
            f = torch.compile(lambda x, b, o: torch.ops.cutegen.grouped_mm(x, b, o) * 2, fullgraph=True)
            x = torch.randn(300, k, device="cuda", generator=gen).to(torch.bfloat16)
            o = torch.tensor(cases(300, e)["skewed"], device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
            same = torch.equal(f(x, b, o), ops.grouped_mm(x, b, o) * 2)
        if not same:
            fail(f"{name}: torch.compile result differs from eager")
        return {"layer": name, "fullgraph": True, "equal_to_eager": bool(same)}
    except Exception as ex:  # noqa: BLE001
        fail(f"{name}: torch.compile: {type(ex).__name__}: {str(ex).splitlines()[0][:300]}")
        return {"layer": name, "error": str(ex).splitlines()[0][:300]}


def time_layer(ops, layer, w, gen, res, fail, t_end) -> None:
    """The op and its peer at the layer's sampled token counts, on the layer's routing."""
    name, e, k, routing = layer["name"], layer["experts"], layer["k"], layer["routing"]
    masked, b = layer["layout"] == "masked", w.transpose(-2, -1)
    for s in layer["samples"]:
        t = s["tokens"]
        if time.time() > t_end - 5:
            fail(f"{name}: timing stopped before tokens {t} (budget)")
            return
        if masked:
            x = torch.randn(e, t, k, device="cuda", generator=gen).to(torch.bfloat16)
            cnt = torch.tensor([min(t, c) for c in split(e * t, fractions(routing, e))], device="cuda", dtype=torch.int32)
            ours = time_us(lambda: ops.grouped_mm_masked(x, b, cnt))
            peer_name, peer = "torch.bmm (full capacity)", time_us(lambda: torch.bmm(x, b))
        else:
            x = torch.randn(t, k, device="cuda", generator=gen).to(torch.bfloat16)
            offs = torch.tensor(split(t, fractions(routing, e)), device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
            ours = time_us(lambda: ops.grouped_mm(x, b, offs))
            peer_name, peer = "torch._grouped_mm", time_us(lambda: torch._grouped_mm(x, b, offs=offs))
        row = {"layer": name, "tokens": t, "kernel": s["kernel"], "op_us": round(ours, 2), "peer": peer_name,
               "peer_us": round(peer, 2), "speedup": round(peer / ours, 4), "predicted_us": s["time_us"],
               "floor_us_target": s["floor_us"], "floor_fraction": round(s["floor_us"] / ours, 4)}
        res["timing"].append(row)
        print(f"{name} tokens {t}: {s['kernel']} {ours:.1f} us vs {peer_name} {peer:.1f} us ({peer / ours:.3f}x); "
              f"predicted {s['time_us']:.1f}, floor fraction {s['floor_us'] / ours:.3f}", flush=True)


def main(argv: list[str]) -> int:
    pack_dir, so, out_json = argv[:3]
    budget = float(argv[argv.index("--budget-s") + 1]) if "--budget-s" in argv else 150.0
    t_end = time.time() + budget
    meta = json.load(open(os.path.join(pack_dir, "pack.json")))
    ops = load_op(pack_dir, so)
    gen = torch.Generator(device="cuda").manual_seed(2026)
    dev = torch.cuda.get_device_properties(0)
    res = {"device": dev.name, "torch": torch.__version__, "pack": meta["name"], "target": meta["target"]["kind"],
           "layers": [], "failures": [], "compile": [], "timing": []}
    fails = res["failures"]

    def fail(what: str) -> None:
        print("FAIL", what, flush=True)
        fails.append(what)

    def write() -> None:
        offs_rows = [r for r in res["timing"] if r["peer"] == "torch._grouped_mm"]
        if offs_rows:
            res["geomean_vs_torch_grouped_mm"] = round(
                math.exp(sum(math.log(r["speedup"]) for r in offs_rows) / len(offs_rows)), 4)
        res["ok"] = not fails
        os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1)

    layers = []
    for layer in meta["moe"]["layers"]:
        if layer["dtype"] != "bf16":
            res["layers"].append({"name": layer["name"], "skipped": f"dtype {layer['dtype']} (this script runs bf16)"})
            continue
        w = (torch.randn(layer["experts"], layer["n"], layer["k"], device="cuda", generator=gen) * 0.05).to(torch.bfloat16)
        layers.append((layer, w))
    # correctness first (dispatch, validation, graph) for every layer, then torch.compile, then timing
    for layer, w in layers:
        info = {"name": layer["name"], "layout": layer["layout"], "dispatch": [], "validated": 0, "max_rel_err": 0.0,
                "max_rel_vs_torch": 0.0}
        res["layers"].append(info)
        validate_layer(ops, layer, w, gen, info, fail, t_end)
        print(f"{layer['name']}: {info['validated']} cases, max rel err {info['max_rel_err']:.3g}, vs torch "
              f"{info['max_rel_vs_torch']:.3g}; graph {info.get('graph')}", flush=True)
        write()
    for layout in ("offs", "masked"):
        first = next(((L, w) for L, w in layers if L["layout"] == layout), None)
        if first is not None and time.time() < t_end - 45:
            res["compile"].append(compile_layer(ops, *first, gen, fail))
            print("compile:", res["compile"][-1], flush=True)
    write()
    for layer, w in layers:
        time_layer(ops, layer, w, gen, res, fail, t_end)
        write()
    print(f"gpu_pack_moe: {len(fails)} failures; geomean vs torch._grouped_mm "
          f"{res.get('geomean_vs_torch_grouped_mm')}; wrote {out_json}", flush=True)
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
