#!/usr/bin/env bash
# The Dask executor on the GPU machine (issue 13), in one device call that ends inside 8 minutes:
# a scheduler, one GPU worker (CUDA_VISIBLE_DEVICES=0, resource GPU=1) and compile workers on the
# other cores (resource MEM_GB=4, one nvcc each, each its own nvcc lock: the machine is ours).
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh         # CUTLASS headers -> oracles/.cutlass
#                 bash bench/gpu_dask.sh --plan                   # 3 problems of bench/tune_curve.toml, top 2
#                                                                 #   (+ nvMMH's pick, the CUTLASS default) -> out/dask-plan
#                 wheels of dask, distributed and what the image lacks, in .whl (see the README section)
#   device call:  bash bench/gpu_dask.sh                          # carry: ["oracles/.cutlass", ".whl", "out/dask-plan"]
#
# Default phases (bench/gpu_dask_tune.py; none starts that would end past END_S):
#   tune: `cutegen tune --from-plan out/dask-plan --executor dask` (compiles on WORKERS compile workers, each
#         problem validated and timed as one GPU task on the GPU worker, the client alone recording), then the
#         same with the local executor (--jobs WORKERS) from another empty cache, the cluster gone; compared:
#         winners, candidate statuses, records, the compile phase's wall time.
#   pack: `cutegen pack` of a small pack through the cluster and locally, byte for byte (needs the search,
#         i.e. egglog: on a machine without it the phase says it is skipped).
# Files in $OUT: log.txt, dask.json, tune-dask.json/.txt, tune-local.json/.txt (the two tune summaries and outputs).
# Dry run here (no GPU, no real nvcc: the stand-ins of tests/): DRY_RUN=1 WORKERS=2 PYTHON=.venv/bin/python bash bench/gpu_dask.sh
#
# The earlier phases (local vs Dask build of generated/ kernels, `cutegen bench --executor dask`, compile
# scaling; bench/gpu_dask.py) run with PHASES, e.g.: PHASES=build,gpu,scaling POINTS=1,16,4,8,2 bash bench/gpu_dask.sh
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
PLAN=${PLAN:-out/dask-plan}

if [ "${1:-}" = "--plan" ]; then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
  "$PY" -c "import cutegen.search, nvMatmulHeuristics" || { echo "gpu_dask --plan: needs cutegen with egglog and "\
      "nvidia-matmul-heuristics (pip install -e '.[heuristics]'); set PYTHON"; exit 2; }
  rm -rf "$PLAN"
  exec "$PY" -m cutegen.commands.tune --suite bench/tune_curve.toml --only llama8b_qkv_m16 --only llama8b_qkv_m128 \
      --only llama8b_o_m128 --top-k 2 --plan-only --device-kind h100-sxm --workdir "$PLAN" --quiet
fi

OUT=${OUT:-$REPO/out/dask}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
END_S=${END_S:-430}
PHASES=${PHASES:-tune,pack}
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
"$PY" -c "import dask, distributed, cutegen.executor, cutegen.build, cutegen.tuning.remote; print('dask', dask.__version__, 'distributed', distributed.__version__)" \
  || { echo "gpu_dask: imports failed"; exit 2; }
[ -f "$CUTEGEN_CUTLASS_INCLUDE/include/cutlass/version.h" ] || echo "gpu_dask: no CUTLASS headers under $CUTEGEN_CUTLASS_INCLUDE (carry oracles/.cutlass)"

case "$PHASES" in
  *tune*|*pack*)
    timeout -k 10 $(( END_S + 40 )) "$PY" bench/gpu_dask_tune.py --out "$OUT" --end "$END_S" --plan "$PLAN" \
        --phases "$PHASES" --workers "${WORKERS:-12}" ${DRY_RUN:+--dry-run} ;;
  *)
    timeout -k 10 $(( END_S + 40 )) "$PY" bench/gpu_dask.py --out "$OUT" --end "$END_S" --per-worker-locks \
        --phases "$PHASES" --points "${POINTS:-1,16,4,8,2}" --gpus "${GPUS:-1}" ;;
esac
echo "gpu_dask: exit code $? after ${SECONDS} s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
sleep 1  # let tee finish log.txt
