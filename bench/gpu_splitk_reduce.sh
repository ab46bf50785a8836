#!/usr/bin/env bash
# GPU run of split-K with a separate reduction (cutegen/split_k_reduce.py; issue 24 part 2): tiny M x N with a
# huge K, built, validated, sanitized and timed against cuBLAS in one device call inside 9 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh           # CUTLASS headers -> oracles/.cutlass
#                 bash bench/gpu_splitk_reduce.sh --plan            # search + render -> out/splitk-reduce-plan
#   device call:  bash bench/gpu_splitk_reduce.sh                   # carry: ["oracles/.cutlass", "out/splitk-reduce-plan"]
#
# The plan is made here (the search needs egglog): per problem of bench/splitk_reduce.toml (7 problems:
# 256x256x65536 bf16 and f16, 128x512x32768, 512x128x49152, 64x1024x131072, a ragged 200x248x65600, an NT
# 256x256x65536) bench/splitk_reduce.py renders the search's pick (form/: the new form), the form at half
# (or twice) its slice count (form2/) and the search's pick with the form left out (prev/: today's stream-K
# pick with its launch plan).
# On the device:
#   1. build     every kernel of the plan, form/ first (16 nvcc jobs, none past BUILD_END_S)
#   2. sanitize  compute-sanitizer memcheck on the ragged problem's form kernel (background; its case is K =
#                slices x a ragged slice, beta = 0.5, enough tiles for three per SM)
#   3. validate  every built kernel (`cutegen validate`): own size, ragged M/N/K (K = slices x a ragged
#                slice), beta = 0.5, batch 2 and 3 with padded strides, slices of whole k-blocks, 20
#                relaunches on one workspace, refusal probes (the form's divide-K and slice-stride probes
#                among them); prev/'s stream-K kernels also every launch plan and split count
#   4. time      bench/splitk_reduce.py time: one process, each kernel checked at its own size (beta 0 and
#                0.5) and timed beside cuBLAS (torch.matmul), D rechecked after the timed relaunches, the
#                workspace one byte short refused with SPLITK-REDUCE-WORKSPACE (status 2)
# Files in $OUT (at most 8): log.txt, build.txt, validate.json, sanitize.json, time.json, time.txt.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/splitk-reduce-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  "$PY" -c "import cutegen.search" || { echo "gpu_splitk_reduce --plan: needs cutegen with egglog; set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  exec "$PY" bench/splitk_reduce.py plan --out "$PLAN"
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-splitk-reduce}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-270}          # every nvcc is killed by then
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-120}
VALIDATE_END_S=${VALIDATE_END_S:-400}    # no kernel starts validating after this
TIME_END_S=${TIME_END_S:-470}            # no problem starts timing after this
HARD_LIMIT_S=${HARD_LIMIT_S:-520}        # the timing is killed here whatever it is doing
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
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_splitk_reduce: CUTLASS headers missing (carry oracles/.cutlass)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_splitk_reduce: no plan at $PLAN (run 'bash bench/gpu_splitk_reduce.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.runner, cutegen.build, cutegen.commands.validate" || { echo "gpu_splitk_reduce: cutegen does not import"; exit 2; }


phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
for root in form prev form2; do
  for d in "$PLAN/$root"/*/; do [ -f "$d/kernel.cu" ] && echo "${d%/}"; done
done > "$STAGE/dirs.txt"
echo "$(wc -l < "$STAGE/dirs.txt") kernel directories"
cat > "$STAGE/build_all.py" <<'EOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=250)
print(summary.line())
EOF
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$STAGE/dirs.txt" > "$OUT/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|built |failed|error" "$OUT/build.txt" | tail -n 30
echo "libraries: form $(ls "$PLAN"/form/*/kernel.so 2> /dev/null | wc -l), prev $(ls "$PLAN"/prev/*/kernel.so 2> /dev/null | wc -l)," \
     "form2 $(ls "$PLAN"/form2/*/kernel.so 2> /dev/null | wc -l)"

phase "2. compute-sanitizer memcheck (background)"
SAN_KERNEL=${SAN_KERNEL:-$PLAN/form/m200_n248_k65600_bf16}
SAN_PID=""
if [ -f "$SAN_KERNEL/kernel.so" ]; then
  "$PY" -m cutegen.commands.validate "$SAN_KERNEL" --sanitize-only --sanitize-tools "${SAN_TOOLS:-memcheck}" \
      --sanitize-timeout "$SANITIZE_TIMEOUT_S" --json "$OUT/sanitize.json" > "$STAGE/sanitize.txt" 2>&1 &
  SAN_PID=$!
  echo "sanitizing $SAN_KERNEL"
else
  echo "no sanitizer run: $SAN_KERNEL was not built"
fi

phase "3. validate (no kernel starts after ${VALIDATE_END_S} s)"
VAL_DEADLINE=$(( VALIDATE_END_S - $(elapsed) ))
[ "$VAL_DEADLINE" -lt 30 ] && VAL_DEADLINE=30
mapfile -t VAL_DIRS < <(while read -r d; do [ -f "$d/kernel.so" ] && echo "$d"; done < "$STAGE/dirs.txt")
if [ ${#VAL_DIRS[@]} -gt 0 ]; then
  "$PY" -m cutegen.commands.validate "${VAL_DIRS[@]}" --quiet --timeout 60 --workers 3 --deadline "$VAL_DEADLINE" \
      --json "$OUT/validate.json"
  echo "validate exit code $?"
fi
if [ -n "$SAN_PID" ]; then
  phase "2b. waiting for compute-sanitizer"
  wait "$SAN_PID"
  tail -n 8 "$STAGE/sanitize.txt"
fi

phase "4. time against cuBLAS (no problem starts after ${TIME_END_S} s)"
TIME_DEADLINE=$(( TIME_END_S - $(elapsed) ))
[ "$TIME_DEADLINE" -lt 20 ] && TIME_DEADLINE=20
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 30 ] && LEFT=30
timeout --signal=TERM --kill-after=10 "$LEFT" \
  "$PY" bench/splitk_reduce.py time "$PLAN" --json "$OUT/time.json" --deadline "$TIME_DEADLINE" > "$OUT/time.txt" 2>&1
echo "time exit code $?"
cat "$OUT/time.txt" | tail -n 20

phase "5. summary ($(elapsed) s)"
[ -f "$OUT/validate.json" ] && "$PY" - "$OUT/validate.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"validate: {s['kernels']} kernels, {len(s['pass'])} pass, {len(s['fail'])} fail, {len(s['hang'])} hang, "
      f"{len(s['crash'])} crash, {s['unusable']} unusable; cases {s['cases_passed']}/{s['cases_run']}, "
      f"probes {s['probes_agreed']}/{s['probes']}")
for v in ("fail", "hang", "crash"):
    for k in s[v]:
        print(f"  {v}: {k}")
EOF
[ -f "$OUT/sanitize.json" ] && grep -oE '"(verdict|summary)": "[^"]*"' "$OUT/sanitize.json" | head -n 6
echo "gpu_splitk_reduce: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1
