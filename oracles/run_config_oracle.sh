#!/usr/bin/env bash
# Configuration oracle: compile every case of oracles/config_cases.py against CUTLASS 4.2 with nvcc
# (16 jobs, longest first) and run each compiled probe on the GPU under a 30 s watchdog, serially,
# while the other compiles go on. Writes $OUT/config_oracle.jsonl and prints a summary table.
#
#   bash oracles/prepare_cutlass_headers.sh            # once, on a machine with the nvidia-cutlass wheel
#   OUT=/some/dir bash oracles/run_config_oracle.sh    # on the GPU machine
#   OUT=/some/dir ORACLE_GROUPS=streamk_hang bash oracles/run_config_oracle.sh   # one group only
#   ... PROBE_REUSE_WORKSPACE=1 ...   # time stream-K runs without re-initializing the workspace
#
# Budget (must end within 9 minutes): no compile starts after COMPILE_START_END_S, every compile is
# killed at COMPILE_END_S (and at 300 s), no probe starts after RUN_START_END_S. Nothing stops the
# script early: every failure is recorded for its case and the rest go on.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=${OUT:-$REPO/out/config_oracle}
BUILD=${BUILD:-/tmp/cutegen-config-oracle}
CUTLASS_DIR=${CUTLASS_DIR:-$HERE/.cutlass}
JOBS=${JOBS:-16}
PY=${PYTHON:-python3}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
export ORACLE_T0=$(date +%s)
export COMPILE_START_END_S=${COMPILE_START_END_S:-400}
export COMPILE_END_S=${COMPILE_END_S:-470}
export RUN_START_END_S=${RUN_START_END_S:-495}
export RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-30}
export BUILD CUTLASS_DIR HERE

mkdir -p "$OUT" "$BUILD"
if [ ! -f "$CUTLASS_DIR/include/cutlass/cutlass.h" ] || [ ! -f "$CUTLASS_DIR/tools/util/include/cutlass/util/packed_stride.hpp" ]; then
  echo "config oracle: CUTLASS headers missing under $CUTLASS_DIR (run oracles/prepare_cutlass_headers.sh and carry oracles/.cutlass)" >&2
  exit 2
fi

# A fresh build folder each time: stale binaries must not answer for changed cases.
rm -rf "$BUILD"/* && mkdir -p "$BUILD/runs"
# ORACLE_GROUPS=g1,g2 re-runs only those case groups (e.g. streamk_hang on an H100).
"$PY" "$HERE/config_cases.py" render "$BUILD" ${ORACLE_GROUPS:+--groups "$ORACLE_GROUPS"} || exit 2
: > "$BUILD/queue.txt"

{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host=$(hostname)"
  echo "nvcc=$(nvcc --version | tail -1)"
  echo "nvidia_smi=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "cutlass_dir=$CUTLASS_DIR"
  echo "cutlass_version=$(grep -E '#define CUTLASS_(MAJOR|MINOR|PATCH)' "$CUTLASS_DIR/include/cutlass/version.h" | awk '{printf "%s.", $3}' | sed 's/\.$//')"
  echo "jobs=$JOBS"
} > "$BUILD/env.txt"
cat "$BUILD/env.txt"
echo "config oracle: $(wc -l < "$BUILD/kernels.txt") kernels, $(grep -c '"id"' "$BUILD/cases.json") cases"

bash "$HERE/config_run_queue.sh" > "$BUILD/run_queue.log" 2>&1 &
RUNNER=$!

xargs -P "$JOBS" -n 1 bash "$HERE/config_compile_one.sh" < "$BUILD/kernels.txt"
touch "$BUILD/compile.done"
echo "config oracle: compiles finished at $(( $(date +%s) - ORACLE_T0 )) s"
wait "$RUNNER"
echo "config oracle: runs finished at $(( $(date +%s) - ORACLE_T0 )) s"

"$PY" "$HERE/config_collect.py" "$BUILD" "$OUT/config_oracle.jsonl"
rc=$?
# Keep the raw evidence small: compile logs (first 200 lines) and probe outputs.
mkdir -p "$OUT/config_oracle_raw"
for d in "$BUILD"/*/; do
  k=$(basename "$d"); [ -f "$d/compile.log" ] || continue
  head -c 20000 "$d/compile.log" > "$OUT/config_oracle_raw/$k.compile.log"
done
tar -C "$BUILD" -czf "$OUT/config_oracle_raw/runs.tar.gz" runs env.txt run_queue.log 2>/dev/null
echo "config oracle: done in $(( $(date +%s) - ORACLE_T0 )) s -> $OUT/config_oracle.jsonl"
exit $rc
