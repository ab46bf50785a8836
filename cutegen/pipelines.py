"""The TMA/mbarrier pipeline a kernel configuration builds, as a term, for each backend.

* ``cutlass``: CUTLASS 4.2's ``PipelineTmaAsync`` as the SM90 TMA warp-specialized kernels set it up
  (``sm90_pipeline.hpp`` 296-321: the empty barrier counts ``num_consumers`` threads without a
  cluster, ``(cluster_M + cluster_N - 1)`` arrivals per consumer warpgroup with one; the cooperative
  kernel's consumers are all its MMA threads, ping-pong's one warpgroup, with
  ``MathWarpGroupOrderBarrier`` ordering the two; the mainloop releases stage k-1 after issuing k,
  ``K_PIPE_MMAS = 1``).
* ``dsl``: cutegen's CuTe DSL template (``templates/cute_dsl_sm90_gemm.py.j2``), rendered from this
  term (``ordering``): the same barriers, consumers counted per warp (``mcast_peers * TILE_THREADS //
  32``), release lag 1, and ping-pong's ``PipelineOrder`` (depth 1, two groups) in place of CUTLASS's
  ordering barrier. Without it the second warpgroup waits on a stage whose previous phase the first
  has not seen complete yet, and ``try_wait.parity`` cannot tell the two phases apart: the DSL
  ping-pong fault of 2026-11-22 (``cutegen check pipeline --backend dsl``, PIPE-READ-BEFORE-LOAD).

``pipeline_of`` returns the term and a ``rebuild(stages=...)`` that makes the same protocol with
another stage count, which ``legality.pipeline.check_pipeline`` explores when the full term's state
space is too large.
"""
from __future__ import annotations

import functools
import re

from .collective_builder import complete
from .config import KernelConfig
from .dtypes import DTYPES
from .legality.epilogue_store import BulkCommit, BulkStore, BulkWait, StoreGroup, tma_store_epilogue
from .legality.pipeline_builders import tma_warp_specialized
from .legality.pipeline_term import Pipeline
from .problem import GemmProblem

BACKENDS = ("cutlass", "dsl")
THREADS_PER_WARPGROUP = 128


def consumer_warpgroups(config: KernelConfig) -> int:
    if config.mainloop_schedule == "pingpong":
        return 2
    wg = config.warpgroup_layout or (1, 1, 1)
    return wg[0] * wg[1] * wg[2]


def protocol(problem: GemmProblem, config: KernelConfig, backend: str = "cutlass") -> dict:
    """The parameters of ``tma_warp_specialized`` that this kernel's pipeline has (full size)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    done = complete(problem, config)
    tm, tn, tk = done.tile_shape
    cm, cn, _ = done.cluster_shape
    pingpong = done.mainloop_schedule == "pingpong"
    consumers = consumer_warpgroups(done)
    readers_per_fill = 1 if pingpong else consumers
    if backend == "cutlass":
        per_release = THREADS_PER_WARPGROUP if cm * cn == 1 else 1
    else:
        per_release = THREADS_PER_WARPGROUP // 32
    persistent = done.mainloop_schedule != "warp_specialized"
    return dict(
        stages=int(done.stages),
        bytes_a=tm * tk * DTYPES[problem.dtype_a].bits // 8,
        bytes_b=tn * tk * DTYPES[problem.dtype_b].bits // 8,
        consumers=consumers, pingpong=pingpong, ordering=pingpong and done.pingpong_order != "none",
        order_after_release=pingpong and done.pingpong_order == "after_release",
        # ping-pong's ordering covers the mainloop; the epilogues may overlap (each warpgroup has its own
        # D buffers in the DSL template) unless this orders them too (CUTLASS's OrderedSequenceBarrier<2,2>)
        order_epilogue=False,
        # the temporal choices (KernelConfig; the search's, search/temporal.py): 0 = the stages bound it
        prefetch=done.prefetch_distance or None,
        release_lag=done.release_lag, cluster=(cm, cn),
        multicast_a=done.tma_a == "tma_multicast" and cn > 1,
        multicast_b=done.tma_b == "tma_multicast" and cm > 1,
        arrivals_per_release=per_release,
        # ping-pong's hand-over: CUTLASS's OrderedSequenceBarrier counts one arrival per warpgroup; the DSL's
        # PipelineOrder is created with the warpgroup's threads (every thread arrives)
        order_arrivals=1 if backend == "cutlass" else THREADS_PER_WARPGROUP,
        # the mainloop's wgmma.wait_group 0: CUTLASS's in mma_tail, after the hand-over; the DSL template's before it
        drain_before_hand_over=backend != "cutlass",
        # Tile boundaries with each consumer taking several tiles (ping-pong: 3 and 2, the odd count
        # leaves the first warpgroup the extra one); non-persistent kernels take one tile per CTA.
        tiles=(5 if pingpong else 2) if persistent else 1,
        readers_per_fill=readers_per_fill,
        meta={"backend": backend, "config": done.short_name()},
    )


def _scaled_prefetch(prefetch: int | None, full: int, stages: int) -> int | None:
    """The prefetch distance of the same protocol with ``stages`` instead of ``full``: no bound stays no
    bound (a distance of the stage count or more is no bound either); a bound below the stages stays
    below them (at most ``stages - 1``) and keeps its value where it fits, so a distance the consumers'
    release lag deadlocks (1 with a lag of 1) deadlocks at every stage count."""
    if prefetch is None or prefetch >= full:
        return None
    return max(1, min(prefetch, stages - 1))


def pipeline_of(problem: GemmProblem, config: KernelConfig, backend: str = "cutlass", *,
                explore_cluster: bool = False, **overrides) -> tuple[Pipeline, "functools.partial"]:
    """The kernel's pipeline term and a ``rebuild(stages=..., k_blocks=...)`` for the exploration.

    The term keeps every CTA of the cluster (the structural rules read their cross-CTA arrivals and
    byte splits). The exploration runs on one CTA with the same schedule unless ``explore_cluster``:
    interleaving every role of a cluster multiplies the states (two CTAs, two stages: ~10^5), so that
    is a deliberate, slower check. ``overrides`` replace protocol parameters (a mutant's).
    """
    p = protocol(problem, config, backend)
    p.update(overrides)                 # a protocol variant (e.g. ordering=False), for mutants
    p.pop("readers_per_fill")
    p.pop("order_epilogue")             # the epilogue's order is outside the mainloop's mbarrier protocol
    stages = p.pop("stages")

    full_stages = stages

    def build(stages: int, k_blocks: int | None = None, cluster=p["cluster"], multicast_a=p["multicast_a"],
              multicast_b=p["multicast_b"], per_release=p["arrivals_per_release"]) -> Pipeline:
        kw = dict(p, cluster=cluster, multicast_a=multicast_a, multicast_b=multicast_b,
                  arrivals_per_release=per_release, prefetch=_scaled_prefetch(p["prefetch"], full_stages, stages))
        return tma_warp_specialized(stages=stages, k_blocks=stages + 1 if k_blocks is None else k_blocks, **kw)

    term = build(stages)
    if explore_cluster or p["cluster"] == (1, 1):
        return term, functools.partial(build)
    # One CTA: no multicast; a CUTLASS consumer then counts its threads, as a 1x1 cluster does.
    solo = THREADS_PER_WARPGROUP if backend == "cutlass" else p["arrivals_per_release"]
    return term, functools.partial(build, cluster=(1, 1), multicast_a=False, multicast_b=False, per_release=solo)


def epilogue_store_of(problem: GemmProblem, config: KernelConfig, backend: str = "dsl", *,
                      tiles: int | None = None, cta: int = 0) -> dict[str, StoreGroup]:
    """The TMA-store epilogue's store groups of one CTA, by issuing role (``legality.epilogue_store``); empty for
    an epilogue without shared memory. Both backends: StagesD = min(subtiles, 2) D buffers
    (sm90_builder.inl:75; ``dsl.dsl_epilogue_stages``), the subtiles of CUTLASS's EpilogueTileAuto or the
    config's ``epilogue_tile``. Cooperative: one group of every consumer warpgroup, the first warpgroup's
    first warp issues the stores (the DSL template; CUTLASS: thread 0 of the epilogue's threads); ping-pong:
    each warpgroup its own group on its own tiles and buffers (the DSL template's ``epi_base``)."""
    from .collective_builder import auto_epilogue_tile
    done = complete(problem, config)
    if done.epilogue_schedule == "no_smem":
        return {}
    epi = tuple(done.epilogue_tile) if done.epilogue_tile is not None else auto_epilogue_tile(problem, done)
    if epi is None:
        return {}
    tm, tn, _ = done.tile_shape
    subtiles = (tm // epi[0]) * (tn // epi[1])
    stages_d = min(subtiles, 2)
    proto = protocol(problem, done, backend)
    tiles = proto["tiles"] if tiles is None else tiles
    consumers = proto["consumers"]
    issuer_only = (BulkStore, BulkCommit, BulkWait)
    groups = {}
    meta = {"backend": backend, "config": done.short_name(), "epilogue_tile": list(epi)}
    if proto["pingpong"]:
        for w in range(consumers):
            groups[f"mma{w}@{cta}"] = tma_store_epilogue(stages_d=stages_d, subtiles=subtiles,
                                                         tiles=tuple(range(w, tiles, consumers)),
                                                         buffer_base=w * stages_d, meta=meta)
    else:
        g = tma_store_epilogue(stages_d=stages_d, subtiles=subtiles, tiles=tiles, meta=meta)
        # every thread calls producer_tail (a wait_group.read 0 with nothing committed on the others)
        members = tuple(op for op in g.ops if not isinstance(op, issuer_only)) + (BulkWait(0),)
        groups[f"mma0@{cta}"] = StoreGroup(g.ops, g.buffers, {f"mma{w}@{cta}": members for w in range(1, consumers)},
                                           g.meta)
    return groups


# The rendered CUTLASS kernel pins what CUTLASS's epilogue builder chose with static_asserts (nvcc refuses the kernel
# when the builder's types differ): the epilogue tile and StagesC/StagesD (templates/cutlass_sm90_gemm.cu.j2).
_RENDERED_EPI_TILE = re.compile(r"size<0>\(typename CollectiveEpilogue::EpilogueTile\{\}\) == (\d+) &&\s*"
                                r"size<1>\(typename CollectiveEpilogue::EpilogueTile\{\}\) == (\d+)")
_RENDERED_EPI_STAGES = re.compile(r"CollectiveEpilogue::DispatchPolicy::StagesC == (\d+) &&\s*"
                                  r"CollectiveEpilogue::DispatchPolicy::StagesD == (\d+)")


def rendered_epilogue(source: str) -> dict | None:
    """The epilogue tile and StagesC/StagesD a rendered CUTLASS kernel.cu asserts (None: no TMA-store epilogue)."""
    tile = _RENDERED_EPI_TILE.search(source)
    stages = _RENDERED_EPI_STAGES.search(source)
    if tile is None and stages is None:
        return None
    if tile is None or stages is None:
        raise ValueError("the rendered kernel asserts only part of its epilogue (tile or stage counts missing)")
    return {"epilogue_tile": [int(tile.group(1)), int(tile.group(2))], "stages_c": int(stages.group(1)),
            "stages_d": int(stages.group(2))}


def epilogue_model_mismatch(problem: GemmProblem, config: KernelConfig, source: str) -> str | None:
    """EPI-STORE-MODEL-MATCH: the CUTLASS kernel's epilogue as the verifier models it (``epilogue_store_of``: D
    buffers, subtiles per tile) against what the kernel rendered now asserts CUTLASS's builder chose (``source``:
    the caller renders it fresh; this module sits below rendering). None when they agree; else the first
    difference."""
    done = complete(problem, config)
    groups = epilogue_store_of(problem, done, "cutlass")
    try:
        got = rendered_epilogue(source)
    except ValueError as e:
        return str(e)
    if not groups or got is None:
        if bool(groups) != (got is not None):
            return ("the verifier models " + ("a TMA-store epilogue" if groups else "no TMA-store epilogue") +
                    " but the rendered kernel " + ("asserts none" if groups else "asserts one"))
        return None
    group = next(iter(groups.values()))
    tm, tn, _ = done.tile_shape
    epi = got["epilogue_tile"]
    subtiles = (tm // epi[0]) * (tn // epi[1])
    if list(group.meta["epilogue_tile"]) != epi:
        return f"epilogue tile: the verifier models {group.meta['epilogue_tile']}, the rendered kernel asserts {epi}"
    if group.buffers != got["stages_d"]:
        return (f"D buffers (StagesD): the verifier models {group.buffers}, the rendered kernel asserts "
                f"{got['stages_d']}")
    if group.meta["subtiles"] != subtiles:
        return f"subtiles per tile: the verifier models {group.meta['subtiles']}, the rendered kernel's tile gives {subtiles}"
    return None
