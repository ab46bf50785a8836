#!/usr/bin/env bash
# Issue 24, part 1: where the time goes on the shapes cuBLAS still wins. One device call, under 9 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh
#                 python -m cutegen.commands.tune --suite bench/midsize_diagnose.toml --top-k 3 --plan-only \
#                     --device-kind h200 --workdir out/diag-plan --quiet
#   device call:  bash bench/gpu_diagnose.sh            # carry: ["oracles/.cutlass", "out/diag-plan"]
#
# 1. cuBLAS's kernel for each problem (torch.profiler names) and its time;
# 2. each nvjet name mapped to the cutegen configuration that spells it (bench/diagnose_cublas.py: swap-AB,
#    cuBLAS's tile, cluster and stages), judged by cutegen's rules; the first legal mapping joins the plan;
# 3. `cutegen tune --from-plan`: the search's top 3, nvMMH, the CUTLASS default and the mapped kernel, each
#    verified against a float32 reference, timed with cuBLAS in one process; the winner validated;
# 4. Nsight Compute on two problems: cuBLAS's kernel and cutegen's first pick (stall reasons, throughput);
# 5. the diagnosis table.
# Files in $OUT: log.txt, cublas.json, mimic.json, tune.txt, tune.json, records.jsonl, diagnosis.json, ncu.txt
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
T0=$(date +%s)
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
OUT=${OUT:-$REPO/out/gpu-diagnose}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
PLAN=${PLAN:-out/diag-plan}
JOBS=${JOBS:-16}
BUILD_DEADLINE_S=${BUILD_DEADLINE_S:-300}
TIME_DEADLINE_S=${TIME_DEADLINE_S:-420}
HARD_LIMIT_S=${HARD_LIMIT_S:-450}
NCU_END_S=${NCU_END_S:-530}
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
export CUTEGEN_RESULTS_DB=${CUTEGEN_RESULTS_DB:-/tmp/cutegen-diag-$T0.sqlite}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
left() { local s=$(( $1 - $(elapsed) )); [ "$s" -lt 1 ] && s=1; echo "$s"; }
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv 2>&1 | head -3
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))"
[ -f "$PLAN/plan.json" ] || { echo "gpu_diagnose: no plan at $PLAN"; exit 2; }

if [ -n "${PROBES:-}" ]; then
  phase "legality probes (bench/probe_forms.py)"
  timeout 240 "$PY" bench/probe_forms.py --out "$OUT" --jobs "$JOBS" 2>&1 | grep -v "^\[" | tail -40
fi
if [ -n "${CUBLAS_JSON:-}" ]; then
  phase "cuBLAS kernels: from $CUBLAS_JSON"
  CUB=$CUBLAS_JSON
else
  phase "cuBLAS kernels"
  CUB=$OUT/cublas.json
  "$PY" bench/diagnose_cublas.py cublas --plan "$PLAN" --out "$CUB"
fi
phase "map them to cutegen configurations"
"$PY" bench/diagnose_cublas.py mimic --plan "$PLAN" --cublas "$CUB" --out "$OUT/mimic.json" ${MIMIC_ARGS:-}

phase "tune (jobs $JOBS)"
timeout --signal=TERM --kill-after=10 "$(left "$HARD_LIMIT_S")" \
  "$PY" -m cutegen.commands.tune --from-plan "$PLAN" -o /tmp/cutegen-tuned --jobs "$JOBS" \
      --build-deadline "$(left "$BUILD_DEADLINE_S")" --deadline "$(left "$TIME_DEADLINE_S")" \
      --timeout 90 --force --records "$OUT/records.jsonl" --summary "$OUT/tune.json" --quiet > "$OUT/tune.txt" 2>&1
echo "tune exit code $?"
grep -E "FAILED|LEGALITY BUG|deadline|FAIL |error" "$OUT/tune.txt" | head -n 20

phase "diagnosis table"
"$PY" bench/diagnose_cublas.py table --plan "$PLAN" --cublas "$CUB" --mimic "$OUT/mimic.json" \
    --tune "$OUT/tune.json" --out "$OUT/diagnosis.json" --png "$OUT/diagnosis.png"

phase "Nsight Compute: cuBLAS and cutegen's first pick on two problems"
NCU_SECTIONS="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for prob in ${NCU_PROBLEMS-m257_n4096_k4096_bf16 m256_n256_k65536_bf16}; do
  [ "$(elapsed)" -lt "$NCU_END_S" ] || { echo "ncu: out of time before $prob"; break; }
  [ -n "$NCU" ] || { echo "ncu: not found"; break; }
  echo "##### $prob: cuBLAS" >> "$OUT/ncu.txt"
  timeout 60 "$NCU" --clock-control none -k regex:'nvjet|gemm|splitK' -c 2 $NCU_SECTIONS \
      "$PY" bench/diagnose_cublas.py profile --plan "$PLAN" --problem "$prob" >> "$OUT/ncu.txt" 2>&1
  echo "ncu cuBLAS $prob exit $?"
  "$PY" -m cutegen.commands.build "$PLAN/$prob/search1" --jobs 1 > /dev/null 2>&1
  echo "##### $prob: cutegen search1" >> "$OUT/ncu.txt"
  timeout 90 "$NCU" --clock-control none --target-processes all -k regex:'device_kernel|cutlass|cutegen' -c 1 $NCU_SECTIONS \
      "$PY" -m cutegen.commands.validate "$PLAN/$prob/search1" --no-probes -q >> "$OUT/ncu.txt" 2>&1
  echo "ncu cutegen $prob exit $?"
done
grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Stall" "$OUT/ncu.txt" | head -60
echo "gpu_diagnose: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1
