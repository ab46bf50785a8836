#!/usr/bin/env bash
# Run compiled probes one at a time (one GPU), in the order their compiles finish, until every
# queued kernel is done and compile.done exists. Each probe runs under `timeout RUN_TIMEOUT_S`;
# exit 124 (or 137 after the follow-up kill) means it hung. Environment as for config_compile_one.sh.
set -u
done_n=0
while :; do
  total=$(wc -l < "$BUILD/queue.txt")
  if [ "$done_n" -ge "$total" ]; then
    if [ -f "$BUILD/compile.done" ]; then
      total=$(wc -l < "$BUILD/queue.txt")
      [ "$done_n" -ge "$total" ] && break
    fi
    sleep 1
    continue
  fi
  done_n=$(( done_n + 1 ))
  key=$(sed -n "${done_n}p" "$BUILD/queue.txt")
  d="$BUILD/$key"
  [ "$(cat "$d/compile.rc" 2>/dev/null)" = "0" ] || continue
  while read -r id m n k l; do
    [ -n "$id" ] || continue
    elapsed=$(( $(date +%s) - ORACLE_T0 ))
    if [ "$elapsed" -ge "$RUN_START_END_S" ]; then
      echo "skipped" > "$BUILD/runs/$id.rc"
      echo "skipped $id (no run starts after ${RUN_START_END_S}s)"
      continue
    fi
    t0=$(date +%s.%N)
    timeout -k 5 "$RUN_TIMEOUT_S" "$d/probe" "$m" "$n" "$k" "$l" > "$BUILD/runs/$id.out" 2> "$BUILD/runs/$id.err" < /dev/null
    rc=$?
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$BUILD/runs/$id.time"
    echo "$rc" > "$BUILD/runs/$id.rc"
    echo "ran $id rc=$rc ($(( $(date +%s) - ORACLE_T0 ))s)"
  done < "$d/runs.txt"
done
echo "run queue finished: $done_n kernels"
