"""One real nvcc build of a staged kernel (about 1.5 minutes here): the CI's only compile of it.

bf16 TN with K = 2047: A's and B's rows are 2-byte aligned, so the kernel stages both (cutegen/staging.py):
the C ABI copies them into the workspace with a 16-byte leading dimension and runs an ordinary TMA
kernel on the copies. Without a GPU the library can still be asked what it refuses before any CUDA
call: a workspace too small for the copies (STAGE-WORKSPACE), a pitch cudaMemcpy2D cannot take
(STAGE-PITCH), overlapping rows (A10), each naming its rule.
"""
from __future__ import annotations

import ctypes
import json

import pytest

import cutegen.render as render_mod
from cutegen import GemmProblem, KernelConfig, abi
from cutegen import build as build_mod
from cutegen import staging

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)


def test_staged_kernel_builds_and_refuses_with_the_staging_rules(tmp_path):
    p = GemmProblem(m=2048, n=2048, k=2047)
    cfg = KernelConfig(tile_shape=(128, 128, 64), mainloop_schedule="cooperative",
                       epilogue_schedule="tma_warp_specialized_cooperative", stage_a=True, stage_b=True)
    kernel = render_mod.render(p, cfg)
    # an ordinary TMA kernel, 16-byte aligned operands, copies enqueued with cudaMemcpy2DAsync
    assert "MainloopSm90TmaGmmaWarpSpecialized" in kernel.source and "CpAsync" not in kernel.source
    assert "cudaMemcpy2DAsync" in kernel.source
    assert kernel.manifest["staging"]["operands"] == "A,B"
    kernel.write(tmp_path / "k")
    result = build_mod.build([tmp_path / "k"], jobs=1, cache=tmp_path / "cache", progress=None).results[0]
    assert result.ok, result.message
    assert result.stats["ptx_wgmma_mma_async"] > 0
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    described = json.loads(lib.cutegen_describe().decode())
    assert described["staged_operands"] == "A,B" and described["config"]["stage_a"] is True
    buf = ctypes.create_string_buffer(1 << 16)
    base = (ctypes.addressof(buf) + 255) // 256 * 256
    m = n = 256
    k = 255
    need = staging.staging_workspace_bytes(p.replace(m=m, n=n, k=k), cfg)
    assert need == 2 * 256 * 256 * 2            # two 256-row copies with ld 256 (255 rounded up to 8)

    def call(lda=255, ldb=255, workspace_bytes=need):
        return lib.cutegen_gemm(base, base, None, base, m, n, k, 1, lda, ldb, n, n, 0, 0, 0, 0, 1.0, 0.0, None,
                                base, workspace_bytes, None)

    assert call(workspace_bytes=need - 1) == abi.WORKSPACE_TOO_SMALL
    err = lib.cutegen_last_error().decode()
    assert err.startswith("STAGE-WORKSPACE") and str(need) in err
    assert call(lda=2**30) == abi.CANNOT_IMPLEMENT        # 2^31 bytes: one past cudaMemcpy2D's pitch
    assert lib.cutegen_last_error().decode().startswith("STAGE-PITCH: A source pitch 2147483648 B")
    assert call(ldb=254) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("A10: B leading dimension 254")
    print(f"\ncompile time bf16 TN staged A,B: {result.seconds:.1f} s")
