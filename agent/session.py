"""The agent's link to the scheduler's leader over gRPC (service `AgentGateway`).

`GrpcSession` calls under the one retry policy of `raftsched.client.retry` (follow the leader's
address a follower names, retry what is safe to retry with capped, jittered backoff; errors mapped
by `raftsched.rpc`) and maps every failure it gives up on to one of a few errors:

- `NotLeader`: only followers answered, naming a leader, within the retry budget;
- `Unreachable`: no server answered, or none knew a leader (or the session was told to stop);
- `Unknown`: DEADLINE_EXCEEDED to the end: the outcome is unknown, send the same request again;
- `Reregister`: the leader does not know this cluster or incarnation (FAILED_PRECONDITION on
  Heartbeat/Report, or `HeartbeatResponse.reregister`);
- `Refused`: any other status (a bug or a bound); not retried.

Every call is safe to resend as is: Register is a reconciliation, Heartbeat a read with a
sequence number, and every Report verdict is final and idempotent.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc

from agent.model import (
    Beat,
    Directives,
    Registered,
    Registration,
    Report,
    Reported,
)
from raftsched import rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.client import retry
from raftsched.errors import Code, RaftschedError
from raftsched.protocol import LogChunk, Observation

REGISTER_DEADLINE_MS = 10_000
REPORT_DEADLINE_MS = 10_000
SEND_LOG_DEADLINE_MS = 10_000
TOPOLOGY_DEADLINE_MS = 5_000
"""One GetTopology call (a local read on whichever replica answers)."""
TOPOLOGY_MAX_TRIES = 256
"""GetTopology tries while the caller's budget lasts (replicas still starting refuse
connections at once: the budget, not a count of tries, is what bounds the wait)."""
HEARTBEAT_DEADLINE_SLACK_MS = 5_000
"""A heartbeat's deadline is its long-poll wait plus this."""
MAX_TRIES_PER_CALL = 8
"""RPC attempts of one call, redirects included."""
BACKOFF_INITIAL_MS = 50
BACKOFF_MAX_MS = 1_000
STOP_CHECK_INTERVAL_MS = 100
"""A call in flight notices a stop request at least this often."""
CALL_BUDGET_S = 60.0
"""A call retries for at most this long (the tries and their deadlines bound it first)."""


class SessionError(Exception):
    """A call to the leader failed; the subclass says what the agent should do."""


class NotLeader(SessionError):
    def __init__(self, message: str, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class Unreachable(SessionError):
    pass


class Unknown(SessionError):
    pass


class Reregister(SessionError):
    pass


class Refused(SessionError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class Session(Protocol):
    """What the agent core needs from its link to the leader (tests pass a fake)."""

    def register(self, registration: Registration) -> Registered: ...

    def heartbeat(self, beat: Beat) -> Directives: ...

    def report(self, cluster_id: str, incarnation: int, reports: Sequence[Report],
               observed: Observation | None = None) -> Reported: ...

    def send_log(self, cluster_id: str, chunk: LogChunk) -> None: ...


class GrpcSession:
    def __init__(self, servers: Sequence[str], *, stop: threading.Event | None = None,
                 max_tries: int = MAX_TRIES_PER_CALL,
                 backoff_initial_ms: int = BACKOFF_INITIAL_MS,
                 backoff_max_ms: int = BACKOFF_MAX_MS,
                 register_deadline_ms: int = REGISTER_DEADLINE_MS,
                 report_deadline_ms: int = REPORT_DEADLINE_MS,
                 rng: random.Random | None = None,
                 tls_files: tls.TlsFiles | None = None) -> None:
        """`tls_files`: this agent's certificate (it names its cluster) and the cluster's CA;
        None: plaintext (--insecure-dev)."""
        self._tls = tls_files
        try:
            self._servers = retry.Servers(servers)
        except RaftschedError as error:
            raise ValueError(error.message) from None
        self._policy = retry.RetryPolicy(budget_s=CALL_BUDGET_S, max_attempts=max_tries,
                                         backoff_initial_s=backoff_initial_ms / 1000,
                                         backoff_max_s=backoff_max_ms / 1000)
        self._stop = stop or threading.Event()
        self._register_deadline_ms = register_deadline_ms
        self._report_deadline_ms = report_deadline_ms
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}

    @property
    def target(self) -> str:
        """The address the next call goes to first (the leader, as far as we know)."""
        return self._servers.target

    # -- calls ---------------------------------------------------------------------------------

    def register(self, registration: Registration) -> Registered:
        response = self._call("Register", rpc.registration_to_pb(registration),
                              self._register_deadline_ms, reregister=False)
        return rpc.registered_from_pb(response)

    def heartbeat(self, beat: Beat) -> Directives:
        response = self._call("Heartbeat", rpc.beat_to_pb(beat),
                              beat.wait_ms + HEARTBEAT_DEADLINE_SLACK_MS, reregister=True)
        directives = rpc.directives_from_pb(response)
        if directives.reregister:
            raise Reregister(f"leader does not know incarnation {beat.incarnation}")
        return directives

    def report(self, cluster_id: str, incarnation: int, reports: Sequence[Report],
               observed: Observation | None = None) -> Reported:
        request = rpc.report_request_to_pb(cluster_id, incarnation, reports, observed)
        response = self._call("Report", request, self._report_deadline_ms, reregister=True)
        try:
            return rpc.reported_from_pb(response)
        except ValueError as error:
            raise Refused(Code.INTERNAL.value, f"Report: {error}") from None

    def send_log(self, cluster_id: str, chunk: LogChunk) -> None:
        """A piece of task output the leader asked for; one try (the leader's waiter gives up
        and the client asks again if it is lost)."""
        self._call("SendLog", rpc.log_chunk_to_pb(cluster_id, chunk), SEND_LOG_DEADLINE_MS,
                   reregister=False)

    def topology(self, budget_s: float = CALL_BUDGET_S) -> list[list[str]] | None:
        """Every scheduler group's servers, in group order, as a replica of these servers
        answers GetTopology (issue 27), this session's own servers standing for their group;
        None for a deployment of one group, or one whose replicas were never told the others'
        addresses, or a replica too old to say. SessionError when no replica answers."""
        policy = dataclasses.replace(self._policy, budget_s=budget_s,
                                     max_attempts=TOPOLOGY_MAX_TRIES)
        try:
            answer = retry.call(
                self._servers, policy,
                lambda address: self._invoke(address, "GetTopology", pb.GetTopologyRequest(),
                                             TOPOLOGY_DEADLINE_MS, pb_grpc.SchedulerStub),
                stop=self._stop, rng=self._rng, retryable=_retryable)
        except RaftschedError as error:
            if error.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) or \
                    isinstance(error, retry.Stopped):
                raise session_error(error, "GetTopology", False) from None
            return None  # UNIMPLEMENTED (an older replica), or refused: Register will say
        if answer.groups <= 1 or len(answer.members) != answer.groups:
            return None
        return [list(self._servers.addresses) if member.group == answer.group
                else list(member.servers) for member in answer.members]

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _call(self, method: str, request: Any, deadline_ms: int, *, reregister: bool) -> Any:
        """One call under the shared retry policy; raises a SessionError when it gives up."""

        try:
            return retry.call(
                self._servers, self._policy,
                lambda address: self._invoke(address, method, request, deadline_ms),
                stop=self._stop, rng=self._rng, retryable=_retryable)
        except RaftschedError as error:
            raise session_error(error, method, reregister) from None

    def _invoke(self, address: str, method: str, request: Any, deadline_ms: int,
                stub_type: Callable[[grpc.Channel], Any] = pb_grpc.AgentGatewayStub) -> Any:
        """The RPC, abandoned (cancelled) as soon as a stop is requested."""
        if self._stop.is_set():
            raise retry.Stopped()
        stub = stub_type(self._channel(address))
        future = getattr(stub, method).future(request, timeout=deadline_ms / 1000)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        # Bounded by the RPC deadline: the future is done by then at the latest.
        while not done.wait(STOP_CHECK_INTERVAL_MS / 1000):
            if self._stop.is_set():
                future.cancel()
                raise retry.Stopped()
        try:
            return future.result()
        except grpc.RpcError as error:
            raise rpc.error_from_rpc(error, address) from None

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = tls.open_channel(address, self._tls, rpc.CHANNEL_OPTIONS)
                self._channels[address] = channel
            return channel


def _retryable(error: RaftschedError) -> bool:
    return rpc.retryable(error) and not isinstance(error, retry.Stopped)


def session_error(error: RaftschedError, method: str, reregister: bool) -> SessionError:
    """What the agent should do about a call that failed for good."""
    where = f"{method}: {error.message}"
    if isinstance(error, retry.Stopped):
        return Unreachable("session stopped")
    if error.code == Code.FAILED_PRECONDITION and reregister:
        return Reregister(where)
    if error.code == Code.UNAVAILABLE:
        if error.leader_hint:
            return NotLeader(where, error.leader_hint)
        return Unreachable(where)
    if error.code == Code.DEADLINE_EXCEEDED:
        return Unknown(f"{where}: outcome unknown")
    return Refused(error.code.value, where)
