"""nvMatmulHeuristics as a contender: NVIDIA's analytic ranker, mapped to cutegen configurations.

``pick(problem, device_kind, count=8) -> Pick``: nvMMH's proposals for the problem, each mapped to a
``KernelConfig`` and judged by cutegen's rules; ``Pick.chosen`` is the first legal one (rendered
through the same explicit CUTLASS path as cutegen's own kernels), ``Pick.rejected`` the proposals
ranked above it with the rules they break. It answers "why not just ask NVIDIA's heuristic?".
"""
from __future__ import annotations

from ..problem import GemmProblem
from .mapping import GPU_OF_KIND, Judged, Pick, Proposal, judge, layout_name, precision, to_config
from .query import REQUIREMENT, gpu_for, proposals


def pick(problem: GemmProblem, device_kind: str, count: int = 32, *, propose=None) -> Pick:
    """Judge nvMMH's top ``count`` for ``problem`` on ``device_kind``; ``propose`` replaces the
    library (``(problem, device_kind, count) -> [Proposal]``, for tests and recorded answers).

    Proposals that differ only in what cutegen's configuration does not hold (nvMMH's warp tile)
    map to one configuration and are judged once, under the best rank. ``count`` is generous because
    for fp8 the first ten proposals can all overflow shared memory (measured: 4096^3 e4m3, H100 SXM).
    """
    props = (propose or proposals)(problem, device_kind, count)
    judged, seen = [], set()
    for p in props:
        j = judge(problem, p)
        key = j.config.to_json() if j.config is not None else "|".join(j.reasons)
        if key not in seen:
            seen.add(key)
            judged.append(j)
    return Pick(problem, GPU_OF_KIND.get(device_kind, device_kind), precision(problem), layout_name(problem), judged)


__all__ = ["pick", "Pick", "Judged", "Proposal", "judge", "to_config", "precision", "layout_name", "proposals",
           "gpu_for", "GPU_OF_KIND", "REQUIREMENT"]
