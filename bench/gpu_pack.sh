#!/usr/bin/env bash
# GPU run of issue 12 (cutegen pack): build the language-model pack, validate and time its PyTorch op.
# Runs on the device machine from the repository root, inside 8 minutes; writes everything under $OUT.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh      # CUTLASS headers -> oracles/.cutlass
#                 cutegen pack examples/pack/llm.toml -o bench/packs/llm --target h100-sxm --target h200
#   device call:  bash bench/gpu_pack.sh                       # carry: ["oracles/.cutlass"]
#
# Phases:
#   1. build the pack for this device kind (bench/packs/llm/<kind>, picked from the GPU's name) with
#      its own CMake project when cmake is on the machine, else the same compiles by hand; 16 jobs;
#      the compile time of the pack is reported;
#   2. build the PyTorch extension (torch/<name>_torch.cpp) against torch's headers and the pack library;
#   3. bench/gpu_pack.py: validate every set shape and shapes outside the set (unaligned included)
#      against float32 references, time the op vs torch.matmul per shape, CUDA graph capture and
#      replay, host cost per call for M = 1, 16, 128, torch.compile.
# Files in $OUT: log.txt, build.txt, pack.json (results), COVERAGE.md (the pack's selection).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
OUT=${OUT:-$REPO/out/gpu-pack}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-300}
CUTLASS=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
export PYTHONUNBUFFERED=1
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
# The toolkit root (headers, libcudart): nvcc may be a wrapper script outside it.
for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda; do
  [ -n "$c" ] && [ -f "$c/include/cuda_runtime.h" ] && { CUDA_HOME=$c; break; }
done
phase() { echo; echo "=== [$(elapsed) s] $*"; }

phase "environment"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1
nvcc --version | tail -1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
case "$GPU" in
  *H200*) KIND=h200 ;;
  *H100*PCIe*) KIND=h100-pcie ;;
  *H20*) KIND=h20 ;;
  *) KIND=h100-sxm ;;
esac
PACK=${PACK:-$REPO/bench/packs/llm/$KIND}
[ -f "$PACK/pack.json" ] || { echo "gpu_pack: no pack at $PACK (run cutegen pack here first)"; exit 2; }
[ -f "$CUTLASS/include/cutlass/version.h" ] || { echo "gpu_pack: CUTLASS headers missing under $CUTLASS (carry oracles/.cutlass)"; exit 2; }
NAME=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['name'])" "$PACK/pack.json")
NK=$(ls -d "$PACK"/kernels/*/ | wc -l)
echo "pack $NAME for $KIND ($GPU): $NK kernels"
cp "$PACK/COVERAGE.md" "$OUT/COVERAGE.md"

phase "1. build the pack ($NK kernels, $JOBS jobs)"
BUILD=$(mktemp -d /tmp/cutegen-pack-build.XXXXXX)
B0=$(date +%s)
if command -v cmake > /dev/null; then
  echo "with CMake: $(cmake --version | head -1)"
  cmake -S "$PACK" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCUTEGEN_CUTLASS_INCLUDE="$CUTLASS" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" > "$OUT/build.txt" 2>&1 &&
  timeout $(( BUILD_END_S - $(elapsed) )) cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build.txt" 2>&1
  RC=$?
  LIB="$BUILD/lib$NAME.a"
else
  echo "no cmake here: the CMake project's compiles by hand (same flags)"
  FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler -fPIC"
  INC="-I $PACK/include -isystem $CUTLASS/include -isystem $CUTLASS/tools/util/include"
  ls "$PACK"/kernels/*/plan.cu | timeout $(( BUILD_END_S - $(elapsed) )) xargs -P "$JOBS" -I{} sh -c \
    "nvcc $FLAGS $INC -c {} -o $BUILD/\$(basename \$(dirname {})).o" > "$OUT/build.txt" 2>&1
  RC=$?
  g++ -std=c++17 -O2 -fPIC -I "$PACK/include" -I "$CUDA_HOME/include" -c "$PACK/src/dispatch.cpp" \
    -o "$BUILD/dispatch.o" >> "$OUT/build.txt" 2>&1 || RC=1
  LIB="$BUILD/lib$NAME.a"
  ar rcs "$LIB" "$BUILD"/*.o >> "$OUT/build.txt" 2>&1 || RC=1
fi
B1=$(date +%s)
echo "pack build: rc $RC, $(( B1 - B0 )) s wall on $(nproc) cores for $NK kernels"
tail -3 "$OUT/build.txt"
[ "$RC" -eq 0 ] && [ -f "$LIB" ] || { echo "gpu_pack: the pack did not build (see build.txt)"; grep -m5 -i "error" "$OUT/build.txt"; exit 1; }

phase "2. build the PyTorch extension"
SO="$BUILD/lib${NAME}_torch.so"
eval "$("$PY" - <<'EOF'
import torch, torch.utils.cpp_extension as ce
print("TORCH_INC='" + " ".join("-isystem " + p for p in ce.include_paths()) + "'")
print("TORCH_LIB='" + " ".join("-L" + p + " -Wl,-rpath," + p for p in ce.library_paths()) + "'")
print("TORCH_ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
EOF
)"
for STD in c++17 c++20; do
  g++ -std=$STD -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$TORCH_ABI $TORCH_INC -I "$CUDA_HOME/include" \
    -I "$PACK/include" "$PACK/torch/${NAME}_torch.cpp" -o "$SO" "$LIB" \
    $TORCH_LIB -lc10 -lc10_cuda -ltorch -ltorch_cpu -ltorch_cuda -L "$CUDA_HOME/lib64" -lcudart \
    >> "$OUT/build.txt" 2>&1 && break
done
[ -f "$SO" ] || { echo "gpu_pack: the extension did not build"; tail -20 "$OUT/build.txt"; exit 1; }
echo "extension built at $(elapsed) s"

phase "3. validate and time (budget $(( 450 - $(elapsed) )) s)"
"$PY" bench/gpu_pack.py "$PACK" "$SO" "$OUT/pack.json" --budget-s $(( 450 - $(elapsed) ))
RC=$?
phase "done (rc $RC)"
echo "pack $NAME ($KIND, $NK kernels) built in $(( B1 - B0 )) s on $(nproc) cores; results in $OUT/pack.json"
exit $RC
