"""Running built kernels, one module per concern (``cutegen.runner`` re-exports them all).

- ``tolerance``: validation tolerances; ``geometry``: one call as integers (operands, strides);
- ``launch``: the launch contract (rules a call must satisfy before it reaches the GPU);
- ``cases``: validation plans and refusal probes; ``library``: finding built kernels;
- ``watchdog``: the spawned child per kernel run; ``stats``: means, TFLOP/s, JSON.

Everything here is plain Python and runs without a GPU; the GPU work lives in
``cutegen._runner_worker``, which imports these modules (never ``cutegen.runner``), so the two do not
import each other. Nothing here imports torch, egglog or the search at module level: the GPU machine
runs the working tree through ``PYTHONPATH``, which is why this package maps the repo's folders first.
"""
from __future__ import annotations

from pathlib import Path


def _map_repo_subpackages() -> None:
    """Make ``cutegen.legality`` (and search, templates) importable from a bare working tree.

    pyproject maps the root folders legality/, search/ and templates/ into the cutegen package;
    an install does that, ``PYTHONPATH=.`` (how the GPU machine runs the tree) does not. This
    finder goes last on sys.meta_path, so an installed mapping always wins.
    """
    import importlib.abc
    import importlib.util
    import sys

    root = Path(__file__).resolve().parent.parent.parent
    mapping = {f"cutegen.{sub}": root / sub for sub in ("legality", "search", "templates")
               if (root / sub / "__init__.py").exists()}
    if not mapping or any(getattr(f, "_cutegen_repo_layout", False) for f in sys.meta_path):
        return

    class RepoLayoutFinder(importlib.abc.MetaPathFinder):
        _cutegen_repo_layout = True

        def find_spec(self, fullname, path=None, target=None):
            folder = mapping.get(fullname)
            if folder is None:
                return None
            return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])

    sys.meta_path.append(RepoLayoutFinder())


_map_repo_subpackages()


_map_repo_subpackages()
