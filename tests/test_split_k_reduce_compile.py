"""One real nvcc build (1-2 minutes): a split-K kernel with a separate reduction (cutegen/split_k_reduce.py),
rendered fresh. It proves the form's ABI (batched slice GEMM with f32 partials + the reduction kernel) compiles
against CUTLASS 4.2, and that the library refuses what the form's rules refuse before it touches the GPU
(no GPU is needed for what is asserted here)."""
from __future__ import annotations

import ctypes
import json

import pytest

from cutegen import abi
from cutegen import build as build_mod
from cutegen.config import KernelConfig
from cutegen.problem import GemmProblem
from cutegen.render import render

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)

PROBLEM = GemmProblem(m=256, n=256, k=65536)          # bf16 TN: A and B K-major, D row-major
# the search's pick for this problem on 2026-11-26 (bench/splitk_reduce.py plan): 16 slices of 4096
CONFIG = KernelConfig(tile_shape=(128, 64, 64), cluster_shape=(1, 2, 1), stages=8, mainloop_schedule="pingpong",
                      epilogue_schedule="tma_warp_specialized", split_k_slices=16)
ALIGNED = 0x10000          # a 16-byte aligned stand-in address: every call below is refused before any access


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("split-k-reduce")
    rendered = render(PROBLEM, CONFIG)
    rendered.write(work / "kernel")
    summary = build_mod.build([work / "kernel"], jobs=1, progress=None)
    result = summary.results[0]
    assert result.ok, result.message
    return rendered, result.library, abi.bind(ctypes.CDLL(str(result.library)))


def _call(lib, k=65536, a=ALIGNED, lda=None, ldd=256, d=ALIGNED):
    lda = k if lda is None else lda
    status = lib.cutegen_gemm(a, ALIGNED, None, d, 256, 256, k, 1, lda, lda, 256, ldd, 0, 0, 0, 0, 1.0, 0.0, None,
                              None, 0, None)
    return status, lib.cutegen_last_error().decode()


def test_library_is_the_form(built):
    rendered, library, lib = built
    assert not abi.has_plan(lib)                       # the persistent kernel's four-function ABI
    described = json.loads(lib.cutegen_describe().decode())
    assert described["hash"] == rendered.kernel_hash and described["config"]["split_k_slices"] == 16
    data = library.read_bytes()
    assert b"cutegen_split_k_reduce" in data           # the reduction kernel is in the library
    assert b"device_kernel" in data                     # and CUTLASS's GEMM kernel (cutlass::device_kernel<GemmKernel>)
    hgmma = build_mod.sass_instruction_count(library, "HGMMA")   # None where cuobjdump is missing
    assert hgmma is None or hgmma > 0


def test_library_refuses_what_the_rules_refuse(built):
    _, _, lib = built
    status, msg = _call(lib, k=65528)                  # a multiple of 8, not of 16
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("SPLITK-REDUCE-SLICES-DIVIDE-K"), msg
    status, msg = _call(lib, k=16 * 8193)              # splits into 16, but K/s = 8193 x 2 B = 16386 B
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("SPLITK-REDUCE-SLICE-STRIDE-ALIGN"), msg
    status, msg = _call(lib, a=ALIGNED + 8)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("E18"), msg
    status, msg = _call(lib, ldd=260)                  # D's leading dimension: 260 % 8 != 0
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("E16"), msg
    status, msg = _call(lib, a=None)
    assert status == abi.CANNOT_IMPLEMENT and msg.startswith("ABI-NULL"), msg
