"""Validation plans: which sizes (and refusal probes) to run one kernel at."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable

from ..config import KernelConfig
from ..errors import FieldError
from ..problem import GemmProblem
from .geometry import INT_MAX, LaunchArgs, Operand, geometries, packed_operand

# ------------------------------------------------------------------------------------------------
# Validation plans: which sizes to run a kernel at
# ------------------------------------------------------------------------------------------------

def dim_units(problem: GemmProblem) -> dict[str, int]:
    """The multiple each of M, N, K must be for the launch contract (16 bytes along contiguous modes)."""
    units = {"m": 1, "n": 1, "k": 1}
    dims = {"A": ("m", "k"), "B": ("k", "n"), "C": ("m", "n"), "D": ("m", "n")}
    for g in geometries(problem, 1, 1, 1).values():
        rows_dim, cols_dim = dims[g.name]
        d = cols_dim if g.row_major else rows_dim
        units[d] = math.lcm(units[d], g.tma_alignment)
    return units


def ceil_to(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def ragged_extent(tile: int, unit: int, whole_tiles: int) -> int:
    """``whole_tiles`` full tiles plus a partial one, the total a multiple of ``unit``.

    The remainder is about half a tile so that both the mainloop's residue and the epilogue's
    predication are exercised; when ``unit`` is a multiple of the tile no ragged extent exists and
    the result is whole tiles only.
    """
    rem = ceil_to(tile // 2 + 1, unit)
    if rem % tile == 0:
        rem = unit if unit % tile else 0
    return whole_tiles * tile + rem if whole_tiles * tile + rem > 0 else unit


@dataclass(frozen=True)
class Case:
    """One call to run: its size, scalars and storage (padding and pointer offsets in elements)."""
    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    alpha: float = 1.0
    beta: float = 0.0
    ld_pad: dict = field(default_factory=dict)       # operand -> extra elements per leading dimension
    batch_pad: dict = field(default_factory=dict)    # operand -> extra elements per batch
    offset: dict = field(default_factory=dict)       # operand -> base pointer offset in elements
    expect: tuple = ()                               # rule IDs a refusal probe must be refused with
    seed: int = 0
    plan: dict = field(default_factory=dict)         # LaunchPlan of a stream-K kernel; {}: cutegen_gemm
    repeat: int = 1                                  # launches on one workspace, each result checked

    @property
    def is_probe(self) -> bool:
        return bool(self.expect)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["expect"] = list(self.expect)
        if not self.plan:
            del d["plan"]
        if self.repeat == 1:
            del d["repeat"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        d = dict(d)
        d["expect"] = tuple(d.get("expect", ()))
        return cls(**d)


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``MxNxK`` or ``MxNxKxB`` -> (m, n, k, batch)."""
    parts = text.lower().split("x")
    if len(parts) not in (3, 4) or not all(p.strip().isdigit() for p in parts):
        raise FieldError("--shapes", f"expected MxNxK or MxNxKxBATCH, got {text!r}")
    vals = [int(p) for p in parts] + ([1] if len(parts) == 3 else [])
    for name, v in zip(("M", "N", "K", "batch"), vals):
        if not 1 <= v <= INT_MAX:
            raise FieldError("--shapes", f"{name}={v} in {text!r} is outside [1, 2^31-1]")
    return tuple(vals)  # type: ignore[return-value]


def tile_extents(config: KernelConfig) -> tuple[int, int, int]:
    """The CTA tile along the caller's (M, N, K): a swap-AB kernel's tile M mode runs along N."""
    tm, tn, tk = config.tile_shape
    return (tn, tm, tk) if getattr(config, "swap_ab", False) else (tm, tn, tk)


def problem_ld_pads(problem: GemmProblem) -> dict[str, int]:
    """Case.ld_pad for a problem with stated leading dimensions (lda/ldb/ldc; C and D share ldc)."""
    out = {}
    for op, names in (("a", ("A",)), ("b", ("B",)), ("c", ("C", "D"))):
        pad = problem.leading_dimension(op) - problem.contiguous_extent(op)[1]
        for name in names:
            if pad:
                out[name] = pad
    return out


def validation_cases(problem: GemmProblem, config: KernelConfig, shapes: Iterable[tuple] = (),
                     include_manifest: bool = True, max_manifest_macs: int = 2**38,
                     launch_plan: dict | None = None) -> list[Case]:
    """The sizes one kernel is validated at.

    Its own problem size (unless larger than ``max_manifest_macs`` multiply-adds), ragged extents in
    all three of M, N, K (not multiples of the CTA tile, still multiples of the 16-byte units),
    batch 2 and 3 with padded leading dimensions and batch strides, a problem smaller than one
    tile, and the caller's ``shapes``. alpha and beta differ from 1 and 0 where C exists so that
    both scalars are exercised. A stream-K kernel adds ``plan_cases`` and runs its manifest case with
    the manifest's ``launch_plan``.
    """
    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    has_c = problem.dtype_c != "void"
    beta = 0.5 if has_c else 0.0
    cases: list[Case] = []
    if include_manifest and problem.m * problem.n * problem.k * problem.batch <= max_manifest_macs:
        cases.append(Case("manifest", problem.m, problem.n, problem.k, problem.batch,
                          problem.alpha, problem.beta, ld_pad=problem_ld_pads(problem), seed=1))
    cases.append(Case("ragged", ragged_extent(tm, u["m"], 2), ragged_extent(tn, u["n"], 1),
                      ragged_extent(tk, u["k"], 3), 1, 0.75, beta, seed=2))
    cases.append(Case("ragged_batch2", ragged_extent(tm, u["m"], 1), ragged_extent(tn, u["n"], 2),
                      ragged_extent(tk, u["k"], 1), 2, 1.0, beta, seed=3))
    pads = {}
    bpads = {}
    for g in geometries(problem, 1, 1, 1).values():
        pads[g.name] = g.tma_alignment            # one 16-byte unit of padding per row/column
        bpads[g.name] = 2 * g.tma_alignment
    cases.append(Case("padded_batch3", ceil_to(tm + 1, u["m"]), ceil_to(tn + 1, u["n"]), ceil_to(2 * tk + 1, u["k"]),
                      3, 1.25, beta, ld_pad=pads, batch_pad=bpads, seed=4))
    cases.append(Case("sub_tile", u["m"], u["n"], u["k"], 1, 1.0, beta, seed=5))
    geo = geometries(problem, 1, 1, 1)
    narrow = {name: g.tma_alignment for name, g in geo.items() if g.tma_alignment * g.element_bytes < 16}
    if narrow:
        # Operands below 16 bytes (cp.async mainloop, no-smem epilogue): leading dimensions one vector
        # past packed, base pointers one vector past 16-byte alignment, odd extents where allowed.
        cases.append(Case("unaligned_ld", ragged_extent(tm, u["m"], 1) + u["m"], ragged_extent(tn, u["n"], 1) + u["n"],
                          ragged_extent(tk, u["k"], 2) + u["k"], 2, 1.0, beta, ld_pad=dict(narrow),
                          batch_pad={name: 3 * a for name, a in narrow.items()}, offset=dict(narrow), seed=6))
    for i, s in enumerate(shapes):
        m, n, k, b = s
        cases.append(Case(f"shape_{m}x{n}x{k}x{b}", m, n, k, b, 1.0, beta, seed=100 + i))
    if config.tile_scheduler == "stream_k":
        if launch_plan and cases and cases[0].name == "manifest":
            cases[0] = replace(cases[0], plan=dict(launch_plan))
        cases += plan_cases(problem, config)
    if getattr(config, "split_k_slices", 1) > 1:
        cases = split_k_reduce_cases(problem, config, cases)
    return cases


def split_k_reduce_cases(problem: GemmProblem, config: KernelConfig, cases: list[Case]) -> list[Case]:
    """The cases of a split-K kernel with a separate reduction (cutegen/split_k_reduce.py), from the standard ones.

    Each standard case of its own making (ragged, batched, padded, sub-tile) keeps its K as the extent of
    every slice: K = s x that (SPLITK-REDUCE-SLICES-DIVIDE-K), so each slice ends in the ragged k-block the
    ordinary kernel is validated with, and a slice's stride stays a multiple of the 16-byte unit
    (SPLITK-REDUCE-SLICE-STRIDE-ALIGN). The manifest case and the caller's shapes are left as given (the
    preflight refuses a K the rules refuse). Added: slices of whole k-blocks, and the relaunch case: one
    workspace (the partials' region) reused for STREAMK_RELAUNCHES launches, each checked.
    """
    s = config.split_k_slices
    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    beta = 0.5 if problem.dtype_c != "void" else 0.0
    own = {"ragged", "ragged_batch2", "padded_batch3", "sub_tile", "unaligned_ld"}
    out = [replace(c, k=c.k * s) if c.name in own else c for c in cases]
    m, n = ragged_extent(tm, u["m"], 1), ragged_extent(tn, u["n"], 2)
    out.append(Case("slices_whole_kblocks", m, n, s * 2 * ceil_to(tk, u["k"]), 1, 1.5, beta, seed=240))
    out.append(Case("relaunch_slices", m, n, s * ragged_extent(tk, u["k"], 2), 2, 0.75, beta, seed=241,
                    repeat=STREAMK_RELAUNCHES))
    return out


STREAMK_RELAUNCHES = 20


def plan_cases(problem: GemmProblem, config: KernelConfig) -> list[Case]:
    """Every decomposition and split count a stream-K kernel allows, on a ragged M, N and K with
    beta != 0 (where C exists), and the relaunch case: one workspace, many launches, each checked.

    The shape has 4 whole tiles along M by 3 along N plus a ragged edge (so some tiles are partial and
    the tile count does not divide the SMs' worth) and 5 k-blocks with a ragged last one, so split
    counts 2..5 are every count the plan rules allow there (SM90-SPLITK-SPLITS-KTILES).
    """
    from ..launch_plan import LaunchPlan, k_tiles

    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    beta = 0.5 if problem.dtype_c != "void" else 0.0
    m, n, k = ragged_extent(tm, u["m"], 4), ragged_extent(tn, u["n"], 3), ragged_extent(tk, u["k"], 4)
    plans = [LaunchPlan("heuristic"), LaunchPlan("data_parallel"), LaunchPlan("stream_k"),
             LaunchPlan("stream_k", reduction="nondeterministic")]
    plans += [LaunchPlan("split_k", s) for s in range(2, k_tiles(k, tk) + 1)]
    plans += [LaunchPlan("split_k", 2, "nondeterministic"), LaunchPlan("heuristic", 2)]
    cases = []
    for i, plan in enumerate(plans):
        name = "plan_" + plan.label().replace(" ", "_")
        cases.append(Case(name, m, n, k, 1, 0.75, beta, seed=200 + i, plan=plan.to_dict()))
    # batch 2 through stream-K: the scheduler's work units cross the batch boundary
    cases.append(Case("plan_stream_k_batch2", ragged_extent(tm, u["m"], 2), n, k, 2, 1.0, beta, seed=230,
                      plan=LaunchPlan("stream_k").to_dict()))
    # SM90-STREAMK-TMA-EPILOGUE-HANG: relaunching on a stale workspace hung on an H100; the ABI
    # re-initializes it on every call, which this case proves by relaunching on one workspace
    cases.append(Case("relaunch_stream_k", m, n, k, 1, 1.0, beta, seed=231,
                      plan=LaunchPlan("stream_k").to_dict(), repeat=STREAMK_RELAUNCHES))
    return cases


def refusal_probes(problem: GemmProblem, config: KernelConfig) -> list[Case]:
    """Calls the launch contract refuses, each breaking one rule; the kernel must refuse them too.

    Sizes are aligned (so only the intended rule breaks) and small (one or two tiles).
    """
    tm, tn, tk = tile_extents(config)
    u = dim_units(problem)
    slices = getattr(config, "split_k_slices", 1)
    # a split-K-reduce kernel: K = slices x one slice's extent, so only the intended rule breaks
    m, n, k = ceil_to(tm + 1, u["m"]), ceil_to(tn + 1, u["n"]), slices * ceil_to(tk + 1, u["k"])
    g = geometries(problem, m, n, k)
    # A staged operand (cutegen/staging.py) is copied by cudaMemcpy2DAsync, which takes any pointer,
    # pitch and batch stride, into an aligned workspace: nothing about its alignment can be refused.
    staged = {"A": config.stage_a, "B": config.stage_b}

    def aligned(op: str, geo) -> bool:
        return geo[op].tma_alignment > 1 and not staged.get(op, False)

    # Each probe breaks one operand's alignment by one element, so it exists only where that operand's
    # alignment is above one element (an alignment-1 operand of a cp.async kernel takes any pointer,
    # leading dimension and batch stride).
    probes = [case for case, op in (
        (Case("probe_ptr_A", m, n, k, offset={"A": 1}, expect=("TMA-GLOBAL-ADDRESS-ALIGN",), seed=11), "A"),
        (Case("probe_ptr_D", m, n, k, offset={"D": 1}, expect=("TMA-GLOBAL-ADDRESS-ALIGN",), seed=12), "D"),
        (Case("probe_ld_B", m, n, k, ld_pad={"B": 1}, expect=("CUTLASS-MAINLOOP-TMA-ALIGNMENT",), seed=13), "B"),
        (Case("probe_ld_D", m, n, k, ld_pad={"D": 1}, expect=("CUTLASS-EPILOGUE-TMA-ALIGNMENT",), seed=14), "D"),
        (Case("probe_batch_stride_A", m, n, k, batch=2, batch_pad={"A": 1},
              expect=("CUTLASS-MAINLOOP-TMA-ALIGNMENT",), seed=15), "A"),
    ) if aligned(op, g)]
    # An extent that is not a multiple of the 16-byte unit, with the leading dimension padded back
    # to a multiple so that only the extent rule breaks: a probe only while an operand that is read
    # in place (not staged) has that extent contiguous.
    a = g["A"]
    if a.tma_alignment > 1:
        dim = "k" if a.row_major else "m"
        bad = {"m": m, "n": n, "k": k}
        bad[dim] += 1
        ga = geometries(problem, bad["m"], bad["n"], bad["k"])
        pads = {name: ceil_to(gg.contiguous, gg.tma_alignment) - gg.contiguous for name, gg in ga.items()}
        if any(aligned(x, ga) and ga[x].contiguous % ga[x].tma_alignment for x in ("A", "B")):
            probes.append(Case(f"probe_extent_{dim.upper()}", bad["m"], bad["n"], bad["k"], ld_pad=pads,
                               expect=("CUTLASS-MAINLOOP-TMA-ALIGNMENT",), seed=16))
    d = g["D"]
    if d.tma_alignment > 1:
        dim = "n" if d.row_major else "m"
        bad = {"m": m, "n": n, "k": k}
        bad[dim] += 1
        gd = geometries(problem, bad["m"], bad["n"], bad["k"])
        pads = {name: ceil_to(gg.contiguous, gg.tma_alignment) - gg.contiguous for name, gg in gd.items()}
        expect = ["CUTLASS-EPILOGUE-TMA-ALIGNMENT"]
        # Moving an M or N extent of D can move one of A's or B's contiguous extents too.
        if any(aligned(x, gd) and gd[x].contiguous % gd[x].tma_alignment for x in ("A", "B")):
            expect.append("CUTLASS-MAINLOOP-TMA-ALIGNMENT")
        probes.append(Case(f"probe_extent_D_{dim.upper()}", bad["m"], bad["n"], bad["k"], ld_pad=pads,
                           expect=tuple(expect), seed=17))
    if problem.dtype_c == "void":
        probes.append(Case("probe_void_c_beta", m, n, k, beta=1.0, expect=("CUTLASS-EPILOGUE-VOID-C-BETA",), seed=18))
    if slices > 1:
        probes += split_k_reduce_probes(problem, config, m, n)
    return probes


def split_k_reduce_probes(problem: GemmProblem, config: KernelConfig, m: int, n: int) -> list[Case]:
    """A K the slices cannot split evenly, and a K they split into slices whose stride is not 16 bytes,
    each with K itself a multiple of the 16-byte unit (so only the form's rule breaks); a probe exists only
    where such a K does (legality/split_k_reduce.py)."""
    s = config.split_k_slices
    tk = tile_extents(config)[2]
    uk = dim_units(problem)["k"]
    whole = s * ceil_to(tk + 1, uk)
    out = []
    if uk % s:                       # K = s x X + uk: a multiple of uk, not of s
        out.append(Case("probe_split_k_divide_k", m, n, whole + uk, expect=("SPLITK-REDUCE-SLICES-DIVIDE-K",),
                        seed=19))
    if uk > 1 and s % uk == 0:        # K = s x (X + 1): a multiple of uk and of s, K/s one element off the unit
        out.append(Case("probe_split_k_slice_stride", m, n, whole + s,
                        expect=("SPLITK-REDUCE-SLICE-STRIDE-ALIGN",), seed=20))
    return out


def case_operands(problem: GemmProblem, case: Case, bases: dict[str, int]) -> dict[str, Operand]:
    """The operands of ``case`` laid out from the given base addresses (bytes) of each buffer."""
    out = {}
    for name, g in geometries(problem, case.m, case.n, case.k).items():
        op = packed_operand(g, 0, case.ld_pad.get(name, 0), case.batch_pad.get(name, 0))
        ptr = bases[name] + case.offset.get(name, 0) * g.element_bytes
        out[name] = Operand(ptr, op.ld, op.batch_stride)
    return out


def case_launch_args(problem: GemmProblem, case: Case, bases: dict[str, int], bias: int = 0) -> LaunchArgs:
    ops = case_operands(problem, case, bases)
    return LaunchArgs(case.m, case.n, case.k, case.batch, ops["A"], ops["B"], ops.get("C"), ops["D"],
                      case.alpha, case.beta, bias)
