"""The gRPC edge shared by the client, the agent and the replica: the one error map (our codes to
gRPC status codes and back), the metadata a replica attaches, the channel options, the guard that
answers an undecodable request INVALID_ARGUMENT (`RequestGuard`), and the one mapping of the agent
session's messages (`raftsched.protocol`) to and from protobuf.

A shared leaf: it imports grpc and the error vocabulary, nothing of the client, the replica or the
agent, so all three map failures the same way.

How a failed call is classified on the calling side (`error_from_rpc`):
- the replica answered with one of our codes: that code (a refusal is final; UNAVAILABLE means
  "not the leader", with the leader's address in `leader_hint` when the replica knows it);
- no connection could be made: `CouldNotConnect` (UNAVAILABLE; nothing was sent, so nothing
  happened — a fact the CLI tells apart from an unknown outcome); `HandshakeFailed` when the TLS
  handshake was refused by either side;
- the replica refused the caller's certificate (UNAUTHENTICATED, PERMISSION_DENIED):
  `AccessDenied` with that code (not retried);
- the call was sent but no answer came (deadline, connection lost mid-call): DEADLINE_EXCEEDED,
  the outcome is unknown — retrying with the same request id is safe;
- any other gRPC status (INTERNAL, UNIMPLEMENTED, ...): INTERNAL, not retried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status  # type: ignore[import-untyped]

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
    LogChunk,
    LogRequest,
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
_HANDSHAKE_FAILURE_MARKERS = ("handshake failed", "ssl_error", "verification check failed")
"""... when this side refused the TLS handshake (server certificate not signed by our CA, not
valid for the address dialled, or a server that does not speak TLS)."""
_CLOSED_MARKER = "socket closed"
"""... when the server closed the connection before it answered anything: how a mutual-TLS
server refuses a client certificate, or a plaintext client."""

_OUR_CODES = {code.value: code for code in Code}
_RETRYABLE = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED})


def status_code(code: Code) -> grpc.StatusCode:
    """The gRPC status a replica answers for `code` (our codes are named after gRPC's)."""
    status: grpc.StatusCode = getattr(grpc.StatusCode, code.value)
    return status


FieldViolation = tuple[str, str]
"""(field, description): one field of a request and what is wrong with it."""


def abort(context: grpc.ServicerContext, error: RaftschedError, *, replica: str,
          leader_hint: str | None = None, violations: Sequence[FieldViolation] = ()) -> NoReturn:
    """End an RPC with `error`'s status, marked as answered by `replica` (its gRPC address), with
    the leader's address for a not-the-leader answer. `violations` go with the status as a
    google.rpc.BadRequest detail (trailing metadata `grpc-status-details-bin`, the standard
    rich error model), so clients in any language can read the problem field by field. Both are
    cut to their bounds (`fitted_message`, `fitted_violations`): a client drops an answer whose
    metadata is past its limit (8 KiB by default) and reports RESOURCE_EXHAUSTED instead."""
    metadata: list[tuple[str, str | bytes]] = [(REPLICA_METADATA_KEY, replica)]
    if error.code == Code.UNAVAILABLE and leader_hint:
        metadata.append((LEADER_METADATA_KEY, leader_hint))
    message = fitted_message(error.message)
    kept = fitted_violations(violations)
    if kept or error.retry_after_ms:
        metadata.extend(_rich_status(error.code, message, kept,
                                     error.retry_after_ms).trailing_metadata)
    context.set_trailing_metadata(tuple(metadata))
    context.abort(status_code(error.code), message)
    raise AssertionError("context.abort returned")


CUT_MARKER = " ... (cut to MAX_STATUS_MESSAGE_BYTES)"


def sent_bytes(text: str) -> int:
    """The size of `text` as gRPC sends a status message: UTF-8, percent-encoded outside
    printable ASCII and '%' (the gRPC spec's grpc-message)."""
    return sum(1 if 0x20 <= byte <= 0x7E and byte != 0x25 else 3 for byte in text.encode())


def fitted_message(text: str, max_bytes: int = limits.MAX_STATUS_MESSAGE_BYTES) -> str:
    """`text`, or as much of it as fits in `max_bytes` as sent, followed by CUT_MARKER."""
    if sent_bytes(text) <= max_bytes:
        return text
    room = max_bytes - len(CUT_MARKER)
    for end, char in enumerate(text):
        room -= sent_bytes(char)
        if room < 0:
            return text[:end] + CUT_MARKER
    raise AssertionError("a text larger than its bound fitted whole")


_VIOLATION_OVERHEAD_BYTES = 12
"""Tags and lengths of one FieldViolation inside a BadRequest, at most."""


def fitted_violations(violations: Sequence[FieldViolation],
                      max_bytes: int = limits.MAX_STATUS_VIOLATIONS_BYTES,
                      ) -> list[FieldViolation]:
    """The leading `violations` whose serialized BadRequest stays within `max_bytes`."""
    kept: list[FieldViolation] = []
    size = 0
    for field, description in violations:
        size += len(field.encode()) + len(description.encode()) + _VIOLATION_OVERHEAD_BYTES
        if size > max_bytes:
            break
        kept.append((field, description))
    return kept


def _rich_status(code: Code, message: str, violations: Sequence[FieldViolation],
                 retry_after_ms: int = 0) -> Any:
    """A grpc.Status of `code` and `message` whose details hold a google.rpc.BadRequest (when
    there are `violations`) and a google.rpc.RetryInfo (when `retry_after_ms`)."""
    details = []
    if violations:
        bad_request = error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
            for field, description in violations])
        details.append(any_pb2.Any())
        details[-1].Pack(bad_request)
    if retry_after_ms:
        retry_info = error_details_pb2.RetryInfo()
        retry_info.retry_delay.FromMilliseconds(retry_after_ms)
        details.append(any_pb2.Any())
        details[-1].Pack(retry_info)
    return rpc_status.to_status(status_pb2.Status(
        code=status_code(code).value[0], message=message, details=details))


def _rich_details(error: grpc.RpcError) -> list[Any]:
    """The google.rpc.Status details a failed call carries ([] when none, or untrustworthy)."""
    try:
        status = rpc_status.from_call(error)
    except ValueError:  # details that contradict the call's own status: not ours to trust
        return []
    return list(status.details) if status is not None else []


def field_violations(error: grpc.RpcError) -> list[FieldViolation]:
    """The google.rpc.BadRequest field violations a failed call carries (none: [])."""
    violations: list[FieldViolation] = []
    for detail in _rich_details(error):
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            violations += [(v.field, v.description) for v in bad_request.field_violations]
    return violations


def retry_after_ms(error: grpc.RpcError) -> int:
    """The google.rpc.RetryInfo delay a failed call carries, in ms (none: 0)."""
    for detail in _rich_details(error):
        retry_info = error_details_pb2.RetryInfo()
        if detail.Unpack(retry_info):
            delay: int = retry_info.retry_delay.ToMilliseconds()
            return max(0, delay)
    return 0


class RequestGuard(grpc.ServerInterceptor):  # type: ignore[misc]
    """A server interceptor: a request that does not decode as its method's message is answered
    INVALID_ARGUMENT "request is not a valid <message>", marked as answered by `replica`, for
    every method of `services` (so a method added to one is covered without a change here).

    Without it gRPC answers INTERNAL "Exception deserializing request!" and logs a traceback:
    a protobuf decode error is raised inside gRPC's own deserialization, out of any servicer's
    reach. The guard's deserializer turns that error into a marker value instead, and the
    servicer method, wrapped, aborts on the marker before the servicer sees anything. Methods
    of other services (health, reflection) pass through unchanged."""

    def __init__(self, services: Iterable[Any], *, replica: str) -> None:
        """`services`: protobuf ServiceDescriptors, e.g. `pb.DESCRIPTOR.services_by_name[...]`."""
        self._input_names = {f"/{service.full_name}/{method.name}": method.input_type.full_name
                             for service in services for method in service.methods}
        self._replica = replica
        self._guarded: dict[str, tuple[Any, Any]] = {}
        """method -> (gRPC's handler, the guarded one): wrapped once, not per call. Filled from
        several threads without a lock: a race at worst wraps the same handler twice."""

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        message_name = self._input_names.get(method)
        if handler is None or message_name is None or handler.request_deserializer is None:
            return handler
        cached = self._guarded.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        refusal = RaftschedError(Code.INVALID_ARGUMENT, f"request is not a valid {message_name}")
        guarded = _guarded_handler(handler, refusal, self._replica)
        self._guarded[method] = (handler, guarded)
        return guarded


_UNDECODABLE = object()
"""What a guarded deserializer returns for bytes that are not a valid message."""

_HANDLER_FACTORIES = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}
"""(request streaming, response streaming) -> the handler's behaviour field and its factory."""


STREAM_END_KEY = "raftsched-stream-end"
"""Trailing metadata of a server stream the replica ended on purpose while there was more to
come; its value says why (STREAM_END_MAX_AGE). A stream that ended without it ended because it
was done (a terminal job, the whole output)."""
STREAM_END_MAX_AGE = "max-age"
"""The stream reached the replica's maximum stream age (limits.MAX_STREAM_AGE_S): re-open it
where it was (the client does: `Client.watch`, `Client.task_logs`)."""


def ended_for_age(call: Any) -> bool:
    """Whether a server stream that finished (its iterator is exhausted) was ended by the
    replica for its age, rather than because it was done."""
    trailers = call.trailing_metadata() or ()
    return any(key == STREAM_END_KEY and value == STREAM_END_MAX_AGE for key, value in trailers)


def handler_parts(handler: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A gRPC method handler's behaviour, and the factory that makes a handler of its kind (for
    interceptors that wrap the behaviour: this one, `replica.identity.IdentityCheck`)."""
    field, factory = _HANDLER_FACTORIES[(bool(handler.request_streaming),
                                         bool(handler.response_streaming))]
    return getattr(handler, field), factory


def _guarded_handler(handler: Any, refusal: RaftschedError, replica: str) -> Any:
    """`handler` with a deserializer that cannot raise and a behaviour that aborts with
    `refusal` on a request that did not decode."""
    deserialize: Callable[[bytes], Any] = handler.request_deserializer
    field, factory = _HANDLER_FACTORIES[(bool(handler.request_streaming),
                                         bool(handler.response_streaming))]
    behavior: Callable[[Any, grpc.ServicerContext], Any] = getattr(handler, field)

    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return _UNDECODABLE

    def checked(request: Any, context: grpc.ServicerContext) -> Any:
        if request is _UNDECODABLE:
            abort(context, refusal, replica=replica)
        return behavior(request, context)

    def checked_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        def decoded() -> Iterator[Any]:
            for request in requests:
                if request is _UNDECODABLE:
                    abort(context, refusal, replica=replica)
                yield request
        return behavior(decoded(), context)

    return factory(checked_stream if handler.request_streaming else checked,
                   request_deserializer=decode,
                   response_serializer=handler.response_serializer)


def error_from_rpc(error: grpc.RpcError, address: str) -> RaftschedError:
    """The one map from a failed call to `address` to our error type (see the module doc)."""
    status = _status(error)
    details = _details(error) or status.name
    metadata = _trailing(error)
    answered = REPLICA_METADATA_KEY in metadata
    if status in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return AccessDenied(address, status.name, details)
    code = _OUR_CODES.get(status.name)
    if code is not None and code != Code.UNAVAILABLE and code != Code.DEADLINE_EXCEEDED:
        later = retry_after_ms(error) if code == Code.RESOURCE_EXHAUSTED else 0
        return RaftschedError(code, details, retry_after_ms=later)
    if status == grpc.StatusCode.UNAVAILABLE:
        if answered or LEADER_METADATA_KEY in metadata:
            return RaftschedError(Code.UNAVAILABLE, f"{address}: {details}",
                                  leader_hint=metadata.get(LEADER_METADATA_KEY) or None)
        if _is_connect_failure(details):
            return _connect_failure(address, details)
        return RaftschedError(Code.DEADLINE_EXCEEDED,
                              f"{address}: connection lost before an answer ({details})")
    if status == grpc.StatusCode.DEADLINE_EXCEEDED and answered:
        return RaftschedError(Code.DEADLINE_EXCEEDED, details)  # the replica's own "unknown"
    if status in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return RaftschedError(Code.DEADLINE_EXCEEDED, f"{address}: no answer in time ({details})")
    return RaftschedError(Code.INTERNAL, f"{address} answered {status.name}: {details}")


class HandshakeFailed(CouldNotConnect):
    """No TLS session with `address` could be set up, so nothing was sent. `server_closed`: the
    server hung up during the handshake (it refused this client's certificate, or this client
    spoke plaintext to a mutual-TLS server); otherwise this side refused the server (its
    certificate is not signed by our CA or not valid for `address`, or it does not speak TLS).
    Retryable like any CouldNotConnect: another replica may hold a good certificate."""

    def __init__(self, address: str, detail: str, *, server_closed: bool) -> None:
        super().__init__(address, detail)
        self.server_closed = server_closed


class AccessDenied(RaftschedError):
    """A replica refused the caller: UNAUTHENTICATED (no client certificate) or PERMISSION_DENIED
    (the certificate's name may not make this call, `raftsched.replica.identity`): the code of
    the same name, final, not retried."""

    def __init__(self, address: str, status: str, details: str) -> None:
        super().__init__(Code(status), f"{address} answered {status}: {details}")
        self.status = status


def retryable(error: RaftschedError) -> bool:
    """Worth another try, elsewhere or later: not the leader, no connection, outcome unknown."""
    return error.code in _RETRYABLE


def _connect_reason(details: str) -> str:
    """The last clause of gRPC core's text, e.g. "Connection refused" out of "failed to connect
    to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host:
    Connection refused"."""
    reason = details.rsplit(": ", 1)[-1].strip()
    return (reason or details).lower()


def _connect_failure(address: str, details: str) -> CouldNotConnect:
    lowered = details.lower()
    if any(marker in lowered for marker in _HANDSHAKE_FAILURE_MARKERS):
        return HandshakeFailed(address, _handshake_reason(details), server_closed=False)
    if lowered.rstrip(". ").endswith(_CLOSED_MARKER):
        return HandshakeFailed(address, "the server closed the connection during the handshake",
                               server_closed=True)
    return CouldNotConnect(address, _connect_reason(details))


def _handshake_reason(details: str) -> str:
    """"TLS handshake failed: certificate signature failure (BAD_SIGNATURE)" out of gRPC core's
    "... Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1a000064:ECDSA
    routines:OPENSSL_internal:BAD_SIGNATURE: certificate signature failure: OK", and
    "TLS handshake failed: Hostname Verification Check failed" out of "... Custom verification
    check failed with error: UNAUTHENTICATED: Hostname Verification Check failed."."""
    text = details.strip().removesuffix(": OK").rstrip(". ")
    clauses = [clause.strip() for clause in text.split(": ")]
    reason = clauses[-1]
    library = clauses[-2] if len(clauses) > 1 else ""  # "error:1a000064:...:BAD_SIGNATURE"
    if library.startswith("error:"):
        reason = f"{reason} ({library.rpartition(':')[2]})"
    return f"TLS handshake failed: {reason}"


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
                               running=k.running) for k in registration.known],
        custom=dict(registration.custom), queue_depth=registration.queue_depth)


def registration_from_pb(message: Any) -> Registration:
    return Registration(
        str(message.cluster_id), int(message.incarnation), tuple(message.capabilities),
        resources_from_pb(message.capacity),
        tuple(KnownAttempt(k.job_id, k.task_id, int(k.fence), bool(k.running))
              for k in message.known),
        tuple(sorted((str(name), int(count)) for name, count in message.custom.items())),
        int(message.queue_depth))


def registered_to_pb(registered: Registered) -> Any:
    return pb.RegisterResponse(term=registered.term, leader=registered.leader,
                               lost=registered.lost, kills=registered.kills,
                               stop=[kill_to_pb(k) for k in registered.stop])


def registered_from_pb(message: Any) -> Registered:
    return Registered(int(message.term), str(message.leader), int(message.lost),
                      int(message.kills), tuple(kill_from_pb(k) for k in message.stop))


def kill_to_pb(kill: KillDirective) -> Any:
    return pb.KillDirective(job_id=kill.job_id, task_id=kill.task_id, fence=kill.fence,
                            withdraw=kill.withdraw)


def kill_from_pb(message: Any) -> KillDirective:
    return KillDirective(str(message.job_id), str(message.task_id), int(message.fence),
                         bool(message.withdraw))


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
        timeout_ms=assignment.timeout_ms, idempotency_key=assignment.idempotency_key,
        kill_grace_ms=assignment.kill_grace_ms, checkpoint=assignment.checkpoint,
        tenant=assignment.tenant, inputs=assignment.inputs)


def assignment_from_pb(message: Any) -> Assignment:
    return Assignment(
        job_id=message.job_id, task_id=message.task_id, fence=int(message.fence),
        attempt=int(message.attempt), command=tuple(message.command), env=dict(message.env),
        cwd=message.cwd, resources=resources_from_pb(message.resources),
        timeout_ms=int(message.timeout_ms), idempotency_key=message.idempotency_key,
        kill_grace_ms=max(0, int(message.kill_grace_ms)), checkpoint=bool(message.checkpoint),
        tenant=str(message.tenant), inputs=str(message.inputs))


def directives_to_pb(directives: Directives) -> Any:
    return pb.HeartbeatResponse(
        term=directives.term, reregister=directives.reregister,
        assignments=[assignment_to_pb(a) for a in directives.assignments],
        kills=[kill_to_pb(k) for k in directives.kills],
        log_requests=[pb.LogRequest(request_id=r.request_id, fence=r.fence, stream=r.stream,
                                    offset=r.offset, max_bytes=r.max_bytes)
                      for r in directives.log_requests])


def directives_from_pb(message: Any) -> Directives:
    return Directives(int(message.term),
                      tuple(assignment_from_pb(a) for a in message.assignments),
                      tuple(kill_from_pb(k) for k in message.kills),
                      bool(message.reregister),
                      tuple(LogRequest(r.request_id, int(r.fence), r.stream, int(r.offset),
                                       int(r.max_bytes)) for r in message.log_requests))


def log_chunk_to_pb(cluster_id: str, chunk: LogChunk) -> Any:
    return pb.LogChunk(cluster_id=cluster_id, request_id=chunk.request_id, fence=chunk.fence,
                       offset=chunk.offset, data=chunk.data, size=chunk.size, error=chunk.error)


def log_chunk_from_pb(message: Any) -> LogChunk:
    return LogChunk(message.request_id, int(message.fence), int(message.offset),
                    bytes(message.data), int(message.size), message.error)


def report_to_pb(report: Report) -> Any:
    # ReportKind is named and numbered exactly like AgentReport.Kind.
    message = pb.AgentReport(kind=report.kind.name, job_id=report.job_id,
                             task_id=report.task_id, fence=report.fence,
                             timed_out=report.timed_out, reason=report.reason,
                             outputs=report.outputs, outputs_refused=report.outputs_refused)
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
    reason, outputs, refused = message.reason, message.outputs, bool(message.outputs_refused)
    if len(outputs.encode()) > limits.MAX_TASK_RESULT_OUTPUTS_BYTES:  # the log would refuse it
        reason, outputs, refused = (f"outputs over the {limits.MAX_TASK_RESULT_OUTPUTS_BYTES}-"
                                    "byte bound (MAX_TASK_RESULT_OUTPUTS_BYTES)"), "", True
    return Report(kind, message.job_id, message.task_id, int(message.fence), exit_code,
                  bool(message.timed_out), reason[:limits.MAX_REASON_CHARS], outputs, refused)


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
