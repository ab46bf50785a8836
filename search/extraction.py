"""Extraction: egglog's own extractor over the root e-class, priced by the cost model.

The cost model's predictions enter the e-graph as ``CostOf`` facts; the ``price`` ruleset writes
them into egglog's dynamic cost table of ``K`` (in picoseconds, or coarser units for huge problems:
``units_per_us``), and raises every kernel whose
``illegal`` analysis is non-zero to ``ILLEGAL_COST`` (a ``max`` merge, so nothing lowers it again).
The root itself costs ``ILLEGAL_COST``. egglog then extracts the cheapest variants of the root
e-class (``extract <root> n``), all in the engine. An e-node that breaks a rule is therefore never
extracted while a legal one exists, and any extracted key that is not a costed legal candidate is
dropped. Ties are broken by the configuration's JSON text, so the ranking is deterministic.
"""
from __future__ import annotations

from .egg import bindings, term_to_tree
from .schedule_rewrites import ILLEGAL_COST, cost_units, units_per_us


def price(egg, costs: dict) -> None:
    """Load the legal candidates' costs (microseconds) and run the ``price`` ruleset."""
    per_us = units_per_us(c[0] for c in costs.values())
    rows = [(*key[0], *key[1], *key[2], key[3], key[4], cost_units(c[0], per_us)) for key, c in costs.items()]
    egg.input("CostOf", sorted(rows))
    egg.run("(run-schedule (saturate (run price)))")


def extract_ranked(egg, costs: dict, top_k: int, problem=None) -> list[tuple]:
    """Keys (tile, cluster, policy, raster, swizzle) of the best ``top_k`` legal kernels, cheapest first;
    equal costs in the order of ``tie_break`` (``problem``: the problem as costed)."""
    price(egg, costs)
    span = bindings.PanicSpan()
    root = bindings.Call(span, "Root", [bindings.Lit(span, bindings.Int(0))])
    cmd = bindings.UserDefined(span, "extract", [root, bindings.Lit(span, bindings.Int(top_k * 4 + 8))])
    out = egg.engine.run_program(cmd)[0]
    table = _cost_table(egg)
    picked: list[tuple] = []
    for term in out.terms:
        tree = term_to_tree(out.termdag, term)       # ("Impl", ("K", tile, cluster, policy, r, w)) or ("Root", 0)
        if tree[0] != "Impl":
            continue
        k = tree[1]
        key = (_tile(k[1]), tuple(k[2][1:]), tuple(k[3][1:4]), k[4], k[5])
        if key in costs and key not in picked and table.get(key, ILLEGAL_COST) < ILLEGAL_COST:
            picked.append(key)
    picked.sort(key=lambda key: (table[key], *tie_break(problem, costs[key][2].config), costs[key][2].config.to_json()))
    return picked[:top_k]


def simplicity(cfg) -> int:
    """Tie-break toward the scheduler's defaults: equal cost, fewer non-default knobs first."""
    return (cfg.raster_order != "heuristic") + (cfg.raster_swizzle != 1)


def tie_break(problem, cfg) -> tuple[int, int]:
    """Order of candidates the model prices the same: the scheduler's defaults first (fewer non-default
    raster knobs), then a cluster that runs along the raster's fast mode before one across it.

    The model's loads are symmetric in the cluster's orientation (a square tile multicasts as many bytes
    either way), but the H100 is not: over the 19 measured pairs of the seed database (2026-11-24: one
    kernel with a 2x1 and with a 1x2 cluster, the same problem) the cluster across the raster's fast mode
    took 0.96-1.17x the time of the one along it, geomean 1.036x, and was slower in 17 (by more than 4%
    in 9, all problems with far fewer M tiles than N tiles). Where the costs differ the cost decides."""
    simple = simplicity(cfg)
    if problem is None:
        return simple, 0
    from .cost import RASTERS, effective_raster

    cm, cn = cfg.cluster_shape[0], cfg.cluster_shape[1]
    along, _ = effective_raster(problem, cfg.tile_shape, cfg.cluster_shape, RASTERS.index(cfg.raster_order),
                                cfg.raster_swizzle)
    across = (cn > cm) if along == "along_m" else (cm > cn)
    return simple, int(across)


def _cost_table(egg) -> dict:
    """The engine's cost table of K, keyed (tile, cluster, policy, raster, swizzle): what extraction ranks by."""
    f = egg.freeze().functions
    i64 = egg.i64
    tiles = {r.output: tuple(i64(x) for x in r.inputs) for r in f["CtaTile"].rows}
    clusters = {r.output: tuple(i64(x) for x in r.inputs) for r in f["Cl"].rows}
    pols = {r.output: tuple(i64(x) for x in r.inputs)[:3] for r in f["Pol"].rows}
    out: dict = {}
    for r in f["cost_table_K"].rows:
        key = (tiles.get(r.inputs[0]), clusters.get(r.inputs[1]), pols.get(r.inputs[2]), i64(r.inputs[3]),
               i64(r.inputs[4]))
        out[key] = max(out.get(key, 0), i64(r.output))
    return out


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
