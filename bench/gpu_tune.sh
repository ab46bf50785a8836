#!/usr/bin/env bash
# `cutegen tune` on the language-model suite, on the GPU machine, in one call inside 8 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh        # CUTLASS headers -> oracles/.cutlass
#                 bash bench/gpu_tune.sh --plan                  # search + render (+ DSL twins) -> out/tune-plan
#   device call:  bash bench/gpu_tune.sh                         # carry: ["oracles/.cutlass", "out/tune-plan"]
#
# The plan is made here because the search needs egglog (not on the GPU machine), nvMMH's pick needs
# nvidia-matmul-heuristics and the DSL twins need the CuTe DSL (both only here). Suite: bench/llm.toml when
# it exists, else bench/tune_llm_subset.toml (Llama-3.1-8B/70B projections, x @ W^T, bf16 TN, M = 1, 16,
# 128, 2048). The search ranks for DEVICE_KIND (default h100-sxm) as `cutegen search --device` does: learned
# from the results database where it has measurements. Per problem the plan holds the search's top TOP_K (default 4: about 65 distinct kernels for
# the 32-problem subset, what 16 nvcc jobs build in about 5 minutes), nvMMH's first legal pick and the
# CUTLASS 128x256x64 default. SCREEN=dsl gives the screenable ones a DSL twin (`cutegen.tuning.screening`);
# it is off by default because on this suite it saves little: only the M = 2048 problems are screenable,
# and their candidates' kernels are mostly the same kernels the M = 128 problems need (counted on the
# 32-problem subset at k = 4: 65 distinct kernels, 59 of them needed by unscreened candidates), while each
# twin's link waits for the machine-wide nvcc lock here.
#
# On the device: `cutegen tune --from-plan` builds (16 nvcc jobs, first picks first, no compile batch
# started after BUILD_DEADLINE_S), times every problem's candidates with cuBLAS in one process (each
# verified against a float32 reference first; no problem started after TIME_DEADLINE_S), validates the
# winner like `cutegen validate`, records everything in a fresh results database and writes the winners.
# Files in $OUT (at most 8): log.txt, tune.txt (its output), tune.json (outcomes, ratios, failures), records.jsonl (every
# measurement: `cutegen db import` reads it), curve.txt and curve.json (the tuning curve of this run),
# plan-summary.txt (what was planned).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/tune-plan}
TOP_K=${TOP_K:-4}
SCREEN=${SCREEN:-none}   # dsl: DSL twins for the screenable candidates (needs the CuTe DSL here; see below)
SUITE=${SUITE:-$([ -f bench/llm.toml ] && echo bench/llm.toml || echo bench/tune_llm_subset.toml)}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  "$PY" -c "import cutegen.search, nvMatmulHeuristics" || { echo "gpu_tune --plan: needs cutegen with egglog and "\
      "nvidia-matmul-heuristics (pip install -e '.[heuristics]'); set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  exec "$PY" -m cutegen.commands.tune --suite "$SUITE" --top-k "$TOP_K" --plan-only --screen "$SCREEN" \
      --device-kind "${DEVICE_KIND:-h100-sxm}" --workdir "$PLAN" --quiet
fi

T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
OUT=${OUT:-$REPO/out/gpu-tune}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_DEADLINE_S=${BUILD_DEADLINE_S:-200}   # no nvcc batch (32 distinct kernels, about 2 minutes on 16 cores) starts later
TIME_DEADLINE_S=${TIME_DEADLINE_S:-430}     # no problem starts timing later
HARD_LIMIT_S=${HARD_LIMIT_S:-470}           # tune is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
export CUTEGEN_RESULTS_DB=${CUTEGEN_RESULTS_DB:-/tmp/cutegen-tune-$T0.sqlite}   # fresh: nothing answered from it
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
phase() { echo; echo "=== [$(elapsed) s] $*"; }

. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_tune: no CUTLASS headers under $CUTEGEN_CUTLASS_INCLUDE (carry oracles/.cutlass)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_tune: no plan at $PLAN (run 'bash bench/gpu_tune.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" - "$PLAN" > "$OUT/plan-summary.txt" <<'EOF'
import sys
from collections import Counter
from cutegen.tuning import Plan
plan = Plan.load(sys.argv[1])
kinds = Counter(c.origin for p in plan.problems for c in p.candidates)
hashes = {c.kernel_hash for p in plan.problems for c in p.candidates}
twins = sum(1 for p in plan.problems for c in p.candidates if c.dsl_directory)
print(f"plan: {len(plan.problems)} problems, top {plan.top_k}, nvMMH for {plan.device_kind}; candidates {dict(kinds)}; "
      f"{len(hashes)} distinct kernels; {twins} DSL twins (finalists per problem: {plan.finalists})")
for p in plan.problems:
    print(f"  {p.name}: " + ", ".join(f"{c.name} {c.config.short_name()}{' +dsl' if c.dsl_directory else ''}"
                                      for c in p.candidates) + "".join(f"\n    note: {n}" for n in p.notes))
EOF
head -1 "$OUT/plan-summary.txt"
"$PY" -c "import cutegen.tuning.measure, cutegen.tuning.gpu, cutegen.commands.tune, cutegen.results" \
  || { echo "gpu_tune: cutegen does not import"; exit 2; }

phase "tune (jobs $JOBS; no compile batch after ${BUILD_DEADLINE_S} s, no problem timed after ${TIME_DEADLINE_S} s)"
left() { local s=$(( $1 - $(elapsed) )); [ "$s" -lt 1 ] && s=1; echo "$s"; }
timeout --signal=TERM --kill-after=10 "$(left "$HARD_LIMIT_S")" \
  "$PY" -m cutegen.commands.tune --from-plan "$PLAN" -o /tmp/cutegen-tuned --jobs "$JOBS" \
      --build-deadline "$(left "$BUILD_DEADLINE_S")" --deadline "$(left "$TIME_DEADLINE_S")" \
      --timeout 90 --force --records "$OUT/records.jsonl" --summary "$OUT/tune.json" --quiet > "$OUT/tune.txt" 2>&1
echo "tune exit code $?"
grep -E "FAILED|LEGALITY BUG|deadline|FAIL |NONE |SKIP |error" "$OUT/tune.txt" | head -n 30

phase "records and the tuning curve"
# If tune was cut short, its per-problem transactions are in the database: export them.
[ -s "$OUT/records.jsonl" ] || "$PY" - "$OUT/records.jsonl" <<'EOF'
import json, sys
from cutegen.results import ResultsDB
ms = [m for m in ResultsDB(seed=None).measurements() if m.source.startswith("cutegen-tune")]
open(sys.argv[1], "w").write("".join(json.dumps(m.to_dict(), sort_keys=True) + "\n" for m in ms))
print(f"exported {len(ms)} measurements from the database")
EOF
echo "records: $(wc -l < "$OUT/records.jsonl") measurements"
"$PY" bench/tuning_curve.py --db "$CUTEGEN_RESULTS_DB" --no-seed --ks 1,2,4,8 --json "$OUT/curve.json" \
  | tee "$OUT/curve.txt"

phase "summary ($(elapsed) s)"
sed -n '/^problem /,$p' "$OUT/tune.txt"
echo "gpu_tune: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1  # let tee finish log.txt
