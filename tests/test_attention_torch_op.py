"""The attention PyTorch op without a GPU: its registration, its fake (meta) implementation that
torch.compile traces with, and the argument checks of the SDPA-signature entry point."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from cutegen.ops.attention.torch_op import AttentionKernels, attention_fwd


def _kernels(*problems):
    """AttentionKernels over described kernels (no library is loaded: pick and the checks only)."""
    k = object.__new__(AttentionKernels)
    k.entries = [(f"/k{i}/kernel.so", {"hash": f"h{i}", "problem": p}) for i, p in enumerate(problems)]
    return k


KEY = {"op": "attention", "dtype": "bf16", "head_dim": 64, "head_dim_v": None, "causal": True, "varlen": False,
       "return_lse": False, "grouped": False}


def test_op_is_registered_with_its_schema():
    op = torch.ops.cutegen.attention_fwd
    schema = str(op.default._schema)
    assert schema.startswith("cutegen::attention_fwd(Tensor q, Tensor k, Tensor v, str library, float scale)")
    assert "-> (Tensor, Tensor)" in schema
    assert attention_fwd is not None


def test_fake_implementation_gives_shapes_without_running():
    with FakeTensorMode():
        q = torch.empty(2, 8, 100, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 2, 300, 64, dtype=torch.bfloat16, device="cuda")
        o, lse = torch.ops.cutegen.attention_fwd(q, k, k, "/no/such/kernel.so", 0.125)
    assert tuple(o.shape) == (2, 8, 100, 64) and o.dtype == torch.bfloat16 and o.device.type == "cuda"
    assert tuple(lse.shape) == (2, 8, 100) and lse.dtype == torch.float32


def test_traced_graph_keeps_the_op_opaque():
    from torch.fx.experimental.proxy_tensor import make_fx
    ops = _kernels(KEY)

    def f(q, k, v):
        return ops(q, k, v, is_causal=True) + 1

    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    gm = make_fx(f, tracing_mode="fake")(q, q, q)
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and "attention_fwd" in str(n.target)]
    assert len(calls) == 1 and calls[0].args[3] == "/k0/kernel.so" and calls[0].args[4] == pytest.approx(0.125)


def test_pick_matches_the_kernel_key():
    ops = _kernels(KEY, {**KEY, "causal": False}, {**KEY, "causal": False, "grouped": True, "head_dim": 128})
    assert ops.pick("bf16", 64, True, False) == "/k0/kernel.so"
    assert ops.pick("bf16", 64, False, False) == "/k1/kernel.so"
    assert ops.pick("bf16", 128, False, True) == "/k2/kernel.so"
    assert ops.pick("bf16", 128, False, False) == "/k2/kernel.so"     # a grouped kernel serves group 1 too
    with pytest.raises(ValueError, match="ATTN-OP-NO-KERNEL"):
        ops.pick("bf16", 64, True, True)                              # an MHA kernel does not serve GQA
    with pytest.raises(ValueError, match="ATTN-OP-NO-KERNEL"):
        ops.pick("f16", 64, True, False)


@pytest.mark.parametrize("kwargs, shapes, rule", [
    ({"attn_mask": torch.ones(1)}, None, "ATTN-OP-MASK"),
    ({"dropout_p": 0.1}, None, "ATTN-OP-DROPOUT"),
    ({}, ((1, 4, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64)), "ATTN-OP-GQA"),          # enable_gqa not set
    ({"enable_gqa": True}, ((1, 4, 8, 64), (1, 3, 8, 64), (1, 3, 8, 64)), "ATTN-OP-GQA"),
    ({}, ((1, 4, 8, 64), (1, 4, 8, 32), (1, 4, 8, 32)), "ATTN-OP-HEAD-DIM"),
    ({}, ((4, 8, 64),) * 3, "ATTN-OP-SHAPE"),
    ({}, ((1, 4, 8, 64), (1, 4, 9, 64), (1, 4, 8, 64)), "ATTN-OP-SHAPE"),
])
def test_sdpa_entry_point_refuses_what_it_does_not_cover(kwargs, shapes, rule):
    ops = _kernels(KEY)
    shapes = shapes or ((1, 4, 8, 64),) * 3
    q, k, v = (torch.zeros(s, dtype=torch.bfloat16) for s in shapes)
    with pytest.raises(ValueError, match=rule):
        ops.scaled_dot_product_attention(q, k, v, is_causal=True, **kwargs)


def test_dtype_refusal():
    ops = _kernels(KEY)
    q = torch.zeros(1, 4, 8, 64, dtype=torch.float32)
    with pytest.raises(ValueError, match="ATTN-OP-DTYPE"):
        ops(q, q, q, is_causal=True)
