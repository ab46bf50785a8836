#!/usr/bin/env bash
# GPU run of operand staging (issue 10, item 4; cutegen/staging.py): the unaligned suites' search picks,
# which now stage every A or B TMA cannot read, built, validated, sanitized and timed against cuBLAS and
# the CollectiveBuilder's unaligned default, in one device call inside 8 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh      # CUTLASS headers -> oracles/.cutlass
#                 bash bench/gpu_stage.sh --plan               # search + render -> out/stage-plan
#   device call:  bash bench/gpu_stage.sh                      # carry: ["oracles/.cutlass", "out/stage-plan"]
#
# The plan is rendered here because the search needs egglog (not on the GPU machine): the picks of
# bench/unaligned.toml under out/stage-plan/sm90a and
# their CollectiveBuilder baselines under out/stage-plan/baseline/sm90a (`cutegen regen`).
# On the device:
#   0. the bare restride copy (bench/stage_copy_rate.cu: cudaMemcpy2DAsync device to device at the
#      suites' operand sizes, CUDA events) -> copy.json: checks search/cost.py's copy term
#   1-5. bench/run_gpu.sh on the plan: build (16 nvcc jobs), compute-sanitizer memcheck + synccheck on
#      two staged kernels (bf16 TN odd K: A and B staged; bf16 NT odd M: A staged), validate every kernel
#      (its own size, ragged M/N/K, beta != 0, batches with padded strides, the unaligned_ld case: leading
#      dimensions and base pointers off 16 bytes, refusal probes), bench cutegen vs cuBLAS vs builder in
#      one process.
# Files in $OUT (at most 8): log.txt, build.txt, validate.json, sanitize.json, bench.txt,
#   <date>-<device>.json (the importable bench format) and .png, copy.json.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/stage-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  rm -rf "$PLAN" && mkdir -p "$PLAN"
  cp bench/unaligned.toml "$PLAN/suite.toml"
  "$PY" -m cutegen regen --suite "$PLAN/suite.toml" --out "$PLAN" || exit $?
  "$PY" - "$PLAN" <<'PYEOF'
import sys
from pathlib import Path
from cutegen.manifest import load
for m in sorted(Path(sys.argv[1]).glob("sm90a/*/manifest.json")):
    c = load(m).config
    print(f"{m.parent.name}: {c.short_name()}")
PYEOF
  exit 0
fi

OUT=${OUT:-$REPO/out/gpu-stage}
mkdir -p "$OUT"
[ -f "$PLAN/suite.toml" ] || { echo "gpu_stage: no plan at $PLAN (run 'bash bench/gpu_stage.sh --plan' there and carry $PLAN)"; exit 2; }
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"

echo "=== 0. the bare restride copy (cudaMemcpy2DAsync) at the suites' sizes"
nvcc -O2 -o /tmp/stage_copy_rate bench/stage_copy_rate.cu && /tmp/stage_copy_rate | tee "$OUT/copy.json"

export SUITE="$PLAN/suite.toml"
export KERNELS="$PLAN/sm90a"
export BASELINES="$PLAN/baseline/sm90a"
export SAN_KERNEL=${SAN_KERNEL:-"$PLAN/sm90a/bf16_tn_m2048n2048k2047_cbf16dbf16_a1_b1 $PLAN/sm90a/bf16_nt_m4095n4096k4096_cbf16dbf16_a1"}
export SAN_TOOLS=${SAN_TOOLS:-memcheck,synccheck}
export SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-60}   # per tool and kernel; the last run took ~10 s per tool
# 16 kernels (11 picks, 5 baselines) at 16 nvcc jobs: one wave of compiles; the copy step takes ~20 s
export BUILD_END_S=${BUILD_END_S:-270} VALIDATE_END_S=${VALIDATE_END_S:-360} BENCH_END_S=${BENCH_END_S:-420}
# run_gpu.sh's log.txt holds its phases; copy.json was written above
OUT="$OUT" bash "$REPO/bench/run_gpu.sh"
echo "gpu_stage: copy rates"
cat "$OUT/copy.json"
