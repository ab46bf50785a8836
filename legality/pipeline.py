"""The temporal contract of a TMA/mbarrier pipeline: rules over a pipeline term (``pipeline_term``).

Structural rules read the term; behavioural rules read the exploration of every interleaving of its
roles (``pipeline_explore``), bounded as ``Bounds`` says. A violation names the rule, the role, the
tile, the k-block and the stage; ``PipelineReport.traces`` holds the shortest interleaving that
breaks each behavioural rule.

The PTX ISA (9.1, §9.7.13.15 "mbarrier") states the contract:
  * a phase completes when its pending arrivals and its transaction count both reach zero;
  * ``mbarrier.expect_tx`` raises the transaction count, and a bulk tensor copy's
    ``complete_tx::bytes`` lowers it by the bytes it wrote, when it completes;
  * ``try_wait.parity`` tests the parity of the phase the waiter expects;
  * copies of one bulk async-group have no order among themselves;
and the pipeline adds: a stage's shared memory is overwritten only after every consumer released it.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field, replace

from .pipeline_explore import Exploration, explore
from .pipeline_term import Arrive, Load, MmaCommit, MmaWait, Pipeline, Read, Wait
from .rule import RuleSet, Violation

PIPELINE_RULES = RuleSet("pipeline")
_rule = PIPELINE_RULES.rule
_MBAR = "PTX ISA 9.1 §9.7.13.15 (mbarrier)"


@dataclass(frozen=True)
class Bounds:
    """How much of a pipeline the exploration unrolls. ``stages`` caps the stage count explored (the
    structural rules always read the full term); ``None`` keeps the term's own. ``k_blocks`` are the
    k-block counts per tile explored (K is a run-time size, so one kernel meets them all); by default
    1, stages - 1 and stages + 1: fewer k-blocks than stages (consumers' fills interleave within a
    stage's wrap), and more (every stage wraps within one tile)."""
    stages: int | None = 3
    k_blocks: tuple[int, ...] | None = None
    max_states: int = 200_000
    # the partial-order reduction (``pipeline_explore``); the symmetry reduction is always on
    reduce: bool = False

    def k_values(self, stages: int) -> tuple[int, ...]:
        if self.k_blocks is not None:
            return tuple(self.k_blocks)
        return tuple(sorted({1, max(1, stages - 1), stages + 1}))


@dataclass
class PipelineCheck:
    """The context the rules read: the full term and, lazily, the exploration of the explored term."""
    term: Pipeline
    explored: Pipeline | None = None
    _exploration: Exploration | None = field(default=None, repr=False)

    @property
    def exploration(self) -> Exploration:
        if self._exploration is None:
            self._exploration = explore(self.explored or self.term)
        return self._exploration


# --- structural rules -------------------------------------------------------------------------------

@_rule("PIPE-TX-BYTES", source=f"{_MBAR}: phase completion needs tx-count 0; expect-tx; cp.async.bulk.tensor "
       "complete_tx::bytes",
       summary="for every stage fill of every CTA, the bytes its full barrier is armed with (expect_tx) equal the "
               "bytes the TMA loads of that fill complete on it")
def _tx_bytes(c: PipelineCheck):
    armed: dict = defaultdict(int)
    brought: dict = defaultdict(int)
    for role in c.term.roles:
        for op in role.ops:
            if isinstance(op, Arrive) and op.expect_tx:
                armed[(op.barrier, op.tile, op.kb)] += op.expect_tx
            elif isinstance(op, Load):
                for t in op.targets:
                    brought[(f"{op.barrier}@{t}", op.tile, op.kb)] += op.bytes_per_cta
    for key in sorted(set(armed) | set(brought)):
        if armed[key] != brought[key]:
            bar, tile, kb = key
            stage = bar.split("@")[0].removeprefix("full")
            return (f"{bar} (stage {stage}) for tile {tile} k-block {kb} is armed with {armed[key]} B but its "
                    f"loads bring {brought[key]} B")
    return None


@_rule("PIPE-ARRIVAL-COUNT", source=f"{_MBAR}: mbarrier.init count; a phase completes when its pending "
       "arrivals reach zero",
       summary="every barrier's init count equals the arrivals one of its phases receives from the roles "
               "(producer arrivals per fill, consumer releases per stage and peer CTA, ordering hand-offs)")
def _arrival_count(c: PipelineCheck):
    per_phase: dict = defaultdict(int)
    for role in c.term.roles:
        for op in role.ops:
            if isinstance(op, Arrive):
                per_phase[(op.barrier, op.tile, op.kb)] += op.count
    counts = {b.name: b.count for b in c.term.barriers}
    for (bar, tile, kb), n in sorted(per_phase.items()):
        if n != counts[bar]:
            where = f"tile {tile}" + (f" k-block {kb}" if kb >= 0 else "")
            return f"{bar} is initialized with {counts[bar]} arrivals but receives {n} for {where}"
    found = explored_finding(c, "PIPE-ARRIVAL-COUNT")
    return found


@_rule("PIPE-PHASE-ALTERNATION", source=f"{_MBAR}: mbarrier.try_wait.parity waits for the phase of the given "
       "parity; CUTLASS PipelineState (sm90_pipeline.hpp) flips its phase on every wrap",
       summary="each wait tests the parity of the phase it needs: a consumer's wait on stage s's full barrier for its "
               "j-th arming by the producer tests j mod 2; the producer's j-th wait on an empty barrier tests "
               "(j + 1) mod 2 (the initial phase counts as released), a prefetch wait for fill f's release tests "
               "(f div stages) mod 2; a ping-pong warpgroup's j-th ordering wait "
               "tests (j + 1) mod 2 for the warpgroup that goes first and j mod 2 for the others")
def _phase_alternation(c: PipelineCheck):
    arming: dict = {}
    for role in c.term.roles:
        counts: dict = defaultdict(int)
        for op in role.ops:
            if isinstance(op, Arrive) and op.barrier.startswith("full"):
                arming[(op.barrier, op.tile, op.kb)] = counts[op.barrier]
                counts[op.barrier] += 1
    for role in c.term.roles:
        seen: dict = defaultdict(int)
        for op in role.ops:
            if not isinstance(op, Wait):
                continue
            j = seen[op.barrier]
            seen[op.barrier] += 1
            kind = op.barrier.split("@")[0].rstrip("0123456789")
            if kind == "full":
                phase = arming.get((op.barrier, op.tile, op.kb))
                if phase is None:
                    return f"{role.name} waits on {op.barrier} for tile {op.tile} k-block {op.kb}, which no producer arms"
                want = phase & 1
            elif kind == "empty" and op.release_of is not None:
                seen[op.barrier] -= 1           # a prefetch wait: its own fill's phase, not counted
                want = (op.release_of // c.term.stages) & 1
            elif kind == "empty":
                want = (j + 1) & 1
            elif kind == "order":
                # the barriers of the warpgroup that goes first: order0, or every ring's first group
                # (an OrderedSequenceBarrier of depth > 1: the term lists them in meta["order_first"])
                first = op.barrier.split("@")[0] in c.term.meta.get("order_first", ("order0",))
                want = ((j + 1) if first else j) & 1
            else:
                continue
            if op.parity != want:
                return (f"{role.name} waits on {op.barrier} (tile {op.tile}, k-block {op.kb}, stage {op.stage}) for "
                        f"parity {op.parity}; the phase it needs has parity {want}")
    return None


@_rule("PIPE-STAGES-PREFETCH", source="sm90_pipeline.hpp (PipelineTmaAsync): a consumer holds a stage from its "
       "full wait to its release; the producer needs a released stage to go on",
       summary="the stage count is at least the most stages one consumer holds at once (its release lag + 1): "
               "with fewer, it waits for a stage it still holds")
def _stages_prefetch(c: PipelineCheck):
    for role in c.term.roles:
        held = peak = 0
        for op in role.ops:
            if isinstance(op, Wait) and op.barrier.startswith("full"):
                held += 1
                peak = max(peak, held)
            elif isinstance(op, Arrive) and op.release and op.barrier.endswith(f"@{role.cta}"):
                held -= 1
        if peak and c.term.stages < peak:
            return (f"{role.name} holds up to {peak} stages at once but the pipeline has {c.term.stages}: "
                    f"the producer can never get a stage back")
    return None


@_rule("PIPE-PREFETCH-DISTANCE", source="sm90_pipeline.hpp (PipelineTmaAsync consumer_release); cutegen's "
       "prefetch bound (legality/pipeline_builders.py)",
       summary="a producer that waits for k-block n - d's release before loading k-block n needs d greater than "
               "the release lag of every consumer (d at least the stages one consumer holds at once): a consumer "
               "releases k-block n - d only after it has read k-block n")
def _prefetch_distance(c: PipelineCheck):
    held = 0
    for role in c.term.roles:
        cur = peak = 0
        for op in role.ops:
            if isinstance(op, Wait) and op.barrier.startswith("full"):
                cur += 1
                peak = max(peak, cur)
            elif isinstance(op, Arrive) and op.release and op.barrier.endswith(f"@{role.cta}"):
                cur -= 1
        held = max(held, peak)
    for role in c.term.roles:
        pending = None
        for op in role.ops:
            if isinstance(op, Wait) and op.release_of is not None:
                pending = op
            elif isinstance(op, Load) and pending is not None:
                d = op.fill - pending.release_of
                if d < held:
                    return (f"{role.name} loads k-block {op.kb} of tile {op.tile} (fill {op.fill}) only after fill "
                            f"{pending.release_of} is released: prefetch distance {d}, but a consumer holds {held} "
                            f"stages at once and releases fill {pending.release_of} only after reading fill "
                            f"{pending.release_of + held}")
                pending = None
    return None


@_rule("PIPE-RELEASE-BEFORE-MMA-DONE", source="PTX ISA 9.1 §9.7.15.7 (wgmma.commit_group, wgmma.wait_group: the "
       "shared memory a wgmma.mma_async reads may not be modified until wait_group retires its group); CUTLASS "
       "sm90_mma_tma_gmma_ss_warpspecialized.hpp (warpgroup_wait<K_PIPE_MMAS> before pipeline.consumer_release)",
       summary="a consumer releases a stage only after a wgmma.wait_group has retired every committed batch whose "
               "WGMMAs read it (wait_group N retires all but the N most recent batches); roles with no commit read "
               "synchronously")
def _release_before_mma_done(c: PipelineCheck):
    for role in c.term.roles:
        if not any(isinstance(op, MmaCommit) for op in role.ops):
            continue
        open_reads: list = []                 # (stage, fill) read since the last commit
        batches: list = []                    # committed, not retired: lists of (stage, fill)
        for op in role.ops:
            if isinstance(op, Read):
                open_reads.append((op.stage, op.fill))
            elif isinstance(op, MmaCommit):
                batches.append(open_reads)
                open_reads = []
            elif isinstance(op, MmaWait):
                batches = batches[len(batches) - op.pending:] if op.pending else []
            elif isinstance(op, Arrive) and op.release and op.barrier.endswith(f"@{role.cta}"):
                busy = [f for b in batches + [open_reads] for s, f in b if s == op.stage]
                if busy:
                    return (f"{role.name} releases stage {op.stage} (tile {op.tile}, k-block {op.kb}) while the WGMMAs "
                            f"reading fill {busy[0]} of it are still in flight: {len(batches)} committed batch(es) not "
                            f"retired by a wgmma.wait_group")
    return None


# --- behavioural rules (the exploration) ---------------------------------------------------------

def explored_finding(c: PipelineCheck, rule: str) -> str | None:
    f = c.exploration.first(rule)
    return None if f is None else f.message


def _behaviour(rule_id: str, summary: str, source: str) -> None:
    _rule(rule_id, summary=summary, source=source)(lambda c: explored_finding(c, rule_id))


_behaviour("PIPE-BARRIER-INIT", "no wait, arrival or transaction completes on a barrier before its mbarrier.init "
           "is made visible to the cluster (fence.mbarrier_init and the cluster barrier)",
           f"{_MBAR}: mbarrier.init; fence.mbarrier_init.release.cluster (PTX ISA 9.1 §9.7.13.4)")
_behaviour("PIPE-DEADLOCK", "in every interleaving every role runs to its end: each wait's phase is reached",
           f"{_MBAR}: try_wait.parity returns only once the phase of that parity completed")
_behaviour("PIPE-OVERWRITE-BEFORE-RELEASE", "no TMA load writes a stage while a consumer that must read its "
           "previous contents has not released it", "sm90_pipeline.hpp PipelineTmaAsync producer_acquire/"
           "consumer_release; PTX ISA 9.1 §9.7.9.25 (cp.async.bulk.tensor writes shared memory asynchronously)")
_behaviour("PIPE-READ-BEFORE-LOAD", "every WGMMA read of a stage sees the contents it expects, fully landed",
           f"{_MBAR}: a phase completes only when tx-count is 0, i.e. every byte it was armed with has landed")
_behaviour("PIPE-READ-AFTER-RELEASE", "a consumer reads a stage only between its full wait and its release",
           "sm90_pipeline.hpp: consumer_release hands the stage back to the producer")
_behaviour("PIPE-ARRIVE-AFTER-EXIT", "no arrival and no TMA load lands on a CTA's barriers after every role of "
           "that CTA has finished (a peer's release needs the producer's tail waits)",
           "cutlass/pipeline/sm90_pipeline.hpp producer_tail (\"to avoid dangling mbarrier arrive signals after "
           "kernel exit\"); CuTe DSL cutlass/pipeline/sm90.py PipelineAsync.producer_tail")
_behaviour("PIPE-ORDER-EXCLUSIVE", "the ping-pong ordering barrier admits one math warpgroup of a CTA into its "
           "mainloop at a time", "sm90_gemm_tma_warpspecialized_pingpong.hpp (MathWarpGroupOrderBarrier)")


# --- the check ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def _explored(term: Pipeline, max_states: int, reduce: bool = False) -> Exploration:
    """The exploration of a term, once per process: kernels that differ in what the explored term leaves
    out (a cluster explored as one CTA, the raster order) explore the same term (the search checks many)."""
    return explore(term, max_states=max_states, reduce=reduce)


@dataclass
class PipelineReport:
    violations: list[Violation]
    traces: dict[str, list[str]]
    states: int
    complete: bool
    explored: list

    @property
    def legal(self) -> bool:
        """Every rule holds and every interleaving was explored (an unfinished exploration is not legal)."""
        return not any(v.enforced for v in self.violations)

    @property
    def conclusive(self) -> bool:
        """False when the only thing in the way of a verdict is the exploration bound (PIPE-BOUND)."""
        return self.complete or any(v.enforced and v.rule_id != "PIPE-BOUND" for v in self.violations)

    def merged(self, other: "PipelineReport") -> "PipelineReport":
        """This report and another check of the same kernel (e.g. the whole cluster explored at other
        bounds): every rule either broke, their traces, states and explored terms together."""
        seen = {v.rule_id for v in self.violations}
        violations = list(self.violations) + [v for v in other.violations if v.rule_id not in seen]
        traces = dict(other.traces)
        traces.update(self.traces)
        return PipelineReport(violations, traces, self.states + other.states, self.complete and other.complete,
                              self.explored + other.explored)

    def to_dict(self) -> dict:
        return {"legal": self.legal, "conclusive": self.conclusive, "rules": [v.to_dict() for v in self.violations],
                "counterexamples": self.traces, "states": self.states, "complete": self.complete,
                "explored": self.explored}


def check_pipeline(term: Pipeline, *, bounds: Bounds = Bounds(), rebuild=None) -> PipelineReport:
    """Check a term. ``rebuild(stages=, k_blocks=)`` makes the same protocol at other bounds: the
    exploration then runs on it with at most ``bounds.stages`` stages, once per k-block count of
    ``bounds.k_values``; without it the term itself is explored. The structural rules read the full
    term (and every explored one)."""
    if rebuild is None:
        explored_terms = [term]
    else:
        stages = term.stages if bounds.stages is None else min(bounds.stages, term.stages)
        explored_terms = [rebuild(stages=stages, k_blocks=k) for k in bounds.k_values(stages)]
    violations: list[Violation] = []
    traces: dict[str, list[str]] = {}
    states, complete, explored = 0, True, []
    seen = set()
    for t in [term] + explored_terms:
        is_explored = t is not term or rebuild is None
        ctx = PipelineCheck(t, t)
        if is_explored:
            ctx._exploration = _explored(t, bounds.max_states, bounds.reduce)
            states += ctx._exploration.states
            complete &= ctx._exploration.complete
            explored.append({k: v for k, v in t.meta.items() if k in ("stages", "k_blocks", "tiles", "cluster")})
            for rule, f in ctx._exploration.findings.items():
                traces.setdefault(rule, list(f.trace))
        else:
            ctx._exploration = Exploration()          # the full term: structural rules only
        for v in PIPELINE_RULES.evaluate(ctx):
            if v.rule_id not in seen:
                seen.add(v.rule_id)
                violations.append(v)
    if not complete:
        # Unproven is not legal: the search must not rank, and the CLI must not pass, what was not explored.
        violations.append(Violation("PIPE-BOUND", f"exploration stopped after {bounds.max_states} states of one "
                                    "explored term before covering every interleaving: the behavioural rules "
                                    "(deadlock, races, arrival counts at run time) are UNPROVEN for this term",
                                    True, "pipeline"))
    return PipelineReport(violations, traces, states, complete, explored)
