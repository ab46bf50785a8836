#!/usr/bin/env bash
# GPU run of the one-stage TMA descriptor form (cutegen/stage_tma.py; issue 24 part 2: tiles sized to the
# waves, Tile_N an odd multiple of 8): built, validated and timed against cuBLAS in one device call of at
# most 4 minutes.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # -> .carry/cutlass.tgz
#                 bash bench/gpu_pad.sh --plan                                      # -> out/pad-plan (egglog)
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_pad.sh
#                 carry: [".carry", "out/pad-plan"]
#
# The plan (bench/pad.py plan): form/ cuBLAS's own tiles for the three diagnose shapes through the form
# (64x136 2x1 s8 ping-pong, 128x200 4x1 s5 and 128x232 2x1 s4 cooperative, swap-AB, full-width WGMMA);
# alt/ the same with the no-smem epilogue; val/ 64x136 at 1x2, an f16 kernel, an unswapped 128x200 and a 64x200
# ping-pong (run 1 validated the other cluster variants); pick/ the search's pick with wave tiles and prev/
# main's pick, for the diagnose shapes and four held-out mid-size shapes (fixed in bench/pad.py).
# On the device:
#   1. build     every kernel, form/ alt/ pick/ prev/ first (16 nvcc jobs, none past BUILD_END_S)
#   2. validate  every built kernel (`cutegen validate`: own size, ragged M/N/K, beta = 0.5, batches with padded
#                strides, refusal probes)
#   3. time      bench/pad.py time: one process, each kernel checked at its own size (beta 0 and 0.5) and
#                timed beside cuBLAS (torch.matmul) behind a spin kernel (GPU time), D rechecked after the
#                timed relaunches
# Files (3, under $OUT/pad/): log.txt, validate.json, time.json (time.txt and build.txt go into log.txt).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/pad-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  "$PY" -c "import cutegen.search" || { echo "gpu_pad --plan: needs cutegen with egglog; set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  exec "$PY" bench/pad.py plan --out "$PLAN"
fi

T0=$(date +%s)
OUT_ROOT=${OUT:-$REPO/out/gpu-pad}
OUT="$OUT_ROOT/pad"
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-185}          # every nvcc is killed by then (run 1: 16 compiles in 94 s)
VALIDATE_END_S=${VALIDATE_END_S:-212}    # no kernel starts validating after this (run 1: 23 kernels in 11 s)
TIME_END_S=${TIME_END_S:-224}            # no problem starts timing after this (run 1: 7 problems in 5 s)
HARD_LIMIT_S=${HARD_LIMIT_S:-236}        # the timing is killed here whatever it is doing
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
GPU_SCRIPT=gpu_pad
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_pad: CUTLASS headers missing (untar .carry/cutlass.tgz into oracles/.cutlass)"
[ -f "$PLAN/plan.json" ] || { echo "gpu_pad: no plan at $PLAN (run 'bash bench/gpu_pad.sh --plan' there and carry $PLAN)"; exit 2; }
"$PY" -c "import cutegen.runner, cutegen.build, cutegen.commands.validate" || { echo "gpu_pad: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
for root in form alt pick prev val; do      # the timed kernels first: val/ is validation coverage only
  for d in "$PLAN/$root"/*/; do [ -f "$d/kernel.cu" ] && echo "${d%/}"; done
done > "$STAGE/dirs.txt"
echo "$(wc -l < "$STAGE/dirs.txt") kernel directories"
cat > "$STAGE/build_all.py" <<'EOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=140)
print(summary.line())
EOF
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$STAGE/dirs.txt" > "$STAGE/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|built |failed|error|registers|spill" "$STAGE/build.txt" | tail -n 40
for root in form alt pick prev val; do
  echo "libraries $root: $(ls "$PLAN"/$root/*/kernel.so 2> /dev/null | wc -l) of $(ls -d "$PLAN"/$root/*/ 2> /dev/null | wc -l)"
done

phase "2. validate (no kernel starts after ${VALIDATE_END_S} s)"
VAL_DEADLINE=$(( VALIDATE_END_S - $(elapsed) ))
[ "$VAL_DEADLINE" -lt 20 ] && VAL_DEADLINE=20
mapfile -t VAL_DIRS < <(while read -r d; do [ -f "$d/kernel.so" ] && echo "$d"; done < "$STAGE/dirs.txt")
if [ ${#VAL_DIRS[@]} -gt 0 ]; then
  "$PY" -m cutegen.commands.validate "${VAL_DIRS[@]}" --quiet --timeout 30 --workers 4 --deadline "$VAL_DEADLINE" \
      --json "$OUT/validate.json"
  echo "validate exit code $?"
fi

phase "3. time against cuBLAS (no problem starts after ${TIME_END_S} s)"
TIME_DEADLINE=$(( TIME_END_S - $(elapsed) ))
[ "$TIME_DEADLINE" -lt 10 ] && TIME_DEADLINE=10
LEFT=$(( HARD_LIMIT_S - $(elapsed) ))
[ "$LEFT" -lt 20 ] && LEFT=20
timeout --signal=TERM --kill-after=5 "$LEFT" \
  "$PY" bench/pad.py time "$PLAN" --json "$OUT/time.json" --deadline "$TIME_DEADLINE" --rounds 5 --iters 30
echo "time exit code $?"

phase "4. summary ($(elapsed) s)"
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
echo "--- build log (tail) ---"
tail -n 25 "$STAGE/build.txt"
echo "gpu_pad: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1
