"""CUTLASS 4.2's SM90 stream-K tile scheduler: what a run-time launch plan may ask of a kernel.

A ``LaunchPlan`` (cutegen/launch_plan.py: decomposition, splits, reduction) is a run-time argument
of a compiled kernel, so these rules are judged on (problem, config, plan), not on the config
alone: ``check_plan(problem, config, plan)``. The kernel-level stream-K rules (cooperative only,
the relaunch hazard) live in ``cutlass_sm90.py``.

Sources: gemm/kernel/sm90_tile_scheduler_stream_k.hpp (``Arguments``, ``can_implement``),
gemm/kernel/tile_scheduler_params.h (``adjust_split_count``, ``select_decomposition_mode``),
gemm/kernel/tile_scheduler.hpp (``PersistentScheduler`` has no split arguments).
"""
from __future__ import annotations

from dataclasses import dataclass

from cutegen.config import KernelConfig
from cutegen.launch_plan import LaunchPlan, k_tiles
from cutegen.problem import GemmProblem

from .rule import RuleSet, Violation

STREAM_K_RULES = RuleSet("stream_k")
_rule = STREAM_K_RULES.rule
_SK = "CUTLASS 4.2 gemm/kernel/sm90_tile_scheduler_stream_k.hpp"
_P = "CUTLASS 4.2 gemm/kernel/tile_scheduler_params.h"
H100_SXM_SMS = 132


@dataclass(frozen=True)
class PlanContext:
    problem: GemmProblem
    config: KernelConfig
    plan: LaunchPlan

    @property
    def k_tiles(self) -> int:
        return k_tiles(self.problem.k, self.config.tile_shape[2])


@_rule("SM90-PLAN-NEEDS-STREAMK-SCHEDULER", rulebook="E10/E11",
       source=f"CUTLASS 4.2 gemm/kernel/tile_scheduler.hpp: PersistentScheduler's Arguments are max_swizzle_size "
              f"and raster_order only; {_SK}:156-202 (the stream-K Arguments carry splits, reduction, decomposition)",
       summary="a plan other than the default (heuristic or data-parallel, 1 split, deterministic) needs "
               "tile_scheduler=stream_k")
def _needs_streamk(c: PlanContext):
    p = c.plan
    plain = p.decomposition in ("heuristic", "data_parallel") and p.splits == 1 and p.reduction == "deterministic"
    if c.config.tile_scheduler != "stream_k" and not plain:
        return (f"plan {p.label()} on a {c.config.tile_scheduler} kernel: only the stream-K scheduler "
                f"takes a decomposition, split count or reduction mode")
    return None


@_rule("SM90-STREAMK-SPLITS-MODE", rulebook="E10",
       source=f"{_SK}:248-253 can_implement (Split count > 1 is only valid for heuristic and split-K "
              "decomposition modes)",
       summary="splits > 1 only with decomposition heuristic or split_k")
def _splits_mode(c: PlanContext):
    if c.plan.splits > 1 and c.plan.decomposition not in ("heuristic", "split_k"):
        return f"splits={c.plan.splits} with decomposition {c.plan.decomposition}: can_implement fails"
    return None


@_rule("SM90-SPLITK-SPLITS-MIN", rulebook="E10",
       source=f"{_P}:820-832 select_decomposition_mode (SplitK with 1 split runs every tile whole, with a "
              "reduction workspace for nothing); cutegen: a plan states what runs",
       summary="decomposition split_k has splits >= 2")
def _splits_min(c: PlanContext):
    if c.plan.decomposition == "split_k" and c.plan.splits < 2:
        return f"decomposition split_k with splits={c.plan.splits}: nothing is split (use data_parallel)"
    return None


@_rule("SM90-SPLITK-SPLITS-KTILES", rulebook="E10",
       source=f"{_P}:1594-1619 adjust_split_count (Don't split by more than the K tile iterations): CUTLASS "
              "silently lowers the count, so the plan would not say what runs",
       summary="splits <= ceil(K / Tile_K), the k-blocks of one output tile")
def _splits_ktiles(c: PlanContext):
    if c.plan.splits > 1 and c.plan.splits > c.k_tiles:
        return (f"splits={c.plan.splits} > {c.k_tiles} k-blocks per tile (K={c.problem.k}, "
                f"Tile_K={c.config.tile_shape[2]}): CUTLASS would lower it to {c.k_tiles}")
    return None


@_rule("SM90-SPLITK-SPLITS-SMS", rulebook="E10", enforced=False,
       source=f"{_P}:1600-1603 adjust_split_count (Don't split by more than the available number of SMs); "
              "the SM count is the device's: 132 on an H100 SXM, fewer on others",
       summary="splits <= the device's SM count (132 on an H100 SXM); above it CUTLASS lowers the count")
def _splits_sms(c: PlanContext):
    if c.plan.splits > H100_SXM_SMS:
        return f"splits={c.plan.splits} > {H100_SXM_SMS} SMs of an H100 SXM: CUTLASS lowers it to the SM count"
    return None


@_rule("SM90-STREAMK-NONDETERMINISTIC", rulebook="E10", enforced=False,
       source="CUTLASS 4.2 gemm/kernel/tile_scheduler_detail.hpp:52-70 ReductionMode::Nondeterministic "
              "(partials accumulate atomically in arrival order)",
       summary="a nondeterministic reduction of split tiles gives results that differ between runs in the "
               "last bits (numerics, not correctness)")
def _nondeterministic(c: PlanContext):
    if c.plan.reduction == "nondeterministic" and c.plan.decomposition != "data_parallel":
        return "reduction=nondeterministic: split tiles sum their partials in arrival order; runs differ in rounding"
    return None


@_rule("SM90-CPASYNC-SPLIT-KRESIDUE", rulebook="W02",
       source="GPU runs: H100 2026-11-24 (8/8 wrong, rel. error 1.7-23, initialize() before every launch, beta = 0 "
              "too); H200 2026-11-26 random sample (2/80 wrong, both this form, e.g. M=6370 N=8 K=45280 bf16 NN); "
              "CUTLASS 4.2 collective/sm90_mma_multistage_gmma_ss_warpspecialized.hpp:221-288 (the K residue is "
              "predicated on the first k-tile of each work unit, right only for a unit starting at k = 0)",
       summary="a cp.async stream-K kernel runs only data_parallel plans when K % Tile_K != 0 (heuristic may split)")
def _cp_async_split_residue(c: PlanContext):
    # The exact failing predicate, per launch. The configuration rule SM90-CPASYNC-STREAMK (cp_async.py)
    # makes the whole kernel form illegal because K is a run-time argument; this one says which launches
    # are wrong, for a caller judging a plan directly (check_plan) and for anyone lifting that rule.
    tile_k = c.config.tile_shape[2]
    if (c.config.mainloop_load == "cp_async" and c.config.tile_scheduler == "stream_k"
            and c.plan.decomposition != "data_parallel" and c.problem.k % tile_k):
        return (f"plan {c.plan.label()} on a cp.async stream-K kernel with K={c.problem.k} not a multiple of "
                f"Tile_K={tile_k}: a work unit starting mid-K mispredicates its first k-tile (wrong results)")
    return None


def check_plan(problem: GemmProblem, config: KernelConfig, plan: LaunchPlan) -> tuple[list[Violation], list[Violation]]:
    """(enforced violations, warnings) of running ``config`` on ``problem`` with ``plan``."""
    vs = STREAM_K_RULES.evaluate(PlanContext(problem, config, plan))
    return [v for v in vs if v.enforced], [v for v in vs if not v.enforced]
