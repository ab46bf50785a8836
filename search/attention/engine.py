"""The attention search: FMHA configurations as e-graph terms beside GEMM's, judged by the attention rules,
priced by the pipeline cost model, extracted by egglog.

Terms (``ATTN_SORTS``): a Q K^T tile ``QT(tile_q, tile_kv)``, a schedule ``Sc(code, warpgroups, persistent,
loads_q_separately)`` (code 0 tma, 1 ws_cooperative, 2 ws_pingpong), stages ``St(stages_q, stages_kv)``, options
``Op(cluster_m, acc_qk_f16, blocks_per_sm, kv_splits, tile_order)`` (tile order 0 forward, 1 longest_first); a kernel ``AK(tile, schedule, stages, options)``; the problem
``ARoot 0``, and every candidate kernel ``AImpl(AK ...)`` in the root's e-class (all compute the same O).

Rewrites (each an equality, each printed in the explanation of the kernel it reaches):

* warpgroup split: ``QT(q, kv) split over w consumer warpgroups = WgT(q / w, kv)`` -- the Q K^T and P V tiles
  the WGMMA rules judge (the TileShapeQK of the collective);
* KV steps: ``KvT(q, kv) = KvSplit(KvT(q, kv / 2), 2)`` -- online softmax makes one KV tile of kv keys equal to
  two steps of kv / 2 (the tile_kv choices of one Q tile);
* the ping-pong builder: ``Sc(ws_pingpong, w, 1, 1) = Sc(ws_cooperative, w, 1, 1)`` -- FmhaBuilder's ping-pong
  *is* the cooperative kernel with kIsPersistent and kLoadsQSeparately (fmha_kernel_builder.hpp:134-156), so
  the two spellings are one e-class and one candidate;
* stages: every legal ``stages_kv`` of one (tile, schedule, stages_q, options) is one e-class (a stage count
  changed within the shared-memory budget computes the same O); extraction keeps the cheapest.

The legality analysis is the ``illegal`` lattice (bitwise or of violated rule bits, rule order of
``legality.attention.RULESETS``; warnings other than the notes count: spills are pruned), and the cost table
prices every legal AK in picoseconds (``search.schedule_rewrites.cost_units``). egglog extracts the cheapest
variants of the root. Deterministic: candidates, rows and ties are ordered by the config's JSON.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from ..egg import Egg, bindings, term_to_tree
from ..schedule_rewrites import ILLEGAL_COST, cost_units, units_per_us
from ..cost import SMS
from .cost import config_cost

SCHEDULE_CODE = {"tma": 0, "ws_cooperative": 1, "ws_pingpong": 2}
TILE_ORDERS = ("forward", "longest_first")
TILE_ORDER_CODE = {name: i for i, name in enumerate(TILE_ORDERS)}
CODE_SCHEDULE = {v: k for k, v in SCHEDULE_CODE.items()}
TILE_Q = (64, 128, 192, 256)
TILE_KV = (32, 64, 96, 128, 160, 192, 224, 256)
STAGES_KV = tuple(range(2, 9))
KV_SPLITS = (2, 3, 4, 6, 8, 12, 16, 32)      # split-KV counts offered for decode-like problems (offers_kv_splits)
# The one-consumer-warpgroup split kernel's Q tile (templates/attention/fmha_sm90_splitkv.cu.j2 DecodeFmhaKernel):
# offered when a problem's packed rows fit one 64-row tile (more rows would read each KV tile once per Q tile)
DECODE_TILE_Q = 64

ATTN_SORTS = """
(datatype QKTile (QT i64 i64))
(datatype WgTile (WgT i64 i64) (PerWarpgroup QKTile i64))
(datatype KvSteps (KvT i64 i64) (KvSplit KvSteps i64))
(datatype Sched (Sc i64 i64 i64 i64))
(datatype Stg (St i64 i64))
(datatype Opt (Op i64 i64 i64 i64 i64))
(datatype AKernel (AK QKTile Sched Stg Opt) (Combine AKernel i64))
(datatype Attn (ARoot i64) (AImpl AKernel))
(relation TileSeed (i64 i64))
(relation WgSeed (i64))
(relation Cand (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation StageOk (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation Rejected (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation CostOf (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(function illegal (AKernel) i64 :merge (| old new))
(function cost_table_AK (QKTile Sched Stg Opt) i64 :merge (max old new))
(function cost_table_Combine (AKernel i64) i64 :merge (max old new))
(function cost_table_ARoot (i64) i64 :no-merge)
"""

ATTN_RULES = """
(ruleset tiles)
(rule ((TileSeed q kv)) ((QT q kv) (KvT q kv)) :ruleset tiles)
(rule ((= t (QT q kv)) (WgSeed w) (= 0 (% q (* 64 w)))) ((union (PerWarpgroup t w) (WgT (/ q w) kv))) :ruleset tiles)
(rule ((= k (KvT q kv)) (= 0 (% kv 64))) ((union k (KvSplit (KvT q (/ kv 2)) 2))) :ruleset tiles)
(ruleset sched)
(rule ((= s (Sc 2 w 1 1))) ((union s (Sc 1 w 1 1))) :ruleset sched)
(ruleset expand)
(rule ((Cand q kv sc w p qs sq skv cm acc bps n o))
      ((union (ARoot 0) (AImpl (AK (QT q kv) (Sc sc w p qs) (St sq skv) (Op cm acc bps n o))))) :ruleset expand)
(rule ((StageOk q kv sc w p qs sq a cm acc bps n o) (StageOk q kv sc w p qs sq b cm acc bps n o) (< a b))
      ((union (AK (QT q kv) (Sc sc w p qs) (St sq a) (Op cm acc bps n o)) (AK (QT q kv) (Sc sc w p qs) (St sq b) (Op cm acc bps n o))))
      :ruleset expand)
(rule ((Rejected q kv sc w p qs sq skv cm acc bps n o i) (= x (AK (QT q kv) (Sc sc w p qs) (St sq skv) (Op cm acc bps n o))))
      ((set (illegal x) (<< 1 (min i 62)))) :ruleset expand)
(ruleset splitkv)
(rule ((Cand q kv sc w p qs sq skv cm acc bps n o) (> n 1))
      ((union (AK (QT q kv) (Sc sc w p qs) (St sq skv) (Op cm acc bps n o))
              (Combine (AK (QT q kv) (Sc sc w p qs) (St sq skv) (Op cm acc bps 1 o)) n))) :ruleset splitkv)
(ruleset price)
(rule ((CostOf q kv sc w p qs sq skv cm acc bps n o ps))
      ((set (cost_table_AK (QT q kv) (Sc sc w p qs) (St sq skv) (Op cm acc bps n o)) ps)) :ruleset price)
(rule ((= x (AK t s g o)) (= bits (illegal x)) (!= bits 0)) ((set (cost_table_AK t s g o) 1000000000000000)) :ruleset price)
(rule ((= c (Combine k n))) ((set (cost_table_Combine k n) 1000000000000000)) :ruleset price)
(rule ((= r (ARoot i))) ((set (cost_table_ARoot i) 1000000000000000)) :ruleset price)
"""


def key_of(c) -> tuple:
    return (c.tile_q, c.tile_kv, SCHEDULE_CODE[c.schedule], c.mma_warpgroups, int(c.persistent),
            int(c.loads_q_separately), c.stages_q, c.stages_kv, c.cluster_m, int(c.acc_qk == "f16"), c.blocks_per_sm,
            getattr(c, "kv_splits", 1), TILE_ORDER_CODE[getattr(c, "tile_order", "forward")])


def config_of(key: tuple):
    from cutegen.ops.attention.config import AttentionConfig
    q, kv, sc, w, p, qs, sq, skv, cm, acc, bps, n, o = key
    schedule = CODE_SCHEDULE[sc]
    if schedule == "ws_cooperative" and p and qs:
        schedule = "ws_pingpong"          # one kernel, two spellings: the builder's name for it
    return AttentionConfig(tile_q=q, tile_kv=kv, schedule=schedule, mma_warpgroups=w, stages_q=sq, stages_kv=skv,
                           persistent=bool(p), loads_q_separately=bool(qs), cluster_m=cm,
                           acc_qk="f16" if acc else "f32", blocks_per_sm=bps, kv_splits=n,
                           tile_order=TILE_ORDERS[o])


class Candidate(NamedTuple):
    """A configuration as the search judges it: AttentionConfig's fields, without its validation (the space
    is built from valid values); the ranked ones become AttentionConfigs."""
    tile_q: int
    tile_kv: int
    schedule: str
    mma_warpgroups: int
    stages_q: int
    stages_kv: int
    persistent: bool
    loads_q_separately: bool
    cluster_m: int
    acc_qk: str
    blocks_per_sm: int
    kv_splits: int = 1
    tile_order: str = "forward"

    def short_name(self) -> str:
        return config_of(key_of(self)).short_name()


def candidates(problem) -> list[Candidate]:
    """The candidate configurations of ``problem``, legal or not, in a fixed order. Options the kernel ignores
    are not varied (cluster and blocks per SM exist only for tma); ones the rules refuse are kept where they
    show a rule at work (one consumer warpgroup in a warp-specialized kernel, two K/V stages). The ping-pong
    kernel is seeded in its one spelling; the e-graph states its equality with the cooperative one."""
    out = []
    # an f16 Q K^T accumulator for FP8 (the example's option, 88_hopper_fmha.cu:962; ATTN-ACC-QK-F16-CONSENT prunes
    # it unless the problem allows it), and for f16 inputs only when allowed (scores past 65504 overflow in f16)
    accs = ("f32", "f16") if problem.dtype == "e4m3" or (problem.dtype == "f16" and problem.allow_f16_qk_acc) \
        else ("f32",)
    split_tiles_q = split_q_tiles(problem) if offers_kv_splits(problem) else ()
    # the tile order changes which Q block a CTA takes; only the causal mask makes blocks unequal, and only the
    # 16-bit fixed-length warp-specialized kernel renders the longest-first schedulers (ATTN-RENDER-TILE-ORDER)
    orders = TILE_ORDERS if (problem.causal and not problem.varlen and problem.dtype != "e4m3") else ("forward",)
    decode_rows = bool(split_tiles_q) and packed_rows(problem) <= DECODE_TILE_Q
    for q in TILE_Q:
        for kv in TILE_KV:
            for acc in accs:
                for skv in STAGES_KV:
                    for cm in (1, 2):
                        for bps in (1, 2):
                            out.append(Candidate(q, kv, "tma", 1, 1, skv, False, False, cm, acc, bps))
                    out.append(Candidate(q, kv, "ws_cooperative", 1, 1, skv, False, False, 1, acc, 1))
                    for order in orders:
                        for pers, qsep in ((False, False), (True, False), (False, True)):
                            for sq in ((2, 4) if pers else (2,)):
                                out.append(Candidate(q, kv, "ws_cooperative", 2, sq, skv, pers, qsep, 1, acc, 1,
                                                     tile_order=order))
                        for sq in (2, 4):
                            out.append(Candidate(q, kv, "ws_pingpong", 2, sq, skv, True, True, 1, acc, 1,
                                                 tile_order=order))
                    if q in split_tiles_q:
                        for n in KV_SPLITS:
                            out.append(Candidate(q, kv, "ws_cooperative", 2, 2, skv, False, False, 1, acc, 1, n))
                            out.append(Candidate(q, kv, "ws_pingpong", 2, 2, skv, True, True, 1, acc, 1, n))
                    if q == DECODE_TILE_Q and decode_rows:
                        # the split template's one-consumer-warpgroup kernel (DecodeFmhaKernel), one or two CTAs per SM
                        for n in KV_SPLITS:
                            for bps in (1, 2):
                                out.append(Candidate(q, kv, "ws_cooperative", 1, 1, skv, False, False, 1, acc, bps, n))
    return out


def offers_kv_splits(problem) -> bool:
    """Whether the space holds split-KV kernels for ``problem``: no mask (ATTN-SPLIT-CAUSAL) and fewer CTA tiles
    than SMs when each (batch, KV head) is one problem of group x seqlen_q rows in 128-row Q tiles: the calls
    whose unsplit grid cannot fill the GPU (``splitkv.is_decode_like``). A prefill problem's space (and so its
    search) is the unsplit one."""
    from cutegen.ops.attention.splitkv import is_decode_like
    return is_decode_like(problem.batch, problem.heads_q, problem.heads_kv, problem.seqlen_q, problem.causal, SMS)


def packed_rows(problem) -> int:
    """Rows of one split-KV problem: the group's query heads x seqlen_q (PackGQA)."""
    return (problem.heads_q // problem.heads_kv) * problem.seqlen_q


def split_q_tiles(problem) -> tuple:
    """Q tiles offered with splits: from 128 (two consumer warpgroups of 64 rows: ATTN-QK-TILE-M and
    ATTN-SETMAXNREG-RANGE leave no smaller warp-specialized tile) up to the packed rows (group x seqlen_q)
    rounded up to 128; a larger tile only computes rows of padding."""
    rows = (problem.heads_q // problem.heads_kv) * problem.seqlen_q
    limit = max(128, -(-rows // 128) * 128)
    return tuple(q for q in TILE_Q if 128 <= q <= limit)


def space(problem) -> list:
    """The Operation's ``space`` part: every candidate as an AttentionConfig."""
    return [config_of(key_of(c)) for c in candidates(problem)]


@dataclass
class AttnRanked:
    config: Any
    cost: float                      # predicted microseconds
    breakdown: dict
    chain: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"config": self.config.to_dict(), "cost": round(self.cost, 4), "breakdown": self.breakdown,
                "chain": self.chain}


@dataclass
class AttentionSearchResult:
    problem: Any
    ranked: list
    search_seconds: float
    egraph_nodes: int
    egraph_classes: int
    iterations: int
    candidates_total: int
    candidates_legal: int
    pruned_by_rule: dict
    rejected: list = field(default_factory=list)      # illegal kernels the model priced below the winner

    def to_dict(self) -> dict:
        return {"problem": self.problem.to_dict(), "ranked": [r.to_dict() for r in self.ranked],
                "search_seconds": round(self.search_seconds, 4), "egraph_nodes": self.egraph_nodes,
                "egraph_classes": self.egraph_classes, "iterations": self.iterations,
                "candidates_total": self.candidates_total, "candidates_legal": self.candidates_legal,
                "pruned_by_rule": dict(sorted(self.pruned_by_rule.items())), "rejected": self.rejected}

    def explain(self) -> str:
        """Why the winner, what was pruned by which rule, the runners-up (the GEMM search's explain, for FMHA)."""
        from .cost import tflops
        p = self.problem
        lines = [f"attention search for {p.name}: {self.candidates_total} candidates, {self.candidates_legal} legal, "
                 f"e-graph {self.egraph_nodes} nodes / {self.egraph_classes} classes, {self.iterations} iterations, "
                 f"{self.search_seconds * 1e3:.0f} ms"]
        if not self.ranked:
            lines.append("no legal kernel")
        for i, r in enumerate(self.ranked):
            b = r.breakdown
            lines.append(f"#{i + 1} {r.config.short_name()}: {r.cost:.1f} us ({tflops(p, r.cost):.0f} TFLOP/s predicted); "
                         f"per KV tile {b['per_kv_tile_clk']:.0f} clk = {b['bound']}-bound (mma {b['mma_clk_per_kv_tile']:.0f}, "
                         f"softmax {b['softmax_clk_per_kv_tile']:.0f}, loads {b['load_clk_per_kv_tile']:.0f}; {b['overlap']}); "
                         f"{b['cta_tiles']} CTA tiles, {b['schedule']}")
            if i == 0:
                lines += [f"   reached by: {step}" for step in r.chain]
        lines.append("pruned, by rule (each candidate under the first rule it breaks, enforced rules first):")
        for rule, n in sorted(self.pruned_by_rule.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"   {rule}: {n}")
        if self.rejected:
            lines.append("cheaper by the model, but illegal:")
            for x in self.rejected:
                lines.append(f"   {x['config']} ({x['cost']:.1f} us): {x['reason']}")
        return "\n".join(lines)


def _chain(problem, config, stage_choices: list[int]) -> list[str]:
    steps = []
    w = config.mma_warpgroups if config.schedule != "tma" else 1
    if w > 1:
        steps.append(f"QT({config.tile_q}, {config.tile_kv}) = PerWarpgroup(QT, {w}) = WgT({config.tile_q // w}, "
                     f"{config.tile_kv}): each consumer warpgroup computes a {config.tile_q // w}-row slice")
    if config.tile_kv % 64 == 0:
        steps.append(f"KvT({config.tile_q}, {config.tile_kv}) = KvSplit(KvT({config.tile_q}, {config.tile_kv // 2}), 2): "
                     f"one KV tile of {config.tile_kv} keys is two online-softmax steps of {config.tile_kv // 2}")
    if config.persistent and config.loads_q_separately:
        steps.append(f"Sc(ws_pingpong, {w}, 1, 1) = Sc(ws_cooperative, {w}, 1, 1): FmhaBuilder's ping-pong is the "
                     f"cooperative kernel, persistent, with a Q load warp (fmha_kernel_builder.hpp:134-156)")
    if len(stage_choices) > 1:
        steps.append(f"stages_kv in {stage_choices} legal, one e-class; extraction chose {config.stages_kv}")
    if config.tile_order == "longest_first":
        steps.append("tile order longest_first: the causal Q blocks with the most KV tiles go out first "
                     + ("(persistent: L2-sized chunks of (batch, head), m-block slowest; priced by the exact "
                        "tile-to-CTA assignment)" if config.persistent else
                        "(blockIdx.x reversed; priced by list scheduling in launch order)"))
    if config.kv_splits > 1:
        steps.append(f"AK(..., splits {config.kv_splits}) = Combine(AK(..., splits 1), {config.kv_splits}): softmax over "
                     f"the whole KV length is the LSE-weighted merge of its chunks' partial softmaxes (flash-decoding)")
    return steps


def search(problem, top_k: int = 5, *, explain: bool = False, backend: str | None = "cutlass",
           verify_pipeline: bool = False) -> AttentionSearchResult:
    """The best ``top_k`` legal FMHA kernels for ``problem``, cheapest first (deterministic). ``backend``: the
    renderer the kernels are for; what it refuses of a legal config (``registry.backend_refusals``, each
    "RULE-ID: why") prunes like a rule. None: the hardware and CUTLASS rules only. ``verify_pipeline``: also run
    the temporal checker on the ranked kernels' protocol terms (legality/attention_pipeline.py) and drop any
    that breaks a PIPE rule (0.1-3 s more per distinct protocol; the ATTN rules already exclude every failure
    the checker is known to find, so this is a second opinion)."""
    from cutegen.errors import FieldError
    from cutegen.core.registry import backend_refusals as refusals
    from cutegen.legality.attention import RULESETS, AttentionContext, first_pruning_violation
    from cutegen.legality.rule import Violation

    from cutegen.ops.attention.problem import AttentionProblem

    if not isinstance(problem, AttentionProblem):
        raise FieldError("problem", f"expected an AttentionProblem, got {type(problem).__name__}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 100:
        raise FieldError("top_k", f"expected an integer from 1 to 100, got {top_k!r}")
    if backend is not None:
        from cutegen.core.registry import operation_of
        known = operation_of(problem).backends
        if backend not in known:
            raise FieldError("backend", f"{backend!r} is not a backend of attention ({', '.join(known)})")
    t0 = time.perf_counter()
    rule_index = {r.id: i for i, r in enumerate(r for rs in RULESETS for r in rs)}
    cands = candidates(problem)
    legal: dict = {}                 # key -> (us, breakdown, candidate)
    rejected_rows, pruned = [], {}
    cheap_illegal = []
    for c in cands:
        ctx = AttentionContext(problem, c)
        first = first_pruning_violation(ctx)
        key = key_of(c)
        if first is None and backend is not None:
            refused = refusals(problem, c, backend)
            if refused:
                rule_id, _, why = refused[0].partition(": ")
                first = Violation(rule_id, why, True, "render")
        if first is None:
            us, br = config_cost(problem, c, ctx.smem_bytes)
            legal[key] = (us, br, c)
            continue
        pruned[first.rule_id] = pruned.get(first.rule_id, 0) + 1
        rejected_rows.append((*key, rule_index.get(first.rule_id, len(rule_index))))
        if explain and ctx.smem_parts is not None and ctx.mma_wgs <= 2 and c.tile_q % (64 * ctx.mma_wgs) == 0:
            us, _ = config_cost(problem, c, ctx.smem_bytes)
            cheap_illegal.append((us, key, c, first))
    egg = Egg(ATTN_SORTS + ATTN_RULES)
    try:
        egg.input("TileSeed", sorted({(q, kv) for q in TILE_Q for kv in TILE_KV}))
        egg.input("WgSeed", [(1,), (2,)])
        egg.input("Cand", sorted(key_of(c) for c in cands))
        groups: dict = {}
        for key in legal:
            groups.setdefault(key[:7] + key[8:], []).append(key[7])
        egg.input("StageOk", sorted(key for key in legal))
        egg.input("Rejected", sorted(rejected_rows))
        egg.run("(run-schedule (saturate (run tiles)) (saturate (run sched)) (saturate (run expand)) "
                "(saturate (run splitkv)))")
        per_us = units_per_us(v[0] for v in legal.values()) if legal else 1e6
        egg.input("CostOf", sorted((*k, cost_units(v[0], per_us)) for k, v in legal.items()))
        egg.run("(run-schedule (saturate (run price)))")
        picked = _extract(egg, top_k * 4 + 8)
        nodes, classes = egg.sizes()
        iterations = egg.iterations
    finally:
        egg.close()
    seen, ranked = set(), []
    for key in picked:
        if key not in legal:
            continue
        canon = config_of(key).to_json()
        if canon in seen:
            continue
        seen.add(canon)
        us, br, _ = legal[key]
        cfg = config_of(key)
        ranked.append(AttnRanked(cfg, us, br, _chain(problem, cfg, sorted(groups[key[:7] + key[8:]]))))
    ranked.sort(key=lambda r: (round(r.cost, 9), r.config.to_json()))
    if verify_pipeline:
        kept = []
        for r in ranked:
            if len(kept) == top_k:
                break
            broken = _pipeline_violations(problem, r.config)
            if broken:
                pruned[broken[0]] = pruned.get(broken[0], 0) + 1
                continue
            r.chain.append("pipeline: every interleaving of its protocol terms explored, no PIPE rule broken")
            kept.append(r)
        ranked = kept
    ranked = ranked[:top_k]
    rejected = []
    if explain and ranked:
        best = ranked[0].cost
        shown = set()
        for us, key, c, v in sorted(cheap_illegal, key=lambda x: (x[0], x[1])):
            what = (c.tile_q, c.tile_kv, c.schedule, v.rule_id)         # one line per tile, schedule and rule
            if us >= best or len(rejected) >= 5:
                break
            if what not in shown:
                shown.add(what)
                rejected.append({"config": c.short_name(), "cost": round(us, 3), "rule": v.rule_id, "reason": str(v)})
    return AttentionSearchResult(problem, ranked, time.perf_counter() - t0, nodes, classes, iterations,
                                 len(cands), len(legal), pruned, rejected)


def _pipeline_violations(problem, config) -> list[str]:
    from cutegen.legality.attention import cluster_trips_unequal
    from cutegen.legality.attention_pipeline import protocol_params
    unequal = cluster_trips_unequal(problem.causal, config.tile_q, config.tile_kv, config.cluster_m)
    return list(_protocol_verdict(protocol_params(problem, config), unequal, config.cluster_m))


@lru_cache(maxsize=256)
def _protocol_verdict(params, causal: bool, cluster_m: int) -> tuple[str, ...]:
    """The PIPE rules broken by one protocol (cached: many configurations share one)."""
    from cutegen.legality.attention_pipeline import (build_terms_from_params, check_terms)
    report = check_terms(build_terms_from_params(params, causal=causal, cluster_m=cluster_m))
    return tuple(v.rule_id for v in report.violations if v.enforced)


def _note_only():
    from cutegen.legality.attention import NOTE_ONLY
    return NOTE_ONLY


def _extract(egg, n: int) -> list[tuple]:
    """Keys of the root's cheapest variants, by the engine's cost table (extraction in egglog)."""
    span = bindings.PanicSpan()
    root = bindings.Call(span, "ARoot", [bindings.Lit(span, bindings.Int(0))])
    cmd = bindings.UserDefined(span, "extract", [root, bindings.Lit(span, bindings.Int(n))])
    out = egg.engine.run_program(cmd)[0]
    keys = []
    for term in out.terms:
        tree = term_to_tree(out.termdag, term)        # ("AImpl", ("AK", ("QT", q, kv), ("Sc", ...), ("St", ...), ("Op", ...)))
        if tree[0] != "AImpl":
            continue
        ak = tree[1]
        if ak[0] != "AK":             # a Combine spelling (priced out: its AK twin in the class is the kernel)
            continue
        key = (*ak[1][1:], *ak[2][1:], *ak[3][1:], *ak[4][1:])
        keys.append(tuple(int(x) for x in key))
    return keys


def cost(problem, config) -> float:
    """Predicted microseconds of a legal configuration (the Operation's ``cost`` part)."""
    from cutegen.legality.attention import check_attention
    rep = check_attention(problem, config)
    if not rep.legal:
        raise ValueError(f"no cost for an illegal config: {'; '.join(map(str, rep.violations))}")
    return config_cost(problem, config, rep.smem_bytes)[0]


__all__ = ["search", "space", "cost", "AttentionSearchResult", "AttnRanked", "ATTN_SORTS", "ATTN_RULES"]
