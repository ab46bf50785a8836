"""One real nvcc build of an attention backward kernel (about 2 minutes here), rendered fresh: bf16, head dim 128,
causal, the example's 64x128 tile (the form with the most template paths: cutegen's copy of the collective, the causal
mask with its ceil Q-tile count, the float32 sum_OdO and dQ conversion kernels).

The library is loaded with ctypes (no GPU needed for what is checked): its exports, its describe JSON, the workspace
query, the shared memory it reports against the rule's model, and the refusals the C ABI answers on the host before
any CUDA call.
"""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import pytest

from cutegen import build as build_mod
from cutegen.ops.attention import abi
from cutegen.ops.attention.backward import AttentionBackwardConfig, render
from cutegen.ops.attention.problem import AttentionProblem
from cutegen.legality.attention_backward import shared_memory_bytes
from attention_build import build_fresh

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)

PROBLEM = AttentionProblem(batch=4, heads_q=32, heads_kv=32, seqlen_q=4096, seqlen_kv=4096, head_dim=128, causal=True)
CONFIG = AttentionBackwardConfig(64, 128)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_fresh(tmp_path_factory, PROBLEM, CONFIG, "attnbwd", renderer=render)


def test_the_kernel_compiles_with_wgmma(built):
    _, result = built
    assert result.status == "built"
    assert result.stats["ptx_wgmma_mma_async"] > 0
    # ptxas caps the 384-thread kernel at 168 registers (setmaxnreg gives the MMA warpgroups 240 at run time): the
    # backward kernel spills 24 bytes there (nvcc 13.0, 2026-11-26); more would be a change to look at
    assert result.stats["spill_bytes"] <= 64


def test_the_library_exports_the_backward_abi(built):
    kernel, result = built
    if shutil.which("nm") is not None:
        out = subprocess.run(["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True).stdout
        names = {line.split()[-1] for line in out.splitlines() if line.strip()}
        assert {"cutegen_attention_backward", "cutegen_attention_backward_workspace_size",
                "cutegen_attention_backward_shared_memory_bytes", "cutegen_describe", "cutegen_last_error"} <= names
        assert "cutegen_attention" not in names
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    assert abi.is_backward_library(lib) and abi.is_attention_library(lib)
    desc = json.loads(lib.cutegen_describe())
    assert desc["hash"] == kernel.kernel_hash and desc["pass"] == "backward" and desc["config"] == CONFIG.to_dict()
    assert desc["problem"]["causal"] is True and desc["problem"]["head_dim"] == 128
    # the kernel's sizeof(SharedStorage) is the rule's model (214,528 bytes for 64x128 at head 128)
    assert lib.cutegen_attention_backward_shared_memory_bytes() == shared_memory_bytes(PROBLEM, CONFIG) == 214528


def test_workspace_query(built):
    _, result = built
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    # batch 2, heads 3, seqlen_q 100 -> rows padded to 104: sum_OdO and LSE 2 x 3 x 104 x 4 = 2496 -> 2560 bytes each
    # (256-aligned), the dQ accumulator 2 x 3 x 104 x 128 x 4 = 319,488 (a multiple of 256)
    assert lib.cutegen_attention_backward_workspace_size(2, 3, 100, 128) == 2560 * 2 + 319488
    assert lib.cutegen_attention_backward_workspace_size(2, 3, 104, 128) == 2560 * 2 + 319488
    assert lib.cutegen_attention_backward_workspace_size(2, 3, 105, 128) == 2 * 2816 + 2 * 3 * 112 * 128 * 4
    assert lib.cutegen_attention_backward_workspace_size(0, 3, 100, 128) == 0
    assert lib.cutegen_attention_backward_workspace_size(2, 3, 100, 64) == 0


def _call(lib, *, heads_kv=4, head_dim=128, ptr=16, strides=None, scale=0.125, ws_bytes=1 << 30, lse=16):
    s = strides or (4 * 64 * 128, 64 * 128, 128)
    return lib.cutegen_attention_backward(ptr, 16, 16, 16, 16, lse, 16, 16, 16, 2, 4, heads_kv, 64, 64, head_dim,
                                          *(s * 8), scale, 256, ws_bytes, None)


def test_host_side_refusals_name_their_rule(built):
    _, result = built
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    cases = [
        (dict(heads_kv=1), abi.CANNOT_IMPLEMENT, "ATTN-BWD-MHA"),
        (dict(head_dim=64), abi.CANNOT_IMPLEMENT, "ATTN-ABI-HEAD-DIM"),
        (dict(scale=0.0), abi.CANNOT_IMPLEMENT, "ATTN-ABI-SCALE"),
        (dict(ptr=8), abi.CANNOT_IMPLEMENT, "E18"),                                  # 8 % 16 != 0
        (dict(strides=(4 * 64 * 128, 64 * 128, 132)), abi.CANNOT_IMPLEMENT, "TMA-GMEM-STRIDE-16B"),   # 264 bytes
        (dict(strides=(4 * 64 * 128, 64 * 128, 64)), abi.CANNOT_IMPLEMENT, "ATTN-ABI-OVERLAP"),     # rows overlap
        (dict(lse=0), abi.CANNOT_IMPLEMENT, "ATTN-ABI-LSE-ALIGN"),
        (dict(ws_bytes=100), abi.WORKSPACE_TOO_SMALL, "ATTN-ABI-WORKSPACE"),
    ]
    for kwargs, status, rule in cases:
        got = _call(lib, **kwargs)
        assert got == status, (kwargs, got, lib.cutegen_last_error())
        assert lib.cutegen_last_error().decode().startswith(rule + ":"), lib.cutegen_last_error()
