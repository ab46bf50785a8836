"""One real nvcc build of an attention kernel (about 1.5 minutes here), rendered fresh: GQA, causal, the 88
example's ping-pong kernel (persistent, Q loaded by its own warp), D = 128, bf16. It is the form with the most
template paths at once: the static-0 KV head stride, cutegen's causal mask with the residual keys masked, the
persistent scheduler.

The library is loaded with ctypes (no GPU needed for what is checked): its exports, its describe JSON, the
workspace query, and the refusals the C ABI answers on the host before any CUDA call.
"""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import pytest

from cutegen import build as build_mod
from cutegen.ops.attention import abi
from cutegen.ops.attention.config import AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem
from attention_build import build_fresh

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)

PROBLEM = AttentionProblem(batch=4, heads_q=32, heads_kv=8, seqlen_q=4096, seqlen_kv=4096, head_dim=128,
                           causal=True, layout="bhsd")
CONFIG = AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_fresh(tmp_path_factory, PROBLEM, CONFIG, "attn")


def test_the_kernel_compiles_with_wgmma_and_no_spills(built):
    _, result = built
    assert result.status == "built"
    assert result.stats["ptx_wgmma_mma_async"] > 0
    assert result.stats["spill_bytes"] == 0


def test_the_library_exports_the_attention_abi(built):
    kernel, result = built
    if shutil.which("nm") is not None:
        out = subprocess.run(["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True).stdout
        names = {line.split()[-1] for line in out.splitlines() if line.strip()}
        assert {"cutegen_attention", "cutegen_attention_workspace_size", "cutegen_describe",
                "cutegen_last_error"} <= names
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    desc = json.loads(lib.cutegen_describe())
    assert desc["hash"] == kernel.kernel_hash and desc["config"] == CONFIG.to_dict()
    assert desc["problem"] == PROBLEM.kernel_key()
    # the LSE scratch: 2 x 4 x 100 floats = 3200 bytes, rounded up to 256 -> 3328
    assert lib.cutegen_attention_workspace_size(2, 4, 100) == 3328
    assert lib.cutegen_attention_workspace_size(0, 4, 100) == 0


def _call(lib, *, q=16, head_dim=128, heads_q=32, heads_kv=8, strides=None):
    s = strides or (32 * 64 * 128, 64 * 128, 128)
    kv = (8 * 64 * 128, 64 * 128, 128)
    return lib.cutegen_attention(q, 16, 16, 16, 16, 2, heads_q, heads_kv, 64, 64, head_dim,
                                 *s, *kv, *kv, *s, 0.125, None, 0, None)


def test_host_side_refusals_name_their_rule(built):
    _, result = built
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    cases = [
        (dict(head_dim=64), "ATTN-ABI-HEAD-DIM"),
        (dict(heads_kv=6), "ATTN-ABI-GQA-GROUPS"),
        (dict(q=8), "E18"),                                            # 8 % 16 != 0
        (dict(strides=(32 * 64 * 128, 64 * 128, 132)), "TMA-GMEM-STRIDE-16B"),   # 132 elements = 264 bytes
        # batch 2 in BSHD order: the batch stride is not heads x head stride
        (dict(strides=(64 * 32 * 128, 128, 32 * 128)), "ATTN-ABI-GQA-STRIDES"),
    ]
    for kwargs, rule in cases:
        status = _call(lib, **kwargs)
        assert status == abi.CANNOT_IMPLEMENT, (kwargs, status)
        assert lib.cutegen_last_error().decode().startswith(rule + ":"), lib.cutegen_last_error()
