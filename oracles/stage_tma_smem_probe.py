"""nvcc probe: sizeof(GemmKernel::SharedStorage) of kernels rendered with the one-stage TMA form
(cutegen/stage_tma.py), against cutegen's shared-memory model (check_config's smem_bytes).

For each case the kernel is rendered fresh by cutegen's renderer and followed by

    static_assert(sizeof(typename cutegen_<hash>::GemmKernel::SharedStorage) == <model>, ...);

and compiled to PTX (the front end evaluates the assertion; no ptxas, no GPU). A case whose assertion holds is
recorded with ``kernel_bytes`` = the model's value and ``verdict`` "equal"; one that fails is recorded "differs"
(run the kernel through the smem_probe.py oracle to get the number).

    python oracles/stage_tma_smem_probe.py     # writes oracles/stage_tma_smem_probe_results.jsonl
The compiles take the shared nvcc lock (/tmp/cutegen-nvcc.lock), one after another.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "stage_tma_smem_probe_results.jsonl"

# (problem, config): cuBLAS's three diagnose tiles through the form, an unswapped 128x200, and the two
# configuration-oracle compile errors the form builds
CASES = [
    ({"m": 257, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"},
     {"tile_shape": [64, 136, 64], "cluster_shape": [2, 1, 1], "stages": 8, "mainloop_schedule": "pingpong",
      "epilogue_schedule": "tma_warp_specialized", "swap_ab": True, "mma_instruction": [64, 136, 16]}),
    ({"m": 200, "n": 14336, "k": 4096, "dtype": "bf16", "layout": "tn"},
     {"tile_shape": [128, 200, 64], "cluster_shape": [4, 1, 1], "stages": 5, "mainloop_schedule": "cooperative",
      "epilogue_schedule": "tma_warp_specialized_cooperative", "swap_ab": True, "mma_instruction": [64, 200, 16]}),
    ({"m": 2040, "n": 3584, "k": 3584, "dtype": "bf16", "layout": "tn"},
     {"tile_shape": [128, 232, 64], "cluster_shape": [2, 1, 1], "stages": 4, "mainloop_schedule": "cooperative",
      "epilogue_schedule": "tma_warp_specialized_cooperative", "swap_ab": True, "mma_instruction": [64, 232, 16]}),
    ({"m": 4096, "n": 1000, "k": 4096, "dtype": "bf16", "layout": "tn"},
     {"tile_shape": [128, 200, 64], "cluster_shape": [2, 1, 1], "stages": 5, "mainloop_schedule": "cooperative",
      "epilogue_schedule": "tma_warp_specialized_cooperative", "mma_instruction": [64, 200, 16]}),
    ({"m": 2048, "n": 2048, "k": 2048, "dtype": "bf16", "layout": "tn"},
     {"tile_shape": [128, 8, 64], "stages": "auto", "mainloop_schedule": "cooperative",
      "epilogue_schedule": "tma_warp_specialized_cooperative"}),
    ({"m": 2048, "n": 2048, "k": 2048, "dtype": "bf16", "layout": "tn"},
     {"tile_shape": [64, 200, 64], "stages": "auto", "mainloop_schedule": "pingpong",
      "epilogue_schedule": "tma_warp_specialized"}),
]


def probe_source(problem, config) -> tuple[str, int, int]:
    """(kernel.cu + the assertion, the model's bytes, the stage count) for one case."""
    from cutegen import render
    from cutegen.legality import check_config

    cfg = render.complete_config(problem, config)
    rep = check_config(problem, cfg)
    if not rep.legal:
        raise SystemExit(f"illegal case {cfg.short_name()}: {rep.to_dict()['reasons']}")
    src = render.render(problem, rep.config, "cutlass").source
    ns = re.search(r"namespace (cutegen_[0-9a-f]+)", src).group(1)
    assert "StockMainloop" in src, "the case does not use the one-stage form"
    return (src + f"\nstatic_assert(sizeof(typename {ns}::GemmKernel::SharedStorage) == {rep.smem_bytes}, "
            "\"cutegen shared-memory model\");\n", rep.smem_bytes, rep.stages)


def main() -> int:
    from cutegen.build import compile_command
    from cutegen.config import KernelConfig
    from cutegen.problem import GemmProblem
    from cutegen.toolchain import cutlass_include_dirs, find_nvcc, nvcc_full_version

    rows = []
    for pd, cd in CASES:
        problem, config = GemmProblem.from_dict(pd), KernelConfig.from_dict({"tile_scheduler": "persistent", **cd})
        src, model, stages = probe_source(problem, config)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "probe.cu").write_text(src)
            cmd = [c for c in compile_command(find_nvcc(), "probe.cu", "probe.ptx", cutlass_include_dirs())
                   if c not in ("-shared",)] + ["-ptx"]
            run = subprocess.run(["flock", "/tmp/cutegen-nvcc.lock", *cmd], cwd=tmp, capture_output=True, text=True)
        verdict = "equal" if run.returncode == 0 else "differs"
        rows.append({"problem": pd, "config": cd, "stages": stages, "model_bytes": model,
                     "kernel_bytes": model if verdict == "equal" else None, "verdict": verdict,
                     "nvcc": nvcc_full_version(find_nvcc())})
        print(config.short_name(), model, verdict, flush=True)
    RESULTS.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
