"""`cutegen check pipeline FILE.json` for an attention kernel (``"problem": {"op": "attention", ...}``).

The configuration's rules (legality/attention.py) and its mbarrier protocol (legality/attention_pipeline.py:
the K/V and Q rings with their transaction bytes, the consumer releases, the ping-pong order barrier, the
load-warp barrier), checked by the temporal checker over every interleaving of its roles at a few KV trip
counts (and, for a persistent kernel, two tiles of different lengths).
"""
from __future__ import annotations

import json
import time

from ..errors import FieldError


def run_attention(args, data: dict) -> int:
    from ..core.registry import problem_from_dict
    from ..legality.attention import check_attention
    from ..legality.attention_pipeline import build_terms, check_terms, protocol_params
    from ..ops.attention.config import AttentionConfig

    unknown = sorted(set(data) - {"problem", "config"})
    if unknown:
        raise FieldError(unknown[0], "unknown field (expected problem and config)")
    for key in ("problem", "config"):
        if key not in data:
            raise FieldError(key, "missing")
    if getattr(args, "backend", "cutlass") != "cutlass":
        raise FieldError("--backend", f"{args.backend!r}: attention kernels have the cutlass backend only")
    problem = problem_from_dict(data["problem"], "problem")
    config = AttentionConfig.from_dict(data["config"], "config")
    rules = check_attention(problem, config)
    t0 = time.perf_counter()
    terms = build_terms(problem, config)
    report = check_terms(terms, max_states=args.max_states)
    seconds = time.perf_counter() - t0
    params = protocol_params(problem, config)
    if args.json:
        doc = report.to_dict()
        doc.update(seconds=round(seconds, 3), protocol=params.to_dict(), config_rules=rules.to_dict(),
                   term={k: v for k, v in terms[0].meta.items() if k not in ("problem", "config")})
        print(json.dumps(doc, indent=1, sort_keys=True, default=list))
    else:
        print(f"{config.short_name()} ({params.kernel}): K/V ring of {params.stages_kv} stages armed with "
              f"{params.bytes_kv} B, Q ring of {params.stages_q} ({params.bytes_q} B), {params.consumers} consumer "
              f"warpgroup(s); explored KV trips " + "; ".join("/".join(map(str, t.meta["kv_tiles"])) for t in terms)
              + f" in {report.states} states, {seconds:.2f} s")
        print("config rules: " + ("legal" if rules.legal else "ILLEGAL"))
        for v in rules.violations + rules.warnings:
            print(f"  {'ILLEGAL' if v.enforced else 'warning'} {v}")
        if report.legal:
            print("pipeline: no deadlock, race or miscount in any interleaving of the explored terms")
        elif not report.conclusive:
            print(f"pipeline: UNPROVEN: the exploration stopped at {args.max_states} states per term")
        for v in report.violations:
            label = "UNPROVEN" if v.rule_id == "PIPE-BOUND" else "ILLEGAL" if v.enforced else "warning"
            print(f"  {label} {v}")
    if report.legal and rules.legal:
        return 0
    return 1 if report.conclusive else 2
