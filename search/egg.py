"""A thin, fast bridge to the egglog 13.2 engine.

The high-level egglog Python API builds one Python object per e-node and sends one command
per fact; at tens of thousands of candidates that costs seconds (and each top-level command
grows the engine's memory). The search therefore talks to ``egglog.bindings`` directly:
programs are egglog text, bulk facts go in through ``(input ...)`` from tab-separated files
in a private temporary directory, and results come back through ``EGraph.freeze()``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import sys
from dataclasses import dataclass


def _load_bindings():
    """The engine's extension module, without running ``egglog/__init__``.

    The package's ``__init__`` builds the high-level API and imports a code formatter (about 0.7 s
    of a 1 s import); the search needs only the compiled ``bindings``. If the package is already
    imported, or the direct load fails for any reason, the ordinary import is used.
    """
    if "egglog" not in sys.modules and "egglog.bindings" not in sys.modules:
        try:
            import glob
            import importlib.machinery
            import importlib.util
            import os

            spec = importlib.util.find_spec("egglog")
            folder = spec.submodule_search_locations[0]
            path = next(p for p in sorted(glob.glob(os.path.join(folder, "bindings*")))
                        if p.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)))
            ext = importlib.util.spec_from_file_location("egglog.bindings", path)
            mod = importlib.util.module_from_spec(ext)
            ext.loader.exec_module(mod)
            sys.modules["egglog.bindings"] = mod
            return mod
        except Exception:  # noqa: BLE001 - fall back to the package import below
            sys.modules.pop("egglog.bindings", None)
    from egglog import bindings as mod
    return mod


bindings = _load_bindings()


@dataclass(frozen=True)
class Node:
    """One e-node read back from the engine: constructor name, child values, its e-class."""
    name: str
    args: tuple
    eclass: object


class Egg:
    """One e-graph; call ``close()`` (or use ``with``) to remove its temporary files."""

    def __init__(self, program: str = ""):
        self.engine = bindings.EGraph()
        self._tmp: str | None = None
        self._inputs = 0
        self.iterations = 0
        if program:
            self.run(program)

    # --- commands -------------------------------------------------------------------
    def run(self, text: str) -> list:
        out = self.engine.run_program(*self.engine.parse_program(text))
        for o in out:
            rep = getattr(o, "report", None)
            if rep is not None:
                self.iterations += len(rep.iterations)
        return out

    def input(self, relation: str, rows) -> int:
        """Load many facts at once: one row per tuple of integers."""
        rows = list(rows)
        if not rows:
            return 0
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="cutegen-egg-")
        self._inputs += 1
        path = os.path.join(self._tmp, f"{self._inputs}_{relation}.tsv")
        with open(path, "w") as f:
            f.write("".join("\t".join(str(int(x)) for x in row) + "\n" for row in rows))
        self.run(f'(input {relation} "{path}")')
        return len(rows)

    # --- reading back ---------------------------------------------------------------
    def freeze(self):
        return self.engine.freeze()

    def i64(self, value) -> int:
        return self.engine.value_to_i64(value)

    def extract(self, expr: str) -> str:
        out = self.run(f"(extract {expr})")[-1]
        return out.termdag.to_string(out.term)

    def sizes(self) -> tuple[int, int]:
        """(e-nodes, e-classes) over every constructor table."""
        frozen = self.freeze()
        nodes = 0
        classes: set = set()
        for name, fn in frozen.functions.items():
            if fn.is_let_binding or fn.output_sort in ("i64", "Unit", "String", "bool", "f64"):
                continue
            if not any(True for _ in fn.rows):
                continue
            for row in fn.rows:
                nodes += 1
                classes.add((fn.output_sort, row.output))
        return nodes, len(classes)

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "Egg":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def term_to_tree(termdag, term_id):
    """An extracted term as nested tuples ``(name, child, ...)``; literals as Python ints."""
    t = termdag.get(term_id)
    if isinstance(t, bindings.TermLit):
        v = t.value
        return getattr(v, "value", v)
    if isinstance(t, bindings.TermApp):
        return (t.name, *(term_to_tree(termdag, a) for a in t.args))
    raise TypeError(f"unexpected term {t!r}")
