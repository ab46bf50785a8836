"""What ``pack --tune``'s GPU step would take on more GPU workers (issue 22: "what the Dask executor predicts").

A prediction from one run's measured per-item costs, no GPU:

- **build**: each candidate's compile time, recovered from the run's build log (bench/gpu_pack.sh writes
  ``[HH:MM:SS] kNN_<hash>: built`` as each nvcc finishes; the kernels start in name order on ``jobs`` slots,
  so a kernel starts when the slot the earlier ones free is free: the first ``jobs`` at the build's start,
  the i-th after that at the (i - jobs + 1)-th completion). On W workers of ``jobs`` slots each, the
  executor's compile tasks (``Executor.compile``: one task per kernel, a slot each) are list-scheduled in
  the same order: the makespan.
- **timing**: ``cutegen.packs.measure_gpu`` runs one GPU task per (N, K). A task's time is modelled from its
  records (bench/packs/<set>/<kind>/measurements.jsonl.gz: per (shape, candidate) the timed launches and
  their median) as GPU time plus a per-launch and a per-shape host cost, the two costs fitted (least
  squares, non-negative) to the run's per-task wall times (the tune log's ``N=.. K=..: .. records (T s)``
  lines, cumulative). On W GPU workers the tasks are list-scheduled in plan order (the largest (N, K)
  bounds the makespan), and, as a what-if, split into one task per shape.
Both models reproduce the measured one-worker times by construction (the build exactly, the timing to the
fit's residual, which ``predict`` reports). Not modelled: the plan and the selection (CPU, this machine),
the extension's link, Dask's transfer of the candidate library to each worker (``tasks.library_bytes``),
contention between workers on one host.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import heapq
import json
import re
from dataclasses import dataclass
from pathlib import Path

BUILT = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\] (k\d+_[0-9a-f]+): built")
TASK = re.compile(r"^\s+N=(\d+) K=(\d+): (\d+) shapes, (\d+) records \((\d+) s\)")
MATMUL_LAUNCHES = 2 * (5 + 20) + 1      # torch.matmul timed before and after the candidates, and the reference
VALIDATE_LAUNCHES = 2                    # one validation launch, one first timed launch (measure_gpu)


def makespan(durations: list[float], slots: int) -> float:
    """List scheduling in the given order on ``slots`` identical slots (each item to the first free slot)."""
    if not durations:
        return 0.0
    free = [0.0] * max(1, slots)
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        t = heapq.heappop(free) + d
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def compile_times(build_log: str, jobs: int, wall_s: float) -> list[tuple[str, float]]:
    """(kernel, seconds) in start order, from a build log's completion stamps; the build began ``wall_s``
    before its last completion."""
    done = []
    for line in build_log.splitlines():
        m = BUILT.match(line)
        if m:
            h, mi, s, name = int(m[1]), int(m[2]), int(m[3]), m[4]
            done.append((name, h * 3600 + mi * 60 + s))
    if not done:
        raise ValueError("no '[HH:MM:SS] kNN_<hash>: built' line in the build log")
    last = max(t for _, t in done)
    # a build over midnight: stamps after the first one's hour wrap
    first = min(t for _, t in done)
    if last - first > 12 * 3600:
        done = [(n, t + 86400 if t < 12 * 3600 else t) for n, t in done]
        last = max(t for _, t in done)
    t0 = last - wall_s
    order = sorted(done, key=lambda x: int(x[0][1:x[0].index("_")]))       # start order: kernel names
    ends = sorted(t for _, t in done)
    out = []
    for i, (name, t) in enumerate(order):
        start = t0 if i < jobs else ends[i - jobs]
        out.append((name, max(0.0, t - start)))
    return out


def task_times(tune_log: str) -> list[tuple[tuple[int, int], int, int, float]]:
    """((N, K), shapes, records, seconds) per timing task, from the tune log's cumulative lines."""
    rows, prev = [], 0.0
    for line in tune_log.splitlines():
        m = TASK.match(line)
        if m:
            t = float(m[5])
            rows.append(((int(m[1]), int(m[2])), int(m[3]), int(m[4]), t - prev))
            prev = t
    if not rows:
        raise ValueError("no '  N=.. K=..: .. shapes, .. records (T s)' line in the tune log")
    return rows


def read_records(path: str) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class ShapeCost:
    n: int
    k: int
    m: int
    gpu_s: float        # the launches' GPU time (timed medians times their launch counts)
    launches: int


def shape_costs(records: list[dict]) -> list[ShapeCost]:
    """Per shape of the run: the GPU time and the launch count of its candidates and of torch.matmul."""
    shapes: dict = {}
    for r in records:
        p = r["problem"]
        key = (p["n"], p["k"], p["m"])
        c = shapes.setdefault(key, ShapeCost(p["n"], p["k"], p["m"], 0.0, MATMUL_LAUNCHES))
        if c.launches == MATMUL_LAUNCHES and r.get("cublas_us"):
            c.gpu_s += MATMUL_LAUNCHES * r["cublas_us"] * 1e-6
        times = r.get("times_us") or []
        warm = 5 if len(times) >= 20 else 1                 # a slow candidate: 3 after 1 (measure_gpu.SLOW_FACTOR)
        n = len(times) + warm + VALIDATE_LAUNCHES
        c.launches += n
        c.gpu_s += n * float(r["median_us"]) * 1e-6
    return list(shapes.values())


@dataclass
class TimingModel:
    per_launch_s: float
    per_shape_s: float
    residual: float          # max |predicted - measured| / measured over the run's tasks

    def shape_s(self, c: ShapeCost) -> float:
        return c.gpu_s + c.launches * self.per_launch_s + self.per_shape_s


def fit_timing(costs: list[ShapeCost], tasks: list[tuple[tuple[int, int], int, int, float]]) -> TimingModel:
    """The per-launch and per-shape host costs that make the modelled task times the measured ones (least
    squares over the tasks, both costs >= 0)."""
    import numpy as np
    rows, y = [], []
    for (n, k), _, _, secs in tasks:
        mine = [c for c in costs if (c.n, c.k) == (n, k)]
        rows.append([sum(c.launches for c in mine), len(mine)])
        y.append(secs - sum(c.gpu_s for c in mine))
    a, b = np.array(rows, float), np.array(y, float)
    best = None
    for cols in ((0, 1), (0,), (1,)):               # non-negative least squares over two unknowns, by cases
        sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if (sol < 0).any():
            continue
        x = np.zeros(2)
        x[list(cols)] = sol
        err = float(((a @ x - b) ** 2).sum())
        if best is None or err < best[0]:
            best = (err, x)
    x = best[1] if best else np.zeros(2)
    model = TimingModel(float(x[0]), float(x[1]), 0.0)
    worst = 0.0
    for (n, k), _, _, secs in tasks:
        pred = sum(model.shape_s(c) for c in costs if (c.n, c.k) == (n, k))
        worst = max(worst, abs(pred - secs) / max(secs, 1e-9))
    model.residual = worst
    return model


def predict(build_log: str, build_wall_s: float, jobs: int, tune_log: str, records: list[dict],
            workers: list[int]) -> dict:
    """The build's and the timing's wall time on each number of GPU workers (``jobs`` compile slots each)."""
    comp = compile_times(build_log, jobs, build_wall_s)
    tasks = task_times(tune_log)
    costs = shape_costs(records)
    model = fit_timing(costs, tasks)
    order = [nk for nk, *_ in tasks]
    by_task = [sum(model.shape_s(c) for c in costs if (c.n, c.k) == nk) for nk in order]
    per_shape = [model.shape_s(c) for nk in order for c in sorted(costs, key=lambda c: c.m) if (c.n, c.k) == nk]
    rows = []
    for w in workers:
        rows.append({"workers": w, "build_s": round(makespan([d for _, d in comp], w * jobs), 1),
                     "timing_s": round(makespan(by_task, w), 1),
                     "timing_split_per_shape_s": round(makespan(per_shape, w), 1)})
    for r in rows:
        r["gpu_step_s"] = round(r["build_s"] + r["timing_s"], 1)
        r["gpu_step_split_s"] = round(r["build_s"] + r["timing_split_per_shape_s"], 1)
    return {"kernels": len(comp), "jobs_per_worker": jobs, "measured_build_s": build_wall_s,
            "measured_timing_s": round(sum(t[3] for t in tasks), 1),
            "compile_s": {"mean": round(sum(d for _, d in comp) / len(comp), 1), "max": round(max(d for _, d in comp), 1)},
            "tasks": [{"n": nk[0], "k": nk[1], "measured_s": round(t[3], 1), "model_s": round(m, 1)}
                      for nk, t, m in zip(order, tasks, by_task)],
            "model": {"per_launch_us": round(model.per_launch_s * 1e6, 2), "per_shape_ms": round(model.per_shape_s * 1e3, 2),
                      "max_task_residual": round(model.residual, 3)},
            "rows": rows}


def text(pred: dict, title: str = "") -> str:
    lines = [f"{title}: {pred['kernels']} candidates ({pred['jobs_per_worker']} compile slots per worker; compile "
             f"{pred['compile_s']['mean']} s mean, {pred['compile_s']['max']} s max), timing tasks per (N, K): "
             + ", ".join(f"{t['n']}x{t['k']} {t['measured_s']} s (model {t['model_s']})" for t in pred["tasks"]),
             f"  host cost fitted: {pred['model']['per_launch_us']} us per launch, {pred['model']['per_shape_ms']} ms "
             f"per shape (worst task off by {pred['model']['max_task_residual']:.1%})",
             "  GPU workers | build s | timing s (per (N, K) tasks) | build + timing s | timing s, one task per shape "
             "| build + timing s"]
    for r in pred["rows"]:
        lines.append(f"  {r['workers']:11d} | {r['build_s']:7.1f} | {r['timing_s']:28.1f} | {r['gpu_step_s']:16.1f} | "
                     f"{r['timing_split_per_shape_s']:29.1f} | {r['gpu_step_split_s']:.1f}")
    return "\n".join(lines)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m cutegen.packs.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--build-log", required=True, help="the run's build.txt (bench/gpu_pack.sh tune)")
    p.add_argument("--build-wall", type=float, required=True, help="the build's wall seconds (the log's 'pack build rc 0, T s wall')")
    p.add_argument("--jobs", type=int, default=16, help="nvcc jobs per GPU machine (default 16)")
    p.add_argument("--tune-log", required=True, help="the run's log.txt (per-(N, K) timing lines)")
    p.add_argument("--records", required=True, help="the run's measurements (JSON lines, .gz)")
    p.add_argument("--workers", default="1,2,4,8", help="numbers of GPU workers (default 1,2,4,8)")
    p.add_argument("--json", help="also write the prediction here")
    p.add_argument("--title", default="pack --tune")
    a = p.parse_args(argv)
    try:
        workers = [int(x) for x in a.workers.split(",")]
        if any(w < 1 for w in workers):
            raise ValueError
    except ValueError:
        p.error(f"--workers: expected positive integers separated by commas, got {a.workers!r}")
    for f in (a.build_log, a.tune_log, a.records):
        if not Path(f).is_file():
            p.error(f"{f}: no such file")
    try:
        pred = predict(Path(a.build_log).read_text(), a.build_wall, a.jobs, Path(a.tune_log).read_text(),
                       read_records(a.records), workers)
    except ValueError as e:
        p.error(str(e))
    print(text(pred, a.title))
    if a.json:
        Path(a.json).write_text(json.dumps({"made": _now(), "title": a.title, **pred}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
