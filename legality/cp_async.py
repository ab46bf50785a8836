"""CUTLASS 4.2's SM90 cp.async GEMM contract: the mainloop for operands TMA cannot take.

``MainloopSm90CpAsyncGmmaWarpSpecialized`` (collective/sm90_mma_multistage_gmma_ss_warpspecialized.hpp)
with the ``KernelCpAsyncWarpSpecialized{,Pingpong,Cooperative}`` schedules: the producer warpgroup(s)
copy A and B tiles into the same GMMA shared-memory atoms the TMA mainloop uses, one vector of
``alignment`` elements per thread and copy, predicated on the M/N residue and (first k-tile) the K
residue, and signal the consumers through ``PipelineAsync`` with ``cp.async.mbarrier.arrive``. A row
only has to be aligned to one vector, not to 16 bytes, so this is the mainloop for any alignment.

What the copy is (the gmem tiled copy of the builder, ``sm90_gmma_builder.inl:751-843`` and
``make_simt_gmem_tiled_copy``, ``sm90_common.inl:128-167``): vectors of ``alignment x bits`` bytes.
cp.async moves 4, 8 or 16 bytes (``SM80_CP_ASYNC_CACHEALWAYS_ZFILL``, cute/arch/copy_sm80.hpp); the
builder static_asserts 4 (``sm90_gmma_builder.inl:796``). cutegen's explicit template spells a 1- or
2-byte vector as ``UniversalCopy`` (a synchronous load and shared store in the same producer
pipeline): the only copy of that width; it is not in CUTLASS's generator, so it is the form the GPU
validation of ``bench/unaligned.toml`` must show correct before anyone relies on it.

Evaluated on ``cutegen.legality.ConfigContext``; every rule holds for TMA mainloops.
"""
from __future__ import annotations

from .rule import RuleSet

CP_ASYNC_RULES = RuleSet("cp_async")
_rule = CP_ASYNC_RULES.rule
_B = "CUTLASS 4.2 gemm/collective/builders/sm90_gmma_builder.inl"
_C = "CUTLASS 4.2 gemm/collective/builders/sm90_common.inl"
_U = "cutlass_library/sm90_utils.py"
CP_ASYNC_BYTES = (4, 8, 16)          # what one cp.async moves (PTX cp.async cp-size)
NUM_THREADS_PER_WARPGROUP = 128


def is_cp_async(c) -> bool:
    return getattr(c.config, "mainloop_load", "tma") == "cp_async"


def load_warpgroups(schedule: str) -> int:
    """NumLoadWarpGroups of the builder: the plain warp-specialized kernel copies with two warpgroups."""
    return 2 if schedule == "warp_specialized" else 1


def vector_bytes(problem, operand: str) -> int:
    """Bytes one thread moves per copy: the operand's alignment (elements) times its element size."""
    from cutegen.dtypes import DTYPES
    align = problem.alignment_a if operand == "a" else problem.alignment_b
    return align * DTYPES[getattr(problem, f"dtype_{operand}")].bits // 8


def tiled_copy_threads(threads: int, tile_mn: int, tile_k: int, alignment: int, k_major: bool):
    """(threads along the contiguous mode, threads along the other) of make_simt_gmem_tiled_copy, or
    the reason its static_asserts fire. Contiguous mode: K for a K-major operand, else M/N."""
    major_extent, minor_extent = (tile_k, tile_mn) if k_major else (tile_mn, tile_k)
    major = major_extent // alignment if threads >= major_extent // alignment else threads
    if major <= 0:
        return f"threads_major = {major_extent} / {alignment} = 0"
    if threads % major:
        return f"{threads} copy threads are not a multiple of threads_major={major}"
    minor = threads // major
    if minor and minor_extent % minor:
        return (f"the {'M/N' if k_major else 'K'} tile extent {minor_extent} is not a multiple of "
                f"threads_minor={minor} ({threads} threads / {major})")
    return major, minor


@_rule("SM90-CPASYNC-CLUSTER", rulebook="F04", source=f"{_U}:364-367 (unaligned kernels: cluster (1,1,1) only); "
       "collective/sm90_mma_multistage_gmma_ss_warpspecialized.hpp:227-235 (per-CTA copies, no multicast)",
       summary="a cp.async mainloop runs in a 1x1x1 cluster (each CTA loads its own A and B tiles)")
def _cluster(c):
    if is_cp_async(c) and (c.cm, c.cn, c.ck) != (1, 1, 1):
        return f"mainloop_load=cp_async with cluster {c.cm}x{c.cn}x{c.ck}: cp.async has no multicast"
    return None


@_rule("SM90-CPASYNC-EPILOGUE", rulebook="F08", source=f"{_U}:596-612 (unaligned kernels pair CpAsync schedules with the "
       "default, no-smem epilogue only); kernel/sm90_gemm_warpspecialized_cooperative.hpp:314 (the cp.async "
       "kernel's epilogue-load pipeline counts every producer thread as an arrival, where the TMA kernel "
       "counts one warp, sm90_gemm_tma_warpspecialized_cooperative.hpp:118,470: untried with a TMA epilogue)",
       summary="a cp.async mainloop writes D with the no-smem epilogue")
def _epilogue(c):
    if is_cp_async(c) and c.config.epilogue_schedule != "no_smem":
        return f"mainloop_load=cp_async with epilogue_schedule={c.config.epilogue_schedule} (only no_smem is paired)"
    return None


@_rule("SM90-CPASYNC-TILED-COPY", rulebook="E02/E12", source=f"{_C}:128-167 make_simt_gmem_tiled_copy static_asserts; "
       f"{_B}:808-818 (128 x NumLoadWarpGroups threads, 2 for KernelCpAsyncWarpSpecialized)",
       summary="the producer threads tile each operand's (MN, K) tile with alignment-wide vectors: "
               "threads_major = min(threads, contiguous tile extent / alignment) > 0 divides the threads, "
               "and threads / threads_major divides the other tile extent")
def _tiled_copy(c):
    if not is_cp_async(c):
        return None
    p = c.problem
    threads = NUM_THREADS_PER_WARPGROUP * load_warpgroups(c.config.mainloop_schedule)
    for op, mn, align, k_major in (("a", c.tm, p.alignment_a, p.a_k_major), ("b", c.tn, p.alignment_b, p.b_k_major)):
        got = tiled_copy_threads(threads, mn, c.tk, align, k_major)
        if isinstance(got, str):
            return f"operand {op.upper()} ({mn}x{c.tk} tile, alignment {align}): {got}"
    return None


@_rule("SM90-CPASYNC-STREAMK", rulebook="W01",
       source="GPU runs: H100 2026-11-24, 8/8 cp.async cooperative stream-K kernels wrong under split-K/stream-K "
       "plans with K % Tile_K != 0 (max rel. error 1.7-23, initialize() before every launch, beta = 0 too); "
       "H200 2026-11-26 random sample of 80 ranked candidates, 2 wrong, both this form (e.g. M=6370 N=8 "
       "K=45280 bf16 NN). Mechanism: CUTLASS 4.2 collective/sm90_mma_multistage_gmma_ss_warpspecialized.hpp:"
       "221-288 shifts gA/gB by the K residue and predicates the first k-tile of every work unit as the "
       "residue tile, so a unit that starts mid-K (split-K, stream-K) drops valid k-elements",
       summary="a cp.async mainloop does not take the stream-K tile scheduler (tile_scheduler=persistent)")
def _stream_k(c):
    # Why illegal outright, not only when the problem's K % Tile_K != 0 (the exact failing predicate,
    # SM90-CPASYNC-SPLIT-KRESIDUE in stream_k.py, judged per plan): K, and on cutegen_gemm the plan, are
    # run-time arguments of the C ABI. A pack or a ragged validation calls one kernel with other K, and
    # cutegen_gemm's default plan is CUTLASS's heuristic, which may pick split-K; no K known at generation
    # time makes every later call safe. Nothing is lost that was evidenced correct: a stream-K kernel is
    # searched only for the plans that split (whole tiles are its persistent twin's, always in the space),
    # and no GPU run has shown the splitting cp.async kernel correct at all.
    if is_cp_async(c) and c.config.tile_scheduler == "stream_k":
        return (f"mainloop_load=cp_async with tile_scheduler=stream_k: a split or stream-K plan computes wrong "
                f"results when K is not a multiple of Tile_K={c.tk} (the kernel takes any K at run time)")
    return None


def tma_can_load(problem) -> bool:
    """Both A's and B's rows are 16-byte aligned (SM90-TMA-ALIGNMENT), so a TMA mainloop can read them."""
    from cutegen.dtypes import DTYPES
    return (problem.alignment_a * DTYPES[problem.dtype_a].bits % 128 == 0
            and problem.alignment_b * DTYPES[problem.dtype_b].bits % 128 == 0)


def tma_can_store(problem) -> bool:
    """C's and D's rows are 16-byte aligned (SM90-EPILOGUE-ALIGNMENT), so a TMA epilogue can write them."""
    from cutegen.dtypes import DTYPES
    bits = [DTYPES[problem.dtype_d].bits] + ([] if problem.dtype_c == "void" else [DTYPES[problem.dtype_c].bits])
    return all(problem.alignment_c * b % 128 == 0 for b in bits)


# A warning the search reports but does not prune: without the cp.async mainloop an unaligned A or B
# has no kernel at all, and its numerics validate; the user sees the warning in the manifest and in
# `cutegen check config`.
ADVISORY = frozenset({"SM90-CPASYNC-SYNCCHECK"})


@_rule("SM90-CPASYNC-SYNCCHECK", rulebook="F08", enforced=False,
       source="compute-sanitizer 13.0 synccheck on an H100, 2026-11-24 (bench/results/2026-11-24-nvidia-h100-80gb-"
       "hbm3-unaligned-sanitize.json, generated/validation/2026-11-24-nvidia-h100-80gb-hbm3-003318.jsonl): "
       "268-896 barrier errors per cp.async kernel, cutegen's explicit form and CUTLASS 4.2's CollectiveBuilder "
       "kernel alike, while memcheck and racecheck are clean and every validation case passes",
       summary="a cp.async mainloop kernel is not synccheck-clean (CUTLASS 4.2's SM90 cp.async warp-specialized "
               "kernels report barrier errors); its results validate, but it is not yet a checked-in kernel")
def _synccheck(c):
    if is_cp_async(c):
        return ("mainloop_load=cp_async: compute-sanitizer synccheck reports barrier errors in CUTLASS 4.2's "
                "SM90 cp.async kernels (H100, 2026-11-24); the numerics validate")
    return None

