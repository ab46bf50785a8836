"""Kernel packs: a set of GEMM shapes in, a dispatching library out (``cutegen pack``, issue 12).

Modules, in the order the command uses them:
  shapes   -- the shapes file (sizes as numbers or ranges, weights) and where ranges are sampled
  targets  -- device kinds (SM count, HBM bandwidth) and the cost model priced for one
  select   -- candidates from the search, a time per (shape, candidate), weighted greedy set cover
  dispatch -- exact-shape and range tables, class defaults, the unaligned fallback
  render   -- the pack's files: kernels + plan entry points, dispatcher, header, CMake, PyTorch op
"""
from __future__ import annotations

from pathlib import Path

from .._atomic import atomic_directory, leftovers
from ..errors import FieldError


def make_pack(shapes_file: str, target_kind: str, *, max_kernels: int = 16, tolerance: float = 0.03,
              name: str = "cutegen_pack", db=None, say=lambda msg: None, executor=None) -> dict[str, str]:
    """Every file of the pack for one target: {path relative to the pack's folder: text}. ``executor`` (a
    ``cutegen.executor.Executor``; None: this process) runs the searches, per shape and per class's
    fallback; the files are the same wherever they ran."""
    from . import render, select, shapes, targets
    if not render.pack_name_ok(name):
        raise FieldError("--name", f"{name!r} is not a C/CMake identifier (letters, digits, _; 64 at most)")
    t = targets.target(target_kind)
    entries = shapes.load(shapes_file)
    points = shapes.expand(entries, t.sms)
    say(f"{t.kind}: {len(points)} shapes from {len(entries)} entries of {shapes_file}")
    sel = select.select(points, t, max_kernels=max_kernels, tolerance=tolerance, db=db, say=say, executor=executor)
    fallbacks = render.add_fallbacks(sel, say=say, executor=executor)
    return render.pack_files(sel, fallbacks, name, Path(shapes_file).name)


def differences(root: Path, files: dict[str, str]) -> list[str]:
    """Paths that would change: missing, different bytes, or stale (present but no longer generated)."""
    out = [p for p, text in sorted(files.items())
           if not (root / p).is_file() or (root / p).read_bytes() != text.encode()]
    if root.is_dir():
        out += sorted(str(p.relative_to(root)) for p in root.rglob("*")
                      if p.is_file() and str(p.relative_to(root)) not in files and _owned(p.relative_to(root)))
    return out


def _owned(rel: Path) -> bool:
    """Files a pack writes (a build folder or anything else a user puts there is left alone)."""
    top = rel.parts[0]
    return top in ("kernels", "src", "include", "cmake", "torch") or str(rel) in (
        "CMakeLists.txt", "COVERAGE.md", "pack.json")


def write(root: Path, files: dict[str, str]) -> list[str]:
    """Write the pack whole (``atomic_directory``: into a copy of the folder, swapped in at once, under a
    lock against another writer), delete stale generated files; returns what changed."""
    changed = differences(root, files)
    if not changed and not leftovers(root):
        return []
    # what the pack does not own (a build folder) is hard-linked, not copied: the pack never writes it
    with atomic_directory(root, link=lambda rel: not _owned(rel)) as new:
        changed = differences(new, files)
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
