"""GrpcSession against real gRPC servers on 127.0.0.1 running a fake AgentGateway."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from agent.model import Beat, Registration, Report, ReportKind, Resources
from agent.session import (
    GrpcSession,
    Refused,
    Reregister,
    Unknown,
    Unreachable,
)
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.protocol import LEADER_METADATA_KEY
from tests.support.agent import assignment

SERVER_WORKERS = 4


class FakeGateway(pb_grpc.AgentGatewayServicer):  # type: ignore[misc]
    """A leader (answers) or a follower (UNAVAILABLE + the leader's address)."""

    def __init__(self, term: int = 7) -> None:
        self.term = term
        self.leader_hint: str | None = None
        """Set: act as a follower pointing there."""
        self.calls: list[tuple[str, Any]] = []
        self.fail_next: list[grpc.StatusCode] = []
        self.heartbeat_response: Any = pb.HeartbeatResponse(term=term)
        self.block_heartbeat_s = 0.0

    def _enter(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        self.calls.append((method, request))
        if self.leader_hint is not None:
            context.set_trailing_metadata(((LEADER_METADATA_KEY, self.leader_hint),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")
        if self.fail_next:
            context.abort(self.fail_next.pop(0), "injected")

    def Register(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._enter("Register", request, context)
        return pb.RegisterResponse(term=self.term, leader="me", lost=1, kills=2)

    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._enter("Heartbeat", request, context)
        deadline = time.monotonic() + self.block_heartbeat_s
        while time.monotonic() < deadline and context.is_active():
            time.sleep(0.01)
        return self.heartbeat_response

    def Report(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._enter("Report", request, context)
        return pb.ReportResponse(term=self.term, verdicts=[
            pb.ReportVerdict(fence=r.fence, verdict="accepted") for r in request.reports])

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


@pytest.fixture
def servers() -> Iterator[list[tuple[str, FakeGateway]]]:
    """Two fake gateways; the test decides who leads."""
    started: list[grpc.Server] = []
    made: list[tuple[str, FakeGateway]] = []
    try:
        for _ in range(2):
            gateway = FakeGateway()
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=SERVER_WORKERS))
            pb_grpc.add_AgentGatewayServicer_to_server(gateway, server)
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            started.append(server)
            made.append((f"127.0.0.1:{port}", gateway))
        yield made
    finally:
        for server in started:
            server.stop(grace=None)


def _registration() -> Registration:
    return Registration("east", 3, ("linux",), Resources(8000, 1024, 1), ())


def _beat(wait_ms: int = 0) -> Beat:
    return Beat("east", 3, 1, Resources(1000, 100, 0), (5, 6), wait_ms)


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_follows_the_leader_hint_and_stays_with_the_leader(
        servers: list[tuple[str, FakeGateway]]) -> None:
    (follower_address, follower), (leader_address, leader) = servers
    follower.leader_hint = leader_address
    session = GrpcSession([follower_address], backoff_initial_ms=1, backoff_max_ms=5)
    try:
        registered = session.register(_registration())
        assert (registered.term, registered.lost, registered.kills) == (7, 1, 2)
        assert session.target == leader_address
        assert follower.methods() == ["Register"]
        assert leader.methods() == ["Register"]
        session.heartbeat(_beat())
        assert follower.methods() == ["Register"]  # straight to the leader now
        assert leader.methods() == ["Register", "Heartbeat"]
        request = leader.calls[0][1]
        assert (request.cluster_id, request.incarnation, request.capacity.cpu_milli) == \
            ("east", 3, 8000)
    finally:
        session.close()


def test_no_server_answering_gives_up_with_unreachable() -> None:
    session = GrpcSession([_closed_port(), _closed_port()], max_tries=4, backoff_initial_ms=5,
                          backoff_max_ms=20)
    started = time.monotonic()
    try:
        with pytest.raises(Unreachable):
            session.register(_registration())
    finally:
        session.close()
    assert time.monotonic() - started < 5


def test_deadline_exceeded_resends_the_same_request(
        servers: list[tuple[str, FakeGateway]]) -> None:
    address, gateway = servers[0]
    gateway.fail_next = [grpc.StatusCode.DEADLINE_EXCEEDED]
    session = GrpcSession([address], backoff_initial_ms=1, backoff_max_ms=5)
    reports = [Report(ReportKind.FINISHED, "job", "t", 9, 0),
               Report(ReportKind.KILLED, "job", "u", 10, None, reason="gone")]
    try:
        reported = session.report("east", 3, reports)
    finally:
        session.close()
    assert [v.fence for v in reported.verdicts] == [9, 10]
    first, second = (request for _, request in gateway.calls)
    assert first == second
    assert first.reports[0].HasField("exit_code") and first.reports[0].exit_code == 0
    assert not first.reports[1].HasField("exit_code")
    assert first.reports[1].kind == pb.AgentReport.KILLED


def test_deadline_exceeded_to_the_end_is_unknown(servers: list[tuple[str, FakeGateway]]) -> None:
    address, gateway = servers[0]
    gateway.fail_next = [grpc.StatusCode.DEADLINE_EXCEEDED] * 3
    session = GrpcSession([address], max_tries=3, backoff_initial_ms=1, backoff_max_ms=5)
    try:
        with pytest.raises(Unknown):
            session.heartbeat(_beat())
    finally:
        session.close()


def test_reregister_and_refusals(servers: list[tuple[str, FakeGateway]]) -> None:
    address, gateway = servers[0]
    session = GrpcSession([address], backoff_initial_ms=1, backoff_max_ms=5)
    try:
        gateway.fail_next = [grpc.StatusCode.FAILED_PRECONDITION]
        with pytest.raises(Reregister):
            session.report("east", 3, [Report(ReportKind.STARTED, "job", "t", 1)])
        gateway.heartbeat_response = pb.HeartbeatResponse(term=7, reregister=True)
        with pytest.raises(Reregister):
            session.heartbeat(_beat())
        gateway.fail_next = [grpc.StatusCode.INVALID_ARGUMENT]
        with pytest.raises(Refused, match="INVALID_ARGUMENT"):
            session.register(_registration())
    finally:
        session.close()
    assert len(gateway.calls) == 3  # none of these is retried


def test_heartbeat_carries_the_beat_and_brings_directives(
        servers: list[tuple[str, FakeGateway]]) -> None:
    address, gateway = servers[0]
    sent = assignment(12, command=("sh", "-c", "true"), env={"A": "1"}, cwd="/srv",
                      resources=Resources(1500, 256, 1), timeout_ms=9000, tenant="analytics")
    gateway.heartbeat_response = pb.HeartbeatResponse(term=8, assignments=[pb.Assignment(
        job_id=sent.job_id, task_id=sent.task_id, fence=sent.fence, attempt=sent.attempt,
        command=list(sent.command), env=sent.env, cwd=sent.cwd,
        resources=pb.Resources(cpu_milli=1500, memory_mb=256, gpu=1), timeout_ms=9000,
        idempotency_key=sent.idempotency_key, tenant="analytics")], kills=[pb.KillDirective(
            job_id="job", task_id="u", fence=3)])
    session = GrpcSession([address])
    try:
        directives = session.heartbeat(_beat(wait_ms=250))
    finally:
        session.close()
    assert directives.term == 8
    assert directives.assignments == (sent,)
    assert [(k.task_id, k.fence) for k in directives.kills] == [("u", 3)]
    request = gateway.calls[0][1]
    assert (list(request.running), request.wait_ms, request.seq) == ([5, 6], 250, 1)
    assert request.free.cpu_milli == 1000


def test_stop_abandons_a_call_in_flight(servers: list[tuple[str, FakeGateway]]) -> None:
    address, gateway = servers[0]
    gateway.block_heartbeat_s = 10.0
    stop = threading.Event()
    session = GrpcSession([address], stop=stop)
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(Unreachable, match="stopped"):
            session.heartbeat(_beat(wait_ms=10_000))
    finally:
        timer.cancel()
        session.close()
    assert time.monotonic() - started < 3
