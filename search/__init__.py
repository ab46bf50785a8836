"""The legality-aware e-graph search over CuTe layouts and Hopper pipeline policies.

``search(problem, top_k=5) -> SearchResult``: ``.ranked`` is a list of ``Ranked`` (``.config`` a
complete ``KernelConfig``, ``.cost`` predicted microseconds, ``.breakdown`` the cost terms),
cheapest first; the statistics (e-graph size, iterations, time, rules that pruned) ride along.
"""
from .engine import Ranked, SearchResult, SearchSpace, search

__all__ = ["search", "SearchResult", "Ranked", "SearchSpace"]
