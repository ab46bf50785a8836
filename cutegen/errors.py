"""Errors a user can act on: each names the field or the rule it is about."""
from __future__ import annotations


class CutegenError(Exception):
    """Base of every error cutegen raises on purpose."""


class FieldError(CutegenError, ValueError):
    """A value in a problem or configuration is malformed or out of range."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class IllegalConfig(CutegenError):
    """A configuration breaks one or more legality rules."""

    def __init__(self, violations):
        self.violations = list(violations)
        lines = "; ".join(f"{v.rule_id}: {v.reason}" for v in self.violations)
        super().__init__(f"illegal configuration: {lines}")
