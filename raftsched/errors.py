"""The error vocabulary shared by the state machine, the replica, the client, the agent and the CLI.

Expected failures are named `Code`s carried in values (`outcome.Rejected`, `RaftschedError`); a
broken invariant is an `AssertionError` and is never caught. Our codes are named after gRPC's status
codes; `raftsched.rpc` is the one place that maps between the two (docs/architecture.md §6).
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
    """Not the leader, no leader, or no connection: nothing was done; retry elsewhere."""
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    """The outcome is unknown: the command may still commit. Retry with the same request id."""
    UNAUTHENTICATED = "UNAUTHENTICATED"
    """No client certificate (the replica serves mutual TLS only)."""
    PERMISSION_DENIED = "PERMISSION_DENIED"
    """The caller's certificate does not allow this call (`raftsched.replica.identity`)."""
    INTERNAL = "INTERNAL"
    """A server answered with a status we do not expect (a bug or a version mismatch)."""


class RaftschedError(Exception):
    """An expected failure with a code and a message fit for a user. `leader_hint` is the
    leader's gRPC address when a replica that is not the leader knew it."""

    def __init__(self, code: Code, message: str, *, leader_hint: str | None = None,
                 retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader_hint = leader_hint
        self.retry_after_ms = retry_after_ms
        """For RESOURCE_EXHAUSTED past a limit that drains by itself: when to try again (0:
        no hint). Travels as a google.rpc.RetryInfo detail."""

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"


class CouldNotConnect(RaftschedError):
    """No connection to `address` could be made: the request was never sent."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(Code.UNAVAILABLE, f"could not connect to {address} ({detail}); nothing "
                                           "was sent")
        self.address = address
        self.detail = detail
