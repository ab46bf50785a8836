"""The WGMMA contract (rulebook section B) as it bears on a GEMM configuration.

Evaluated on ``cutegen.legality.ConfigContext``. Instruction-protocol rules that CUTLASS's
kernels satisfy by construction for every configuration (B02 warpgroup alignment, B03
convergence, B06 operand sources, B08 scale immediates, B11-B14 descriptor encoding and
base offset 0, B16-B17 fences and wait_group 0..7) are not configuration predicates and are
not repeated here; B11's 256 KiB address range is implied by RES-SMEM-CAPACITY.
"""
from __future__ import annotations

from .rule import RuleSet

WGMMA_RULES = RuleSet("wgmma")
_rule = WGMMA_RULES.rule
_PTX = "PTX ISA 9.1 §9.7.15"
_SEL = "CUTLASS 4.2 cute/arch/mma_sm90.hpp ss_op_selector"

# Dense wgmma input pairs with an f32 accumulator (PTX §9.7.15.3; the only accumulator cutegen uses).
_FP8 = ("e4m3", "e5m2")


@_rule("WGMMA-TARGET-SM90A", rulebook="B01", source=f"{_PTX}.5.2 target notes; mma_sm90_gmma.hpp:38-40",
       summary="wgmma and setmaxnreg exist only on sm_90a; the kernel must be built for sm_90a")
def _target(c):
    if c.problem.target != "sm90a":
        return f"target={c.problem.target}: wgmma needs sm_90a (built for sm_90 it computes nothing)"
    return None


@_rule("WGMMA-INPUT-TYPES", rulebook="B05", source=f"{_PTX}.3; {_SEL} (No eligible GMMA operator)",
       summary="A and B types form a wgmma pair: equal for f16/bf16/tf32, any two of e4m3/e5m2; accumulator f32")
def _types(c):
    a, b = c.problem.dtype_a, c.problem.dtype_b
    if a == b or (a in _FP8 and b in _FP8):
        if c.problem.dtype_acc != "f32":
            return f"dtype_acc={c.problem.dtype_acc}: the SM90 builders here accumulate in f32"
        return None
    return f"dtype_a={a}, dtype_b={b}: no wgmma takes this pair (floating A and B must match unless both fp8)"


@_rule("WGMMA-SHAPE-M", rulebook="B04", source=f"{_PTX}.2",
       summary="the wgmma instruction's M is 64")
def _shape_m(c):
    m = c.config.mma_instruction[0]
    return None if m == 64 else f"mma_instruction M={m}: wgmma M is always 64"


@_rule("WGMMA-SHAPE-K", rulebook="B04", source=f"{_PTX}.2",
       summary="the wgmma instruction's K is the dense K of the input type (16 f16/bf16, 8 tf32, 32 fp8)")
def _shape_k(c):
    k = c.config.mma_instruction[2]
    if c.wgmma_k is None or k != c.wgmma_k:
        return f"mma_instruction K={k}: {c.problem.dtype_a} wgmma has K={c.wgmma_k}"
    return None


@_rule("WGMMA-SHAPE-N", rulebook="B04", source=f"{_PTX}.2 (N = 8..256 step 8 for f16/bf16/tf32/fp8)",
       summary="the wgmma instruction's N is a multiple of 8 in [8, 256]")
def _shape_n(c):
    n = c.config.mma_instruction[1]
    if n % 8 or not 8 <= n <= 256:
        return f"mma_instruction N={n}: must be a multiple of 8 in [8, 256]"
    return None


@_rule("WGMMA-TILE-M", rulebook="B20/E03", source=f"{_SEL}:368 static_assert",
       summary="Tile_M is a multiple of 64")
def _tile_m(c):
    return None if c.tm % 64 == 0 else f"Tile_M={c.tm} is not a multiple of 64"


@_rule("WGMMA-TILE-N", rulebook="B20/E03", source=f"{_SEL} static_assert (Tile_N must be a multiple of 8)",
       summary="Tile_N is a multiple of 8")
def _tile_n(c):
    return None if c.tn % 8 == 0 else f"Tile_N={c.tn} is not a multiple of 8"


@_rule("WGMMA-TILE-K", rulebook="B20/E03", source=f"{_SEL} static_assert (Tile_K must be a multiple of K)",
       summary="Tile_K is a multiple of the wgmma K of the input type")
def _tile_k(c):
    if c.wgmma_k is None or c.tk % c.wgmma_k:
        return f"Tile_K={c.tk} is not a multiple of the {c.problem.dtype_a} wgmma K={c.wgmma_k}"
    return None


@_rule("WGMMA-TILED-MMA-DIVIDES", rulebook="B10/E09",
       source="cute make_tiled_mma: the atom (64 x N) times AtomLayoutMNK must tile the CTA tile",
       summary="Tile_M % (64 * warpgroups_M) == 0 and Tile_N % (N * warpgroups_N) == 0")
def _tiled_divides(c):
    _, n, _ = c.config.mma_instruction
    wm, wn, _ = c.config.warpgroup_layout
    if c.tm % (64 * wm) or c.tn % (n * wn):
        return (f"tile {c.tm}x{c.tn} is not a multiple of the tiled MMA {64 * wm}x{n * wn} "
                f"(instruction 64x{n}, warpgroups {wm}x{wn})")
    return None


@_rule("WGMMA-WARPGROUP-LAYOUT", rulebook="E09/E10",
       source="cooperative kernel :356 static_assert(NumMMAThreads == 256); pingpong :139 (== 128); "
              "warp-specialized: the builder's 1x1x1 is the only layout compiled and run (others unverified)",
       summary="warpgroup layout is 2x1x1 for cooperative, 1x1x1 for pingpong and warp-specialized")
def _wg_layout(c):
    wg = tuple(c.config.warpgroup_layout)
    want = {"cooperative": ((2, 1, 1),), "pingpong": ((1, 1, 1),),
            "warp_specialized": ((1, 1, 1),)}[c.config.mainloop_schedule]
    if wg not in want:
        return f"warpgroup_layout={list(wg)} with {c.config.mainloop_schedule}: expected one of {[list(w) for w in want]}"
    return None


@_rule("WGMMA-OPERAND-MAJOR", rulebook="B07", source=f"{_PTX}.5.2 (no transpose for tf32/fp8); mma_sm90.hpp:531,1465",
       summary="tf32 and 8-bit operands are K-major in shared memory")
def _operand_major(c):
    for name, dt, atom in (("A", c.problem.dtype_a, c.config.smem_layout_a), ("B", c.problem.dtype_b, c.config.smem_layout_b)):
        if atom.major != "K" and (dt == "tf32" or c.bits_a == 8 and name == "A" or c.bits_b == 8 and name == "B"):
            return f"smem_layout_{name.lower()}={atom}: {dt} wgmma operands must be K-major"
    return None


@_rule("WGMMA-SMEM-ATOM-MAJOR", rulebook="A09/B14",
       source="copy_traits_sm90_tma.hpp:963 (smem majorness must match gmem); sm90_common.inl gmma_ss_tag_to_major",
       summary="each smem atom's majorness is the one the operand's global layout implies")
def _atom_major(c):
    for name, atom, want in (("a", c.config.smem_layout_a, c.major_a), ("b", c.config.smem_layout_b, c.major_b)):
        if atom.major != want:
            return (f"smem_layout_{name}={atom} but layout_{name}={getattr(c.problem, 'layout_' + name)} "
                    f"makes operand {name.upper()} {want}-major")
    return None


@_rule("WGMMA-SMEM-ATOM-DIVIDES", rulebook="E03/B15",
       source="sm90_mma_tma_gmma_ss_warpspecialized.hpp:119-125 static_assert (SmemLayoutAtom must evenly divide tile shape)",
       summary="each smem atom's (MN, K) extent divides the operand's (Tile_MN, Tile_K)")
def _atom_divides(c):
    for name, atom, bits, mn in (("a", c.config.smem_layout_a, c.bits_a, c.tm), ("b", c.config.smem_layout_b, c.bits_b, c.tn)):
        am, ak = atom.shape(bits)
        if mn % am or c.tk % ak:
            return f"smem_layout_{name}={atom} is {am}x{ak} elements and does not divide the {mn}x{c.tk} tile"
    return None


@_rule("WGMMA-INSTRUCTION-DIVIDES-TILE", rulebook="B20",
       source=f"{_SEL}: the atom N divides Tile_N (make_tiled_mma tiles the CTA tile with whole atoms)",
       summary="Tile_N is a multiple of the instruction N")
def _instr_divides(c):
    n = c.config.mma_instruction[1]
    return None if c.tn % n == 0 else f"Tile_N={c.tn} is not a multiple of the instruction N={n}"


@_rule("WGMMA-SS-OP-SELECT", rulebook="B20", source=f"{_SEL} (N in 256,192,128,96,64,32,16,8 without "
       "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, which the 4.2 headers do not define)",
       summary="for an instruction left to the builder: some N of ss_op_selector divides Tile_N")
def _op_select(c):
    if c.requested.mma_instruction is None:
        from cutegen.collective_builder import SS_OP_N
        if not any(c.tn % n == 0 for n in SS_OP_N):
            return f"no ss_op_selector N in {list(SS_OP_N)} divides Tile_N={c.tn}"
    return None


@_rule("WGMMA-SETMAXNREG", rulebook="B18", source="PTX §9.7.19.5; cooperative :115-137, pingpong :132-148",
       summary="the setmaxnreg values the kernel uses are multiples of 8 in [24, 256]")
def _setmaxnreg(c):
    regs = c.setmaxnreg
    if regs is None:
        return None
    bad = [r for r in regs if r % 8 or not 24 <= r <= 256]
    return f"setmaxnreg {bad} outside [24, 256] or not a multiple of 8" if bad else None


@_rule("WGMMA-ACCUMULATOR-REGISTERS", rulebook="B10/E21", enforced=False,
       source="B09/B10: f32 accumulators take Tile_M*Tile_N/MMA-threads registers; CUTLASS consumers get 232-240; "
              "kernels without setmaxnreg (warp-specialized, cp.async) share 65536 registers over all threads",
       summary="the f32 accumulators live in a CTA tile (twice the tile's for FP8 two-level accumulation) need "
               "fewer registers per MMA thread than the consumer's setmaxnreg (else spills)")
def _acc_regs(c):
    # H200, 2026-11-22 (bench/results/*calibration*): every FP8 kernel with 2 x accumulator >= 232/240
    # spilled 1.5-6 KB per thread and ran at 0.22-0.42x cuBLAS; none below it spilled.
    # Without setmaxnreg every thread gets the same share of the 64K-register file, allocated in 8s:
    # 255 for 256 threads, 168 for the 384 of a cp.async kernel.
    limit = c.setmaxnreg[1] if c.setmaxnreg else min(255, 65536 // c.threads // 8 * 8)
    if c.live_acc_regs_per_thread >= limit:
        twice = " x 2 (FP8 promotion)" if c.fp8_promoted else ""
        return (f"accumulator {c.tm}x{c.tn} over {c.mma_threads} MMA threads = {c.acc_regs_per_thread}{twice} "
                f"registers/thread, not below the {limit}-register budget: spills (PERF)")
    return None


# H200, 2026-11-26 (bench/probe_forms.py; bench/results/diagnose/2026-11-26-nvidia-h200-probes.json): ptxas serializes
# the wgmma pipeline (C7511/C7512, "insufficient register resources") once each MMA thread holds 216 or more
# f32 accumulator registers, whatever the schedule and instruction width: built at 208 (ping-pong 128x208,
# cooperative 256x208; both already spill 86-100 B) and below; serialized at 216 (ping-pong 192x144, twice,
# one of them the swap-AB kernel the diagnosis run mapped from cuBLAS's 192x144 tile), 224 (ping-pong 128x224,
# cooperative 256x224) and 240. cutegen's build refuses a serialized kernel, so these were legal configurations
# that could not be built. Not enforced by the compiler: a serialized kernel computes the right result (the
# config oracle ran ping-pong 128x256 correctly, slowly), so this is a warning to `check config` and, like every
# warning, illegal to the search. FP8's promoted copy is not in the wgmma pipeline: only the WGMMA accumulator counts.
ACC_SERIALIZE_REGS = 216


@_rule("WGMMA-ACCUMULATOR-SERIALIZED", rulebook="B10 (new)", enforced=False,
       source="H200 2026-11-26 nvcc 13.0 probes (bench/results/diagnose/2026-11-26-nvidia-h200-probes.json): 208 f32 "
              "accumulator registers per MMA thread built, 216/224/240 serialized (ptxas C7511/C7512)",
       summary="the f32 WGMMA accumulator of one CTA tile takes fewer than 216 registers per MMA thread "
               "(at 216 and above ptxas serializes the wgmma instructions)")
def _acc_serialized(c):
    if c.acc_regs_per_thread >= ACC_SERIALIZE_REGS:
        return (f"accumulator {c.tm}x{c.tn} over {c.mma_threads} MMA threads = {c.acc_regs_per_thread} registers/"
                f"thread >= {ACC_SERIALIZE_REGS}: ptxas serializes the wgmma instructions")
    return None
