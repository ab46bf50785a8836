#!/usr/bin/env bash
# GPU run of the unaligned suite (issue 10, item 4): build, validate, sanitize and benchmark the
# kernels under generated/unaligned with bench/run_gpu.sh, in one device call inside 8 minutes.
#
#   here, once:   bash oracles/prepare_cutlass_headers.sh      # CUTLASS headers -> oracles/.cutlass
#   device call:  bash bench/gpu_align.sh                      # carry: ["oracles/.cutlass"]
#
# What it shows: every cp.async kernel (4-16 byte cp.async vectors and the 1-2 byte synchronous
# copies) and every no-smem-epilogue kernel of bench/unaligned.toml validates (its own size with the
# stated leading dimensions, ragged M/N/K, batches with padded strides, the `unaligned_ld` case:
# leading dimensions and base pointers one vector off 16 bytes) and agrees with cutegen's launch
# contract on the refusal probes; compute-sanitizer (memcheck, racecheck, synccheck) runs on the
# 2-byte cp.async kernel, the form CUTLASS's generator never emits; then cutegen vs cuBLAS vs the
# CollectiveBuilder's unaligned default (cp.async cooperative, no-smem epilogue) on each problem.
# Files in $OUT as run_gpu.sh writes them: log.txt, build.txt, validate.json, sanitize.json,
# bench.txt, <date>-<device>.json and .png (at most 8).
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
export SUITE=bench/unaligned.toml
export KERNELS=generated/unaligned/sm90a
export BASELINES=generated/unaligned/baseline/sm90a
export SAN_KERNEL=${SAN_KERNEL:-generated/unaligned/sm90a/bf16_tn_m2048n2048k2047_cbf16dbf16_a1_b1}
# 17 kernels (11 picked, 6 baselines) at 16 parallel nvcc jobs are about one wave of compiles.
export BUILD_END_S=${BUILD_END_S:-300} VALIDATE_END_S=${VALIDATE_END_S:-400} BENCH_END_S=${BENCH_END_S:-450}
exec bash "$REPO/bench/run_gpu.sh"
