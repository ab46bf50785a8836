"""Render the rulebook's stream-K hang configurations (section H) as cutegen kernels, for the relaunch
test (tests/test_splitk_gpu.py, bench/gpu_splitk.sh).

On an H100 these hung when relaunched on a stale workspace (tests/data/streamk_stale_workspace_h100.jsonl:
128x96x128, 3 stages, cooperative, TMA cooperative epilogue, clusters 1x1 and 2x2). Through cutegen's
ABI every call re-initializes the workspace; the test relaunches them many times on one workspace.

    python bench/render_streamk_relaunch.py      # writes generated/forms/relaunch/sm90a/<problem>/
"""
from __future__ import annotations

from pathlib import Path

from cutegen import GemmProblem, KernelConfig
from cutegen import render as render_mod

OUT = Path(__file__).resolve().parents[1] / "generated" / "forms" / "relaunch"
HANG = {"tile_shape": [128, 96, 128], "stages": 3, "mainloop_schedule": "cooperative",
        "epilogue_schedule": "tma_warp_specialized_cooperative", "tile_scheduler": "stream_k"}
# (problem size, cluster) of the two hangs; each kernel is relaunched at both sizes by the test
CASES = ((4096, (1, 1, 1)), (2048, (2, 2, 1)))


def kernels():
    for size, cluster in CASES:
        problem = GemmProblem(m=size, n=size, k=size)
        yield render_mod.render(problem, KernelConfig.from_dict({**HANG, "cluster_shape": list(cluster)}),
                                "cutlass", cost={"launch_plan": {"decomposition": "stream_k"}})


if __name__ == "__main__":
    for k in kernels():
        d = OUT / k.problem.target / k.problem.name
        print(f"{'wrote' if k.write(d) else 'same':6s} {d} [{k.config.short_name()}]")
