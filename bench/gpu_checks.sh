#!/usr/bin/env bash
# The GPU checks of issue 16: build every kernel under generated/, run the GPU test suite
# (`pytest -m gpu`: every kernel validated as `cutegen validate` does it, compute-sanitizer on a
# sample, the runner's GPU tests), and write one validation record per kernel. Runs on the device
# machine from the repository root and ends inside 8 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh          # CUTLASS headers -> oracles/.cutlass
#   device call:  bash bench/gpu_checks.sh                         # carry: ["oracles/.cutlass"]
#   afterwards:   commit $OUT/<date>-<device>-<time>.jsonl as generated/validation/<same name>
#                 (a new file: record files are never rewritten); tests/test_validation_records.py
#                 then passes for every kernel the run validated.
#
# Phases, each with a budget from the script's start:
#   1. build   every kernel directory under generated/ (manifest.json + kernel.cu), 16 nvcc jobs,
#              through the cutegen cache in $CUTEGEN_CACHE (outside the tree: a second call on a still
#              warm machine starts from cache hits). No compile runs past BUILD_END_S; a kernel left
#              unbuilt fails its test in phase 2 and gets no record: call the script again while the
#              machine is warm and commit both record files (generated/ held 69 distinct kernels on
#              2026-11-23, 86 after the merges of that evening; whether one cold call builds them all
#              has not been measured).
#              The records file is kept current after every test, so a run cut by SUITE_END_S keeps
#              what it finished (the sanitizer tests run last; a record without them says null).
#   2. pytest  -m gpu over tests/test_gpu_validation.py, test_runner_gpu.py, test_runner_worker_torch.py;
#              killed at SUITE_END_S. Records go to $OUT (CUTEGEN_VALIDATION_RECORDS).
#   3. a short table, last.
# Files in $OUT (at most 8): log.txt, build.txt, pytest.txt, junit.xml, <date>-<device>-<time>.jsonl.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
T0=$(date +%s)
OUT=${OUT:-$REPO/out/gpu_checks}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

PY=${PYTHON:-python3}
JOBS=${JOBS:-16}
BUILD_END_S=${BUILD_END_S:-270}    # every nvcc is killed by then
SUITE_END_S=${SUITE_END_S:-468}    # the pytest run is killed by then
export PYTHONUNBUFFERED=1
# ONLY_UNRECORDED=1: build and validate only the kernels whose hash has no passing Hopper record yet
[ -n "${ONLY_UNRECORDED:-}" ] && export CUTEGEN_ONLY_UNRECORDED=1
export CUTEGEN_CACHE=${CUTEGEN_CACHE:-/tmp/cutegen-cache}
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
command -v compute-sanitizer > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"

. "$REPO/bench/gpu_lib.sh"   # elapsed, phase, run_until

# The tree is not installed there: stage_package.sh mirrors pyproject's package mapping on PYTHONPATH.
. "$REPO/bench/stage_package.sh"


phase "environment"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv 2>&1 | head -3
nvcc --version | tail -1
"$PY" -c "import sys, torch, pytest; print('python', sys.version.split()[0], 'torch', torch.__version__, 'pytest', pytest.__version__, torch.cuda.get_device_name(0))"
command -v compute-sanitizer || echo "gpu_checks: compute-sanitizer not found: the sanitizer tests will fail"
if [ ! -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ]; then
  echo "gpu_checks: CUTLASS headers missing under $CUTEGEN_CUTLASS_INCLUDE (run oracles/prepare_cutlass_headers.sh here and carry oracles/.cutlass)"
fi
"$PY" -c "import cutegen.runner, cutegen.build, cutegen.validation_records" || { echo "gpu_checks: cutegen does not import"; exit 2; }

phase "1. build every kernel under generated/ (jobs $JOBS, no compile past ${BUILD_END_S} s)"
cat > "$STAGE/build_all.py" <<'EOF'
import os
import sys
from pathlib import Path
from cutegen.build import build
dirs = sorted(str(m.parent) for m in Path("generated").rglob("manifest.json") if (m.parent / "kernel.cu").is_file())
if os.environ.get("CUTEGEN_ONLY_UNRECORDED"):        # ONLY_UNRECORDED=1: the kernels without a passing record
    from cutegen import validation_records as VR
    todo = VR.unrecorded(".")
    dirs = [d for d in dirs if d in todo]
print(f"{len(dirs)} kernel directories")
summary = build(dirs, jobs=int(sys.argv[1]), progress=sys.stdout, timeout=280)
print(summary.line())
sys.exit(0 if summary.ok else 1)
EOF
run_until "$BUILD_END_S" "$PY" "$STAGE/build_all.py" "$JOBS" > "$OUT/build.txt" 2>&1
grep -E "kernel directories|FAILED|LEGALITY BUG|failed|^built " "$OUT/build.txt" | tail -n 30
echo "kernel directories with a library: $(find generated -name kernel.so | wc -l) of $(find generated -name manifest.json | wc -l)"

phase "2. pytest -m gpu (killed at ${SUITE_END_S} s)"
# -P: no current directory on sys.path, so `cutegen` is the staged package, not the bare cutegen/ folder.
CUTEGEN_VALIDATION_RECORDS="$OUT" run_until "$SUITE_END_S" "$PY" -P -m pytest -m gpu -q -rs -p no:cacheprovider \
    --junitxml="$OUT/junit.xml" tests/test_gpu_validation.py tests/test_runner_gpu.py tests/test_runner_worker_torch.py \
    > "$OUT/pytest.txt" 2>&1
echo "pytest exit code $?"
grep -E "^(FAILED|ERROR)|passed|failed|validation records" "$OUT/pytest.txt" | tail -n 40

phase "3. summary ($(elapsed) s)"
"$PY" - "$OUT" <<'EOF'
import sys
from pathlib import Path
from cutegen import validation_records as VR
out = Path(sys.argv[1])
files = sorted(out.glob("*.jsonl"))
if not files:
    print("no record file written (no kernel was validated: see pytest.txt)"); sys.exit(0)
recs = VR.read_records(out)
kernels = VR.kernel_hashes(Path("generated"))
missing = VR.unvalidated(kernels, recs + VR.read_records(VR.records_dir(".")))
print(f"record file: {files[-1].name}: {len(recs)} records, device {recs[0]['device_name']} "
      f"(cc {recs[0]['compute_capability']}), driver {recs[0]['driver']}, {recs[0]['date']}")
print(f"{'kernel':<62} {'cases':>7} {'probes':>7} {'max err':>9} {'sanitizer':>9} verdict")
for r in recs:
    err = f"{r['max_rel_error']:.2e}" if r["max_rel_error"] is not None else "-"
    print(f"{r['directory'][-62:]:<62} {r['cases_passed']:>3}/{r['cases_run']:<3} {r['probes_agreed']:>3}/{r['probes']:<3} "
          f"{err:>9} {str(r['sanitizer'] or '-'):>9} {r['verdict']}")
print(f"total: {sum(VR.passed(r) for r in recs)}/{len(recs)} kernels pass; cases "
      f"{sum(r['cases_passed'] for r in recs)}/{sum(r['cases_run'] for r in recs)}, probes "
      f"{sum(r['probes_agreed'] for r in recs)}/{sum(r['probes'] for r in recs)}; "
      f"kernels under generated/ still without a passing Hopper record: {len(missing)}")
EOF
echo "gpu_checks: done in $(elapsed) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1  # let tee finish log.txt
