"""A legality rule: a stable ID, an exact predicate, a one-line reason, and its source.

Rules are data. A ``RuleSet`` holds the rules of one hardware contract; ``cutegen check``
and the search's legality analysis both evaluate the same ``RuleSet`` objects, so there is
one source of truth per rule.

A rule's ``check`` receives the contract's context object and returns ``None`` when the
rule holds, or a reason string that prints the offending values when it is broken.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator


@dataclass(frozen=True)
class Rule:
    id: str                    # stable, e.g. "TMA-BOX-INNER-SWIZZLE-SPAN"
    contract: str              # module of legality/ that owns it
    summary: str               # the predicate in words, exact
    source: str                # the document (and, where it differs, the oracle) it comes from
    check: Callable[[Any], "str | None"] = field(repr=False, compare=False)
    rulebook: str = ""         # the ID in ../shared/legality-rules.md (A16, E07, ...)
    enforced: bool = True      # False: documented but not enforced by the driver/compiler (rulebook NOT-ENFORCED)

    def evaluate(self, ctx: Any) -> "Violation | None":
        reason = self.check(ctx)
        if reason is None:
            return None
        return Violation(self.id, reason, self.enforced, self.contract)


@dataclass(frozen=True)
class Violation:
    rule_id: str
    reason: str
    enforced: bool = True
    contract: str = ""

    def __str__(self) -> str:
        return f"{self.rule_id}: {self.reason}"

    def to_dict(self) -> dict:
        return {"rule": self.rule_id, "reason": self.reason, "enforced": self.enforced}


class RuleSet:
    """The rules of one contract, in declaration order."""

    def __init__(self, contract: str):
        self.contract = contract
        self.rules: list[Rule] = []

    def rule(self, rule_id: str, *, summary: str, source: str, rulebook: str = "",
             enforced: bool = True) -> Callable[[Callable[[Any], "str | None"]], Callable]:
        def register(fn: Callable[[Any], "str | None"]) -> Callable:
            if any(r.id == rule_id for r in self.rules):
                raise ValueError(f"duplicate rule id {rule_id}")
            self.rules.append(Rule(rule_id, self.contract, summary, source, fn, rulebook, enforced))
            return fn
        return register

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def evaluate(self, ctx: Any) -> list[Violation]:
        out = []
        for r in self.rules:
            v = r.evaluate(ctx)
            if v is not None:
                out.append(v)
        return out


def evaluate_all(rulesets: Iterable[RuleSet], ctx: Any) -> list[Violation]:
    out: list[Violation] = []
    for rs in rulesets:
        out.extend(rs.evaluate(ctx))
    return out
