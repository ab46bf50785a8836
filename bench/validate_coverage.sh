#!/usr/bin/env bash
# GPU call: build the coverage kernels (generated/coverage/sm90a, from bench/coverage.toml) with 16 jobs
# and validate each one: its own size, ragged M/N/K, batch 2 and 3, padded strides, refusal probes,
# under the watchdog. Carry oracles/.cutlass. Writes $OUT/coverage_validate.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); cd "$REPO"
OUT=${OUT:-$REPO/out/coverage}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache} CUTEGEN_CUTLASS_INCLUDE=$REPO/oracles/.cutlass
. "$REPO/bench/stage_package.sh"
KERNELS=${KERNELS:-generated/coverage/sm90a}
timeout 330 python3 -c "
import sys
from cutegen.build import build
import glob; s = build(sorted(glob.glob('$KERNELS/*/')), jobs=16, progress=sys.stdout, timeout=280); print(s.line())
" > "$OUT/coverage_build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|built " "$OUT/coverage_build.txt" | tail -20
timeout 240 python3 -m cutegen.commands.validate "$KERNELS" --timeout 45 --workers 3 --json "$OUT/coverage_validate.json" 2>&1 \
  | grep -vE "^ok " | tail -40
