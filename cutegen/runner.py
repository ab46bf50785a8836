"""Running built kernels: the launch contract, validation plans, tolerances and the watchdog.

A facade: the code lives in ``cutegen.run`` (one module per concern) and every name this module
always had is re-exported here, so ``from cutegen.runner import X`` and ``cutegen.runner.X`` keep
working. New code imports from ``cutegen.run.<module>``. Module-level state lives in its own module,
so a test patches it there (``cutegen.run.launch._LEGALITY_ENTRY``), not here.

A kernel is a shared library with the C ABI of ``cutegen.abi`` and, beside it, a ``manifest.json``
(problem + config). Everything here is plain Python and runs without a GPU: the GPU work itself
(torch tensors, ctypes calls, CUDA events) lives in ``cutegen._runner_worker`` and runs in a spawned
child process, so that a kernel which hangs or faults costs one child, not the whole run.
"""
from __future__ import annotations

from .config import KernelConfig  # noqa: F401  (re-exported: callers reach these through runner)
from .dtypes import DTYPES  # noqa: F401
from .errors import CutegenError, FieldError  # noqa: F401
from .problem import GemmProblem  # noqa: F401
from .run import _map_repo_subpackages  # noqa: F401
from .legality.rule import RuleSet, Violation  # noqa: F401
from .run.tolerance import (  # noqa: F401
    FP8_FAST_ACCUM_TOLERANCE,
    H100_SXM_DENSE_BF16_PEAK_TFLOPS,
    TOLERANCE,
    tolerance,
)
from .run.geometry import (  # noqa: F401
    INT_MAX,
    LaunchArgs,
    MatrixGeometry,
    Operand,
    geometries,
    operand_storage_elements,
    packed_operand,
)
from .run.launch import (  # noqa: F401
    KERNEL_REFUSES,
    KernelStatusError,
    LAUNCH_RULES,
    LaunchContext,
    LaunchRefused,
    _address_align,
    _alignment_reasons,
    _bias_align,
    _epilogue_alignment,
    _extent_range,
    _legality_entry,
    _mainloop_alignment,
    _no_overlap,
    _null_pointers,
    _stride_range,
    _void_c_beta,
    checked_gemm,
    kernel_message_rule,
    legality_problem_violations,
    preflight,
    refusal_agrees,
    rulebook_id,
)
from .run.cases import (  # noqa: F401
    Case,
    STREAMK_RELAUNCHES,
    case_launch_args,
    case_operands,
    ceil_to,
    dim_units,
    parse_shape,
    plan_cases,
    problem_ld_pads,
    ragged_extent,
    refusal_probes,
    split_k_reduce_cases,
    split_k_reduce_probes,
    tile_extents,
    validation_cases,
)
from .run.library import (  # noqa: F401
    KernelInfo,
    KernelNotFound,
    _library_in,
    _problem_and_config,
    _read_json,
    discover_kernels,
    load_kernel_info,
)
from .run.watchdog import (  # noqa: F401
    Reply,
    Worker,
    _child_main,
    _main_importable_by_spawn,
)
from .run.stats import (  # noqa: F401
    geometric_mean,
    json_default,
    median,
    tflops,
)
