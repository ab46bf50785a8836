"""The analytic prior's rates for a device kind (SM count, HBM bandwidth, tensor peak)."""
from __future__ import annotations

from cutegen.results.device import KINDS

from .. import cost as costmod

CALIBRATED_TFLOPS = 989.4   # search/cost.py's bf16 peak: the kind its constants describe


def rates(kind: str | None) -> "costmod.Rates | None":
    """Rates of ``kind`` for ``cost.cost_arrays(device=...)``; None where they are the model's own
    (132 SMs at the H100 SXM's peak and bandwidth: h100-sxm, h200) or the kind is unknown."""
    k = KINDS.get(kind or "")
    if k is None:
        return None
    r = costmod.Rates(k.sm_count, k.prior_hbm_gbps * 1e9, k.dense_bf16_tflops / CALIBRATED_TFLOPS)
    if r.sms == costmod.SMS and r.hbm_bytes_per_s == costmod.HBM_BYTES_PER_S and r.peak_scale == 1.0:
        return None
    return r
