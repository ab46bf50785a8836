"""Every interleaving of a pipeline term's roles, explored breadth-first with the PTX ISA's mbarrier
semantics, looking for the behaviours ``legality.pipeline`` forbids.

The semantics (PTX ISA 9.1 §9.7.13.15, "mbarrier"):
  * a barrier has a current phase, a pending-arrival count and a transaction count (tx-count);
  * ``arrive`` lowers the pending count; ``expect_tx`` raises the tx-count; a bulk copy's
    ``complete_tx`` lowers it by the bytes it wrote, when it lands (at any later moment);
  * the phase completes when both reach zero: the phase bit flips, the pending count is re-armed
    with the init count, the tx-count starts again at zero;
  * ``try_wait.parity p`` succeeds iff the phase of parity p has completed, i.e. the current phase
    bit is not p.
A TMA load in flight is a move of its own (it may land at any time after it is issued), so the
exploration covers every order of landings too.

The breadth-first order makes each counterexample a shortest trace of the explored graph. The state
is small (program counters, barrier words, stage ownership, loads in flight) and bounded by the term's
unrolled tiles and k-blocks, so exploration ends.

Two reductions always apply (``_fuse``, Lipton's reduction of moves that commute with everything that
could come between them): one producer's loads of one fill land in each target CTA as one move where
the fill's barrier is armed with exactly their bytes (PIPE-TX-BYTES holds there, so the transaction
count stays above zero until the last part lands), and a consumer's full-barrier wait runs together
with the read of its stage. Measured (2-core machine, shared): a cooperative 1-CTA term at 5 stages and
k-blocks 1, 4, 5, 6 fell from 168,918 states (22 s) to 13,727 (1.1 s); at 7 stages from 3,131,078
(431 s) to 75,821 (6.7 s); every mutant of tests/test_legality_pipeline.py and tests/test_dsl_pipeline.py
is still found with its rule. A role's WGMMA commits and wait_groups are not interleaved at all (they
touch nothing shared); PIPE-RELEASE-BEFORE-MMA-DONE reads them in program order.

Why every cooperative kernel explored 5,381 states: ``Bounds`` capped the explored stage count at 3 and
the builder's tiles at 2, and the bytes do not change the state count, so every kernel with 3 or more
stages explored the same three terms. ``cutegen check pipeline`` now explores the kernel's own stage
count (``--stages 0``, the default); the search keeps the cap of 3 (a bound, not a proof: the
protocol's uniformity in the stage index is how the builder makes terms, and DSL-PIPELINE-MATCH checks
the rendered kernel against the full-size term, not the explored one).

Symmetry reduction (``symmetry=True``, the default; ``pipeline_symmetry``): CTAs and consumer warpgroups
that play identical roles (checked op for op on the term, never assumed) make states that differ only in
their names; the explorer keeps one canonical state per orbit and turns its traces back into concrete
interleavings, replayed on the unreduced step function. Breadth-first depth is kept, so traces stay
shortest. Measured (2-core machine, loaded by other helpers, CPU seconds in brackets): a 2x1 cooperative
cluster at 2 stages, k-blocks 1: 85,869 -> 17,977 states (2.7 -> 1.1 s CPU); at 3 stages: 227,094 -> 46,372.

Both reductions together (``reduce=True`` with the symmetry): the persistent set is computed on the
canonical state itself (a real state of the term), so it is a persistent set of that state; nothing more
is needed. Soundness by induction on the distance to a
deadlock or a breaking move in the full graph (acyclic, finite): from an expanded canonical state c with a
deadlock at distance d, some move t of c's persistent set starts a path of length d to a deadlock
(a permutation of the original path); t leads to o, whose canonical form pi(o) has a deadlock at distance
d - 1 (pi maps paths), and pi(o) is expanded (it was queued when first reached, or earlier). Measured: the
2x1 cooperative cluster at 2 stages, k-blocks 1 and 3: 29,316 -> 9,511 states; at 3 stages, k-blocks 1, 2, 4:
253,809 states, 58 s CPU (137 s wall, loaded). ``cutegen check pipeline --cluster`` explores the whole
cluster at ``--cluster-stages`` (2) with both.

Partial-order reduction (``reduce=True``; off by default so that traces stay shortest, on for
``cutegen check pipeline --cluster``): most interleavings differ only in the order of moves that commute (CTA 0's
consumer reading stage 1 while CTA 1's TMA load lands in stage 2; two consumers reading one stage; releases that
do not complete the empty barrier's phase), and every order of such moves reaches the same state. From each state
the explorer follows only a *persistent set* of moves (Godefroid, "Partial-Order Methods for the Verification of
Concurrent Systems", LNCS 1032, ch. 4; Valmari's stubborn sets), computed by ``pipeline_stubborn``: typed accesses
(stage reads, releases, load issues and landings; barrier waits and updates; a CTA's liveness; the ping-pong
section), reaches of the actors outside the set as a least fixpoint over which waits their arrivals and bytes can
still release, and counting arguments for when barrier updates cannot complete a phase. Its docstring states the
conditions (D1: every enabled move of the set commutes with, and keeps the enabledness and the verdict of, every
move the actors outside it can make; D2: a blocked wait of the set stays blocked under those moves).

Why it keeps every deadlock and every broken rule: the state graph is finite and acyclic (program counters only
grow), so no cycle proviso is needed. Take an expanded state s and a path u1..uk from s to a move b that breaks a
rule (or to a state with no move). A move that breaks a rule has no successor (the explorer records it and does not follow it), so
a persistent set never contains one (``pipeline_stubborn`` skips such sets; with none left the state is fully
expanded). If no move of the path is in the persistent set T of s, every move of it is an
outside move, so it lies in the outside actors' reaches; a move t of T commutes with the whole path and keeps b's
verdict (D1), so t(s) has a path of the same length to the same verdict, one step deeper in the acyclic graph. If
some move of the path is in T, the first one, ui, was enabled at s (D2: a blocked move of T stays blocked under
u1..u(i-1)) and commutes with u1..u(i-1) (D1), so ui;u1..u(i-1);u(i+1)..uk is a path from s through a followed
move, one step shorter; ui = b is found at s itself (the explorer evaluates every enabled move of an expanded
state, followed or not). By induction on (path length, height of the state in the graph), the verdict is reached.
A state with no enabled move is never reduced, so every deadlock is kept. The combination with the symmetry
reduction is argued above; the combination with ``_fuse`` is that the persistent sets are computed over the fused
moves (they are the moves of the term the explorer explores).

Measured (2-core machine, shared): the 2x1 cooperative cluster (DSL, 128x256x64 bf16) at its own 4 stages,
k-blocks 1, 3 and 5, 2 tiles: symmetry only, more than 200,000 states per k-block count (the exploration was
stopped, UNPROVEN, after 554 s); with the stubborn sets 987 states in 0.7 s. Equality of the rules found with and
without the reductions is checked on random mutants (``bench/por_fuzz.py``, tests/test_pipeline_stubborn.py).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .pipeline_term import (LOCAL_OPS, Arrive, Init, Load, MathBegin, MathEnd, Pipeline, Read, Role, Sync, Wait, at,
                            describe)
from .pipeline_stubborn import Stubborn
from .pipeline_symmetry import Symmetries

MAX_STATES = 400_000


@dataclass(frozen=True)
class Finding:
    """A forbidden behaviour: the rule it breaks, what happened (role, tile, k-block, stage), and the
    interleaving that leads there (one line per move)."""
    rule: str
    message: str
    role: str = ""
    trace: tuple[str, ...] = ()


@dataclass
class Exploration:
    findings: dict = field(default_factory=dict)     # rule id -> first (shortest) Finding
    states: int = 0
    complete: bool = True                            # False: MAX_STATES cut the search short

    def first(self, rule: str) -> Finding | None:
        return self.findings.get(rule)


class _Machine:
    """Index the term once; states are plain tuples."""

    def __init__(self, p: Pipeline):
        self.p = p
        # A role's own WGMMA batch bookkeeping (commit, wait_group) touches no shared state: it is checked
        # in program order (PIPE-RELEASE-BEFORE-MMA-DONE), not interleaved.
        self.roles = tuple(Role(r.name, r.cta, _fuse(p, [op for op in r.ops if not isinstance(op, LOCAL_OPS)]))
                           for r in p.roles)
        self.cta_roles = {}
        for ri, r in enumerate(self.roles):
            self.cta_roles.setdefault(r.cta, []).append(ri)
        self.bar_index = {b.name: i for i, b in enumerate(p.barriers)}
        self.bar_count = [b.count for b in p.barriers]
        self.bar_cta = {b.name: b.cta for b in p.barriers}
        self.stage_index = {}
        for cta in range(p.ctas):
            for s in range(p.stages):
                self.stage_index[(cta, s)] = len(self.stage_index)
        self.role_index = {r.name: i for i, r in enumerate(self.roles)}
        self.initializer = {}
        for ri, r in enumerate(self.roles):
            for op in r.ops:
                if isinstance(op, Init):
                    for b in op.barriers:
                        self.initializer[b] = ri
        self.sync_roles = {}
        for ri, r in enumerate(self.roles):
            for pc, op in enumerate(r.ops):
                if isinstance(op, Sync):
                    self.sync_roles.setdefault(op.id, {})[ri] = pc

    def describe_step(self, step) -> str:
        if step[0] == "role":
            role = self.roles[step[1]]
            op = role.ops[step[2]]
            if isinstance(op, _WaitRead):
                return f"{role.name}: {describe(Wait(*[getattr(op, f) for f in ('barrier', 'parity', 'tile', 'kb', 'stage', 'release_of')]))}; {describe(op.read)}"
            if isinstance(op, _Loads):
                return f"{role.name}: " + "; ".join(describe(g) for g in op.parts)
            return f"{role.name}: {describe(op)}"
        if step[0] == "land":
            op = self.roles[step[1]].ops[step[2]]
            what = "; ".join(describe(g) for g in op.parts) if isinstance(op, _Loads) else describe(op)
            return f"TMA engine: {what} lands in CTA {step[3]}"
        return "(no role can move)"

    def initial(self):
        pcs = tuple(0 for _ in self.roles)
        bars = tuple((0, 0, c, 0) for c in self.bar_count)         # (init state, phase bit, pending, tx)
        # fill, writes, pending readers, holders; role sets are bit masks over role indices (cheap to compare
        # and to rename under a symmetry)
        stages = tuple((-1, 0, 0, 0) for _ in self.stage_index)
        return (pcs, bars, stages, (), 0)                          # loads in flight, roles inside the mainloop


@dataclass(frozen=True)
class _Loads(Load):
    """The loads one producer issues back to back for one fill, landing in each target CTA as one move:
    ``bytes_to`` (target, bytes) says what lands where. Used only where the fill's barrier is armed with
    exactly the bytes its loads bring (PIPE-TX-BYTES holds there): then the transaction count stays above
    zero until the last part lands, so no wait can pass, and no read can happen, between the parts'
    landings; an interleaving that separates them reaches nothing the merged one does not."""
    bytes_to: tuple = ()
    parts: tuple = ()

    def bytes_for(self, target: int) -> int:
        return dict(self.bytes_to)[target]


@dataclass(frozen=True)
class _WaitRead(Wait):
    """A full-barrier wait and the read of its stage right after it, as one move. Between them only other
    roles and loads move; none of those can make the read's checks fail that did not already fail here:
    a landing only lowers the stage's in-flight writes, and a load into the stage while the reader holds
    it is itself PIPE-OVERWRITE-BEFORE-RELEASE. So reading at the wait finds every violation of the read."""
    read: Read | None = None


def _fuse(p: Pipeline, ops: list) -> tuple:
    """The reductions of ``_Loads`` and ``_WaitRead`` (Lipton's reduction: moves that commute with every
    move of the others that could come between them run as one)."""
    armed: dict = {}
    brought: dict = {}
    for role in p.roles:
        for op in role.ops:
            if isinstance(op, Arrive) and op.expect_tx:
                key = (op.barrier, op.tile, op.kb)
                armed[key] = armed.get(key, 0) + op.expect_tx
            elif isinstance(op, Load):
                for t in op.targets:
                    key = (at(op.barrier, t), op.tile, op.kb)
                    brought[key] = brought.get(key, 0) + op.bytes_per_cta
    out: list = []
    i = 0
    while i < len(ops):
        op = ops[i]
        if isinstance(op, Load):
            j = i
            group = []
            while j < len(ops) and isinstance(ops[j], Load) and (ops[j].stage, ops[j].fill, ops[j].barrier,
                                                                 ops[j].readers) == (op.stage, op.fill, op.barrier,
                                                                                     op.readers):
                group.append(ops[j])
                j += 1
            exact = all(armed.get((at(op.barrier, t), op.tile, op.kb)) == brought.get((at(op.barrier, t), op.tile, op.kb))
                        for g in group for t in g.targets)
            if len(group) > 1 and exact:
                per: dict = {}
                for g in group:
                    for t in g.targets:
                        per[t] = per.get(t, 0) + g.bytes_per_cta
                targets = tuple(sorted(per))
                out.append(_Loads("+".join(g.operand for g in group), op.stage, op.barrier, 0, op.fill, targets,
                                  op.readers, op.tile, op.kb, tuple(sorted(per.items())), tuple(group)))
                i = j
                continue
        if isinstance(op, Wait) and op.barrier.startswith("full") and op.stage >= 0 and i + 1 < len(ops) \
                and isinstance(ops[i + 1], Read) and ops[i + 1].stage == op.stage:
            out.append(_WaitRead(op.barrier, op.parity, op.tile, op.kb, op.stage, op.release_of, ops[i + 1]))
            i += 2
            continue
        out.append(op)
        i += 1
    return tuple(out)


def _complete_phase(bars: list, i: int, count: int) -> None:
    init, phase, pending, tx = bars[i]
    if pending == 0 and tx == 0:
        bars[i] = (init, phase ^ 1, count, 0)


def explore(p: Pipeline, max_states: int = MAX_STATES, reduce: bool = False, symmetry: bool = True) -> Exploration:
    """Breadth-first over every interleaving of ``p``; ``symmetry``: one state per orbit of the term's
    checked symmetries (``pipeline_symmetry``: CTAs and consumer warpgroups that play identical roles),
    with the traces turned back into concrete interleavings; ``reduce``: the partial-order reduction."""
    m = _Machine(p)
    fp = Stubborn(m) if reduce else None
    sym = Symmetries(m) if symmetry else None
    if sym is not None and sym.trivial:
        sym = None
    result = Exploration()
    start = m.initial()
    if sym is not None:
        start = sym.canonical(start)[0]
    parent: dict = {start: None}
    queue = deque([start])
    first_seen: dict = {}      # rule -> (state, step, message, role): the first (shortest) occurrence

    def quotient_path(state, last) -> list:
        """The steps from the initial state to ``last``, renamed into one concrete interleaving."""
        chain = []
        while parent[state] is not None:
            state, step, perm = parent[state]
            chain.append((step, perm))
        chain.reverse()
        if sym is None:
            return [st for st, _ in chain] + [last]
        gamma = sym.perms[0]
        steps = []
        for st, perm in chain:
            steps.append(sym.rename_step(gamma, st))
            gamma = sym.compose(sym.inverse[perm], gamma)
        steps.append(sym.rename_step(gamma, last))
        return steps

    def found(rule: str, message: str, role: str, state, step) -> None:
        if rule not in first_seen:
            first_seen[rule] = (state, step, message, role)

    while queue:
        state = queue.popleft()
        result.states += 1
        if result.states > max_states:
            result.complete = False
            break
        pcs, bars, stages, loads, inside = state
        moved = False
        succ = []                 # (actor, step, outcome): actor ("r", ri) or ("l", li); outcome None = blocked
        for ri, role in enumerate(m.roles):
            pc = pcs[ri]
            if pc >= len(role.ops):
                continue
            step = ("role", ri, pc)
            succ.append((("r", ri), step, _step(m, state, ri, role.ops[pc], found, step)))
        for li, (ri, pc, target) in enumerate(loads):
            step = ("land", ri, pc, target)
            succ.append((("l", li), step, _land(m, state, li, m.roles[ri].ops[pc], target, found, step)))
        follow = None if fp is None else fp.persistent(state, succ, _VIOLATION)
        for actor, step, outcome in succ:
            if outcome is None:
                continue          # blocked
            moved = True
            if outcome is _VIOLATION or (follow is not None and actor not in follow):
                continue
            perm = 0
            if sym is not None:
                outcome, perm = sym.canonical(outcome)
            if outcome not in parent:
                parent[outcome] = (state, step, perm)
                queue.append(outcome)
        if not moved and any(pc < len(r.ops) for pc, r in zip(pcs, m.roles)):
            first = next(r for ri, r in enumerate(m.roles) if pcs[ri] < len(r.ops))
            found("PIPE-DEADLOCK", _stuck_message(m, pcs), first.name, state, ("stuck",))

    for rule, (state, step, message, role) in first_seen.items():
        steps = quotient_path(state, step)
        if sym is not None:
            message, role = _replay(m, steps, rule)
        result.findings[rule] = Finding(rule, message, role, tuple(m.describe_step(st) for st in steps))
    return result


def _stuck_message(m: "_Machine", pcs) -> str:
    blocked = [f"{r.name} at {describe(r.ops[pcs[ri]])}" for ri, r in enumerate(m.roles) if pcs[ri] < len(r.ops)]
    return "no role can move: " + "; ".join(blocked)


def _replay(m: "_Machine", steps: list, rule: str) -> tuple[str, str]:
    """Run a concrete interleaving on the unreduced step function; return the message and role of ``rule``
    at its last step (the trace the symmetry reduction reports is checked to be a real one)."""
    state = m.initial()
    seen: dict = {}

    def capture(r, message, role, _state, _step):
        seen.setdefault(r, (message, role))

    ignore = lambda *a: None        # noqa: E731
    for i, step in enumerate(steps):
        last = i == len(steps) - 1
        report = capture if last else ignore
        if step[0] == "stuck":
            pcs = state[0]
            first = next(r for ri, r in enumerate(m.roles) if pcs[ri] < len(r.ops))
            return _stuck_message(m, pcs), first.name
        if step[0] == "role":
            ri, pc = step[1], step[2]
            if state[0][ri] != pc:
                raise AssertionError(f"replay: {m.roles[ri].name} is at {state[0][ri]}, not {pc}")
            out = _step(m, state, ri, m.roles[ri].ops[pc], report, step)
        else:
            li = state[3].index((step[1], step[2], step[3]))
            out = _land(m, state, li, m.roles[step[1]].ops[step[2]], step[3], report, step)
        if last:
            if rule not in seen:
                raise AssertionError(f"replay: the trace does not end in {rule}")
            return seen[rule]
        if out is None or out is _VIOLATION:
            raise AssertionError(f"replay: step {i} ({m.describe_step(step)}) is blocked or breaks a rule")
        state = out
    raise AssertionError("replay: empty trace")


_VIOLATION = object()


def _step(m: _Machine, state, ri: int, op, found, step):
    """The state after role ``ri`` performs ``op``; None if it is blocked; _VIOLATION if the move
    breaks a rule (reported through ``found``)."""
    pcs, bars, stages, loads, inside = state
    role = m.roles[ri]

    def advance(**changes):
        new_pcs = pcs[:ri] + (pcs[ri] + 1,) + pcs[ri + 1:]
        return (new_pcs, changes.get("bars", bars), changes.get("stages", stages),
                changes.get("loads", loads), changes.get("inside", inside))

    def usable(name: str) -> bool:
        bi = m.bar_index[name]
        init = bars[bi][0]
        ok = init == 2 or (init == 1 and m.initializer.get(name) == ri)
        if not ok:
            found("PIPE-BARRIER-INIT", f"{role.name} uses {name} before its mbarrier.init is visible "
                  f"({'not initialized' if init == 0 else 'initialized but not yet fenced and synchronized'})",
                  role.name, state, step)
        return ok

    if isinstance(op, Init):
        new = list(bars)
        for name in op.barriers:
            bi = m.bar_index[name]
            new[bi] = (1, 0, m.bar_count[bi], 0)
        return advance(bars=tuple(new))

    if isinstance(op, Sync):
        for rj, pc_sync in m.sync_roles.get(op.id, {}).items():
            if pcs[rj] < pc_sync:
                return None
        new = tuple((2 if b[0] == 1 else b[0],) + b[1:] for b in bars)
        return advance(bars=new)

    if isinstance(op, Wait):
        if not usable(op.barrier):
            return _VIOLATION
        bi = m.bar_index[op.barrier]
        if bars[bi][1] == op.parity:
            return None
        if op.stage >= 0 and op.barrier.startswith("full"):
            key = m.stage_index[(role.cta, op.stage)]
            fill, writes, readers, holders = stages[key]
            new = list(stages)
            new[key] = (fill, writes, readers, holders | (1 << ri))
            after = advance(stages=tuple(new))
            if isinstance(op, _WaitRead):
                # a violation of the read is reported from the state before the fused move (the trace's)
                report = lambda rule, msg, who, _s, st: found(rule, msg, who, state, st)      # noqa: E731
                read = _step(m, after, ri, op.read, report, step)
                if read is None or read is _VIOLATION:
                    return read
                p2 = read[0]
                return (p2[:ri] + (p2[ri] - 1,) + p2[ri + 1:],) + read[1:]
            return after
        return advance()

    if isinstance(op, Arrive):
        if not usable(op.barrier):
            return _VIOLATION
        bi = m.bar_index[op.barrier]
        if _exited(m, pcs, m.bar_cta[op.barrier]):
            found("PIPE-ARRIVE-AFTER-EXIT", f"{role.name} arrives on {op.barrier} (tile {op.tile}, k-block {op.kb}) "
                  f"after every role of CTA {m.bar_cta[op.barrier]} has finished: the CTA may have exited and its "
                  f"shared memory belong to another block", role.name, state, step)
            return _VIOLATION
        init, phase, pending, tx = bars[bi]
        pending -= op.count
        tx += op.expect_tx
        if pending < 0:
            found("PIPE-ARRIVAL-COUNT", f"{role.name} arrives on {op.barrier} after its phase already has "
                  f"all {m.bar_count[bi]} arrivals (tile {op.tile}, k-block {op.kb}, stage {op.stage})",
                  role.name, state, step)
            return _VIOLATION
        new = list(bars)
        new[bi] = (init, phase, pending, tx)
        _complete_phase(new, bi, m.bar_count[bi])
        new_stages = stages
        if op.release and m.bar_cta[op.barrier] == role.cta:
            key = m.stage_index[(role.cta, op.stage)]
            fill, writes, readers, holders = stages[key]
            ns = list(stages)
            ns[key] = (fill, writes, readers, holders & ~(1 << ri))
            new_stages = tuple(ns)
        return advance(bars=tuple(new), stages=new_stages)

    if isinstance(op, Load):
        new_stages = list(stages)
        for target in op.targets:
            readers_idx = sum(1 << m.role_index[f"{r}@{target}"] for r in set(op.readers))
            key = m.stage_index[(target, op.stage)]
            fill, writes, readers, holders = stages[key]
            if fill != op.fill and (readers or holders):
                who = ", ".join(sorted(m.roles[r].name for r in _members(readers | holders)))
                found("PIPE-OVERWRITE-BEFORE-RELEASE",
                      f"{role.name} loads {op.operand} of tile {op.tile} k-block {op.kb} into stage {op.stage} "
                      f"of CTA {target} while {who} has not released its previous contents (fill {fill})",
                      role.name, state, step)
                return _VIOLATION
            new_stages[key] = (op.fill, writes + 1, readers if fill == op.fill else readers_idx, holders)
        new_loads = tuple(sorted(loads + tuple((ri, pcs[ri], t) for t in op.targets)))
        return advance(stages=tuple(new_stages), loads=new_loads)

    if isinstance(op, Read):
        key = m.stage_index[(role.cta, op.stage)]
        fill, writes, readers, holders = stages[key]
        if not holders >> ri & 1:
            found("PIPE-READ-AFTER-RELEASE", f"{role.name} reads stage {op.stage} (tile {op.tile}, k-block {op.kb}) "
                  f"without holding it: it was released, or never waited for", role.name, state, step)
            return _VIOLATION
        if fill != op.fill or writes:
            what = (f"it holds fill {fill}" if fill != op.fill else f"{writes} load(s) into it are still in flight")
            found("PIPE-READ-BEFORE-LOAD", f"{role.name} reads stage {op.stage} for tile {op.tile} k-block {op.kb} "
                  f"(fill {op.fill}) but {what}", role.name, state, step)
            return _VIOLATION
        new = list(stages)
        new[key] = (fill, writes, readers & ~(1 << ri), holders)
        return advance(stages=tuple(new))

    if isinstance(op, MathBegin):
        same_cta = [r for r in _members(inside) if m.roles[r].cta == role.cta]
        if same_cta:
            other = ", ".join(sorted(m.roles[r].name for r in same_cta))
            found("PIPE-ORDER-EXCLUSIVE", f"{role.name} begins its mainloop of tile {op.tile} while {other} is "
                  f"in its own", role.name, state, step)
            return _VIOLATION
        return advance(inside=inside | (1 << ri))

    if isinstance(op, MathEnd):
        return advance(inside=inside & ~(1 << ri))

    raise TypeError(f"unknown pipeline op {op!r}")


def _members(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _exited(m: _Machine, pcs, cta: int) -> bool:
    return all(pcs[ri] >= len(m.roles[ri].ops) for ri in m.cta_roles.get(cta, ()))


def _land(m: _Machine, state, li: int, op: Load, target: int, found, step):
    pcs, bars, stages, loads, inside = state
    ri = loads[li][0]
    name = at(op.barrier, target)
    bi = m.bar_index[name]
    if bars[bi][0] == 0:
        found("PIPE-BARRIER-INIT", f"a TMA load completes bytes on {name} before its mbarrier.init",
              m.roles[ri].name, state, step)
        return _VIOLATION
    if _exited(m, pcs, target):
        found("PIPE-ARRIVE-AFTER-EXIT", f"a TMA load of tile {op.tile} k-block {op.kb} lands in CTA {target} after "
              f"every role of that CTA has finished", m.roles[ri].name, state, step)
        return _VIOLATION
    init, phase, pending, tx = bars[bi]
    new = list(bars)
    new[bi] = (init, phase, pending, tx - (op.bytes_for(target) if isinstance(op, _Loads) else op.bytes_per_cta))
    _complete_phase(new, bi, m.bar_count[bi])
    key = m.stage_index[(target, op.stage)]
    fill, writes, readers, holders = stages[key]
    new_stages = list(stages)
    new_stages[key] = (fill, writes - 1, readers, holders)
    new_loads = loads[:li] + loads[li + 1:]
    return (pcs, tuple(new), tuple(new_stages), new_loads, inside)
