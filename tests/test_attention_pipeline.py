"""The FMHA kernels' mbarrier protocols as pipeline terms: the example's kernels pass the temporal checker, its
stage-count limits are found by the explorer (and agree with the ATTN-*-STAGES-KV rules), and mutations of the
protocol (a dropped release, wrong transaction bytes, a wrong arrival count, an early release, a wrong order
barrier parity) are caught, each by its rule."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cutegen.legality.attention import check_attention
from cutegen.legality.attention_pipeline import (build_terms, check_attention_pipeline, check_terms, fmha_tma,
                                                 fmha_tma_cluster, fmha_warp_specialized, protocol_params)
from cutegen.legality.pipeline_term import Arrive, Barrier, MmaWait, Wait
from cutegen.ops.attention.config import EXAMPLE_CONFIGS, AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem

PROBLEM = AttentionProblem(1, 1, 1, 1024, 1024, 128)
TMA1 = dict(schedule="tma", mma_warpgroups=1, stages_q=1)


def ws_term(**kw):
    args = dict(stages_kv=3, stages_q=2, kv_tiles=(3,), bytes_q=16384, bytes_k=32768, bytes_v=32768)
    args.update(kw)
    return fmha_warp_specialized(**args)


def rules(report) -> set[str]:
    return {v.rule_id for v in report.violations if v.enforced}


@pytest.mark.parametrize("d", sorted(EXAMPLE_CONFIGS))
def test_example_protocols_pass(d):
    for c in EXAMPLE_CONFIGS[d]:
        r = check_attention_pipeline(AttentionProblem(1, 1, 1, 1024, 1024, d), c)
        assert r.legal and r.complete, (c.short_name(), [str(v) for v in r.violations])


@pytest.mark.parametrize("stages,legal", [(2, False), (3, True), (4, True)])
def test_ws_kv_stages_found_by_explorer(stages, legal):
    """The static_assert allows 2 K/V stages; a consumer holds V_(j-1), K_j and V_j at once, so 2 deadlock.
    The rule ATTN-WS-STAGES-KV says the same."""
    c = AttentionConfig(stages_kv=stages)
    r = check_attention_pipeline(PROBLEM, c)
    assert r.legal is legal
    if not legal:
        assert "PIPE-DEADLOCK" in rules(r)
    assert ("ATTN-WS-STAGES-KV" in {v.rule_id for v in check_attention(PROBLEM, c).violations}) is (not legal)


@pytest.mark.parametrize("stages,broken", [(2, "PIPE-DEADLOCK"), (3, "PIPE-READ-BEFORE-LOAD"), (4, None),
                                           (5, "PIPE-READ-BEFORE-LOAD"), (6, None)])
def test_tma_kv_stages_found_by_explorer(stages, broken):
    c = AttentionConfig(64, 128, stages_kv=stages, **TMA1)
    r = check_attention_pipeline(AttentionProblem(1, 1, 1, 1024, 1024, 64), c)
    assert r.legal is (broken is None), [str(v) for v in r.violations]
    if broken:
        assert broken in rules(r)
    assert ("ATTN-TMA-STAGES-KV" in {v.rule_id for v in check_attention(PROBLEM, c).violations}) is (broken is not None)


def _drop(term, role_name, pred, nth=0):
    role = term.role(role_name)
    hits = [i for i, op in enumerate(role.ops) if pred(op)]
    i = hits[nth]
    return term.with_role(replace(role, ops=role.ops[:i] + role.ops[i + 1:]))


def test_mutation_dropped_release():
    term = ws_term()
    assert check_terms([term]).legal
    bad = _drop(term, "mma1@0", lambda op: isinstance(op, Arrive) and op.release)
    r = check_terms([bad])
    assert "PIPE-ARRIVAL-COUNT" in rules(r) and not r.legal


def test_mutation_wrong_transaction_bytes():
    # V stages armed with K's bytes while V brings fewer (head_dim_v != head_dim: ATTN-HEAD-DIM-V-EQUAL)
    r = check_terms([ws_term(bytes_v=16384)])
    assert "PIPE-TX-BYTES" in rules(r)
    r = check_terms([ws_term(arm_kv=32768 + 16)])
    assert "PIPE-TX-BYTES" in rules(r)


def test_mutation_wrong_arrival_count():
    # the K/V empty barriers initialized for one consumer warpgroup while two release
    r = check_terms([ws_term(empty_count=128)])
    assert "PIPE-ARRIVAL-COUNT" in rules(r)
    r = check_terms([ws_term(release_arrivals=64)])
    assert "PIPE-ARRIVAL-COUNT" in rules(r)


def test_mutation_release_before_wgmma_retired():
    term = ws_term()
    role = term.role("mma0@0")
    # drop the wait_group that retires Q K^T_1 (and P V_0) before V_0 / K_1 are released
    waits = [i for i, op in enumerate(role.ops) if isinstance(op, MmaWait)]
    i = waits[1]
    bad = term.with_role(replace(role, ops=role.ops[:i] + role.ops[i + 1:]))
    assert "PIPE-RELEASE-BEFORE-MMA-DONE" in rules(check_terms([bad]))


def test_mutation_order_barrier_parity():
    term = ws_term()
    role = term.role("mma1@0")
    i = next(i for i, op in enumerate(role.ops) if isinstance(op, Wait) and op.barrier.startswith("order"))
    flipped = replace(role.ops[i], parity=role.ops[i].parity ^ 1)
    bad = term.with_role(replace(role, ops=role.ops[:i] + (flipped,) + role.ops[i + 1:]))
    r = check_terms([bad])
    assert "PIPE-PHASE-ALTERNATION" in rules(r)
    assert "PIPE-ORDER-EXCLUSIVE" in rules(r)      # warpgroup 1 enters Q K^T beside warpgroup 0


def test_persistent_tiles_of_different_lengths():
    # a causal persistent CTA takes a short tile then a long one (and the reverse)
    for kv in ((1, 3), (3, 1)):
        term = ws_term(kv_tiles=kv, persistent=True)
        assert check_terms([term]).legal, kv
        # without the end-of-tile release of the last V stage the second tile never gets it back
        bad = _drop(term, "mma0@0", lambda op: isinstance(op, Arrive) and op.release, nth=-1)
        assert not check_terms([bad]).legal


def test_pingpong_separate_q_warp():
    term = ws_term(kv_tiles=(2, 1), persistent=True, loads_q_separately=True)
    assert check_terms([term]).legal
    # the load-warp barrier initialized for one warp: the K/V warp passes before the Q warp's first load
    bad = term.with_barrier(Barrier("loadsync@0", 32))
    assert not check_terms([bad]).legal


def test_tma_term_mutations():
    term = fmha_tma(stages_kv=4, kv_tiles=3, bytes_q=8192, bytes_k=16384, bytes_v=16384)
    assert check_terms([term]).legal
    assert "PIPE-TX-BYTES" in rules(check_terms([fmha_tma(stages_kv=4, kv_tiles=3, bytes_q=8192, bytes_k=16384,
                                                          bytes_v=8192)]))
    bad = _drop(term, "wg@0", lambda op: isinstance(op, Arrive) and op.release)
    assert not check_terms([bad]).legal


def test_protocol_params_from_config():
    p = protocol_params(PROBLEM, AttentionConfig())
    assert (p.kernel, p.stages_kv, p.stages_q, p.consumers) == ("fmha_warp_specialized", 5, 2, 2)
    assert (p.bytes_q, p.bytes_kv, p.kv_consumer_arrivals) == (64 * 128 * 2, 128 * 128 * 2, 256)
    terms = build_terms(PROBLEM, AttentionConfig(persistent=True))
    assert [t.meta["kv_tiles"] for t in terms] == [[1, 2], [2, 1], [4, 1]]


def test_cli_check_pipeline_attention(tmp_path, capsys):
    """`cutegen check pipeline FILE.json` on an attention problem: 0 for a proven protocol, 1 for the deadlocking
    2-stage ring (naming the rule), 2 with one line for bad input."""
    from cutegen.cli import main
    problem = {"op": "attention", "batch": 1, "heads_q": 2, "seqlen_q": 1024, "seqlen_kv": 1024, "head_dim": 64}
    f = tmp_path / "a.json"
    f.write_text(json.dumps({"problem": problem, "config": {"tile_q": 128, "tile_kv": 128, "stages_kv": 3}}))
    assert main(["check", "pipeline", str(f)]) == 0
    assert "no deadlock" in capsys.readouterr().out
    f.write_text(json.dumps({"problem": problem, "config": {"tile_q": 128, "tile_kv": 128, "stages_kv": 2}}))
    assert main(["check", "pipeline", str(f)]) == 1
    out = capsys.readouterr().out
    assert "PIPE-DEADLOCK" in out and "ATTN-WS-STAGES-KV" in out
    f.write_text(json.dumps({"problem": problem, "config": {"tile_q": 128, "tile_kv": 128, "stages_kv": 3}}))
    assert main(["check", "pipeline", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["legal"] and doc["protocol"]["stages_kv"] == 3 and doc["protocol"]["bytes_kv"] == 128 * 64 * 2
    f.write_text(json.dumps({"problem": dict(problem, head_dim=7), "config": {}}))
    assert main(["check", "pipeline", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "problem.head_dim" in err[0]


@pytest.mark.parametrize("causal, tile_kv, unequal", [(False, 64, False), (True, 64, True), (True, 128, False)])
def test_tma_cluster_found_by_explorer(causal, tile_kv, unequal):
    """A 2-CTA tma cluster multicasts K/V: the explorer finds a CTA's last release arriving on its peer after the
    peer finished (ATTN-CLUSTER-EXIT) and, where the causal mask gives the cluster's Q blocks unequal trips
    (tile_kv not a multiple of 2 x tile_q), loads armed by one CTA only (ATTN-CLUSTER-CAUSAL). 64 x 128 causal has
    equal trips: the H200 run validated it."""
    p = AttentionProblem(1, 1, 1, 1024, 1024, 64, causal=causal)
    c = AttentionConfig(64, tile_kv, stages_kv=4, cluster_m=2, **TMA1)
    r = check_attention_pipeline(p, c)
    assert r.complete or unequal
    found = rules(r)
    assert "PIPE-ARRIVE-AFTER-EXIT" in found
    if unequal:
        assert {"PIPE-TX-BYTES", "PIPE-DEADLOCK"} <= found
    legal = {v.rule_id for v in check_attention(p, c).violations}
    assert "ATTN-CLUSTER-EXIT" in legal and ("ATTN-CLUSTER-CAUSAL" in legal) is unequal


def test_tma_cluster_term_without_exit_hazard_is_clean():
    """The same cluster term with the hazard taken out (each CTA waits, before it exits, for its peer's last
    releases: what a producer tail would do) passes: the finding is the exit, not the model."""
    term = fmha_tma_cluster(stages_kv=4, kv_tiles=(1, 1), bytes_q=8192, bytes_k=16384, bytes_v=16384)
    roles = []
    for role in term.roles:
        c = role.cta
        # one KV tile: the only cross-CTA arrivals are the releases of K_0's stage 0 (V_0 is never released)
        roles.append(replace(role, ops=role.ops + (Wait(f"empty0@{c}", 0, -1, -1, 0),)))
    fixed = replace(term, roles=tuple(roles))
    assert "PIPE-ARRIVE-AFTER-EXIT" in rules(check_terms([term]))
    r = check_terms([fixed])
    assert r.legal and r.complete, [str(v) for v in r.violations]
