"""The vendor library as a tactic (issue 22 part 3): where no generated kernel of a pack comes within the
tolerance of cuBLAS on a *measured* segment, the pack routes that segment to cuBLASLt, through the same plan
API (templates/pack_vendor_cublaslt.cpp.j2) and the same PyTorch op.

Never on prediction: only a measured point (``measured.Point``, with torch.matmul's measured time, which is
cuBLAS) can send an M to the vendor. The hook is one function, ``offer``: it adds cuBLASLt to a point's
candidates at cuBLAS's time times (1 + tolerance), so the measured-segment logic (``measured.segments``, the
crossings of measured curves) picks it exactly where every generated kernel is slower than cuBLAS by more
than the tolerance, and a kernel within the tolerance (or tied with it) keeps the M. ``--no-vendor`` passes
``enabled=False``: the vendor is offered nowhere and the pack is byte-identical to one made before it existed.

In the rendered pack the vendor is one more entry of the kernel table per class, after the generated kernels
(index ``len(kernels) + class``), named ``vendor_cublaslt_c<class>``; it exists only when some segment or
exact shape uses it, and only then does the CMake package link ``CUDA::cublasLt``.

Rules (which classes the vendor computes; a class outside them is never routed to it, and its table entry
refuses a plan with the rule's message):
  VENDOR-EPILOGUE   bias or activation != none: the tactic computes alpha * A @ B + beta * C only (cuBLASLt's
                    bias epilogue broadcasts along the other mode of D than cutegen's per-row bias here).
  VENDOR-TYPES      the (A, B, C, D) types are not a cuBLASLt matmul with an f32 accumulator: 16-bit inputs of one
                    type with C = D of that type or f32; tf32 with f32 C and D; FP8 (not e5m2 x e5m2) with C = D
                    in bf16, f16 or f32; C void or of D's type.
  VENDOR-FP8-LAYOUT FP8 inputs not both K-contiguous (cuBLASLt runs FP8 as TN only).
"""
from __future__ import annotations

import json

from ..problem import GemmProblem
from .measured import Point

NAME = "cuBLASLt"
FP8 = ("e4m3", "e5m2")
# cuBLASLt's data type per cutegen dtype (library_types.h)
CUDA_TYPES = {"bf16": "CUDA_R_16BF", "f16": "CUDA_R_16F", "tf32": "CUDA_R_32F", "f32": "CUDA_R_32F",
              "e4m3": "CUDA_R_8F_E4M3", "e5m2": "CUDA_R_8F_E5M2"}


def entry_name(cls: int) -> str:
    """The vendor's name in the pack's kernel table (what cutegen_pack_explain and COVERAGE.md show)."""
    return f"vendor_cublaslt_c{cls}"


def unsupported(p: GemmProblem) -> str | None:
    """Why cuBLASLt cannot compute ``p``'s class in this pack (the rule ID first), or None when it can."""
    if p.bias or p.activation != "none":
        return (f"VENDOR-EPILOGUE: the class has bias={'yes' if p.bias else 'no'}, activation {p.activation}; the "
                "vendor tactic computes alpha * A @ B + beta * C only")
    a, b, c, d = p.dtype_a, p.dtype_b, p.dtype_c, p.dtype_d
    if c not in ("void", d):
        return f"VENDOR-TYPES: C is {c} and D is {d}; cuBLASLt needs C of D's type"
    if a in FP8 or b in FP8:
        if not (a in FP8 and b in FP8) or (a, b) == ("e5m2", "e5m2") or d not in ("bf16", "f16", "f32"):
            return f"VENDOR-TYPES: cuBLASLt has no FP8 matmul with A {a}, B {b}, D {d}"
        if not (p.a_k_major and p.b_k_major):
            return (f"VENDOR-FP8-LAYOUT: A is {p.layout_a}-major and B {p.layout_b}-major; cuBLASLt runs FP8 only "
                    "with both operands K-contiguous (TN)")
        return None
    if a != b:
        return f"VENDOR-TYPES: A is {a} and B is {b}; cuBLASLt needs one input type outside FP8"
    if a == "tf32" and d != "f32":
        return f"VENDOR-TYPES: tf32 inputs with D {d}; cuBLASLt's TF32 matmul writes f32"
    if a in ("bf16", "f16") and d not in (a, "f32"):
        return f"VENDOR-TYPES: {a} inputs with D {d}; cuBLASLt writes {a} or f32 from {a}"
    return None


def offer(point: Point, vendor: int | None, tolerance: float) -> Point:
    """The selection hook: ``point`` (one measured M of one (N, K), its times restricted to the class's
    generated kernels) with cuBLASLt added as kernel ``vendor`` at torch.matmul's measured time times
    (1 + ``tolerance``). ``vendor`` None (``--no-vendor``, or a class the vendor cannot compute), or no
    torch.matmul time at the point: the point unchanged, so nothing is routed to the vendor there."""
    if vendor is None or not point.matmul_us or point.matmul_us <= 0:
        return point
    return Point(point.m, {**point.times, vendor: point.matmul_us * (1.0 + tolerance)}, point.matmul_us)


def route_rows(sel, measured: dict) -> int:
    """The same hook for the exact shapes of the set: a measured row (the measured time of the kernel that serves
    it, the fastest of its class, and torch.matmul's, ``Row.cublas_us``) more than the tolerance slower than cuBLAS
    runs on cuBLASLt, at the vendor's own measured time where ``measured`` ((N, K) -> ``measured.Point`` list)
    holds one, else at cuBLAS's. The comparison is ``offer``'s, so a shape and the segment around it agree.
    Returns the number of rows routed. Rows already on the vendor, predicted rows and classes the vendor
    cannot compute (``unsupported``) are left alone."""
    from .select import class_key
    n = len(sel.kernels)
    cls_index = {c: i for i, c in enumerate(sel.classes)}
    own = {(nk[0], nk[1], p.m): p for nk, pts in (measured or {}).items() for p in pts}
    routed = 0
    for r in sel.rows:
        if (r.kernel is None or r.kernel >= n or r.source != "measured" or not r.cublas_us or r.time_us is None
                or unsupported(r.shape.problem) is not None):
            continue
        if r.time_us <= r.cublas_us * (1.0 + sel.tolerance):
            continue
        q = r.shape.problem
        vi = n + cls_index[class_key(q)]
        p = own.get((q.n, q.k, q.m))
        t = (p.times.get(vi) if p is not None else None) or r.cublas_us
        r.note = (f"measured: no generated kernel within {sel.tolerance:.1%} of cuBLAS (best {r.time_us:.1f} us, "
                  f"torch.matmul {r.cublas_us:.1f} us): cuBLASLt (vendor)")
        r.kernel, r.time_us, r.best_us = vi, t, t
        routed += 1
    return routed


def context(p: GemmProblem) -> dict:
    """One class's row of the vendor's class table (templates/pack_vendor_cublaslt.cpp.j2)."""
    why = unsupported(p)
    fp8 = p.dtype_a in FP8
    return {"unsupported": why, "a": CUDA_TYPES[p.dtype_a], "b": CUDA_TYPES[p.dtype_b], "d": CUDA_TYPES[p.dtype_d],
            "compute": "CUBLAS_COMPUTE_32F_FAST_TF32" if p.dtype_a == "tf32" else "CUBLAS_COMPUTE_32F",
            "c_void": "true" if p.dtype_c == "void" else "false",
            "fast_accum": "true" if (fp8 and p.fp8_fast_accum) else "false"}


def segment_note(tolerance: float) -> str:
    return f"; cuBLASLt (vendor): no generated kernel of the pack came within {tolerance:.1%} of cuBLAS there"


def figure_rows(measured: list[Point], generated: list[Point], offered: list[Point], vendor: int | None) -> list[dict]:
    """One (N, K)'s measured points as the two figures see them: torch.matmul's time, the generated kernels'
    best (each measured M runs on its measured winner: a segment boundary never passes a measured point), and
    the pack as shipped (the offered winner; the vendor at its own measured time where the results hold one,
    else at cuBLAS's). Points without torch.matmul's time or without a generated kernel's are left out."""
    rows = []
    for orig, gen, off in zip(measured, generated, offered):
        if not orig.matmul_us or not gen.times:
            continue
        best = min(gen.times.values())
        win = min(off.times.items(), key=lambda kv: (kv[1], kv[0]))[0]
        by_vendor = vendor is not None and win == vendor
        rows.append({"m": orig.m, "matmul_us": orig.matmul_us, "generated_us": best,
                     "shipped_us": orig.times.get(vendor, orig.matmul_us) if by_vendor else best,
                     "vendor": by_vendor})
    return rows


def figures(rows: list[dict]) -> dict:
    """The pack's two figures against torch.matmul (its time / the pack's: above 1 is faster), over every
    measured point: as shipped (the vendor where it took the segment) and its generated kernels alone."""
    import math

    def summary(ratios: list[float]) -> dict:
        return {"geomean": round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 4),
                "min": round(min(ratios), 4), "under_0.97": sum(1 for r in ratios if r < 0.97),
                "under_0.9": sum(1 for r in ratios if r < 0.9)}
    return {"basis": "measured points (--measured): torch.matmul's time / the time of the tactic that serves each",
            "points": len(rows), "vendor_points": sum(1 for r in rows if r["vendor"]),
            "as_shipped": summary([r["matmul_us"] / r["shipped_us"] for r in rows]),
            "generated_only": summary([r["matmul_us"] / r["generated_us"] for r in rows])}


def coverage_note(tolerance: float) -> str:
    return (f"vendor tactic: the M segments and shapes where, measured, no generated kernel came within {tolerance:.1%} "
            f"of cuBLAS run on cuBLASLt through the same plan API (kernels named vendor_cublaslt_c<class>); the "
            "CMake package links CUDA::cublasLt. `cutegen pack --no-vendor` routes none")


def _vendor_routes(disp: dict, n_gen: int) -> tuple[list[dict], list[dict]]:
    """(segments, exact shapes) of the dispatch tables that the vendor serves."""
    segs = []
    for first, count in disp["seg_rows"]:
        row = disp["segments"][first:first + count]
        for i, g in enumerate(row):
            if g["kernel"] >= n_gen:
                segs.append({"class": g["kernel"] - n_gen, "n": g["n"], "k": g["k"], "m_first": g["lo"],
                             "m_last": row[i + 1]["lo"] - 1 if i + 1 < len(row) else 2**31 - 1})
    exact = [{"class": e["cls"], "m": e["M"], "n": e["N"], "k": e["K"], "batch": e["batch"]}
             for e in disp["exact"] if e["kernel"] >= n_gen]
    return segs, sorted(exact, key=lambda e: (e["class"], e["n"], e["k"], e["m"], e["batch"]))


def pack_json_fields(disp: dict, kernels: list[dict], tolerance: float) -> dict:
    """pack.json's vendor fields: ``measured_figures`` (the two figures, with measurements) and ``vendor``
    (what routes to cuBLASLt, when anything does). Nothing for a pack made without measurements."""
    out = {}
    if disp.get("figures"):
        out["measured_figures"] = disp["figures"]
    if disp.get("vendor"):
        n_gen = sum(1 for k in kernels if not k.get("vendor"))
        segs, exact = _vendor_routes(disp, n_gen)
        out["vendor"] = {"library": NAME, "tolerance": tolerance, "segments": segs, "exact_shapes": exact,
                         "entries": [{"name": k["name"], "class": k["cls"],
                                      "unsupported": disp["vendor_classes"][k["cls"]]["unsupported"]}
                                     for k in kernels if k.get("vendor")]}
        if disp.get("vendor_algorithms"):
            out["vendor"]["algorithms"] = disp["vendor_algorithms"]
    return out


def coverage_section(disp: dict, kernels: list[dict]) -> str:
    """COVERAGE.md's closing section: the two figures and which segments and shapes are vendor."""
    lines = []
    fig = disp.get("figures")
    if fig:
        lines += ["", "## Against torch.matmul, measured (its time / the pack's)", "",
                  f"Over {fig['points']} measured points ({fig['vendor_points']} served by cuBLASLt):", ""]
        for key, what in (("as_shipped", "the pack as shipped"), ("generated_only", "its generated kernels alone")):
            f = fig[key]
            lines.append(f"- {what}: geomean {f['geomean']:.3f}x, min {f['min']:.3f}x, {f['under_0.97']} under 0.97x, "
                         f"{f['under_0.9']} under 0.9x")
    if disp.get("vendor"):
        n_gen = sum(1 for k in kernels if not k.get("vendor"))
        segs, exact = _vendor_routes(disp, n_gen)
        lines += ["", "## Vendor segments (cuBLASLt)", "",
                  "| class | N | K | M from | M to | runs on |", "|---|---|---|---|---|---|"]
        lines += [f"| {g['class']} | {g['n']} | {g['k']} | {g['m_first']} | "
                  f"{'2^31-1' if g['m_last'] == 2**31 - 1 else g['m_last']} | {entry_name(g['class'])} |" for g in segs]
        alg = disp.get("vendor_algorithms")
        if alg:
            moved = [c for c in alg["choices"] if c["index"] != 0]
            lines += ["", f"cuBLASLt's algorithm, measured ({alg['source'] or 'the tuning step'}: the heuristic's first "
                      f"{alg['top_k']} timed on {alg['device']}, cuBLASLt {alg['cublaslt_version']}): {len(alg['choices'])} "
                      f"vendor segments and shapes measured, {len(moved)} run another than the heuristic's first "
                      f"(more than {alg['margin']:.0%} and {alg.get('noise_factor', 2):g}x the timing's repeatability "
                      "faster there)" + (": " + ", ".join(
                          f"class {c['cls']} N {c['n']} K {c['k']} M {c['m_first']}-{c['m_last']} index {c['index']} "
                          f"({c['first_over_chosen']:.2f}x)" for c in moved) if moved else "")]
        if exact:
            lines += ["", "Shapes of the set that run on cuBLASLt: " + ", ".join(
                f"class {e['class']} m{e['m']}n{e['n']}k{e['k']}" + (f"b{e['batch']}" if e["batch"] != 1 else "")
                for e in exact)]
    return "\n".join(lines) + ("\n" if lines else "")


# ---- which of cuBLASLt's algorithms each vendor segment runs (measured) ------------------------------------------
# cublasLtMatmulAlgoGetHeuristic's first algorithm is not always what torch.matmul (cuBLAS) runs, nor the fastest
# (the LM pack on the H200, llama8b.o M = 100: 38.1 us on the pack's algorithm 0 against torch.matmul's 26.8 us).
# The tuning step (bench/gpu_vendor_algos.py) times the heuristic's first TOP_K for 256-byte-aligned operands at
# each measured shape, with torch.matmul in the same process, and writes ALGORITHMS_FORMAT JSON; `cutegen pack
# --vendor-algorithms FILE` stores per vendor segment and shape the index of the one to run
# (templates/pack_vendor_cublaslt.cpp.j2 takes it from the same list at plan time, on the same device and
# cuBLASLt version; else the first).
ALGORITHMS_FORMAT = "cutegen-vendor-algorithms/1"
TOP_K = 8
# VENDOR-ALGO-MARGIN: a segment leaves the heuristic's first only for an algorithm at least this much faster
# (geomean over the segment's measured points), and at least NOISE_FACTOR times the timing's repeatability at
# those points (the tuning step times the first twice: as index 0 and as the pack's own plan; on the H200 the two
# agree within 1.5% under 200 us and differ by up to 11% at the 1-11 ms shapes, where clocks drift): the first is
# what torch.matmul runs, and a smaller difference is not a measured one
ALGO_MARGIN = 0.02
NOISE_FACTOR = 2.0
# VENDOR-ALGO-LONG: a point whose first algorithm takes LONG_US or more asks for LONG_MARGIN: there the first timed
# twice, and torch.matmul (the same kernel), differed by up to 11% (run 1) and 15% (run 2) on the H200 (clocks over
# 1-11 ms of back-to-back GEMMs), so one repeat's agreement does not measure the noise
LONG_US = 200.0
LONG_MARGIN = 0.10


def load_algorithms(path: str) -> dict:
    """The tuning step's algorithm measurements (ALGORITHMS_FORMAT), checked; a one-line error naming the
    file and field otherwise."""
    from pathlib import Path

    from ..errors import FieldError
    try:
        import gzip
        data = json.loads(gzip.open(path, "rt").read() if str(path).endswith(".gz") else Path(path).read_text())
    except FileNotFoundError:
        raise FieldError("--vendor-algorithms", f"{path}: no such file") from None
    except (OSError, ValueError, EOFError) as e:
        raise FieldError("--vendor-algorithms", f"{path}: not JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(data, dict) or data.get("format") != ALGORITHMS_FORMAT:
        raise FieldError(f"{path}:format", f"expected {ALGORITHMS_FORMAT!r} (bench/gpu_vendor_algos.py's output)")
    for field, kind in (("device", str), ("cublaslt_version", int), ("top_k", int), ("shapes", list)):
        if not isinstance(data.get(field), kind) or isinstance(data.get(field), bool):
            raise FieldError(f"{path}:{field}", f"expected {kind.__name__}, got {data.get(field)!r}")
    if not 1 <= data["top_k"] <= 64:
        raise FieldError(f"{path}:top_k", f"expected 1 to 64, got {data['top_k']}")
    for i, s in enumerate(data["shapes"]):
        where = f"{path}:shapes[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("problem"), dict) or not isinstance(s.get("algorithms"), list):
            raise FieldError(where, "expected an object with 'problem' and 'algorithms'")
        for a in s["algorithms"]:
            if not (isinstance(a, dict) and isinstance(a.get("index"), int) and 0 <= a["index"] < data["top_k"]):
                raise FieldError(where, f"an algorithm without an index in [0, top_k): {a!r}")
    data["source"] = Path(path).name
    return data


def _algorithm_times(data: dict, classes: list[str], described: dict, noise: dict) -> dict:
    """(class index, N, K) -> {M: {index: us}} of the validated algorithms of every measured shape; fills
    ``described`` ((class, N, K, M, index) -> cuBLASLt's description of that algorithm) and ``noise``
    ((class, N, K, M) -> |the first's second timing / its first - 1|, where the file has it)."""
    from .select import class_key
    cls_index = {c: i for i, c in enumerate(classes)}
    out: dict = {}
    for s in data["shapes"]:
        # the alignments from the sizes, as the pack's dispatcher finds a shape's class (a record that carries
        # another alignment, e.g. of a 1 x 1 x 1 template problem, would match no class)
        q = GemmProblem.from_dict({k: v for k, v in s["problem"].items() if not k.startswith("alignment_")})
        c = cls_index.get(class_key(q))
        if c is None:
            continue
        times = {a["index"]: float(a["us"]) for a in s["algorithms"]
                 if a.get("ok", True) and isinstance(a.get("us"), (int, float)) and a["us"] > 0}
        if times:
            out.setdefault((c, q.n, q.k), {})[q.m] = times
            # the repeatability at this point: the first algorithm timed twice (index 0, the pack's own plan)
            again = s.get("pack_us")
            if isinstance(again, (int, float)) and again > 0 and 0 in times:
                noise[(c, q.n, q.k, q.m)] = abs(again / times[0] - 1.0)
            for a in s["algorithms"]:
                described[(c, q.n, q.k, q.m, a["index"])] = a.get("describe")
    return out


def choose_algorithm(points: dict[int, dict[int, float]], margin: float = ALGO_MARGIN,
                     noise: float = 0.0) -> tuple[int, float | None]:
    """The index one segment runs, from its measured points (M -> {index: us}): the algorithm measured at every
    point with the lowest geomean of its time over the point's best; the heuristic's first (0) unless that one
    is more than ``margin`` faster (LONG_MARGIN where a point's first takes LONG_US or more), and more than
    NOISE_FACTOR x ``noise`` (the timing's repeatability there).
    Returns (index, the first's geomean over the winner's; None: no choice)."""
    import math
    if not points:
        return 0, None
    common = set.intersection(*(set(t) for t in points.values()))
    if not common:
        return 0, None

    def score(i):
        return math.exp(sum(math.log(t[i] / min(t.values())) for t in points.values()) / len(points))
    best = min(sorted(common), key=score)
    if 0 not in common:
        return best, None
    gain = score(0) / score(best)
    if any(t[0] >= LONG_US for t in points.values()):
        margin = max(margin, LONG_MARGIN)
    return (best, gain) if gain > 1.0 + max(margin, NOISE_FACTOR * noise) else (0, gain)


def algorithm_table(disp: dict, n_gen: int, classes: list[str], data: dict | None, source: str = "") -> dict | None:
    """The vendor's algorithm choices (the template's ``vendor_algorithms`` and pack.json's vendor.algorithms):
    exact vendor shapes first (their own measurement), then the vendor segments (every measured point inside);
    a segment or shape without a measurement has no entry (it runs the heuristic's first)."""
    if not data or not disp.get("vendor"):
        return None
    described: dict = {}
    noise: dict = {}
    by_nk = _algorithm_times(data, classes, described, noise)
    segs, exact = _vendor_routes(disp, n_gen)
    choices = []
    for e in exact:
        pts = by_nk.get((e["class"], e["n"], e["k"]), {})
        if e["batch"] == 1 and e["m"] in pts:
            choices.append({"cls": e["class"], "n": e["n"], "k": e["k"], "m_first": e["m"], "m_last": e["m"],
                            "points": {e["m"]: pts[e["m"]]}})
    for g in segs:
        pts = {m: t for m, t in by_nk.get((g["class"], g["n"], g["k"]), {}).items() if g["m_first"] <= m <= g["m_last"]}
        if pts:
            choices.append({"cls": g["class"], "n": g["n"], "k": g["k"], "m_first": g["m_first"], "m_last": g["m_last"],
                            "points": pts})
    out = []
    for c in choices:
        pts = c.pop("points")
        worst = max((noise.get((c["cls"], c["n"], c["k"], m), 0.0) for m in pts), default=0.0)
        index, gain = choose_algorithm(pts, noise=worst)
        # the same index can be another algorithm at another M (the list is the heuristic's for each shape)
        out.append({**c, "index": index, "first_over_chosen": None if gain is None else round(gain, 4),
                    "noise": round(worst, 4),
                    "measured": {str(m): described.get((c["cls"], c["n"], c["k"], m, index)) for m in sorted(pts)}})
    return {"device": data["device"], "cublaslt_version": data["cublaslt_version"], "top_k": data["top_k"],
            "margin": ALGO_MARGIN, "noise_factor": NOISE_FACTOR, "source": source, "choices": out}
