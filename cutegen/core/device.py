"""Device kinds, for every operation: the normalised name a measurement is filed under and the
figures (SMs, bandwidth, peak) a cost model reads. One table, kept in ``cutegen.results.device``."""
from __future__ import annotations

from ..results.device import KINDS, DeviceKind, device_kind, sm_count_of  # noqa: F401

__all__ = ["KINDS", "DeviceKind", "device_kind", "sm_count_of"]
