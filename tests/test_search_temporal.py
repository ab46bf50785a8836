"""The pipeline's temporal choices: fields that keep every hash at default, terms the search rewrites
between, each judged by the pipeline checker (a pruned choice names its PIPE-* rule), the DSL template
rendering the chosen protocol, and the C++ backends refusing what CUTLASS's collectives fix."""
from __future__ import annotations

import functools

import pytest

from cutegen import GemmProblem, KernelConfig
from cutegen.errors import FieldError
from cutegen.legality.pipeline import Bounds, check_pipeline
from cutegen.legality.pipeline_builders import tma_warp_specialized
from cutegen.legality.pipeline_explore import explore
from cutegen.pipelines import pipeline_of
from cutegen.render import cutlass_supports
from cutegen.search import temporal
from cutegen.search.engine import search

import pipeline_mutants as M

BF16 = GemmProblem.from_dict({"m": 8192, "n": 3072, "k": 1024, "dtype": "bf16", "layout": "tn"})


def rules(report):
    return {v.rule_id for v in report.violations}


def test_fields_at_default_leave_the_hash_alone():
    base = KernelConfig.from_dict(dict(tile_shape=(128, 256, 64)))
    same = base.replace(prefetch_distance=0, release_lag=1, pingpong_order="after_mma")
    assert same.to_json() == base.to_json() and same.hash == base.hash and same.short_name() == base.short_name()
    for field in ("prefetch_distance", "release_lag", "pingpong_order"):
        assert field not in base.to_dict()
    other = base.replace(release_lag=0)
    assert other.hash != base.hash and other.to_dict()["release_lag"] == 0 and other.short_name().endswith("_rl0")
    with pytest.raises(FieldError, match="release_lag"):
        KernelConfig.from_dict(dict(tile_shape=(128, 256, 64), release_lag=2))
    with pytest.raises(FieldError, match="pingpong_order"):
        KernelConfig.from_dict(dict(tile_shape=(128, 256, 64), pingpong_order="sometimes"))


@pytest.mark.parametrize("prefetch,lag,legal", [(None, 1, True), (3, 1, True), (2, 1, True), (1, 1, False),
                                                (1, 0, True), (None, 0, True)])
def test_prefetch_distance_against_the_release_lag(prefetch, lag, legal):
    term = tma_warp_specialized(stages=4, k_blocks=5, tiles=2, bytes_a=16384, bytes_b=8192, consumers=2,
                                prefetch=prefetch, release_lag=lag)
    report = check_pipeline(term, bounds=Bounds(stages=None))
    assert report.legal == legal, [str(v) for v in report.violations]
    if not legal:
        assert {"PIPE-PREFETCH-DISTANCE", "PIPE-DEADLOCK"} <= rules(report)


def test_prefetch_wait_on_the_wrong_parity_is_rejected():
    from dataclasses import replace

    from cutegen.legality.pipeline_term import Role, Wait
    term = tma_warp_specialized(stages=3, k_blocks=4, tiles=2, bytes_a=16384, bytes_b=8192, consumers=2, prefetch=2)
    prod = term.role("producer@0")
    i = next(i for i, o in enumerate(prod.ops) if isinstance(o, Wait) and o.release_of is not None)
    ops = list(prod.ops)
    ops[i] = replace(ops[i], parity=ops[i].parity ^ 1)
    report = check_pipeline(term.with_role(Role(prod.name, prod.cta, tuple(ops))), bounds=Bounds(stages=None))
    assert "PIPE-PHASE-ALTERNATION" in rules(report)


def test_pingpong_order_choices():
    pp = functools.partial(tma_warp_specialized, stages=3, k_blocks=2, tiles=5, bytes_a=16384, bytes_b=8192,
                           consumers=2, pingpong=True)
    assert check_pipeline(pp(order_after_release=True), bounds=Bounds(stages=None)).legal
    assert "PIPE-READ-BEFORE-LOAD" in rules(check_pipeline(pp(ordering=False), bounds=Bounds(stages=None)))


def _search_lines(backend, **cfg):
    res = search(BF16, 1, explain=True, backend=backend)
    return res, "\n".join(res.ranked[0].chain)


def test_search_default_choice_is_todays_and_pruned_choices_name_their_rule():
    res, text = _search_lines("dsl")
    best = res.ranked[0].config
    assert (best.prefetch_distance, best.release_lag, best.pingpong_order) == (0, 1, "after_mma")
    assert "temporal choice: Tp(" in text and "[today's protocol]" in text
    # prefetch distance 1 with one WGMMA batch in flight deadlocks: pruned by the checker, rule named
    pruned = [ln for ln in text.splitlines() if "prefetch=1, release_lag=1" in ln]
    assert pruned and "pruned: PIPE-PREFETCH-DISTANCE" in pruned[0]
    assert "checker: legal" in text


def test_cutlass_backend_keeps_todays_protocol_and_says_why():
    res, text = _search_lines("cutlass")
    best = res.ranked[0].config
    assert best.to_dict() == best.replace(release_lag=1, prefetch_distance=0).to_dict()
    assert "CUTLASS-TEMPORAL" in text
    cfg = KernelConfig.from_dict(dict(tile_shape=(128, 256, 64), release_lag=0))
    assert cutlass_supports(BF16, cfg)[0].startswith("CUTLASS-TEMPORAL")


def test_refine_takes_a_cheaper_legal_protocol_and_prices_out_an_illegal_one(monkeypatch):
    # make the release-early protocols the cheapest: the search must take the cheapest *legal* one
    from cutegen.search import cost as costmod
    real = costmod.temporal_cost

    def fake(bd, stages, prefetch, lag, order):
        extra, parts = real(bd, stages, prefetch, lag, order)
        return (-100.0 + prefetch if lag == 1 and prefetch == 1 else (-50.0 if lag == 0 else extra)), parts
    monkeypatch.setattr(costmod, "temporal_cost", fake)
    from cutegen.collective_builder import complete
    cfg = complete(BF16, KernelConfig.from_dict(dict(tile_shape=(128, 256, 64))))
    bd = costmod.config_cost(BF16, cfg, cfg.stages)[1]
    picks = temporal.refine(BF16, [(cfg, cfg.stages, bd)], "dsl", lambda r: 0, explain=True)
    # (prefetch 1, lag 1) is cheapest but deadlocks; the cheapest legal is a lag-0 protocol
    assert picks[0].config.release_lag == 0
    assert any("prefetch=1, release_lag=1" in ln and "PIPE-PREFETCH-DISTANCE" in ln for ln in picks[0].lines)


def test_dsl_template_renders_the_choice():
    from cutegen.dsl import render_dsl
    base = KernelConfig.from_dict(dict(tile_shape=(128, 256, 64)))
    src0 = render_dsl(BF16, base)
    assert "sync_object_empty.wait(released" not in src0 and "wait_group(1)" in src0
    src_pf = render_dsl(BF16, base.replace(prefetch_distance=2))
    assert "if fills >= 2:" in src_pf and "sync_object_empty.wait(released" in src_pf
    src_rl = render_dsl(BF16, base.replace(release_lag=0))
    assert "wait_group(1)" not in src_rl and "Release lag 0" in src_rl
    for src in (src0, src_pf, src_rl):
        compile(src, "kernel.py", "exec")


def test_reduced_exploration_finds_what_the_full_one_finds():
    # the partial-order reduction (opt-in) keeps every mutant's rule and every deadlock
    build = functools.partial(tma_warp_specialized, bytes_a=16384, bytes_b=8192, tiles=2, consumers=2)
    term = build(stages=3, k_blocks=4)
    for mutate in (M.drop_expect_tx, M.wrong_byte_count, M.arrival_count_plus_one, M.arrival_count_minus_one,
                   M.release_before_last_read, M.load_before_empty_wait, M.no_init_sync):
        t = mutate(term)
        full, red = explore(t), explore(t, reduce=True)
        assert set(full.findings) == set(red.findings), mutate.__name__
        assert red.states <= full.states
    deadlock = build(stages=4, k_blocks=5, prefetch=1)
    assert "PIPE-DEADLOCK" in explore(deadlock, reduce=True).findings


def test_search_cli_explain_shows_the_temporal_choice(capsys):
    from cutegen.cli import main
    assert main(["search", "--m", "4096", "--n", "4096", "--k", "4096", "--dtype", "bf16", "--layout", "tn",
                 "--backend", "dsl", "--explain", "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "temporal choice: Tp(" in out and "pruned: PIPE-PREFETCH-DISTANCE" in out
    assert "tile = temporal" not in out


@pytest.mark.parametrize("mutate,rule", [(M.swap_order_arrivals, "PIPE-DEADLOCK"),
                                         (M.drop_order_wait, "PIPE-ORDER-EXCLUSIVE"),
                                         (M.wrong_wait_parity, "PIPE-READ-BEFORE-LOAD")])
def test_reduced_exploration_keeps_pingpong_findings(mutate, rule):
    term = tma_warp_specialized(stages=3, k_blocks=2, tiles=5, bytes_a=16384, bytes_b=8192, consumers=2,
                                pingpong=True)
    full, red = explore(mutate(term)), explore(mutate(term), reduce=True)
    assert rule in full.findings and set(full.findings) == set(red.findings)
    unordered = tma_warp_specialized(stages=3, k_blocks=2, tiles=5, bytes_a=16384, bytes_b=8192, consumers=2,
                                     pingpong=True, ordering=False)
    assert set(explore(unordered).findings) == set(explore(unordered, reduce=True).findings)


def test_pipeline_speed_bench_builds_its_terms():
    # the bench (bench/pipeline_speed.py) must keep up with the builder's parameters; exploring is its job
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "bench" / "pipeline_speed.py"
    spec = importlib.util.spec_from_file_location("pipeline_speed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, config, backend, cluster, bounds in mod.CASES:
        built = mod.terms(config, backend, cluster, bounds)
        assert built and all(t.ctas == (2 if cluster else 1) for t in built), name


def test_pingpong_order_choices_in_the_search():
    from cutegen.collective_builder import complete
    from cutegen.search import cost as costmod
    cfg = complete(BF16, KernelConfig.from_dict(dict(tile_shape=(128, 128, 64), mainloop_schedule="pingpong",
                                                     epilogue_schedule="tma_warp_specialized")))
    bd = costmod.config_cost(BF16, cfg, cfg.stages)[1]
    pick = temporal.refine(BF16, [(cfg, cfg.stages, bd)], "dsl", lambda r: 0, explain=True)[0]
    text = "\n".join(pick.lines)
    assert "rewrites: release-early, shorter-prefetch, order" in text
    none = [ln for ln in pick.lines if f"prefetch={cfg.stages}, release_lag=1, order=none" in ln]
    assert none and "pruned: " in none[0] and "PIPE-READ-BEFORE-LOAD" in none[0]
    late = [ln for ln in pick.lines if f"prefetch={cfg.stages}, release_lag=1, order=after_release" in ln]
    assert late and "checker: legal" in late[0]
    assert pick.config.pingpong_order == "after_mma"       # the late hand-over costs a k-block per tile
