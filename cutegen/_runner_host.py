"""The runner's host side in numpy: buffers, a float64 reference and the D-output check, no torch.

``CUTEGEN_RUNNER_DEVICE=cpu`` (the dry run) uses this module instead of torch tensors, so that the
whole validate/bench path -- buffers laid out through each operand's strides, padding and pointer
offsets, the reference, the detection of a wrong, unwritten or out-of-bounds D, the refusal probes
-- runs on a machine with numpy only (CI). Kernels on the GPU keep the torch path in
``_runner_worker``; the two implement the same interface (``Buffers``) and are cross-checked where
torch exists (tests/test_runner_gpu.py).

numpy has no bf16 or fp8 types, so those are stored as their raw bits (uint16, uint8) and encoded
and decoded here, round-to-nearest-even as the hardware converts.
"""
from __future__ import annotations

import math

import numpy as np

from .problem import GemmProblem
from .run.cases import Case, case_operands
from .run.geometry import LaunchArgs, Operand, geometries, operand_storage_elements

GUARD = 128      # elements of NaN before and after D's storage (as the torch path)
ALIGN = 256      # bytes: every buffer starts 256-byte aligned, as a CUDA allocation does


# ------------------------------------------------------------------------------------------------
# Element encodings
# ------------------------------------------------------------------------------------------------

def _fp8_table(exp_bits: int, man_bits: int, bias: int, ieee_specials: bool) -> np.ndarray:
    """float64 value of each of the 256 codes of an 8-bit float (sign, exponent, mantissa).

    e5m2 is IEEE-like (exponent all ones: inf or NaN); e4m3 "fn" has no inf and only S.1111.111 is NaN.
    """
    out = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        m = code & ((1 << man_bits) - 1)
        if ieee_specials and e == (1 << exp_bits) - 1:
            out[code] = sign * math.inf if m == 0 else math.nan
        elif not ieee_specials and e == (1 << exp_bits) - 1 and m == (1 << man_bits) - 1:
            out[code] = math.nan
        elif e == 0:
            out[code] = sign * (m / (1 << man_bits)) * 2.0 ** (1 - bias)
        else:
            out[code] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out


FP8_VALUES = {"e4m3": _fp8_table(4, 3, 7, False), "e5m2": _fp8_table(5, 2, 15, True)}
FP8_NAN = {"e4m3": 0x7F, "e5m2": 0x7E}

STORAGE = {"bf16": np.uint16, "f16": np.float16, "tf32": np.float32, "f32": np.float32,
           "e4m3": np.uint8, "e5m2": np.uint8}


def _encode_fp8(x: np.ndarray, dtype: str) -> np.ndarray:
    """Nearest 8-bit code (ties to the even code), saturating to the largest finite value."""
    table = FP8_VALUES[dtype]
    pos = table[:0x80]
    finite = np.isfinite(pos)
    codes = np.nonzero(finite)[0]            # ascending codes have ascending values
    vals = pos[codes]
    mag = np.minimum(np.abs(x), vals[-1])
    hi = np.clip(np.searchsorted(vals, mag), 1, len(vals) - 1)
    lo = hi - 1
    dlo, dhi = mag - vals[lo], vals[hi] - mag
    pick = np.where((dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0)), hi, lo)
    out = codes[pick].astype(np.uint8) | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(FP8_NAN[dtype]), out).astype(np.uint8)


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to 10 mantissa bits, ties to even (the same bit trick as the torch path)."""
    x = np.asarray(x, dtype=np.float32)
    bits = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
    lsb = (bits >> 13) & 1
    return ((bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32).reshape(x.shape)


def encode(x, dtype: str) -> np.ndarray:
    """float values -> storage of ``dtype`` (round to nearest even)."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        u = np.ascontiguousarray(x).reshape(-1).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).reshape(x.shape)
        return np.where(np.isnan(x), np.uint16(0x7FC0), r)
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "tf32":
        return round_to_tf32(x)
    if dtype == "f32":
        return x.copy()
    if dtype in FP8_VALUES:
        return _encode_fp8(x.astype(np.float64), dtype)
    raise ValueError(f"no host encoding for {dtype!r}")


def decode(stored: np.ndarray, dtype: str) -> np.ndarray:
    """storage of ``dtype`` -> float64 values (any shape and strides)."""
    if dtype == "bf16":
        return (np.ascontiguousarray(stored).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in FP8_VALUES:
        return FP8_VALUES[dtype][stored]
    return stored.astype(np.float64)


def random_fill(flat: np.ndarray, dtype: str, gen: np.random.Generator) -> None:
    """Uniform values in [-1, 1) quantized to ``dtype``; never a buffer of zeros."""
    flat[...] = encode(gen.random(flat.size, dtype=np.float32) * 2 - 1, dtype)


def aligned_empty(count: int, dtype: str) -> np.ndarray:
    """A 1-D array of ``count`` elements whose first byte is ALIGN-byte aligned."""
    st = np.dtype(STORAGE[dtype])
    raw = np.empty(count * st.itemsize + ALIGN, dtype=np.uint8)
    skip = (-raw.ctypes.data) % ALIGN
    return raw[skip:skip + count * st.itemsize].view(st)


def workspace(nbytes: int) -> tuple[int | None, np.ndarray | None]:
    """(address, owner) of a zeroed host workspace; (None, None) for none."""
    if not nbytes:
        return None, None
    buf = aligned_empty(nbytes, "e4m3")  # one byte per element
    buf[...] = 0
    return buf.ctypes.data, buf


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact (erf) GELU, as torch.nn.functional.gelu computes it by default."""
    erf = np.frompyfunc(math.erf, 1, 1)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))


# ------------------------------------------------------------------------------------------------
# Buffers
# ------------------------------------------------------------------------------------------------

class Buffers:
    """Flat host buffers for one problem size, with (batch, rows, cols) views of each operand's storage.

    Same layout and interface as ``_runner_worker.Buffers`` (torch): ``flat``, ``ops``, ``views``,
    ``bias``, ``launch_args``, ``reset_d``, ``reference``, ``check_d``, ``d_untouched``.
    """

    def __init__(self, problem: GemmProblem, case: Case, gen: np.random.Generator, fill_inputs: bool = True):
        self.problem, self.case = problem, case
        self.geoms = geometries(problem, case.m, case.n, case.k)
        probe = case_operands(problem, case, {name: 0 for name in self.geoms})
        self.flat, self.ops, self.views = {}, {}, {}
        for name, g in self.geoms.items():
            op = probe[name]
            offset = case.offset.get(name, 0)
            storage = operand_storage_elements(g, op, case.batch)
            flat = aligned_empty(GUARD + offset + storage + GUARD, g.dtype)
            if name == "D":
                flat[...] = encode(np.float32("nan"), g.dtype)
            elif fill_inputs:
                random_fill(flat, g.dtype, gen)
            else:
                flat[...] = 0
            self.flat[name] = flat
            self.ops[name] = Operand(flat.ctypes.data + (GUARD + offset) * flat.itemsize, op.ld, op.batch_stride)
            self.views[name] = self._view(flat, g, op, GUARD + offset, case.batch)
        self.bias = None
        if problem.bias:
            self.bias = aligned_empty(case.m, problem.dtype_d)
            random_fill(self.bias, problem.dtype_d, gen)

    @staticmethod
    def _view(flat, g, op, offset, batch):
        size = flat.itemsize
        strides = (op.batch_stride, op.ld, 1) if g.row_major else (op.batch_stride, 1, op.ld)
        return np.lib.stride_tricks.as_strided(flat[offset:], (batch, g.rows, g.cols),
                                               tuple(s * size for s in strides), writeable=True)

    def values(self, name: str) -> np.ndarray:
        """The float64 values of one operand, shape (batch, rows, cols)."""
        return decode(self.views[name], self.geoms[name].dtype)

    def write_d(self, values) -> None:
        """Store ``values`` (batch, M, N) into D through D's strides, rounded to D's type."""
        self.views["D"][...] = encode(np.asarray(values), self.geoms["D"].dtype)

    def launch_args(self, alpha: float, beta: float, with_c: bool = True) -> LaunchArgs:
        c = self.ops.get("C") if with_c else None
        return LaunchArgs(self.case.m, self.case.n, self.case.k, self.case.batch, self.ops["A"], self.ops["B"],
                            c, self.ops["D"], alpha, beta, self.bias.ctypes.data if self.bias is not None else 0)

    def reset_d(self) -> None:
        self.flat["D"][...] = encode(np.float32("nan"), self.geoms["D"].dtype)

    def d_untouched(self) -> bool:
        return bool(np.isnan(decode(self.flat["D"], self.geoms["D"].dtype)).all())

    def reference(self, alpha: float, beta: float) -> np.ndarray:
        """float64 reference from the same stored inputs: alpha*A@B + beta*C (+bias, activation)."""
        ref = alpha * np.matmul(self.values("A"), self.values("B"))
        if "C" in self.views and beta != 0.0:
            ref += beta * self.values("C")
        if self.bias is not None:
            ref += decode(self.bias, self.problem.dtype_d)[None, :, None]
        if self.problem.activation == "relu":
            ref = np.maximum(ref, 0.0)
        elif self.problem.activation == "gelu":
            ref = gelu(ref)
        return ref

    def check_d(self, ref: np.ndarray, tol: float) -> dict:
        """Relative Frobenius error of D against ``ref``; NaN (unwritten) and out-of-bounds writes."""
        dtype = self.geoms["D"].dtype
        d = self.values("D")
        nan = int(np.isnan(d).sum())
        inf = int(np.isinf(d).sum())
        outside = self.flat["D"].copy()
        self._view(outside, self.geoms["D"], self.ops["D"], GUARD + self.case.offset.get("D", 0),
                   self.case.batch)[...] = encode(np.float32("nan"), dtype)
        written_outside = int((~np.isnan(decode(outside, dtype))).sum())
        finite = np.where(np.isfinite(d), d, 0.0)
        num = float(np.linalg.norm((finite - ref).ravel()))
        den = float(np.linalg.norm(ref.ravel()))
        rel = num / den if den > 0 else (0.0 if num == 0 else math.inf)
        ok = nan == 0 and inf == 0 and written_outside == 0 and rel < tol
        reasons = []
        if nan:
            reasons.append(f"{nan} of {d.size} elements NaN (unwritten or computed NaN)")
        if inf:
            reasons.append(f"{inf} elements inf")
        if written_outside:
            reasons.append(f"{written_outside} elements written outside D (padding or guard)")
        if not rel < tol:
            reasons.append(f"relative Frobenius error {rel:.3e} >= tolerance {tol:g}")
        return {"ok": ok, "rel_err": rel, "tol": tol, "nan": nan, "inf": inf,
                "written_outside": written_outside, "reason": "; ".join(reasons)}


class MatmulCall:
    """The dry run's stand-in for cuBLAS: numpy computes D = alpha*A@B + beta*C into the same D.

    Reported under the ``cublas`` contender with ``api`` saying what it is; it exists so the bench
    path (verify, time, results file) runs end to end without a GPU.
    """

    api = "numpy.matmul (CPU dry run, not cuBLAS)"

    def __init__(self, problem: GemmProblem, sets: list, alpha: float, beta: float):
        self.problem, self.sets, self.alpha, self.beta = problem, sets, alpha, beta
        self.notes = ["CPU dry run: numpy.matmul stands in for cuBLAS"]
        self.fp8 = problem.dtype_a in ("e4m3", "e5m2")
        self.tf32 = problem.dtype_a == "tf32"
        self.use_c = "C" in sets[0].views and beta != 0.0

    def __call__(self, i: int):
        bufs = self.sets[i]
        bufs.write_d(bufs.reference(self.alpha, self.beta))
