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


def add_arguments(p) -> None:
    p.add_argument("file", metavar="FILE.json", help='{"problem": {...}, "config": {...}}')
    p.add_argument("--backend", choices=("cutlass", "dsl"), default="cutlass",
                   help="whose pipeline: CUTLASS's PipelineTmaAsync or cutegen's CuTe DSL template")
    p.add_argument("--json", action="store_true", help="print the report as JSON, with counterexample traces")
    p.add_argument("--stages", type=int, default=3, metavar="N",
                   help="explore the protocol with at most N stages (the structural rules read the full term); "
                        "0: the configuration's own")
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
    problem, config = parse_case(data)
    try:
        term, rebuild = pipeline_of(problem, config, args.backend, explore_cluster=args.cluster)
    except IllegalConfig as e:
        raise CutegenError(f"the configuration does not complete: {'; '.join(map(str, e.violations))}") from None
    t0 = time.perf_counter()
    report = check_pipeline(term, bounds=Bounds(stages=args.stages or None), rebuild=rebuild)
    seconds = time.perf_counter() - t0
    if args.json:
        doc = report.to_dict()
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
        for v in report.violations:
            print(f"  {'ILLEGAL' if v.enforced else 'warning'} {v}")
    return 0 if report.legal else 1
