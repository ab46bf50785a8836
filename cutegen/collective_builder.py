"""Complete a KernelConfig exactly as CUTLASS 4.2's SM90 CollectiveBuilders would.

A user (or the search) may leave the shared-memory atoms, TMA copies, WGMMA instruction,
warpgroup layout, epilogue tile and stage count unset.  ``complete`` fills each from the
same decision procedure the C++ builders run for the SS TMA warp-specialized mainloops
(``gemm/collective/builders/sm90_gmma_builder.inl``, ``sm90_common.inl``,
``cute/arch/mma_sm90.hpp``) and the TMA epilogue builder
(``epilogue/collective/builders/sm90_builder.inl``).  Fields the user did set are kept;
whether they are legal is the legality rules' question, not this module's.

The choices were checked against what nvcc instantiates (``oracles/smem_probe.py``).
"""
from __future__ import annotations

from .config import KernelConfig, SmemAtom
from .dtypes import DTYPES
from .errors import IllegalConfig
from .problem import GemmProblem
from . import smem

# ss_op_selector without CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (not defined in the 4.2 headers):
# the only N it tries, widest first (cute/arch/mma_sm90.hpp).
SS_OP_N = (256, 192, 128, 96, 64, 32, 16, 8)
TMA_EPILOGUES = ("tma_warp_specialized", "tma_warp_specialized_cooperative")


def _violation(rule_id: str, reason: str):
    from cutegen.legality.rule import Violation   # lazy: legality imports this module
    return IllegalConfig([Violation(rule_id, reason, True, "cutlass_sm90")])


# --- the builder's decisions, one function each --------------------------------------------------------

def uses_register_a(problem: GemmProblem) -> bool:
    """is_use_rmem_A (sm90_common.inl): not both 2-byte inputs and not both K-major, or widths differ.

    Such problems are routed to the RS (register-A) mainloop, which cutegen does not build.
    """
    a, b = DTYPES[problem.dtype_a].bits, DTYPES[problem.dtype_b].bits
    two_bytes = a == 16 and b == 16
    both_k = problem.a_k_major and problem.b_k_major
    return (not two_bytes and not both_k) or a != b


def warpspecialized_transpose_b(problem: GemmProblem) -> bool:
    """is_warpspecialized_transpose_B: not both 16-bit and both operands MN-major (RS builder)."""
    a, b = DTYPES[problem.dtype_a].bits, DTYPES[problem.dtype_b].bits
    return not (a == 16 and b == 16) and not problem.a_k_major and not problem.b_k_major


def rs_swizzle(problem: GemmProblem, operand: str, blk_mn: int, blk_k: int) -> str | None:
    """rs_smem_selector (sm90_common.inl:170-265): the swizzle the RS builder picks; None where it static_asserts."""
    k_major = problem.a_k_major if operand == "a" else problem.b_k_major
    bits = DTYPES[problem.dtype_a if operand == "a" else problem.dtype_b].bits
    if k_major:
        return smem.largest_swizzle(blk_k, bits)
    width = {swz: smem.SWIZZLE_BYTES[swz] * 8 // bits for swz in smem.SWIZZLE_BYTES}
    transposed = warpspecialized_transpose_b(problem)
    if bits == 32:                       # whole-word types: SW32 has no bank conflicts
        if blk_mn % width["SW32"] == 0:
            return "SW32"
        return "INTER" if not transposed and blk_mn % width["INTER"] == 0 else None
    if bits == 8 and transposed:         # only the SW128 transposition exists for 8-bit B
        return "SW128" if blk_mn % width["SW128"] == 0 else None
    return smem.largest_swizzle(blk_mn, bits)


def mainloop_alignment(problem: GemmProblem, tile: tuple[int, int, int]) -> smem.MainloopAlignment:
    """SS: 16-byte arrays in a 128-byte struct; RS: arrays aligned to their swizzle repeat, and the
    builder rounds its stage size to the larger of the two."""
    if not uses_register_a(problem):
        return smem.SS_ALIGNMENT
    swa = rs_swizzle(problem, "a", tile[0], tile[2]) or "INTER"
    swb = rs_swizzle(problem, "b", tile[1], tile[2]) or "INTER"
    al_a, al_b = smem.SWIZZLE_ALIGNMENT[swa], smem.SWIZZLE_ALIGNMENT[swb]
    return smem.MainloopAlignment(al_a, al_b, max(al_a, al_b), max(al_a, al_b))


def gmma_major(problem: GemmProblem, operand: str) -> str:
    """gmma_ss_tag_to_major_{A,B}: MN only for MN-major 16-bit operands (tf32 and 8-bit are K-major)."""
    dt = problem.dtype_a if operand == "a" else problem.dtype_b
    k_major = problem.a_k_major if operand == "a" else problem.b_k_major
    if not k_major and dt != "tf32" and DTYPES[dt].bits != 8:
        return "MN"
    return "K"


def smem_atom(major: str, dtype_name: str, blk_mn: int, blk_k: int) -> SmemAtom | None:
    """ss_smem_selector: the widest swizzle atom whose contiguous width divides the tile's
    contiguous extent (Tile_K for K-major, Tile_M / Tile_N for MN-major); None where its
    static_asserts fire (extent not a multiple of 8, or no atom fits)."""
    if blk_mn % 8 or blk_k % 8:
        return None
    swz = smem.largest_swizzle(blk_k if major == "K" else blk_mn, DTYPES[dtype_name].bits)
    return None if swz is None else SmemAtom(major, swz)


def tma_atom(cluster_extent: int) -> str:
    """sm90_cluster_shape_to_tma_atom: multicast iff the cluster extent it is given exceeds 1."""
    return "tma_multicast" if cluster_extent > 1 else "tma"


def mma_instruction(problem: GemmProblem, tile: tuple[int, int, int]) -> tuple[int, int, int] | None:
    """ss_op_selector's atom: M = 64, N the widest of SS_OP_N dividing Tile_N, K by input type."""
    n = next((n for n in SS_OP_N if tile[1] % n == 0), None)
    k = DTYPES[problem.dtype_a].wgmma_k
    return None if n is None or k is None else (64, n, k)


def warpgroup_layout(schedule: str) -> tuple[int, int, int]:
    """AtomLayoutMNK: Cooperative stacks two consumer warpgroups along M."""
    return (2, 1, 1) if schedule == "cooperative" else (1, 1, 1)


def auto_epilogue_tile(problem: GemmProblem, config: KernelConfig) -> tuple[int, int]:
    """sm90_compute_tile_shape_or_override with EpilogueTileAuto (rulebook E19).

    The branch is taken on the *epilogue* schedule (sm90_is_cooperative_v<EpilogueSchedule>), not
    the kernel's: a pingpong kernel with the cooperative TMA epilogue gets 128-row subtiles."""
    from math import gcd
    tm, tn, _ = config.tile_shape
    if config.epilogue_schedule == "tma_warp_specialized_cooperative":
        return (min(128, tm), gcd(min(32, tn), tn))
    n_perf = 64 if DTYPES[problem.dtype_d].bits == 8 and tn % 64 == 0 else 32
    return (min(64, tm), gcd(min(n_perf, tn), tn))


def epilogue_plan(problem: GemmProblem, config: KernelConfig) -> smem.EpiloguePlan | None:
    """The TMA epilogue's tile, stages and buffer alignments; None for the no-smem epilogue.

    Raises ValueError when the epilogue tile does not divide the CTA tile or no smem atom fits.
    """
    if config.epilogue_schedule not in TMA_EPILOGUES:
        return None
    et = config.epilogue_tile or auto_epilogue_tile(problem, config)
    tm, tn, _ = config.tile_shape
    if tm % et[0] or tn % et[1]:
        raise ValueError(f"epilogue tile {et[0]}x{et[1]} does not divide the CTA tile {tm}x{tn}")
    return smem.epilogue_plan(problem.dtype_c, problem.dtype_d, problem.layout_c, config.tile_shape, et)


def epilogue_storage_bytes(problem: GemmProblem, config: KernelConfig) -> int:
    return smem.epilogue_storage_bytes(problem.dtype_c, problem.dtype_d, epilogue_plan(problem, config))


def resolve_stages(problem: GemmProblem, config: KernelConfig) -> int:
    """StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)> (rulebook E07), or the user's count."""
    if config.stages != "auto":
        return config.stages
    carveout = epilogue_storage_bytes(problem, config)
    return smem.auto_stage_count(DTYPES[problem.dtype_a].bits, DTYPES[problem.dtype_b].bits,
                                 config.tile_shape, carveout,
                                 alignment=mainloop_alignment(problem, config.tile_shape).stage)


def shared_storage(problem: GemmProblem, config: KernelConfig) -> smem.SharedStorage:
    """The three sizeofs for a configuration (stages resolved here if still ``"auto"``)."""
    stages = resolve_stages(problem, config)
    plan = epilogue_plan(problem, config)
    ba, bb = DTYPES[problem.dtype_a].bits, DTYPES[problem.dtype_b].bits
    align = mainloop_alignment(problem, config.tile_shape)
    return smem.SharedStorage(
        mainloop=smem.mainloop_storage_bytes(ba, bb, config.tile_shape, stages, align),
        epilogue=smem.epilogue_storage_bytes(problem.dtype_c, problem.dtype_d, plan),
        kernel=smem.kernel_storage_bytes(config.mainloop_schedule, ba, bb, config.tile_shape, stages,
                                         problem.dtype_c, problem.dtype_d, plan, align))


# --- completion ------------------------------------------------------------------------------------------

def complete(problem: GemmProblem, config: KernelConfig) -> KernelConfig:
    """Fill every unset field of ``config`` as the SM90 CollectiveBuilder would; keep the set ones.

    Raises ``IllegalConfig`` naming the rule when the builder itself could not complete it
    (no smem atom or WGMMA instruction fits the tile, the epilogue tile does not fit).
    """
    tm, tn, tk = config.tile_shape
    changes: dict = {}
    if config.smem_layout_a is None:
        major = gmma_major(problem, "a")
        atom = smem_atom(major, problem.dtype_a, tm, tk)
        if atom is None:
            raise _violation("SM90-SMEM-ATOM-FIT", f"no {major}-major GMMA smem atom of {problem.dtype_a} fits A's "
                             f"tile {tm}x{tk} (ss_smem_selector needs multiples of 8 and of the atom width)")
        changes["smem_layout_a"] = atom
    if config.smem_layout_b is None:
        major = gmma_major(problem, "b")
        atom = smem_atom(major, problem.dtype_b, tn, tk)
        if atom is None:
            raise _violation("SM90-SMEM-ATOM-FIT", f"no {major}-major GMMA smem atom of {problem.dtype_b} fits B's "
                             f"tile {tn}x{tk} (ss_smem_selector needs multiples of 8 and of the atom width)")
        changes["smem_layout_b"] = atom
    if config.tma_a is None:
        changes["tma_a"] = tma_atom(config.cluster_shape[1])   # A is shared along the cluster's N extent
    if config.tma_b is None:
        changes["tma_b"] = tma_atom(config.cluster_shape[0])   # B along the cluster's M extent
    if config.mma_instruction is None:
        instr = mma_instruction(problem, config.tile_shape)
        if instr is None:
            raise _violation("WGMMA-SS-OP-SELECT", f"ss_op_selector finds no WGMMA N in {list(SS_OP_N)} "
                             f"dividing Tile_N={tn}")
        changes["mma_instruction"] = instr
    if config.warpgroup_layout is None:
        changes["warpgroup_layout"] = warpgroup_layout(config.mainloop_schedule)
    if config.epilogue_tile is None and config.epilogue_schedule in TMA_EPILOGUES:
        changes["epilogue_tile"] = auto_epilogue_tile(problem, config)
    if config.stages == "auto":
        try:
            stages = resolve_stages(problem, config)
        except ValueError as e:
            rule = "SM90-EPILOGUE-TILE-DIVIDES" if "does not divide" in str(e) else "SM90-EPILOGUE-SMEM-ATOM"
            raise _violation(rule, f"stages auto needs the epilogue's smem size: {e}") from None
        if stages < 1:
            raise _violation("SM90-STAGES-MIN", f"StageCountAutoCarveout gives {stages} stages for tile "
                             f"{tm}x{tn}x{tk}: not one stage fits beside the epilogue's "
                             f"{epilogue_storage_bytes(problem, config)} bytes")
        changes["stages"] = stages
    if not changes:
        return config
    # Every value above is already canonical (ints in tuples, SmemAtom, choice strings), so skip
    # KernelConfig's field validation: completion runs on thousands of search candidates.
    done = object.__new__(KernelConfig)
    done.__dict__.update(config.__dict__)
    done.__dict__.pop("_json", None)          # KernelConfig.to_json's copy of the fields before the changes
    done.__dict__.update(changes)
    return done
