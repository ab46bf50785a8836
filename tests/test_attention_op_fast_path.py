"""The attention op's eager fast path (CPU): when it skips the custom op's dispatch and when it must not (tracing, fake
tensors, autograd), the call plan's arguments against the first call's, the per-stream workspace kept between eager
calls but never under CUDA-graph capture, and a misaligned base falling back to the copying path. A recording
stand-in kernel replaces the library; the few CUDA-only calls of the hot path are stubbed."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from cutegen.ops.attention import torch_op
from cutegen.ops.attention.torch_op import AttentionKernels, _eager_fast_path

KEY = {"op": "attention", "dtype": "bf16", "head_dim": 128, "head_dim_v": None, "causal": False, "varlen": False,
       "return_lse": False, "grouped": True}
LIB = "/stand-in/kernel.so"


class Recorder:
    """A stand-in for the bound library: records every cutegen_attention call's arguments, returns 0."""

    def __init__(self):
        self.calls = []

    def cutegen_attention(self, *args):
        self.calls.append(args)
        return 0

    def cutegen_attention_workspace_size(self, b, h, s):
        return b * h * s * 4 * (128 + 1) * 4 + 512

    def cutegen_last_error(self):
        return b""


@pytest.fixture
def op(monkeypatch):
    rec = Recorder()
    desc = {"hash": "standin", "problem": KEY, "config": {"kv_splits": 4}}
    monkeypatch.setattr(torch_op, "_KERNELS", {LIB: torch_op._Kernel(rec, desc)})
    monkeypatch.setattr(torch_op, "_WORKSPACES", {})
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    k = object.__new__(AttentionKernels)
    k.entries = [(LIB, desc)]
    return k, rec


def qkv(B=2, Hq=32, Hkv=8, Sq=1, Skv=300, D=128):
    return (torch.randn(B, Hq, Sq, D).to(torch.bfloat16), torch.randn(B, Hkv, Skv, D).to(torch.bfloat16),
            torch.randn(B, Hkv, Skv, D).to(torch.bfloat16))


def test_fast_path_only_for_plain_eager_tensors_without_autograd(monkeypatch):
    q, k, v = qkv()
    assert _eager_fast_path(q, k, v)
    with FakeTensorMode() as mode:
        fq = mode.from_tensor(q)
        assert not _eager_fast_path(fq, k, v)
    g = q.clone().requires_grad_()
    assert not _eager_fast_path(g, k, v)                   # the custom op refuses autograd; no silent detach
    with torch.no_grad():
        assert _eager_fast_path(g, k, v)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not _eager_fast_path(q, k, v)


def test_plan_passes_the_first_calls_arguments_and_skips_the_checks(op, monkeypatch):
    ops, rec = op
    q, k, v = qkv()
    o1 = ops(q, k, v, enable_gqa=True)
    assert len(ops._plans) == 1 and len(rec.calls) == 1

    real_run, real_pick = torch_op._run, ops.pick

    def no_run(*a, **kw):
        raise AssertionError("the second call should take the plan")
    monkeypatch.setattr(torch_op, "_run", no_run)
    monkeypatch.setattr(ops, "pick", no_run)
    o2 = ops(q, k, v, enable_gqa=True)
    monkeypatch.setattr(torch_op, "_run", real_run)
    monkeypatch.setattr(ops, "pick", real_pick)
    assert o2.shape == o1.shape == q.shape and o2.stride() == o1.stride()
    first, second = rec.calls[:2]
    # every argument but O's address: the pointers, extents, strides, scale, workspace and stream
    assert first[:3] == second[:3] and first[4:] == second[4:]
    assert first[3] != 0 and second[3] == o2.data_ptr()
    assert first[4] is None                                # a split kernel's LSE is skipped by the SDPA entry point
    assert first[5:11] == (2, 32, 8, 1, 300, 128) and first[23] == pytest.approx(128 ** -0.5)
    ops(q, k, v, enable_gqa=True, scale=0.3)               # another scale: another plan
    assert len(ops._plans) == 2


def test_workspace_is_kept_per_stream_but_not_under_capture(op, monkeypatch):
    ops, rec = op
    q, k, v = qkv()
    ops(q, k, v, enable_gqa=True)
    ops(q, k, v, enable_gqa=True)
    assert rec.calls[0][24] == rec.calls[1][24] and rec.calls[0][25] == rec.calls[1][25] > 0
    kept = dict(torch_op._WORKSPACES)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    a = torch_op._workspace(1024, q.device, 7)
    b = torch_op._workspace(1024, q.device, 7)
    assert a.data_ptr() != b.data_ptr() and a.data_ptr() != kept[(0, 7)].data_ptr()
    assert torch_op._WORKSPACES == kept                   # capture never replaces the kept block
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    bigger = torch_op._workspace(kept[(0, 7)].numel() + 1, q.device, 7)    # a larger call replaces it
    assert torch_op._WORKSPACES[(0, 7)] is bigger


def test_misaligned_base_falls_back_to_the_copying_path(op):
    ops, rec = op
    q, k, v = qkv()
    ops(q, k, v, enable_gqa=True)                          # the plan exists for this signature
    buf = torch.empty(q.numel() + 8, dtype=torch.bfloat16)
    shifted = buf[1:1 + q.numel()].view(q.shape)           # same shape and strides, base 2 bytes off
    shifted.copy_(q)
    assert shifted.data_ptr() % 16 != 0
    ops(shifted, k, v, enable_gqa=True)
    assert rec.calls[-1][0] % 16 == 0 and rec.calls[-1][0] != shifted.data_ptr()   # the kernel got an aligned copy


def test_custom_op_path_when_the_fast_path_is_off(op, monkeypatch):
    ops, rec = op
    q, k, v = qkv()
    ops.eager_fast_path = False
    used = []
    real = torch.ops.cutegen.attention_fwd

    class Spy:
        def __call__(self, *a):
            used.append(a[3])
            return real(*a)
    monkeypatch.setattr(torch.ops.cutegen, "attention_fwd", Spy(), raising=False)
    ops(q, k, v, enable_gqa=True)
    assert used == [LIB] and rec.calls[0][4] is not None   # the custom op returns the LSE: it is computed
