"""LaunchPlan: how a stream-K kernel decomposes one problem at run time.

CUTLASS 4.2's SM90 stream-K tile scheduler (``PersistentTileSchedulerSm90StreamK``,
gemm/kernel/sm90_tile_scheduler_stream_k.hpp) takes the decomposition, the split count and the
reduction mode as *run-time* ``Arguments``: one compiled kernel serves data-parallel, split-K with any
split count, and stream-K. So they are not part of ``KernelConfig`` (whose hash names the compiled
kernel) but of a plan beside it: the search picks one per problem, the manifest records it,
``cutegen_gemm_plan`` takes it, and ``cutegen_workspace_size_plan`` sizes the workspace for it.

The default plan (heuristic, 1 split, deterministic) is what ``cutegen_gemm`` has always passed:
CUTLASS's own ``Arguments`` defaults.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._fields import as_choice, as_int, reject_unknown
from .errors import FieldError

# Same order as cutlass::gemm::kernel::detail::DecompositionMode / ReductionMode
# (gemm/kernel/tile_scheduler_detail.hpp): the ABI passes the index.
DECOMPOSITIONS = ("heuristic", "data_parallel", "split_k", "stream_k")
REDUCTIONS = ("deterministic", "nondeterministic")
MAX_SPLITS = 1024    # far above any useful split (CUTLASS caps splits at the SM count and the k-tiles)


@dataclass(frozen=True)
class LaunchPlan:
    decomposition: str = "heuristic"
    splits: int = 1
    reduction: str = "deterministic"

    def __post_init__(self):
        as_choice("decomposition", self.decomposition, DECOMPOSITIONS)
        object.__setattr__(self, "splits", as_int("splits", self.splits, lo=1, hi=MAX_SPLITS))
        as_choice("reduction", self.reduction, REDUCTIONS)

    @property
    def is_default(self) -> bool:
        return self == LaunchPlan()

    def codes(self) -> tuple[int, int, int]:
        """(decomposition, splits, reduction) as cutegen_gemm_plan takes them."""
        return DECOMPOSITIONS.index(self.decomposition), self.splits, REDUCTIONS.index(self.reduction)

    def to_dict(self) -> dict[str, Any]:
        return {"decomposition": self.decomposition, "splits": self.splits, "reduction": self.reduction}

    @classmethod
    def from_dict(cls, data: Any, where: str = "plan") -> "LaunchPlan":
        if data is None:
            return cls()
        if isinstance(data, LaunchPlan):
            return data
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        reject_unknown(where, data, ("decomposition", "splits", "reduction"))
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def label(self) -> str:
        if self.decomposition == "split_k":
            text = f"split_k x{self.splits}"
        else:
            text = self.decomposition + (f" x{self.splits}" if self.splits != 1 else "")
        return text + (" nondet" if self.reduction == "nondeterministic" else "")


def k_tiles(k: int, tile_k: int) -> int:
    """k-blocks per output tile (CUTLASS's k_tiles_per_output_tile)."""
    return -(-k // tile_k)
