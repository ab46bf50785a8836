"""Grouped GEMM for mixture-of-experts as an operation: one launch of E GEMMs that share N and K.

``problem.py`` (``GroupedGemmProblem``) and ``config.py`` (``GroupedGemmConfig``) are the types;
``render.py`` renders CUTLASS 4.2's SM90 ptr-array grouped kernel with a device-side prep kernel and a C
ABI (templates/grouped_gemm/); ``torch_op.py`` is the PyTorch op (``torch._grouped_mm``'s semantics).
The search parts: the grouped rules (legality/grouped_gemm.py, which also run every GEMM config rule on the
per-group GEMM), the e-graph search (search/grouped.py) and the uneven-distribution cost model
(search/grouped_cost.py); ``trivial.py`` keeps the fixed list of configurations known to compile.
Each part imports its module when called: importing this package costs no egglog, torch or jinja2.
"""
from __future__ import annotations

import math
from typing import Any

from ...core.op import Operation, canonical
from ...core.registry import register
from .config import GroupedGemmConfig
from .problem import OP, GroupedGemmProblem

BACKENDS = ("cutlass_builder",)     # grouped_gemm.render.BACKEND


def dtypes(p: GroupedGemmProblem) -> dict[str, str]:
    return {"x": p.dtype, "w": p.dtype, "d": "bf16"}


def extents(p: GroupedGemmProblem) -> dict[str, int]:
    return {"groups": p.groups, "tokens": p.tokens, "n": p.n, "k": p.k}


def db_key(p: GroupedGemmProblem) -> str:
    return canonical(p.to_dict())


def db_columns(p: GroupedGemmProblem) -> dict[str, Any]:
    # The problems table names GEMM's extents: tokens on m, groups on batch.
    return {"kernel_class": p.kernel_class_name, "m": p.tokens, "n": p.n, "k": p.k, "batch": p.groups}


def features(p: GroupedGemmProblem) -> dict[str, float]:
    sizes = p.group_sizes
    mean = sum(sizes) / len(sizes)
    return {"log2_groups": math.log2(p.groups), "log2_tokens": math.log2(p.tokens),
            "log2_n": math.log2(p.n), "log2_k": math.log2(p.k), "bits": 8.0 * p.element_bytes,
            "masked": float(p.layout == "masked"),
            "max_over_mean": (max(sizes) / mean) if mean else 0.0,
            "empty_fraction": sum(1 for s in sizes if s == 0) / len(sizes)}


def rule_sets() -> list:
    """The grouped kernel's own rules, its launch rules, and every GEMM rule set (judged on the per-group GEMM)."""
    from ...legality import all_rulesets
    from ...legality.grouped_gemm import GROUPED_GEMM_RULES, GROUPED_LAUNCH_RULES
    return [GROUPED_GEMM_RULES, GROUPED_LAUNCH_RULES, *all_rulesets()]


def config_rule_sets() -> list:
    """The rule sets judged on every candidate: the grouped ones, then GEMM's config rules and the swap rules
    (check_config on the per-group GEMM). The search's legality analysis indexes its bits by this order."""
    from ...legality import CONFIG_RULESETS, SWAP_AB_RULES
    from ...legality.grouped_gemm import GROUPED_GEMM_RULES
    return [GROUPED_GEMM_RULES, *CONFIG_RULESETS, SWAP_AB_RULES]


def space(p: GroupedGemmProblem):
    """Every candidate the grouped search's e-graph reaches (search/grouped.py), unjudged."""
    from ...search.grouped import GroupedSpace, _config
    s = GroupedSpace(p)
    try:
        return [_config(*cand) for cand in s.candidates()]
    finally:
        s.egg.close()


def check(p: GroupedGemmProblem, c: GroupedGemmConfig) -> list:
    from ...legality.grouped_gemm import config_violations
    return config_violations(p, c)


def cost(p: GroupedGemmProblem, c: GroupedGemmConfig) -> float:
    """Predicted microseconds on the problem's expected group sizes (search/grouped_cost.py); the config's
    stages, or the ptr-array builder's when it leaves them to the builder."""
    from ...legality.grouped_gemm import grouped_stages
    from ...search.grouped_cost import grouped_cost
    stages = grouped_stages(p, c)
    if stages < 1:
        raise ValueError(f"no cost for {c.short_name()} on {p.name}: not one pipeline stage fits in shared memory")
    return grouped_cost(p, c, stages)[0]


def search(p: GroupedGemmProblem, top_k: int = 5, **options: Any):
    from ...search.grouped import search as grouped_search
    return grouped_search(p, top_k, **options)


def render(p: GroupedGemmProblem, c: GroupedGemmConfig, backend: str | None = None, **options: Any):
    from .render import render as render_grouped
    return render_grouped(p, c, backend or BACKENDS[0], **options)


def backend_refusals(p: GroupedGemmProblem, c: GroupedGemmConfig, backend: str) -> list[str]:
    from .render import refusals
    return refusals(p, c)


def tolerance(p: GroupedGemmProblem) -> float:
    from .validate import tolerance as tol
    return tol(p)


OPERATION = register(Operation(
    name=OP, problem_type=GroupedGemmProblem, config_type=GroupedGemmConfig,
    summary="D_i = X_i @ W_i^T for E groups sharing N and K (MoE experts), group sizes on the device; sm_90a",
    dtypes=dtypes, extents=extents, flops=lambda p: p.flops,
    db_key=db_key, db_columns=db_columns, features=features,
    rule_sets=rule_sets, config_rule_sets=config_rule_sets, check=check, space=space, cost=cost, search=search,
    backends=BACKENDS, render=render, backend_refusals=backend_refusals,
    tolerance=tolerance, reference="float32 matmul per group of the same (already quantized) inputs",
    peers=("torch_grouped_mm", "matmul_loop", "padded_bmm"),
    runner="cutegen.ops.grouped_gemm.runner",
))
