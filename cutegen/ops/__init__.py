"""Operations, one package each; this file only knows their names and imports them on demand.

Adding an operation: a package ``cutegen/ops/<name>/`` whose ``__init__`` builds its
``cutegen.core.Operation`` and calls ``cutegen.core.registry.register``, and one line in ``KNOWN``.
"""
from __future__ import annotations

import importlib

KNOWN: dict[str, str] = {
    "gemm": "cutegen.ops.gemm",
    "attention": "cutegen.ops.attention",
    "grouped_gemm": "cutegen.ops.grouped_gemm",
}


def load(name: str) -> bool:
    """Import the package of a known operation (it registers itself); False for an unknown name."""
    module = KNOWN.get(name)
    if module is None:
        return False
    importlib.import_module(module)
    return True


def load_all() -> None:
    for name in KNOWN:
        load(name)
