# Sourced by the GPU scripts after they set T0 (the script's start, `date +%s`): the phase header, the
# elapsed seconds, and run_until, which runs a command in its own session and kills the whole group at a
# deadline measured from T0. GPU_SCRIPT names the script in run_until's message (default: the caller's name).
elapsed() { echo $(( $(date +%s) - T0 )); }
phase() { echo; echo "=== [$(elapsed) s] $*"; }

# Run "$@" in its own session; at $1 seconds after the script's start kill the whole group.
run_until() {
  local end=$1; shift
  setsid "$@" &
  local pid=$!
  while kill -0 "$pid" 2> /dev/null; do
    if [ "$(elapsed)" -ge "$end" ]; then
      echo "${GPU_SCRIPT:-$(basename "$0" .sh)}: time budget reached at $(elapsed) s; stopping: $*"
      kill -TERM -- "-$pid" 2> /dev/null; sleep 3; kill -KILL -- "-$pid" 2> /dev/null
      break
    fi
    sleep 1
  done
  wait "$pid" 2> /dev/null
  return $?
}
