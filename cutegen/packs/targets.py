"""Device kinds a pack can be generated for: the results database's kinds (``cutegen.results.KINDS``).

A pack for a kind is selected with the cost model priced for that kind (its SM count, the bandwidth and
tensor peak the analytic prior uses: ``cutegen.search.learned.device.rates``, the same rates as
``cutegen search --device``) and, with ``--db``, that kind's measurements. Where the prior's rates are
the model's own (h100-sxm, and h200, whose constants were fitted on an H200 with the H100's bandwidth),
only measurements tell the kinds apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import FieldError


@dataclass(frozen=True)
class Target:
    kind: str
    sms: int
    hbm_bytes_per_s: float        # the product brief's
    prior_hbm_bytes_per_s: float  # what the analytic prior prices with
    note: str

    @property
    def rates(self) -> Any:
        """``cost.Rates`` for this kind, or None where they are the model's own."""
        from ..search.learned.device import rates
        return rates(self.kind)


def kinds() -> list[str]:
    from ..results import KINDS
    return list(KINDS)


def target(kind: str) -> Target:
    from ..results import KINDS
    k = KINDS.get(kind)
    if k is None:
        raise FieldError("--target", f"{kind!r} is not one of {', '.join(KINDS)}")
    return Target(k.kind, k.sm_count, k.hbm_gbps * 1e9, k.prior_hbm_gbps * 1e9,
                  f"{k.kind}: {k.sm_count} SMs, {k.hbm_gbps / 1000:g} TB/s HBM, {k.dense_bf16_tflops:g} TFLOP/s dense "
                  f"bf16 (the cost model prices {k.prior_hbm_gbps / 1000:g} TB/s)")
