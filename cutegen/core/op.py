"""What an operation is made of: the problem and config protocols and the ``Operation`` record.

The core knows no operation. An operation (GEMM, attention, grouped GEMM, ...) is one package under
``cutegen/ops/`` that builds an ``Operation`` from its own modules and registers it
(``cutegen.core.registry.register``); every stage that takes "any operation" asks the registry for
the part it needs. A part left ``None`` is a stage the operation does not have yet: the stage says so
in one line (``registry.part``) instead of assuming GEMM.

This module imports nothing from cutegen but ``errors``: the GPU machine loads it without egglog.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable


@runtime_checkable
class Problem(Protocol):
    """A problem of some operation: what to compute, with its sizes.

    Construction validates every field and raises ``cutegen.errors.FieldError`` naming the field (one
    line, no traceback); ``from_dict(data, where)`` prefixes the field with ``where``. ``to_dict`` is
    canonical JSON material: the same problem gives the same dict. A problem of an operation other than
    the default (``registry.DEFAULT_OP``) carries ``"op": <name>`` in its dict, so that a stored problem
    (manifest, results database) says which operation reads it back.
    """

    @property
    def name(self) -> str: ...            # stable, file-system-safe; the folder of its generated kernel

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: Any, where: str = "problem") -> "Problem": ...


@runtime_checkable
class Config(Protocol):
    """A kernel configuration of some operation: frozen, JSON round trip, a stable hash."""

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> "Config": ...


def canonical(obj: Any) -> str:
    """The one JSON spelling of ``obj``: sorted keys, no spaces (hashes and database keys)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def config_json(config: Config) -> str:
    to_json = getattr(config, "to_json", None)
    return to_json() if callable(to_json) else canonical(config.to_dict())


def config_hash(config: Config) -> str:
    """16 hex digits of the config's canonical JSON (``KernelConfig.hash`` is the same digest)."""
    h = getattr(config, "hash", None)
    if isinstance(h, str):
        return h
    return hashlib.sha256(config_json(config).encode()).hexdigest()[:16]


class CanonicalConfig:
    """``to_json`` and ``hash`` for a config whose ``to_dict`` is its canonical material: the same spelling and
    digest as ``KernelConfig`` (16 hex digits of the SHA-256 of the canonical JSON)."""

    def to_json(self) -> str:
        return canonical(self.to_dict())   # type: ignore[attr-defined]

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]


def op_fields(data: Any, where: str, op: str) -> dict:
    """The fields of a stored problem of operation ``op``: an object, its ``"op"`` (if any) naming ``op``;
    returned as a new dict without ``"op"``. One-line ``FieldError``s otherwise."""
    from ..errors import FieldError
    if not isinstance(data, dict):
        raise FieldError(where, f"expected an object, got {type(data).__name__}")
    data = dict(data)
    named = data.pop("op", op)
    if named != op:
        raise FieldError(f"{where}.op", f"{named!r} is not {op!r}")
    return data


@dataclass
class Ranked:
    """One searched configuration: its predicted time (microseconds) and the terms of that cost."""
    config: Any
    cost: float
    breakdown: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"config": self.config.to_dict(), "cost": round(self.cost, 4), "breakdown": self.breakdown}


@dataclass(frozen=True)
class Operation:
    """The parts of one operation, as callables over its own problem and config types.

    Required: ``name``, ``problem_type``, ``config_type``. Every other part is an extension point; ``None``
    means the operation does not have that stage (yet). See docs/concepts/operations.md.
    """
    name: str
    problem_type: type
    config_type: type
    summary: str = ""

    # --- problem ---------------------------------------------------------------------------------------
    problem_from_dict: Callable[[Any, str], Any] | None = None   # default: problem_type.from_dict
    config_from_dict: Callable[[Any, str], Any] | None = None    # default: config_type.from_dict
    dtypes: Callable[[Any], dict[str, str]] | None = None        # operand -> element type
    extents: Callable[[Any], dict[str, int]] | None = None       # size name -> extent
    flops: Callable[[Any], int] | None = None                    # useful FLOPs (TFLOP/s figures)

    # --- results database and learned model ------------------------------------------------------------
    db_key: Callable[[Any], str] | None = None                   # default: canonical(problem dict)
    db_columns: Callable[[Any], dict[str, Any]] | None = None    # kernel_class, m, n, k, batch (see registry)
    features: Callable[[Any], dict[str, float]] | None = None    # problem features for a learned model

    # --- legality and search ---------------------------------------------------------------------------
    rule_sets: Callable[[], Sequence[Any]] | None = None         # every RuleSet the op is judged by
    config_rule_sets: Callable[[], Sequence[Any]] | None = None  # those judged on each candidate (indexed)
    check: Callable[[Any, Any], list] | None = None              # (problem, config) -> broken rules (Violation)
    space: Callable[[Any], Iterable[Any]] | None = None          # candidate configs of a problem
    cost: Callable[[Any, Any], float] | None = None              # predicted microseconds
    search: Callable[..., Sequence[Any]] | None = None           # (problem, top_k, **options) -> ranked

    # --- render, build, run ----------------------------------------------------------------------------
    backends: tuple[str, ...] = ()                               # first: the default
    render: Callable[..., Any] | None = None                     # (problem, config, backend, **kw) -> files
    backend_refusals: Callable[[Any, Any, str], list] | None = None  # what a renderer refuses: "RULE: why"
    validation_cases: Callable[..., list] | None = None          # (problem, config, shapes, **kw) -> cases
    refusal_probes: Callable[[Any, Any], list] | None = None     # calls the kernel must refuse
    tolerance: Callable[[Any], float] | None = None              # relative error allowed vs the reference
    reference: str = ""                                          # what results are checked against
    peers: tuple[str, ...] = ()                                  # bench contenders the worker times in-process
    # The operation's GPU half, a module name imported where it runs (``cutegen.run.ops``: ``cutegen validate --op``
    # and ``cutegen bench --op``): ``validate(problem, kernel_dir)``, ``bench(problem, kernels, options)``,
    # ``peer_kernels(problem)``, ``RUN_FIELDS``. Empty: those commands refuse the operation (GEMM has its own worker).
    runner: str = ""
    packs: bool = False                                          # `cutegen pack` supports this op

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").isalnum() or self.name != self.name.lower():
            raise ValueError(f"operation name {self.name!r}: lower-case letters, digits and '_' only")
