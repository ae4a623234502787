"""The agent core against an in-memory leader (`tests.support.agent.FakeSession`)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.agent import NEVER_STARTED_REASON, OUTBOX_DIR, Agent, AgentError, attempts_root
from agent.executors import MockExecutor, SubprocessExecutor
from agent.model import (
    AttemptRecord,
    AttemptState,
    Beat,
    Directives,
    KillDirective,
    ReportKind,
    Resources,
)
from agent.outbox import Outbox
from agent.session import Unknown
from raftsched.client.retry import Backoff
from tests.support.agent import (
    FakeSession,
    assignment,
    config,
    kill_attempt_processes,
    running_agent,
)
from tests.support.waiting import wait_until

STARTED, REJECTED, FINISHED, KILLED = (ReportKind.STARTED, ReportKind.REJECTED,
                                       ReportKind.FINISHED, ReportKind.KILLED)


@pytest.fixture
def executor() -> Iterator[MockExecutor]:
    subject = MockExecutor()
    try:
        yield subject
    finally:
        subject.close()


def _wait_kinds(session: FakeSession, fence: int, *kinds: ReportKind) -> None:
    wait_until(lambda: all(k in session.kinds(fence) for k in kinds),
               f"reports {[k.name for k in kinds]} for fence {fence}")


def test_runs_an_assignment_and_reports_started_then_finished(
        tmp_path: Path, executor: MockExecutor) -> None:
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1, command=("mock", "sleep_ms=100", "exit=3"),
                                  resources=Resources(1500, 100, 1)))
        _wait_kinds(session, 1, STARTED)
        # While it runs, heartbeats carry its fence and the capacity it does not use.
        beat = wait_until(lambda: next((b for b in reversed(session.beats) if b.running), None),
                          "a heartbeat listing the attempt")
        assert beat is not None and beat.running == (1,)
        assert beat.free == Resources(4000 - 1500, 4096 - 100, 0)
        _wait_kinds(session, 1, FINISHED)
        wait_until(lambda: agent.pending_reports() == 0, "the outbox to drain")
    assert session.kinds(1) == [STARTED, FINISHED]
    finished = session.report_of(1, FINISHED)
    assert finished is not None and (finished.exit_code, finished.timed_out) == (3, False)
    assert executor.started == [1]
    registration = session.registrations[0]
    assert (registration.cluster_id, registration.incarnation) == ("east", 1)
    assert registration.capacity == Resources(4000, 4096, 1)


def test_a_redelivered_fence_is_never_run_twice(tmp_path: Path,
                                                executor: MockExecutor) -> None:
    session = FakeSession()
    session.fail_reports = 4  # STARTED cannot be committed for a while: the fence keeps coming
    with running_agent(config(tmp_path), session, executor):
        session.assign(assignment(1, command=("mock", "sleep_ms=300")))
        wait_until(lambda: executor.started, "the attempt to start")
        session.wait_beats(4, "redeliveries while its STARTED is not committed")
        _wait_kinds(session, 1, FINISHED)
        session.wait_beats(3, "heartbeats after it finished")
    assert executor.started == [1]
    assert session.kinds(1) == [STARTED, FINISHED]  # one STARTED waited in the outbox


def test_a_redelivery_crossing_the_ack_draws_no_second_answer(
        tmp_path: Path, executor: MockExecutor) -> None:
    session = FakeSession()
    session.keep_redelivering = True  # answers composed before STARTED's commit keep coming
    with running_agent(config(tmp_path), session, executor):
        session.assign(assignment(1, command=("mock", "sleep_ms=300")))
        _wait_kinds(session, 1, FINISHED)
        session.wait_beats(3, "heartbeats after it finished")
    assert executor.started == [1]
    assert session.kinds(1) == [STARTED, FINISHED]


def test_a_redelivery_after_the_crossing_window_is_acknowledged_again(
        tmp_path: Path, executor: MockExecutor) -> None:
    session = FakeSession()
    session.keep_redelivering = True
    agent_config = replace(config(tmp_path), ack_crossing_window_ms=0)
    with running_agent(agent_config, session, executor):
        session.assign(assignment(1, command=("mock", "sleep_ms=300")))
        _wait_kinds(session, 1, STARTED)
        wait_until(lambda: session.kinds(1).count(STARTED) >= 2, "STARTED sent again")
        _wait_kinds(session, 1, FINISHED)
        session.wait_beats(3, "heartbeats after it finished")
    assert executor.started == [1]
    assert session.kinds(1).count(FINISHED) == 1


def test_a_lower_fence_for_the_same_task_is_rejected(tmp_path: Path,
                                                     executor: MockExecutor) -> None:
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor):
        session.assign(assignment(10, command=("mock", "sleep_ms=60000")))
        _wait_kinds(session, 10, STARTED)
        session.assign(assignment(5))
        _wait_kinds(session, 5, REJECTED)
    rejected = session.report_of(5, REJECTED)
    assert rejected is not None and "stale fence 5" in rejected.reason
    assert executor.started == [10]


def test_directives_from_a_lower_term_are_ignored_also_after_a_restart(
        tmp_path: Path, executor: MockExecutor) -> None:
    session = FakeSession(term=5)
    with running_agent(config(tmp_path), session, executor):
        session.assign(assignment(1, command=("mock", "sleep_ms=60000")))
        _wait_kinds(session, 1, STARTED)
        session.queue(Directives(4, (assignment(2, task_id="other"),),
                                 (KillDirective("job", "t", 1),)))
        session.wait_beats(2, "the stale answer to be handled")
        assert executor.running() == [1]   # not killed
        assert executor.started == [1]     # not run
        assert session.kinds(2) == []      # not even answered
    # The term is durable: a restarted agent ignores term 4 from its first heartbeat on.
    restarted = FakeSession(term=4)
    restarted.assign(assignment(3, task_id="third"))
    with running_agent(config(tmp_path), restarted, executor):
        restarted.wait_beats(3, "heartbeats to the deposed leader")
    assert restarted.kinds(3) == []
    assert executor.started == [1]


def test_no_capacity_is_rejected_and_the_fence_never_runs_later(
        tmp_path: Path, executor: MockExecutor) -> None:
    session = FakeSession()
    with running_agent(config(tmp_path, capacity=Resources(1000, 1000, 0)), session, executor):
        session.assign(assignment(1, task_id="a", command=("mock", "sleep_ms=60000"),
                                  resources=Resources(600, 10, 0)))
        _wait_kinds(session, 1, STARTED)
        session.assign(assignment(2, task_id="b", resources=Resources(600, 10, 0)))
        _wait_kinds(session, 2, REJECTED)
        session.assign(assignment(3, task_id="c", resources=Resources(0, 0, 1)))
        _wait_kinds(session, 3, REJECTED)
        rejected = session.report_of(2, REJECTED)
        assert rejected is not None and rejected.reason.startswith("no capacity")
        executor.kill(1)  # room again ...
        _wait_kinds(session, 1, KILLED)
        session.assign(assignment(2, task_id="b", resources=Resources(600, 10, 0)))
        session.wait_beats(3, "the old fence to come again")
    assert executor.started == [1]  # ... but fence 2 was refused once and stays refused


def test_a_kill_directive_kills_the_running_attempt(tmp_path: Path,
                                                    executor: MockExecutor) -> None:
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1, command=("mock", "sleep_ms=60000")))
        _wait_kinds(session, 1, STARTED)
        session.kill("job", "t", 1)
        _wait_kinds(session, 1, KILLED)
        wait_until(lambda: not session.kills, "the kill directive to be settled")
        assert agent.running() == []
    assert executor.running() == []
    assert session.kinds(1) == [STARTED, KILLED]


def test_a_kill_for_an_unknown_fence_is_answered_and_the_fence_never_runs(
        tmp_path: Path, executor: MockExecutor) -> None:
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor):
        # The kill and the assignment of one fence in one answer: the kill wins.
        session.queue(Directives(1, (assignment(4),), (KillDirective("job", "t", 4),)))
        _wait_kinds(session, 4, KILLED, REJECTED)
        killed = session.report_of(4, KILLED)
        assert killed is not None and killed.reason == "not running on this agent"
        # A kill alone, then (against the leader's contract) the assignment after all.
        session.kill("job", "u", 6)
        _wait_kinds(session, 6, KILLED)
        session.assign(assignment(6, task_id="u"))
        session.wait_beats(3, "the assignment to be handled")
    assert executor.started == []
    assert STARTED not in session.kinds(4) + session.kinds(6)


def test_a_restart_mid_task_reports_the_result_once(tmp_path: Path,
                                                    executor: MockExecutor) -> None:
    session = FakeSession()
    session.keep_redelivering = True
    with running_agent(config(tmp_path), session, executor):
        session.assign(assignment(1, command=("mock", "sleep_ms=400", "exit=0")))
        _wait_kinds(session, 1, STARTED)
    # The same executor outlives the agent, as a real wrapper outlives a real agent.
    assert executor.running() == [1]
    with running_agent(config(tmp_path), session, executor):
        wait_until(lambda: len(session.registrations) == 2, "the second registration")
        assert session.registrations[1].incarnation == 2
        _wait_kinds(session, 1, FINISHED)
        session.wait_beats(3, "redeliveries after the restart")
    assert executor.started == [1]
    assert session.kinds(1).count(FINISHED) == 1
    assert [k.running for k in session.registrations[1].known] == [True]


def test_a_restarted_agent_reports_what_finished_while_it_was_down(tmp_path: Path) -> None:
    root = tmp_path / "data" / "attempts"
    gate = tmp_path / "gate"
    session = FakeSession()
    try:
        executor = SubprocessExecutor(root)
        with running_agent(config(tmp_path / "data"), session, executor):
            session.assign(assignment(1, command=("sh", "-c", f"while [ ! -e {gate} ]; "
                                                              "do sleep 0.02; done; exit 3")))
            _wait_kinds(session, 1, STARTED)
        executor.close()
        gate.touch()  # it finishes while no agent runs
        wait_until(lambda: (root / f"{1:020d}" / "result.json").exists(), "the result file")
        with running_agent(config(tmp_path / "data"), session, SubprocessExecutor(root)):
            _wait_kinds(session, 1, FINISHED)
            session.wait_beats(3, "a few more heartbeats")
    finally:
        kill_attempt_processes(root)
    finished = session.report_of(1, FINISHED)
    assert finished is not None and finished.exit_code == 3
    assert session.kinds(1) == [STARTED, FINISHED]
    assert [(k.fence, k.running) for k in session.registrations[1].known] == [(1, False)]


def test_a_report_stays_in_the_outbox_until_acked(tmp_path: Path,
                                                  executor: MockExecutor) -> None:
    session = FakeSession()
    session.fail_reports = 1  # the first Report call: outcome unknown, nothing committed
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1))
        _wait_kinds(session, 1, STARTED, FINISHED)
        wait_until(lambda: agent.pending_reports() == 0, "the outbox to drain")
    assert session.report_calls >= 2
    assert session.kinds(1) == [STARTED, FINISHED]  # resent, committed and acked once


def test_a_lost_answer_is_resent_and_the_outbox_drains(tmp_path: Path,
                                                       executor: MockExecutor) -> None:
    session = FakeSession()
    session.lose_report_answers = 1  # committed, but the agent never hears so
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1, command=("mock", "sleep_ms=100")))
        _wait_kinds(session, 1, FINISHED)
        wait_until(lambda: agent.pending_reports() == 0, "the outbox to drain")
    assert session.kinds(1).count(STARTED) == 2  # the leader dedupes the resend
    assert session.kinds(1).count(FINISHED) == 1


def test_a_report_without_a_verdict_stays_and_is_resent(tmp_path: Path,
                                                        executor: MockExecutor) -> None:
    session = FakeSession()
    session.leave_last_unanswered = 1
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1, task_id="a"), assignment(2, task_id="b"))
        _wait_kinds(session, 1, STARTED)
        _wait_kinds(session, 2, STARTED)
        _wait_kinds(session, 2, FINISHED)
        wait_until(lambda: agent.pending_reports() == 0, "the outbox to drain")
    assert session.kinds(1).count(FINISHED) == 1
    assert session.kinds(2).count(FINISHED) == 1


def test_reregisters_with_its_attempts_when_the_leader_asks(tmp_path: Path,
                                                           executor: MockExecutor) -> None:
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor):
        session.assign(assignment(1, command=("mock", "sleep_ms=60000")))
        _wait_kinds(session, 1, STARTED)
        session.reregister_next = True
        wait_until(lambda: len(session.registrations) >= 2, "a second registration")
    again = session.registrations[1]
    assert again.incarnation == session.registrations[0].incarnation
    assert [(k.fence, k.running) for k in again.known] == [(1, True)]


def test_attempts_the_leader_does_not_know_are_stopped_at_registration(
        tmp_path: Path, executor: MockExecutor) -> None:
    """`Registered.stop` (issue 21): the agent stops those of its running attempts, by the
    kill path, and touches nothing else (a fence it does not run draws no report)."""
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1, task_id="a", command=("mock", "sleep_ms=60000")),
                       assignment(2, task_id="b", command=("mock", "sleep_ms=60000")))
        _wait_kinds(session, 1, STARTED)
        _wait_kinds(session, 2, STARTED)
        session.stop_on_register = (KillDirective("job", "a", 1), KillDirective("x", "y", 99))
        session.reregister_next = True
        _wait_kinds(session, 1, KILLED)
        assert agent.running() == [2]
    assert session.kinds(1) == [STARTED, KILLED] and session.kinds(99) == []
    assert session.kinds(2) == [STARTED]


def test_one_data_dir_serves_one_agent(tmp_path: Path, executor: MockExecutor) -> None:
    first = Agent(config(tmp_path), FakeSession(), executor)
    try:
        with pytest.raises(AgentError, match="in use by another agent"):
            Agent(config(tmp_path), FakeSession(), executor)
    finally:
        first.close()
    Agent(config(tmp_path), FakeSession(), executor).close()


def test_an_attempt_recorded_but_never_launched_is_rejected_after_a_restart(
        tmp_path: Path) -> None:
    """The agent stopped between recording an attempt and launching its wrapper: the restarted
    agent rejects it at once (an infrastructure failure the scheduler retries) instead of
    listing it as running and waiting for a wrapper that will never report."""
    data = tmp_path / "data"
    outbox = Outbox(data / OUTBOX_DIR)
    outbox.write(records=[AttemptRecord(
        5, "job", "t", 1, AttemptState.RUNNING, Resources(),
        str(attempts_root(data) / f"{5:020d}"), 0)])
    outbox.close()
    session = FakeSession()
    with running_agent(config(data), session, SubprocessExecutor(attempts_root(data))):
        _wait_kinds(session, 5, REJECTED)
    assert [k.fence for k in session.registrations[0].known] == []
    rejected = session.report_of(5, REJECTED)
    assert rejected is not None and rejected.reason == NEVER_STARTED_REASON


def test_a_finished_report_carries_the_capacity_it_freed(tmp_path: Path,
                                                         executor: MockExecutor) -> None:
    """The leader can refill the slot when the report commits, not at the next heartbeat."""
    session = FakeSession()
    with running_agent(config(tmp_path), session, executor) as agent:
        session.assign(assignment(1, command=("mock", "sleep_ms=50"),
                                  resources=Resources(1500, 100, 0)))
        _wait_kinds(session, 1, FINISHED)
        wait_until(lambda: agent.pending_reports() == 0, "the outbox to drain")
    calls = [(o, kinds) for o, kinds in zip(session.observations, session.report_call_kinds,
                                            strict=True)]
    observed = next(o for o, kinds in calls if FINISHED in kinds)
    assert observed is not None and observed.free == Resources(4000, 4096, 1)
    started_with, kinds = next((o, kinds) for o, kinds in calls if STARTED in kinds)
    # a busy machine may flush STARTED and FINISHED in one call: it then tells the free after
    # both; alone, STARTED tells the free while the attempt holds its 1.5 cpu and 100 MB
    held = Resources(4000, 4096, 1) if FINISHED in kinds else Resources(2500, 3996, 1)
    assert started_with is not None and started_with.free == held
    sequence = [o.seq for o, _ in calls if o is not None] + [b.seq for b in session.beats]
    assert len(set(sequence)) == len(sequence)  # one counter for heartbeats and reports


class _BusyPartition(MockExecutor):
    """An executor that sees less free than the agent's own accounting (a shared partition)."""

    def observed_free(self) -> Resources | None:
        return Resources(500, 10**9, 10**9)


def test_the_agent_admits_no_more_than_its_executor_sees_free(tmp_path: Path) -> None:
    session = FakeSession()
    executor = _BusyPartition()
    try:
        with running_agent(config(tmp_path), session, executor):
            session.wait_beats(1, "a heartbeat")
            assert session.beats[-1].free == Resources(500, 4096, 1)  # cpu: the executor's view
            session.assign(assignment(1, command=("mock",), resources=Resources(1000, 10, 0)))
            _wait_kinds(session, 1, REJECTED)  # 1 cpu asked, half a cpu idle
    finally:
        executor.close()
    assert executor.started == []


class _UnreachableLeader(FakeSession):
    """Registers, then every heartbeat's outcome is unknown (the leader went away)."""

    def heartbeat(self, beat: Beat) -> Directives:
        raise Unknown("injected: no answer")


class _RecordingStop(threading.Event):
    """The agent's stop event: records each wait and is set after `waits` of them."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self._limit = waits

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self._limit:
            self.set()
        return self.is_set()


def test_failed_heartbeats_wait_the_client_retry_policys_jittered_backoff(
        tmp_path: Path, executor: MockExecutor) -> None:
    """One backoff for the client and the agent's session: the waits after failed heartbeats
    are `client.retry.Backoff`'s draws from the injected random source (jittered, capped)."""
    stop = _RecordingStop(waits=10)
    agent_config = config(tmp_path)
    agent = Agent(agent_config, _UnreachableLeader(), executor, stop=stop,
                  rng=random.Random(5))
    try:
        agent._heartbeat_loop()
    finally:
        agent.close()
    backoff = Backoff(agent_config.retry_backoff_initial_ms / 1000,
                      agent_config.retry_backoff_max_ms / 1000)
    expected_rng = random.Random(5)
    assert stop.waits == [backoff.delay_s(n, expected_rng) for n in range(1, 11)]
    for n, wait_s in enumerate(stop.waits, 1):
        ceiling_s = min(backoff.max_s, backoff.initial_s * 2 ** (n - 1))
        assert wait_s is not None and (1 - backoff.jitter) * ceiling_s <= wait_s <= ceiling_s
    assert len(set(stop.waits)) == len(stop.waits)  # jittered: no two agents retry in step
