"""The attention e-graph search: legal winners, deterministic, under a second, explained; the cost model's
calibration against the issue's CUTLASS 88 figures (fit set and held-out set)."""
from __future__ import annotations

import time

import pytest

from cutegen.core import registry
from cutegen.core import search as core_search
from cutegen.legality.attention import check_attention
from cutegen.legality.attention_pipeline import check_attention_pipeline
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.search.attention import calibration
from cutegen.search.attention.cost import config_cost, trip_counts
from cutegen.search.attention.engine import candidates, config_of, key_of, search, space

PROBLEMS = [
    AttentionProblem(4, 32, 32, 4096, 4096, 128),
    AttentionProblem(4, 32, 32, 4096, 4096, 128, causal=True),
    AttentionProblem(8, 16, 16, 2048, 2048, 64, causal=True),
    AttentionProblem(1, 32, 8, 16384, 16384, 128, causal=True),
    AttentionProblem(16, 32, 8, 16, 8192, 128),
    AttentionProblem(2, 16, 16, 4096, 4096, 80, dtype="f16"),
    AttentionProblem(4, 32, 32, 4096, 4096, 256),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.name)
def test_winner_is_legal_renderable_and_its_pipeline_verified(problem):
    r = search(problem, 3)
    assert r.ranked, r.pruned_by_rule
    costs = [x.cost for x in r.ranked]
    assert costs == sorted(costs)
    for x in r.ranked:
        rep = check_attention(problem, x.config)
        assert rep.legal and rep.search_legal, [str(v) for v in rep.violations + rep.warnings]
        assert registry.backend_refusals(problem, x.config, "cutlass") == []
    pipe = check_attention_pipeline(problem, r.ranked[0].config)
    assert pipe.legal and pipe.complete


def test_search_is_deterministic_and_under_a_second():
    p = PROBLEMS[1]
    search(p, 5)                                   # warm imports
    t0 = time.perf_counter()
    a = search(p, 5)
    seconds = time.perf_counter() - t0
    b = search(p, 5)
    assert [x.config.to_json() for x in a.ranked] == [x.config.to_json() for x in b.ranked]
    assert [x.cost for x in a.ranked] == [x.cost for x in b.ranked]
    assert seconds < 1.0, seconds                  # measured 0.15-0.6 s on the 2-core dev machine


def test_explain_names_the_pruning_rules_and_the_chain():
    p = PROBLEMS[0]
    r = search(p, 3, explain=True)
    text = r.explain()
    assert "ATTN-SMEM-CAPACITY" in r.pruned_by_rule and "ATTN-WS-STAGES-KV" in r.pruned_by_rule
    assert "ATTN-SETMAXNREG-RANGE" in r.pruned_by_rule          # one consumer warpgroup, setmaxnreg 488
    assert sum(r.pruned_by_rule.values()) + r.candidates_legal == r.candidates_total
    assert "reached by: QT(" in text and "PerWarpgroup" in text
    assert r.egraph_nodes > r.candidates_total                  # every candidate is a term, plus the rewrites
    # the cheaper-but-illegal list gives each kernel's rule
    assert all(x["cost"] < r.ranked[0].cost and x["reason"].startswith(x["rule"]) for x in r.rejected)


def test_pingpong_is_one_eclass_with_cooperative_persistent_q_warp():
    """The builder's equality: the extracted spelling is ws_pingpong; no cooperative+persistent+Q-warp twin."""
    r = search(PROBLEMS[0], 10)
    names = [x.config.to_json() for x in r.ranked]
    assert len(names) == len(set(names))
    for x in r.ranked:
        c = x.config
        assert not (c.schedule == "ws_cooperative" and c.persistent and c.loads_q_separately)


def test_stage_counts_are_one_class_extracting_the_cheapest():
    r = search(PROBLEMS[0], 5)
    best = r.ranked[0]
    for skv in range(3, 9):
        c = best.config.replace(stages_kv=skv)
        if check_attention(PROBLEMS[0], c).search_legal:
            assert config_cost(PROBLEMS[0], c, check_attention(PROBLEMS[0], c).smem_bytes)[0] >= best.cost - 1e-9


def test_registry_parts_and_core_search():
    p = PROBLEMS[2]
    op = registry.operation_of(p)
    assert op.search is not None and op.space is not None and op.cost is not None
    assert len(list(op.space(p))) == len(candidates(p))
    r = core_search.search(p, 2)
    assert r.ranked and r.ranked[0].config.to_json() == search(p, 1).ranked[0].config.to_json()
    assert registry.rule_sets("attention") and all(r.id.startswith("ATTN-") for r in registry.all_rules("attention"))
    with pytest.raises(ValueError):
        op.cost(p, r.ranked[0].config.replace(stages_kv=2))      # no cost for an illegal config


def test_key_round_trip():
    for c in space(PROBLEMS[0])[:200]:
        assert config_of(key_of(c)) == c


def test_causal_trip_counts():
    p = AttentionProblem(1, 1, 1, 512, 512, 64, causal=True)
    assert list(trip_counts(p, 128, 128)) == [1, 2, 3, 4]
    assert list(trip_counts(p, 128, 64)) == [2, 4, 6, 8]
    p = AttentionProblem(1, 1, 1, 512, 256, 64, causal=True)       # top-left: rows past 256 see every key
    assert list(trip_counts(p, 128, 128)) == [1, 2, 2, 2]
    assert list(trip_counts(AttentionProblem(1, 1, 1, 512, 300, 64), 128, 128)) == [3, 3, 3, 3]


def test_cost_calibration_fit_and_held_out():
    """The fitted constants (OVERLAP_LOSS and the H200 terms: CTA launch, the persistent shares, the K/V ring) are
    what ``calibration.fit_h200`` chooses on every committed H200 timing (search/attention/measured.py); held out
    shape by shape (fit on the others, predict it), the errors stay near the in-sample ones. Errors: geometric mean
    of |log(predicted / measured)|, as fractions; regret: the measured time of the model's pick among the kernels
    one run timed on one shape, over the fastest."""
    from cutegen.search.attention import cost, measured
    records = [t for t in measured.load() if not t.decode]
    assert len(records) >= 220
    fitted = calibration.fit_h200(records, passes=3)
    assert fitted == {k: getattr(cost, k) for k in calibration.H200_GRID}
    held = calibration.heldout_h200(records, passes=1)["heldout"]
    assert held["absolute"] < 0.05, held               # 4.4% when committed (3 passes; 225 records)
    assert held["relative"] < 0.04, held               # 3.3%
    assert held["regret_geomean"] < 1.02, held         # 1.014
    # without the H200 terms the same records are priced worse (main's model: 16.2%, 4.9%, 1.053)
    zero = {"CTA_LAUNCH_CLK": 0.0, "PERSISTENT_KV_SHARE": 0.0, "QSEP_KV_SHARE": 0.0, "Q_PREFETCH_KV_SHARE": 0.0,
            "QUEUE_LOSS": 0.0}
    bare = calibration.h200_errors(records, calibration._predict_all(records, zero))
    assert bare["absolute"] > 2 * held["absolute"] and bare["regret_geomean"] > held["regret_geomean"]
    # the H100 figures of the example's best kernel (the first calibration): the H200 timings of the same
    # kernels run 10-15% below them, so the H200 model predicts below the H100 figures, never above
    for ratio in calibration.errors(tuple(calibration.EXAMPLE_88_H100)).values():
        assert 0.65 < ratio < 1.02, ratio


def test_bad_input_is_one_field_error():
    from cutegen.errors import FieldError
    from cutegen.problem import GemmProblem
    with pytest.raises(FieldError, match="^problem: expected an AttentionProblem"):
        search(GemmProblem(m=128, n=128, k=128), 1)
    with pytest.raises(FieldError, match="^top_k"):
        search(PROBLEMS[0], 0)
    with pytest.raises(FieldError):
        search(PROBLEMS[0], 1, backend="dsl")          # the registry: not a backend of attention


def test_no_legal_kernel_is_explained():
    p = AttentionProblem(1, 8, 8, 1024, 1024, 128, head_dim_v=64)
    r = search(p, 3, explain=True)
    assert r.ranked == [] and r.candidates_legal == 0
    assert "no legal kernel" in r.explain() and "ATTN-HEAD-DIM-V-EQUAL" in r.pruned_by_rule


@pytest.mark.parametrize("problem", PROBLEMS[:3], ids=lambda p: p.name)
def test_extraction_finds_the_cheapest_legal_candidate(problem):
    """egglog's extraction (legality lattice + cost table) agrees with judging and pricing every candidate in
    Python: the same cheapest cost, and every cheaper candidate is illegal or refused."""
    from cutegen.legality.attention import AttentionContext, first_pruning_violation
    best = None
    for c in candidates(problem):
        ctx = AttentionContext(problem, c)
        if first_pruning_violation(ctx) is not None or registry.backend_refusals(problem, c, "cutlass"):
            continue
        us = config_cost(problem, c, ctx.smem_bytes)[0]
        best = us if best is None else min(best, us)
    r = search(problem, 1)
    assert r.ranked[0].cost == pytest.approx(best, rel=1e-9)


def test_decode_gqa_packing_is_priced():
    """The ABI packs a decode-like grouped BHSD problem into one (group x seqlen_q)-row problem per KV head: a
    quarter of the CTA tiles for group 4, and cheaper than the same problem in BSHD (not packed)."""
    from cutegen.ops.attention.config import AttentionConfig
    c = AttentionConfig(128, 128, stages_kv=4)
    packed = AttentionProblem(16, 32, 8, 16, 8192, 128, layout="bhsd")
    plain = AttentionProblem(16, 32, 8, 16, 8192, 128, layout="bshd")
    us_p, br_p = config_cost(packed, c, 100000)
    us_n, br_n = config_cost(plain, c, 100000)
    assert br_p["packed_gqa"] and not br_n["packed_gqa"]
    assert (br_p["cta_tiles"], br_n["cta_tiles"]) == (16 * 8, 16 * 32)
    assert us_p < us_n
    assert not config_cost(AttentionProblem(16, 32, 8, 16, 8192, 128, layout="bhsd", causal=True), c, 100000)[1][
        "packed_gqa"]


def test_verify_pipeline_option(monkeypatch):
    """verify_pipeline: the ranked kernels' protocol terms go through the temporal checker; a kernel whose protocol
    broke a PIPE rule would be dropped and counted under that rule."""
    from cutegen.search.attention import engine
    p = AttentionProblem(16, 32, 8, 16, 8192, 128)
    plain = search(p, 2)
    checked = search(p, 2, verify_pipeline=True)
    assert [x.config for x in checked.ranked] == [x.config for x in plain.ranked]
    assert checked.ranked[0].chain[-1].startswith("pipeline: every interleaving")
    first = plain.ranked[0].config
    real = engine._pipeline_violations
    monkeypatch.setattr(engine, "_pipeline_violations",
                        lambda prob, c: ["PIPE-DEADLOCK"] if c == first else real(prob, c))
    r = search(p, 2, verify_pipeline=True)
    assert first not in [x.config for x in r.ranked] and r.pruned_by_rule["PIPE-DEADLOCK"] == 1
    assert r.ranked[0].config == plain.ranked[1].config
