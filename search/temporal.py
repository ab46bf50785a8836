"""The pipeline's temporal choices, as terms the e-graph rewrites between.

After the spatial search picks its kernels, each picked kernel ``i`` gets an e-class ``(PipeOf i)``
whose nodes are the protocols its pipeline may follow: ``(Tp i prefetch lag order)`` with

  prefetch  the producer loads k-block n once k-block n - prefetch was released (= stages: no bound
            but the stages, today's protocol);
  lag       a consumer releases a stage lag k-blocks after reading it (1: one WGMMA batch in flight,
            CUTLASS's K_PIPE_MMAS = 1; 0: after warpgroup_wait<0>);
  order     ping-pong's math-warpgroup order barrier: 0 hand-over after the mainloop's MMAs (today),
            1 after the tail's releases, 2 none.

The rewrites (``TEMPORAL_RULES``, egglog text: the rules are data) say which protocols compute the
same kernel: release one k-block earlier; a shorter prefetch; for ping-pong, the hand-over moved
after the tail, or dropped. Every node is judged by the pipeline checker (``cutegen.pipelines``
builds the term, ``legality.pipeline`` checks it) and by the backend (the C++ backends render
today's protocol only: CUTLASS-TEMPORAL); a rejected node gets the ``t_illegal`` analysis, its
rule's bit, and egglog's extraction prices it out, as the spatial search does. Legal nodes are priced
by ``cost.temporal_cost`` (the latency the prefetch and release hide) on top of the kernel's cost.
Nodes are judged cheapest first until the cheapest legal one is certain (every node with
``explain``, so the explanation shows every choice's verdict).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

from . import cost as costmod
from .egg import Egg, bindings, term_to_tree
from .schedule_rewrites import ILLEGAL_COST, cost_units, units_per_us

ORDERS = ("after_mma", "after_release", "none")

TEMPORAL_SORTS = """
(datatype Protocol (Tp i64 i64 i64 i64))
(datatype Pipe (PipeOf i64) (Proto Protocol))
(relation PipeSeed (i64 i64 i64))
(relation TRejected (i64 i64 i64 i64 i64))
(relation TCostOf (i64 i64 i64 i64 i64))
(function t_illegal (Protocol) i64 :merge (| old new))
(function cost_table_Tp (i64 i64 i64 i64) i64 :merge (max old new))
(function cost_table_PipeOf (i64) i64 :no-merge)
"""

TEMPORAL_RULES = """
(ruleset temporal)
;; kernel i's pipeline as today's kernels run it: prefetch = stages, release lag 1, hand-over after the MMAs.
;; Each protocol is an e-class of its own (its legality analysis is its own); the root's e-class holds
;; every protocol of the kernel, as the spatial search's root holds every kernel.
(rule ((PipeSeed i s pp)) ((union (PipeOf i) (Proto (Tp i s 1 0)))) :ruleset temporal)
;; release-early: release a stage after warpgroup_wait<0> instead of one k-block later
(rule ((= r (Proto (Tp i d 1 o)))) ((union r (Proto (Tp i d 0 o)))) :ruleset temporal)
;; shorter-prefetch: the producer waits for one more release before it loads
(rule ((= r (Proto (Tp i d l o))) (> d 1)) ((union r (Proto (Tp i (- d 1) l o)))) :ruleset temporal)
;; ping-pong: the hand-over after the tail's releases; no order barrier at all
(rule ((= r (Proto (Tp i d l 0))) (PipeSeed i s 1)) ((union r (Proto (Tp i d l 1))) (union r (Proto (Tp i d l 2))))
      :ruleset temporal)
(ruleset tjudge)
(rule ((TRejected i d l o r) (= x (Tp i d l o))) ((set (t_illegal x) (<< 1 (min r 62)))) :ruleset tjudge)
(ruleset tprice)
(rule ((TCostOf i d l o ps) (= x (Tp i d l o))) ((set (cost_table_Tp i d l o) ps)) :ruleset tprice)
(rule ((= x (Tp i d l o)) (= b (t_illegal x)) (!= b 0)) ((set (cost_table_Tp i d l o) 1000000000000000))
      :ruleset tprice)
(rule ((= g (PipeOf i))) ((set (cost_table_PipeOf i) 1000000000000000)) :ruleset tprice)
"""

REWRITE_NAMES = {"release_lag": "release-early", "prefetch_distance": "shorter-prefetch", "pingpong_order": "order"}


@dataclass
class Choice:
    prefetch: int                 # as in the term: stages = no bound
    lag: int
    order: int
    legal: bool = True
    rules: list = field(default_factory=list)
    reasons: list = field(default_factory=list)
    extra_us: float = 0.0
    parts: dict = field(default_factory=dict)
    judged: bool = False          # unjudged nodes (past the cheapest legal one) are priced out

    def fields(self, stages: int) -> dict:
        """The KernelConfig fields of this protocol (defaults where it is today's)."""
        return {"prefetch_distance": 0 if self.prefetch >= stages else self.prefetch,
                "release_lag": self.lag, "pingpong_order": ORDERS[self.order]}

    def text(self) -> str:
        return f"Tp(prefetch={self.prefetch}, release_lag={self.lag}, order={ORDERS[self.order]})"


@dataclass
class TemporalPick:
    config: object                # the kernel's config with the chosen protocol's fields
    extra_us: float
    parts: dict
    lines: list                   # the explanation


@lru_cache(maxsize=4096)
def _verdict(problem_json: str, config_json: str, backend: str) -> tuple:
    """(legal, rules, reasons) of one protocol: the backend's refusal, then the pipeline checker."""
    from cutegen.config import KernelConfig
    from cutegen.legality.pipeline import check_pipeline
    from cutegen.pipelines import pipeline_of, protocol
    from cutegen.problem import GemmProblem

    problem = GemmProblem.from_dict(json.loads(problem_json))
    config = KernelConfig.from_dict(json.loads(config_json))
    if backend in ("cutlass", "cutlass_builder"):
        from cutegen.render import cutlass_temporal
        refused = cutlass_temporal(config)
        if refused:
            return False, ("CUTLASS-TEMPORAL",), tuple(refused)
    which = "dsl" if backend == "dsl" else "cutlass"
    # Kernels that differ only where the pipeline does not look (raster order, swizzle, the epilogue
    # tile, M, N, K) have one protocol: check it once.
    proto = {k: v for k, v in protocol(problem, config, which).items() if k != "meta"}
    key = json.dumps(proto, sort_keys=True, default=list) + which
    hit = _PROTOCOL_VERDICTS.get(key)
    if hit is None:
        term, rebuild = pipeline_of(problem, config, which)
        report = check_pipeline(term, rebuild=rebuild)
        broken = [v for v in report.violations if v.enforced]
        hit = _PROTOCOL_VERDICTS[key] = (report.legal, tuple(v.rule_id for v in broken), tuple(str(v) for v in broken))
    return hit


_PROTOCOL_VERDICTS: dict = {}


def refine(problem, picked: list, backend: str, index, explain: bool = False) -> list[TemporalPick]:
    """The cheapest legal protocol of each picked kernel. ``picked``: (complete config, stages,
    breakdown); ``index(rule_id)`` gives a rule's bit (the spatial search's numbering)."""
    out: list[TemporalPick] = []
    if not picked:
        return out
    with Egg(TEMPORAL_SORTS + TEMPORAL_RULES) as egg:
        egg.input("PipeSeed", [(i, st, int(cfg.mainloop_schedule == "pingpong")) for i, (cfg, st, _) in enumerate(picked)])
        egg.run("(run-schedule (saturate (run temporal)))")
        f, i64 = egg.freeze().functions, egg.i64
        nodes: dict = {}
        for r in f["Tp"].rows:
            i, d, l, o = (i64(x) for x in r.inputs)
            nodes.setdefault(i, []).append(Choice(d, l, o))
        pjson = json.dumps(problem.to_dict(), sort_keys=True)
        rejected_rows, cost_rows = [], []
        for i, (cfg, stages, bd) in enumerate(picked):
            choices = nodes.get(i, [])
            for ch in choices:
                ch.extra_us, ch.parts = costmod.temporal_cost(bd, stages, ch.prefetch, ch.lag, ORDERS[ch.order])
            # today's protocol first among equals: a choice must be cheaper to be taken
            choices.sort(key=lambda c: (round(c.extra_us, 6), c.fields(stages) != picked_default(stages), c.text()))
            for ch in choices:
                cfg_ch = cfg.replace(**ch.fields(stages))
                legal, rules, reasons = _verdict(pjson, cfg_ch.to_json(), backend)
                ch.legal, ch.rules, ch.reasons, ch.judged = legal, list(rules), list(reasons), True
                if legal and not explain:
                    break
            for ch in choices:
                if ch.judged and not ch.legal:
                    rejected_rows += [(i, ch.prefetch, ch.lag, ch.order, index(r)) for r in ch.rules]
                legal_us = bd.get("predicted_us", 0.0) + ch.extra_us if ch.judged and ch.legal else None
                cost_rows.append((i, ch.prefetch, ch.lag, ch.order, legal_us,
                                  ch.fields(stages) != picked_default(stages)))
        # integer cost units (picoseconds unless the problem is huge: units_per_us); a protocol other
        # than today's costs one unit more, so that it must be cheaper to be taken
        per_us = units_per_us(r[4] for r in cost_rows if r[4] is not None)
        cost_rows = [(*r[:4], ILLEGAL_COST if r[4] is None else cost_units(r[4], per_us) + int(r[5]))
                     for r in cost_rows]
        egg.input("TRejected", rejected_rows)
        egg.run("(run-schedule (saturate (run tjudge)))")
        egg.input("TCostOf", cost_rows)
        egg.run("(run-schedule (saturate (run tprice)))")
        for i, (cfg, stages, bd) in enumerate(picked):
            best = _extract(egg, i)
            by_key = {(c.prefetch, c.lag, c.order): c for c in nodes.get(i, [])}
            ch = by_key.get(best)
            if ch is None or not ch.legal or not ch.judged:
                # no legal protocol was priced (cannot happen for a kernel the spatial search judged
                # legal unless the checker rejects today's protocol): keep the kernel as it is
                out.append(TemporalPick(cfg, 0.0, {}, [f"temporal: no legal protocol extracted for {cfg.short_name()}"]))
                continue
            lines = []
            if explain:
                lines.append(f"temporal: (PipeOf {i}) = {len(by_key)} protocols  [rewrites: release-early, "
                             f"shorter-prefetch{', order' if cfg.mainloop_schedule == 'pingpong' else ''}]")
                for c in sorted(by_key.values(), key=lambda c: (not c.legal, round(c.extra_us, 6), c.text())):
                    if c.judged and c.legal:
                        lines.append(f"  {c.text()}: checker: legal; {c.extra_us:+.3f} us")
                    elif c.judged:
                        lines.append(f"  {c.text()}: pruned: {'; '.join(c.reasons)}")
                lines.append(f"temporal choice: {ch.text()}" + ("  [today's protocol]" if ch.fields(stages)
                                                                 == picked_default(stages) else ""))
            out.append(TemporalPick(cfg.replace(**ch.fields(stages)), ch.extra_us, ch.parts, lines))
    return out


def picked_default(stages: int) -> dict:
    return {"prefetch_distance": 0, "release_lag": 1, "pingpong_order": "after_mma"}


def _extract(egg, i: int):
    span = bindings.PanicSpan()
    root = bindings.Call(span, "PipeOf", [bindings.Lit(span, bindings.Int(i))])
    cmd = bindings.UserDefined(span, "extract", [root])
    out = egg.engine.run_program(cmd)[0]
    tree = term_to_tree(out.termdag, out.term)
    if tree[0] != "Proto" or out.cost >= ILLEGAL_COST:
        return None
    return tuple(tree[1][2:5])


__all__ = ["refine", "TEMPORAL_RULES", "TEMPORAL_SORTS", "ILLEGAL_COST"]
