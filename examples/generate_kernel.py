"""Search, render and (if nvcc is present) build the kernel for one GEMM problem, from Python.

    python examples/generate_kernel.py [OUT_DIR] [--no-build]
"""
import argparse

import cutegen

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("out", nargs="?", default="out/example_kernel", help="the kernel directory to write")
parser.add_argument("--no-build", action="store_true", help="render only, even where nvcc is found")
args = parser.parse_args()

problem = cutegen.GemmProblem(m=8192, n=3072, k=1024, dtype_a="bf16", dtype_b="bf16",
                              layout_a="row", layout_b="col")
result = cutegen.find_kernels(problem, top_k=3)
print(f"searched {result.egraph_nodes} e-nodes in {result.search_seconds:.2f} s; "
      f"{result.candidates_legal} legal of {result.candidates_judged} candidates judged")
for ranked in result.ranked:
    print(f"  {ranked.config.short_name():44s} predicted {ranked.cost:8.1f} us")

# generate() searches again (deterministically: the same winner) and writes kernel.cu + manifest.json.
kernel = cutegen.generate(problem, args.out, build=not args.no_build)
assert kernel.config == result.ranked[0].config
print(f"wrote {kernel.source_file} and manifest.json (kernel {kernel.kernel_hash})")
if kernel.library is not None:
    print(f"built {kernel.library}")
elif kernel.build_note:
    print(kernel.build_note)
if not kernel.ok:
    raise SystemExit(kernel.build.message)
