"""The stream-K relaunch proof: kernels relaunched many times on ONE workspace, every result checked.

On an H100 the rulebook's stream-K configurations (section H: 128x96x128, 3 stages, cooperative, TMA
cooperative epilogue, clusters 1x1 and 2x2) hung when relaunched on a stale workspace
(tests/data/streamk_stale_workspace_h100.jsonl). cutegen's ABI re-initializes the workspace on every
call, which is why the search no longer prunes SM90-STREAMK-TMA-EPILOGUE-HANG; this is the GPU check.

    python bench/streamk_relaunch.py render          # here: generated/forms/relaunch/sm90a/<problem>/
    python bench/streamk_relaunch.py check [--out F]  # GPU: every built stream-K kernel under ROOTS

``check`` runs each kernel at 2048^3 (five plans) and 4096^3 (stream-K and heuristic, where the H100
hung), RELAUNCHES launches per plan on one workspace buffer, in a watchdog worker (a hang is reported,
not waited for). It needs no pytest (tests/test_splitk_gpu.py wraps it) and prints one line per case.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "generated" / "forms" / "relaunch"
ROOTS = (OUT / "sm90a", REPO / "generated" / "forms" / "sm90a", REPO / "generated" / "sm90a")
HANG = {"tile_shape": [128, 96, 128], "stages": 3, "mainloop_schedule": "cooperative",
        "epilogue_schedule": "tma_warp_specialized_cooperative", "tile_scheduler": "stream_k"}
# (problem size, cluster) of the two hangs; each kernel is relaunched at both sizes by ``check``
CASES = ((4096, (1, 1, 1)), (2048, (2, 2, 1)))
RELAUNCHES = int(os.environ.get("CUTEGEN_RELAUNCHES", "100"))


def kernels():
    from cutegen import GemmProblem, KernelConfig
    from cutegen import render as render_mod

    for size, cluster in CASES:
        problem = GemmProblem(m=size, n=size, k=size)
        yield render_mod.render(problem, KernelConfig.from_dict({**HANG, "cluster_shape": list(cluster)}),
                                "cutlass", cost={"launch_plan": {"decomposition": "stream_k"}})


def plans():
    from cutegen.launch_plan import LaunchPlan

    return {2048: (LaunchPlan("stream_k"), LaunchPlan("heuristic"), LaunchPlan("data_parallel"),
                   LaunchPlan("split_k", 2), LaunchPlan("stream_k", reduction="nondeterministic")),
            4096: (LaunchPlan("stream_k"), LaunchPlan("heuristic"))}


def streamk_kernels(roots=ROOTS):
    from cutegen import runner as R

    found, _ = R.discover_kernels([r for r in roots if Path(r).is_dir()])
    return [k for k in found if k.config.tile_scheduler == "stream_k"]


def check_kernel(worker, info, relaunches: int = RELAUNCHES, timeout: float = 60.0, say=print,
                 plan_set: dict | None = None) -> list[dict]:
    """One record per (size, plan) of ``plan_set`` (default ``plans()``): the worker's validate_case reply
    for ``relaunches`` launches on one workspace."""
    from cutegen import runner as R
    from cutegen.legality.stream_k import check_plan

    records = []
    for size, size_plans in (plan_set or plans()).items():
        problem = info.problem.replace(m=size, n=size, k=size)
        for i, plan in enumerate(size_plans):
            if check_plan(problem, info.config, plan)[0]:
                continue
            beta = 0.5 if problem.dtype_c != "void" else 0.0
            case = R.Case(f"relaunch_{size}_{plan.label().replace(' ', '_')}", size, size, size, 1, 1.0, beta,
                          seed=300 + i, plan=plan.to_dict(), repeat=relaunches)
            task = {"op": "validate_case", "library": str(info.library), "problem": info.problem.to_dict(),
                    "config": info.config.to_dict(), "case": case.to_dict(), "tolerance": R.tolerance(info.problem)}
            reply = worker.request(task, timeout=timeout)
            ok = reply.ok and bool(reply.value.get("ok"))
            rec = {"kernel": info.label, "hash": info.hash, "size": size, "plan": plan.to_dict(),
                   "relaunches": relaunches, "status": reply.status, "ok": ok,
                   "result": reply.value if reply.ok else reply.message}
            records.append(rec)
            why = "" if ok else f": {reply.value.get('reason') if reply.ok else reply.message}"
            say(f"{'ok  ' if ok else 'FAIL'} {info.label} {case.name} x{relaunches}{why}")
            if reply.status in ("hang", "crash"):
                return records
    return records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("render", "check"))
    ap.add_argument("--out", help="check: append one JSON line per case here")
    args = ap.parse_args(argv)
    if args.mode == "render":
        for k in kernels():
            d = OUT / k.problem.target / k.problem.name
            print(f"{'wrote' if k.write(d) else 'same':6s} {d} [{k.config.short_name()}]")
        return 0
    from cutegen import runner as R

    infos = streamk_kernels()
    if not infos:
        print("no built stream-K kernel under " + ", ".join(map(str, ROOTS)))
        return 1
    bad = 0
    with R.Worker(init={"op": "init"}) as worker:
        for info in infos:
            for rec in check_kernel(worker, info):
                bad += not rec["ok"]
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(rec, sort_keys=True) + "\n")
    print(f"relaunch: {len(infos)} kernels, {bad} failing cases")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
