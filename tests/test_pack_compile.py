"""A pack built with CMake and nvcc on this CPU machine, then linked every way a library links it: the
static library into a C++ program (add_subdirectory, and the installed package through find_package) and
into the PyTorch extension. Linking needs no GPU.

The pack is freshly rendered from a selection that holds what broke linking before (issue 22): two
stream-K kernels (each exports the launch-plan pair cutegen_gemm_plan / cutegen_workspace_size_plan),
two swap-AB kernels, and the class's fallback for unaligned operands. Packs hold no staged kernels (the
plan entry points make none of the ABI's restride copies), so that fallback is the search's smallest-
alignment cp.async kernel. Three kernel compiles (1-3 minutes each here, one nvcc at a time).

The same pack has a vendor segment (issue 22 part 3): a synthetic measured file puts torch.matmul ahead of
every kernel from M = 17 on N = K = 8192, so those M run on cuBLASLt, and the library, both consumers and the
PyTorch extension compile and link against cuBLASLt (the nvidia-cublas wheel of the test extra: this toolkit
has none), found through the wheel of the python3 given to CMake and through CUTEGEN_CUBLASLT_ROOT. The
vendor costs no kernel compile of its own."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cutegen import packs
from cutegen.build import DEFAULT_LOCK, cutlass_include_dirs, find_nvcc
from cutegen.config import KernelConfig
from cutegen.packs import render, select, shapes, targets
from pack_build import cmake, cuda_include, defined_globals

REPO = Path(__file__).resolve().parent.parent
CONSUMER = REPO / "examples" / "pack" / "consumer"
# Two stream-K configurations that generated/ already carries (validated there): a swap-AB one for small M
# and a 128x128 one; the shapes put each on the M it serves.
STREAM_K_SWAP_AB = REPO / "generated/llm/sm90a/bf16_tn_m16n8192k28672_cbf16dbf16/manifest.json"
STREAM_K = REPO / "generated/sm90a/bf16_tn_m128n8192k8192_cbf16dbf16/manifest.json"
SHAPES = ('[[shape]]\nname = "proj"\ndtype = "bf16"\nlayout = "tn"\nm = [16, 128]\nn = 8192\n'
          'k = [8192, 28672]\n')

pytestmark = pytest.mark.compile




def _config(manifest: Path) -> KernelConfig:
    return KernelConfig.from_dict(json.loads(manifest.read_text())["config"])






def test_pack_with_stream_k_swap_ab_and_fallback_links_everywhere(tmp_path):
    shapes_file = tmp_path / "proj.toml"
    shapes_file.write_text(SHAPES)
    target = targets.target("h100-sxm")
    points = shapes.expand(shapes.load(shapes_file), target.sms)
    sel = select.given(points, target, [_config(STREAM_K_SWAP_AB), _config(STREAM_K)])
    fallbacks = render.add_fallbacks(sel)
    # measured (synthetic): on N = K = 8192 k00 is within 3% of cuBLAS at M = 16 (10 us each), at M = 128 every
    # kernel is over 3% slower (k01 30 us, cuBLAS 20): the curves cross at M = 16.5, so M >= 17 runs on cuBLASLt
    kernel_names = [render.kernel_name(sel, j) for j in range(len(sel.kernels))]
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps({"pack": "cutegen_pack", "time": [
        {"m": m, "n": 8192, "k": 8192, "matmul_us": mm, "per_kernel_us": dict(zip(kernel_names, ts))}
        for m, ts, mm in ((16, [10.0, 12.0], 10.0), (128, [40.0, 30.0], 20.0))]}))
    points = render.apply_measured(sel, str(measured), "cutegen_pack")
    pack = tmp_path / "pack"
    packs.write(pack, render.pack_files(sel, fallbacks, "cutegen_pack", shapes_file.name, measured=points))
    meta = json.loads((pack / "pack.json").read_text())
    assert [(g["m_first"], g["n"], g["k"]) for g in meta["vendor"]["segments"]] == [(17, 8192, 8192)]
    import nvidia.cu13                   # the nvidia-cublas wheel (test extra): cuBLASLt's header and library
    cublaslt_root = next(Path(p) for p in nvidia.cu13.__path__ if (Path(p) / "include" / "cublasLt.h").is_file())
    cublaslt_lib = next((cublaslt_root / "lib").glob("libcublasLt.so*"))
    cfgs = [k["config"] for k in meta["kernels"]]
    # what this test is about: the selection really holds these forms
    assert [c["tile_scheduler"] for c in cfgs].count("stream_k") == 2
    assert sum(1 for c in cfgs if c.get("swap_ab")) >= 1
    fb = meta["classes"][0]["fallback"]
    assert fb == meta["kernels"][2]["name"] and fb.endswith("_fallback")
    assert cfgs[2].get("mainloop_load") == "cp_async" and not cfgs[2].get("stage_a") and not cfgs[2].get("stage_b")
    assert meta["kernels"][2]["problem"]["alignment_a"] == 1
    names = [k["name"] for k in meta["kernels"]]
    hashes = [k["hash"] for k in meta["kernels"]]

    root = str(Path(cutlass_include_dirs()[0]).parent)
    common = [f"-DCUTEGEN_CUTLASS_INCLUDE={root}", f"-DCMAKE_CUDA_COMPILER={find_nvcc()}",
              "-DCMAKE_BUILD_TYPE=Release",
              # the machine-wide nvcc lock (CONVENTIONS.md): one heavy compile at a time
              f"-DCMAKE_CUDA_COMPILER_LAUNCHER=flock;{DEFAULT_LOCK}"]
    # 1. add_subdirectory: the pack is built as part of the consumer, which links the dispatch symbols
    b1 = tmp_path / "b1"
    # cuBLASLt found through the nvidia-cublas wheel of this python (cmake/cutegen_cublaslt.cmake)
    cmake("-S", str(CONSUMER), "-B", str(b1), f"-DPACK_DIR={pack}", f"-DPython3_EXECUTABLE={sys.executable}", *common)
    cmake("--build", str(b1), "-j", "2")
    lib = next(b1.rglob("libcutegen_pack.a"))

    # every strong symbol is defined once in the archive, and every extern "C" name of a kernel carries
    # its kernel's hash (the plan pair of both stream-K kernels included)
    defined = defined_globals(lib)
    twice = sorted(s for s, n in defined.items() if n > 1)
    assert not twice, f"symbols defined more than once in the pack library: {twice[:10]}"
    exported = sorted(s for s in defined if s.startswith("cutegen_") and not s.startswith("cutegen_pack_"))
    assert all(any(s.startswith(f"cutegen_{h}_") for h in hashes) for s in exported), exported
    for h in hashes[:2]:
        assert {f"cutegen_{h}_gemm_plan", f"cutegen_{h}_workspace_size_plan", f"cutegen_{h}_plan_create"} <= set(defined)
    assert "cutegen_gemm_plan" not in defined and "cutegen_gemm" not in defined

    assert "_ZN19cutegen_pack_vendor8plan_runEPvPKvS2_S2_S0_S2_S0_mP11CUstream_st" in defined   # the vendor, compiled
    args = ["16", "8192", "8192", "0", "128", "8192", "28672", "0", "16", "8192", "8192", "8193", "64", "8192", "8192", "0"]
    out = subprocess.run([str(b1 / "pack_consumer"), *args], capture_output=True, text=True, timeout=60).stdout
    lines = out.splitlines()
    assert lines[0].startswith("pack cutegen_pack for h100-sxm: 4 kernels, 1 classes"), out     # 3 and the vendor
    assert lines[1].startswith(f"16 8192 8192 -> 0 | {names[0]}: exact shape proj m16n8192k8192"), out
    assert lines[2].startswith(f"128 8192 28672 -> 1 | {names[1]}: exact shape proj m128n8192k28672"), out
    assert lines[3].startswith(f"16 8192 8192 -> 2 | {names[2]}: fallback for unaligned operands (lda = 8193"), out
    assert lines[4].startswith("64 8192 8192 -> 3 | vendor_cublaslt_c0: measured segment: N=8192 K=8192, M in [17, "), out
    needed = subprocess.run(["readelf", "-d", str(b1 / "pack_consumer")], capture_output=True, text=True, check=True).stdout
    assert "libcublasLt.so" in needed

    # 2. install the pack from that build; a second consumer finds it with find_package (links only)
    prefix = tmp_path / "prefix"
    cmake("--install", str(b1), "--prefix", str(prefix))
    assert (prefix / "include" / "cutegen_pack.h").is_file()
    assert list(prefix.rglob("cutegen_packConfig.cmake")) and list(prefix.rglob("libcutegen_pack.a"))
    b2 = tmp_path / "b2"
    assert (prefix / "lib" / "cmake" / "cutegen_pack" / "cutegen_cublaslt.cmake").is_file()
    # here cuBLASLt is found through CUTEGEN_CUBLASLT_ROOT (the package's config includes the same module)
    cmake("-S", str(CONSUMER), "-B", str(b2), f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release",
           f"-DCUTEGEN_CUBLASLT_ROOT={cublaslt_root}")
    cmake("--build", str(b2), "-j", "2")
    out2 = subprocess.run([str(b2 / "pack_consumer"), *args], capture_output=True, text=True, timeout=60).stdout
    assert out2 == out

    # 3. the PyTorch extension, compiled and linked as bench/gpu_pack.sh links it. The test extra's torch
    # is the CPU build (2.13.0+cpu): it ships the c10/cuda headers but not the one header a CUDA build
    # generates, c10/cuda/impl/cuda_cmake_macros.h, whose whole content in a CUDA wheel is the one
    # #define written below; and it has no libc10_cuda / libtorch_cuda, so those (and cudart) stay
    # undefined in the shared object, resolved when a CUDA torch loads it. The pack's objects are linked
    # in here, so a symbol two kernels define fails this link as it did in issue 22.
    import torch
    import torch.utils.cpp_extension as ce
    shim = tmp_path / "cuda_build_headers"
    (shim / "c10" / "cuda" / "impl").mkdir(parents=True)
    (shim / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    so = tmp_path / "libcutegen_pack_torch.so"
    cmd = ["g++", "-std=c++17", "-O1", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    cmd += [f"-isystem{p}" for p in ce.include_paths()] + [f"-isystem{shim}"]
    cmd += ["-I", cuda_include(), "-I", str(pack / "include")]
    cmd += [str(pack / "torch" / "cutegen_pack_torch.cpp"), "-o", str(so), str(lib), str(cublaslt_lib)]
    cmd += [f"-L{p}" for p in ce.library_paths()] + ["-lc10", "-ltorch", "-ltorch_cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True,
                               check=True).stdout
    assert "cutegen_" not in undefined                 # every pack symbol resolved inside the extension
    dynamic = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True,
                             check=True).stdout
    assert "cutegen_pack_plan" in dynamic and f"cutegen_{hashes[0]}_gemm_plan" in dynamic
    assert "cublasLtMatmul" in undefined          # the vendor's calls, resolved by libcublasLt when torch loads it
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert "libcublasLt.so.13" in needed
