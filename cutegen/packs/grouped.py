"""MoE layers in a pack: ``[[moe]]`` tables of the shapes file, grouped kernels chosen per layer, a dispatcher
by the run-time token count, and the pack files that hold them (issue 26, part 3).

A shapes file names a mixture-of-experts layer beside its GEMM shapes::

    [[moe]]
    name = "mixtral.w1"            # required: the layer's name in the C API and COVERAGE.md
    experts = 8                    # E, the groups of one launch
    n = 14336                      # output features of every expert (W[E, N, K])
    k = 4096                       # input features
    dtype = "bf16"                 # "bf16", or "e4m3" with scale = "tensor" (per-tensor) or "block128"
    layout = "offs"                # torch._grouped_mm's offsets, or "masked" (DeepGEMM's per-expert counts)
    tokens = {min = 1, max = 16384}   # offs: total rows T per call; masked: the per-expert capacity max_m
    routing = "uniform"            # "skewed" (Zipf s = 1.6), "worst", or a histogram: E counts or fractions
    weight = 1.0                   # optional: how often this layer runs, relative to the others

For each layer, ``select`` runs the grouped e-graph search (cutegen/search/grouped.py) at every sampled token
count (every power of two of the range and its two ends), prices the union of their top candidates at every
sample with the grouped cost model on the layer's routing (a measured time instead where the results database
holds a validated measurement of that kernel at that very problem on the target kind), keeps a greedy cover of
at most ``MAX_KERNELS_PER_LAYER`` kernels within the tolerance of each sample's best, and splits the token axis
into segments: between two samples served by different kernels the boundary is the first token count at which
the later kernel is priced no slower (found by bisection on the cost model). A kernel depends only on the dtype,
scale and layout, so layers of one class share their kernels. The dispatcher picks by the token count the host
knows (the rows of X, or the masked capacity): the device offsets are never read on the host.

The pack gets, besides its GEMM files: ``kernels/gNN_<hash>/{kernel.cu, manifest.json, entry.cu}`` (entry.cu
renames the kernel's C ABI with its hash, as a GEMM kernel's plan.cu does), ``src/moe_dispatch.cpp`` (layers,
segments and the ``cutegen_pack_moe_*`` C API, declared in ``cutegen_pack.h``), the PyTorch ops
``torch.ops.cutegen.grouped_mm`` / ``grouped_mm_masked`` in the pack's extension, a ``moe`` section in
pack.json and one in COVERAGE.md.
"""
from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CutegenError, FieldError

MAX_KERNELS_PER_LAYER = 4       # grouped kernels one layer may use (each is ~35 s of nvcc on the GPU machine)
TOP_K = 4                       # the search's top k per sampled token count, pooled per layer
MAX_SAMPLES_PER_LAYER = 64      # PACK-MOE-SAMPLES-MAX: listed token counts beyond this are refused
MAX_TOKENS = 2**31 - 1
ROUTINGS = ("uniform", "skewed", "worst")
LAYER_KEYS = ("name", "experts", "n", "k", "dtype", "scale", "layout", "tokens", "routing", "weight", "note")
SAMPLING_NOTE = ("MoE token ranges are sampled at every power of two inside them and their two ends; between two "
                 "samples served by different grouped kernels the boundary is where the cost model (or the "
                 "measurements) say the later kernel becomes no slower")


# --- the shapes file -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoeLayer:
    """One ``[[moe]]`` table."""
    name: str
    experts: int
    n: int
    k: int
    dtype: str
    scale: str
    layout: str
    tokens: tuple           # (v, ...) listed, or (lo, hi, "range")
    routing: Any            # a name of ROUTINGS, or a tuple of E fractions
    weight: float

    def problem(self, tokens: int):
        from ..ops.grouped_gemm.problem import GroupedGemmProblem
        return GroupedGemmProblem(groups=self.experts, n=self.n, k=self.k, tokens=tokens, layout=self.layout,
                                  dtype=self.dtype, scale=self.scale, distribution=self.routing)

    @property
    def kernel_class(self) -> str:
        return self.problem(1).kernel_class_name

    @property
    def samples(self) -> list[int]:
        t = self.tokens
        if len(t) == 3 and t[2] == "range":
            lo, hi = t[0], t[1]
            return sorted({lo, hi} | {1 << e for e in range(hi.bit_length()) if lo <= 1 << e <= hi})
        return list(t)

    @property
    def routing_text(self) -> str:
        if isinstance(self.routing, str):
            return self.routing
        return "histogram [" + ", ".join(f"{x:.4g}" for x in self.routing) + "]"


def _int(where: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise FieldError(where, f"expected an integer from {lo} to {hi}, got {v!r}")
    return v


def _tokens(where: str, value: Any) -> tuple:
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"min", "max"})
        if unknown or "min" not in value or "max" not in value:
            raise FieldError(where, f"a range is {{min = A, max = B}}; got keys {sorted(value)}")
        lo, hi = _int(f"{where}.min", value["min"], 1, MAX_TOKENS), _int(f"{where}.max", value["max"], 1, MAX_TOKENS)
        if lo > hi:
            raise FieldError(where, f"min {lo} is larger than max {hi}")
        return (lo, hi, "range") if lo != hi else (lo,)
    if isinstance(value, list):
        if not value:
            raise FieldError(where, "empty list")
        out = tuple(sorted({_int(f"{where}[{i}]", v, 1, MAX_TOKENS) for i, v in enumerate(value)}))
        if len(out) > MAX_SAMPLES_PER_LAYER:
            raise FieldError(where, f"PACK-MOE-SAMPLES-MAX: {len(out)} token counts listed; a layer takes at most "
                                    f"{MAX_SAMPLES_PER_LAYER} (give a {{min, max}} range, sampled at powers of two)")
        return out
    return (_int(where, value, 1, MAX_TOKENS),)


def _routing(where: str, value: Any, experts: int) -> Any:
    if isinstance(value, str):
        if value not in ROUTINGS:
            raise FieldError(where, f"{value!r} is not one of {', '.join(ROUTINGS)} (or a list of {experts} counts "
                                    "or fractions)")
        return value
    if not isinstance(value, list):
        raise FieldError(where, f"expected one of {', '.join(ROUTINGS)} or a list of {experts} counts or fractions, "
                                f"got {value!r}")
    if len(value) != experts:
        raise FieldError(where, f"a histogram needs one entry per expert: {len(value)} given, experts = {experts}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise FieldError(f"{where}[{i}]", f"expected a finite count or fraction >= 0, got {v!r}")
    total = float(sum(value))
    if total <= 0:
        raise FieldError(where, "the histogram is all zeros (no expert gets a token)")
    fr = [float(v) / total for v in value]
    # the problem's check wants the sum within 1e-6 of 1: put the rounding on the largest share
    j = max(range(len(fr)), key=lambda i: (fr[i], -i))
    fr[j] += 1.0 - sum(fr)
    return tuple(round(x, 12) for x in fr)


def load(path: str | Path) -> list[MoeLayer]:
    """The ``[[moe]]`` tables of a shapes file (none: an empty list). Errors name the file, table and field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CutegenError(f"{path}: no such shapes file") from None
    except tomllib.TOMLDecodeError as e:
        raise FieldError(str(path), f"not valid TOML: {e}") from None
    tables = data.get("moe", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise FieldError(f"{path.name}:moe", "expected [[moe]] tables")
    layers, names = [], set()
    for i, t in enumerate(tables):
        where = f"{path.name}:moe[{i}]"
        unknown = sorted(set(t) - set(LAYER_KEYS))
        if unknown:
            raise FieldError(f"{where}.{unknown[0]}", f"unknown field; a [[moe]] table takes {', '.join(LAYER_KEYS)}")
        for key in ("name", "experts", "n", "k", "tokens"):
            if key not in t:
                raise FieldError(f"{where}.{key}", "missing")
        name = t["name"]
        if not isinstance(name, str) or not name or len(name) > 64 or not all(c.isalnum() or c in "._-" for c in name):
            raise FieldError(f"{where}.name", f"expected 1-64 letters, digits, '.', '_' or '-', got {name!r}")
        if name in names:
            raise FieldError(f"{where}.name", f"{name!r} is used by an earlier [[moe]] table")
        names.add(name)
        from ..ops.grouped_gemm.problem import DTYPES, LAYOUTS, MAX_GROUPS
        experts = _int(f"{where}.experts", t["experts"], 1, MAX_GROUPS)
        n = _int(f"{where}.n", t["n"], 1, MAX_TOKENS)
        k = _int(f"{where}.k", t["k"], 1, MAX_TOKENS)
        dtype = t.get("dtype", "bf16")
        if dtype not in DTYPES:
            raise FieldError(f"{where}.dtype", f"{dtype!r} is not one of {', '.join(DTYPES)}")
        scale = t.get("scale", "tensor" if dtype == "e4m3" else "none")
        allowed = ("tensor", "block128") if dtype == "e4m3" else ("none",)
        if scale not in allowed:
            raise FieldError(f"{where}.scale", f"{scale!r}: dtype {dtype} takes scale {' or '.join(map(repr, allowed))}")
        layout = t.get("layout", "offs")
        if layout not in LAYOUTS:
            raise FieldError(f"{where}.layout", f"{layout!r} is not one of {', '.join(LAYOUTS)}")
        tokens = _tokens(f"{where}.tokens", t["tokens"])
        routing = _routing(f"{where}.routing", t.get("routing", "uniform"), experts)
        weight = t.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < 1e12:
            raise FieldError(f"{where}.weight", f"expected a positive number, got {weight!r}")
        layer = MoeLayer(name, experts, n, k, dtype, scale, layout, tokens, routing, float(weight))
        # the problem's own checks (alignment rules come later, from the search), with the table named
        try:
            layer.problem(layer.samples[0])
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None
        layers.append(layer)
    return layers


# --- selection -------------------------------------------------------------------------------------------
@dataclass
class Sample:
    tokens: int
    kernel: int                 # index into Selection.kernels
    time_us: float
    best_us: float
    source: str                 # "measured" or "predicted"
    floor_us: float


@dataclass
class Segment:
    lo: int                     # first token count of the segment (the last segment runs to any count)
    kernel: int
    why: str


@dataclass
class LayerChoice:
    layer: MoeLayer
    samples: list[Sample]
    segments: list[Segment]
    kernels: list[int]          # the pack kernels the layer uses, in the order chosen


@dataclass
class GroupedKernel:
    cls: str                    # the kernel class (grouped_<dtype>_<layout>)
    config: Any                 # GroupedGemmConfig
    problem: Any                # a problem of the class (for rendering: the kernel depends on its class only)


@dataclass
class MoeSelection:
    kernels: list[GroupedKernel]
    layers: list[LayerChoice]
    tolerance: float
    notes: list[str] = field(default_factory=list)


def _measurements(db, kind: str, problem) -> list:
    """The validated benchmarks of exactly this problem on ``kind`` (none without a database)."""
    if db is None:
        return []
    try:
        ms = db.measurements(kind, problem)
    except CutegenError:     # a database that cannot key this operation holds no grouped measurements
        return []
    return [m for m in ms if m.validated and getattr(m, "is_benchmark", True)]


def _measured_us(measurements: list, config) -> float | None:
    """The fastest of ``measurements`` of exactly this configuration."""
    times = [m.median_us for m in measurements if m.config == config]
    return min(times) if times else None


def _price(problem, config, kind: str) -> float:
    """Predicted microseconds, or inf where the configuration is illegal for this problem."""
    from ..core import registry
    from ..legality.grouped_gemm import grouped_stages
    from ..search.grouped_cost import grouped_cost
    if any(getattr(v, "enforced", True) for v in registry.check(problem, config)):
        return math.inf
    stages = grouped_stages(problem, config)
    if stages < 1:
        return math.inf
    return grouped_cost(problem, config, stages, kind)[0]


def _floor(problem, kind: str) -> float:
    from ..search.grouped_cost import floor_us
    return floor_us(problem, kind)[0]


def select(layers: list[MoeLayer], kind: str, *, tolerance: float = 0.03, db=None, say=lambda msg: None,
           max_kernels_per_layer: int = MAX_KERNELS_PER_LAYER, top_k: int = TOP_K,
           given: dict[str, list] | None = None) -> MoeSelection:
    """Grouped kernels for every layer on device kind ``kind``. ``given`` (tests, and a user's fixed list):
    layer name -> the configurations to choose from instead of the search's."""
    from ..search.grouped import search
    kernels: list[GroupedKernel] = []
    index: dict[tuple[str, str], int] = {}          # (class, config JSON) -> pack kernel
    choices, measured_pairs = [], 0
    for layer in layers:
        samples = layer.samples
        problems = [layer.problem(t) for t in samples]
        if given is not None and layer.name in given:
            pool = list(given[layer.name])
        else:
            pool, seen = [], set()
            for p in problems:
                for r in search(p, top_k, device=kind).ranked:
                    key = json.dumps(r.config.to_dict(), sort_keys=True)
                    if key not in seen:
                        seen.add(key)
                        pool.append(r.config)
        if not pool:
            raise CutegenError(f"[[moe]] {layer.name}: the grouped search found no legal kernel")
        # times[c][s]: candidate c at sample s (measured where the database has it)
        times, sources = [], []
        stored = [_measurements(db, kind, p) for p in problems]
        for cfg in pool:
            row, src = [], []
            for p, ms in zip(problems, stored):
                m = _measured_us(ms, cfg)
                row.append(m if m is not None else _price(p, cfg, kind))
                src.append("measured" if m is not None else "predicted")
                measured_pairs += m is not None
            times.append(row)
            sources.append(src)
        weights = [layer.weight / len(samples)] * len(samples)
        best = [min(times[c][s] for c in range(len(pool))) for s in range(len(samples))]
        if any(math.isinf(b) for b in best):
            s = next(s for s, b in enumerate(best) if math.isinf(b))
            raise CutegenError(f"[[moe]] {layer.name}: no legal grouped kernel at tokens = {samples[s]}")
        order = sorted(range(len(pool)), key=lambda c: json.dumps(pool[c].to_dict(), sort_keys=True))
        chosen: list[int] = []
        uncovered = set(range(len(samples)))
        while uncovered and len(chosen) < max_kernels_per_layer:
            def gain(c):
                return sum(weights[s] for s in uncovered if times[c][s] <= best[s] * (1 + tolerance) + 1e-12)
            c = max(order, key=lambda c: (gain(c), -sum(times[c][s] * weights[s] for s in range(len(samples)))))
            if gain(c) <= 0:
                break
            chosen.append(c)
            uncovered -= {s for s in uncovered if times[c][s] <= best[s] * (1 + tolerance) + 1e-12}
        # every sample on its fastest chosen kernel (ties: the one chosen first)
        pick = [min(chosen, key=lambda c: (times[c][s], chosen.index(c))) for s in range(len(samples))]
        used = list(dict.fromkeys(pick))
        for c in used:
            key = (layer.kernel_class, json.dumps(pool[c].to_dict(), sort_keys=True))
            if key not in index:
                index[key] = len(kernels)
                kernels.append(GroupedKernel(layer.kernel_class, pool[c], problems[0]))
        kid = {c: index[(layer.kernel_class, json.dumps(pool[c].to_dict(), sort_keys=True))] for c in used}
        rows = [Sample(t, kid[pick[s]], times[pick[s]][s], best[s], sources[pick[s]][s], _floor(problems[s], kind))
                for s, t in enumerate(samples)]
        segs = [Segment(1, kid[pick[0]], f"the fastest chosen kernel at tokens = {samples[0]} ({sources[pick[0]][0]})")]
        for s in range(1, len(samples)):
            a, b = pick[s - 1], pick[s]
            if a == b:
                continue
            measured_ends = "measured" in (sources[a][s - 1], sources[b][s])
            lo = _crossing(layer, pool[a], pool[b], samples[s - 1], samples[s], kind, measured=measured_ends)
            how = "measured at both samples; boundary at their geometric mean" if measured_ends else \
                f"the cost model prices it no slower than {_gname(kid[a], pool[a])} from tokens = {lo}"
            segs.append(Segment(lo, kid[b], f"between the samples tokens = {samples[s - 1]} and {samples[s]}: {how}"))
        choices.append(LayerChoice(layer, rows, segs, [kid[c] for c in used]))
        say(f"  [[moe]] {layer.name}: {len(samples)} token samples, {len(pool)} candidates, "
            f"{len(used)} kernel(s), {len(segs)} segment(s)")
    sel = MoeSelection(kernels, choices, tolerance)
    sel.notes.append(SAMPLING_NOTE)
    sel.notes.append(f"grouped times: {measured_pairs} (kernel, token count) pairs measured (results database, "
                     f"validated, this target kind), the rest predicted by the grouped cost model "
                     f"(search/grouped_cost.py) on each layer's routing")
    return sel


def _crossing(layer: MoeLayer, cfg_a, cfg_b, lo: int, hi: int, kind: str, measured: bool) -> int:
    """The first token count in (lo, hi] at which ``cfg_b`` is priced no slower than ``cfg_a`` (bisection on
    the cost model; the two samples' winners are a at lo and b at hi). With measurements at either end the
    midpoint in log2 is used (there is no measured curve between the samples)."""
    if measured:
        return max(lo + 1, min(hi, round(math.sqrt(lo * hi))))
    a, b = lo, hi                       # invariant: a is served by cfg_a, b by cfg_b
    while b - a > 1:
        mid = (a + b) // 2
        p = layer.problem(mid)
        if _price(p, cfg_b, kind) <= _price(p, cfg_a, kind):
            b = mid
        else:
            a = mid
    return b


def _gname(j: int, config) -> str:
    return f"g{j:02d}_{config.short_name()}"


def select_tokens(choice: LayerChoice, tokens: int) -> int:
    """The dispatch rule, as moe_dispatch.cpp states it: the last segment whose first token count is <= tokens
    (tokens below the first segment's start run on the first segment's kernel)."""
    k = choice.segments[0].kernel
    for seg in choice.segments:
        if seg.lo <= tokens:
            k = seg.kernel
    return k


# --- the pack's files ------------------------------------------------------------------------------------
def kernel_name(sel: MoeSelection, j: int) -> str:
    return _gname(j, sel.kernels[j].config)


def files(sel: MoeSelection, kind: str, env) -> tuple[dict[str, str], dict]:
    """The grouped kernels' files ({path: text}) and the template context ``moe`` for the pack's own templates
    (header, CMake, dispatch, PyTorch op)."""
    from ..ops.grouped_gemm import abi as gabi
    from ..ops.grouped_gemm.render import render as render_grouped
    from ..search.grouped_cost import grouped_cost
    from ..legality.grouped_gemm import grouped_stages
    out: dict[str, str] = {}
    kernels = []
    for j, k in enumerate(sel.kernels):
        stages = grouped_stages(k.problem, k.config)
        t, bd = grouped_cost(k.problem, k.config, stages, kind)
        rk = render_grouped(k.problem, k.config, cost={"model": "cutegen.search.grouped_cost", "target": kind,
                                                       "predicted_us": t, "breakdown": bd})
        kdir = f"g{j:02d}_{rk.kernel_hash}"
        for fname, text in rk.files.items():
            out[f"kernels/{kdir}/{fname}"] = text
        out[f"kernels/{kdir}/entry.cu"] = env.get_template("pack_moe_entry.cu.j2").render(
            kernel_hash=rk.kernel_hash, name=kernel_name(sel, j), abi_exports=gabi.EXPORTED_SYMBOLS)
        kernels.append({"name": kernel_name(sel, j), "dir": kdir, "hash": rk.kernel_hash, "cls": k.cls,
                        "dtype": k.problem.dtype, "scale": k.problem.scale, "layout": k.problem.layout})
    layers, segments = [], []
    for c in sel.layers:
        L = c.layer
        layers.append({"name": L.name, "experts": L.experts, "n": L.n, "k": L.k, "dtype": L.dtype, "scale": L.scale,
                       "layout": L.layout, "routing": L.routing_text, "seg_start": len(segments),
                       "seg_count": len(c.segments), "kernels": c.kernels})
        segments += [{"lo": s.lo, "kernel": s.kernel, "why": s.why} for s in c.segments]
    ctx = {"kernels": kernels, "layers": layers, "segments": segments,
           "masked": any(L["layout"] == "masked" for L in layers)}
    return out, ctx


def summary(sel: MoeSelection, ctx: dict) -> dict:
    """pack.json's ``moe`` section."""
    return {
        "notes": sel.notes, "tolerance": sel.tolerance,
        "kernels": [{"name": kc["name"], "dir": kc["dir"], "hash": kc["hash"], "class": kc["cls"],
                     "config": k.config.to_dict(), "problem_class": k.problem.kernel_key()}
                    for kc, k in zip(ctx["kernels"], sel.kernels)],
        "layers": [{"name": c.layer.name, "experts": c.layer.experts, "n": c.layer.n, "k": c.layer.k,
                    "dtype": c.layer.dtype, "scale": c.layer.scale, "layout": c.layer.layout,
                    "routing": c.layer.routing if isinstance(c.layer.routing, str) else list(c.layer.routing),
                    "tokens": list(c.layer.tokens), "weight": c.layer.weight,
                    "segments": [{"tokens_first": s.lo, "kernel": ctx["kernels"][s.kernel]["name"]} for s in c.segments],
                    "samples": [{"tokens": s.tokens, "kernel": ctx["kernels"][s.kernel]["name"],
                                 "time_us": round(s.time_us, 3), "best_us": round(s.best_us, 3),
                                 "floor_us": round(s.floor_us, 3), "source": s.source} for s in c.samples]}
                   for c in sel.layers],
    }


def coverage_markdown(sel: MoeSelection, ctx: dict) -> str:
    names = [kc["name"] for kc in ctx["kernels"]]
    lines = ["", "## MoE layers (grouped GEMM)", ""]
    lines += [f"- {n}" for n in sel.notes]
    lines += [f"- {len(sel.kernels)} grouped kernels: " + ", ".join(names) + ". Times in microseconds at the "
              "layer's routing; `floor` is the larger of reading the used experts' weights and the activations at "
              "the target's datasheet bandwidth and the FLOPs at its peak; `source` says measured or predicted."]
    for c in sel.layers:
        L = c.layer
        unit = "total tokens T (rows of X)" if L.layout == "offs" else "per-expert capacity max_m"
        dt = L.dtype if L.scale == "none" else f"{L.dtype} ({L.scale} scales)"
        lines += ["", f"### {L.name}: {L.experts} experts, N = {L.n}, K = {L.k}, {dt}, layout {L.layout}, "
                      f"routing {L.routing_text}; dispatch by {unit}", ""]
        for a, s in enumerate(c.segments):
            hi = c.segments[a + 1].lo - 1 if a + 1 < len(c.segments) else None
            rng = f"tokens {s.lo}-{hi}" if hi is not None else f"tokens >= {s.lo}"
            lines.append(f"- {rng}: {names[s.kernel]}")
        lines += ["", "| tokens | kernel | time (us) | source | best (us) | loss | floor (us) | floor / time |",
                  "|---|---|---|---|---|---|---|---|"]
        for s in c.samples:
            loss = s.time_us / s.best_us - 1 if s.best_us else 0.0
            lines.append(f"| {s.tokens} | {names[s.kernel]} | {s.time_us:.2f} | {s.source} | {s.best_us:.2f} | "
                         f"{loss:+.1%} | {s.floor_us:.2f} | {s.floor_us / s.time_us:.3f} |")
    return "\n".join(lines) + "\n"


def add_to_pack(files_: dict[str, str], sel: MoeSelection, kind: str, env, grouped_files: dict[str, str],
                ctx: dict) -> None:
    """Put the grouped kernels' files, pack.json's ``moe`` section and COVERAGE.md's MoE section into a pack's
    files (the pack's own templates already rendered with ``moe`` = ``ctx``)."""
    files_.update(grouped_files)
    files_["src/moe_dispatch.cpp"] = env.get_template("pack_moe_dispatch.cpp.j2").render(moe=ctx)
    meta = json.loads(files_["pack.json"])
    meta["moe"] = summary(sel, ctx)
    files_["pack.json"] = json.dumps(meta, indent=1, sort_keys=True) + "\n"
    files_["COVERAGE.md"] += coverage_markdown(sel, ctx)
