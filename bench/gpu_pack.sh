#!/usr/bin/env bash
# GPU run of issues 12 and 22 (cutegen pack --tune): the one script that tunes a pack by measurement on the GPU
# machine, then builds, validates and times the selected pack's PyTorch op against torch.matmul at every
# sampled shape and at the off-sample M values (fixed before tuning: OFF_SAMPLE, examples/pack/qwen2.5.toml).
# Four steps, two here (search, selection: need egglog) and two there (each one device call inside 9 minutes):
#
#   here, once:  bash oracles/prepare_cutlass_headers.sh    # CUTLASS headers -> oracles/.cutlass (the lead: .carry/cutlass.tgz)
#   1. here:     bash bench/gpu_pack.sh --plan               # cutegen pack --tune --plan-only: the candidates (the search's
#                                                            # top 3 per search, nvMMH's picks, the CUTLASS default; capped)
#                                                            # as a candidate pack -> out/pack-plan/<set>-tune/<target>/
#   2. device:   bash bench/gpu_pack.sh tune                 # build the candidate pack (JOBS nvcc jobs), time every candidate
#                                                            # at every sampled and off-sample shape with torch.matmul ->
#                                                            # $OUT/pack-tune.sqlite.gz (results database). Resumes: a database
#                                                            # carried as .carry/pack-tune.sqlite.gz is unpacked first; only
#                                                            # the pairs it lacks are timed (a second call finishes the job)
#   3. here:     bash bench/gpu_pack.sh --select DB.sqlite         # cutegen pack --tune --db DB: the measured selection (cover and
#                                                            # M segments from the measured times; no GPU) -> the pack's
#                                                            # sources in out/pack-plan/<set>/<target>/ and its record in
#                                                            # bench/packs/<set>/<target>/ (pack.json, COVERAGE.md and
#                                                            # measurements.jsonl.gz, what it was selected from)
#   4. device:   bash bench/gpu_pack.sh pack                 # build the selected pack, validate, time through the op
#   carry (device calls): [".carry", "out/pack-plan"]; the lead's command unpacks the headers first:
#     mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_pack.sh tune
#
# PACKS (default qwen2.5: examples/pack/<set>.toml; "llm qwen2.5" plans both, and a step-2 call per pack fits
# best: PACKS=llm bash bench/gpu_pack.sh tune with the first call's database carried), TARGET (default h200).
# Step 2 files in $OUT: log.txt, build.txt, pack-tune.sqlite.gz, tune-<set>.json (what was timed, failures).
# Step 4, per pack: 1. build it with its own CMake project; 2. the PyTorch extension; 3. bench/gpu_pack.py:
#   validate every set shape and shapes outside the set (unaligned included), time the op vs torch.matmul at
#   every set shape and at OFF_SAMPLE at every (N, K) (and HELD_OUT: M values never measured while tuning),
#   CUDA graph capture, host cost per call, torch.compile; 4. examples/pack/transformers_client.py on the last
#   pack (CLIENT_S seconds kept for it, default 0 here; 150 runs it). Step 4 files in $OUT: log.txt, build.txt,
#   <set>.json, <set>-COVERAGE.md, client.json.
# Afterwards, here: python bench/plot_pack.py <OUT>/qwen2.5.json bench/results/runs/<date>-nvidia-h200-pack-qwen2.5.png
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/pack-plan}
PACKS=${PACKS:-qwen2.5}
TARGET=${TARGET:-h200}
OFF_SAMPLE=${OFF_SAMPLE:-3,12,24,48,96,100,200,300,700,1500,3000,6000}
HELD_OUT=${HELD_OUT:-5,40,160,640,2500,5000}
# A second tuning round: EXCLUDE=<the first round's records or database> TUNE_DIR=-tune2 bash bench/gpu_pack.sh --plan
# plans the next candidates by priority; its device call (TUNE_DIR=-tune2 ... tune, the first round's database
# carried as .carry/pack-tune.sqlite.gz) adds their records to the same database; --select reads both rounds.
TUNE_DIR=${TUNE_DIR:--tune}
pack_name() { echo "$(echo "$1" | tr -c 'A-Za-z0-9_\n' _)_pack"; }

if [ "${1:-}" = "--plan" ] || [ "${1:-}" = "--select" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  for set in $PACKS; do
    S0=$(date +%s)
    if [ "$1" = "--plan" ]; then
      rm -rf "$PLAN/$set$TUNE_DIR"
      "$PY" -m cutegen pack "examples/pack/$set.toml" -o "$PLAN/$set$TUNE_DIR" --target "$TARGET" --tune --plan-only \
        --off-sample "$OFF_SAMPLE" --name "$(pack_name "$set")" ${EXCLUDE:+--exclude-measured "$EXCLUDE"} || exit 1
      echo "$set: candidates planned in $(( $(date +%s) - S0 )) s wall" | tee "$PLAN/$set$TUNE_DIR/plan-time.txt"
    else
      DB=${2:?usage: bash bench/gpu_pack.sh --select RESULTS.sqlite[.gz]}
      case "$DB" in *.gz) gunzip -c "$DB" > /tmp/cutegen-pack-select.sqlite; DB=/tmp/cutegen-pack-select.sqlite ;; esac
      # the record: the pack's measurements (JSON lines) beside pack.json and COVERAGE.md, selected from them
      REC="bench/packs/$set/$TARGET/measurements.jsonl.gz"
      mkdir -p "$(dirname "$REC")"
      "$PY" -m cutegen pack "examples/pack/$set.toml" -o "bench/packs/$set" --target "$TARGET" --tune --db "$DB" \
        --off-sample "$OFF_SAMPLE" --name "$(pack_name "$set")" --summary-only --export-records "$REC" || exit 1
      "$PY" -m cutegen pack "examples/pack/$set.toml" -o "$PLAN/$set" --target "$TARGET" --tune --records "$REC" \
        --off-sample "$OFF_SAMPLE" --name "$(pack_name "$set")" || exit 1
      # the issue's second figure: the generated kernels alone (--no-vendor), the same cover, nothing on cuBLASLt
      "$PY" -m cutegen pack "examples/pack/$set.toml" -o "$PLAN/$set-novendor" --target "$TARGET" --tune --records "$REC" \
        --off-sample "$OFF_SAMPLE" --name "$(pack_name "$set")_novendor" --no-vendor > /dev/null || exit 1
      echo "$set: measured selection in $(( $(date +%s) - S0 )) s wall (three times: the record, the sources, and the"\
        "sources without the vendor tactic in $PLAN/$set-novendor: PACKS=\"$set $set-novendor\" bash bench/gpu_pack.sh pack)"
    fi
  done
  exit 0
fi
STEP=${1:-pack}
case "$STEP" in tune|pack) ;; *) echo "usage: bash bench/gpu_pack.sh --plan | tune | --select DB | pack"; exit 2 ;; esac

T0=$(date +%s)
. "$REPO/bench/gpu_lib.sh"      # elapsed, phase, run_until
OUT=${OUT:-$REPO/out/gpu-pack}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
LIMIT_S=${LIMIT_S:-540}          # everything ends by then (the device call's limit is 600 s)
CLIENT_S=${CLIENT_S:-0}          # pack step: kept back for the transformers client (150 runs it); 0: no client
[ "$STEP" = tune ] && CLIENT_S=0
# the results database lives outside $OUT; a gzip'd copy goes back (it would be close to the 16 MB a file may be)
DB=/tmp/cutegen-pack-tune.sqlite
rm -f "$DB"
if [ "$STEP" = tune ] && [ -f "$REPO/.carry/pack-tune.sqlite.gz" ]; then
  gunzip -c "$REPO/.carry/pack-tune.sqlite.gz" > "$DB"      # resume: only the pairs it lacks are timed
  echo "gpu_pack: resuming from .carry/pack-tune.sqlite.gz"
fi
CUTLASS=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
export PYTHONUNBUFFERED=1
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
# The toolkit root (headers, libcudart): nvcc may be a wrapper script outside it.
for c in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda; do
  [ -n "$c" ] && [ -f "$c/include/cuda_runtime.h" ] && { CUDA_HOME=$c; break; }
done
phase "environment (step $STEP)"
[ "$STEP" = tune ] && . "$REPO/bench/stage_package.sh"   # cutegen importable from the bare tree (PYTHONPATH)
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
  if [ "$STEP" = tune ]; then PACK="$REPO/$PLAN/$set$TUNE_DIR/$TARGET"; HOW="--plan"; else PACK="$REPO/$PLAN/$set/$TARGET"; HOW="--select DB"; fi
  [ -f "$PACK/pack.json" ] || { echo "gpu_pack: no pack at $PACK (run 'bash bench/gpu_pack.sh $HOW' here and carry $PLAN)"; RC=2; continue; }
  NAME=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['name'])" "$PACK/pack.json")
  NK=$(ls -d "$PACK"/kernels/*/ | wc -l)
  [ "$STEP" = pack ] && cp "$PACK/COVERAGE.md" "$OUT/$set-COVERAGE.md"
  # this pack's share of what is left, the client's time kept back
  SHARE=$(( (LIMIT_S - CLIENT_S - $(elapsed)) / (NPACKS - I + 1) ))
  END=$(( $(elapsed) + SHARE ))
  KEEP_S=$([ "$STEP" = tune ] && echo 90 || echo 60)   # kept after the build for timing
  phase "$set: 1. build $NAME ($NK kernels, $JOBS jobs; this pack ends by $END s)"
  BUILD=$(mktemp -d /tmp/cutegen-pack-build.XXXXXX)
  B0=$(date +%s)
  if [ "$STEP" = tune ]; then
    # The candidate pack, kernel by kernel (the CMake project's flags), in tune.json's priority order: a kernel
    # that nvcc fails on, or that is not done when the build's time is up, becomes a stub whose plan says so
    # (its pairs are recorded as errors, not timed), so one bad candidate cannot cost the whole run.
    FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler -fPIC"
    INC="-I $PACK/include -isystem $CUTLASS/include -isystem $CUTLASS/tools/util/include"
    export FLAGS INC BUILD
    # progress with an estimate: every 20 s, kernels done and the time left at the rate so far
    ( while sleep 20; do
        n=$(ls "$BUILD"/*.o 2> /dev/null | wc -l); t=$(( $(date +%s) - B0 ))
        echo "build: $n/$NK kernels in $t s, about $(( n > 0 ? t * (NK - n) / n : 0 )) s left"
      done ) &
    MONITOR=$!
    ls -d "$PACK"/kernels/*/ | sort | run_until $(( END - KEEP_S )) xargs -P "$JOBS" -I{} bash -c \
      'd=$(basename {}); nvcc $FLAGS $INC -c {}plan.cu -o $BUILD/$d.o.tmp > $BUILD/$d.log 2>&1 && mv $BUILD/$d.o.tmp $BUILD/$d.o; echo "[$(date +%T)] $d: $([ -f $BUILD/$d.o ] && echo built || echo FAILED)"' \
      >> "$OUT/build.txt" 2>&1
    kill "$MONITOR" 2> /dev/null
    BRC=0
    STUBS=0
    for d in $(ls "$PACK/kernels"); do
      [ -f "$BUILD/$d.o" ] && continue
      STUBS=$(( STUBS + 1 ))
      h=${d#*_}
      echo "stub for $d: $( [ -s "$BUILD/$d.log" ] && grep -m1 -i error "$BUILD/$d.log" || echo 'not built in time')" >> "$OUT/build.txt"
      printf '%s\n' '#include "cutegen_pack.h"' \
        "extern \"C\" int cutegen_${h}_plan_create(const cutegen_pack_shape*, void** out) { *out = nullptr; return 3; }" \
        "extern \"C\" size_t cutegen_${h}_plan_workspace(const void*) { return 0; }" \
        "extern \"C\" void cutegen_${h}_plan_destroy(void*) {}" \
        "extern \"C\" int cutegen_${h}_plan_run(void*, const void*, const void*, const void*, void*, const void*, void*, size_t, cudaStream_t) { return 3; }" \
        "extern \"C\" const char* cutegen_${h}_plan_error(void) { return \"kernel ${d} was not built on this machine (see build.txt)\"; }" \
        > "$BUILD/stub_$d.cpp"
      g++ -std=c++17 -O2 -fPIC -I "$PACK/include" -I "$CUDA_HOME/include" -c "$BUILD/stub_$d.cpp" -o "$BUILD/$d.o" \
        >> "$OUT/build.txt" 2>&1 || BRC=1
    done
    echo "$set: $(( NK - STUBS )) of $NK candidates built, $STUBS stubbed"
    g++ -std=c++17 -O2 -fPIC -I "$PACK/include" -I "$CUDA_HOME/include" -c "$PACK/src/dispatch.cpp" \
      -o "$BUILD/dispatch.o" >> "$OUT/build.txt" 2>&1 || BRC=1
    ar rcs "$BUILD/lib$NAME.a" "$BUILD"/*.o >> "$OUT/build.txt" 2>&1 || BRC=1
  elif command -v cmake > /dev/null; then
    cmake -S "$PACK" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCUTEGEN_CUTLASS_INCLUDE="$CUTLASS" \
      -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" >> "$OUT/build.txt" 2>&1 &&
    timeout $(( END - KEEP_S - $(elapsed) )) cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build.txt" 2>&1
    BRC=$?
  else
    echo "no cmake here: the CMake project's compiles by hand (same flags)"
    FLAGS="-gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler -fPIC"
    INC="-I $PACK/include -isystem $CUTLASS/include -isystem $CUTLASS/tools/util/include"
    ls "$PACK"/kernels/*/plan.cu | timeout $(( END - KEEP_S - $(elapsed) )) xargs -P "$JOBS" -I{} sh -c \
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

  if [ "$STEP" = tune ]; then
    phase "$set: 3. time every candidate at every sampled and off-sample shape with torch.matmul (until $(( END - 10 )) s)"
    M0=$(date +%s)
    "$PY" -m cutegen.packs.measure_gpu "$PACK" "$SO" "$DB" --end-epoch $(( T0 + END - 10 )) \
      --summary "$OUT/tune-$set.json" || RC=1
    echo "$set: timing $(( $(date +%s) - M0 )) s wall; build $(( B1 - B0 )) s"
    [ -f "$DB" ] && gzip -c "$DB" > "$OUT/pack-tune.sqlite.gz"
    continue
  fi
  phase "$set: 3. validate and time (budget $(( END - $(elapsed) )) s)"
  "$PY" bench/gpu_pack.py "$PACK" "$SO" "$OUT/$set.json" --budget-s $(( END - $(elapsed) )) --off-sample "$OFF_SAMPLE" \
    --held-out "$HELD_OUT" --no-per-kernel || RC=1
  LAST_PACK=$PACK; LAST_SO=$SO
done

if [ -n "$LAST_PACK" ] && [ "$CLIENT_S" -gt 0 ] && "$PY" -c "import transformers" 2> /dev/null; then
  phase "4. transformers client on $(basename "$(dirname "$LAST_PACK")") (budget $(( LIMIT_S - $(elapsed) )) s)"
  timeout $(( LIMIT_S - $(elapsed) )) "$PY" examples/pack/transformers_client.py "$LAST_PACK" "$LAST_SO" \
    "$OUT/client.json" --model "${CLIENT_MODEL:-qwen2.5-7b}" --layers "${CLIENT_LAYERS:-2}" || RC=1
fi
phase "done (rc $RC)"
exit $RC
