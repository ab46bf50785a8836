"""cutegen: legal-by-construction Hopper GEMM kernels from an e-graph search over CuTe layouts."""
from .config import KernelConfig, SmemAtom
from .errors import CutegenError, FieldError, IllegalConfig
from .problem import GemmProblem

__version__ = "0.1.0"
__all__ = ["GemmProblem", "KernelConfig", "SmemAtom", "CutegenError", "FieldError", "IllegalConfig",
           "__version__"]
