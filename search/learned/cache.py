"""Fitted predictors, kept: fitting the correction on the seed takes 5-15 s on a 2-core machine, loading one
takes milliseconds, and every default search now ranks by it.

A predictor is a function of (the device kind, the measurements, the code that turns them into samples and
fits the forest, the library versions). The key covers all four: the database's fingerprint (the sorted record
keys of the user's file and the seed), a digest of cutegen's own sources (a change to the prior, the rules, the
features or the model refits), and numpy's and scikit-learn's versions. Kept in this process (a dict) and on
disk (``<cutegen cache>/learned/<key>.pkl``, written atomically: concurrent processes that miss together both
fit and the last rename wins, with identical contents). A file that cannot be read back is refitted over.
"""
from __future__ import annotations

import functools
import hashlib
import pickle
from pathlib import Path

from .predictor import Predictor

KEEP_FILES = 8              # on disk, the most recently used; older fits are deleted
_MEMORY: dict[str, Predictor] = {}
stats = {"fits": 0, "disk_loads": 0, "memory_hits": 0}     # for tests and the timing note


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of every Python source of the cutegen package (the core, the search, the rules) and the versions
    of the libraries the fit uses."""
    from importlib.metadata import version     # not `import sklearn`: seconds, and loading needs none of it

    import numpy

    import cutegen
    import cutegen.legality
    import cutegen.search

    h = hashlib.sha256(f"numpy {numpy.__version__} scikit-learn {version('scikit-learn')}\n".encode())
    for pkg in (cutegen, cutegen.search, cutegen.legality):
        root = Path(pkg.__file__).parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def cache_dir() -> Path:
    from cutegen.build import cache_dir as root

    return root() / "learned"


def key(device_kind: str, db) -> str:
    return hashlib.sha256(f"{device_kind}\n{db.fingerprint(op='gemm')}\n{code_digest()}".encode()).hexdigest()[:32]


def predictor(device_kind: str, db, disk: bool = True) -> Predictor:
    """The Predictor of ``device_kind`` fitted on everything ``db`` (a cutegen.results.ResultsDB) holds, fitted
    once per database content and code version (``disk=False``: this process only)."""
    k = key(device_kind, db)
    if k in _MEMORY:
        stats["memory_hits"] += 1
        return _MEMORY[k]
    path = cache_dir() / f"{k}.pkl"
    pred = _load(path) if disk else None
    if pred is not None:
        stats["disk_loads"] += 1
    else:
        pred = Predictor(device_kind, db.measurements(op="gemm"))
        stats["fits"] += 1
        if disk:
            _store(path, pred)
    _MEMORY[k] = pred
    return pred


def _load(path: Path) -> Predictor | None:
    try:
        with open(path, "rb") as f:
            pred = pickle.load(f)
        path.touch()                       # most recently used
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a truncated or foreign file: refit over it
        return None
    return pred if isinstance(pred, Predictor) else None


def _store(path: Path, pred: Predictor) -> None:
    from cutegen._atomic import atomic_write

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, pickle.dumps(pred, protocol=pickle.HIGHEST_PROTOCOL))
        old = sorted(path.parent.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP_FILES:]
        for p in old:
            p.unlink(missing_ok=True)
    except OSError:                        # a read-only or full cache: the fit still serves this process
        pass


def clear_memory() -> None:
    _MEMORY.clear()
