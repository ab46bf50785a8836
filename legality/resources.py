"""Hopper (CC 9.0) resource limits (rulebook section D) against what a configuration asks for.

Shared memory is checked on ``sizeof(GemmKernel::SharedStorage)`` from the byte-exact model
in ``cutegen.smem`` (verified against nvcc), not on CUTLASS's stage formula, which ignores
the scheduler, order barriers and alignment padding (rulebook G.17). Occupancy-only facts
(D03, D05) and launch mechanics CUTLASS handles itself (D07 grid rounded to the cluster by
the tile scheduler, D02's dynamic-smem opt-in by the adapter) are not predicates here.
"""
from __future__ import annotations

from .rule import RuleSet

RESOURCE_RULES = RuleSet("resources")
_rule = RESOURCE_RULES.rule

SMEM_PER_BLOCK = 232448          # D02: cudaFuncAttributeMaxDynamicSharedMemorySize maximum on H100 (EMP)
THREADS_PER_BLOCK = 1024         # D01
REGISTERS_PER_BLOCK = 65536      # D04
CLUSTER_MAX = 16                 # D06/D08: H100 with the non-portable attribute (CUTLASS always sets it)
CLUSTER_PORTABLE = 8             # D06


@_rule("RES-SMEM-CAPACITY", rulebook="D02/E07/H",
       source="CUDA PG §20.8.3; EMP:dynsm (232,449 B rejected); H100 observation: 11 of 90 configs failed to launch over 227 KiB",
       summary="sizeof(GemmKernel::SharedStorage) <= 232,448 bytes")
def _smem(c):
    s = c.storage
    if s is None:
        return None        # the epilogue cannot be built; SM90-EPILOGUE-* rules say why
    if s.kernel > SMEM_PER_BLOCK:
        return (f"kernel shared storage {s.kernel} B (mainloop {s.mainloop} B with {c.stages} stages, "
                f"epilogue {s.epilogue} B) > {SMEM_PER_BLOCK} B")
    return None


@_rule("RES-THREADS-PER-BLOCK", rulebook="D01", source="CUDA PG Table 27; EMP:launch th1025",
       summary="threads per block (producer warpgroup + MMA warpgroups) <= 1024")
def _threads(c):
    return None if c.threads <= THREADS_PER_BLOCK else f"{c.threads} threads per block > {THREADS_PER_BLOCK}"


@_rule("RES-REGISTER-POOL", rulebook="B19/D04", source="PTX §9.7.19.5; cutlass/arch/reg_reconfig.h; kernels' setmaxnreg",
       summary="128 x (producer + consumers' setmaxnreg registers) <= 65,536 (else setmaxnreg.inc never returns)")
def _reg_pool(c):
    regs = c.setmaxnreg
    if regs is None:
        return None
    load, mma = regs
    consumers = (c.threads - 128) // 128
    total = 128 * (load + consumers * mma)
    if total > REGISTERS_PER_BLOCK:
        return f"128 x ({load} + {consumers} x {mma}) = {total} registers > {REGISTERS_PER_BLOCK}"
    return None


@_rule("RES-CLUSTER-SIZE", rulebook="D06/D08/C11/A26",
       source="RT nonPortableClusterSizeAllowed; EMP:launch (32 CTAs -> 912); sm90_pipeline.hpp MaxClusterSize=16; 16-bit ctaMask",
       summary="cluster size (product of the cluster dims) <= 16")
def _cluster(c):
    if c.cluster_size > CLUSTER_MAX:
        return f"cluster {c.cm}x{c.cn}x{c.ck} = {c.cluster_size} CTAs > {CLUSTER_MAX}"
    return None


@_rule("RES-CLUSTER-PORTABLE", rulebook="D06", enforced=False,
       source="RT: the portable cluster size for sm_90 is 8 (H100 allows 16 with the non-portable attribute, which CUTLASS sets)",
       summary="cluster size <= 8 (portable); larger clusters need the non-portable attribute")
def _cluster_portable(c):
    if CLUSTER_PORTABLE < c.cluster_size <= CLUSTER_MAX:
        return f"cluster of {c.cluster_size} CTAs is non-portable (> {CLUSTER_PORTABLE})"
    return None
