"""The runner's numpy host side: buffers, encodings, float64 reference and the D-output check.

This is what the CPU dry run (tests/test_runner_dryrun.py) and CI run, without torch. The torch side
of the same interface runs in tests/test_runner_worker_torch.py and on the GPU (gpu marker).
"""
import math

import numpy as np
import pytest

from cutegen import GemmProblem
from cutegen import _runner_host as H
from cutegen import _runner_worker as W
from cutegen import runner as R


def gen(seed=0):
    return np.random.default_rng(seed)


LAYOUTS = [("row", "col", "row"), ("col", "row", "row"), ("col", "col", "col"), ("row", "row", "col")]


def slow_gemm(a, b):
    """An independent reference: the triple loop in Python floats over one (rows x cols) matrix."""
    rows, inner, cols = len(a), len(b), len(b[0])
    return [[sum(a[i][p] * b[p][j] for p in range(inner)) for j in range(cols)] for i in range(rows)]


# -- encodings --------------------------------------------------------------------------------------

def test_bf16_encoding_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 1.0 + 2**-8 + 2**-20], dtype=np.float32)
    got = H.decode(H.encode(x, "bf16"), "bf16")
    # 1+2^-8 is a tie between 1 and 1+2^-7: to even (1); 1+3*2^-8 ties up to 1+2^-6; just above a tie rounds up
    assert got.tolist() == [1.0, 1.0, 1.0 + 2**-6, -2.5, 1.0 + 2**-7]
    assert np.isnan(H.decode(H.encode(np.float32("nan"), "bf16"), "bf16"))


@pytest.mark.parametrize("dtype,largest,smallest_subnormal", [("e4m3", 448.0, 2.0**-9), ("e5m2", 57344.0, 2.0**-16)])
def test_fp8_tables_match_the_formats(dtype, largest, smallest_subnormal):
    t = H.FP8_VALUES[dtype]
    finite = t[np.isfinite(t)]
    assert finite.max() == largest and finite.min() == -largest
    assert t[1] == smallest_subnormal and t[0] == 0.0 and t[0x80] == 0.0 and np.signbit(t[0x80])
    assert t[0x38 if dtype == "e4m3" else 0x3C] == 1.0
    assert np.isnan(t[H.FP8_NAN[dtype]])
    # every finite value encodes back to its own code (the +0/-0 pair aside)
    codes = np.array([c for c in range(256) if np.isfinite(t[c]) and c != 0x80])
    assert (H.encode(t[codes], dtype) == codes).all()


def test_fp8_encoding_ties_to_even_and_saturates():
    # e4m3 around 1: spacing 1/8. 1 + 1/16 is a tie between 1.0 (code 0x38, even) and 1.125 (0x39)
    assert H.decode(H.encode(np.array([1 + 1 / 16, 1 + 3 / 16, -1 - 1 / 16]), "e4m3"), "e4m3").tolist() == \
        [1.0, 1.25, -1.0]
    assert H.decode(H.encode(np.array([1e6, -1e6]), "e4m3"), "e4m3").tolist() == [448.0, -448.0]


def test_tf32_rounding_keeps_ten_mantissa_bits():
    x = np.array([1.0 + 2**-11, 1.0 + 3 * 2**-11, -(1.0 + 3 * 2**-12)], dtype=np.float32)
    assert H.round_to_tf32(x).tolist() == [1.0, 1.0 + 2**-9, -(1.0 + 2**-10)]
    p = GemmProblem(16, 16, 16, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32")
    bufs = H.Buffers(p, R.Case("t", 16, 16, 16), gen(3))
    assert int((bufs.flat["A"].view(np.uint32) & 0x1FFF).sum()) == 0


# -- buffers ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("la,lb,lc", LAYOUTS)
def test_views_follow_layouts_strides_and_padding(la, lb, lc):
    p = GemmProblem(40, 24, 16, layout_a=la, layout_b=lb, layout_c=lc)
    case = R.Case("t", 40, 24, 16, 3, 1.0, 0.5, ld_pad={"A": 8, "B": 8, "C": 8, "D": 8},
                  batch_pad={"A": 16, "D": 16}, offset={"B": 8})
    bufs = H.Buffers(p, case, gen())
    for name, g in R.geometries(p, 40, 24, 16).items():
        v = bufs.views[name]
        op = bufs.ops[name]
        assert v.shape == (3, g.rows, g.cols)
        unit = 1 if g.row_major else 0
        el = v.itemsize
        assert v.strides[1 + unit] == el and v.strides[2 - unit] == op.ld * el and v.strides[0] == op.batch_stride * el
        assert v.ctypes.data == op.ptr          # the view's first element is where the launch pointer points
    assert bufs.ops["B"].ptr % 16 == 0 and bufs.ops["A"].ld == (16 if la == "row" else 40) + 8
    a = bufs.values("A")
    assert np.abs(a).max() <= 1.0 and a.std() > 0.3       # random in [-1, 1), never all zeros
    assert np.isnan(bufs.values("D")).all() and bufs.d_untouched()


def test_every_buffer_is_aligned_like_a_device_allocation():
    p = GemmProblem(24, 16, 32, dtype_a="e4m3", dtype_b="e4m3")
    bufs = H.Buffers(p, R.Case("t", 24, 16, 32), gen())
    for name, flat in bufs.flat.items():
        assert flat.ctypes.data % H.ALIGN == 0, name
        assert bufs.ops[name].ptr == flat.ctypes.data + H.GUARD * flat.itemsize


@pytest.mark.parametrize("la,lb,lc", LAYOUTS)
def test_reference_is_alpha_ab_plus_beta_c_per_batch(la, lb, lc):
    p = GemmProblem(12, 8, 10, layout_a=la, layout_b=lb, layout_c=lc)
    bufs = H.Buffers(p, R.Case("t", 12, 8, 10, 2, 0.75, 0.5, ld_pad={"C": 8}), gen(1))
    ref = bufs.reference(0.75, 0.5)
    for b in range(2):
        a, bb, c = (bufs.values(x)[b].tolist() for x in "ABC")
        ab = slow_gemm(a, bb)
        expect = [[0.75 * ab[i][j] + 0.5 * c[i][j] for j in range(8)] for i in range(12)]
        assert np.allclose(ref[b], expect, rtol=1e-12, atol=1e-12)


def test_check_passes_a_correct_result_and_names_each_defect():
    p = GemmProblem(64, 32, 48)
    bufs = H.Buffers(p, R.Case("t", 64, 32, 48, 2, 1.0, 0.5, ld_pad={"D": 8}), gen(2))
    ref = bufs.reference(1.0, 0.5)
    bufs.write_d(ref)
    ok = bufs.check_d(ref, R.tolerance(p))
    assert ok["ok"] and 0 < ok["rel_err"] < 5e-3 and ok["written_outside"] == 0, ok
    assert not bufs.d_untouched()
    bufs.views["D"][1, 5, 7] = H.encode(np.float32("nan"), "bf16")       # an unwritten element
    bad = bufs.check_d(ref, 1e-2)
    assert not bad["ok"] and bad["nan"] == 1 and "NaN" in bad["reason"]
    bufs.write_d(ref)
    flat = bufs.flat["D"]
    pad_index = H.GUARD + 32              # row 0's padding: columns 32..39 of a row-major D with ld 40
    flat[pad_index] = H.encode(1.0, "bf16")
    bad = bufs.check_d(ref, 1e-2)
    assert not bad["ok"] and bad["written_outside"] == 1 and "outside D" in bad["reason"]
    flat[pad_index] = H.encode(np.float32("nan"), "bf16")
    flat[-1] = H.encode(0.0, "bf16")      # a write past the end (the guard)
    assert bufs.check_d(ref, 1e-2)["written_outside"] == 1
    flat[-1] = H.encode(np.float32("nan"), "bf16")
    bufs.write_d(ref * 1.05)             # a wrong answer: the error is measured, not just flagged
    wrong = bufs.check_d(ref, 1e-2)
    assert not wrong["ok"] and wrong["rel_err"] == pytest.approx(0.05, rel=0.1)
    bufs.write_d(np.where(ref > 0, np.inf, ref))
    assert bufs.check_d(ref, 1e-2)["inf"] > 0


def test_bias_relu_and_gelu_enter_the_reference():
    p = GemmProblem(16, 8, 8, bias=True, activation="relu")
    bufs = H.Buffers(p, R.Case("t", 16, 8, 8), gen(4))
    ref = bufs.reference(1.0, 0.0)
    a, b = bufs.values("A")[0], bufs.values("B")[0]
    bias = H.decode(bufs.bias, "bf16")
    assert np.allclose(ref[0], np.maximum(a @ b + bias[:, None], 0)) and (ref == 0).any() and (ref > 0).any()
    g = H.Buffers(p.replace(activation="gelu"), R.Case("t", 16, 8, 8), gen(4)).reference(1.0, 0.0)
    pre = a @ b + bias[:, None]
    assert g[0, 0, 0] == pytest.approx(0.5 * pre[0, 0] * (1 + math.erf(pre[0, 0] / math.sqrt(2))), rel=1e-12)
    assert H.gelu(np.array([0.0, 3.0, -3.0])).tolist() == pytest.approx([0.0, 2.99595, -0.00405], abs=1e-5)


@pytest.mark.parametrize("dtype_a,dtype_d", [("bf16", "bf16"), ("f16", "f16"), ("tf32", "f32"),
                                             ("e4m3", "bf16"), ("e5m2", "f16")])
def test_matmul_stand_in_writes_what_the_check_accepts(dtype_a, dtype_d):
    p = GemmProblem(48, 32, 64, batch=2, dtype_a=dtype_a, dtype_b=dtype_a, dtype_c=dtype_d, dtype_d=dtype_d,
                    layout_c="col", beta=0.5)
    sets = [H.Buffers(p, R.Case("b", 48, 32, 64, 2, 1.0, 0.5), gen(s)) for s in range(2)]
    call = H.MatmulCall(p, sets, 1.0, 0.5)
    for i, bufs in enumerate(sets):
        call(i)
        check = bufs.check_d(bufs.reference(1.0, 0.5), R.tolerance(p))
        assert check["ok"] and check["rel_err"] > 0, check      # rounded to D's type, not bit-identical


def test_worker_dispatches_to_the_host_backend_on_cpu(monkeypatch):
    monkeypatch.setattr(W, "DEVICE", "cpu")
    p = GemmProblem(16, 16, 16)
    bufs = W.make_buffers(p, R.Case("t", 16, 16, 16), W.new_generator(0))
    assert isinstance(bufs, H.Buffers)
    ptr, owner = W._workspace(100)
    assert ptr == owner.ctypes.data and owner.nbytes == 100 and not owner.any()
    assert W._workspace(0) == (None, None)
    assert W.op_init({})["name"] == "cpu (dry run)"
    times = W.time_calls(lambda i: None, n_sets=2, warmup=1, iters=5)
    assert len(times) == 5 and all(t >= 0 for t in times)


def test_input_set_count_covers_several_l2s():
    l2 = 50 * 2**20
    assert W.input_set_count(8 * 2**20, l2) == 25                 # 1024^3 bf16 A+B+C+D = 8 MiB
    assert W.input_set_count(512 * 2**20, l2) == 2                # 8192^3: at least two sets to rotate
    assert W.input_set_count(1024, l2, max_sets=64) == 64         # capped on request
    n = W.input_set_count(3 * 2**20, l2)
    assert n * 3 * 2**20 >= 4 * l2 and (n - 1) * 3 * 2**20 < 4 * l2
    assert W.input_set_count(20 * 2**30, l2, max_total_bytes=24 * 2**30) == 2


def test_median_and_tflops_are_exact():
    assert R.median([0.5] * 25 + [0.6] * 25) == pytest.approx(0.55)
    assert math.isclose(R.tflops(2 * 4096**3, 0.2e-3), 687.19, rel_tol=1e-4)
