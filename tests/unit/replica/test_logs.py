"""The leader's log broker (raftsched.replica.logs): a client's request rides on the agent's
next heartbeat answer; the agent's answer reaches that client only; bounded and timed."""

from __future__ import annotations

import threading

import pytest

from raftsched.errors import Code, RaftschedError
from raftsched.protocol import LogChunk
from raftsched.replica import logs
from raftsched.replica.logs import LogBroker


def test_a_request_is_handed_to_its_cluster_once_and_answered_to_its_asker() -> None:
    woken = threading.Event()
    broker = LogBroker(woken.set)
    answer: list[LogChunk] = []
    asker = threading.Thread(target=lambda: answer.append(
        broker.fetch("east", 7, "stderr", -100, timeout_s=30)))
    asker.start()
    assert woken.wait(30)
    taken = broker.take("east")
    while not taken:
        taken = broker.take("east")
    assert broker.take("west") == () and broker.take("east") == ()
    (request,) = taken
    assert (request.fence, request.stream, request.offset) == (7, "stderr", -100)
    assert not broker.deliver("west", LogChunk(request.request_id, 7, 0, b"x", 1))  # not its
    assert not broker.deliver("east", LogChunk(request.request_id, 8, 0, b"x", 1))  # fence
    assert broker.deliver("east", LogChunk(request.request_id, 7, 3, b"abc", 6))
    asker.join(30)
    assert answer == [LogChunk(request.request_id, 7, 3, b"abc", 6)]
    assert not broker.deliver("east", LogChunk(request.request_id, 7, 3, b"abc", 6))  # once
    assert broker.waiting() == 0


def test_an_unanswered_request_times_out_and_is_forgotten() -> None:
    broker = LogBroker(lambda: None)
    with pytest.raises(RaftschedError) as raised:
        broker.fetch("east", 7, "stdout", 0, timeout_s=0.01)
    assert raised.value.code == Code.UNAVAILABLE
    assert "did not send the output" in raised.value.message
    assert broker.take("east") == () and broker.waiting() == 0


def test_waiting_requests_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "MAX_WAITING_LOG_REQUESTS", 1)
    broker = LogBroker(lambda: None)
    first = threading.Thread(target=_times_out, args=(broker, 1, 5.0))
    first.start()
    while broker.waiting() == 0:
        threading.Event().wait(0.01)
    with pytest.raises(RaftschedError) as raised:
        broker.fetch("east", 2, "stdout", 0, timeout_s=5)
    assert raised.value.code == Code.RESOURCE_EXHAUSTED
    assert "MAX_WAITING_LOG_REQUESTS" in raised.value.message
    first.join(30)


def test_one_heartbeat_hands_out_a_bounded_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "MAX_LOG_REQUESTS_PER_BEAT", 2)
    broker = LogBroker(lambda: None)
    askers = [threading.Thread(target=_times_out, args=(broker, fence, 2.0))
              for fence in range(3)]
    for asker in askers:
        asker.start()
    while broker.waiting() < 3:
        threading.Event().wait(0.01)
    assert len(broker.take("east")) == 2 and len(broker.take("east")) == 1
    for asker in askers:
        asker.join(30)


def _times_out(broker: LogBroker, fence: int, timeout_s: float) -> None:
    with pytest.raises(RaftschedError):
        broker.fetch("east", fence, "stdout", 0, timeout_s=timeout_s)
