"""What both kernel backends (``cutegen.render``'s C++ and ``cutegen.dsl``'s CuTe DSL) share.

Completing a config, checking its legality before anything is rendered, the manifest's legality
summary, and the ``cutegen_describe()`` JSON. They live here, not in ``render``, so that ``render``
may dispatch to ``dsl`` without the two importing each other.
"""
from __future__ import annotations

import json
from typing import Any

from . import manifest as manifest_mod
from . import staging as _staging
from .config import KernelConfig
from .core.templates import cstring
from .errors import CutegenError, IllegalConfig
from .problem import GemmProblem
from .swap_ab import kernel_problem


# --- completion and legality (owned by other modules; imported late so that a missing or ----
# --- heavy dependency never stops `import cutegen.render`) --------------------------------------
def complete_config(problem: GemmProblem, config: KernelConfig) -> KernelConfig:
    try:
        from .collective_builder import complete
    except ModuleNotFoundError as e:
        if e.name != "cutegen.collective_builder":
            raise
        if config.is_complete:
            return config
        raise CutegenError("config is incomplete (stages, smem layouts, TMA atoms, WGMMA instruction or "
                           "warpgroup layout unset) and cutegen.collective_builder is not available "
                           "to complete it") from None
    # A swapped kernel is completed for the transposed problem its CUTLASS types are written for.
    return complete(kernel_problem(problem, config), config)


def check_legality(problem: GemmProblem, config: KernelConfig):
    """The legality report of ``config`` for ``problem``; raises IllegalConfig on any violation."""
    try:
        from .legality import check_config
    except ImportError as e:
        raise CutegenError(f"cannot check legality: cutegen.legality.check_config is unavailable ({e}); "
                           "refusing to render an unchecked configuration") from None
    report = check_config(problem, config)
    violations = list(getattr(report, "violations", report or []))
    if violations:
        raise IllegalConfig(violations)
    return report


def legality_summary(report: Any) -> dict[str, Any]:
    """What the manifest keeps of a (passing) legality report."""
    if hasattr(report, "to_dict"):
        data = manifest_mod.to_jsonable(report.to_dict())
        if isinstance(data, dict):
            data.setdefault("legal", True)
            return data
    violations = list(getattr(report, "violations", []) or [])
    return {"legal": not violations, "violations": [manifest_mod.to_jsonable(v) for v in violations]}


# A C string literal for a text (the filter every template uses): cutegen.core.templates.cstring.
_cstring = cstring


def _describe(problem: GemmProblem, config: KernelConfig, backend: str, khash: str) -> str:
    from . import __version__
    from .staging import describe as staged
    out = {"backend": backend, "config": config.to_dict(), "cutegen": __version__, "hash": khash,
           "problem": problem.kernel_key()}
    if staged(config):          # only staged kernels carry the key: every other kernel keeps its bytes
        out["staged_operands"] = staged(config)
    if _staging.transposed_operands(config):      # likewise only transposing ones this one
        out["transposed_operands"] = _staging.describe_transposed(config)
    return json.dumps(out, sort_keys=True, separators=(",", ":"))
