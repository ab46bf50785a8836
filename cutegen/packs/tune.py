"""Measured selection: ``cutegen pack --tune`` (issue 22 part 2), split as ``cutegen tune`` is.

Plan (here, no GPU; ``pack SHAPES --tune --plan-only -o DIR``): the candidates of every kernel class are

  - the search's top ``top_k`` (default 3) of each search the pack makes (one per class, N, K and M in
    [4^b, 4^(b+1)): the same searches as a predicted pack),
  - nvMatmulHeuristics' first legal pick at every sampled shape (where it is installed and packable),
  - the CUTLASS default (128x256x64, cluster 2x1x1, as ``cutegen tune``), where legal,

de-duplicated by configuration across shapes and capped (``MAX_CANDIDATES``: a warning names what was left
out, lowest priority first: the search's rank, the default as rank 1.2, nvMMH's pick as 1.5; within a
rank, the ones more searches or shapes proposed first). They are
rendered as one *candidate pack* (every candidate a kernel of it, reachable past the dispatcher through
``cutegen_pack_plan_kernel``) with ``tune.json``: the candidates, and every shape to time: the sampled
shapes and the off-sample M values (``--off-sample``, fixed before tuning, at least ``MIN_OFF_SAMPLE`` per
(N, K) where the range allows) at every (N, K).

Run (GPU machine; ``bench/gpu_pack.sh tune``): the candidate pack is built (16 nvcc jobs), and
``cutegen.packs.measure_gpu`` validates and times every candidate at every shape with torch.matmul in the
same process, one executor GPU task per (N, K), each task's records written to the results database before
the next starts (a later call resumes: pairs already measured are not timed again).

Select (anywhere; ``pack SHAPES --tune --db DB -o DIR``, no GPU): the pool of each class is every packable
configuration the database measured (validated) at the class's shapes on the target kind; the cover is
chosen from the measured times (a shape nothing measured keeps predicted times, and says so), and each
(N, K) dispatches M by segments whose boundaries are where two chosen kernels' measured curves cross,
interpolated linearly in log2 M between measured points (``measured.segments``), not at powers of two.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import KernelConfig
from ..errors import CutegenError, FieldError
from .select import Row, Selection, class_key, plan_ready, run_searches, search_task
from .shapes import Entry, Shape

TOP_K = 3
# PACK-TUNE-CANDIDATES-MAX: each candidate is one nvcc compile of about a minute (16 at a time on the GPU
# machine: about 4 s each there), so past this many a plan keeps the highest-priority ones and warns.
MAX_CANDIDATES = 56
# PACK-TUNE-SHAPES-MAX: every timed shape times every candidate of its class (25 launches each); past this
# many timed shapes a plan is refused (hours of GPU time), naming the (N, K) with the most.
MAX_TIMED_SHAPES = 1024
MIN_OFF_SAMPLE = 10
# Fixed before any tuning (issue 22): none is a sample point of examples/pack/{llm,qwen2.5}.toml on h200
# (tests/test_pack.py checks it); the same values bench/gpu_pack.sh times through the op.
DEFAULT_OFF_SAMPLE = (3, 12, 24, 48, 96, 100, 200, 300, 700, 1500, 3000, 6000)
PLAN_FILE = "tune.json"
PLAN_SCHEMA = "cutegen-pack-tune/1"
SOURCE_PREFIX = "cutegen-pack-tune"
CUTLASS_DEFAULT = {"tile_shape": [128, 256, 64], "cluster_shape": [2, 1, 1], "stages": "auto",
                   "mainloop_schedule": "cooperative", "epilogue_schedule": "tma_warp_specialized_cooperative",
                   "tile_scheduler": "persistent"}
# seconds per candidate compile on the 16-core GPU machine (the qwen2.5 pack: 17 kernels in 66 s)
BUILD_S_PER_KERNEL = 4.0


@dataclass
class Candidate:
    cls: str
    config: KernelConfig
    problem: Any                   # the shape it was found for (its manifest's problem)
    origins: list[str] = field(default_factory=list)
    priority: float = 99.0

    @property
    def key(self) -> str:
        return self.config.to_json()


def parse_off_sample(text: str | None) -> tuple[int, ...]:
    if text is None:
        return DEFAULT_OFF_SAMPLE
    try:
        vals = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise FieldError("--off-sample", f"expected comma-separated integers, got {text!r}") from None
    if any(v < 1 or v > 2**31 - 1 for v in vals):
        raise FieldError("--off-sample", "every M must be from 1 to 2^31-1")
    return vals


def off_sample_shapes(entries: list[Entry], points: list[Shape], values: tuple[int, ...]) -> list[Shape]:
    """The off-sample shapes: every value of ``values`` inside an entry's M range that is no sample point of
    its (N, K), at every (N, K) of the entry; weighted like the entry's sample points."""
    by_entry: dict[str, list[Shape]] = {}
    for p in points:
        by_entry.setdefault(p.entry, []).append(p)
    out = []
    for e in entries:
        if not (len(e.m) == 3 and e.m[2] == "range"):
            continue
        mine = by_entry.get(e.name, [])
        if not mine:
            continue
        w = mine[0].weight
        nks: dict[tuple, Any] = {}
        for p in mine:
            nks.setdefault((p.problem.n, p.problem.k, p.problem.batch), p.problem)
        sampled = {(p.problem.m, p.problem.n, p.problem.k, p.problem.batch) for p in mine}
        for (n, k, b), proto in nks.items():
            for m in values:
                if e.m[0] <= m <= e.m[1] and (m, n, k, b) not in sampled:
                    out.append(Shape(e.name, proto.replace(m=m), w))
    return out


def check_timed(shapes_file: str, timed: list[Shape]) -> None:
    """PACK-TUNE-SHAPES-MAX: a one-line error for a plan whose timed shapes would take hours."""
    if len(timed) > MAX_TIMED_SHAPES:
        from collections import Counter
        (n, k), count = Counter((s.problem.n, s.problem.k) for s in timed).most_common(1)[0]
        raise FieldError(f"{Path(shapes_file).name}", f"PACK-TUNE-SHAPES-MAX: {len(timed)} shapes to time (sampled "
                         f"and off-sample; {count} at N={n} K={k}); pack --tune times at most {MAX_TIMED_SHAPES}, "
                         "each with every candidate of its class: give fewer M values or fewer --off-sample values")


def _resolved(problem, config: KernelConfig) -> KernelConfig | None:
    from ..legality import check_config
    rep = check_config(problem, config)
    return rep.config if rep.legal else None


def nvmmh_task(item: tuple) -> KernelConfig | None:
    """nvMMH's first legal pick for one shape (an executor task), or None."""
    from .. import nvmmh
    problem, kind = item
    try:
        chosen = nvmmh.pick(problem, kind).chosen
    except CutegenError:
        return None
    return None if chosen is None else chosen.config


def candidates(points: list[Shape], target, *, top_k: int = TOP_K, with_nvmmh: bool = True,
               with_default: bool = True, cap: int = MAX_CANDIDATES, predictor=None, say=lambda msg: None,
               executor=None, progress: bool = False,
               exclude: set[tuple[str, str]] | None = None) -> tuple[list[Candidate], list[str]]:
    """The candidates of ``points`` (see the module's docstring), in priority order; and notes. ``exclude``:
    (class key, config JSON) already measured (a second round: the cap then takes the next ones)."""
    exclude = exclude or set()
    excluded: set[tuple[str, str]] = set()
    from .select import SEARCH_BUCKET_BITS
    if not 1 <= top_k <= 16:
        raise FieldError("--tune-top-k", f"expected 1 to 16, got {top_k}")
    notes: list[str] = []
    found: dict[tuple[str, str], Candidate] = {}
    order: list[tuple[str, str]] = []

    def add(cls, cfg, problem, origin, priority):
        if cfg is None:
            return
        if not plan_ready(cfg):
            notes.append(f"{origin}: {cfg.short_name()} stages operands or reduces split-K slices separately; "
                         "a pack cannot hold it")
            return
        key = (cls, cfg.to_json())
        if key in exclude:
            excluded.add(key)
            return
        if key not in found:
            found[key] = Candidate(cls, cfg, problem, [], priority)
            order.append(key)
        c = found[key]
        c.origins.append(origin)
        c.priority = min(c.priority, priority)

    reps: dict[tuple, int] = {}
    for i, s in enumerate(points):
        q = s.problem
        reps.setdefault((class_key(q), q.n, q.k, q.batch, (q.m.bit_length() - 1) // SEARCH_BUCKET_BITS), i)
    searched = [points[i] for i in sorted(reps.values())]
    ranked = run_searches(search_task, [(s.problem, top_k, target.kind, predictor) for s in searched],
                          [f"{target.kind} {s.label}" for s in searched], executor,
                          progress=f"search {target.kind}" if progress else None)
    for s, cfgs in zip(searched, ranked):
        for r, cfg in enumerate(cfgs[:top_k], 1):
            add(class_key(s.problem), cfg, s.problem, f"search{r} {s.label}", float(r))
    if with_nvmmh:
        try:
            import nvMatmulHeuristics  # noqa: F401
        except ImportError:
            notes.append("nvMMH: nvidia-matmul-heuristics is not installed here (pip install 'cutegen[heuristics]'); "
                         "its picks are not candidates")
        else:
            picks = run_searches(nvmmh_task, [(s.problem, target.kind) for s in points],
                                 [f"nvmmh {s.label}" for s in points], executor,
                                 progress=f"nvMMH {target.kind}" if progress else None)
            for s, cfg in zip(points, picks):
                add(class_key(s.problem), None if cfg is None else _resolved(s.problem, cfg), s.problem,
                    f"nvmmh {s.label}", 1.5)
    if with_default:
        firsts: dict[str, Shape] = {}
        for s in points:
            firsts.setdefault(class_key(s.problem), s)
        for cls, s in firsts.items():
            legal = [q for q in points if class_key(q.problem) == cls
                     and _resolved(q.problem, KernelConfig.from_dict(CUTLASS_DEFAULT)) is not None]
            if legal:
                q = max(legal, key=lambda x: (x.problem.m * x.problem.n * x.problem.k, x.label))
                add(cls, _resolved(q.problem, KernelConfig.from_dict(CUTLASS_DEFAULT)), q.problem,
                    "cutlass_default", 1.2)
            else:
                notes.append(f"the CUTLASS default breaks a rule at every shape of {s.problem.kernel_class_name}")
    if excluded:
        notes.append(f"{len(excluded)} candidates already measured (--exclude-measured) are not planned again")
        say(f"  {len(excluded)} candidates already measured are left out; the cap takes the next ones")
    # by priority, then by how many searches and shapes proposed it, then first found
    cands = [found[k] for k in sorted(order, key=lambda k: (found[k].priority, -len(found[k].origins),
                                                            order.index(k)))]
    if len(cands) > cap:
        dropped = cands[cap:]
        say(f"warning: PACK-TUNE-CANDIDATES-MAX: {len(cands)} distinct candidates; keeping the {cap} of highest "
            f"priority (--tune-max-candidates), leaving out {len(dropped)} (best priority left out: "
            f"{dropped[0].priority:g}, {dropped[0].origins[0]})")
        notes.append(f"PACK-TUNE-CANDIDATES-MAX: {len(dropped)} of {len(cands)} candidates left out (cap {cap})")
        cands = cands[:cap]
    return cands, notes


def timed_shapes(shapes_file: str, target, off_sample: tuple[int, ...]) -> tuple[list, list[Shape], list[Shape]]:
    """(entries, sampled points, off-sample shapes) of a shapes file for a target."""
    from . import shapes as shapes_mod
    entries = shapes_mod.load(shapes_file)
    points = shapes_mod.expand(entries, target.sms)
    return entries, points, off_sample_shapes(entries, points, off_sample)


def plan_files(shapes_file: str, target, cands: list[Candidate], points: list[Shape], off: list[Shape],
               name: str, notes: list[str]) -> dict[str, str]:
    """The candidate pack (every candidate one kernel) and ``tune.json``: {path: text}."""
    from . import render
    from .select import given
    timed = points + off
    sel = given(timed, target, [c.config for c in cands])
    sel.notes += [f"a candidate pack of cutegen pack --tune: {len(cands)} candidates, timed at {len(points)} sampled "
                  f"and {len(off)} off-sample shapes on the GPU; its dispatcher is not the point (each kernel is "
                  "timed through cutegen_pack_plan_kernel)"] + notes
    files = render.pack_files(sel, {}, name, Path(shapes_file).name)
    names = [render.kernel_name(sel, j) for j in range(len(sel.kernels))]
    meta = json.loads(files["pack.json"])
    kernels = []
    for j, (c, k) in enumerate(zip(cands, meta["kernels"])):
        kernels.append({"index": j, "name": names[j], "hash": k["hash"], "class": sel.classes.index(c.cls),
                        "config": c.config.to_dict(), "origins": c.origins, "priority": c.priority})
    groups: dict[tuple, dict] = {}
    sampled = {id(s) for s in points}
    for s in timed:
        q = s.problem
        cls = sel.classes.index(class_key(q))
        g = groups.setdefault((cls, q.n, q.k, q.batch), {"class": cls, "n": q.n, "k": q.k, "batch": q.batch,
                                                          "shapes": []})
        g["shapes"].append({"m": q.m, "sampled": id(s) in sampled, "entry": s.entry, "problem": q.to_dict()})
    for g in groups.values():
        g["shapes"].sort(key=lambda x: x["m"])
    files[PLAN_FILE] = json.dumps({
        "schema": PLAN_SCHEMA, "pack": name, "target": target.kind, "shapes_file": Path(shapes_file).name,
        "kernels": kernels, "groups": [groups[k] for k in sorted(groups)],
        "estimate_s": estimate_seconds(len(cands), timed, cands), "notes": notes}, indent=1, sort_keys=True) + "\n"
    return files


def estimate_seconds(n_candidates: int, timed: list[Shape], cands: list[Candidate]) -> dict:
    """What the GPU run should take: the build (BUILD_S_PER_KERNEL each, 16 jobs) and the timing (25 launches
    of every candidate of the class at every shape at an assumed 600 TFLOP/s, plus 0.4 ms of host work each)."""
    per_class: dict[str, int] = {}
    for c in cands:
        per_class[c.cls] = per_class.get(c.cls, 0) + 1
    t = 0.0
    for s in timed:
        q = s.problem
        kernel_us = max(2.0 * q.m * q.n * q.k * q.batch / 600e12 * 1e6, 5.0)
        n = per_class.get(class_key(q), 0) + 1          # + torch.matmul
        t += n * (25 * kernel_us * 1e-6 + 4e-4) + 0.01
    return {"build": round(n_candidates * BUILD_S_PER_KERNEL), "time": round(t)}


# -- selection from the database -------------------------------------------------------------------

def measured_table(db, target, shapes: list[Shape]) -> tuple[dict[int, dict[str, tuple[float, KernelConfig]]],
                                                              dict[int, float]]:
    """shape index -> config JSON -> (median of the validated measurements' medians, config), and shape index
    -> torch.matmul's median time, from every validated, packable pack --tune record (``SOURCE_PREFIX``) of the
    target kind in ``db``."""
    times: dict[int, dict[str, tuple[float, KernelConfig]]] = {}
    cublas: dict[int, float] = {}
    for i, s in enumerate(shapes):
        per: dict[str, list] = {}
        cub = []
        # only pack --tune's own timings (warm L2, through the pack's plan entry points): a database's other
        # records of the same problem (tune's cold-L2 timings, the seed) are another scale; and of those, only the
        # newest timing method's where a shape has several (pack-tune/2 primes the queue behind a spin kernel)
        mine = [m for m in db.measurements(device_kind=target.kind, problem=s.problem)
                if m.source.startswith(SOURCE_PREFIX)]
        newest = max((method_rank(m.timing_method) for m in mine), default=0)
        for m in mine:
            if method_rank(m.timing_method) != newest:
                continue
            if m.cublas_us:
                cub.append(m.cublas_us)
            if m.validated and m.backend == "cutlass" and m.is_benchmark and plan_ready(m.config):
                per.setdefault(m.config.to_json(), [m.config, []])[1].append(m.median_us)
        if per:
            times[i] = {key: (statistics.median(ts), cfg) for key, (cfg, ts) in per.items()}
        if cub:
            cublas[i] = statistics.median(cub)
    return times, cublas


def method_rank(timing_method: str) -> int:
    """pack --tune's timing methods, oldest first: "pack-tune: ..." (1), "pack-tune/2: ..." (2, primed)."""
    import re
    m = re.match(r"pack-tune/(\d+):", timing_method)
    return int(m.group(1)) if m else 1


def select_measured(shapes: list[Shape], n_sampled: int, target, db, *, max_kernels: int, tolerance: float,
                    say=lambda msg: None) -> tuple[Selection, dict]:
    """The measured selection of ``shapes`` (the first ``n_sampled`` sampled, the rest off-sample): returns the
    selection and (N, K) -> ``measured.Point`` list of its chosen kernels (the dispatch segments)."""
    from .measured import Point
    from .select import Pricer, cover
    meas, cublas = measured_table(db, target, shapes)
    if not meas:
        raise CutegenError(f"--tune: the results database {getattr(db, 'path', db)} has no validated measurement on "
                           f"{target.kind} of any shape of this set: run the GPU step first (bench/gpu_pack.sh tune), "
                           "or give --plan-only to make the candidates")
    classes: list[str] = []
    pool: dict[str, dict[str, KernelConfig]] = {}
    for s in shapes:
        if class_key(s.problem) not in pool:
            classes.append(class_key(s.problem))
            pool[class_key(s.problem)] = {}
    for i, row in sorted(meas.items()):
        for key, (_, cfg) in sorted(row.items()):
            pool[class_key(shapes[i].problem)].setdefault(key, cfg)
    pricer = Pricer(target.rates)
    times: dict[int, dict[str, tuple[float, str]]] = {}
    unmeasured = []
    for i, s in enumerate(shapes):
        if i in meas:
            times[i] = {key: (t, "measured") for key, (t, _) in meas[i].items()}
        else:
            unmeasured.append(s)
            cfgs = list(pool[class_key(s.problem)].values())
            times[i] = {c.to_json(): (t, "predicted") for c, t in zip(cfgs, pricer.times(s.problem, cfgs))
                        if t is not None}
    notes = [f"measured selection (pack --tune): {len(meas)} of {len(shapes)} shapes measured on {target.kind} "
             f"({sum(1 for i in meas if i < n_sampled)} of {n_sampled} sampled, "
             f"{sum(1 for i in meas if i >= n_sampled)} of {len(shapes) - n_sampled} off-sample); "
             f"{sum(len(p) for p in pool.values())} measured candidates"]
    if unmeasured:
        notes.append(f"{len(unmeasured)} shape(s) have no measurement and are priced by the cost model (source "
                     f"predicted): {', '.join(s.label for s in unmeasured[:6])}{' ...' if len(unmeasured) > 6 else ''}")
    sel = cover(shapes, target, classes, pool, times, max_kernels=max_kernels, tolerance=tolerance, notes=notes,
                pricer=pricer, fill=None)
    for i, r in enumerate(sel.rows):
        r.cublas_us = cublas.get(i)
        r.point = "sampled" if i < n_sampled else "off-sample"
        if r.kernel is not None:
            r.predicted_us = pricer.time(r.shape.problem, sel.kernels[r.kernel].config)
    points: dict[tuple[int, int], list[Point]] = {}
    index = {k.key: j for j, k in enumerate(sel.kernels)}
    for i in sorted(meas, key=lambda i: shapes[i].problem.m):
        q = shapes[i].problem
        ts = {index[key]: t for key, (t, _) in meas[i].items() if key in index}
        if ts:
            points.setdefault((q.n, q.k), []).append(Point(q.m, ts, cublas.get(i)))
    say(f"  measured selection: {len(sel.kernels)} kernels from {sum(len(p) for p in pool.values())} measured "
        f"candidates; {len(meas)} of {len(shapes)} shapes measured")
    return sel, points


def load_plan(path: str | Path) -> dict:
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        raise CutegenError(f"{path}: no pack tuning plan (make one with `cutegen pack --tune --plan-only`)") from None
    except json.JSONDecodeError as e:
        raise FieldError(str(path), f"not valid JSON: {e}") from None
    if not isinstance(d, dict) or d.get("schema") != PLAN_SCHEMA:
        raise FieldError(f"{path}.schema", f"expected {PLAN_SCHEMA!r}, got {d.get('schema') if isinstance(d, dict) else d!r}")
    return d




# -- the records a tuned pack was selected from ---------------------------------------------------------------

def records_of(db, target, shapes: list[Shape]) -> list:
    """Every pack --tune record (``SOURCE_PREFIX``) of ``shapes`` on the target kind in ``db``, in a stable order."""
    from ..results.measurement import canonical
    out = []
    for s in shapes:
        out += [m for m in db.measurements(device_kind=target.kind, problem=s.problem)
                if m.source.startswith(SOURCE_PREFIX)]
    return sorted(out, key=lambda m: canonical(m.to_dict()))


def write_records(path: str | Path, records: list) -> None:
    """JSON lines (``Measurement.to_dict()``), gzip'd when the name ends in .gz (no timestamp in the gzip
    header: the same records, the same bytes); written whole."""
    import gzip
    import io
    from .._atomic import atomic_write
    text = "".join(json.dumps(m.to_dict(), sort_keys=True, separators=(",", ":")) + "\n" for m in records).encode()
    if str(path).endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as f:
            f.write(text)
        text = buf.getvalue()
    atomic_write(Path(path), text)


def read_records(path: str | Path):
    """A results database in memory holding the records of a JSON-lines file (gzip'd or not)."""
    import gzip
    from ..results import Measurement, ResultsDB
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CutegenError(f"--records: {path}: no such file") from None
    try:
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FieldError(str(path), f"not gzip'd or plain UTF-8 JSON lines: {e}") from None
    recs = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                recs.append(Measurement.from_dict(json.loads(line), f"{path.name}:{i}"))
            except json.JSONDecodeError as e:
                raise FieldError(f"{path.name}:{i}", f"not valid JSON: {e}") from None
    db = ResultsDB(":memory:", seed=None)
    db.add_many(recs)
    return db


def measured_keys(db, target, shapes: list[Shape]) -> set[tuple[str, str]]:
    """(class key, config JSON) of every configuration with a pack --tune record of ``shapes`` in ``db``."""
    return {(class_key(m.problem), m.config.to_json()) for m in records_of(db, target, shapes)}
