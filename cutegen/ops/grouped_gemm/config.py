"""GroupedGemmConfig: every choice of a CUTLASS 4.2 SM90 ptr-array grouped kernel, as a frozen record.

Only the domain of each field is checked here; which combinations a kernel can take (tile against the
schedule, cluster size, stages in shared memory, swap-AB against the layout) are the grouped rule set's.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..._fields import as_choice, as_int, reject_unknown
from ...core.op import CanonicalConfig
from ...errors import FieldError

# KernelPtrArrayTmaWarpSpecializedCooperative / ...Pingpong (cutlass/gemm/dispatch_policy.hpp)
SCHEDULES = ("ptr_cooperative", "ptr_pingpong")
RASTER_ORDERS = ("heuristic", "along_m", "along_n")
TILE_M = (64, 128, 256)                    # WGMMA M is 64 per warpgroup; at most 4 rows of atoms
TILE_N = tuple(range(8, 257, 8))           # WGMMA N: multiples of 8 up to 256
TILE_K = (16, 32, 64, 128, 256)
CLUSTER = (1, 2, 4, 8)
MAX_STAGES = 16


@dataclass(frozen=True)
class GroupedGemmConfig(CanonicalConfig):
    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "ptr_cooperative"
    # Compute D_i^T = W_i X_i^T: the kernel's M mode runs along N (the weights' rows) and the tokens sit
    # on its N mode, so a decode-sized group (a handful of tokens) fills a narrow tile_n instead of
    # wasting most of a 64-row WGMMA.
    swap_ab: bool = False
    stages: int | None = None                  # None: as many as shared memory holds (StageCountAuto)
    raster: str = "heuristic"

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        for name, domain in (("tile_m", TILE_M), ("tile_n", TILE_N), ("tile_k", TILE_K),
                             ("cluster_m", CLUSTER), ("cluster_n", CLUSTER)):
            value = as_int(name, getattr(self, name), lo=min(domain), hi=max(domain))
            if value not in domain:
                shown = "multiples of 8 from 8 to 256" if domain is TILE_N else ", ".join(map(str, domain))
                raise FieldError(name, f"{value} is not one of {shown}")
            set_(name, value)
        as_choice("schedule", self.schedule, SCHEDULES)
        if not isinstance(self.swap_ab, bool):
            raise FieldError("swap_ab", f"expected true or false, got {self.swap_ab!r}")
        if self.stages is not None:
            set_("stages", as_int("stages", self.stages, lo=1, hi=MAX_STAGES))
        as_choice("raster", self.raster, RASTER_ORDERS)

    @property
    def tile(self) -> tuple[int, int, int]:
        return (self.tile_m, self.tile_n, self.tile_k)

    @property
    def cluster(self) -> tuple[int, int, int]:
        return (self.cluster_m, self.cluster_n, 1)

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    def short_name(self) -> str:
        sched = {"ptr_cooperative": "coop", "ptr_pingpong": "pp"}[self.schedule]
        parts = [f"{self.tile_m}x{self.tile_n}x{self.tile_k}", f"c{self.cluster_m}x{self.cluster_n}", sched,
                 f"s{self.stages}" if self.stages is not None else "sauto"]
        if self.swap_ab:
            parts.append("swap")
        if self.raster != "heuristic":
            parts.append(self.raster.replace("_", ""))
        return "_".join(parts)

    # --- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> "GroupedGemmConfig":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        reject_unknown(where, data, (f.name for f in fields(cls)))
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def replace(self, **changes) -> "GroupedGemmConfig":
        return replace(self, **changes)
