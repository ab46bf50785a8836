"""The executor's live line: now in :mod:`cutegen.progress`, the one module of progress displays
(kept here so that existing imports keep working)."""
from ..progress import Progress, counts_line  # noqa: F401

__all__ = ["Progress", "counts_line"]
