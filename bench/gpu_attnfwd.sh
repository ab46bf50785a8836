#!/usr/bin/env bash
# GPU sweep of attention forward forms (issue 25, helper attnfwd): 18 kernels of the CUTLASS 88 collectives
# (persistent or not, forward or longest-first tile order for causal, 128 vs 192 KV rows, the example's own),
# built, validated against float32, and timed in one process against SDPA cuDNN, at most 4 minutes.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_attnfwd.sh --plan                                 # render -> out/attnfwd-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_attnfwd.sh
#                 carry: [".carry", "out/attnfwd-plan"]
#
# On the device: 1. build (16 nvcc jobs, none past BUILD_END_S), 2. validate (two worker chains: ragged lengths,
# causal, GQA, layouts, LSE, ABI refusals), 3. time the validated kernels per shape, interleaved with SDPA cuDNN.
# Files (3) in $OUT/attnfwd/: log.txt (with build and validation lines), validate.json, time.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/attnfwd-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"
  rm -rf "$PLAN"
  "$PY" bench/attnfwd_sweep.py plan --out "$PLAN"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-attnfwd}
RES="$OUT/attnfwd"
mkdir -p "$RES"
exec > >(tee "$RES/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-140}          # every nvcc is killed by then (18 kernels: two rounds of 16 jobs)
VALIDATE_S=${VALIDATE_S:-45}             # both chains stop starting kernels after this long
TIME_S=${TIME_S:-40}                     # no shape starts timing after this long
HARD_LIMIT_S=${HARD_LIMIT_S:-232}        # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/kernel/fmha_options.hpp" ] || echo "gpu_attnfwd: the 88 FMHA headers are missing (carry .carry/cutlass.tgz)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_attnfwd: no plan at $PLAN (run 'bash bench/gpu_attnfwd.sh --plan' here and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.attention.torch_op" || { echo "gpu_attnfwd: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=int(sys.argv[3]))
print(summary.line())
PYEOF
echo "$(wc -l < "$PLAN/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$PLAN/dirs.txt" "$((BUILD_END_S - 5))" > "$STAGE/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|error|spill|built [0-9]|C7512|serializ" "$STAGE/build.txt" | tail -n 30
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l) ($(elapsed) s)"

phase "2. validate (two chains, ${VALIDATE_S} s)"
"$PY" bench/attention_bench.py validate "$PLAN" --shard 0/2 --timeout 30 --deadline "$VALIDATE_S" --json "$STAGE/validate0.json" > "$STAGE/v0.txt" 2>&1 &
V0=$!
"$PY" bench/attention_bench.py validate "$PLAN" --shard 1/2 --timeout 30 --deadline "$VALIDATE_S" --json "$STAGE/validate1.json" > "$STAGE/v1.txt" 2>&1 &
V1=$!
wait "$V0"; wait "$V1"
cat "$STAGE/v0.txt" "$STAGE/v1.txt" | grep -vE "^\{" | tail -n 40
"$PY" bench/attnfwd_sweep.py merge "$STAGE/validate0.json" "$STAGE/validate1.json" --json "$RES/validate.json"

phase "3. time against SDPA cuDNN (${TIME_S} s, killed at ${HARD_LIMIT_S} s)"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 20 ] && LEFT=20
timeout --signal=TERM --kill-after=5 "$LEFT" \
  "$PY" bench/attnfwd_sweep.py time "$PLAN" --validated "$RES/validate.json" --deadline "$TIME_S" --json "$RES/time.json"
echo "time exit code $?"

phase "4. summary ($(elapsed) s)"
echo "gpu_attnfwd: done in $(elapsed) s; files: $(cd "$RES" && ls | tr '\n' ' ')"
rm -rf "$STAGE"
