"""An in-memory Raft node for leader and gateway tests: the real FSM applies each proposal at
once (no Raft), with the invariants checked after every apply."""

from __future__ import annotations

import random
from typing import Any

from raftsched.clock import ManualClock
from raftsched.replica.leader import Leader, LeaderConfig
from raftsched.replica.raft.handshakes import ClosedConnections
from raftsched.state import commands as c
from raftsched.state import fsm, invariants
from raftsched.state.model import State
from raftsched.state.outcome import Outcome


class Done:
    """A proposal whose outcome is already known."""

    def __init__(self, outcome: Outcome) -> None:
        self._outcome = outcome

    def outcome(self, timeout_s: float) -> Outcome:
        return self._outcome


class MemoryNode:
    """Applies proposals at once to a State; counts them by command type."""

    def __init__(self) -> None:
        self.state = State()
        self.leader = True
        self.current_term = 3
        self.proposed: list[str] = []
        self.applied = 0
        self.closed = ClosedConnections(0, 0, 0)

    def propose(self, data: bytes, timeout_s: float) -> Outcome:
        self.proposed.append(type(c.decode(data)).__name__)
        self.applied += 1
        outcome = fsm.apply(self.state, data)
        invariants.check_invariants(self.state)
        return outcome

    def submit(self, data: bytes) -> Done:
        """Applied at once, like `propose`."""
        return Done(self.propose(data, 1.0))

    def read(self, fn: Any) -> Any:
        return fn(self.state)

    def read_unlocked(self, fn: Any) -> Any:
        return fn(self.state)

    def is_leader(self) -> bool:
        return self.leader

    def term(self) -> int:
        return self.current_term

    def closed_connections(self) -> ClosedConnections:
        return self.closed


def make_leader(node: MemoryNode, clock: ManualClock) -> Leader:
    """The real leader loop over `node`, planning whenever something was applied."""
    return Leader(node, clock, random.Random(7),
                  LeaderConfig("127.0.0.1:1", "127.0.0.1:2", suspect_after_s=5,
                               lost_after_s=30, tick_interval_s=1),
                  version=lambda: node.applied)
