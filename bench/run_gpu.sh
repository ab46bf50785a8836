#!/usr/bin/env bash
# The one GPU run of issue 5: build, validate, sanitize, benchmark. Runs on the device machine in
# one call and ends inside its 10-minute limit; writes everything under $OUT.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh          # CUTLASS headers -> oracles/.cutlass
#   device call:  bash bench/run_gpu.sh                            # carry: ["oracles/.cutlass"]
#
# Phases, each with a budget measured from the script's start (override with the variables below):
#   1. build   every kernel under generated/sm90a and every CollectiveBuilder baseline under
#              generated/baseline/sm90a, problem by problem (picked kernel, then its baseline),
#              `--jobs 16`, through the cutegen cache in $CUTEGEN_CACHE; no compile runs past BUILD_END_S.
#              Whatever finished is used; the rest is reported as not built. The cache lives outside
#              the tree, so a second call while the machine is still warm starts from cache hits.
#   2. sanitize compute-sanitizer memcheck, racecheck and synccheck (in parallel) on the picked kernel
#              of the smallest bf16 problem, in the background while phase 3 runs.
#   3. validate every built kernel: its own size, ragged M/N/K, batch 2 and 3 with padded strides, a
#              sub-tile problem, refusal probes; watchdog per launch. No new kernel after VALIDATE_END_S.
#   4. bench   the suite: cutegen vs cuBLAS vs CUTLASS builder; no new problem after BENCH_END_S.
#   5. a short table, last.
# Files in $OUT (at most 8): log.txt, build.txt, validate.json, sanitize.json, bench.txt,
#   <date>-<device>.json and .png (commit both to bench/results/).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-330}        # every nvcc is killed by then
VALIDATE_END_S=${VALIDATE_END_S:-430}  # no kernel starts validating after this
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-150}  # per tool, and never past VALIDATE_END_S + 30
BENCH_END_S=${BENCH_END_S:-530}        # no problem starts after this
KERNELS=${KERNELS:-generated/sm90a}
BASELINES=${BASELINES:-generated/baseline/sm90a}
SUITE=${SUITE:-bench/suite.toml}
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"

. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until

# The tree is not installed there: mirror pyproject's package mapping (legality/, search/ and
# templates/ live inside the cutegen package) with symbolic links, and put that on PYTHONPATH.
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | head -3
nvcc --version | tail -2
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
if [ ! -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ]; then
  echo "run_gpu: CUTLASS headers missing under $CUTEGEN_CUTLASS_INCLUDE (run oracles/prepare_cutlass_headers.sh here and carry oracles/.cutlass)"
fi
"$PY" -c "import cutegen.runner, cutegen.build, cutegen.commands.bench" || { echo "run_gpu: cutegen does not import"; exit 2; }


phase "1. build (jobs $JOBS, no compile past ${BUILD_END_S} s)"
[ -f "$SUITE" ] || echo "run_gpu: $SUITE is missing: only kernels already under $KERNELS and $BASELINES are built"
"$PY" - "$SUITE" "$KERNELS" "$BASELINES" > "$OUT/build_dirs.txt" <<'EOF'
import sys
from pathlib import Path
from cutegen.commands.regen import load_suite
suite, kernels, baselines = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
# Problem by problem, picked kernel first, then its baseline: a problem can be benchmarked as soon
# as both of its libraries exist.
seen = set()
for _, p in (load_suite(suite) if Path(suite).is_file() else []):
    for root in (kernels, baselines):
        d = root / p.name
        if (d / "kernel.cu").is_file() and d not in seen:
            seen.add(d)
            print(d)
for root in (kernels, baselines):  # anything else under the roots (not in the suite) last
    for cu in sorted(root.rglob("kernel.cu")) if root.is_dir() else []:
        if cu.parent not in seen:
            seen.add(cu.parent)
            print(cu.parent)
EOF
echo "$(wc -l < "$OUT/build_dirs.txt") kernel directories to build"
# (A script file, not stdin: a command started in the background reads stdin from /dev/null.)
cat > "$STAGE/build_all.py" <<'EOF'
import sys
from cutegen.build import build
jobs, listing = int(sys.argv[1]), sys.argv[2]
dirs = [line.strip() for line in open(listing) if line.strip()]
if not dirs:
    print("nothing to build"); sys.exit(0)
summary = build(dirs, jobs=jobs, progress=sys.stdout, timeout=280)
print(summary.line())
sys.exit(0 if summary.ok else 1)
EOF
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$OUT/build_dirs.txt" > "$OUT/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|built |cached|failed" "$OUT/build.txt" | tail -n 40
echo "kernel directories with a library now: picked $(find "$KERNELS" -name kernel.so 2> /dev/null | wc -l)," \
     "baselines $(find "$BASELINES" -name kernel.so 2> /dev/null | wc -l)"

phase "2. compute-sanitizer (background)"
# SAN_KERNEL (kernel directories, space-separated) overrides the choice below.
[ -n "${SAN_KERNEL:-}" ] || SAN_KERNEL=$("$PY" - "$KERNELS" <<'EOF'
import sys
from cutegen import runner as R
kernels, _ = R.discover_kernels([sys.argv[1]])
# The chosen kernel of the smallest bf16 problem (TN first), so the sanitizer's slowdown stays small.
kernels.sort(key=lambda k: (k.problem.dtype_a != "bf16", k.problem.blas_layout != "tn", k.problem.flops))
print(kernels[0].directory if kernels else "")
EOF
)
SAN_LEFT=$(( VALIDATE_END_S + 30 - $(elapsed) ))
[ "$SAN_LEFT" -lt "$SANITIZE_TIMEOUT_S" ] && SANITIZE_TIMEOUT_S=$SAN_LEFT
if [ -n "$SAN_KERNEL" ] && [ "$SANITIZE_TIMEOUT_S" -ge 30 ]; then
  echo "sanitizing $SAN_KERNEL (${SANITIZE_TIMEOUT_S} s per tool)"
  # SAN_KERNEL may name several directories (space-separated); SAN_TOOLS picks the tools
  # shellcheck disable=SC2086
  "$PY" -m cutegen.commands.validate $SAN_KERNEL --sanitize-only --sanitize-parallel \
      --sanitize-tools "${SAN_TOOLS:-memcheck,racecheck,synccheck}" \
      --sanitize-timeout "$SANITIZE_TIMEOUT_S" --json "$OUT/sanitize.json" > "$OUT/sanitize.txt" 2>&1 &
  SAN_PID=$!
else
  echo "no sanitizer run: no built kernel, or under 30 s left for it"
  SAN_PID=""
fi

phase "3. validate (no kernel starts after ${VALIDATE_END_S} s)"
VAL_DEADLINE=$(( VALIDATE_END_S - $(elapsed) ))
[ "$VAL_DEADLINE" -lt 30 ] && VAL_DEADLINE=30
VAL_DIRS=()
for d in "$KERNELS" "$BASELINES"; do [ -d "$d" ] && VAL_DIRS+=("$d"); done
if [ ${#VAL_DIRS[@]} -gt 0 ]; then
  "$PY" -m cutegen.commands.validate "${VAL_DIRS[@]}" --quiet --timeout 45 --workers 3 --deadline "$VAL_DEADLINE" \
      --json "$OUT/validate.json"
  echo "validate exit code $?"
else
  echo "nothing to validate: neither $KERNELS nor $BASELINES exists"
fi

if [ -n "$SAN_PID" ]; then
  phase "2b. waiting for compute-sanitizer"
  wait "$SAN_PID"
  cat "$OUT/sanitize.txt" | tail -n 12
fi

phase "4. bench (no problem starts after ${BENCH_END_S} s)"
BENCH_DEADLINE=$(( BENCH_END_S - $(elapsed) ))
[ "$BENCH_DEADLINE" -lt 20 ] && BENCH_DEADLINE=20
"$PY" -m cutegen.commands.bench --suite "$SUITE" --kernels "$KERNELS" --baselines "$BASELINES" \
    --out "$OUT" --deadline "$BENCH_DEADLINE" --timeout 90 \
    $( [ -f "$OUT/validate.json" ] && echo --skip-failed "$OUT/validate.json" ) > "$OUT/bench.txt" 2>&1
echo "bench exit code $?"
sed '/^problem /,$d' "$OUT/bench.txt" | grep -vE "^\s*$" | head -n 60   # the table comes last

phase "5. summary ($(elapsed) s)"
rm -f "$OUT/build_dirs.txt" "$OUT/sanitize.txt"  # their content is in log.txt and sanitize.json
[ -f "$OUT/validate.json" ] && "$PY" - "$OUT/validate.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"validate: {s['kernels']} kernels, {len(s['pass'])} pass, {len(s['fail'])} fail, {len(s['hang'])} hang, "
      f"{len(s['crash'])} crash, {len(s['skipped'])} skipped, {s['unusable']} unusable (not built or no manifest); "
      f"cases {s['cases_passed']}/{s['cases_run']}, probes {s['probes_agreed']}/{s['probes']}")
for v in ("fail", "hang", "crash"):
    for k in s[v]:
        print(f"  {v}: {k}")
EOF
[ -f "$OUT/sanitize.json" ] && "$PY" - "$OUT/sanitize.json" <<'EOF'
import json, sys
for k in json.load(open(sys.argv[1])).get("sanitizer", []):
    tools = ", ".join(f"{t} {v['verdict']} ({v['seconds']} s)" for t, v in k.get("tools", {}).items())
    print(f"sanitizer: {k['kernel']}: {k['verdict']} [{tools or k.get('reason', '')}]")
EOF
sed -n '/^problem /,$p' "$OUT/bench.txt"
echo "run_gpu: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1  # let tee finish log.txt
