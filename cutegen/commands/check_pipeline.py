"""`cutegen check pipeline FILE.json`: the temporal contract of one kernel's TMA/mbarrier pipeline.

FILE.json is ``{"problem": {...}, "config": {...}}`` as for ``cutegen check config``. The pipeline the
configuration builds (``cutegen.pipelines``) is checked by ``cutegen.legality.pipeline`` over every
interleaving of its roles, bounded; the verdict names each broken rule with its role, tile, k-block
and stage, and ``--json`` adds the shortest interleaving that breaks it.
"""
from __future__ import annotations

import json
import time

from .._fields import loads_json
from ..errors import CutegenError, FieldError, IllegalConfig

HELP = "check a kernel configuration's TMA/mbarrier pipeline over every interleaving of its roles"
Bounds_MAX = 200_000
# Exit status: 0 proven (every interleaving explored, no rule broken), 1 a rule is broken, 2 unproven (the
# exploration hit --max-states before covering every interleaving; nothing is claimed).
EXIT_UNPROVEN = 2


def add_arguments(p) -> None:
    p.add_argument("file", metavar="FILE.json", help='{"problem": {...}, "config": {...}}')
    p.add_argument("--backend", choices=("cutlass", "dsl"), default="cutlass",
                   help="whose pipeline: CUTLASS's PipelineTmaAsync or cutegen's CuTe DSL template")
    p.add_argument("--json", action="store_true", help="print the report as JSON, with counterexample traces")
    p.add_argument("--stages", type=int, default=0, metavar="N",
                   help="explore the protocol with at most N stages (the structural rules read the full term); "
                        "0 (default): the configuration's own stage count")
    p.add_argument("--max-states", type=int, default=Bounds_MAX, metavar="N",
                   help=f"stop each explored term after N states (default {Bounds_MAX}); a stopped exploration is "
                        "UNPROVEN: exit status 2, never a pass")
    p.add_argument("--cluster", action="store_true",
                   help="explore every CTA of the cluster, not one (slow: ~10^5 states for two CTAs)")


def run(args) -> int:
    from ..legality.pipeline import Bounds, check_pipeline
    from ..pipelines import pipeline_of
    from .check_config import parse_case, _read

    try:
        data = loads_json(_read(args.file))
    except json.JSONDecodeError as e:
        raise FieldError("input", f"{args.file} is not valid JSON ({e.msg}; line {e.lineno})") from None
    if args.stages < 0:
        raise FieldError("--stages", f"{args.stages} is negative")
    if args.max_states < 1:
        raise FieldError("--max-states", f"{args.max_states} is not positive")
    problem, config = parse_case(data)
    try:
        term, rebuild = pipeline_of(problem, config, args.backend, explore_cluster=args.cluster)
    except IllegalConfig as e:
        raise CutegenError(f"the configuration does not complete: {'; '.join(map(str, e.violations))}") from None
    rendered = _rendered_match(problem, config) if args.backend == "dsl" else None
    t0 = time.perf_counter()
    report = check_pipeline(term, bounds=Bounds(stages=args.stages or None, max_states=args.max_states),
                            rebuild=rebuild)
    seconds = time.perf_counter() - t0
    if rendered:
        from ..legality.rule import Violation
        report.violations.insert(0, Violation("DSL-PIPELINE-MATCH", rendered[0].split(": ", 1)[1], True, "pipeline"))
    if args.json:
        doc = report.to_dict()
        doc["rendered_kernel"] = {"checked": rendered is not None, "matches": not rendered}
        doc["seconds"] = round(seconds, 3)
        doc["term"] = {k: v for k, v in term.meta.items()}
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        meta = term.meta
        print(f"{meta.get('config')} ({meta.get('backend')}): {meta['stages']} stages, "
              f"{'ping-pong' if meta['pingpong'] else str(meta['consumers']) + ' consumer warpgroup(s)'}, "
              f"cluster {meta['cluster'][0]}x{meta['cluster'][1]}; explored "
              f"{', '.join(str(e['k_blocks']) for e in report.explored)} k-blocks per tile "
              f"({report.explored[0]['stages']} stages, {report.explored[0]['tiles']} tiles) in "
              f"{report.states} states, {seconds:.2f} s")
        if report.legal:
            print("pipeline: no deadlock, race or miscount in any interleaving")
        elif not report.conclusive:
            print(f"pipeline: UNPROVEN: the exploration stopped at its bound ({args.max_states} states per explored "
                  "term) before covering every interleaving; no structural rule is broken, but nothing is claimed "
                  "about deadlocks, races or run-time arrival counts (raise --max-states, or lower --stages)")
        for v in report.violations:
            label = "UNPROVEN" if v.rule_id == "PIPE-BOUND" else "ILLEGAL" if v.enforced else "warning"
            print(f"  {label} {v}")
    if args.backend == "dsl" and not args.json:
        print("rendered DSL kernel: " + ("its pipeline, read back, is the checked term (DSL-PIPELINE-MATCH)"
                                        if not rendered else "DIFFERS from the checked term"))
    if report.legal:
        return 0
    return 1 if report.conclusive else EXIT_UNPROVEN


def _rendered_match(problem, config) -> list[str]:
    """DSL-PIPELINE-MATCH on the DSL template rendered now for this configuration (cutegen/dsl_pipeline.py)."""
    from .. import dsl
    from ..dsl_pipeline import check_rendered
    done = dsl._checked(problem, config)
    source = dsl._environment().get_template(dsl.TEMPLATE).render(**dsl.template_context(problem, done))
    return check_rendered(source, problem, done)
