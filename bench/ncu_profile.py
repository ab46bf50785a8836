#!/usr/bin/env python3
"""Where the time goes: Nsight Compute on the grouped GEMM and attention targets that miss (issues 25, 26).

    python bench/ncu_profile.py plan --out out/profile-plan           # here: search + render the picks
    python bench/ncu_profile.py workload PLAN --set peers|cutegen      # GPU, under ncu: one call per target
             [--profile] [--time] --manifest M.json --deadline S
    python bench/ncu_profile.py summarize --manifest M.json... --csv C.csv... --out DIR   # the tables

``plan`` searches the grouped cases of bench/moe.toml that miss the floor target (GROUPED_CASES) and the two
attention shapes that miss cuDNN (ATTN_SHAPES) with ``cutegen.core.search``, and renders the search's pick of
each (and, for attention, the CUTLASS 88 example's own first kernel for the head dim) into
``<out>/kernels/<dir>``; ``plan.json`` lists the targets.

``workload`` (GPU) runs one set of targets:
  * ``peers``: ``torch._grouped_mm`` on every grouped case, SDPA's cuDNN backend on every attention shape,
    and ``torch.matmul`` bf16 at 8192^3 and at DeepSeek-V3-like expert sizes (the practical dense ceiling);
  * ``cutegen``: the grouped picks through the op, the attention pick and the 88 example's kernel.
Each target's tensors are made and the call warmed up outside the profiler's range; then, between
``cudaProfilerStart`` and ``cudaProfilerStop`` (ncu ``--profile-from-start off``), a marker kernel
(``torch.cuda._sleep``: ATen's ``spin_kernel``) and exactly one call of the target: ncu profiles that one
launch (and the op's small prep kernel), nothing else. The markers cut ncu's kernel list into targets in
``summarize``; the manifest lists the targets in marker order. ``--time`` times each target with CUDA events
(median of rounds of back-to-back calls) instead: run it outside ncu.

``summarize`` joins the manifests with ncu's raw CSV pages (``ncu --import R --csv --page raw --print-units
base``) and writes ``profile.json`` and ``profile.md``: per target its main kernel (the longest in its range)
with the duration, TFLOP/s, fraction of the floor, SM clock, SM and tensor-pipe utilization, DRAM throughput
and bytes, L2 hit rate, achieved occupancy, registers, grid and the top warp stall reasons, and a one-word
limiter read from them.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

# the grouped cases below the floor target in H200 run 2 (NOTES.md "Grouped GEMM on the H200, run 2"), and
# Mixtral w1 (0.98x the loop of torch.matmul)
GROUPED_CASES = ("mixtral_w1_prefill_uniform", "dsv3_gate_up_prefill_uniform", "dsv3_gate_up_prefill_skewed",
                 "dsv3_down_prefill_uniform", "qwen3_gate_up_prefill_uniform", "qwen3_down_prefill_skewed",
                 "gptoss_gate_up_prefill_skewed", "qwen3_down_decode_skewed")
# grouped kernels timed (CUDA events, not profiled) beside the picks on every grouped case, for the search to
# learn from: 256-row tiles (a uniform 256-row group in one M tile, so each expert's weights are read once),
# the same with a 1x2 cluster (the X tile multicast to the CTA pair along N), 64- and 128-row ping-pong tiles
# (less of a skewed group's last tile wasted; the epilogue hidden under the other warpgroup's mainloop)
GROUPED_ALTERNATIVES = (dict(tile_m=256, tile_n=128, tile_k=64),
                        dict(tile_m=256, tile_n=128, tile_k=64, cluster_n=2),
                        dict(tile_m=128, tile_n=128, tile_k=128, schedule="ptr_pingpong"),
                        dict(tile_m=64, tile_n=256, tile_k=64, schedule="ptr_pingpong"))
# the attention shapes below cuDNN (NOTES.md "Attention on the H200, run 4" and call 1)
ATTN_SHAPES = ("b4_h32_s4096_d128", "b8_h16_s2048_d64_causal")
# torch.matmul bf16, A (M, K) times W (N, K)^T: the square ceiling, one DeepSeek-V3-like expert at its
# uniform prefill share (256 rows), and all 8192 rows of that layer as one dense GEMM
DENSE = {"dense_8192": (8192, 8192, 8192), "dense_dsv3_expert_m256": (256, 4096, 7168),
         "dense_dsv3_all_m8192": (8192, 4096, 7168)}
PEAK_BF16 = 989e12
HBM = 4.8e12
MARKER = "spin_kernel"          # torch.cuda._sleep's kernel (aten/src/ATen/cuda/Sleep.cu)

# ncu: sections (each a documented identifier of `ncu --list-sections`) and metrics; METRICS_SAFE are in
# every Hopper ncu, METRICS_TRY are kept only where `ncu --query-metrics` lists their base name
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats")
METRICS_SAFE = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
                "lts__t_sector_hit_rate.pct", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                "sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__cycles_elapsed.avg.per_second",
                "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__cycles_active.avg",
                "gpc__cycles_elapsed.max")
METRICS_TRY = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
               "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
               "lts__t_bytes.sum")


def metric_list(query_text: str | None) -> list[str]:
    """The metrics to ask for: METRICS_SAFE, plus each of METRICS_TRY whose base name ``ncu --query-metrics``
    printed (None: the safe list alone)."""
    if query_text is None:
        return list(METRICS_SAFE)
    known = set(re.findall(r"\b([a-z0-9]+__[a-z0-9_]+)\b", query_text))
    return list(METRICS_SAFE) + [m for m in METRICS_TRY if m.split(".")[0] in known]


def fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"ncu_profile: {message}", file=sys.stderr)
    sys.exit(2)


# --- plan (here) -------------------------------------------------------------------------------------------
def cmd_plan(args) -> int:
    import shutil
    import tempfile

    import attention_bench as ab
    import grouped_moe as gm
    from cutegen.core import registry
    from cutegen.core.search import search
    from cutegen.ops.attention.config import EXAMPLE_CONFIGS
    from cutegen.ops.attention.render import backend_refusals
    from cutegen.ops.attention.render import render as render_attention
    from cutegen.ops.grouped_gemm.config import GroupedGemmConfig

    out = Path(args.out)
    suite = {c["name"]: c for c in gm.load_suite()}
    missing = [n for n in GROUPED_CASES if n not in suite]
    if missing:
        fail(f"bench/moe.toml has no case {missing[0]!r}")
    rendered: dict[str, object] = {}
    grouped, attention = [], []
    for name in GROUPED_CASES:
        case = suite[name]
        p = gm.problem_of(case)
        res = search(p, top_k=1)
        if not res.ranked:
            fail(f"{name}: no legal configuration")
        pick = res.ranked[0]
        kernel = registry.render(p, pick.config)
        rel = f"kernels/{kernel.kernel_hash}"
        rendered.setdefault(rel, kernel)
        grouped.append({"name": name, "problem": p.to_dict(), "fill": case.get("fill"), "dir": rel,
                        "config_name": pick.config.short_name(), "config": pick.config.to_dict(),
                        "predicted_us": round(pick.cost, 2),
                        "predicted": {k: pick.breakdown[k] for k in ("tiles", "waves", "kblocks", "partial_tile_waste",
                                                                     "mainloop_us", "dram_us", "hbm_floor_us",
                                                                     "floor_us", "fraction_of_floor")}})
    # the alternatives, judged on the first case's problem (every grouped case is one kernel class: bf16, offs)
    alternatives = []
    p0 = gm.problem_of(suite[GROUPED_CASES[0]])
    for fields in GROUPED_ALTERNATIVES:
        config = GroupedGemmConfig(**fields)
        broken = [v.rule_id for v in registry.check(p0, config) if getattr(v, "enforced", True)]
        if broken:
            fail(f"alternative {config.short_name()} breaks {broken[0]}")
        kernel = registry.render(p0, config)
        rel = f"kernels/{kernel.kernel_hash}"
        if rel not in rendered and rel not in {g["dir"] for g in grouped}:
            rendered[rel] = kernel
            alternatives.append({"dir": rel, "config_name": config.short_name(), "config": config.to_dict()})
    for name in ATTN_SHAPES:
        p = ab._problem(ab.SHAPES[name])
        res = search(p, 1)
        if not res.ranked:
            fail(f"{name}: no legal attention configuration")
        entries = [("cutegen", res.ranked[0].config)]
        examples = EXAMPLE_CONFIGS.get(p.head_dim, ())
        if examples:
            entries.append(("example", examples[0]))
        kernels = []
        for role, config in entries:
            refused = backend_refusals(p, config)
            broken = [str(v) for v in registry.check(p, config) if getattr(v, "enforced", True)]
            if refused or broken:
                print(f"  {name} {role} {config.short_name()}: not rendered ({(refused + broken)[0]})")
                continue
            rel = f"kernels/{p.kernel_class_name}_{config.short_name()}"
            rendered.setdefault(rel, render_attention(p, config))
            kernels.append({"role": role, "dir": rel, "config_name": config.short_name()})
        attention.append({"name": name, "problem": p.to_dict(), "kernels": kernels})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    for rel, kernel in rendered.items():
        kernel.write(tmp / rel)
    (tmp / "plan.json").write_text(json.dumps({"grouped": grouped, "grouped_alternatives": alternatives,
                                               "attention": attention, "dense": DENSE},
                                              indent=1, sort_keys=True) + "\n")
    (tmp / "dirs.txt").write_text("".join(f"{rel}\n" for rel in sorted(rendered)))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"plan: {len(grouped)} grouped cases, {len(alternatives)} grouped alternatives, {len(attention)} attention "
          f"shapes, {len(rendered)} kernels -> {out}")
    for g in grouped:
        print(f"  {g['name']:34s} {g['config_name']:32s} predicted {g['predicted_us']:.1f} us "
              f"({g['predicted']['fraction_of_floor']:.2f} of the floor)")
    for a in attention:
        print(f"  {a['name']:34s} " + ", ".join(f"{k['role']} {k['config_name']}" for k in a["kernels"]))
    return 0


# --- the targets (GPU) -------------------------------------------------------------------------------------
def targets(plan_dir: Path, plan: dict, which: str, timing: bool = False):
    """(name, family, info, make) per target of the set; ``make()`` returns the call (tensors made inside).
    Timing the cutegen set runs every grouped kernel of the plan (picks and alternatives) on every grouped case;
    profiling it, each case's pick only."""
    import torch
    out = []
    if which == "peers":
        for name, (m, n, k) in plan["dense"].items():
            def make(m=m, n=n, k=k):
                g = torch.Generator(device="cuda").manual_seed(7)
                a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
                w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
                return lambda: torch.matmul(a, w.T)
            out.append((f"{name}/torch_matmul", "dense",
                        {"flops": 2 * m * n * k, "bytes": 2 * (m * k + n * k + m * n), "shape": [m, n, k]}, make))
    for case in plan["grouped"]:
        info = _grouped_info(case)
        if which == "peers":
            out.append((f"{case['name']}/torch_grouped_mm", "grouped", info,
                        lambda case=case: _grouped_call(plan_dir, case, torch_peer=True)))
        else:
            kernels = [(case["dir"], case["config_name"])]
            if timing:
                kernels += [(k["dir"], k["config_name"]) for k in plan.get("grouped_alternatives", ())]
                kernels += [(c["dir"], c["config_name"]) for c in plan["grouped"]]
            swapped = {c["dir"]: c["config"]["swap_ab"] for c in plan["grouped"]}
            for kdir, cname in dict.fromkeys(kernels):
                if swapped.get(kdir, False) != case["config"]["swap_ab"]:
                    continue            # a decode kernel on a prefill case (or the other way): not a contender
                role = "cutegen" if kdir == case["dir"] else "alt"
                out.append((f"{case['name']}/{role} {cname}", "grouped", info,
                            lambda case=case, kdir=kdir: _grouped_call(plan_dir, {**case, "dir": kdir}, torch_peer=False)))
    for shape in plan["attention"]:
        info = _attention_info(shape)
        if which == "peers":
            out.append((f"{shape['name']}/sdpa_cudnn", "attention", info,
                        lambda shape=shape: _attention_call(plan_dir, shape, None)))
        else:
            for k in shape["kernels"]:
                out.append((f"{shape['name']}/{k['role']} {k['config_name']}", "attention", info,
                            lambda shape=shape, k=k: _attention_call(plan_dir, shape, k)))
    return out


def _grouped_info(case: dict) -> dict:
    import grouped_moe as gm
    from cutegen.core import registry
    p = registry.problem_from_dict(case["problem"])
    sizes = gm.sizes_for(p, case.get("fill"))
    return {"problem": case["problem"], "flops": 2 * sum(sizes) * p.n * p.k, "floor_s": gm.floor_seconds(p, sizes),
            "experts_used": sum(1 for m in sizes if m), "rows": sum(sizes), "max_group": max(sizes)}


_GROUPED_TENSORS: dict = {}


def _grouped_call(plan_dir: Path, case: dict, torch_peer: bool):
    import grouped_moe as gm
    import torch
    from cutegen.core import registry
    p = registry.problem_from_dict(case["problem"])
    sizes = gm.sizes_for(p, case.get("fill"))
    x, w, sz, _, _ = gm.make_operands(p, sizes, 1)
    b = w.transpose(-2, -1)
    if torch_peer:
        return lambda: torch._grouped_mm(x, b, offs=sz)
    from cutegen.ops.grouped_gemm import torch_op
    handle = torch_op.load(plan_dir / case["dir"])
    fn = lambda: torch_op.grouped_mm(x, b, sz, handle)  # noqa: E731
    # the pick computes what torch._grouped_mm computes (bf16 both: a loose bound, a wrong kernel is far off)
    rows = sum(sizes)
    err = gm.rel_error(fn()[:rows], torch._grouped_mm(x, b, offs=sz)[:rows].float())
    fn.check = {"rel_error_vs_torch": err, "ok": err < 2e-2}
    return fn


def _attention_info(shape: dict) -> dict:
    from cutegen.ops.attention.problem import AttentionProblem
    p = AttentionProblem.from_dict(shape["problem"])
    return {"flops": p.flops, "bytes": p.bytes_min}


def _attention_call(plan_dir: Path, shape: dict, kernel: dict | None):
    import attention_bench as ab
    import torch
    from cutegen.ops.attention.problem import AttentionProblem
    p = AttentionProblem.from_dict(shape["problem"])
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[p.dtype]
    q = ab.make_tensor(p.batch, p.heads_q, p.seqlen_q, p.head_dim, p.layout, dtype, 1)
    k = ab.make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 2)
    v = ab.make_tensor(p.batch, p.heads_kv, p.seqlen_kv, p.head_dim, p.layout, dtype, 3)
    scale = p.softmax_scale
    if kernel is None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=p.causal, scale=scale)
        return run
    from cutegen.ops.attention.torch_op import AttentionKernels
    op = AttentionKernels([plan_dir / kernel["dir"]])
    fn = lambda: op(q, k, v, is_causal=p.causal, scale=scale)  # noqa: E731
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=p.causal, scale=scale)
    err = float((fn().float() - ref.float()).abs().max()) / max(1.0, float(ref.float().abs().max()))
    fn.check = {"max_error_vs_cudnn": err, "ok": err < 2e-2}
    return fn


def _time_ms(fn, rounds: int = 5, min_ms: float = 40.0) -> float:
    import torch
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    reps = max(3, min(200, int(min_ms / max(s.elapsed_time(e), 1e-3))))
    per = []
    for _ in range(rounds):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        per.append(s.elapsed_time(e) / reps)
    return statistics.median(per)


def cmd_workload(args) -> int:
    import torch
    plan_dir = Path(args.plan)
    plan = json.loads((plan_dir / "plan.json").read_text())
    deadline = time.time() + args.deadline
    manifest = {"set": args.set, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "mode": "time" if args.time else "profile", "targets": []}
    path = Path(args.manifest)

    def save():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)

    for name, family, info, make in targets(plan_dir, plan, args.set, timing=args.time):
        rec = {"target": name, "family": family, **info}
        if time.time() > deadline:
            rec["skipped"] = "deadline"
            manifest["targets"].append(rec)
            continue
        try:
            fn = make()
            rec.update(getattr(fn, "check", {}))
            fn()
            fn()
            torch.cuda.synchronize()
            if args.time:
                rec["ms"] = _time_ms(fn)
            else:
                torch.cuda.profiler.start()
                torch.cuda._sleep(1000)           # the marker: this target's kernels follow it
                rec["marker"] = True              # recorded before the call: a failed call still owns its range
                manifest["targets"].append(rec)
                try:
                    fn()
                    torch.cuda.synchronize()
                finally:
                    torch.cuda.profiler.stop()
                fn = None
                save()
                torch.cuda.empty_cache()
                print(f"profiled {name}", flush=True)
                continue
        except Exception as e:  # noqa: BLE001 - recorded; the next target runs
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        if rec not in manifest["targets"]:
            manifest["targets"].append(rec)
        fn = None
        save()
        torch.cuda.empty_cache()
        print(f"{name}: {rec.get('ms', rec.get('error', ''))}", flush=True)
    save()
    return 0


# --- summarize -----------------------------------------------------------------------------------------------
def read_ncu_csv(path: Path) -> list[dict]:
    """Rows of ``ncu --import R --csv --page raw``: the header row (it names "Kernel Name"), a units row, then
    one row per profiled kernel in launch order; values as floats where they parse."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "ID" in r), None)
    if start is None:
        return []
    header = rows[start]
    body = rows[start + 1:]
    if body and not body[0][header.index("ID")].strip():
        body = body[1:]                       # the units row
    out = []
    for r in body:
        if len(r) != len(header):
            continue
        d = {}
        for k, v in zip(header, r):
            d[k] = _num(v)
        out.append(d)
    return out


def _num(v: str):
    s = v.strip().replace(",", "")
    try:
        return float(s)
    except ValueError:
        return v.strip()


def split_by_marker(kernels: list[dict]) -> list[list[dict]]:
    """The kernels after each marker, up to the next one (kernels before the first marker are dropped)."""
    groups: list[list[dict]] = []
    for k in kernels:
        if MARKER in str(k.get("Kernel Name", "")):
            groups.append([])
        elif groups:
            groups[-1].append(k)
    return groups


# WarpStateStats: warps stalled per issued instruction by reason (ratio); the per-warp-active percentages
# where a version gives only those
_STALL = re.compile(r"^smsp__\w*?issue_stalled_([a-z_]+?)_per_issue_active\.ratio$")
_STALL_PCT = re.compile(r"^smsp__\w*?issue_stalled_([a-z_]+?)_per_warp_active\.pct$")


def _first(k: dict, *names):
    for n in names:
        v = k.get(n)
        if isinstance(v, float):
            return v
    return None


def kernel_summary(k: dict) -> dict:
    stalls = []
    for pattern in (_STALL, _STALL_PCT):
        stalls = sorted(((m.group(1), v) for key, v in k.items() if (m := pattern.match(key)) and isinstance(v, float)
                         and m.group(1) not in ("selected", "not_selected")), key=lambda kv: -kv[1])
        if stalls:
            break
    active, elapsed = _first(k, "sm__cycles_active.avg"), _first(k, "gpc__cycles_elapsed.max")
    dur_ns = _first(k, "gpu__time_duration.sum")
    rd, wr = _first(k, "dram__bytes_read.sum"), _first(k, "dram__bytes_write.sum")
    clock = _first(k, "smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second")
    return {
        "kernel": str(k.get("Kernel Name", ""))[:200],
        "duration_us": dur_ns / 1e3 if dur_ns is not None else None,
        "sm_clock_mhz": clock / 1e6 if clock else None,
        "sm_throughput_pct": _first(k, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        # the share of the kernel's time an SM is busy at all (the tail of the last wave, idle SMs)
        "sm_active_pct": 100.0 * active / elapsed if active is not None and elapsed else None,
        "tensor_pipe_active_pct": _first(k, "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
        "l2_gb": (lambda v: v / 1e9 if v is not None else None)(_first(k, "lts__t_bytes.sum")),
        "tensor_pipe_pct": _first(k, "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
                                  "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"),
        "dram_throughput_pct": _first(k, "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                                      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        "dram_read_gb": rd / 1e9 if rd is not None else None,
        "dram_write_gb": wr / 1e9 if wr is not None else None,
        "dram_tb_per_s": (rd + wr) / dur_ns / 1e3 if None not in (rd, wr, dur_ns) and dur_ns else None,
        "l2_hit_pct": _first(k, "lts__t_sector_hit_rate.pct"),
        "achieved_occupancy_pct": _first(k, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        "registers": _first(k, "launch__registers_per_thread"),
        "grid": _first(k, "launch__grid_size"),
        "block": _first(k, "launch__block_size"),
        "smem_kb": (lambda v: v / 1024 if v is not None else None)(
            _first(k, "launch__shared_mem_per_block_dynamic")),
        "top_stalls": [[name, round(v, 3)] for name, v in stalls[:3]],
    }


def limiter(s: dict) -> str:
    """One word on what bounds the kernel, from its utilizations (a reading, not a proof)."""
    t, d = s.get("tensor_pipe_pct"), s.get("dram_throughput_pct")
    if t is not None and t >= 80:
        return "tensor pipe"
    if d is not None and d >= 75:
        return "DRAM bandwidth"
    stall = s["top_stalls"][0][0] if s.get("top_stalls") else "?"
    return f"latency ({stall})"


def summarize(manifests: list[dict], csv_rows: list[list[dict]], timings: list[dict]) -> dict:
    timed = {t["target"]: t.get("ms") for m in timings for t in m.get("targets", []) if t.get("ms")}
    out = []
    for manifest, rows in zip(manifests, csv_rows):
        groups = split_by_marker(rows)
        marked = [t for t in manifest.get("targets", []) if t.get("marker")]
        if len(groups) != len(marked):
            print(f"summarize: {manifest.get('set')}: {len(marked)} targets but {len(groups)} marker ranges; "
                  f"the first {min(len(groups), len(marked))} are paired", file=sys.stderr)
        for i, t in enumerate(marked):
            rec = {k: v for k, v in t.items() if k not in ("marker",)}
            if i >= len(groups):
                rec.setdefault("error", "ncu recorded no range for it (stopped early?)")
                if t["target"] in timed:
                    rec["events_ms"] = timed[t["target"]]
                out.append(rec)
                continue
            kernels = groups[i]
            summaries = [kernel_summary(k) for k in kernels]
            main = max(summaries, key=lambda s: s["duration_us"] or 0.0) if summaries else None
            rec["kernels_in_range"] = len(summaries)
            rec["other_kernels_us"] = round(sum(s["duration_us"] or 0 for s in summaries if s is not main), 3)
            if main:
                rec["main"] = main
                rec["limiter"] = limiter(main)
                us = main["duration_us"]
                if us:
                    rec["tflops"] = t["flops"] / (us * 1e-6) / 1e12
                    rec["of_peak_989"] = rec["tflops"] * 1e12 / PEAK_BF16
                    if t.get("floor_s"):
                        rec["of_floor"] = t["floor_s"] * 1e6 / us
            if t["target"] in timed:
                rec["events_ms"] = timed[t["target"]]
            out.append(rec)
        for t in manifest.get("targets", []):
            if not t.get("marker"):
                out.append({k: v for k, v in t.items()})
    events = []
    for t in timings:
        for r in t.get("targets", []):
            rec = {k: v for k, v in r.items() if k != "ms"}
            if r.get("ms"):
                rec.update({"events_ms": r["ms"], "tflops": r["flops"] / (r["ms"] * 1e-3) / 1e12})
                if r.get("floor_s"):
                    rec["of_floor"] = r["floor_s"] * 1e3 / r["ms"]
            events.append(rec)
    # attention: against cuDNN's kernel at the same shape
    cudnn = {r["target"].split("/")[0]: r["main"]["duration_us"] for r in out
             if r["target"].endswith("/sdpa_cudnn") and r.get("main")}
    for r in out:
        base = cudnn.get(r["target"].split("/")[0])
        if r.get("family") == "attention" and base and r.get("main") and r["main"]["duration_us"]:
            r["vs_cudnn"] = base / r["main"]["duration_us"]
    # events: each case's contenders against its torch peer (torch._grouped_mm, SDPA cuDNN) in the same run
    peer = {r["target"].split("/")[0]: r["events_ms"] for r in events
            if r.get("events_ms") and r["target"].endswith(("/torch_grouped_mm", "/sdpa_cudnn"))}
    for r in events:
        base = peer.get(r["target"].split("/")[0])
        if base and r.get("events_ms"):
            r["vs_peer"] = base / r["events_ms"]
    return {"targets": out, "events": events}


def _f(v, fmt="{:.0f}"):
    return "-" if v is None else fmt.format(v)


def markdown(doc: dict) -> str:
    lines = ["| target | main kernel us | TFLOP/s | of floor / vs cuDNN | SM MHz | SM busy % | SM % | tensor % | "
             "DRAM % | DRAM TB/s | read / write GB | L2 hit % | occupancy % | regs | grid | top stalls | limiter |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["targets"]:
        m = r.get("main")
        if not m:
            why = r.get("error") or r.get("skipped") or ("events " + _f(r.get("events_ms"), "{:.4f}") + " ms"
                                                         if r.get("events_ms") else "no kernel profiled")
            lines.append(f"| {r['target']} | {why} |" + " |" * 15)
            continue
        ratio = r.get("of_floor", r.get("vs_cudnn", r.get("of_peak_989")))
        stalls = ", ".join(f"{n} {v:.1f}" for n, v in m["top_stalls"])
        rw = f"{_f(m['dram_read_gb'], '{:.2f}')} / {_f(m['dram_write_gb'], '{:.2f}')}"
        lines.append(
            f"| {r['target']} | {_f(m['duration_us'], '{:.1f}')} | {_f(r.get('tflops'))} | {_f(ratio, '{:.2f}')} | "
            f"{_f(m['sm_clock_mhz'])} | {_f(m['sm_active_pct'])} | {_f(m['sm_throughput_pct'])} | {_f(m['tensor_pipe_pct'])} | "
            f"{_f(m['dram_throughput_pct'])} | {_f(m['dram_tb_per_s'], '{:.2f}')} | {rw} | {_f(m['l2_hit_pct'])} | "
            f"{_f(m['achieved_occupancy_pct'])} | {_f(m['registers'])} | {_f(m['grid'])} | {stalls} | {r['limiter']} |")
    if doc.get("events"):
        lines += ["", "CUDA events (eager, back-to-back calls through the op; the case's kernels and its torch peer):", "",
                  "| target | ms | TFLOP/s | of floor | vs peer | check |", "|---|---|---|---|---|---|"]
        for r in sorted(doc["events"], key=lambda r: (r["target"].split("/")[0], r.get("events_ms") or 1e9)):
            chk = "ok" if r.get("ok") else ("WRONG" if r.get("ok") is False else "")
            if not r.get("events_ms"):
                lines.append(f"| {r['target']} | {r.get('error') or r.get('skipped') or '-'} | | | | |")
                continue
            lines.append(f"| {r['target']} | {r['events_ms']:.4f} | {r['tflops']:.0f} | {_f(r.get('of_floor'), '{:.2f}')} | "
                         f"{_f(r.get('vs_peer'), '{:.2f}')} | {chk} |")
    lines.append("")
    lines.append("of floor: the issue's floor (used experts' weights + X + D at 4.8 TB/s, or FLOPs at 989 TFLOP/s) over "
                 "the main kernel's duration (grouped); vs cuDNN: cuDNN's kernel duration over this one (attention); "
                 "dense rows: TFLOP/s over 989. Durations are ncu's (one launch, caches flushed, clocks as found).")
    return "\n".join(lines) + "\n"


def cmd_summarize(args) -> int:
    manifests = [json.loads(Path(m).read_text()) for m in args.manifest]
    rows = [read_ncu_csv(Path(c)) if Path(c).is_file() else [] for c in args.csv]
    if len(rows) != len(manifests):
        fail("give one --csv per --manifest, in the same order")
    timings = [json.loads(Path(t).read_text()) for t in (args.timing or []) if Path(t).is_file()]
    doc = summarize(manifests, rows, timings)
    doc["device"] = next((m.get("device") for m in manifests if m.get("device")), None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    (out / "profile.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


def cmd_metrics(args) -> int:
    text = None if args.query is None else Path(args.query).read_text(errors="replace")
    print(",".join(metric_list(text)))
    return 0


def cmd_sections(args) -> int:
    print(" ".join(f"--section {s}" for s in SECTIONS))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("metrics", help="the --metrics list for this ncu (from `ncu --query-metrics` output)")
    q.add_argument("query", nargs="?", help="the saved output of `ncu --query-metrics`; none: the safe list")
    q.set_defaults(fn=cmd_metrics)
    sc = sub.add_parser("sections", help="the --section options")
    sc.set_defaults(fn=cmd_sections)
    p = sub.add_parser("plan", help="search and render the profiled picks (here)")
    p.add_argument("--out", default="out/profile-plan")
    p.set_defaults(fn=cmd_plan)
    w = sub.add_parser("workload", help="one set of targets, one profiled (or timed) call each (GPU)")
    w.add_argument("plan")
    w.add_argument("--set", choices=("peers", "cutegen"), required=True)
    w.add_argument("--manifest", required=True, help="JSON of the targets in marker order")
    w.add_argument("--time", action="store_true", help="time each target with CUDA events (run outside ncu)")
    w.add_argument("--deadline", type=float, default=120.0, help="seconds after which no target starts")
    w.set_defaults(fn=cmd_workload)
    s = sub.add_parser("summarize", help="profile.json and profile.md from the manifests and ncu's CSV pages")
    s.add_argument("--manifest", action="append", default=[], help="a workload manifest under ncu")
    s.add_argument("--csv", action="append", default=[], help="ncu's raw CSV page of that workload")
    s.add_argument("--timing", action="append", help="a workload --time manifest (events ms)")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_summarize)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
