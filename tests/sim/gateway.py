"""The agent gateway of one simulated replica: the real `raftsched.gateway.AgentGateway` (what
the gRPC service wraps), answering with the agent session's values and errors so the simulated
agent handles exactly what the real one would."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agent import session as s
from agent.model import (
    Beat,
    Directives,
    KillDirective,
    Registered,
    Registration,
    Report,
    Reported,
    Verdict,
)
from raftsched.clock import Clock
from raftsched.errors import Code, RaftschedError
from raftsched.replica.gateway import AgentGateway
from raftsched.replica.leader import Leader
from raftsched.state import commands as c
from tests.sim.log import SimNode


class Gateway:
    """`raftsched.gateway.AgentGateway` (the code the gRPC service wraps), answering in the
    agent session's values and errors."""

    def __init__(self, node: SimNode, leader: Leader, clock: Clock, rng: random.Random) -> None:
        self.node = node
        self.leader = leader
        self.core = AgentGateway(node, leader, clock, rng)

    @property
    def replica_index(self) -> int:
        return self.node.replica.index

    def _error(self, error: RaftschedError, *, reregister: bool) -> s.SessionError:
        return _session_error(error, self.node.leader_address(), reregister)

    def register(self, registration: Registration) -> Registered:
        known = tuple(c.KnownAttempt(k.job_id, k.task_id, k.fence, k.running)
                      for k in registration.known)
        capacity = registration.capacity
        try:
            result = self.core.register(
                registration.cluster_id, registration.incarnation, registration.capabilities,
                (capacity.cpu_milli, capacity.memory_mb, capacity.gpu), known)
        except RaftschedError as error:
            raise self._error(error, reregister=False) from None
        return Registered(self.node.term(), self.node.leader_address(), result.lost,
                          result.kills)

    def heartbeat(self, beat: Beat) -> Directives:
        free = (beat.free.cpu_milli, beat.free.memory_mb, beat.free.gpu)
        try:
            due = self.core.heartbeat(beat.cluster_id, beat.incarnation, beat.seq, free)
        except RaftschedError as error:
            raise self._error(error, reregister=False) from None
        if due.reregister:
            raise s.Reregister(f"leader does not know incarnation {beat.incarnation}")
        return Directives(due.term, tuple(s.assignment_from_pb(a) for a in due.assignments),
                          tuple(KillDirective(k.job_id, k.task_id, int(k.fence))
                                for k in due.kills))

    def report(self, cluster_id: str, incarnation: int, reports: Sequence[Report]) -> Reported:
        items = tuple(c.Report(c.ReportKind(int(r.kind)), r.job_id, r.task_id, r.fence,
                               r.exit_code, r.timed_out, r.reason[:200]) for r in reports)
        try:
            verdicts = self.core.report(cluster_id, items)
        except RaftschedError as error:
            raise self._error(error, reregister=True) from None
        return Reported(self.node.term(),
                        tuple(Verdict(fence, verdict) for fence, verdict in verdicts))


def _session_error(error: RaftschedError, leader: str, reregister: bool) -> s.SessionError:
    """What `agent.session.GrpcSession._classify` makes of the status the service answers."""
    if error.code == Code.UNAVAILABLE:
        return s.NotLeader(error.message, leader)
    if error.code == Code.DEADLINE_EXCEEDED:
        return s.Unknown(error.message)
    if error.code == Code.FAILED_PRECONDITION and reregister:
        return s.Reregister(error.message)
    return s.Refused(error.code.value, error.message)


