"""Search, render and (if nvcc is present) build the kernel for one GEMM problem, from Python.

    python examples/generate_kernel.py [OUT_DIR]
"""
import sys
from pathlib import Path

from cutegen import GemmProblem
from cutegen.build import build, find_nvcc
from cutegen.render import render
from cutegen.search import search

problem = GemmProblem(m=8192, n=3072, k=1024, dtype_a="bf16", dtype_b="bf16", layout_a="row", layout_b="col")
result = search(problem, top_k=3)
best = result.ranked[0]
print(f"searched {result.egraph_nodes} e-nodes in {result.search_seconds:.2f} s; "
      f"{result.candidates_legal} legal candidates judged")
for r in result.ranked:
    print(f"  {r.config.short_name():44s} predicted {r.cost:8.1f} us")

kernel = render(problem, best.config, cost={"predicted_us": best.cost})
out = Path(sys.argv[1] if len(sys.argv) > 1 else "out/example_kernel")
kernel.write(out)
print(f"wrote {out}/kernel.cu and manifest.json (kernel {kernel.kernel_hash})")
if find_nvcc():
    summary = build([out], jobs=1)
    print(summary.line())
