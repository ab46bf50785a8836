"""Kernel packs: a set of GEMM shapes in, a dispatching library out (``cutegen pack``, issue 12).

Modules, in the order the command uses them:
  shapes   -- the shapes file (sizes as numbers or ranges, weights) and where ranges are sampled
  targets  -- device kinds (SM count, HBM bandwidth) and the cost model priced for one
  select   -- candidates from the search, a time per (shape, candidate), weighted greedy set cover
  dispatch -- exact-shape and range tables, class defaults, the unaligned fallback
  render   -- the pack's files: kernels + plan entry points, dispatcher, header, CMake, PyTorch op
"""
from __future__ import annotations

import json
from pathlib import Path

from .._atomic import atomic_directory, leftovers
from ..errors import CutegenError, FieldError


# PACK-SHAPES-MAX: every sample point is priced with every candidate of its class and has a row in the
# dispatcher's exact table, so a shapes file that expands to more points than this is refused (a long list
# of M values is what a {min, max} range, sampled at powers of two and wave boundaries, is for).
MAX_SHAPES = 4096
SEARCH_WARN_S = 300     # say so when the searches alone are estimated to take longer than this
SEARCH_S_ESTIMATE = 1.0  # seconds per search on one core (issue 22: 0.3-1.5 s on the 2-core dev machine)


def make_pack(shapes_file: str, target_kind: str, *, max_kernels: int = 16, tolerance: float = 0.03,
              name: str = "cutegen_pack", db=None, say=lambda msg: None, executor=None,
              progress: bool = False, measured: str | None = None, vendor: bool = True,
              vendor_algorithms: str | None = None, wave_tiles: bool = False) -> dict[str, str]:
    """Every file of the pack for one target: {path relative to the pack's folder: text}. ``wave_tiles``: the
    searches' option (search/engine.py; pack.json states it where on; False: as every pack before it). ``executor`` (a
    ``cutegen.executor.Executor``; None: this process) runs the searches, per (N, K) and M bucket and per
    class's fallback; the files are the same wherever they ran. ``progress``: progress bars on stderr.
    ``vendor`` (False: ``--no-vendor``): with ``measured``, segments and shapes where no generated kernel comes
    within the tolerance of cuBLAS run on cuBLASLt (cutegen/packs/vendor.py); without measurements, none do."""
    from . import render, select, shapes, targets
    if not render.pack_name_ok(name):
        raise FieldError("--name", f"{name!r} is not a C/CMake identifier (letters, digits, _; 64 at most)")
    t = targets.target(target_kind)
    entries = shapes.load(shapes_file)
    moe = _moe_layers(shapes_file)
    points = shapes.expand(entries, t.sms)
    check_size(shapes_file, points, say)
    say(f"{t.kind}: {len(points)} shapes from {len(entries)} entries of {shapes_file}")
    sel = select.select(points, t, max_kernels=max_kernels, tolerance=tolerance, db=db, say=say, executor=executor,
                        progress=progress, wave_tiles=wave_tiles)
    fallbacks = render.add_fallbacks(sel, say=say, executor=executor)
    points = render.apply_measured(sel, measured, name) if measured else None
    return _with_moe(moe, t.kind, tolerance, db, say, lambda ctx: render.pack_files(
        sel, fallbacks, name, Path(shapes_file).name, measured=points, vendor_on=vendor,
        vendor_algorithms=_algorithms(vendor_algorithms), moe=ctx))


def _algorithms(path: str | None) -> dict | None:
    """``--vendor-algorithms``: the tuning step's timings of cuBLASLt's algorithms (cutegen/packs/vendor.py)."""
    from . import vendor
    return vendor.load_algorithms(path) if path else None


def _moe_layers(shapes_file: str) -> list:
    """The shapes file's [[moe]] layers (cutegen/packs/grouped.py), read before any search so that a bad field
    fails at once."""
    from . import grouped
    return grouped.load(shapes_file)


def _with_moe(layers: list, kind: str, tolerance: float, db, say, pack_files) -> dict[str, str]:
    """``pack_files(moe_context)`` plus the MoE layers' grouped kernels, dispatcher and records, if any."""
    if not layers:
        return pack_files(None)
    from ..core.templates import environment
    from . import grouped
    sel = grouped.select(layers, kind, tolerance=tolerance, db=db, say=say)
    gfiles, ctx = grouped.files(sel, kind, environment())
    files = pack_files(ctx)
    grouped.add_to_pack(files, sel, kind, environment(), gfiles, ctx)
    return files


def make_tune_plan(shapes_file: str, target_kind: str, *, name: str = "cutegen_pack", say=lambda msg: None,
                   executor=None, progress: bool = False, off_sample: tuple[int, ...] | None = None,
                   top_k: int | None = None, cap: int | None = None, with_nvmmh: bool = True,
                   with_default: bool = True, predictor=None, exclude_db=None) -> dict[str, str]:
    """``pack --tune --plan-only``: the candidate pack and its ``tune.json`` (cutegen/packs/tune.py).
    ``exclude_db``: a results database whose pack --tune records' configurations are not planned again."""
    from . import render, targets, tune
    if not render.pack_name_ok(name):
        raise FieldError("--name", f"{name!r} is not a C/CMake identifier (letters, digits, _; 64 at most)")
    t = targets.target(target_kind)
    entries, points, off = tune.timed_shapes(shapes_file, t, off_sample or tune.DEFAULT_OFF_SAMPLE)
    check_size(shapes_file, points, say)
    tune.check_timed(shapes_file, points + off)
    if _moe_layers(shapes_file):
        say("note: the [[moe]] layers are not tuned (their grouped kernels are chosen by the grouped cost model, or a "
            "results database's grouped measurements, when the pack is made)")
    say(f"{t.kind}: {len(points)} sampled and {len(off)} off-sample shapes from {len(entries)} entries of {shapes_file}")
    exclude = tune.measured_keys(exclude_db, t, points + off) if exclude_db is not None else None
    cands, notes = tune.candidates(points, t, top_k=top_k or tune.TOP_K, cap=cap or tune.MAX_CANDIDATES,
                                   with_nvmmh=with_nvmmh, with_default=with_default, predictor=predictor, say=say,
                                   executor=executor, progress=progress, exclude=exclude)
    if not cands:
        raise CutegenError("--tune --plan-only: no candidate left to measure (every one is in --exclude-measured)")
    files = tune.plan_files(shapes_file, t, cands, points, off, name, notes)
    est = json.loads(files[tune.PLAN_FILE])["estimate_s"]
    say(f"  {len(cands)} candidates ({sum(1 for c in cands if any(o.startswith('search') for o in c.origins))} from "
        f"the search, {sum(1 for c in cands if any(o.startswith('nvmmh') for o in c.origins))} nvMMH picks, "
        f"{sum(1 for c in cands if 'cutlass_default' in c.origins)} CUTLASS default) to time at {len(points) + len(off)} "
        f"shapes; GPU estimate: build {est['build']} s (16 jobs), timing {est['time']} s")
    return files


def make_tuned_pack(shapes_file: str, target_kind: str, db, *, max_kernels: int = 16, tolerance: float = 0.03,
                    name: str = "cutegen_pack", say=lambda msg: None, executor=None,
                    off_sample: tuple[int, ...] | None = None, vendor: bool = True,
                    vendor_algorithms: str | None = None) -> dict[str, str]:
    """``pack --tune`` after the GPU step: the pack selected from ``db``'s measurements (no GPU); with ``vendor``,
    measured segments where no generated kernel comes within the tolerance of cuBLAS run on cuBLASLt."""
    from . import render, targets, tune
    if not render.pack_name_ok(name):
        raise FieldError("--name", f"{name!r} is not a C/CMake identifier (letters, digits, _; 64 at most)")
    t = targets.target(target_kind)
    entries, points, off = tune.timed_shapes(shapes_file, t, off_sample or tune.DEFAULT_OFF_SAMPLE)
    check_size(shapes_file, points, say)
    moe = _moe_layers(shapes_file)
    sel, measured_points = tune.select_measured(points + off, len(points), t, db, max_kernels=max_kernels,
                                                tolerance=tolerance, say=say)
    fallbacks = render.add_fallbacks(sel, say=say, executor=executor)
    return _with_moe(moe, t.kind, tolerance, db, say, lambda ctx: render.pack_files(
        sel, fallbacks, name, Path(shapes_file).name, measured=measured_points, vendor_on=vendor,
        vendor_algorithms=_algorithms(vendor_algorithms), moe=ctx))


def check_size(shapes_file: str, points: list, say=lambda msg: None) -> int:
    """PACK-SHAPES-MAX: refuse a shapes file that expands to more than MAX_SHAPES points, naming the entry
    with the most; returns the number of searches (one per class, N, K, batch and M bucket) and says the
    estimated search time when it is long."""
    from collections import Counter
    from .select import class_key
    if len(points) > MAX_SHAPES:
        worst, n = Counter(p.entry for p in points).most_common(1)[0]
        raise FieldError(f"{Path(shapes_file).name}:{worst}",
                         f"PACK-SHAPES-MAX: the shapes file expands to {len(points)} sample points ({n} from "
                         f"{worst!r}); a pack takes at most {MAX_SHAPES} (each is priced with every candidate and "
                         "has a row in the dispatch table): give M as a {min, max} range, which is sampled where "
                         "the best kernel can change, or list fewer values")
    from .select import SEARCH_BUCKET_BITS
    searches = len({(class_key(p.problem), p.problem.n, p.problem.k, p.problem.batch,
                     (p.problem.m.bit_length() - 1) // SEARCH_BUCKET_BITS) for p in points})
    if searches * SEARCH_S_ESTIMATE > SEARCH_WARN_S:
        say(f"warning: {searches} searches (one per dtype/layout class, N, K and range of M from 4^b to 4^(b+1)), about "
            f"{searches * SEARCH_S_ESTIMATE / 60:.0f} minutes on one core; --executor dask spreads them")
    return searches


# The record of a pack: what it selected and why (the sources are a pure function of it and the tool's
# version). A repository can commit these alone and regenerate the rest (``cutegen pack --summary-only``).
SUMMARY_FILES = ("pack.json", "COVERAGE.md")


def summary(files: dict[str, str]) -> dict[str, str]:
    return {p: files[p] for p in SUMMARY_FILES}


def differences(root: Path, files: dict[str, str], prune: bool = True) -> list[str]:
    """Paths that would change: missing, different bytes, or (``prune``) stale: present but no longer
    generated."""
    out = [p for p, text in sorted(files.items())
           if not (root / p).is_file() or (root / p).read_bytes() != text.encode()]
    if prune and root.is_dir():
        out += sorted(str(p.relative_to(root)) for p in root.rglob("*")
                      if p.is_file() and str(p.relative_to(root)) not in files and _owned(p.relative_to(root)))
    return out


def _owned(rel: Path) -> bool:
    """Files a pack writes (a build folder or anything else a user puts there is left alone)."""
    top = rel.parts[0]
    return top in ("kernels", "src", "include", "cmake", "torch") or str(rel) in (
        "CMakeLists.txt", "COVERAGE.md", "pack.json", "tune.json")


def write(root: Path, files: dict[str, str], prune: bool = True) -> list[str]:
    """Write the pack whole (``atomic_directory``: into a copy of the folder, swapped in at once, under a
    lock against another writer), delete stale generated files (``prune``); returns what changed."""
    changed = differences(root, files, prune)
    if not changed and not leftovers(root):
        return []
    # what the pack does not own (a build folder) is hard-linked, not copied: the pack never writes it
    with atomic_directory(root, link=lambda rel: not _owned(rel)) as new:
        changed = differences(new, files, prune)
        for rel in changed:
            path = new / rel
            if rel in files:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(files[rel].encode())
            else:
                path.unlink()
        for d in sorted((p for p in new.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if _owned(d.relative_to(new)) and not any(d.iterdir()):
                d.rmdir()
    return changed
