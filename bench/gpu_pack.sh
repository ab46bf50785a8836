#!/usr/bin/env bash
# GPU run of issues 12 and 22 (cutegen pack): build each planned pack, validate and time its PyTorch op
# against torch.matmul at every sampled shape and at off-sample M values fixed before the pack was made,
# then run a transformers model through the last pack's op. One device call per pack, each inside 9 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh    # CUTLASS headers -> oracles/.cutlass
#                 bash bench/gpu_pack.sh --plan              # cutegen pack (search, selection, sources) -> out/pack-plan
#   device calls: PACKS=llm CLIENT_S=0 bash bench/gpu_pack.sh   # carry: ["oracles/.cutlass", "out/pack-plan"]
#                 PACKS=qwen2.5 bash bench/gpu_pack.sh          # (same carry; then the transformers client)
#   One call with both packs (the default PACKS) fits too, but leaves each pack about 80 s of GPU time after
#   its build, too little to time every kernel at every shape (gpu_pack.py stops that at 35% of its budget).
#
# The packs' sources are not committed (bench/packs/<set>/<kind>/ holds the record: pack.json, COVERAGE.md);
# --plan generates them here, where the search runs (egglog is not on the GPU machine): PACKS (default
# "llm qwen2.5": examples/pack/<set>.toml) for TARGET (default h200). The device half, per pack:
#   1. build it with its own CMake project (JOBS nvcc jobs, default 16), or the same compiles by hand;
#   2. build the PyTorch extension (torch/<name>_torch.cpp) against torch's headers and the pack library;
#   3. bench/gpu_pack.py: validate every set shape and shapes outside the set (unaligned included), time
#      the op vs torch.matmul at every set shape and at the off-sample M values OFF_SAMPLE (every (N, K) of
#      the set; the values are listed in examples/pack/qwen2.5.toml and are no sample point of either file),
#      CUDA graph capture and replay, host cost per call, torch.compile;
# then 4. examples/pack/transformers_client.py on the last pack (Qwen2.5-7B dims, 2 layers, random weights;
# CLIENT_S seconds kept for it, default 150; 0 skips it):
# logits vs plain torch, prefill and decode step times, eager and torch.compile.
# Files in $OUT (at most 8): log.txt, build.txt, <set>.json per pack (results), <set>-COVERAGE.md per pack,
# client.json.
#
# Afterwards, here (no GPU): the measured dispatch of a pack from its results (every kernel's time at the
# sampled and off-sample M of each (N, K); boundaries where the measured curves cross), then time it again:
#   cutegen pack examples/pack/llm.toml -o out/pack-plan/llm --target h200 --name llm_pack --measured <OUT>/llm.json
#   python bench/plot_pack.py <OUT>/llm.json bench/results/<date>-h200-pack-llm.png
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/pack-plan}
PACKS=${PACKS:-llm qwen2.5}
TARGET=${TARGET:-h200}
OFF_SAMPLE=${OFF_SAMPLE:-3,12,24,48,96,100,200,300,700,1500,3000,6000}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  rm -rf "$PLAN"
  for set in $PACKS; do
    "$PY" -m cutegen pack "examples/pack/$set.toml" -o "$PLAN/$set" --target "$TARGET" \
      --name "$(echo "$set" | tr -c 'A-Za-z0-9_\n' _)_pack" || exit 1
  done
  exit 0
fi

T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
OUT=${OUT:-$REPO/out/gpu-pack}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
LIMIT_S=${LIMIT_S:-540}          # everything ends by then (the device call's limit is 600 s)
CLIENT_S=${CLIENT_S:-150}        # kept back for step 4 (two torch.compile runs of the model); 0: no client
# a second call for the client with more time: PACKS=qwen2.5 CLIENT_S=380 bash bench/gpu_pack.sh
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
"$PY" -c "import transformers; print('transformers', transformers.__version__)" || echo "no transformers: step 4 is skipped"
case "$GPU" in
  *H200*) KIND=h200 ;;
  *H100*PCIe*) KIND=h100-pcie ;;
  *H20*) KIND=h20 ;;
  *) KIND=h100-sxm ;;
esac
[ "$KIND" = "$TARGET" ] || echo "gpu_pack: note: the packs were selected for $TARGET, this is a $KIND ($GPU)"
[ -f "$CUTLASS/include/cutlass/version.h" ] || { echo "gpu_pack: CUTLASS headers missing under $CUTLASS (carry oracles/.cutlass)"; exit 2; }
eval "$("$PY" - <<'EOF'
import torch, torch.utils.cpp_extension as ce
print("TORCH_INC='" + " ".join("-isystem " + p for p in ce.include_paths()) + "'")
print("TORCH_LIB='" + " ".join("-L" + p + " -Wl,-rpath," + p for p in ce.library_paths()) + "'")
print("TORCH_ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
EOF
)"
# packs with the vendor tactic (src/vendor_cublaslt.cpp) compile and link cuBLASLt: the toolkit's or the wheel torch uses
. "$REPO/bench/cublaslt.sh"
CUBLASLT_ROOT=$(cublaslt_root "$PY" "$CUDA_HOME")
[ -n "$CUBLASLT_ROOT" ] && export CUTEGEN_CUBLASLT_ROOT=${CUTEGEN_CUBLASLT_ROOT:-$CUBLASLT_ROOT}
: > "$OUT/build.txt"
set -- $PACKS
NPACKS=$#
RC=0
I=0
LAST_PACK= ; LAST_SO=
for set in $PACKS; do
  I=$(( I + 1 ))
  PACK="$REPO/$PLAN/$set/$TARGET"
  [ -f "$PACK/pack.json" ] || { echo "gpu_pack: no pack at $PACK (run 'bash bench/gpu_pack.sh --plan' here and carry $PLAN)"; RC=2; continue; }
  NAME=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['name'])" "$PACK/pack.json")
  NK=$(ls -d "$PACK"/kernels/*/ | wc -l)
  cp "$PACK/COVERAGE.md" "$OUT/$set-COVERAGE.md"
  # this pack's share of what is left, the client's time kept back
  SHARE=$(( (LIMIT_S - CLIENT_S - $(elapsed)) / (NPACKS - I + 1) ))
  END=$(( $(elapsed) + SHARE ))
  phase "$set: 1. build $NAME ($NK kernels, $JOBS jobs; this pack ends by $END s)"
  BUILD=$(mktemp -d /tmp/cutegen-pack-build.XXXXXX)
  B0=$(date +%s)
  if command -v cmake > /dev/null; then
    cmake -S "$PACK" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCUTEGEN_CUTLASS_INCLUDE="$CUTLASS" \
      -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >> "$OUT/build.txt" 2>&1 &&
    timeout $(( END - 60 - $(elapsed) )) cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build.txt" 2>&1
    BRC=$?
  else
    echo "no cmake here: the CMake project's compiles by hand (same flags)"
    FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler -fPIC"
    INC="-I $PACK/include -isystem $CUTLASS/include -isystem $CUTLASS/tools/util/include"
    ls "$PACK"/kernels/*/plan.cu | timeout $(( END - 60 - $(elapsed) )) xargs -P "$JOBS" -I{} sh -c \
      "nvcc $FLAGS $INC -c {} -o $BUILD/\$(basename \$(dirname {})).o" >> "$OUT/build.txt" 2>&1
    BRC=$?
    g++ -std=c++17 -O2 -fPIC -I "$PACK/include" -I "$CUDA_HOME/include" -c "$PACK/src/dispatch.cpp" \
      -o "$BUILD/dispatch.o" >> "$OUT/build.txt" 2>&1 || BRC=1
    if [ -f "$PACK/src/vendor_cublaslt.cpp" ]; then
      g++ -std=c++17 -O2 -fPIC -I "$PACK/include" -I "$CUDA_HOME/include" -I "${CUBLASLT_ROOT:-.}/include" \
        -c "$PACK/src/vendor_cublaslt.cpp" -o "$BUILD/vendor_cublaslt.o" >> "$OUT/build.txt" 2>&1 || BRC=1
    fi
    ar rcs "$BUILD/lib$NAME.a" "$BUILD"/*.o >> "$OUT/build.txt" 2>&1 || BRC=1
  fi
  LIB="$BUILD/lib$NAME.a"
  B1=$(date +%s)
  echo "$set: pack build rc $BRC, $(( B1 - B0 )) s wall on $(nproc) cores for $NK kernels"
  [ "$BRC" -eq 0 ] && [ -f "$LIB" ] || { echo "gpu_pack: $set did not build (see build.txt)"; grep -m5 -i "error" "$OUT/build.txt"; RC=1; continue; }

  phase "$set: 2. the PyTorch extension"
  SO="$BUILD/lib${NAME}_torch.so"
  VENDOR_LINK=
  if [ -f "$PACK/src/vendor_cublaslt.cpp" ]; then
    VENDOR_LINK=$(cublaslt_lib "${CUBLASLT_ROOT:-.}")
    [ -n "$VENDOR_LINK" ] && VENDOR_LINK="$VENDOR_LINK -Wl,-rpath,$(dirname "$VENDOR_LINK")"
  fi
  for STD in c++17 c++20; do
    g++ -std=$STD -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$TORCH_ABI $TORCH_INC -I "$CUDA_HOME/include" \
      -I "$PACK/include" "$PACK/torch/${NAME}_torch.cpp" -o "$SO" "$LIB" \
      $TORCH_LIB -lc10 -lc10_cuda -ltorch -ltorch_cpu -ltorch_cuda -L "$CUDA_HOME/lib64" -lcudart $VENDOR_LINK \
      >> "$OUT/build.txt" 2>&1 && break
  done
  [ -f "$SO" ] || { echo "gpu_pack: the $set extension did not build"; tail -20 "$OUT/build.txt"; RC=1; continue; }

  phase "$set: 3. validate and time (budget $(( END - $(elapsed) )) s)"
  "$PY" bench/gpu_pack.py "$PACK" "$SO" "$OUT/$set.json" --budget-s $(( END - $(elapsed) )) --off-sample "$OFF_SAMPLE" || RC=1
  LAST_PACK=$PACK; LAST_SO=$SO
done

if [ -n "$LAST_PACK" ] && [ "$CLIENT_S" -gt 0 ] && "$PY" -c "import transformers" 2> /dev/null; then
  phase "4. transformers client on $(basename "$(dirname "$LAST_PACK")") (budget $(( LIMIT_S - $(elapsed) )) s)"
  timeout $(( LIMIT_S - $(elapsed) )) "$PY" examples/pack/transformers_client.py "$LAST_PACK" "$LAST_SO" \
    "$OUT/client.json" --model "${CLIENT_MODEL:-qwen2.5-7b}" --layers "${CLIENT_LAYERS:-2}" || RC=1
fi
phase "done (rc $RC)"
exit $RC
