"""Grouped GEMM for mixture-of-experts as an operation: one launch of E GEMMs that share N and K.

``problem.py`` (``GroupedGemmProblem``) and ``config.py`` (``GroupedGemmConfig``) are the types;
``render.py`` renders CUTLASS 4.2's SM90 ptr-array grouped kernel with a device-side prep kernel and a C
ABI (templates/grouped_gemm/); ``torch_op.py`` is the PyTorch op (``torch._grouped_mm``'s semantics).
The search parts (space, rules, cost) come from ``trivial.py`` until the grouped search lands.
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


def space(p: GroupedGemmProblem):
    from .trivial import space as trivial_space
    return trivial_space(p)


def check(p: GroupedGemmProblem, c: GroupedGemmConfig) -> list:
    from .trivial import check as trivial_check
    return trivial_check(p, c)


def cost(p: GroupedGemmProblem, c: GroupedGemmConfig) -> float:
    from .trivial import cost as trivial_cost
    return trivial_cost(p, c)


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
    space=space, check=check, cost=cost,
    backends=BACKENDS, render=render, backend_refusals=backend_refusals,
    tolerance=tolerance, reference="float32 matmul per group of the same (already quantized) inputs",
    peers=("torch_grouped_mm", "matmul_loop", "padded_bmm"),
))
