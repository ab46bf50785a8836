#!/usr/bin/env bash
# GPU check of a pack's vendor tactic (issue 22 part 3): a small pack whose dispatch sends M >= 17 to cuBLASLt
# (bench/gpu_vendor.py says how) is built on the GPU machine with its CMake project (CUDA::cublasLt found by the
# pack's cmake/cutegen_cublaslt.cmake: the toolkit's, else the nvidia-cublas wheel PyTorch uses), its PyTorch
# extension is linked against cuBLASLt, and bench/gpu_vendor.py checks through the op that every M gets the
# tactic the dispatch says, that the vendor's results match torch.matmul, that its time is within a few percent
# of torch.matmul's (same cuBLAS underneath), under CUDA graph capture too, and the host cost per call.
#
#   here, once:  bash oracles/prepare_cutlass_headers.sh     # CUTLASS headers -> oracles/.cutlass (the lead: .carry/cutlass.tgz)
#                bash bench/gpu_vendor.sh --plan              # the pack's sources -> out/vendor-plan/pack (search: egglog)
#   device:      mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_vendor.sh
#                carry: [".carry", "out/vendor-plan"]
# Four kernels (one per class) compile in about two minutes with 16 jobs; the check takes about a minute.
# Files in $OUT: log.txt, build.txt, vendor.json (every shape, graph and host-cost row; the summary).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/vendor-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  rm -rf "$PLAN"
  exec "$PY" bench/gpu_vendor.py plan "$PLAN"
fi

T0=$(date +%s)
. "$REPO/bench/gpu_lib.sh"
. "$REPO/bench/cublaslt.sh"
OUT=${OUT:-$REPO/out/gpu-vendor}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
LIMIT_S=${LIMIT_S:-520}
CUTLASS=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
PACK="$REPO/$PLAN/pack"
export PYTHONUNBUFFERED=1
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda; do
  [ -n "$c" ] && [ -f "$c/include/cuda_runtime.h" ] && { CUDA_HOME=$c; break; }
done

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1
nvcc --version | tail -1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
[ -f "$CUTLASS/include/cutlass/version.h" ] || { echo "gpu_vendor: CUTLASS headers missing under $CUTLASS (carry .carry)"; exit 2; }
[ -f "$PACK/src/vendor_cublaslt.cpp" ] || { echo "gpu_vendor: no vendor pack at $PACK (run 'bash bench/gpu_vendor.sh --plan' here, carry $PLAN)"; exit 2; }
CUBLASLT_ROOT=$(cublaslt_root "$PY" "$CUDA_HOME")
CUBLASLT_LIB=$(cublaslt_lib "${CUBLASLT_ROOT:-/nonexistent}")
[ -n "$CUBLASLT_LIB" ] || { echo "gpu_vendor: no cuBLASLt (not in $CUDA_HOME, no nvidia-cublas wheel for $PY)"; exit 2; }
echo "cuBLASLt: $CUBLASLT_LIB"
export CUTEGEN_CUBLASLT_ROOT=$CUBLASLT_ROOT
eval "$("$PY" - <<'EOF'
import torch, torch.utils.cpp_extension as ce
print("TORCH_INC='" + " ".join("-isystem " + p for p in ce.include_paths()) + "'")
print("TORCH_LIB='" + " ".join("-L" + p + " -Wl,-rpath," + p for p in ce.library_paths()) + "'")
print("TORCH_ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
EOF
)"

NAME=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['name'])" "$PACK/pack.json")
BUILD=$(mktemp -d /tmp/cutegen-vendor-build.XXXXXX)
phase "1. build $NAME ($(ls -d "$PACK"/kernels/*/ | wc -l) kernels and cuBLASLt, $JOBS jobs)"
: > "$OUT/build.txt"
if command -v cmake > /dev/null; then
  cmake -S "$PACK" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCUTEGEN_CUTLASS_INCLUDE="$CUTLASS" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >> "$OUT/build.txt" 2>&1 &&
  timeout $(( LIMIT_S - 200 - $(elapsed) )) cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build.txt" 2>&1
  BRC=$?
  grep -m1 "cuBLASLt from\|cublasLt" "$OUT/build.txt"
else
  echo "no cmake here: the CMake project's compiles by hand (same flags)"
  FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler -fPIC"
  INC="-I $PACK/include -isystem $CUTLASS/include -isystem $CUTLASS/tools/util/include"
  ls "$PACK"/kernels/*/plan.cu | timeout $(( LIMIT_S - 200 - $(elapsed) )) xargs -P "$JOBS" -I{} sh -c \
    "nvcc $FLAGS $INC -c {} -o $BUILD/\$(basename \$(dirname {})).o" >> "$OUT/build.txt" 2>&1
  BRC=$?
  for src in dispatch vendor_cublaslt; do
    g++ -std=c++17 -O2 -fPIC -I "$PACK/include" -I "$CUDA_HOME/include" -I "$CUBLASLT_ROOT/include" \
      -c "$PACK/src/$src.cpp" -o "$BUILD/$src.o" >> "$OUT/build.txt" 2>&1 || BRC=1
  done
  ar rcs "$BUILD/lib$NAME.a" "$BUILD"/*.o >> "$OUT/build.txt" 2>&1 || BRC=1
fi
LIB="$BUILD/lib$NAME.a"
echo "build rc $BRC at $(elapsed) s"
[ "$BRC" -eq 0 ] && [ -f "$LIB" ] || { echo "gpu_vendor: the pack did not build"; grep -m8 -i "error" "$OUT/build.txt"; exit 1; }

phase "2. the PyTorch extension, linked against cuBLASLt"
SO="$BUILD/lib${NAME}_torch.so"
for STD in c++17 c++20; do
  g++ -std=$STD -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$TORCH_ABI $TORCH_INC -I "$CUDA_HOME/include" \
    -I "$PACK/include" "$PACK/torch/${NAME}_torch.cpp" -o "$SO" "$LIB" \
    $TORCH_LIB -lc10 -lc10_cuda -ltorch -ltorch_cpu -ltorch_cuda -L "$CUDA_HOME/lib64" -lcudart \
    "$CUBLASLT_LIB" -Wl,-rpath,"$(dirname "$CUBLASLT_LIB")" >> "$OUT/build.txt" 2>&1 && break
done
[ -f "$SO" ] || { echo "gpu_vendor: the extension did not build"; tail -20 "$OUT/build.txt"; exit 1; }
readelf -d "$SO" | grep -i "needed.*cublas"

phase "3. tactic, results, time, graphs, host cost (until $LIMIT_S s)"
run_until "$LIMIT_S" "$PY" bench/gpu_vendor.py check "$PACK" "$SO" "$OUT/vendor.json"
RC=$?
phase "done (rc $RC)"
exit $RC
