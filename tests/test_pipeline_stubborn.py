"""The stubborn-set reduction of the pipeline explorer (``legality.pipeline_stubborn``): the whole cluster explored at
the kernel's own stage count, every seeded bug class still caught there (cluster-mode mutants included), and the same
rules found with and without the reductions on random mutants."""
from __future__ import annotations

import importlib.util
import random
from dataclasses import replace
from pathlib import Path

import pytest

from cutegen.commands.check_config import parse_case
from cutegen.legality.pipeline import Bounds, check_pipeline
from cutegen.legality.pipeline_explore import explore
from cutegen.legality.pipeline_term import Arrive, Role, Wait
from cutegen.pipelines import pipeline_of

PROBLEM = {"m": 8192, "n": 3072, "k": 1024, "dtype": "bf16", "layout": "tn"}
COOP_2X1 = {"tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1]}
PINGPONG_1X2 = {"tile_shape": [128, 128, 64], "cluster_shape": [1, 2, 1], "mainloop_schedule": "pingpong"}


def cluster_rebuild(config: dict, backend: str = "dsl"):
    problem, cfg = parse_case({"problem": PROBLEM, "config": config})
    term, rebuild = pipeline_of(problem, cfg, backend, explore_cluster=True)
    return term, rebuild


def edit(term, role_name, fn):
    role = term.role(role_name)
    return term.with_role(Role(role.name, role.cta, tuple(fn(list(role.ops)))))


@pytest.mark.parametrize("config,backend", [(COOP_2X1, "dsl"), (COOP_2X1, "cutlass"), (PINGPONG_1X2, "cutlass")],
                         ids=["coop-2x1-dsl", "coop-2x1-cutlass", "pingpong-1x2-cutlass"])
def test_whole_cluster_at_its_own_stages_is_proven(config, backend):
    """Every CTA's roles, every interleaving, at the kernel's own stage count and every k-block count the checker
    uses: complete (no bound hit) and clean, in a few thousand states (the 2x1 cooperative kernel stopped at
    600,000 states, UNPROVEN, before)."""
    term, rebuild = cluster_rebuild(config, backend)
    assert term.ctas == 2 and term.stages >= 4
    total = 0
    for k in Bounds(stages=None).k_values(term.stages):
        e = explore(rebuild(stages=term.stages, k_blocks=k), reduce=True, max_states=50_000)
        assert e.complete and not e.findings, (k, e.findings)
        total += e.states
    assert total < 20_000


def _drop_peer_release(term):
    """mma0@0 forgets its release of one k-block to the peer CTA: the peer's producer waits forever."""
    def f(ops):
        i = next(i for i, o in enumerate(ops) if isinstance(o, Arrive) and o.release and o.barrier.endswith("@1"))
        del ops[i]
        return ops
    return edit(term, "mma0@0", f)


def _multicast_count_forgets_peer(term):
    """The empty barriers count the local CTA's consumers only (the multicast count without the peer): the peer's
    releases overshoot a phase."""
    for b in term.barriers:
        if b.name.startswith("empty"):
            term = term.with_barrier(replace(b, count=b.count // 2))
    return term


def _tx_forgets_peer_half(term):
    """CTA 0's producer arms its full barrier with its own loads' bytes only, forgetting the half of B the peer
    multicasts into it: the phase can complete before the peer's half lands."""
    half_b = term.meta["bytes_b"] // 2
    return edit(term, "producer@0", lambda ops: [replace(o, expect_tx=o.expect_tx - half_b)
                                                 if isinstance(o, Arrive) and o.expect_tx else o for o in ops])


def _wrong_parity_on_peer(term):
    def f(ops):
        i = next(i for i, o in enumerate(ops) if isinstance(o, Wait) and o.barrier.startswith("full") and o.kb == 1)
        ops[i] = replace(ops[i], parity=ops[i].parity ^ 1)
        return ops
    return edit(term, "mma1@1", f)


CLUSTER_MUTANTS = [
    (_drop_peer_release, {}, "PIPE-DEADLOCK"),
    (_multicast_count_forgets_peer, {}, "PIPE-ARRIVAL-COUNT"),
    (_tx_forgets_peer_half, {}, "PIPE-READ-BEFORE-LOAD"),
    (_wrong_parity_on_peer, {}, "PIPE-READ-BEFORE-LOAD"),
    (None, dict(producer_tail=False), "PIPE-ARRIVE-AFTER-EXIT"),
]


@pytest.mark.parametrize("mutate,overrides,rule", CLUSTER_MUTANTS,
                         ids=["dropped-peer-release", "multicast-count-forgets-peer", "tx-forgets-peer-half",
                              "wrong-parity-on-peer", "no-producer-tail"])
def test_cluster_mutants_are_caught_at_the_kernels_own_stages(mutate, overrides, rule):
    """The seeded bug classes on the whole 2x1 cluster at its own 4 stages, with both reductions: each is found by
    the exploration (not only by a structural rule) within a few thousand states. A broken rule is a conclusive
    verdict however far the exploration went (``PipelineReport.conclusive``); a mutant's derailed protocol can have
    far more states than the valid one, so finishing is not asserted here."""
    problem, cfg = parse_case({"problem": PROBLEM, "config": COOP_2X1})
    term, rebuild = pipeline_of(problem, cfg, "dsl", explore_cluster=True, **overrides)
    t = rebuild(stages=term.stages, k_blocks=3)
    if mutate is not None:
        t = mutate(t)
    e = explore(t, reduce=True, max_states=3_000)
    assert rule in e.findings, sorted(e.findings)


def test_cluster_mutants_agree_with_every_interleaving_where_both_finish():
    """At 2 stages (where every interleaving can still be explored) the reduced exploration finds exactly the rules
    the full one finds, on the valid 2x1 term and on each cluster mutant."""
    problem, cfg = parse_case({"problem": PROBLEM, "config": COOP_2X1})
    # (the tx mutant's derailed protocol has over 200,000 states unreduced even here; random byte edits are in
    # the fuzz test below)
    for mutate, overrides, rule in [(None, {}, None)] + [m for m in CLUSTER_MUTANTS if m[0] is not _tx_forgets_peer_half]:
        term, rebuild = pipeline_of(problem, cfg, "dsl", explore_cluster=True, **overrides)
        t = rebuild(stages=2, k_blocks=2)
        if mutate is not None:
            t = mutate(t)
        full = explore(t, reduce=False, max_states=200_000)
        reduced = explore(t, reduce=True)
        assert full.complete and reduced.complete
        assert set(reduced.findings) == set(full.findings), (mutate, sorted(full.findings))
        assert reduced.states <= full.states
        # at 2 stages and 1 k-block a mutant may show as another rule (the count mutant as a release on an exited
        # CTA), but it shows
        assert bool(full.findings) == (mutate is not None or bool(overrides))


def test_missing_order_wait_on_a_pingpong_cluster():
    """Ping-pong on a 1x2 cluster (CUTLASS's ordering barrier): the second warpgroup of CTA 1 no longer waits for
    its turn: PIPE-ORDER-EXCLUSIVE, at the kernel's own stages with both reductions."""
    term, rebuild = cluster_rebuild(PINGPONG_1X2, "cutlass")
    t = edit(rebuild(stages=term.stages, k_blocks=2), "mma1@1",
             lambda ops: [o for o in ops if not (isinstance(o, Wait) and o.barrier.startswith("order"))])
    e = explore(t, reduce=True, max_states=3_000)
    assert "PIPE-ORDER-EXCLUSIVE" in e.findings


def test_release_before_mma_done_on_the_cluster_term():
    """wait_group(2) where the release needs wait_group(1) (PIPE-RELEASE-BEFORE-MMA-DONE, a structural rule over the
    term's WGMMA batches) on the whole cluster's term; the unmutated term passes."""
    from cutegen.legality.pipeline_term import MmaWait
    term, rebuild = cluster_rebuild(COOP_2X1)
    t = rebuild(stages=term.stages, k_blocks=3)
    bounds = Bounds(stages=None, reduce=True, max_states=100_000)
    assert check_pipeline(t, bounds=bounds).legal
    bad = edit(t, "mma0@1", lambda ops: [MmaWait(2, o.tile, o.kb) if isinstance(o, MmaWait) and o.pending == 1 else o
                                         for o in ops])
    assert "PIPE-RELEASE-BEFORE-MMA-DONE" in {v.rule_id for v in check_pipeline(bad, bounds=bounds).violations}


def _por_fuzz():
    path = Path(__file__).resolve().parent.parent / "bench" / "por_fuzz.py"
    spec = importlib.util.spec_from_file_location("por_fuzz", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(3))
def test_random_mutants_find_the_same_rules_with_and_without_the_reductions(seed):
    """Random edits (a dropped, swapped, moved or duplicated op; a flipped parity; a changed count or byte figure) of
    small terms (cooperative, one consumer, ping-pong with and without its ordering barrier, 2x1 and 1x2 clusters,
    release lag 0): every interleaving and the reduced exploration find the same set of rules. (The bench runs
    hundreds: ``python bench/por_fuzz.py 500 SEED``.)"""
    fuzz = _por_fuzz()
    rng = random.Random(1000 + seed)
    checked = 0
    while checked < 6:
        name = rng.choice(sorted(fuzz.SMALL))
        term = fuzz.build(name)
        term, what = fuzz.mutate(term, rng)
        if term is None:
            continue
        full = explore(term, reduce=False, symmetry=False, max_states=60_000)
        if not full.complete:
            continue
        reduced = explore(term, reduce=True)
        assert reduced.complete
        assert set(reduced.findings) == set(full.findings), (name, what)
        checked += 1
