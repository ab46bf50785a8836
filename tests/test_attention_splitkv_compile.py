"""One real nvcc build of a split-KV attention kernel (templates/attention/fmha_sm90_splitkv.cu.j2; about a minute
here), rendered fresh: GQA 32/8, head dim 128, 4 KV splits. The library is loaded with ctypes (no GPU needed): its
exports, its describe JSON, the workspace query against cutegen.ops.attention.splitkv, and the refusals the C ABI
answers on the host before any CUDA call (each names its rule)."""
from __future__ import annotations

import ctypes
import json

import pytest

from cutegen import build as build_mod
from cutegen.ops.attention import abi, splitkv
from cutegen.ops.attention.config import AttentionConfig
from cutegen.ops.attention.problem import AttentionProblem
from attention_build import build_fresh

pytestmark = pytest.mark.compile

if build_mod.find_nvcc() is None:
    pytest.skip("nvcc not found", allow_module_level=True)

PROBLEM = AttentionProblem(batch=8, heads_q=32, heads_kv=8, seqlen_q=1, seqlen_kv=8192, head_dim=128, layout="bhsd")
CONFIG = AttentionConfig(kv_splits=4)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_fresh(tmp_path_factory, PROBLEM, CONFIG, "attn-split", fresh_cache=False)


def test_the_split_kernel_compiles_with_wgmma_and_no_spills(built):
    _, result = built
    assert result.stats["ptx_wgmma_mma_async"] > 0
    assert result.stats["spill_bytes"] == 0


def test_describe_and_workspace(built):
    kernel, result = built
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    desc = json.loads(lib.cutegen_describe())
    assert desc["hash"] == kernel.kernel_hash and desc["config"]["kv_splits"] == 4
    for b, h, s in ((8, 32, 1), (2, 8, 3), (1, 64, 16)):
        assert lib.cutegen_attention_workspace_size(b, h, s) == splitkv.workspace_bytes(b, h, s, 128, 4)
    assert lib.cutegen_attention_workspace_size(0, 32, 1) == 0


def _call(lib, *, batch=2, heads_q=8, heads_kv=2, seqlen_q=4, seqlen_kv=1000, q_strides=None, workspace=256,
          ws_bytes=None, o_ptr=16):
    qs = q_strides or (heads_q * seqlen_q * 128, seqlen_q * 128, 128)           # BHSD
    kv = (heads_kv * seqlen_kv * 128, seqlen_kv * 128, 128)
    os_ = (heads_q * seqlen_q * 128, seqlen_q * 128, 128)
    if ws_bytes is None:
        ws_bytes = lib.cutegen_attention_workspace_size(batch, heads_q, seqlen_q)
    return lib.cutegen_attention(16, 16, 16, o_ptr, None, batch, heads_q, heads_kv, seqlen_q, seqlen_kv, 128,
                                 *qs, *kv, *kv, *os_, 0.125, workspace, ws_bytes, None)


def test_host_side_refusals_name_their_rule(built):
    _, result = built
    lib = abi.bind(ctypes.CDLL(str(result.library)))
    cases = [
        # Q in BSHD with seqlen_q 4: a group's query heads are not seqlen_q rows apart
        (dict(batch=1, q_strides=(4 * 8 * 128, 128, 8 * 128)), 1, "ATTN-ABI-SPLIT-PACK"),
        # seqlen_q 1 with a head stride below the head dim would overlap rows
        (dict(seqlen_q=1, q_strides=(8 * 64, 64, 1024)), 1, "ATTN-ABI-SPLIT-PACK"),
        # batch stride of Q not heads_q x head stride (a padded batch)
        (dict(q_strides=(8 * 4 * 128 + 128, 4 * 128, 128)), 1, "ATTN-ABI-GQA-STRIDES"),
        # 8 KV tiles of 128 at seqlen_kv 1000 -> 4 splits; one byte short of their partials
        (dict(ws_bytes=splitkv.workspace_bytes(2, 8, 4, 128, 4) - 1), 2, "ATTN-ABI-WORKSPACE"),
        (dict(workspace=None), 2, "ATTN-ABI-WORKSPACE"),
        (dict(workspace=264), 1, "E18"),
        (dict(o_ptr=18), 1, "E18"),
        (dict(heads_kv=3), 1, "ATTN-ABI-GQA-GROUPS"),
    ]
    for kwargs, status, rule in cases:
        assert _call(lib, **kwargs) == status, (kwargs, lib.cutegen_last_error())
        assert lib.cutegen_last_error().decode().startswith(rule), (kwargs, lib.cutegen_last_error())
    # seqlen_kv 300 = 3 tiles: 3 splits run (the clamp of ATTN-SPLIT-TILES), and the workspace they need is asked
    need3 = splitkv.workspace_bytes(2, 8, 4, 128, 3)
    assert _call(lib, seqlen_kv=300, ws_bytes=need3 - 1) == 2
    msg = lib.cutegen_last_error().decode()
    assert msg.startswith("ATTN-ABI-WORKSPACE: 3 KV splits") and f"{need3} bytes needed" in msg
