"""Measurements -> samples the correction trains on: the completed configuration, the prior's cost and
breakdown for the measured device kind, and the measured time.

Used: validated benchmark timings of CUTLASS C++ kernels (``cutlass``, ``cutlass_builder``). DSL kernels are
other code for the same configuration, and a validation run's single wall-clock call is no benchmark.
A record whose configuration the rules reject or warn about (the search treats warnings as broken, e.g. the FP8
accumulators that spill) is left out: the search never ranks it.
"""
from __future__ import annotations

from dataclasses import dataclass
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


@lru_cache(maxsize=8192)
def complete(problem, config):
    """(completed config, stages) as the rules resolve them, or None when the rules reject it."""
    from cutegen.legality import check_config

    rep = check_config(problem, config)
    if not rep.legal or rep.warnings or rep.config is None or rep.stages is None:
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
           harness: str = "bench", source: str = "") -> Sample:
    prior, bd = costmod.config_cost(problem, config, stages, device=rates(device_kind))
    return Sample(problem, config, stages, prior, bd, measured_us, harness, source, device_kind or "")


def from_measurements(measurements, device_kind: str | None = None) -> list[Sample]:
    """Samples of one device kind (None: of every kind, each costed with its own kind's prior)."""
    out = []
    for m in measurements:
        if ((device_kind is not None and m.device_kind != device_kind) or not m.validated or not m.is_benchmark
                or m.backend not in BACKENDS):
            continue
        done = complete(m.problem, m.config)
        if done is None:
            continue
        out.append(sample(m.problem, done[0], done[1], m.device_kind, m.median_us,
                          harness=harness(m.timing_method), source=m.source))
    return out
