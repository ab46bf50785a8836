#!/usr/bin/env bash
# The GPU half of the differential fuzz campaign (issue 23, part 1): one shard of a plan that
# bench/fuzz_campaign.py made here (the search needs egglog, which the GPU machine lacks).
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh          # CUTLASS headers -> oracles/.cutlass
#                 python bench/fuzz_campaign.py plan --pairs 520 --seed 2026 --out bench/fuzz/seed2026  (committed)
#   device call:  bash bench/gpu_fuzz.sh bench/fuzz/seed2026 1     # carry: ["oracles/.cutlass"]; then 2, 3
#   afterwards:   copy $OUT/cases-shardN.jsonl and summary-shardN.json to bench/fuzz/seed2026/results/ and
#                 python bench/fuzz_campaign.py report bench/fuzz/seed2026 bench/fuzz/seed2026/results
#   cut short?    bash bench/gpu_fuzz.sh bench/fuzz/seed2026 1 bench/fuzz/seed2026/results   # with the earlier
#                 call's files there: renders, builds and runs only the kernels and cases it did not run
#                 (its files are named cases-shard1-HHMMSS.jsonl and summary-shard1-HHMMSS.json: copy them beside
#                 the first call's; the report merges every file)
#
# Phases, each with a budget from the script's start (the whole call ends inside 9 minutes):
#   1. render  the shard's kernels from the plan's configurations (cutegen.render needs jinja2, which
#              torch brings), each checked against the plan's kernel hash
#   2. build   16 nvcc jobs through the cutegen cache ($CUTEGEN_CACHE, outside the tree: a second call on
#              a warm machine starts from cache hits), the kernels with the most cases first; no compile
#              runs past BUILD_END_S (an unbuilt kernel's cases are recorded as not_built; one nvcc
#              failed on is build_failed, with the compiler's message: a legal configuration that does
#              not compile is a finding)
#   3. run     every (problem, launch plan) case of each built kernel through the runner's watchdog
#              worker (validate_case: random inputs, float32 reference, the problem's alpha, beta, batch
#              and leading dimensions, 2 launches on one workspace, each checked); a case that does not
#              answer in CASE_TIMEOUT_S is a hang, the worker is replaced and the run goes on; no case
#              starts after RUN_END_S, and the rest are recorded as not_run
#   4. report  this shard's verdicts and the failures grouped by configuration features
# Files in $OUT (at most 8): log.txt, render.txt, build.txt, run.txt, cases-shardN.jsonl (one record per
# case), summary-shardN.json, report-shardN.json (and -HHMMSS in the names of a resumed call).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN_DIR=${1:?usage: bash bench/gpu_fuzz.sh <plan dir> <shard>}
SHARD=${2:?usage: bash bench/gpu_fuzz.sh <plan dir> <shard>}
DONE=${3:-}     # optional: results (cases-*.jsonl or a folder) of an earlier call: run only what it did not
T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-fuzz-$SHARD}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-330}     # no nvcc runs past this
RUN_END_S=${RUN_END_S:-500}         # no case starts after this
HARD_END_S=${HARD_END_S:-520}       # the run is killed here whatever it is doing
CASE_TIMEOUT_S=${CASE_TIMEOUT_S:-45}
KDIR=${KDIR:-/tmp/cutegen-fuzz-kernels}
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until

# The tree is not installed there: stage_package.sh mirrors pyproject's package mapping on PYTHONPATH.
. "$REPO/bench/stage_package.sh"


phase "environment"
nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,temperature.gpu --format=csv 2>&1 | head -3
nvcc --version | tail -1
"$PY" -c "import sys, torch, jinja2; print('python', sys.version.split()[0], 'torch', torch.__version__, 'jinja2', jinja2.__version__, torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] \
  || echo "gpu_fuzz: CUTLASS headers missing under $CUTEGEN_CUTLASS_INCLUDE (run oracles/prepare_cutlass_headers.sh here and carry oracles/.cutlass)"
[ -f "$PLAN_DIR/plan.json" ] || { echo "gpu_fuzz: no plan at $PLAN_DIR/plan.json"; exit 2; }
"$PY" -c "import cutegen.runner, cutegen.build, cutegen.render" || { echo "gpu_fuzz: cutegen does not import"; exit 2; }

phase "1. render shard $SHARD"
rm -rf "$KDIR"
"$PY" bench/fuzz_campaign.py render "$PLAN_DIR" --shard "$SHARD" --dest "$KDIR" ${DONE:+--done "$DONE"} > "$OUT/render.txt" 2>&1
echo "render exit code $?"; tail -n 5 "$OUT/render.txt"

phase "2. build (jobs $JOBS, no compile past ${BUILD_END_S} s)"
run_until "$BUILD_END_S" "$PY" bench/fuzz_campaign.py build "$PLAN_DIR" --shard "$SHARD" --kernels "$KDIR" \
    --jobs "$JOBS" > "$OUT/build.txt" 2>&1
echo "build exit code $?"
grep -E "kernel directories|FAILED|LEGALITY BUG|^built |^fuzz_campaign" "$OUT/build.txt" | tail -n 20
echo "kernel directories with a library: $(find "$KDIR" -name kernel.so | wc -l) of $(find "$KDIR" -name manifest.json | wc -l)"

phase "3. run the cases (case timeout ${CASE_TIMEOUT_S} s, none started after ${RUN_END_S} s)"
LEFT=$(( RUN_END_S - $(elapsed) )); [ "$LEFT" -lt 1 ] && LEFT=1
run_until "$HARD_END_S" "$PY" bench/fuzz_campaign.py run "$PLAN_DIR" --shard "$SHARD" --kernels "$KDIR" --out "$OUT" \
    --timeout "$CASE_TIMEOUT_S" --deadline "$LEFT" ${DONE:+--done "$DONE"} -q > "$OUT/run.txt" 2>&1
echo "run exit code $?"
grep -vE "^PASS " "$OUT/run.txt" | tail -n 40

phase "4. report of shard $SHARD ($(elapsed) s)"
"$PY" bench/fuzz_campaign.py report "$PLAN_DIR" "$OUT" ${DONE:+"$DONE"} --shard "$SHARD" --json "$OUT/report-shard$SHARD.json"
echo "gpu_fuzz: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1  # let tee finish log.txt
