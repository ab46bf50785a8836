"""The one-stage TMA descriptor mainloop: tiles CuTe cannot slice by stage, made compilable.

CUTLASS 4.2's SS mainloop (sm90_mma_tma_gmma_ss_warpspecialized.hpp:177-190, 215-228) builds each TMA
descriptor from ``SmemLayout{}(_,_,Int<0>{})``: a stage slice, with a compile-time index, of the swizzled
``ComposedLayout`` that holds every pipeline stage. That slice runs cute/swizzle_layout.hpp
``slice_and_offset``, whose compositions with the swizzle's projections static_assert (cute/layout.hpp:1077
"Stride Divisibility Condition", :1101 "Shape Divisibility Condition") when an operand's rows per stage are
an odd number of 8-row K-major swizzle atoms (Tile_N = 136, 200, 232: nvcc 13.0, the failure reproduced
here 2026-11-26, the stage mode ``(8 stages):8704`` and the row mode ``17:512`` of a 64x136x64 bf16 kernel
both fail). Nothing else in the collective needs that algebra: on the device every smem tensor is made with
``make_tensor(smem_ptr, ComposedLayout)``, which moves the swizzle into the pointer (cute/pointer_flagged.hpp
58-66) and slices plain layouts.

So the form (templates/cutegen_stage_tma_mainloop.inc.j2) is CUTLASS's collective with one change: the TMA
descriptors are built from the layout of ONE stage (``tile_to_shape(atom, (MN, K))``, which is stage 0 of
the pipelined layout, leaf for leaf: a static_assert in the kernel checks it). The TMA box, the WGMMA N and
the smem footprint are the tile's; no row is padded. It needs every stage to start at the same swizzle phase,
i.e. stage bytes a multiple of the 1024-byte SW128 repeat (a static_assert in the kernel).

The renderer uses it exactly where the stock collective does not compile (``needed``), so every kernel that
compiled before renders byte-identically. Which of those kernels are legal is legality's business (rule
SM90-SMEM-STAGE-SLICE, narrowed: it no longer fires where ``applies`` holds)."""
from __future__ import annotations

from . import smem

# The dispatch policy whose collective this form derives from. FP8's two-level accumulation collective
# (MainloopSm90TmaGmmaWarpSpecializedFP8) reads its Params in mma (mma_promotion_interval), so the form
# cannot hand it the base's view: FP8 kernels without fast accumulation are not covered.
SW128_REPEAT_BYTES = 1024


def _operands(problem, config, bits_a: int, bits_b: int):
    tm, tn, tk = config.tile_shape
    return (("A", config.smem_layout_a, bits_a, tm), ("B", config.smem_layout_b, bits_b, tn))


def stock_slice_errors(problem, config, bits_a: int, bits_b: int) -> list[tuple[str, str]]:
    """(operand, CuTe's static_assert) for each operand whose stage-0 slice does not compile in the stock
    collective (the mainloop's Params slice stage 0 with a compile-time index)."""
    out = []
    tk = config.tile_shape[2]
    for name, atom, bits, mn in _operands(problem, config, bits_a, bits_b):
        if atom is None:
            continue
        why = smem.stage_slice_check(atom.major, atom.swizzle, bits, mn, tk, config.stages, atom.major == "K", True)
        if why:
            out.append((name, why))
    return out


def why_not(problem, config, bits_a: int, bits_b: int, fp8_two_level: bool, register_a: bool = False) -> str | None:
    """None when the one-stage descriptor mainloop can build this kernel, else the reason (one line).

    The scope is what was built and run: the operand CuTe cannot slice has a K-major SW128 atom and the
    tile holds exactly one atom along K (Tile_K x bits = 1024: bf16/f16 K 64, tf32 K 32, 8-bit K 128), so
    every row is one 128-byte swizzle row, every stage spans whole 1024-byte repeats and a multicast
    share of any whole number of rows starts 128-byte aligned (rulebook A21, A22)."""
    if config.mainloop_load != "tma":
        return "the form replaces the TMA mainloop's descriptors; this kernel loads with cp.async"
    if register_a:
        return "the register-A (RS) mainloop is another collective"
    if fp8_two_level:
        return "FP8 with two-level accumulation uses another collective (its mma reads Params)"
    tk = config.tile_shape[2]
    if bits_a != 16 or bits_b != 16:
        return (f"{bits_a}/{bits_b}-bit operands: the form is built and run for 16-bit operands only (8-bit and "
                f"tf32 stages slice in the stock collective)")
    for name, atom, bits, mn in _operands(problem, config, bits_a, bits_b):
        if atom is None:
            return f"{name} smem atom not chosen"
        stage_bytes = mn * tk * bits // 8
        if stage_bytes % SW128_REPEAT_BYTES:
            return (f"{name} stage of {mn}x{tk} x {bits} bits = {stage_bytes} bytes is not a multiple of the "
                    f"{SW128_REPEAT_BYTES}-byte swizzle repeat")
    for name, why in stock_slice_errors(problem, config, bits_a, bits_b):
        atom = config.smem_layout_a if name == "A" else config.smem_layout_b
        bits = bits_a if name == "A" else bits_b
        if str(atom) != "K_SW128" or tk * bits != 1024:
            return (f"{name} smem {atom} with Tile_K {tk} x {bits} bits: the form covers only a K-major SW128 "
                    f"atom holding the whole Tile_K (Tile_K x bits = 1024)")
    return None


def needed(problem, config, bits_a: int, bits_b: int, fp8_two_level: bool, register_a: bool = False) -> bool:
    """True when the kernel renders with the one-stage descriptor mainloop: the stock collective's stage
    slice does not compile and the form can build it."""
    if config.mainloop_load != "tma" or config.stages is None or config.stages == "auto":
        return False
    return bool(stock_slice_errors(problem, config, bits_a, bits_b)) and \
        why_not(problem, config, bits_a, bits_b, fp8_two_level, register_a) is None


def needed_for(problem, config) -> bool:
    """``needed`` for a caller's problem and a completed configuration (the kernel's own problem is the
    transposed one for a swap-AB kernel): the backends that do not render the form refuse these."""
    from .collective_builder import uses_register_a
    from .dtypes import DTYPES
    from .swap_ab import kernel_problem

    if config.smem_layout_a is None or config.smem_layout_b is None:
        return False
    kp = kernel_problem(problem, config)
    fp8_two_level = kp.dtype_a in ("e4m3", "e5m2") and not getattr(kp, "fp8_fast_accum", False)
    return needed(kp, config, DTYPES[kp.dtype_a].bits, DTYPES[kp.dtype_b].bits, fp8_two_level, uses_register_a(kp))
