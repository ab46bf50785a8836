"""Fused attention (forward) as an operation: CUTLASS 4.2's Hopper FMHA (example 88) kernels, searched,
rendered with a C ABI, built, validated and benched through the core's seam.

- ``problem``: ``AttentionProblem`` (batch, query/KV heads, sequence lengths, head dims, dtype, causal,
  scale, layout, varlen, log-sum-exp);
- ``config``: ``AttentionConfig`` (the example's tile, schedule and options);
- ``render``: the explicit CUTLASS C++ and its C ABI (templates/attention/);
- ``backward``: the backward kernels (dQ, dK, dV; the example's backward collective, rules
  legality/attention_backward.py, templates/attention/fmha_bwd_sm90.cu.j2), run by the PyTorch op's autograd;
- ``rule_sets``/``check``: legality/attention.py; ``search``/``space``/``cost``: the e-graph search and the
  pipeline-priced cost model of search/attention/ (``space.py`` keeps the first, explicit candidate list).

Heavy modules (jinja2, torch, the legality package) are imported inside the part functions: the GPU
machine loads this package through the runner without egglog.
"""
from __future__ import annotations

from typing import Any

from ...core.op import Operation
from ...core.registry import register
from .config import AttentionConfig
from .problem import AttentionProblem

BACKENDS = ("cutlass",)


def dtypes(p: AttentionProblem) -> dict[str, str]:
    return {"q": p.dtype, "k": p.dtype, "v": p.dtype, "o": p.output_dtype}


def extents(p: AttentionProblem) -> dict[str, int]:
    return {"batch": p.batch, "heads_q": p.heads_q, "heads_kv": p.heads_kv, "seqlen_q": p.seqlen_q,
            "seqlen_kv": p.seqlen_kv, "head_dim": p.head_dim, "head_dim_v": p.dv}


def db_columns(p: AttentionProblem) -> dict[str, Any]:
    # the problems table names GEMM's extents: M = query rows, N = key rows, K = head dim, batch = B*Hq
    return {"kernel_class": p.kernel_class_name, "m": p.seqlen_q, "n": p.seqlen_kv, "k": p.head_dim,
            "batch": p.batch * p.heads_q}


def features(p: AttentionProblem) -> dict[str, float]:
    import math
    return {"log2_sq": math.log2(p.seqlen_q), "log2_skv": math.log2(p.seqlen_kv), "head_dim": float(p.head_dim),
            "head_dim_v": float(p.dv), "batch_heads": float(p.batch * p.heads_q), "group": float(p.group_size),
            "causal": float(p.causal), "log2_flops": math.log2(p.flops)}


def render(p: AttentionProblem, c: AttentionConfig, backend: str | None = None, **options: Any):
    from .render import render as render_attention
    return render_attention(p, c, backend or BACKENDS[0], **options)


def backend_refusals(p: AttentionProblem, c: AttentionConfig, backend: str) -> list[str]:
    from .render import backend_refusals as refusals
    return refusals(p, c, backend)


def rule_sets() -> list:
    """Every rule set an attention kernel is judged by (legality/attention.py): WGMMA of both GEMMs, the Q/K/V/O
    tensor maps, resources, the CUTLASS 88 kernels' own constraints."""
    from ...legality.attention import RULESETS
    return list(RULESETS)


def config_rule_sets() -> list:
    return rule_sets()


def check(p: AttentionProblem, c: AttentionConfig) -> list:
    """The attention rules (p, c) breaks: enforced violations, then warnings (``Violation.enforced`` False)."""
    from ...legality.attention import check_attention
    rep = check_attention(p, c)
    return list(rep.violations) + list(rep.warnings)


def space(p: AttentionProblem):
    from ...search.attention.engine import space as candidates
    return candidates(p)


def cost(p: AttentionProblem, c: AttentionConfig) -> float:
    from ...search.attention.engine import cost as predicted
    return predicted(p, c)


def search(p: AttentionProblem, top_k: int = 5, **options: Any):
    """The e-graph search (search/attention/engine.py): ``explain=True`` for the report, ``backend`` for whose
    refusals prune (default the explicit CUTLASS renderer)."""
    from ...search.attention.engine import search as egraph_search
    return egraph_search(p, top_k, **options)


def tolerance(p: AttentionProblem) -> float:
    return 0.08 if p.dtype == "e4m3" else 0.02


OPERATION = register(Operation(
    name="attention", problem_type=AttentionProblem, config_type=AttentionConfig,
    summary="O = softmax(scale * Q K^T [causal]) V, forward, MHA/GQA/MQA; Hopper sm_90a (CUTLASS 88 FMHA)",
    dtypes=dtypes, extents=extents, flops=lambda p: p.flops, db_columns=db_columns, features=features,
    rule_sets=rule_sets, config_rule_sets=config_rule_sets, check=check, space=space, cost=cost, search=search,
    backends=BACKENDS, render=render, backend_refusals=backend_refusals, tolerance=tolerance,
    reference="float32 softmax(scale * Q K^T) V of the same inputs (bench/attention_bench.py)",
    peers=("sdpa_cudnn", "sdpa_flash", "cutlass88"),
    runner="cutegen.ops.attention.runner",
))
