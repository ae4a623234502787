"""Incoming Raft connections that have not authenticated yet: how many each remote address and
all of them together may hold, and when each is closed.

pysyncobj keeps an incoming connection until its peer closes it or sends something it cannot
decrypt: one that sends nothing, or half a frame, is held forever (and its own
`connectionTimeout` is checked only when the socket has something to read). `HandshakeGuard`
is the bookkeeping `SyncingTransport` (transport.py) does for them on pysyncobj's tick thread:
pure — no sockets, no clock (the caller passes `now_s`) — so a table test drives it.

A connection is pending from its accept until its peer has proved the cluster secret and said
which member it is (it leaves pysyncobj's `_unknownConnections`), or until it closes. At most
`max_per_address` pending connections per remote address and `max_total` in all: one more is
refused at accept. A pending connection is closed once `timeout_s` has passed, at the second
sweep past its deadline: pysyncobj polls its sockets between two sweeps, so a handshake that
arrived in time, but waited in the socket while the tick thread was busy, is read first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

SWEEP_PERIOD_S = 0.25
"""Pending connections are checked against their deadline at most this often."""

REPORT_PERIOD_S = 10.0
"""Closed connections are logged as one warning with counts at most this often."""

MAX_REPORTED_ADDRESSES = 8
"""Remote addresses one warning names; the rest are only counted."""

Key = TypeVar("Key", bound=Hashable)


@dataclass(slots=True)
class ClosedCounts:
    over_cap: int = 0
    """Refused at accept: their address, or all addresses together, had the most pending."""
    handshake_timeout: int = 0
    """Closed because they had not authenticated within the timeout."""


@dataclass(frozen=True, slots=True)
class ClosedConnections:
    """Raft connections a replica closed on a peer that broke a bound, since it started
    (`RaftNode.closed_connections`, exported by metrics.py)."""

    frame_too_large: int
    """A frame declared a negative length or one over its bound (transport.py)."""
    over_cap: int
    """Refused at accept: too many unauthenticated connections from its address, or in all."""
    handshake_timeout: int
    """Not authenticated within the handshake timeout."""


@dataclass(frozen=True, slots=True)
class Report:
    """What one rate-limited warning says: closed connections since the last one."""

    over_cap: int
    handshake_timeout: int
    pending: int
    addresses: tuple[str, ...]
    """The remote addresses of those connections, at most MAX_REPORTED_ADDRESSES, sorted."""
    unnamed: int
    """Of those connections, how many came from addresses not named (past the first ones)."""


@dataclass(slots=True)
class _Pending:
    address: str
    deadline_s: float
    overdue: bool = False


class HandshakeGuard(Generic[Key]):
    """The pending connections of one Raft port, and what was closed (see the module)."""

    def __init__(self, timeout_s: float, max_per_address: int, max_total: int) -> None:
        assert timeout_s > 0 and 0 < max_per_address <= max_total
        self.timeout_s = timeout_s
        self.max_per_address = max_per_address
        self.max_total = max_total
        self.totals = ClosedCounts()
        """Since the start: what the replica's status and metrics show."""
        self._pending: dict[Key, _Pending] = {}
        self._by_address: Counter[str] = Counter()
        self._next_sweep_s = 0.0
        self._unreported = ClosedCounts()
        self._unreported_addresses: set[str] = set()
        self._unnamed = 0
        self._reported_at_s: float | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def admit(self, key: Key, address: str, now_s: float) -> bool:
        """A connection was accepted from `address`: True if it may wait for its handshake,
        False if a cap is reached (the caller closes it; it is counted)."""
        assert key not in self._pending
        if (self._by_address[address] >= self.max_per_address
                or len(self._pending) >= self.max_total):
            self.totals.over_cap += 1
            self._unreported.over_cap += 1
            self._note(address)
            return False
        self._pending[key] = _Pending(address, now_s + self.timeout_s)
        self._by_address[address] += 1
        return True

    def settle(self, key: Key) -> None:
        """The connection authenticated, or it closed: it is no longer pending (no-op for a
        connection that was not)."""
        pending = self._pending.pop(key, None)
        if pending is not None:
            self._forget_address(pending.address)

    def expire(self, now_s: float) -> list[Key]:
        """The connections to close now for want of a handshake (no longer pending, counted).
        Looks at most every SWEEP_PERIOD_S; O(1) when nothing is pending."""
        if not self._pending or now_s < self._next_sweep_s:
            return []
        self._next_sweep_s = now_s + SWEEP_PERIOD_S
        expired = []
        for key, pending in self._pending.items():
            if now_s < pending.deadline_s:
                continue
            if pending.overdue:
                expired.append(key)
            pending.overdue = True
        for key in expired:
            address = self._pending.pop(key).address
            self._forget_address(address)
            self._note(address)
        self.totals.handshake_timeout += len(expired)
        self._unreported.handshake_timeout += len(expired)
        return expired

    def report(self, now_s: float) -> Report | None:
        """The closed connections not yet reported, at most once per REPORT_PERIOD_S (None
        when there are none, or it is too soon)."""
        unreported = self._unreported
        if not (unreported.over_cap or unreported.handshake_timeout):
            return None
        if self._reported_at_s is not None and now_s - self._reported_at_s < REPORT_PERIOD_S:
            return None
        report = Report(unreported.over_cap, unreported.handshake_timeout, len(self._pending),
                        tuple(sorted(self._unreported_addresses)), self._unnamed)
        self._reported_at_s = now_s
        self._unreported = ClosedCounts()
        self._unreported_addresses = set()
        self._unnamed = 0
        return report

    def _forget_address(self, address: str) -> None:
        self._by_address[address] -= 1
        if self._by_address[address] <= 0:
            del self._by_address[address]

    def _note(self, address: str) -> None:
        if address in self._unreported_addresses:
            return
        if len(self._unreported_addresses) < MAX_REPORTED_ADDRESSES:
            self._unreported_addresses.add(address)
        else:
            self._unnamed += 1
