"""Rewrites over the kernel terms: each states an equality between two forms of one choice.

  tile = instruction x repeats   CtaTile(64*wm, n*wn, kk*kr) = Tiled(Wgmma(64, n, kk), wm, wn, kr)
                                 (one tile, many instruction decompositions: all in one e-class)
  warpgroup split                CtaTile(m, n, k) = WgSplit(CtaTile(m/2, n, k), 2) when m % 128 == 0
                                 (the cooperative form: two consumer warpgroups stacked along M)
  cluster split                  CtaTile(m, n, k) = ClusterSplit(ClTile(m*cm, n*cn, k), cm, cn)
                                 (a cluster tile divided over the CTAs of a cluster)
  cp.async load                  Pol(s, no_smem, sc, 0) = Pol(s + 3, no_smem, sc, 0) when TmaCannotLoad
                                 (an operand's rows are not 16-byte aligned: TMA cannot read it, the
                                 cp.async mainloop can; it pairs with the no-smem epilogue only)
  stages                         K(.., Pol(s, e, sc, 0), ..) = K(.., Pol(s, e, sc, S), ..)
                                 where S is what StageCountAutoCarveout resolves to (the epilogue's
                                 shared memory traded against mainloop stages)
  kernels of one GEMM            Root = Impl(K(tile, cluster, policy, raster, swizzle)) for every
                                 expanded candidate: all compute the same D.

Seeds are input facts: ``InstrSeed(n, kk)`` (WGMMA N and K of the input type), ``RepeatSeed``
(warpgroups along M, instructions along N, k-steps per k-block), ``ClusterSeed``, ``PolicySeed``.
"""

SCHEDULE_SORTS = """
(datatype Mma (Wgmma i64 i64 i64))
(datatype ClusterTile (ClTile i64 i64 i64))
(datatype Tile
  (CtaTile i64 i64 i64)
  (Tiled Mma i64 i64 i64)
  (WgSplit Tile i64)
  (ClusterSplit ClusterTile i64 i64))
(datatype Cluster (Cl i64 i64))
(datatype Policy (Pol i64 i64 i64 i64))
(datatype Kernel (K Tile Cluster Policy i64 i64))
(datatype Gemm (Root i64) (Impl Kernel))
(relation InstrSeed (i64 i64))
(relation RepeatSeed (i64 i64 i64))
(relation ClusterSeed (i64 i64))
(relation PolicySeed (i64 i64 i64))
(relation TmaCannotLoad ())
(relation StagesOf (i64 i64 i64 i64 i64 i64))
(relation Expand (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation Rejected (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation Violates (Kernel i64))
(relation CostOf (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
;; dynamic extraction costs (egglog's cost tables): integer units of the cost model's time (picoseconds
;; unless the problem is so large that they would not fit: cost_units); the legality
;; analysis raises an illegal kernel's cost to ILLEGAL_COST (10^15), and max keeps it there
(function cost_table_K (Tile Cluster Policy i64 i64) i64 :merge (max old new))
(function cost_table_Root (i64) i64 :no-merge)
(function illegal (Kernel) i64 :merge (| old new))
"""

ILLEGAL_COST = 10 ** 15
# The largest integer cost a legal candidate is given: 100x below ILLEGAL_COST, so that a legal kernel
# always ranks below an illegal one, and far below i64's 9.2e18 (egglog sums costs along a term).
MAX_LEGAL_UNITS = 10 ** 13
PICOSECONDS_PER_US = 10 ** 6


def units_per_us(costs_us) -> float:
    """Integer cost units per microsecond for one table of costs: picoseconds (10^6, what every suite
    problem uses, so their rankings are unchanged) while the largest fits under MAX_LEGAL_UNITS, else
    the largest smaller power of ten that fits. Without it a problem the model accepts but whose
    predicted time passes 10^9 us (10^15 ps) was priced as illegal, and one past 9.2e12 us overflowed
    egglog's i64 (issue 23). The relative resolution stays below 10^-12 of the largest cost."""
    import math
    largest = max((float(c) for c in costs_us), default=0.0)
    if not math.isfinite(largest):
        raise ValueError(f"cost model returned {largest} us")
    if largest * PICOSECONDS_PER_US <= MAX_LEGAL_UNITS:
        return float(PICOSECONDS_PER_US)
    return 10.0 ** math.floor(math.log10(MAX_LEGAL_UNITS / largest))


def cost_units(cost_us: float, per_us: float) -> int:
    """One cost in the table's integer units (at least 1: a zero cost would tie with nothing to pay)."""
    return max(1, int(round(cost_us * per_us)))

SCHEDULE_RULES = """
(ruleset tiles)
(rule ((InstrSeed n kk) (RepeatSeed wm wn kr) (<= (* n wn) 256))
      ((union (CtaTile (* 64 wm) (* n wn) (* kk kr)) (Tiled (Wgmma 64 n kk) wm wn kr))) :ruleset tiles)
(ruleset splits)
(rule ((= t (CtaTile m n k)) (= 0 (% m 128)) (= h (CtaTile (/ m 2) n k)))
      ((union t (WgSplit h 2))) :ruleset splits)
(rule ((= t (CtaTile m n k)) (ClusterSeed cm cn))
      ((union t (ClusterSplit (ClTile (* m cm) (* n cn) k) cm cn))) :ruleset splits)
(rule ((PolicySeed s e sc)) ((Pol s e sc 0)) :ruleset splits)
;; cp.async twin of a no-smem policy (schedule code + 3): the same tiles, loaded by the producer's
;; threads instead of TMA, reachable only when TMA cannot read A or B (legality/cp_async.py)
(rule ((PolicySeed s 2 sc) (< s 3) (TmaCannotLoad)) ((PolicySeed (+ s 3) 2 sc)) :ruleset splits)
(rule ((ClusterSeed cm cn)) ((Cl cm cn)) :ruleset splits)
(ruleset expand)
(rule ((Expand m n k cm cn s e sc r w) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= p (Pol s e sc 0)))
      ((union (Root 0) (Impl (K t c p r w)))) :ruleset expand)
(rule ((= x (K t c (Pol s e sc 0) r w)) (= t (CtaTile m n k)) (StagesOf m n k s e st))
      ((union x (K t c (Pol s e sc st) r w))) :ruleset expand)
(rule ((Rejected m n k cm cn s e sc r w i) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= p (Pol s e sc 0))
       (= x (K t c p r w)))
      ((Violates x i)) :ruleset expand)
;; the legality analysis: a lattice of violated rule bits, joined by bitwise or (bit 62: "index >= 62")
(rule ((Violates x i)) ((set (illegal x) (<< 1 (min i 62)))) :ruleset expand)
(ruleset price)
(rule ((CostOf m n k cm cn s e sc r w ps) (= t (CtaTile m n k)) (= c (Cl cm cn)) (= p (Pol s e sc st))
       (= x (K t c p r w)))
      ((set (cost_table_K t c p r w) ps)) :ruleset price)
(rule ((= x (K t c p r w)) (= bits (illegal x)) (!= bits 0))
      ((set (cost_table_K t c p r w) 1000000000000000)) :ruleset price)
(rule ((= g (Root i))) ((set (cost_table_Root i) 1000000000000000)) :ruleset price)
"""
