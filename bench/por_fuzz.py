"""Differential fuzzing of the explorer's reductions: random mutations of small pipeline terms, each explored with
every interleaving (no reduction) and with the symmetry and partial-order reductions; the sets of rules found must
be equal. ``python bench/por_fuzz.py [N] [SEED]``; exits 1 on the first difference (printed with the mutation)."""
from __future__ import annotations

import random
import sys
from dataclasses import replace

from cutegen.legality.pipeline_builders import tma_warp_specialized
from cutegen.legality.pipeline_explore import explore
from cutegen.legality.pipeline_term import Arrive, Load, Role, Wait

BASES = {
    "coop": dict(stages=2, k_blocks=3, tiles=2, consumers=2),
    "coop3": dict(stages=3, k_blocks=2, tiles=2, consumers=2),
    "one": dict(stages=2, k_blocks=3, tiles=2, consumers=1),
    "pingpong": dict(stages=2, k_blocks=2, tiles=3, consumers=2, pingpong=True),
    "cluster2x1": dict(stages=2, k_blocks=1, tiles=1, consumers=1, cluster=(2, 1), multicast_b=True,
                       arrivals_per_release=4),
    "cluster2x1c2": dict(stages=2, k_blocks=2, tiles=1, consumers=2, cluster=(2, 1), multicast_b=True,
                         arrivals_per_release=4),
    "cluster1x2": dict(stages=2, k_blocks=2, tiles=1, consumers=1, cluster=(1, 2), multicast_a=True),
    "cluster2x1-no-tail": dict(stages=2, k_blocks=2, tiles=1, consumers=1, cluster=(2, 1), multicast_b=True,
                               arrivals_per_release=4, producer_tail=False),
    "pingpong-unordered": dict(stages=2, k_blocks=2, tiles=3, consumers=2, pingpong=True, ordering=False),
    "lag0": dict(stages=2, k_blocks=3, tiles=2, consumers=2, release_lag=0),
}


# the bases small enough for a unit test's unreduced exploration (tests/test_pipeline_stubborn.py)
SMALL = ("coop", "one", "pingpong", "cluster2x1", "cluster1x2", "lag0", "pingpong-unordered")


def build(name: str):
    return tma_warp_specialized(bytes_a=16384, bytes_b=8192, **BASES[name])


def mutate(term, rng):
    """One random edit of one role's ops (or of a barrier's count); returns (term, description)."""
    if rng.random() < 0.12:
        b = rng.choice(term.barriers)
        d = rng.choice([-1, 1, b.count])
        if b.count + d < 1:
            d = 1
        return term.with_barrier(replace(b, count=b.count + d)), f"{b.name} count {b.count}->{b.count + d}"
    role = rng.choice(term.roles)
    ops = list(role.ops)
    i = rng.randrange(len(ops))
    op = ops[i]
    kind = rng.choice(["drop", "swap", "move", "parity", "count", "tx", "dup", "bytes"])
    if kind == "drop":
        del ops[i]
    elif kind == "swap" and i + 1 < len(ops):
        ops[i], ops[i + 1] = ops[i + 1], ops[i]
    elif kind == "move":
        j = max(0, min(len(ops) - 1, i + rng.choice([-3, -2, 2, 3])))
        ops.insert(j, ops.pop(i))
    elif kind == "parity" and isinstance(op, Wait):
        ops[i] = replace(op, parity=op.parity ^ 1)
    elif kind == "count" and isinstance(op, Arrive):
        ops[i] = replace(op, count=max(1, op.count + rng.choice([-1, 1])))
    elif kind == "tx" and isinstance(op, Arrive) and op.expect_tx:
        ops[i] = replace(op, expect_tx=op.expect_tx + rng.choice([-16, 16, -op.expect_tx]))
    elif kind == "dup":
        ops.insert(i, op)
    elif kind == "bytes" and isinstance(op, Load):
        ops[i] = replace(op, bytes_per_cta=op.bytes_per_cta + rng.choice([-16, 16]))
    else:
        return None, None
    return term.with_role(Role(role.name, role.cta, tuple(ops))), f"{role.name} op {i} ({type(op).__name__}) {kind}"


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    done = 0
    total_full = total_red = 0
    while done < n:
        name = rng.choice(sorted(BASES))
        term = build(name)
        what = []
        for _ in range(rng.choice([1, 1, 2])):
            t, d = mutate(term, rng)
            if t is not None:
                term = t
                what.append(d)
        if not what:
            continue
        full = explore(term, reduce=False, symmetry=False, max_states=300_000)
        if not full.complete:
            continue
        red = explore(term, reduce=True)
        done += 1
        total_full += full.states
        total_red += red.states
        if done % 25 == 0:
            print(f"{done} mutants agree so far", flush=True)
        if set(full.findings) != set(red.findings) or not red.complete:
            print(f"DIFFERENCE on {name} + {what}: full {sorted(full.findings)} reduced {sorted(red.findings)}")
            return 1
    print(f"{done} mutants: the same rules with and without the reductions ({total_full} -> {total_red} states)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
