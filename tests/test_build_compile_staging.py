"""One real nvcc build of a staged kernel (under a minute here): the CI's only compile of staging.

e4m3 NN with K = 2047 exercises both kinds of copy in one kernel (cutegen/staging.py): A is MN-major,
which WGMMA cannot read for 8-bit inputs, so the ABI's tiled transpose kernel writes it K-major into
the workspace (stage_transpose_a); B is K-major with 1-byte-aligned rows, so it is restrided with
cudaMemcpy2DAsync (stage_b). The GEMM is then an ordinary TN TMA kernel. Without a GPU the library
can still be asked what it refuses before any CUDA call: a workspace too small for the copies
(STAGE-WORKSPACE), a pitch cudaMemcpy2D cannot take (STAGE-PITCH, B's only: the transpose kernel takes
any leading dimension), overlapping rows or batches (A10), each naming its rule.
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
    p = GemmProblem(m=2048, n=2048, k=2047, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16",
                    layout_a="col", layout_b="col")
    cfg = KernelConfig(tile_shape=(128, 128, 128), mainloop_schedule="cooperative",
                       epilogue_schedule="tma_warp_specialized_cooperative", stage_a=True, stage_b=True,
                       stage_transpose_a=True)
    kernel = render_mod.render(p, cfg)
    # an ordinary TMA kernel, 16-byte aligned K-major operands; A transposed by the ABI's kernel, B
    # restrided with cudaMemcpy2DAsync
    assert "MainloopSm90TmaGmmaWarpSpecializedFP8" in kernel.source and "CpAsync" not in kernel.source
    assert "cudaMemcpy2DAsync" in kernel.source and "cutegen_stage_transpose<Bits><<<" in kernel.source
    assert kernel.manifest["staging"]["operands"] == "A,B" and kernel.manifest["staging"]["transposed"] == "A"
    kernel.write(tmp_path / "k")
    result = build_mod.build([tmp_path / "k"], jobs=1, cache=tmp_path / "cache", progress=None).results[0]
    assert result.ok, result.message
    assert result.stats["ptx_wgmma_mma_async"] > 0
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    described = json.loads(lib.cutegen_describe().decode())
    assert described["staged_operands"] == "A,B" and described["transposed_operands"] == "A"
    assert described["config"]["stage_transpose_a"] is True and "stage_transpose_b" not in described["config"]
    buf = ctypes.create_string_buffer(1 << 12)
    base = (ctypes.addressof(buf) + 255) // 256 * 256
    m = n = 256
    k = 255
    need = staging.staging_workspace_bytes(p.replace(m=m, n=n, k=k), cfg)
    assert need == 2 * 256 * 256              # A: 256 rows (M) of K = 255 rounded to 256; B: 256 rows (N) likewise

    def call(lda=256, ldb=255, batch=1, bsa=0, workspace_bytes=need):
        return lib.cutegen_gemm(base, base, None, base, m, n, k, batch, lda, ldb, n, n, bsa, 0, 0, 0, 1.0, 0.0, None,
                                base, workspace_bytes, None)

    assert call(workspace_bytes=need - 1) == abi.WORKSPACE_TOO_SMALL
    err = lib.cutegen_last_error().decode()
    assert err.startswith("STAGE-WORKSPACE") and str(need) in err and "A and B (A transposed)" in err
    assert call(ldb=2**31) == abi.CANNOT_IMPLEMENT        # 2^31 bytes: one past cudaMemcpy2D's pitch
    assert lib.cutegen_last_error().decode().startswith("STAGE-PITCH: B source pitch 2147483648 B")
    assert call(lda=255) == abi.CANNOT_IMPLEMENT         # A is M-contiguous: lda >= M
    assert lib.cutegen_last_error().decode().startswith("A10: A leading dimension 255")
    assert call(ldb=254) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("A10: B leading dimension 254")
    assert call(batch=2, bsa=256 * 255 - 1, workspace_bytes=2 * need) == abi.CANNOT_IMPLEMENT
    assert lib.cutegen_last_error().decode().startswith("A10: A batch stride")
    print(f"\ncompile time e4m3 NN staged A (transposed), B: {result.seconds:.1f} s")
