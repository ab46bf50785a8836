"""cutegen: legal-by-construction Hopper GEMM kernels from an e-graph search over CuTe layouts.

The stable Python API is what ``__all__`` lists: the problem and configuration types, the errors, and
one function per job of the command line. Everything else (``cutegen.search``, ``cutegen.render``,
``cutegen.build``, ``cutegen.packs``, ...) is internal and may change.

>>> import cutegen
>>> problem = cutegen.GemmProblem.from_dict({"m": 8192, "n": 3072, "k": 1024, "dtype": "bf16", "layout": "tn"})
>>> problem.name
'bf16_tn_m8192n3072k1024_cbf16dbf16'
"""
from ._api import (GeneratedKernel, PackResult, ProblemLike, find_kernels, generate, pack, plan_tuning,
                   tune)
from .config import KernelConfig, SmemAtom
from .errors import CutegenError, FieldError, IllegalConfig
from .problem import GemmProblem

__version__ = "0.1.0"
__all__ = ["GemmProblem", "KernelConfig", "SmemAtom", "CutegenError", "FieldError", "IllegalConfig",
           "find_kernels", "generate", "pack", "plan_tuning", "tune", "GeneratedKernel", "PackResult",
           "ProblemLike", "__version__"]
