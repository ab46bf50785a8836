"""The pack's dispatch tables: exact shapes, rules over ranges, class defaults and the unaligned fallback.

Everything here is decided at generation time, so the generated C++ only looks up: an exact shape of
the set in an open-addressing hash table; else N and K of the set in a second table, whose row holds
one kernel per power-of-two bucket of M; else the class's default for that bucket. A bucket's kernel
is the one with the lowest predicted time, summed relative to the best, at M = 2^b, 1.5 * 2^b and
2^(b+1) - 1. ``slot`` is the C++ ``key_hash`` of templates/pack_dispatch.cpp.j2, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DTYPES
from ..errors import FieldError
from ..problem import GemmProblem
from .select import Pricer, Selection, class_key

BUCKETS = 31
MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    x &= MASK
    x ^= x >> 33
    x = (x * 0xff51afd7ed558ccd) & MASK
    x ^= x >> 33
    x = (x * 0xc4ceb9fe1a85ec53) & MASK
    x ^= x >> 33
    return x


def slot(cls: int, m: int, n: int, k: int, batch: int) -> int:
    h = _mix(cls + 0x9e3779b97f4a7c15)
    for v in (m, n, k, batch):
        h = _mix(h ^ (v & MASK))
    return h


def hash_table(items: list[tuple[tuple, dict]], empty: dict) -> tuple[list[dict], int]:
    """Linear probing into a power-of-two table at most half full; returns (slots, longest probe)."""
    size = 8
    while size < 2 * len(items):
        size *= 2
    table: list[dict | None] = [None] * size
    longest = 0
    for key, value in items:
        h = slot(*key)
        i = 0
        while table[(h + i) & (size - 1)] is not None:
            i += 1
        table[(h + i) & (size - 1)] = value
        longest = max(longest, i)
    return [t if t is not None else empty for t in table], longest


def bucket_points(b: int) -> list[int]:
    lo, hi = 1 << b, min((1 << (b + 1)) - 1, 2**31 - 1)
    return sorted({lo, min(hi, lo + lo // 2), hi})


@dataclass
class Fallback:
    alignment: tuple[int, int, int] | None     # elements (A, B, C/D) of the fallback kernel, or None
    kernel: int | None                          # index into the pack's kernels
    uncovered: str                              # what no kernel of the pack computes


def _pick(kernels: list[int], sel: Selection, problems: list[GemmProblem]) -> int:
    """Kernel with the lowest sum over problems of predicted time / the best predicted time
    (a kernel that cannot run a problem scores 1e9 there); ties go to the earlier kernel.

    The rules are judged lazily: a legal pair costs what its estimate says (the configuration's own stages,
    ``Pricer.estimates``), so the kernels are taken in order of their totals as if every pair were legal,
    and the first whose pairs are all legal is the answer (the sums are the same floats, added in the same
    order). Only when no kernel runs every problem are all pairs judged."""
    pricer = sel.pricer or Pricer(sel.target.rates)
    cfgs = [sel.kernels[j].config for j in kernels]
    for j, c in zip(kernels, cfgs):                     # the pricer's JSON memo, from the kernels' own
        pricer._json.setdefault(c, sel.kernels[j].key)
    ests = [pricer.estimates(p, cfgs) for p in problems]
    bests = []
    for p, est in zip(problems, ests):
        first = next((i for _, i in sorted((t, i) for i, t in enumerate(est)) if pricer.legal(p, cfgs[i])), None)
        bests.append(None if first is None else pricer.time(p, cfgs[first]))
    if all(b is not None and b > 0 for b in bests):
        optimistic = []
        for i in range(len(kernels)):
            total = 0.0
            for est, best in zip(ests, bests):
                total += est[i] / best
            optimistic.append((total, kernels[i], i))
        for _, j, i in sorted(optimistic):
            if all(pricer.legal(p, cfgs[i]) for p in problems):
                if all(pricer.time(p, cfgs[i]) == est[i] for p, est in zip(problems, ests)):
                    return j
                break           # the rules resolved other stages than the estimate's: judge everything
    totals = [0.0] * len(kernels)
    for p in problems:
        ts = pricer.times(p, cfgs)
        best = min((t for t in ts if t is not None), default=None)
        for i, t in enumerate(ts):
            totals[i] += (t / best) if (t is not None and best) else 1e9
    return min(zip(totals, kernels))[1]


def tables(sel: Selection, fallbacks: dict[str, Fallback], kernel_names: list[str], measured=None,
           vendor: bool = True) -> dict:
    """The template context of the dispatcher (templates/pack_dispatch.cpp.j2). ``measured``: (N, K) ->
    ``measured.Point`` list (``--measured``): an (N, K) with measurements dispatches M by the measured
    segments (``measured.segments``) instead of the predicted buckets. ``vendor`` (``--no-vendor``: False):
    cuBLASLt is offered at every measured point (``vendor.offer``) and takes the segments where no generated
    kernel comes within the tolerance of cuBLAS; it is kernel ``len(sel.kernels) + class``."""
    from . import vendor as vendor_tactic
    from .measured import segments as measured_segments
    from .select import Row  # noqa: F401  (documentation: rows are select.Row)
    cls_index = {c: i for i, c in enumerate(sel.classes)}
    by_class: dict[int, list[int]] = {}
    for j, k in enumerate(sel.kernels):
        if not k.cls.startswith("fallback:"):
            by_class.setdefault(cls_index[k.cls], []).append(j)
    exact_items, nk_keys = [], {}
    for row in sel.rows:
        if row.kernel is None:
            continue
        p = row.shape.problem
        c = cls_index[class_key(p)]
        loss = row.loss or 0.0
        why = (f"exact shape {row.shape.label} of the pack's set: {row.source} {row.time_us:.1f} us, "
               f"best known {row.best_us:.1f} us (+{loss:.1%})")
        if row.kernel >= len(sel.kernels):             # the vendor (render.apply_measured says why in the note)
            why = f"exact shape {row.shape.label} of the pack's set: {row.note}"
        exact_items.append(((c, p.m, p.n, p.k, p.batch),
                            {"M": p.m, "N": p.n, "K": p.k, "batch": p.batch, "cls": c, "kernel": row.kernel,
                             "why": why}))
        nk_keys.setdefault((c, p.n, p.k), p)
    exact_items.sort(key=lambda x: x[0])
    exact, exact_probes = hash_table(exact_items, {"M": 0, "N": 0, "K": 0, "batch": 0, "cls": -1, "kernel": -1,
                                                   "why": ""})
    nk_rows, nk_items, seg_rows, segs, figures = [], [], [], [], []
    for (c, n, k), p in sorted(nk_keys.items()):
        row = [_pick(by_class[c], sel, [p.replace(m=m) for m in bucket_points(b)]) for b in range(BUCKETS)]
        nk_items.append(((c, 0, n, k, 0), {"N": n, "K": k, "cls": c, "row": len(nk_rows)}))
        nk_rows.append(row)
        from .measured import Point
        mine = set(by_class[c])
        measured_here = (measured or {}).get((n, k), [])
        pts = [Point(q.m, {j: t for j, t in q.times.items() if j in mine}, q.matmul_us) for q in measured_here]
        # the vendor hook: cuBLASLt offered at each measured point, at cuBLAS's time plus the tolerance
        vi = len(sel.kernels) + c if vendor and vendor_tactic.unsupported(p) is None else None
        offered = [vendor_tactic.offer(q, vi, sel.tolerance) for q in pts]
        found = measured_segments([q for q in offered if q.times])
        seg_rows.append((len(segs), len(found)))
        segs += [{"lo": g.lo, "kernel": g.kernel, "n": n, "k": k,
                  "why": g.why + (vendor_tactic.segment_note(sel.tolerance) if g.kernel == vi else "")}
                 for g in found]
        figures += vendor_tactic.figure_rows(measured_here, pts, offered, vi)
    classes, class_problems = [], []
    for c, key in enumerate(sel.classes):
        ps = [p for (cc, _, _), p in sorted(nk_keys.items()) if cc == c]
        proto = ps[0] if ps else None
        by_bucket = ([_pick(by_class[c], sel, [q.replace(m=m) for q in ps for m in bucket_points(b)])
                      for b in range(BUCKETS)] if proto and c in by_class else [-1] * BUCKETS)
        fb = fallbacks.get(key) or Fallback(None, None, "no fallback was searched")
        first = sel.kernels[by_class[c][0]] if c in by_class else None
        p = first.problem if first else proto
        classes.append(class_context(p, by_bucket, fb))
        class_problems.append(p)
    nk, nk_probes = hash_table(nk_items, {"N": 0, "K": 0, "cls": -1, "row": -1})
    uses_vendor = any(g["kernel"] >= len(sel.kernels) for g in segs) or any(
        e["kernel"] >= len(sel.kernels) for _, e in exact_items)
    return {"exact": exact, "exact_probes": exact_probes, "exact_count": len(exact_items),
            "nk": nk, "nk_probes": nk_probes, "nk_rows": nk_rows or [[-1] * BUCKETS], "classes": classes,
            "seg_rows": seg_rows or [(0, 0)], "segments": segs or [{"lo": 0, "kernel": -1, "why": ""}],
            "measured": bool(segs),
            # the vendor tactic: one kernel-table entry per class after the generated kernels, only when used
            "vendor": uses_vendor,
            "vendor_classes": [{**vendor_tactic.context(p), "a_k": cc["a_k"], "b_k": cc["b_k"], "c_n": cc["c_n"]}
                               for p, cc in zip(class_problems, classes)] if uses_vendor else [],
            "figures": vendor_tactic.figures(figures) if figures else None}


def class_context(p: GemmProblem, by_bucket: list[int], fb: Fallback) -> dict:
    return {
        "name": p.kernel_class_name, "describe": describe_class(p),
        "dtype_a": p.dtype_a, "dtype_b": p.dtype_b, "dtype_c": p.dtype_c, "dtype_d": p.dtype_d,
        "layout_a": p.layout_a, "layout_b": p.layout_b, "layout_c": p.layout_c,
        "bias": int(p.bias), "activation": p.activation,
        "a_k": "true" if p.a_k_major else "false", "b_k": "true" if p.b_k_major else "false",
        "c_n": "true" if p.layout_c == "row" else "false",
        "align": (p.alignment_a, p.alignment_b, p.alignment_c),
        "fallback": -1 if fb.kernel is None else fb.kernel,
        "fb_align": fb.alignment or (p.alignment_a, p.alignment_b, p.alignment_c),
        "uncovered": fb.uncovered, "by_bucket": by_bucket,
    }


def describe_class(p: GemmProblem) -> str:
    return (f"A {p.dtype_a} {p.layout_a}-major, B {p.dtype_b} {p.layout_b}-major, C {p.dtype_c}, D {p.dtype_d} "
            f"{p.layout_c}-major, bias {'yes' if p.bias else 'no'}, activation {p.activation}, alignment "
            f"{p.alignment_a}/{p.alignment_b}/{p.alignment_c} elements")


def find_fallback(p: GemmProblem, device: str | None = None, say=lambda msg: None, wave_tiles: bool = False):
    """The legal kernel with the smallest alignment the search accepts for ``p``'s class (below the class's
    own; with cp.async mainloops, issue 10, down to 1 element): (alignment, config, problem), or
    (None, None, reason) when no smaller alignment has a legal kernel."""
    from ..search import search
    tried = []
    top = min(p.alignment_a, p.alignment_b, p.alignment_c)
    a = 1
    while a < top:
        try:
            q = p.replace(alignment_a=a, alignment_b=a, alignment_c=a)
        except FieldError as e:        # the problem model refuses it (a fused epilogue needs 16 bytes)
            tried.append(f"{a} element(s): {e}")
            a *= 2
            continue
        # staging=False: the plan entry points (templates/cutegen_plan.inc.j2) make none of the ABI's
        # restride copies, so a staged kernel in a pack would refuse the very strides it is there for
        result = search(q, 1, device=device, staging=False, wave_tiles=wave_tiles)
        if result.ranked:
            return (a, a, a), result.ranked[0].config, q
        rules = sorted(result.pruned_by_rule, key=lambda r: -result.pruned_by_rule[r])[:3]
        tried.append(f"{a} element(s): {', '.join(rules) or 'no candidate'}")
        a *= 2
    bytes_ = min(p.alignment_a * DTYPES[p.dtype_a].bits, p.alignment_b * DTYPES[p.dtype_b].bits,
                 p.alignment_c * DTYPES[p.dtype_d].bits) // 8
    return None, None, (f"this pack has no kernel for operands below {bytes_}-byte alignment: the search found "
                        f"no legal kernel at smaller alignments ({'; '.join(tried) or 'none tried'})")
