"""Stream-K's fix-up of a split output tile as a term, explored over every interleaving of its splits.

A tile whose K range is split over several CTAs (stream-K, split-K) is finished by the CTA of its last
split; the others leave partial accumulators in a global workspace and signal a per-tile lock. CUTLASS 4.2
(``sm90_tile_scheduler_stream_k.hpp`` ``fixup_helper``, deterministic reduction, lines 505-545; the lock
operations of ``cutlass/barrier.h`` ``GenericBarrier``):

* the first split (``K_idx == 0``) stores its partial (``BlockStripedReduce::store``, every thread);
* a middle split waits until the lock equals its ``K_idx`` (``wait_eq``: thread 0 spins on
  ``ld.acquire.gpu``, then ``__syncthreads``), adds its partial into the workspace (``reduce``: a read and
  a write), and signals;
* signalling is ``arrive_inc``: ``__syncthreads`` (every thread's workspace writes are done), then thread 0
  ``red.release.gpu.add`` of the k-tiles it covered;
* the final split waits until the lock equals its ``K_idx`` and reads the workspace (``load_add``).

The memory model (PTX ISA 9.1 §8, "Memory Consistency Model"; release/acquire patterns §8.9): a write by
one CTA is ordered before a read by another only through a release by the writer (after its threads'
writes are gathered by a CTA barrier) that an acquire of the reader observes, followed by a CTA barrier
in the reader (the acquire is thread 0's); a relaxed add, a missing barrier, or a wait for a value the
lock reaches before every needed increment, leaves a read racing with a write: the finishing CTA can
sum a partial that is not there yet. Release is cumulative: what a split acquired it releases again.

CUTLASS's *non-deterministic* reduction (``ReductionMode::Nondeterministic``, chosen at run time by a launch
plan's ``reduction``; the same ``fixup_helper``, lines 518-528): the first split stores its partial and signals;
every middle split waits only until the lock is at least 1 (``wait_lt(.., 1)``: thread 0 spins with
``ld.acquire`` while the lock is below 1, then ``__syncthreads``), adds its partial with atomic adds
(``BlockStripedReduce::reduce``, ``cutlass::atomic_add``) and signals with its k-tile count; the final split
waits until the lock equals the k-tiles before it (``wait_eq(K_idx)``). The middle splits therefore add in
any order: ``nondeterministic_fixup`` explores every order of every split's steps. Atomic adds by different
splits do not race with each other; every other pair of workspace accesses by two splits (a plain store, a
plain read, a plain read-modify-write) that no lock release/acquire orders is a race (SK-FIXUP-RACE), as is
an add or read before the partial it needs (the first split's store; for the final split, every other partial)
is ordered before it.

The state: program counters, the lock value, the set of splits whose partials the lock *publishes*, and
per split what its thread 0 acquired, what all its threads have seen, whether its last workspace
write is gathered by a barrier, and which kinds of workspace access it has made (for the race check). Every interleaving is explored (a handful of splits, a few ops each).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Union

from .rule import RuleSet

STREAM_K_FIXUP_RULES = RuleSet("stream-k-fixup")
_rule = STREAM_K_FIXUP_RULES.rule
_SOURCE = ("sm90_tile_scheduler_stream_k.hpp fixup_helper (deterministic reduction); cutlass/barrier.h "
           "GenericBarrier wait_eq / arrive_inc; PTX ISA 9.1 §8 (release/acquire, morally strong)")


@dataclass(frozen=True)
class WorkspaceWrite:
    """Every thread of the split writes its share of the tile's partial into the workspace."""


@dataclass(frozen=True)
class WorkspaceRead:
    """Every thread reads the tile's partial from the workspace (``reduce`` reads then writes it)."""


@dataclass(frozen=True)
class WorkspaceAdd:
    """Every thread adds its share of the partial into the workspace with atomic adds
    (``BlockStripedReduce::reduce``: ``cutlass::atomic_add``)."""


@dataclass(frozen=True)
class CtaSync:
    """``__syncthreads`` (``Sync::sync``)."""


@dataclass(frozen=True)
class LockAdd:
    """Thread 0 adds ``value`` to the tile's lock: ``red.release.gpu`` (``release``) or a relaxed add."""
    value: int
    release: bool = True


@dataclass(frozen=True)
class LockWait:
    """Thread 0 spins until the lock equals ``value`` (``wait_eq``) or, with ``at_least``, until it is at least
    ``value`` (``wait_lt(.., value)`` spins while it is below), reading it with ``ld.acquire`` or relaxed."""
    value: int
    acquire: bool = True
    at_least: bool = False


FixupOp = Union[WorkspaceWrite, WorkspaceRead, WorkspaceAdd, CtaSync, LockAdd, LockWait]


@dataclass(frozen=True)
class Split:
    """One split of the tile: its position (``K_idx``: the k-tiles before it), the k-tiles it covers, its
    ops, and the splits whose partials it must see when it reads the workspace (every earlier split)."""
    name: str
    k_idx: int
    k_tiles: int
    ops: tuple
    needs: tuple = ()


@dataclass(frozen=True)
class Fixup:
    splits: tuple
    meta: dict = field(default_factory=dict, compare=False)


def deterministic_fixup(k_tiles: tuple[int, ...], *, release: bool = True, acquire: bool = True,
                        sync_before_signal: bool = True, sync_after_wait: bool = True,
                        signal_before_write: bool = False, final_waits_for: int | None = None,
                        meta: dict | None = None) -> Fixup:
    """CUTLASS's deterministic fix-up of one tile split into ``len(k_tiles)`` splits of these k-tile counts.
    The keywords drop or misplace one step each (the mutants); ``final_waits_for`` overrides the lock
    value the final split waits for."""
    if len(k_tiles) < 2 or any(k < 1 for k in k_tiles):
        raise ValueError(f"a fix-up needs at least two splits of at least one k-tile each, not {k_tiles}")
    splits = []
    k_idx = 0
    for i, kt in enumerate(k_tiles):
        last = i == len(k_tiles) - 1
        ops: list = []
        if i > 0:
            wait_for = final_waits_for if (last and final_waits_for is not None) else k_idx
            ops.append(LockWait(wait_for, acquire))
            if sync_after_wait:
                ops.append(CtaSync())
        if not last:
            signal = [CtaSync()] if sync_before_signal else []
            signal.append(LockAdd(kt, release))
            body = ([WorkspaceRead()] if i > 0 else []) + [WorkspaceWrite()]
            ops += signal + body if signal_before_write else body + signal
        else:
            ops.append(WorkspaceRead())
        splits.append(Split(f"split{i}", k_idx, kt, tuple(ops), tuple(f"split{j}" for j in range(i))))
        k_idx += kt
    info = dict(meta or {})
    info.update(k_tiles=list(k_tiles))
    return Fixup(tuple(splits), info)


def nondeterministic_fixup(k_tiles: tuple[int, ...], *, release: bool = True, acquire: bool = True,
                           sync_before_signal: bool = True, sync_after_wait: bool = True, middle_waits: bool = True,
                           final_waits: bool = True, final_waits_for: int | None = None,
                           final_waits_at_least: bool = False, atomic_adds: bool = True,
                           meta: dict | None = None) -> Fixup:
    """CUTLASS's non-deterministic fix-up of one tile split into ``len(k_tiles)`` splits (every middle split adds
    as soon as the first split's partial is there, in any order). The keywords are the mutants: a middle split
    or the final one that does not wait on the lock; the final split waiting only until the lock is at least
    ``final_waits_for`` (``final_waits_at_least``); plain read-modify-writes instead of atomic adds."""
    if len(k_tiles) < 2 or any(k < 1 for k in k_tiles):
        raise ValueError(f"a fix-up needs at least two splits of at least one k-tile each, not {k_tiles}")
    splits = []
    k_idx = 0
    for i, kt in enumerate(k_tiles):
        first, last = i == 0, i == len(k_tiles) - 1
        ops: list = []
        if first:
            needs: tuple = ()
            ops.append(WorkspaceWrite())
        elif not last:
            needs = ("split0",)
            if middle_waits:
                ops.append(LockWait(1, acquire, at_least=True))
                if sync_after_wait:
                    ops.append(CtaSync())
            ops += [WorkspaceAdd()] if atomic_adds else [WorkspaceRead(), WorkspaceWrite()]
        else:
            needs = tuple(f"split{j}" for j in range(i))
            if final_waits:
                ops.append(LockWait(k_idx if final_waits_for is None else final_waits_for, acquire,
                                    at_least=final_waits_at_least))
                if sync_after_wait:
                    ops.append(CtaSync())
            ops.append(WorkspaceRead())
        if not last:
            ops += ([CtaSync()] if sync_before_signal else []) + [LockAdd(kt, release)]
        splits.append(Split(f"split{i}", k_idx, kt, tuple(ops), needs))
        k_idx += kt
    info = dict(meta or {})
    info.update(k_tiles=list(k_tiles), reduction="nondeterministic")
    return Fixup(tuple(splits), info)


# Workspace access kinds (the race check): plain write, plain read, atomic add. Two accesses by different splits
# race unless both are reads or both atomic adds, or the earlier split's partial is ordered before the later.
_KIND = {WorkspaceWrite: "w", WorkspaceRead: "r", WorkspaceAdd: "a"}


def _conflicting(kind: str, others: frozenset) -> bool:
    return any(not (kind == o and kind in "ra") for o in others)


@dataclass(frozen=True)
class FixupFinding:
    rule: str
    message: str
    trace: tuple = ()


@dataclass
class FixupExploration:
    findings: dict = field(default_factory=dict)
    states: int = 0


def explore_fixup(f: Fixup, max_states: int = 200_000) -> FixupExploration:
    """Breadth-first over every interleaving of the splits' ops (each op one move)."""
    names = [s.name for s in f.splits]
    index = {n: i for i, n in enumerate(names)}
    n = len(f.splits)
    # state: (pcs, lock, published, acquired per split, seen per split, written per split, gathered per split,
    # kinds of workspace access made per split)
    empty = frozenset()
    start = (tuple([0] * n), 0, empty, (empty,) * n, (empty,) * n, (False,) * n, (True,) * n, (empty,) * n)
    parent = {start: None}
    queue = deque([start])
    result = FixupExploration()

    def trace(state, last):
        steps = [last]
        while parent[state] is not None:
            state, step = parent[state]
            steps.append(step)
        return tuple(reversed(steps))

    def found(rule, message, state, step):
        if rule not in result.findings:
            result.findings[rule] = FixupFinding(rule, message, trace(state, step))

    def upd(t, i, v):
        return t[:i] + (v,) + t[i + 1:]

    while queue:
        state = queue.popleft()
        result.states += 1
        if result.states > max_states:
            raise RuntimeError(f"the fix-up exploration passed {max_states} states")
        pcs, lock, published, acquired, seen, written, gathered, accessed = state
        moved = False
        for i, s in enumerate(f.splits):
            if pcs[i] >= len(s.ops):
                continue
            op = s.ops[pcs[i]]
            step = f"{s.name}: {_describe(op)}"
            nxt = None
            if isinstance(op, LockWait):
                if (lock < op.value) if op.at_least else (lock != op.value):
                    continue
                got = published if op.acquire else empty
                nxt = (upd(pcs, i, pcs[i] + 1), lock, published, upd(acquired, i, acquired[i] | got), seen, written,
                       gathered, accessed)
            elif isinstance(op, CtaSync):
                nxt = (upd(pcs, i, pcs[i] + 1), lock, published, acquired, upd(seen, i, seen[i] | acquired[i]),
                       written, upd(gathered, i, True), accessed)
            elif isinstance(op, LockAdd):
                # thread 0 releases what every thread has seen (gathered by the CTA barrier) and the split's own
                # writes once a barrier gathered them; thread 0's own acquisitions are cumulative too
                pub = published
                if op.release:
                    pub = pub | seen[i] | acquired[i] | (frozenset({s.name}) if written[i] and gathered[i] else empty)
                nxt = (upd(pcs, i, pcs[i] + 1), lock + op.value, pub, acquired, seen, written, gathered, accessed)
            elif isinstance(op, (WorkspaceRead, WorkspaceWrite, WorkspaceAdd)):
                kind = _KIND[type(op)]
                what = {"r": "reads", "w": "writes", "a": "adds into"}[kind]
                missing = [d for d in s.needs if d not in seen[i]]
                if missing:
                    done = [d for d in missing if written[index[d]]]
                    found("SK-FIXUP-RACE", f"{s.name} (K_idx {s.k_idx}) {what} the tile's workspace before the "
                          f"partial of {', '.join(missing)} is ordered before it ("
                          + ("written but not released to it through the lock" if done else "not yet written")
                          + "): a data race; the tile sums a partial that may not be there", state, step)
                    moved = True
                    continue
                racing = [f.splits[j].name for j in range(n)
                          if j != i and f.splits[j].name not in seen[i] and _conflicting(kind, accessed[j])]
                if racing:
                    found("SK-FIXUP-RACE", f"{s.name} (K_idx {s.k_idx}) {what} the tile's workspace while the "
                          f"access of {', '.join(racing)} to it is not ordered before it through the lock: a data "
                          f"race (" + ("plain accesses" if kind != "a" else "an atomic add against a plain access")
                          + ")", state, step)
                    moved = True
                    continue
                acc = upd(accessed, i, accessed[i] | {kind})
                if kind in "wa":
                    nxt = (upd(pcs, i, pcs[i] + 1), lock, published, acquired, seen, upd(written, i, True),
                           upd(gathered, i, False), acc)
                else:
                    nxt = (upd(pcs, i, pcs[i] + 1), lock, published, acquired, seen, written, gathered, acc)
            else:
                raise TypeError(f"unknown fix-up op {op!r}")
            moved = True
            if nxt not in parent:
                parent[nxt] = (state, step)
                queue.append(nxt)
        if not moved and any(pc < len(s.ops) for pc, s in zip(pcs, f.splits)):
            stuck = [f"{s.name} at {_describe(s.ops[pcs[i]])}" for i, s in enumerate(f.splits) if pcs[i] < len(s.ops)]
            found("SK-FIXUP-DEADLOCK", f"no split can move with the lock at {lock}: " + "; ".join(stuck), state,
                  "(no split can move)")
    return result


def _describe(op) -> str:
    if isinstance(op, LockWait):
        return (f"wait until lock {'>=' if op.at_least else '=='} {op.value} "
                f"({'ld.acquire' if op.acquire else 'relaxed ld'})")
    if isinstance(op, LockAdd):
        return f"lock += {op.value} ({'red.release' if op.release else 'relaxed red'})"
    return {WorkspaceWrite: "write partial to workspace", WorkspaceRead: "read workspace partial",
            WorkspaceAdd: "atomic-add partial into workspace", CtaSync: "__syncthreads"}[type(op)]


@dataclass
class FixupCheck:
    term: Fixup
    _exploration: FixupExploration | None = None

    @property
    def exploration(self) -> FixupExploration:
        if self._exploration is None:
            self._exploration = explore_fixup(self.term)
        return self._exploration


def _finding(c: FixupCheck, rule: str) -> str | None:
    f = c.exploration.findings.get(rule)
    return None if f is None else f.message


_rule("SK-FIXUP-RACE", source=_SOURCE,
      summary="a split reads (or adds into) a split tile's workspace only after every earlier split's partial is "
              "ordered before it: written, gathered by a CTA barrier, released through the lock, acquired by a "
              "wait for the lock value that counts it, and gathered by a CTA barrier in the reader")(
    lambda c: _finding(c, "SK-FIXUP-RACE"))
_rule("SK-FIXUP-DEADLOCK", source=_SOURCE,
      summary="every split's lock wait is reached: the lock takes the value each split waits for")(
    lambda c: _finding(c, "SK-FIXUP-DEADLOCK"))


def check_fixup(f: Fixup):
    """The violations of the fix-up rules, and the exploration (traces) behind them."""
    ctx = FixupCheck(f)
    return STREAM_K_FIXUP_RULES.evaluate(ctx), ctx.exploration
