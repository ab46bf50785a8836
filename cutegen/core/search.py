"""Search any operation: its own search where it has one, else every candidate of its space.

GEMM brings the e-graph engine (``cutegen.search``) as its ``search`` part. An operation that only
declares a ``space``, a ``check`` and a ``cost`` is searched here exhaustively: each candidate is
judged by the operation's rules (a broken rule prunes it, counted per rule ID) and the legal ones are
ranked by predicted time. The ranking is deterministic: cost, then the candidate's canonical JSON.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import FieldError
from . import registry
from .op import Ranked, config_json


@dataclass
class Searched:
    problem: Any
    ranked: list
    candidates_total: int = 0
    candidates_legal: int = 0
    pruned_by_rule: dict[str, int] = field(default_factory=dict)
    search_seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"problem": self.problem.to_dict(), "ranked": [r.to_dict() for r in self.ranked],
                "candidates_total": self.candidates_total, "candidates_legal": self.candidates_legal,
                "pruned_by_rule": dict(sorted(self.pruned_by_rule.items())),
                "search_seconds": round(self.search_seconds, 4)}


def search(problem: Any, top_k: int = 5, **options: Any) -> Any:
    """The best ``top_k`` legal configurations of ``problem``'s operation, cheapest first.

    Returns the operation's own result where it has a ``search`` part (GEMM: a ``SearchResult``), else
    a ``Searched``; both have ``.ranked`` (items with ``.config``, ``.cost``, ``.breakdown``).
    """
    op = registry.operation_of(problem)
    if op.search is not None:
        return op.search(problem, top_k, **options)
    if options:
        raise FieldError("search", f"operation {op.name!r} takes no search options ({', '.join(sorted(options))})")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise FieldError("top_k", f"expected a positive integer, got {top_k!r}")
    space, check, cost = (registry.part(op, a) for a in ("space", "check", "cost"))
    t0 = time.perf_counter()
    out = Searched(problem, [])
    legal = []
    for config in space(problem):
        out.candidates_total += 1
        broken = [v for v in check(problem, config) if getattr(v, "enforced", True)]
        for v in broken:
            out.pruned_by_rule[v.rule_id] = out.pruned_by_rule.get(v.rule_id, 0) + 1
        if not broken:
            legal.append(Ranked(config, float(cost(problem, config))))
    out.candidates_legal = len(legal)
    legal.sort(key=lambda r: (r.cost, config_json(r.config)))
    out.ranked = legal[:top_k]
    out.search_seconds = time.perf_counter() - t0
    return out
