"""The term language of the search, as egglog declarations.

Two families of terms share one e-graph:

* CuTe layouts. ``Modes`` is a flat list of (shape, stride) modes, the 1-D function a CuTe
  layout denotes after flattening (colexicographic index order, as pycute). ``CModes`` is the
  coalesced normal form (pycute ``coalesce``), ``SModes`` the stride-sorted list ``complement``
  walks. ``SwLayout`` is pycute's ``ComposedLayout(Swizzle(b, m, s), offset, layout)``; a GMMA
  shared-memory atom tiled to (MN, K, stages) is ``TileToShape``. Operations (composition,
  complement, logical_divide, append) are constructors whose rewrites compute them, so each
  operation's result is an equal form in the same e-class. Operation constructors cost 1000 so
  extraction prefers the explicit (MCons / Swz) forms the operations rewrite to.

* Kernel choices. A CTA tile, its forms as WGMMA instruction x warpgroup repeats and as a
  cluster tile split across CTAs, a cluster, a mainloop policy (schedule, epilogue, scheduler,
  stages), and ``Kernel`` nodes that join them. The root ``(Gemm 0)`` is the problem; each
  reachable kernel is an e-node of the root's e-class.
"""

LAYOUT_SORTS = """
(datatype CModes (CNil) (CCons i64 i64 CModes))
(datatype SModes (SNil) (SCons i64 i64 SModes) (Ins i64 i64 SModes :cost 1000) (SortC CModes :cost 1000))
(datatype Modes
  (MNil)
  (MCons i64 i64 Modes)
  (App Modes Modes :cost 1000)
  (OfC CModes :cost 1000)
  (Coalesce Modes :cost 1000)
  (Comp CModes Modes :cost 1000)
  (Comp1 CModes i64 i64 :cost 1000)
  (Compose Modes Modes :cost 1000)
  (Complement Modes i64 :cost 1000)
  (CompS SModes i64 i64 :cost 1000)
  (LDivide Modes Modes :cost 1000))
(datatype SwLayout
  (Swz i64 i64 i64 i64 Modes)
  (Plain i64 Modes)
  (SwCompose SwLayout Modes :cost 1000)
  (GmmaAtom i64 i64 i64 :cost 1000)
  (TileToShape SwLayout i64 i64 i64 :cost 1000))
(datatype Box (TmaBox i64 i64 i64))
;; one operand's shared memory: (major, swizzle bits, base, MN, K, stages). Its layout may equal
;; another operand's as a function, but the TMA box belongs to the operand, not to the function.
(datatype Operand (SmemOp i64 i64 i64 i64 i64 i64))
(function smem_of (Operand) SwLayout :no-merge)
(function tma_box (Operand) Box :no-merge)
(function tma_issues (Operand) i64 :no-merge)
(function gmma_layout_type (Operand) i64 :no-merge)
(function gmma_sbo_bytes (Operand) i64 :no-merge)
(function canon (Modes) CModes :merge old)  ; every node of a class folds to the same form (tests check it)
(function msize (Modes) i64 :no-merge)
"""

# Major-ness codes used inside terms.
K_MAJOR = 0
MN_MAJOR = 1

KERNEL_SORTS = """
(datatype Mma (Wgmma i64 i64 i64))
(datatype Tile
  (CtaTile i64 i64 i64)
  (Tiled Mma i64 i64 i64)
  (ClusterSplit Tile i64 i64))
(datatype Cluster (Cl i64 i64))
(datatype Policy (Pol i64 i64 i64 i64))
(datatype Kernel (K Tile Cluster Policy i64 i64) (Gemm i64))
(relation TileSeed (i64 i64 i64))
(relation InstrN (i64))
(relation ClusterSeed (i64 i64))
(relation PolicySeed (i64 i64 i64 i64))
(relation Expand (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(relation Rejected (i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64))
(function illegal (Kernel) i64 :merge (| old new))
"""
