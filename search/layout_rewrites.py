"""CuTe layout algebra as egglog rewrites.

Every rewrite here states an equality between two layout terms that denote the same function
(pycute semantics: a flat list of (shape, stride) modes maps the 1-D index i, split
colexicographically over the shapes, to sum(coord * stride)). The tests check each family
against pycute on random layouts: ``tests/test_layout_rewrites.py``.

Families:
  drop-unit     (1:d) ++ t            = t
  merge         (s0:d0)(s1:s0*d0) ++ t = (s0*s1:d0) ++ t
  coalesce      m = OfC(canon(m))       (canon is pycute ``coalesce``; a function on e-classes)
  append        App(MNil, r) = r;  App((s:d)++t, r) = (s:d) ++ App(t, r)
  compose       A o B, mode by mode of B, walking coalesce(A) as pycute ``composition``
  complement    sort coalesce(A) by stride, then fill the gaps up to max_idx (pycute ``complement``)
  logical_divide  LDivide(A, B) = A o (B, complement(B, size(A)))
  swizzle       Swz(0, m, s, off, L) = Plain(off, L);  Swz(b,m,s,0,A) o B = Swz(b,m,s,0, A o B)
  tile_to_shape a GMMA atom ``Sw<b,base,3> o (8,T):(T,1)`` (K-major) or ``(T,8):(1,T)`` (MN-major)
                tiled column-major to (MN, K, stages), as CuTe ``tile_to_shape``
"""
from __future__ import annotations

from .egg import Egg
from .terms import LAYOUT_SORTS

LAYOUT_RULES = """
(ruleset layout)
;; --- equal forms of one layout -----------------------------------------------------------
(rewrite (MCons 1 d t) t :ruleset layout)
(rewrite (MCons s0 d0 (MCons s1 d1 t)) (MCons (* s0 s1) d0 t) :when ((= d1 (* s0 d0))) :ruleset layout)
(rewrite (App (MNil) r) r :ruleset layout)
(rewrite (App (MCons s d t) r) (MCons s d (App t r)) :ruleset layout)
(rewrite (OfC (CNil)) (MNil) :ruleset layout)
(rewrite (OfC (CCons s d r)) (MCons s d (OfC r)) :ruleset layout)
(rewrite (Coalesce m) m :ruleset layout)

;; --- size and the coalesced normal form (pycute coalesce, folded from the right) --------------
(rule ((= m (MNil))) ((set (msize m) 1) (set (canon m) (CNil))) :ruleset layout)
(rule ((= m (MCons s d t)) (= n (msize t))) ((set (msize m) (* s n))) :ruleset layout)
(rule ((= m (MCons 1 d t)) (= c (canon t))) ((set (canon m) c)) :ruleset layout)
(rule ((= m (MCons s d t)) (!= s 1) (= (CNil) (canon t)))
      ((set (canon m) (CCons s d (CNil)))) :ruleset layout)
(rule ((= m (MCons s d t)) (!= s 1) (= (CCons s1 d1 r) (canon t)) (= d1 (* s d)))
      ((set (canon m) (CCons (* s s1) d r))) :ruleset layout)
(rule ((= m (MCons s d t)) (!= s 1) (= (CCons s1 d1 r) (canon t)) (!= d1 (* s d)))
      ((set (canon m) (CCons s d (CCons s1 d1 r)))) :ruleset layout)
(rule ((= c (canon m))) ((union m (OfC c))) :ruleset layout)

;; --- composition A o B: B mode by mode, A in coalesced form ---------------------------------
(rule ((= x (Compose a b)) (= c (canon a))) ((union x (Comp c b))) :ruleset layout)
(rewrite (Comp a (MNil)) (MNil) :ruleset layout)
(rewrite (Comp a (MCons s d t)) (App (Comp1 a s d) (Comp a t)) :ruleset layout)
(rewrite (Comp1 a 1 d) (MNil) :ruleset layout)
(rewrite (Comp1 a s 0) (MCons s 0 (MNil)) :when ((!= s 1)) :ruleset layout)
(rewrite (Comp1 (CNil) s d) (MCons s 0 (MNil)) :when ((!= s 1)) :ruleset layout)
;; the last mode of A extends without bound
(rewrite (Comp1 (CCons a0 b0 (CNil)) s d) (MCons s (* d b0) (MNil)) :when ((!= s 1) (!= d 0)) :ruleset layout)
;; d divides a0: take min(a0/d, s) elements of this mode, continue with stride 1
(rewrite (Comp1 (CCons a0 b0 (CCons a1 b1 r)) s d) (Comp1 (CCons a1 b1 r) s 1)
         :when ((!= s 1) (= d a0)) :ruleset layout)
(rewrite (Comp1 (CCons a0 b0 (CCons a1 b1 r)) s d) (MCons s (* d b0) (MNil))
         :when ((!= s 1) (!= d 0) (= 0 (% a0 d)) (>= (/ a0 d) s) (!= d a0)) :ruleset layout)
(rewrite (Comp1 (CCons a0 b0 (CCons a1 b1 r)) s d)
         (MCons (/ a0 d) (* d b0) (Comp1 (CCons a1 b1 r) (/ s (/ a0 d)) 1))
         :when ((!= s 1) (!= d 0) (= 0 (% a0 d)) (< (/ a0 d) s) (!= d a0) (= 0 (% s (/ a0 d)))) :ruleset layout)
;; a0 divides d: skip this mode entirely
(rewrite (Comp1 (CCons a0 b0 (CCons a1 b1 r)) s d) (Comp1 (CCons a1 b1 r) s (/ d a0))
         :when ((!= s 1) (> d a0) (= 0 (% d a0))) :ruleset layout)

;; --- complement: stride-sorted coalesced modes, gaps filled up to max_idx --------------------
(rule ((= x (Complement a mx)) (= c (canon a))) ((union x (CompS (SortC c) 1 mx))) :ruleset layout)
(rewrite (SortC (CNil)) (SNil) :ruleset layout)
(rewrite (SortC (CCons s 0 r)) (SortC r) :ruleset layout)
(rewrite (SortC (CCons s d r)) (Ins s d (SortC r)) :when ((!= d 0)) :ruleset layout)
(rewrite (Ins s d (SNil)) (SCons s d (SNil)) :ruleset layout)
(rewrite (Ins s d (SCons s1 d1 r)) (SCons s d (SCons s1 d1 r)) :when ((< d d1)) :ruleset layout)
(rewrite (Ins s d (SCons s1 d1 r)) (SCons s d (SCons s1 d1 r)) :when ((= d d1) (<= s s1)) :ruleset layout)
(rewrite (Ins s d (SCons s1 d1 r)) (SCons s1 d1 (Ins s d r)) :when ((> d d1)) :ruleset layout)
(rewrite (Ins s d (SCons s1 d1 r)) (SCons s1 d1 (Ins s d r)) :when ((= d d1) (> s s1)) :ruleset layout)
(rewrite (CompS (SNil) cur mx) (MCons (/ (- (+ mx cur) 1) cur) cur (MNil)) :ruleset layout)
(rewrite (CompS (SCons s d r) cur mx) (MCons (/ d cur) cur (CompS r (* s d) mx))
         :when ((= 0 (% d cur)) (<= cur (* s d))) :ruleset layout)

;; --- logical_divide(A, B) = A o (B, complement(B, size(A))) --------------------------------------
(rule ((= x (LDivide a b)) (= n (msize a)))
      ((union x (Compose a (App b (Complement b n))))) :ruleset layout)

;; --- swizzle functors ------------------------------------------------------------------------------
(rewrite (Swz 0 m s off l) (Plain off l) :ruleset layout)
(rewrite (SwCompose (Swz b m s 0 a) l) (Swz b m s 0 (Compose a l)) :ruleset layout)
(rewrite (SwCompose (Plain off a) l) (Plain off (Compose a l)) :ruleset layout)

;; --- GMMA atoms and tile_to_shape ----------------------------------------------------------------
;; (GmmaAtom major swizzle_bits elem_base): T = 2^(bits + base) elements along the contiguous mode;
;; the swizzle is Sw<bits, base, 3> on element offsets (base = log2(16 bytes / element bytes)).
(rewrite (GmmaAtom 0 b base) (Swz b base 3 0 (MCons 8 (<< 1 (+ b base)) (MCons (<< 1 (+ b base)) 1 (MNil)))) :ruleset layout)
(rewrite (GmmaAtom 1 b base) (Swz b base 3 0 (MCons (<< 1 (+ b base)) 1 (MCons 8 (<< 1 (+ b base)) (MNil)))) :ruleset layout)
(rewrite (TileToShape (Swz b m sh 0 (MCons 8 t (MCons t 1 (MNil)))) mn k st)
         (Swz b m sh 0 (MCons 8 t (MCons (/ mn 8) (* 8 t) (MCons t 1 (MCons (/ k t) (* mn t) (MCons st (* mn k) (MNil)))))))
         :when ((= 0 (% mn 8)) (= 0 (% k t))) :ruleset layout)
(rewrite (TileToShape (Swz b m sh 0 (MCons t 1 (MCons 8 t (MNil)))) mn k st)
         (Swz b m sh 0 (MCons t 1 (MCons (/ mn t) (* 8 t) (MCons 8 t (MCons (/ k 8) (* mn 8) (MCons st (* mn k) (MNil)))))))
         :when ((= 0 (% mn t)) (= 0 (% k 8))) :ruleset layout)

;; --- what a tiled GMMA layout implies for TMA and for the WGMMA descriptor ------------------------
;; TMA box (innermost first): the atom's contiguous extent (capped by the tile), the tile's other
;; extent, 1; a contiguous extent wider than the atom takes several TMA issues per stage.
(rule ((= o (SmemOp m b base mn k st))) ((set (smem_of o) (TileToShape (GmmaAtom m b base) mn k st))) :ruleset layout)
(rule ((= o (SmemOp 0 b base mn k st)))
      ((set (tma_box o) (TmaBox (min (<< 1 (+ b base)) k) mn 1))
       (set (tma_issues o) (/ (+ k (- (<< 1 (+ b base)) 1)) (<< 1 (+ b base))))) :ruleset layout)
(rule ((= o (SmemOp 1 b base mn k st)))
      ((set (tma_box o) (TmaBox (min (<< 1 (+ b base)) mn) k 1))
       (set (tma_issues o) (/ (+ mn (- (<< 1 (+ b base)) 1)) (<< 1 (+ b base))))) :ruleset layout)
;; descriptor layout type (PTX 9.7.15.5.1.2.2 bits 62-63): 0 interleave, 1 B128, 2 B64, 3 B32
(rule ((= o (SmemOp m 3 base mn k st))) ((set (gmma_layout_type o) 1)) :ruleset layout)
(rule ((= o (SmemOp m 2 base mn k st))) ((set (gmma_layout_type o) 2)) :ruleset layout)
(rule ((= o (SmemOp m 1 base mn k st))) ((set (gmma_layout_type o) 3)) :ruleset layout)
(rule ((= o (SmemOp m 0 base mn k st))) ((set (gmma_layout_type o) 0)) :ruleset layout)
;; K-major: SBO = bytes between 8-row groups along MN = 8 rows of one swizzle span (rulebook B14)
(rule ((= o (SmemOp 0 b base mn k st))) ((set (gmma_sbo_bytes o) (<< 128 b))) :ruleset layout)
"""

# Requests: what a batch asks the e-graph to compute for each layout id.
OPS = {"forms": 0, "coalesce": 1, "compose": 2, "complement": 3, "logical_divide": 4}

LOADER = """
(relation LRow (i64 i64 i64 i64))
(relation LCount (i64 i64))
(function built (i64 i64) Modes :no-merge)
(relation Req (i64 i64 i64 i64 i64))
(function req (i64) Modes :no-merge)
(ruleset load)
(rule ((LCount id n)) ((set (built id n) (MNil))) :ruleset load)
(rule ((= m (built id p)) (LRow id q s d) (= q (- p 1))) ((set (built id q) (MCons s d m))) :ruleset load)
(ruleset ask)
(rule ((Req id 0 x y n) (= a (built x 0))) ((set (req id) a)) :ruleset ask)
(rule ((Req id 1 x y n) (= a (built x 0))) ((set (req id) (Coalesce a))) :ruleset ask)
(rule ((Req id 2 x y n) (= a (built x 0)) (= b (built y 0))) ((set (req id) (Compose a b))) :ruleset ask)
(rule ((Req id 3 x y n) (= a (built x 0))) ((set (req id) (Complement a n))) :ruleset ask)
(rule ((Req id 4 x y n) (= a (built x 0)) (= b (built y 0))) ((set (req id) (LDivide a b))) :ruleset ask)
"""


def flat_modes(layout) -> list[tuple[int, int]]:
    """The (shape, stride) modes of a pycute Layout, flattened."""
    from pycute import flatten  # pycute ships in the nvidia-cutlass wheel

    shape, stride = flatten(layout.shape), flatten(layout.stride)
    if isinstance(shape, int):
        return [(shape, stride)]
    return list(zip(shape, stride))


class LayoutBatch:
    """Load many layouts into one e-graph, ask for operations on them, and read the forms back."""

    def __init__(self):
        self.egg = Egg(LAYOUT_SORTS + LAYOUT_RULES + LOADER)
        self._layouts: list[list[tuple[int, int]]] = []
        self._reqs: list[tuple[int, int, int, int, int]] = []

    def add(self, modes) -> int:
        self._layouts.append(list(modes))
        return len(self._layouts) - 1

    def ask(self, op: str, x: int, y: int = 0, n: int = 0) -> int:
        rid = len(self._reqs)
        self._reqs.append((rid, OPS[op], x, y, n))
        return rid

    def run(self, limit: int = 64) -> None:
        rows, counts = [], []
        for i, modes in enumerate(self._layouts):
            counts.append((i, len(modes)))
            rows.extend((i, p, s, d) for p, (s, d) in enumerate(modes))
        self.egg.input("LRow", rows)
        self.egg.input("LCount", counts)
        self.egg.input("Req", self._reqs)
        self.egg.run(f"(run-schedule (saturate (run load)) (run ask) (repeat {limit} (run layout)))")
        self._index()

    def _index(self) -> None:
        f = self.egg.freeze().functions
        i64 = self.egg.i64
        self._mnil = {r.output for r in f["MNil"].rows}
        self._mcons: dict = {}
        for r in f["MCons"].rows:
            self._mcons.setdefault(r.output, []).append((i64(r.inputs[0]), i64(r.inputs[1]), r.inputs[2]))
        self._req = {i64(r.inputs[0]): r.output for r in f["req"].rows}
        self._canon = {r.inputs[0]: r.output for r in f["canon"].rows}
        self._cnil = {r.output for r in f["CNil"].rows}
        self._ccons = {r.output: (i64(r.inputs[0]), i64(r.inputs[1]), r.inputs[2]) for r in f["CCons"].rows}

    def forms(self, rid: int, limit: int = 64) -> list[list[tuple[int, int]]]:
        """Up to ``limit`` explicit (MCons/MNil) terms of the request's e-class."""
        out: list[list[tuple[int, int]]] = []
        stack = [(self._req[rid], [], frozenset())]
        while stack and len(out) < limit:
            cls, prefix, seen = stack.pop()
            if cls in self._mnil:
                out.append(prefix)
            for s, d, rest in self._mcons.get(cls, ()):
                if rest not in seen and rest != cls:  # a unit mode makes a cycle: skip repeats
                    stack.append((rest, prefix + [(s, d)], seen | {cls}))
        return out

    def smallest(self, rid: int) -> list[tuple[int, int]] | None:
        forms = self.forms(rid, limit=256)
        return min(forms, key=lambda f: (len(f), f)) if forms else None

    def coalesced(self, rid: int) -> list[tuple[int, int]] | None:
        c = self._canon.get(self._req[rid])
        if c is None:
            return None
        out = []
        while c not in self._cnil:
            s, d, c = self._ccons[c]
            out.append((s, d))
        return out

    def close(self) -> None:
        self.egg.close()


def evaluate(modes, i: int) -> int:
    """The function a flat mode list denotes, at index i (pycute semantics)."""
    total = 0
    for s, d in modes:
        total += (i % s) * d
        i //= s
    return total


def size(modes) -> int:
    n = 1
    for s, _ in modes:
        n *= s
    return n


def gmma_atom_modes(major: str, swizzle_bytes: int, elem_bits: int) -> tuple[tuple[int, int, int], list]:
    """CuTe's GMMA shared-memory atom in element units: (swizzle (bits, base, shift), modes)."""
    t = swizzle_bytes * 8 // elem_bits
    base = {8: 4, 16: 3, 32: 2}[elem_bits]
    bits = {16: 0, 32: 1, 64: 2, 128: 3}[swizzle_bytes]
    modes = [(8, t), (t, 1)] if major == "K" else [(t, 1), (8, t)]
    return (bits, base, 3), modes


def smem_layout(major: str, swizzle_bytes: int, elem_bits: int, mn: int, k: int, stages: int) -> dict:
    """The shared-memory layout of one operand, derived in the e-graph from its GMMA atom.

    The operand term ``SmemOp(major, swizzle, base, MN, K, stages)`` has the layout
    ``TileToShape(GmmaAtom(major, swizzle, base), MN, K, stages)``, which the rewrites turn into its
    explicit ``Swz(b, base, 3, 0, modes)`` form; the operand's TMA box (the atom's contiguous extent
    by the tile's other extent), TMA issues per stage and WGMMA descriptor layout type and SBO are
    analyses of the operand term.
    """
    (bits, base, shift), _ = gmma_atom_modes(major, swizzle_bytes, elem_bits)
    code = 0 if major == "K" else 1
    with Egg(LAYOUT_SORTS + LAYOUT_RULES) as egg:
        egg.run(f"(let $op (SmemOp {code} {bits} {base} {mn} {k} {stages}))"
                "(run-schedule (saturate (run layout)))")
        text = egg.extract("(smem_of $op)")
        box = [int(x) for x in egg.extract("(tma_box $op)").strip("()").split()[1:]]
        issues = int(egg.extract("(tma_issues $op)"))
        ltype = int(egg.extract("(gmma_layout_type $op)"))
        sbo = int(egg.extract("(gmma_sbo_bytes $op)")) if major == "K" else None
    return {
        "term": f"TileToShape(GmmaAtom({major}, SW{swizzle_bytes}), {mn}, {k}, {stages})",
        "layout": text,
        "swizzle": f"Swizzle<{bits},{base},{shift}> (element offsets)",
        "tma_box": box,
        "tma_issues_per_stage": issues,
        "wgmma_layout_type": {0: "INTERLEAVE", 1: "B128", 2: "B64", 3: "B32"}[ltype],
        "wgmma_sbo_bytes": sbo,
    }


def parse_swlayout(text: str):
    """(swizzle (b, m, s), offset, modes) from an extracted ``(Swz b m s off (MCons ...))`` term."""
    toks = text.replace("(", " ( ").replace(")", " ) ").split()
    nums = [int(x) for x in toks if x.lstrip("-").isdigit()]
    if text.startswith("(Plain"):          # a zero-bit swizzle is the identity
        b, m, s, off = 0, 0, 0, nums[0]
        rest = nums[1:]
    elif text.startswith("(Swz"):
        b, m, s, off = nums[:4]
        rest = nums[4:]
    else:
        raise ValueError(f"not an explicit swizzled layout: {text}")
    return (b, m, s), off, [(rest[i], rest[i + 1]) for i in range(0, len(rest), 2)]
