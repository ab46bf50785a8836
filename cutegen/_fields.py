"""Strict readers for JSON-ish input: every failure names the field."""
from __future__ import annotations

import math
from typing import Any, Iterable

from .errors import FieldError


def as_int(field: str, value: Any, *, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise FieldError(field, f"expected an integer, got {value!r}")
    if lo is not None and value < lo:
        raise FieldError(field, f"{value} is below the minimum {lo}")
    if hi is not None and value > hi:
        raise FieldError(field, f"{value} is above the maximum {hi}")
    return value


def as_float(field: str, value: Any) -> float:
    """A finite number: NaN and Infinity are refused (written back into a manifest they are not JSON)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(field, f"expected a number, got {value!r}")
    try:
        out = float(value)
    except OverflowError:
        raise FieldError(field, f"{value} is too large for a float") from None
    if not math.isfinite(out):
        raise FieldError(field, f"expected a finite number, got {value!r}")
    return out


def finite_float(text: str) -> float:
    """argparse ``type=`` for a finite float option (``--beta nan`` is refused like ``--beta x``)."""
    import argparse
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def as_choice(field: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise FieldError(field, f"{value!r} is not one of {', '.join(choices)}")
    return value


def as_int_tuple(field: str, value: Any, length: int, *, lo: int = 1, hi: int | None = None) -> tuple[int, ...]:
    if isinstance(value, str) and "x" in value:
        value = value.split("x")
    if not isinstance(value, (list, tuple)) or len(value) != length:
        raise FieldError(field, f"expected {length} integers, got {value!r}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        out.append(as_int(f"{field}[{i}]", v, lo=lo, hi=hi))
    return tuple(out)


def reject_unknown(where: str, data: dict, known: Iterable[str]) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise FieldError(f"{where}.{unknown[0]}", "unknown field")


def _no_constant(name: str):
    # json's parse_constant hook: NaN, Infinity and -Infinity are not JSON (RFC 8259) and no field of
    # cutegen's takes them; raised as a decode error so every reader's "not valid JSON" message covers it
    import json
    raise json.JSONDecodeError(f"{name} is not a number JSON allows", name, 0)


def loads_json(text: str | bytes):
    """``json.loads`` that refuses NaN and Infinity (a JSONDecodeError, as for any other invalid JSON)."""
    import json
    return json.loads(text, parse_constant=_no_constant)
