"""GEMM as an operation: adapters over the modules that implement it, registered with the core.

Nothing is moved here yet: the problem (``cutegen.problem``), the config (``cutegen.config``), the e-graph
search (``cutegen.search``), the rules (``cutegen.legality``), rendering (``cutegen.render`` /
``cutegen.dsl``), the validation plans (``cutegen.run.cases``) and the bench peers (cuBLAS and CUTLASS's
builder, timed by ``cutegen._runner_worker``) stay where they are; this package names them as GEMM's
parts. Each adapter imports its module when called, so importing this package costs no egglog, torch or
legality import (the GPU machine loads it through the runner).
"""
from __future__ import annotations

import math
from typing import Any

from ...config import KernelConfig
from ...core.op import Operation, canonical
from ...core.registry import register
from ...dtypes import DTYPES
from ...problem import GemmProblem

BACKENDS = ("cutlass", "cutlass_builder", "dsl")        # cutegen.render.BACKENDS, the default first


def dtypes(p: GemmProblem) -> dict[str, str]:
    return {"a": p.dtype_a, "b": p.dtype_b, "c": p.dtype_c, "d": p.dtype_d}


def extents(p: GemmProblem) -> dict[str, int]:
    return {"m": p.m, "n": p.n, "k": p.k, "batch": p.batch}


def db_key(p: GemmProblem) -> str:
    # the key every stored GEMM measurement already has: canonical JSON of the problem, no "op" key
    return canonical(p.to_dict())


def db_columns(p: GemmProblem) -> dict[str, Any]:
    return {"kernel_class": p.kernel_class_name, "m": p.m, "n": p.n, "k": p.k, "batch": p.batch}


def features(p: GemmProblem) -> dict[str, float]:
    """The problem's side of a learned model's inputs (the config's side comes from the cost breakdown,
    search/learned/features.py)."""
    bits = {op: DTYPES[t].bits if t != "void" else 0 for op, t in dtypes(p).items()}
    return {"log2_m": math.log2(p.m), "log2_n": math.log2(p.n), "log2_k": math.log2(p.k),
            "batch": float(p.batch), "bits_a": float(bits["a"]), "bits_b": float(bits["b"]),
            "bits_c": float(bits["c"]), "bits_d": float(bits["d"]), "log2_flops": math.log2(p.flops)}


def rule_sets() -> list:
    """Every rule set a GEMM is judged by, in ``cutegen.legality.all_rules()`` order."""
    from ...legality import all_rulesets
    return all_rulesets()


def config_rule_sets() -> list:
    """The rule sets judged on every candidate of the search (its legality analysis indexes these)."""
    from ...legality import CONFIG_RULESETS
    return list(CONFIG_RULESETS)


def check(p: GemmProblem, c: KernelConfig) -> list:
    from ...legality import check_config
    return list(check_config(p, c).violations)


def cost(p: GemmProblem, c: KernelConfig) -> float:
    """The analytic prior's microseconds for a legal config, completed (no launch plan, calibrated device)."""
    from ...legality import check_config
    from ...search.cost import config_cost
    rep = check_config(p, c)
    if rep.config is None or rep.violations:
        raise ValueError(f"no cost for an illegal config of {p.name}: {'; '.join(map(str, rep.violations))}")
    return config_cost(p, rep.config, rep.stages)[0]


def search(p: GemmProblem, top_k: int = 5, **options: Any):
    from ...search import search as egraph_search
    return egraph_search(p, top_k, **options)


def render(p: GemmProblem, c: KernelConfig, backend: str | None = None, **options: Any):
    from ...render import render as render_gemm
    return render_gemm(p, c, backend or BACKENDS[0], **options)


def backend_refusals(p: GemmProblem, c: KernelConfig, backend: str) -> list[str]:
    """What each renderer refuses of a legal config: the CuTe DSL's ``DSL-*``, the explicit C++ template's
    ``CUTLASS-EXPLICIT-*``; CUTLASS's builder refuses nothing the rules allow (it chooses the mainloop)."""
    if backend == "dsl":
        from ...dsl import dsl_supports as supports
    elif backend == "cutlass":
        from ...render import cutlass_supports as supports
    else:
        from ...render import builder_supports as supports
    return supports(p, c)


def validation_cases(p: GemmProblem, c: KernelConfig, shapes=(), **options: Any) -> list:
    from ...run.cases import validation_cases as cases
    return cases(p, c, shapes, **options)


def refusal_probes(p: GemmProblem, c: KernelConfig) -> list:
    from ...run.cases import refusal_probes as probes
    return probes(p, c)


def tolerance(p: GemmProblem) -> float:
    from ...run.tolerance import tolerance as tol
    return tol(p)


OPERATION = register(Operation(
    name="gemm", problem_type=GemmProblem, config_type=KernelConfig,
    summary="D = act(alpha * A @ B + beta * C + bias), batched; Hopper sm_90a",
    dtypes=dtypes, extents=extents, flops=lambda p: p.flops,
    db_key=db_key, db_columns=db_columns, features=features,
    rule_sets=rule_sets, config_rule_sets=config_rule_sets, check=check, cost=cost, search=search,
    backends=BACKENDS, render=render, backend_refusals=backend_refusals, validation_cases=validation_cases, refusal_probes=refusal_probes,
    tolerance=tolerance, reference="float32 matmul of the same (already quantized) inputs (cutegen._runner_worker)",
    peers=("cublas",), packs=True,
))
