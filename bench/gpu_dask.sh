#!/usr/bin/env bash
# The Dask executor on the GPU machine (issue 13), in one device call that ends inside 8 minutes:
# a scheduler, one GPU worker (CUDA_VISIBLE_DEVICES=0, resource GPU=1) and compile workers on the
# other cores (resource MEM_GB=4, one nvcc each, each its own nvcc lock: the machine is ours).
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh         # CUTLASS headers -> oracles/.cutlass
#                 wheels of dask, distributed and what the image lacks, in .whl (see the README section)
#   device call:  bash bench/gpu_dask.sh                          # carry: ["oracles/.cutlass", ".whl"]
#
# Phases (bench/gpu_dask.py; none starts that would end past END_S):
#   1. build: 3 suite problems' picked + baseline kernels (6 distinct) from an empty cache, with the local
#      executor (--jobs 6) and through 6 Dask compile workers; keys, statuses, sizes, statistics compared.
#   2. gpu:   `cutegen bench --executor dask` on those 3 problems through the GPU worker (every contender
#      verified against a float32 reference before it is timed).
#   3. scaling: compile throughput with 1, 16, 4, 8, 2 workers (N copies of one kernel, distinct keys), in
#      that order, as far as END_S allows. A second call fills in the rest:
#      PHASES=scaling POINTS=2,4,8 bash bench/gpu_dask.sh
# Files in $OUT: log.txt, dask.json, <date>-<device>.json (the bench document).
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/out/dask}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
END_S=${END_S:-430}
export PYTHONUNBUFFERED=1
export CUTEGEN_CUTLASS_INCLUDE=${CUTEGEN_CUTLASS_INCLUDE:-$REPO/oracles/.cutlass}
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"

# Dask is not in the image: install the carried wheels (only ours, one version each) into /tmp/site.
WHEELS=()
for n in dask distributed partd locket tblib zict tornado cloudpickle; do
  WHEELS+=( $(ls .whl/${n}-[0-9]*.whl 2> /dev/null | head -1) )
done
[ ${#WHEELS[@]} -eq 8 ] || { echo "gpu_dask: carried wheels missing (have: ${WHEELS[*]:-none}); carry .whl"; exit 2; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "${SITE:-/tmp/site}" "${WHEELS[@]}" || exit 2
export PYTHONPATH=${SITE:-/tmp/site}${PYTHONPATH:+:$PYTHONPATH}

. "$REPO/bench/stage_package.sh"   # cutegen importable from the bare tree (PYTHONPATH)

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
nvcc --version | tail -1
"$PY" -c "import dask, distributed, cutegen.executor, cutegen.build; print('dask', dask.__version__, 'distributed', distributed.__version__)" \
  || { echo "gpu_dask: imports failed"; exit 2; }
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_dask: no CUTLASS headers under $CUTEGEN_CUTLASS_INCLUDE (carry oracles/.cutlass)"

timeout -k 10 $(( END_S + 40 )) "$PY" bench/gpu_dask.py --out "$OUT" --end "$END_S" --per-worker-locks \
    --phases "${PHASES:-build,gpu,scaling}" --points "${POINTS:-1,16,4,8,2}" --gpus "${GPUS:-1}"
echo "gpu_dask: exit code $? after ${SECONDS} s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1  # let tee finish log.txt
