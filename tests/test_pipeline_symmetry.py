"""The symmetry reduction of the pipeline explorer (``legality.pipeline_symmetry``): which permutations of
CTAs and consumer warpgroups are symmetries of a term (and which are not), and that exploring one state per
orbit finds the same rules, with traces as short, on valid terms and on mutants."""
from __future__ import annotations

import functools

import pytest

from cutegen.legality.pipeline_builders import tma_warp_specialized
from cutegen.legality.pipeline_explore import _Machine, explore
from cutegen.legality.pipeline_symmetry import Symmetries

import pipeline_mutants as M

COOP = functools.partial(tma_warp_specialized, bytes_a=16384, bytes_b=8192, tiles=2, consumers=2)
CLUSTER = functools.partial(tma_warp_specialized, bytes_a=16384, bytes_b=8192, tiles=1, consumers=2,
                            cluster=(2, 1), multicast_b=True, arrivals_per_release=4)


def symmetries(term) -> int:
    return len(Symmetries(_Machine(term)).perms)


def test_symmetries_of_a_term_are_found_and_checked():
    # cooperative: the two consumer warpgroups read and release every fill alike
    assert symmetries(COOP(stages=3, k_blocks=2)) == 2
    # one consumer, or ping-pong (alternate tiles, the ordering barrier names the successor): none
    assert symmetries(COOP(stages=3, k_blocks=2, consumers=1)) == 1
    assert symmetries(COOP(stages=3, k_blocks=2, pingpong=True, tiles=5)) == 1
    # a 2x1 cluster multicasting B: the CTA swap times each CTA's consumer swap
    assert symmetries(CLUSTER(stages=2, k_blocks=1)) == 8
    # a mutant on one consumer of CTA 0 breaks every symmetry that moves that consumer; CTA 1's swap stays
    assert symmetries(M.wrong_wait_parity(CLUSTER(stages=2, k_blocks=1))) == 2
    # a 1x2 cluster multicasting A with one consumer: only the CTA swap
    assert symmetries(tma_warp_specialized(stages=2, k_blocks=1, tiles=1, bytes_a=16384, bytes_b=8192, consumers=1,
                                           cluster=(1, 2), multicast_a=True)) == 2


def test_a_cta_swap_that_renames_loads_onto_no_load_is_rejected():
    # A 2x2 cluster multicasting A along rows only: swapping CTAs 0 and 1 (one row's... columns) keeps every
    # load's target set; a permutation that moves CTA 0 into the other row without its row-mate does not.
    term = tma_warp_specialized(stages=2, k_blocks=1, tiles=1, bytes_a=16384, bytes_b=8192, consumers=1,
                                cluster=(2, 2), multicast_a=True)
    maps = {perm[3] for perm in Symmetries(_Machine(term)).perms}
    assert (0, 1, 2, 3) in maps and (1, 0, 3, 2) in maps
    # rows are {0, 2} and {1, 3} (CTA c is row c % 2): mapping 0 -> 0 and 2 -> 1 splits a row
    assert (0, 2, 1, 3) not in maps
    for cta_map in maps:
        rows = {frozenset({cta_map[0], cta_map[2]}), frozenset({cta_map[1], cta_map[3]})}
        assert rows == {frozenset({0, 2}), frozenset({1, 3})}


SYMMETRIC_MUTANTS = [M.drop_expect_tx, M.wrong_byte_count, M.arrival_count_plus_one, M.arrival_count_minus_one,
                     M.wrong_wait_parity, M.release_before_last_read, M.load_before_empty_wait, M.no_init_sync]


@pytest.mark.parametrize("mutate", [None] + SYMMETRIC_MUTANTS,
                         ids=["valid"] + [m.__name__ for m in SYMMETRIC_MUTANTS])
def test_same_rules_and_trace_lengths_with_and_without_symmetry(mutate):
    term = COOP(stages=3, k_blocks=4)
    if mutate is not None:
        term = mutate(term)
    full = explore(term, symmetry=False)
    reduced = explore(term)
    assert full.complete and reduced.complete
    assert set(reduced.findings) == set(full.findings)
    assert reduced.states <= full.states
    for rule, f in full.findings.items():
        # breadth-first on the quotient: a shortest counterexample stays as short, and is a real interleaving
        # (the explorer replays it on the unreduced machine to write its message)
        assert len(reduced.findings[rule].trace) == len(f.trace), rule
    if mutate is None:
        assert reduced.states < full.states * 0.7


def _both_consumers(term, mutate_one):
    """A mutation applied to every consumer alike, so that the mutant keeps the consumer symmetry."""
    once = mutate_one(term)
    swapped = mutate_one(term.with_role(term.role("mma1@0").__class__("mma0@0", 0, term.role("mma1@0").ops)))
    mma1 = swapped.role("mma0@0")
    return once.with_role(mma1.__class__("mma1@0", 0, mma1.ops))


@pytest.mark.parametrize("mutate,rule", [(M.wrong_wait_parity, "PIPE-READ-BEFORE-LOAD"),
                                         (M.release_before_last_read, "PIPE-READ-AFTER-RELEASE")])
def test_mutants_that_keep_the_symmetry_are_still_found(mutate, rule):
    term = _both_consumers(COOP(stages=3, k_blocks=4), mutate)
    assert symmetries(term) == 2
    reduced = explore(term)
    full = explore(term, symmetry=False)
    assert rule in reduced.findings and set(reduced.findings) == set(full.findings)
    assert reduced.states < full.states


@pytest.mark.parametrize("reduce", [False, True])
def test_cluster_without_producer_tail_with_both_reductions(reduce):
    """The 2x1 cluster's PIPE-ARRIVE-AFTER-EXIT (a peer's release after the CTA ended) with the symmetry
    reduction alone and with the partial-order reduction on top: found, with a trace that is a real
    interleaving (replayed on the unreduced machine); the valid term explores far fewer states."""
    full = explore(CLUSTER(stages=2, k_blocks=1, producer_tail=False), symmetry=False)
    found = explore(CLUSTER(stages=2, k_blocks=1, producer_tail=False), reduce=reduce)
    assert set(found.findings) == set(full.findings) == {"PIPE-ARRIVE-AFTER-EXIT"}
    shortest = len(full.findings["PIPE-ARRIVE-AFTER-EXIT"].trace)
    # the symmetry quotient keeps breadth-first depth; the partial-order reduction may take a longer path
    if reduce:
        assert len(found.findings["PIPE-ARRIVE-AFTER-EXIT"].trace) >= shortest
    else:
        assert len(found.findings["PIPE-ARRIVE-AFTER-EXIT"].trace) == shortest
    valid_full = explore(CLUSTER(stages=2, k_blocks=1), symmetry=False)
    valid = explore(CLUSTER(stages=2, k_blocks=1), reduce=reduce)
    assert valid.complete and not valid.findings
    assert valid.states * 3 < valid_full.states


# (drop_expect_tx finds the same three rules, 204,033 -> 20,558 states, but takes ~8 s unreduced: not here)
CLUSTER_MUTANTS = [M.arrival_count_plus_one, M.arrival_count_minus_one, M.wrong_wait_parity, M.release_before_last_read,
                   M.no_init_sync]


@pytest.mark.parametrize("mutate", CLUSTER_MUTANTS, ids=[m.__name__ for m in CLUSTER_MUTANTS])
def test_cluster_mutants_with_both_reductions(mutate):
    """What `check pipeline --cluster` runs (the whole 2x1 cluster, symmetry + partial-order reduction) finds the
    same rules as every interleaving on mutants of CTA 0 (which break the CTA swap), 3 k-blocks over 2 stages."""
    term = mutate(CLUSTER(stages=2, k_blocks=3))
    full = explore(term, symmetry=False)
    both = explore(term, reduce=True)
    assert full.complete and both.complete and full.findings
    assert set(both.findings) == set(full.findings)
    assert both.states <= full.states
