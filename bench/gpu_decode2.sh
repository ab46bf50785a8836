#!/usr/bin/env bash
# GPU run of decode attention (issue 25; helper decode2): bench/gpu_decode.sh on decode_bench.py's "decode2-r2" set
# (round 1 ran "decode2"): Llama-3.1-8B (Hq 32 / Hkv 8) and 70B (Hq 64 / Hkv 8) decode steps (B1 and B8, KV 8k and
# 32k, one query; plus head dim 64 and a 16-query call), round 1's fastest split kernels and the one-consumer-warpgroup
# decode kernel (DecodeFmhaKernel, 64-row Q tiles, one or two CTAs per SM) with more K/V stages, plus the search's
# pick per shape. Every built kernel is validated (ragged KV, GQA 32/8 and 64/8, D64/D128, Sq 1/4/16; through the
# custom op and the op's eager fast path; the C ABI's kept launch), sanitized (one ragged call of a two-CTA-per-SM
# decode kernel), checked under torch.compile and CUDA graphs, then timed in one process against SDPA cuDNN and
# flash: GPU time (CUDA graph replay), end to end through the op (CUDA events over back-to-back calls), and host
# time per call (the op's fast path, the custom op, the bare C ABI). At most 4 minutes; 3 files under $OUT/decode2/.
#
#   here, once:   PYTHON=.venv/bin/python bash oracles/prepare_cutlass_headers.sh   # headers -> oracles/.cutlass
#                 bash bench/gpu_decode2.sh --plan                                 # render -> out/decode2-plan
#   device call:  mkdir -p oracles/.cutlass && tar xzf .carry/cutlass.tgz -C oracles/.cutlass && bash bench/gpu_decode2.sh
#                 carry: [".carry", "out/decode2-plan"]
#
# Files in $OUT/decode2: log.txt, results.json (build, validation, op checks, timing), sanitize.txt.
export SET=${SET:-decode2-r2} SUBDIR=decode2 PLAN=${PLAN:-out/decode2-plan}   # round 1 ran SET=decode2
export SAN_PATTERN=${SAN_PATTERN:-*64x64*wg1*bps2*split4_*}
export GPU_SCRIPT=gpu_decode2
export TIME_S=${TIME_S:-95} HARD_LIMIT_S=${HARD_LIMIT_S:-230}
exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_decode.sh" "$@"
