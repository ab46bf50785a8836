#!/usr/bin/env bash
# GEMM suites on the H200 (issue 24, "Measure"): the first pick, the tuned pick, the CUTLASS default and cuBLAS, every
# kernel validated before it is timed, one process for the timing. One device call per plan ("chunk").
#
#   here (egglog), once:  bash oracles/prepare_cutlass_headers.sh   (the lead's .carry/cutlass.tgz holds the same)
#   here, per chunk:      bash bench/gpu_suites.sh --plan --suite bench/midsize.toml              -> out/suites-plan-midsize
#                         bash bench/gpu_suites.sh --plan --suite bench/llm.toml --chunk 1/2      -> out/suites-plan-llm-1of2
#                         bash bench/gpu_suites.sh --plan --suite bench/midsize.toml --suite bench/llm.toml \
#                             --tune-worst 8 --from R1.json R2.json                              -> out/suites-plan-midsize+llm-tune
#                         (every option of `python bench/suites.py plan --help`; it prints the build estimate)
#   device call:          mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && \
#                         bash bench/gpu_suites.sh out/suites-plan-midsize
#                         carry: [".carry", "out/suites-plan-midsize"]
#   here, after:          python bench/suites.py report R1.json R2.json ... --json merged.json --png ratios.png
#
# On the device, each phase has a deadline measured from the script's start (BUDGET_S scales them all; default 530 s):
#   1. build     every kernel of the plan with $JOBS nvcc through the cutegen cache, each distinct source once
#                (first picks first, then the defaults, then tune candidates by rank); no compile starts after
#                BUILD_END_S; what is not built is reported, not timed
#   2. validate  every built kernel (`cutegen validate`: own size, ragged M/N/K, beta != 0, batch 2 and 3 with padded
#                strides, a sub-tile problem, every launch plan a stream-K kernel allows, split-K-reduce slices and
#                relaunches, refusal probes); no kernel starts after VALIDATE_END_S
#   3. time      `bench/suites.py time`: cuBLAS's kernel names (torch.profiler), then per problem every kernel that
#                passed validation with cuBLAS in one worker process (CUDA events, median, inputs rotated over 4x L2,
#                each verified against float32 first); no problem starts after TIME_END_S; killed at HARD_LIMIT_S.
#                The results JSON and records are rewritten after every problem.
# Files under $OUT/suites/ (3): log.txt, <label>.json (device, driver, versions, date; per problem the times, ratios,
# validation, cuBLAS's kernel, each kernel's configuration), <label>-records.jsonl (`cutegen db import` reads it).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

if [ "${1:-}" = "--plan" ]; then
  shift
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  "$PY" -c "import cutegen.search" || { echo "gpu_suites --plan: needs cutegen with egglog; set PYTHON"; exit 2; }
  exec "$PY" bench/suites.py plan "$@"
fi

PLAN=${1:-${PLAN:-}}
[ -n "$PLAN" ] || { echo "usage: bash bench/gpu_suites.sh PLAN_DIR   (make one with: bash bench/gpu_suites.sh --plan ...)"; exit 2; }
PLAN=${PLAN%/}
T0=$(date +%s)
OUT_ROOT=${OUT:-$REPO/out/gpu-suites}
OUTD=$OUT_ROOT/suites
mkdir -p "$OUTD"
exec > >(tee "$OUTD/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-530}
BUILD_END_S=${BUILD_END_S:-$(( BUDGET_S * 55 / 100 ))}       # no compile starts after this
VALIDATE_END_S=${VALIDATE_END_S:-$(( BUDGET_S * 68 / 100 ))} # no kernel starts validating after this
TIME_END_S=${TIME_END_S:-$(( BUDGET_S * 93 / 100 ))}         # no problem starts timing after this
HARD_LIMIT_S=${HARD_LIMIT_S:-$BUDGET_S}                      # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
export CUTEGEN_RESULTS_DB=${CUTEGEN_RESULTS_DB:-/tmp/cutegen-suites-$T0.sqlite}   # nothing reaches the user's database
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
GPU_SCRIPT=gpu_suites
. "$REPO/bench/stage_package.sh"
left() { local s=$(( $1 - $(elapsed) )); [ "$s" -lt 1 ] && s=1; echo "$s"; }

phase "environment (budget ${BUDGET_S} s: build until ${BUILD_END_S}, validate until ${VALIDATE_END_S}, time until ${TIME_END_S})"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_suites: CUTLASS headers missing under $CUTEGEN_CUTLASS_INCLUDE (carry .carry and untar it)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_suites: no plan at $PLAN (bash bench/gpu_suites.sh --plan ... here, carry it)"; exit 2; }
"$PY" -c "import cutegen.runner, cutegen.build, cutegen.commands.validate, cutegen.tuning.gpu" || { echo "gpu_suites: cutegen does not import"; exit 2; }
LABEL=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['label'])" "$PLAN/plan.json") || { echo "gpu_suites: unreadable plan"; exit 2; }
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('plan', d.get('label'), 'made', d.get('created'), 'at', d.get('commit')); print(d.get('ranking')); print('estimate', d.get('estimate'))" "$PLAN/plan.json"

phase "1. build (jobs $JOBS, no compile starts after ${BUILD_END_S} s)"
run_until "$(( BUILD_END_S + 120 ))" "$PY" bench/suites.py build "$PLAN" --jobs "$JOBS" --deadline "$(left "$BUILD_END_S")" \
    --json "$STAGE/build.json" > "$STAGE/build.txt" 2>&1
echo "build exit code $?"
grep -E "^build:|FAILED|LEGALITY BUG|deadline|error" "$STAGE/build.txt" | head -n 40

phase "2. validate (no kernel starts after ${VALIDATE_END_S} s)"
mapfile -t DIRS < <("$PY" bench/suites.py dirs "$PLAN" --built)
echo "${#DIRS[@]} built kernel directories"
if [ ${#DIRS[@]} -gt 0 ]; then
  run_until "$(( VALIDATE_END_S + 60 ))" "$PY" -m cutegen.commands.validate "${DIRS[@]}" --quiet --timeout 45 --workers 3 \
      --deadline "$(left "$VALIDATE_END_S")" --json "$STAGE/validate.json"
  echo "validate exit code $?"
fi

phase "3. time with cuBLAS (no problem starts after ${TIME_END_S} s; killed at ${HARD_LIMIT_S} s)"
timeout --signal=TERM --kill-after=10 "$(left "$HARD_LIMIT_S")" \
  "$PY" bench/suites.py time "$PLAN" --build "$STAGE/build.json" --validate "$STAGE/validate.json" \
      --json "$OUTD/$LABEL.json" --records "$OUTD/$LABEL-records.jsonl" --deadline "$(left "$TIME_END_S")" --timeout 90
echo "time exit code $?"

phase "4. summary"
[ -f "$STAGE/validate.json" ] && "$PY" - "$STAGE/validate.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"validate: {s['kernels']} kernels, {len(s['pass'])} pass, {len(s['fail'])} fail, {len(s['hang'])} hang, "
      f"{len(s['crash'])} crash, {len(s['skipped'])} skipped; cases {s['cases_passed']}/{s['cases_run']}, "
      f"probes {s['probes_agreed']}/{s['probes']}, max rel err {s['max_rel_err']}")
for v in ("fail", "hang", "crash", "skipped"):
    for k in s[v]:
        print(f"  {v}: {k}")
EOF
echo "gpu_suites: done in $(elapsed) s; files: $(cd "$OUTD" && ls | tr '\n' ' ')"
sleep 1
