"""`cutegen check pipeline FILE.json`: the temporal contract of one kernel's TMA/mbarrier pipeline.

FILE.json is ``{"problem": {...}, "config": {...}}`` as for ``cutegen check config``; a problem with
``"op": "attention"`` checks the FMHA kernel's protocol instead (``check_pipeline_attention``). The pipeline the
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
# The whole cluster is explored at the kernel's own stage count (0) unless told otherwise: with the stubborn sets of
# legality/pipeline_stubborn.py a 2x1 cooperative cluster at its 4 stages is ~8,000 states, seconds (NOTES.md,
# issue 23 part 2; it was 600,000+ states and UNPROVEN before).
CLUSTER_STAGES = 0


def add_arguments(p) -> None:
    p.add_argument("file", metavar="FILE.json", help='{"problem": {...}, "config": {...}}; a problem with "op": '
                   '"attention" checks the FMHA kernel (its rules and its K/V, Q and order-barrier protocol)')
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
                   help="explore every CTA of the cluster too: the one-CTA exploration at --stages, plus every "
                        "interleaving of all the cluster's CTAs at --cluster-stages (with the symmetry and "
                        "partial-order reductions)")
    p.add_argument("--cluster-stages", type=int, default=CLUSTER_STAGES, metavar="N",
                   help="the stage count the whole cluster is explored at (default 0: the configuration's own, "
                        "every interleaving of every CTA's roles; a smaller N explores a smaller protocol and proves "
                        "nothing about the kernel's own stage count)")


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
    if args.cluster_stages < 0:
        raise FieldError("--cluster-stages", f"{args.cluster_stages} is negative")
    if args.max_states < 1:
        raise FieldError("--max-states", f"{args.max_states} is not positive")
    if isinstance(data, dict) and isinstance(data.get("problem"), dict) and data["problem"].get("op") == "attention":
        from .check_pipeline_attention import run_attention
        return run_attention(args, data)
    problem, config = parse_case(data)
    try:
        term, rebuild = pipeline_of(problem, config, args.backend)
        whole = pipeline_of(problem, config, args.backend, explore_cluster=True)[1] if args.cluster else None
    except IllegalConfig as e:
        raise CutegenError(f"the configuration does not complete: {'; '.join(map(str, e.violations))}") from None
    rendered = _rendered_match(problem, config) if args.backend == "dsl" else None
    t0 = time.perf_counter()
    report = check_pipeline(term, bounds=Bounds(stages=args.stages or None, max_states=args.max_states),
                            rebuild=rebuild)
    if whole is not None and term.ctas > 1:
        report = report.merged(check_pipeline(term, bounds=Bounds(stages=args.cluster_stages or None,
                                                                  max_states=args.max_states, reduce=True),
                                              rebuild=whole))
    companions = _companion_checks(problem, config, args.backend)
    for v in companions["violations"]:
        report.violations.append(v)
    seconds = time.perf_counter() - t0
    if rendered:
        from ..legality.rule import Violation
        report.violations.insert(0, Violation("DSL-PIPELINE-MATCH", rendered[0].split(": ", 1)[1], True, "pipeline"))
    if args.json:
        doc = report.to_dict()
        doc["rendered_kernel"] = {"checked": rendered is not None, "matches": not rendered}
        doc["seconds"] = round(seconds, 3)
        doc["term"] = {k: v for k, v in term.meta.items()}
        doc["epilogue_store"] = companions["epilogue"]
        doc["stream_k_fixup"] = companions["fixup"]
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        meta = term.meta
        print(f"{meta.get('config')} ({meta.get('backend')}): {meta['stages']} stages, "
              f"{'ping-pong' if meta['pingpong'] else str(meta['consumers']) + ' consumer warpgroup(s)'}, "
              f"cluster {meta['cluster'][0]}x{meta['cluster'][1]}; explored "
              + "; ".join(f"{', '.join(str(e['k_blocks']) for e in group)} k-blocks per tile "
                          f"({group[0]['stages']} stages, {group[0]['tiles']} tiles, "
                          f"{'every CTA' if group[0]['cluster'] != [1, 1] and meta['cluster'] != [1, 1] else 'one CTA'}"
                          ")"
                          for group in _groups(report.explored))
              + f" in {report.states} states, {seconds:.2f} s")
        if report.legal:
            print("pipeline: no deadlock, race or miscount in any interleaving of the explored terms")
        elif not report.conclusive:
            print(f"pipeline: UNPROVEN: the exploration stopped at its bound ({args.max_states} states per explored "
                  "term) before covering every interleaving; no structural rule is broken, but nothing is claimed "
                  "about deadlocks, races or run-time arrival counts (raise --max-states, or lower --stages or "
                  "--cluster-stages)")
        for v in report.violations:
            label = "UNPROVEN" if v.rule_id == "PIPE-BOUND" else "ILLEGAL" if v.enforced else "warning"
            print(f"  {label} {v}")
    if not args.json:
        if companions["epilogue"]:
            e = companions["epilogue"]
            print(f"epilogue TMA store: {e['groups']} store group(s), {e['stages_d']} D buffer(s), {e['subtiles']} "
                  f"subtile(s) per tile: " + ("buffers reused only after wait_group.read and the group barrier; "
                                              "fenced before every store; drained" if e["legal"] else "RULE BROKEN"))
        if companions["fixup"]:
            f = companions["fixup"]
            print(f"stream-K fix-up (deterministic and non-deterministic reduction, every order of splits of "
                  f"{', '.join(map(str, f['splits']))} k-tiles): "
                  f"{f['states']} states, " + ("every partial released and acquired before it is read"
                                               if f["legal"] else "RULE BROKEN"))
    if args.backend == "dsl" and not args.json:
        print("rendered DSL kernel: " + ("its pipeline, read back, is the checked term (DSL-PIPELINE-MATCH)"
                                        if not rendered else "DIFFERS from the checked term"))
    if report.legal:
        return 0
    return 1 if report.conclusive else EXIT_UNPROVEN


# The split tiles the stream-K fix-up is explored on: two splits, three of uneven k-tile counts (a middle split
# that waits, reads, adds and signals), and four (two middle splits, which the non-deterministic reduction lets add
# in either order). The protocol does not depend on the kernel's shape; a launch plan picks the reduction mode
# (LaunchPlan.reduction), so both are explored.
FIXUP_SPLITS = ((1, 1), (2, 1, 3), (2, 1, 3, 1))


def _companion_checks(problem, config, backend: str) -> dict:
    """The epilogue's TMA-store rules (EPI-STORE-*) on the kernel's store groups, and for a stream-K CUTLASS
    kernel the fix-up flags (SK-FIXUP-*) over every interleaving of its splits."""
    from ..collective_builder import complete
    from ..legality.epilogue_store import EPILOGUE_STORE_RULES
    from ..legality.rule import Violation
    from ..legality.stream_k_fixup import check_fixup, deterministic_fixup, nondeterministic_fixup
    from ..pipelines import epilogue_store_of
    from dataclasses import replace
    out: dict = {"violations": [], "epilogue": None, "fixup": None}
    groups = epilogue_store_of(problem, config, backend)
    seen = set()
    for name, g in groups.items():
        g = replace(g, meta=dict(g.meta, peers={n: o for n, o in groups.items() if n != name}))
        for v in EPILOGUE_STORE_RULES.evaluate(g):
            if v.rule_id not in seen:
                seen.add(v.rule_id)
                out["violations"].append(Violation(v.rule_id, f"{name}'s store group: {v.reason}", True, v.contract))
    read_back = None
    if backend == "cutlass":
        # the model's D buffers, epilogue tile and subtiles against what the freshly rendered kernel asserts (and nvcc
        # checks against CUTLASS's epilogue builder); the DSL's epilogue is read back by DSL-PIPELINE-MATCH
        from ..collective_builder import complete
        from ..pipelines import epilogue_model_mismatch
        from ..render import render_source
        mismatch = epilogue_model_mismatch(problem, config, render_source(problem, complete(problem, config), "cutlass"))
        read_back = mismatch is None
        if mismatch is not None:
            seen.add("EPI-STORE-MODEL-MATCH")
            out["violations"].append(Violation("EPI-STORE-MODEL-MATCH", f"the epilogue the verifier checks is not the "
                                               f"rendered kernel's: {mismatch}", True, "pipeline"))
    if groups:
        first = next(iter(groups.values()))
        out["epilogue"] = {"groups": len(groups), "stages_d": first.buffers, "subtiles": first.meta["subtiles"],
                           "legal": not seen}
        if read_back is not None:
            out["epilogue"]["matches_rendered_kernel"] = read_back
    if complete(problem, config).tile_scheduler == "stream_k" and backend == "cutlass":
        states, legal, seen_rules = 0, True, set()
        for build in (deterministic_fixup, nondeterministic_fixup):
            for splits in FIXUP_SPLITS:
                violations, exploration = check_fixup(build(splits))
                states += exploration.states
                for v in violations:
                    legal = False
                    if v.rule_id not in seen_rules:
                        seen_rules.add(v.rule_id)
                        out["violations"].append(v)
        out["fixup"] = {"splits": [list(s) for s in FIXUP_SPLITS], "reductions": ["deterministic", "nondeterministic"],
                        "states": states, "legal": legal}
    return out


def _groups(explored: list) -> list[list]:
    """The explored terms grouped by (stages, tiles, cluster), in order."""
    groups: list[list] = []
    for e in explored:
        if groups and all(groups[-1][0][k] == e[k] for k in ("stages", "tiles", "cluster")):
            groups[-1].append(e)
        else:
            groups.append([e])
    return groups


def _rendered_match(problem, config) -> list[str]:
    """DSL-PIPELINE-MATCH on the DSL template rendered now for this configuration (cutegen/dsl_pipeline.py)."""
    from .. import dsl
    from ..dsl_pipeline import check_rendered
    done = dsl._checked(problem, config)
    source = dsl._environment().get_template(dsl.TEMPLATE).render(**dsl.template_context(problem, done))
    return check_rendered(source, problem, done)
