#!/usr/bin/env bash
# GPU run of attention (issue 25): the CUTLASS 88 FMHA kernels cutegen renders, built, validated, sanitized and
# timed through the PyTorch op against SDPA's cuDNN and flash backends, in one device call inside 9 minutes.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_attention.sh --plan                               # search + render -> out/attention-plan
#   (SHAPES=a,b bash bench/gpu_attention.sh --plan: only those shapes of bench/attention_bench.py's SHAPES)
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_attention.sh
#                 carry: [".carry", "out/attention-plan"]
#
# The plan (bench/attention_bench.py plan): 7 shapes (B4 H32 S4096 D128 causal and not, B8 H16 S2048 D64 causal
# and not, GQA Hq32/Hkv8 S4096 causal, decode-like Sq 1 and 16 vs Skv 8192 GQA), per shape the search's two picks,
# the 88 example's own kernels for the head dim, and alternatives: 32 kernel directories.
# On the device:
#   1. build     every kernel (16 nvcc jobs, none past BUILD_END_S)
#   2. sanitize  compute-sanitizer memcheck on one small call (B2 H4 Sq200 Skv333) of the first causal GQA kernel (background)
#   3. validate  every built kernel, two worker chains (a crash or hang costs that kernel only): ragged and unequal
#                lengths, batch, BSHD/BHSD, GQA/MQA/decode packing, scale, LSE vs float32; ABI refusals; beside
#                them, the op of the plan's first kernel under torch.compile and in a CUDA graph
#   4. time      per shape, every validated kernel through the op and SDPA cuDNN / flash, one process
# Rule probes (MODE=probes, plan from --plan-probes): build, then validation only, 25 s per kernel: a kernel the
# temporal checker says deadlocks should time out, one it says computes wrong should fail, the legal side pass.
# Files in $OUT (at most 8): log.txt, build.txt, validate0.json, validate1.json, sanitize.txt, time.json, time.txt.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/attention-plan}

if [ "${1:-}" = "--plan-probes" ]; then
  # the rule probes (bench/attention_bench.py PROBES): kernels the rules refuse, built to see what they do
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  PLAN=${PLAN_PROBES:-out/attention-probes}
  . "$REPO/bench/stage_package.sh"
  rm -rf "$PLAN"
  "$PY" bench/attention_bench.py plan-probes --out "$PLAN"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"      # this tree's cutegen first on PYTHONPATH, whatever PY has installed
  "$PY" -c "import jinja2, egglog, cutegen.ops.attention.render" || { echo "gpu_attention --plan: needs jinja2 and egglog (the e-graph search); set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  "$PY" bench/attention_bench.py plan --out "$PLAN" ${SHAPES:+--shapes "$SHAPES"}
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-attention}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-300}          # every nvcc is killed by then
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-150}
VALIDATE_S=${VALIDATE_S:-130}            # both validation chains stop starting kernels after this long
TIME_S=${TIME_S:-70}                     # no shape starts timing after this long
HARD_LIMIT_S=${HARD_LIMIT_S:-530}        # the timing is killed here whatever it is doing
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
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_attention: CUTLASS headers missing (carry oracles/.cutlass)"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/kernel/fmha_options.hpp" ] || echo "gpu_attention: the 88 FMHA headers are missing (re-run oracles/prepare_cutlass_headers.sh)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_attention: no plan at $PLAN (run 'bash bench/gpu_attention.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.attention.torch_op" || { echo "gpu_attention: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'EOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=280)
print(summary.line())
EOF
echo "$(wc -l < "$PLAN/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$PLAN/dirs.txt" > "$OUT/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|error|spill|built [0-9]" "$OUT/build.txt" | tail -n 30
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l)"

if [ "${MODE:-}" = "probes" ]; then
  # rule probes: validation only, a short timeout per kernel (a deadlock is a verdict, not a failure of the run)
  phase "3p. validate the rule probes (two chains, 25 s per kernel)"
  "$PY" bench/attention_bench.py validate "$PLAN" --shard 0/2 --timeout 25 --deadline 150 --json "$OUT/validate0.json" > "$STAGE/v0.txt" 2>&1 &
  V0=$!
  "$PY" bench/attention_bench.py validate "$PLAN" --shard 1/2 --timeout 25 --deadline 150 --json "$OUT/validate1.json" > "$STAGE/v1.txt" 2>&1 &
  V1=$!
  wait "$V0"; wait "$V1"
  cat "$STAGE/v0.txt" "$STAGE/v1.txt" | grep -E "^probe|^(pass|fail|hang|crash)|^\{" | head -n 40
  phase "5. summary ($(elapsed) s)"
  echo "gpu_attention (probes): done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
  exit 0
fi

phase "2. compute-sanitizer memcheck (background)"
SAN_KERNEL=${SAN_KERNEL:-$(ls -d "$PLAN"/kernels/attn_d128_bf16_gqa_causal_*/ 2> /dev/null | while read -r d; do [ -f "$d/kernel.so" ] && echo "${d%/}" && break; done)}
SAN_PID=""
if [ -n "$SAN_KERNEL" ] && [ -f "$SAN_KERNEL/kernel.so" ]; then
  echo "sanitizing $SAN_KERNEL"
  ( timeout "$SANITIZE_TIMEOUT_S" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$PY" bench/attention_bench.py sanitize-case "$SAN_KERNEL"; echo "compute-sanitizer exit code $?" ) > "$OUT/sanitize.txt" 2>&1 &
  SAN_PID=$!
else
  echo "no sanitizer run: no built causal GQA kernel"
fi

phase "2c. the op under torch.compile and in a CUDA graph (background)"
OPK=$(head -n 1 "$PLAN/dirs.txt")
OPK_PID=""
if [ -f "$OPK/kernel.so" ]; then
  ( timeout 200 "$PY" bench/attention_bench.py op-checks "$OPK"; echo "op-checks exit code $?" ) > "$STAGE/opchecks.txt" 2>&1 &
  OPK_PID=$!
fi

phase "3. validate (two chains, ${VALIDATE_S} s)"
"$PY" bench/attention_bench.py validate "$PLAN" --shard 0/2 --deadline "$VALIDATE_S" --json "$OUT/validate0.json" > "$STAGE/v0.txt" 2>&1 &
V0=$!
"$PY" bench/attention_bench.py validate "$PLAN" --shard 1/2 --deadline "$VALIDATE_S" --json "$OUT/validate1.json" > "$STAGE/v1.txt" 2>&1 &
V1=$!
wait "$V0"; echo "validate chain 0 exit code $?"
wait "$V1"; echo "validate chain 1 exit code $?"
cat "$STAGE/v0.txt" "$STAGE/v1.txt" | grep -vE "^pass:" | tail -n 40
echo "kernels passed: $(cat "$STAGE/v0.txt" "$STAGE/v1.txt" | grep -cE "^pass:")"
if [ -n "$OPK_PID" ]; then
  wait "$OPK_PID"
  grep -E "^op-checks|exit code" "$STAGE/opchecks.txt" || tail -n 5 "$STAGE/opchecks.txt"
fi
if [ -n "$SAN_PID" ]; then
  phase "2b. waiting for compute-sanitizer"
  wait "$SAN_PID"
  tail -n 12 "$OUT/sanitize.txt"
fi

phase "4. time against SDPA cuDNN and flash (${TIME_S} s)"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 30 ] && LEFT=30
timeout --signal=TERM --kill-after=10 "$LEFT" \
  "$PY" bench/attention_bench.py time "$PLAN" --validated "$OUT/validate0.json" "$OUT/validate1.json" \
      --deadline "$TIME_S" --json "$OUT/time.json" > "$OUT/time.txt" 2>&1
echo "time exit code $?"
tail -n 20 "$OUT/time.txt"

phase "5. summary ($(elapsed) s)"
echo "gpu_attention: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1
