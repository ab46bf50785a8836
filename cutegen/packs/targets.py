"""Device kinds a pack can be generated for, and the cost model set to one of them.

The analytic model (``cutegen.search.cost``) is written for an H100 SXM: 132 SMs and 3.35 TB/s of
HBM in module constants. A pack for another kind re-prices the same candidates with that kind's SM
count and bandwidth, so wave quantisation and the memory floor move with the device. Peak MMA rates
per SM and the fitted L2/store rates stay as they are: the kinds below share the SM (GH100) and only
the H20's clocks differ, which the model does not know yet (the results database will).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..errors import FieldError


@dataclass(frozen=True)
class Target:
    kind: str            # normalised as cutegen.results.device_kind names it
    sms: int
    hbm_bytes_per_s: float
    note: str


# SM counts and HBM bandwidth from NVIDIA's product specifications.
TARGETS = {
    "h100-sxm": Target("h100-sxm", 132, 3.35e12, "H100 SXM5 80 GB: 132 SMs, HBM3 3.35 TB/s"),
    "h100-pcie": Target("h100-pcie", 114, 2.0e12, "H100 PCIe 80 GB: 114 SMs, HBM2e 2.0 TB/s"),
    "h200": Target("h200", 132, 4.8e12, "H200 SXM 141 GB: 132 SMs, HBM3e 4.8 TB/s"),
    "h20": Target("h20", 78, 4.0e12, "H20 96 GB: 78 SMs, HBM3 4.0 TB/s"),
}


def target(kind: str) -> Target:
    if kind not in TARGETS:
        raise FieldError("--target", f"{kind!r} is not one of {', '.join(TARGETS)}")
    return TARGETS[kind]


@contextlib.contextmanager
def priced_for(t: Target):
    """Within this block the cost model (and the search, which ranks with it) prices for ``t``.

    The model reads its constants at call time, so they are swapped here and restored on exit.
    Single-threaded use only: the pack command prices one target at a time.
    """
    from ..search import cost
    saved = (cost.SMS, cost.HBM_BYTES_PER_S, dict(cost.ACTIVE_CTAS))
    scale = t.sms / saved[0]
    try:
        cost.SMS = t.sms
        cost.HBM_BYTES_PER_S = t.hbm_bytes_per_s
        # Resident CTAs by cluster size scale with the SM count (GPC granularity strands a share).
        cost.ACTIVE_CTAS = {c: max(c, int(n * scale) // c * c) for c, n in saved[2].items()}
        yield t
    finally:
        cost.SMS, cost.HBM_BYTES_PER_S, cost.ACTIVE_CTAS = saved[0], saved[1], saved[2]
