"""The search: seed, saturate in stages, rank by cost, judge by the rules, extract.

Stages (each a ruleset run to saturation, so nothing blows up):
  1. ``tiles``  -- WGMMA instructions x warpgroup repeats give every CTA tile (one e-class each,
                  holding all its instruction decompositions).
  2. ``splits`` -- the cooperative warpgroup split and the cluster split of each tile; clusters
                  and policies.
  3. rank       -- the reachable (tile, cluster, policy) space is read back and costed at once
                  (numpy); nothing is judged yet.
  4. expand     -- candidates are judged in cost order by ``check_config`` until the top k legal
                  ones are certain (the next estimate is no cheaper than the k-th legal exact cost);
                  every judged candidate becomes a Kernel e-node of the root, its violations the
                  ``illegal`` analysis of its e-class.
  5. extract    -- the costs enter egglog's dynamic cost table (``price`` ruleset; an illegal
                  e-class is priced out by its analysis) and egglog extracts the cheapest
                  variants of the root e-class: the best kernel and the next k.
"""
from __future__ import annotations

import math
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from . import cost as costmod
from .decomposition import PLAN_RULES, PLAN_SORTS, extract_plans, min_plan_cost
from .egg import Egg
from .extraction import extract_ranked, simplicity
from .legality_analysis import Judge
from .problem_rewrites import orientations
from .schedule_rewrites import SCHEDULE_RULES, SCHEDULE_SORTS
from cutegen.legality.cp_async import tma_can_load, tma_can_store  # noqa: F401  (re-exported for callers)

INSTR_N = tuple(range(8, 257, 8))
WARPGROUPS_M = (1, 2, 3, 4)          # tile M = 64 * warpgroup rows
INSTR_PER_TILE_N = (1, 2)            # tile N = instruction N * this (<= 256)
KSTEPS = (2, 4, 8, 16)               # tile K = instruction K * k-steps per k-block
CLUSTERS = tuple((cm, cn) for cm in (1, 2, 4, 8, 16) for cn in (1, 2, 4, 8, 16) if cm * cn <= 16)
# (schedule, epilogue, scheduler) codes as in cost.SCHEDULES / EPILOGUES / SCHEDULERS
POLICIES = tuple((s, e, sc) for s, e in ((1, 1), (1, 2), (2, 0), (2, 2), (0, 0), (0, 2)) for sc in (0, 1))
RASTER = ("heuristic", "along_m", "along_n")

MIN_JUDGED = 64          # judge at least this many of the cheapest, so the report shows what the rules cut
MAX_JUDGED = 2500
SWAP_MARGIN = 0.01       # a swapped kernel is ranked as if 1% dearer: where the two orientations
                         # tie within the model's noise (large problems differ by < 0.1%), the problem
                         # as stated keeps its (GPU-validated) kernel; not fitted to any measurement
WGMMA_M = 64             # rows of one warpgroup's MMA (m64nNk16)


def swap_margin(problem) -> float:
    """How much cheaper a swapped kernel must be. Below one WGMMA M-mode of rows (M < 64) the unswapped
    kernel computes 64 rows for every M real ones and the swapped one fills that mode with N: the
    orientations differ physically, so the cheaper one is taken (margin 0). At M >= 64 the two tie within
    the model's noise and the problem as stated keeps its kernel (SWAP_MARGIN)."""
    return 0.0 if problem.m < WGMMA_M else SWAP_MARGIN


# Split-K with a separate reduction (cutegen/split_k_reduce.py): slice counts the search offers, and where.
SPLIT_K_REDUCE_SLICES = (2, 4, 8, 16, 32)
SPLIT_K_REDUCE_MIN_SLICE_K = 512     # K/s: a slice of fewer k-blocks writes a whole f32 partial for little work
SPLIT_K_REDUCE_DEPTH = 16            # offered only where K >= this x (M + N) ...
SPLIT_K_REDUCE_TILE = 128            # ... and the output has fewer than SMS / 2 tiles of 128 x 128 (per batch x L)
# no stream-K policy in the form's space: the slices already split K (SPLITK-REDUCE-SCHEDULER)
PERSISTENT_POLICIES = tuple(p for p in POLICIES if p[2] == 0)


def split_k_reduce_forms(problem, backend: str) -> tuple[int, ...]:
    """The slice counts s of the split-K-with-separate-reduction form (cutegen/split_k_reduce.py) the search
    offers for ``problem``, smallest first; () where it offers none.

    Offered on the explicit CUTLASS backend (the only one that renders the reduction) for problems without a
    bias or activation whose A and B TMA reads as they are (the form neither stages nor swaps), where the
    output cannot fill the SMs (fewer than SMS / 2 output tiles of 128 x 128) and K is deep
    (K >= SPLIT_K_REDUCE_DEPTH x (M + N): the operands' bytes then dwarf the partials' s x M x N x 8 bytes
    written and read). Elsewhere the in-kernel split-K / stream-K plans serve, and each slice count costs
    the search one more sub-search (about a second): the gate bounds that, it is not a legality rule.
    Each s must pass the form's rules (K % s == 0, 16-byte slice strides) with K / s >= SPLIT_K_REDUCE_MIN_SLICE_K
    and at most two waves of 128 x 128 tiles' worth of slices."""
    from cutegen.legality import check_split_k_reduce
    from cutegen.legality.cp_async import tma_can_load

    if backend != "cutlass" or problem.bias or problem.activation != "none" or not tma_can_load(problem):
        return ()
    tiles = -(-problem.m // SPLIT_K_REDUCE_TILE) * -(-problem.n // SPLIT_K_REDUCE_TILE) * problem.batch
    if tiles * 2 >= costmod.SMS or problem.k < SPLIT_K_REDUCE_DEPTH * (problem.m + problem.n):
        return ()
    probe = _make_config((128, 128, 64), (1, 1), (1, 1, 0))
    out = []
    for s in SPLIT_K_REDUCE_SLICES:
        if problem.k // s < SPLIT_K_REDUCE_MIN_SLICE_K or tiles * s > 2 * costmod.SMS:
            continue
        if not [v for v in check_split_k_reduce(problem, probe.replace(split_k_slices=s)) if v.enforced]:
            out.append(s)
    return tuple(out)


REFINE = 6               # raster/swizzle variants are tried for this many of the best legal kernels
LEARNED_POOL = 64        # with a learned predictor: this many of the prior's best legal kernels are re-ranked


@dataclass
class Ranked:
    config: Any                 # complete KernelConfig
    cost: float                 # predicted microseconds
    breakdown: dict
    chain: list[str] = field(default_factory=list)
    prediction: Any = None      # learned.Prediction when a predictor ranked it: measured, learned or prior
    plan: Any = None            # LaunchPlan of a stream-K kernel (cutegen/launch_plan.py); None otherwise

    def to_dict(self) -> dict:
        out = {"config": self.config.to_dict(), "cost": round(self.cost, 4), "breakdown": self.breakdown}
        if self.prediction is not None:
            out["prediction"] = self.prediction.to_dict()
        if self.plan is not None:
            out["launch_plan"] = self.plan.to_dict()
        return out


@dataclass
class SearchResult:
    problem: Any
    ranked: list[Ranked]
    search_seconds: float
    egraph_nodes: int
    egraph_classes: int
    iterations: int
    candidates_total: int
    candidates_judged: int
    candidates_legal: int
    pruned_by_rule: dict[str, int]
    peak_rss_mb: float
    rejected: list[dict] = field(default_factory=list)   # judged-illegal near the top, with reasons

    def to_dict(self) -> dict:
        return {
            "problem": self.problem.to_dict(),
            "search_seconds": round(self.search_seconds, 4),
            "egraph_nodes": self.egraph_nodes,
            "egraph_classes": self.egraph_classes,
            "iterations": self.iterations,
            "candidates_total": self.candidates_total,
            "candidates_judged": self.candidates_judged,
            "candidates_legal": self.candidates_legal,
            "pruned_by_rule": dict(sorted(self.pruned_by_rule.items())),
            "pruned_by_cost_bound": self.candidates_total - self.candidates_judged,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "ranked": [r.to_dict() for r in self.ranked],
        }


# --- the e-graph of one problem -------------------------------------------------------------------------

_SHARED_SPACES: dict = {}      # SearchSpace.shared: (WGMMA K, TMA can load, policies) -> the saturated space
_SHARED_LOCK = threading.Lock()


class SearchSpace:
    """The saturated e-graph of one problem's choices, before any candidate is expanded."""

    _in_use = False

    def __init__(self, problem, policies=POLICIES, wave_tiles: bool = False):
        from cutegen.dtypes import DTYPES

        self.problem = problem
        self.wave_tiles = bool(wave_tiles)   # odd-multiple-of-8 tiles get their full-width WGMMA (wave_tiles_default)
        self.kk = DTYPES[problem.dtype_a].wgmma_k
        self.egg = Egg(SCHEDULE_SORTS + SCHEDULE_RULES + PLAN_SORTS + PLAN_RULES)
        self.egg.input("InstrSeed", [(n, self.kk) for n in INSTR_N])
        self.egg.input("RepeatSeed", [(wm, wn, kr) for wm in WARPGROUPS_M for wn in INSTR_PER_TILE_N for kr in KSTEPS])
        self.egg.input("ClusterSeed", CLUSTERS)
        self.egg.input("PolicySeed", policies)
        if not tma_can_load(problem):
            self.egg.run("(TmaCannotLoad)")
        self.egg.run("(run-schedule (saturate (run tiles)) (saturate (run splits)))")
        frozen = self.egg.freeze().functions
        i64 = self.egg.i64
        self.tiles = sorted({tuple(i64(x) for x in r.inputs) for r in frozen["CtaTile"].rows})
        self.clusters = sorted({tuple(i64(x) for x in r.inputs) for r in frozen["Cl"].rows})
        self.policies = sorted({tuple(i64(x) for x in r.inputs[:3]) for r in frozen["Pol"].rows})
        self._tile_class = {tuple(i64(x) for x in r.inputs): r.output for r in frozen["CtaTile"].rows}
        self._frozen = frozen

    @classmethod
    def shared(cls, problem, policies=POLICIES, wave_tiles: bool = False) -> "SearchSpace":
        """The same space, its saturated e-graph built once per process for each (WGMMA K of the types,
        TMA can load the operands, policies): everything ``__init__`` reads of the problem. A search expands
        into it between egglog's ``(push)`` and ``(pop)``, so every problem of a pack's class (any M, N, K)
        starts from the same saturated e-graph without saturating it again; ``release`` pops back. A space
        already in use (a nested search) is built fresh. ``wave_tiles`` changes the pricing only, not the
        e-graph, so it is set on the copy and is not part of the key."""
        from cutegen.dtypes import DTYPES

        key = (DTYPES[problem.dtype_a].wgmma_k, tma_can_load(problem), tuple(policies))
        with _SHARED_LOCK:              # a Dask worker runs searches in several threads of one process
            base = _SHARED_SPACES.get(key)
            if base is not None and base._in_use:
                base = None
            elif base is None:
                base = _SHARED_SPACES[key] = cls(problem, policies)
                base._in_use = True
            else:
                base._in_use = True
        if base is None:
            return cls(problem, policies, wave_tiles=wave_tiles)
        space = object.__new__(cls)
        space.__dict__.update(base.__dict__)
        space.problem = problem
        space.wave_tiles = bool(wave_tiles)
        space._base, space._iterations = base, base.egg.iterations
        base.egg.run("(push)")
        return space

    def release(self) -> None:
        """Done with this space: a shared one pops the e-graph back to its saturated state (and its
        iteration count), any other is closed."""
        base = self.__dict__.get("_base")
        if base is None:
            self.egg.close()
            return
        self.egg.run("(pop)")
        self.egg.iterations = self._iterations
        with _SHARED_LOCK:
            base._in_use = False

    def reaches(self, config) -> bool:
        """Is this configuration's (tile, cluster, policy) a term the rewrites reached?"""
        t = tuple(config.tile_shape)
        c = tuple(config.cluster_shape[:2])
        p = costmod.config_codes(config)
        return (t in self._tile_class and config.cluster_shape[2] == 1 and c in self.clusters
                and p in self.policies)

    def tile_forms(self, tile) -> list[str]:
        """Every form of a tile's e-class, as text: the rewrite chain that reaches it."""
        cls = self._tile_class.get(tuple(tile))
        if cls is None:
            return []
        f, i64 = self._frozen, self.egg.i64
        mma = {r.output: tuple(i64(x) for x in r.inputs) for r in f["Wgmma"].rows}
        cl = {r.output: tuple(i64(x) for x in r.inputs) for r in f["ClTile"].rows}
        tile_of = {v: k for k, v in self._tile_class.items()}
        out = [f"CtaTile{tuple(tile)}"]
        for r in f["Tiled"].rows:
            if r.output == cls:
                n = mma[r.inputs[0]]
                out.append(f"Tiled(Wgmma(64,{n[1]},{n[2]}), wg_m={i64(r.inputs[1])}, n_rep={i64(r.inputs[2])}, "
                           f"k_steps={i64(r.inputs[3])})  [tiles: instruction x repeats]")
        for r in f["WgSplit"].rows:
            if r.output == cls:
                out.append(f"WgSplit(CtaTile{tile_of.get(r.inputs[0])}, {i64(r.inputs[1])})  "
                           "[splits: two consumer warpgroups along M]")
        for r in f["ClusterSplit"].rows:
            if r.output == cls and i64(r.inputs[1]) * i64(r.inputs[2]) <= 4:
                out.append(f"ClusterSplit(ClTile{cl[r.inputs[0]]}, {i64(r.inputs[1])}, {i64(r.inputs[2])})  "
                           "[splits: cluster tile over its CTAs]")
        return out


def problem_mask(problem, clusters, pols, ci, pi):
    """Candidates that a rule depending only on the problem, the policy and the cluster rejects, dropped
    before ranking so the judging budget goes to candidates that can be legal: a TMA mainloop when TMA
    cannot read A or B (SM90-TMA-ALIGNMENT), a TMA epilogue when C/D are not 16-byte aligned
    (SM90-EPILOGUE-ALIGNMENT), a cp.async mainloop in a cluster (SM90-CPASYNC-CLUSTER) or with the
    stream-K scheduler (SM90-CPASYNC-STREAMK)."""
    ns = len(costmod.SCHEDULES)
    cp = pols[pi, 0] >= ns
    stream_k = pols[pi, 2] == costmod.SCHEDULERS.index("stream_k")
    keep = ~(cp & ((clusters[ci, 0] > 1) | (clusters[ci, 1] > 1) | stream_k))
    if not tma_can_load(problem):
        keep &= cp
    if not tma_can_store(problem):
        keep &= pols[pi, 1] == 2
    return keep


@lru_cache(maxsize=65536)
def _epilogue_carveout(shape_free_problem, tm: int, tn: int, family: str) -> int | None:
    """sizeof(CollectiveEpilogue::SharedStorage) for a CTA tile's M, N and epilogue family.

    It does not depend on Tile_K nor on M, N, K (the problem is passed with them set to 1), so it
    is computed once per (Tile_M, Tile_N) and shared by every problem of the same types and layouts.
    None: the builder cannot size it (the rules say why when such a candidate is judged).
    """
    from cutegen import collective_builder as cb

    if family == "no_smem":
        return 0
    sched, epi = {"coop": ("cooperative", 1), "other": ("pingpong", 0)}[family]
    try:
        cfg = _make_config((tm, tn, 64), (1, 1), (costmod.SCHEDULES.index(sched), epi, 0))
        return int(cb.epilogue_storage_bytes(shape_free_problem, cfg))
    except Exception:  # noqa: BLE001
        return None


def _auto_stages(shape_free_problem, tile: tuple, family: str) -> int:
    """StageCountAutoCarveout<carveout> (rulebook E07) for ranking; check_config resolves it exactly."""
    from cutegen import smem
    from cutegen.dtypes import DTYPES

    carve = _epilogue_carveout(shape_free_problem, tile[0], tile[1], family)
    if carve is None:
        return 1
    p = shape_free_problem
    return max(int(smem.auto_stage_count(DTYPES[p.dtype_a].bits, DTYPES[p.dtype_b].bits, tile, carve)), 0)


def _make_config(tile, cluster, policy, stages="auto", raster="heuristic", swizzle=1, wgmma_k=None):
    """A candidate. ``wgmma_k`` (the problem's WGMMA K) names the instruction where CUTLASS's ss_op_selector
    would not use the whole tile width (costmod.search_instruction_n); elsewhere the instruction is left to
    completion, which chooses the same one (so those kernels' bytes do not change)."""
    from cutegen.config import KernelConfig

    s, e, sc = policy
    ns = len(costmod.SCHEDULES)
    instr = None
    if wgmma_k:
        n = int(costmod.search_instruction_n(np.asarray([tile[1]]))[0])
        if n != int(costmod._ss_op_n(np.asarray([tile[1]]))[0]):
            instr = (64, n, int(wgmma_k))
    return KernelConfig(tile_shape=tile, cluster_shape=(cluster[0], cluster[1], 1), stages=stages,
                        mainloop_schedule=costmod.SCHEDULES[s % ns], epilogue_schedule=costmod.EPILOGUES[e],
                        tile_scheduler=costmod.SCHEDULERS[sc], raster_order=raster, raster_swizzle=swizzle,
                        mainloop_load=costmod.LOADS[s // ns], mma_instruction=instr)


@lru_cache(maxsize=256)
def _family_stages(shape_free_problem, tiles: tuple) -> np.ndarray:
    """Per tile of the space, the auto stage count of each epilogue family (coop, other, no_smem): a function of
    the problem's types and layouts and the tiles alone, so every search of one pack's class (every M, N, K)
    shares it (read-only)."""
    out = np.array([[_auto_stages(shape_free_problem, tuple(int(x) for x in t), fam)
                     for fam in ("coop", "other", "no_smem")] for t in tiles], dtype=np.int64)
    out.setflags(write=False)
    return out


def rank_space(space: SearchSpace, rates=None):
    """Cost every reachable (tile, cluster, policy) at once; returns arrays and the order."""
    p = space.problem
    tiles = np.array(space.tiles, dtype=np.int64)
    clusters = np.array(space.clusters, dtype=np.int64)
    pols = np.array(space.policies, dtype=np.int64)
    nt, nc, npol = len(tiles), len(clusters), len(pols)
    ti, ci, pi = np.meshgrid(np.arange(nt), np.arange(nc), np.arange(npol), indexing="ij")
    ti, ci, pi = ti.ravel(), ci.ravel(), pi.ravel()
    keep = problem_mask(p, clusters, pols, ci, pi)
    ti, ci, pi = ti[keep], ci[keep], pi[keep]
    free = p.replace(m=1, n=1, k=1, batch=1, lda=0, ldb=0, ldc=0)
    fam_stages = _family_stages(free, tuple(space.tiles))
    fam = np.where(pols[:, 1] == 2, 2, np.where(pols[:, 0] % len(costmod.SCHEDULES) == 1, 0, 1))
    stages = fam_stages[ti, fam[pi]]
    # a stream-K row costs its cheapest launch plan (search/decomposition.py)
    total, _ = min_plan_cost(p, tiles[ti, 0], tiles[ti, 1], tiles[ti, 2], clusters[ci, 0], clusters[ci, 1],
                             pols[pi, 0], pols[pi, 1], pols[pi, 2], np.maximum(stages, 1), device=rates,
                             instr_n=costmod.search_instruction_n(tiles[ti, 1]) if space.wave_tiles else None)
    # a configuration that cannot hold two stages costs nothing to rank: the rules will reject it
    order = np.lexsort((pi, ci, ti, np.round(total, 6)))
    return tiles, clusters, pols, ti, ci, pi, total, order


def _exact_costs(problem, rows: list, rates=None) -> list[tuple[float, tuple]]:
    """(cost, row) for judged-legal rows, from their completed configs, in one vectorised call."""
    if not rows:
        return []
    cfgs = [row[6].config for row in rows]
    codes = np.array([costmod.config_codes(c) for c in cfgs])
    total, _ = min_plan_cost(
        problem, [c.tile_shape[0] for c in cfgs], [c.tile_shape[1] for c in cfgs], [c.tile_shape[2] for c in cfgs],
        [c.cluster_shape[0] for c in cfgs], [c.cluster_shape[1] for c in cfgs], codes[:, 0], codes[:, 1], codes[:, 2],
        [row[6].stages for row in rows], [row[3] for row in rows], [row[4] for row in rows], device=rates,
        instr_n=[costmod.instruction_n_of(c) for c in cfgs])
    return [(float(t), row) for t, row in zip(total, rows)]


WAVE_TILES_ENV = "CUTEGEN_WAVE_TILES"


def wave_tiles_default() -> bool:
    """Whether the search gives odd-multiple-of-8 tiles (Tile_N = 24, 40, ..., 136, 200, 232, 248) their
    full-width WGMMA and prices them so (costmod.search_instruction_n). Off unless $CUTEGEN_WAVE_TILES is 1:
    those tiles compile through the one-stage TMA form (cutegen/stage_tma.py), but with the full-width
    instruction the search picks them for 31 of the committed kernels (NOTES.md, "Tiles sized to the waves"),
    which need GPU validation records before they can land. Off, such a tile keeps ss_op_selector's m64n8
    instructions and price (and is never the pick), exactly as before."""
    return os.environ.get(WAVE_TILES_ENV, "") == "1"


def search(problem, top_k: int = 5, *, explain: bool = False, backend: str = "cutlass", device: str | None = None,
           predictor=None, staging: bool = True, egraph_sizes: bool = True,
           wave_tiles: bool | None = None) -> SearchResult:
    """Search the legal Hopper GEMM kernels for ``problem``; the best ``top_k``, cheapest first.

    ``backend`` is the renderer the result is for: "cutlass" (explicit C++ types), "cutlass_builder"
    (CUTLASS's CollectiveBuilder) or "dsl" (CuTe DSL); each prunes what its renderer refuses.
    ``device``: a device kind ("h100-pcie", ...) whose SM count, bandwidth and peak the analytic model
    uses; None is the model as calibrated. ``predictor``: a ``learned.Predictor`` that re-ranks the prior's
    best LEARNED_POOL legal kernels by measurement, learned correction or prior (each Ranked says which).
    ``staging``: offer the staged form (cutegen/staging.py) of a problem whose A or B TMA cannot read;
    False for callers whose kernels run without the C ABI's copies (kernel packs' plan entry points); it
    also leaves out the split-K-with-separate-reduction form (``split_k_reduce_forms``), whose reduction
    kernel is the C ABI's too. ``egraph_sizes=False``: the result's ``egraph_nodes``/``egraph_classes`` are 0 (counting
    them reads the whole e-graph back; a kernel pack's searches do not report them). ``wave_tiles``: give the
    odd-multiple-of-8 tiles their full-width WGMMA (None: ``wave_tiles_default()``)."""
    from cutegen.errors import FieldError
    from cutegen.problem import GemmProblem
    from cutegen.collective_builder import uses_register_a
    from cutegen.swap_ab import transposed

    if not isinstance(problem, GemmProblem):
        raise FieldError("problem", f"expected a GemmProblem, got {type(problem).__name__}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1 or top_k > 100:
        raise FieldError("top_k", f"expected an integer from 1 to 100, got {top_k!r}")
    if backend not in ("cutlass", "cutlass_builder", "dsl"):
        raise FieldError("backend", f"{backend!r} is not one of cutlass, cutlass_builder, dsl")
    t0 = time.perf_counter()
    wave = wave_tiles_default() if wave_tiles is None else bool(wave_tiles)
    results = []
    swap_pruned: dict[str, int] = {}
    unjudged = 0
    forms = [(swapped, ()) for swapped in orientations(problem)]
    stage = staging_form(problem, backend) if staging else ()
    if stage and uses_register_a(problem):
        # an 8-bit / tf32 problem with an MN-major operand, in either orientation, goes to CUTLASS's
        # register-A mainloop, which the explicit template does not spell (CUTLASS-EXPLICIT-RS): only the
        # transposing stage computes it, so the unstaged forms are pruned whole, unjudged
        swap_pruned["CUTLASS-EXPLICIT-RS"] = len(forms)
        forms = []
    if stage:                       # the staged form: the same GEMM on aligned copies (cutegen/staging.py);
        forms.insert(0, (False, stage))   # first, so its costs bound the unstaged (cp.async) form's judging
    from .learned.device import rates as device_rates
    copy_us = costmod.staging_us(problem, stage, device_rates(device)) if stage else 0.0

    def costs_so_far() -> list[float]:
        """Every ranked cost so far, the staged copies included, cheapest first."""
        return sorted(x.cost + (copy_us if st else 0.0) for (_, st), r in results for x in r.ranked)
    for swapped, staged in forms:
        if staged:
            from cutegen.staging import stage_flags, staged_problem
            flags = stage_flags(problem, staged)
            oriented = staged_problem(problem, _make_config((128, 128, 64), (1, 1), (1, 1, 0)).replace(**flags))
            space = SearchSpace.shared(oriented, wave_tiles=wave)
            try:
                results.append(((False, staged), _search(space, oriented, top_k, explain, t0, backend, device,
                                                          predictor, egraph_sizes)))
            finally:
                space.release()
            continue
        if swapped:
            if backend == "dsl":        # DSL-SWAP-AB: the DSL renderer does not exchange operands
                swap_pruned["DSL-SWAP-AB"] = swap_pruned.get("DSL-SWAP-AB", 0) + 1
                continue
            from cutegen.legality import check_swap
            broken = check_swap(problem, _make_config((128, 128, 64), (1, 1), (1, 1, 0)).replace(swap_ab=True))
            if broken:                  # the whole orientation is illegal (SWAP-AB-BIAS, ...)
                for v in broken:
                    swap_pruned[v.rule_id] = swap_pruned.get(v.rule_id, 0) + 1
                continue
        oriented = transposed(problem) if swapped else problem
        space = SearchSpace.shared(oriented, wave_tiles=wave)
        try:
            if not swapped and stage and predictor is None and len(costs_so_far()) >= top_k:
                # the same bound between the staged form and the unstaged one: when the cheapest
                # cp.async estimate cannot enter the staged form's top k, none is judged
                est = rank_space(space, device_rates(device))[6]
                if est.size == 0 or float(est.min()) >= costs_so_far()[top_k - 1]:
                    unjudged += int(est.size)
                    continue
            if swapped and results and costs_so_far() and predictor is None:
                # the cost bound the expansion uses within one orientation, across the two: when even
                # the cheapest swapped estimate cannot beat the stated orientation's best by the
                # margin, no swapped kernel is judged (they count as pruned by the cost bound). Not
                # with a predictor: its costs are measured or learned, the estimates are the prior's.
                stated_best = costs_so_far()[0]
                est = rank_space(space, device_rates(device))[6]
                if float(est.min()) * (1.0 + swap_margin(problem)) >= stated_best:
                    unjudged += int(est.size)
                    continue
            results.append(((swapped, ()), _search(space, oriented, top_k, explain, t0, backend, device, predictor,
                                                   egraph_sizes)))
        finally:
            space.release()
    sliced_results = []
    for s in split_k_reduce_forms(problem, backend) if staging else ():
        # the batched slice GEMM (cutegen/split_k_reduce.py), searched like any problem; its kernels carry
        # split_k_slices and pay the separate reduction (search/cost.py split_k_reduce_us)
        from cutegen.split_k_reduce import sliced_problem
        reduce_us = costmod.split_k_reduce_us(problem, s, device_rates(device))
        sliced = sliced_problem(problem, _make_config((128, 128, 64), (1, 1), (1, 1, 0)).replace(split_k_slices=s))
        space = SearchSpace.shared(sliced, PERSISTENT_POLICIES, wave_tiles=wave)
        try:
            so_far = sorted(costs_so_far() + [x.cost + reduce_us for _, r in sliced_results for x in r.ranked])
            if predictor is None and len(so_far) >= top_k:
                # the cost bound across forms: when the cheapest estimate of this slice count plus its
                # reduction cannot enter the top k, none of its kernels is judged
                est = rank_space(space, device_rates(device))[6]
                if est.size == 0 or float(est.min()) + reduce_us >= so_far[top_k - 1]:
                    unjudged += int(est.size)
                    continue
            sliced_results.append((s, _search(space, sliced, top_k, explain, t0, backend, device, predictor,
                                              egraph_sizes)))
        finally:
            space.release()
    return _merge(problem, results, top_k, swap_pruned, t0, unjudged, device, sliced_results)


def staging_form(problem, backend: str) -> tuple[str, ...]:
    """The operands a staged form of ``problem`` copies: every operand TMA cannot read ('a', 'b') and
    every MN-major operand WGMMA can read only K-major (8-bit, tf32: copied transposed), or () when
    there is none (STAGE-ALIGNED) or the backend does not render staging (the CuTe DSL and the
    CollectiveBuilder templates do not include the staging ABI)."""
    from cutegen.staging import needs_transpose, tma_aligned

    if backend != "cutlass":
        return ()
    return tuple(op for op in ("a", "b") if not tma_aligned(problem, op) or needs_transpose(problem, op))


def _staging_step(staged, flags, copy_us: float) -> str:
    """The explain chain's first step for a staged form: which operands are restrided, which transposed."""
    plain = [o.upper() for o in staged if not flags.get(f"stage_transpose_{o}")]
    trans = [o.upper() for o in staged if flags.get(f"stage_transpose_{o}")]
    parts = []
    if plain:
        parts.append(f"problem: Mul(A, B) = Mul(Restride(A), B) for {', '.join(plain)}  [staging: cudaMemcpy2DAsync "
                     f"into the workspace, leading dimension rounded up to 16 bytes]")
    if trans:
        parts.append(f"problem: Mul(A, B) = Mul(KMajor(A), B) for {', '.join(trans)}  [transposing stage: the ABI's "
                     f"32x32-tile transpose kernel writes the MN-major operand K-major into the workspace, leading "
                     f"dimension K rounded up to 16 bytes; the kernel is TN]")
    return "; ".join(parts) + f"  [copies {copy_us:.1f} us]"


def _sliced_ranked(problem, s: int, x: Ranked, device: str | None = None) -> Ranked:
    """A kernel of the batched slice GEMM as the caller's kernel: ``split_k_slices`` set, the separate
    reduction priced (search/cost.py split_k_reduce_us) and named in the rewrite chain."""
    from .learned.device import rates as device_rates
    reduce_us = costmod.split_k_reduce_us(problem, s, device_rates(device))
    total = x.cost + reduce_us
    bd = {**x.breakdown, "split_k_slices": s, "split_k_reduce_us": round(reduce_us, 4),
          "predicted_us": round(total, 3), "predicted_tflops": round(problem.flops / (total * 1e-6) / 1e12, 1)}
    step = (f"problem: Mul(A, B) = ReduceSlices(Mul(Slice(A, {s}), Slice(B, {s})), {s})  [split-K with a separate "
            f"reduction: {s} K-slices of {problem.k // s} as one batched GEMM into f32 partials, then the ABI's "
            f"reduction kernel, {reduce_us:.1f} us]")
    return Ranked(x.config.replace(split_k_slices=s), total, bd, [step] + x.chain if x.chain else [],
                  x.prediction, None)


def search_split_k_reduce(problem, s: int, top_k: int = 1, *, device: str | None = None) -> list[Ranked]:
    """The best ``top_k`` kernels of the split-K-with-separate-reduction form at ``s`` slices (explicit CUTLASS
    backend), cheapest first, whether or not the search would offer ``s`` (``split_k_reduce_forms``); []
    when the form's rules refuse ``s`` for ``problem``. For measuring the form at a slice count of one's
    choosing (bench/splitk_reduce.py)."""
    from cutegen.legality import check_split_k_reduce
    from cutegen.split_k_reduce import sliced_problem

    probe = _make_config((128, 128, 64), (1, 1), (1, 1, 0)).replace(split_k_slices=s)
    if [v for v in check_split_k_reduce(problem, probe) if v.enforced]:
        return []
    sliced = sliced_problem(problem, probe)
    space = SearchSpace(sliced, PERSISTENT_POLICIES)
    try:
        r = _search(space, sliced, top_k, False, time.perf_counter(), "cutlass", device, None)
    finally:
        space.egg.close()
    return [_sliced_ranked(problem, s, x, device) for x in r.ranked]


def _merge(problem, results, top_k: int, swap_pruned: dict, t0: float, unjudged: int = 0,
           device: str | None = None, sliced_results=()) -> SearchResult:
    """One SearchResult from the searches of each orientation: the kernels of a swapped orientation
    carry ``swap_ab`` (their costs are those of the transposed problem they compute, the same work);
    at equal cost the problem as stated wins."""
    ranked = []
    for (swapped, staged), r in results:
        for x in r.ranked:
            if staged:
                # the staged copies are priced on the caller's problem and added (search/cost.py staging_us)
                from .learned.device import rates as device_rates
                copy_us = costmod.staging_us(problem, staged, device_rates(device))
                from cutegen.staging import stage_flags
                flags = stage_flags(problem, staged)
                bd = {**x.breakdown, "staging_us": round(copy_us, 4),
                      "predicted_us": round(x.cost + copy_us, 3),
                      "predicted_tflops": round(problem.flops / ((x.cost + copy_us) * 1e-6) / 1e12, 1)}
                x = Ranked(x.config.replace(**flags), x.cost + copy_us, bd,
                           [_staging_step(staged, flags, copy_us)] + x.chain if x.chain else [], x.prediction, x.plan)
            if swapped:
                x = Ranked(x.config.replace(swap_ab=True), x.cost, {**x.breakdown, "swap_ab": True},
                           ["problem: Mul(m,n,k,A,B,C) = Transpose(Mul(n,m,k,B^T,A^T,C^T))  [swap AB: D^T = B^T A^T]"]
                           + x.chain if x.chain else [], x.prediction, x.plan)   # a plan is K's: the same
            ranked.append((x.cost, swapped, x))
    for s, r in sliced_results:
        for x in r.ranked:
            x = _sliced_ranked(problem, s, x, device)
            ranked.append((x.cost, False, x))
    results = list(results) + [((False, ()), r) for _, r in sliced_results]
    # A swapped kernel must win by more than SWAP_MARGIN: where both orientations cost about the same
    # (large problems, where the model's M/N asymmetries are noise) the problem as stated keeps its
    # kernel; the swap is taken where it is worth something physical (small M: the 64-row WGMMA M
    # mode filled by N instead of by padding, the few rows in an 8-wide N mode).
    margin = swap_margin(problem)
    ranked.sort(key=lambda t: (round(t[0] * (1.0 + margin if t[1] else 1.0), 6), t[1]))
    pruned = dict(swap_pruned)
    for _, r in results:
        for k, v in r.pruned_by_rule.items():
            pruned[k] = pruned.get(k, 0) + v
    return SearchResult(
        problem=problem, ranked=[x for _, _, x in ranked[:top_k]], search_seconds=time.perf_counter() - t0,
        egraph_nodes=sum(r.egraph_nodes for _, r in results), egraph_classes=sum(r.egraph_classes for _, r in results),
        iterations=sum(r.iterations for _, r in results),
        candidates_total=sum(r.candidates_total for _, r in results) + unjudged,
        candidates_judged=sum(r.candidates_judged for _, r in results),
        candidates_legal=sum(r.candidates_legal for _, r in results), pruned_by_rule=pruned,
        peak_rss_mb=max(r.peak_rss_mb for _, r in results),
        rejected=[d for _, r in results for d in r.rejected][:50])


def _temporal(problem, ranked: list, stages: list, backend: str, judge, explain: bool) -> None:
    """The pipeline's temporal choices of each picked TMA kernel (search/temporal.py): its config gets the
    cheapest protocol the checker and the backend accept, its cost the protocol's term, its chain the
    choices and verdicts. cp.async kernels have no TMA pipeline to choose for."""
    from .temporal import refine

    idx = [i for i, r in enumerate(ranked) if r.config.mainloop_load == "tma"]
    picks = refine(problem, [(ranked[i].config, stages[i], ranked[i].breakdown) for i in idx], backend,
                   judge.index, explain)
    for i, pick in zip(idx, picks):
        r = ranked[i]
        bd = {**r.breakdown, **pick.parts} if pick.extra_us else r.breakdown
        ranked[i] = Ranked(pick.config, r.cost + pick.extra_us, bd, r.chain + pick.lines, r.prediction, r.plan)
    if any(p.extra_us for p in picks):       # a protocol changed a cost: cheapest first again (stable)
        ranked.sort(key=lambda r: round(r.cost, 6))


def _search(space: SearchSpace, problem, top_k: int, explain: bool, t0: float,
            backend: str = "cutlass", device: str | None = None, predictor=None,
            egraph_sizes: bool = True) -> SearchResult:
    from .learned.device import rates as device_rates

    rates = device_rates(device)
    tiles, clusters, pols, ti, ci, pi, est, order = rank_space(space, rates)
    want = top_k                    # the number of legal kernels the judging must make certain
    if predictor is not None:
        want = max(top_k, LEARNED_POOL)
    judge = Judge(problem, backend=backend)
    expanded: list[tuple] = []      # (tile, cluster, policy, raster code, swizzle, config, verdict)
    legal: list[tuple] = []
    kth = math.inf

    est_of: dict = {}

    def judge_one(tile, cluster, pol, r=0, w=1, est_cost=math.inf):
        nonlocal kth
        cfg = _make_config(tile, cluster, pol, raster=RASTER[r], swizzle=w,
                           wgmma_k=space.kk if space.wave_tiles else None)
        v = judge(cfg)
        row = (tile, cluster, pol, r, w, cfg, v)
        expanded.append(row)
        if v.legal:
            legal.append((est_cost, simplicity(v.config), v.config.to_json(), row))
            legal.sort(key=lambda x: x[:3])
            if len(legal) >= want:
                kth = legal[want - 1][0]

    for n, idx in enumerate(order):
        if n >= MAX_JUDGED:
            break
        if len(legal) >= want and n >= MIN_JUDGED and est[idx] >= kth:
            break
        judge_one(tuple(int(x) for x in tiles[ti[idx]]), tuple(int(x) for x in clusters[ci[idx]]),
                  tuple(int(x) for x in pols[pi[idx]]), est_cost=float(est[idx]))
    # refine: the raster order and swizzle of the best kernels (they change only the DRAM term)
    for row in [x[3] for x in legal[:REFINE]]:
        tile, cluster, pol = row[:3]
        seen = {costmod.effective_raster(problem, tile, cluster, 0, 1)}
        for r in range(len(RASTER)):
            for w in (1, 2, 4, 8):
                eff = costmod.effective_raster(problem, tile, cluster, r, w)
                if eff not in seen:          # same tile order as one already judged: the same kernel
                    seen.add(eff)
                    judge_one(tile, cluster, pol, r, w)
    # exact costs of every legal candidate (its resolved stages, raster, swizzle), in one batch
    legal = _exact_costs(problem, [x[3] for x in legal], rates)
    predictions: dict = {}
    if predictor is not None and legal:
        # re-rank the prior's best ``want``; the rest were not predicted, so they queue behind all of those
        # in the prior's order (every judged-legal kernel must stay priced for the extraction)
        legal.sort(key=lambda x: x[0])
        head, tail = legal[:want], legal[want:]
        preds = predictor.predict(problem, [(row[6].config, row[6].stages) for _, row in head])
        for p, (_, row) in zip(preds, head):
            predictions[(row[0], row[1], row[2], row[3], row[4])] = p
        behind = max(p.us for p in preds)
        legal = [(p.us, row) for p, (_, row) in zip(preds, head)] + [(behind + c, row) for c, row in tail]

    # materialise the judged candidates in the e-graph, with the legality analysis
    egg = space.egg
    judge_rows, reject_rows, stage_rows = [], [], set()
    for tile, cluster, pol, r, w, cfg, v in expanded:
        key = (*tile, *cluster, *pol, r, w)
        judge_rows.append(key)
        for rid in v.rules:
            reject_rows.append((*key, judge.index(rid)))
        if v.legal and v.stages:
            stage_rows.add((*tile, pol[0], pol[1], v.stages))
    egg.input("Expand", judge_rows)
    egg.input("Rejected", reject_rows)
    egg.input("StagesOf", sorted(stage_rows))
    egg.run("(run-schedule (saturate (run expand)))")
    costs = {(row[0], row[1], row[2], row[3], row[4]): (c, None, row[6]) for c, row in legal}
    picked = extract_ranked(egg, costs, top_k, problem)
    # a picked stream-K kernel's launch plan: its Run e-class, extracted (search/decomposition.py)
    plans = extract_plans(egg, problem, [(key, costs[key][2].config, costs[key][2].stages) for key in picked
                                         if costs[key][2].config.tile_scheduler == "stream_k"], rates)
    ranked = []
    for key in picked:
        _, _, v = costs[key]
        pred = predictions.get(key)
        if key in plans:
            plan, c, bd = plans[key]
        else:
            plan = None
            c, bd = costmod.config_cost(problem, v.config, v.stages, device=rates)
        chain = space.tile_forms(key[0]) if explain else []
        if explain and v.config.mainloop_load == "cp_async":
            chain.append(f"Pol({key[2][0]}, no_smem, {costmod.SCHEDULERS[key[2][2]]}) = "
                         f"Pol({key[2][0] - len(costmod.SCHEDULES)}, no_smem, ..) with a cp.async load  [TmaCannotLoad: "
                         f"alignment_a={problem.alignment_a}, alignment_b={problem.alignment_b} elements are below "
                         f"16 bytes]")
        ranked.append(Ranked(v.config, pred.us if pred is not None else c, bd, chain, pred, plan))
    _temporal(problem, ranked, [costs[key][2].stages for key in picked], backend, judge, explain)
    nodes, classes = egg.sizes() if egraph_sizes else (0, 0)
    rejected = [{"config": row[5].to_dict(), "rules": row[6].rules, "reasons": row[6].reasons}
                for row in expanded[:50] if not row[6].legal] if explain else []
    result = SearchResult(
        problem=problem, ranked=ranked, search_seconds=time.perf_counter() - t0,
        egraph_nodes=nodes, egraph_classes=classes, iterations=egg.iterations,
        candidates_total=int(len(order)), candidates_judged=len(expanded), candidates_legal=len(legal),
        pruned_by_rule=dict(judge.pruned_by_rule),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, rejected=rejected)
    return result
