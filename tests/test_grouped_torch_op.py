"""The grouped GEMM PyTorch op on the CPU: registration, the fake implementation's shapes (what
torch.compile traces with) and one-line argument errors. The GPU half is bench/grouped_driver.py."""
from __future__ import annotations

import pytest
import torch

from cutegen.ops.grouped_gemm import torch_op as gg
from cutegen.ops.grouped_gemm.torch_op import GroupedArgumentError

E, T, N, K = 4, 40, 64, 32


@pytest.fixture(scope="module")
def handles():
    return {"offs": gg.register_stand_in("bf16", "offs"), "masked": gg.register_stand_in("bf16", "masked"),
            "fp8": gg.register_stand_in("e4m3", "offs", "tensor"),
            "block": gg.register_stand_in("e4m3", "offs", "block128")}


def _args(device="meta", dtype=torch.bfloat16):
    a = torch.empty(T, K, dtype=dtype, device=device)
    w = torch.empty(E, N, K, dtype=dtype, device=device)
    offs = torch.tensor([10, 10, 25, 40], dtype=torch.int32, device=device)
    return a, w.transpose(-2, -1), offs


def test_ops_are_registered_with_fake_implementations(handles):
    assert hasattr(torch.ops.cutegen_grouped, "grouped_mm") and hasattr(torch.ops.cutegen_grouped, "grouped_mm_masked")
    a, b, offs = _args()
    out = gg.grouped_mm(a, b, offs, handles["offs"])
    assert out.shape == (T, N) and out.dtype == torch.bfloat16 and out.device.type == "meta"
    am = torch.empty(E, 8, K, dtype=torch.bfloat16, device="meta")
    outm = gg.grouped_mm_masked(am, b, offs, handles["masked"])
    assert outm.shape == (E, 8, N) and outm.dtype == torch.bfloat16


def test_fp8_takes_scales_and_bf16_refuses_them(handles):
    a, b, offs = _args(dtype=torch.float8_e4m3fn)
    sa = torch.ones(1, device="meta")
    out = gg.grouped_mm(a, b, offs, handles["fp8"], sa, torch.ones(E, device="meta"))
    assert out.shape == (T, N) and out.dtype == torch.bfloat16
    with pytest.raises(GroupedArgumentError, match=r"^scale_a, scale_b: the kernel \(e4m3, scale tensor\) needs both"):
        gg.grouped_mm(a, b, offs, handles["fp8"])
    with pytest.raises(GroupedArgumentError, match=r"^scale_b: expected float32 with 1 or 4 elements, got torch.float32 with 3"):
        gg.grouped_mm(a, b, offs, handles["fp8"], sa, torch.ones(3, device="meta"))
    a16, b16, _ = _args()
    with pytest.raises(GroupedArgumentError, match=r"^scale_a, scale_b: the kernel \(bf16\) takes no scales$"):
        gg.grouped_mm(a16, b16, offs, handles["offs"], sa, sa)


@pytest.mark.parametrize("change,message", [
    (lambda a, b, o: (a.unsqueeze(0), b, o), r"^a: expected \(T, K\) tokens, got 3 dimensions"),
    (lambda a, b, o: (a, b[0], o), r"^b: expected \(E, K, N\) stacked weights, got 2 dimensions$"),
    (lambda a, b, o: (a, b, o[:3]), r"^offs: expected shape \(4,\) \(one entry per group of b\), got \(3,\)$"),
    (lambda a, b, o: (a, b, o.to(torch.int64)), r"^offs: dtype torch.int64 is not torch.int32$"),
    (lambda a, b, o: (a, b.contiguous(), o), r"^b: K must be contiguous \(stride\(-2\) == 1"),
    (lambda a, b, o: (a[:, :16], b, o), r"^a: K=16 differs from b's K=32$"),
    (lambda a, b, o: (a.to(torch.float16), b, o), r"^a: dtype torch.float16 is not the kernel's torch.bfloat16 \(bf16\)$"),
    (lambda a, b, o: (a.t().contiguous().t(), b, o), r"^a: K must be contiguous"),
])
def test_bad_arguments_are_one_line_errors_naming_the_argument(handles, change, message):
    a, b, offs = change(*_args())
    with pytest.raises(GroupedArgumentError, match=message):
        gg.grouped_mm(a, b, offs, handles["offs"])


def test_layout_handle_and_device_errors(handles):
    a, b, offs = _args()
    with pytest.raises(GroupedArgumentError, match=r"^kernel: handle \d+ computes the 'masked' layout, not 'offs'"):
        gg.grouped_mm(a, b, offs, handles["masked"])
    with pytest.raises(GroupedArgumentError, match=r"^kernel: 999 is not a loaded grouped kernel handle"):
        gg.grouped_mm(a, b, offs, 999)
    ac, bc, oc = _args("cpu")
    with pytest.raises(GroupedArgumentError, match=r"^a: on cpu, the kernel runs on CUDA tensors$"):
        gg.grouped_mm(ac, bc, oc, handles["offs"])


def test_traces_under_torch_compile_without_running(handles):
    # the fake implementation is what the compiler traces; a meta graph never launches the kernel
    from torch._subclasses.fake_tensor import FakeTensorMode
    h = handles["offs"]
    with FakeTensorMode():
        a = torch.empty(T, K, dtype=torch.bfloat16)
        b = torch.empty(E, N, K, dtype=torch.bfloat16).transpose(-2, -1)
        offs = torch.empty(E, dtype=torch.int32)
        out = torch.ops.cutegen_grouped.grouped_mm(a, b, offs, h)
    assert tuple(out.shape) == (T, N) and out.dtype == torch.bfloat16
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda a, b, o: gg.grouped_mm(a, b, o, h), tracing_mode="fake")(
        *_args("cpu"))
    assert "cutegen_grouped.grouped_mm" in str(gm.graph)


def test_missing_or_foreign_library_is_refused(tmp_path):
    with pytest.raises(Exception, match="no such kernel library"):
        gg.load(tmp_path)


def test_block128_scales_are_checked_by_shape(handles):
    a, b, offs = _args(dtype=torch.float8_e4m3fn)        # K = 32: one 128-block; N = 64: one
    sa, sb = torch.ones(T, 1, device="meta"), torch.ones(E, 1, 1, device="meta")
    assert gg.grouped_mm(a, b, offs, handles["block"], sa, sb).shape == (T, N)
    with pytest.raises(GroupedArgumentError, match=r"^scale_a: expected contiguous float32 \(40, 1\) \(1 x 128 blocks"):
        gg.grouped_mm(a, b, offs, handles["block"], torch.ones(T, device="meta"), sb)
    with pytest.raises(GroupedArgumentError, match=r"^scale_b: expected contiguous float32 \(4, 1, 1\)"):
        gg.grouped_mm(a, b, offs, handles["block"], sa, torch.ones(E, device="meta"))
