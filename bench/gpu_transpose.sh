#!/usr/bin/env bash
# GPU run of the transposing operand stage (issue 10, item 4's promise; cutegen/staging.py): FP8 and TF32
# outside TN. The search's picks for bench/layouts.toml and a few more problems, each an ordinary TN TMA
# kernel whose C ABI first writes the MN-major operand(s) K-major into the workspace with its own tiled
# transpose kernel, built, validated, sanitized and timed against cuBLAS, in one device call inside 8 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh      # CUTLASS headers -> oracles/.cutlass
#                 bash bench/gpu_transpose.sh --plan           # search + render -> out/transpose-plan
#   device call:  bash bench/gpu_transpose.sh                  # carry: ["oracles/.cutlass", "out/transpose-plan"]
#   afterwards:   commit $OUT/<date>-<device>.json (and .png) under bench/results/, `cutegen db import` it;
#                 python -m cutegen.validation_records convert $OUT/validate.json --out generated/validation/NAME.jsonl
#
# The plan is rendered here because the search needs egglog (not on the GPU machine): under
# out/transpose-plan/sm90a the picks of bench/layouts.toml (e4m3 NN, e4m3 NT, e5m2 TT, tf32 NT, tf32 NN at
# 2048^3; e4m3 NN, tf32 NT, e5m2 TT at the ragged 1000x1500x777), of three more problems (e4m3 NT and
# tf32 NN ragged, e4m3 NN at M = 1) and one hand-made stream-K kernel (e4m3 NT 512x1024x8191, beta 0.5,
# A and B transposed, 128x128x128 1x2 cooperative stream-K; the search picks no stream-K kernel for these
# problems). No CollectiveBuilder baseline exists for any of them (CUTLASS routes them to its register-A
# mainloop: SM90-RS-ROUTE, SM90-RS-TRANSPOSE-B-K128), so the bench compares with cuBLAS only.
# On the device:
#   0. the bare transpose (bench/stage_transpose_rate.cu: the ABI's kernel verbatim at the suite's operand
#      sizes, CUDA events, every element checked) -> transpose.json: checks search/cost.py's assumed
#      STAGE_TRANSPOSE_EFFICIENCY
#   1-5. bench/run_gpu.sh on the plan: build (16 nvcc jobs); compute-sanitizer memcheck + synccheck on two
#      transposing kernels (e4m3 NN ragged: A transposed, B restrided; tf32 NT ragged: 4-byte transposes of
#      A and B); validate every kernel (its own size, ragged M/N/K, beta != 0, batches 2 and 3 with padded
#      strides, a sub-tile problem, refusal probes; the stream-K kernel under every launch plan and 20
#      relaunches on one workspace); bench cutegen vs cuBLAS in one process (fp8: torch._scaled_mm takes
#      only TN, so cuBLAS is timed with torch's transposing copy of the MN-major operands in each call;
#      tf32: torch.matmul takes every layout; problems under 50 us also inside a CUDA graph, which shows
#      the transpose launch is capturable).
# Files in $OUT (at most 8): log.txt, build.txt, validate.json, sanitize.json, bench.txt,
#   <date>-<device>.json (the importable bench format) and .png, transpose.json.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/transpose-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  rm -rf "$PLAN" && mkdir -p "$PLAN/baseline/sm90a"
  { cat bench/layouts.toml; cat <<'EOF'

# --- plan only (bench/gpu_transpose.sh): more layouts and an M = 1 decode shape
[[problem]]
name = "plan_e4m3_nt_ragged"
m = 1000
n = 1500
k = 777
dtype = "e4m3"
layout = "nt"

[[problem]]
name = "plan_tf32_nn_ragged"
m = 1000
n = 1500
k = 777
dtype = "tf32"
layout = "nn"

[[problem]]
name = "plan_e4m3_nn_m1"
m = 1
n = 4096
k = 4096
dtype = "e4m3"
layout = "nn"
EOF
  } > "$PLAN/suite.toml"
  "$PY" -m cutegen regen --suite "$PLAN/suite.toml" --out "$PLAN" || exit $?
  "$PY" - "$PLAN" <<'PYEOF' || exit $?
import sys
from pathlib import Path
from cutegen import GemmProblem, KernelConfig
from cutegen.manifest import load
from cutegen.render import render
plan = Path(sys.argv[1])
# the stream-K form of the transposing stage: the search picks none for these problems
p = GemmProblem.from_dict(dict(m=512, n=1024, k=8191, dtype="e4m3", layout="nt", beta=0.5))
cfg = KernelConfig(tile_shape=(128, 128, 128), cluster_shape=(1, 2, 1), mainloop_schedule="cooperative",
                   epilogue_schedule="tma_warp_specialized_cooperative", tile_scheduler="stream_k",
                   stage_a=True, stage_b=True, stage_transpose_a=True, stage_transpose_b=True)
render(p, cfg).write(plan / "sm90a" / p.name)
for m in sorted(plan.glob("sm90a/*/manifest.json")):
    k = load(m)
    print(f"{m.parent.name}: {k.config.short_name()} (transposed: {k.data.get('staging', {}).get('transposed')})")
PYEOF
  exit 0
fi

OUT=${OUT:-$REPO/out/gpu-transpose}
mkdir -p "$OUT"
[ -f "$PLAN/suite.toml" ] || { echo "gpu_transpose: no plan at $PLAN (run 'bash bench/gpu_transpose.sh --plan' there and carry $PLAN)"; exit 2; }
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"

echo "=== 0. the bare transpose (the ABI's kernel) at the suite's sizes"
nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/stage_transpose_rate bench/stage_transpose_rate.cu && /tmp/stage_transpose_rate | tee "$OUT/transpose.json"

export SUITE="$PLAN/suite.toml"
export KERNELS="$PLAN/sm90a"
export BASELINES="$PLAN/baseline/sm90a"
export SAN_KERNEL=${SAN_KERNEL:-"$PLAN/sm90a/e4m3_nn_m1000n1500k777_cbf16dbf16_a8_b1_c4 $PLAN/sm90a/tf32_nt_m1000n1500k777_cf32df32"}
export SAN_TOOLS=${SAN_TOOLS:-memcheck,synccheck}
export SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-60}   # per tool and kernel
# 12 kernels at 16 nvcc jobs: one wave of compiles (about 45 s each here, on 2 cores)
export BUILD_END_S=${BUILD_END_S:-270} VALIDATE_END_S=${VALIDATE_END_S:-370} BENCH_END_S=${BENCH_END_S:-430}
OUT="$OUT" bash "$REPO/bench/run_gpu.sh"
echo "gpu_transpose: bare transpose rates (model: search/cost.py STAGE_TRANSPOSE_EFFICIENCY of HBM bandwidth)"
cat "$OUT/transpose.json"
