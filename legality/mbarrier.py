"""The mbarrier contract (rulebook section C) for the TMA pipelines of an SM90 GEMM.

The mainloop's ``PipelineTmaAsync`` arms each stage's full barrier with the bytes of one A
and one B tile; the epilogue's ``PipelineTransactionAsync`` with one C subtile. These rules
check the numbers a configuration puts into those barriers. Protocol facts CUTLASS's
pipelines satisfy by construction (C01 alignment, C03 init fencing, C05 phase completion,
C07 parity waits for Stages >= 2 -- see SM90-STAGES-MIN, C08-C10) are not configuration
predicates and are not repeated here.
"""
from __future__ import annotations

from .rule import RuleSet

MBARRIER_RULES = RuleSet("mbarrier")
_rule = MBARRIER_RULES.rule
_PTX = "PTX ISA 9.1 §9.7.13.15"
TX_COUNT_MAX = 2**20 - 1        # tx-count range (C02)
ARRIVAL_COUNT_MAX = 2**20 - 1   # mbarrier.init count range (C02)


def multicast_split(box: list[int], multicast: int) -> tuple[list[int], str | None]:
    """CuTe's multicast box split (copy_traits_sm90_tma.hpp:990-995): from the outermost box mode
    inward, each mode is divided by what is left of the multicast count; every step must be exact
    (mode divides the count or the count divides the mode). Returns (per-CTA box, error or None)."""
    box = list(box)
    for i in range(len(box) - 1, -1, -1):
        if multicast <= 1:
            break
        if box[i] % multicast and multicast % box[i]:
            return box, f"box mode {i} of extent {box[i]} and multicast {multicast} divide neither way"
        new = -(-multicast // box[i])
        box[i] = -(-box[i] // multicast)
        multicast = new
    return box, (None if multicast <= 1 else f"multicast {multicast} left after splitting every box mode")


@_rule("MBAR-TX-COUNT-RANGE", rulebook="C02/C06", source=f"{_PTX}.2 (tx-count in ±(2^20-1)); "
       "sm90_mma_tma_gmma_ss_warpspecialized.hpp TmaTransactionBytes; sm90_epilogue_tma_warpspecialized.hpp",
       summary="the bytes one stage expects (A tile + B tile; one C subtile) fit the tx-count range 2^20-1")
def _tx_range(c):
    stage = (c.bits_a * c.tm * c.tk + c.bits_b * c.tn * c.tk) // 8
    if stage > TX_COUNT_MAX:
        return f"one mainloop stage expects {stage} bytes > {TX_COUNT_MAX}"
    if c.epi_plan is not None and c.bits_c:
        em, en = c.epi_plan.tile
        epi = em * en * c.bits_c // 8
        if epi > TX_COUNT_MAX:
            return f"one epilogue C load expects {epi} bytes > {TX_COUNT_MAX}"
    return None


@_rule("MBAR-ARRIVAL-COUNT", rulebook="C02/C11", source=f"{_PTX}.9; sm90_pipeline.hpp:309-321 (PipelineTmaAsync)",
       summary="the empty barrier's arrival count (MMA threads, or (cluster_M + cluster_N - 1) x consumer warpgroups) is in [1, 2^20-1]")
def _arrivals(c):
    if c.cluster_size == 1:
        count = c.mma_threads
    else:
        count = (c.cm + c.cn - 1) * -(-c.mma_threads // 128)
    if not 1 <= count <= ARRIVAL_COUNT_MAX:
        return f"empty-barrier arrival count {count} outside [1, {ARRIVAL_COUNT_MAX}]"
    return None


@_rule("MBAR-MULTICAST-TX-BYTES", rulebook="A24/A27",
       source="copy_traits_sm90_tma.hpp:984-996 (multicast box split); A24: expect-tx must equal the bytes delivered",
       summary="a multicast operand's TMA box splits exactly over the CTAs that share it, so every CTA "
               "receives exactly the stage bytes its full barrier expects")
def _multicast_bytes(c):
    for name, copy, mcast in (("a", c.config.tma_a, c.cn), ("b", c.config.tma_b, c.cm)):
        if copy != "tma_multicast" or mcast <= 1:
            continue
        _, why = multicast_split(c.operand_box(name), mcast)
        if why:
            return (f"operand {name.upper()} multicast over {mcast} CTAs: {why} "
                    f"(box {c.operand_box(name)}); the barrier would never see its bytes")
    return None
