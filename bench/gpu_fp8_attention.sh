#!/usr/bin/env bash
# GPU run of FP8 (e4m3) attention (issue 25, helper fp8attn): the FP8 kernels cutegen renders (V read transposed,
# per-tensor descale factors, bf16 O), built, validated against float32, and timed through the op against
# cutegen's bf16 kernel and SDPA cuDNN bf16 in one process, in under 4 minutes.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_fp8_attention.sh --plan                           # search + render -> out/fp8attn-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_fp8_attention.sh
#                 carry: [".carry", "out/fp8attn-plan"]
#
# The plan (bench/fp8_attention_bench.py plan): B4 H32 S4096 D128 (causal and not) and B2 H16 S4096 D256, each with
# the e4m3 search's pick (f32 accumulation), the CUTLASS 88 example's FP8 kernel, for D128 non-causal the pick when an
# f16 Q K^T accumulator is allowed, and cutegen's bf16 pick; plus two grouped (GQA) FP8 kernels for validation.
# On the device:
#   1. build     every kernel (16 nvcc jobs, none past BUILD_END_S)
#   2. validate  every FP8 kernel, one process each, three at a time (ragged Sq/Skv, causal as built, GQA/MQA/decode,
#                BSHD/BHSD, V^T given or transposed by the op, descales, LSE; ABI refusals; torch.compile on one)
#   3. time      per shape: FP8 (V^T given; and with the op's transpose), the transpose alone, cutegen bf16, SDPA
#                cuDNN bf16, interleaved rounds
# Files (3, under $OUT/fp8attn/): log.txt, validate.json, time.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/fp8attn-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"      # this tree's cutegen first on PYTHONPATH, whatever PY has installed
  "$PY" -c "import jinja2, egglog, cutegen.ops.attention.render" || { echo "gpu_fp8_attention --plan: needs jinja2 and egglog; set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  "$PY" bench/fp8_attention_bench.py plan --out "$PLAN"
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT_ROOT=${OUT:-$REPO/out/gpu-fp8attn}
OUTD="$OUT_ROOT/fp8attn"
mkdir -p "$OUTD"
exec > >(tee "$OUTD/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-140}          # every nvcc is killed by then
VALIDATE_END_S=${VALIDATE_END_S:-170}    # no validation starts a kernel past this (from the script's start)
VALIDATE_HARD_S=${VALIDATE_HARD_S:-190}  # running validations are stopped here (their kernels: "not finished")
HARD_LIMIT_S=${HARD_LIMIT_S:-232}        # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
GPU_SCRIPT=gpu_fp8_attention
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/kernel/fmha_options.hpp" ] || echo "gpu_fp8_attention: the 88 FMHA headers are missing (carry .carry/cutlass.tgz)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_fp8_attention: no plan at $PLAN (run 'bash bench/gpu_fp8_attention.sh --plan' and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.attention.torch_op" || { echo "gpu_fp8_attention: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'EOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=max(30, int(sys.argv[3])))
print(summary.line())
EOF
echo "$(wc -l < "$PLAN/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$PLAN/dirs.txt" "$(( BUILD_END_S - $(elapsed) - 5 ))" > "$STAGE/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|error|spill|serialized|built [0-9]|registers" "$STAGE/build.txt" | tail -n 40
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l)"

phase "2. validate the FP8 kernels (one process each, three at a time)"
LEFT=$(( VALIDATE_END_S - $(elapsed) ))
[ "$LEFT" -lt 20 ] && LEFT=20
HARD=$(( VALIDATE_HARD_S - $(elapsed) ))
[ "$HARD" -lt "$LEFT" ] && HARD=$LEFT
timeout --signal=TERM --kill-after=5 $(( HARD + 20 )) \
  "$PY" bench/fp8_attention_bench.py validate "$PLAN" --json "$OUTD/validate.json" --jobs 3 --timeout 60 \
      --deadline "$LEFT" --hard "$HARD"
echo "validate exit code $?"

phase "3. time FP8 vs cutegen bf16 vs SDPA cuDNN bf16"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 25 ] && LEFT=25
timeout --signal=TERM --kill-after=5 "$LEFT" \
  "$PY" bench/fp8_attention_bench.py time "$PLAN" --validated "$OUTD/validate.json" --deadline $(( LEFT - 20 )) \
      --json "$OUTD/time.json"
echo "time exit code $?"

phase "4. summary ($(elapsed) s)"
echo "gpu_fp8_attention: done in $(elapsed) s; files: $(cd "$OUTD" && ls | tr '\n' ' ')"
rm -rf "$STAGE"
sleep 1
