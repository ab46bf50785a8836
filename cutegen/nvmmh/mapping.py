"""From an nvMatmulHeuristics proposal to a cutegen KernelConfig, and the rules that judge it.

Pure Python: nothing here loads the nvMatmulHeuristics library, so the mapping is tested on any
machine. The conventions are CUTLASS 4.2's own (``cutlass_library/heuristics_provider.py`` and
``heuristics.py``): one layout letter per operand, ``T`` for row-major and ``N`` for column-major
(A, B, then ``_ROW_MAJOR`` / ``_COL_MAJOR`` for D); precision strings in cuBLAS letters, three for
16-bit inputs (A, compute, D) and five for fp8 (A, B, C, compute, D); ``ctaOrder`` 0 is along M and
1 along N.

nvMMH proposes a CTA tile, a cluster, a load-stage count, a grid swizzle, a raster order and a
split-K count; it names no kernel schedule (CUTLASS's profiler instantiates every valid one). The
mapping takes what CUTLASS's CollectiveBuilder would take for the tile: the cooperative kernel when
Tile_M is a multiple of 128 (rulebook E09), ping-pong otherwise, each with its TMA epilogue, and the
persistent scheduler. Its stage count is kept as proposed: that is the proposal being judged.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..config import KernelConfig
from ..errors import FieldError
from ..problem import GemmProblem

# cuBLAS type letters (cutlass_library/heuristics_provider.py); tf32 has none there.
DTYPE_LETTER = {"f32": "S", "f16": "H", "bf16": "T", "e4m3": "Q", "e5m2": "R"}
# cutegen device kind -> nvMatmulHeuristics predefined GPU (NvMatmulHeuristicsNvidiaGpu member name)
GPU_OF_KIND = {"h100-sxm": "H100_SXM", "h100-pcie": "H100_PCIE", "h100-nvl": "H100_NVL", "h200": "H200_SXM",
               "h20": "H20_SXM"}
RASTER_OF_ORDER = {0: "along_m", 1: "along_n"}


def precision(problem: GemmProblem) -> str:
    """The nvMMH precision string of ``problem`` ('TST' for bf16, 'QQTST' for e4m3 -> bf16)."""
    for name in ("dtype_a", "dtype_b", "dtype_d", "dtype_acc"):
        if getattr(problem, name) not in DTYPE_LETTER:
            raise FieldError(name, f"{getattr(problem, name)} has no nvMatmulHeuristics precision letter "
                                   f"(known: {', '.join(DTYPE_LETTER)})")
    a, d, acc = DTYPE_LETTER[problem.dtype_a], DTYPE_LETTER[problem.dtype_d], DTYPE_LETTER[problem.dtype_acc]
    if problem.dtype_a in ("e4m3", "e5m2"):
        c = DTYPE_LETTER[problem.dtype_d if problem.dtype_c == "void" else problem.dtype_c]
        return a + DTYPE_LETTER[problem.dtype_b] + c + acc + d
    return a + acc + d


def layout_name(problem: GemmProblem) -> str:
    """The NvMatmulHeuristicsMatmulLayout member name: 'TN_ROW_MAJOR' for cutegen's tn with row-major D."""
    letter = {"row": "T", "col": "N"}
    return f"{letter[problem.layout_a]}{letter[problem.layout_b]}_" + \
        ("ROW_MAJOR" if problem.layout_c == "row" else "COL_MAJOR")


@dataclass(frozen=True)
class Proposal:
    """One nvMMH kernel configuration as the library returned it (rank 0 is its top-1)."""
    rank: int
    cta: tuple[int, int, int]
    cluster: tuple[int, int]
    stages: int
    split_k: int
    swizzle: int
    cta_order: int
    warp: tuple[int, int, int] = (0, 0, 0)
    estimated_us: float | None = None

    def label(self) -> str:
        return (f"cta {self.cta[0]}x{self.cta[1]}x{self.cta[2]} cluster {self.cluster[0]}x{self.cluster[1]} "
                f"stages {self.stages} split_k {self.split_k} swizzle {self.swizzle} "
                f"order {RASTER_OF_ORDER.get(self.cta_order, self.cta_order)}")

    def to_dict(self) -> dict:
        return {"rank": self.rank, "cta": list(self.cta), "cluster": list(self.cluster), "stages": self.stages,
                "split_k": self.split_k, "swizzle": self.swizzle, "cta_order": self.cta_order,
                "warp": list(self.warp), "estimated_us": self.estimated_us}


@dataclass
class Judged:
    """A proposal, the configuration it maps to (None: not expressible) and the rules it breaks."""
    proposal: Proposal
    config: KernelConfig | None
    rules: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def legal(self) -> bool:
        return self.config is not None and not self.rules

    def to_dict(self) -> dict:
        return {"proposal": self.proposal.to_dict(), "config": self.config.to_dict() if self.config else None,
                "legal": self.legal, "rules": list(self.rules), "reasons": list(self.reasons)}


def to_config(problem: GemmProblem, p: Proposal) -> tuple[KernelConfig | None, list[str], list[str]]:
    """(config, rule IDs, reasons): the KernelConfig a proposal maps to, or why it maps to none.

    The IDs ``NVMMH-*`` name what cutegen's configuration cannot spell (not hardware rules).
    """
    if p.split_k != 1:
        # cutegen's kernels have no split-K decomposition yet (issue 10 adds it); dropping the split
        # would time a different kernel than the one nvMMH proposed.
        return None, ["NVMMH-SPLIT-K"], [f"NVMMH-SPLIT-K: split_k={p.split_k}; cutegen's configuration has "
                                         "no split-K decomposition"]
    if p.swizzle not in (1, 2, 4, 8):
        return None, ["NVMMH-SWIZZLE"], [f"NVMMH-SWIZZLE: grid swizzle {p.swizzle} is not one of 1, 2, 4, 8"]
    if p.cta_order not in RASTER_OF_ORDER:
        return None, ["NVMMH-RASTER"], [f"NVMMH-RASTER: ctaOrder {p.cta_order} is neither 0 (M) nor 1 (N)"]
    coop = p.cta[0] % 128 == 0
    try:
        cfg = KernelConfig(
            tile_shape=p.cta, cluster_shape=(p.cluster[0], p.cluster[1], 1), stages=p.stages,
            mainloop_schedule="cooperative" if coop else "pingpong",
            epilogue_schedule="tma_warp_specialized_cooperative" if coop else "tma_warp_specialized",
            tile_scheduler="persistent", raster_order=RASTER_OF_ORDER[p.cta_order], raster_swizzle=p.swizzle)
    except FieldError as e:
        return None, ["NVMMH-FIELD"], [f"NVMMH-FIELD: {e}"]
    return cfg, [], []


def judge(problem: GemmProblem, p: Proposal) -> Judged:
    """Map a proposal and judge it exactly as the search judges its own candidates: every broken
    rule, documented-but-not-enforced ones included (the search treats them as illegal too), and
    what the explicit-type CUTLASS renderer cannot spell."""
    from ..legality import check_config
    from ..render import cutlass_supports

    cfg, rules, reasons = to_config(problem, p)
    if cfg is None:
        return Judged(p, None, rules, reasons)
    rep = check_config(problem, cfg)
    broken = list(rep.violations) + list(rep.warnings or [])
    rules = [v.rule_id for v in broken]
    reasons = [str(v) for v in broken]
    if not rules and rep.config is not None:
        for why in cutlass_supports(problem, rep.config):
            rules.append(why.split(":", 1)[0])
            reasons.append(why)
    return Judged(p, rep.config if rep.config is not None else cfg, rules, reasons)


@dataclass
class Pick:
    """nvMMH's answer for one problem: the first legal proposal, and every one judged before it."""
    problem: GemmProblem
    gpu: str
    precision: str
    layout: str
    judged: list[Judged]

    @property
    def chosen(self) -> Judged | None:
        return next((j for j in self.judged if j.legal), None)

    @property
    def rejected(self) -> list[Judged]:
        """Proposals ranked above the chosen one (all of them when none is legal)."""
        out = []
        for j in self.judged:
            if j.legal:
                break
            out.append(j)
        return out

    def summary(self) -> str:
        c = self.chosen
        lines = [f"nvMMH ({self.gpu}, {self.precision}, {self.layout}): "
                 + (f"rank {c.proposal.rank} -> {c.config.short_name()}" if c else
                    f"none of {len(self.judged)} proposals is legal")]
        for j in self.rejected:
            lines.append(f"  rank {j.proposal.rank} rejected ({j.proposal.label()}): {'; '.join(j.reasons)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        c = self.chosen
        return {"gpu": self.gpu, "precision": self.precision, "layout": self.layout,
                "chosen_rank": c.proposal.rank if c else None,
                "config": c.config.to_dict() if c else None,
                "rejected": [j.to_dict() for j in self.rejected], "proposals": len(self.judged)}
