"""The DSL ping-pong kernel on the GPU, with and without the ordering barrier the pipeline checker asks for.

  here:        python bench/dsl_pingpong.py prepare [--out out/dslpp]
               Builds (AOT, no GPU) CuTe DSL ping-pong kernels for problems where every persistent CTA takes
               several tiles and a tile has more k-blocks than the pipeline has stages (the shapes that
               faulted on the H200 on 2026-11-22): each as the template renders it now (``ordered``: with
               ping-pong's PipelineOrder, the term ``cutegen check pipeline --backend dsl`` proves) and, for
               two of them, the protocol mutant without it (``unordered``: the template as it was, which the
               checker rejects with PIPE-READ-BEFORE-LOAD), plus the protocol variants below.
  GPU machine: python -m cutegen.commands.validate out/dslpp --timeout 30 --json $OUT/dslpp_validate.json
               (carry out/dslpp): every kernel validated as `cutegen validate` does (its own size, ragged
               M/N/K, batches, beta != 0, refusal probes) under the watchdog.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

from cutegen import GemmProblem, KernelConfig
from cutegen import dsl
from cutegen.legality.pipeline import check_pipeline
from cutegen.pipelines import pipeline_of

PP = {"mainloop_schedule": "pingpong", "epilogue_schedule": "tma_warp_specialized"}
CASES = (  # name, problem, config
    ("e4m3_8192x3072x1024_128x96x128_1x2", dict(m=8192, n=3072, k=1024, dtype="e4m3", layout="tn"),
     dict(tile_shape=(128, 96, 128), cluster_shape=(1, 2, 1), **PP)),
    ("bf16_4096x4096x4096_128x128x64_1x1", dict(m=4096, n=4096, k=4096, dtype="bf16", layout="tn"),
     dict(tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1), **PP)),
    ("bf16_nt_2048x2048x2048_128x64x64_1x2", dict(m=2048, n=2048, k=2048, dtype="bf16", layout="nt"),
     dict(tile_shape=(128, 64, 64), cluster_shape=(1, 2, 1), **PP)),
    ("bf16_3000x2000x640_64x128x64_2x1_beta", dict(m=3000, n=2000, k=640, dtype="bf16", layout="tn", beta=0.5),
     dict(tile_shape=(64, 128, 64), cluster_shape=(2, 1, 1), **PP)),
)
# Protocol variants of the template's ping-pong (cutegen.pipelines.protocol keys the template renders):
#   unordered  no ordering barrier (the checker's PIPE-READ-BEFORE-LOAD mutant)
#   ordered    the mainloop ordered (depth 1): the template's default
#   epi        the mainloop and the epilogue ordered (depth 2, CUTLASS's OrderedSequenceBarrier<2, 2>)
#   nosmem     as ordered with the no-smem epilogue (no TMA store)
# (2026-11-24, H100: before the template assigned PipelineOrder.arrive's state back, every variant hung or
# faulted; the DSL did not carry the state across the tile loop. bench/results/2026-11-24-*-dslpp-*.)
VARIANTS = {
    "unordered": (dict(ordering=False), {}),
    "ordered": (dict(ordering=True, order_epilogue=False), {}),
    "epi": (dict(ordering=True, order_epilogue=True), {}),
    "nosmem": (dict(ordering=True, order_epilogue=False), {"epilogue_schedule": "no_smem"}),
}


def prepare(out: Path, variants: list[str], cases: list[str] | None = None) -> dict:
    plan = {}
    for name, pd, cd in CASES:
        if cases and name not in cases:
            continue
        for label in variants:
            keys, overrides = VARIANTS[label]
            problem, config = GemmProblem.from_dict(pd), KernelConfig.from_dict({**cd, **overrides})
            term, rebuild = pipeline_of(problem, config, "dsl", ordering=keys["ordering"])
            verdict = check_pipeline(term, rebuild=rebuild)
            real = dsl._pipeline_protocol
            patched = (lambda p, c, b="dsl", _k=keys: dict(real(p, c, b), **_k))
            with mock.patch.object(dsl, "_pipeline_protocol", patched):
                so = dsl.build_dsl(problem, config, out / f"{name}_{label}")
            plan[f"{name}_{label}"] = {"library": str(so), "variant": label, **keys,
                                       "checker_legal": verdict.legal,
                                       "checker_rules": [v.rule_id for v in verdict.violations]}
            print(f"{name}_{label}: built; checker {'legal' if verdict.legal else 'ILLEGAL'} "
                  f"{[v.rule_id for v in verdict.violations]}", flush=True)
    (out / "plan.json").write_text(json.dumps(plan, indent=1, sort_keys=True))
    return plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("prepare",))
    ap.add_argument("--out", default="out/dslpp")
    ap.add_argument("--variants", default="ordered,epi,nosmem", help=f"comma list of {', '.join(VARIANTS)}")
    ap.add_argument("--cases", default="", help="comma list of case names (default: all)")
    args = ap.parse_args(argv)
    prepare(Path(args.out), args.variants.split(","), [c for c in args.cases.split(",") if c] or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
