"""A pack with a GEMM set and two MoE layers, rendered fresh, built with its CMake project and nvcc on this CPU
machine, then linked into a C++ program (add_subdirectory; examples/pack/moe_consumer) and into the PyTorch
extension. Linking needs no GPU (issue 26 part 3, with issue 22's link lesson: every symbol a kernel exports is
unique inside the pack).

The selection: one stream-K GEMM kernel (it exports the launch-plan pair besides the four-function ABI), a bf16
offs MoE layer choosing from two grouped configurations (so its dispatcher has two segments) and a bf16 masked
layer: three grouped kernels of two classes, each exporting the same five grouped names before the pack renames
them. Four kernel compiles (1-2 minutes each here, one nvcc at a time)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cutegen import packs
from cutegen.build import DEFAULT_LOCK, cutlass_include_dirs, find_nvcc
from cutegen.config import KernelConfig
from cutegen.ops.grouped_gemm import abi as gabi
from cutegen.ops.grouped_gemm.config import GroupedGemmConfig
from cutegen.packs import grouped, render, select, shapes, targets
from pack_build import cmake, cuda_include, defined_globals

REPO = Path(__file__).resolve().parent.parent
CONSUMER = REPO / "examples" / "pack" / "moe_consumer"
STREAM_K = REPO / "generated/sm90a/bf16_tn_m128n8192k8192_cbf16dbf16/manifest.json"
SHAPES = ('[[shape]]\nname = "proj"\ndtype = "bf16"\nlayout = "tn"\nm = [128]\nn = 8192\nk = 8192\n'
          '[[moe]]\nname = "w1"\nexperts = 8\nn = 14336\nk = 4096\ntokens = {min = 1, max = 16384}\nrouting = "skewed"\n'
          '[[moe]]\nname = "down"\nexperts = 128\nn = 2048\nk = 768\nlayout = "masked"\ntokens = [1, 64]\n')
# Configurations the grouped search picks for these layers (as in examples/pack/moe.toml's pack)
SMALL = GroupedGemmConfig(tile_m=64, tile_n=128, tile_k=128, schedule="ptr_pingpong", stages=4, raster="along_m")
LARGE = GroupedGemmConfig(tile_m=128, tile_n=256, tile_k=64, cluster_n=2, stages=4, raster="along_m")
MASKED = GroupedGemmConfig(tile_m=64, tile_n=256, tile_k=64, cluster_n=2, schedule="ptr_pingpong", stages=5,
                           raster="along_m")

pytestmark = pytest.mark.compile








def test_pack_with_gemm_set_and_two_moe_layers_builds_and_links_everywhere(tmp_path):
    f = tmp_path / "moe.toml"
    f.write_text(SHAPES)
    t = targets.target("h200")
    sel = select.given(shapes.expand(shapes.load(f), t.sms), t,
                       [KernelConfig.from_dict(json.loads(STREAM_K.read_text())["config"])])
    moe_sel = grouped.select(grouped.load(f), "h200", given={"w1": [SMALL, LARGE], "down": [MASKED]})
    # what this test is about: two segments on w1, three grouped kernels of two classes, a stream-K GEMM kernel
    assert [len(c.segments) for c in moe_sel.layers] == [2, 1] and len(moe_sel.kernels) == 3
    assert sel.kernels[0].config.tile_scheduler == "stream_k"
    from cutegen.core.templates import environment
    env = environment()
    gfiles, ctx = grouped.files(moe_sel, "h200", env)
    files = render.pack_files(sel, {}, "cutegen_pack", f.name, moe=ctx)
    grouped.add_to_pack(files, moe_sel, "h200", env, gfiles, ctx)
    pack = tmp_path / "pack"
    packs.write(pack, files)
    meta = json.loads((pack / "pack.json").read_text())
    ghashes = [k["hash"] for k in meta["moe"]["kernels"]]
    gemm_hash = meta["kernels"][0]["hash"]

    root = str(Path(cutlass_include_dirs()[0]).parent)
    b1 = tmp_path / "b1"
    cmake("-S", str(CONSUMER), "-B", str(b1), f"-DPACK_DIR={pack}", f"-DCUTEGEN_CUTLASS_INCLUDE={root}",
           f"-DCMAKE_CUDA_COMPILER={find_nvcc()}", "-DCMAKE_BUILD_TYPE=Release",
           f"-DCMAKE_CUDA_COMPILER_LAUNCHER=flock;{DEFAULT_LOCK}")
    cmake("--build", str(b1), "-j", "2")
    lib = next(b1.rglob("libcutegen_pack.a"))
    defined = defined_globals(lib)
    twice = sorted(s for s, n in defined.items() if n > 1)
    assert not twice, f"symbols defined more than once in the pack library: {twice[:10]}"
    exported = sorted(s for s in defined if s.startswith("cutegen_") and not s.startswith("cutegen_pack_"))
    assert all(any(s.startswith(f"cutegen_{h}_") for h in ghashes + [gemm_hash]) for s in exported), exported
    for h in ghashes:            # every grouped export, under its kernel's hash
        assert {f"cutegen_{h}_{sym[8:]}" for sym in gabi.EXPORTED_SYMBOLS} <= set(defined)
    for sym in gabi.EXPORTED_SYMBOLS + ("cutegen_gemm_plan", "cutegen_describe"):
        assert sym not in defined
    assert {"cutegen_pack_moe_run", "cutegen_pack_moe_explain", "cutegen_pack_plan"} <= set(defined)

    names = [k["name"] for k in meta["moe"]["kernels"]]
    w1 = meta["moe"]["layers"][0]["segments"]
    cut = w1[1]["tokens_first"]
    out = subprocess.run([str(b1 / "moe_consumer"), "1", str(cut - 1), str(cut), "16384"], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    assert out[0] == "pack cutegen_pack for h200: 1 GEMM kernels, 2 MoE layers, 3 grouped kernels", out
    assert out[1].startswith(f"w1 1 -> 0 | {names[0]}: MoE layer w1, tokens 1 in segment [1, {cut - 1}]")
    assert out[2].startswith(f"w1 {cut - 1} -> 0 | {names[0]}:")
    assert out[3].startswith(f"w1 {cut} -> 1 | {names[1]}: MoE layer w1, tokens {cut} in segment [{cut}, any]")
    assert out[4].startswith(f"w1 16384 -> 1 | {names[1]}:")
    assert out[5].startswith(f"down 1 -> 2 | {names[2]}: MoE layer down, capacity 1 in segment [1, any]")

    # the PyTorch extension (CPU torch of the test extra, as tests/test_pack_compile.py links it)
    import torch
    import torch.utils.cpp_extension as ce
    shim = tmp_path / "cuda_build_headers"
    (shim / "c10" / "cuda" / "impl").mkdir(parents=True)
    (shim / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    so = tmp_path / "libcutegen_pack_torch.so"
    cmd = ["g++", "-std=c++17", "-O1", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    cmd += [f"-isystem{p}" for p in ce.include_paths()] + [f"-isystem{shim}"]
    cmd += ["-I", cuda_include(), "-I", str(pack / "include")]
    cmd += [str(pack / "torch" / "cutegen_pack_torch.cpp"), "-o", str(so), str(lib)]
    cmd += [f"-L{p}" for p in ce.library_paths()] + ["-lc10", "-ltorch", "-ltorch_cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True,
                               check=True).stdout
    assert "cutegen_" not in undefined
    dynamic = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True).stdout
    assert "cutegen_pack_moe_run" in dynamic and f"cutegen_{ghashes[0]}_grouped_gemm" in dynamic
    assert "_grouped_mm" in undefined          # the bf16 fallback: torch._grouped_mm, resolved by libtorch
