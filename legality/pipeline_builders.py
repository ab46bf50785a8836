"""The warp-specialized TMA pipeline of an SM90 GEMM, as a term (``legality.pipeline_term``).

One producer warp per CTA streams the A and B tiles of every k-block of every tile the CTA takes into
``stages`` shared-memory stages; one or two consumer warpgroups read them with WGMMA. The choices
that make a protocol (and that the search may rewrite between) are parameters:

* ``release_lag`` -- 0: a consumer releases a stage as soon as its k-block's WGMMAs have read it;
  1: it releases the previous stage after issuing the next k-block's batch (one WGMMA batch in flight,
  as CUTLASS's mainloops and cutegen's DSL template do), so it holds two stages at once;
* ``prefetch`` -- the producer loads k-block n only after k-block n - prefetch was released (it waits
  on that fill's empty barrier too); None: only the stages bound it (today's kernels). With a release
  lag L a consumer holds L + 1 stages, so a prefetch of L or less deadlocks;
* ``pingpong`` -- consumers take alternate tiles instead of sharing every tile; ``ordering`` adds the
  ordering barrier that lets one math warpgroup run its mainloop at a time; ``order_after_release``
  hands the turn over after the tail's releases instead of before them;
* the cluster and which operands multicast: a multicast load lands in every CTA of its row (A) or
  column (B), and each consumer releases the stage to every CTA that wrote into it.

The bounds (``tiles``, ``k_blocks``) unroll the persistent loop: enough to wrap the stages (k-blocks
past ``stages``) and to cross tile boundaries with each consumer taking several tiles (the case
that broke the DSL's ping-pong kernel).
"""
from __future__ import annotations

from .pipeline_term import (Arrive, Barrier, Init, Load, MathBegin, MathEnd, MmaCommit, MmaWait, Pipeline, Read, Role,
                            Sync, Wait, at)


def cluster_peers(cta: int, cluster: tuple[int, int], multicast_a: bool, multicast_b: bool) -> tuple[int, ...]:
    """The CTAs whose stages this CTA's producer writes (and, symmetrically, whose producers write into
    this CTA's stages): its row for a multicast A (same M coordinate), its column for a multicast B."""
    cm, cn = cluster
    i, j = cta % cm, cta // cm
    peers = {cta}
    if multicast_a:
        peers |= {i + jj * cm for jj in range(cn)}
    if multicast_b:
        peers |= {ii + j * cm for ii in range(cm)}
    return tuple(sorted(peers))


def tma_warp_specialized(*, stages: int, k_blocks: int, tiles: int, bytes_a: int, bytes_b: int,
                         consumers: int = 2, pingpong: bool = False, ordering: bool | None = None,
                         release_lag: int = 1, cluster: tuple[int, int] = (1, 1),
                         multicast_a: bool = False, multicast_b: bool = False,
                         arrivals_per_release: int = 1, prefetch: int | None = None,
                         order_after_release: bool = False, producer_tail: bool = True, order_arrivals: int = 1,
                         drain_before_hand_over: bool = True, meta: dict | None = None) -> Pipeline:
    """The pipeline term; ``arrivals_per_release`` is what one consumer warpgroup's release counts on
    one CTA's empty barrier (CUTLASS: 1 per warpgroup in a cluster, its 128 threads without one;
    the DSL template: its 4 warps). ``order_arrivals``: what one hand-over counts on the ordering
    barrier (the DSL's ``PipelineOrder``: every thread of the warpgroup arrives). ``producer_tail``: the
    producer's last waits, on every stage's empty barrier for the phase after its last fill
    (``producer_tail``/``load_tail``): without them a peer CTA's release can arrive on a barrier of a CTA
    that has exited. ``drain_before_hand_over``: the mainloop's ``wgmma.wait_group 0`` comes before the
    ping-pong hand-over (the DSL template) or after it, in the tail (CUTLASS's ``mma_tail``)."""
    if ordering is None:
        ordering = pingpong
    cm, cn = cluster
    ctas = cm * cn
    consumer_names = [f"mma{w}" for w in range(consumers)]

    def readers_of(tile: int) -> list[int]:
        return [tile % consumers] if pingpong else list(range(consumers))

    barriers: list[Barrier] = []
    for c in range(ctas):
        peers = cluster_peers(c, cluster, multicast_a, multicast_b)
        readers_per_fill = 1 if pingpong else consumers
        for s in range(stages):
            barriers.append(Barrier(at(f"full{s}", c), 1, c))
            barriers.append(Barrier(at(f"empty{s}", c), len(peers) * readers_per_fill * arrivals_per_release, c))
        if ordering:
            for w in range(consumers):
                barriers.append(Barrier(at(f"order{w}", c), order_arrivals, c))

    roles: list[Role] = []
    for c in range(ctas):
        peers = cluster_peers(c, cluster, multicast_a, multicast_b)
        row = tuple(sorted({c % cm + jj * cm for jj in range(cn)})) if multicast_a else (c,)
        col = tuple(sorted({ii + (c // cm) * cm for ii in range(cm)})) if multicast_b else (c,)
        own = tuple(b.name for b in barriers if b.cta == c)
        ops: list = [Init(own), Sync(0)]
        for t in range(tiles):
            readers = tuple(consumer_names[w] for w in readers_of(t))
            for kb in range(k_blocks):
                n = t * k_blocks + kb
                s = n % stages
                if prefetch is not None and prefetch < stages and n >= prefetch:
                    f = n - prefetch          # the fill that must be released first: its phase's parity
                    ops.append(Wait(at(f"empty{f % stages}", c), (f // stages) & 1, t, kb, f % stages, release_of=f))
                ops.append(Wait(at(f"empty{s}", c), ((n // stages) & 1) ^ 1, t, kb, s))
                ops.append(Arrive(at(f"full{s}", c), 1, bytes_a + bytes_b, t, kb, s))
                ops.append(Load("A", s, f"full{s}", bytes_a // len(row), n, row, readers, t, kb))
                ops.append(Load("B", s, f"full{s}", bytes_b // len(col), n, col, readers, t, kb))
        if producer_tail:
            for n in range(tiles * k_blocks, tiles * k_blocks + stages):
                ops.append(Wait(at(f"empty{n % stages}", c), ((n // stages) & 1) ^ 1, -1, -1, n % stages))
        roles.append(Role(f"producer@{c}", c, tuple(ops)))

        for w, name in enumerate(consumer_names):
            ops = [Sync(0)]
            mine = [t for t in range(tiles) if w in readers_of(t)]
            for j, t in enumerate(mine):
                if ordering:
                    ops.append(Wait(at(f"order{w}", c), (j & 1) ^ (1 if w == 0 else 0), t))
                    ops.append(MathBegin(t))
                held: list[tuple[int, int]] = []
                for kb in range(k_blocks):
                    n = t * k_blocks + kb
                    s = n % stages
                    ops.append(Wait(at(f"full{s}", c), (n // stages) & 1, t, kb, s))
                    ops.append(Read(s, n, t, kb))
                    ops.append(MmaCommit(t, kb))
                    held.append((kb, s))
                    if len(held) > release_lag:
                        # the batch that read the stage we hand back must be finished first
                        ops.append(MmaWait(release_lag, t, kb))
                    while len(held) > release_lag:
                        rk, rs = held.pop(0)
                        ops += _release(rs, t, rk, c, peers, arrivals_per_release)
                hand_over = [MathEnd(t), Arrive(at(f"order{(w + 1) % consumers}", c), order_arrivals, 0, t)] \
                    if ordering else []
                # CUTLASS hands the turn over after the mainloop's MMAs and before its tail
                # (the last releases): the next warpgroup's waits only need our waits done.
                if drain_before_hand_over:
                    ops.append(MmaWait(0, t))
                if not order_after_release:
                    ops += hand_over
                if not drain_before_hand_over:
                    ops.append(MmaWait(0, t))
                for rk, rs in held:
                    ops += _release(rs, t, rk, c, peers, arrivals_per_release)
                if order_after_release:
                    ops += hand_over
            roles.append(Role(f"{name}@{c}", c, tuple(ops)))

    info = dict(meta or {})
    info.update(stages=stages, k_blocks=k_blocks, tiles=tiles, consumers=consumers, pingpong=pingpong,
                ordering=ordering, release_lag=release_lag, cluster=list(cluster), multicast_a=multicast_a,
                multicast_b=multicast_b, bytes_a=bytes_a, bytes_b=bytes_b, prefetch=prefetch,
                order_after_release=order_after_release, producer_tail=producer_tail, order_arrivals=order_arrivals)
    return Pipeline(tuple(barriers), stages, tuple(roles), ctas, info)


def _release(stage: int, tile: int, kb: int, cta: int, peers: tuple[int, ...], count: int) -> list[Arrive]:
    # The local CTA's arrival first: the consumer is done with the stage from its first release on.
    order = sorted(peers, key=lambda d: d != cta)
    return [Arrive(at(f"empty{stage}", d), count, 0, tile, kb, stage, release=True) for d in order]
