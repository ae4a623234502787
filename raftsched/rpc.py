"""The gRPC edge shared by the client, the agent and the replica: the one error map (our codes to
gRPC status codes and back), the metadata a replica attaches, the channel options, and the one
mapping of the agent session's messages (`raftsched.protocol`) to and from protobuf.

A shared leaf: it imports grpc and the error vocabulary, nothing of the client, the replica or the
agent, so all three map failures the same way.

How a failed call is classified on the calling side (`error_from_rpc`):
- the replica answered with one of our codes: that code (a refusal is final; UNAVAILABLE means
  "not the leader", with the leader's address in `leader_hint` when the replica knows it);
- no connection could be made: `CouldNotConnect` (UNAVAILABLE; nothing was sent, so nothing
  happened — a fact the CLI tells apart from an unknown outcome);
- the call was sent but no answer came (deadline, connection lost mid-call): DEADLINE_EXCEEDED,
  the outcome is unknown — retrying with the same request id is safe;
- any other gRPC status (INTERNAL, UNIMPLEMENTED, ...): INTERNAL, not retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import grpc

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, CouldNotConnect, RaftschedError
from raftsched.protocol import (
    LEADER_METADATA_KEY,
    Assignment,
    Beat,
    Directives,
    KillDirective,
    KnownAttempt,
    Observation,
    Registered,
    Registration,
    Report,
    Reported,
    ReportKind,
    ReportVerdict,
    Resources,
    Verdict,
)

REPLICA_METADATA_KEY = "raftsched-replica"
"""Trailing metadata every refusal from a replica carries (its own gRPC address): a failure with
it was answered by a replica, one without it was not (transport)."""
MIN_RECONNECT_BACKOFF_MS = 100
MAX_RECONNECT_BACKOFF_MS = 1_000
"""gRPC's own reconnect backoff grows to 120 s by default; a replica that comes back must be
reachable again within about a second."""
CHANNEL_OPTIONS = (
    ("grpc.min_reconnect_backoff_ms", MIN_RECONNECT_BACKOFF_MS),
    ("grpc.initial_reconnect_backoff_ms", MIN_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
)
_CONNECT_FAILURE_MARKERS = ("failed to connect", "connection refused", "dns resolution failed",
                            "name resolution", "no route to host", "network is unreachable")
"""Lower-case fragments of gRPC core's UNAVAILABLE details when no connection could be made."""

_OUR_CODES = {code.value: code for code in Code}
_RETRYABLE = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED})


def status_code(code: Code) -> grpc.StatusCode:
    """The gRPC status a replica answers for `code` (our codes are named after gRPC's)."""
    status: grpc.StatusCode = getattr(grpc.StatusCode, code.value)
    return status


def abort(context: grpc.ServicerContext, error: RaftschedError, *, replica: str,
          leader_hint: str | None = None) -> NoReturn:
    """End an RPC with `error`'s status, marked as answered by `replica` (its gRPC address), with
    the leader's address for a not-the-leader answer."""
    metadata = [(REPLICA_METADATA_KEY, replica)]
    if error.code == Code.UNAVAILABLE and leader_hint:
        metadata.append((LEADER_METADATA_KEY, leader_hint))
    context.set_trailing_metadata(tuple(metadata))
    context.abort(status_code(error.code), error.message)
    raise AssertionError("context.abort returned")


def error_from_rpc(error: grpc.RpcError, address: str) -> RaftschedError:
    """The one map from a failed call to `address` to our error type (see the module doc)."""
    status = _status(error)
    details = _details(error) or status.name
    metadata = _trailing(error)
    answered = REPLICA_METADATA_KEY in metadata
    code = _OUR_CODES.get(status.name)
    if code is not None and code != Code.UNAVAILABLE and code != Code.DEADLINE_EXCEEDED:
        return RaftschedError(code, details)
    if status == grpc.StatusCode.UNAVAILABLE:
        if answered or LEADER_METADATA_KEY in metadata:
            return RaftschedError(Code.UNAVAILABLE, f"{address}: {details}",
                                  leader_hint=metadata.get(LEADER_METADATA_KEY) or None)
        if _is_connect_failure(details):
            return CouldNotConnect(address, _connect_reason(details))
        return RaftschedError(Code.DEADLINE_EXCEEDED,
                              f"{address}: connection lost before an answer ({details})")
    if status == grpc.StatusCode.DEADLINE_EXCEEDED and answered:
        return RaftschedError(Code.DEADLINE_EXCEEDED, details)  # the replica's own "unknown"
    if status in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return RaftschedError(Code.DEADLINE_EXCEEDED, f"{address}: no answer in time ({details})")
    return RaftschedError(Code.INTERNAL, f"{address} answered {status.name}: {details}")


def retryable(error: RaftschedError) -> bool:
    """Worth another try, elsewhere or later: not the leader, no connection, outcome unknown."""
    return error.code in _RETRYABLE


def _connect_reason(details: str) -> str:
    """The last clause of gRPC core's text, e.g. "Connection refused" out of "failed to connect
    to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host:
    Connection refused"."""
    reason = details.rsplit(": ", 1)[-1].strip()
    return (reason or details).lower()


def _is_connect_failure(details: str) -> bool:
    lowered = details.lower()
    return any(marker in lowered for marker in _CONNECT_FAILURE_MARKERS)


def _status(error: grpc.RpcError) -> grpc.StatusCode:
    code: Any = getattr(error, "code", None)
    status = code() if callable(code) else None
    return status if isinstance(status, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def _details(error: grpc.RpcError) -> str:
    details: Any = getattr(error, "details", None)
    text = details() if callable(details) else None
    return str(text) if text else ""


def _trailing(error: grpc.RpcError) -> dict[str, str]:
    trailing: Any = getattr(error, "trailing_metadata", None)
    pairs = (trailing() if callable(trailing) else None) or ()
    return {str(key): str(value) for key, value in pairs}


# --- the agent session's messages: protocol values <-> protobuf (both sides use these) ---------


def resources_to_pb(resources: Resources) -> Any:
    return pb.Resources(cpu_milli=resources.cpu_milli, memory_mb=resources.memory_mb,
                        gpu=resources.gpu)


def resources_from_pb(message: Any) -> Resources:
    return Resources(int(message.cpu_milli), int(message.memory_mb), int(message.gpu))


def registration_to_pb(registration: Registration) -> Any:
    return pb.RegisterRequest(
        cluster_id=registration.cluster_id, incarnation=registration.incarnation,
        capabilities=list(registration.capabilities),
        capacity=resources_to_pb(registration.capacity),
        known=[pb.KnownAttempt(job_id=k.job_id, task_id=k.task_id, fence=k.fence,
                               running=k.running) for k in registration.known])


def registration_from_pb(message: Any) -> Registration:
    return Registration(
        str(message.cluster_id), int(message.incarnation), tuple(message.capabilities),
        resources_from_pb(message.capacity),
        tuple(KnownAttempt(k.job_id, k.task_id, int(k.fence), bool(k.running))
              for k in message.known))


def registered_to_pb(registered: Registered) -> Any:
    return pb.RegisterResponse(term=registered.term, leader=registered.leader,
                               lost=registered.lost, kills=registered.kills)


def registered_from_pb(message: Any) -> Registered:
    return Registered(int(message.term), str(message.leader), int(message.lost),
                      int(message.kills))


def beat_to_pb(beat: Beat) -> Any:
    message = pb.HeartbeatRequest(
        cluster_id=beat.cluster_id, incarnation=beat.incarnation, seq=beat.seq,
        running=list(beat.running), wait_ms=beat.wait_ms)
    if beat.free is not None:
        message.free.CopyFrom(resources_to_pb(beat.free))
    return message


def beat_from_pb(message: Any) -> Beat:
    free = resources_from_pb(message.free) if message.HasField("free") else None
    return Beat(str(message.cluster_id), int(message.incarnation), int(message.seq), free,
                tuple(int(f) for f in message.running), int(message.wait_ms))


def assignment_to_pb(assignment: Assignment) -> Any:
    return pb.Assignment(
        job_id=assignment.job_id, task_id=assignment.task_id, fence=assignment.fence,
        attempt=assignment.attempt, command=list(assignment.command), env=dict(assignment.env),
        cwd=assignment.cwd, resources=resources_to_pb(assignment.resources),
        timeout_ms=assignment.timeout_ms, idempotency_key=assignment.idempotency_key)


def assignment_from_pb(message: Any) -> Assignment:
    return Assignment(
        job_id=message.job_id, task_id=message.task_id, fence=int(message.fence),
        attempt=int(message.attempt), command=tuple(message.command), env=dict(message.env),
        cwd=message.cwd, resources=resources_from_pb(message.resources),
        timeout_ms=int(message.timeout_ms), idempotency_key=message.idempotency_key)


def directives_to_pb(directives: Directives) -> Any:
    return pb.HeartbeatResponse(
        term=directives.term, reregister=directives.reregister,
        assignments=[assignment_to_pb(a) for a in directives.assignments],
        kills=[pb.KillDirective(job_id=k.job_id, task_id=k.task_id, fence=k.fence)
               for k in directives.kills])


def directives_from_pb(message: Any) -> Directives:
    return Directives(int(message.term),
                      tuple(assignment_from_pb(a) for a in message.assignments),
                      tuple(KillDirective(k.job_id, k.task_id, int(k.fence))
                            for k in message.kills),
                      bool(message.reregister))


def report_to_pb(report: Report) -> Any:
    # ReportKind is named and numbered exactly like AgentReport.Kind.
    message = pb.AgentReport(kind=report.kind.name, job_id=report.job_id,
                             task_id=report.task_id, fence=report.fence,
                             timed_out=report.timed_out, reason=report.reason)
    if report.exit_code is not None:
        message.exit_code = report.exit_code
    return message


def report_from_pb(message: Any) -> Report:
    """Raises ValueError naming the fence for a kind this version does not know."""
    try:
        kind = ReportKind(message.kind)
    except ValueError:
        raise ValueError(f"report for fence {message.fence}: unknown kind {message.kind}") \
            from None
    exit_code = message.exit_code if message.HasField("exit_code") else None
    return Report(kind, message.job_id, message.task_id, int(message.fence), exit_code,
                  bool(message.timed_out), message.reason[:limits.MAX_REASON_CHARS])


def report_request_to_pb(cluster_id: str, incarnation: int, reports: Sequence[Report],
                         observed: Observation | None) -> Any:
    message = pb.ReportRequest(cluster_id=cluster_id, incarnation=incarnation,
                               reports=[report_to_pb(r) for r in reports])
    if observed is not None:
        message.free.CopyFrom(resources_to_pb(observed.free))
        message.seq = observed.seq
    return message


def observation_from_pb(message: Any) -> Observation | None:
    """A ReportRequest's capacity observation, if it carries one."""
    if not message.HasField("free") or message.seq == 0:
        return None
    return Observation(int(message.seq), resources_from_pb(message.free))


def reported_to_pb(reported: Reported) -> Any:
    return pb.ReportResponse(term=reported.term, verdicts=[
        pb.ReportVerdict(fence=v.fence, verdict=v.verdict.value,
                         kind=v.kind.name if v.kind is not None else "KIND_UNSPECIFIED")
        for v in reported.verdicts])


def reported_from_pb(message: Any) -> Reported:
    """Raises ValueError for a verdict this version does not know."""
    verdicts = []
    for v in message.verdicts:
        try:
            verdict = ReportVerdict(v.verdict)
        except ValueError:
            raise ValueError(f"report for fence {v.fence}: unknown verdict {v.verdict!r}") \
                from None
        verdicts.append(Verdict(int(v.fence), verdict, ReportKind(v.kind) if v.kind else None))
    return Reported(int(message.term), tuple(verdicts))
