"""Errors raised while reading user input (Kubernetes objects, traces, configs)."""

from __future__ import annotations


class InvalidObjectError(ValueError):
    """An input object is malformed.

    The message always names the object (``kind namespace/name``) and the field path, so a
    person can find and fix it; ``obj`` and ``field`` are kept for programmatic use.
    """

    def __init__(self, obj: str, field: str, problem: str) -> None:
        self.obj = obj
        self.field = field
        self.problem = problem
        super().__init__(f"{obj}: field {field}: {problem}")


class RefusedObjectError(InvalidObjectError):
    """An object the API server itself refuses to store: read from a file (a simulated
    workload, a what-if), it could never exist in a cluster."""
