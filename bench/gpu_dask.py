"""The Dask executor on one machine: local vs Dask build, GPU timing through a GPU worker, compile scaling.

Phases (each skipped when the time budget ``--end`` would be overrun; ``--phases`` picks them):
  build   the kernels (picked + baseline) of ``--problems`` (3 suite problems: 6 distinct kernels) from an empty cache, once with the local
          executor (``--jobs`` = number of distinct kernels) and once through a Dask cluster of as many
          compile workers (MEM_GB=4, 1 thread each) plus one GPU worker (CUDA_VISIBLE_DEVICES=0,
          GPU=1); compares cache keys, statuses, sizes and compile statistics; wall times.
  gpu     ``cutegen bench --executor dask`` on those problems (validated, then timed, on the GPU worker).
  scaling compile throughput for N workers (``--points``): N copies of one kernel (a comment makes each a
          distinct cache key; the compile work is the same) through N fresh workers; kernels per hour.
Writes ``<out>/dask.json`` and prints a table last. Run by ``bench/gpu_dask.sh`` on the GPU machine;
``--phases scaling --points 1,2`` runs here too.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = time.monotonic()
ROOT = Path(__file__).resolve().parent.parent


def elapsed() -> float:
    return time.monotonic() - T0


def say(text: str) -> None:
    print(f"[{elapsed():5.0f} s] {text}", flush=True)


class Cluster:
    """A scheduler and workers started here (own sessions), torn down by ``close``."""

    def __init__(self, tmp: Path, per_worker_locks: bool):
        self.tmp, self.per_worker_locks = tmp, per_worker_locks
        self.procs: dict[str, subprocess.Popen] = {}
        self.file = tmp / "scheduler.json"
        env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1")
        self._spawn("scheduler", [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--scheduler-file", str(self.file)], env)
        while not self.file.is_file():
            time.sleep(0.2)

    def _spawn(self, name: str, args: list[str], env: dict) -> None:
        log = open(self.tmp / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def add_workers(self, names: list[str], resources: str, env_extra: dict | None = None) -> None:
        for name in names:
            env = dict(os.environ, **(env_extra or {}))
            env["CUTEGEN_CACHE"] = str(self.tmp / f"cache-{name}")  # a worker's own cache
            if self.per_worker_locks:  # one machine, one nvcc per worker: no shared lock
                env["CUTEGEN_NVCC_LOCK"] = str(self.tmp / f"nvcc-{name}.lock")
            self._spawn(name, [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                               str(self.file), "--host", "127.0.0.1", "--nthreads", "1", "--name", name,
                               "--resources", resources, "--no-nanny"], env)
        from distributed import Client
        with Client(scheduler_file=str(self.file), timeout=60, set_as_default=False) as c:
            want = {n for n in self.procs if n != "scheduler"}
            end = time.monotonic() + 120
            while {w["name"] for w in c.scheduler_info(n_workers=-1)["workers"].values()} < want:
                if time.monotonic() > end:
                    raise TimeoutError(f"workers {sorted(want)} did not all connect")
                time.sleep(0.3)

    def remove_workers(self, names: list[str]) -> None:
        for n in names:
            p = self.procs.pop(n)
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=15)

    def close(self) -> None:
        for n in list(self.procs)[::-1]:
            p = self.procs.pop(n)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)


def kernel_dirs(problems: list[str], root: Path) -> tuple[list[Path], list]:
    """Copy the picked and baseline kernel directories of ``problems`` under ``root`` (generated/ layout)."""
    from cutegen.commands.regen import baseline_dir, kernel_dir, select_suite
    suite = select_suite(ROOT / "bench/suite.toml", problems)
    dirs = []
    for _, p in suite:
        for where in (kernel_dir, baseline_dir):
            src, dest = where(ROOT / "generated", p), where(root, p)
            if (src / "kernel.cu").is_file():
                dest.mkdir(parents=True, exist_ok=True)
                for f in ("kernel.cu", "manifest.json"):
                    shutil.copy(src / f, dest / f)
                dirs.append(dest)
    return dirs, suite


def result_rows(summary) -> list[dict]:
    return [{"name": Path(r.name).name, "status": r.status, "key": r.key, "seconds": round(r.seconds, 1),
             "size": Path(r.library).stat().st_size if r.ok else None, "stats": r.stats} for r in summary.results]


def phase_build(args, tmp: Path, cluster: Cluster, doc: dict) -> tuple[list[Path], list]:
    from cutegen import executor as X
    from cutegen.build import build
    local_dirs, suite = kernel_dirs(args.problems, tmp / "local")
    dask_dirs, _ = kernel_dirs(args.problems, tmp / "dask")
    from cutegen.build import Builder, _job_for, cache_key
    b = Builder(jobs=1, cache=tmp / "probe-cache", progress=None)
    distinct = len({cache_key(_job_for(d).source, nvcc_version=b.nvcc_version, cutlass_version=b.cutlass_version)
                    for d in local_dirs})
    say(f"build: {len(local_dirs)} kernel directories, {distinct} distinct kernels; local executor, --jobs {distinct}")
    t = time.monotonic()
    local = build(local_dirs, jobs=distinct, cache=tmp / "cache-local", progress=None, timeout=args.nvcc_timeout)
    local_wall = time.monotonic() - t
    say(f"local: {local.line()} in {local_wall:.1f} s wall")
    names = [f"compile{i}" for i in range(distinct)]
    cluster.add_workers(names, "MEM_GB=4")
    say(f"dask: {distinct} compile workers up")
    with X.dask_executor(str(cluster.file), progress=sys.stdout) as ex:
        t = time.monotonic()
        remote = build(dask_dirs, cache=tmp / "cache-client", progress=None, timeout=args.nvcc_timeout, executor=ex)
        dask_wall = time.monotonic() - t
        summary_text = ex.summary.text()
    cluster.remove_workers(names)
    say(f"dask: {remote.line()} in {dask_wall:.1f} s wall\n{summary_text}")
    lr, rr = result_rows(local), result_rows(remote)
    same = [(a["key"], a["status"], a["size"], a["stats"]) == (b["key"], b["status"], b["size"], b["stats"])
            for a, b in zip(lr, rr)]
    doc["build"] = {"kernels": len(local_dirs), "distinct": distinct, "local_wall_s": round(local_wall, 1),
                    "dask_wall_s": round(dask_wall, 1), "local": lr, "dask": rr, "agree": all(same),
                    "agree_per_kernel": same, "dask_summary": summary_text}
    return dask_dirs, suite


def phase_gpu(args, tmp: Path, cluster: Cluster, suite, doc: dict) -> None:
    from cutegen.cli import main
    names = [n for n, _ in suite]
    say(f"gpu: cutegen bench --executor dask on {', '.join(names)}")
    argv = ["bench", "--kernels", str(tmp / "dask" / "sm90a"), "--baselines", str(tmp / "dask" / "baseline" / "sm90a"),
            "--out", str(args.out), "--no-plot", "--executor", "dask", "--scheduler", str(cluster.file),
            "--timeout", "90"]
    for n in names:
        argv += ["--only", n]
    t = time.monotonic()
    rc = main(argv)
    doc["gpu"] = {"problems": names, "exit_code": rc, "wall_s": round(time.monotonic() - t, 1)}
    say(f"gpu: bench exit code {rc} in {doc['gpu']['wall_s']} s")


def phase_scaling(args, tmp: Path, cluster: Cluster, doc: dict) -> None:
    from cutegen import executor as X
    from cutegen.build import build
    from cutegen.commands.regen import kernel_dir, select_suite
    problem = select_suite(ROOT / "bench/suite.toml", [args.scaling_problem])[0][1]
    source = (kernel_dir(ROOT / "generated", problem) / "kernel.cu").read_text()
    manifest = (kernel_dir(ROOT / "generated", problem) / "manifest.json").read_text()
    points = doc.setdefault("scaling", {"kernel": args.scaling_problem, "points": []})
    per_kernel = None
    for n in args.points:
        if per_kernel is not None and elapsed() + per_kernel * 1.5 + 20 > args.end:
            say(f"scaling: {n} workers skipped (would end past {args.end} s)")
            points["points"].append({"workers": n, "skipped": "time budget"})
            continue
        dirs = []
        for i in range(n):
            d = tmp / f"scale{n}" / f"v{i}"
            d.mkdir(parents=True)
            (d / "kernel.cu").write_text(source + f"\n// cutegen scaling variant {n}.{i}\n")
            (d / "manifest.json").write_text(manifest)
            dirs.append(d)
        names = [f"s{n}w{i}" for i in range(n)]
        cluster.add_workers(names, "MEM_GB=4")
        with X.dask_executor(str(cluster.file), progress=None) as ex:
            t = time.monotonic()
            s = build(dirs, cache=tmp / f"cache-scale{n}", progress=None, timeout=args.nvcc_timeout, executor=ex)
            wall = time.monotonic() - t
        cluster.remove_workers(names)
        secs = [r.seconds for r in s.results if r.status == "built"]
        per_kernel = max(secs) if secs else wall
        row = {"workers": n, "kernels": n, "built": len(secs), "wall_s": round(wall, 1),
               "kernels_per_hour": round(len(secs) * 3600 / wall, 1),
               "compile_s_median": round(sorted(secs)[len(secs) // 2], 1) if secs else None}
        points["points"].append(row)
        say(f"scaling: {n} worker(s): {row}")
    measured = [p for p in points["points"] if p.get("built")]
    if measured:
        one = min(measured, key=lambda p: p["workers"])
        # What a cluster of 100 single-compile workers would do at the measured per-kernel cost, with
        # a core and 3.5 GB of memory for each (no shared-host contention): 100 x 3600 / compile seconds.
        points["predicted_100_workers_per_hour"] = round(100 * 3600 / one["compile_s_median"], 0)


def table(doc: dict) -> str:
    lines = []
    if "build" in doc:
        b = doc["build"]
        lines.append(f"build {b['kernels']} dirs / {b['distinct']} kernels: local {b['local_wall_s']} s, "
                     f"dask {b['dask_wall_s']} s; agree (keys, status, size, stats): {b['agree']}")
    if "gpu" in doc:
        lines.append(f"gpu bench through dask: {len(doc['gpu']['problems'])} problems, exit {doc['gpu']['exit_code']}, "
                     f"{doc['gpu']['wall_s']} s")
    if "scaling" in doc:
        lines.append(f"{'workers':>8} {'kernels':>8} {'wall s':>8} {'kernels/h':>10} {'median nvcc s':>14}")
        for p in sorted(doc["scaling"]["points"], key=lambda p: p["workers"]):
            if p.get("skipped"):
                lines.append(f"{p['workers']:>8} {'-':>8} {'skipped':>8}")
            else:
                lines.append(f"{p['workers']:>8} {p['kernels']:>8} {p['wall_s']:>8} {p['kernels_per_hour']:>10} "
                             f"{p['compile_s_median']!s:>14}")
        if "predicted_100_workers_per_hour" in doc["scaling"]:
            lines.append(f"100 workers (predicted from the 1-worker compile time): "
                         f"{doc['scaling']['predicted_100_workers_per_hour']:.0f} kernels/h")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/dask"))
    ap.add_argument("--phases", default="build,gpu,scaling")
    ap.add_argument("--problems", default="sq1024_bf16_tn,sq1024_bf16_nt,sq1024_e4m3_tn")
    # The ends of the curve first: whatever the time budget cuts is in the middle.
    ap.add_argument("--points", default="1,16,4,8,2")
    ap.add_argument("--scaling-problem", default="sq1024_bf16_tn")
    ap.add_argument("--end", type=float, default=440.0, help="no phase or point starts that would end after this")
    ap.add_argument("--nvcc-timeout", type=float, default=240.0)
    ap.add_argument("--gpus", type=int, default=1,
                    help="GPU workers, one per GPU (CUDA_VISIBLE_DEVICES=i, GPU=1); issue 15 runs this with 2")
    ap.add_argument("--per-worker-locks", action="store_true",
                    help="each worker its own nvcc lock (a machine of our own); default: the machine-wide lock")
    args = ap.parse_args()
    args.problems = [p for p in args.problems.split(",") if p]
    args.points = [int(p) for p in args.points.split(",") if p]
    phases = set(args.phases.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"host": os.uname().nodename, "cpus": os.cpu_count(), "phases": sorted(phases)}
    tmp = Path(tempfile.mkdtemp(prefix="cutegen-dask-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` still tears the cluster down
    cluster = Cluster(tmp, args.per_worker_locks)
    try:
        suite = None
        for i in range(args.gpus if "gpu" in phases else 0):
            cluster.add_workers([f"gpu{i}"], "GPU=1", {"CUDA_VISIBLE_DEVICES": str(i)})
        if "build" in phases:
            _, suite = phase_build(args, tmp, cluster, doc)
        if "gpu" in phases and suite is not None and elapsed() < args.end - 60:
            phase_gpu(args, tmp, cluster, suite, doc)
        if "scaling" in phases:
            phase_scaling(args, tmp, cluster, doc)
    finally:
        cluster.close()
        doc["wall_s"] = round(elapsed(), 1)
        (args.out / "dask.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        for log in sorted(tmp.glob("*.log")):
            text = log.read_text(errors="replace")
            if "Traceback" in text or "Error" in text:
                print(f"--- {log.name} (last lines)\n" + "\n".join(text.splitlines()[-8:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
