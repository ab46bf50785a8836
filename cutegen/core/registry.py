"""The operation registry: an operation's name -> its parts (``cutegen.core.op.Operation``).

Operations register themselves (``register``); the known ones are imported on first use through
``cutegen.ops`` (by name, lazily), so this module imports no operation. Every stage that takes any
operation goes through the functions here: ``operation_of(problem)``, ``problem_from_dict``,
``problem_key``, ``rule_sets``, ``render``, ``validation_cases``, ...
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Any, Iterator

from ..errors import CutegenError, FieldError
from .op import Operation, canonical

# Stored problems from before operations existed carry no "op": they are GEMMs.
DEFAULT_OP = "gemm"

_OPS: dict[str, Operation] = {}


def register(op: Operation, *, replace: bool = False) -> Operation:
    """Add ``op``; a second operation of the same name is an error unless ``replace``."""
    if not isinstance(op, Operation):
        raise TypeError(f"expected an Operation, got {type(op).__name__}")
    for what, cls, needs in (("problem", op.problem_type, ("to_dict", "from_dict", "name")),
                             ("config", op.config_type, ("to_dict", "from_dict"))):
        missing = [a for a in needs if not hasattr(cls, a)]
        if missing:
            raise TypeError(f"operation {op.name!r}: {what} type {cls.__name__} lacks {', '.join(missing)} "
                            f"(cutegen.core.op.{what.capitalize()})")
    old = _OPS.get(op.name)
    if old is not None and old is not op and not replace:
        raise ValueError(f"operation {op.name!r} is already registered")
    for other in _OPS.values():
        if other.name != op.name and other.problem_type is op.problem_type:
            raise ValueError(f"operation {op.name!r}: problem type {op.problem_type.__name__} "
                             f"already belongs to {other.name!r}")
    _OPS[op.name] = op
    return op


def unregister(name: str) -> None:
    _OPS.pop(name, None)


@contextmanager
def registered(op: Operation) -> Iterator[Operation]:
    """``op`` registered for the duration of a ``with`` block (tests, plug-ins tried out)."""
    register(op)
    try:
        yield op
    finally:
        unregister(op.name)


def _known() -> Any:
    return importlib.import_module("cutegen.ops")   # by name: the core does not import operations


def names() -> list[str]:
    """Every operation: the known ones (loaded) and any registered since, sorted."""
    _known().load_all()
    return sorted(_OPS)


def operations() -> list[Operation]:
    return [_OPS[n] for n in names()]


def get(name: str) -> Operation:
    """The operation called ``name``; a one-line FieldError for an unknown one."""
    op = _OPS.get(name)
    if op is None:
        _known().load(name)
        op = _OPS.get(name)
    if op is None:
        raise FieldError("op", f"unknown operation {name!r}; known: {', '.join(names()) or 'none'}")
    return op


def operation_of(problem: Any) -> Operation:
    """The operation whose problem type ``problem`` is."""
    for op in list(_OPS.values()):
        if isinstance(problem, op.problem_type):
            return op
    _known().load_all()
    for op in _OPS.values():
        if isinstance(problem, op.problem_type):
            return op
    raise FieldError("problem", f"{type(problem).__name__} is the problem of no registered operation")


def part(op: Operation, attr: str) -> Any:
    """A part of ``op``; a one-line CutegenError where the operation lacks that stage."""
    value = getattr(op, attr)
    if value is None or value == ():
        raise CutegenError(f"operation {op.name!r} has no {attr.replace('_', ' ')} (stage not available for it)")
    return value


# --- problems and configs as stored -------------------------------------------------------------------
def op_name_of(data: Any) -> str:
    return data.get("op", DEFAULT_OP) if isinstance(data, dict) else DEFAULT_OP


def problem_from_dict(data: Any, where: str = "problem") -> Any:
    """A stored problem (manifest, database, JSON line) as its operation's problem type."""
    if not isinstance(data, dict):
        raise FieldError(where, f"expected an object, got {type(data).__name__}")
    name = op_name_of(data)
    if not isinstance(name, str):
        raise FieldError(f"{where}.op", f"expected an operation name, got {name!r}")
    try:
        op = get(name)
    except FieldError as e:
        raise FieldError(f"{where}.op", e.message) from None
    body = dict(data)
    if name == DEFAULT_OP:
        body.pop("op", None)          # the default op's dicts never carried the key
    reader = op.problem_from_dict or op.problem_type.from_dict
    return reader(body, where)


def config_from_dict(op: Operation | str, data: Any, where: str = "config") -> Any:
    op = get(op) if isinstance(op, str) else op
    reader = op.config_from_dict or op.config_type.from_dict
    return reader(data, where)


def validate(problem: Any) -> None:
    """Raise the problem's one-line FieldError if any field is out of its domain (round trip through
    its dict: construction is where every problem type checks its fields)."""
    op = operation_of(problem)
    reader = op.problem_from_dict or op.problem_type.from_dict
    body = problem.to_dict()
    if op.name == DEFAULT_OP:
        body.pop("op", None)
    reader(body, "problem")


# --- results database ---------------------------------------------------------------------------------
def problem_key(problem: Any) -> str:
    """Exact identity of a problem: the key its measurements are filed under."""
    op = operation_of(problem)
    return op.db_key(problem) if op.db_key is not None else canonical(problem.to_dict())


def db_columns(problem: Any) -> dict[str, Any]:
    """The searchable columns of the database's problems table: kernel_class, m, n, k, batch.

    The table predates operations and names GEMM's extents; an operation maps its own sizes onto them
    (its ``db_columns``), or leaves the default: its name as the kernel class and 1 everywhere.
    """
    op = operation_of(problem)
    if op.db_columns is not None:
        return dict(op.db_columns(problem))
    return {"kernel_class": f"{op.name}:{getattr(problem, 'name', '')}", "m": 1, "n": 1, "k": 1, "batch": 1}


def features(problem: Any) -> dict[str, float]:
    return dict(part(operation_of(problem), "features")(problem))


# --- legality -----------------------------------------------------------------------------------------
def rule_sets(op_name: str | None = None) -> list[Any]:
    """Every RuleSet of one operation, or of all (a set shared by two operations is listed once)."""
    ops = [get(op_name)] if op_name else operations()
    out: list[Any] = []
    for op in ops:
        for rs in (op.rule_sets() if op.rule_sets else ()):
            if not any(rs is seen for seen in out):
                out.append(rs)
    return out


def all_rules(op_name: str | None = None) -> list[Any]:
    """Every Rule, in rule-set order; two different rules with one ID is an error (IDs are global)."""
    seen: dict[str, Any] = {}
    out = []
    for rs in rule_sets(op_name):
        for r in rs:
            other = seen.get(r.id)
            if other is not None and other is not r:
                raise ValueError(f"rule id {r.id} is declared twice ({other.contract} and {r.contract})")
            if other is None:
                seen[r.id] = r
                out.append(r)
    return out


def config_rule_ids(op_name: str) -> list[str]:
    """The rules judged on every candidate of the op's search, in a stable order (the legality analysis
    indexes its bit set by it)."""
    op = get(op_name)
    sets = op.config_rule_sets() if op.config_rule_sets else (op.rule_sets() if op.rule_sets else ())
    return [r.id for rs in sets for r in rs]


def check(problem: Any, config: Any) -> list:
    """The rules ``config`` breaks for ``problem`` (empty: legal)."""
    return list(part(operation_of(problem), "check")(problem, config))


# --- render, run, bench -------------------------------------------------------------------------------
def render(problem: Any, config: Any, backend: str | None = None, **options: Any) -> Any:
    """The operation's rendering of (problem, config): an object with ``files`` and ``write(directory)``."""
    op = operation_of(problem)
    fn = part(op, "render")
    if backend is None:
        backend = op.backends[0] if op.backends else None
    elif op.backends and backend not in op.backends:
        raise FieldError("backend", f"{backend!r} is not a backend of {op.name} ({', '.join(op.backends)})")
    return fn(problem, config, backend, **options)


def backend_refusals(problem: Any, config: Any, backend: str) -> list[str]:
    """What ``backend``'s renderer refuses of a legal config, each "RULE-ID: reason" (none: renders)."""
    op = operation_of(problem)
    return list(op.backend_refusals(problem, config, backend)) if op.backend_refusals else []


def validation_cases(problem: Any, config: Any, shapes: Any = (), **options: Any) -> list:
    return list(part(operation_of(problem), "validation_cases")(problem, config, shapes, **options))


def refusal_probes(problem: Any, config: Any) -> list:
    op = operation_of(problem)
    return list(op.refusal_probes(problem, config)) if op.refusal_probes else []


def tolerance(problem: Any) -> float:
    return float(part(operation_of(problem), "tolerance")(problem))


def peers(problem: Any) -> tuple[str, ...]:
    return operation_of(problem).peers
