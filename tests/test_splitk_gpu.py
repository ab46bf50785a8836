"""On a Hopper GPU: stream-K kernels relaunched many times on ONE workspace, every result checked.

This is the proof behind search/legality_analysis.py not pruning SM90-STREAMK-TMA-EPILOGUE-HANG:
on an H100 the rulebook's stream-K configurations hung when relaunched on a stale workspace
(tests/data/streamk_stale_workspace_h100.jsonl); cutegen's ABI runs initialize() (which resets the
stream-K workspace) on every call. Each kernel runs every decomposition at two sizes, RELAUNCHES
times each on the same workspace buffer, in a watchdog worker (a hang is a failure, not a stuck run).

Kernels: every built stream-K kernel under generated/forms/relaunch/sm90a (the rulebook's hang
configurations, bench/render_streamk_relaunch.py), generated/forms/sm90a and generated/sm90a.
Build them first (bench/gpu_splitk.sh does). Records go to $CUTEGEN_SPLITK_OUT (JSON lines) if set.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="GPU tests need torch (pip install -e '.[gpu]')")
if not torch.cuda.is_available():
    pytest.skip("GPU tests need a CUDA device; none is visible", allow_module_level=True)

from cutegen import runner as R  # noqa: E402
from cutegen.launch_plan import LaunchPlan  # noqa: E402
from cutegen.legality.stream_k import check_plan  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ROOTS = [REPO / "generated" / "forms" / "relaunch" / "sm90a", REPO / "generated" / "forms" / "sm90a",
         REPO / "generated" / "sm90a"]
RELAUNCHES = int(os.environ.get("CUTEGEN_RELAUNCHES", "100"))
# every plan at 2048^3; at 4096^3 (where the H100 hung) the two that run stream-K there
PLANS = {2048: (LaunchPlan("stream_k"), LaunchPlan("heuristic"), LaunchPlan("data_parallel"),
                LaunchPlan("split_k", 2), LaunchPlan("stream_k", reduction="nondeterministic")),
         4096: (LaunchPlan("stream_k"), LaunchPlan("heuristic"))}


def _streamk_kernels():
    found, _ = R.discover_kernels([r for r in ROOTS if r.is_dir()])
    return [k for k in found if k.config.tile_scheduler == "stream_k"]


KERNELS = _streamk_kernels()


def _record(rec: dict) -> None:
    path = os.environ.get("CUTEGEN_SPLITK_OUT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def worker():
    # one worker for every kernel (a hang kills its child; the next request starts a fresh one)
    with R.Worker(init={"op": "init"}) as w:
        yield w


@pytest.mark.skipif(not KERNELS, reason="no built stream-K kernel (bench/gpu_splitk.sh builds them)")
@pytest.mark.parametrize("info", KERNELS, ids=[k.label for k in KERNELS])
def test_relaunch_on_one_workspace_is_correct_every_time(info, worker):
    failures = []
    for size, plans in PLANS.items():
        problem = info.problem.replace(m=size, n=size, k=size)
        for i, plan in enumerate(plans):
            if check_plan(problem, info.config, plan)[0]:
                continue
            beta = 0.5 if problem.dtype_c != "void" else 0.0
            case = R.Case(f"relaunch_{size}_{plan.label().replace(' ', '_')}", size, size, size, 1, 1.0, beta,
                          seed=300 + i, plan=plan.to_dict(), repeat=RELAUNCHES)
            task = {"op": "validate_case", "library": str(info.library), "problem": info.problem.to_dict(),
                    "config": info.config.to_dict(), "case": case.to_dict(),
                    "tolerance": R.tolerance(info.problem)}
            reply = worker.request(task, timeout=60)
            rec = {"kernel": info.label, "hash": info.hash, "size": size, "plan": plan.to_dict(),
                   "relaunches": RELAUNCHES, "status": reply.status,
                   "result": reply.value if reply.ok else reply.message}
            _record(rec)
            if not reply.ok:
                failures.append(f"{case.name}: {reply.status}: {reply.message}")
                if reply.status in ("hang", "crash"):
                    break
            elif not reply.value.get("ok"):
                failures.append(f"{case.name}: {reply.value.get('reason')}")
    assert not failures, "\n".join(failures)
