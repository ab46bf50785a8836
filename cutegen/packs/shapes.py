"""The shapes file of ``cutegen pack``: the GEMMs a library calls, with sizes as numbers or ranges.

    [[shape]]
    name = "llama8b.qkv"          # optional; default: the problem's kernel-class name and N, K
    dtype = "bf16"                # any GemmProblem field except m, n, k (layout = "tn", bias, ...)
    layout = "tn"
    m = {min = 1, max = 8192}     # a number, a list of numbers, or a range
    n = 6144
    k = 4096
    weight = 2.0                  # optional (default 1): how often this shape runs, relative

A range is sampled where the best kernel can change: every power of two inside it, its two ends, and
the wave boundaries of the common CTA tiles (the largest M whose tiles still fit in one, two waves of
the target's SMs, and the M after it). The weight of a range is shared by its sample points.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CutegenError, FieldError
from ..problem import GemmProblem

MAX_EXTENT = 2**31 - 1
# Tiles whose wave boundaries are sampled: the M extents and N extents the search picks most
# (64/128/256-row cooperative and ping-pong tiles, 128/256-column tiles).
WAVE_TILES_M = (64, 128, 256)
WAVE_TILES_N = (128, 256)
WAVES_SAMPLED = 2
SAMPLING_NOTE = ("ranges are sampled at every power of two inside them, their two ends, and the wave "
                 f"boundaries of {'/'.join(map(str, WAVE_TILES_M))}-row x {'/'.join(map(str, WAVE_TILES_N))}"
                 f"-column tiles (the last M of waves 1..{WAVES_SAMPLED} on the target's SMs, and the M after)")


@dataclass(frozen=True)
class Shape:
    """One sample point: a concrete problem, the entry it came from, and its weight."""
    entry: str
    problem: GemmProblem
    weight: float

    @property
    def label(self) -> str:
        p = self.problem
        return f"{self.entry} m{p.m}n{p.n}k{p.k}" + (f"b{p.batch}" if p.batch != 1 else "")


@dataclass(frozen=True)
class Entry:
    """One ``[[shape]]`` table: a problem template and the extents it spans."""
    name: str
    template: dict[str, Any]
    m: tuple[int, ...] | tuple[int, int, str]
    n: Any
    k: Any
    weight: float


def _extent(where: str, value: Any) -> tuple:
    """A number -> (v,); a list -> sorted unique; {min, max} -> (min, max, "range")."""
    def one(v, w):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_EXTENT:
            raise FieldError(w, f"expected an integer from 1 to {MAX_EXTENT}, got {v!r}")
        return v
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"min", "max"})
        if unknown or "min" not in value or "max" not in value:
            raise FieldError(where, f"a range is {{min = A, max = B}}; got keys {sorted(value)}")
        lo, hi = one(value["min"], f"{where}.min"), one(value["max"], f"{where}.max")
        if lo > hi:
            raise FieldError(where, f"min {lo} is larger than max {hi}")
        return (lo, hi, "range") if lo != hi else (lo,)
    if isinstance(value, list):
        if not value:
            raise FieldError(where, "empty list")
        return tuple(sorted({one(v, f"{where}[{i}]") for i, v in enumerate(value)}))
    return (one(value, where),)


def load(path: str | Path) -> list[Entry]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CutegenError(f"{path}: no such shapes file") from None
    except tomllib.TOMLDecodeError as e:
        raise FieldError(str(path), f"not valid TOML: {e}") from None
    unknown = sorted(set(data) - {"shape", "moe"})     # [[moe]]: MoE layers (cutegen/packs/grouped.py)
    if unknown:
        raise FieldError(str(path), f"unknown top-level keys {unknown}; expected [[shape]] and [[moe]] tables")
    tables = data.get("shape")
    if not isinstance(tables, list) or not tables:
        raise FieldError(f"{path.name}:shape", "expected at least one [[shape]] table")
    entries, names = [], set()
    for i, table in enumerate(tables):
        where = f"{path.name}:shape[{i}]"
        t = dict(table)
        for key in ("m", "n", "k"):
            if key not in t:
                raise FieldError(f"{where}.{key}", "missing")
        m, n, k = (_extent(f"{where}.{key}", t.pop(key)) for key in ("m", "n", "k"))
        weight = t.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < 1e12:
            raise FieldError(f"{where}.weight", f"expected a positive number, got {weight!r}")
        name = str(t.pop("name", "") or "")
        t.pop("note", None)
        # Validate the template now, with aligned placeholder sizes (alignments derive from the packed
        # leading dimensions), so a bad field names its table.
        probe = GemmProblem.from_dict({**t, "m": 256, "n": 256, "k": 256}, where=where)
        name = name or f"{probe.kernel_class_name}.n{'-'.join(map(str, n[:2]))}k{'-'.join(map(str, k[:2]))}"
        if name in names:
            raise FieldError(f"{where}.name", f"{name!r} is used by an earlier shape")
        names.add(name)
        entries.append(Entry(name, t, m, n, k, float(weight)))
    return entries


def _points(ext: tuple) -> list[int]:
    if len(ext) == 3 and ext[2] == "range":
        lo, hi = ext[0], ext[1]
        pts = {lo, hi} | {1 << e for e in range(hi.bit_length()) if lo <= 1 << e <= hi}
        return sorted(pts)
    return list(ext)


def wave_boundaries(lo: int, hi: int, n: int, sms: int) -> set[int]:
    """M values where a common tile's grid goes from w full waves to w+1 (last M of w waves, and the next)."""
    out = set()
    for tm in WAVE_TILES_M:
        for tn in WAVE_TILES_N:
            tiles_n = math.ceil(n / tn)
            for w in range(1, WAVES_SAMPLED + 1):
                rows = (w * sms) // tiles_n
                if rows < 1:
                    continue
                for m in (rows * tm, rows * tm + 1):
                    if lo <= m <= hi:
                        out.add(m)
    return out


def expand(entries: list[Entry], sms: int) -> list[Shape]:
    """Every sample point of every entry, in file order then (N, K, M) order; the weight of an entry
    is split evenly over its points."""
    shapes = []
    for e in entries:
        pts = []
        for n in _points(e.n):
            for k in _points(e.k):
                ms = set(_points(e.m))
                if len(e.m) == 3 and e.m[2] == "range":
                    ms |= wave_boundaries(e.m[0], e.m[1], n, sms)
                pts += [(m, n, k) for m in sorted(ms)]
        for m, n, k in pts:
            problem = GemmProblem.from_dict({**e.template, "m": m, "n": n, "k": k}, where=e.name)
            shapes.append(Shape(e.name, problem, e.weight / len(pts)))
    return shapes
