"""Legality inside the search, from the one rule source ``cutegen.legality``.

Every candidate the search expands is judged by ``check_config``; its violations *and* its
warnings (rules the driver or compiler does not enforce, e.g. accumulator spills) count as broken (the same call ``cutegen check
config`` makes); its violated rule IDs become ``Rejected`` facts, which the ``expand`` ruleset turns
into the ``illegal`` analysis of the kernel's e-class (a bit-set lattice joined with ``|``; the
exact set stays in the ``Violates`` relation). Extraction gives an illegal e-class infinite cost,
so an e-node that breaks a rule is never extracted.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def rule_ids(op: str = "gemm") -> list[str]:
    """Stable order of every configuration rule: the bit index of each in the analysis.

    The rule sets come from the operation registry (GEMM's: ``cutegen.legality.CONFIG_RULESETS``)."""
    from cutegen.core import registry

    # completion failures are reported under rule IDs too; keep any unknown ID after the known ones
    return registry.config_rule_ids(op)


@dataclass
class Verdict:
    legal: bool
    rules: list[str]
    reasons: list[str]
    config: object | None          # completed KernelConfig (None if completion failed)
    stages: int | None
    smem_bytes: int | None


@dataclass
class Judge:
    """Memoised ``check_config`` for one problem, counting what each rule pruned.

    The backend's own refusals count as rules too: ``"dsl"`` adds ``cutegen.dsl.dsl_supports`` (``DSL-*``),
    ``"cutlass"`` (explicit types) ``cutegen.render.cutlass_supports`` (``CUTLASS-EXPLICIT-*``);
    ``"cutlass_builder"`` adds nothing (CUTLASS's builder decides the mainloop itself). They come through the
    operation registry (``cutegen.core.registry.backend_refusals``; GEMM's in ``cutegen/ops/gemm``).
    """
    problem: object
    backend: str = "cutlass"
    pruned_by_rule: dict[str, int] = field(default_factory=dict)
    checked: int = 0
    _memo: dict = field(default_factory=dict)
    _index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self._index = {rid: i for i, rid in enumerate(rule_ids())}

    def index(self, rule_id: str) -> int:
        if rule_id not in self._index:
            self._index[rule_id] = len(self._index)
        return self._index[rule_id]

    def __call__(self, config) -> Verdict:
        key = config.to_json()
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        from cutegen.legality import check_config

        rep = check_config(self.problem, config)
        self.checked += 1
        # documented-but-not-enforced rules (spills, NOT-ENFORCED driver checks) are illegal to the search
        # except those cutegen's ABI launch protocol makes moot (re-initializing the stream-K workspace)
        # and the cp.async synccheck finding, which a kernel for unaligned operands cannot avoid
        from cutegen.legality.cp_async import ADVISORY
        from cutegen.legality.cutlass_sm90 import MOOT_UNDER_CUTEGEN_ABI
        broken = list(rep.violations) + [w for w in (getattr(rep, "warnings", []) or [])
                                         if w.rule_id not in MOOT_UNDER_CUTEGEN_ABI | ADVISORY]
        rules = [v.rule_id for v in broken]
        reasons = [str(x) for x in broken]
        if rep.config is not None and not rules:
            # the renderer's own refusals, from the operation (the search imports no renderer)
            from cutegen.core import registry
            for why in registry.backend_refusals(self.problem, rep.config, self.backend):
                rules.append(why.split(":", 1)[0])
                reasons.append(why)
        for r in rules:
            self.pruned_by_rule[r] = self.pruned_by_rule.get(r, 0) + 1
        v = Verdict(not rules, rules, reasons, rep.config, rep.stages, rep.smem_bytes)
        self._memo[key] = v
        return v
