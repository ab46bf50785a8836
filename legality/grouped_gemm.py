"""CUTLASS 4.2's SM90 ptr-array grouped GEMM contract (issue 26): what a grouped kernel needs beyond a GEMM.

A grouped kernel (``KernelPtrArrayTmaWarpSpecializedCooperative`` / ``...Pingpong`` over
``GroupProblemShape<Shape<int,int,int>>``) is the SM90 TMA GEMM's mainloop and epilogue run once per group
with per-group tensor maps. So a (``GroupedGemmProblem``, ``GroupedGemmConfig``) pair is judged twice:

1. by the rules below (``GROUPED_GEMM_RULES``, evaluated on a ``GroupedContext``): what only the grouped
   kernel asks for -- every group's base and rows 16-byte aligned, the group count and offsets in int32,
   the group scheduler's power-of-two cluster, the ptr-array kernel's larger shared storage (tensor-map
   copies, the scheduler pipeline), the FP8 block-scaled mainloop's tile;
2. by every GEMM configuration rule (WGMMA, mbarrier, resources, cutlass_sm90) on the GEMM the kernel runs
   per group (``gemm_view``): its tile, cluster, schedule, stages, epilogue and descriptors are a GEMM's,
   so they are checked by calling ``cutegen.legality.check_config``, not by copies of those rules.

How the kernel updates its descriptors (read from CUTLASS 4.2, the facts the rules and the cost model use):

* The host encodes one A and one B tensor map with placeholder extents (1 x 1) and a 16-byte-aligned dummy
  address (``sm90_mma_array_tma_gmma_ss_warpspecialized.hpp:218-255``). The workspace holds one copy of each
  per SM: ``2 x 128 x sm_count`` bytes for the mainloop (:280-285, slots ``[sm_idx]`` and
  ``[sm_idx + sm_count]``, :633-636) and ``(2 epilogue warpgroups + C?) x 128 x sm_count`` for the epilogue
  (``sm90_epilogue_array_tma_warpspecialized.hpp:376-383``), each part rounded to 64 bytes
  (``MinTensorMapWorkspaceAlignment``, kernel :127, :266-281).
* Each CTA copies the params' maps into shared memory (``TensorMapStorage``, ``aligned_struct<128>``, :176-179,
  :639-646); when its next tile belongs to another group one elected thread rewrites the address, dims and
  strides there (``tensormap.replace``, :656-735), the warp commits/waits its bulk groups and copies the map
  to its global slot with ``tensormap.cp_fenceproxy ... release`` (:737-747); the load warp then issues
  ``fence.proxy.tensormap::generic.acquire`` before the first TMA through it (:751-756; kernel
  ``sm90_gemm_array_tma_warpspecialized_cooperative.hpp:631-720``). One update per group switch per CTA, on
  the producer's and the epilogue's path (the cost model prices it).
* The group scheduler (``sm90_tile_scheduler_group.hpp``) linearises every group's tiles, each group's tile
  counts rounded up to whole clusters (:275-276, :328-329); with the group sizes on the device only, the grid
  is every SM (:219-220) and the raster heuristic resolves to AlongN (``tile_scheduler_params.h:1662-1669``,
  problem blocks ``(sm_count, 1)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from .rule import RuleSet, Violation

GROUPED_GEMM_RULES = RuleSet("grouped_gemm")
_rule = GROUPED_GEMM_RULES.rule

_ML = "CUTLASS 4.2 gemm/collective/sm90_mma_array_tma_gmma_ss_warpspecialized.hpp"
_EP = "CUTLASS 4.2 epilogue/collective/sm90_epilogue_array_tma_warpspecialized.hpp"
_KC = "CUTLASS 4.2 gemm/kernel/sm90_gemm_array_tma_warpspecialized_cooperative.hpp"
_SCHED = "CUTLASS 4.2 gemm/kernel/sm90_tile_scheduler_group.hpp"
_PARAMS = "CUTLASS 4.2 gemm/kernel/tile_scheduler_params.h"
_BUILDER = "CUTLASS 4.2 gemm/collective/builders/sm90_gmma_builder.inl"
_BLOCKWISE = "CUTLASS 4.2 gemm/collective/sm90_mma_array_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp"

INT32_MAX = 2**31 - 1
TMA_ALIGN_BYTES = 16                 # every TMA global address and row stride (rulebook A06/A08)
TENSORMAP_BYTES = 128                # sizeof(cute::TmaDescriptor) == sizeof(CUtensorMap)
TENSORMAP_ALIGN = 128                # CUtensorMap "requires aligning to 128 bytes" (driver API struct page)
WORKSPACE_PART_ALIGN = 64            # MinTensorMapWorkspaceAlignment (kernel :127)
SCHEDULER_STAGES = 8                 # TileSchedulerStages (kernel :160)
BARRIER_BYTES = 8
# KernelSmemCarveout of the ptr-array builders (sm90_gmma_builder.inl:262-265): the mainloop's A and B tensor
# maps plus PipelineAsyncSharedStorage<8> (full + empty barrier per stage), taken off the capacity before the
# stage count is computed
KERNEL_SMEM_CARVEOUT = 2 * TENSORMAP_BYTES + 2 * SCHEDULER_STAGES * BARRIER_BYTES
# What the ptr-array kernel's SharedStorage holds beyond the plain TMA kernel's (kernel :178-207): the group
# scheduler's PipelineAsync<8> barriers, scheduler_response[8] (WorkTileInfo: 4 x int32), and TensorMapStorage
# (mainloop A, B; epilogue C and one D per epilogue warpgroup, both schedules have 2: epilogue/dispatch_policy.hpp:59-60)
EPILOGUE_WARPGROUPS = 2
SCHEDULER_RESPONSE_BYTES = 16
TENSORMAP_STORAGE_BYTES = (2 + 1 + EPILOGUE_WARPGROUPS) * TENSORMAP_BYTES
# FP8 block scaling as DeepSeek-V3 and example 68 use it: A (tokens) 1 x 128, B (weights) 128 x 128
BLOCK_SCALE_K = 128
BLOCK_SCALE_W = 128                  # along the weights' rows (N)
BLOCK_SCALE_PROMOTION = BLOCK_SCALE_K // 32   # ScalePromotionInterval = ScaleGranularityK / WGMMA K (e4m3: 32)
# The toolkit that renders and builds here and on the GPU machine (nvcc 13.0).
DEFAULT_CUDA_VERSION = (13, 0)


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@lru_cache(maxsize=1024)
def _largest_group(problem) -> int:
    return max([1, *problem.group_sizes])


def gemm_view(problem, config):
    """The GEMM one group of the grouped kernel computes, as ``(GemmProblem, KernelConfig)``.

    D_i = X_i W_i^T: A = X_i (M_i x K, row-major, K-contiguous), B = W_i (N x K: the column-major K x N B),
    D_i bf16 row-major, no C (void), as the grouped renderer declares it (templates/grouped_gemm/kernel.cu.j2); FP8
    fast accumulation as the problem asks (the FP8FastAccum schedules: no promotion, one accumulator). M_i is a run-time extent: the view takes the largest expected group (at least 1);
    no rule of the view depends on M except through descriptor extents, which every M_i >= 1 satisfies
    (a group with M_i = 0 has no tile, so its maps are never updated or used). A swapped config keeps the
    caller's orientation here and sets ``swap_ab``: ``check_config`` then judges the swap rules and the
    transposed GEMM, as it does for any swapped GEMM. Stages are the grouped builder's (``grouped_stages``).
    Alignments are 16 bytes' worth (TMA); the grouped rules say why a problem breaks them.
    """
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem

    align = 16 // problem.element_bytes
    m = _largest_group(problem)
    view = GemmProblem(m=m, n=problem.n, k=problem.k, dtype_a=problem.dtype, dtype_b=problem.dtype,
                       dtype_c="void", dtype_d="bf16", layout_a="row", layout_b="col", layout_c="row",
                       alignment_a=align, alignment_b=align, alignment_c=8,
                       fp8_fast_accum=bool(getattr(problem, "fp8_fast_accum", False)))
    coop = config.schedule == "ptr_cooperative"
    kc = KernelConfig(tile_shape=config.tile, cluster_shape=config.cluster, stages="auto",
                      mainloop_schedule="cooperative" if coop else "pingpong",
                      epilogue_schedule="tma_warp_specialized_cooperative" if coop else "tma_warp_specialized",
                      tile_scheduler="persistent", swap_ab=config.swap_ab,
                      raster_order=config.raster)
    return view, kc


def _kernel_view(problem, config):
    """The view as the kernel's CUTLASS types see it: transposed when swapped (A = W, B = X)."""
    from cutegen.swap_ab import transposed
    view, kc = gemm_view(problem, config)
    return (transposed(view), kc.replace(swap_ab=False)) if config.swap_ab else (view, kc)


def scale_bytes_per_stage(problem, config) -> int:
    """Block-scale floats one pipeline stage holds (example 68: ScaleGranularity M=1, N=128, K=128):
    ScaleMsPerTile + ScaleNsPerTile f32 values (``compute_stage_count_with_blockwise_scale``,
    sm90_gmma_builder.inl:90-107). Swapped, the weights are the kernel's A."""
    if problem.scale != "block128":
        return 0
    w_tile, tok_tile = (config.tile_m, config.tile_n) if config.swap_ab else (config.tile_n, config.tile_m)
    return 4 * (tok_tile + max(w_tile // BLOCK_SCALE_W, 1))


def grouped_stages(problem, config) -> int:
    """The ptr-array builder's stage count, or the config's: StageCountAutoCarveout<sizeof(CollectiveEpilogue::
    SharedStorage)> (examples 57 and 68) on ``sm90_smem_capacity_bytes - KernelSmemCarveout``
    (sm90_gmma_builder.inl:262-268, 1135-1147). The epilogue's SharedStorage carries its tensor maps too
    (C and one D per warpgroup, sm90_epilogue_array_tma_warpspecialized.hpp:243-246). Capped at the config's
    own maximum (``GroupedGemmConfig`` holds at most MAX_STAGES): the search's configs carry their stages
    explicitly, so the kernel is rendered with StageCount<stages>, never StageCountAuto."""
    if config.stages is not None:
        return config.stages
    from cutegen.ops.grouped_gemm.config import MAX_STAGES
    # the stage count depends on the types, the tile, the schedule and the orientation only
    key = config.replace(cluster_m=1, cluster_n=1, raster="heuristic")
    return min(_builder_stages(problem.replace(groups=1, n=8, k=8, tokens=1, distribution="uniform"), key),
               MAX_STAGES)


@lru_cache(maxsize=8192)
def _builder_stages(problem, config) -> int:
    from cutegen import collective_builder as cb
    from cutegen import smem

    view, kc = _kernel_view(problem, config)
    try:
        carve = cb.epilogue_storage_bytes(view, kc) + (1 + EPILOGUE_WARPGROUPS) * TENSORMAP_BYTES
    except ValueError:
        return 0                       # no epilogue tile fits: the view's SM90-EPILOGUE-* rules say why
    bits = 8 * problem.element_bytes
    capacity = smem.SM90_SMEM_CAPACITY - KERNEL_SMEM_CARVEOUT
    stage = (_round_up(smem.mainloop_stage_bytes(bits, bits, config.tile) + scale_bytes_per_stage(problem, config),
                       128) + smem.STAGE_PIPELINE_BYTES)
    return (capacity // 128 * 128 - _round_up(carve, 128)) // stage


class GroupedContext:
    """Derived facts of one (grouped problem, grouped config) pair for the grouped rules.

    ``cuda_version`` is the toolkit's (major, minor); the number fields can be set directly by tests that
    probe a bound no valid problem reaches (the problem type caps groups at 1024 and extents at 2^31 - 1)."""

    def __init__(self, problem, config, cuda_version: tuple[int, int] = DEFAULT_CUDA_VERSION):
        self.problem = problem
        self.config = config
        self.cuda_version = tuple(cuda_version)
        self.element_bytes = problem.element_bytes
        self.groups = problem.groups
        self.tokens = problem.tokens
        self.n, self.k = problem.n, problem.k
        self.layout = problem.layout
        self.cluster_m, self.cluster_n = config.cluster_m, config.cluster_n

    @cached_property
    def stages(self) -> int:
        return grouped_stages(self.problem, self.config)

    @cached_property
    def smem_bytes(self) -> int | None:
        """sizeof(GemmKernel::SharedStorage) of the ptr-array kernel (``ptr_array_storage_bytes``); None where the
        per-group GEMM cannot be completed (its rules say why)."""
        from cutegen import collective_builder as cb
        from cutegen.errors import IllegalConfig

        view, kc = _kernel_view(self.problem, self.config)
        if self.stages < 1:
            return None
        try:
            done = cb.complete(view, kc.replace(stages=self.stages))
            plan = cb.epilogue_plan(view, done)
        except (IllegalConfig, ValueError):
            return None
        bits = 8 * self.element_bytes
        return ptr_array_storage_bytes(self.config.schedule, bits, self.config.tile, self.stages, view.dtype_c,
                                       view.dtype_d, plan, scale_bytes_per_stage(self.problem, self.config))


def ptr_array_storage_bytes(schedule: str, bits: int, tile: tuple, stages: int, dtype_c: str, dtype_d: str, plan,
                            scale_bytes: int = 0) -> int:
    """sizeof(GemmKernel::SharedStorage) of the ptr-array cooperative / ping-pong kernel (kernel :178-207; ping-pong
    :184-215), field by field: TensorStorage {mainloop; epilogue} (aligned_struct<128>), PipelineStorage {the group
    scheduler's PipelineAsync<8>, the mainloop's and the epilogue load's barriers, the load-order barrier, and
    ping-pong's math-warpgroup order barrier} (alignas 16), scheduler_response[8], TensorMapStorage {A, B; C, D x 2}
    (aligned_struct<128>), the whole a multiple of TensorStorage's alignment. The mainloop and epilogue tensors are
    cutegen.smem's GEMM model; the whole equals nvcc's sizeof on 26 of 26 kernels
    (oracles/grouped_smem_probe_results.jsonl, tests/test_grouped_legality.py)."""
    from cutegen import smem

    main_t = smem.mainloop_tensor_bytes(bits, bits, tile, stages) + _round_up(scale_bytes * stages, 128)
    epi_t, epi_align = smem.epilogue_tensor_bytes(dtype_c, dtype_d, plan)
    tensors = _round_up(_round_up(main_t, epi_align) + epi_t, max(128, epi_align))
    pipes = 2 * SCHEDULER_STAGES * BARRIER_BYTES                      # scheduler PipelineAsync<8>
    pipes = _round_up(pipes, 16) + smem.STAGE_PIPELINE_BYTES * stages  # mainloop PipelineTmaAsync<Stages>
    pipes = _round_up(pipes, 16) + smem.STAGE_PIPELINE_BYTES * plan.stages_c   # epilogue load pipeline
    pipes = _round_up(pipes, 16) + 2 * BARRIER_BYTES                  # LoadWarpOrderBarrier = OrderedSequenceBarrier<1,2>
    if schedule == "ptr_pingpong":
        pipes = _round_up(pipes, 16) + 2 * 2 * BARRIER_BYTES          # MathWarpGroupOrderBarrier<2,2>
    end = tensors + _round_up(pipes, 16)
    end = _round_up(end, 16) + SCHEDULER_STAGES * SCHEDULER_RESPONSE_BYTES
    end = _round_up(end, 128) + TENSORMAP_STORAGE_BYTES
    # the struct takes TensorStorage's alignment (the epilogue's swizzle alignment, up to 1024): its size is a
    # multiple of it (nvcc: 26 of 26 probe rows)
    return _round_up(end, max(128, epi_align))


# --- every group's operands: 16-byte bases and rows --------------------------------------------------------

@_rule("GROUPED-LD-ALIGN-K", rulebook="A06/A08/E15 (grouped)",
       source=f"{_ML}:293-315 can_implement (check_alignment<128 bits> on every group's (M,K) and (N,K)); "
              "rulebook A06 (globalAddress % 16) and A08 (globalStrides % 16): group i's X starts at "
              "X + offs[i-1] * K * bytes (offs) or X + i * max_m * K * bytes (masked), W_i at W + i * N * K * bytes",
       summary="K x bytes(dtype) is a multiple of 16: every row of X and W, and every group's base in X and W, "
               "is 16-byte aligned for its tensor map")
def _ld_align_k(c):
    row = c.k * c.element_bytes
    if row % TMA_ALIGN_BYTES:
        return (f"K={c.k} x {c.element_bytes} B = {row} B rows: group bases X + offs[i-1] x {row} B are not "
                f"16-byte aligned for TMA (K must be a multiple of {TMA_ALIGN_BYTES // c.element_bytes})")
    return None


@_rule("GROUPED-LD-ALIGN-N", rulebook="A06/A08/E16 (grouped)",
       source=f"{_EP}:394-417 can_implement (check_alignment on every group's D (M,N)); rulebook A06/A08: group i's "
              "D starts at D + offs[i-1] * N * 2 bytes (bf16 output)",
       summary="N x 2 bytes (the bf16 output row) is a multiple of 16: every group's D base and row is 16-byte "
               "aligned for the epilogue's TMA store")
def _ld_align_n(c):
    row = c.n * 2
    if row % TMA_ALIGN_BYTES:
        return (f"N={c.n} x 2 B = {row} B output rows: group bases D + offs[i-1] x {row} B are not 16-byte "
                f"aligned for the TMA store (N must be a multiple of 8)")
    return None


# --- the group count and the offsets ------------------------------------------------------------------------

@_rule("GROUPED-GROUP-COUNT", rulebook="new (grouped)",
       source="CUTLASS 4.2 gemm/group_array_problem_shape.hpp:56 (int32_t num_groups); "
              f"{_SCHED}:308-364 (group indices as int)",
       summary="1 <= groups <= 2^31 - 1 (GroupProblemShape::num_groups is an int32_t)")
def _group_count(c):
    if not 1 <= c.groups <= INT32_MAX:
        return f"groups={c.groups} is outside 1..{INT32_MAX} (GroupProblemShape::num_groups is int32_t)"
    return None


@_rule("GROUPED-OFFSETS-INT32", rulebook="new (grouped)",
       source="torch._grouped_mm offs (int32 cumulative ends; aten/src/ATen/native/cuda/GroupMM.cu); "
              "GroupProblemShape<Shape<int,int,int>> (every M_i an int); DeepGEMM's masked_m (int32)",
       summary="offs: the total rows T <= 2^31 - 1 (the last int32 offset); masked: the capacity max_m <= 2^31 - 1")
def _offsets_int32(c):
    if c.tokens > INT32_MAX:
        what = "offs[E-1] = T" if c.layout == "offs" else "the per-group capacity max_m"
        return f"{what} = {c.tokens} does not fit an int32 (max {INT32_MAX})"
    return None


# --- the group scheduler ------------------------------------------------------------------------------------

@_rule("GROUPED-CLUSTER-POW2", rulebook="new (grouped)",
       source=f"{_PARAMS}:1684-1691 (PersistentTileSchedulerSm90GroupParams: FastDivmodU64Pow2(cluster_shape.m/n))",
       summary="cluster_m and cluster_n are powers of two (the group scheduler divides by them with shifts)")
def _cluster_pow2(c):
    bad = [f"cluster_{a}={v}" for a, v in (("m", c.cluster_m), ("n", c.cluster_n)) if not _is_pow2(v)]
    if bad:
        return f"{', '.join(bad)}: the group scheduler's FastDivmodU64Pow2 needs powers of two"
    return None


# --- the ptr-array kernel's shared memory --------------------------------------------------------------------

@_rule("GROUPED-SMEM-CAPACITY", rulebook="D02/E07 (grouped)",
       source=f"{_KC}:178-207 (SharedStorage: tensors, pipelines incl. the scheduler's PipelineAsync<8>, "
              "scheduler_response[8], TensorMapStorage); the model (ptr_array_storage_bytes) equals nvcc's sizeof on "
              "26 of 26 kernels (oracles/grouped_smem_probe_results.jsonl)",
       summary="sizeof(ptr-array GemmKernel::SharedStorage) <= 232,448 bytes")
def _smem_capacity(c):
    from .resources import SMEM_PER_BLOCK
    s = c.smem_bytes
    if s is not None and s > SMEM_PER_BLOCK:
        return (f"ptr-array kernel shared storage {s} B ({c.stages} stages, with {TENSORMAP_STORAGE_BYTES} B of tensor "
                f"maps and the group scheduler's pipeline and responses) > {SMEM_PER_BLOCK} B")
    return None


# --- device-side tensor maps ----------------------------------------------------------------------------------

@_rule("GROUPED-TENSORMAP-TOOLKIT", rulebook="new (grouped)",
       source="CUTLASS 4.2 cutlass/arch/config.h:60-63 (CUTLASS_ARCH_MMA_MODIFIABLE_TMA_SM90_SUPPORTED needs nvcc >= "
              "12.3; examples 57/68 compile to nothing without it); PTX ISA 8.3 tensormap.replace / cp_fenceproxy",
       summary="the toolkit is CUDA 12.3 or newer (device-side tensormap.replace and tensormap.cp_fenceproxy)")
def _toolkit(c):
    if c.cuda_version < (12, 3):
        return (f"CUDA {c.cuda_version[0]}.{c.cuda_version[1]} < 12.3: no modifiable TMA descriptors "
                "(tensormap.replace), the grouped kernel compiles to an empty body")
    return None


# --- FP8 with DeepSeek-V3's block scales (example 68) ---------------------------------------------------------

@_rule("GROUPED-BLOCK128-TILE-K", rulebook="new (grouped)",
       source=f"{_BLOCKWISE}:132 static_assert (Tile_K % ScaleGranularityK(128) == 0), :135-140 static_asserts "
              "(ScalePromotionInterval = 128 / 32 = 4 >= and a multiple of Tile_K / 32)",
       summary="block128 scaling: tile_k == 128 (a multiple of the 128-wide scale block and at most 4 WGMMA k-steps)")
def _block128_k(c):
    if c.problem.scale == "block128" and c.config.tile_k != BLOCK_SCALE_K:
        return (f"scale=block128 with tile_k={c.config.tile_k}: the blockwise mainloop needs Tile_K % 128 == 0 and "
                f"Tile_K / 32 dividing the promotion interval {BLOCK_SCALE_PROMOTION}, i.e. tile_k = 128")
    return None


@_rule("GROUPED-BLOCK128-TILE-N", rulebook="new (grouped)",
       source=f"{_BLOCKWISE}:153-154 static_asserts (scaling granularity divides the tile along M and N); "
              "example 68: ScaleGranularityN = 128 for the weights (B); swapped, the weights are A",
       summary="block128 scaling: the tile's extent along the weights' rows (tile_n, or tile_m when swapped) is a "
               "multiple of 128")
def _block128_n(c):
    if c.problem.scale != "block128":
        return None
    name, extent = ("tile_m", c.config.tile_m) if c.config.swap_ab else ("tile_n", c.config.tile_n)
    if extent % BLOCK_SCALE_W:
        return (f"scale=block128 with {name}={extent} along the weights' rows: the 128 x 128 weight scale blocks "
                f"must divide it")
    return None


# --- launches: the workspace the tensor maps live in ---------------------------------------------------------

GROUPED_LAUNCH_RULES = RuleSet("grouped_gemm_launch")
_launch = GROUPED_LAUNCH_RULES.rule


def tensormap_workspace_bytes(sm_count: int, has_c: bool = False) -> int:
    """Bytes of the workspace the kernel's per-SM tensor maps need (epilogue part, then mainloop part, each
    rounded to 64: kernel :266-281, mainloop :280-285, epilogue :376-383; no fusion workspace for a linear
    combination)."""
    epi = (EPILOGUE_WARPGROUPS + (1 if has_c else 0)) * TENSORMAP_BYTES * sm_count
    main = 2 * TENSORMAP_BYTES * sm_count
    return _round_up(epi, WORKSPACE_PART_ALIGN) + _round_up(main, WORKSPACE_PART_ALIGN)


@dataclass
class LaunchContext:
    """One launch of a grouped kernel: the workspace's device address and size, the SM count the scheduler
    was given and the CTAs of the launch grid (what a C ABI knows before it launches)."""
    workspace_address: int
    workspace_bytes: int
    sm_count: int
    grid_ctas: int
    has_c: bool = False            # the grouped renderer declares no C (void): no C maps


@_launch("GROUPED-TENSORMAP-WORKSPACE-ALIGN", rulebook="A01/A02 (grouped)",
         source="CUDA driver API CUtensorMap (\"requires aligning to 128 bytes\"); PTX tensormap.cp_fenceproxy / "
                f"fence.proxy.tensormap on 128-byte maps; {_ML}:633-636 (slot i at workspace + 128 i)",
         summary="the workspace holding the per-SM tensor maps starts on a 128-byte boundary")
def _ws_align(c):
    if c.workspace_address % TENSORMAP_ALIGN:
        return (f"workspace at 0x{c.workspace_address:x} is {c.workspace_address % TENSORMAP_ALIGN} B past a 128-byte "
                "boundary: the tensor maps copied there with tensormap.cp_fenceproxy are misaligned")
    return None


@_launch("GROUPED-TENSORMAP-WORKSPACE-SIZE", rulebook="new (grouped)",
         source=f"{_ML}:280-285 and {_EP}:376-383 get_workspace_size; {_KC}:266-281 (the parts, 64-byte rounded)",
         summary="the workspace holds one tensor map per SM per operand: at least tensormap_workspace_bytes(sm_count)")
def _ws_size(c):
    need = tensormap_workspace_bytes(c.sm_count, c.has_c)
    if c.workspace_bytes < need:
        return (f"workspace {c.workspace_bytes} B < {need} B for {c.sm_count} SMs' tensor maps: the last SMs' "
                "descriptors would be written past its end")
    return None


@_launch("GROUPED-TENSORMAP-SLOT-PER-SM", rulebook="new (grouped)",
         source=f"{_ML}:628-636 (slot = blockIdx.x + blockIdx.y * gridDim.x of sm_count slots); {_PARAMS} "
                "get_grid_shape (the grid is at most sm_count CTAs)",
         summary="the launch grid has at most sm_count CTAs, so no two CTAs share a tensor-map slot")
def _slots(c):
    if c.grid_ctas > c.sm_count:
        return (f"grid of {c.grid_ctas} CTAs > sm_count={c.sm_count} slots: two CTAs would rewrite one tensor map "
                "while the other loads through it")
    return None


def check_launch(context: LaunchContext) -> list[Violation]:
    return GROUPED_LAUNCH_RULES.evaluate(context)


# --- one entry point ------------------------------------------------------------------------------------------

@dataclass
class GroupedReport:
    legal: bool
    violations: list[Violation]                 # enforced rules broken: the grouped ones, then the view's
    warnings: list[Violation] = field(default_factory=list)
    config: Any = None                          # the config with its stages resolved (None if not legal)
    stages: int | None = None
    smem_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"legal": self.legal, "rules": [v.rule_id for v in self.violations], "stages": self.stages,
                "smem_bytes": self.smem_bytes, "warnings": [v.rule_id for v in self.warnings],
                "reasons": [str(v) for v in self.violations + self.warnings]}


def check_grouped(problem, config, cuda_version: tuple[int, int] = DEFAULT_CUDA_VERSION) -> GroupedReport:
    """Every rule a grouped config breaks: the grouped rules, then every GEMM config rule on the per-group GEMM
    (``gemm_view``) with the grouped builder's stage count. Violations of both kinds are listed; a swap is
    judged by the swap rules and then on the transposed view, as for a GEMM."""
    from . import check_config

    ctx = GroupedContext(problem, config, cuda_version)
    found = GROUPED_GEMM_RULES.evaluate(ctx)
    stages = ctx.stages
    view, kc = gemm_view(problem, config)
    # fewer than 2 stages is the view's SM90-STAGES-MIN (a KernelConfig holds at least 1)
    kc = kc.replace(stages=max(stages, 1))
    rep = check_config(view, kc)
    seen = {v.rule_id for v in found}
    enforced = [v for v in found if v.enforced] + [v for v in rep.violations if v.rule_id not in seen]
    if rep.config is not None and "SM90-SMEM-STAGE-SLICE" not in {v.rule_id for v in enforced}:
        from cutegen import stage_tma
        if stage_tma.needed_for(view, rep.config):
            # check_config passes these because the GEMM template renders them with the one-stage TMA form
            # (cutegen/stage_tma.py); the grouped template uses CUTLASS's ptr-array collective, whose Params
            # slice the stage exactly as the stock SS collective does
            enforced.append(Violation(
                "SM90-SMEM-STAGE-SLICE",
                f"B smem {rep.config.smem_layout_b} {kc.tile_shape[1]}x{kc.tile_shape[2]}: CuTe cannot slice the "
                "stage, and the grouped template has no one-stage TMA form (it is GEMM's)", True, "cutlass_sm90"))
    warnings = [v for v in found if not v.enforced] + list(rep.warnings)
    legal = not enforced
    done = config.replace(stages=stages) if legal and config.stages is None else (config if legal else None)
    return GroupedReport(legal, enforced, warnings, done, stages if stages >= 1 else None,
                         ctx.smem_bytes if stages >= 1 else None)


def config_violations(problem, config) -> list[Violation]:
    """``check_grouped``'s enforced violations (the Operation's ``check``)."""
    return check_grouped(problem, config).violations


__all__ = ["GROUPED_GEMM_RULES", "GROUPED_LAUNCH_RULES", "GroupedContext", "GroupedReport", "LaunchContext",
           "check_grouped", "check_launch", "config_violations", "gemm_view", "grouped_stages", "ptr_array_storage_bytes",
           "tensormap_workspace_bytes"]
