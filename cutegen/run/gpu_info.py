"""The GPU this process runs on, as `cutegen validate/bench --op` records it.

A leaf module: the watchdog's child (``cutegen._runner_worker``) imports it without importing
``cutegen.run.ops`` (which imports the watchdog)."""
from __future__ import annotations

from ..errors import CutegenError


def device_info() -> dict:
    """The GPU this process runs on (torch), with the results database's device kind."""
    import torch
    from ..results import device_kind
    if not torch.cuda.is_available():
        raise CutegenError("no CUDA device: `cutegen validate/bench --op` run on the GPU machine")
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "sm_count": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}", "memory_gib": round(props.total_memory / 2**30, 1),
            "kind": device_kind(props.name, props.multi_processor_count),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
