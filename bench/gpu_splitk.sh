#!/usr/bin/env bash
# GPU call for stream-K / split-K and FP8 fast accumulation (issue 10, items 1 and 5). One device call,
# ends inside 8 minutes, writes everything under $OUT.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh          # CUTLASS headers -> oracles/.cutlass
#   device call:  bash bench/gpu_splitk.sh                         # carry: ["oracles/.cutlass"]
#
#   1. build     (16 nvcc jobs, none past BUILD_END_S) the forms suite (generated/forms/sm90a and its
#                baselines), the rulebook's stream-K hang configurations (generated/forms/relaunch/sm90a)
#                and the main-suite kernels the search now runs as stream-K (generated/sm90a, stream_k only)
#   2. relaunch  bench/streamk_relaunch.py check (= tests/test_splitk_gpu.py): every built stream-K kernel, 2048^3 and 4096^3, five plans,
#                RELAUNCHES launches each on one workspace, every result checked, watchdog per case
#   3. validate  the same kernels and the forms baselines: own size with the manifest's launch plan,
#                every decomposition and split count on ragged M/N/K with beta != 0, batch 2, 20
#                relaunches, refusal probes; FP8 fast accumulation against the FP8 tolerance
#   4. bench     bench/forms_splitk.toml: search pick (its launch plan) vs cuBLAS vs CUTLASS builder
#   5. table
# Files in $OUT: log.txt, build.txt, relaunch.jsonl, relaunch.txt, validate.json, bench.txt,
#   <date>-<device>.json and .png (commit the last two to bench/results/).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
T0=$(date +%s)
OUT=${OUT:-$REPO/out/splitk}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-230}
RELAUNCH_END_S=${RELAUNCH_END_S:-300}
VALIDATE_END_S=${VALIDATE_END_S:-370}
BENCH_END_S=${BENCH_END_S:-420}
export CUTEGEN_RELAUNCHES=${RELAUNCHES:-100}
export PYTHONUNBUFFERED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until
. "$REPO/bench/stage_package.sh"

phase "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))"
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_splitk: CUTLASS headers missing (carry oracles/.cutlass)"


phase "1. build (jobs $JOBS, none past ${BUILD_END_S} s)"
cat > "$STAGE/dirs.py" <<'EOF'
import json, sys
from pathlib import Path
dirs = []
for root in ("generated/forms/relaunch/sm90a", "generated/forms/sm90a", "generated/forms/baseline/sm90a"):
    dirs += sorted(p.parent for p in Path(root).glob("*/manifest.json"))
for m in sorted(Path("generated/sm90a").glob("*/manifest.json")):     # main-suite kernels now stream-K
    if json.loads(m.read_text())["config"]["tile_scheduler"] == "stream_k":
        dirs.append(m.parent)
print("\n".join(str(d) for d in dirs))
EOF
"$PY" "$STAGE/dirs.py" > "$STAGE/dirs.txt"
echo "$(wc -l < "$STAGE/dirs.txt") kernel directories"
cat > "$STAGE/build_all.py" <<'EOF'
import sys
from cutegen.build import build
dirs = [l.strip() for l in open(sys.argv[2]) if l.strip()]
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=220)
print(summary.line())
EOF
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" "$STAGE/dirs.txt" > "$OUT/build.txt" 2>&1
grep -E "FAILED|LEGALITY BUG|built |failed" "$OUT/build.txt" | tail -n 30

phase "2. relaunch on one workspace (${CUTEGEN_RELAUNCHES} launches per plan and size; none past ${RELAUNCH_END_S} s)"
rm -f "$OUT/relaunch.jsonl"
# bench/streamk_relaunch.py is what tests/test_splitk_gpu.py runs, without needing pytest here
run_until "$RELAUNCH_END_S" "$PY" bench/streamk_relaunch.py check --out "$OUT/relaunch.jsonl" > "$OUT/relaunch.txt" 2>&1
grep -vE "^ok " "$OUT/relaunch.txt" | tail -n 15

phase "3. validate (no kernel starts after ${VALIDATE_END_S} s)"
VAL_DEADLINE=$(( VALIDATE_END_S - $(elapsed) ))
[ "$VAL_DEADLINE" -lt 30 ] && VAL_DEADLINE=30
mapfile -t VAL_DIRS < "$STAGE/dirs.txt"
"$PY" -m cutegen.commands.validate "${VAL_DIRS[@]}" --quiet --timeout 45 --workers 3 --deadline "$VAL_DEADLINE" \
    --json "$OUT/validate.json"
echo "validate exit code $?"

phase "4. bench forms suite (no problem starts after ${BENCH_END_S} s)"
BENCH_DEADLINE=$(( BENCH_END_S - $(elapsed) ))
[ "$BENCH_DEADLINE" -lt 20 ] && BENCH_DEADLINE=20
"$PY" -m cutegen.commands.bench --suite bench/forms_splitk.toml --kernels generated/forms/sm90a \
    --baselines generated/forms/baseline/sm90a --out "$OUT" --deadline "$BENCH_DEADLINE" --timeout 90 \
    $( [ -f "$OUT/validate.json" ] && echo --skip-failed "$OUT/validate.json" ) > "$OUT/bench.txt" 2>&1
echo "bench exit code $?"

phase "5. summary ($(elapsed) s)"
[ -f "$OUT/relaunch.jsonl" ] && "$PY" - "$OUT/relaunch.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in rows if r["ok"]]
print(f"relaunch: {len(ok)}/{len(rows)} (kernel, size, plan) cases correct on all launches; "
      f"{sum(r['relaunches'] for r in ok)} launches checked")
for r in rows:
    if r not in ok:
        print(f"  FAIL {r['kernel']} {r['size']} {r['plan']}: {r['status']} {str(r['result'])[:200]}")
EOF
[ -f "$OUT/validate.json" ] && "$PY" - "$OUT/validate.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"validate: {s['kernels']} kernels, {len(s['pass'])} pass, {len(s['fail'])} fail, {len(s['hang'])} hang, "
      f"{len(s['crash'])} crash, {s['unusable']} unusable; cases {s['cases_passed']}/{s['cases_run']}, "
      f"probes {s['probes_agreed']}/{s['probes']}")
for v in ("fail", "hang", "crash"):
    for k in s[v]:
        print(f"  {v}: {k}")
EOF
sed -n '/^problem /,$p' "$OUT/bench.txt"
echo "gpu_splitk: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1
