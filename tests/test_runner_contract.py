"""The launch contract: calls refused before launch, by rule, from plain integers (no GPU)."""
import pytest

from cutegen import GemmProblem
from cutegen.runner import (LAUNCH_RULES, KERNEL_REFUSES, LaunchArgs, Operand, geometries, kernel_message_rule,
                            packed_operand, preflight, refusal_agrees, rulebook_id)

BASE = 0x7F0000000000  # a 512-byte aligned device address


def call(problem, m, n, k, batch=1, *, ptr=None, ld=None, bs=None, beta=0.0, bias=0, c=True):
    """A packed call of ``problem``'s types and layouts; override pointers, lds, batch strides by operand."""
    ptr, ld, bs = ptr or {}, ld or {}, bs or {}
    ops = {}
    for i, (name, g) in enumerate(sorted(geometries(problem, m, n, k).items())):
        op = packed_operand(g, BASE + i * 2**30)
        ops[name] = Operand(ptr.get(name, op.ptr), ld.get(name, op.ld), bs.get(name, op.batch_stride))
    return LaunchArgs(m, n, k, batch, ops["A"], ops["B"], ops.get("C") if c else None, ops["D"], 1.0, beta, bias)


def ids(violations):
    return sorted(v.rule_id for v in violations)


TN = GemmProblem(4096, 4096, 4096)                                   # bf16, A row, B col, D row
NT = GemmProblem(4096, 4096, 4096, layout_a="col", layout_b="row")
FP8 = GemmProblem(4096, 4096, 4096, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16")
TF32 = GemmProblem(4096, 4096, 4096, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32")
VOIDC = GemmProblem(4096, 4096, 4096, dtype_c="void")


def test_every_rule_has_id_rulebook_summary_source_and_unique_id():
    seen = set()
    for r in LAUNCH_RULES:
        assert r.id and r.id not in seen and r.rulebook and r.summary and r.source
        seen.add(r.id)
    assert KERNEL_REFUSES <= seen


@pytest.mark.parametrize("problem", [TN, NT, FP8, TF32, VOIDC])
def test_a_packed_aligned_call_passes(problem):
    assert preflight(problem, call(problem, 4096, 4096, 4096)) == []
    assert preflight(problem, call(problem, 256, 128, 64, batch=3)) == []


# --- E18: base pointers ------------------------------------------------------------------------------
@pytest.mark.parametrize("operand", ["A", "B", "C", "D"])
@pytest.mark.parametrize("offset,bad", [(16, False), (32, False), (8, True), (2, True), (1, True)])
def test_pointer_alignment_boundary_is_16_bytes(operand, offset, bad):
    args = call(TN, 512, 512, 512, ptr={operand: BASE + 3 * 2**30 + offset}, beta=1.0)
    v = preflight(TN, args)
    assert ("TMA-GLOBAL-ADDRESS-ALIGN" in ids(v)) == bad
    if bad:
        assert f"{operand}=0x" in v[0].reason and f"% 16 = {offset % 16}" in v[0].reason
        assert rulebook_id("TMA-GLOBAL-ADDRESS-ALIGN") == "E18"


def test_null_c_with_beta_zero_is_fine_and_with_beta_nonzero_is_refused():
    assert preflight(TN, call(TN, 256, 256, 256, c=False, beta=0.0)) == []
    v = preflight(TN, call(TN, 256, 256, 256, c=False, beta=0.5))
    assert ids(v) == ["LAUNCH-NULL-POINTER"] and "C (beta=0.5)" in v[0].reason


# --- E15: A and B extents and strides ------------------------------------------------------------------
@pytest.mark.parametrize("k,bad", [(4096, False), (4104, False), (4100, True), (4097, True), (8, False), (4, True)])
def test_bf16_tn_k_must_be_a_multiple_of_8(k, bad):
    # rulebook H.13: M=N=4096, K=4100 is refused by E15, K=4104 is legal
    v = preflight(TN, call(TN, 4096, 4096, k))
    assert ids(v) == (["CUTLASS-MAINLOOP-TMA-ALIGNMENT"] if bad else [])
    if bad:
        assert f"A contiguous extent K={k} % 8 = {k % 8}" in v[0].reason


@pytest.mark.parametrize("problem,unit", [(FP8, 16), (TF32, 4)])
def test_the_unit_is_16_bytes_of_the_element(problem, unit):
    assert preflight(problem, call(problem, 256, 256, 3 * unit)) == []
    bad = preflight(problem, call(problem, 256, 256, 3 * unit + unit // 2))
    assert "CUTLASS-MAINLOOP-TMA-ALIGNMENT" in ids(bad)


def test_nt_constrains_m_and_n_not_k():
    # A col-major: M contiguous; B row-major: N contiguous; K is free.
    assert preflight(NT, call(NT, 256, 256, 100)) == []
    assert "CUTLASS-MAINLOOP-TMA-ALIGNMENT" in ids(preflight(NT, call(NT, 252, 256, 64)))
    assert ids(preflight(NT, call(NT, 256, 250, 64))) == ["CUTLASS-EPILOGUE-TMA-ALIGNMENT",
                                                           "CUTLASS-MAINLOOP-TMA-ALIGNMENT"]


@pytest.mark.parametrize("ld,rule", [(520, None), (512, None), (513, "CUTLASS-MAINLOOP-TMA-ALIGNMENT"),
                                     (516, "CUTLASS-MAINLOOP-TMA-ALIGNMENT"), (504, "LAUNCH-STRIDE-NO-OVERLAP")])
def test_leading_dimension_of_b(ld, rule):
    v = preflight(TN, call(TN, 256, 256, 512, ld={"B": ld}))
    assert ids(v) == ([rule] if rule else [])


def test_batch_stride_checked_only_when_batched():
    # The ABI ignores batch strides of a single matrix (abi.py); the kernel uses the packed size.
    assert preflight(TN, call(TN, 256, 256, 256, batch=1, bs={"A": 3})) == []
    v = preflight(TN, call(TN, 256, 256, 256, batch=2, bs={"A": 256 * 256 + 4}))
    assert ids(v) == ["CUTLASS-MAINLOOP-TMA-ALIGNMENT"] and "A batch stride 65540 % 8 = 4" in v[0].reason
    v = preflight(TN, call(TN, 256, 256, 256, batch=2, bs={"A": 256 * 256 - 8}))
    assert ids(v) == ["LAUNCH-STRIDE-NO-OVERLAP"]
    assert preflight(TN, call(TN, 256, 256, 256, batch=2, bs={"A": 256 * 256 + 8})) == []


# --- E16: C and D ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,bad", [(4096, False), (4088, False), (4092, True), (4095, True)])
def test_row_major_d_needs_n_multiple_of_8(n, bad):
    v = preflight(TN, call(TN, 4096, n, 4096))
    assert ("CUTLASS-EPILOGUE-TMA-ALIGNMENT" in ids(v)) == bad


def test_c_extent_is_checked_even_without_a_c_pointer():
    # CUTLASS builds C's TMA descriptor from the problem shape whatever the pointer (E16).
    v = preflight(TN, call(TN, 256, 252, 256, c=False))
    assert "C contiguous extent N=252 % 8 = 4" in v[0].reason


def test_f32_d_unit_is_4():
    assert preflight(TF32, call(TF32, 256, 260, 256)) == []
    assert "CUTLASS-EPILOGUE-TMA-ALIGNMENT" in ids(preflight(TF32, call(TF32, 256, 258, 256)))


def test_void_c_requires_beta_zero():
    assert preflight(VOIDC, call(VOIDC, 256, 256, 256, beta=0.0)) == []
    v = preflight(VOIDC, call(VOIDC, 256, 256, 256, beta=1.0))
    assert ids(v) == ["CUTLASS-EPILOGUE-VOID-C-BETA"] and "beta=1" in v[0].reason


# --- A07/A08: ranges ----------------------------------------------------------------------------------
@pytest.mark.parametrize("m,bad", [(1, False), (2**31 - 1, False), (0, True), (2**31, True), (-5, True)])
def test_extent_range(m, bad):
    v = preflight(TN, call(TN, m, 256, 256))
    assert ("LAUNCH-EXTENT-RANGE" in ids(v)) == bad


def test_stride_range_is_below_2_to_40_bytes():
    ok_ld = 2**39 - 8          # bf16: 2^40 - 16 bytes
    bad_ld = 2**39             # exactly 2^40 bytes: the driver needs < 2^40
    assert "TMA-GLOBAL-STRIDE-RANGE" not in ids(preflight(TN, call(TN, 16, 256, 256, ld={"A": ok_ld})))
    assert "TMA-GLOBAL-STRIDE-RANGE" in ids(preflight(TN, call(TN, 16, 256, 256, ld={"A": bad_ld})))


def test_bias_pointer_rules():
    p = GemmProblem(256, 256, 256, bias=True)
    assert ids(preflight(p, call(p, 256, 256, 256, bias=0))) == ["LAUNCH-NULL-POINTER"]
    assert ids(preflight(p, call(p, 256, 256, 256, bias=BASE + 1))) == ["LAUNCH-BIAS-ALIGN"]
    assert preflight(p, call(p, 256, 256, 256, bias=BASE + 2)) == []


# --- agreement with the kernel's own answer -------------------------------------------------------------
def test_kernel_message_rule_is_the_leading_token():
    assert kernel_message_rule("E18: A pointer is not 16-byte aligned") == "E18"
    assert kernel_message_rule("E15-E17: CUTLASS can_implement rejected M=1") == "E15-E17"
    assert kernel_message_rule("ABI-NULL: A is NULL") == "ABI-NULL"
    assert kernel_message_rule("something went wrong: x") == ""


def test_refusal_agrees_needs_status_1_and_a_matching_rule():
    v = preflight(TN, call(TN, 256, 256, 256, ptr={"A": BASE + 2}))
    assert refusal_agrees(v, 1, "E18: A pointer is not 16-byte aligned")[0]
    ok, why = refusal_agrees(v, 0, "")
    assert not ok and "status 0" in why
    ok, why = refusal_agrees(v, 1, "E16: D contiguous extent")
    assert not ok and "E16" in why
    v = preflight(TN, call(TN, 256, 256, 260))
    assert refusal_agrees(v, 1, "E15-E17: CUTLASS can_implement rejected")[0]
    v = preflight(TN, call(TN, 256, 256, 252, ld={"A": 252}))
    assert ids(v) == ["CUTLASS-MAINLOOP-TMA-ALIGNMENT"]
    assert refusal_agrees(v, 1, "E15: A contiguous extent (columns) 252 is not a multiple of 8")[0]


def test_legality_problem_rules_are_consulted_when_available(monkeypatch):
    from cutegen import KernelConfig
    from cutegen.legality.rule import Violation
    from cutegen.run import launch
    seen = []

    def fake(problem, config):
        seen.append((problem.m, problem.n, problem.k, problem.batch))
        return [Violation("FAKE-HANG", "hangs at this size")]

    monkeypatch.setattr(launch, "_LEGALITY_ENTRY", fake)
    cfg = KernelConfig((128, 256, 64))
    v = preflight(TN, call(TN, 264, 256, 128, batch=2), cfg)
    assert ids(v) == ["FAKE-HANG"] and seen == [(264, 256, 128, 2)]
    # without a config only the launch contract applies
    assert preflight(TN, call(TN, 264, 256, 128, batch=2)) == []


def test_legality_check_config_runs_at_the_call_size():
    from cutegen import KernelConfig
    cfg = KernelConfig((128, 256, 64), (2, 1, 1))
    assert preflight(TN, call(TN, 321, 392, 232), cfg) == []
    v = ids(preflight(TN, call(TN, 256, 256, 260), cfg))
    assert "CUTLASS-MAINLOOP-TMA-ALIGNMENT" in v and "SM90-CAN-IMPLEMENT-AB" in v


class RecordingLib:
    """A stand-in for a bound kernel library: records calls, answers with a fixed status."""

    def __init__(self, status=0, message=b""):
        self.calls, self.status, self.message = [], status, message

    def cutegen_gemm(self, *args):
        self.calls.append(args)
        return self.status

    def cutegen_last_error(self):
        return self.message


def test_checked_gemm_refuses_before_calling_the_library():
    from cutegen.runner import LaunchRefused, checked_gemm
    lib = RecordingLib()
    with pytest.raises(LaunchRefused) as e:
        checked_gemm(lib, TN, call(TN, 256, 256, 256, ptr={"A": BASE + 2}), 0, 0, 0)
    assert lib.calls == [] and "TMA-GLOBAL-ADDRESS-ALIGN (E18)" in str(e.value)
    assert [v.rule_id for v in e.value.violations] == ["TMA-GLOBAL-ADDRESS-ALIGN"]


def test_checked_gemm_passes_a_legal_call_through_and_reports_a_status():
    from cutegen.runner import KernelStatusError, checked_gemm
    lib = RecordingLib()
    args = call(TN, 256, 256, 256, beta=0.5)
    checked_gemm(lib, TN, args, 0x1000, 64, 7)
    assert len(lib.calls) == 1 and lib.calls[0][:19] == args.abi_tuple() and lib.calls[0][19:] == (0x1000, 64, 7)
    bad = RecordingLib(3, b"initialize failed: Error Internal")
    with pytest.raises(KernelStatusError) as e:
        checked_gemm(bad, TN, args, 0, 0, 0)
    assert e.value.status == 3 and "initialization failed" in str(e.value) and "Error Internal" in str(e.value)
