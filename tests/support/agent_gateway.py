"""A real gRPC AgentGateway on 127.0.0.1 whose "leader" is a FakeSession, for tests that run
the agent as a process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from agent.model import (
    Beat,
    KnownAttempt,
    Registration,
    Report,
    ReportKind,
    Resources,
)
from agent.session import Reregister, SessionError
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from tests.support.agent import FakeSession

SERVER_WORKERS = 8


def _resources(message: Any) -> Resources:
    return Resources(int(message.cpu_milli), int(message.memory_mb), int(message.gpu))


class SessionGateway(pb_grpc.AgentGatewayServicer):  # type: ignore[misc]
    def __init__(self, session: FakeSession) -> None:
        self.session = session

    def Register(self, request: Any, context: grpc.ServicerContext) -> Any:
        registered = self.session.register(Registration(
            request.cluster_id, int(request.incarnation), tuple(request.capabilities),
            _resources(request.capacity),
            tuple(KnownAttempt(k.job_id, k.task_id, int(k.fence), bool(k.running))
                  for k in request.known)))
        return pb.RegisterResponse(term=registered.term, leader=registered.leader)

    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        beat = Beat(request.cluster_id, int(request.incarnation), int(request.seq),
                    _resources(request.free), tuple(int(f) for f in request.running),
                    int(request.wait_ms))
        try:
            directives = self.session.heartbeat(beat)
        except Reregister:
            return pb.HeartbeatResponse(term=self.session.term, reregister=True)
        return pb.HeartbeatResponse(
            term=directives.term,
            assignments=[pb.Assignment(
                job_id=a.job_id, task_id=a.task_id, fence=a.fence, attempt=a.attempt,
                command=list(a.command), env=a.env, cwd=a.cwd,
                resources=pb.Resources(cpu_milli=a.resources.cpu_milli,
                                       memory_mb=a.resources.memory_mb, gpu=a.resources.gpu),
                timeout_ms=a.timeout_ms, idempotency_key=a.idempotency_key, tenant=a.tenant)
                for a in directives.assignments],
            kills=[pb.KillDirective(job_id=k.job_id, task_id=k.task_id, fence=k.fence)
                   for k in directives.kills])

    def Report(self, request: Any, context: grpc.ServicerContext) -> Any:
        reports = [Report(ReportKind(int(r.kind)), r.job_id, r.task_id, int(r.fence),
                          int(r.exit_code) if r.HasField("exit_code") else None,
                          bool(r.timed_out), r.reason) for r in request.reports]
        try:
            reported = self.session.report(request.cluster_id, int(request.incarnation), reports)
        except SessionError as error:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(error))
        return pb.ReportResponse(term=reported.term, verdicts=[
            pb.ReportVerdict(fence=v.fence, verdict=v.verdict) for v in reported.verdicts])


@contextlib.contextmanager
def serve(session: FakeSession) -> Iterator[str]:
    """Serves the session on an ephemeral port; yields its address; stops on exit."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=SERVER_WORKERS))
    pb_grpc.add_AgentGatewayServicer_to_server(SessionGateway(session), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
