"""Measurements -> samples the correction trains on: the completed configuration, the prior's cost and
breakdown for the measured device kind, and the measured time.

Used: validated benchmark timings of CUTLASS C++ kernels (``cutlass``, ``cutlass_builder``). DSL kernels are
other code for the same configuration, and a validation run's single wall-clock call is no benchmark.
A record whose configuration the rules reject or warn about (the search treats warnings as broken, e.g. the FP8
accumulators that spill) is left out: the search never ranks it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from .. import cost as costmod
from .device import rates

BACKENDS = ("cutlass", "cutlass_builder")


@dataclass(frozen=True)
class Sample:
    problem: object
    config: object          # completed KernelConfig
    stages: int
    prior_us: float
    breakdown: dict
    measured_us: float      # NaN when predicting
    harness: str            # how it was timed (see harness()); predictions are for "bench"
    source: str
    device_kind: str = ""
    stated: object = None   # the problem as measured, where the kernel swaps AB (``problem`` is then its transpose)
    plan: object = None     # the LaunchPlan a stream-K measurement ran under (None: costed as the stream-K decomposition)

    @property
    def stated_problem(self):
        """The problem the caller asked for: the kernels of both orientations are alternatives for it."""
        return self.problem if self.stated is None else self.stated


@lru_cache(maxsize=8192)
def complete(problem, config):
    """(completed config, stages) as the rules resolve them, or None when the rules reject it."""
    from cutegen.legality import check_config

    from cutegen.legality.cp_async import ADVISORY
    from cutegen.legality.cutlass_sm90 import MOOT_UNDER_CUTEGEN_ABI

    rep = check_config(problem, config)
    # the warnings the search ranks through (search/legality_analysis.py): the stream-K relaunch hazard
    # cutegen's ABI makes moot and the cp.async synccheck finding. Dropping them dropped every stream-K
    # benchmark (43 on the H100 of 2026-11-24), so neither model ever saw one
    broken = [w for w in (rep.warnings or []) if w.rule_id not in MOOT_UNDER_CUTEGEN_ABI | ADVISORY]
    if not rep.legal or broken or rep.config is None or rep.stages is None:
        return None
    return rep.config, int(rep.stages)


HARNESSES = ("bench", "same-inputs", "interleaved")


def harness(timing_method: str) -> str:
    """The timing harness, as far as it moves the times: the bench worker rotates inputs past L2 ("bench");
    the config oracle times the same inputs every call, L2 warm ("same-inputs"); the DSL comparison
    interleaves two backends per round, back to back (its C++ times run 1.07-2.49x the bench's for the same
    kernel on the H200: the ABI's per-call host setup is not hidden there)."""
    if "same-inputs" in timing_method:
        return "same-inputs"
    if "interleaved" in timing_method:
        return "interleaved"
    return "bench"


def sample(problem, config, stages: int, device_kind: str | None, measured_us: float = float("nan"),
           harness: str = "bench", source: str = "", plan=None) -> Sample:
    """``plan``: the LaunchPlan a stream-K kernel ran under; None prices the stream-K decomposition, as before
    measurements kept their plans (a persistent kernel has none and ignores it)."""
    prior, bd = costmod.config_cost(problem, config, stages, plan=plan, device=rates(device_kind))
    return Sample(problem, config, stages, prior, bd, measured_us, harness, source, device_kind or "", plan=plan)


def samples_for(problem, candidates, device_kind: str | None) -> list[Sample]:
    """``sample`` of each (completed config, stages) candidate of one problem, as predictions ("bench", no plan):
    the prior's costs and breakdowns from one vectorised cost_arrays call (the search predicts 64 candidates per
    orientation; one config_cost each was a third of a learned search). The same values as ``sample``, key for
    key; staged kernels (their copies priced on the caller's problem) go one by one."""
    import numpy as np

    from cutegen.staging import staged_operands

    out: list = [None] * len(candidates)
    batch = []
    for i, (c, st) in enumerate(candidates):
        if staged_operands(c):
            out[i] = sample(problem, c, st, device_kind)
        else:
            batch.append(i)
    if batch:
        cfgs = [candidates[i][0] for i in batch]
        codes = [costmod.config_codes(c) for c in cfgs]
        n = len(batch)
        total, parts = costmod.cost_arrays(
            problem, [c.tile_shape[0] for c in cfgs], [c.tile_shape[1] for c in cfgs], [c.tile_shape[2] for c in cfgs],
            [c.cluster_shape[0] for c in cfgs], [c.cluster_shape[1] for c in cfgs], [x[0] for x in codes],
            [x[1] for x in codes], [x[2] for x in codes], [candidates[i][1] for i in batch],
            [costmod.RASTERS.index(c.raster_order) for c in cfgs], [c.raster_swizzle for c in cfgs],
            device=rates(device_kind), decomposition=[costmod.DECOMP_STREAM_K] * n, splits=[1] * n,
            instr_n=[_priced_instruction_n(c) for c in cfgs])
        total = np.broadcast_to(np.asarray(total, dtype=np.float64).reshape(-1), (n,))
        cols = {k: np.broadcast_to(np.asarray(v).reshape(-1), (n,)) for k, v in parts.items()}
        for j, i in enumerate(batch):
            c, st = candidates[i]
            sc = codes[j][2]
            bd = {k: round(float(v[j]), 4) for k, v in cols.items() if sc == 1 or k not in ("reduction_us", "workspace_bytes")}
            bd["stages"] = st
            bd["predicted_us"] = round(float(total[j]), 3)
            bd["predicted_tflops"] = round(problem.flops / (float(total[j]) * 1e-6) / 1e12, 1)
            out[i] = Sample(problem, c, st, float(total[j]), bd, float("nan"), "bench", "", device_kind or "")
    return out


def _priced_instruction_n(config) -> int:
    """The WGMMA N ``samples_for`` prices a candidate with: a non-standard instruction (a wave tile's full width,
    m64n136, m64n208, ...) as the config names it, as ``sample`` (config_cost) does. Elsewhere ss_op_selector's
    width of the tile, as before: a tile the search built from several narrower instructions (128x256 from two
    m64n128) is priced here with the tile's width but by config_cost with its own; equalising that moves the
    learned ranking of committed packs (bench/packs/moe), so it is left for a deliberate change (NOTES.md,
    "Wave tiles priced")."""
    n = costmod.instruction_n_of(config)
    return n if n not in costmod.STANDARD_INSTRUCTION_N else int(costmod._ss_op_n([config.tile_shape[1]])[0])


def from_measurements(measurements, device_kind: str | None = None) -> list[Sample]:
    """Samples of one device kind (None: of every kind, each costed with its own kind's prior)."""
    from cutegen.problem import GemmProblem

    out = []
    for m in measurements:
        if not isinstance(m.problem, GemmProblem):
            continue       # another operation's record (attention, grouped GEMM): not GEMM's to learn from
        if ((device_kind is not None and m.device_kind != device_kind) or not m.validated or not m.is_benchmark
                or m.backend not in BACKENDS):
            continue
        problem, config = oriented(m.problem, m.config)
        done = complete(problem, config)
        if done is None:
            continue
        s = sample(problem, done[0], done[1], m.device_kind, m.median_us, harness=harness(m.timing_method),
                   source=m.source, plan=run_plan(m, done[0]))
        out.append(s if problem == m.problem else replace(s, stated=m.problem))
    return out


def run_plan(m, config):
    """The LaunchPlan measurement ``m`` ran under, where it says so and the kernel is stream-K (a plan is the
    stream-K scheduler's run-time argument; nothing else takes one). A split-K x2 kernel costed as the
    stream-K decomposition read 58.5 us where its own plan prices 56.2 (bf16 128x8192x8192, H100, 62 us)."""
    if getattr(m, "launch_plan", None) is None or config.tile_scheduler != "stream_k":
        return None
    return m.plan


def oriented(problem, config):
    """(problem, config) as the search costs them: a swap-AB kernel computes the transposed problem
    with an unswapped configuration (search/engine.py costs each orientation so, and sets ``swap_ab``
    only on the ranked result). Costing the stated problem with the swapped kernel's tile put its
    64-256-row tile mode over the few rows of M: the prior read 3-9x too slow on every measured
    swapped decode kernel (H100, 2026-11-24)."""
    if getattr(config, "swap_ab", False):
        from cutegen.swap_ab import transposed

        return transposed(problem), config.replace(swap_ab=False)
    return problem, config
