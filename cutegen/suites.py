"""Suite files: a TOML array of problem tables (``[[problem]]``), each a ``GemmProblem`` plus a ``name``.

The one reader of the format: ``regen``, ``bench``, ``tune`` and the bench scripts all load suites here.
(Pack shape files, ranged shapes with weights, have their own format: ``cutegen/packs/shapes.py``.)
"""
from __future__ import annotations

from pathlib import Path

from .errors import CutegenError, FieldError
from .paths import check_name
from .problem import GemmProblem


def select_suite(path: str | Path, only: list[str] | None) -> list[tuple[str, GemmProblem]]:
    """The suite's problems, restricted to the names in ``only`` (``--only``) when given."""
    suite = load_suite(path)
    if only:
        unknown = sorted(set(only) - {n for n, _ in suite})
        if unknown:
            raise FieldError("--only", f"not in {path}: {', '.join(unknown)}")
        suite = [(n, p) for n, p in suite if n in only]
    return suite


def load_suite(path: str | Path) -> list[tuple[str, GemmProblem]]:
    """(suite name, problem) for every entry of a suite TOML file: any array of tables of problems."""
    import tomllib
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CutegenError(f"{path}: no such suite file") from None
    except OSError as e:
        raise CutegenError(f"{path}: cannot read the suite file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise FieldError(str(path), f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise FieldError(str(path), f"not valid TOML: {e}") from None
    tables = [(k, v) for k, v in data.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    if len(tables) != 1:
        raise FieldError(str(path), f"expected one array of problem tables, found {[k for k, _ in tables] or 'none'}")
    key, entries = tables[0]
    out = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        name = entry.pop("name", "")
        if not isinstance(name, str):
            raise FieldError(f"{path.name}:{key}[{i}].name", f"expected a string, got {name!r}")
        for extra in ("note", "notes", "comment", "why", "tags", "group"):
            entry.pop(extra, None)
        problem = GemmProblem.from_dict(entry, where=f"{path.name}:{key}[{i}]")
        # the name becomes a directory (tune's work and output folders): one safe path component
        out.append((check_name(name, f"{path.name}:{key}[{i}].name") if name else problem.name, problem))
    return out
