"""The epilogue's TMA-store pipeline (legality/epilogue_store.py) and stream-K's fix-up flags
(legality/stream_k_fixup.py): the sequences CUTLASS and the DSL template run pass; each dropped or misplaced
step is rejected with its rule."""
from __future__ import annotations

import pytest

from cutegen.legality.epilogue_store import (EPILOGUE_STORE_RULES, BulkStore, BulkWait, GroupSync, SmemWrite,
                                             StoreGroup, check_store_group, tma_store_epilogue)
from cutegen.legality.stream_k_fixup import (STREAM_K_FIXUP_RULES, FixupCheck, check_fixup, deterministic_fixup,
                                             explore_fixup, nondeterministic_fixup)


def store_rules(group) -> set[str]:
    return {v.rule for v in check_store_group(group)}


@pytest.mark.parametrize("stages_d,subtiles,tiles", [(1, 1, 1), (1, 4, 2), (2, 4, 2), (2, 1, 3), (4, 8, 2), (3, 2, 2)])
def test_the_store_sequence_passes(stages_d, subtiles, tiles):
    g = tma_store_epilogue(stages_d=stages_d, subtiles=subtiles, tiles=tiles)
    assert check_store_group(g) == []
    assert EPILOGUE_STORE_RULES.evaluate(g) == []


@pytest.mark.parametrize("drop,rule", [
    (dict(acquire=False), "EPI-STORE-REUSE"),            # no producer_acquire / tma_store_wait<StagesD-1>
    (dict(sync_after_acquire=False), "EPI-STORE-REUSE"),  # the issuer waited, the other threads do not know
    (dict(fence=False), "EPI-STORE-FENCE"),               # no fence.proxy.async before the store
    (dict(sync_before_store=False), "EPI-STORE-FENCE"),   # the issuer stores before the others' writes are done
    (dict(tail=False), "EPI-STORE-DRAIN"),                # no store_tail / producer_tail
])
def test_each_dropped_step_is_rejected(drop, rule):
    g = tma_store_epilogue(stages_d=2, subtiles=4, tiles=2, **drop)
    assert rule in store_rules(g), check_store_group(g)
    assert rule in {v.rule_id for v in EPILOGUE_STORE_RULES.evaluate(g)}


def test_reuse_boundary_is_the_wait_depth():
    # wait_group.read N retires all but the N most recent groups: with 2 buffers, N = 1 lets the next write
    # (into the other buffer) go while one store reads; N = 2 does not retire the store of the buffer reused.
    ok = tma_store_epilogue(stages_d=2, subtiles=4, tiles=1)
    assert "EPI-STORE-REUSE" not in store_rules(ok)
    deeper = StoreGroup(tuple(BulkWait(2) if isinstance(op, BulkWait) and op.pending == 1 else op for op in ok.ops), 2)
    assert "EPI-STORE-REUSE" in store_rules(deeper)
    # one buffer: wait_group.read 0 after every store is required, and enough
    one = tma_store_epilogue(stages_d=1, subtiles=3, tiles=1)
    assert BulkWait(0) in one.ops and not store_rules(one)


def test_a_fence_after_the_barrier_does_not_count():
    ops = list(tma_store_epilogue(stages_d=2, subtiles=2, tiles=1).ops)
    i = ops.index(next(op for op in ops if type(op).__name__ == "ProxyFence"))
    j = ops.index(GroupSync(), i)
    ops[i], ops[j] = ops[j], ops[i]            # barrier, then fence: the barrier published unfenced writes
    assert "EPI-STORE-FENCE" in store_rules(StoreGroup(tuple(ops), 2))


def test_members_must_follow_the_issuer():
    g = tma_store_epilogue(stages_d=2, subtiles=2, tiles=1)
    members = tuple(op for op in g.ops
                    if not isinstance(op, (BulkStore, BulkWait)) and type(op).__name__ != "BulkCommit")
    good = StoreGroup(g.ops, 2, {"mma1@0": members})
    assert not store_rules(good)
    skipped = tuple(op for k, op in enumerate(members) if not (isinstance(op, GroupSync) and k == len(members) - 1))
    assert "EPI-STORE-GROUP" in store_rules(StoreGroup(g.ops, 2, {"mma1@0": skipped}))
    other_buffer = tuple(SmemWrite(1 - op.buffer, op.tile, op.subtile) if isinstance(op, SmemWrite) else op
                         for op in members)
    assert "EPI-STORE-GROUP" in store_rules(StoreGroup(g.ops, 2, {"mma1@0": other_buffer}))


def fixup_rules(f) -> set[str]:
    return {v.rule_id for v in check_fixup(f)[0]}


@pytest.mark.parametrize("k_tiles", [(1, 1), (3, 2), (2, 2, 1), (1, 3, 1, 2)])
def test_cutlass_deterministic_fixup_passes(k_tiles):
    f = deterministic_fixup(k_tiles)
    assert fixup_rules(f) == set()
    assert explore_fixup(f).states > len(k_tiles)


@pytest.mark.parametrize("change,rule", [
    (dict(release=False), "SK-FIXUP-RACE"),             # relaxed red: no release fence before the flag
    (dict(acquire=False), "SK-FIXUP-RACE"),             # relaxed spin: the flag seen, the partial not
    (dict(sync_before_signal=False), "SK-FIXUP-RACE"),  # thread 0 signals before the other threads wrote
    (dict(sync_after_wait=False), "SK-FIXUP-RACE"),     # thread 0 acquired; the other threads read early
    (dict(signal_before_write=True), "SK-FIXUP-RACE"),  # the flag set before the partial is written
])
@pytest.mark.parametrize("k_tiles", [(2, 2), (2, 1, 3)])
def test_fixup_mutants_are_races(change, rule, k_tiles):
    f = deterministic_fixup(k_tiles, **change)
    found = fixup_rules(f)
    assert rule in found, found
    assert {v.rule_id for v in STREAM_K_FIXUP_RULES.evaluate(FixupCheck(f))} == found


def test_final_split_waiting_for_too_little_or_too_much():
    # three splits of 2, 1, 3 k-tiles: the final one must wait for lock == 3 (both earlier splits)
    assert fixup_rules(deterministic_fixup((2, 1, 3), final_waits_for=3)) == set()
    early = explore_fixup(deterministic_fixup((2, 1, 3), final_waits_for=2))   # only the first split counted
    assert "SK-FIXUP-RACE" in early.findings
    assert "split1" in early.findings["SK-FIXUP-RACE"].message
    assert early.findings["SK-FIXUP-RACE"].trace[-1].startswith("split2: read")
    never = explore_fixup(deterministic_fixup((2, 1, 3), final_waits_for=4))    # a value the lock never takes
    assert set(never.findings) == {"SK-FIXUP-DEADLOCK"}


@pytest.mark.parametrize("k_tiles", [(1, 1), (2, 1, 3), (2, 1, 3, 1), (1, 1, 1, 1, 1)])
def test_cutlass_nondeterministic_fixup_passes_in_every_order(k_tiles):
    """ReductionMode::Nondeterministic: the middle splits wait only for the first split's partial (lock >= 1) and
    add atomically in any order; the final split waits for lock == K_idx. Every order is explored: with two or more
    middle splits there are more states than the deterministic chain has."""
    f = nondeterministic_fixup(k_tiles)
    assert fixup_rules(f) == set()
    if len(k_tiles) > 3:
        assert explore_fixup(f).states > explore_fixup(deterministic_fixup(k_tiles)).states


@pytest.mark.parametrize("change,found,blamed", [
    (dict(final_waits=False), {"SK-FIXUP-RACE"}, "split3 (K_idx 6) reads"),         # the reader does not wait
    (dict(middle_waits=False), {"SK-FIXUP-RACE"}, "split1 (K_idx 2) adds into"),    # adds before the first store
    # the final split waits only for the first split's flag (lock >= 1, the middles' wait): middles still adding
    (dict(final_waits_at_least=True, final_waits_for=1), {"SK-FIXUP-RACE"}, "split3 (K_idx 6) reads"),
    (dict(atomic_adds=False), {"SK-FIXUP-RACE"}, "plain accesses"),                 # reduce as plain read + write
    (dict(release=False), {"SK-FIXUP-RACE"}, "written but not released"),
    (dict(acquire=False), {"SK-FIXUP-RACE"}, "written but not released"),
    (dict(sync_after_wait=False), {"SK-FIXUP-RACE"}, "split1"),
    (dict(final_waits_for=7), {"SK-FIXUP-DEADLOCK"}, "lock == 7"),
])
def test_nondeterministic_fixup_mutants(change, found, blamed):
    f = nondeterministic_fixup((2, 1, 3, 1), **change)
    ex = explore_fixup(f)
    assert set(ex.findings) == found
    assert any(blamed in x.message for x in ex.findings.values()), [x.message for x in ex.findings.values()]
    # the valid side of each boundary: the same splits, the protocol as CUTLASS has it
    assert fixup_rules(nondeterministic_fixup((2, 1, 3, 1))) == set()


@pytest.mark.parametrize("waits_for,first,second", [(3, "split1", "split2"), (5, "split2", "split1")])
def test_nondeterministic_order_is_explored_both_ways(waits_for, first, second):
    """A final split that waits for lock == 3 (2 + 1: the first split and split1) sees that value only when split1
    adds before split2, and then reads before split2's add: a race whose trace has split1's add and not split2's.
    Waiting for 5 (2 + 3) is the mirror image: split2 first. Each race lies in one order of the middle splits
    only, so finding both shows both orders explored; the lock passing the awaited value is a deadlock."""
    ex = explore_fixup(nondeterministic_fixup((2, 1, 3, 1), final_waits_for=waits_for))
    assert set(ex.findings) == {"SK-FIXUP-RACE", "SK-FIXUP-DEADLOCK"}
    race = ex.findings["SK-FIXUP-RACE"].trace
    assert any(t.startswith(f"{first}: atomic-add") for t in race)
    assert not any(t.startswith(f"{second}: atomic-add") for t in race)
    assert f"partial of {second} is ordered" in ex.findings["SK-FIXUP-RACE"].message


def test_fixup_rejects_a_tile_that_is_not_split():
    with pytest.raises(ValueError, match="at least two splits"):
        deterministic_fixup((4,))


def test_store_groups_of_one_cta_use_their_own_buffers():
    from cutegen.legality.epilogue_store import disjoint_buffers
    own = {"mma0@0": tma_store_epilogue(stages_d=2, subtiles=4, tiles=(0, 2)),
           "mma1@0": tma_store_epilogue(stages_d=2, subtiles=4, tiles=(1,), buffer_base=2)}
    assert disjoint_buffers(own) is None
    shared = dict(own, **{"mma1@0": tma_store_epilogue(stages_d=2, subtiles=4, tiles=(1,), buffer_base=1)})
    v = disjoint_buffers(shared)
    assert v is not None and v.rule == "EPI-STORE-DISJOINT" and "buffer 1" in v.message
    g = tma_store_epilogue(stages_d=2, subtiles=4, tiles=(1,), meta={"peers": {"mma0@0": own["mma0@0"]}})
    assert "EPI-STORE-DISJOINT" in {v.rule_id for v in EPILOGUE_STORE_RULES.evaluate(g)}
    g2 = tma_store_epilogue(stages_d=2, subtiles=4, tiles=(1,), buffer_base=2,
                            meta={"peers": {"mma0@0": own["mma0@0"]}})
    assert EPILOGUE_STORE_RULES.evaluate(g2) == []


def test_cutlass_epilogue_model_is_read_back_from_the_rendered_kernel(monkeypatch, tmp_path, capsys):
    """EPI-STORE-MODEL-MATCH: the D buffers, epilogue tile and subtiles the verifier checks (``epilogue_store_of``)
    are compared with what the freshly rendered CUTLASS kernel asserts CUTLASS's epilogue builder chose (its
    static_asserts, which nvcc checks against the builder's types). A mutated rendering (StagesD 1, another tile)
    and a mutated model (3 D buffers) are both caught; the real pair agrees, and no TMA epilogue on either side is
    agreement too."""
    import json as _json

    import cutegen.pipelines as pipelines
    from cutegen.cli import main
    from cutegen.collective_builder import complete
    from cutegen.commands.check_config import parse_case
    from cutegen.render import render_source
    problem = {"m": 8192, "n": 3072, "k": 1024, "dtype": "bf16", "layout": "tn"}
    p, c = parse_case({"problem": problem, "config": {"tile_shape": [128, 256, 64], "tile_scheduler": "stream_k"}})
    source = render_source(p, complete(p, c))
    assert pipelines.rendered_epilogue(source) == {"epilogue_tile": [128, 32], "stages_c": 4, "stages_d": 2}
    assert pipelines.epilogue_model_mismatch(p, c, source) is None
    one_buffer = source.replace("StagesD == 2", "StagesD == 1")
    assert pipelines.epilogue_model_mismatch(p, c, one_buffer) == \
        "D buffers (StagesD): the verifier models 2, the rendered kernel asserts 1"
    other_tile = source.replace("EpilogueTile{}) == 32", "EpilogueTile{}) == 64")
    assert "epilogue tile" in pipelines.epilogue_model_mismatch(p, c, other_tile)
    assert "asserts only part" in pipelines.epilogue_model_mismatch(p, c, source.replace("StagesD ==", "StagesD !="))
    nosmem = parse_case({"problem": problem, "config": {"tile_shape": [128, 128, 64], "epilogue_schedule": "no_smem"}})
    assert pipelines.epilogue_model_mismatch(*nosmem, render_source(nosmem[0], complete(*nosmem))) is None
    assert "asserts one" in pipelines.epilogue_model_mismatch(*nosmem, source)

    # the model mutated: three D buffers; `cutegen check pipeline` reports the rule and exits 1
    real = pipelines.epilogue_store_of

    def three_buffers(*a, **k):
        from dataclasses import replace
        return {n: replace(g, buffers=3) for n, g in real(*a, **k).items()}

    monkeypatch.setattr(pipelines, "epilogue_store_of", three_buffers)
    case = tmp_path / "sk.json"
    case.write_text(_json.dumps({"problem": problem, "config": {"tile_shape": [128, 256, 64],
                                                                "tile_scheduler": "stream_k"}}))
    assert main(["check", "pipeline", str(case)]) == 1
    out = capsys.readouterr().out
    assert "EPI-STORE-MODEL-MATCH" in out and "the verifier models 3, the rendered kernel asserts 2" in out
