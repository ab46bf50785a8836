"""The operation-neutral core: what every operation plugs into.

- ``op``: the problem and config protocols and the ``Operation`` record of an operation's parts;
- ``registry``: operation name -> parts; the functions every operation-neutral stage calls;
- ``search``: search any operation (its own search, or every candidate of its space);
- ``device``: the device kinds measurements are filed under.

The core imports no operation: operations live in ``cutegen/ops/<name>/`` and register themselves.
How to add one: docs/concepts/operations.md.
"""
from __future__ import annotations

from .op import Config, Operation, Problem, Ranked, canonical, config_hash, config_json

__all__ = ["Operation", "Problem", "Config", "Ranked", "canonical", "config_hash", "config_json"]
