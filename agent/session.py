"""The agent's link to the scheduler's leader over gRPC (service `AgentGateway`).

`GrpcSession` tries the configured addresses, follows the `raftsched-leader` trailing metadata of
an UNAVAILABLE answer, retries what is safe to retry with capped, jittered backoff, and maps every
failure it gives up on to one of a few errors:

- `NotLeader`: only followers answered (with or without a leader hint) within the retry budget;
- `Unreachable`: no server answered (or the session was told to stop);
- `Unknown`: DEADLINE_EXCEEDED to the end: the outcome is unknown, send the same request again;
- `Reregister`: the leader does not know this cluster or incarnation (FAILED_PRECONDITION on
  Heartbeat/Report, or `HeartbeatResponse.reregister`);
- `Refused`: any other status (a bug or a bound); not retried.

Every call is safe to resend as is: Register is a reconciliation, Heartbeat a read with a
sequence number, and every Report verdict is final and idempotent.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc

from agent.model import (
    Assignment,
    Beat,
    Directives,
    KillDirective,
    Registered,
    Registration,
    Report,
    Reported,
    ReportVerdict,
    Resources,
    Verdict,
)
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc

LEADER_METADATA_KEY = "raftsched-leader"
"""Same key as `raftsched.client.LEADER_METADATA_KEY` (a test keeps them equal)."""
REGISTER_DEADLINE_MS = 10_000
REPORT_DEADLINE_MS = 10_000
HEARTBEAT_DEADLINE_SLACK_MS = 5_000
"""A heartbeat's deadline is its long-poll wait plus this."""
MAX_TRIES_PER_CALL = 8
"""RPC attempts of one call, redirects included."""
BACKOFF_INITIAL_MS = 50
BACKOFF_MAX_MS = 1_000
STOP_CHECK_INTERVAL_MS = 100
"""A call in flight notices a stop request at least this often."""
CHANNEL_MIN_RECONNECT_BACKOFF_MS = 100
CHANNEL_MAX_RECONNECT_BACKOFF_MS = 1_000
"""gRPC's own reconnect backoff grows to 120 s by default; a replica that comes back must be
reachable again within about a second."""


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

    def report(self, cluster_id: str, incarnation: int,
               reports: Sequence[Report]) -> Reported: ...


class GrpcSession:
    def __init__(self, servers: Sequence[str], *, stop: threading.Event | None = None,
                 max_tries: int = MAX_TRIES_PER_CALL,
                 backoff_initial_ms: int = BACKOFF_INITIAL_MS,
                 backoff_max_ms: int = BACKOFF_MAX_MS,
                 register_deadline_ms: int = REGISTER_DEADLINE_MS,
                 report_deadline_ms: int = REPORT_DEADLINE_MS,
                 rng: random.Random | None = None) -> None:
        addresses = list(dict.fromkeys(a.strip() for a in servers if a.strip()))
        if not addresses:
            raise ValueError("no scheduler addresses given")
        assert max_tries >= 1 and 0 < backoff_initial_ms <= backoff_max_ms
        self._servers = addresses
        self._stop = stop or threading.Event()
        self._max_tries = max_tries
        self._backoff_initial_ms = backoff_initial_ms
        self._backoff_max_ms = backoff_max_ms
        self._register_deadline_ms = register_deadline_ms
        self._report_deadline_ms = report_deadline_ms
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._target = addresses[0]
        self._next_server = 1 % len(addresses)

    @property
    def target(self) -> str:
        """The address the next call goes to first (the leader, as far as we know)."""
        with self._lock:
            return self._target

    # -- calls ---------------------------------------------------------------------------------

    def register(self, registration: Registration) -> Registered:
        request = pb.RegisterRequest(
            cluster_id=registration.cluster_id, incarnation=registration.incarnation,
            capabilities=list(registration.capabilities),
            capacity=_resources_pb(registration.capacity),
            known=[pb.KnownAttempt(job_id=k.job_id, task_id=k.task_id, fence=k.fence,
                                   running=k.running) for k in registration.known])
        response = self._call("Register", request, self._register_deadline_ms, reregister=False)
        return Registered(int(response.term), str(response.leader), int(response.lost),
                          int(response.kills))

    def heartbeat(self, beat: Beat) -> Directives:
        request = pb.HeartbeatRequest(
            cluster_id=beat.cluster_id, incarnation=beat.incarnation, seq=beat.seq,
            free=_resources_pb(beat.free), running=list(beat.running), wait_ms=beat.wait_ms)
        response = self._call("Heartbeat", request, beat.wait_ms + HEARTBEAT_DEADLINE_SLACK_MS,
                              reregister=True)
        if response.reregister:
            raise Reregister(f"leader does not know incarnation {beat.incarnation}")
        return Directives(int(response.term),
                          tuple(assignment_from_pb(a) for a in response.assignments),
                          tuple(KillDirective(k.job_id, k.task_id, int(k.fence))
                                for k in response.kills))

    def report(self, cluster_id: str, incarnation: int,
               reports: Sequence[Report]) -> Reported:
        request = pb.ReportRequest(cluster_id=cluster_id, incarnation=incarnation,
                                   reports=[_report_pb(r) for r in reports])
        response = self._call("Report", request, self._report_deadline_ms, reregister=True)
        return Reported(int(response.term), tuple(
            Verdict(int(v.fence), ReportVerdict(v.verdict)) for v in response.verdicts))

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _call(self, method: str, request: Any, deadline_ms: int, *, reregister: bool) -> Any:
        """One call with bounded retries; raises a SessionError when it gives up."""
        last: SessionError = Unreachable("no attempt made")
        followed: set[str] = set()
        for attempt in range(self._max_tries):
            address = self.target
            try:
                return self._invoke(address, method, request, deadline_ms)
            except grpc.RpcError as error:
                last = self._classify(error, address, method, reregister)
                hint = last.leader if isinstance(last, NotLeader) else None
                if hint and hint != address and hint not in followed:
                    followed.add(hint)
                    self._set_target(hint)
                    continue  # a fresh redirect is followed at once
                if isinstance(last, (Unreachable, NotLeader)):
                    self._rotate(address)
            if attempt + 1 < self._max_tries:
                self._backoff(attempt)
        raise last

    def _invoke(self, address: str, method: str, request: Any, deadline_ms: int) -> Any:
        """The RPC, abandoned (cancelled) as soon as a stop is requested."""
        if self._stop.is_set():
            raise Unreachable("session stopped")
        stub = pb_grpc.AgentGatewayStub(self._channel(address))
        future = getattr(stub, method).future(request, timeout=deadline_ms / 1000)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        # Bounded by the RPC deadline: the future is done by then at the latest.
        while not done.wait(STOP_CHECK_INTERVAL_MS / 1000):
            if self._stop.is_set():
                future.cancel()
                raise Unreachable("session stopped")
        return future.result()

    def _classify(self, error: grpc.RpcError, address: str, method: str,
                  reregister: bool) -> SessionError:
        """Returns an error worth retrying; raises one that is final."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = (error.details() if hasattr(error, "details") else None) or code.name
        where = f"{method} to {address}"
        if code == grpc.StatusCode.UNAVAILABLE:
            hint = _leader_hint(error)
            if hint is not None:
                return NotLeader(f"{where}: not the leader ({details})", hint)
            return Unreachable(f"{where}: {details}")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Unknown(f"{where}: outcome unknown ({details})")
        if code == grpc.StatusCode.CANCELLED:
            return Unreachable(f"{where}: cancelled ({details})")
        if code == grpc.StatusCode.FAILED_PRECONDITION and reregister:
            raise Reregister(f"{where}: {details}")
        raise Refused(code.name, f"{where}: {details}")

    def _backoff(self, attempt: int) -> None:
        ceiling_ms = min(self._backoff_max_ms, self._backoff_initial_ms * (1 << min(attempt, 20)))
        delay_ms = ceiling_ms * (0.5 + 0.5 * self._rng.random())
        if self._stop.wait(delay_ms / 1000):
            raise Unreachable("session stopped")

    def _set_target(self, address: str) -> None:
        with self._lock:
            self._target = address

    def _rotate(self, failed: str) -> None:
        """After a failure without a hint, the next configured server gets the next try."""
        with self._lock:
            if self._target != failed:
                return
            self._target = self._servers[self._next_server]
            self._next_server = (self._next_server + 1) % len(self._servers)

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = grpc.insecure_channel(address, options=[
                    ("grpc.min_reconnect_backoff_ms", CHANNEL_MIN_RECONNECT_BACKOFF_MS),
                    ("grpc.initial_reconnect_backoff_ms", CHANNEL_MIN_RECONNECT_BACKOFF_MS),
                    ("grpc.max_reconnect_backoff_ms", CHANNEL_MAX_RECONNECT_BACKOFF_MS),
                ])
                self._channels[address] = channel
            return channel


def _leader_hint(error: grpc.RpcError) -> str | None:
    trailing: Callable[[], Any] | None = getattr(error, "trailing_metadata", None)
    for key, value in (trailing() if trailing is not None else None) or ():
        if key == LEADER_METADATA_KEY and value:
            return str(value)
    return None


def _resources_pb(resources: Resources) -> Any:
    return pb.Resources(cpu_milli=resources.cpu_milli, memory_mb=resources.memory_mb,
                        gpu=resources.gpu)


def assignment_from_pb(message: Any) -> Assignment:
    """The agent's Assignment from an `Assignment` message (shared with tests/sim)."""
    resources = message.resources
    return Assignment(
        job_id=message.job_id, task_id=message.task_id, fence=int(message.fence),
        attempt=int(message.attempt), command=tuple(message.command), env=dict(message.env),
        cwd=message.cwd, resources=Resources(int(resources.cpu_milli), int(resources.memory_mb),
                                             int(resources.gpu)),
        timeout_ms=int(message.timeout_ms), idempotency_key=message.idempotency_key)


def _report_pb(report: Report) -> Any:
    # ReportKind is named and numbered exactly like AgentReport.Kind.
    message = pb.AgentReport(kind=report.kind.name, job_id=report.job_id,
                             task_id=report.task_id, fence=report.fence,
                             timed_out=report.timed_out, reason=report.reason)
    if report.exit_code is not None:
        message.exit_code = report.exit_code
    return message

