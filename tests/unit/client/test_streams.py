"""The client's server streams against an in-process stand-in server: a stream the replica
ends for its age (trailer raftsched-stream-end: max-age) is re-opened where it was — a watch
goes on without repeating itself, `task logs` asks for the same attempt from the offset it got
to — and a stream refused for lack of slots (RESOURCE_EXHAUSTED) is asked again, saying so."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from raftsched import rpc
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.client.client import Client
from raftsched.errors import RaftschedError

AGED = ((rpc.STREAM_END_KEY, rpc.STREAM_END_MAX_AGE),)


class Streams(pb_grpc.SchedulerServicer):  # type: ignore[misc]
    """The first WatchJob is refused (no slot), the second ends for its age, the third runs to
    the job's end; the first TaskLogs ends for its age after 3 bytes, the second goes on."""

    def __init__(self) -> None:
        self.watches = 0
        self.log_requests: list[Any] = []

    def WatchJob(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.watches += 1
        if self.watches == 1:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          "8 streams are open for token x (MAX_STREAMS_PER_CALLER); retry later")
        yield pb.Job(job_id=request.job_id, state="RUNNING")
        if self.watches == 2:
            context.set_trailing_metadata(AGED)
            return
        yield pb.Job(job_id=request.job_id, state="SUCCEEDED")

    def TaskLogs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.log_requests.append(request)
        yield pb.TaskLogsChunk(attempt=3, fence=7, cluster_id="east", attempt_state="RUNNING")
        if len(self.log_requests) == 1:
            yield pb.TaskLogsChunk(data=b"abc", offset=10)
            context.set_trailing_metadata(AGED)
            return
        yield pb.TaskLogsChunk(data=b"def", offset=request.offset)


@pytest.fixture
def served() -> Iterator[tuple[Streams, str]]:
    servicer = Streams()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SchedulerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def test_a_watch_waits_for_a_slot_then_resumes_after_its_age_without_repeating(
        served: tuple[Streams, str]) -> None:
    servicer, address = served
    notices: list[RaftschedError] = []
    with Client([address], on_retry=lambda error, delay_s: notices.append(error)) as client:
        states = [job.state for job in client.watch("j")]
    assert states == ["RUNNING", "SUCCEEDED"] and servicer.watches == 3
    assert len(notices) == 1 and "MAX_STREAMS_PER_CALLER" in notices[0].message


def test_task_logs_resume_the_same_attempt_from_the_offset_they_got_to(
        served: tuple[Streams, str]) -> None:
    servicer, address = served
    with Client([address]) as client:
        messages = list(client.task_logs("j", "t", follow=True, tail_bytes=5))
    assert [m.data for m in messages] == [b"", b"abc", b"def"]  # one head, then the data
    first, second = servicer.log_requests
    assert (first.attempt, first.offset, first.tail_bytes) == (0, 0, 5)
    assert (second.attempt, second.offset, second.tail_bytes, second.follow) == (3, 13, 0, True)
