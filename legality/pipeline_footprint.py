"""What each move of a pipeline term reads and writes, and the persistent sets built from it.

A *component* is one piece of the explorer's state that moves share: a barrier word, a stage of one
CTA (its fill, loads in flight, readers and holders), or one CTA's ping-pong section. Program
counters are private to their role, and each in-flight load is its own actor (its landing is its one
move), so they are not components; a ``Sync`` reads the other roles' counters only to become enabled,
and counters only grow, so no move disables it. Footprints are bit masks over the components.

``Footprints.persistent`` is the stubborn-set closure of ``pipeline_explore``'s docstring.
"""
from __future__ import annotations

from .pipeline_term import Arrive, Init, Load, MathBegin, MathEnd, Read, Sync, Wait, at

MAX_STARTS = 4      # closures tried per state (any one is a persistent set; the smallest is kept)


class Footprints:
    def __init__(self, m):
        self.m = m
        nb = len(m.bar_index)
        ns = len(m.stage_index)
        self.all_bars = (1 << nb) - 1
        bar = lambda name: 1 << m.bar_index[name]                       # noqa: E731
        stage = lambda cta, s: 1 << (nb + m.stage_index[(cta, s)])       # noqa: E731
        section = lambda cta: 1 << (nb + ns + cta)                       # noqa: E731
        # whether a CTA still runs: a role's last move may end it; arrivals and landings on it read it
        # (PIPE-ARRIVE-AFTER-EXIT)
        alive = lambda cta: 1 << (nb + ns + m.p.ctas + cta)              # noqa: E731
        self._bar, self._stage = bar, stage

        def op_mask(role, op) -> int:
            if isinstance(op, Init):
                return sum(bar(b) for b in op.barriers)
            if isinstance(op, Sync):
                return self.all_bars
            if isinstance(op, Wait):
                mask = bar(op.barrier)
                if op.stage >= 0 and op.barrier.startswith("full"):
                    mask |= stage(role.cta, op.stage)
                return mask
            if isinstance(op, Arrive):
                mask = bar(op.barrier) | alive(m.bar_cta[op.barrier])
                if op.release and m.bar_cta[op.barrier] == role.cta:
                    mask |= stage(role.cta, op.stage)
                return mask
            if isinstance(op, Load):
                return sum(stage(t, op.stage) for t in op.targets)
            if isinstance(op, Read):
                return stage(role.cta, op.stage)
            if isinstance(op, (MathBegin, MathEnd)):
                return section(role.cta)
            raise TypeError(f"unknown pipeline op {op!r}")

        # A move reads and writes the same components (every move is a read-modify-write of what it
        # touches), so one mask per move; the suffix masks are a role's every later move, the
        # landings of its later loads included.
        self.op = []
        self.land_masks = []
        self.future = []
        self.future_synced = []     # the same without the Syncs: once every barrier is initialized and
                                    # synchronized, a Sync changes nothing but its role's counter
        self.lands = {}
        for role in m.roles:
            masks = [op_mask(role, op) for op in role.ops]
            if masks:
                masks[-1] |= alive(role.cta)
            for pc, op in enumerate(role.ops):
                if isinstance(op, Load):
                    for t in op.targets:
                        self.lands[(m.role_index[role.name], pc, t)] = bar(at(op.barrier, t)) | stage(t, op.stage) \
                            | alive(t)
                        masks[pc] |= self.lands[(m.role_index[role.name], pc, t)]
            suffix = [0] * (len(role.ops) + 1)
            synced = [0] * (len(role.ops) + 1)
            for pc in range(len(role.ops) - 1, -1, -1):
                suffix[pc] = suffix[pc + 1] | masks[pc]
                synced[pc] = synced[pc + 1] | (0 if isinstance(role.ops[pc], Sync) else masks[pc])
            self.future_synced.append(synced)
            own = [op_mask(role, op) for op in role.ops]
            if own:
                own[-1] |= alive(role.cta)
            self.op.append(own)
            self.land_masks.append([masks[pc] & ~self.op[-1][pc] for pc in range(len(role.ops))])
        # For ``_reach``: per role and variant (before / after the cluster sync), the waits' positions,
        # barrier bits and parities, what the ops from each pc up to the next wait touch (``head``), and
        # what the ops from each wait up to the next one touch (``chunk``).
        self.waits, self.head, self.chunk = [], ({}, {}), ({}, {})
        for i, role in enumerate(m.roles):
            ws = [(pc, m.bar_index[op.barrier], op.parity) for pc, op in enumerate(role.ops) if isinstance(op, Wait)]
            self.waits.append(ws)
            for v in (0, 1):
                full = [0 if (v and isinstance(op, Sync)) else self.op[i][pc] | self.land_masks[i][pc]
                        for pc, op in enumerate(role.ops)]
                head = [0] * len(role.ops)
                run = 0
                for pc in range(len(role.ops) - 1, -1, -1):
                    head[pc] = full[pc] | run
                    run = 0 if isinstance(role.ops[pc], Wait) else head[pc]
                self.head[v][i] = head
                self.chunk[v][i] = [head[pc] for pc, _, _ in ws]
            self.future.append(suffix)

    def persistent(self, state, succ, violation) -> set | None:
        """The actors whose moves the explorer follows from ``state``; None: all of them. ``succ`` is
        the explorer's list of (actor, step, outcome) with outcome None for a blocked move."""
        pcs, bars, stages, loads, inside = state
        m = self.m
        outcome = {actor: out for actor, _, out in succ}
        enabled = [a for a, out in outcome.items() if out is not None]
        if len(enabled) <= 1:
            return None
        synced = all(b[0] == 2 for b in bars)
        future = self.future_synced if synced else self.future
        now, later = {}, {}
        for actor in outcome:
            kind, i = actor
            if kind == "r":
                now[actor] = self.op[i][pcs[i]]
                if synced and isinstance(m.roles[i].ops[pcs[i]], Sync):
                    now[actor] = 0
                later[actor] = future[i][pcs[i]]
            else:
                now[actor] = later[actor] = self.lands[loads[i]]
        self._writers = {}
        for bi in range(self.all_bars.bit_length()):
            bit = 1 << bi
            self._writers[bi] = [a for a in outcome if later[a] & bit]
        best = None
        for start in enabled[:MAX_STARTS]:
            chosen = {start}
            work = [start]
            size = 1
            while work:
                a = work.pop()
                if outcome[a] is not None:
                    mask = now[a]
                    need = lambda b: self._reach(b, pcs, bars, later, chosen, synced) & mask      # noqa: E731
                else:
                    need = self._enablers(a, pcs, later)
                for b in outcome:
                    if b not in chosen and need(b):
                        chosen.add(b)
                        work.append(b)
                        size += outcome[b] is not None
                if best is not None and size >= len(best):
                    break
            else:
                best = {a for a in chosen if outcome[a] is not None}
                if len(best) == 1:
                    break
        if len(best) == len(enabled) or any(outcome[a] is violation for a in best):
            return None
        return best

    def _reach(self, actor, pcs, bars, later, chosen, synced) -> int:
        """What ``actor`` can touch while only actors outside ``chosen`` move: a role's later moves up to
        (not past) a wait that is blocked now on a barrier that only ``chosen`` actors can write (they
        do not move meanwhile, so the barrier keeps its phase and the wait stays blocked)."""
        kind, i = actor
        if kind != "r":
            return later[actor]
        v = 1 if synced else 0
        p0 = pcs[i]
        mask = self.head[v][i][p0]
        for k, (pc, bi, parity) in enumerate(self.waits[i]):
            if pc <= p0:
                continue
            bit = 1 << bi
            if bars[bi][1] == parity and not (mask & bit) and \
                    all(b in chosen for b in self._writers.get(bi, ()) if b != actor):
                return mask
            mask |= self.chunk[v][i][k]
        return mask

    def _enablers(self, actor, pcs, later):
        """Who can enable a blocked move: the writers of the barrier a wait waits on; for a ``Sync``,
        the roles that have not reached theirs."""
        i = actor[1]
        op = self.m.roles[i].ops[pcs[i]]
        if isinstance(op, Wait):
            mask = self._bar(op.barrier)
            return lambda b: later[b] & mask
        waiting = {rj for rj, pc in self.m.sync_roles.get(op.id, {}).items() if pcs[rj] < pc}
        return lambda b: b[0] == "r" and b[1] in waiting
