"""``cutegen tune`` and ``cutegen pack`` through Dask against the local executor, on one machine (issue 13).

Phases (``--phases``; none starts that would end past ``--end`` seconds):
  tune  the plan (``bash bench/gpu_dask.sh --plan``, made where the search runs) tuned twice, each from an
        empty cache into a fresh results database: first ``cutegen tune --executor dask`` on a cluster of a
        scheduler, one GPU worker (CUDA_VISIBLE_DEVICES=0, resource GPU=1) and ``--workers`` compile workers
        (MEM_GB=4, one thread and one nvcc each), then ``cutegen tune --jobs <workers>`` locally with the
        cluster gone. Compared: each problem's winner, every candidate's status, the records (candidate,
        validated), and the compile phase's wall time (``Tuner.seconds``).
  pack  a small pack (two shape entries, two targets) through the same cluster and locally: the files must be
        byte-identical. The search needs egglog: where it is missing (the GPU machine) the phase says so.
``--dry-run``: here, without a GPU or nvcc: the stand-in nvcc of tests/test_executor_build.py (2.5 s per
"compile") and the stand-in GPU of tests/executor_fakes.py (``dry_gpu``); it checks the plumbing and
measures nothing. Writes ``<out>/dask.json``, the two tune summaries and outputs; prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_dask import ROOT, Cluster, elapsed, say

TESTS = ROOT / "tests"
# The dry run's client: the real `cutegen tune`, with tuning.gpu's timer, validator and factory swapped for
# the stand-ins before it runs (the workers import executor_fakes from tests/ on their PYTHONPATH).
DRY_TUNE = ("import sys, executor_fakes as F, cutegen.tuning.gpu as g; g.runner_gpu = F.dry_gpu; "
            "g.RunnerTimer = F.DryTimer; g.RunnerValidator = F.DryValidator; "
            "from cutegen.commands.tune import main; sys.exit(main(sys.argv[1:]))")
PACK_SHAPES = """\
[[shape]]
name = "qkv"
dtype = "bf16"
layout = "tn"
m = [1, 16, 128, 2048]
n = 6144
k = 4096

[[shape]]
name = "down"
dtype = "bf16"
layout = "tn"
m = [16, 128]
n = 4096
k = 14336
weight = 2.0
"""


def run(cmd: list[str], env: dict, log: Path, limit: float) -> tuple[int, float]:
    """Run ``cmd`` with its output in ``log``, killed after ``limit`` seconds; (exit code, wall seconds)."""
    t = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            rc = p.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = 124
    return rc, time.monotonic() - t


def tune_once(args, tmp: Path, label: str, executor: list[str]) -> dict:
    """One `cutegen tune --from-plan` of a fresh copy of the plan, from an empty cache, into a fresh database."""
    plan = tmp / f"plan-{label}"
    shutil.copytree(args.plan, plan)
    env = dict(os.environ, CUTEGEN_CACHE=str(tmp / f"cache-{label}"))
    argv = ["--from-plan", str(plan), "-o", str(tmp / f"tuned-{label}"), "--force", "--db",
            str(tmp / f"results-{label}.sqlite"), "--summary", str(args.out / f"tune-{label}.json"),
            "--timeout", "90", "--quiet", *executor]
    cmd = [sys.executable, "-c", DRY_TUNE, *argv] if args.dry_run else [sys.executable, "-m", "cutegen.commands.tune", *argv]
    say(f"tune {label}: {' '.join(argv)}")
    rc, wall = run(cmd, env, args.out / f"tune-{label}.txt", args.end - elapsed())
    summary = args.out / f"tune-{label}.json"
    doc = json.loads(summary.read_text()) if summary.is_file() else {}
    say(f"tune {label}: exit {rc} in {wall:.1f} s; phases {doc.get('seconds')}")
    return {"exit_code": rc, "wall_s": round(wall, 1), "doc": doc}


def compare_tune(dask: dict, local: dict) -> dict:
    """Per problem: the winners, their times, whether every candidate ended the same way; the records."""
    a, b = dask.get("doc") or {}, local.get("doc") or {}
    rows = []
    for pa, pb in zip(a.get("problems", []), b.get("problems", [])):
        ca, cb = pa.get("chosen") or {}, pb.get("chosen") or {}
        times_b = {c["name"]: c.get("median_us") for c in pb["candidates"]}
        rows.append({
            "problem": pa["name"], "dask": ca.get("name"), "local": cb.get("name"),
            "dask_us": ca.get("median_us"), "local_us": cb.get("median_us"),
            # how far the dask run's pick is from the local run's pick, timed in the local run
            "dask_pick_in_local_run_x": (round(times_b[ca["name"]] / cb["median_us"], 4)
                                         if ca and cb and times_b.get(ca["name"]) else None),
            "same_winner": bool(ca) and ca.get("name") == cb.get("name"),
            "same_statuses": {c["name"]: c["status"] for c in pa["candidates"]} ==
                             {c["name"]: c["status"] for c in pb["candidates"]},
            "ran_on": pa.get("ran_on")})

    def kinds(doc):
        return sorted((m["source"].split("#", 1)[-1], m["validated"]) for m in doc.get("measurements", []))
    return {"problems": rows, "records_dask": len(a.get("measurements", [])),
            "records_local": len(b.get("measurements", [])), "same_records": kinds(a) == kinds(b),
            "build_s_dask": (a.get("seconds") or {}).get("build"), "build_s_local": (b.get("seconds") or {}).get("build"),
            "time_s_dask": (a.get("seconds") or {}).get("time"), "time_s_local": (b.get("seconds") or {}).get("time"),
            "executor_summary": a.get("executor")}


def phase_pack(args, tmp: Path, cluster: Cluster, doc: dict) -> None:
    try:
        import egglog  # noqa: F401 - the search needs it
        import cutegen.search  # noqa: F401
    except ImportError as e:
        doc["pack"] = {"skipped": f"the search does not import here ({e}); the pack phase runs where it does"}
        say(f"pack: skipped: {doc['pack']['skipped']}")
        return
    shapes = tmp / "pack-shapes.toml"
    shapes.write_text(PACK_SHAPES)
    base = [sys.executable, "-m", "cutegen", "pack", str(shapes), "--max-kernels", "4", "--target", "h100-sxm",
            "--target", "h200"]
    out = {}
    for label, extra in (("dask", ["--executor", "dask", "--scheduler", str(cluster.file)]), ("local", [])):
        rc, wall = run(base + ["-o", str(tmp / f"pack-{label}"), *extra], dict(os.environ),
                       tmp / f"pack-{label}.log", args.end - elapsed())
        out[label] = {"exit_code": rc, "wall_s": round(wall, 1)}
        say(f"pack {label}: exit {rc} in {wall:.1f} s")
    trees = [{str(p.relative_to(tmp / f"pack-{l}")): p.read_bytes() for p in sorted((tmp / f"pack-{l}").rglob("*"))
              if p.is_file()} for l in ("dask", "local")]
    differ = sorted(p for p in set(trees[0]) | set(trees[1]) if trees[0].get(p) != trees[1].get(p))
    log = (tmp / "pack-dask.log").read_text(errors="replace")
    doc["pack"] = {**out, "files": len(trees[1]), "identical": not differ and bool(trees[1]), "differ": differ[:20],
                   "executor_summary": log[log.find("executor dask:"):].splitlines()[:8]}
    say(f"pack: {len(trees[1])} files, identical: {doc['pack']['identical']}")


def dry_run_environment(tmp: Path) -> None:
    """The stand-in nvcc first on PATH and tests/ on PYTHONPATH, for this process and every worker."""
    sys.path.insert(0, str(TESTS))
    from test_executor_build import FAKE_NVCC
    nvcc = tmp / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    # its own nvcc lock: the stand-in must not queue behind (or hold up) this machine's real compiles
    os.environ.update(PATH=f"{nvcc.parent}{os.pathsep}{os.environ['PATH']}", FAKE_NVCC_LOG=str(tmp / "nvcc.log"),
                      CUTEGEN_NVCC_LOCK=str(tmp / "nvcc.lock"),
                      PYTHONPATH=os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p))


def table(doc: dict) -> str:
    lines = []
    t = doc.get("tune")
    if t:
        lines.append("tune exit codes: " + ", ".join(f"{k} {v.get('exit_code', v.get('skipped'))}" for k, v in t.items()
                                                     if k in ("dask", "local")))
    if t and "compare" in t:
        c = t["compare"]
        lines.append(f"tune {len(c['problems'])} problems: compile phase dask {c['build_s_dask']} s vs local "
                     f"{c['build_s_local']} s; timing phase dask {c['time_s_dask']} s vs local {c['time_s_local']} s")
        lines.append(f"records: dask {c['records_dask']}, local {c['records_local']}, same in kind: {c['same_records']}")
        lines.append(f"{'problem':<20} {'dask pick':<16} {'us':>8} {'local pick':<16} {'us':>8} {'same':>5} "
                     f"{'x':>7} {'statuses':>8}")
        for r in c["problems"]:
            us = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            lines.append(f"{r['problem']:<20} {r['dask'] or '-':<16} {us(r['dask_us']):>8} {r['local'] or '-':<16} "
                         f"{us(r['local_us']):>8} {str(r['same_winner']):>5} {r['dask_pick_in_local_run_x']!s:>7} "
                         f"{'same' if r['same_statuses'] else 'DIFFER':>8}")
    p = doc.get("pack")
    if p:
        lines.append(f"pack: {p['skipped']}" if "skipped" in p else
                     f"pack {p['files']} files: byte-identical {p['identical']}; dask {p['dask']['wall_s']} s, "
                     f"local {p['local']['wall_s']} s")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/dask-tune"))
    ap.add_argument("--plan", type=Path, default=ROOT / "out/dask-plan")
    ap.add_argument("--phases", default="tune,pack")
    ap.add_argument("--workers", type=int, default=12, help="compile workers; the local run gets --jobs this")
    ap.add_argument("--end", type=float, default=430.0, help="no phase starts that would end after this")
    ap.add_argument("--dry-run", action="store_true", help="stand-in nvcc and GPU (tests/): plumbing only")
    args = ap.parse_args()
    phases = set(args.phases.split(","))
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"host": os.uname().nodename, "cpus": os.cpu_count(), "phases": sorted(phases), "dry_run": args.dry_run,
                 "workers": args.workers}
    tmp = Path(tempfile.mkdtemp(prefix="cutegen-dask-tune-"))
    if args.dry_run:
        dry_run_environment(tmp)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if "tune" in phases and not (args.plan / "plan.json").is_file():
        print(f"gpu_dask_tune: no plan at {args.plan} (bash bench/gpu_dask.sh --plan, then carry it)")
        return 2
    cluster = Cluster(tmp, per_worker_locks=True)
    try:
        cluster.add_workers(["gpu0"], "GPU=1", {"CUDA_VISIBLE_DEVICES": "0"})
        cluster.add_workers([f"compile{i}" for i in range(args.workers)], "MEM_GB=4")
        say(f"cluster: scheduler, 1 GPU worker, {args.workers} compile workers")
        if "tune" in phases:
            doc["tune"] = {"dask": tune_once(args, tmp, "dask", ["--executor", "dask", "--scheduler", str(cluster.file)])}
        if "pack" in phases:
            phase_pack(args, tmp, cluster, doc)
        cluster.close()   # the local run has the machine (and the GPU) to itself
        if "tune" in phases:
            spent = doc["tune"]["dask"]["wall_s"]
            if elapsed() + spent * 1.2 > args.end:
                doc["tune"]["local"] = {"skipped": f"would end past {args.end:g} s (the dask run took {spent} s)"}
            else:
                doc["tune"]["local"] = tune_once(args, tmp, "local", ["--jobs", str(args.workers)])
                if doc["tune"]["dask"]["doc"] and doc["tune"]["local"]["doc"]:   # both wrote their summary
                    doc["tune"]["compare"] = compare_tune(doc["tune"]["dask"], doc["tune"]["local"])
    finally:
        cluster.close()
        for run_ in (doc.get("tune") or {}).values():
            if isinstance(run_, dict):
                run_.pop("doc", None)          # its own file: tune-<label>.json
        doc["wall_s"] = round(elapsed(), 1)
        (args.out / "dask.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        for log in sorted(tmp.glob("*.log")):
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                print(f"--- {log.name} (last lines)\n" + "\n".join(text.splitlines()[-8:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
