#!/usr/bin/env bash
# GPU call: does the learned cost model pick better than the prior on shapes no result holds?
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh                  # CUTLASS headers -> oracles/.cutlass
#                 python bench/model_check.py prepare                      # bench/heldout: index.json + kernels
#   device call:  bash bench/gpu_results.sh                                # carry: ["oracles/.cutlass"]
#   back here:    copy <date>-heldout-<device>.json to bench/results/, then
#                 cutegen db import bench/results/<date>-heldout-<device>.json --db bench/results/seed.sqlite --compact
#                 python bench/model_quality.py; python bench/model_check.py table bench/results/<that file>
#
# 1. build bench/heldout/kernels/* with 16 jobs, each problem's prior pick and learned pick first; no compile
#    runs past BUILD_END_S (whatever is not built is reported "not built" and left out);
# 2. bench/calibrate.py run: per problem, cuBLAS and every built candidate in one process, each verified against
#    a float32 reference before it is timed (CUDA events, median, inputs rotated past L2);
# 3. bench/model_check.py table: measured time of the prior's pick, the learned pick, the best, cuBLAS (last).
# Files in $OUT: log.txt, build.txt, <date>-heldout-<device>.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); cd "$REPO"
T0=$(date +%s)
OUT=${OUT:-$REPO/out/heldout}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
HELDOUT=${HELDOUT:-bench/heldout}
BUILD_END_S=${BUILD_END_S:-330}
RUN_END_S=${RUN_END_S:-440}
export PYTHONUNBUFFERED=1 CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache} CUTEGEN_CUTLASS_INCLUDE=$REPO/oracles/.cutlass
. "$REPO/bench/stage_package.sh"
if [ ! -f "$HELDOUT/index.json" ]; then echo "no $HELDOUT/index.json: run 'python bench/model_check.py prepare' first"; exit 2; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z-' | sed 's/^nvidia-//')
STAMP=$(date -u +%F)

echo "=== [$(( $(date +%s) - T0 )) s] 1. build (jobs 16, no compile past ${BUILD_END_S} s)"
python3 - "$HELDOUT" > /tmp/heldout-dirs.txt <<'PY'
import json, sys
root = sys.argv[1]
index = json.load(open(f"{root}/index.json"))
picks = [e for e in index if e.get("prior_pick") or e.get("learned_pick")]
order = []
for e in picks + index:
    if e["kernel"] not in order:
        order.append(e["kernel"])
print("\n".join(f"{root}/kernels/{k}" for k in order))
PY
echo "$(wc -l < /tmp/heldout-dirs.txt) kernels"
timeout $(( BUILD_END_S - ($(date +%s) - T0) )) python3 -c "
import sys
from cutegen.build import build
dirs = [l.strip() for l in open('/tmp/heldout-dirs.txt') if l.strip()]
s = build(dirs, jobs=16, progress=sys.stdout, timeout=280); print(s.line())
" > "$OUT/build.txt" 2>&1
tail -2 "$OUT/build.txt"; grep -iE "fail|error" "$OUT/build.txt" | head -10
echo "=== [$(( $(date +%s) - T0 )) s] 2. time (verified first) against cuBLAS"
LEFT=$(( RUN_END_S - ($(date +%s) - T0) ))
python3 bench/calibrate.py run "$HELDOUT" --out "$OUT/$STAMP-heldout-$DEVICE.json" --deadline $(( LEFT > 30 ? LEFT : 30 )) \
    --timeout 60 --warmup 10 --iters 50 | tail -15
echo "=== [$(( $(date +%s) - T0 )) s] 3. table"
python3 bench/model_check.py table "$OUT/$STAMP-heldout-$DEVICE.json"
