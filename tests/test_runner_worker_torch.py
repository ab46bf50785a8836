"""The worker's torch buffers, reference, output check and cuBLAS call, on torch's CPU device.

No kernel runs here: a stand-in writes D. This is the GPU path's code (torch is the ``gpu`` extra),
so it carries the ``gpu`` marker and runs in the GPU suite (``pytest -m gpu``); CI checks the same
interface without torch through the numpy host backend (tests/test_runner_worker_host.py).
"""
import math

import pytest

pytestmark = pytest.mark.gpu

try:
    import torch
except ImportError:  # the tests are skipped at setup (conftest.py); collecting them needs no torch
    torch = None

from cutegen import GemmProblem  # noqa: E402
from cutegen import _runner_worker as W  # noqa: E402
from cutegen import runner as R  # noqa: E402


@pytest.fixture(autouse=True)
def cpu(monkeypatch):
    monkeypatch.setattr(W, "DEVICE", "cpu")


def gen(seed=0):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


LAYOUTS = [("row", "col", "row"), ("col", "row", "row"), ("col", "col", "col"), ("row", "row", "col")]


def stand_in_kernel(bufs, alpha, beta, dtype=None):
    """What a correct kernel writes: alpha*A@B + beta*C into D's storage, through D's strides."""
    ref = bufs.reference(alpha, beta)
    bufs.views["D"].copy_(ref.to(bufs.views["D"].dtype))
    return ref


@pytest.mark.parametrize("la,lb,lc", LAYOUTS)
def test_views_follow_layouts_strides_and_padding(la, lb, lc):
    p = GemmProblem(40, 24, 16, layout_a=la, layout_b=lb, layout_c=lc)
    case = R.Case("t", 40, 24, 16, 3, 1.0, 0.5, ld_pad={"A": 8, "B": 8, "C": 8, "D": 8},
                  batch_pad={"A": 16, "D": 16}, offset={"B": 8})
    bufs = W.Buffers(p, case, gen())
    for name, g in R.geometries(p, 40, 24, 16).items():
        v = bufs.views[name]
        assert tuple(v.shape) == (3, g.rows, g.cols)
        op = bufs.ops[name]
        unit = 1 if g.row_major else 0
        assert v.stride()[1 + unit] == 1 and v.stride()[2 - unit] == op.ld and v.stride()[0] == op.batch_stride
        # the view's first element is where the launch pointer points
        assert v.data_ptr() == op.ptr
    assert bufs.ops["B"].ptr % 16 == 0 and bufs.ops["A"].ld == (16 if la == "row" else 40) + 8
    # inputs are random, never all zeros, and within [-1, 1)
    a = bufs.views["A"].float()
    assert a.abs().max() <= 1.0 and a.abs().sum() > 0 and a.std() > 0.3
    assert torch.isnan(bufs.views["D"].float()).all()


@pytest.mark.parametrize("la,lb,lc", LAYOUTS)
def test_reference_is_alpha_ab_plus_beta_c_per_batch(la, lb, lc):
    p = GemmProblem(32, 16, 24, layout_a=la, layout_b=lb, layout_c=lc)
    bufs = W.Buffers(p, R.Case("t", 32, 16, 24, 2, 0.75, 0.5, ld_pad={"C": 8}), gen(1))
    ref = bufs.reference(0.75, 0.5)
    for b in range(2):
        a, bb, c = (bufs.views[x][b].float() for x in "ABC")
        expect = 0.75 * (a.double() @ bb.double()) + 0.5 * c.double()
        assert torch.allclose(ref[b].double(), expect, rtol=1e-5, atol=1e-5)


def test_check_passes_a_correct_result_and_names_each_defect():
    p = GemmProblem(64, 32, 48)
    case = R.Case("t", 64, 32, 48, 2, 1.0, 0.5, ld_pad={"D": 8})
    bufs = W.Buffers(p, case, gen(2))
    ref = stand_in_kernel(bufs, 1.0, 0.5)
    ok = bufs.check_d(ref, R.tolerance(p))
    assert ok["ok"] and ok["rel_err"] < 5e-3 and ok["written_outside"] == 0, ok
    # an unwritten element
    bufs.views["D"][1, 5, 7] = float("nan")
    bad = bufs.check_d(ref, 1e-2)
    assert not bad["ok"] and bad["nan"] == 1 and "NaN" in bad["reason"]
    # a write into the padding between rows of D
    stand_in_kernel(bufs, 1.0, 0.5)
    flat = bufs.flat["D"]
    pad_index = W.GUARD + 32  # row 0's padding: columns 32..39 of a row-major D with ld 40
    flat[pad_index] = 1.0
    bad = bufs.check_d(ref, 1e-2)
    assert not bad["ok"] and bad["written_outside"] == 1 and "outside D" in bad["reason"]
    # a write past the end (the guard)
    flat[pad_index] = float("nan")
    flat[-1] = 0.0
    assert bufs.check_d(ref, 1e-2)["written_outside"] == 1
    flat[-1] = float("nan")
    # a wrong answer: the error is measured, not just flagged
    bufs.views["D"].mul_(1.05)
    wrong = bufs.check_d(ref, 1e-2)
    assert not wrong["ok"] and wrong["rel_err"] == pytest.approx(0.05, rel=0.1)


def test_tf32_inputs_are_exactly_representable_in_tf32():
    p = GemmProblem(16, 16, 16, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32")
    bufs = W.Buffers(p, R.Case("t", 16, 16, 16), gen(3))
    bits = bufs.flat["A"].view(torch.int32)
    assert int((bits & 0x1FFF).abs().sum()) == 0
    assert W._round_to_tf32(torch.tensor([1.0 + 2**-11], dtype=torch.float32)).item() == 1.0       # tie: to even
    assert W._round_to_tf32(torch.tensor([1.0 + 3 * 2**-11], dtype=torch.float32)).item() == 1.0 + 2**-9
    assert W._round_to_tf32(torch.tensor([-(1.0 + 3 * 2**-12)], dtype=torch.float32)).item() == -(1.0 + 2**-10)


def test_bias_and_relu_enter_the_reference():
    p = GemmProblem(16, 8, 8, bias=True, activation="relu")
    bufs = W.Buffers(p, R.Case("t", 16, 8, 8), gen(4))
    ref = bufs.reference(1.0, 0.0)
    a, b = bufs.views["A"][0].float(), bufs.views["B"][0].float()
    expect = torch.clamp(a @ b + bufs.bias.float()[:, None], min=0)
    assert torch.allclose(ref[0], expect, atol=1e-5) and (ref >= 0).all() and (ref == 0).any()


@pytest.mark.parametrize("la,lb,lc", LAYOUTS)
@pytest.mark.parametrize("batch,alpha,beta", [(1, 1.0, 0.0), (2, 1.0, 0.0), (1, 0.5, 0.25), (3, 2.0, 1.0),
                                               (2, 0.5, 0.0)])
def test_cublas_call_computes_the_same_function(la, lb, lc, batch, alpha, beta):
    p = GemmProblem(48, 32, 40, batch=batch, layout_a=la, layout_b=lb, layout_c=lc, alpha=alpha, beta=beta)
    sets = [W.Buffers(p, R.Case("b", 48, 32, 40, batch, alpha, beta), gen(s)) for s in range(2)]
    call = W.CublasCall(p, sets, alpha, beta)
    for i, bufs in enumerate(sets):
        call(i)
        check = bufs.check_d(bufs.reference(alpha, beta), R.tolerance(p))
        assert check["ok"], check


@pytest.mark.parametrize("problem,note", [
    (GemmProblem(64, 32, 64, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16"), None),
    (GemmProblem(64, 32, 64, batch=2, layout_c="col", dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16",
                 dtype_d="bf16"), None),
    (GemmProblem(64, 32, 64, dtype_c="f32", dtype_d="f32"), "cuBLAS output converted"),
    (GemmProblem(64, 32, 64, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32"), None),
])
def test_cublas_call_other_types(problem, note):
    p = problem
    sets = [W.Buffers(p, R.Case("b", p.m, p.n, p.k, p.batch, p.alpha, p.beta), gen(5))]
    call = W.CublasCall(p, sets, p.alpha, p.beta)
    call(0)
    assert sets[0].check_d(sets[0].reference(p.alpha, p.beta), R.tolerance(p))["ok"]
    assert (note is None and call.notes == []) or any(note in n for n in call.notes)


def test_input_set_count_covers_several_l2s():
    l2 = 50 * 2**20
    assert W.input_set_count(8 * 2**20, l2) == 25                 # 1024^3 bf16 A+B+C+D = 8 MiB
    assert W.input_set_count(512 * 2**20, l2) == 2                # 8192^3: at least two sets to rotate
    assert W.input_set_count(1024, l2, max_sets=64) == 64         # capped on request
    n = W.input_set_count(3 * 2**20, l2)
    assert n * 3 * 2**20 >= 4 * l2 and (n - 1) * 3 * 2**20 < 4 * l2
    assert W.input_set_count(20 * 2**30, l2, max_total_bytes=24 * 2**30) == 2


def test_time_calls_needs_cuda_and_median_is_exact():
    assert R.median([0.5] * 25 + [0.6] * 25) == pytest.approx(0.55)
    assert math.isclose(R.tflops(2 * 4096**3, 0.2e-3), 687.19, rel_tol=1e-4)
