"""manifest.json: what a rendered kernel is, why it is legal, and what produced it.

The manifest sits beside ``kernel.cu`` and is itself rendered output, so it obeys the same
contract: the same (problem, config, legality report, cost, toolchain) gives the same bytes.
That rules out timestamps, host names and absolute paths; keys are sorted.

It is also the kernel's portable description: ``load`` gives back the problem, the config and
the backend, which is all ``cutegen.render`` needs to re-render the kernel on a machine without
the search (the GPU machine has no egglog).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._fields import loads_json
from .config import KernelConfig
from .errors import CutegenError, FieldError
from .problem import GemmProblem
from .toolchain import (  # noqa: F401  (re-exported: callers read versions through manifest)
    _cutlass_version_at, _nvcc_version_text, cutlass_version, nvcc_full_version, nvcc_version,
)

SCHEMA = 1


def kernel_hash(problem: GemmProblem, config: KernelConfig, backend: str) -> str:
    """Names a kernel by what it computes and how: 16 hex digits of a canonical digest.

    Sizes are run-time arguments, so the digest covers ``problem.kernel_key()`` only: the same
    configuration for two problem sizes is one kernel, compiled and cached once.
    """
    ident = json.dumps({"backend": backend, "config": config.to_dict(), "problem": problem.kernel_key()},
                       sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def to_jsonable(value: Any) -> Any:
    """Cost estimates and legality reports come from other modules; store them as plain JSON."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return round(value, 9)  # stable text for values computed by float arithmetic
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return str(value)


def build_manifest(*, problem: GemmProblem, config: KernelConfig, backend: str, source: str,
                   legality: Any, cost: Any, toolchain: dict[str, Any]) -> dict[str, Any]:
    from . import __version__
    return {
        "schema": SCHEMA,
        "backend": backend,
        "problem": problem.to_dict(),
        "problem_name": problem.name,
        "config": config.to_dict(),
        "config_name": config.short_name(),
        "kernel_hash": kernel_hash(problem, config, backend),
        "hash": kernel_hash(problem, config, backend),  # the name cutegen_describe and the runner use
        "legality": to_jsonable(legality),
        "cost": to_jsonable(cost),
        "cutegen": __version__,
        "toolchain": to_jsonable(toolchain),
        "files": {"kernel.cu": {"sha256": hashlib.sha256(source.encode()).hexdigest(),
                                "bytes": len(source.encode())}},
    }


def dumps(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True, indent=2) + "\n"


@dataclass(frozen=True)
class Manifest:
    problem: GemmProblem
    config: KernelConfig
    backend: str
    data: dict[str, Any]

    @property
    def kernel_hash(self) -> str:
        return self.data["kernel_hash"]

    @property
    def legal(self) -> bool | None:
        leg = self.data.get("legality")
        return leg.get("legal") if isinstance(leg, dict) else None


def load(path: str | os.PathLike) -> Manifest:
    """Read a manifest.json (or the manifest.json inside a kernel directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.json"
    try:
        data = loads_json(path.read_text())
    except FileNotFoundError:
        raise CutegenError(f"{path}: no manifest.json (render the kernel first)") from None
    except json.JSONDecodeError as e:
        raise FieldError(str(path), f"not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise FieldError(str(path), "expected a JSON object")
    for key in ("problem", "config", "backend"):
        if key not in data:
            raise FieldError(f"{path}.{key}", "missing")
    from .core import registry       # the problem's "op" (none: GEMM) says which types read it back
    problem = registry.problem_from_dict(data["problem"], f"{path.name}.problem")
    config = registry.config_from_dict(registry.operation_of(problem), data["config"], f"{path.name}.config")
    return Manifest(problem, config, str(data["backend"]), data)
