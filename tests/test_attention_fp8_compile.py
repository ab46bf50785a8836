"""One real nvcc build of an FP8 (e4m3) attention kernel, rendered fresh (about 1.5-2 minutes here): GQA, causal,
the ping-pong kernel (persistent, Q loaded by its own warp), D = 128, V read transposed, bf16 O, the descale
factors through the epilogue's alpha. Marked like the 16-bit compile test.

The library is loaded with ctypes (no GPU needed for what is checked): its exports (``cutegen_attention_fp8``, not
the 16-bit ``cutegen_attention``), its describe JSON, and the refusals the C ABI answers on the host before any
CUDA call, each naming its rule.
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
                           dtype="e4m3", causal=True, layout="bhsd")
CONFIG = AttentionConfig(128, 128, "ws_pingpong", persistent=True, loads_q_separately=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_fresh(tmp_path_factory, PROBLEM, CONFIG, "attn-fp8")


def test_the_fp8_kernel_compiles_with_wgmma_and_no_spills(built):
    _, result = built
    assert result.status == "built"
    assert result.stats["ptx_wgmma_mma_async"] > 0
    assert result.stats["spill_bytes"] == 0


def test_the_library_exports_the_fp8_abi(built):
    kernel, result = built
    if shutil.which("nm") is not None:
        out = subprocess.run(["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True).stdout
        names = {line.split()[-1] for line in out.splitlines() if line.strip()}
        assert {"cutegen_attention_fp8", "cutegen_attention_workspace_size", "cutegen_describe",
                "cutegen_last_error"} <= names
        assert "cutegen_attention" not in names
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    assert abi.is_attention_library(lib) and abi.is_fp8_library(lib)
    desc = json.loads(lib.cutegen_describe())
    assert desc["hash"] == kernel.kernel_hash and desc["problem"] == PROBLEM.kernel_key()
    assert desc["problem"]["dtype"] == "e4m3" and desc["problem"]["dtype_out"] == "bf16"


def _call(lib, *, q=16, vt=16, head_dim=128, heads_kv=8, seqlen_kv=64, vt_row=64, descales=(1.0, 1.0, 1.0),
          o_row=128):
    qs = (32 * 64 * 128, 64 * 128, 128)
    ks = (8 * seqlen_kv * 128, seqlen_kv * 128, 128)
    vts = (8 * 128 * vt_row, 128 * vt_row, vt_row)
    os_ = (32 * 64 * o_row, 64 * o_row, o_row)
    return lib.cutegen_attention_fp8(q, 16, vt, 16, 16, 2, 32, heads_kv, 64, seqlen_kv, head_dim,
                                     *qs, *ks, *vts, *os_, 0.125, *descales, None, 0, None)


def test_host_side_refusals_name_their_rule(built):
    _, result = built
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    cases = [
        (dict(head_dim=64), "ATTN-ABI-HEAD-DIM"),
        (dict(heads_kv=6), "ATTN-ABI-GQA-GROUPS"),
        (dict(descales=(1.0, 0.0, 1.0)), "ATTN-ABI-DESCALE"),
        (dict(descales=(1.0, 1.0, float("inf"))), "ATTN-ABI-DESCALE"),
        (dict(descales=(1e30, 1e30, 1.0)), "ATTN-ABI-DESCALE"),            # scale x dq x dk overflows a float
        (dict(vt=8), "E18"),                                               # V^T base 8 % 16 != 0
        (dict(vt_row=72), "TMA-GMEM-STRIDE-16B"),                          # a V^T row of 72 bytes
        (dict(seqlen_kv=80, vt_row=64), "ATTN-ABI-VT-ROW"),                # rows of 64 < seqlen_kv 80
        (dict(o_row=132), "TMA-GMEM-STRIDE-16B"),                          # bf16 O: 264-byte rows
    ]
    for kwargs, rule in cases:
        status = _call(lib, **kwargs)
        assert status == abi.CANNOT_IMPLEMENT, (kwargs, status)
        assert lib.cutegen_last_error().decode().startswith(rule + ":"), (kwargs, lib.cutegen_last_error())
