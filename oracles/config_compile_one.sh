#!/usr/bin/env bash
# Compile one kernel of the configuration oracle: BUILD/<key>/probe.cu -> probe, compile.log, compile.rc.
# Called by run_config_oracle.sh through xargs; environment: BUILD CUTLASS_DIR HERE ORACLE_T0
# COMPILE_START_END_S COMPILE_END_S.
set -u
key=$1
d="$BUILD/$key"
now=$(date +%s)
elapsed=$(( now - ORACLE_T0 ))
if [ "$elapsed" -ge "$COMPILE_START_END_S" ]; then
  echo "skipped: no compile starts after ${COMPILE_START_END_S}s (at ${elapsed}s)" > "$d/compile.log"
  echo "skipped" > "$d/compile.rc"
  echo "$key" >> "$BUILD/queue.txt"
  exit 0
fi
limit=$(( COMPILE_END_S - elapsed ))
[ "$limit" -gt 300 ] && limit=300
t0=$(date +%s.%N)
timeout -k 5 "$limit" nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr \
  -Xptxas -v -I"$CUTLASS_DIR/include" -I"$CUTLASS_DIR/tools/util/include" -I"$HERE" \
  -o "$d/probe" "$d/probe.cu" > "$d/compile.log" 2>&1
rc=$?
t1=$(date +%s.%N)
echo "$t0 $t1 $limit" > "$d/compile.time"
echo "$rc" > "$d/compile.rc"
echo "$key" >> "$BUILD/queue.txt"
echo "compiled $key rc=$rc ($(( $(date +%s) - ORACLE_T0 ))s)"
exit 0
