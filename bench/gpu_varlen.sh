#!/usr/bin/env bash
# GPU run of variable-length attention (issue 25, varlen): cutegen's varlen kernels (templates/attention/varlen/) and
# the dense kernels of the same configurations, built, validated against float32, sanitized and timed against the
# dense kernel at the same useful FLOPs and SDPA cuDNN (dense, padded, per sequence), in one device call of <= 4 min.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_varlen.sh --plan                                  # search + render -> out/varlen-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_varlen.sh
#                 carry: [".carry", "out/varlen-plan"]
#
# On the device (bench/varlen_bench.py does the work):
#   1. build     every kernel of the plan (12: 5 varlen + 2 scheduler twins, 5 dense; 16 nvcc jobs, none past BUILD_END_S)
#   2. sanitize  compute-sanitizer memcheck on one ragged call of the GQA causal varlen kernel (background)
#   3. validate  every varlen kernel in its own process, 3 at once: ragged lengths with 0 and 1, unequal, GQA/MQA,
#                strided, scale, LSE, untouched rows, ABI refusals; the first also under torch.compile and a CUDA graph
#   4. time      ragged varlen, equal-length varlen, dense same config, SDPA cuDNN dense / padded / per sequence
# Files (3, under $OUT/varlen/): log.txt, validate.json, time.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/varlen-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"
  "$PY" -c "import jinja2, egglog, cutegen.ops.attention.render" || { echo "gpu_varlen --plan: needs jinja2 and egglog; set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  "$PY" bench/varlen_bench.py plan --out "$PLAN"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-varlen}
OUTV="$OUT/varlen"
mkdir -p "$OUTV"
exec > >(tee "$OUTV/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-130}          # every nvcc is killed by then
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-75}
VALIDATE_S=${VALIDATE_S:-45}             # no validation starts after this long
TIME_S=${TIME_S:-70}                     # no timing shape (one process each) starts after this long
HARD_LIMIT_S=${HARD_LIMIT_S:-235}        # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
command -v compute-sanitizer > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
GPU_SCRIPT=gpu_varlen
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
nvcc --version | tail -1
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/kernel/fmha_options.hpp" ] || echo "gpu_varlen: the 88 FMHA headers are missing (carry oracles/.cutlass)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_varlen: no plan at $PLAN (run 'bash bench/gpu_varlen.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.attention.torch_op" || { echo "gpu_varlen: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=int(sys.argv[3]))
print(summary.line())
PYEOF
echo "$(wc -l < "$PLAN/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$PLAN/dirs.txt" $(( BUILD_END_S - 10 )) > "$STAGE/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|error|spill|built [0-9]|registers" "$STAGE/build.txt" | head -n 40
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l)"

if [ "${MODE:-}" = "probe" ]; then
  # fault bisection (run 3): PROBE_CASES of bench/varlen_bench.py, one process each, launch-blocking, then memcheck
  phase "3p. probe (one process per case, CUDA_LAUNCH_BLOCKING=1; memcheck on the first fault)"
  timeout $(( HARD_LIMIT_S - $(elapsed) )) "$PY" bench/varlen_bench.py probe "$PLAN" --json "$OUTV/probe.json" --sanitize \
      --sanitize-timeout $(( HARD_LIMIT_S - $(elapsed) - 80 ))
  echo "probe exit code $?"
  phase "5. summary ($(elapsed) s)"
  echo "gpu_varlen (probe): done in $(elapsed) s; files: $(cd "$OUTV" && ls | tr '\n' ' ')"
  rm -rf "$STAGE"
  exit 0
fi

phase "2. compute-sanitizer memcheck (background): the causal MHA kernel with a 1500-token sequence, then GQA causal"
SAN_LONG=$(ls -d "$PLAN"/kernels/attn_d128_bf16_causal_varlen_*/ 2> /dev/null | head -n 1)
SAN_GQA=$(ls -d "$PLAN"/kernels/attn_d128_bf16_gqa_causal_varlen_*/ 2> /dev/null | head -n 1)
SAN_LONG=${SAN_LONG%/}
SAN_GQA=${SAN_GQA%/}
(
  for pair in "$SAN_LONG --long" "$SAN_GQA"; do
    set -- $pair
    [ -n "${1:-}" ] && [ -f "$1/kernel.so" ] || { echo "not built: ${1:-?}"; continue; }
    echo "sanitizing $*"
    timeout "$SANITIZE_TIMEOUT_S" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$PY" bench/varlen_bench.py sanitize-case "$@"
    echo "compute-sanitizer exit code $?"
  done
) > "$STAGE/sanitize.txt" 2>&1 &
SAN_PID=$!

phase "3. validate (3 at once, none started after ${VALIDATE_S} s)"
"$PY" bench/varlen_bench.py validate "$PLAN" --json "$OUTV/validate.json" --deadline "$VALIDATE_S" --timeout 75 --parallel 3
echo "validate exit code $?"
if [ -n "$SAN_PID" ]; then
  phase "2b. waiting for compute-sanitizer"
  wait "$SAN_PID"
  grep -vE "^\s*$" "$STAGE/sanitize.txt" | grep -vE "^(TMA Desc|format|dim |gmem_|global|boxDim|elementStrides|interleave|swizzle|l2Promotion|oobFill)" | tail -n 30
fi

phase "4. time (${TIME_S} s)"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 20 ] && LEFT=20
timeout --signal=TERM --kill-after=5 "$LEFT" \
  "$PY" bench/varlen_bench.py time "$PLAN" --validated "$OUTV/validate.json" --deadline "$TIME_S" --json "$OUTV/time.json"
echo "time exit code $?"

phase "5. summary ($(elapsed) s)"
echo "gpu_varlen: done in $(elapsed) s; files: $(cd "$OUTV" && ls | tr '\n' ' ')"
rm -rf "$STAGE"
