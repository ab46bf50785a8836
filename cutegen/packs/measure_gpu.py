"""The GPU step of ``cutegen pack --tune``: time a built candidate pack's kernels with torch.matmul, into the
results database (run on the GPU machine; needs torch, not egglog).

    python -m cutegen.packs.measure_gpu PACK_DIR EXTENSION.so DB [--end-epoch T] [--kind KIND]

``PACK_DIR`` is a candidate pack (``cutegen pack --tune --plan-only``: its ``tune.json`` lists the candidates
and the shapes to time), ``EXTENSION.so`` its PyTorch extension. One executor GPU task per (N, K)
(``cutegen.executor``: here the local one): at each of its shapes, random bf16 operands as a model has them
(x row-major M x K, W^T column-major), a float32 reference, torch.matmul timed, then every candidate of the
class through ``torch.ops.cutegen.gemm_kernel`` (past the dispatcher, the pack's own plan entry points):
checked against the reference on that shape (every shape: the validation is one launch and a compare) and
timed the same way (CUDA events, median of ``ITERS`` after ``WARMUP``, the same inputs for every contender,
interleaved per shape). A task's records are written to the database before the next task starts, so a
call cut short keeps what it measured, and a later call with the same database times only what is missing.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

WARMUP, ITERS = 5, 20
SPIN_CYCLES_PER_CALL = 100_000   # ~50 us at 1.98 GHz: more than the host needs to queue one timed call
SLOW_FACTOR = 3.0     # slower than this many times torch.matmul at the first timed launch: 3 launches, not 20
TOL = 2e-2            # bf16 output of a float32 accumulation: max |err| / max |ref|
TIMING_METHOD = (f"pack-tune/2: cuda-events median of {ITERS} after {WARMUP} warm-up calls (3 after 1 where the first "
                 f"launch is over {SLOW_FACTOR:g}x torch.matmul), queue primed behind a spin kernel, the same inputs (L2 "
                 "warm), through torch.ops.cutegen.gemm_kernel; cuBLAS: the lower of torch.matmul before and after")
_OPS: dict = {}


def _load(pack_dir: str, so: str):
    key = (pack_dir, so)
    if key not in _OPS:
        import importlib.util
        name = json.loads((Path(pack_dir) / "pack.json").read_text())["name"]
        spec = importlib.util.spec_from_file_location(f"{name}_torch", Path(pack_dir) / "torch" / f"{name}_torch.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _OPS[key] = mod.load(so)
    return _OPS[key]


def _time_us(fn, warmup: int = WARMUP, iters: int = ITERS) -> tuple[float, list[float]]:
    """Median microseconds of ``iters`` calls, each between two CUDA events, after ``warmup``. A spin kernel
    (``torch.cuda._sleep``, SPIN_CYCLES_PER_CALL per call) is queued first, so the host has queued every timed
    call before the GPU reaches them: a host stall (Python, the garbage collector, a slow launch path) cannot
    leave the GPU idle inside an event pair, and a 20 us kernel is timed as 20 us whichever host path launched
    it (the first tuning run, 2026-11-26, timed without it, had torch.matmul up to 1.6x slower at some small-M
    shapes than the same call in the next run). The same method as ``cutegen tune`` (``_runner_worker``)."""
    import torch
    for _ in range(warmup):
        fn()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(SPIN_CYCLES_PER_CALL * iters)
    for s, e in evs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ts = [s.elapsed_time(e) * 1e3 for s, e in evs]
    return statistics.median(ts), ts


def measure_group(item: tuple) -> dict:
    """One (N, K) (an executor GPU task): ``item`` = (pack_dir, so, group, kernels, todo, end_epoch) where
    ``todo`` maps M -> the kernel indices still to time there. Returns {"device", "shapes": [...], "skipped"}."""
    import gc
    import torch
    pack_dir, so, group, kernels, todo, end_epoch = item
    gc.collect()
    gc.disable()          # no collection inside a timed loop (re-enabled when the group is done)
    try:
        return _measure_group(torch, pack_dir, so, group, kernels, todo, end_epoch)
    finally:
        gc.enable()


def _measure_group(torch, pack_dir, so, group, kernels, todo, end_epoch) -> dict:
    ops = _load(pack_dir, so)
    props = torch.cuda.get_device_properties(0)
    gen = torch.Generator(device="cuda").manual_seed(group["n"] * 131 + group["k"])
    out = {"device": {"name": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count,
                      "torch_cuda": torch.version.cuda}, "shapes": [], "skipped": []}
    for shape in group["shapes"]:
        m, n, k = shape["m"], group["n"], group["k"]
        idx = todo.get(str(m), todo.get(m))
        if not idx:
            continue
        if end_epoch and time.time() > end_epoch:
            out["skipped"].append(m)
            continue
        p = shape["problem"]
        # the class a language model's linear layer has: bf16 x (row-major M x K) @ W^T (column-major), D bf16
        if (p.get("dtype_a"), p.get("dtype_b"), p.get("dtype_d"), p.get("layout_a"), p.get("layout_b"),
                p.get("layout_c"), p.get("batch", 1), p.get("bias"), p.get("beta")) != \
                ("bf16", "bf16", "bf16", "row", "col", "row", 1, False, 0.0):
            out["skipped"].append(m)
            continue
        a = torch.randn(m, k, device="cuda", dtype=torch.float32, generator=gen).to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float32, generator=gen).to(torch.bfloat16)
        b = w.t()
        ref = a.float() @ b.float()
        scale = float(ref.abs().max().clamp_min(1e-6))
        mm_before, _ = _time_us(lambda: torch.matmul(a, b))
        row = {"m": m, "matmul_us": mm_before, "kernels": {}}
        mm_us = mm_before
        for i in idx:
            try:
                kout = ops.gemm_kernel(a, b, i)
            except RuntimeError as e:            # the kernel's own checks refuse this shape
                row["kernels"][str(i)] = {"error": str(e).splitlines()[0][:200]}
                continue
            err = float((kout.float() - ref).abs().max()) / scale
            # a candidate far slower than torch.matmul here (a small-M tile at M = 8192) is timed with fewer
            # launches: it will not be chosen, and 25 launches of it would cost more than all the others
            first, _ = _time_us(lambda: ops.gemm_kernel(a, b, i), warmup=0, iters=1)
            slow = first > SLOW_FACTOR * mm_us and first > 50.0
            us, ts = _time_us(lambda: ops.gemm_kernel(a, b, i), *((1, 3) if slow else (WARMUP, ITERS)))
            row["kernels"][str(i)] = {"us": us, "times": [round(t, 3) for t in ts], "rel_err": err,
                                      "ok": err <= TOL, "slow": slow}
        # torch.matmul again after the candidates: its time is the lower of the two (a drift in between, e.g.
        # clocks, shows as the two disagreeing; both are kept)
        mm_after, _ = _time_us(lambda: torch.matmul(a, b))
        row["matmul_us"] = min(mm_before, mm_after)
        row["matmul_us_before_after"] = [round(mm_before, 3), round(mm_after, 3)]
        out["shapes"].append(row)
        del a, w, b, ref
    return out


def _problem(shape: dict):
    from ..problem import GemmProblem
    return GemmProblem.from_dict(shape["problem"])


def run(pack_dir: str, so: str, db_path: str, end_epoch: float | None = None, say=print, executor=None) -> dict:
    """Time what ``db_path`` lacks of the plan in ``pack_dir``; ``executor`` (a ``cutegen.executor.Executor``;
    None: this process) runs each (N, K) as one GPU task (a Dask GPU worker needs ``pack_dir`` and ``so`` at the
    same paths), as many at once as it has GPU workers (``gpu_slots``); the records are written here, after
    each batch."""
    from ..config import KernelConfig
    from ..executor import LocalExecutor
    from ..results import ResultsDB
    from ..progress import Steps
    plan = json.loads((Path(pack_dir) / "tune.json").read_text())
    pack = plan["pack"]
    kernels = plan["kernels"]
    configs = [KernelConfig.from_dict(k["config"]) for k in kernels]
    db = ResultsDB(db_path, seed=None)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    # what the database already holds (a resumed call): (problem key, config JSON) of this plan's records
    from ..results import problem_key
    # (records of an older timing method do not count: they are timed again, and the selection reads the newest)
    have = {(problem_key(m.problem), m.config.to_json()) for m in db.measurements()
            if m.source.startswith("cutegen-pack-tune") and m.timing_method == TIMING_METHOD}
    tasks = []
    for g in plan["groups"]:
        mine = [k["index"] for k in kernels if k["class"] == g["class"]]
        todo = {}
        for s in g["shapes"]:
            key = problem_key(_problem(s))
            left = [i for i in mine if (key, configs[i].to_json()) not in have]
            if left:
                todo[str(s["m"])] = left
        if todo:
            tasks.append((g, todo))
    pairs = sum(len(v) for _, t in tasks for v in t.values())
    say(f"pack-tune: {len(plan['groups'])} (N, K), {sum(len(g['shapes']) for g in plan['groups'])} shapes, "
        f"{len(kernels)} candidates; {pairs} (shape, candidate) pairs to time, {len(have)} already in {db_path}")
    ex = executor or LocalExecutor(progress=open(os.devnull, "w"))
    summary = {"pairs_todo": pairs, "recorded": 0, "failed_validation": [], "errors": 0, "skipped_shapes": 0,
               "tasks_failed": []}
    t0 = time.time()
    done_pairs = 0
    # as many tasks at once as the executor has GPU workers (Dask: one per worker with GPU=1; here one), their
    # records written when the batch is back: one (N, K) after another on one GPU, W side by side on W
    slots = getattr(ex, "gpu_slots", lambda: 1)()
    batches = [tasks[i:i + slots] for i in range(0, len(tasks), slots)]
    with Steps("time candidates", len(tasks), stream=sys.stdout) as steps:
        for batch in batches:
            outs = ex.map_gpu(measure_group, [(pack_dir, so, g, kernels, todo, end_epoch) for g, todo in batch],
                              names=[f"N={g['n']} K={g['k']}" for g, _ in batch])
            for (g, todo), o in zip(batch, outs):
                done_pairs += _record_task(g, todo, o, steps, done_pairs, pairs, t0, summary, kernels, configs, db,
                                           started, pack, say)
    db.compact()      # one self-contained file (no WAL beside it): it travels back in $OUT
    summary["seconds"] = round(time.time() - t0, 1)
    return summary


def _record_task(g, todo, o, steps, done_before, pairs, t0, summary, kernels, configs, db, started, pack, say) -> int:
    """One task's outcome into the database and the summary; returns the pairs it stood for."""
    from .. import __version__
    from ..results import Measurement, device_kind
    n_pairs = sum(len(v) for v in todo.values())
    done_pairs = done_before + n_pairs
    el = time.time() - t0
    steps.step(f"N={g['n']} K={g['k']}: {done_pairs}/{pairs} pairs, {el:.0f} s, about "
               f"{el / max(done_pairs, 1) * (pairs - done_pairs):.0f} s left")
    if not o.ok:
        summary["tasks_failed"].append(f"N={g['n']} K={g['k']}: {o.error}")
        say(f"  N={g['n']} K={g['k']}: the GPU task failed: {o.error}")
        return n_pairs
    res = o.value
    dev = res["device"]
    kind = device_kind(dev["name"], dev["sm_count"])
    by_m = {s["m"]: s for s in g["shapes"]}
    records = []
    for row in res["shapes"]:
        problem = _problem(by_m[row["m"]])
        for i, r in row["kernels"].items():
            i = int(i)
            if "us" not in r:
                summary["errors"] += 1
                continue
            if not r["ok"]:
                summary["failed_validation"].append(f"{kernels[i]['name']} m{row['m']}n{g['n']}k{g['k']}: "
                                                    f"rel err {r['rel_err']:.2e}")
            records.append(Measurement(
                problem=problem, config=configs[i], kernel_hash=kernels[i]["hash"], backend="cutlass",
                device_name=dev["name"], device_kind=kind, sm_count=dev["sm_count"], cuda=dev.get("torch_cuda"),
                cutegen=__version__, timing_method=TIMING_METHOD, times_us=tuple(r["times"]),
                median_us=r["us"], validated=r["ok"], max_rel_error=r["rel_err"], cublas_us=row["matmul_us"],
                source=f"cutegen-pack-tune {started}#{pack}/{kernels[i]['name']}", measured_at=started))
    summary["skipped_shapes"] += len(res["skipped"])
    db.add_many(records)
    summary["recorded"] += len(records)
    say(f"  N={g['n']} K={g['k']}: {len(res['shapes'])} shapes, {len(records)} records "
        f"({time.time() - t0:.0f} s){'; skipped for time: ' + str(len(res['skipped'])) if res['skipped'] else ''}")
    return n_pairs


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m cutegen.packs.measure_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("pack_dir")
    p.add_argument("extension")
    p.add_argument("db")
    p.add_argument("--end-epoch", type=float, default=None, help="start no shape after this time.time()")
    p.add_argument("--summary", help="write the run's summary JSON here")
    from .. import executor as X
    X.add_arguments(p)          # --executor dask --scheduler ADDRESS: one GPU task per (N, K) on the cluster
    a = p.parse_args(argv)
    with X.from_args(a) as ex:
        summary = run(a.pack_dir, a.extension, a.db, a.end_epoch, executor=None if ex.name == "local" else ex)
    print(json.dumps({k: (v[:20] if isinstance(v, list) else v) for k, v in summary.items()}, indent=1))
    if a.summary:
        Path(a.summary).write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if not summary["tasks_failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
