"""Extraction: egglog's extractor over the root e-class with the analytic cost model.

A ``K`` e-node costs its predicted microseconds if its e-class is legal and has been costed,
and infinity otherwise (the ``illegal`` analysis is non-zero, or the candidate was never costed);
``Impl`` and ``Root`` add nothing and infinity respectively. ``extract_variants`` returns the
root's e-nodes cheapest first, which gives the best kernel and the next k. Ties are broken by the
configuration's JSON text, so the ranking is deterministic.
"""
from __future__ import annotations

import math

from egglog import bindings


def extract_ranked(egg, costs: dict, top_k: int) -> list[tuple]:
    """Keys (tile, cluster, policy) of the best ``top_k`` legal kernels, cheapest first."""
    frozen = egg.freeze().functions
    i64 = egg.i64
    if "K" not in frozen or not frozen["K"].rows:
        return []
    tiles = {r.output: tuple(i64(x) for x in r.inputs) for r in frozen["CtaTile"].rows}
    clusters = {r.output: tuple(i64(x) for x in r.inputs) for r in frozen["Cl"].rows}
    pols = {r.output: tuple(i64(x) for x in r.inputs) for r in frozen["Pol"].rows}
    illegal = {r.inputs[0]: i64(r.output) for r in frozen["illegal"].rows} if "illegal" in frozen else {}
    knode_key: dict = {}
    for r in frozen["K"].rows:
        t, c, p = tiles.get(r.inputs[0]), clusters.get(r.inputs[1]), pols.get(r.inputs[2])
        if t is None or c is None or p is None:
            continue
        knode_key[tuple(r.inputs)] = ((t, c, p[:3]), r.output)

    def enode_cost(name: str, args: list):
        if name == "K":
            hit = knode_key.get(tuple(args))
            if hit is None:
                return math.inf
            key, cls = hit
            if illegal.get(cls, 0) or key not in costs:
                return math.inf
            return costs[key][0]
        if name == "Root":
            return math.inf
        return 0.0

    model = bindings.CostModel(lambda name, c, cs: c + sum(cs), enode_cost,
                               lambda name, v, cs: sum(cs), lambda sort, v: 0.0)
    extractor = bindings.Extractor(["Gemm"], egg.engine, model)
    span = bindings.PanicSpan()
    sort, root = egg.engine.eval_expr(bindings.Call(span, "Root", [bindings.Lit(span, bindings.Int(0))]))
    termdag = bindings.TermDag()
    # ask for more variants than needed: ties and infinite entries are filtered below
    variants = extractor.extract_variants(egg.engine, termdag, root, top_k * 4 + 8, sort)
    from .egg import term_to_tree

    picked = []
    for c, term in variants:
        if not math.isfinite(c):
            continue
        tree = term_to_tree(termdag, term)          # ("Impl", ("K", tile, cluster, policy, r, w))
        k = tree[1]
        key = (_tile(k[1]), tuple(k[2][1:]), tuple(k[3][1:4]))
        if key in costs and key not in picked:
            picked.append(key)
    # deterministic: cost, then the configuration text
    picked.sort(key=lambda key: (costs[key][0], costs[key][2].config.to_json()))
    return picked[:top_k]


def _tile(term) -> tuple:
    """The (M, N, K) of an extracted tile term in whichever form the extractor chose."""
    name = term[0]
    if name == "CtaTile":
        return tuple(term[1:4])
    if name == "Tiled":
        mma, wm, wn, kr = term[1:5]
        return (64 * wm, mma[2] * wn, mma[3] * kr)
    if name == "WgSplit":
        inner = _tile(term[1])
        return (inner[0] * term[2], inner[1], inner[2])
    if name == "ClusterSplit":
        ct, cm, cn = term[1], term[2], term[3]
        return (ct[1] // cm, ct[2] // cn, ct[3])
    raise ValueError(f"unknown tile form {name}")
