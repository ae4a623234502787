"""The agent gateway of one simulated replica: the real `raftsched.replica.gateway.AgentGateway`
(what the gRPC service wraps), speaking the protocol's values like the real one, with its errors
turned into the agent session's errors by the session's own rule, so the simulated agent handles
exactly what the real one would."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agent import session as s
from raftsched.clock import Clock
from raftsched.errors import Code, RaftschedError
from raftsched.protocol import (
    Beat,
    Directives,
    Observation,
    Registered,
    Registration,
    Report,
    Reported,
)
from raftsched.replica.gateway import AgentGateway
from raftsched.replica.leader import Leader
from tests.sim.log import SimNode


class Gateway:
    """`AgentGateway` on one simulated replica, answering what `agent.session.GrpcSession`
    would return or raise."""

    def __init__(self, node: SimNode, leader: Leader, clock: Clock, rng: random.Random) -> None:
        self.node = node
        self.leader = leader
        self.core = AgentGateway(node, leader, clock, rng)

    @property
    def replica_index(self) -> int:
        return self.node.replica.index

    def _error(self, error: RaftschedError, method: str, *, reregister: bool) -> s.SessionError:
        if error.code == Code.UNAVAILABLE:  # the service adds the leader's address
            error.leader_hint = self.node.leader_address()
        return s.session_error(error, method, reregister)

    def register(self, registration: Registration) -> Registered:
        try:
            registered = self.core.register(registration)
        except RaftschedError as error:
            raise self._error(error, "Register", reregister=False) from None
        return Registered(registered.term, self.node.leader_address(), registered.lost,
                          registered.kills, registered.stop)

    def heartbeat(self, beat: Beat) -> Directives:
        try:
            directives = self.core.heartbeat(beat)
        except RaftschedError as error:
            raise self._error(error, "Heartbeat", reregister=True) from None
        if directives.reregister:
            raise s.Reregister(f"leader does not know incarnation {beat.incarnation}")
        return directives

    def report(self, cluster_id: str, incarnation: int, reports: Sequence[Report],
               observed: Observation | None = None) -> Reported:
        try:
            return self.core.report(cluster_id, incarnation, reports, observed)
        except RaftschedError as error:
            raise self._error(error, "Report", reregister=True) from None
