"""One real nvcc build of a cp.async kernel (about 1.5 minutes here): the CI's only compile of it.

bf16 TN with K = 2047: A and B rows are 2-byte aligned, below cp.async's 4 bytes, so the producer
copies them with UniversalCopy; the no-smem epilogue writes D. The library's ABI must refuse what the
kernel's own alignments refuse (a pointer off one element) and name the rule.
"""
from __future__ import annotations

import ctypes

import pytest

import cutegen.render as render_mod
from cutegen import GemmProblem, KernelConfig, abi
from cutegen import build as build_mod

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)


def test_cp_async_two_byte_kernel_builds_and_refuses_misaligned_pointers(tmp_path):
    p = GemmProblem(m=2048, n=2048, k=2047)
    cfg = KernelConfig(tile_shape=(128, 128, 64), mainloop_schedule="cooperative", epilogue_schedule="no_smem",
                       mainloop_load="cp_async")
    kernel = render_mod.render(p, cfg)
    assert "UniversalCopy<cute::uint_byte_t<2>>" in kernel.source
    kernel.write(tmp_path / "k")
    result = build_mod.build([tmp_path / "k"], jobs=1, cache=tmp_path / "cache", progress=None).results[0]
    assert result.ok, result.message
    # (ptxas reports a few hundred bytes of spills in cp.async kernels here: the producer copies with
    # per-thread addresses and predicates inside the 40 registers setmaxnreg leaves it; printed below)
    assert result.stats["ptx_wgmma_mma_async"] > 0
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    buf = ctypes.create_string_buffer(1 << 16)
    base = (ctypes.addressof(buf) + 255) // 256 * 256
    call = lambda a: lib.cutegen_gemm(a, base, None, base, 256, 256, 255, 1, 255, 255, 256, 256,  # noqa: E731
                                      0, 0, 0, 0, 1.0, 0.0, None, None, 0, None)
    assert call(base + 1) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("E18: A pointer is not 2-byte aligned")
    print(f"\ncompile time bf16 TN cp.async 2-byte: {result.seconds:.1f} s, spills {result.stats.get('spill_bytes')} B")
