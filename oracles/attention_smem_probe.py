"""Host-side compiler probe: sizeof(SharedStorage) of CUTLASS 4.2's Hopper FMHA kernels (example 88).

For each row below this writes one C++ block that instantiates ``FmhaBuilder<...>::Kernel`` exactly as the
example's ``FwdRunner`` does (88_hopper_fmha.cu:230-265: strides, the FP8 V stride, the options) and prints
``sizeof(Kernel::SharedStorage)``, ``MaxThreadsPerBlock`` and, for the warp-specialized kernels,
``MmaRegisterRequirement``. Nothing is launched and no device code is generated (the blocks sit under
``#ifndef __CUDA_ARCH__``), so one translation unit holds every row and compiles on a machine without a GPU.

    python oracles/attention_smem_probe.py     # writes build/attention_smem_probe.cu, compiles, runs,
                                               # writes oracles/attention_smem_probe_results.jsonl

tests/test_attention_legality.py compares legality/attention.py's byte model with every row. The compile
takes the shared nvcc lock (/tmp/cutegen-nvcc.lock).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "attention_smem_probe_results.jsonl"
ELEMENT_T = {"bf16": "cutlass::bfloat16_t", "f16": "cutlass::half_t", "e4m3": "cutlass::float_e4m3_t"}
POLICY_T = {"tma": "cutlass::gemm::KernelTma", "ws_cooperative": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
            "ws_pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong"}


def rows() -> list[dict]:
    """(dtype, head_dim, config dict) rows: the example's kernels and variations of every input of the model."""
    def r(dt, d, tq, tkv, sched, wg=2, sq=None, skv=5, pers=False, qsep=False, acc="f32", bps=1, cm=1):
        if sched == "ws_pingpong":
            pers, qsep = True, True
        sq = (1 if sched == "tma" else wg) if sq is None else sq
        return {"dtype": dt, "head_dim": d,
                "config": {"tile_q": tq, "tile_kv": tkv, "schedule": sched, "mma_warpgroups": wg if sched != "tma" else 1,
                           "stages_q": sq, "stages_kv": skv, "persistent": pers, "loads_q_separately": qsep,
                           "cluster_m": cm, "acc_qk": acc, "blocks_per_sm": bps}}
    R = [
        r("f16", 32, 64, 128, "tma", skv=4, bps=2), r("f16", 64, 64, 128, "tma", skv=4, bps=2),
        r("bf16", 128, 64, 128, "tma", skv=4), r("bf16", 64, 128, 64, "tma", skv=6), r("f16", 64, 64, 64, "tma", skv=4, cm=2),
        r("f16", 32, 128, 64, "ws_cooperative"), r("f16", 64, 128, 64, "ws_cooperative"),
        r("f16", 64, 128, 64, "ws_pingpong"), r("f16", 128, 128, 128, "ws_cooperative"),
        r("bf16", 128, 128, 128, "ws_pingpong"), r("bf16", 256, 128, 64, "ws_cooperative"),
        r("bf16", 128, 128, 128, "ws_cooperative", pers=True), r("bf16", 128, 256, 64, "ws_cooperative", skv=3),
        r("bf16", 128, 128, 64, "ws_cooperative", sq=3, skv=4), r("bf16", 96, 128, 128, "ws_cooperative"),
        r("bf16", 80, 128, 128, "ws_cooperative", skv=4), r("bf16", 192, 128, 64, "ws_cooperative", skv=4),
        r("bf16", 64, 128, 128, "ws_pingpong", skv=8), r("bf16", 128, 128, 128, "ws_cooperative", skv=3, pers=True),
        r("e4m3", 128, 128, 256, "ws_cooperative", acc="f16"), r("e4m3", 128, 128, 256, "ws_cooperative"),
        r("e4m3", 128, 128, 128, "ws_pingpong"), r("e4m3", 256, 128, 128, "ws_cooperative"),
        r("e4m3", 256, 128, 128, "ws_pingpong"),
    ]
    return R


def _block(i: int, row: dict) -> str:
    c = row["config"]
    el = ELEMENT_T[row["dtype"]]
    acc_qk = "cutlass::half_t" if c["acc_qk"] == "f16" else "float"
    opts = [f"Option<Tag::kNumMmaWarpGroups, cute::Int<{c['mma_warpgroups']}>>",
            f"Option<Tag::kStagesQ, cute::Int<{c['stages_q']}>>", f"Option<Tag::kStagesKV, cute::Int<{c['stages_kv']}>>",
            f"Option<Tag::kIsPersistent, cute::{'true' if c['persistent'] else 'false'}_type>",
            f"Option<Tag::kLoadsQSeparately, cute::{'true' if c['loads_q_separately'] else 'false'}_type>",
            f"Option<Tag::kBlocksPerSM, cute::Int<{c['blocks_per_sm']}>>", f"Option<Tag::kClusterM, cute::Int<{c['cluster_m']}>>"]
    if c["schedule"] == "ws_pingpong":       # the builder appends these itself; duplicates would be harmless
        opts = [o for o in opts if "kIsPersistent" not in o and "kLoadsQSeparately" not in o]
    stride_v = "cute::tuple<_1, int, cute::tuple<int, int>>" if row["dtype"] == "e4m3" else \
        "cute::tuple<int, _1, cute::tuple<int, int>>"
    mreg = "(int) K::MmaRegisterRequirement" if c["schedule"] != "tma" else "-1"
    return f"""
  {{
    using K = typename cutlass::fmha::kernel::FmhaBuilder<{el}, {acc_qk}, float,
        cute::Shape<cute::Int<{c['tile_q']}>, cute::Int<{c['tile_kv']}>, cute::Int<{row['head_dim']}>>,
        cute::tuple<int, _1, cute::tuple<int, int>>, cute::tuple<int, _1, cute::tuple<int, int>>, {stride_v},
        cutlass::fmha::collective::{'CausalFusion' if row.get('causal') else 'DefaultFusion'}, {POLICY_T[c['schedule']]},
        {', '.join(opts)}>::Kernel;
    printf("{{\\"row\\": {i}, \\"smem\\": %d, \\"threads\\": %d, \\"mma_regs\\": %d}}\\n",
           (int) sizeof(typename K::SharedStorage), (int) K::MaxThreadsPerBlock, {mreg});
  }}"""


def source(rs: list[dict]) -> str:
    blocks = "".join(_block(i, r) for i, r in enumerate(rs))
    return f"""#include <cstdio>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "collective/fmha_fusion.hpp"
#include "kernel/fmha_kernel_builder.hpp"
using namespace cute;
using namespace cutlass::fmha::kernel;
int main() {{
#ifndef __CUDA_ARCH__
{blocks}
#endif
  return 0;
}}
"""


def main() -> int:
    import cutlass_library
    src_root = Path(cutlass_library.__file__).resolve().parent / "source"
    rs = rows()
    build = HERE.parent / "build"
    build.mkdir(exist_ok=True)
    cu = build / "attention_smem_probe.cu"
    exe = build / "attention_smem_probe"
    cu.write_text(source(rs))
    cmd = ["flock", "/tmp/cutegen-nvcc.lock", "nvcc", "-std=c++17", "-O0", "--expt-relaxed-constexpr",
           "-gencode=arch=compute_90a,code=sm_90a", f"-I{src_root / 'include'}", f"-I{src_root / 'tools/util/include'}",
           f"-I{src_root / 'examples/88_hopper_fmha'}", str(cu), "-o", str(exe)]
    subprocess.run(cmd, check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    with open(RESULTS, "w") as f:
        for line in out.splitlines():
            got = json.loads(line)
            row = dict(rs[got["row"]])
            row.update(smem=got["smem"], threads=got["threads"], mma_regs=got["mma_regs"])
            f.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"wrote {RESULTS} ({len(rs)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
