"""The mbarrier protocol of CUTLASS 4.2's Hopper FMHA forward kernels (example 88) as pipeline terms
(``legality.pipeline_term``), for the temporal checker (``legality.pipeline`` / ``pipeline_explore``).

Two protocols, built from an attention configuration:

* ``fmha_warp_specialized`` (schedules ws_cooperative and ws_pingpong;
  ``kernel/fmha_kernel_tma_warpspecialized.hpp`` + ``collective/fmha_collective_tma_warpspecialized.hpp``):
  a producer warp (``load_kv``) streams K_0, V_0, K_1, V_1, ... of every tile through one ring of
  ``stages_kv`` stages (``MainloopPipeline = PipelineTmaAsync<StagesKV>``; K and V share the ring and its
  transaction bytes, ``kInnerLoadBytes``), and Q, one slice per consumer warpgroup, through a ring of
  ``stages_q`` stages (``MainloopPipelineQ``), loaded by the same warp between K_0 and V_0 or by a warp of
  its own (``loads_q_separately``, which meets the K/V warp once at the load-warp barrier). Each consumer
  warpgroup waits for its Q slice, then per KV tile j: waits K_j, issues Q K^T, waits for it (softmax),
  waits V_j, issues P V with P from registers, and releases V_(j-1) and K_j; both consumers read every K/V
  stage (the empty barrier counts 128 arrivals per consumer warpgroup). The ``OrderedSequenceBarrier<2,
  NumMma>`` hands a token between the consumer warpgroups twice per tile: around the first Q K^T (ring 0,
  the section ``PIPE-ORDER-EXCLUSIVE`` guards) and around the epilogue (ring 1; kernel :407 and :415 run
  the wait and arrive unconditionally). Persistent kernels release the Q stage and the last V stage at the
  end of a tile (collective :545 and :551); non-persistent ones take one tile and never do.
* ``fmha_tma`` (schedule tma; ``collective/fmha_collective_tma.hpp``): one warpgroup is producer and
  consumer: it loads Q, fills every K/V stage in the prologue (K for even i, V for odd, :269-276), then per
  KV tile j waits K_j, issues Q K^T, loads the next K, releases V_(j-1), waits V_j, issues P V, releases
  K_j and loads the next V. The ring's K/V alternation holds only for an even stage count: the term numbers
  each stage's contents by the tile the consumer expects (K_j = 2j, V_j = 2j + 1), so an odd count shows up
  as PIPE-READ-BEFORE-LOAD.

Stage slots: ``0 .. stages_kv - 1`` are the K/V ring, ``stages_kv ..`` the Q ring (the explorer tracks
ownership per slot). ``check_attention_pipeline(problem, config)`` builds the terms at a few KV trip
counts (and, for a persistent kernel, two tiles of different lengths, as the causal mask makes them) and
checks every one; ``cutegen check pipeline --op attention`` prints the report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .pipeline import Bounds, PipelineReport, check_pipeline
from .pipeline_term import Arrive, Barrier, Init, Load, MathBegin, MathEnd, MmaCommit, MmaWait, Pipeline, Read, Role, \
    Sync, Wait, at

WARPGROUP = 128
WARP = 32


def _kv_load(ops: list, t: int, write: int, content: int, operand: str, stages: int, arm: int, nbytes: int,
             readers: tuple, cta: int = 0) -> None:
    """producer_acquire + expect_tx + the TMA copy of one K or V tile (CollectiveLoadTma::step)."""
    s = write % stages
    ops.append(Wait(at(f"empty{s}", cta), ((write // stages) & 1) ^ 1, t, write, s))
    ops.append(Arrive(at(f"full{s}", cta), 1, arm, t, write, s))
    ops.append(Load(operand, s, f"full{s}", nbytes, content, (cta,), readers, t, write))


def _q_load(ops: list, t: int, q: int, kv_stages: int, q_stages: int, nbytes: int, reader: str, cta: int = 0) -> None:
    s = kv_stages + q % q_stages
    ops.append(Wait(at(f"empty{s}", cta), ((q // q_stages) & 1) ^ 1, t, q, s))
    ops.append(Arrive(at(f"full{s}", cta), 1, nbytes, t, q, s))
    ops.append(Load("Q", s, f"full{s}", nbytes, q, (cta,), (reader,), t, q))


def fmha_warp_specialized(*, stages_kv: int, stages_q: int, kv_tiles: Sequence[int], bytes_q: int, bytes_k: int,
                          bytes_v: int, consumers: int = 2, arm_kv: int | None = None, persistent: bool = False,
                          loads_q_separately: bool = False, release_arrivals: int = WARPGROUP,
                          empty_count: int | None = None, meta: dict | None = None) -> Pipeline:
    """The warp-specialized FMHA protocol over ``len(kv_tiles)`` tiles of one CTA (one unless persistent),
    tile t running ``kv_tiles[t]`` K/V tiles. ``arm_kv``: the transaction bytes every K/V stage is armed with
    (the kernel's ``kInnerLoadBytes``, K's bytes; default ``bytes_k``); ``release_arrivals``: what one
    consumer warpgroup's release counts (its 128 threads); ``empty_count``: the K/V empty barriers' init
    count (default consumers x 128, ``pipeline_params_inner.num_consumers``)."""
    if not persistent and len(kv_tiles) != 1:
        raise ValueError("a non-persistent kernel takes one tile per CTA")
    if stages_q < consumers:
        raise ValueError(f"stages_q={stages_q} < consumers={consumers} (static_assert; ATTN-STAGES-Q)")
    arm = bytes_k if arm_kv is None else arm_kv
    S, SQ, n = stages_kv, stages_q, consumers
    names = tuple(f"mma{w}" for w in range(n))
    empty_kv = n * WARPGROUP if empty_count is None else empty_count
    barriers = [Barrier(at(f"full{s}", 0), 1) for s in range(S + SQ)]
    barriers += [Barrier(at(f"empty{s}", 0), empty_kv) for s in range(S)]
    barriers += [Barrier(at(f"empty{S + i}", 0), WARPGROUP) for i in range(SQ)]
    barriers += [Barrier(at(f"order{r * n + w}", 0), WARPGROUP) for r in range(2) for w in range(n)]
    if loads_q_separately:
        barriers.append(Barrier(at("loadsync", 0), 2 * WARP))
    all_names = tuple(b.name for b in barriers)

    # --- the producer warp(s) ------------------------------------------------------------------------
    kv_ops: list = [Init(all_names), Sync(0)]
    q_ops: list = [Sync(0)]
    write, q = 0, 0
    base = 0                                  # contents: K_j of tile t = base_t + 2j, V_j = base_t + 2j + 1
    for t, trips in enumerate(kv_tiles):
        loads = []                            # (operand, content) in issue order
        for j in range(trips):
            loads += [("K", base + 2 * j), ("V", base + 2 * j + 1)]
        if not loads_q_separately:
            # load_kv_maybe_q<true> (:271-295): Q of warpgroup 0, K_0, Q of warpgroup 1, V_0, the other Qs, the rest
            _q_load(kv_ops, t, q, S, SQ, bytes_q, names[0])
            q += 1
        for i, (operand, content) in enumerate(loads):
            if i == 1 and not loads_q_separately:
                for w in range(1, n):
                    _q_load(kv_ops, t, q, S, SQ, bytes_q, names[w])
                    q += 1
            if i == 1 and loads_q_separately and t == 0:
                # the load-warp barrier (:281-287): the K/V warp waits for the Q warp's first load
                kv_ops.append(Arrive(at("loadsync", 0), WARP, 0, 0))
                kv_ops.append(Wait(at("loadsync", 0), 0, 0))
            _kv_load(kv_ops, t, write, content, operand, S, arm, bytes_k if operand == "K" else bytes_v, names)
            write += 1
        if not loads_q_separately and not loads[1:]:
            for w in range(1, n):             # one KV tile: the other Qs come after K_0 (the loop does them)
                _q_load(kv_ops, t, q, S, SQ, bytes_q, names[w])
                q += 1
        if loads_q_separately:
            for w in range(n):                # load_maybe_q (:319-328)
                _q_load(q_ops, t, q, S, SQ, bytes_q, names[w])
                q += 1
                if w == 0 and t == 0:
                    q_ops.append(Arrive(at("loadsync", 0), WARP, 0, 0))
                    q_ops.append(Wait(at("loadsync", 0), 0, 0))
        base += 2 * trips
    roles = [Role("load_kv@0", 0, tuple(kv_ops))]
    if loads_q_separately:
        roles.append(Role("load_q@0", 0, tuple(q_ops)))

    # --- the consumer warpgroups ---------------------------------------------------------------------
    for w, name in enumerate(names):
        ops: list = [Sync(0)]
        read, base = 0, 0

        def wait_read(t, content):
            nonlocal read
            s = read % S
            ops.append(Wait(at(f"full{s}", 0), (read // S) & 1, t, read, s))
            ops.append(Read(s, content, t, read))
            read += 1
            return (read - 1, s)

        def release(t, held):
            idx, s = held
            ops.append(Arrive(at(f"empty{s}", 0), release_arrivals, 0, t, idx, s, release=True))

        for t, trips in enumerate(kv_tiles):
            qi = t * n + w
            qs = S + qi % SQ
            ops.append(Wait(at(f"full{qs}", 0), (qi // SQ) & 1, t, qi, qs))      # pipeline_q.consumer_wait (:379)
            ops.append(Read(qs, qi, t, qi))
            k = wait_read(t, base)                                              # K_0 (:399)
            ops += [Wait(at(f"order{w}", 0), ((t + 1) & 1) if w == 0 else (t & 1), t), MathBegin(t),
                    MmaCommit(t, k[0]), MathEnd(t), Arrive(at(f"order{(w + 1) % n}", 0), WARPGROUP, 0, t)]
            ops.append(MmaWait(0, t, k[0]))                                     # softmax needs S (:413)
            v = wait_read(t, base + 1)                                          # V_0 (:420)
            ops.append(MmaCommit(t, v[0]))
            release(t, k)                                                       # K_0 (:430)
            for j in range(1, trips):
                k = wait_read(t, base + 2 * j)                                  # K_j (:446)
                ops.append(MmaCommit(t, k[0]))
                ops.append(MmaWait(0, t, k[0]))                                 # retires Q K^T_j and P V_(j-1) (:459)
                prev_v = v
                v = wait_read(t, base + 2 * j + 1)                              # V_j (:469)
                ops.append(MmaCommit(t, v[0]))
                release(t, prev_v)                                              # V_(j-1) (:479)
                release(t, k)                                                   # K_j (:482)
            if persistent:
                ops.append(Arrive(at(f"empty{qs}", 0), WARPGROUP, 0, t, qi, qs, release=True))   # Q (:545)
            ops.append(MmaWait(0, t))                                           # (:548)
            if persistent:
                release(t, v)                                                   # the last V (:551)
            # the epilogue, between the second ring's wait and arrive (kernel :407-415)
            ops += [Wait(at(f"order{n + w}", 0), ((t + 1) & 1) if w == 0 else (t & 1), t),
                    Arrive(at(f"order{n + (w + 1) % n}", 0), WARPGROUP, 0, t)]
            base += 2 * trips
        roles.append(Role(f"{name}@0", 0, tuple(ops)))

    info = dict(meta or {})
    info.update(kernel="fmha_warp_specialized", stages=S + SQ, stages_kv=S, stages_q=SQ, kv_tiles=list(kv_tiles),
                tiles=len(kv_tiles), k_blocks=max(kv_tiles), consumers=n, persistent=persistent,
                loads_q_separately=loads_q_separately, bytes_q=bytes_q, bytes_k=bytes_k, bytes_v=bytes_v,
                arm_kv=arm, cluster=[1, 1], order_first=("order0", f"order{n}"))
    return Pipeline(tuple(barriers), S + SQ, tuple(roles), 1, info)


def fmha_tma(*, stages_kv: int, kv_tiles: int, bytes_q: int, bytes_k: int, bytes_v: int, stages_q: int = 1,
             arm_kv: int | None = None, meta: dict | None = None) -> Pipeline:
    """The single-warpgroup FMHA protocol (``FmhaMainloopTma::compute``) of one CTA running ``kv_tiles``
    K/V tiles. The producer and consumer are one role (``PipelineTmaAsync`` with ProducerConsumer roles,
    fmha_kernel_tma.hpp:162-175; 128 consumer arrivals per release)."""
    arm = bytes_k if arm_kv is None else arm_kv
    S = stages_kv
    barriers = [Barrier(at(f"full{s}", 0), 1) for s in range(S + stages_q)]
    barriers += [Barrier(at(f"empty{s}", 0), WARPGROUP) for s in range(S + stages_q)]
    ops: list = [Init(tuple(b.name for b in barriers)), Sync(0)]
    _q_load(ops, 0, 0, S, stages_q, bytes_q, "wg")
    total = 2 * kv_tiles                      # k_tile_count_tma (:257): each step consumes one, K or V
    write = 0
    k_iter = 0                                # the K/V tile iterator; only V steps advance it (step<true>)

    def load(operand):
        nonlocal write, k_iter
        if write >= total:
            return
        content = 2 * k_iter + (1 if operand == "V" else 0)
        _kv_load(ops, 0, write, content, operand, S, arm, bytes_k if operand == "K" else bytes_v, ("wg",))
        write += 1
        if operand == "V":
            k_iter += 1

    for i in range(S):                        # the prologue (:269-276)
        load("K" if i % 2 == 0 else "V")
    ops.append(Wait(at(f"full{S}", 0), 0, 0, 0, S))
    ops.append(Read(S, 0, 0, 0))
    read = 0

    def wait_read(content):
        nonlocal read
        s = read % S
        ops.append(Wait(at(f"full{s}", 0), (read // S) & 1, 0, read, s))
        ops.append(Read(s, content, 0, read))
        read += 1
        return (read - 1, s)

    def release(held):
        ops.append(Arrive(at(f"empty{held[1]}", 0), WARPGROUP, 0, 0, held[0], held[1], release=True))

    k = wait_read(0)
    ops += [MmaCommit(0, k[0]), MmaWait(0, 0, k[0])]
    v = wait_read(1)
    ops.append(MmaCommit(0, v[0]))
    release(k)
    for j in range(1, kv_tiles):
        k = wait_read(2 * j)
        ops.append(MmaCommit(0, k[0]))
        load("K")
        ops.append(MmaWait(0, 0, k[0]))
        release(v)
        v = wait_read(2 * j + 1)
        ops.append(MmaCommit(0, v[0]))
        release(k)
        load("V")
    ops.append(MmaWait(0, 0))
    info = dict(meta or {})
    info.update(kernel="fmha_tma", stages=S + stages_q, stages_kv=S, stages_q=stages_q, kv_tiles=[kv_tiles],
                tiles=1, k_blocks=kv_tiles, consumers=1, bytes_q=bytes_q, bytes_k=bytes_k, bytes_v=bytes_v,
                arm_kv=arm, cluster=[1, 1])
    return Pipeline(tuple(barriers), S + stages_q, (Role("wg@0", 0, tuple(ops)),), 1, info)


def fmha_tma_cluster(*, stages_kv: int, kv_tiles: Sequence[int], bytes_q: int, bytes_k: int, bytes_v: int,
                     meta: dict | None = None) -> Pipeline:
    """The tma kernel in a cluster of ``len(kv_tiles)`` CTAs along the Q tiles (``kClusterM``): every K/V tile is
    multicast, each CTA's producer loading its 1/n slice into every CTA (the collective's SM90_TMA_LOAD_MULTICAST
    B operand, fmha_collective_tma.hpp:259-267), each full barrier armed with the whole tile, each consumer
    releasing the stage to every CTA that wrote into it. CTA c runs ``kv_tiles[c]`` KV tiles: equal without a
    mask, unequal under the causal mask when tile_kv is not a multiple of cluster_m x tile_q (ATTN-CLUSTER-CAUSAL)."""
    ctas = len(kv_tiles)
    S = stages_kv
    names = tuple(range(ctas))
    barriers = []
    for c in names:
        barriers += [Barrier(at(f"full{s}", c), 1, c) for s in range(S + 1)]
        barriers += [Barrier(at(f"empty{s}", c), ctas if s < S else 1, c) for s in range(S + 1)]
    roles = []
    for c in names:
        own = tuple(b.name for b in barriers if b.cta == c)
        ops: list = [Init(own), Sync(0)]
        ops += [Wait(at(f"empty{S}", c), 1, 0, 0, S), Arrive(at(f"full{S}", c), 1, bytes_q, 0, 0, S),
                Load("Q", S, f"full{S}", bytes_q, 0, (c,), ("wg",), 0, 0)]
        total = 2 * kv_tiles[c]
        write = 0

        def load(operand):
            nonlocal write
            if write >= total:
                return
            s = write % S
            nbytes = bytes_k if operand == "K" else bytes_v
            ops.append(Wait(at(f"empty{s}", c), ((write // S) & 1) ^ 1, 0, write, s))
            ops.append(Arrive(at(f"full{s}", c), 1, nbytes, 0, write, s))
            ops.append(Load(operand, s, f"full{s}", nbytes // ctas, write, names, ("wg",), 0, write))
            write += 1

        for i in range(S):
            load("K" if i % 2 == 0 else "V")
        ops += [Wait(at(f"full{S}", c), 0, 0, 0, S), Read(S, 0, 0, 0)]
        read = 0

        def wait_read():
            nonlocal read
            s = read % S
            ops.extend([Wait(at(f"full{s}", c), (read // S) & 1, 0, read, s), Read(s, read, 0, read)])
            read += 1
            return (read - 1, s)

        def release(held):
            for d in sorted(names, key=lambda d: d != c):
                ops.append(Arrive(at(f"empty{held[1]}", d), 1, 0, 0, held[0], held[1], release=True))

        k = wait_read()
        ops += [MmaCommit(0, k[0]), MmaWait(0, 0, k[0])]
        v = wait_read()
        ops.append(MmaCommit(0, v[0]))
        release(k)
        for j in range(1, kv_tiles[c]):
            k = wait_read()
            ops.append(MmaCommit(0, k[0]))
            load("K")
            ops.append(MmaWait(0, 0, k[0]))
            release(v)
            v = wait_read()
            ops.append(MmaCommit(0, v[0]))
            release(k)
            load("V")
        ops.append(MmaWait(0, 0))
        # the last V stays unreleased (the kernel exits); a peer's multicast can still land: PIPE-ARRIVE-AFTER-EXIT
        roles.append(Role(f"wg@{c}", c, tuple(ops)))
    info = dict(meta or {})
    info.update(kernel="fmha_tma", stages=S + 1, stages_kv=S, stages_q=1, kv_tiles=list(kv_tiles), tiles=1,
                k_blocks=max(kv_tiles), consumers=1, cluster=[ctas, 1])
    return Pipeline(tuple(barriers), S + 1, tuple(roles), ctas, info)


# --- from a configuration -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ProtocolParams:
    """What a kernel's barriers are made of: what the rendered kernel must agree with (read-back)."""
    kernel: str                   # fmha_warp_specialized | fmha_tma
    stages_kv: int
    stages_q: int
    consumers: int
    bytes_q: int                  # kOuterLoadBytes: one Q slice
    bytes_kv: int                 # kInnerLoadBytes: every K/V stage's transaction bytes
    bytes_v: int                  # what a V load brings
    kv_consumer_arrivals: int     # pipeline_params_inner.num_consumers
    q_consumer_arrivals: int
    persistent: bool
    loads_q_separately: bool

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def protocol_params(problem: Any, config: Any) -> ProtocolParams:
    from cutegen.dtypes import DTYPES

    from .attention import head_tile
    esize = DTYPES[problem.dtype].bits // 8
    # the TMA boxes cover the tile's head mode (zero-filled past head_dim): what the barriers are armed with
    d = head_tile(problem.head_dim)
    dv = head_tile(problem.head_dim if getattr(problem, "head_dim_v", None) is None else problem.head_dim_v)
    ws = config.schedule != "tma"
    n = config.mma_warpgroups if ws else 1
    tm = config.tile_q // n
    return ProtocolParams(
        kernel="fmha_warp_specialized" if ws else "fmha_tma", stages_kv=config.stages_kv, stages_q=config.stages_q,
        consumers=n, bytes_q=tm * d * esize, bytes_kv=config.tile_kv * d * esize, bytes_v=config.tile_kv * dv * esize,
        kv_consumer_arrivals=n * WARPGROUP, q_consumer_arrivals=WARPGROUP,
        persistent=bool(config.persistent) and ws, loads_q_separately=bool(config.loads_q_separately) and ws)


def kv_trip_counts(params: ProtocolParams) -> list[tuple[int, ...]]:
    """The KV trip counts explored: one KV tile, enough to wrap the ring, and for a persistent kernel two tiles
    of different lengths in both orders (a causal mask gives Q blocks different trip counts)."""
    wrap = params.stages_kv // 2 + 2          # K/V fills past the ring: every stage reused
    if params.kernel == "fmha_tma":
        return [(1,), (2,), (wrap,)]
    if params.persistent:
        return [(1, 2), (2, 1), (wrap, 1)]
    return [(1,), (2,), (wrap,)]


def build_terms(problem: Any, config: Any, trips: Sequence[Sequence[int]] | None = None) -> list[Pipeline]:
    """The terms ``check_attention_pipeline`` explores: one CTA at each KV trip count (``kv_trip_counts``), and
    for a tma kernel in a cluster both CTAs, with equal trips (no mask) or unequal ones (the causal mask)."""
    meta = {"schedule": config.schedule, "config": config.to_dict(), "problem": problem.to_dict()}
    from .attention import cluster_trips_unequal
    cluster_m = getattr(config, "cluster_m", 1)
    unequal = cluster_trips_unequal(getattr(problem, "causal", False), config.tile_q, config.tile_kv, cluster_m)
    return build_terms_from_params(protocol_params(problem, config), causal=unequal, cluster_m=cluster_m, trips=trips,
                                   meta=meta)


def build_terms_from_params(p: ProtocolParams, *, causal: bool = False, cluster_m: int = 1,
                            trips: Sequence[Sequence[int]] | None = None, meta: dict | None = None) -> list[Pipeline]:
    """``causal``: the cluster's CTAs run unequal KV trips (``cluster_trips_unequal``: the causal mask with a
    tile_kv that is not a multiple of cluster_m x tile_q)."""
    meta = dict(meta or {})
    out = []
    if p.kernel == "fmha_tma" and cluster_m > 1 and trips is None:
        kv = (1, 2) if causal else (1, 1)
        out.append(fmha_tma_cluster(stages_kv=p.stages_kv, kv_tiles=kv + (kv[-1],) * (cluster_m - 2),
                                    bytes_q=p.bytes_q, bytes_k=p.bytes_kv, bytes_v=p.bytes_v, meta=meta))
    for kv in (trips or kv_trip_counts(p)):
        if p.kernel == "fmha_tma":
            out.append(fmha_tma(stages_kv=p.stages_kv, stages_q=p.stages_q, kv_tiles=kv[0], bytes_q=p.bytes_q,
                                bytes_k=p.bytes_kv, bytes_v=p.bytes_v, arm_kv=p.bytes_kv, meta=meta))
        else:
            out.append(fmha_warp_specialized(stages_kv=p.stages_kv, stages_q=p.stages_q, kv_tiles=tuple(kv),
                                             consumers=p.consumers, bytes_q=p.bytes_q, bytes_k=p.bytes_kv,
                                             bytes_v=p.bytes_v, arm_kv=p.bytes_kv, persistent=p.persistent,
                                             loads_q_separately=p.loads_q_separately, meta=meta))
    return out


def check_terms(terms: Sequence[Pipeline], max_states: int = 200_000) -> PipelineReport:
    report = None
    for term in terms:
        # several CTAs: with the partial-order reduction too (the symmetry reduction is always on)
        r = check_pipeline(term, bounds=Bounds(stages=None, max_states=max_states, reduce=term.ctas > 1))
        report = r if report is None else report.merged(r)
    return report


def check_attention_pipeline(problem: Any, config: Any, trips=None, max_states: int = 200_000) -> PipelineReport:
    """Every pipeline rule on the terms of (problem, config) at the explored KV trip counts."""
    return check_terms(build_terms(problem, config, trips), max_states)


__all__ = ["fmha_warp_specialized", "fmha_tma", "fmha_tma_cluster", "ProtocolParams", "protocol_params", "kv_trip_counts",
           "build_terms", "build_terms_from_params", "check_terms", "check_attention_pipeline"]
