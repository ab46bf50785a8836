"""The GPU side of the runner: runs in a spawned child process (see ``cutegen.run.watchdog.Worker``).

Everything that touches torch, CUDA or a kernel library is here, imported lazily, so that a hang or
a sticky CUDA fault costs this child only. Requests are dicts ``{"op": name, ...}``; each answer is
``{"ok": bool, "value": ..., "error": str, "fatal": bool}`` where ``fatal`` says the CUDA context
can no longer be trusted and the parent must start a new child.

Also a tiny stand-alone driver for compute-sanitizer:
``python -m cutegen._runner_worker --once REQUEST.json`` runs one request in this process and
exits 0 only when it passed.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
import traceback

from . import abi
from .problem import GemmProblem
from .config import KernelConfig
from .errors import CutegenError
from .run.cases import Case, case_operands, problem_ld_pads
from .run.geometry import LaunchArgs, Operand, geometries, operand_storage_elements
from .run.launch import preflight, refusal_agrees
from .run.stats import json_default, median
from .run.tolerance import tolerance

_LIBS: dict[str, ctypes.CDLL] = {}
# Where buffers live. Always "cuda" for real runs (torch tensors). "cpu" is the dry run: numpy host
# buffers (cutegen._runner_host), so the whole path runs without torch or a GPU against a host-side
# stand-in kernel library.
DEVICE = os.environ.get("CUTEGEN_RUNNER_DEVICE", "cuda")


def _on_gpu() -> bool:
    return DEVICE != "cpu"


def new_generator(seed: int):
    """The random generator of the buffers' backend, seeded."""
    if not _on_gpu():
        import numpy as np
        return np.random.default_rng(seed)
    gen = _torch().Generator(device=DEVICE)
    gen.manual_seed(seed)
    return gen


def make_buffers(problem: GemmProblem, case: "Case", gen):
    """Buffers of the backend: torch on the GPU, numpy on the host (the dry run)."""
    if not _on_gpu():
        from . import _runner_host
        return _runner_host.Buffers(problem, case, gen)
    return Buffers(problem, case, gen)


def _workspace(nbytes: int):
    """(address or None, owner) of a workspace of ``nbytes`` on the backend's device."""
    if not _on_gpu():
        from . import _runner_host
        return _runner_host.workspace(nbytes)
    if not nbytes:
        return None, None
    ws = _torch().empty(max(nbytes, 1), device=DEVICE, dtype=_torch().uint8)
    return ws.data_ptr(), ws


def _sync() -> None:
    if _on_gpu():
        _torch().cuda.synchronize()


def _stream() -> int:
    """The handle cutegen_gemm is given: torch's current CUDA stream (0, the default, on the CPU)."""
    return _torch().cuda.current_stream().cuda_stream if _on_gpu() else 0


# ------------------------------------------------------------------------------------------------
# The request loop
# ------------------------------------------------------------------------------------------------

def serve(conn) -> None:
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        op = task.get("op")
        if op == "exit":
            return
        try:
            value = handle(task)
            msg = {"ok": True, "value": value, "fatal": _context_broken()}
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            msg = {"ok": False, "value": getattr(e, "value", None),
                   "error": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}",
                   "fatal": _context_broken()}
        try:
            conn.send(msg)
        except (OSError, BrokenPipeError):
            return
        if msg["fatal"]:
            return


def handle(task: dict):
    op = task.get("op")
    fn = OPS.get(op)
    if fn is None:
        raise ValueError(f"unknown op {op!r}")
    return fn(task)


def _context_broken() -> bool:
    """True when the CUDA context has a sticky error (after a fault every later call fails)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001
        return True


# ------------------------------------------------------------------------------------------------
# Self-test ops: exercise the watchdog without a GPU
# ------------------------------------------------------------------------------------------------

def op_ping(task):
    return {"pid": os.getpid()}


def op_selftest_sleep(task):
    seconds = task.get("seconds")
    if seconds is None:
        while True:  # a stand-in for a kernel that never finishes
            time.sleep(3600)
    time.sleep(float(seconds))
    return {"slept": seconds, "pid": os.getpid()}


def op_selftest_raise(task):
    raise RuntimeError(task.get("message", "selftest failure"))


def op_selftest_exit(task):
    os._exit(int(task.get("code", 3)))


# ------------------------------------------------------------------------------------------------
# Torch helpers
# ------------------------------------------------------------------------------------------------

def _torch():
    import torch
    return torch


def torch_dtype(name: str):
    torch = _torch()
    return {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32, "f32": torch.float32,
            "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[name]


def _device_info(probe_cublas: bool = True) -> dict:
    if not _on_gpu():
        import numpy as np
        return {"name": "cpu (dry run)", "compute_capability": None, "sm_count": 0, "memory_gib": None,
                "l2_bytes": 50 * 2**20, "torch": None, "torch_cuda": None, "numpy": np.__version__,
                "driver_api": None, "cublas": None}
    torch = _torch()
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available to torch in the worker")
    props = torch.cuda.get_device_properties(0)
    info = {
        "name": torch.cuda.get_device_name(0),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 50 * 2**20),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "driver_api": _driver_api_version(),
        "driver": _driver_version(),
        "cublas": _cublas_version() if probe_cublas else None,
    }
    return info


def _driver_api_version():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return v.value
    except OSError:
        pass
    return None


def _driver_version():
    """The kernel driver's version string (e.g. 580.159.04), as /proc/driver/nvidia/version gives it."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            import re
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", f.read())
            return m.group(1) if m else None
    except OSError:
        return None


def _cublas_version():
    """cuBLAS as torch loaded it: (major, minor, patch) from cublasGetProperty, after one matmul."""
    torch = _torch()
    a = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "libcublas.so" in line and "Lt" not in line})
        if not paths:
            return None
        lib = ctypes.CDLL(paths[0])
        parts = []
        for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            v = ctypes.c_int()
            if lib.cublasGetProperty(prop, ctypes.byref(v)) != 0:
                return None
            parts.append(str(v.value))
        return ".".join(parts)
    except (OSError, AttributeError):
        return None


def op_init(task):
    if _on_gpu():
        torch = _torch()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.cuda.init()
    # Under compute-sanitizer, run no cuBLAS work beyond the case itself.
    info = _device_info(probe_cublas=not os.environ.get("CUTEGEN_SANITIZER"))
    info["pid"] = os.getpid()
    return info


def load_library(path: str) -> ctypes.CDLL:
    lib = _LIBS.get(path)
    if lib is None:
        lib = abi.bind(ctypes.CDLL(path))
        _LIBS[path] = lib
    return lib


def op_describe(task):
    lib = load_library(task["library"])
    raw = lib.cutegen_describe()
    return json.loads(raw.decode()) if raw else None


def _round_to_tf32(t):
    """Round float32 values to the nearest tf32 value (10 mantissa bits), ties to even, so that the
    kernel and the float32 reference see identical inputs (as they do for bf16 inputs)."""
    torch = _torch()
    bits = t.view(torch.int32)
    lsb = (bits >> 13) & 1
    rounded = (bits + 0x0FFF + lsb) & ~0x1FFF
    return rounded.view(torch.float32)


def random_fill(flat, dtype: str, gen) -> None:
    """Uniform values in [-1, 1) quantized to ``dtype``; never a buffer of zeros."""
    torch = _torch()
    vals = torch.rand(flat.numel(), device=flat.device, generator=gen, dtype=torch.float32) * 2 - 1
    if dtype == "tf32":
        vals = _round_to_tf32(vals)
    flat.copy_(vals.to(flat.dtype))


GUARD = 128  # elements of NaN before and after D's storage: writes outside the matrix show up there


class Buffers:
    """Flat device buffers for one problem size, with views of each operand as (batch, rows, cols)."""

    def __init__(self, problem: GemmProblem, case: Case, gen, fill_inputs: bool = True):
        torch = _torch()
        self.problem, self.case = problem, case
        self.geoms = geometries(problem, case.m, case.n, case.k)
        probe = case_operands(problem, case, {name: 0 for name in self.geoms})
        self.flat, self.ops, self.views = {}, {}, {}
        for name, g in self.geoms.items():
            op = probe[name]
            offset = case.offset.get(name, 0)
            storage = operand_storage_elements(g, op, case.batch)
            flat = torch.empty(GUARD + offset + storage + GUARD, device=DEVICE, dtype=torch_dtype(g.dtype))
            if name == "D":
                flat.fill_(float("nan"))
            elif fill_inputs:
                random_fill(flat, g.dtype, gen)
            base = flat.data_ptr() + GUARD * flat.element_size()
            self.flat[name] = flat
            self.ops[name] = Operand(base + offset * flat.element_size(), op.ld, op.batch_stride)
            self.views[name] = self._view(flat, g, op, GUARD + offset, case.batch)
        self.bias = None
        if problem.bias:
            self.bias = torch.empty(case.m, device=DEVICE, dtype=torch_dtype(problem.dtype_d))
            random_fill(self.bias, problem.dtype_d, gen)

    @staticmethod
    def _view(flat, g, op, offset, batch):
        torch = _torch()
        strides = (op.batch_stride, op.ld, 1) if g.row_major else (op.batch_stride, 1, op.ld)
        return torch.as_strided(flat, (batch, g.rows, g.cols), strides, offset)

    def launch_args(self, alpha: float, beta: float, with_c: bool = True) -> LaunchArgs:
        c = self.ops.get("C") if with_c else None
        return LaunchArgs(self.case.m, self.case.n, self.case.k, self.case.batch, self.ops["A"], self.ops["B"],
                            c, self.ops["D"], alpha, beta, self.bias.data_ptr() if self.bias is not None else 0)

    def reset_d(self):
        self.flat["D"].fill_(float("nan"))

    def d_untouched(self) -> bool:
        return bool(_torch().isnan(self.flat["D"]).all().item())

    def reference(self, alpha: float, beta: float):
        """float32 reference from the same stored inputs: alpha*A@B + beta*C (+bias, activation)."""
        torch = _torch()
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            ref = torch.matmul(self.views["A"].float(), self.views["B"].float())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        ref.mul_(alpha)
        if "C" in self.views and beta != 0.0:
            ref.add_(self.views["C"].float(), alpha=beta)
        if self.bias is not None:
            ref.add_(self.bias.float()[None, :, None])
        if self.problem.activation == "relu":
            ref.clamp_(min=0)
        elif self.problem.activation == "gelu":
            ref = torch.nn.functional.gelu(ref)
        return ref

    def check_d(self, ref, tol: float) -> dict:
        """Relative Frobenius error of D against ``ref``; NaN (unwritten) and out-of-bounds writes."""
        torch = _torch()
        d = self.views["D"]
        nan = int(torch.isnan(d).sum().item())
        inf = int(torch.isinf(d).sum().item())
        outside = self.flat["D"].clone()
        self._view(outside, self.geoms["D"], self.ops["D"], GUARD + self.case.offset.get("D", 0),
                   self.case.batch).fill_(float("nan"))
        written_outside = int((~torch.isnan(outside)).sum().item())
        num = torch.linalg.vector_norm(torch.nan_to_num(d.double(), nan=0.0) - ref.double()).item()
        den = torch.linalg.vector_norm(ref.double()).item()
        rel = num / den if den > 0 else (0.0 if num == 0 else math.inf)
        ok = nan == 0 and inf == 0 and written_outside == 0 and rel < tol
        reasons = []
        if nan:
            reasons.append(f"{nan} of {d.numel()} elements NaN (unwritten or computed NaN)")
        if inf:
            reasons.append(f"{inf} elements inf")
        if written_outside:
            reasons.append(f"{written_outside} elements written outside D (padding or guard)")
        if not rel < tol:
            reasons.append(f"relative Frobenius error {rel:.3e} >= tolerance {tol:g}")
        return {"ok": ok, "rel_err": rel, "tol": tol, "nan": nan, "inf": inf,
                "written_outside": written_outside, "reason": "; ".join(reasons)}


def plan_workspace(lib, args: LaunchArgs, plan: dict | None = None):
    """(address or None, owner, bytes) of a workspace of the size the kernel asks for this call and plan."""
    if plan:
        from cutegen.launch_plan import LaunchPlan
        if not abi.has_plan(lib):
            raise CutegenError("the case has a launch plan but the library exports no cutegen_gemm_plan "
                                 "(only stream-K kernels do)")
        ws_bytes = int(lib.cutegen_workspace_size_plan(args.m, args.n, args.k, args.batch,
                                                       *LaunchPlan.from_dict(plan).codes()))
    else:
        ws_bytes = int(lib.cutegen_workspace_size(args.m, args.n, args.k, args.batch))
    ptr, owner = _workspace(ws_bytes)
    return ptr, owner, ws_bytes


def call_kernel(lib, args: LaunchArgs, plan: dict | None = None, workspace=None) -> tuple[int, str]:
    """One cutegen_gemm call (cutegen_gemm_plan with a launch plan) on the current stream, with the
    given ``workspace`` (plan_workspace's triple) or a fresh one of the size the kernel asks."""
    ptr, _owner, ws_bytes = workspace if workspace is not None else plan_workspace(lib, args, plan)
    stream = _stream()
    if plan:
        from cutegen.launch_plan import LaunchPlan
        status = lib.cutegen_gemm_plan(*args.abi_tuple(), *LaunchPlan.from_dict(plan).codes(), ptr, ws_bytes, stream)
    else:
        status = lib.cutegen_gemm(*args.abi_tuple(), ptr, ws_bytes, stream)
    msg = lib.cutegen_last_error()
    return int(status), (msg.decode(errors="replace") if msg else "")


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------

def op_validate_case(task):
    """Run one validation case (or refusal probe) on one kernel; see runner.validation_cases."""
    problem = GemmProblem.from_dict(task["problem"])
    config = KernelConfig.from_dict(task["config"]) if task.get("config") else None
    case = Case.from_dict(task["case"])
    tol = float(task.get("tolerance", tolerance(problem)))
    lib = load_library(task["library"])
    gen = new_generator(int(task.get("seed", 0)) * 1000 + case.seed)
    t0 = time.monotonic()
    bufs = make_buffers(problem, case, gen)
    args = bufs.launch_args(case.alpha, case.beta)
    violations = preflight(problem, args, config)
    out = {"case": case.name, "m": case.m, "n": case.n, "k": case.k, "batch": case.batch,
           "alpha": case.alpha, "beta": case.beta, "violations": [v.to_dict() for v in violations]}
    if case.is_probe:
        # A call the launch contract refuses: assert the preflight names the intended rule, then ask
        # the kernel itself, which must refuse it too (status 1) and launch nothing.
        found = {v.rule_id for v in violations}
        missing = [r for r in case.expect if r not in found]
        status, message = call_kernel(lib, args)
        _sync()
        d_untouched = bufs.d_untouched()
        agree, why = refusal_agrees(violations, status, message)
        ok = not missing and agree and d_untouched
        reasons = []
        if missing:
            reasons.append(f"preflight did not find {missing} (found {sorted(found)})")
        if not agree:
            reasons.append(why)
        if not d_untouched:
            reasons.append("the kernel wrote D although it should have refused the call")
        out.update(kind="probe", ok=ok, expect=list(case.expect), kernel_status=status, kernel_message=message,
                   d_untouched=d_untouched, reason="; ".join(reasons) or why)
        return out
    if violations:
        out.update(kind="case", ok=None, refused=True,
                   reason="refused before launch: " + "; ".join(f"{v.rule_id}: {v.reason}" for v in violations))
        return out
    ref = bufs.reference(case.alpha, case.beta)
    _sync()
    if case.plan:
        out["plan"] = dict(case.plan)
    # one workspace for every launch of the case: a relaunch (repeat > 1) must not see a stale one
    workspace = plan_workspace(lib, args, case.plan)
    out["workspace_bytes"] = workspace[2]
    worst = None
    for launch in range(max(1, case.repeat)):
        if launch:
            bufs.reset_d()
        t1 = time.monotonic()
        status, message = call_kernel(lib, args, case.plan, workspace)
        _sync()
        kernel_s = time.monotonic() - t1
        if status != 0:
            out.update(kind="case", ok=False, kernel_status=status, kernel_message=message, launch=launch,
                       reason=f"kernel returned status {status} ({abi.STATUS.get(status, '?')}) at launch "
                              f"{launch}: {message}")
            return out
        check = bufs.check_d(ref, tol)
        if worst is None or not check["ok"] or check["rel_err"] > worst["rel_err"]:
            worst = dict(check, launch=launch)
        if not check["ok"]:
            worst["reason"] = f"launch {launch} of {case.repeat}: {check['reason']}"
            break
    if case.repeat > 1:
        out["launches"] = case.repeat
    out.update(kind="case", kernel_status=0, kernel_seconds=round(kernel_s, 4),
               total_seconds=round(time.monotonic() - t0, 3), **worst)
    return out


# ------------------------------------------------------------------------------------------------
# Benchmark
# ------------------------------------------------------------------------------------------------

def _sleep_cycles(n: int) -> None:
    torch = _torch()
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None and n > 0:
        sleep(int(n))


def time_calls(fn, n_sets: int, warmup: int, iters: int, cycles_per_iter: int = 100_000) -> list[float]:
    """Milliseconds of each of ``iters`` calls ``fn(i)``, rotating over ``n_sets`` input sets.

    Each call sits between two CUDA events on the current stream. A spin kernel queued first keeps
    the GPU busy while the host queues every timed call, so host launch overhead (ctypes, Python)
    does not show up as idle gaps inside the events; the same method times every contender.
    """
    for i in range(warmup):
        fn(i % n_sets)
    if not _on_gpu():  # the CPU dry run: host clock around each (synchronous) call
        times = []
        for i in range(iters):
            t0 = time.perf_counter()
            fn((warmup + i) % n_sets)
            times.append((time.perf_counter() - t0) * 1e3)
        return times
    torch = _torch()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    _sleep_cycles(cycles_per_iter * iters)
    for i in range(iters):
        s = (warmup + i) % n_sets
        starts[i].record()
        fn(s)
        ends[i].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in zip(starts, ends)]


GRAPH_UNDER_MS = 0.050   # problems whose event-timed median is under this also get a graph time
GRAPH_MAX_CALLS = 256    # calls captured in one graph (rotating over the input sets)


def time_graph(fn, n_sets: int, iters: int, stream_box: list | None = None, reset=None) -> dict:
    """Milliseconds per call with launch gaps removed: ``calls`` calls of ``fn`` (rotating over the
    input sets, as time_calls does) captured once in a CUDA graph, the graph replayed ``iters`` times
    between CUDA events, each replay's time divided by ``calls``; the median over the replays.

    ``stream_box`` (a one-element list) holds the stream a cutegen library launches on; it points at
    the capture stream while capturing. Relaxed capture: the ABI's host calls (can_implement,
    cudaFuncSetAttribute) are not stream work and are allowed; what it enqueues is recorded.
    ``reset`` runs after the capture, before the first replay (so a check of D afterwards sees what
    the replays wrote, not the eager warm-up call).
    """
    if not _on_gpu():
        return {"graph_status": "no_gpu"}
    torch = _torch()
    calls = max(min(n_sets, GRAPH_MAX_CALLS), min(GRAPH_MAX_CALLS, 16))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    old = stream_box[0] if stream_box else None
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(side):
            if stream_box:
                stream_box[0] = side.cuda_stream
            fn(0)                      # warm on the capture stream (cuBLAS picks its workspace here)
            side.synchronize()
            with torch.cuda.graph(graph, stream=side, capture_error_mode="relaxed"):
                for j in range(calls):
                    fn(j % n_sets)
    except Exception as e:  # noqa: BLE001 - a capture failure is reported, the event times stand
        return {"graph_status": "error", "graph_reason": f"{type(e).__name__}: {e}"}
    finally:
        if stream_box:
            stream_box[0] = old
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if reset is not None:
        reset()
        torch.cuda.synchronize()
    graph.replay()                     # one untimed replay
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        graph.replay()
        ends[i].record()
    torch.cuda.synchronize()
    per_call = [a.elapsed_time(b) / calls for a, b in zip(starts, ends)]
    del graph
    return {"graph_status": "ok", "graph_calls": calls, "graph_times_ms": [round(t, 6) for t in per_call],
            "graph_median_ms": median(per_call)}


def input_set_count(set_bytes: int, l2_bytes: int, l2_multiple: int = 4, min_sets: int = 2,
                    max_sets: int = 4096, max_total_bytes: int = 24 * 2**30) -> int:
    """How many input sets to rotate over so that together they are ``l2_multiple`` times the L2."""
    n = max(min_sets, -(-l2_multiple * l2_bytes // max(set_bytes, 1)))
    n = min(n, max_sets, max(min_sets, max_total_bytes // max(set_bytes, 1)))
    return int(n)


class CublasCall:
    """torch's cuBLAS path for the same problem, dtypes and layouts, writing into the same D."""

    def __init__(self, problem: GemmProblem, sets: list, alpha: float, beta: float):
        torch = _torch()
        self.problem, self.sets, self.alpha, self.beta = problem, sets, alpha, beta
        self.notes = []
        self.fp8 = problem.dtype_a in ("e4m3", "e5m2")
        # the same numerics as the kernel: fast accumulation only when the problem asks for it
        self.fast_accum = bool(getattr(problem, "fp8_fast_accum", False))
        if self.fast_accum:
            self.notes.append("torch._scaled_mm(use_fast_accum=True), like the kernel's FP8 fast accumulation")
        self.tf32 = problem.dtype_a == "tf32"
        self.one = torch.ones((), device=DEVICE, dtype=torch.float32)
        p = problem
        self.out_dtype = torch_dtype(p.dtype_d)
        self.in_dtype = torch_dtype(p.dtype_a)
        if not self.fp8 and self.out_dtype != self.in_dtype:
            self.notes.append(f"D is {p.dtype_d} but torch.matmul of {p.dtype_a} writes {p.dtype_a}; "
                              "cuBLAS output converted")
        self.use_c = "C" in sets[0].views and beta != 0.0
        if self.use_c and self.fp8:
            self.notes.append("torch._scaled_mm has no beta*C: cuBLAS timed without the C term")
        self.prepared = [self._prepare(b) for b in sets]
        if self.fp8 and not self._fp8_tn(*self.prepared[0][:2]):
            self.notes.append("cuBLASLt takes fp8 only as TN: cuBLAS timed with torch's transposing copy "
                              "(.contiguous()) of the MN-major operand(s) first, inside each call")

    @staticmethod
    def _fp8_tn(a, b) -> bool:
        """torch._scaled_mm's layout: a row-major, b column-major."""
        return a.stride(-1) == 1 and b.stride(-2) == 1

    @staticmethod
    def _as_tn(a, b):
        """The operands as torch._scaled_mm takes them, transposed by a copy where they are not."""
        if a.stride(-1) != 1:
            a = a.contiguous()
        if b.stride(-2) != 1:
            b = b.transpose(-1, -2).contiguous().transpose(-1, -2)
        return a, b

    def _prepare(self, bufs):
        """Operand views such that D (or its transpose, for column-major D) = A' @ B'."""
        a, b, d = bufs.views["A"], bufs.views["B"], bufs.views["D"]
        c = bufs.views.get("C")
        if self.problem.layout_c == "col":
            a, b = b.transpose(-1, -2), a.transpose(-1, -2)
            d = d.transpose(-1, -2)
            c = c.transpose(-1, -2) if c is not None else None
        if self.problem.batch == 1 and a.shape[0] == 1:
            a, b, d = a[0], b[0], d[0]
            c = c[0] if c is not None else None
        if c is not None and c.dtype != d.dtype:
            c = c.to(d.dtype)
        return a, b, c, d

    def __call__(self, i: int):
        torch = _torch()
        a, b, c, d = self.prepared[i]
        if self.fp8:
            a, b = self._as_tn(a, b)       # a no-op (no copy) for TN operands
            if a.dim() == 3:
                for j in range(a.shape[0]):
                    d[j].copy_(torch._scaled_mm(a[j], b[j], scale_a=self.one, scale_b=self.one,
                                                out_dtype=self.out_dtype, use_fast_accum=self.fast_accum))
            else:
                d.copy_(torch._scaled_mm(a, b, scale_a=self.one, scale_b=self.one, out_dtype=self.out_dtype,
                                         use_fast_accum=self.fast_accum))
            return
        if self.out_dtype != self.in_dtype:
            r = torch.matmul(a, b)
            if self.alpha != 1.0:
                r.mul_(self.alpha)
            if self.use_c:
                r = r.to(d.dtype).add_(c, alpha=self.beta)
            d.copy_(r)
            return
        if self.use_c:
            if a.dim() == 3:
                torch.baddbmm(c, a, b, beta=self.beta, alpha=self.alpha, out=d)
            else:
                torch.addmm(c, a, b, beta=self.beta, alpha=self.alpha, out=d)
        elif self.alpha != 1.0:
            if a.dim() == 3:
                torch.baddbmm(d, a, b, beta=0.0, alpha=self.alpha, out=d)
            else:
                torch.addmm(d, a, b, beta=0.0, alpha=self.alpha, out=d)
        elif d.is_contiguous():
            torch.matmul(a, b, out=d)
        else:
            d.copy_(torch.matmul(a, b))


def op_bench_problem(task):
    """Time the search-picked kernel, cuBLAS and the CUTLASS builder baseline on one problem.

    All three see the same input sets and the same method (time_calls). Each is verified once
    against the float32 reference before it is timed; a contender that fails verification is
    reported, not timed.
    """
    problem = GemmProblem.from_dict(task["problem"])
    warmup, iters = int(task.get("warmup", 10)), int(task.get("iters", 50))
    alpha, beta = problem.alpha, problem.beta
    tol = tolerance(problem)
    info = _device_info()
    gen = new_generator(int(task.get("seed", 0)) + 7)
    case = Case("bench", problem.m, problem.n, problem.k, problem.batch, alpha, beta,
                  ld_pad=problem_ld_pads(problem))      # stated leading dimensions (lda/ldb/ldc)
    geoms = geometries(problem, case.m, case.n, case.k)
    set_bytes = sum(g.rows * g.cols * case.batch * g.element_bytes for g in geoms.values())
    n_sets = input_set_count(set_bytes, info["l2_bytes"], int(task.get("l2_multiple", 4)))
    sets = [make_buffers(problem, case, gen) for _ in range(n_sets)]
    ref = sets[0].reference(alpha, beta)
    _sync()
    results = {}
    for contender in task["contenders"]:
        name = contender["name"]
        res = {"status": "ok"}
        results[name] = res
        try:
            if contender.get("library") is None and name != "cublas":
                res.update(status="missing", reason=contender.get("reason", "no library"))
                continue
            if name == "cublas" and not _on_gpu():
                from . import _runner_host
                call = _runner_host.MatmulCall(problem, sets, alpha, beta)
                res["notes"] = call.notes
                res.update(_verify_and_time(call, sets, ref, tol, n_sets, warmup, iters))
                res["api"] = call.api
            elif name == "cublas":
                torch = _torch()
                call = CublasCall(problem, sets, alpha, beta)
                res["notes"] = call.notes
                prev = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = call.tf32
                try:
                    fn = call
                    verify_tol = tol if not (call.fp8 and call.use_c) else None
                    res.update(_verify_and_time(fn, sets, ref, verify_tol, n_sets, warmup, iters))
                    _maybe_graph(res, fn, sets, ref, verify_tol, n_sets, iters)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = prev
                res["api"] = "torch._scaled_mm" if call.fp8 else "torch.matmul/addmm/baddbmm"
            else:
                lib = load_library(contender["library"])
                args = [b.launch_args(alpha, beta) for b in sets]
                violations = preflight(problem, args[0])
                if violations:
                    res.update(status="refused", reason="; ".join(f"{v.rule_id}: {v.reason}" for v in violations))
                    continue
                plan = contender.get("launch_plan")   # a stream-K kernel runs the plan its manifest records
                ws_ptr, ws, ws_bytes = plan_workspace(lib, args[0], plan)
                stream_box = [_stream()]
                if plan:
                    from cutegen.launch_plan import LaunchPlan
                    codes = LaunchPlan.from_dict(plan).codes()
                    packed = [a.abi_tuple() + codes for a in args]
                    entry = lib.cutegen_gemm_plan
                    res["launch_plan"] = dict(plan)
                else:
                    packed = [a.abi_tuple() for a in args]
                    entry = lib.cutegen_gemm
                status_box = []

                def fn(i, entry=entry, lib=lib, packed=packed, ws=ws, ws_ptr=ws_ptr, ws_bytes=ws_bytes,
                       stream=stream_box, box=status_box):
                    st = entry(*packed[i], ws_ptr, ws_bytes, stream[0])
                    if st != 0:
                        box.append((st, lib.cutegen_last_error().decode(errors="replace")))

                res.update(_verify_and_time(fn, sets, ref, tol, n_sets, warmup, iters, status_box))
                _maybe_graph(res, fn, sets, ref, tol, n_sets, iters, stream_box, status_box)
        except Exception as e:  # noqa: BLE001 - one contender's failure must not hide the others'
            res.update(status="error", reason=f"{type(e).__name__}: {e}")
            if _context_broken():
                raise
        finally:
            for b in sets:
                b.reset_d()
    del sets, ref
    if _on_gpu():
        _torch().cuda.empty_cache()  # the next problem's input sets start from a clean pool
    return {"problem": problem.to_dict(), "name": problem.name, "flops": problem.flops, "input_sets": n_sets,
            "set_bytes": set_bytes, "warmup": warmup, "iters": iters, "tolerance": tol, "results": results,
            "device": info}


def _maybe_graph(res, fn, sets, ref, tol, n_sets, iters, stream_box=None, status_box=None) -> None:
    """Add the graph-timed figures to a timed contender whose event median is under GRAPH_UNDER_MS,
    and check the D a replay wrote (the graph must compute what the eager call computed)."""
    if res.get("status") != "ok" or res.get("median_ms") is None or res["median_ms"] >= GRAPH_UNDER_MS:
        return
    res.update(time_graph(fn, n_sets, iters, stream_box, reset=sets[0].reset_d))
    if status_box:
        st, msg = status_box[0]
        res.update(graph_status="error", graph_reason=f"status {st} during capture: {msg}")
        res.pop("graph_median_ms", None)
        return
    if res.get("graph_status") == "ok" and tol is not None:
        check = sets[0].check_d(ref, tol)
        res["graph_verify"] = {k: check[k] for k in ("ok", "rel_err", "tol", "nan", "reason")}
        if not check["ok"]:
            res.update(graph_status="failed_verification")
            res.pop("graph_median_ms", None)


def _verify_and_time(fn, sets, ref, tol, n_sets, warmup, iters, status_box=None) -> dict:
    out = {}
    sets[0].reset_d()
    fn(0)
    _sync()
    if status_box:
        st, msg = status_box[0]
        return {"status": "error", "reason": f"status {st}: {msg}"}
    if tol is not None:
        check = sets[0].check_d(ref, tol)
        out["verify"] = {k: check[k] for k in ("ok", "rel_err", "tol", "nan", "reason")}
        if not check["ok"]:
            out.update(status="failed_verification", reason=check["reason"])
            return out
    else:
        out["verify"] = {"ok": None, "reason": "not comparable (baseline computes a different function)"}
    times = time_calls(fn, n_sets, warmup, iters)
    if status_box:
        st, msg = status_box[0]
        return {"status": "error", "reason": f"status {st} while timing: {msg}"}
    out["times_ms"] = [round(t, 5) for t in times]
    out["median_ms"] = median(times)
    out["min_ms"] = min(times)
    return out


def op_op_runner(task):
    """One call of an operation's GPU half (``cutegen.run.ops``): ``fn`` of the module ``runner`` (which may register
    its operation when imported) on the problem read back from its dict, with ``args``."""
    import importlib
    from .core import registry
    from .errors import FieldError
    run = importlib.import_module(task["runner"])
    plugin = getattr(run, "OPERATION", None)     # an operation from outside cutegen.ops brings itself to the child
    if plugin is not None:
        try:
            registry.get(plugin.name)
        except FieldError:
            registry.register(plugin)
    problem = registry.problem_from_dict(task["problem"])
    return getattr(run, task["fn"])(problem, *task.get("args", ()))


def op_op_device(task):
    """The GPU this child runs on, with the results database's device kind (``cutegen.run.gpu_info``)."""
    from .run.gpu_info import device_info
    return device_info()


OPS = {
    "op_runner": op_op_runner,
    "op_device": op_op_device,
    "ping": op_ping,
    "selftest_sleep": op_selftest_sleep,
    "selftest_raise": op_selftest_raise,
    "selftest_exit": op_selftest_exit,
    "init": op_init,
    "describe": op_describe,
    "validate_case": op_validate_case,
    "bench_problem": op_bench_problem,
}


def main(argv=None) -> int:
    """``--once REQUEST.json``: run one request here (the compute-sanitizer driver)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "--once":
        print("usage: python -m cutegen._runner_worker --once REQUEST.json", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        task = json.load(f)
    op_init({})
    value = handle(task)
    print(json.dumps(value, default=json_default))
    _sync()
    ok = value.get("ok") if isinstance(value, dict) else None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
