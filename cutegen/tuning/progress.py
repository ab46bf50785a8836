"""``cutegen tune``'s display: now in :mod:`cutegen.progress`, the one module of progress displays
(kept here so that existing imports keep working)."""
from ..progress import _BUILD_LINE, Display  # noqa: F401

__all__ = ["Display"]
