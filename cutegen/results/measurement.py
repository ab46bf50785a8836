"""Measurement: one timed kernel (or cuBLAS call) for one problem on one device, as recorded."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..config import KernelConfig
from ..core import registry
from ..errors import FieldError
from ..problem import GemmProblem


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def problem_key(problem: GemmProblem) -> str:
    """Exact identity of a problem (sizes, scalars and all): the key measurements are looked up by.

    The problem's operation makes it (``cutegen.core.registry.problem_key``; GEMM: canonical JSON of
    ``to_dict()``, the key every stored GEMM record has)."""
    return registry.problem_key(problem)


@dataclass(frozen=True)
class Measurement:
    problem: GemmProblem
    config: KernelConfig
    kernel_hash: str = ""
    backend: str = "cutlass"          # "cutlass", "cutlass_builder", "dsl", "cublas", ...
    device_name: str = ""
    device_kind: str = ""
    sm_count: int | None = None
    sm_clock_mhz: float | None = None
    driver: str | None = None
    cuda: str | None = None
    cutlass: str | None = None
    cutegen: str | None = None
    timing_method: str = ""
    times_us: tuple[float, ...] = field(default_factory=tuple)
    median_us: float = 0.0
    validated: bool = False
    max_rel_error: float | None = None
    cublas_us: float | None = None
    source: str = ""
    measured_at: str = ""             # ISO date (or date-time) of the measurement, not of the import
    # The launch plan a stream-K kernel ran under (cutegen.launch_plan.LaunchPlan.to_dict()); None: not recorded (a
    # kernel with no plan, or a record from before plans were kept). The plan is run-time, not part of the
    # configuration or the hash, so without it a stream-K record cannot say which decomposition it timed.
    launch_plan: dict | None = None
    # The in-process peers timed beside the kernel in the same run, peer name -> median microseconds (an operation's
    # `peers`: SDPA cuDNN and flash for attention, torch._grouped_mm, a matmul loop and padded bmm for grouped GEMM).
    # None: not recorded (every GEMM record keeps its cuBLAS figure in cublas_us).
    peers_us: dict | None = None

    def __post_init__(self):
        # any registered operation's problem and config (GEMM: GemmProblem and KernelConfig)
        try:
            op = registry.operation_of(self.problem)
        except FieldError:
            raise FieldError("problem", f"expected the problem of an operation (e.g. a GemmProblem), "
                                        f"got {type(self.problem).__name__}") from None
        if not isinstance(self.config, op.config_type):
            raise FieldError("config", f"expected a {op.config_type.__name__} ({op.name}), got {type(self.config).__name__}")
        object.__setattr__(self, "times_us", tuple(float(t) for t in self.times_us))
        if not (isinstance(self.median_us, (int, float)) and self.median_us > 0):
            raise FieldError("median_us", f"expected a positive time in microseconds, got {self.median_us!r}")
        object.__setattr__(self, "median_us", float(self.median_us))
        if not self.device_kind:
            raise FieldError("device_kind", "missing (use cutegen.results.device_kind(name, sm_count))")
        object.__setattr__(self, "validated", bool(self.validated))
        if self.launch_plan is not None:
            from ..launch_plan import LaunchPlan
            # canonical form: the three fields, checked (a bad plan is named, not stored)
            object.__setattr__(self, "launch_plan", LaunchPlan.from_dict(self.launch_plan, "launch_plan").to_dict())
        if self.peers_us is not None:
            if not isinstance(self.peers_us, dict) or not all(
                    isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                    for k, v in self.peers_us.items()):
                raise FieldError("peers_us", f"expected {{peer name: positive microseconds}}, got {self.peers_us!r}")
            object.__setattr__(self, "peers_us", {k: float(v) for k, v in sorted(self.peers_us.items())})

    @property
    def op(self) -> str:
        """The name of the operation whose problem this is ("gemm", "attention", "grouped_gemm", ...)."""
        return registry.operation_of(self.problem).name

    @property
    def plan(self):
        """The LaunchPlan the record ran under, or None (see ``launch_plan``)."""
        if self.launch_plan is None:
            return None
        from ..launch_plan import LaunchPlan
        return LaunchPlan.from_dict(self.launch_plan)

    @property
    def is_benchmark(self) -> bool:
        """A timing fit to compare kernels by (not the single wall-clock call of a validation run)."""
        return not self.timing_method.startswith("validate:")

    @property
    def record_key(self) -> str:
        """Identity of the record: the same measurement imported twice is stored once.

        Everything that tells two runs apart: what ran, where, when, how it was timed, the sample, and the
        launch plan (only when recorded: a plan-less record keeps the key it had before plans were kept).
        """
        return self._key(with_plan=True)

    @property
    def planless_key(self) -> str:
        """The key this record had before launch plans were kept: what a copy imported then was filed under."""
        return self._key(with_plan=False)

    def _key(self, with_plan: bool) -> str:
        ident = canonical({"p": self.problem.to_dict(), "c": self.config.to_dict(), "b": self.backend,
                           "h": self.kernel_hash, "d": self.device_name, "k": self.device_kind,
                           "t": self.timing_method, "s": self.source, "at": self.measured_at,
                           "med": round(self.median_us, 6), "times": [round(t, 6) for t in self.times_us],
                           **({"plan": self.launch_plan} if with_plan and self.launch_plan is not None else {}),
                           # only when recorded: every record from before peers were kept keeps its key
                           **({"peers": self.peers_us} if self.peers_us is not None else {})})
        return hashlib.sha256(ident.encode()).hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["problem"] = self.problem.to_dict()
        out["config"] = self.config.to_dict()
        out["times_us"] = list(self.times_us)
        if self.launch_plan is None:      # exports of plan-less records stay as they were
            del out["launch_plan"]
        if self.peers_us is None:
            del out["peers_us"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "measurement") -> "Measurement":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise FieldError(f"{where}.{sorted(unknown)[0]}", "unknown field")
        d = dict(data)
        d["problem"] = registry.problem_from_dict(d.get("problem"), f"{where}.problem")
        d["config"] = registry.config_from_dict(registry.operation_of(d["problem"]), d.get("config"), f"{where}.config")
        d["times_us"] = tuple(d.get("times_us") or ())
        return cls(**d)
