#!/usr/bin/env bash
# GPU run of `cutegen validate --op` and `cutegen bench --op` (issues 25 and 26): the Llama attention suite
# (bench/attention_llama.toml) and four cases of the MoE suite (bench/moe.toml) through the operation-neutral commands
# (cutegen/run/ops.py): build, validate against the float32 reference, time against the peers in one process, file
# every timing in a results database, then bench again with the same database (it must reuse, not re-time).
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh     # headers -> oracles/.cutlass
#                 bash bench/gpu_opsbench.sh --plan           # search + render -> out/opsdb-plan/{attention,grouped_gemm}
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_opsbench.sh
#                 carry: [".carry", "out/opsdb-plan"]
#
# The plan: 24 attention problems (8B and 70B heads, prefill S 512-16k causal, decode Sq 1/4/16 vs Skv 8k/32k) on
# 7 kernels (the search's picks and the CUTLASS 88 example's two D128 kernels, per kernel class), and 4 grouped cases
# (Mixtral w1 prefill, Qwen3 down prefill skewed, DeepSeek-V3 gate-up decode, the same masked) on 4 kernels.
# On the device (at most 4 minutes):
#   1. build     all 11 kernels at once (16 nvcc jobs, none past BUILD_END_S)
#   2. validate  `cutegen validate --op attention` and `--op grouped_gemm`, side by side (each its own process; every
#                kernel in a watchdog child: a hang or fault costs that kernel); beside them compute-sanitizer memcheck
#                on three search picks (`validate --op ... --sanitize-only`), waited for (45 s at most) before timing
#   3. bench     `cutegen bench --op attention --db ...`, then `--op grouped_gemm` (one at a time: timings never
#                overlap); the deadlines come from the time left (HARD_LIMIT_S): a problem not started by then is
#                reported skipped (the suite's order: 8B prefill, 8B decode, 70B prefill, 70B decode)
#   4. reuse     `cutegen bench --op attention --db ...` again on three problems: every one must say REUSED
# Files in $OUT/opsdb (3): log.txt, results.tgz (validate and bench JSON, PNG plots), results.sqlite.gz.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/opsdb-plan}
ATTN_SUITE=bench/attention_llama.toml
MOE_SUITE=bench/moe.toml
MOE_CASES=(mixtral_w1_prefill_uniform qwen3_down_prefill_skewed dsv3_gate_up_decode_uniform dsv3_gate_up_decode_masked)
moe_only() { for c in "${MOE_CASES[@]}"; do printf -- "--only %s " "$c"; done; }

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  . "$REPO/bench/stage_package.sh"      # this tree's cutegen first on PYTHONPATH
  "$PY" -c "import jinja2, egglog" || { echo "gpu_opsbench --plan: needs jinja2 and egglog (the searches); set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  "$PY" -m cutegen bench --op attention --suite "$ATTN_SUITE" --kernels "$PLAN/attention" --plan &&
  "$PY" -m cutegen bench --op grouped_gemm --suite "$MOE_SUITE" $(moe_only) --kernels "$PLAN/grouped_gemm" --plan
  rc=$?
  rm -rf "$STAGE"
  exit $rc
fi

T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu-opsbench}
RES="$OUT/opsdb"
mkdir -p "$RES"
exec > >(tee "$RES/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-140}          # every nvcc is killed by then
VALIDATE_S=${VALIDATE_S:-35}             # validation starts no kernel after this long
HARD_LIMIT_S=${HARD_LIMIT_S:-232}        # the last step is killed here whatever it is doing
MIN_MS=${MIN_MS:-10}                     # ms per timing round of an attention contender (5 rounds)
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"
WORK="$STAGE/work"
mkdir -p "$WORK"
DB="$WORK/results.sqlite"
validated() { [ -f "$1" ] && echo "--validated $1"; }     # a validation cut short wrote no report: time all
left() { local l=$(( HARD_LIMIT_S - $(elapsed) )); [ "$l" -lt 5 ] && l=5; echo "$l"; }

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/examples/88_hopper_fmha/kernel/fmha_options.hpp" ] || echo "gpu_opsbench: the 88 FMHA headers are missing (carry .carry, untar into oracles/.cutlass)"
for op in attention grouped_gemm; do
  [ -f "$PLAN/$op/index.json" ] || { echo "gpu_opsbench: no plan at $PLAN/$op (run 'bash bench/gpu_opsbench.sh --plan' there and carry $PLAN)"; exit 2; }
done
"$PY" -c "import cutegen.build, cutegen.run.ops, cutegen.ops.attention.runner, cutegen.ops.grouped_gemm.runner" || { echo "gpu_opsbench: cutegen does not import"; exit 2; }

phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
sed "s|^|$PLAN/attention/|" "$PLAN/attention/dirs.txt" > "$WORK/dirs.txt"
sed "s|^|$PLAN/grouped_gemm/|" "$PLAN/grouped_gemm/dirs.txt" >> "$WORK/dirs.txt"
cat > "$WORK/build_all.py" <<'PYEOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=int(sys.argv[3]))
print(summary.line())
PYEOF
echo "$(wc -l < "$WORK/dirs.txt") kernel directories"
run_until "$BUILD_END_S" "$PY" "$WORK/build_all.py" "$JOBS" "$WORK/dirs.txt" $(( BUILD_END_S - 10 )) > "$WORK/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|error|spill|built [0-9]" "$WORK/build.txt" | tail -n 20
echo "libraries: $(ls "$PLAN"/*/kernels/*/kernel.so 2> /dev/null | wc -l) of $(wc -l < "$WORK/dirs.txt")"

phase "2. cutegen validate --op attention / --op grouped_gemm (side by side, ${VALIDATE_S} s)"
timeout --kill-after=5 $(( VALIDATE_S + 25 )) "$PY" -m cutegen validate --op attention "$PLAN/attention" \
    --suite "$ATTN_SUITE" --deadline "$VALIDATE_S" --timeout 60 --json "$WORK/validate-attention.json" > "$WORK/va.txt" 2>&1 &
VA=$!
command -v compute-sanitizer > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
# compute-sanitizer memcheck on three search picks (the 8B prefill and decode kernels, the swap-AB grouped decode
# kernel), through `cutegen validate --op ... --sanitize-only` (the runner's sanitize_case), in the background
( timeout --kill-after=5 100 "$PY" -m cutegen validate --op attention "$PLAN/attention" --suite "$ATTN_SUITE" \
    --only llama8b_prefill_s1k_causal --only llama8b_decode_q1_kv8k --sanitize-only --sanitize-tools memcheck \
    --sanitize-timeout 45 --json "$WORK/sanitize-attention.json" > "$WORK/sa.txt" 2>&1
  echo "sanitize attention exit code $?" >> "$WORK/sa.txt"
  timeout --kill-after=5 60 "$PY" -m cutegen validate --op grouped_gemm "$PLAN/grouped_gemm" --suite "$MOE_SUITE" \
    --only dsv3_gate_up_decode_uniform --sanitize-only --sanitize-tools memcheck --sanitize-timeout 50 \
    --json "$WORK/sanitize-grouped.json" > "$WORK/sg.txt" 2>&1
  echo "sanitize grouped_gemm exit code $?" >> "$WORK/sg.txt" ) &
SAN=$!
timeout --kill-after=5 $(( VALIDATE_S + 25 )) "$PY" -m cutegen validate --op grouped_gemm "$PLAN/grouped_gemm" \
    --suite "$MOE_SUITE" $(moe_only) --deadline "$VALIDATE_S" --timeout 60 --json "$WORK/validate-grouped.json" > "$WORK/vg.txt" 2>&1 &
VG=$!
wait "$VA"; echo "validate attention exit code $?"
wait "$VG"; echo "validate grouped_gemm exit code $?"
cat "$WORK/va.txt" "$WORK/vg.txt" | cut -c1-400 | tail -n 40
WAIT_END=$(( $(elapsed) + 45 ))          # the sanitizer must be done before timing starts (it would disturb it)
while kill -0 "$SAN" 2> /dev/null && [ "$(elapsed)" -lt "$WAIT_END" ]; do sleep 2; done
kill -0 "$SAN" 2> /dev/null && { echo "sanitizer still running at $(elapsed) s; stopping it"; pkill -TERM -P "$SAN" 2> /dev/null; sleep 2; }
grep -hE "^SANITIZE|exit code" "$WORK/sa.txt" "$WORK/sg.txt" 2> /dev/null

phase "3a. cutegen bench --op attention (problems start while $(( $(left) - 80 )) s are left; at least 10)"
L=$(left); DL=$(( L - 80 > 10 ? L - 80 : 10 )); TO=$(( L - 45 > 25 ? L - 45 : 25 ))
timeout --kill-after=5 "$TO" \
  "$PY" -m cutegen bench --op attention --suite "$ATTN_SUITE" --kernels "$PLAN/attention" --db "$DB" \
    $(validated "$WORK/validate-attention.json") --min-ms "$MIN_MS" --deadline "$DL" --timeout 60 --out "$WORK" > "$WORK/ba.txt" 2>&1
echo "bench attention exit code $? (deadline $DL s, timeout $TO s)"
grep -vE "^wrote" "$WORK/ba.txt" | cut -c1-300 | tail -n 45

phase "3b. cutegen bench --op grouped_gemm"
L=$(left); DL=$(( L - 35 > 5 ? L - 35 : 5 )); TO=$(( L - 15 > 20 ? L - 15 : 20 ))
timeout --kill-after=5 "$TO" \
  "$PY" -m cutegen bench --op grouped_gemm --suite "$MOE_SUITE" $(moe_only) --kernels "$PLAN/grouped_gemm" --db "$DB" \
    $(validated "$WORK/validate-grouped.json") --deadline "$DL" --timeout 60 --out "$WORK" > "$WORK/bg.txt" 2>&1
echo "bench grouped_gemm exit code $? (deadline $DL s, timeout $TO s)"
grep -vE "^wrote" "$WORK/bg.txt" | cut -c1-300 | tail -n 20

phase "4. the same database again: three attention problems must be REUSED, not timed"
timeout --kill-after=5 "$(left)" "$PY" -m cutegen bench --op attention --suite "$ATTN_SUITE" --kernels "$PLAN/attention" \
    --db "$DB" --only llama8b_prefill_s4k_causal --only llama70b_prefill_s512_causal --only llama8b_decode_q1_kv8k \
    --no-plot --out "$WORK/reuse" > "$WORK/reuse.txt" 2>&1
echo "reuse exit code $?"
grep -E "^(REUSED|BENCH|SKIP)" "$WORK/reuse.txt"
"$PY" -m cutegen db stats --db "$DB" --no-seed 2>&1 | tail -n 5
"$PY" -m cutegen db list --db "$DB" --no-seed --op attention 2>&1 | head -n 8

phase "5. files ($(elapsed) s)"
if [ -f "$DB" ]; then
  "$PY" -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.execute('PRAGMA journal_mode = DELETE'); c.close()" "$DB"
  gzip -c "$DB" > "$RES/results.sqlite.gz"
else
  echo "gpu_opsbench: no database was written"
fi
( cd "$WORK" && tar czf "$RES/results.tgz" --exclude 'results.sqlite*' --exclude build_all.py --exclude dirs.txt . )
echo "gpu_opsbench: done in $(elapsed) s; files: $(cd "$RES" && ls | tr '\n' ' ')"
rm -rf "$STAGE"
sleep 1
