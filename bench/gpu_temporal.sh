#!/usr/bin/env bash
# The temporal choices on the GPU (issue 14 item 4). Prepared here:
#   python bench/temporal_compare.py prepare          # DSL kernels per protocol -> out/temporal (AOT, no GPU)
#   bash oracles/prepare_cutlass_headers.sh           # once
# Device call: bash bench/gpu_temporal.sh             # carry: ["out/temporal", "oracles/.cutlass"]
# bench/dsl_compare.py run validates every DSL kernel against a float32 reference and the C++ kernel
# (today's protocol) before timing them interleaved; the table last gives each problem's best and worst.
# Files in $OUT: log.txt, dsl_compare.json, cublas.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/out/gpu_temporal}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/stage_package.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | head -2
[ -f out/temporal/plan.json ] || { echo "gpu_temporal: out/temporal/plan.json missing (run prepare here, carry out/temporal)"; exit 2; }
OUT="$OUT" timeout 400 "$PY" bench/dsl_compare.py run --out out/temporal --jobs 16
timeout 60 "$PY" bench/temporal_compare.py cublas --out out/temporal --json "$OUT/cublas.json"
"$PY" bench/temporal_compare.py table "$OUT/dsl_compare.json" --cublas "$OUT/cublas.json"
