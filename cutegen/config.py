"""KernelConfig: every choice a CUTLASS 3.x SM90 TMA GEMM kernel makes, as a frozen record.

This is the only thing the renderers and the build see; its hash names the kernel.
Fields that may be left unset (``None``) are completed by ``cutegen.collective_builder``
exactly as CUTLASS 4.2's SM90 CollectiveBuilder would complete them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ._fields import as_choice, as_int, as_int_tuple, reject_unknown
from .errors import FieldError

MAINLOOP_SCHEDULES = ("warp_specialized", "cooperative", "pingpong")
EPILOGUE_SCHEDULES = ("tma_warp_specialized", "tma_warp_specialized_cooperative", "no_smem")
TILE_SCHEDULERS = ("persistent", "stream_k")
RASTER_ORDERS = ("heuristic", "along_m", "along_n")
RASTER_SWIZZLES = (1, 2, 4, 8)
MAJORS = ("K", "MN")
SWIZZLES = ("SW128", "SW64", "SW32", "INTER")    # CuTe GMMA atom names (mma_traits_sm90_gmma.hpp)
TMA_COPIES = ("tma", "tma_multicast")            # SM90_TMA_LOAD / SM90_TMA_LOAD_MULTICAST
# How the producer moves A and B from global to shared memory. "tma": the TMA mainloops
# (MainloopSm90TmaGmmaWarpSpecialized*); "cp_async": MainloopSm90CpAsyncGmmaWarpSpecialized with
# KernelCpAsyncWarpSpecialized* schedules, per-thread copies predicated on the residue, for operands
# whose rows TMA cannot take (not 16-byte aligned). See legality/cp_async.py.
MAINLOOP_LOADS = ("tma", "cp_async")
# Ping-pong's math-warpgroup order barrier (the pipeline's temporal choices, search/temporal.py):
# "after_mma" hands the turn over once the mainloop's WGMMAs are done, before the tail releases
# (CUTLASS's MathWarpGroupOrderBarrier, today's DSL template); "after_release" after the tail's
# releases; "none" renders no order barrier (the pipeline checker rejects it: PIPE-READ-BEFORE-LOAD).
PINGPONG_ORDERS = ("after_mma", "after_release", "none")
MAX_SPLIT_K_SLICES = 64    # far above a useful count: the slices' partials grow as slices x M x N x 4 bytes


@dataclass(frozen=True, order=True)
class SmemAtom:
    """One of CuTe's GMMA shared-memory layout atoms, e.g. ``GMMA::Layout_K_SW128_Atom<T>``."""
    major: str
    swizzle: str

    def __post_init__(self):
        as_choice("major", self.major, MAJORS)
        as_choice("swizzle", self.swizzle, SWIZZLES)

    @property
    def swizzle_bytes(self) -> int:
        """Width of the swizzle span in bytes (INTER: 16)."""
        return {"SW128": 128, "SW64": 64, "SW32": 32, "INTER": 16}[self.swizzle]

    def contiguous_elems(self, bits: int) -> int:
        """Extent of the atom along its contiguous mode, in elements (rulebook B15)."""
        return self.swizzle_bytes * 8 // bits

    def shape(self, bits: int) -> tuple[int, int]:
        """(MN, K) extent of the atom in elements."""
        c = self.contiguous_elems(bits)
        return (8, c) if self.major == "K" else (c, 8)

    def __str__(self) -> str:
        return f"{self.major}_{self.swizzle}"

    @classmethod
    def parse(cls, field: str, value: Any) -> "SmemAtom | None":
        if value is None:
            return None
        if isinstance(value, SmemAtom):
            return value
        if isinstance(value, dict):
            reject_unknown(field, value, ("major", "swizzle"))
            major, swz = value.get("major"), value.get("swizzle")
        elif isinstance(value, str) and "_" in value:
            major, swz = value.split("_", 1)
        else:
            raise FieldError(field, f"expected e.g. \"K_SW128\" or {{major, swizzle}}, got {value!r}")
        try:
            return cls(major, swz)
        except FieldError as e:
            raise FieldError(f"{field}.{e.field}", e.message) from None


# Fields added after kernels were checked in: omitted from to_dict() (and so from the hash) at their
# default, so the bytes and hash of every existing kernel stay the same.
_OMITTED_AT_DEFAULT = frozenset({"swap_ab", "mainloop_load", "stage_a", "stage_b", "stage_transpose_a",
                                 "stage_transpose_b", "prefetch_distance",
                                 "release_lag", "pingpong_order", "split_k_slices"})


@dataclass(frozen=True)
class KernelConfig:
    tile_shape: tuple[int, int, int]
    cluster_shape: tuple[int, int, int] = (1, 1, 1)
    stages: int | str = "auto"
    mainloop_schedule: str = "cooperative"
    epilogue_schedule: str = "tma_warp_specialized_cooperative"
    tile_scheduler: str = "persistent"
    smem_layout_a: SmemAtom | None = None
    smem_layout_b: SmemAtom | None = None
    tma_a: str | None = None
    tma_b: str | None = None
    mma_instruction: tuple[int, int, int] | None = None   # (64, N, K) of wgmma.mma_async
    warpgroup_layout: tuple[int, int, int] | None = None  # AtomLayoutMNK of the TiledMma
    epilogue_tile: tuple[int, int] | None = None           # None: EpilogueTileAuto
    raster_order: str = "heuristic"
    raster_swizzle: int = 1                                # tile scheduler max_swizzle_size
    # The kernel computes D^T = B^T A^T (cutegen/swap_ab.py): its tile's M mode runs along the
    # problem's N. Left out of to_dict() while False, so every unswapped kernel keeps its hash.
    swap_ab: bool = False
    mainloop_load: str = "tma"                             # MAINLOOP_LOADS
    # Operand staging (cutegen/staging.py): the C ABI copies the caller's A (B) into the workspace with
    # its leading dimension rounded up to 16 bytes, and the TMA kernel reads the copy. Left out of
    # to_dict() while False, so every existing kernel keeps its hash.
    stage_a: bool = False
    stage_b: bool = False
    # ...and the copy of a staged A (B) is transposed: the caller's MN-major operand is written K-major,
    # for the dtypes WGMMA reads from shared memory only K-major (8-bit, tf32). Needs stage_a (stage_b);
    # left out of to_dict() while False.
    stage_transpose_a: bool = False
    stage_transpose_b: bool = False
    # The pipeline's temporal choices (legality/pipeline_builders.py; rendered by the DSL backend only):
    # the producer loads k-block n only once k-block n - prefetch_distance was released (0: no bound
    # but the stages, today's); a consumer releases a stage release_lag k-blocks after reading it
    # (1: one WGMMA batch in flight, CUTLASS's K_PIPE_MMAS = 1; 0: after warpgroup_wait<0>).
    prefetch_distance: int = 0
    release_lag: int = 1
    pingpong_order: str = "after_mma"                      # PINGPONG_ORDERS
    # Split-K with a separate reduction (cutegen/split_k_reduce.py): the kernel computes the K extent in
    # split_k_slices slices as one batched GEMM writing f32 partials into the workspace, and the C ABI's
    # reduction kernel sums them and applies alpha, beta and C. 1: the ordinary kernel. Left out of
    # to_dict() at 1, so every existing kernel keeps its hash.
    split_k_slices: int = 1

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        set_("tile_shape", as_int_tuple("tile_shape", self.tile_shape, 3, hi=1024))
        set_("cluster_shape", as_int_tuple("cluster_shape", self.cluster_shape, 3, hi=64))
        if self.stages != "auto":
            set_("stages", as_int("stages", self.stages, lo=1, hi=64))
        as_choice("mainloop_schedule", self.mainloop_schedule, MAINLOOP_SCHEDULES)
        as_choice("epilogue_schedule", self.epilogue_schedule, EPILOGUE_SCHEDULES)
        as_choice("tile_scheduler", self.tile_scheduler, TILE_SCHEDULERS)
        set_("smem_layout_a", SmemAtom.parse("smem_layout_a", self.smem_layout_a))
        set_("smem_layout_b", SmemAtom.parse("smem_layout_b", self.smem_layout_b))
        for name in ("tma_a", "tma_b"):
            if getattr(self, name) is not None:
                as_choice(name, getattr(self, name), TMA_COPIES)
        if self.mma_instruction is not None:
            set_("mma_instruction", as_int_tuple("mma_instruction", self.mma_instruction, 3, hi=512))
        if self.warpgroup_layout is not None:
            set_("warpgroup_layout", as_int_tuple("warpgroup_layout", self.warpgroup_layout, 3, hi=8))
        if self.epilogue_tile is not None:
            set_("epilogue_tile", as_int_tuple("epilogue_tile", self.epilogue_tile, 2, hi=1024))
        as_choice("raster_order", self.raster_order, RASTER_ORDERS)
        set_("raster_swizzle", as_int("raster_swizzle", self.raster_swizzle, lo=1, hi=8))
        if self.raster_swizzle not in RASTER_SWIZZLES:
            raise FieldError("raster_swizzle", f"{self.raster_swizzle} is not one of 1, 2, 4, 8")
        if not isinstance(self.swap_ab, bool):
            raise FieldError("swap_ab", f"expected true or false, got {self.swap_ab!r}")
        as_choice("mainloop_load", self.mainloop_load, MAINLOOP_LOADS)
        for name in ("stage_a", "stage_b", "stage_transpose_a", "stage_transpose_b"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"expected true or false, got {getattr(self, name)!r}")
        set_("prefetch_distance", as_int("prefetch_distance", self.prefetch_distance, lo=0, hi=64))
        set_("release_lag", as_int("release_lag", self.release_lag, lo=0, hi=1))
        as_choice("pingpong_order", self.pingpong_order, PINGPONG_ORDERS)
        set_("split_k_slices", as_int("split_k_slices", self.split_k_slices, lo=1, hi=MAX_SPLIT_K_SLICES))

    # --- derived ---------------------------------------------------------------------
    @property
    def is_complete(self) -> bool:
        return None not in (self.smem_layout_a, self.smem_layout_b, self.tma_a, self.tma_b,
                            self.mma_instruction, self.warpgroup_layout) and self.stages != "auto"

    @property
    def cluster_size(self) -> int:
        c = self.cluster_shape
        return c[0] * c[1] * c[2]

    # --- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _OMITTED_AT_DEFAULT and v == f.default:
                continue
            if isinstance(v, SmemAtom):
                v = str(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    def to_json(self) -> str:
        # kept on the instance (it is frozen): the search serializes each judged candidate several times
        # (collective_builder.complete drops it when it makes a completed copy)
        cached = self.__dict__.get("_json")
        if cached is None:
            cached = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_json", cached)
        return cached

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> "KernelConfig":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        reject_unknown(where, data, (f.name for f in fields(cls)))
        if "tile_shape" not in data:
            raise FieldError(f"{where}.tile_shape", "missing")
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None
        except TypeError as e:  # pragma: no cover - defensive: dataclass signature mismatch
            raise FieldError(where, str(e)) from None

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def replace(self, **changes) -> "KernelConfig":
        return replace(self, **changes)

    def short_name(self) -> str:
        t, c = self.tile_shape, self.cluster_shape
        sched = {"warp_specialized": "ws", "cooperative": "coop", "pingpong": "pp"}[self.mainloop_schedule]
        epi = {"tma_warp_specialized": "tma", "tma_warp_specialized_cooperative": "tma",
               "no_smem": "nosmem"}[self.epilogue_schedule]
        st = "sauto" if self.stages == "auto" else f"s{self.stages}"
        sk = "_streamk" if self.tile_scheduler == "stream_k" else ""
        sw = "_swapab" if self.swap_ab else ""
        load = "_cpasync" if self.mainloop_load == "cp_async" else ""
        staged = "".join(f"_stage{op.upper()}" + ("T" if getattr(self, f"stage_transpose_{op}") else "")
                         for op in "ab" if getattr(self, f"stage_{op}"))
        temporal = self.temporal_suffix()
        sliced = f"_slicek{self.split_k_slices}" if self.split_k_slices > 1 else ""
        return f"{t[0]}x{t[1]}x{t[2]}_{c[0]}x{c[1]}x{c[2]}_{st}_{sched}_{epi}{sk}{sw}{load}{staged}{temporal}{sliced}"

    def temporal_suffix(self) -> str:
        """The non-default temporal choices as a name suffix ("" for today's protocol)."""
        out = f"_pf{self.prefetch_distance}" if self.prefetch_distance else ""
        out += "_rl0" if self.release_lag == 0 else ""
        out += {"after_mma": "", "after_release": "_ordrel", "none": "_ordnone"}[self.pingpong_order]
        return out
