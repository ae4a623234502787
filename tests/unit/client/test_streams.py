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
from raftsched.errors import Code, RaftschedError

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


class Window(pb_grpc.SchedulerServicer):  # type: ignore[misc]
    """A replica keeping the events after index `oldest`: older resumes are too old; a stream
    it serves sends its start, one event of the next entry, and ends for its age after it."""

    def __init__(self, oldest: int) -> None:
        self.oldest = oldest
        self.requests: list[int] = []

    def WatchEvents(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self.requests.append(request.from_index)
        if request.from_index < self.oldest:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"too old: the oldest index it can resume from is {self.oldest}")
        yield pb.Event(index=request.from_index, kind="progress")
        yield pb.Event(index=request.from_index + 1, kind="job", job_id="j", state="RUNNING")
        yield pb.Event(index=request.from_index + 1, kind="progress")  # where it ends
        context.set_trailing_metadata(AGED)


@pytest.fixture
def windows() -> Iterator[list[tuple[Window, str]]]:
    """Three stand-in replicas: a restarted one (keeps events from 100), two that keep more."""
    served: list[tuple[Window, str]] = []
    servers = []
    try:
        for oldest in (100, 50, 0):
            servicer = Window(oldest)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            pb_grpc.add_SchedulerServicer_to_server(servicer, server)
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            servers.append(server)
            served.append((servicer, f"127.0.0.1:{port}"))
        yield served
    finally:
        for server in servers:
            server.stop(grace=None)


def test_a_too_old_replica_is_left_for_one_that_keeps_the_events(
        windows: list[tuple[Window, str]]) -> None:
    (restarted, a), (middle, b), (full, c) = windows
    with Client([a, b, c]) as client:
        events = client.watch_events(10)
        got = [next(events) for _ in range(3)]
        assert [(e.index, e.kind) for e in got] == [(10, "progress"), (11, "job"),
                                                    (11, "progress")]
        assert (restarted.requests, middle.requests, full.requests) == ([10], [10], [10])
        # Resumed after the age end, from 11: the first replica is asked again (something
        # came meanwhile: its window may cover it now), then the others in turn.
        assert [(e.index, e.kind) for e in (next(events), next(events))] == \
            [(11, "progress"), (12, "job")]
        assert (restarted.requests, middle.requests, full.requests) == ([10, 11], [10, 11],
                                                                        [10, 11])


def test_too_old_on_every_replica_is_raised_naming_them(
        windows: list[tuple[Window, str]]) -> None:
    (_, a), (_, b), (_, c) = windows
    with Client([a, b]) as client, pytest.raises(RaftschedError) as raised:
        next(iter(client.watch_events(10)))
    assert raised.value.code == Code.FAILED_PRECONDITION
    assert "too old" in raised.value.message and a in raised.value.message \
        and b in raised.value.message
    with Client([a, c]) as client:  # with one that keeps it: no error
        assert next(iter(client.watch_events(10))).kind == "progress"
