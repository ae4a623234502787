"""The one port the replica's parts (gateway, service, metrics, leader, identity, main) use to
reach Raft. `raftsched.replica.raft.node.RaftNode` implements it; mypy checks that where main
hands the node to the parts. Nothing here imports the rest of `raftsched.replica` (the layers
contract in pyproject.toml holds the adapter below its users)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, TypeVar

from raftsched.replica.raft.handshakes import ClosedConnections
from raftsched.state.model import State
from raftsched.state.outcome import Outcome

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RaftStatus:
    """One replica's view of Raft, as `RaftPort.status()` answers it. `as_dict()` is the JSON
    shape the status had as a dict (`address` is its "self")."""

    address: str
    leader: str | None
    term: int
    commit_index: int
    last_applied: int
    is_leader: bool
    members: list[str]
    state_digest: str
    """"" unless asked for (`include_digest`): it costs O(state) under the apply lock."""
    state_index: int
    log_first_index: int
    log_last_index: int
    durability: Mapping[str, Any]
    """fsync, journal, journal_claimed, durable_index, unsynced_applies and the journal's stats."""
    replication: Mapping[str, Any]
    unauthenticated_connections: Mapping[str, int]
    apply_backlog: int
    dumps_written: int
    dumps_loaded: int
    library_alarms: Mapping[str, Any]
    membership_change: str | None
    fatal: str | None

    def as_dict(self) -> dict[str, Any]:
        """The status as the JSON object it always was (key order kept)."""
        return {
            "self": self.address, "leader": self.leader, "term": self.term,
            "commit_index": self.commit_index, "last_applied": self.last_applied,
            "is_leader": self.is_leader, "members": list(self.members),
            "state_digest": self.state_digest, "state_index": self.state_index,
            "log_first_index": self.log_first_index, "log_last_index": self.log_last_index,
            "durability": dict(self.durability), "replication": dict(self.replication),
            "unauthenticated_connections": dict(self.unauthenticated_connections),
            "apply_backlog": self.apply_backlog, "dumps_written": self.dumps_written,
            "dumps_loaded": self.dumps_loaded, "library_alarms": dict(self.library_alarms),
            "membership_change": self.membership_change, "fatal": self.fatal,
        }


class Pending(Protocol):
    """An entry appended to the log, not yet waited for (`node.Proposal`)."""

    def outcome(self, timeout_s: float) -> Outcome: ...


class RaftPort(Protocol):
    """What the replica's parts need of the Raft node."""

    def propose(self, data: bytes, timeout_s: float) -> Outcome: ...
    def submit(self, data: bytes) -> Pending: ...
    def read(self, fn: Callable[[State], T]) -> T: ...
    def read_unlocked(self, fn: Callable[[State], T]) -> T: ...
    def read_indexed(self, fn: Callable[[State], T]) -> tuple[T, int]: ...
    def is_leader(self) -> bool: ...
    def is_leader_confirmed(self, timeout_s: float) -> bool: ...
    def term(self) -> int: ...
    def leader_address(self) -> str | None: ...
    def members(self) -> list[str]: ...
    def state_time_ms(self) -> int: ...
    def closed_connections(self) -> ClosedConnections: ...
    def status(self, include_digest: bool = False) -> RaftStatus: ...
    def fresh_dump(self, timeout_s: float) -> tuple[BinaryIO, int, int]: ...
    def add_replica(self, address: str, timeout_s: float) -> None: ...
    def remove_replica(self, address: str, timeout_s: float) -> None: ...
