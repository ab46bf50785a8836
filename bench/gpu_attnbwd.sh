#!/usr/bin/env bash
# GPU run of the attention backward (issue 25 part 6, helper attnbwd): cutegen's backward kernels
# (templates/attention/fmha_bwd_sm90.cu.j2, bf16, head dims 64 and 128, causal and not) built, validated through the
# PyTorch op's autograd against autograd of a float32 reference, and timed against SDPA cuDNN's and flash's backward
# in one process, in one device call of <= 4 min.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_attnbwd.sh --plan                                 # render -> out/attnbwd-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_attnbwd.sh
#                 carry: [".carry", "out/attnbwd-plan"]
#
# On the device (bench/attnbwd_bench.py does the work):
#   1. build     the plan's 10 kernels (6 backward, 4 forward; 16 nvcc jobs, none past BUILD_END_S)
#   2. validate  every backward kernel in its own process, all 6 at once: ragged lengths, Sq != Skv, batch, BSHD/BHSD,
#                GQA/MQA, scale; dQ, dK, dV vs float32 autograd (and SDPA's own bf16 error); ABI refusals;
#                the first kernel also under torch.compile
#   2a. sanitize compute-sanitizer memcheck of two small calls of the head-128 causal kernel (background)
#   3. time      the backward alone of cutegen's op, SDPA cuDNN, SDPA flash (same tensors, one process)
# Files (3, under $OUT/attnbwd/): log.txt, validate.json, time.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/attnbwd-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"
  "$PY" -c "import jinja2, cutegen.ops.attention.backward" || { echo "gpu_attnbwd --plan: needs jinja2; set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  "$PY" bench/attnbwd_bench.py plan --out "$PLAN"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-attnbwd}
OUTB="$OUT/attnbwd"
mkdir -p "$OUTB"
exec > >(tee "$OUTB/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-150}          # every nvcc is killed by then
VALIDATE_S=${VALIDATE_S:-45}             # no kernel validation starts after this long (from its phase start)
TIME_S=${TIME_S:-35}                     # no timing shape starts after this long
HARD_LIMIT_S=${HARD_LIMIT_S:-235}        # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
command -v compute-sanitizer > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
GPU_SCRIPT=gpu_attnbwd
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
nvcc --version | tail -1
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/collective/fmha_epilogue_bwd.hpp" ] || echo "gpu_attnbwd: the 88 FMHA headers are missing (carry oracles/.cutlass)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_attnbwd: no plan at $PLAN (run 'bash bench/gpu_attnbwd.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.attention.torch_op" || { echo "gpu_attnbwd: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=int(sys.argv[3]))
print(summary.line())
for r in summary.results:
    print(r.status, r.name, "registers", (r.stats or {}).get("max_registers"), "spill", (r.stats or {}).get("spill_bytes"), f"{r.seconds:.0f} s",
          (r.message or "").splitlines()[0][:200] if not r.ok else "")
PYEOF
echo "$(wc -l < "$PLAN/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$PLAN/dirs.txt" $(( BUILD_END_S - 10 )) > "$STAGE/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|error|spill|built|registers|failed" "$STAGE/build.txt" | head -n 60
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l)"

phase "2a. compute-sanitizer memcheck (background): the head-128 causal kernel, ragged and MQA calls"
SAN_KERNEL=kernels/bwd_d128_bf16_causal_64x128
(
  timeout "${SANITIZE_TIMEOUT_S:-100}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$PY" bench/attnbwd_bench.py sanitize-case "$PLAN" "$SAN_KERNEL"
  echo "compute-sanitizer exit code $?"
) > "$STAGE/sanitize.txt" 2>&1 &
SAN_PID=$!

phase "2. validate (6 at once, none started after ${VALIDATE_S} s)"
"$PY" bench/attnbwd_bench.py validate "$PLAN" --json "$OUTB/validate.json" --deadline "$VALIDATE_S" --timeout 75 --parallel 6
echo "validate exit code $?"
phase "2b. waiting for compute-sanitizer"
wait "$SAN_PID"
grep -vE "^\s*$" "$STAGE/sanitize.txt" | grep -vE "^(TMA Desc|format|dim |gmem_|global|boxDim|elementStrides|interleave|swizzle|l2Promotion|oobFill)" | tail -n 20

phase "3. time (${TIME_S} s)"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 20 ] && LEFT=20
timeout --signal=TERM --kill-after=5 "$LEFT" \
  "$PY" bench/attnbwd_bench.py time "$PLAN" --validated "$OUTB/validate.json" --deadline "$TIME_S" --json "$OUTB/time.json"
echo "time exit code $?"

phase "4. summary ($(elapsed) s)"
echo "gpu_attnbwd: done in $(elapsed) s; files: $(cd "$OUTB" && ls | tr '\n' ' ')"
rm -rf "$STAGE"
