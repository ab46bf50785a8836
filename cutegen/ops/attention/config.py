"""AttentionConfig: the choices of a CUTLASS 4.2 Hopper FMHA forward kernel (example 88), as a frozen record.

The fields map one to one onto the example's builder and options
(``examples/88_hopper_fmha/kernel/fmha_kernel_builder.hpp``, ``kernel/fmha_options.hpp``):

- ``tile_q``, ``tile_kv``: the ``TileShape``'s BlockQO and BlockKV (its third mode, the head dim, is the
  problem's);
- ``schedule``: the dispatch policy. ``tma``: ``cutlass::gemm::KernelTma`` (``FmhaMainloopTma``, no warp
  specialization); ``ws_cooperative``: ``KernelTmaWarpSpecializedCooperative`` (a producer warpgroup and
  ``mma_warpgroups`` consumers); ``ws_pingpong``: ``KernelTmaWarpSpecializedPingpong``, which the builder
  turns into the cooperative kernel with ``kIsPersistent`` and ``kLoadsQSeparately`` set;
- ``mma_warpgroups``: ``Tag::kNumMmaWarpGroups``; ``stages_q``: ``Tag::kStagesQ``; ``stages_kv``:
  ``Tag::kStagesKV``; ``persistent``: ``Tag::kIsPersistent``; ``loads_q_separately``:
  ``Tag::kLoadsQSeparately``; ``cluster_m``: ``Tag::kClusterM``; ``acc_qk``: ``Tag::kAccQK`` (the Q K^T
  accumulator; P V always accumulates in f32); ``blocks_per_sm``: ``Tag::kBlocksPerSM``;
- ``kv_splits``: cutegen's own, not the example's: the most chunks the KV length is split into, each run by its
  own CTAs with a partial O and log-sum-exp in the workspace and a combine kernel after ("flash-decoding",
  templates/attention/fmha_sm90_splitkv.cu.j2; ``cutegen.ops.attention.splitkv``). 1 (the default) is the
  example's kernel, unchanged; it is left out of the JSON then, so existing kernels keep their hashes.
- ``tile_order``: cutegen's own, the order the tile scheduler hands out Q blocks. ``forward`` (the default, the
  example's): m-block 0 first (fmha_tile_scheduler.hpp: blockIdx.x, or tile t = m-block fastest). ``longest_first``:
  under the causal mask the last Q block of a head runs the most KV tiles, so it is handed out first: the
  non-persistent grid reverses blockIdx.x (the hardware launches blocks in index order, so the short tiles come
  last and fill the tail); the persistent scheduler walks the tiles with the m-block slowest, from the last one
  (every CTA takes a mix of long and short tiles instead of one m-block always: tile t to CTA t mod grid). The
  per-tile protocol is the example's; only which Q block a CTA computes changes. Left out of the JSON when
  ``forward`` (existing kernels keep their hashes).

The defaults are the example's own head-dim-128 kernel ("tma ws cooperative 128x128x128"). Which
combinations are legal is not this module's business: the hardware rules are in ``legality/attention*``
and what the renderer cannot build it refuses with a rule ID (``render.backend_refusals``).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..._fields import as_choice, as_int, reject_unknown
from ...core.op import CanonicalConfig
from ...errors import FieldError

SCHEDULES = ("tma", "ws_cooperative", "ws_pingpong")
ACC_QK = ("f32", "f16")
TILE_CHOICES = (16, 32, 64, 128, 192, 256)     # multiples of 16 up to 256 are accepted; these are the usual
TILE_ORDERS = ("forward", "longest_first")
KV_SPLITS_MAX = 64                             # the combine reads every split's LSE per row; more splits than SMs buy nothing


@dataclass(frozen=True)
class AttentionConfig(CanonicalConfig):
    tile_q: int = 128
    tile_kv: int = 128
    schedule: str = "ws_cooperative"
    mma_warpgroups: int = 2
    stages_q: int = 2
    stages_kv: int = 5
    persistent: bool = False
    loads_q_separately: bool = False
    cluster_m: int = 1
    acc_qk: str = "f32"
    blocks_per_sm: int = 1
    kv_splits: int = 1
    tile_order: str = "forward"

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        for name in ("tile_q", "tile_kv"):
            value = as_int(name, getattr(self, name), lo=16, hi=256)
            if value % 16:
                raise FieldError(name, f"{value} is not a multiple of 16")
            set_(name, value)
        as_choice("schedule", self.schedule, SCHEDULES)
        for name, choices in (("mma_warpgroups", (1, 2)), ("cluster_m", (1, 2)), ("blocks_per_sm", (1, 2))):
            value = as_int(name, getattr(self, name), lo=1, hi=2)
            if value not in choices:   # pragma: no cover - as_int's bounds already say it
                raise FieldError(name, f"{value} is not one of {', '.join(map(str, choices))}")
            set_(name, value)
        set_("stages_q", as_int("stages_q", self.stages_q, lo=1, hi=8))
        set_("stages_kv", as_int("stages_kv", self.stages_kv, lo=1, hi=16))
        set_("kv_splits", as_int("kv_splits", self.kv_splits, lo=1, hi=KV_SPLITS_MAX))
        for name in ("persistent", "loads_q_separately"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"expected true or false, got {getattr(self, name)!r}")
        as_choice("acc_qk", self.acc_qk, ACC_QK)
        as_choice("tile_order", self.tile_order, TILE_ORDERS)

    # --- derived -------------------------------------------------------------------------------------
    @property
    def warp_specialized(self) -> bool:
        return self.schedule != "tma"

    def short_name(self) -> str:
        """e.g. ``128x128_wscoop_wg2_q2kv5`` (+ ``_pers``, ``_qsep``, ``_cm2``, ``_accf16``, ``_bps2``, ``_split4``, ``_lf``)."""
        sched = {"tma": "tma", "ws_cooperative": "wscoop", "ws_pingpong": "wspp"}[self.schedule]
        out = f"{self.tile_q}x{self.tile_kv}_{sched}_wg{self.mma_warpgroups}_q{self.stages_q}kv{self.stages_kv}"
        out += "_pers" if self.persistent else ""
        out += "_qsep" if self.loads_q_separately else ""
        out += f"_cm{self.cluster_m}" if self.cluster_m != 1 else ""
        out += "_accf16" if self.acc_qk == "f16" else ""
        out += f"_bps{self.blocks_per_sm}" if self.blocks_per_sm != 1 else ""
        out += f"_split{self.kv_splits}" if self.kv_splits != 1 else ""
        out += "_lf" if self.tile_order == "longest_first" else ""
        return out

    # --- JSON ----------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if out["kv_splits"] == 1:          # the unsplit kernel: the JSON (and the hash) of before the field existed
            del out["kv_splits"]
        if out["tile_order"] == "forward":  # the example's order: the JSON (and the hash) of before the field existed
            del out["tile_order"]
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> "AttentionConfig":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        reject_unknown(where, data, (f.name for f in fields(cls)))
        for required in ("tile_q", "tile_kv"):      # as GEMM's tile_shape: a stored config names its tile
            if required not in data:
                raise FieldError(f"{where}.{required}", "missing")
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def replace(self, **changes) -> "AttentionConfig":
        return replace(self, **changes)


# The CUTLASS 88 example's own forward kernels (88_hopper_fmha.cu, run_fwd_<D>), per head dim, first
# listed first. The bench's "example" peer renders these; a search may start from them.
EXAMPLE_CONFIGS: dict[int, tuple[AttentionConfig, ...]] = {
    32: (AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2),
         AttentionConfig(128, 64, "ws_cooperative")),
    64: (AttentionConfig(64, 128, "tma", mma_warpgroups=1, stages_q=1, stages_kv=4, blocks_per_sm=2),
         AttentionConfig(128, 64, "ws_cooperative"),
         AttentionConfig(128, 64, "ws_pingpong", persistent=True, loads_q_separately=True)),
    128: (AttentionConfig(128, 128, "ws_cooperative"),
          AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)),
    256: (AttentionConfig(128, 64, "ws_cooperative"),),
}
# fp8 (the example's -DFP8 build): head dims 128 and 256 only
EXAMPLE_CONFIGS_FP8: dict[int, tuple[AttentionConfig, ...]] = {
    128: (AttentionConfig(128, 256, "ws_cooperative", acc_qk="f16"),
          AttentionConfig(128, 256, "ws_cooperative"),
          AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)),
    256: (AttentionConfig(128, 128, "ws_cooperative"),
          AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)),
}
