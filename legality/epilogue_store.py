"""The epilogue's TMA-store pipeline as a term, and the rules that keep its shared-memory buffers race-free.

A TMA-store epilogue writes each output subtile from registers into one of ``stages_d`` shared-memory
buffers, makes the writes visible to the async proxy, synchronizes the threads of the store group, and one
thread issues a TMA store (``cp.async.bulk.tensor`` smem -> gmem) that *reads the buffer asynchronously*
until its bulk async-group completes. The buffers are reused round-robin across subtiles and tiles, so
before a buffer is written again the store that read it must have finished reading:

* CUTLASS 4.2 ``sm90_epilogue_tma_warpspecialized.hpp`` ``tma_store_fn`` (lines 734-758):
  ``fence_view_async_shared(); synchronize();`` then ``copy(tma_store_d, sD(buffer))`` by one thread,
  ``store_pipeline.producer_commit`` (``cp.async.bulk.commit_group``), ``producer_acquire``
  (``tma_store_wait<StagesD - 1>``: ``cp.async.bulk.wait_group.read StagesD-1``) and ``synchronize()``;
  ``store_tail`` waits for every store (``wait_group.read 0``) before the kernel ends.
* the CuTe DSL template (``templates/cute_dsl_sm90_gemm.py.j2``): ``cute.copy(r2s, ..., sD[buf])``,
  ``fence_proxy("async.shared")``, ``epi_barrier.arrive_and_wait()``, the first warp's ``cute.copy(tma_d,
  ...)``, ``PipelineTmaStore.producer_commit`` / ``producer_acquire`` (``cp_async_bulk_wait_group(stages - 1,
  read=True)``), ``epi_barrier.arrive_and_wait()``; ``producer_tail`` after the last tile.

The term is one *store group* (the threads that share the buffers and a named barrier) in program order,
from the issuing thread's view: the other threads write, fence and synchronize at the same points (checked
by EPI-STORE-GROUP where a backend gives each warpgroup its own sequence). The rules are structural: the
bulk async-groups belong to the issuing thread, so their completion order is program order
(PTX ISA 9.1 §9.7.9.25.4 cp.async.bulk.wait_group: "wait until only N or fewer of the most recent bulk
async-groups are pending"; ``.read``: until their *source* reads are done).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .rule import RuleSet

EPILOGUE_STORE_RULES = RuleSet("epilogue-store")
_rule = EPILOGUE_STORE_RULES.rule
_BULK = "PTX ISA 9.1 §9.7.9.25 (cp.async.bulk.tensor, cp.async.bulk.commit_group, cp.async.bulk.wait_group.read)"


@dataclass(frozen=True)
class SmemWrite:
    """The store group's threads write output subtile ``subtile`` of ``tile`` into shared buffer ``buffer``."""
    buffer: int
    tile: int = -1
    subtile: int = -1


@dataclass(frozen=True)
class ProxyFence:
    """``fence.proxy.async.shared::cta``: the writing threads' generic-proxy writes become visible to the
    async proxy (the TMA unit)."""


@dataclass(frozen=True)
class GroupSync:
    """The store group's named barrier (``bar.sync id, threads``)."""


@dataclass(frozen=True)
class BulkStore:
    """The issuing thread's TMA store of ``buffer``: reads it asynchronously until its group completes."""
    buffer: int
    tile: int = -1
    subtile: int = -1


@dataclass(frozen=True)
class BulkCommit:
    """``cp.async.bulk.commit_group``: the stores issued since the last commit form one bulk async-group."""


@dataclass(frozen=True)
class BulkWait:
    """``cp.async.bulk.wait_group.read pending``: returns when at most ``pending`` of the most recent groups
    still read their source."""
    pending: int = 0


StoreOp = Union[SmemWrite, ProxyFence, GroupSync, BulkStore, BulkCommit, BulkWait]


@dataclass(frozen=True)
class StoreGroup:
    """One store group's ops in program order; ``members``: per warpgroup (or role), the ops its threads
    perform (empty: every member runs ``ops`` without the issuing thread's bulk ops)."""
    ops: tuple
    buffers: int
    members: dict = field(default_factory=dict, compare=False)
    meta: dict = field(default_factory=dict, compare=False)


def tma_store_epilogue(*, stages_d: int, subtiles: int, tiles: int | tuple, buffer_base: int = 0,
                       fence: bool = True, sync_before_store: bool = True, acquire: bool = True,
                       sync_after_acquire: bool = True, tail: bool = True, meta: dict | None = None) -> StoreGroup:
    """The store sequence CUTLASS's ``tma_store_fn`` and the DSL template share, over ``tiles`` tiles of
    ``subtiles`` subtiles each (a tuple: the indices of the tiles this group takes, e.g. a ping-pong warpgroup's
    alternate tiles); buffer ``buffer_base + n % stages_d`` for the group's n-th subtile. The flags drop one
    step each (the mutants)."""
    ops: list = []
    tile_ids = tuple(range(tiles)) if isinstance(tiles, int) else tuple(tiles)
    for j, t in enumerate(tile_ids):
        for i in range(subtiles):
            n = j * subtiles + i
            b = buffer_base + n % stages_d
            ops.append(SmemWrite(b, t, i))
            if fence:
                ops.append(ProxyFence())
            if sync_before_store:
                ops.append(GroupSync())
            ops += [BulkStore(b, t, i), BulkCommit()]
            if acquire:
                ops.append(BulkWait(stages_d - 1))
            if sync_after_acquire:
                ops.append(GroupSync())
    if tail:
        ops.append(BulkWait(0))
    info = dict(meta or {})
    info.update(stages_d=stages_d, subtiles=subtiles, tiles=list(tile_ids))
    return StoreGroup(tuple(ops), stages_d, {}, info)


@dataclass(frozen=True)
class StoreViolation:
    rule: str
    message: str


def _issuer_only(op) -> bool:
    return isinstance(op, (BulkStore, BulkCommit, BulkWait))


def check_store_group(g: StoreGroup) -> list[StoreViolation]:
    """Every EPI-STORE rule broken by ``g`` (the first instance of each)."""
    found: dict = {}

    def report(rule, message):
        found.setdefault(rule, StoreViolation(rule, message))

    groups: list[list] = []          # committed bulk groups: each a list of (buffer, tile, subtile)
    open_group: list = []            # stores issued since the last commit
    retired = 0                      # groups[:retired] have finished reading their source
    known = 0                        # groups[:known] are retired *and* a group barrier has told every thread
    last_write: dict = {}            # buffer -> (tile, subtile, fenced, synced)
    for op in g.ops:
        if isinstance(op, SmemWrite):
            busy = [s for grp in groups[known:] for s in grp if s[0] == op.buffer] + \
                   [s for s in open_group if s[0] == op.buffer]
            if busy:
                _, t, i = busy[0]
                how = ("its group is not retired by a wait_group.read" if any(s[0] == op.buffer for grp in
                        groups[retired:] for s in grp) or any(s[0] == op.buffer for s in open_group)
                       else "the issuing thread's wait_group.read retired it, but no group barrier followed, so the "
                            "other threads do not know")
                report("EPI-STORE-REUSE", f"subtile {op.subtile} of tile {op.tile} is written into buffer {op.buffer} "
                       f"while the TMA store of subtile {i} of tile {t} may still read it: {how}")
            last_write[op.buffer] = (op.tile, op.subtile, False, False)
        elif isinstance(op, ProxyFence):
            for b, (t, i, fenced, synced) in last_write.items():
                last_write[b] = (t, i, True, synced)
        elif isinstance(op, GroupSync):
            known = retired
            for b, (t, i, fenced, synced) in last_write.items():
                # a fence after the barrier does not order the writes the barrier already published
                last_write[b] = (t, i, fenced, synced or fenced)
        elif isinstance(op, BulkStore):
            w = last_write.get(op.buffer)
            if w is None or not w[3]:
                what = ("nothing was written into it" if w is None else
                        "the writes are not fenced (fence.proxy.async) before the group barrier" if not w[2] else
                        "no group barrier follows the fence, so other threads' writes may not be done")
                report("EPI-STORE-FENCE", f"the TMA store of subtile {op.subtile} of tile {op.tile} reads buffer "
                       f"{op.buffer} but {what}: the TMA unit may read stale data")
            open_group.append((op.buffer, op.tile, op.subtile))
        elif isinstance(op, BulkCommit):
            if open_group:
                groups.append(open_group)
                open_group = []
        elif isinstance(op, BulkWait):
            retired = max(retired, len(groups) - op.pending)
        else:
            raise TypeError(f"unknown epilogue store op {op!r}")
    left = [s for grp in groups[retired:] for s in grp] + open_group
    if left:
        _, t, i = left[0]
        report("EPI-STORE-DRAIN", f"the group ends with {len(left)} TMA store(s) still reading shared memory "
               f"(first: subtile {i} of tile {t}): no wait_group.read 0 (store_tail / producer_tail) retires them, "
               f"and the CTA's shared memory may be reused before they finish")
    for name, ops in g.members.items():
        expected = tuple(op for op in g.ops if not _issuer_only(op))
        mine = tuple(op for op in ops if not _issuer_only(op))
        if mine != expected:
            k = next((j for j, (a, b) in enumerate(zip(mine, expected)) if a != b), min(len(mine), len(expected)))
            report("EPI-STORE-GROUP", f"{name} does not write, fence and synchronize with the issuing thread: at "
                   f"step {k} it has {mine[k] if k < len(mine) else 'nothing'}, the issuer's group "
                   f"{expected[k] if k < len(expected) else 'nothing'}")
    return [found[r] for r in sorted(found)]


def disjoint_buffers(groups: dict) -> StoreViolation | None:
    """EPI-STORE-DISJOINT over the store groups of one CTA (issuer name -> StoreGroup): two groups with their own
    barriers and bulk groups cannot order each other's buffer reuse, so they must not share a buffer (the DSL
    template's ping-pong ``epi_base``)."""
    owner: dict = {}
    for name, g in sorted(groups.items()):
        for op in g.ops:
            if isinstance(op, (SmemWrite, BulkStore)):
                other = owner.setdefault(op.buffer, name)
                if other != name:
                    return StoreViolation("EPI-STORE-DISJOINT", f"store groups {other} and {name} both use epilogue "
                                          f"buffer {op.buffer}: neither's wait_group.read or barrier orders the "
                                          f"other's "
                                          f"writes against its TMA stores")
    return None


@_rule("EPI-STORE-REUSE", source=f"{_BULK}; sm90_epilogue_tma_warpspecialized.hpp tma_store_fn (producer_acquire = "
       "tma_store_wait<StagesD-1>, then synchronize())",
       summary="an epilogue smem buffer is written only after every TMA store that read it is retired by a "
               "cp.async.bulk.wait_group.read of the issuing thread, followed by the store group's barrier")
def _reuse(g: StoreGroup):
    return _message(g, "EPI-STORE-REUSE")


@_rule("EPI-STORE-FENCE", source="PTX ISA 9.1 §9.7.13.19 (fence.proxy.async); sm90_epilogue_tma_warpspecialized.hpp "
       "tma_store_fn (fence_view_async_shared(); synchronize())",
       summary="a TMA store reads a buffer only after its writes were fenced to the async proxy and the store group "
               "synchronized after the fence")
def _fence(g: StoreGroup):
    return _message(g, "EPI-STORE-FENCE")


@_rule("EPI-STORE-DRAIN", source=f"{_BULK}; CollectiveEpilogue::store_tail; CuTe DSL PipelineTmaStore.producer_tail",
       summary="every TMA store is retired by a wait_group.read 0 before the store group ends")
def _drain(g: StoreGroup):
    return _message(g, "EPI-STORE-DRAIN")


@_rule("EPI-STORE-GROUP", source="PTX ISA 9.1 §9.7.13.1 (bar.sync: the named barrier's threads)",
       summary="every warpgroup of a store group writes, fences and reaches the group barrier at the same points "
               "as the issuing thread")
def _group(g: StoreGroup):
    return _message(g, "EPI-STORE-GROUP")


def _message(g: StoreGroup, rule: str) -> str | None:
    for v in check_store_group(g):
        if v.rule == rule:
            return v.message
    return None


@_rule("EPI-STORE-DISJOINT", source=f"{_BULK}; the DSL template's ping-pong epi_base (each warpgroup its own buffers)",
       summary="the store groups of one CTA (ping-pong's two warpgroups) use disjoint epilogue buffers; the other "
               "groups are given in the term's meta['peers']")
def _disjoint(g: StoreGroup):
    v = disjoint_buffers({**g.meta.get("peers", {}), "this group": g})
    return None if v is None else v.message
