#!/usr/bin/env bash
# GPU call: build the calibration candidates (bench/calib) and the CollectiveBuilder baselines
# (bench/run1/baseline/sm90a) with 16 jobs, then time every candidate against cuBLAS and the
# baseline (bench/calibrate.py run). Carry oracles/.cutlass. Ends inside 9.5 minutes.
set -u -o pipefail
CALIB=${CALIB:-bench/calib}; NAME=${NAME:-calibration}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); cd "$REPO"
T0=$(date +%s); OUT=${OUT:-$REPO/out/calib}; mkdir -p "$OUT"
exec > >(tee "$OUT/calib_log.txt") 2>&1
export PYTHONUNBUFFERED=1 CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache} CUTEGEN_CUTLASS_INCLUDE=$REPO/oracles/.cutlass
. "$REPO/bench/stage_package.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
ls -d $CALIB/kernels/* bench/run1/baseline/sm90a/* > /tmp/dirs.txt; echo "$(wc -l < /tmp/dirs.txt) kernel dirs"
timeout 330 python3 -c "
import sys
from cutegen.build import build
dirs=[l.strip() for l in open('/tmp/dirs.txt') if l.strip()]
s=build(dirs, jobs=16, progress=sys.stdout, timeout=280); print(s.line())
" > "$OUT/calib_build.txt" 2>&1
tail -3 "$OUT/calib_build.txt"; grep -iE "fail|bug" "$OUT/calib_build.txt" | head -20
echo "build done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 540 - ($(date +%s) - T0) ))
python3 bench/calibrate.py run $CALIB --baselines bench/run1/baseline/sm90a --out "$OUT/$NAME.json" --deadline $(( LEFT - 40 )) --timeout 60
echo "calibration done at $(( $(date +%s) - T0 )) s"
