"""Real nvcc builds of rendered kernels (about 1.5 minutes each here): three of them, by design.

1. explicit types, bf16 TN, cooperative, cluster 2x1 with B multicast;
2. explicit types, f16 NT (both operands MN-major in shared memory), ping-pong, cluster 1x2 with A
   multicast, f32 C/D, per-row bias and GELU;
3. the CollectiveBuilder baseline (128x256x64, cluster 2x1, cooperative, auto stages).

Each library is loaded with ctypes (no GPU needed for what is checked) to see the ABI.
"""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import pytest

import cutegen.render as render_mod
from cutegen import GemmProblem, KernelConfig, abi
from cutegen import build as build_mod

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    # A fresh cache: these tests must compile, not find yesterday's libraries.
    return tmp_path_factory.mktemp("cutegen-cache")


def _build(kernel, directory, cache):
    kernel.write(directory)
    summary = build_mod.build([directory], jobs=1, cache=cache, progress=None)
    result = summary.results[0]
    assert result.ok, result.message
    return result


def _exports(library) -> set[str]:
    if shutil.which("nm") is None:
        pytest.skip("nm not found")
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def _check_library(result, kernel):
    lib_path = result.library
    assert {"cutegen_gemm", "cutegen_workspace_size", "cutegen_describe", "cutegen_last_error"} <= _exports(lib_path)
    # WGMMA made it into the code: the kept PTX has wgmma.mma_async; SASS too where cuobjdump exists.
    assert result.stats["ptx_wgmma_mma_async"] > 0
    assert result.stats["spill_bytes"] == 0
    hgmma = build_mod.sass_instruction_count(lib_path, "HGMMA")
    if hgmma is not None:
        assert hgmma > 0
    lib = abi.bind(ctypes.CDLL(str(lib_path)))
    desc = json.loads(lib.cutegen_describe())
    assert desc["hash"] == kernel.kernel_hash and desc["backend"] == kernel.backend
    assert KernelConfig.from_dict(desc["config"]) == kernel.config
    # Refusals happen before any CUDA call, so they are testable without a GPU.
    p = kernel.problem
    buf = ctypes.create_string_buffer(1 << 16)
    base = (ctypes.addressof(buf) + 255) // 256 * 256
    m, n, k = 256, 256, 256
    lda = k if p.a_k_major else m
    ldb = k if p.b_k_major else n
    ldd = n if p.layout_c == "row" else m
    bias = base if p.bias else None
    call = lambda a, kk, la: lib.cutegen_gemm(a, base, None, base, m, n, kk, 1, la, ldb, ldd, ldd,
                                             0, 0, 0, 0, 1.0, 0.0, bias, None, 0, None)
    assert call(base + 8, k, lda) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("E18: A pointer is not 16-byte aligned")
    align_a = 128 // {"bf16": 16, "f16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8}[p.dtype_a]
    bad_lda = lda + align_a // 2
    assert call(base, k, bad_lda) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("E15: A leading dimension")
    assert call(base, 0, lda) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("ABI-EXTENT")


def test_explicit_bf16_tn_cooperative_cluster2x1_multicast(cache, tmp_path):
    p = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})
    cfg = KernelConfig(tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1), stages=4,
                       mainloop_schedule="cooperative", epilogue_schedule="tma_warp_specialized_cooperative")
    kernel = render_mod.render(p, cfg)
    assert "using GmemTiledCopyB = cute::SM90_TMA_LOAD_MULTICAST;" in kernel.source
    first = _build(kernel, tmp_path / "k", cache)
    assert first.status == "built"
    _check_library(first, kernel)
    # Same source again: a cache hit, no compile.
    again = build_mod.build([tmp_path / "k"], jobs=1, cache=cache, progress=None).results[0]
    assert again.status == "cached" and again.key == first.key
    print(f"\ncompile time bf16 TN coop 2x1: {first.seconds:.1f} s; cache hit: {again.seconds:.3f} s")


def test_explicit_f16_nt_pingpong_bias_gelu(cache, tmp_path):
    p = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": "f16", "layout": "nt", "dtype_c": "f32",
                               "dtype_d": "f32", "bias": True, "activation": "gelu"})
    cfg = KernelConfig(tile_shape=(128, 128, 64), cluster_shape=(1, 2, 1), mainloop_schedule="pingpong",
                       epilogue_schedule="tma_warp_specialized")
    kernel = render_mod.render(p, cfg)
    assert "Layout_MN_SW128_Atom" in kernel.source and "LinCombPerRowBiasEltAct" in kernel.source
    result = _build(kernel, tmp_path / "k", cache)
    _check_library(result, kernel)
    print(f"\ncompile time f16 NT pingpong: {result.seconds:.1f} s")


def test_collective_builder_baseline(cache, tmp_path):
    p = GemmProblem.from_dict({"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "layout": "tn"})
    cfg = KernelConfig(tile_shape=(128, 256, 64), cluster_shape=(2, 1, 1), mainloop_schedule="cooperative",
                       epilogue_schedule="tma_warp_specialized_cooperative")
    kernel = render_mod.render(p, cfg, backend="cutlass_builder")
    result = _build(kernel, tmp_path / "k", cache)
    _check_library(result, kernel)
    print(f"\ncompile time CollectiveBuilder baseline: {result.seconds:.1f} s")
