"""Finding built kernels: a library and the manifest beside it."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..config import KernelConfig
from ..errors import CutegenError, FieldError
from ..problem import GemmProblem

# ------------------------------------------------------------------------------------------------
# Finding built kernels
# ------------------------------------------------------------------------------------------------

@dataclass
class KernelInfo:
    """A built kernel: its library and what its manifest says it computes."""
    library: Path
    problem: GemmProblem
    config: KernelConfig
    hash: str = ""
    backend: str = ""
    directory: Path | None = None
    manifest: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        where = self.directory.name if self.directory else self.library.name
        backend = f"{self.backend} " if self.backend else ""
        return f"{where} [{backend}{self.config.short_name()}]"

    def to_dict(self) -> dict:
        return {"library": str(self.library), "directory": str(self.directory) if self.directory else None,
                "problem": self.problem.to_dict(), "config": self.config.to_dict(), "hash": self.hash,
                "backend": self.backend}


class KernelNotFound(CutegenError):
    pass


def _problem_and_config(doc: dict, where: str) -> tuple[GemmProblem, KernelConfig]:
    if "problem" not in doc or "config" not in doc:
        raise FieldError(where, "needs both 'problem' and 'config'")
    from ..core import registry       # the problem's operation reads both back (no "op": GEMM)
    problem = registry.problem_from_dict(doc["problem"], f"{where}.problem")
    return problem, registry.config_from_dict(registry.operation_of(problem), doc["config"], f"{where}.config")


def _library_in(directory: Path, manifest: dict) -> Path | None:
    """The kernel library of a built kernel directory.

    The manifest's ``library`` (relative to the directory) wins; otherwise the one ``*.so`` in the
    directory or its ``build/``; several candidates are an error unless one carries the hash.
    """
    named = manifest.get("library")
    build = manifest.get("build")
    if not named and isinstance(build, dict):
        named = build.get("library")
    if named:
        p = Path(named)
        p = p if p.is_absolute() else directory / p
        return p if p.exists() else None
    found = sorted(directory.glob("*.so")) + sorted((directory / "build").glob("*.so"))
    if len(found) == 1:
        return found[0]
    h = str(manifest.get("hash", ""))
    tagged = [p for p in found if h and h in p.name]
    if len(tagged) == 1:
        return tagged[0]
    if found:
        raise KernelNotFound(f"{directory}: several libraries ({', '.join(p.name for p in found)}); "
                             "name one in manifest.json 'library'")
    return None


def load_kernel_info(path: str | os.PathLike) -> KernelInfo:
    """A kernel from a built directory (with manifest.json) or a library path (manifest beside it)."""
    p = Path(path)
    if p.is_dir():
        mpath = p / "manifest.json"
        if not mpath.exists():
            raise KernelNotFound(f"{p}: no manifest.json")
        manifest = _read_json(mpath)
        lib = _library_in(p, manifest)
        if lib is None:
            raise KernelNotFound(f"{p}: no built library (*.so) — run `cutegen build {p}` first")
        directory = p
    elif p.is_file():
        lib, directory = p, p.parent
        mpath = p.parent / "manifest.json"
        if not mpath.exists():
            raise KernelNotFound(f"{p}: no manifest.json beside the library")
        manifest = _read_json(mpath)
    else:
        raise KernelNotFound(f"{p}: no such file or directory")
    prob, cfg = _problem_and_config(manifest, str(mpath))
    return KernelInfo(lib.resolve(), prob, cfg, str(manifest.get("hash", "")), str(manifest.get("backend", "")),
                      directory.resolve(), manifest)


def discover_kernels(paths: Iterable[str | os.PathLike]) -> tuple[list[KernelInfo], list[tuple[str, str]]]:
    """Every kernel under ``paths`` (a kernel directory, a library, or a folder of kernel directories).

    Returns the kernels found, sorted by path, and (path, reason) for those that could not be used.
    """
    found: list[KernelInfo] = []
    problems: list[tuple[str, str]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and not (p / "manifest.json").exists():
            subdirs = sorted(x.parent for x in p.rglob("manifest.json"))
            if not subdirs:
                problems.append((str(p), "no manifest.json under it"))
            for d in subdirs:
                try:
                    found.append(load_kernel_info(d))
                except (CutegenError, ValueError) as e:
                    problems.append((str(d), str(e)))
            continue
        try:
            found.append(load_kernel_info(p))
        except (CutegenError, ValueError) as e:
            problems.append((str(p), str(e)))
    found.sort(key=lambda k: str(k.directory or k.library))
    return found, problems


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise FieldError(str(path), f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FieldError(str(path), "expected a JSON object")
    return doc
