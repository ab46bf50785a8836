"""CUTLASS 4.2's SM90 TMA GEMM contract (rulebook section E, generator facts of F, section H).

The static_asserts of the collective builders, the SS mainloop, the TMA epilogue and the
three warp-specialized kernels, their runtime ``can_implement`` checks (which depend on the
problem), the TMA descriptors the kernel encodes for A, B, C and D (judged by the
tensor-map rules of ``tensor_map.py``), and what the H100 showed beyond the documents.
Evaluated on ``cutegen.legality.ConfigContext``.

F (the generator's filters) is mostly heuristic -- "at least two stages on the
cluster-scaled shape", level pruning -- and is deliberately not enforced (rulebook G.18);
its real constraints (F05 Tile_M % 64, Tile_N % 8, Tile_K % 8, cluster <= 16; F06 the
cooperative Tile_M) are the WGMMA-*, RES-* and SM90-COOP-* rules.
"""
from __future__ import annotations

from functools import lru_cache

from cutegen import collective_builder as cb
from cutegen.dtypes import DTYPES

from .rule import RuleSet

CUTLASS_SM90_RULES = RuleSet("cutlass_sm90")
_rule = CUTLASS_SM90_RULES.rule
_B = "CUTLASS 4.2 gemm/collective/builders/sm90_gmma_builder.inl"
_C = "CUTLASS 4.2 gemm/collective/builders/sm90_common.inl"
_EB = "CUTLASS 4.2 epilogue/collective/builders/sm90_builder.inl"
_E = "CUTLASS 4.2 epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp"
_ML = "CUTLASS 4.2 gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp"


# --- builder routing and alignment -------------------------------------------------------------------

@_rule("SM90-RS-ROUTE", rulebook="E05/H", source=f"{_C}:394-430 is_use_rmem_A; {_B}:330-480 (RS builder); "
       "config oracle (H200): tf32 NT 128x128x32 correct, e4m3 NT 128x128x128 fails at launch",
       summary="a problem CUTLASS routes to the register-A (RS) mainloop (not both 16-bit and not both K-major) is "
               "accepted only as the verified tf32 kernel with both A and B MN-major (warp-specialized transposed B)")
def _route(c):
    p = c.problem
    if not cb.uses_register_a(p):
        return None
    if p.dtype_a == p.dtype_b == "tf32" and cb.warpspecialized_transpose_b(p):
        return None
    what = f"dtype_a={p.dtype_a}, dtype_b={p.dtype_b}, layout_a={p.layout_a}, layout_b={p.layout_b}"
    if c.bits_a == 8 or c.bits_b == 8:
        return f"{what}: fp8 operands must both be K-major (TN); non-TN fp8 went to the RS mainloop and failed at launch"
    return f"{what}: routed to the RS mainloop in a form not verified against nvcc and the GPU"


@_rule("SM90-RS-TRANSPOSE-B-K128", rulebook="E05", source="collective/sm90_mma_tma_gmma_rs_warpspecialized.hpp:195 "
       "static_assert (SmemLayoutB K must be 128bytes to be transposed)",
       summary="the RS kernel that transposes B in shared memory needs Tile_K x bits(B) = 128 bytes")
def _transpose_k(c):
    if cb.uses_register_a(c.problem) and cb.warpspecialized_transpose_b(c.problem) and c.tk * c.bits_b != 1024:
        return f"Tile_K={c.tk} x {c.bits_b} bits = {c.tk * c.bits_b // 8} bytes, not 128 (B is transposed in smem)"
    return None


@_rule("SM90-TMA-ALIGNMENT", rulebook="E02", source=f"{_B}:230 static_assert (Should meet TMA alignment requirement)",
       summary="alignment_a x bits(A) and alignment_b x bits(B) are multiples of 128 bits")
def _tma_alignment(c):
    p = c.problem
    if c.config.mainloop_load != "tma":
        return None                      # cp.async: legality/cp_async.py
    for name, align, bits in (("a", p.alignment_a, c.bits_a), ("b", p.alignment_b, c.bits_b)):
        if align * bits % 128:
            return f"alignment_{name}={align} elements x {bits} bits is not a multiple of 16 bytes"
    return None


@_rule("SM90-EPILOGUE-ALIGNMENT", rulebook="E19/E16", source=f"{_EB}:297 static_assert (C/D Should meet TMA alignment requirement)",
       summary="a TMA epilogue's C and D alignments are multiples of 128 bits")
def _epi_alignment(c):
    if not c.tma_epilogue:
        return None
    align = c.problem.alignment_c
    for name, bits in (("D", c.bits_d), ("C", c.bits_c)):
        if bits and align * bits % 128:
            return f"alignment_c={align} elements x {bits}-bit {name} is not a multiple of 16 bytes"
    return None


@_rule("SM90-SMEM-ATOM-FIT", rulebook="E04", source=f"{_C}:270-319 ss_smem_selector static_asserts",
       summary="for an smem atom left to the builder: Tile_MN and Tile_K are multiples of 8 and some GMMA atom's "
               "contiguous width divides the operand's contiguous tile extent")
def _atom_fit(c):
    for name, mn in (("a", c.tm), ("b", c.tn)):
        if getattr(c.requested, "smem_layout_" + name) is None:
            major = c.major_a if name == "a" else c.major_b
            dt = getattr(c.problem, "dtype_" + name)
            if cb.smem_atom(major, dt, mn, c.tk) is None:
                return f"no {major}-major {dt} GMMA atom fits operand {name.upper()}'s {mn}x{c.tk} tile"
    return None


# --- mainloop and kernel static_asserts --------------------------------------------------------------

@_rule("SM90-STAGES-MIN", rulebook="E06/C07", source=f"{_ML}:137 static_assert (Stages set to value 2 or more)",
       summary="the mainloop pipeline has at least 2 stages")
def _stages(c):
    return None if c.stages >= 2 else f"stages={c.stages} < 2"


@_rule("SM90-COOP-TILE-M", rulebook="E09", source="kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp:357 static_assert",
       summary="the cooperative kernel needs Tile_M >= 128")
def _coop_m(c):
    if c.config.mainloop_schedule == "cooperative" and c.tm < 128:
        return f"cooperative with Tile_M={c.tm} < 128"
    return None


@_rule("SM90-STREAMK-COOPERATIVE", rulebook="E10/E11",
       source="pingpong kernel :105, warp-specialized kernel :111 static_asserts",
       summary="the stream-K tile scheduler is used only with the cooperative kernel")
def _streamk(c):
    if c.config.tile_scheduler == "stream_k" and c.config.mainloop_schedule != "cooperative":
        return f"tile_scheduler=stream_k with {c.config.mainloop_schedule} (only cooperative supports it)"
    return None


@_rule("SM90-CLUSTER-SHAPE", rulebook="E14", source=f"{_ML}:325-366 (cluster indexed with k = 0 only)",
       summary="the cluster's K extent is 1")
def _cluster_k(c):
    return None if c.ck == 1 else f"cluster_shape K={c.ck}: SM90 GEMM clusters are M x N x 1"


@_rule("SM90-CLUSTER-DIVIDES-TILE", rulebook="E14/H",
       source=f"{_ML}:110 CtaShape_MNK = shape_div(TileShape, ClusterShape): cute/int_tuple.hpp:408 static_assert (Divisibility Condition)",
       summary="for M and N, the tile extent and the cluster extent divide one another")
def _cluster_divides(c):
    for name, t, k in (("M", c.tm, c.cm), ("N", c.tn, c.cn)):
        if t % k and k % t:
            return f"Tile_{name}={t} and cluster {name}={k} do not divide one another"
    return None


@_rule("SM90-TMA-MULTICAST-CLUSTER", rulebook="E14/A26", source=f"{_C}:112-125 sm90_cluster_shape_to_tma_atom; {_ML}:325-366",
       summary="an operand shared by more than one CTA of the cluster is loaded with SM90_TMA_LOAD_MULTICAST "
               "(A when cluster N > 1, B when cluster M > 1)")
def _multicast_atom(c):
    for name, copy, ext, axis in (("a", c.config.tma_a, c.cn, "N"), ("b", c.config.tma_b, c.cm, "M")):
        if ext > 1 and copy != "tma_multicast":
            return f"tma_{name}={copy} with cluster {axis}={ext}: the CTAs sharing {name.upper()} would each load a slice only"
    return None


def _smem_atoms(c):
    """The smem atoms the kernel really uses: the config's (SS), or the RS builder's rs_smem_selector
    choice when CUTLASS routes the problem to the register-A mainloop."""
    cached = c.__dict__.get("_smem_atoms")
    if cached is None:
        if cb.uses_register_a(c.problem):
            from cutegen.config import SmemAtom
            out = []
            for name, mn, k_major in (("a", c.tm, c.problem.a_k_major), ("b", c.tn, c.problem.b_k_major)):
                swz = cb.rs_swizzle(c.problem, name, mn, c.tk)
                out.append(SmemAtom("K" if k_major else "MN", swz) if swz else getattr(c.config, "smem_layout_" + name))
            cached = tuple(out)
        else:
            cached = (c.config.smem_layout_a, c.config.smem_layout_b)
        c.__dict__["_smem_atoms"] = cached
    return cached


# H200, 2026-11-26: K_INTER (unswizzled) A and B atoms faulted with "misaligned address" in 3 of 3 swap-AB kernels
# with a 2x1 or 4x1 cluster (64x136 ping-pong s8, 128x200 cooperative s5, 128x232 cooperative s4; the
# diagnosis run, bench/results/runs/2026-11-26-nvidia-h200-diagnose-tune.json) and validated in 5 of 5 unswapped
# 1x1 kernels (64x128, 64x136, 64x144 ping-pong, 128x128, 128x200 cooperative; bench/probe_forms.py). The
# predicate is the cluster (the TMA multicast slices of an unswizzled stage): a swapped kernel is judged here on
# its transposed problem with swap_ab cleared (check_config), so swap-AB cannot be a term of it; a swapped 1x1
# INTER kernel has not been run either way (NOTES.md).
@_rule("SM90-SMEM-INTERLEAVE-FAULT", rulebook="E03 (new)",
       source="H200 2026-11-26: 3/3 faulted (misaligned address) with a cluster > 1 and swap-AB; 5/5 validated 1x1 "
              "unswapped (bench/results/diagnose/2026-11-26-nvidia-h200-probes.json)",
       summary="an unswizzled (INTER) A or B smem atom only in a 1x1 cluster (the form shown to run)")
def _interleave_fault(c):
    atoms = [n for n, a in (("A", c.config.smem_layout_a), ("B", c.config.smem_layout_b))
             if a is not None and a.swizzle == "INTER"]
    if not atoms or c.cm * c.cn == 1:
        return None
    return f"{'/'.join(atoms)} smem atom INTER with cluster {c.cm}x{c.cn}: faulted (misaligned address) on the GPU"


# Found by the H200 fuzz campaign (bench/fuzz/h200-2026-11-26: a 64x8x16 tf32 ping-pong kernel, 48 stages, ranked
# 2nd for 14 problems, wrong in 14 of 14 cases, relative error 0.87-1.27) and bracketed the same day
# (bench/results/diagnose/2026-11-26-nvidia-h200-probes-fuzz.json): tf32 with tile N 8 and tile K 16 computes wrong
# at 48 and 8 stages and with SW64 and SW32 atoms; tile N 16 (64x16x16), tile K 32 (64x8x32, SW64 and SW128) and
# 128x64x16 validate. The cause is not isolated (an 8x16 tf32 B stage is 512 bytes; e4m3's 512-byte 64x8x64 stage
# runs), so the predicate is exactly the failing shape: tf32, Tile_N = 8, Tile_K = 16, any Tile_M.
@_rule("SM90-TF32-TILE-N8-K16", rulebook="W03 (new)",
       source="H200 2026-11-26: tf32 64x8x16 wrong in 14/14 fuzz cases and 3/3 probes (s48 SW64, s8 SW64, s8 SW32); "
              "64x16x16, 64x8x32 and 128x64x16 tf32 validated (bench/results/diagnose/2026-11-26-nvidia-h200-probes-fuzz.json)",
       summary="a tf32 kernel does not use Tile_N = 8 with Tile_K = 16 (CUTLASS 4.2 computes wrong results)")
def _tf32_n8_k16(c):
    if c.problem.dtype_a == "tf32" and c.tn == 8 and c.tk == 16:
        return f"tf32 with tile {c.tm}x{c.tn}x{c.tk}: Tile_N 8 with Tile_K 16 computes wrong results on the GPU"
    return None


@_rule("SM90-SMEM-STAGE-SLICE", rulebook="new (E03 family)",
       source="cute/swizzle_layout.hpp:230-290 slice_and_offset -> cute/layout.hpp:1077,1101 static_asserts "
              "(Stride/Shape Divisibility Condition); instantiated by the stock mainloop's Params "
              "(SmemLayout(_,_,0), sm90_mma_tma_gmma_ss_warpspecialized.hpp:177-190); nvcc-verified on 25 "
              "tile/stage cases. Narrowed 2026-11-26: where cutegen/stage_tma.py's one-stage descriptor "
              "mainloop covers the kernel (K-major SW128 atom holding the whole Tile_K, TMA, not FP8 two-level) "
              "the renderer uses it and the slice is never taken (nvcc 13.0 built 64x136, 128x200, 128x232). "
              "The epilogue's C/D buffers go through as_position_independent_swizzle_tensor instead: a "
              "column-major 64x8x3-stage C buffer that this algebra rejects compiles (nvcc), so C and D are "
              "not checked here",
       summary="slicing one pipeline stage out of the swizzled A and B smem layouts passes CuTe's static "
               "divisibility checks, or the kernel renders with the one-stage descriptor mainloop")
def _stage_slice(c):
    from cutegen import smem, stage_tma
    atom_a, atom_b = _smem_atoms(c)
    for name, atom, bits, mn in (("A", atom_a, c.bits_a, c.tm), ("B", atom_b, c.bits_b, c.tn)):
        why = smem.stage_slice_check(atom.major, atom.swizzle, bits, mn, c.tk, c.stages, atom.major == "K", True)
        if why:
            instead = stage_tma.why_not(c.problem, c.config, c.bits_a, c.bits_b, c.fp8_promoted,
                                        cb.uses_register_a(c.problem))
            if instead is None:
                return None
            return f"{name} smem {atom} {mn}x{c.tk}x{c.stages} stages: {why}; no one-stage form: {instead}"
    return None


# --- epilogue -----------------------------------------------------------------------------------------

@_rule("SM90-EPILOGUE-SCHEDULE-PAIR", rulebook="E20", source="cutlass_library/sm90_utils.py:613-713 (the pairs CUTLASS emits)",
       summary="cooperative pairs with the cooperative TMA epilogue or no-smem; pingpong and warp-specialized "
               "with the plain TMA epilogue or no-smem")
def _epi_pair(c):
    sched, epi = c.config.mainloop_schedule, c.config.epilogue_schedule
    ok = {"cooperative": ("tma_warp_specialized_cooperative", "no_smem"),
          "pingpong": ("tma_warp_specialized", "no_smem"),
          "warp_specialized": ("tma_warp_specialized", "no_smem")}[sched]
    return None if epi in ok else f"epilogue_schedule={epi} with mainloop_schedule={sched}"


@_rule("SM90-EPILOGUE-TILE-DIVIDES", rulebook="E19", source=f"{_E}:129-130 static_assert (EPI_TILE_M/N must divide CTA_M/N)",
       summary="the epilogue tile divides the CTA tile")
def _epi_divides(c):
    if not c.tma_epilogue:
        return None
    em, en = c.config.epilogue_tile or cb.auto_epilogue_tile(c.problem, c.config)
    if c.tm % em or c.tn % en:
        return f"epilogue tile {em}x{en} does not divide the CTA tile {c.tm}x{c.tn}"
    return None


@_rule("SM90-EPILOGUE-TILE-EXPLICIT", rulebook="E19", source=f"{_EB}:151-153 static_asserts (Unsupported tile shape)",
       summary="an epilogue tile other than EpilogueTileAuto's has M = 128 (cooperative) or 64 (otherwise) and N % 16 == 0")
def _epi_explicit(c):
    et = c.config.epilogue_tile
    if not c.tma_epilogue or et is None or tuple(et) == cb.auto_epilogue_tile(c.problem, c.config):
        return None
    want_m = 128 if c.config.epilogue_schedule == "tma_warp_specialized_cooperative" else 64
    if et[0] != want_m or et[1] % 16:
        return f"explicit epilogue tile {et[0]}x{et[1]}: needs M={want_m} and N a multiple of 16"
    return None


@_rule("SM90-EPILOGUE-SMEM-ATOM", rulebook="E19/E04", source=f"{_EB}:91-110 (ss_smem_selector on the epilogue tile); "
       f"{_EB}:318-333 (CopyAtomC: STSM needs N % 8)",
       summary="a GMMA smem atom and an STSM copy atom fit the epilogue tile (its M and N multiples of 8)")
def _epi_atom(c):
    if c.tma_epilogue and c.epi_plan is None and c.epi_error and "does not divide" not in c.epi_error:
        return c.epi_error
    return None


@_rule("SM90-EPILOGUE-FRAGMENT", rulebook="E19 (new)",
       source=f"{_E}:626 static_assert (Fragment size does not vectorize properly); FragmentSize = "
              f"size(EpilogueTile) / (256 cooperative epilogue, else 128) ({_EB}:67); config oracle: "
              "128x24 tiles (epilogue 128x24 -> 12) fail, 4/8/16 compile",
       summary="the TMA epilogue's FragmentSize (epilogue-tile elements per consumer thread) is a power of two, "
               "so the accumulator fragment vectorizes")
def _epi_fragment(c):
    if c.epi_plan is None:
        return None
    em, en = c.epi_plan.tile
    threads = 256 if c.config.epilogue_schedule == "tma_warp_specialized_cooperative" else 128
    frag = em * en // threads
    if frag < 1 or frag & (frag - 1):
        return f"epilogue tile {em}x{en} over {threads} threads gives FragmentSize {frag}, not a power of two"
    return None


@_rule("SM90-EPILOGUE-DEADLOCK", rulebook="E19", source=f"{_E}:731 static_assert (This TMA epilogue configuration will deadlock)",
       summary="not (DelayTmaStore and ReuseSmemC and StagesC <= StagesD)")
def _epi_deadlock(c):
    p = c.epi_plan
    if p is not None and c.problem.dtype_c == "void" and p.reuse_smem_c and p.stages_c <= p.stages_d:
        return f"delayed TMA store with reused C smem and StagesC={p.stages_c} <= StagesD={p.stages_d}"
    return None


@_rule("SM90-NOSMEM-FUSION", rulebook="E20", source=f"{_EB}:420-470 (the no-smem builder exists only for LinearCombination)",
       summary="the no-smem epilogue computes only alpha*acc + beta*C: no bias, no activation")
def _nosmem_fusion(c):
    p = c.problem
    if c.config.epilogue_schedule == "no_smem" and (p.bias or p.activation != "none"):
        return f"no_smem epilogue with bias={p.bias}, activation={p.activation} (needs a TMA epilogue)"
    return None


# --- can_implement: the problem against the kernel ----------------------------------------------------

def _contiguous(c, operand: str) -> tuple[str, int]:
    p = c.problem
    if operand == "a":
        return ("K", p.k) if p.a_k_major else ("M", p.m)
    if operand == "b":
        return ("K", p.k) if p.b_k_major else ("N", p.n)
    return ("N", p.n) if p.layout_c == "row" else ("M", p.m)


@_rule("SM90-CAN-IMPLEMENT-AB", rulebook="E15", source=f"{_ML}:242-261 can_implement; cutlass/detail/layout.hpp:398-415; "
       "collective/sm90_mma_multistage_gmma_ss_warpspecialized.hpp:182-183 (cp.async: NumValSrc)",
       summary="A's and B's contiguous extents (K for K-major, else M / N) are multiples of 128 bits' worth of elements "
               "(TMA mainloop) or of the operand's alignment (cp.async mainloop)")
def _can_ab(c):
    for name, bits in (("a", c.bits_a), ("b", c.bits_b)):
        dim, ext = _contiguous(c, name)
        # TMA: 16 bytes; cp.async: check_alignment<GmemTiledCopy::NumValSrc>, the operand's vector
        need = 128 // bits if c.config.mainloop_load == "tma" else getattr(c.problem, f"alignment_{name}")
        if ext % need:
            return f"{name.upper()} is {dim}-contiguous and {dim}={ext} is not a multiple of {need}"
    return None


@_rule("SM90-CAN-IMPLEMENT-CD", rulebook="E16", source=f"{_E}:324-379 can_implement",
       summary="with a TMA epilogue, C's (if any) and D's contiguous extent (N for row-major, else M) is a multiple of 128 bits' worth")
def _can_cd(c):
    if not c.tma_epilogue:
        return None
    dim, ext = _contiguous(c, "c")
    for name, bits in (("D", c.bits_d), ("C", c.bits_c)):
        if bits and ext % (128 // bits):
            return f"{name} is {dim}-contiguous and {dim}={ext} is not a multiple of {128 // bits}"
    return None


@_rule("SM90-PROBLEM-ALIGNMENT", rulebook="E15/E16", source="templates/cutegen_abi.inc.j2 check_operand (the kernel "
       "refuses any call whose extents or leading dimensions break its AlignmentA/B/C/D); issue 10: a kernel "
       "generated for N=1001 with alignment_c=8 refused its own problem",
       summary="the problem's own contiguous extents and leading dimensions are multiples of the alignments the "
               "kernel is built for, so the kernel can compute the problem it is generated for")
def _problem_alignment(c):
    p = c.problem
    for op in ("a", "b", "c"):
        align = getattr(p, f"alignment_{op}")
        dim, ext = p.contiguous_extent(op)
        ld = getattr(p, f"ld{op}")
        if ext % align:
            return f"alignment_{op}={align} but {op.upper()}'s contiguous extent {dim}={ext} is not a multiple of it"
        if ld % align:
            return f"alignment_{op}={align} but ld{op}={ld} is not a multiple of it"
    return None


# --- the TMA descriptors the kernel encodes -----------------------------------------------------------

_TMA_TYPE = {8: "UINT8", 16: "UINT16", 32: "UINT32"}   # A04: non-float operands are encoded as same-width uint
_SWIZZLE = {"SW128": "128B", "SW64": "64B", "SW32": "32B", "INTER": "NONE"}


def _tensor_map_keys(c) -> dict:
    """The tensor maps for A, B (and C, D for TMA epilogues) as hashable argument tuples
    (data type, global_dim, global_strides, box_dim, swizzle), as CuTe encodes them (checked against
    the arguments CUTLASS 4.2 passes to cuTensorMapEncodeTiled: oracles/smem_probe_tma.py): rank 3
    (contiguous, other, batch), packed strides with batch stride 0 when L = 1, a box of one smem atom
    width by the tile's other extent; interleave NONE, L2 128B, OOB zero (E24). The address is left
    unknown (pointer alignment is the caller's, E18)."""
    cached = c.__dict__.get("_tensor_map_keys")
    if cached is not None:
        return cached
    p = c.problem
    out = {}

    def strides(cont, other, e):
        return (cont * e, cont * other * e if p.batch > 1 else 0)

    atom_a, atom_b = _smem_atoms(c)
    loads = (("A", atom_a, c.bits_a, p.m), ("B", atom_b, c.bits_b, p.n)) if c.config.mainloop_load == "tma" else ()
    for name, atom, bits, mn in loads:      # a cp.async mainloop encodes no tensor map for A and B
        tile_mn = c.tm if name == "A" else c.tn
        k_major = atom.major == "K"
        dims = (p.k, mn, p.batch) if k_major else (mn, p.k, p.batch)
        box = [atom.contiguous_elems(bits), tile_mn if k_major else c.tk, 1]
        copy, mcast = (c.config.tma_a, c.cn) if name == "A" else (c.config.tma_b, c.cm)
        if copy == "tma_multicast" and mcast > 1:
            from .mbarrier import multicast_split
            box, _ = multicast_split(box, mcast)       # each CTA's descriptor covers its slice
        out[name] = (_TMA_TYPE[bits], dims, strides(p.leading_dimension(name.lower()), dims[1], bits // 8), tuple(box),
                     atom.swizzle)
    plan = c.epi_plan
    if plan is not None:
        em, en = plan.tile
        row = p.layout_c == "row"
        dims = (p.n, p.m, p.batch) if row else (p.m, p.n, p.batch)
        for name, dt, bits, swz in (("C", p.dtype_c, c.bits_c, plan.swizzle_c), ("D", p.dtype_d, c.bits_d, plan.swizzle_d)):
            if bits:
                width = _SWIZZLE_BYTES[swz] * 8 // bits
                box = (min(width, en if row else em), em if row else en, 1)
                out[name] = (_EPI_TMA_TYPE[dt], dims, strides(p.leading_dimension("c"), dims[1], bits // 8), box, swz)
    c.__dict__["_tensor_map_keys"] = out
    return out


_SWIZZLE_BYTES = {"SW128": 128, "SW64": 64, "SW32": 32, "INTER": 16}
# The epilogue encodes C and D with their own types (sm90_epilogue_tma_warpspecialized.hpp TmaElementC/D).
_EPI_TMA_TYPE = {"bf16": "BFLOAT16", "f16": "FLOAT16", "f32": "FLOAT32"}


def tensor_map_of(data_type: str, dims: tuple, strides: tuple, box: tuple, swizzle: str):
    """The ``TensorMap`` record (legality/tensor_map.py) of one operand descriptor."""
    from .tensor_map import TensorMap
    return TensorMap(data_type="CU_TENSOR_MAP_DATA_TYPE_" + data_type, global_dim=dims, global_strides=strides,
                     box_dim=box, swizzle=_SWIZZLE[swizzle], l2_promotion="L2_128B", oob_fill="NONE")


@lru_cache(maxsize=8192)
def _tensor_map_reason(key: tuple) -> str | None:
    """Verdict of the tensor-map rules on one descriptor; cached because a search asks about the
    same few boxes over and over (the answer depends on nothing else)."""
    from .tensor_map import check_tensor_map
    tm = tensor_map_of(*key)
    bad = [v for v in check_tensor_map(tm) if v.enforced]
    if not bad:
        return None
    return f"box {list(tm.box_dim)} over {list(tm.global_dim)}: " + "; ".join(str(v) for v in bad)


def _descriptor_rule(operand: str):
    def check(c):
        key = _tensor_map_keys(c).get(operand)
        if key is None:
            return None
        why = _tensor_map_reason(key)
        return None if why is None else f"{operand}'s tensor map, {why}"
    return check


for _op in ("A", "B", "C", "D"):
    _rule(f"SM90-TMA-DESCRIPTOR-{_op}", rulebook="A03-A19/E24",
          source="cuTensorMapEncodeTiled via legality/tensor_map.py; cute/atom/copy_traits_sm90_tma.hpp:1033-1035",
          summary=f"the tensor map the kernel encodes for {_op} passes every enforced tensor-map rule")(_descriptor_rule(_op))


# --- what the H100 showed ----------------------------------------------------------------------------

@_rule("SM90-STREAMK-TMA-EPILOGUE-HANG", rulebook="H", enforced=False,
       source="rulebook H (hangs on an H100); NVIDIA/cutlass#1801, #1917. Measured 2026-11-22 "
              "(tests/data/config_oracle_streamk_h100.jsonl, streamk_stale_workspace_h100.jsonl): on an H100 "
              "the six reported cases ran correctly when the workspace was initialized before every launch, "
              "and 3 of 6 hung when relaunched on the stale workspace; the H200 ran all six correctly",
       summary="a stream-K kernel with a TMA epilogue hangs when it is relaunched without re-initializing "
               "its workspace (a launch-protocol hazard the configuration alone cannot rule out)")
def _streamk_hang(c):
    # Flagged, not enforced: cutegen's ABI calls initialize() (which resets the stream-K workspace) on
    # every call, but a caller driving CUTLASS directly can relaunch on a stale workspace. `cutegen
    # check config` keeps warning; the search does not prune it (MOOT_UNDER_CUTEGEN_ABI below).
    if c.config.tile_scheduler == "stream_k" and c.tma_epilogue:
        return (f"stream-K with the {c.config.epilogue_schedule} epilogue: hangs if relaunched without "
                f"re-initializing its workspace (H100: 3 of 6 such configurations, e.g. 128x96x128)")
    return None


# Warnings about how a kernel is launched rather than what it is: cutegen's own ABI
# (templates/cutegen_abi.inc.j2) runs the protocol that avoids them on every call, so the search,
# which only emits kernels behind that ABI, does not prune them. A caller who drives CUTLASS
# directly still gets the warning from `cutegen check config`. The GPU proof is the relaunch test
# (tests/test_splitk_gpu.py, bench/gpu_splitk.sh): many launches of one stream-K kernel on one
# workspace, every result checked.
MOOT_UNDER_CUTEGEN_ABI = frozenset({"SM90-STREAMK-TMA-EPILOGUE-HANG"})


@_rule("SM90-FP8-PROMOTION-INTERVAL", rulebook="E15 (FP8 mainloop)",
       source="collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8.hpp:253 (can_implement)",
       summary="FP8 two-level accumulation: mma_promotion_interval (4, the default cutegen passes) is a "
               "multiple of the MMAs per k-block, Tile_K / WGMMA K")
def _fp8_promotion_interval(c):
    if not c.fp8_promoted:
        return None
    per_kblock = c.tk // c.wgmma_k
    if per_kblock == 0 or 4 % per_kblock:
        return (f"Tile_K {c.tk} / WGMMA K {c.wgmma_k} = {c.tk / c.wgmma_k:g} MMAs per k-block does not divide "
                f"the promotion interval 4: can_implement fails")
    return None
