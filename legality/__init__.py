"""Legality: every hardware and CUTLASS contract a Hopper GEMM configuration must satisfy.

One entry point for everyone:

* ``CONFIG_RULESETS`` -- the rule sets evaluated on a ``ConfigContext`` (wgmma, mbarrier,
  resources, cutlass_sm90; the last one also judges the TMA descriptors with tensor_map's rules);
* ``check_config(problem, config) -> ConfigReport`` -- complete the config as CUTLASS's
  CollectiveBuilder would, evaluate every rule, resolve stages and shared memory;
* ``all_rules()`` -- every Rule of every contract, tensor_map included.

For a search that evaluates many candidates: build ``ConfigContext(problem, complete(problem, cfg))``
once per candidate and call ``evaluate_config(ctx)``; every derived number is computed once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cutegen import collective_builder as cb
from cutegen import smem
from cutegen.config import KernelConfig
from cutegen.dtypes import DTYPES
from cutegen.errors import IllegalConfig
from cutegen.problem import GemmProblem

from .rule import Rule, RuleSet, Violation, evaluate_all

NUM_THREADS_PER_WARPGROUP = 128


class ConfigContext:
    """Derived facts of one (problem, completed config) pair. ``requested`` is the config as given."""

    __slots__ = ("problem", "config", "requested", "tm", "tn", "tk", "cm", "cn", "ck", "cluster_size",
                 "bits_a", "bits_b", "bits_c", "bits_d", "wgmma_k", "major_a", "major_b", "stages",
                 "mma_threads", "tma_epilogue", "epi_plan", "epi_error", "__dict__")

    def __init__(self, problem: GemmProblem, config: KernelConfig, requested: KernelConfig | None = None):
        self.problem = problem
        self.config = config
        self.requested = requested if requested is not None else config
        self.tm, self.tn, self.tk = config.tile_shape
        self.cm, self.cn, self.ck = config.cluster_shape
        self.cluster_size = self.cm * self.cn * self.ck
        self.bits_a = DTYPES[problem.dtype_a].bits
        self.bits_b = DTYPES[problem.dtype_b].bits
        self.bits_c = 0 if problem.dtype_c == "void" else DTYPES[problem.dtype_c].bits
        self.bits_d = DTYPES[problem.dtype_d].bits
        self.wgmma_k = DTYPES[problem.dtype_a].wgmma_k
        self.major_a = cb.gmma_major(problem, "a")
        self.major_b = cb.gmma_major(problem, "b")
        self.stages = config.stages if config.stages != "auto" else cb.resolve_stages(problem, config)
        wg = config.warpgroup_layout or cb.warpgroup_layout(config.mainloop_schedule)
        self.mma_threads = NUM_THREADS_PER_WARPGROUP * wg[0] * wg[1] * wg[2]
        self.tma_epilogue = config.epilogue_schedule in cb.TMA_EPILOGUES
        try:
            self.epi_plan = cb.epilogue_plan(problem, config)
            self.epi_error = None
        except ValueError as e:
            self.epi_plan, self.epi_error = None, str(e)

    # --- shared memory --------------------------------------------------------------------------------
    @cached_property
    def storage(self) -> smem.SharedStorage | None:
        """The three sizeofs; None when the epilogue cannot be built (then a rule already says why)."""
        if self.tma_epilogue and self.epi_plan is None:
            return None
        plan = self.epi_plan
        align = cb.mainloop_alignment(self.problem, self.config.tile_shape)
        return smem.SharedStorage(
            mainloop=smem.mainloop_storage_bytes(self.bits_a, self.bits_b, self.config.tile_shape, self.stages, align),
            epilogue=smem.epilogue_storage_bytes(self.problem.dtype_c, self.problem.dtype_d, plan),
            kernel=smem.kernel_storage_bytes(self.config.mainloop_schedule, self.bits_a, self.bits_b,
                                             self.config.tile_shape, self.stages, self.problem.dtype_c,
                                             self.problem.dtype_d, plan, align))

    @property
    def smem_bytes(self) -> int | None:
        s = self.storage
        return None if s is None else s.kernel

    # --- threads and registers ------------------------------------------------------------------------
    @cached_property
    def threads(self) -> int:
        """MaxThreadsPerBlock: one producer warpgroup plus the MMA warpgroups (pingpong: two tiles' worth)."""
        from .cp_async import is_cp_async, load_warpgroups
        producers = NUM_THREADS_PER_WARPGROUP * (load_warpgroups(self.config.mainloop_schedule)
                                                 if is_cp_async(self) else 1)
        if self.config.mainloop_schedule == "pingpong":
            return 2 * self.mma_threads + producers
        return self.mma_threads + producers

    @cached_property
    def acc_regs_per_thread(self) -> int:
        """f32 accumulator registers each MMA thread holds for one CTA tile (CUTLASS RegsPerThread)."""
        return self.tm * self.tn // self.mma_threads

    @cached_property
    def fp8_promoted(self) -> bool:
        """FP8 inputs through CUTLASS's two-level accumulation mainloop (MainloopSm90TmaGmmaWarpSpecializedFP8,
        what both the builder and cutegen's renderer use for FP8 without fast accumulation). With
        ``fp8_fast_accum`` the ...FP8FastAccum schedules take the plain mainloop: one accumulator."""
        # The cp.async mainloop has no FP8 variant: it accumulates in the WGMMA accumulator only.
        return (self.problem.dtype_a in ("e4m3", "e5m2") and not cb.uses_register_a(self.problem)
                and self.config.mainloop_load == "tma" and not getattr(self.problem, "fp8_fast_accum", False))

    @cached_property
    def live_acc_regs_per_thread(self) -> int:
        """Accumulator registers live at once: GmmaFP8Accumulation keeps the WGMMA accumulator and the
        promoted f32 copy side by side (collective/fp8_accumulation.hpp), so FP8 needs twice the tile's."""
        return self.acc_regs_per_thread * (2 if self.fp8_promoted else 1)

    @cached_property
    def setmaxnreg(self) -> tuple[int, int] | None:
        """(producer, consumer) setmaxnreg values of the Cooperative / Pingpong kernels; None for plain WS."""
        if self.config.mainloop_schedule == "warp_specialized" or self.config.mainloop_load == "cp_async":
            return None      # the cp.async kernels set no register split (sm90_gemm_warpspecialized_*.hpp)
        heavy = self.acc_regs_per_thread >= 208
        return (24, 240) if heavy else (40, 232)

    # --- mainloop TMA boxes ---------------------------------------------------------------------------
    def operand_box(self, operand: str) -> list[int]:
        """The TMA box CuTe encodes for one stage of A or B, innermost first, before the multicast
        split: (atom width along the contiguous mode, the tile's other extent, batch 1). Further atom
        repeats along the contiguous mode are separate TMA issues, not box modes (checked against the
        descriptors CUTLASS encodes: oracles/smem_probe_tma.py)."""
        atom = self.config.smem_layout_a if operand == "a" else self.config.smem_layout_b
        bits = self.bits_a if operand == "a" else self.bits_b
        mn = self.tm if operand == "a" else self.tn
        width = atom.contiguous_elems(bits)
        contiguous, other = (self.tk, mn) if atom.major == "K" else (mn, self.tk)
        return [min(width, contiguous), other, 1]

# --- the rule sets ---------------------------------------------------------------------------------------
from .wgmma import WGMMA_RULES            # noqa: E402  (the rule modules need nothing from here)
from .mbarrier import MBARRIER_RULES      # noqa: E402
from .resources import RESOURCE_RULES     # noqa: E402
from .cutlass_sm90 import CUTLASS_SM90_RULES  # noqa: E402
from .cp_async import CP_ASYNC_RULES      # noqa: E402

from .swap_ab import SWAP_AB_RULES, check_swap  # noqa: E402
from .staging import STAGING_RULES, check_staging  # noqa: E402
from .split_k_reduce import SPLIT_K_REDUCE_RULES, check_split_k_reduce  # noqa: E402

CONFIG_RULESETS: list[RuleSet] = [WGMMA_RULES, MBARRIER_RULES, RESOURCE_RULES, CUTLASS_SM90_RULES, CP_ASYNC_RULES]


def all_rulesets() -> list[RuleSet]:
    """Every rule set of every contract, in a stable order (tensor_map first): the one list all_rules and
    the operation registry's GEMM entry (cutegen/ops/gemm) read, so neither can miss a new set."""
    from .stream_k import STREAM_K_RULES   # judged on (problem, config, launch plan): check_plan
    from .tensor_map import TENSOR_MAP_RULES
    return [TENSOR_MAP_RULES, *CONFIG_RULESETS, SWAP_AB_RULES, STAGING_RULES, SPLIT_K_REDUCE_RULES, STREAM_K_RULES]


def all_rules() -> list[Rule]:
    """Every rule of every contract, in a stable order (tensor_map first)."""
    return [r for rs in all_rulesets() for r in rs]


def evaluate_config(ctx: ConfigContext) -> list[Violation]:
    """Every configuration rule the context breaks, enforced or not, in rule order."""
    return evaluate_all(CONFIG_RULESETS, ctx)


def first_violation(ctx: ConfigContext) -> Violation | None:
    """The first enforced rule the context breaks (cheap pruning for a search), or None if legal."""
    for rs in CONFIG_RULESETS:
        for r in rs.rules:
            if r.enforced:
                v = r.evaluate(ctx)
                if v is not None:
                    return v
    return None


@dataclass
class ConfigReport:
    legal: bool
    violations: list[Violation]                 # enforced rules broken
    warnings: list[Violation] = field(default_factory=list)   # documented, not enforced
    config: KernelConfig | None = None          # completed; None when completion failed
    stages: int | None = None
    smem_bytes: int | None = None               # sizeof(GemmKernel::SharedStorage)

    def to_dict(self) -> dict[str, Any]:
        return {"legal": self.legal, "rules": [v.rule_id for v in self.violations], "stages": self.stages,
                "smem_bytes": self.smem_bytes, "warnings": [v.rule_id for v in self.warnings],
                "reasons": [str(v) for v in self.violations + self.warnings]}


def check_config(problem: GemmProblem, config: KernelConfig) -> ConfigReport:
    """Complete ``config`` as CUTLASS 4.2's SM90 CollectiveBuilder would and evaluate every rule.

    A swapped configuration (``config.swap_ab``) is judged by the swap rules on ``problem``, then by
    every other rule on the transposed problem its kernel is written for (legality/swap_ab.py).
    A staged configuration (``config.stage_a`` / ``stage_b``) likewise: the staging rules on
    ``problem``, then every other rule on the aligned view its TMA kernel reads (legality/staging.py).
    A split-K-reduce configuration (``config.split_k_slices > 1``) likewise: its rules on ``problem``, then
    every other rule on the batched slice GEMM its kernel computes (legality/split_k_reduce.py)."""
    s = getattr(config, "split_k_slices", 1)
    if s > 1:
        from cutegen.split_k_reduce import sliced_problem
        found = check_split_k_reduce(problem, config)
        broken = [v for v in found if v.enforced]
        notes = [v for v in found if not v.enforced]
        if broken:
            return ConfigReport(False, broken, notes, None, config.stages if config.stages != "auto" else None, None)
        inner = check_config(sliced_problem(problem, config), config.replace(split_k_slices=1))
        if inner.config is not None:
            inner.config = inner.config.replace(split_k_slices=s)
        inner.warnings = notes + inner.warnings
        return inner
    flags = {f: getattr(config, f, False) for f in ("stage_a", "stage_b", "stage_transpose_a", "stage_transpose_b")}
    if any(flags.values()):
        from cutegen.staging import staged_problem
        staging_violations = check_staging(problem, config)
        if staging_violations:
            return ConfigReport(False, staging_violations, [], None,
                                config.stages if config.stages != "auto" else None, None)
        inner = check_config(staged_problem(problem, config), config.replace(**{f: False for f in flags}))
        if inner.config is not None:
            inner.config = inner.config.replace(**flags)
        return inner
    if config.swap_ab:
        from cutegen.swap_ab import transposed
        swap_violations = check_swap(problem, config)
        if swap_violations:
            return ConfigReport(False, swap_violations, [], None,
                                config.stages if config.stages != "auto" else None, None)
        inner = check_config(transposed(problem), config.replace(swap_ab=False))
        if inner.config is not None:
            inner.config = inner.config.replace(swap_ab=True)
        return inner
    try:
        done = cb.complete(problem, config)
    except IllegalConfig as e:
        stages = config.stages if config.stages != "auto" else None
        return ConfigReport(False, list(e.violations), [], None, stages, None)
    ctx = ConfigContext(problem, done, config)
    vs = evaluate_config(ctx)
    enforced = [v for v in vs if v.enforced]
    return ConfigReport(not enforced, enforced, [v for v in vs if not v.enforced], done, ctx.stages,
                        ctx.smem_bytes)


__all__ = ["CONFIG_RULESETS", "all_rulesets", "SWAP_AB_RULES", "check_swap", "STAGING_RULES", "check_staging", "SPLIT_K_REDUCE_RULES", "check_split_k_reduce", "ConfigContext", "ConfigReport", "check_config", "evaluate_config", "first_violation",
           "all_rules",
           "Rule", "RuleSet", "Violation"]
