#!/usr/bin/env bash
# Where the time goes (issues 25 and 26): Nsight Compute on the grouped GEMM and attention targets that miss,
# their peers and the dense ceiling, inside 4 minutes of wall time (bench/ncu_profile.py does the work).
#
#   here, once:   bash bench/gpu_ncu.sh --plan                  # search + render the picks -> out/profile-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_ncu.sh
#                 carry: [".carry", "out/profile-plan"]
#
# On the device:
#   1. build    the plan's 8 kernels (4 grouped picks, the attention picks and the CUTLASS 88 example's kernels),
#               JOBS nvcc jobs in the background, none past BUILD_END_S
#   2. metrics  which of the optional ncu metrics this ncu knows (a metric it does not know would stop ncu), and
#               one profiled marker kernel with the final list (else the safe list)
#   3. peers    while the build runs: torch.matmul at 8192^3 and DeepSeek-V3-like expert sizes, torch._grouped_mm on
#               the 8 grouped cases, SDPA cuDNN on the 2 attention shapes: timed with CUDA events, then each call
#               profiled once under ncu (--profile-from-start off: one marker kernel and one call per target)
#   4. cutegen  after the build: the grouped picks through the op and the attention kernels, profiled the same way,
#               then timed with CUDA events if time is left
#   5. summary  profile.json and profile.md (bench/ncu_profile.py summarize)
# MODE=compare (plan: bash bench/gpu_ncu.sh --plan-compare, carry out/profile-compare): the changed grouped picks,
# their runners-up and the old picks built, validated on the ragged cases and timed against torch._grouped_mm, the
# loop of torch.matmul and padded bmm in one process (bench/grouped_moe.py run); files log.txt, compare.json, compare.md.
# Files: $OUT/profile/{log.txt,profile.json,profile.md}. ncu runs with --clock-control none (the clocks as found)
# and flushes the caches before each replayed pass.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/profile-plan}

if [ "${1:-}" = "--plan-compare" ]; then
  # the second mode's plan: this tree's grouped picks beside the old ones (bench/grouped_compare.py)
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"
  "$PY" bench/grouped_compare.py plan --out "${PLAN_COMPARE:-out/profile-compare}" ${COMPARE_ARGS:-}   # e.g. "--cases other --top-k 1"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"
  "$PY" -c "import jinja2, egglog" || { echo "gpu_ncu --plan: needs jinja2 and egglog (the e-graph search); set PYTHON"; exit 2; }
  "$PY" bench/ncu_profile.py plan --out "$PLAN"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT_DIR=${OUT:-$REPO/out/gpu-ncu}/profile
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-14}                         # two cores left for the peers' profile that runs beside the build
BUILD_END_S=${BUILD_END_S:-150}          # every nvcc is killed by then
PROFILE_END_S=${PROFILE_END_S:-200}      # no cutegen target starts its profile after this
HARD_LIMIT_S=${HARD_LIMIT_S:-225}        # ncu is stopped here whatever it is doing; the summary follows
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -n 1)}

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv 2>&1 | head -3
nvcc --version | tail -1
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
if [ "${MODE:-profile}" != "compare" ]; then
  [ -n "$NCU" ] && "$NCU" --version | tail -n 1 || { echo "gpu_ncu: no ncu on this machine"; exit 2; }
  [ -f "$PLAN/plan.json" ] || { echo "gpu_ncu: no plan at $PLAN (run 'bash bench/gpu_ncu.sh --plan' there and carry $PLAN)"; exit 2; }
fi
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_ncu: CUTLASS headers missing (carry .carry and untar it into oracles/.cutlass)"
"$PY" -c "import cutegen.build, cutegen.ops.grouped_gemm.torch_op, cutegen.ops.attention.torch_op" || { echo "gpu_ncu: cutegen does not import"; exit 2; }

if [ "${MODE:-profile}" = "compare" ]; then
  # MODE=compare: the changed grouped picks against the old ones and torch._grouped_mm, validated and timed in one
  # process (bench/grouped_moe.py run on bench/grouped_compare.py's plan). Files: log.txt, compare.json, compare.md.
  CPLAN=${PLAN_COMPARE:-out/profile-compare}
  [ -f "$CPLAN/plan.json" ] || { echo "gpu_ncu: no plan at $CPLAN (bash bench/gpu_ncu.sh --plan-compare; carry it)"; exit 2; }
  phase "1. build the compare plan (jobs ${JOBS_COMPARE:-16}, none past ${BUILD_END_S} s)"
  sed "s|^|$CPLAN/|" "$CPLAN/build_order.txt" > "$STAGE/cdirs.txt"
  cat > "$STAGE/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=int(sys.argv[3]))
print(summary.line())
PYEOF
  run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "${JOBS_COMPARE:-16}" "$STAGE/cdirs.txt" "$BUILD_END_S" > "$STAGE/build.txt" 2>&1
  grep -E "FAILED|error|built " "$STAGE/build.txt" | tail -n 12
  echo "libraries: $(ls "$CPLAN"/kernels/*/kernel.so 2> /dev/null | wc -l) of $(wc -l < "$STAGE/cdirs.txt")"
  phase "2. validate and time (no case starts after ${PROFILE_END_S} s)"
  LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
  timeout --kill-after=10 "$LEFT" "$PY" bench/grouped_moe.py run "$CPLAN" --json "$OUT_DIR/compare.json" \
    --deadline $(( PROFILE_END_S - $(elapsed) )) > "$STAGE/run.txt" 2>&1
  echo "run exit code $?"
  grep -E "^validate .*FAIL|^op |^probes " "$STAGE/run.txt" | head -n 12
  echo "validated: $(grep -c '^validate .* PASS' "$STAGE/run.txt") pass, $(grep -c '^validate .* FAIL' "$STAGE/run.txt") fail"
  grep -vE "^validate |^probes " "$STAGE/run.txt" | tail -n 60
  phase "3. summary"
  [ -f "$OUT_DIR/compare.json" ] && "$PY" bench/grouped_compare.py summarize "$CPLAN" "$OUT_DIR/compare.json" --out "$OUT_DIR/compare.md"
  phase "done ($(elapsed) s); files: $(cd "$OUT_DIR" && ls | tr '\n' ' ')"
  exit 0
fi

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s), in the background"
sed "s|^|$PLAN/|" "$PLAN/dirs.txt" > "$STAGE/dirs.txt"
cat > "$STAGE/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=int(sys.argv[3]))
print(summary.line())
PYEOF
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$STAGE/dirs.txt" "$BUILD_END_S" > "$STAGE/build.txt" 2>&1 &
BUILD_PID=$!

phase "2. the metric list"
timeout 60 "$NCU" --query-metrics --csv > "$STAGE/query.txt" 2>&1
METRICS=$("$PY" bench/ncu_profile.py metrics "$STAGE/query.txt")
SAFE=$("$PY" bench/ncu_profile.py metrics)
SECTIONS=$("$PY" bench/ncu_profile.py sections)
NCU_OPTS="--profile-from-start off --clock-control none --cache-control all --replay-mode kernel $SECTIONS"
cat > "$STAGE/marker.py" <<'PYEOF'
import torch
torch.cuda.profiler.start(); torch.cuda._sleep(1000); torch.cuda.synchronize(); torch.cuda.profiler.stop()
PYEOF
metrics_ok() {   # metrics_ok LIST: ncu profiles the marker kernel with these metrics without an error
  timeout 40 "$NCU" $NCU_OPTS --metrics "$1" "$PY" "$STAGE/marker.py" > "$STAGE/check.txt" 2>&1 \
    && ! grep -q "==ERROR==" "$STAGE/check.txt" && grep -q "spin_kernel" "$STAGE/check.txt"
}
if metrics_ok "$METRICS"; then
  echo "metrics: $METRICS"
else
  echo "the metric list failed; trying the optional ones one at a time:"; grep -m 3 "ERROR" "$STAGE/check.txt"
  ALL=$METRICS
  if metrics_ok "$SAFE"; then
    METRICS=$SAFE
    for m in $(echo "$ALL" | tr ',' '\n' | grep -vxF -f <(echo "$SAFE" | tr ',' '\n')); do
      metrics_ok "$METRICS,$m" && METRICS="$METRICS,$m"
    done
  elif metrics_ok gpu__time_duration.sum; then
    METRICS=gpu__time_duration.sum
  else
    echo "ncu cannot profile here:"; tail -n 5 "$STAGE/check.txt"; NO_NCU=1
  fi
  echo "metrics: $METRICS"
fi

profile() {   # profile SET END_S: the set's workload under ncu, then its raw page as CSV
  local set=$1 end=$2
  local left=$(( end - $(elapsed) ))
  [ -n "${NO_NCU:-}" ] && return
  [ "$left" -lt 20 ] && { echo "no time left to profile $set"; return; }
  timeout --signal=INT --kill-after=15 $(( HARD_LIMIT_S - $(elapsed) )) \
    "$NCU" $NCU_OPTS --metrics "$METRICS" --export "$STAGE/$set" --force-overwrite \
    "$PY" bench/ncu_profile.py workload "$PLAN" --set "$set" --manifest "$STAGE/$set.json" --deadline "$(( left - 10 ))" \
    > "$STAGE/$set-ncu.txt" 2>&1
  echo "ncu $set exit code $?"
  grep -E "==ERROR==|Error|error:" "$STAGE/$set-ncu.txt" | head -n 8
  grep -c "^profiled " "$STAGE/$set-ncu.txt" | sed "s/^/targets profiled: /"
  if [ -f "$STAGE/$set.ncu-rep" ]; then
    "$NCU" --import "$STAGE/$set.ncu-rep" --csv --page raw --print-units base > "$STAGE/$set.csv" 2> "$STAGE/$set-import.txt"
    echo "$(wc -l < "$STAGE/$set.csv") CSV lines"
  fi
}

phase "3. peers beside the build: CUDA events, then ncu"
timeout 60 "$PY" bench/ncu_profile.py workload "$PLAN" --set peers --time --manifest "$STAGE/peers-time.json" --deadline 35 \
  > "$STAGE/peers-time.txt" 2>&1
echo "peers timing exit code $?"; tail -n 14 "$STAGE/peers-time.txt"
profile peers "$BUILD_END_S"

phase "wait for the build"
wait "$BUILD_PID"
grep -E "FAILED|error|built " "$STAGE/build.txt" | tail -n 12
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l) of $(wc -l < "$STAGE/dirs.txt")"

phase "4. cutegen's kernels under ncu (no target starts after ${PROFILE_END_S} s)"
profile cutegen "$PROFILE_END_S"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
if [ "$LEFT" -gt 25 ]; then
  timeout "$LEFT" "$PY" bench/ncu_profile.py workload "$PLAN" --set cutegen --time --manifest "$STAGE/cutegen-time.json" \
    --deadline $(( LEFT - 15 )) > "$STAGE/cutegen-time.txt" 2>&1
  echo "cutegen timing exit code $?"; tail -n 12 "$STAGE/cutegen-time.txt"
fi

phase "5. summary"
ARGS=()
for set in peers cutegen; do
  [ -f "$STAGE/$set.json" ] && ARGS+=(--manifest "$STAGE/$set.json" --csv "$STAGE/$set.csv")
done
for t in peers-time cutegen-time; do [ -f "$STAGE/$t.json" ] && ARGS+=(--timing "$STAGE/$t.json"); done
if [ ${#ARGS[@]} -gt 0 ]; then
  "$PY" bench/ncu_profile.py summarize "${ARGS[@]}" --out "$OUT_DIR"
else
  echo "nothing was profiled"
fi
phase "done ($(elapsed) s); files: $(cd "$OUT_DIR" && ls | tr '\n' ' ')"
sleep 1
