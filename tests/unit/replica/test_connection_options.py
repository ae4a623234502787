"""The gRPC server's connection bounds (raftsched/replica/main.py `_connection_options`): the
handshake timeout in milliseconds, and the connection cap kept to half the open-file limit.
That grpc honours both: tests/integration/test_connection_limits.py."""

from __future__ import annotations

import resource

import pytest

from raftsched.replica import main


def options(monkeypatch: pytest.MonkeyPatch, soft_limit: int, timeout_s: float,
            max_connections: int) -> dict[str, int]:
    monkeypatch.setattr(main.resource, "getrlimit", lambda _which: (soft_limit, soft_limit))
    return dict(main._connection_options(timeout_s, max_connections))


@pytest.mark.parametrize(("soft_limit", "requested", "allowed"), [
    (65_536, 4_096, 4_096),
    (1_024, 4_096, 512),  # a shell's default limit: half the descriptors stay the replica's
    (1, 4_096, 1),
    (resource.RLIM_INFINITY, 100_000, 100_000),
])
def test_the_connection_cap_is_at_most_half_the_open_file_limit(
        monkeypatch: pytest.MonkeyPatch, soft_limit: int, requested: int, allowed: int) -> None:
    assert options(monkeypatch, soft_limit, 10.0, requested)[
        "grpc.max_allowed_incoming_connections"] == allowed


@pytest.mark.parametrize(("timeout_s", "timeout_ms"), [(10.0, 10_000), (0.0001, 1), (2.5, 2_500)])
def test_the_handshake_timeout_is_given_to_grpc_in_milliseconds(
        monkeypatch: pytest.MonkeyPatch, timeout_s: float, timeout_ms: int) -> None:
    assert options(monkeypatch, 65_536, timeout_s, 10)[
        "grpc.server_handshake_timeout_ms"] == timeout_ms
