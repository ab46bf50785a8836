"""SearchSpace.shared (search/engine.py): one saturated e-graph per process and (WGMMA K, TMA-loadable, policies),
searched between egglog's push and pop. A search through it must be the search through a fresh space: the same
ranked kernels, costs, judged counts, e-graph size and iteration count, whatever was searched before."""
from __future__ import annotations

from cutegen.problem import GemmProblem
from cutegen.search import engine, search


def _result(problem):
    r = search(problem, 3, device="h200")
    return ([x.to_dict() for x in r.ranked], r.candidates_judged, r.candidates_legal, r.egraph_nodes,
            r.egraph_classes, r.iterations)


def test_a_search_after_another_through_the_shared_space_is_a_fresh_search():
    a = GemmProblem.from_dict({"m": 300, "n": 3584, "k": 3584, "dtype": "bf16", "layout": "tn"})
    b = GemmProblem.from_dict({"m": 40, "n": 5120, "k": 13824, "dtype": "bf16", "layout": "tn"})
    engine._SHARED_SPACES.clear()
    fresh_b = _result(b)                      # b first: its space is built for it
    engine._SHARED_SPACES.clear()
    _result(a)                                # a first, then b through the space a left behind
    after_a = _result(b)
    assert after_a == fresh_b
    assert len(engine._SHARED_SPACES) == 1 and not any(s._in_use for s in engine._SHARED_SPACES.values())


def test_release_pops_the_expansion_and_a_nested_use_gets_its_own_space():
    p = GemmProblem.from_dict({"m": 128, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})
    engine._SHARED_SPACES.clear()
    s1 = engine.SearchSpace.shared(p)
    base = s1._base
    rows_before = {k: len(list(v.rows)) for k, v in base.egg.freeze().functions.items()}
    iters = base.egg.iterations
    s2 = engine.SearchSpace.shared(p)          # nested: the base is in use
    assert s2.egg is not s1.egg and "_base" not in s2.__dict__
    s1.egg.input("Expand", [(*s1.tiles[0], *s1.clusters[0], *s1.policies[0], 0, 1)])
    s1.egg.run("(run-schedule (saturate (run expand)))")
    assert {k: len(list(v.rows)) for k, v in s1.egg.freeze().functions.items()} != rows_before
    s1.release()
    s2.release()
    assert {k: len(list(v.rows)) for k, v in base.egg.freeze().functions.items()} == rows_before
    assert base.egg.iterations == iters and not base._in_use
    s3 = engine.SearchSpace.shared(p)          # free again: the same e-graph
    assert s3.egg is base.egg
    s3.release()
