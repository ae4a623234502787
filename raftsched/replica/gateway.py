"""The agent session's logic on the leader, without a transport.

`service.AgentGatewayService` puts gRPC around it; the seeded simulation (tests/sim) calls it
directly, so both exercise the same checks, commands and deliveries. Expected failures are
raised as `RaftschedError` (UNAVAILABLE when not leading, DEADLINE_EXCEEDED when a proposal's
outcome is unknown, the state machine's code when it refuses).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raftsched.clock import Clock
from raftsched.errors import Code, RaftschedError
from raftsched.replica import views
from raftsched.replica.leader import Leader
from raftsched.state import commands as c
from raftsched.state import fsm
from raftsched.state.model import State
from raftsched.state.results import ClusterRegistered, ReportResult, Result

PROPOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Deliveries:
    term: int
    reregister: bool
    assignments: list[Any]
    """pb.Assignment messages (views.deliveries)."""
    kills: list[Any]


def propose(node: Any, leader: Leader, command: c.Command) -> Result:
    """Commit `command` as the leader; its Applied result, or RaftschedError."""
    if not leader.leading():
        raise RaftschedError(Code.UNAVAILABLE, "not the leader")
    try:
        outcome = node.propose(c.encode(command), PROPOSE_TIMEOUT_S)
    except c.CommandError as error:
        raise RaftschedError(Code.RESOURCE_EXHAUSTED, str(error)) from None
    if isinstance(outcome, fsm.Rejected):
        raise RaftschedError(outcome.code, outcome.reason)
    leader.wake()
    result: Result = outcome.result
    return result


class AgentGateway:
    def __init__(self, node: Any, leader: Leader, clock: Clock, rng: random.Random,
                 changes_wait: Callable[[int, float], int] | None = None,
                 changes_version: Callable[[], int] | None = None) -> None:
        self.node = node
        self.leader = leader
        self.clock = clock
        self.rng = rng
        self._wait = changes_wait
        self._version = changes_version

    def register(self, cluster_id: str, incarnation: int, capabilities: tuple[str, ...],
                 capacity: tuple[int, int, int], known: tuple[c.KnownAttempt, ...],
                 ) -> ClusterRegistered:
        result = propose(self.node, self.leader, c.ClusterRegister(
            cluster_id, incarnation, capabilities, *capacity, self.clock.now_ms(), known))
        assert isinstance(result, ClusterRegistered), result
        self.leader.registered(cluster_id, incarnation)
        return result

    def heartbeat(self, cluster_id: str, incarnation: int, seq: int,
                  free: tuple[int, int, int] | None, wait_s: float = 0.0,
                  active: Callable[[], bool] = lambda: True) -> Deliveries:
        """Record the heartbeat, then answer with what is due for this agent; with `wait_s`
        (a long poll) wait for something to become due, up to that long."""
        if not self.leader.leading():
            raise RaftschedError(Code.UNAVAILABLE, "not the leader")
        if not self.node.read(lambda s: _registered(s, cluster_id, incarnation)):
            return Deliveries(self.node.term(), True, [], [])
        self.leader.heartbeat(cluster_id, incarnation, seq, free)
        deadline = self.clock.monotonic_s() + wait_s
        seen = self._version() if self._version is not None else 0
        while True:
            assignments, kills = self.node.read(lambda s: views.deliveries(
                s, cluster_id, lambda items: self.leader.due(cluster_id, items)))
            left = deadline - self.clock.monotonic_s()
            if assignments or kills or left <= 0 or self._wait is None or not active():
                break
            seen = self._wait(seen, left)
            if not self.leader.leading():
                break
        return Deliveries(self.node.term(), False, assignments, kills)

    def report(self, cluster_id: str, items: Sequence[c.Report]) -> list[tuple[int, str]]:
        """Commit the reports; (fence, verdict) for each, in order."""
        batch = c.ReportBatch(cluster_id, self.clock.now_ms(), self.rng.getrandbits(64),
                              tuple(items))
        result = propose(self.node, self.leader, batch)
        assert isinstance(result, ReportResult), result
        return [(report.fence, verdict)
                for report, verdict in zip(batch.items, result.verdicts, strict=True)]


def _registered(state: State, cluster_id: str, incarnation: int) -> bool:
    cluster = state.clusters.get(cluster_id)
    return (cluster is not None and cluster.incarnation == incarnation
            and cluster.status != c.ClusterStatus.LOST)
