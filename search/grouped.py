"""The grouped GEMM search (issue 26): grouped kernels as e-graph terms beside GEMM's, judged by the grouped
rules, priced by the uneven-distribution cost model, extracted by egglog.

Terms (one e-graph; GEMM's tile terms and their rewrites are reused as they are):

  tile            CtaTile(m, n, k) = Tiled(Wgmma(64, n', kk), wm, wn, kr) = WgSplit(..) = ClusterSplit(..)
                  (search/schedule_rewrites.py ``tiles`` and ``splits``: the same tile language as GEMM)
  schedule        PtrCoop | PtrPingpong   (KernelPtrArrayTmaWarpSpecializedCooperative / ...Pingpong)
  tile scheduler  GroupSched(raster)      (PersistentTileSchedulerSm90Group over the groups' linearised tiles)
                  GroupSched(RasterHeuristic) = GroupSched(AlongN) when the group sizes are on the device:
                  the scheduler then sees problem blocks (sm_count, 1) and get_rasterization_order picks AlongN
                  (tile_scheduler_params.h:1662-1669); one e-class, so only one of them is judged
  orientation     GMul(T, N, K) = GTranspose(GMul(N, T, K)) for decode-sized groups (swap AB per group:
                  D_i^T = W_i X_i^T; the tokens go on the tile's N mode)
  stages          GK(.., 0) = GK(.., S): stage count auto is what the ptr-array builder resolves
  kernels         Grouped(0) = GImpl(GK(tile, cluster, schedule, scheduler, orientation, stages)) for every
                  judged candidate: all compute the same D_i.

Candidates are every reachable (tile, cluster, schedule, raster class, orientation), restricted to the tile
widths that make sense for the orientation (``TOKEN_TILES_N`` when swapped, ``WEIGHT_TILES_N`` otherwise: a
search-space bound, not a legality rule). They are priced first (search/grouped_cost.py), then judged in cost
order by the grouped rules (legality/grouped_gemm.py, which also runs every GEMM rule on the per-group GEMM)
until the top k legal are certain; a judged candidate's broken rules become the ``gillegal`` analysis of its
e-class (a bit lattice joined by ``|``), its cost an entry of egglog's dynamic cost table, and egglog extracts
the cheapest variants of the root.
"""
from __future__ import annotations

import math
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from .egg import Egg, bindings, term_to_tree
from .schedule_rewrites import ILLEGAL_COST, SCHEDULE_RULES, SCHEDULE_SORTS, cost_units, units_per_us

# seeds of the tile language for grouped kernels
INSTR_N = (8, 16, 32, 64, 96, 128, 192, 256)
WARPGROUPS_M = (1, 2, 4)                 # tile M 64, 128, 256 (the config's domain)
INSTR_PER_TILE_N = (1, 2)
TILE_K = {"bf16": (64, 128), "e4m3": (64, 128)}   # k-blocks of 4-8 WGMMA k-steps
CLUSTERS = ((1, 1), (2, 1), (1, 2))
SCHEDULES = ("ptr_cooperative", "ptr_pingpong")
RASTERS = ("heuristic", "along_m", "along_n")
# the search space's tile widths per orientation (bounds, not rules): unswapped, N (the weights' rows) is
# wide; swapped, the tile's N mode holds a group's few tokens
WEIGHT_TILES_N = (64, 128, 192, 256)
TOKEN_TILES_N = (8, 16, 32, 64)
DECODE_ROWS = 64         # swap AB is offered where the used groups average at most one WGMMA M mode of rows
MIN_JUDGED = 32
MAX_JUDGED = 400

GROUPED_SORTS = """
(datatype GSched (PtrCoop) (PtrPingpong))
(datatype GRaster (RasterHeuristic) (AlongM) (AlongN))
(datatype GScheduler (GroupSched GRaster))
(datatype Orient (AsStated) (SwapAB))
(datatype GKernel (GK Tile Cluster GSched GScheduler Orient i64))
(datatype GProblem (Grouped i64) (GImpl GKernel))
(datatype GMul (GMulOf i64 i64 i64) (GTranspose GMul))
(function sched_of (i64) GSched :no-merge)
(function raster_of (i64) GRaster :no-merge)
(function orient_of (i64) Orient :no-merge)
(relation DeviceShapes ())
(relation DecodeSized ())
(relation GExpand (i64 i64 i64 i64 i64 i64 i64 i64))
(relation GStagesOf (i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation GRejected (i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation GViolates (GKernel i64))
(relation GCostOf (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(function cost_table_GK (Tile Cluster GSched GScheduler Orient i64) i64 :merge (max old new))
(function cost_table_Grouped (i64) i64 :no-merge)
(function gillegal (GKernel) i64 :merge (| old new))
"""

GROUPED_RULES = """
(set (sched_of 0) (PtrCoop))
(set (sched_of 1) (PtrPingpong))
(set (raster_of 0) (RasterHeuristic))
(set (raster_of 1) (AlongM))
(set (raster_of 2) (AlongN))
(set (orient_of 0) (AsStated))
(set (orient_of 1) (SwapAB))
(ruleset gproblem)
(rule ((DecodeSized) (= p (GMulOf t n k))) ((union p (GTranspose (GMulOf n t k)))) :ruleset gproblem)
(rewrite (GTranspose (GTranspose p)) p :ruleset gproblem)
(ruleset gsched)
(rule ((= r (raster_of i))) ((GroupSched r)) :ruleset gsched)
(rule ((DeviceShapes)) ((union (GroupSched (RasterHeuristic)) (GroupSched (AlongN)))) :ruleset gsched)
(ruleset gexpand)
(rule ((GExpand m n k cm cn s r o) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= sc (sched_of s))
       (= ra (raster_of r)) (= ori (orient_of o)))
      ((union (Grouped 0) (GImpl (GK t c sc (GroupSched ra) ori 0)))) :ruleset gexpand)
(rule ((GStagesOf m n k cm cn s r o st) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= sc (sched_of s))
       (= ra (raster_of r)) (= ori (orient_of o)) (= x (GK t c sc (GroupSched ra) ori 0)))
      ((union x (GK t c sc (GroupSched ra) ori st))) :ruleset gexpand)
(rule ((GRejected m n k cm cn s r o i) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= sc (sched_of s))
       (= ra (raster_of r)) (= ori (orient_of o)) (= x (GK t c sc (GroupSched ra) ori 0)))
      ((GViolates x i)) :ruleset gexpand)
(rule ((GViolates x i)) ((set (gillegal x) (<< 1 (min i 62)))) :ruleset gexpand)
(ruleset gprice)
(rule ((GCostOf m n k cm cn s r o st ps) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= sc (sched_of s))
       (= ra (raster_of r)) (= ori (orient_of o)) (= x (GK t c sc (GroupSched ra) ori st)))
      ((set (cost_table_GK t c sc (GroupSched ra) ori st) ps)) :ruleset gprice)
(rule ((= x (GK t c sc g ori st)) (= bits (gillegal x)) (!= bits 0))
      ((set (cost_table_GK t c sc g ori st) 1000000000000000)) :ruleset gprice)
(rule ((= g (Grouped i))) ((set (cost_table_Grouped i) 1000000000000000)) :ruleset gprice)
"""


@dataclass
class GroupedRanked:
    config: Any                 # GroupedGemmConfig, stages resolved
    cost: float                 # predicted microseconds
    breakdown: dict
    chain: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"config": self.config.to_dict(), "cost": round(self.cost, 4), "breakdown": self.breakdown}


@dataclass
class GroupedSearchResult:
    problem: Any
    ranked: list
    search_seconds: float
    egraph_nodes: int
    egraph_classes: int
    iterations: int
    candidates_total: int
    candidates_judged: int
    candidates_legal: int
    pruned_by_rule: dict
    peak_rss_mb: float
    orientations: list = field(default_factory=list)
    raster_classes: dict = field(default_factory=dict)
    rejected: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"problem": self.problem.to_dict(), "search_seconds": round(self.search_seconds, 4),
                "egraph_nodes": self.egraph_nodes, "egraph_classes": self.egraph_classes,
                "iterations": self.iterations, "candidates_total": self.candidates_total,
                "candidates_judged": self.candidates_judged, "candidates_legal": self.candidates_legal,
                "pruned_by_rule": dict(sorted(self.pruned_by_rule.items())),
                "pruned_by_cost_bound": self.candidates_total - self.candidates_judged,
                "orientations": self.orientations, "raster_classes": self.raster_classes,
                "peak_rss_mb": round(self.peak_rss_mb, 1), "ranked": [r.to_dict() for r in self.ranked]}


def decode_sized(problem) -> bool:
    """Do the used groups average at most DECODE_ROWS rows (where swap AB is offered)?"""
    sizes = [m for m in problem.group_sizes if m]
    return bool(sizes) and sum(sizes) / len(sizes) <= DECODE_ROWS


def rule_index() -> dict[str, int]:
    from cutegen.core import registry
    return {rid: i for i, rid in enumerate(registry.config_rule_ids("grouped_gemm"))}


class GroupedSpace:
    """The saturated e-graph of one grouped problem's choices before any candidate is judged."""

    def __init__(self, problem):
        from cutegen.dtypes import DTYPES
        self.problem = problem
        kk = DTYPES[problem.dtype].wgmma_k
        self.egg = Egg(SCHEDULE_SORTS + SCHEDULE_RULES + GROUPED_SORTS + GROUPED_RULES)
        self.egg.input("InstrSeed", [(n, kk) for n in INSTR_N])
        self.egg.input("RepeatSeed", [(wm, wn, tk // kk) for wm in WARPGROUPS_M for wn in INSTR_PER_TILE_N
                                      for tk in TILE_K[problem.dtype]])
        self.egg.input("ClusterSeed", CLUSTERS)
        # the group sizes reach the kernel only on the device (offs / masked counts): every launch's case
        self.egg.run("(DeviceShapes)")
        if decode_sized(problem):
            self.egg.run("(DecodeSized)")
        self.egg.run(f"(let $groot (GMulOf {problem.total_tokens} {problem.n} {problem.k}))")
        self.egg.run("(run-schedule (saturate (run tiles)) (saturate (run splits)) (saturate (run gproblem)) "
                     "(saturate (run gsched)))")
        f = self.egg.freeze().functions
        i64 = self.egg.i64
        self.tiles = sorted({tuple(i64(x) for x in r.inputs) for r in f["CtaTile"].rows})
        self.clusters = sorted({tuple(i64(x) for x in r.inputs) for r in f["Cl"].rows})
        self._tile_class = {tuple(i64(x) for x in r.inputs): r.output for r in f["CtaTile"].rows}
        root = next(r.output for r in f["$groot"].rows)
        self.orientations = [False] + ([True] if any(r.output == root for r in f["GTranspose"].rows) else [])
        # raster codes by scheduler e-class: one representative (the smallest code) per class
        rasters = {i64(r.inputs[0]): r.output for r in f["raster_of"].rows}
        sched_class = {r.inputs[0]: r.output for r in f["GroupSched"].rows}
        classes: dict = {}
        for code in sorted(rasters):
            classes.setdefault(sched_class[rasters[code]], []).append(code)
        self.raster_classes = sorted(classes.values())
        self._frozen = f

    def candidates(self):
        """(tile, cluster, schedule code, raster code, swapped) of every reachable candidate in the space."""
        out = []
        for tile in self.tiles:
            tm, tn, tk = tile
            if tm not in (64, 128, 256) or tk not in TILE_K[self.problem.dtype]:
                continue
            for swapped in self.orientations:
                if tn not in (TOKEN_TILES_N if swapped else WEIGHT_TILES_N):
                    continue
                for cluster in self.clusters:
                    for s in range(len(SCHEDULES)):
                        for codes in self.raster_classes:
                            out.append((tile, cluster, s, codes[0], swapped))
        return out

    def tile_forms(self, tile, cooperative: bool = True) -> list[str]:
        """The forms of a tile's e-class: the rewrite chain that reaches it (as GEMM's search prints it)."""
        cls = self._tile_class.get(tuple(tile))
        if cls is None:
            return []
        f, i64 = self._frozen, self.egg.i64
        mma = {r.output: tuple(i64(x) for x in r.inputs) for r in f["Wgmma"].rows}
        out = [f"CtaTile{tuple(tile)}"]
        for r in f["Tiled"].rows:
            if r.output == cls:
                n = mma[r.inputs[0]]
                out.append(f"Tiled(Wgmma(64,{n[1]},{n[2]}), wg_m={i64(r.inputs[1])}, n_rep={i64(r.inputs[2])}, "
                           f"k_steps={i64(r.inputs[3])})  [tiles: instruction x repeats]")
                break
        for r in f["WgSplit"].rows if cooperative else ():
            if r.output == cls:
                out.append("WgSplit(.., 2)  [splits: two consumer warpgroups along M (cooperative)]")
                break
        return out


def _config(tile, cluster, s, r, swapped, stages=None):
    from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
    return GroupedGemmConfig(tile_m=tile[0], tile_n=tile[1], tile_k=tile[2], cluster_m=cluster[0],
                             cluster_n=cluster[1], schedule=SCHEDULES[s], swap_ab=swapped, stages=stages,
                             raster=RASTERS[r])


DEFAULT_BACKEND = "default"


def search(problem, top_k: int = 5, *, explain: bool = False, device: str | None = None,
           backend: str | None = DEFAULT_BACKEND) -> GroupedSearchResult:
    """The best ``top_k`` legal grouped kernels of ``problem`` under its expected distribution, cheapest first.
    Deterministic: equal costs are ordered by the configuration's JSON.

    ``backend``: the renderer the result is for (default: the operation's first); its refusals prune like rules
    (through the registry, as GEMM's search does). None judges the rules alone (what a kernel could be, whether
    or not a renderer spells it yet)."""
    from cutegen.errors import FieldError
    from cutegen.legality.cp_async import ADVISORY
    from cutegen.legality.cutlass_sm90 import MOOT_UNDER_CUTEGEN_ABI
    from cutegen.legality.grouped_gemm import check_grouped, grouped_stages
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem

    from .grouped_cost import grouped_cost, proxy_terms

    if not isinstance(problem, GroupedGemmProblem):
        raise FieldError("problem", f"expected a GroupedGemmProblem, got {type(problem).__name__}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 100:
        raise FieldError("top_k", f"expected an integer from 1 to 100, got {top_k!r}")
    from cutegen.core import registry
    if backend == DEFAULT_BACKEND:
        backend = registry.operation_of(problem).backends[0] if registry.operation_of(problem).backends else None
    t0 = time.perf_counter()
    space = GroupedSpace(problem)
    try:
        cands = space.candidates()
        # 1. price every candidate at its builder stage count (nothing judged yet): GEMM's per-tile terms for
        # all of them in one vectorised call, then the grouped terms on the expected group sizes
        sizes = problem.group_sizes
        cfgs = [_config(*cand) for cand in cands]
        stages = [grouped_stages(problem, cfg) for cfg in cfgs]
        terms = proxy_terms(problem, cfgs, stages, device)
        priced = []
        for cand, cfg, st, tm in zip(cands, cfgs, stages, terms):
            est = grouped_cost(problem, cfg, st, device, sizes, tm)[0] if st >= 1 else math.inf
            priced.append((est, _tie(cfg), cand, cfg))
        priced.sort(key=lambda x: (x[0], x[1]))
        # 2. judge in cost order until the top k legal are certain
        index = rule_index()
        pruned: dict[str, int] = {}
        judged, legal, rejected = [], [], []
        for n, (est, _, key, cfg) in enumerate(priced):
            if n >= MAX_JUDGED or (len(legal) >= top_k and n >= MIN_JUDGED and est > legal[top_k - 1][0]):
                break
            rep = check_grouped(problem, cfg)
            broken = list(rep.violations) + [w for w in rep.warnings if w.rule_id not in MOOT_UNDER_CUTEGEN_ABI | ADVISORY]
            if not broken and backend is not None:
                # the renderer's own refusals, "RULE-ID: why" (cutegen/ops/grouped_gemm/render.py)
                from cutegen.legality.rule import Violation
                for why in registry.backend_refusals(problem, rep.config, backend):
                    rid, _, reason = why.partition(":")
                    broken.append(Violation(rid.strip(), reason.strip(), True, "render"))
            for v in broken:
                pruned[v.rule_id] = pruned.get(v.rule_id, 0) + 1
                index.setdefault(v.rule_id, len(index))
            judged.append((key, cfg, rep, broken))
            if broken:
                if explain and len(rejected) < 20:
                    rejected.append({"config": cfg.to_dict(), "rules": [v.rule_id for v in broken],
                                     "reasons": [str(v) for v in broken]})
            else:
                legal.append((est, _tie(cfg), key, rep))
                legal.sort(key=lambda x: (x[0], x[1]))
        # 3. the judged candidates enter the e-graph with their legality analysis and costs
        egg = space.egg
        rows = [(*key[0], *key[1], key[2], key[3], int(key[4])) for key, _, _, _ in judged]
        egg.input("GExpand", rows)
        egg.input("GRejected", [(*row, index[v.rule_id]) for row, (_, _, _, broken) in zip(rows, judged)
                                for v in broken])
        egg.input("GStagesOf", [(*row, rep.stages) for row, (_, _, rep, broken) in zip(rows, judged)
                                if not broken and rep.stages])
        egg.run("(run-schedule (saturate (run gexpand)))")
        exact = {}
        for est, _, key, rep in legal:
            c, bd = grouped_cost(problem, rep.config, rep.stages, device, sizes)
            exact[(*key[0], *key[1], key[2], key[3], int(key[4]))] = (c, bd, rep)
        per_us = units_per_us(v[0] for v in exact.values()) if exact else 1e6
        egg.input("GCostOf", sorted((*k, v[2].stages, cost_units(v[0], per_us)) for k, v in exact.items()))
        egg.run("(run-schedule (saturate (run gprice)))")
        picked = _extract(egg, exact, top_k)
        ranked = []
        for k in picked:
            c, bd, rep = exact[k]
            chain = _chain(space, problem, k, rep) if explain else []
            ranked.append(GroupedRanked(rep.config, c, bd, chain))
        nodes, classes = egg.sizes()
        return GroupedSearchResult(
            problem=problem, ranked=ranked, search_seconds=time.perf_counter() - t0, egraph_nodes=nodes,
            egraph_classes=classes, iterations=egg.iterations, candidates_total=len(cands),
            candidates_judged=len(judged), candidates_legal=len(legal), pruned_by_rule=pruned,
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            orientations=["swap_ab" if o else "as_stated" for o in space.orientations],
            raster_classes={"+".join(RASTERS[c] for c in codes): RASTERS[codes[0]] for codes in space.raster_classes},
            rejected=rejected)
    finally:
        space.egg.close()


def _extract(egg, exact: dict, top_k: int) -> list[tuple]:
    """egglog's extraction of the root's cheapest variants, keyed like ``exact``; equal costs by config JSON."""
    if not exact:
        return []
    span = bindings.PanicSpan()
    root = bindings.Call(span, "Grouped", [bindings.Lit(span, bindings.Int(0))])
    cmd = bindings.UserDefined(span, "extract", [root, bindings.Lit(span, bindings.Int(top_k * 4 + 8))])
    out = egg.engine.run_program(cmd)[0]
    table = _cost_table(egg)
    picked = []
    for term in out.terms:
        tree = term_to_tree(out.termdag, term)
        if tree[0] != "GImpl":
            continue
        gk = tree[1]
        key = _key(gk)
        if key in exact and key not in picked and table.get(key, ILLEGAL_COST) < ILLEGAL_COST:
            picked.append(key)
    picked.sort(key=lambda k: (table[k], _tie(exact[k][2].config)))
    return picked[:top_k]


# Order of rasters the model prices alike (it does where the DRAM stream is under the mainloop): AlongM, then
# the heuristic (AlongN for a grouped launch). Measured on the H200 (bench/results/grouped/2026-11-26-h200-run2-*,
# -profile-run1-*), the same tile and cluster ran faster along M in 14 of 17 pairs, by up to 17% (Mixtral w1) and
# 10% on the one case the model ties (Qwen3 gate_up prefill, 128x256x64 1x2: 0.342 vs 0.377 ms in run 2, 0.394
# vs 0.422 in the profile run): along M the CTAs that share a weight tile (a group's M tiles) run side by side.
RASTER_TIE_ORDER = {"along_m": 0, "heuristic": 1, "along_n": 2}


def _tie(cfg) -> tuple:
    """Order of equal costs: along M first (RASTER_TIE_ORDER), no cluster first, then the JSON."""
    return (RASTER_TIE_ORDER[cfg.raster], cfg.cluster_size > 1, cfg.tile, cfg.cluster, cfg.schedule, cfg.swap_ab,
            cfg.raster)


_SCHED_CODE = {"PtrCoop": 0, "PtrPingpong": 1}
_RASTER_CODE = {"RasterHeuristic": 0, "AlongM": 1, "AlongN": 2}
_ORIENT_CODE = {"AsStated": 0, "SwapAB": 1}


def _tile_of(term) -> tuple:
    from .extraction import _tile
    return _tile(term)


def _key(gk) -> tuple:
    """(tm, tn, tk, cm, cn, schedule, raster, orientation) of an extracted GK term."""
    _, tile, cluster, sched, gsched, orient, _stages = gk
    return (*_tile_of(tile), *cluster[1:], _SCHED_CODE[sched[0]], _RASTER_CODE[gsched[1][0]], _ORIENT_CODE[orient[0]])


def _cost_table(egg) -> dict:
    f = egg.freeze().functions
    i64 = egg.i64
    tiles = {r.output: tuple(i64(x) for x in r.inputs) for r in f["CtaTile"].rows}
    clusters = {r.output: tuple(i64(x) for x in r.inputs) for r in f["Cl"].rows}
    scheds = {r.output: _SCHED_CODE[name] for name in _SCHED_CODE for r in f[name].rows}
    rasters = {r.output: _RASTER_CODE[name] for name in _RASTER_CODE for r in f[name].rows}
    gscheds = {}
    for r in f["GroupSched"].rows:
        gscheds.setdefault(r.output, set()).add(rasters[r.inputs[0]])
    orients = {r.output: _ORIENT_CODE[name] for name in _ORIENT_CODE for r in f[name].rows}
    out: dict = {}
    for r in f["cost_table_GK"].rows:
        t, c, s, g, o = (r.inputs[i] for i in range(5))
        for raster in gscheds.get(g, ()):
            key = (*tiles[t], *clusters[c], scheds[s], raster, orients[o])
            out[key] = max(out.get(key, 0), i64(r.output))
    return out


def _chain(space: GroupedSpace, problem, key: tuple, rep) -> list[str]:
    """Why this kernel is reachable: the rewrite chain, as text."""
    tm, tn, tk, cm, cn, s, r, o = key
    lines = []
    if o:
        lines.append(f"problem: GMul({problem.total_tokens}, {problem.n}, {problem.k}) = GTranspose(GMul({problem.n}, "
                     f"{problem.total_tokens}, {problem.k}))  [swap AB per group: D_i^T = W_i X_i^T; the used groups "
                     f"average <= {DECODE_ROWS} rows, so the tokens fill tile N = {tn}]")
    lines += space.tile_forms((tm, tn, tk), SCHEDULES[s] == "ptr_cooperative")
    if (cm, cn) != (1, 1):
        lines.append(f"CtaTile({tm}, {tn}, {tk}) = ClusterSplit(ClTile({tm * cm}, {tn * cn}, {tk}), {cm}, {cn})  "
                     "[splits: cluster tile over its CTAs]")
    for codes in space.raster_classes:
        if r in codes and len(codes) > 1:
            lines.append(" = ".join(f"GroupSched({RASTERS[c]})" for c in codes) + "  [gsched: the group sizes are on "
                         "the device, the scheduler sees problem blocks (sm_count, 1): the heuristic is AlongN]")
    lines.append(f"GK(.., stages 0) = GK(.., stages {rep.stages})  [the ptr-array builder's StageCountAutoCarveout, "
                 f"{rep.smem_bytes} B of shared storage]")
    lines.append(f"Grouped(0) = GImpl(GK(CtaTile({tm},{tn},{tk}), Cl({cm},{cn}), {SCHEDULES[s]}, "
                 f"GroupSched({RASTERS[r]}), {'SwapAB' if o else 'AsStated'}, {rep.stages}))  [gexpand: judged legal "
                 "by the grouped and GEMM rules, priced, extracted]")
    return lines
