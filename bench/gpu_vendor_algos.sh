#!/usr/bin/env bash
# The vendor tactic's tuning step on the GPU (issue 22 part 3): which of cuBLASLt's algorithms each vendor shape
# of a pack should run. bench/gpu_vendor_algos.py says what is measured; cutegen/packs/vendor.py how the pack
# stores the choice (`cutegen pack --vendor-algorithms OUT/packfast/vendor_algos.json`).
#
#   here, once:  bash bench/gpu_vendor_algos.sh --plan         # the LM pack's vendor source + shapes -> out/vendor-algos-plan
#                (ALGOS=bench/results/runs/2026-11-26-nvidia-h200-vendor-algos.json.gz: with run 1's measured table)
#   device:      bash bench/gpu_vendor_algos.sh                # carry: ["out/vendor-algos-plan"] (no CUTLASS, no nvcc:
#                                                              #  g++ builds the vendor source and a small torch extension)
# About 1 minute to build, 1-2 minutes to time ~155 shapes x (8 algorithms + torch.matmul + the pack's choice).
# Files in $OUT/packfast/ (3): log.txt, build.txt, vendor_algos.json.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/vendor-algos-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  rm -rf "$PLAN"
  # ALGOS=FILE: the vendor source with the measured table of a previous run (its pack plan then runs the choice)
  exec "$PY" bench/gpu_vendor_algos.py plan "$PLAN" ${ALGOS:+"$ALGOS"}
fi

T0=$(date +%s)
. "$REPO/bench/gpu_lib.sh"
. "$REPO/bench/cublaslt.sh"
OUT=${OUT:-$REPO/out/gpu-vendor-algos}
OUTD="$OUT/packfast"
mkdir -p "$OUTD"
exec > >(tee "$OUTD/log.txt") 2>&1
PY=${PYTHON:-python3}
LIMIT_S=${LIMIT_S:-230}
export PYTHONUNBUFFERED=1
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda; do
  [ -n "$c" ] && [ -f "$c/include/cuda_runtime.h" ] && { CUDA_HOME=$c; break; }
done

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
[ -f "$PLAN/src/vendor_cublaslt.cpp" ] && [ -f "$PLAN/shapes.json" ] ||
  { echo "gpu_vendor_algos: no plan at $PLAN (run 'bash bench/gpu_vendor_algos.sh --plan' here, carry $PLAN)"; exit 2; }
CUBLASLT_ROOT=$(cublaslt_root "$PY" "$CUDA_HOME")
CUBLASLT_LIB=$(cublaslt_lib "${CUBLASLT_ROOT:-/nonexistent}")
[ -n "$CUBLASLT_LIB" ] || { echo "gpu_vendor_algos: no cuBLASLt (not in $CUDA_HOME, no nvidia-cublas wheel for $PY)"; exit 2; }
echo "cuBLASLt: $CUBLASLT_LIB"
eval "$("$PY" - <<'PYEOF'
import torch, torch.utils.cpp_extension as ce
print("TORCH_INC='" + " ".join("-isystem " + p for p in ce.include_paths()) + "'")
print("TORCH_LIB='" + " ".join("-L" + p + " -Wl,-rpath," + p for p in ce.library_paths()) + "'")
print("TORCH_ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
PYEOF
)"

phase "1. build: the pack's vendor source and bench/vendor_algos_ext.cpp (g++), linked with cuBLASLt"
BUILD=$(mktemp -d /tmp/cutegen-vendor-algos.XXXXXX)
SO="$BUILD/libvendor_algos.so"
: > "$OUTD/build.txt"
for STD in c++17 c++20; do
  g++ -std=$STD -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$TORCH_ABI $TORCH_INC -I "$CUDA_HOME/include" \
    -I "$CUBLASLT_ROOT/include" -I "$PLAN/include" "$PLAN/src/vendor_cublaslt.cpp" bench/vendor_algos_ext.cpp \
    -o "$SO" $TORCH_LIB -lc10 -lc10_cuda -ltorch -ltorch_cpu -ltorch_cuda -L "$CUDA_HOME/lib64" -lcudart \
    "$CUBLASLT_LIB" -Wl,-rpath,"$(dirname "$CUBLASLT_LIB")" >> "$OUTD/build.txt" 2>&1 && break
  echo "(g++ -std=$STD failed)" >> "$OUTD/build.txt"
done
[ -f "$SO" ] || { echo "gpu_vendor_algos: the extension did not build"; tail -20 "$OUTD/build.txt"; exit 1; }
echo "built at $(elapsed) s"

phase "2. every vendor shape: the heuristic's list, each algorithm and torch.matmul timed (until $LIMIT_S s)"
END_EPOCH=$(( T0 + LIMIT_S - 20 ))
run_until "$LIMIT_S" "$PY" bench/gpu_vendor_algos.py measure "$PLAN" "$SO" "$OUTD/vendor_algos.json" --end-epoch "$END_EPOCH"
RC=$?
phase "done (rc $RC) at $(elapsed) s"
exit $RC
