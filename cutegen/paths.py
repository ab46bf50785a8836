"""Names that become paths: a suite problem's name, a tuning plan's problem and candidate directories.

A name read from a file (a suite TOML, a plan.json) is one path component of cutegen's own choosing:
``check_name`` admits letters, digits, ``_``, ``+``, ``-`` and ``.`` (not first, so no ``..``, no
hidden file), at most 200 characters: a name like ``../../x`` or ``/etc`` is a one-line error, never
a write outside the output directory. ``confined`` judges a relative path read from a file against the
directory it is relative to, symbolic links resolved.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import FieldError

NAME_CHARS = "letters, digits, '_', '+', '-' and '.' (not first), at most 200 characters"
_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,199}\Z")


def check_name(name: object, field: str) -> str:
    """``name`` if it is one safe path component, else a FieldError naming ``field``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise FieldError(field, f"{name!r} is not a usable name: {NAME_CHARS} (it names a directory)")
    return name


def confined(root: str | os.PathLike, relative: object, field: str) -> Path:
    """``root / relative`` where ``relative`` is a relative path of safe components that stays inside
    ``root`` once symbolic links are resolved; else a FieldError naming ``field``."""
    if not isinstance(relative, str) or not relative:
        raise FieldError(field, f"expected a relative path, got {relative!r}")
    if os.path.isabs(relative) or "\\" in relative:
        raise FieldError(field, f"{relative!r} is not a relative path inside {root}")
    for part in relative.split("/"):
        check_name(part, field)
    root = Path(root)
    target = root / relative
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(target)]) != real_root:
        raise FieldError(field, f"{relative!r} leads outside {root} (a symbolic link)")
    return target
