"""One call of ``cutegen_gemm`` as integers: operands, launch arguments and matrix geometry."""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DTYPES
from ..problem import GemmProblem

# ------------------------------------------------------------------------------------------------
# One call of cutegen_gemm, as integers
# ------------------------------------------------------------------------------------------------

INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Operand:
    """Where one matrix of a call lives: base address, leading dimension, batch stride (elements)."""
    ptr: int
    ld: int
    batch_stride: int


@dataclass(frozen=True)
class LaunchArgs:
    """The arguments of one ``cutegen_gemm`` call, less the workspace and the stream."""
    m: int
    n: int
    k: int
    batch: int
    a: Operand
    b: Operand
    c: Operand | None      # None: NULL C pointer
    d: Operand
    alpha: float = 1.0
    beta: float = 0.0
    bias: int = 0          # device address of the bias vector, 0 for NULL

    def abi_tuple(self) -> tuple:
        """Positional arguments of cutegen_gemm up to and including ``bias`` (abi.GEMM_ARGTYPES)."""
        c = self.c or Operand(0, 0, 0)
        return (self.a.ptr, self.b.ptr, c.ptr, self.d.ptr, self.m, self.n, self.k, self.batch,
                self.a.ld, self.b.ld, c.ld, self.d.ld,
                self.a.batch_stride, self.b.batch_stride, c.batch_stride, self.d.batch_stride,
                self.alpha, self.beta, self.bias)


@dataclass(frozen=True)
class MatrixGeometry:
    """A logical rows x cols matrix of a GEMM operand and the extents its storage order implies."""
    name: str              # A, B, C or D
    dtype: str
    rows: int
    cols: int
    row_major: bool
    alignment: int = 0     # elements the kernel reads/writes this operand in; 0: 16 bytes' worth (TMA)

    @property
    def contiguous(self) -> int:
        """Extent of the mode with stride 1: the minimum leading dimension."""
        return self.cols if self.row_major else self.rows

    @property
    def outer(self) -> int:
        return self.rows if self.row_major else self.cols

    @property
    def contiguous_name(self) -> str:
        return {("A", True): "K", ("A", False): "M", ("B", True): "N", ("B", False): "K",
                ("C", True): "N", ("C", False): "M", ("D", True): "N", ("D", False): "M"}[(self.name, self.row_major)]

    @property
    def tma_alignment(self) -> int:
        """The kernel's alignment of this operand (elements): what it needs of every extent and stride.
        16 bytes' worth for TMA operands; a cp.async mainloop or no-smem epilogue takes the problem's."""
        return self.alignment or 128 // DTYPES[self.dtype].bits

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype].bits // 8


def geometries(problem: GemmProblem, m: int, n: int, k: int) -> dict[str, MatrixGeometry]:
    """A (M x K), B (K x N), C and D (M x N) of ``problem``'s types and layouts at size m, n, k."""
    al = (problem.alignment_a, problem.alignment_b, problem.alignment_c)
    out = {
        "A": MatrixGeometry("A", problem.dtype_a, m, k, problem.layout_a == "row", al[0]),
        "B": MatrixGeometry("B", problem.dtype_b, k, n, problem.layout_b == "row", al[1]),
        "D": MatrixGeometry("D", problem.dtype_d, m, n, problem.layout_c == "row", al[2]),
    }
    if problem.dtype_c != "void":
        out["C"] = MatrixGeometry("C", problem.dtype_c, m, n, problem.layout_c == "row", al[2])
    return out


def packed_operand(geom: MatrixGeometry, ptr: int, ld_pad: int = 0, batch_pad: int = 0) -> Operand:
    """An operand stored densely (plus optional padding, in elements) starting at ``ptr``."""
    ld = geom.contiguous + ld_pad
    return Operand(ptr, ld, ld * geom.outer + batch_pad)


def operand_storage_elements(geom: MatrixGeometry, op: Operand, batch: int) -> int:
    """Elements from the operand's base to one past its last element."""
    last = (batch - 1) * op.batch_stride + (geom.outer - 1) * op.ld + geom.contiguous
    return last
