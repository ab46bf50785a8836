#!/usr/bin/env bash
# GPU run of grouped GEMM for MoE (issue 26; cutegen/ops/grouped_gemm): the MoE suite of bench/moe.toml built,
# validated, sanitized, checked under torch.compile and in a CUDA graph, and timed through the op against
# torch._grouped_mm, a loop of torch.matmul and padded torch.bmm in one process, inside 9 minutes.
#
#   here, once:   bash bench/gpu_grouped.sh --plan                  # search + render -> out/grouped-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_grouped.sh
#                 carry: [".carry", "out/grouped-plan"]
#
# On the device:
#   1. build     every kernel of the plan (16 nvcc jobs, none past BUILD_END_S), compute-sanitizer's kernel and
#                the picks first
#   2. sanitize  compute-sanitizer memcheck on one swap-AB decode kernel's ragged cases (empty groups, 1-token
#                groups, sizes off the tile, all in one group, very uneven), in the background as soon as its
#                library exists, while the rest builds; each tensor its own allocation
#   3. run       bench/grouped_moe.py run: validate every kernel (the ragged cases, into a sentinel-filled
#                output), refusal probes, the op under torch.compile and in a CUDA graph replayed with new
#                sizes, then every case timed (its ranked kernels, the other cases' picks of its class and the fixed
#                alternatives; the pick marked) beside the peers
# Files in $OUT (at most 8): log.txt, build.txt, run.txt, results.json, sanitize.txt.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/grouped-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  exec "$PY" bench/grouped_moe.py plan --out "$PLAN"
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-grouped}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-300}          # every nvcc is killed by then
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-240}
TIME_END_S=${TIME_END_S:-475}            # no case starts timing after this
HARD_LIMIT_S=${HARD_LIMIT_S:-520}        # the run is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
command -v compute-sanitizer > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_grouped: CUTLASS headers missing (carry .carry and untar it into oracles/.cutlass)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_grouped: no plan at $PLAN (run 'bash bench/gpu_grouped.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.grouped_gemm.torch_op" || { echo "gpu_grouped: cutegen does not import"; exit 2; }
SAN_HASH=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['sanitize_kernel'])" "$PLAN/plan.json")
SAN_DIR="$PLAN/kernels/$SAN_HASH"

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s) and 2. compute-sanitizer in the background"
sed "s|^|$PLAN/|" "$PLAN/build_order.txt" > "$STAGE/dirs.txt"
echo "$(wc -l < "$STAGE/dirs.txt") kernel directories"
cat > "$STAGE/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=280)
print(summary.line())
PYEOF
(
  while [ ! -f "$SAN_DIR/kernel.so" ] && [ "$(elapsed)" -lt "$BUILD_END_S" ]; do sleep 2; done
  if [ -f "$SAN_DIR/kernel.so" ]; then
    echo "[$(elapsed) s] sanitizing $SAN_HASH"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout --kill-after=10 "$SANITIZE_TIMEOUT_S" \
      compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
      "$PY" bench/grouped_moe.py sanitize "$PLAN" --kernel "$SAN_HASH"
    echo "[$(elapsed) s] compute-sanitizer exit code $? (0: clean and correct; 9: memcheck errors; 1: wrong results; 124: timeout)"
  else
    echo "no sanitizer run: $SAN_HASH was not built"
  fi
) > "$OUT/sanitize.txt" 2>&1 &
SAN_PID=$!
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$STAGE/dirs.txt" > "$OUT/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|built |failed|error" "$OUT/build.txt" | tail -n 30
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l) of $(wc -l < "$STAGE/dirs.txt")"

phase "2b. waiting for compute-sanitizer"
WAIT_END=$(( $(elapsed) + 60 ))
while kill -0 "$SAN_PID" 2> /dev/null && [ "$(elapsed)" -lt "$WAIT_END" ]; do sleep 2; done
kill -0 "$SAN_PID" 2> /dev/null && { echo "sanitizer still running; stopping it"; kill -TERM -- "-$SAN_PID" 2> /dev/null; pkill -TERM -P "$SAN_PID" 2> /dev/null; }
tail -n 12 "$OUT/sanitize.txt"

phase "3. validate, probes, torch.compile, CUDA graph, time (no case starts after ${TIME_END_S} s)"
DEADLINE=$(( TIME_END_S - $(elapsed) ))
[ "$DEADLINE" -lt 30 ] && DEADLINE=30
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 40 ] && LEFT=40
timeout --signal=TERM --kill-after=10 "$LEFT" \
  "$PY" bench/grouped_moe.py run "$PLAN" --json "$OUT/results.json" --deadline "$DEADLINE" > "$OUT/run.txt" 2>&1
echo "run exit code $?"
grep -E "^validate .*FAIL|^op |^probes " "$OUT/run.txt" | head -n 20
echo "validated: $(grep -c '^validate .* PASS' "$OUT/run.txt") pass, $(grep -c '^validate .* FAIL' "$OUT/run.txt") fail"
grep -vE "^validate |^probes " "$OUT/run.txt" | tail -n 110

phase "4. done ($(elapsed) s); files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1
