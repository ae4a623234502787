"""The error vocabulary shared by the state machine, the service and the CLI.

Expected failures are named `Code`s carried in values (`fsm.Rejected`, `RaftschedError`); a broken
invariant is an `AssertionError` and is never caught. `GRPC_STATUS` is the one place that maps a
code to its gRPC status name (DESIGN.md §6).
"""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    """Not the leader, or no leader: retry elsewhere."""
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    """The outcome is unknown: the command may still commit. Retry with the same request id."""


GRPC_STATUS: dict[Code, str] = {code: code.value for code in Code}
"""Our codes are named after gRPC's; kept as a table so a divergence has one place to live."""


class RaftschedError(Exception):
    """An expected failure with a code and a message fit for a user."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"
