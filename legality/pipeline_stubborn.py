"""Stubborn sets for ``pipeline_explore`` with typed accesses and counting arguments.

Replaces the footprint closure of ``pipeline_footprint`` (every move that touches a barrier or a stage
conflicted with every other such move) by a dependency that knows what the moves *do*:

* **Stages** are accessed as a read (a consumer's full wait and WGMMA read set its own holder bit and clear
  its own reader bit, and check the fill and the loads in flight), a release (clears the releaser's holder
  bit), a load issue (sets the fill and the readers, checks every holder and reader bit) and a landing
  (lowers the loads in flight). Two reads by different roles commute (different bits, neither reads the
  other's), a read and a release of different roles commute, a landing commutes with a release and with a
  load issue (it only lowers the in-flight count, which neither reads). Everything else on one stage conflicts.
* **Barriers** are read by a wait (the phase bit) and updated by an arrival (pending count, tx-count) or a
  landing (tx-count). Updates are additions; they commute with each other, and with every wait, as long as
  no interleaving of them can complete the phase. That is decided by counting what the other actors can still
  contribute (below). A phase completes only when the pending count reaches 0 with the tx-count at 0.
* **A CTA's liveness** is read by every arrival and landing on its barriers (PIPE-ARRIVE-AFTER-EXIT) and
  written by the last move of each of its roles; reads commute. It changes only when the last of its roles
  finishes: while a role of the CTA is in C, or cannot reach its end outside C, no sequence outside C ends the
  CTA, and the last moves of its other roles commute with the arrivals on it.
* **A CTA's ping-pong section** (MathBegin/MathEnd): any two conflict.

**What the other actors can do.** For a set C of actors the *reach* of an actor u outside C over-approximates
every move u can make in any sequence of moves of actors outside C (Valmari's stubborn sets, "Stubborn sets for
reduced state space generation", LNCS 483, 1990; Godefroid, LNCS 1032, ch. 4). It is u's program from its counter
up to the first wait whose barrier has not completed the phase it waits for *and* cannot complete it: a
completion needs every pending arrival (or, with none pending, every byte of the tx-count landed), and those can
come only from actors outside C, within their own reach. This is computed as a least fixpoint: start every role
at its first currently blocked wait; let a wait pass when the arrivals (bytes) that the reaches of all actors
outside C hold on its barrier reach its pending count (tx-count); repeat. By induction on any sequence of moves
outside C, each move of it lies within the fixpoint (a wait passes in the sequence only after the phase completed,
i.e. after arrivals or landings that are, by induction, in the reaches), so the reach is sound.

**No completion.** For an update t of barrier b (arrival count x, expect-tx e, or landing bytes y) and the
arrivals A and landing bytes L on b in the reaches outside C, no interleaving of t with moves outside C completes
b's phase when (S1) pending(b) > x + A (the pending count never reaches 0), or (S2) A = 0 and
tx(b) + e - y - L > 0 (only t can lower the pending count, and after it, with every landing's bytes positive,
the tx-count stays above 0). Then t commutes with every wait and update on b outside C: the arithmetic is
additive and no phase changes; and no arrival overshoots (a violation) that did not already. A wait of C on b
conflicts with the updates outside C only when those can complete the phase (A >= pending, or pending 0 and
L >= tx > 0), which is the same fixpoint test.

**The conditions** (each chosen set C is closed under them; then its enabled moves form a persistent set):
  D1: every enabled move of C commutes with, and keeps the enabledness and the verdict (violation or not) of,
  every move in the reach of every actor outside C;
  D2: a blocked wait of C stays blocked under every sequence outside C: its barrier cannot complete the phase
  from outside C (the fixpoint test), or every outside actor that can update the barrier is added to C.
The state graph is acyclic (counters only grow), so no cycle proviso is needed; why deadlocks and broken rules
are kept is argued in ``pipeline_explore``'s docstring (the verdict of every move is part of the commutation
checked here). Before the cluster's barrier-init sync (barriers not yet valid for every role) every move is
followed.
"""
from __future__ import annotations

from .pipeline_term import Arrive, Load, MathBegin, MathEnd, Read, Sync, Wait, at

# access record fields (bit masks): barrier read, barrier update, stage read, stage release, stage load issue,
# stage landing, CTA alive read, CTA alive write (a role's last move), ping-pong section
BR, BU, RD, REL, LD, LAND, AR, AW, SEC = range(9)
_EMPTY = (0,) * 9


def _or(a, b):
    return tuple(x | y for x, y in zip(a, b))


class Stubborn:
    def __init__(self, m):
        self.m = m
        nb = len(m.bar_index)
        self.nb = nb
        stage_bit = lambda cta, s: 1 << m.stage_index[(cta, s)]          # noqa: E731
        self.roles = m.roles
        self.rec = []          # per role, per pc: the access record of the move itself
        self.reach_rec = []    # per role, per pc: the move and, for a load, its landings
        self.arr = []          # per role: per barrier, the prefix sums of arrival counts (list over pc)
        self.byt = []          # per role: per barrier, the prefix sums of landing bytes of its loads
        self.waits = []        # per role: [(pc, barrier index, parity)]
        self.wait_from = []    # per role, per pc: index of the first wait at or after pc
        self.update = []       # per role, per pc: (barrier index, count, expect_tx) for an arrival
        self.land_info = {}    # (ri, pc, target) -> (record, barrier index, bytes)
        for ri, role in enumerate(m.roles):
            recs, rrecs, updates = [], [], []
            arr = [[0] * (len(role.ops) + 1) for _ in range(nb)]
            byt = [[0] * (len(role.ops) + 1) for _ in range(nb)]
            waits = []
            for pc, op in enumerate(role.ops):
                r = [0] * 9
                extra = [0] * 9
                up = None
                da, db = {}, {}
                if isinstance(op, Wait):
                    bi = m.bar_index[op.barrier]
                    r[BR] = 1 << bi
                    if op.stage >= 0 and op.barrier.startswith("full"):
                        r[RD] = stage_bit(role.cta, op.stage)
                    waits.append((pc, bi, op.parity))
                elif isinstance(op, Read):
                    r[RD] = stage_bit(role.cta, op.stage)
                elif isinstance(op, Arrive):
                    bi = m.bar_index[op.barrier]
                    r[BU] = 1 << bi
                    r[AR] = 1 << m.bar_cta[op.barrier]
                    if op.release and m.bar_cta[op.barrier] == role.cta:
                        r[REL] = stage_bit(role.cta, op.stage)
                    up = (bi, op.count, op.expect_tx)
                    da[bi] = op.count
                elif isinstance(op, Load):
                    for t in op.targets:
                        r[LD] |= stage_bit(t, op.stage)
                        bi = m.bar_index[at(op.barrier, t)]
                        y = op.bytes_for(t) if hasattr(op, "bytes_for") else op.bytes_per_cta
                        lrec = [0] * 9
                        lrec[BU] = 1 << bi
                        lrec[LAND] = stage_bit(t, op.stage)
                        lrec[AR] = 1 << t
                        self.land_info[(ri, pc, t)] = (tuple(lrec), bi, y)
                        extra = [a | b for a, b in zip(extra, lrec)]
                        db[bi] = db.get(bi, 0) + y
                elif isinstance(op, (MathBegin, MathEnd)):
                    r[SEC] = 1 << role.cta
                elif isinstance(op, Sync):
                    pass            # after the cluster sync (the only time this is used) it changes nothing shared
                else:
                    r = None        # Init: only before the sync, when every move is followed
                if r is None:
                    r = [0] * 9
                if pc == len(role.ops) - 1:
                    r[AW] = 1 << role.cta
                recs.append(tuple(r))
                rrecs.append(tuple(a | b for a, b in zip(r, extra)))
                updates.append(up)
                for bi in range(nb):
                    arr[bi][pc + 1] = arr[bi][pc] + da.get(bi, 0)
                    byt[bi][pc + 1] = byt[bi][pc] + db.get(bi, 0)
            self.rec.append(recs)
            self.reach_rec.append(rrecs)
            self.update.append(updates)
            self.arr.append(arr)
            self.byt.append(byt)
            self.waits.append(waits)
            wf = [len(waits)] * (len(role.ops) + 1)
            k = len(waits)
            for pc in range(len(role.ops), -1, -1):
                while k > 0 and waits[k - 1][0] >= pc:
                    k -= 1
                wf[pc] = k
            self.wait_from.append(wf)
        # barriers only arrivals update (no expect-tx, no TMA landing): the empty and ordering barriers
        self.pure = [True] * nb
        for role in m.roles:
            for op in role.ops:
                if isinstance(op, Arrive) and op.expect_tx:
                    self.pure[m.bar_index[op.barrier]] = False
                elif isinstance(op, Load):
                    for t in op.targets:
                        self.pure[m.bar_index[at(op.barrier, t)]] = False
        self._span_cache: dict = {}

    # --- reaches ---------------------------------------------------------------------------------

    def _span(self, ri, start, end):
        """The union of the reach records of role ``ri``'s moves in [start, end)."""
        key = (ri, start, end)
        got = self._span_cache.get(key)
        if got is None:
            got = _EMPTY
            for rec in self.reach_rec[ri][start:end]:
                got = _or(got, rec)
            self._span_cache[key] = got
        return got

    def _next_blocked(self, ri, pc, bars):
        """The position of role ``ri``'s first wait at or after ``pc`` that is blocked in ``bars``."""
        waits = self.waits[ri]
        for k in range(self.wait_from[ri][pc], len(waits)):
            wpc, bi, parity = waits[k]
            if bars[bi][1] == parity:
                return wpc
        return len(self.roles[ri].ops)

    def _supply(self, bi, ptr, pcs, outside_roles, outside_loads):
        arrivals = byts = 0
        for ri in outside_roles:
            a = self.arr[ri][bi]
            arrivals += a[ptr[ri]] - a[pcs[ri]]
            b = self.byt[ri][bi]
            byts += b[ptr[ri]] - b[pcs[ri]]
        for key in outside_loads:
            _, lbi, y = self.land_info[key]
            if lbi == bi:
                byts += y
        return arrivals, byts

    @staticmethod
    def _can_complete(bar, arrivals, byts) -> bool:
        """Whether updates worth ``arrivals`` arrivals and ``byts`` landed bytes can complete ``bar``'s phase."""
        _, _, pending, tx = bar
        if pending > 0:
            return arrivals >= pending
        if arrivals > 0:
            return True
        return 0 < tx <= byts

    def _fixpoint(self, pcs, bars, outside_roles, outside_loads):
        ptr = list(pcs)
        for ri in outside_roles:
            ptr[ri] = self._next_blocked(ri, pcs[ri], bars)
        changed = True
        while changed:
            changed = False
            for ri in outside_roles:
                if ptr[ri] >= len(self.roles[ri].ops):
                    continue
                bi = self.m.bar_index[self.roles[ri].ops[ptr[ri]].barrier]
                arrivals, byts = self._supply(bi, ptr, pcs, outside_roles, outside_loads)
                if self._can_complete(bars[bi], arrivals, byts):
                    ptr[ri] = self._next_blocked(ri, ptr[ri] + 1, bars)
                    changed = True
        return ptr

    # --- the persistent set ----------------------------------------------------------------------

    def persistent(self, state, succ, violation):
        """The actors whose moves the explorer follows from ``state``; None: all of them."""
        pcs, bars, stages, loads, inside = state
        outcome = {actor: out for actor, _, out in succ}
        enabled = [a for a, out in outcome.items() if out is not None]
        if len(enabled) <= 1:
            return None
        if any(b[0] != 2 for b in bars):
            return None
        actors = list(outcome)
        best = None
        for start in enabled:
            if outcome[start] is violation:
                continue
            chosen = self._close(start, actors, outcome, pcs, bars, loads, None if best is None else len(best))
            if chosen is None:
                continue
            picked = [a for a in chosen if outcome[a] is not None]
            if any(outcome[a] is violation for a in picked):
                # a move that breaks a rule has no successor: the set would cut the paths it stands for
                continue
            if best is None or len(picked) < len(best):
                best = picked
                if len(best) == 1:
                    break
        if best is None or len(best) == len(enabled):
            return None
        return set(best)

    def _close(self, start, actors, outcome, pcs, bars, loads, limit):
        chosen = {start}
        while True:
            outside_roles = [a[1] for a in actors if a[0] == "r" and a not in chosen]
            outside_loads = [loads[a[1]] for a in actors if a[0] == "l" and a not in chosen]
            ptr = self._fixpoint(pcs, bars, outside_roles, outside_loads)
            reach = {}
            for a in actors:
                if a in chosen:
                    continue
                if a[0] == "r":
                    reach[a] = self._span(a[1], pcs[a[1]], ptr[a[1]])
                else:
                    reach[a] = self.land_info[loads[a[1]]][0]
            # a CTA can end during a sequence outside C only if every unfinished role of it is outside C and can
            # reach its end; otherwise its liveness is constant there (arrivals and landings on it commute with
            # the last moves of its roles)
            ends = self.m.roles
            exitable = 0
            for cta, members in self.m.cta_roles.items():
                if all(pcs[ri] >= len(ends[ri].ops) or (("r", ri) not in chosen and ptr[ri] >= len(ends[ri].ops))
                       for ri in members):
                    exitable |= 1 << cta
            supply = {}

            def supply_of(bi):
                got = supply.get(bi)
                if got is None:
                    got = supply[bi] = self._supply(bi, ptr, pcs, outside_roles, outside_loads)
                return got

            add = set()
            for c in chosen:
                kind, i = c
                if kind == "r":
                    rec = self.rec[i][pcs[i]]
                    up = self.update[i][pcs[i]]
                    x, e, y = (up[1], up[2], 0) if up else (0, 0, 0)
                else:
                    rec, lbi, y = self.land_info[loads[i]]
                    x = e = 0
                if outcome[c] is None:
                    # blocked (a wait, after the sync): stays blocked unless the outside can complete its phase
                    op = self.roles[i].ops[pcs[i]]
                    if not isinstance(op, Wait):
                        add.update(a for a in reach if a[0] == "r")
                        continue
                    bi = self.m.bar_index[op.barrier]
                    if self._can_complete(bars[bi], *supply_of(bi)):
                        bit = 1 << bi
                        add.update(a for a, r in reach.items() if r[BU] & bit)
                    continue
                ends_cta = 0              # the CTA our move may end (then the outside's arrivals on it conflict)
                if rec[AW]:
                    cta = rec[AW].bit_length() - 1
                    if all(ri == i or pcs[ri] >= len(ends[ri].ops)
                           or (("r", ri) not in chosen and ptr[ri] >= len(ends[ri].ops))
                           for ri in self.m.cta_roles[cta]):
                        ends_cta = rec[AW]
                bar_conflict = 0          # barriers on which any outside read or update conflicts
                bar_read_conflict = 0     # barriers on which outside reads (waits) conflict with our update
                bar_update_conflict = 0   # barriers on which outside updates conflict (with our read)
                if rec[BU]:
                    bi = rec[BU].bit_length() - 1
                    arrivals, byts = supply_of(bi)
                    _, _, pending, tx = bars[bi]
                    if pending > x + arrivals or (arrivals == 0 and tx + e - y - byts > 0):
                        pass
                    elif self.pure[bi] and tx == 0 and pending == x + arrivals:
                        # (E) only arrivals, exactly enough: the phase completes once, at the last of them, in
                        # every order; only a wait on the barrier can tell the orders apart
                        bar_read_conflict |= rec[BU]
                    else:
                        bar_conflict |= rec[BU]
                if rec[BR]:
                    bi = rec[BR].bit_length() - 1
                    if self._can_complete(bars[bi], *supply_of(bi)):
                        bar_update_conflict |= rec[BR]
                for a, r in reach.items():
                    if a in add:
                        continue
                    if ((rec[RD] & (r[LD] | r[LAND])) or (rec[REL] & r[LD]) or (rec[LD] & (r[RD] | r[REL] | r[LD]))
                            or (rec[LAND] & r[RD]) or (rec[AR] & exitable & r[AW]) or (ends_cta & r[AR]) or (rec[SEC] & r[SEC])
                            or (bar_conflict & (r[BR] | r[BU])) or (bar_read_conflict & r[BR])
                            or (bar_update_conflict & r[BU])):
                        add.add(a)
            if not add:
                return chosen
            chosen |= add
            if limit is not None and sum(1 for a in chosen if outcome[a] is not None) >= limit:
                return None
