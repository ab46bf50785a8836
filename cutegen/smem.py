"""Byte-exact model of the shared memory a CUTLASS 4.2 SM90 TMA GEMM kernel declares.

Three numbers matter: ``sizeof(CollectiveMainloop::SharedStorage)``,
``sizeof(CollectiveEpilogue::SharedStorage)`` (which ``StageCountAutoCarveout`` subtracts
before it counts stages) and ``sizeof(GemmKernel::SharedStorage)``, which is what the
adapter asks the driver for and what must fit in 232,448 bytes (rulebook D02).  CUTLASS's
own stage formula ignores the scheduler, order barriers and alignment padding, so the only
safe check is this struct-layout model, which mirrors the C++ declarations:

* mainloop: ``collective/sm90_mma_tma_gmma_ss_warpspecialized{,_fp8}.hpp`` SharedStorage
  (TensorStorage is ``aligned_struct<128>`` of two 16-byte-aligned arrays; then
  ``PipelineTmaAsync<Stages>::SharedStorage`` = 8-byte full + 8-byte empty barrier per stage);
* epilogue: ``epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp`` SharedStorage
  (C and D buffers aligned to their swizzle repeat, D aliasing C when ReuseSmemC, one
  C-load pipeline of StagesC transaction barriers); the no-smem epilogue is an empty struct;
* kernel: ``kernel/sm90_gemm_tma_warpspecialized{,_cooperative,_pingpong}.hpp`` SharedStorage.

Every number here was compared with nvcc's own ``sizeof`` on the rows of
``oracles/smem_probe_results.jsonl`` (tests/test_smem_model.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .dtypes import DTYPES

SM90_SMEM_CAPACITY = 232448          # sm90_common.inl: sm90_smem_capacity_bytes (227 KiB, rulebook D02)
BARRIER_BYTES = 8                    # ClusterBarrier / ClusterTransactionBarrier: one uint64_t
STAGE_PIPELINE_BYTES = 2 * BARRIER_BYTES
FUSION_STORAGE_BYTES = 1             # sizeof of an empty struct: the epilogue's fusion SharedStorage   # PipelineTmaAsync<1>::SharedStorage: one full + one empty barrier
SWIZZLE_BYTES = {"SW128": 128, "SW64": 64, "SW32": 32, "INTER": 16}
# cutlass::detail::alignment_for_swizzle: 2^(B+M+S) of Swizzle<B,4,3> = 1024/512/256/128 bytes.
SWIZZLE_ALIGNMENT = {"SW128": 1024, "SW64": 512, "SW32": 256, "INTER": 128}


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def bits_to_bytes(bits: int) -> int:
    return (bits + 7) // 8


def _array_aligned(nbytes: int) -> int:
    """cute::array_aligned<T, N> (alignas 16): its sizeof."""
    return round_up(nbytes, 16)


def largest_swizzle(contiguous_extent: int, bits: int) -> str | None:
    """ss_smem_selector: the widest GMMA atom whose contiguous width (in elements) divides the extent."""
    for swz in ("SW128", "SW64", "SW32", "INTER"):
        if contiguous_extent % (SWIZZLE_BYTES[swz] * 8 // bits) == 0:
            return swz
    return None


# --- mainloop ---------------------------------------------------------------------------------------

def mainloop_stage_bytes(bits_a: int, bits_b: int, tile: tuple[int, int, int]) -> int:
    """Bytes of one A tile plus one B tile (TmaTransactionBytes of a stage)."""
    tm, tn, tk = tile
    return bits_to_bytes(bits_a * tm * tk) + bits_to_bytes(bits_b * tn * tk)


def auto_stage_count(bits_a: int, bits_b: int, tile: tuple[int, int, int], carveout: int,
                     capacity: int = SM90_SMEM_CAPACITY, alignment: int = 128) -> int:
    """compute_stage_count_or_override(StageCountAutoCarveout<carveout>) of sm90_gmma_builder.inl.

    ``alignment`` is 128 for the SS builder; the RS (register-A) builder passes its smem swizzle
    alignment. No lower bound here: the mainloop's ``Stages >= 2`` static_assert is a separate
    rule (E06).
    """
    stage = round_up(mainloop_stage_bytes(bits_a, bits_b, tile), alignment) + STAGE_PIPELINE_BYTES
    return (capacity // alignment * alignment - round_up(carveout, alignment)) // stage


@dataclass(frozen=True)
class MainloopAlignment:
    """Alignments of the mainloop's smem arrays: SS = alignas(16) arrays in an aligned_struct<128>;
    RS = each array aligned to its swizzle repeat (sm90_mma_tma_gmma_rs_warpspecialized.hpp:214-225)."""
    a: int = 16
    b: int = 16
    struct: int = 128
    stage: int = 128        # the builder's stage-count rounding


SS_ALIGNMENT = MainloopAlignment()


def mainloop_tensor_bytes(bits_a: int, bits_b: int, tile: tuple[int, int, int], stages: int,
                          align: MainloopAlignment = SS_ALIGNMENT) -> int:
    """sizeof(CollectiveMainloop::TensorStorage): aligned_struct{smem_A[]; smem_B[]}."""
    tm, tn, tk = tile
    a = round_up(bits_to_bytes(bits_a * tm * tk * stages), align.a)
    b = round_up(bits_to_bytes(bits_b * tn * tk * stages), align.b)
    return round_up(round_up(a, align.b) + b, align.struct)


def mainloop_storage_bytes(bits_a: int, bits_b: int, tile: tuple[int, int, int], stages: int,
                           align: MainloopAlignment = SS_ALIGNMENT) -> int:
    """sizeof(CollectiveMainloop::SharedStorage): TensorStorage then PipelineTmaAsync<Stages> barriers."""
    return round_up(mainloop_tensor_bytes(bits_a, bits_b, tile, stages, align) + STAGE_PIPELINE_BYTES * stages,
                    align.struct)


# --- epilogue ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EpiloguePlan:
    """What the SM90 TMA epilogue builder derives from the tile (sm90_builder.inl)."""
    tile: tuple[int, int]       # EpilogueTile (M, N)
    epi_tiles: int              # epilogue subtiles per CTA tile
    stages_c: int
    stages_d: int
    reuse_smem_c: bool          # D written into the C buffers
    align_c: int                # bytes: alignment_for_swizzle of the C smem layout
    align_d: int
    swizzle_c: str
    swizzle_d: str


def epilogue_plan(dtype_c: str, dtype_d: str, layout_c: str, cta_tile: tuple[int, int, int],
                  epi_tile: tuple[int, int]) -> EpiloguePlan:
    """sm90_get_tma_dispatch_policy + sm90_get_epilogue_smem_swizzle_layout_atom.

    ``dtype_c == "void"``: no source; the C smem element falls back to D's (no storage is made).
    Raises ValueError when no smem atom fits the epilogue tile (the builder's static_assert).
    """
    em, en = epi_tile
    epi_tiles = (cta_tile[0] // em) * (cta_tile[1] // en)
    bits_d = DTYPES[dtype_d].bits
    bits_c = 0 if dtype_c == "void" else DTYPES[dtype_c].bits   # sizeof_bits_v<void> == 0
    reuse = bits_c == bits_d and bits_d > 8
    stages_d = min(epi_tiles, 2)
    stages_c = max(min(epi_tiles, 4), stages_d + 1) if reuse else min(epi_tiles, 4)
    smem_c_bits = bits_d if dtype_c == "void" else bits_c
    # Row-major C/D is N-contiguous: the K-major selector over (M, N); column-major: MN-major over M.
    extent = en if layout_c == "row" else em
    swz_c = largest_swizzle(extent, smem_c_bits)
    swz_d = largest_swizzle(extent, bits_d)
    if swz_c is None or swz_d is None or em % 8 or en % 8:
        raise ValueError(f"no GMMA smem atom fits epilogue tile {em}x{en}")
    return EpiloguePlan((em, en), epi_tiles, stages_c, stages_d, reuse,
                        SWIZZLE_ALIGNMENT[swz_c], SWIZZLE_ALIGNMENT[swz_d], swz_c, swz_d)


def epilogue_tensor_bytes(dtype_c: str, dtype_d: str, plan: EpiloguePlan) -> tuple[int, int]:
    """(sizeof, alignof) of CollectiveEpilogue::TensorStorage for the TMA epilogue.

    ``TensorStorage`` is ``{collective; thread}``: the fusion callbacks' SharedStorage
    (LinearCombination, per-row bias, activations) is an empty struct, one byte, which
    pushes the struct to the next alignment boundary.
    """
    em, en = plan.tile
    d_stages = plan.stages_c if plan.reuse_smem_c else plan.stages_d
    d_bytes = _array_aligned(em * en * d_stages * DTYPES[dtype_d].bits // 8)
    fusion = FUSION_STORAGE_BYTES
    if dtype_c == "void":                     # union CollectiveStorageWithoutC
        return round_up(round_up(d_bytes, plan.align_d) + fusion, plan.align_d), plan.align_d
    c_bytes = _array_aligned(em * en * plan.stages_c * DTYPES[dtype_c].bits // 8)
    align = max(plan.align_c, plan.align_d)
    if plan.reuse_smem_c:                     # union CollectiveStorageReuseC
        return round_up(round_up(max(c_bytes, d_bytes), align) + fusion, align), align
    end = round_up(c_bytes, plan.align_d) + d_bytes   # struct CollectiveStorageWithC
    return round_up(round_up(end, align) + fusion, align), align


def epilogue_storage_bytes(dtype_c: str, dtype_d: str, plan: EpiloguePlan | None) -> int:
    """sizeof(CollectiveEpilogue::SharedStorage); ``plan`` None: the no-smem epilogue (an empty struct)."""
    if plan is None:
        return 1
    t, align = epilogue_tensor_bytes(dtype_c, dtype_d, plan)
    return round_up(t + STAGE_PIPELINE_BYTES * plan.stages_c, align)


# --- kernel -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SharedStorage:
    mainloop: int       # sizeof(CollectiveMainloop::SharedStorage)
    epilogue: int       # sizeof(CollectiveEpilogue::SharedStorage)
    kernel: int         # sizeof(GemmKernel::SharedStorage): the dynamic smem the launch requests


def kernel_storage_bytes(schedule: str, bits_a: int, bits_b: int, tile: tuple[int, int, int], stages: int,
                         dtype_c: str, dtype_d: str, plan: EpiloguePlan | None,
                         align: MainloopAlignment = SS_ALIGNMENT) -> int:
    """sizeof(GemmKernel::SharedStorage) for the three SM90 TMA warp-specialized kernels."""
    main_t = mainloop_tensor_bytes(bits_a, bits_b, tile, stages, align)
    main_pipe = STAGE_PIPELINE_BYTES * stages
    if plan is None:                          # DefaultEpilogue::SharedStorage {}; PipelineTransactionAsync<0>
        epi_t, epi_align, epi_pipe = 1, 1, 0
    else:
        epi_t, epi_align = epilogue_tensor_bytes(dtype_c, dtype_d, plan)
        epi_pipe = STAGE_PIPELINE_BYTES * plan.stages_c
    if schedule == "warp_specialized":
        # union TensorStorage {mainloop; epilogue}; then PipelineStorage {mainloop; epi_load}
        t_align = max(128, epi_align, align.struct)
        tensors = round_up(max(main_t, epi_t), t_align)
        pipes = round_up(round_up(main_pipe, 16) + epi_pipe, 16)
        return round_up(tensors + pipes, t_align)
    # Cooperative / Pingpong: PipelineStorage, scheduler, then TensorStorage {epilogue; mainloop}
    order = 2 * BARRIER_BYTES                  # LoadWarpOrderBarrier = OrderedSequenceBarrier<1,2>
    if schedule == "pingpong":
        order += 2 * 2 * BARRIER_BYTES         # MathWarpGroupOrderBarrier = OrderedSequenceBarrier<2,2>
    pipes = round_up(round_up(main_pipe, 16) + round_up(epi_pipe, 16) + order, 16)
    scheduler_end = pipes + 1                  # TileScheduler::SharedStorage is an empty class (alignas 16)
    t_align = max(128, epi_align, align.struct)
    tensors = round_up(round_up(epi_t, align.struct) + main_t, t_align)
    return round_up(round_up(scheduler_end, t_align) + tensors, t_align)


# --- CuTe's static divisibility checks when a stage is sliced out of a swizzled smem layout ------------
#
# ``sA(_,_,stage)`` on a ``ComposedLayout<Swizzle<B,M,S>, smem_ptr_flag, L>`` runs
# cute/swizzle_layout.hpp ``slice_and_offset``: it composes projections of the swizzle with the
# stage mode and with the remaining (MN, K) modes, and each composition static_asserts the
# "Stride Divisibility Condition" and "Shape Divisibility Condition" of cute/layout.hpp
# composition_impl. Some tile/stage combinations fail there (e.g. bf16 K-major B of 8 x 64 with an
# odd stage count); the mainloop's Params and every device-side stage slice instantiate it, so such
# a kernel does not compile. Below is that algebra on static integer layouts, exactly as written
# in the 4.2 headers. Layouts are lists of (shape, stride) leaves.

SWIZZLE_BMS = {"SW128": (3, 4, 3), "SW64": (2, 4, 3), "SW32": (1, 4, 3), "INTER": (0, 4, 3)}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _coalesce_x(modes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """detail::coalesce_x (layout.hpp): backwards coalesce that keeps the function outside the domain."""
    shapes = [s for s, _ in modes]
    strides = [d for _, d in modes]
    new = [[2 if shapes[-1] == 1 else shapes[-1], strides[-1]]]
    for i in range(len(modes) - 2, -1, -1):
        s, d = shapes[i], strides[i]
        if s == 1:
            continue
        if new[0][0] == 1:
            new[0] = [s, d]
        elif s * d == new[0][1]:
            new[0] = [s * new[0][0], d]
        else:
            new.insert(0, [s, d])
    if len(new) == 1 and new[0][0] == 1:
        return [(1, 0)]
    return [tuple(m) for m in new]


class LayoutAlgebraError(ValueError):
    """A static_assert of CuTe's layout algebra would fire."""


def _compose_leaf(lhs: list[tuple[int, int]], shape: int, stride: int) -> list[tuple[int, int]]:
    """detail::composition_impl for an integral RHS (shape:stride) on a coalesced LHS."""
    if stride == 0:
        return [(shape, 0)]
    if len(lhs) == 1:
        return [(shape, stride * lhs[0][1])]
    result: list[tuple[int, int]] = []
    rest_shape, rest_stride = shape, stride
    for curr_shape, curr_stride in lhs[:-1]:
        if not (rest_stride % curr_shape == 0 or abs(rest_stride) < curr_shape):
            raise LayoutAlgebraError(f"Stride Divisibility Condition: stride {rest_stride} vs shape {curr_shape}")
        next_shape = _ceil_div(curr_shape, abs(rest_stride))
        next_stride = _ceil_div(abs(rest_stride), curr_shape) * (1 if rest_stride > 0 else -1)
        if next_shape == 1 or rest_shape == 1:
            rest_stride = next_stride
            continue
        new_shape = min(next_shape, rest_shape)
        if rest_shape % new_shape:
            raise LayoutAlgebraError(f"Shape Divisibility Condition: shape {rest_shape} vs {new_shape}")
        result.append((new_shape, rest_stride * curr_stride))
        rest_shape //= new_shape
        rest_stride = next_stride
    if not result:
        return [(rest_shape, rest_stride * lhs[-1][1])]
    if rest_shape == 1:
        return result
    return result + [(rest_shape, rest_stride * lhs[-1][1])]


def _compose(lhs: list[tuple[int, int]], rhs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """composition(Layout, Layout): coalesce the LHS, distribute over the RHS leaves."""
    flat = _coalesce_x(lhs)
    return [_compose_leaf(flat, s, d) for s, d in rhs]


def _evaluate(modes: list[tuple[int, int]], idx: int) -> int:
    """A flat layout's value at a linear index (colexicographic)."""
    out = 0
    for s, d in modes:
        out += (idx % s) * d
        idx //= s
    return out


def stage_layout(atom: "object", bits: int, mn: int, k: int, stages: int, mn_first: bool) -> tuple[list, list]:
    """(Raises LayoutAlgebraError when the atom does not tile the extent.) The non-swizzle part of ``tile_to_shape(atom, (MN, K, stages), order)`` split into its
    (MN, K) leaves and its stage mode, in elements. ``atom`` is a SmemAtom (major, swizzle)."""
    w = atom.contiguous_elems(bits)
    (a0, s0), (a1, s1) = ((8, w), (w, 1)) if atom.major == "K" else ((w, 1), (8, w))
    cos = a0 * a1
    if mn % a0 or k % a1 or stages < 1:
        raise LayoutAlgebraError(f"atom {a0}x{a1} does not tile {mn}x{k}")   # WGMMA-SMEM-ATOM-DIVIDES says so
    p0, p1 = mn // a0, k // a1
    # make_ordered_layout over (p0, p1, stages): the first-ordered mode is fastest
    order = (0, 1) if mn_first else (1, 0)
    ostride = [0, 0]
    ostride[order[0]] = 1
    ostride[order[1]] = (p0, p1)[order[0]]
    stage_stride = cos * p0 * p1

    def mode(a, s, p, o):
        leaves = [(a, s), (p, cos * o)]
        leaves = [(x, y) for x, y in leaves if x != 1]
        if len(leaves) == 2 and leaves[0][0] * leaves[0][1] == leaves[1][1]:
            leaves = [(leaves[0][0] * leaves[1][0], leaves[0][1])]
        return leaves or [(1, 0)]

    sliced = mode(a0, s0, p0, ostride[0]) + mode(a1, s1, p1, ostride[1])
    diced = [(stages, stage_stride)] if stages != 1 else [(1, 0)]
    return sliced, diced


def stage_slice_error(swizzle: str, sliced: list, diced: list, static_coord: bool = True) -> str | None:
    """Run slice_and_offset's compositions; the static_assert that fires, or None.

    ``static_coord``: the stage index is a compile-time constant (the mainloop's Params slice
    stage 0). With a run-time index (device-side pipeline slices) the last composition has
    dynamic strides and asserts nothing."""
    b, m, s = SWIZZLE_BMS[swizzle]
    sw = [1 << m, 1 << b, 1 << (s - b), 1 << b, 1]
    size = (1 << m) * (1 << b) * (1 << (s - b)) * (1 << b)
    anti = list(zip(sw, [1, 0, 1 << (m + b), 0, size]))
    only = list(zip(sw, [0, 1 << m, 0, 1 << (m + s), 0]))
    try:
        _compose(anti, diced)
        _compose(only, diced)
        sliced_only = [leaf for part in _compose(only, sliced) for leaf in part]
        n = 1
        for x, _ in sliced_only:
            n *= x
        active = _evaluate(sliced_only, n - 1)
        yyy = ((1 << b) - 1) << (m + s)
        swizzled = active ^ ((active & yyy) >> s)
        if active & ~swizzled or not static_coord:
            return None                         # hits Y and Z: stays a ComposedLayout
        z, y = 1 << m, 1 << (m + s)
        lo = [z << i for i in range(b)]
        hi = [(y + z) << i for i in range(b)]
        layout = ([(1 << m, 1)] + [(2, d) for d in lo] + [(1 << (s - b), 1 << (m + b))] + [(2, d) for d in hi]
                  + [(1, 1 << (m + b + s))])
        _compose(layout, sliced)
    except LayoutAlgebraError as e:
        return str(e)
    return None


@lru_cache(maxsize=16384)
def stage_slice_check(major: str, swizzle: str, bits: int, mn: int, k: int, stages: int, mn_first: bool,
                      static_coord: bool) -> str | None:
    """stage_layout + stage_slice_error for one smem layout, cached (a search asks about the same
    few layouts over and over). None when the slice compiles or the atom does not tile the extent
    (another rule reports that)."""
    from .config import SmemAtom
    try:
        sliced, diced = stage_layout(SmemAtom(major, swizzle), bits, mn, k, stages, mn_first)
    except LayoutAlgebraError:
        return None
    return stage_slice_error(swizzle, sliced, diced, static_coord)
