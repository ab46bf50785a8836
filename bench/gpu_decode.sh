#!/usr/bin/env bash
# GPU run of split-KV ("flash-decoding") attention (issue 25, decode-like calls): the split kernels cutegen renders
# (templates/attention/fmha_sm90_splitkv.cu.j2), built, validated against float32, sanitized, checked under
# torch.compile and CUDA graphs, and timed through the PyTorch op against SDPA cuDNN and flash in one process,
# with the fraction of the HBM floor. At most 4 minutes; writes 3 files under $OUT/decode/.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_decode.sh --plan                                  # render -> out/decode-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_decode.sh
#                 carry: [".carry", "out/decode-plan"]
#
# Phases on the device: 1. build every kernel of the plan (16 nvcc jobs, none past BUILD_END_S);
# 2. in the background: compute-sanitizer memcheck on one ragged call of the first split kernel, and the op under
# torch.compile / in a CUDA graph; 3. validate every built kernel (one worker each, 5 at a time);
# 4. time the validated kernels against SDPA cuDNN and flash (bench/decode_bench.py time).
# Files in $OUT/decode: log.txt (everything printed), results.json (build, validation, op checks, timing),
# sanitize.txt (compute-sanitizer's output).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/decode-plan}
SET=${SET:-decode}                      # decode_bench.py's shape and kernel set (bench/gpu_decode2.sh: decode2)
SUBDIR=${SUBDIR:-decode}                # files go to $OUT/$SUBDIR
SAN_PATTERN=${SAN_PATTERN:-*split*}     # the kernel directory the sanitizer and the op checks take (first match)

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"      # this tree's cutegen first on PYTHONPATH, whatever PY has installed
  "$PY" -c "import jinja2, cutegen.ops.attention.render" || { echo "gpu_decode --plan: needs jinja2; set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  "$PY" bench/decode_bench.py plan --out "$PLAN" --set "$SET" ${NO_SEARCH:+--no-search}
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-decode}
D="$OUT/$SUBDIR"
mkdir -p "$D"
exec > >(tee "$D/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-130}          # every nvcc is killed by then
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-75}
VALIDATE_S=${VALIDATE_S:-40}             # no validation worker starts after this long
TIME_S=${TIME_S:-80}                     # no shape starts timing after this long
HARD_LIMIT_S=${HARD_LIMIT_S:-235}        # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
command -v compute-sanitizer > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
GPU_SCRIPT=${GPU_SCRIPT:-gpu_decode}
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/kernel/fmha_options.hpp" ] || echo "gpu_decode: the 88 FMHA headers are missing (carry .carry/cutlass.tgz)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_decode: no plan at $PLAN (run 'bash bench/gpu_decode.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.build, cutegen.ops.attention.torch_op" || { echo "gpu_decode: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'PYEOF'
import json, sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=125)
print(summary.line())
json.dump([{"kernel": r.name, "status": r.status, "seconds": round(r.seconds, 1), "stats": r.stats,
            "message": (r.message or "")[-600:]} for r in summary.results], open(sys.argv[3], "w"), indent=1)
PYEOF
echo "$(wc -l < "$PLAN/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$PLAN/dirs.txt" "$STAGE/build.json" > "$STAGE/build.txt" 2>&1
grep -E "FAILED|error|spill|built [0-9]|failed" "$STAGE/build.txt" | tail -n 30
echo "libraries: $(ls "$PLAN"/kernels/*/kernel.so 2> /dev/null | wc -l)"

phase "2. compute-sanitizer memcheck and op checks (background)"
SAN_KERNEL=$(ls -d "$PLAN"/kernels/$SAN_PATTERN/ 2> /dev/null | while read -r k; do [ -f "$k/kernel.so" ] && echo "${k%/}" && break; done)
SAN_PID=""
if [ -n "$SAN_KERNEL" ]; then
  echo "sanitizing $SAN_KERNEL"
  ( timeout "$SANITIZE_TIMEOUT_S" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$PY" bench/decode_bench.py sanitize-case "$SAN_KERNEL"; echo "compute-sanitizer exit code $?" ) > "$D/sanitize.txt" 2>&1 &
  SAN_PID=$!
  ( timeout 120 "$PY" bench/decode_bench.py op-checks "$SAN_KERNEL"; echo "op-checks exit code $?" ) > "$STAGE/opchecks.txt" 2>&1 &
  OPK_PID=$!
else
  echo "no split kernel built: no sanitizer run, no op checks"
  OPK_PID=""
fi

phase "3. validate (5 workers, none started past ${VALIDATE_S} s)"
"$PY" bench/decode_bench.py validate "$PLAN" --parallel 5 --timeout 50 --deadline "$VALIDATE_S" --json "$STAGE/validate.json" > "$STAGE/validate.txt" 2>&1
echo "validate exit code $?"
cat "$STAGE/validate.txt" | tail -n 40
if [ -n "$OPK_PID" ]; then wait "$OPK_PID"; grep -E "^op-checks|exit code|Error" "$STAGE/opchecks.txt" | tail -n 5; fi

if [ -n "$SAN_PID" ]; then
  phase "2b. waiting for compute-sanitizer (the GPU is the timing's alone)"
  wait "$SAN_PID"
  tail -n 6 "$D/sanitize.txt"
fi

phase "4. time against SDPA cuDNN and flash (${TIME_S} s)"
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 20 ] && LEFT=20
timeout --signal=TERM --kill-after=5 "$LEFT" \
  "$PY" bench/decode_bench.py time "$PLAN" --validated "$STAGE/validate.json" --deadline "$TIME_S" \
      --json "$STAGE/time.json" > "$STAGE/time.txt" 2>&1
echo "time exit code $?"
tail -n 25 "$STAGE/time.txt"

phase "5. results.json ($(elapsed) s)"
"$PY" - "$STAGE" "$D/results.json" <<'PYEOF'
import json, sys
from pathlib import Path
stage = Path(sys.argv[1])
def load(name):
    p = stage / name
    try:
        return json.loads(p.read_text())
    except Exception as e:  # noqa: BLE001
        return {"missing": f"{name}: {type(e).__name__}"}
ops = None
p = stage / "opchecks.txt"
if p.is_file():
    line = next((l for l in p.read_text().splitlines() if l.startswith("op-checks ")), None)
    ops = json.loads(line[len("op-checks "):]) if line else {"tail": p.read_text()[-800:]}
doc = {"build": load("build.json"), "validate": load("validate.json"), "op_checks": ops, "time": load("time.json")}
Path(sys.argv[2]).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
print("wrote", sys.argv[2])
PYEOF
echo "gpu_decode: done in $(elapsed) s; files: $(cd "$D" && ls | tr '\n' ' ')"
rm -rf "$STAGE"
