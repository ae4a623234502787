"""The one gRPC error map (raftsched.rpc), against a real gRPC server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from raftsched import limits, rpc
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import Code, CouldNotConnect, RaftschedError
from raftsched.protocol import KillDirective, Registered

REPLICA = "127.0.0.1:9"
HANDLER_WAIT_S = 10.0


class Scripted(pb_grpc.SchedulerServicer):  # type: ignore[misc]
    """GetJob answers with the error queued in `errors`; ListJobs never answers in time."""

    def __init__(self) -> None:
        self.errors: list[tuple[RaftschedError, str | None]] = []
        self.violations: list[rpc.FieldViolation] = []
        """Sent with every error."""
        self.release = threading.Event()

    def GetJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        error, hint = self.errors.pop(0)
        rpc.abort(context, error, replica=REPLICA, leader_hint=hint, violations=self.violations)

    def ListJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.release.wait(HANDLER_WAIT_S)
        return pb.ListJobsResponse()


@pytest.fixture
def served() -> Iterator[tuple[str, Scripted]]:
    servicer = Scripted()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SchedulerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        servicer.release.set()
        server.stop(grace=None)


def _call(address: str, method: str, request: Any, timeout_s: float = 5.0) -> RaftschedError:
    return rpc.error_from_rpc(_raw_call(address, method, request, timeout_s), address)


def _raw_call(address: str, method: str, request: Any, timeout_s: float = 5.0) -> grpc.RpcError:
    with grpc.insecure_channel(address, options=rpc.CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.SchedulerStub(channel)
        try:
            getattr(stub, method)(request, timeout=timeout_s)
        except grpc.RpcError as error:
            return error
    raise AssertionError("the call succeeded")


def test_not_the_leader_carries_the_leaders_address(served: tuple[str, Scripted]) -> None:
    address, servicer = served
    servicer.errors.append((RaftschedError(Code.UNAVAILABLE, "not the leader"), "10.0.0.2:8000"))
    error = _call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert error.code == Code.UNAVAILABLE and not isinstance(error, CouldNotConnect)
    assert error.leader_hint == "10.0.0.2:8000"
    assert rpc.retryable(error)


@pytest.mark.parametrize("code", [Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.ALREADY_EXISTS,
                                  Code.FAILED_PRECONDITION, Code.RESOURCE_EXHAUSTED])
def test_refusals_keep_their_code_and_message(served: tuple[str, Scripted], code: Code) -> None:
    address, servicer = served
    servicer.errors.append((RaftschedError(code, "job x: the reason"), "ignored"))
    error = _call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert (error.code, error.message, error.leader_hint) == (code, "job x: the reason", None)
    assert not rpc.retryable(error)


def test_a_limit_refusal_carries_its_retry_after_as_retry_info(
        served: tuple[str, Scripted]) -> None:
    address, servicer = served
    servicer.errors.append((RaftschedError(Code.RESOURCE_EXHAUSTED, "over max_queued",
                                           retry_after_ms=5_000), None))
    raw = _raw_call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert rpc.retry_after_ms(raw) == 5_000 and rpc.field_violations(raw) == []
    servicer.violations = [("spec.tasks", "too many")]
    servicer.errors.append((RaftschedError(Code.RESOURCE_EXHAUSTED, "over max_queued",
                                           retry_after_ms=250), None))
    error = _call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert (error.code, error.retry_after_ms) == (Code.RESOURCE_EXHAUSTED, 250)
    servicer.errors.append((RaftschedError(Code.RESOURCE_EXHAUSTED, "MAX_LIVE_JOBS"), None))
    assert _call(address, "GetJob", pb.GetJobRequest(job_id="j")).retry_after_ms == 0


def test_a_replicas_unknown_outcome_stays_unknown(served: tuple[str, Scripted]) -> None:
    address, servicer = served
    servicer.errors.append((RaftschedError(Code.DEADLINE_EXCEEDED, "may have committed"), None))
    error = _call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert (error.code, error.message) == (Code.DEADLINE_EXCEEDED, "may have committed")


def test_no_answer_in_time_is_an_unknown_outcome(served: tuple[str, Scripted]) -> None:
    address, _ = served
    error = _call(address, "ListJobs", pb.ListJobsRequest(), timeout_s=0.2)
    assert error.code == Code.DEADLINE_EXCEEDED and "no answer in time" in error.message


def test_an_unexpected_status_is_internal_and_final(served: tuple[str, Scripted]) -> None:
    address, _ = served
    error = _call(address, "CancelJob", pb.CancelJobRequest(job_id="j"))  # not implemented
    assert error.code == Code.INTERNAL and "UNIMPLEMENTED" in error.message
    assert not rpc.retryable(error)


def test_a_closed_port_could_not_connect_and_nothing_was_sent() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    error = _call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert isinstance(error, CouldNotConnect) and error.code == Code.UNAVAILABLE
    assert error.address == address and "nothing was sent" in error.message
    assert rpc.retryable(error)


@pytest.mark.parametrize("code", list(Code))
def test_every_code_has_a_grpc_status(code: Code) -> None:
    assert rpc.status_code(code).name == code.value


# --- the size of a refusal ------------------------------------------------------------------------

WIDE = "\U0001f642"
"""4 bytes in UTF-8, 12 once percent-encoded in a status message."""


def test_a_refusal_quoting_wide_characters_still_reaches_a_default_client(
    served: tuple[str, Scripted]
) -> None:
    """Found by tests/integration/test_fuzz_rpc.py: 20 spec issues quoting 60 emoji each made an
    INVALID_ARGUMENT of 24 KiB of metadata; the client dropped it and saw RESOURCE_EXHAUSTED."""
    address, servicer = served
    issues = [(f"spec.tasks[{i}].'{WIDE * 60}'", f"unknown field '{WIDE * 60}'") for i in range(20)]
    servicer.violations = issues
    servicer.errors.append((RaftschedError(Code.INVALID_ARGUMENT, "; ".join(
        f"{field}: {description}" for field, description in issues)), None))
    error = _raw_call(address, "GetJob", pb.GetJobRequest(job_id="j"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert error.details().startswith(f"spec.tasks[0].'{WIDE}")
    assert error.details().endswith(rpc.CUT_MARKER)
    kept = rpc.field_violations(error)
    assert kept and kept == issues[:len(kept)]


def test_fitted_message_keeps_a_message_within_the_bound_as_it_is() -> None:
    text = "x" * limits.MAX_STATUS_MESSAGE_BYTES
    assert rpc.fitted_message(text) == text


@pytest.mark.parametrize("unit", ["x", "%", "\x00", "\u00e9", WIDE])
def test_fitted_message_cuts_at_the_bound_as_sent_and_says_so(unit: str) -> None:
    fitted = rpc.fitted_message(unit * (limits.MAX_STATUS_MESSAGE_BYTES + 1))
    assert fitted.endswith(rpc.CUT_MARKER) and fitted.startswith(unit)
    assert limits.MAX_STATUS_MESSAGE_BYTES - 12 < rpc.sent_bytes(fitted) \
        <= limits.MAX_STATUS_MESSAGE_BYTES


def test_sent_bytes_counts_three_for_each_byte_gRPC_percent_encodes() -> None:
    assert rpc.sent_bytes("a ~") == 3
    assert rpc.sent_bytes("%\n") == 6
    assert rpc.sent_bytes("\u00e9") == 6 and rpc.sent_bytes(WIDE) == 12


def test_fitted_violations_keeps_the_leading_ones_within_the_bound() -> None:
    violations = [(f"field{i}", "d" * 100) for i in range(100)]
    kept = rpc.fitted_violations(violations)
    assert kept == violations[:len(kept)] and 0 < len(kept) < 100
    size = sum(len(f) + len(d) + 12 for f, d in kept)
    assert size <= limits.MAX_STATUS_VIOLATIONS_BYTES < size + len("field99") + 100 + 12


def test_a_registration_answer_round_trips_with_the_attempts_to_stop() -> None:
    answer = Registered(7, "leader:1", 1, 2, (KillDirective("j", "t", 5),
                                              KillDirective("ghost", "u", 2**63)))
    assert rpc.registered_from_pb(rpc.registered_to_pb(answer)) == answer
    wire = rpc.registered_to_pb(Registered(7, "", 0, 0)).SerializeToString()
    assert rpc.registered_from_pb(pb.RegisterResponse.FromString(wire)).stop == ()
