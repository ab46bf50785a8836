"""Which kernels go into a pack: candidates from the search, a time for every (shape, candidate),
and a weighted greedy set cover.

A candidate "covers" a shape when its time is within ``tolerance`` of the best time any candidate
has for that shape. The cover takes, each round, the kernel that covers the most uncovered weight
(ties: the lower weighted time on what it newly covers, then the configuration's JSON), until every
shape is covered or ``max_kernels`` are taken. Each shape then runs on the fastest chosen kernel of
its class. Times are the cost model's predictions for the target; with a results database (``--db``) they come
from the learned cost model of issue 11 (``cutegen.search.learned.Predictor``): the measured median
where that kind measured the pair, else the prior times the learned correction, else the prior
(``source`` in the coverage table says which). The dispatch rules between sample points use the prior.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..config import KernelConfig
from ..errors import CutegenError, FieldError
from ..problem import GemmProblem
from .shapes import Shape
from .targets import Target

TOP_K = 8           # candidates each shape contributes to its class's pool
SEARCH_BUCKET_BITS = 2   # one search per (class, N, K) and M in [4^b, 4^(b+1)): see select()


def class_key(problem: GemmProblem) -> str:
    return json.dumps(problem.kernel_key(), sort_keys=True)


@dataclass
class Row:
    """One line of the coverage table."""
    shape: Shape
    kernel: int | None          # index into Selection.kernels; None: not covered
    time_us: float | None
    best_us: float | None
    source: str                 # "predicted" (prior), or with --db: "measured", "learned" or "prior"
    note: str = ""
    cublas_us: float | None = None   # torch.matmul's measured time (--measured, --tune), else None
    point: str | None = None         # --tune: "sampled" or "off-sample" (both measured); None otherwise
    predicted_us: float | None = None   # --tune: the cost model's time for the serving kernel

    @property
    def loss(self) -> float | None:
        if self.time_us is None or not self.best_us:
            return None
        return self.time_us / self.best_us - 1.0


@dataclass
class Kernel:
    cls: str
    config: KernelConfig
    problem: GemmProblem        # the highest-weight shape it serves: named in its manifest

    @property
    def key(self) -> str:
        # memoised per configuration object (to_json builds a dict and dumps it; dispatch asks very often)
        cached = self.__dict__.get("_key")
        if cached is None or cached[0] is not self.config:
            cached = self.__dict__["_key"] = (self.config, self.config.to_json())
        return cached[1]


@dataclass
class Selection:
    target: Target
    tolerance: float
    max_kernels: int
    kernels: list[Kernel]
    rows: list[Row]
    classes: list[str]                             # class keys in first-seen order
    times: dict[int, dict[str, tuple[float, str]]] = field(repr=False, default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pricer: Any = field(repr=False, default=None)   # a Pricer shared with the dispatch tables
    wave_tiles: bool = False                        # the searches' option (cutegen.search.ranking); pack.json states it

    def kernel_time(self, shape_index: int, kernel: int) -> float | None:
        t = self.times[shape_index].get(self.kernels[kernel].key)
        return None if t is None else t[0]


def predicted_time(problem: GemmProblem, config: KernelConfig, rates=None) -> float | None:
    """The cost model's time for ``config`` on ``problem`` (priced with ``rates``, a ``cost.Rates`` or
    None for the model's own), or None when a rule forbids the pair."""
    from ..legality import check_config
    from ..search import cost
    from ..swap_ab import kernel_problem
    rep = check_config(problem, config)
    if not rep.legal:
        return None
    # a swap-AB kernel runs the transposed problem (N x M): price that one, as the search does
    return cost.config_cost(kernel_problem(problem, rep.config), rep.config, rep.stages, device=rates)[0]


class Pricer:
    """``predicted_time`` for many (problem, configuration) pairs: each pair's legality is judged once
    (memoised; the rules read M, N and K, so the key is the exact problem), and the legal configurations of
    one problem are priced in one vectorised ``cost_arrays`` call per orientation, the very arithmetic
    ``cost.config_cost`` does for one (tests/test_pack.py checks they agree)."""

    def __init__(self, rates=None):
        self.rates = rates
        self._legal: dict[tuple[GemmProblem, str], tuple[KernelConfig, int] | None] = {}
        self._time: dict[tuple[GemmProblem, str], float | None] = {}
        self._json: dict[KernelConfig, str] = {}     # to_json is a dict and a json.dumps; equal configs, equal JSON
        self._est: dict[tuple, list[float]] = {}

    def key(self, config: KernelConfig) -> str:
        """``config.to_json()``, memoised (selection asks for it hundreds of thousands of times)."""
        k = self._json.get(config)
        if k is None:
            k = self._json[config] = config.to_json()
        return k

    def legal(self, problem: GemmProblem, config: KernelConfig) -> tuple[KernelConfig, int] | None:
        key = (problem, self.key(config))
        if key not in self._legal:
            from ..legality import check_config
            rep = check_config(problem, config)
            self._legal[key] = (rep.config, rep.stages) if rep.legal else None
        return self._legal[key]

    def times(self, problem: GemmProblem, configs: list[KernelConfig]) -> list[float | None]:
        """Predicted microseconds of each configuration on ``problem``; None where a rule forbids the pair."""
        keys = [self.key(c) for c in configs]
        rows = []
        for key, cfg in zip(keys, configs):
            if (problem, key) in self._time:
                continue
            rep = self.legal(problem, cfg)
            if rep is None:
                self._time[(problem, key)] = None
            else:
                rows.append((key, rep[0], rep[1]))
        for (key, _, _), t in zip(rows, self._price(problem, rows)):
            self._time[(problem, key)] = t
        return [self._time[(problem, key)] for key in keys]

    def estimates(self, problem: GemmProblem, configs: list[KernelConfig]) -> list[float]:
        """The same prices before any rule is judged (the configurations' own stages): what a legal pair
        will cost. A configuration without stages is judged first (its stages come from the rules)."""
        memo = (problem, tuple(self.key(c) for c in configs))
        if memo in self._est:
            return list(self._est[memo])
        out = [None] * len(configs)
        rows, where = [], []
        for i, cfg in enumerate(configs):
            if cfg.stages is None:
                t = self.time(problem, cfg)
                out[i] = math.inf if t is None else t
            else:
                rows.append((memo[1][i], cfg, cfg.stages))
                where.append(i)
        for i, t in zip(where, self._price(problem, rows)):
            out[i] = t
        self._est[memo] = list(out)
        return out

    def _price(self, problem: GemmProblem, rows: list[tuple[str, KernelConfig, int]]) -> list[float]:
        import numpy as np
        from ..search import cost
        from ..swap_ab import kernel_problem
        out = [0.0] * len(rows)
        for swapped in (False, True):
            idx = [i for i, r in enumerate(rows) if bool(r[1].swap_ab) == swapped]
            if not idx:
                continue
            q = kernel_problem(problem, rows[idx[0]][1])      # a swap-AB kernel runs the N x M problem
            cols = list(zip(*[(c.tile_shape[0], c.tile_shape[1], c.tile_shape[2], c.cluster_shape[0],
                               c.cluster_shape[1], *cost.config_codes(c), st, cost.RASTERS.index(c.raster_order),
                               c.raster_swizzle) for _, c, st in (rows[i] for i in idx)]))
            n = len(idx)
            total, _ = cost.cost_arrays(q, *[np.array(x, dtype=np.int64) for x in cols], device=self.rates,
                                        decomposition=np.full(n, cost.DECOMP_STREAM_K), splits=np.ones(n, dtype=np.int64))
            for i, t in zip(idx, np.asarray(total, dtype=np.float64).reshape(-1)):
                out[i] = float(t)
        return out

    def time(self, problem: GemmProblem, config: KernelConfig) -> float | None:
        return self.times(problem, [config])[0]


def plan_ready(config: KernelConfig) -> bool:
    """Whether a pack's plan entry points (templates/cutegen_plan.inc.j2) run ``config`` as its C ABI would:
    not a staged (or transposing) kernel, whose ABI copies operands first, and not a split-K kernel with a
    separate reduction, whose ABI launches the reduction after it; the plan entry points do neither."""
    staged = getattr(config, "stage_a", False) or getattr(config, "stage_b", False)
    return not staged and getattr(config, "split_k_slices", 1) == 1


def _measured(db: Any, target: Target, problem: GemmProblem) -> dict[str, KernelConfig]:
    """config JSON -> config of every validated benchmark of this exact problem on the target: they join
    the candidates, so a kernel the database timed is considered even when the search ranks it lower."""
    if db is None:
        return {}
    out: dict[str, KernelConfig] = {}
    for m in db.measurements(device_kind=target.kind, problem=problem):
        if m.validated and m.backend == "cutlass" and m.is_benchmark and plan_ready(m.config):
            out.setdefault(m.config.to_json(), m.config)
    return out


def search_task(item: tuple) -> list[KernelConfig]:
    """One shape's search (an executor task: here, or on a Dask worker): its ``top_k`` configurations."""
    from ..search import search
    problem, top_k, kind, predictor, *option = item
    wave = bool(option and option[0])       # wave tiles (search/engine.py); items without it: off, as before
    # no staged kernels (cutegen/staging.py): a pack's plan entry points build CUTLASS's arguments
    # themselves (templates/cutegen_plan.inc.j2) and do not make the ABI's restride copies
    return [r.config for r in search(problem, top_k, device=kind, predictor=predictor, staging=False,
                                     egraph_sizes=False, wave_tiles=wave).ranked]


# Searches are CPU-bound Python (egglog, the rules, numpy) and independent: without an executor they run in
# worker processes, one per core up to CUTEGEN_PACK_PROCESSES (default 2; 1 runs them here). Results come
# back in order, so the selection does not depend on it. Objects every item holds (the learned model) are
# sent to each worker once. Fewer items than this run here (a worker's start costs about a second).
PARALLEL_MIN_ITEMS = 8


def _processes() -> int:
    import os
    try:
        want = int(os.environ.get("CUTEGEN_PACK_PROCESSES", "2"))
    except ValueError:
        raise FieldError("CUTEGEN_PACK_PROCESSES", f"expected an integer, got {os.environ['CUTEGEN_PACK_PROCESSES']!r}")
    return max(1, min(want, os.cpu_count() or 1))


def _main_is_importable() -> bool:
    """Whether a worker process may import the main module (``multiprocessing`` does, under another name):
    ``python -m pkg`` (a ``__main__`` module is skipped), an interactive session, or a script whose code runs
    under an ``if __name__ == "__main__"`` guard (console scripts; pytest). A script without one would run
    again in every worker: then the work stays in this process."""
    import sys
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    if main is None or path is None or (spec is not None and spec.name.endswith("__main__")):
        return True
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return False
    return "if __name__ ==" in text


def _picklable(fn) -> bool:
    import pickle
    try:
        pickle.dumps(fn)
        return True
    except Exception:        # noqa: BLE001 - a lambda or a local function (a test's stand-in): run here
        return False


class _Shared:
    """Stands in an item for an object every item holds; each worker process receives it once."""
    def __init__(self, slot: int):
        self.slot = slot


_WORKER_SHARED: dict[int, Any] = {}


def one_blas_thread():
    """A pack's searches and selection multiply small matrices (the learned model's distances, a few thousand
    rows): a second BLAS thread only spins, on a 2-core machine against the other search process. Measured on the
    qwen2.5 pack (2026-11-26, this 2-core machine): in one process 50.6 s of CPU with OpenBLAS's threads, 28.6 s
    with one, the same pack. The results do not change: BLAS splits a product's rows and columns over its
    threads, never a dot product. Globally in a worker process, as a context here."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


def _worker_init(shared: dict) -> None:
    one_blas_thread()
    _WORKER_SHARED.clear()
    _WORKER_SHARED.update(shared)


def _worker_call(fn, item):
    if isinstance(item, tuple):
        item = tuple(_WORKER_SHARED[x.slot] if isinstance(x, _Shared) else x for x in item)
    return fn(item)


def _run_in_processes(fn, items: list, progress: str | None) -> list:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from .progress import bar
    shared: dict[int, Any] = {}
    if all(isinstance(it, tuple) for it in items) and len({len(it) for it in items}) == 1:
        for j, x in enumerate(items[0]):
            if x is not None and not isinstance(x, (bool, int, float, str)) and all(it[j] is x for it in items):
                shared[j] = x
    if shared:
        items = [tuple(_Shared(j) if j in shared else x for j, x in enumerate(it)) for it in items]
    # forkserver: a fresh interpreter per worker (egglog's threads do not survive a fork)
    ctx = multiprocessing.get_context("forkserver")
    out = []
    with ProcessPoolExecutor(_processes(), mp_context=ctx, initializer=_worker_init, initargs=(shared,)) as pool, \
            bar(progress, len(items)) as advance:
        for fut in [pool.submit(_worker_call, fn, it) for it in items]:
            out.append(fut.result())
            advance()
    return out


def run_searches(fn, items: list, names: list[str], executor=None, progress: str | None = None) -> list:
    """``fn(item)`` for every item, in order: in this process, or as CPU tasks of ``executor``. A task that
    failed is an error naming it (the same error a search raises here, so both executors stop alike).
    ``progress``: the description of a progress bar with an estimate of the time left (this process only;
    the executor reports its own progress); None shows none."""
    if (executor is None and len(items) >= PARALLEL_MIN_ITEMS and _processes() > 1 and _picklable(fn)
            and _main_is_importable()):
        return _run_in_processes(fn, items, progress)
    if executor is None:
        from .progress import bar
        out = []
        with bar(progress, len(items)) as advance:
            for it in items:
                out.append(fn(it))
                advance()
        return out
    outs = executor.map(fn, items, kind="cpu", names=names)
    bad = [o for o in outs if not o.ok]
    if bad:
        raise CutegenError(f"{len(bad)} of {len(outs)} searches failed on the {executor.name} executor; first: "
                           f"{bad[0].name}: {bad[0].error}")
    return [o.value for o in outs]


def select(shapes: list[Shape], target: Target, *, max_kernels: int, tolerance: float,
           db: Any = None, top_k: int = TOP_K, say=lambda msg: None, executor=None,
           progress: bool = False, wave_tiles: bool = False) -> Selection:
    """``executor`` (a ``cutegen.executor.Executor``, or None: this process): where the per-shape searches
    run; the selection itself, and so the pack's bytes, do not depend on it. ``wave_tiles``: the searches'
    option (search/engine.py; False: as every pack made before it)."""
    with one_blas_thread():
        return _select(shapes, target, max_kernels=max_kernels, tolerance=tolerance, db=db, top_k=top_k, say=say,
                       executor=executor, progress=progress, wave_tiles=wave_tiles)


def _select(shapes: list[Shape], target: Target, *, max_kernels: int, tolerance: float, db: Any, top_k: int, say,
            executor, progress: bool, wave_tiles: bool = False) -> Selection:
    if not isinstance(max_kernels, int) or max_kernels < 1:
        raise FieldError("--max-kernels", f"expected a positive integer, got {max_kernels!r}")
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 10):
        raise FieldError("--tolerance", f"expected a fraction from 0 to 10 (0.03 = 3%), got {tolerance!r}")
    classes: list[str] = []
    pool: dict[str, dict[str, KernelConfig]] = {}           # class -> config JSON -> config
    notes: list[str] = []
    rates = target.rates
    predictor = None
    if db is not None:
        # The learned cost model (issue 11) for this kind: exact measurements where the database has
        # them, else the prior times a correction learned from every kind's data, else the prior.
        from ..search.learned import cache   # fitted once per database content (issue 24 part 3)
        predictor = cache.predictor(target.kind, db)
        say(f"  {target.kind}: {predictor.samples} measured samples of this kind, "
            + ("a learned correction" if predictor.learned else "no learned correction (too little data)"))
    # The learned model is megabytes: on a cluster it travels once, not once per shape.
    model = executor.share(predictor) if executor is not None and predictor is not None else predictor
    # One search per (class, N, K, batch) and range of M from 4^b to 4^(b+1) - 1 (SEARCH_BUCKET_BITS), at
    # the range's first sampled M: the candidates of its other points (powers of two, wave boundaries, a
    # long list of M) come from the same search, and every shape is still priced with the class's whole
    # pool. This bounds the searches by 16 per (N, K) however many M values the shapes file lists. On
    # examples/pack/llm.toml the predicted time of the whole pack is within 0.05% of one search per shape
    # (62699 vs 62669 us summed over its 165 shapes) for a third of the searches.
    reps: dict[tuple, int] = {}
    for i, s in enumerate(shapes):
        q = s.problem
        reps.setdefault((class_key(q), q.n, q.k, q.batch, (q.m.bit_length() - 1) // SEARCH_BUCKET_BITS), i)
    searched = [shapes[i] for i in sorted(reps.values())]
    found = run_searches(search_task, [(s.problem, top_k, target.kind, model, wave_tiles) for s in searched],
                         [f"{target.kind} {s.label}" for s in searched], executor,
                         progress=f"search {target.kind}" if progress else None)
    say(f"  searched {len(searched)} of {len(shapes)} shapes for {target.kind} (one per class, N, K and M in "
        f"[{1 << SEARCH_BUCKET_BITS}^b, {1 << SEARCH_BUCKET_BITS}^(b+1)))")
    for s in shapes:
        cls = class_key(s.problem)
        if cls not in pool:
            classes.append(cls)
            pool[cls] = {}
    for s, configs in zip(searched, found):
        for cfg in configs:
            pool[class_key(s.problem)].setdefault(cfg.to_json(), cfg)
    for s in shapes:
        for key, cfg in _measured(db, target, s.problem).items():
            pool[class_key(s.problem)].setdefault(key, cfg)
    # every candidate of the class, priced (or measured) on every shape of the class
    times: dict[int, dict[str, tuple[float, str]]] = {}
    pricer = Pricer(rates)
    for i, s in enumerate(shapes):
        row: dict[str, tuple[float, str]] = {}
        if predictor is None:
            # Only the pairs the cover can use are judged by the rules: in estimated order until the first
            # legal one (the best), then those within the tolerance of it. The rest stay unjudged (a
            # chosen kernel's time on a shape it does not cover is priced when the rows are made).
            keys, cfgs = zip(*pool[class_key(s.problem)].items())
            est = pricer.estimates(s.problem, list(cfgs))
            best_t = None
            for e, key, cfg in sorted(zip(est, keys, cfgs), key=lambda x: (x[0], x[1])):
                if best_t is not None and e > best_t * (1.0 + tolerance) + 1e-9:
                    break
                t = pricer.time(s.problem, cfg)
                if t is not None:
                    row[key] = (t, "predicted")
                    best_t = t if best_t is None else min(best_t, t)
        else:
            # The same lazy judging with the learned model: every candidate predicted at its own stages in one
            # call, then judged in predicted order until the first legal one and those within the tolerance
            # of it. A pair the rules complete differently (other stages) is predicted again as judged.
            keys, cfgs = zip(*pool[class_key(s.problem)].items())
            preds = predictor.predict(s.problem, [(c, c.stages) for c in cfgs])
            best_t = None
            for pred, key, cfg in sorted(zip(preds, keys, cfgs), key=lambda x: (x[0].us, x[1])):
                if best_t is not None and pred.us > best_t * (1.0 + tolerance) + 1e-9:
                    break
                rep = pricer.legal(s.problem, cfg)
                if rep is None:
                    continue
                if rep != (cfg, cfg.stages):      # the rules completed it otherwise: predict it as judged
                    pred = predictor.predict(s.problem, [rep])[0]
                row[key] = (pred.us, pred.source)
                best_t = pred.us if best_t is None else min(best_t, pred.us)
        times[i] = row
    if predictor is None:
        def fill(problem, cfgs):
            return [None if t is None else (t, "predicted") for t in pricer.times(problem, cfgs)]
    else:
        def fill(problem, cfgs):
            reps = [pricer.legal(problem, c) for c in cfgs]
            legal = [r for r in reps if r is not None]
            preds = iter(predictor.predict(problem, legal) if legal else [])
            return [None if r is None else (lambda p: (p.us, p.source))(next(preds)) for r in reps]
    sel = cover(shapes, target, classes, pool, times, max_kernels=max_kernels, tolerance=tolerance, notes=notes,
                pricer=pricer, fill=fill)
    sel.wave_tiles = wave_tiles        # the fallbacks search as the pool did; pack.json states it
    return sel


def cover(shapes: list[Shape], target: Target, classes: list[str], pool: dict[str, dict[str, KernelConfig]],
          times: dict[int, dict[str, tuple[float, str]]], *, max_kernels: int, tolerance: float,
          notes: list[str] | None = None, pricer: "Pricer | None" = None, fill=None) -> Selection:
    """The weighted greedy set cover over ``times`` (shape index -> config JSON -> (us, source)) of the
    candidates ``pool`` (class -> config JSON -> config), and each shape's row on the fastest chosen kernel.
    ``fill(problem, configs) -> [(us, source) | None]``: the times of chosen kernels on a shape the lazy judging
    left without one (predicted selection); None (measured selection): it does not serve that shape."""
    notes = [] if notes is None else notes
    pricer = pricer or Pricer(target.rates)
    n_classes = sum(1 for c in classes if any(times[i] for i, s in enumerate(shapes) if class_key(s.problem) == c))
    if max_kernels < n_classes:
        raise FieldError("--max-kernels", f"{max_kernels} is fewer than the {n_classes} kernel classes "
                         "(dtype, layout, epilogue, alignment) in the shapes file; each needs a kernel")

    best = {i: min((t for t, _ in row.values()), default=None) for i, row in times.items()}
    covers: dict[tuple[str, str], set[int]] = {}
    for i, row in times.items():
        cls = class_key(shapes[i].problem)
        for key, (t, _) in row.items():
            if t <= best[i] * (1.0 + tolerance) + 1e-9:
                covers.setdefault((cls, key), set()).add(i)
    uncovered = {i for i, b in best.items() if b is not None}
    chosen: list[tuple[str, str]] = []
    # Each class first gets its single best cover, so that no class is left without a kernel.
    order = [c for c in classes if any((c, k) in covers for k in pool[c])]
    def gain(ck):
        new = covers[ck] & uncovered
        w = sum(shapes[i].weight for i in new)
        wt = sum(shapes[i].weight * times[i][ck[1]][0] / best[i] for i in new)
        return (-w, wt, ck[1])
    for c in order:
        ck = min((ck for ck in covers if ck[0] == c), key=gain)
        chosen.append(ck)
        uncovered -= covers[ck]
    while uncovered and len(chosen) < max_kernels:
        options = [ck for ck in covers if ck not in chosen and covers[ck] & uncovered]
        if not options:
            break
        ck = min(options, key=gain)
        chosen.append(ck)
        uncovered -= covers[ck]
    if uncovered:
        notes.append(f"{len(uncovered)} shape(s) are not within {tolerance:.1%} of their best with "
                     f"{max_kernels} kernels; they run on the fastest chosen kernel (loss column)")

    # the kernels, in the order the cover chose them; each named after its heaviest shape
    kernels: list[Kernel] = []
    for cls, key in chosen:
        served = sorted(covers[(cls, key)], key=lambda i: (-shapes[i].weight, i))
        cfg = pool[cls][key]
        kernels.append(Kernel(cls, cfg, shapes[served[0]].problem))
    rows = []
    for i, s in enumerate(shapes):
        if best[i] is None:
            rows.append(Row(s, None, None, None, "-", "the search found no legal kernel"))
            continue
        if fill is not None:           # the chosen kernels the lazy judging skipped on this shape
            missing = [k for k in kernels if k.cls == class_key(s.problem) and k.key not in times[i]]
            for k, got in zip(missing, fill(s.problem, [k.config for k in missing]) if missing else []):
                if got is not None:
                    times[i][k.key] = got
        opts = [(times[i][k.key][0], j) for j, k in enumerate(kernels) if k.cls == class_key(s.problem)
                and k.key in times[i]]
        if not opts:
            rows.append(Row(s, None, None, best[i], "-", "no chosen kernel can run it"))
            continue
        t, j = min(opts)
        rows.append(Row(s, j, t, best[i], times[i][kernels[j].key][1]))
    if not kernels:
        raise CutegenError("no shape in the shapes file has a legal kernel; nothing to pack")
    return Selection(target, tolerance, max_kernels, kernels, rows, classes, times, notes, pricer=pricer)


def geomean(values) -> float:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def given(shapes: list[Shape], target: Target, configs: list[KernelConfig], *, tolerance: float = 0.03,
          times: dict[tuple[int, str], tuple[float, str]] | None = None) -> Selection:
    """A selection of exactly ``configs`` (in that order, every one kept): each shape runs on the fastest of
    them that its class can run. ``times`` ((shape index, config JSON) -> (us, source)) overrides the
    cost model where given (measured selection); elsewhere the target's prediction prices the pair.
    Each configuration serves the class of the first shape it can run; one no shape can run is an error."""
    if not configs:
        raise CutegenError("a pack of given kernels needs at least one configuration")
    for cfg in configs:
        if not plan_ready(cfg):
            raise CutegenError(f"configuration {cfg.short_name()} stages operands or reduces split-K slices in its "
                               "C ABI; a pack's plan entry points do neither, so it cannot be packed")
    times = times or {}
    pricer = Pricer(target.rates)
    table: dict[int, dict[str, tuple[float, str]]] = {}
    for i, s in enumerate(shapes):
        row = {}
        for cfg in configs:
            key = cfg.to_json()
            if (i, key) in times:
                row[key] = times[(i, key)]
                continue
            t = pricer.time(s.problem, cfg)
            if t is not None:
                row[key] = (t, "predicted")
        table[i] = row
    classes: list[str] = []
    for s in shapes:
        if class_key(s.problem) not in classes:
            classes.append(class_key(s.problem))
    kernels = []
    for cfg in configs:
        served = [i for i in range(len(shapes)) if cfg.to_json() in table[i]]
        if not served:
            raise CutegenError(f"configuration {cfg.short_name()} can run none of the shapes; it cannot be packed")
        first = min(served, key=lambda i: (-shapes[i].weight, i))
        cls = class_key(shapes[first].problem)
        kernels.append(Kernel(cls, cfg, shapes[first].problem))
    rows = []
    for i, s in enumerate(shapes):
        opts = [(table[i][k.key][0], j) for j, k in enumerate(kernels)
                if k.cls == class_key(s.problem) and k.key in table[i]]
        if not opts:
            rows.append(Row(s, None, None, None, "-", "no given kernel can run it"))
            continue
        t, j = min(opts)
        rows.append(Row(s, j, t, t, table[i][kernels[j].key][1]))
    return Selection(target, tolerance, len(kernels), kernels, rows, classes, table, [], pricer=pricer)
