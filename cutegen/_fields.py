"""Strict readers for JSON-ish input: every failure names the field."""
from __future__ import annotations

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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(field, f"expected a number, got {value!r}")
    return float(value)


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
