"""Symmetry reduction for ``pipeline_explore``: the permutations of CTAs and of roles that map a pipeline
term onto itself, and the canonical representative of a state under them.

A *symmetry* of a term is a pair (a permutation ``cta_map`` of its CTAs, a permutation ``role_map`` of its
roles) such that renaming every CTA index and every role in the term (barrier ``name@c`` becomes
``name@cta_map[c]``, a load's targets and a release's destination are renamed, a load's ``readers``
follow the role renaming) yields the same term: role ``r``'s op sequence, renamed, *is* role
``role_map[r]``'s op sequence, op for op, and every barrier keeps its init count. Candidates are
generated (every CTA permutation, combined with every permutation among a CTA's consumer roles), and
each is *checked* on the explorer's own (fused) op sequences, so nothing is assumed: a candidate that
is not exact is dropped.

Why exploring one state per orbit finds every behaviour (Emerson & Sistla, "Symmetry and model
checking", FMSD 9, 1996; Ip & Dill, "Better verification through symmetry", FMSD 9, 1996): the
explorer's step function reads a state only through role indices, barrier indices, stage indices and
CTA indices, and compares them only for equality (never by order: the in-flight loads are kept as a
sorted tuple, and the sort is re-applied after renaming). So for a symmetry ``pi``, a move ``m`` leads
from ``s`` to ``s'`` iff ``pi(m)`` leads from ``pi(s)`` to ``pi(s')``, ``m`` is blocked in ``s`` iff
``pi(m)`` is in ``pi(s)``, and ``m`` breaks rule R in ``s`` iff ``pi(m)`` breaks R in ``pi(s)`` (the rules
are stated over the same indices). Hence the quotient graph (one canonical state per orbit) has a
path to a state with no move, or to a move that breaks R, iff the full graph does, and it has the same
depth (breadth-first traces stay shortest). The explorer keeps, with each canonical state, the
permutation that made it canonical, and turns the quotient trace back into a concrete one (every step
renamed by the inverse of the permutations before it), then replays it on the unreduced step function
to write the finding's message: the trace a user reads is a real interleaving of the term.

Multicast: CTAs are *not* interchangeable in general. In a 2x2 cluster that multicasts A along rows
only, swapping CTA 0 with CTA 1 (two columns of one row) keeps the term but swapping CTA 0 with CTA 2
(another row) renames a load's targets to a set that no load has; that candidate fails the check.
In a 2x1 cluster multicasting B, CTA 0's producer loads half of B into both CTAs and CTA 1's producer
the other half: the two CTAs play identical roles (each producer's B half lands in both), so the swap
is a symmetry; a term where the two halves differ in bytes is not symmetric, and the check says so.
The consumer swap within a CTA holds for the cooperative kernel (both warpgroups read every fill and
release it identically), not for ping-pong (they take different tiles and the ordering barrier names
its successor).
"""
from __future__ import annotations

import itertools
from dataclasses import fields, is_dataclass, replace

from .pipeline_term import Pipeline

MAX_SYMMETRIES = 64          # candidates checked per term (a 2x2 cluster of two consumers: 4! * 2^4 = 384 > this)


def _split(name: str) -> tuple[str, int | None]:
    base, sep, cta = name.rpartition("@")
    return (base, int(cta)) if sep else (name, None)


class _NotSymmetric(Exception):
    pass


def _rename_op(op, cta_map: tuple[int, ...], base_maps: dict):
    """``op`` with every CTA index renamed by ``cta_map`` and role base names by ``base_maps[cta]`` (the
    renaming of the roles of each CTA). A load's ``readers`` name roles in every target CTA at once, so
    their renaming must agree across the targets, or the candidate is no symmetry."""
    if not is_dataclass(op):
        return op
    changes = {}
    for f in fields(op):
        v = getattr(op, f.name)
        if f.name == "barrier" and isinstance(v, str):
            base, cta = _split(v)
            changes[f.name] = v if cta is None else f"{base}@{cta_map[cta]}"
        elif f.name == "barriers":
            changes[f.name] = tuple(sorted(_rename_op_name(b, cta_map) for b in v))
        elif f.name == "targets":
            changes[f.name] = tuple(sorted(cta_map[t] for t in v))
        elif f.name == "bytes_to":
            changes[f.name] = tuple(sorted((cta_map[t], b) for t, b in v))
        elif f.name == "readers":
            renamed = {tuple(sorted(base_maps[t].get(r, r) for r in v)) for t in getattr(op, "targets", (0,))}
            if len(renamed) != 1:
                raise _NotSymmetric
            changes[f.name] = renamed.pop()
        elif f.name in ("parts", "read"):
            changes[f.name] = (tuple(_rename_op(g, cta_map, base_maps) for g in v) if isinstance(v, tuple)
                               else _rename_op(v, cta_map, base_maps))
    return replace(op, **changes)


def _rename_op_name(name: str, cta_map) -> str:
    base, cta = _split(name)
    return name if cta is None else f"{base}@{cta_map[cta]}"


def _normal(op):
    """An op with its unordered fields sorted, so that renamed and original ops compare as sets."""
    if not is_dataclass(op):
        return op
    changes = {}
    for f in fields(op):
        v = getattr(op, f.name)
        if f.name in ("barriers", "targets", "bytes_to", "readers"):
            changes[f.name] = tuple(sorted(v))
        elif f.name in ("parts", "read"):
            changes[f.name] = tuple(_normal(g) for g in v) if isinstance(v, tuple) else _normal(v)
    return replace(op, **changes)


class Symmetries:
    """The checked symmetries of the explorer's machine ``m`` (``pipeline_explore._Machine``) and the
    canonical form of its states. ``perms`` holds, per symmetry, maps of role, barrier, stage and CTA
    indices (the identity first)."""

    def __init__(self, m):
        self.m = m
        p: Pipeline = m.p
        roles = m.roles
        ctas = p.ctas
        by_cta: dict = {}
        for ri, r in enumerate(roles):
            by_cta.setdefault(r.cta, []).append(ri)
        normal = [tuple(_normal(op) for op in r.ops) for r in roles]
        self.perms = []
        candidates = 0
        for cta_map in itertools.permutations(range(ctas)):
            # role renamings: the roles of CTA c go to the roles of CTA cta_map[c] with the same base name,
            # optionally permuted among roles whose ops are the same up to names (identical consumers)
            per_cta_choices = []
            for c in range(ctas):
                own = by_cta.get(c, [])
                there = by_cta.get(cta_map[c], [])
                if len(own) != len(there):
                    per_cta_choices = None
                    break
                base_of = {_split(roles[ri].name)[0]: ri for ri in there}
                straight = [base_of.get(_split(roles[ri].name)[0]) for ri in own]
                if None in straight:
                    per_cta_choices = None
                    break
                consumers = [i for i, ri in enumerate(own) if not _split(roles[ri].name)[0].startswith("producer")]
                choices = []
                for perm in itertools.permutations(consumers):
                    target = list(straight)
                    for i, j in zip(consumers, perm):
                        target[i] = straight[j]
                    choices.append(tuple(zip(own, target)))
                per_cta_choices.append(choices)
            if per_cta_choices is None:
                continue
            for combo in itertools.product(*per_cta_choices):
                candidates += 1
                if candidates > MAX_SYMMETRIES:
                    break
                role_map = [0] * len(roles)
                for pairs in combo:
                    for a, b in pairs:
                        role_map[a] = b
                perm = self._check(cta_map, tuple(role_map), normal)
                if perm is not None:
                    self.perms.append(perm)
        # the identity is always a symmetry and is checked first (permutations() yields it first)
        assert self.perms and self.perms[0][0] == tuple(range(len(roles)))
        self.trivial = len(self.perms) == 1
        self.inverse = [self._invert(x) for x in self.perms]
        self._tables()

    def _check(self, cta_map, role_map, normal):
        m = self.m
        roles = m.roles
        base_maps: dict = {}
        for a, b in enumerate(role_map):
            base_maps.setdefault(roles[a].cta, {})[_split(roles[a].name)[0]] = _split(roles[b].name)[0]
        for a, b in enumerate(role_map):
            if roles[b].cta != cta_map[roles[a].cta] or len(roles[a].ops) != len(roles[b].ops):
                return None
            try:
                renamed = tuple(_normal(_rename_op(op, cta_map, base_maps)) for op in roles[a].ops)
            except _NotSymmetric:
                return None
            if renamed != normal[b]:
                return None
        bar_map = []
        for b in m.p.barriers:
            j = m.bar_index.get(_rename_op_name(b.name, cta_map))
            if j is None or m.bar_count[j] != b.count:
                return None
            bar_map.append(j)
        stage_map = [0] * len(m.stage_index)
        for (cta, s), k in m.stage_index.items():
            stage_map[k] = m.stage_index[(cta_map[cta], s)]
        return role_map, tuple(bar_map), tuple(stage_map), tuple(cta_map)

    @staticmethod
    def _invert(perm):
        return tuple(tuple(sorted(range(len(x)), key=lambda i: x[i])) for x in perm)

    def _tables(self):
        """Per symmetry, index getters that build the renamed state's tuples, and its role-mask table."""
        from operator import itemgetter
        n = len(self.m.roles)
        self._fast = []
        for role_map, bar_map, stage_map, cta_map in self.perms:
            inv_role = sorted(range(n), key=lambda i: role_map[i])
            inv_bar = sorted(range(len(bar_map)), key=lambda i: bar_map[i])
            inv_stage = sorted(range(len(stage_map)), key=lambda i: stage_map[i])
            masks = None
            if n <= 14:
                masks = [_rename_mask(mask, role_map) for mask in range(1 << n)]
            self._fast.append((itemgetter(*inv_role) if n > 1 else (lambda t: t),
                               itemgetter(*inv_bar) if len(inv_bar) > 1 else (lambda t: t),
                               inv_stage, masks, role_map, cta_map))

    def apply(self, i: int, state):
        """The state renamed by symmetry ``i``."""
        get_pcs, get_bars, inv_stage, masks, role_map, cta_map = self._fast[i]
        pcs, bars, stages, loads, inside = state
        ren = masks.__getitem__ if masks is not None else (lambda mask: _rename_mask(mask, role_map))
        new_stages = []
        for k in inv_stage:
            st = stages[k]
            new_stages.append(st if not (st[2] or st[3]) else (st[0], st[1], ren(st[2]), ren(st[3])))
        new_loads = tuple(sorted((role_map[ri], pc, cta_map[t]) for ri, pc, t in loads)) if loads else loads
        return (tuple(get_pcs(pcs)), tuple(get_bars(bars)), tuple(new_stages), new_loads, ren(inside))

    def canonical(self, state):
        """(the least state of ``state``'s orbit, the index of a symmetry that maps ``state`` onto it):
        the program counters decide first, and only the symmetries that tie on them are applied in full."""
        if self.trivial:
            return state, 0
        pcs = state[0]
        best_pcs, tied = pcs, [0]
        for i in range(1, len(self.perms)):
            renamed = tuple(self._fast[i][0](pcs))
            if renamed < best_pcs:
                best_pcs, tied = renamed, [i]
            elif renamed == best_pcs:
                tied.append(i)
        if len(tied) == 1:
            return (state, 0) if tied[0] == 0 else (self.apply(tied[0], state), tied[0])
        best, best_i = None, 0
        for i in tied:
            s = state if i == 0 else self.apply(i, state)
            if best is None or s < best:
                best, best_i = s, i
        return best, best_i

    def rename_step(self, perm, step):
        role_map, _, _, cta_map = perm
        if step[0] == "role":
            return ("role", role_map[step[1]], step[2])
        if step[0] == "land":
            return ("land", role_map[step[1]], step[2], cta_map[step[3]])
        return step

    @staticmethod
    def compose(first, then):
        """The permutation ``then . first`` (apply ``first``, then ``then``)."""
        return tuple(tuple(t[f[i]] for i in range(len(f))) for f, t in zip(first, then))


def _rename_mask(mask: int, role_map) -> int:
    out = 0
    for i, j in enumerate(role_map):
        if mask >> i & 1:
            out |= 1 << j
    return out
