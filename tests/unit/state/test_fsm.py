"""Table tests of every state-machine command, including each rejection."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.protocol import ReportVerdict
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, invariants, snapshot
from raftsched.state.feasibility import Unfit
from raftsched.state.model import AttemptState, JobState, TaskState
from raftsched.state.outcome import Applied, Outcome, Rejected
from raftsched.state.queries import iter_ready
from raftsched.state.queues import STALE_READY_SLACK
from raftsched.state.results import (
    BarrierResult,
    ClusterRegistered,
    ClusterStatusChanged,
    DropReason,
    JobCancelled,
    JobSubmitted,
    MarkedLost,
    ReportResult,
    TickResult,
)
from tests.support.fsmkit import Harness, job_doc, task_doc

DIAMOND = [task_doc("a"), task_doc("b", ["a"]), task_doc("c", ["a"]), task_doc("d", ["b", "c"])]


def rejected(outcome: Outcome, code: Code, fragment: str) -> None:
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == code, outcome
    assert fragment in outcome.reason, outcome.reason


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east")
    harness.register("west", caps=("linux", "gpu"), gpu=2)
    return harness


# --- submit -------------------------------------------------------------------------------------


def test_submit_creates_job_with_roots_runnable(h: Harness) -> None:
    assert h.ok(c.JobSubmit("j1", doc_to_wire(job_doc(DIAMOND)), h.now_ms)) == JobSubmitted(
        "j1", created=True)
    assert h.states("j1") == {"a": "RUNNABLE", "b": "PENDING", "c": "PENDING", "d": "PENDING"}
    job = h.job("j1")
    assert job.state == JobState.PENDING
    assert job.counts[TaskState.RUNNABLE] == 1 and job.counts[TaskState.PENDING] == 3
    assert h.task("j1", "d").remaining_deps == 2


def _corrupt(path: tuple[int, ...], value: object) -> list[object]:
    wire = doc_to_wire(job_doc([task_doc("a"), task_doc("b", ["a"])]))
    target: Any = wire
    for index in path[:-1]:
        target = target[index]
    target[path[-1]] = value
    return wire


@pytest.mark.parametrize(("wire", "fragment"), [
    (_corrupt((7, 0, 9), ["a"]), "depends on itself"),
    (_corrupt((7, 0, 9), ["zz"]), "unknown dependency 'zz'"),
    (_corrupt((7, 0, 9), ["b"]), "cycle"),
    (_corrupt((7, 1, 0), "a"), "duplicate"),
    (_corrupt((3,), 101), "priority"),
    (_corrupt((7, 0, 1), []), "command"),
    (_corrupt((7, 0, 4), 0), "cpu"),
    (_corrupt((0,), 99), "malformed"),
    (["not", "a", "spec"], "malformed"),
])
def test_invalid_spec_is_rejected_and_changes_nothing(h: Harness, wire: list[object],
                                                      fragment: str) -> None:
    before = snapshot.dump(h.state)
    rejected(h.run(c.JobSubmit("j1", wire, h.now_ms)), Code.INVALID_ARGUMENT, fragment)
    assert snapshot.dump(h.state) == before


def test_duplicate_job_id_is_rejected(h: Harness) -> None:
    h.submit("j1", job_doc(DIAMOND))
    rejected(h.submit("j1", job_doc([task_doc("x")])), Code.ALREADY_EXISTS, "j1")


def test_idempotent_submit_same_key_same_spec_returns_same_job(h: Harness) -> None:
    doc = job_doc(DIAMOND, idempotency_key="k1")
    assert h.ok(c.JobSubmit("j1", doc_to_wire(doc), h.now_ms)) == JobSubmitted("j1", True)
    assert h.ok(c.JobSubmit("j2", doc_to_wire(doc), h.now_ms)) == JobSubmitted("j1", False)
    assert list(h.state.jobs) == ["j1"]


def test_idempotent_submit_same_key_other_spec_conflicts(h: Harness) -> None:
    h.submit("j1", job_doc(DIAMOND, idempotency_key="k1"))
    other = job_doc([task_doc("solo")], idempotency_key="k1")
    rejected(h.submit("j2", other), Code.ALREADY_EXISTS, "different spec")


def test_idempotency_keys_are_scoped_per_tenant(h: Harness) -> None:
    h.submit("j1", job_doc(DIAMOND, idempotency_key="k1", tenant="t1"))
    result = h.submit("j2", job_doc(DIAMOND, idempotency_key="k1", tenant="t2"))
    assert result == Applied(JobSubmitted("j2", created=True))


def test_idempotency_key_expires_after_ttl(h: Harness) -> None:
    doc = job_doc(DIAMOND, idempotency_key="k1")
    h.submit("j1", doc)
    assert h.tick(limits.IDEMPOTENCY_TTL_MS).expired_keys == 1
    assert h.expect(c.JobSubmit("j2", doc_to_wire(doc), h.now_ms), JobSubmitted).created is True


def test_live_job_bound_is_resource_exhausted(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_LIVE_JOBS", 1)
    h.submit("j1", job_doc(DIAMOND))
    rejected(h.submit("j2", job_doc(DIAMOND)), Code.RESOURCE_EXHAUSTED, "MAX_LIVE_JOBS")


# --- assign -------------------------------------------------------------------------------------


def test_assign_issues_strictly_growing_fences_and_reserves(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", resources={"cpu": 2, "memory_mb": 100}),
                            task_doc("b", resources={"cpu": 1, "memory_mb": 50})]))
    result = h.assign(("j1", "a", "east"), ("j1", "b", "east"))
    fences = [fence for _, fence in result.assigned]
    assert fences == [1, 2] and h.state.fence == 2
    east = h.state.clusters["east"]
    assert (east.reserved_cpu_milli, east.reserved_memory_mb) == (3000, 150)
    assert h.states("j1") == {"a": "ASSIGNED", "b": "ASSIGNED"}
    assert h.job("j1").state == JobState.RUNNING


@pytest.mark.parametrize(("setup", "item", "reason", "detail"), [
    ("none", ("nope", "a", "east"), DropReason.JOB_NOT_FOUND, "job not found"),
    ("none", ("j1", "nope", "east"), DropReason.TASK_NOT_FOUND, "task not found"),
    ("none", ("j1", "a", "nowhere"), DropReason.CLUSTER_NOT_REGISTERED,
     "cluster not registered"),
    ("none", ("j1", "b", "east"), DropReason.TASK_NOT_RUNNABLE, "PENDING"),
    ("suspect", ("j1", "a", "east"), Unfit.CLUSTER_NOT_READY, "SUSPECT"),
    ("none", ("j1", "g", "east"), Unfit.MISSING_CAPABILITIES, "lacks capabilities ['gpu']"),
    ("none", ("j1", "p", "east"), Unfit.PINNED_ELSEWHERE, "pinned to cluster west"),
    ("none", ("j1", "big", "east"), Unfit.NO_ROOM, "no room: cpu_milli 64000 > 8000 free"),
])
def test_assign_drops_what_no_longer_holds(h: Harness, setup: str, item: tuple[str, str, str],
                                           reason: DropReason | Unfit, detail: str) -> None:
    h.submit("j1", job_doc([
        task_doc("a"), task_doc("b", ["a"]), task_doc("g", requires=["gpu"]),
        task_doc("p", cluster="west"), task_doc("big", resources={"cpu": 64}),
    ]))
    if setup == "suspect":
        h.status("east", c.ClusterStatus.SUSPECT)
    before = snapshot.dump(h.state)
    result = h.assign(item)
    assert result.assigned == ()
    [dropped] = result.dropped
    assert dropped.placement == c.Placement(*item)
    assert dropped.reason is reason and detail in dropped.detail
    assert snapshot.dump(h.state) == before


def test_assign_same_task_twice_in_one_batch_keeps_the_first(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    result = h.assign(("j1", "a", "east"), ("j1", "a", "west"))
    assert [p.cluster_id for p, _ in result.assigned] == ["east"]
    assert result.dropped[0].reason is DropReason.TASK_NOT_RUNNABLE
    assert "ASSIGNED" in result.dropped[0].detail


def test_assign_within_one_batch_respects_capacity(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc(f"t{i}", resources={"cpu": 3}) for i in range(4)]))
    result = h.assign(*[("j1", f"t{i}", "east") for i in range(4)])
    assert len(result.assigned) == 2  # 8 cpu / 3 each
    assert [d.reason for d in result.dropped] == [Unfit.NO_ROOM, Unfit.NO_ROOM]


# --- reports ------------------------------------------------------------------------------------


def test_success_releases_reservation_and_readies_dependents(h: Harness) -> None:
    h.submit("j1", job_doc(DIAMOND))
    h.run_task("east", "j1", "a")
    assert h.states("j1") == {"a": "SUCCEEDED", "b": "RUNNABLE", "c": "RUNNABLE", "d": "PENDING"}
    assert h.state.clusters["east"].reserved_cpu_milli == 0
    h.run_task("east", "j1", "b")
    assert h.task("j1", "d").state == TaskState.PENDING
    h.run_task("west", "j1", "c")
    h.run_task("west", "j1", "d")
    assert h.job("j1").state == JobState.SUCCEEDED
    assert h.state.live_jobs == 0


def test_duplicate_reports_are_idempotent_and_noted(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    fence = h.assign_one("j1", "a", "east")
    assert h.started("east", "j1", "a", fence) == "accepted"
    assert h.started("east", "j1", "a", fence) == "duplicate"
    assert h.finished("east", "j1", "a", fence) == "accepted"
    before = h.task("j1", "a").attempts[-1]
    assert h.finished("east", "j1", "a", fence) == "duplicate"
    task = h.task("j1", "a")
    assert task.attempts[-1] == before and len(task.attempts) == 1
    assert [n.kind for n in task.notes] == ["duplicate", "duplicate"]


def test_stale_fence_result_is_rejected_and_recorded(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    old = h.assign_one("j1", "a", "east")
    h.started("east", "j1", "a", old)
    h.status("east", c.ClusterStatus.LOST)
    assert h.current("j1", "a").state == AttemptState.LOST
    assert h.state.clusters["east"].kills == {}  # east hears nothing until it registers again
    h.register("east", incarnation=2, known=(c.KnownAttempt("j1", "a", old, True),))
    assert old in h.state.clusters["east"].kills  # the zombie it still runs is killed
    new = h.assign_one("j1", "a", "west")
    assert new > old
    assert h.finished("east", "j1", "a", old, exit_code=0) == "late"
    task = h.task("j1", "a")
    assert task.state == TaskState.ASSIGNED and task.current is not None
    assert task.current.fence == new
    assert task.notes[-1].kind == "late" and task.notes[-1].fence == old
    assert old not in h.state.clusters["east"].kills  # the report proves the process is gone


def test_report_from_the_wrong_cluster_is_refused(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    fence = h.assign_one("j1", "a", "east")
    assert h.finished("west", "j1", "a", fence) == "wrong_cluster"
    assert h.task("j1", "a").state == TaskState.ASSIGNED


def test_report_for_unknown_fence_or_task_is_not_found(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    fence = h.assign_one("j1", "a", "east")
    assert h.finished("east", "j1", "a", fence + 7) == "not_found"
    assert h.finished("east", "j1", "zz", fence) == "not_found"
    assert h.finished("east", "nope", "a", fence) == "not_found"


def test_rejection_requeues_without_consuming_an_app_attempt(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", retry={"max_attempts": 1})]))
    fence = h.assign_one("j1", "a", "east")
    assert h.rejected("east", "j1", "a", fence) == "accepted"
    task = h.task("j1", "a")
    assert task.state == TaskState.RETRY_WAIT
    assert (task.app_failures, task.infra_failures) == (0, 1)
    assert task.retry_at_ms is not None
    assert task.retry_at_ms - h.now_ms <= limits.INFRA_BACKOFF_MS * 1.2
    h.tick(limits.INFRA_BACKOFF_MAX_MS)
    assert task.state == TaskState.RUNNABLE
    h.run_task("west", "j1", "a")
    assert h.job("j1").state == JobState.SUCCEEDED


def test_infrastructure_budget_is_bounded(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    for _ in range(limits.MAX_INFRA_RETRIES + 1):
        fence = h.assign_one("j1", "a", "east")
        h.rejected("east", "j1", "a", fence)
        h.tick(limits.INFRA_BACKOFF_MAX_MS * 2)
    task = h.task("j1", "a")
    assert task.state == TaskState.FAILED
    assert "infrastructure retry budget" in task.reason
    assert task.app_failures == 0


def test_killed_report_of_live_attempt_is_preemption(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")]))
    fence = h.assign_one("j1", "a", "east")
    h.started("east", "j1", "a", fence)
    verdict = h.report("east", c.Report(c.ReportKind.KILLED, "j1", "a", fence, reason="oom"))
    assert verdict == ["accepted"]
    assert h.task("j1", "a").attempts[-1].state == AttemptState.PREEMPTED
    assert h.task("j1", "a").state == TaskState.RUNNABLE


# --- retries ------------------------------------------------------------------------------------


RETRY = {"max_attempts": 4, "backoff_s": 10, "multiplier": 3, "backoff_max_s": 50, "jitter": 0.2,
         "non_retryable_exit_codes": [2]}


def test_backoff_grows_by_multiplier_with_jitter_and_cap(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", retry=RETRY)]))
    delays = []
    for _ in range(3):
        h.run_task("east", "j1", "a", exit_code=1)
        task = h.task("j1", "a")
        assert task.state == TaskState.RETRY_WAIT
        assert task.retry_at_ms is not None
        delays.append(task.retry_at_ms - h.now_ms)
        h.tick(task.retry_at_ms - h.now_ms - 1)
        assert task.state == TaskState.RETRY_WAIT
        h.tick(1)
        assert task.state == TaskState.RUNNABLE
    for delay, base in zip(delays, [10_000, 30_000, 50_000], strict=True):
        assert base * 0.8 <= delay <= base * 1.2, (delays, base)
    h.run_task("east", "j1", "a", exit_code=1)
    task = h.task("j1", "a")
    assert task.state == TaskState.FAILED and "max_attempts=4" in task.reason
    assert [a.state for a in task.attempts] == [AttemptState.FAILED] * 4


def test_non_retryable_exit_code_fails_at_once(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", retry=RETRY)]))
    h.run_task("east", "j1", "a", exit_code=2)
    assert h.task("j1", "a").state == TaskState.FAILED
    assert "non-retryable" in h.task("j1", "a").reason


def test_retry_then_success(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", retry=RETRY), task_doc("b", ["a"])]))
    h.run_task("east", "j1", "a", exit_code=1)
    h.tick(60_000)
    h.run_task("east", "j1", "a")
    assert h.states("j1") == {"a": "SUCCEEDED", "b": "RUNNABLE"}
    assert [a.fence for a in h.task("j1", "a").attempts] == [1, 2]


def test_jitter_comes_from_the_command_not_the_replica() -> None:
    delays = []
    for entropy_start in (0, 0, 5):
        h = Harness()
        h.entropy = entropy_start
        h.register("east")
        h.submit("j1", job_doc([task_doc("a", retry=RETRY)]))
        h.run_task("east", "j1", "a", exit_code=1)
        delays.append(h.task("j1", "a").retry_at_ms)
    assert delays[0] == delays[1] != delays[2]


# --- timeouts and lost clusters -----------------------------------------------------------------


def test_run_timeout_fires_on_tick_and_records_kill(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", timeout_s=10)]))
    fence = h.assign_one("j1", "a", "east")
    h.started("east", "j1", "a", fence)
    h.tick(10_000 + limits.RUN_TIMEOUT_GRACE_MS - 1)
    assert h.task("j1", "a").state == TaskState.RUNNING
    assert h.tick(1).fired == 1
    assert h.task("j1", "a").attempts[-1].state == AttemptState.TIMED_OUT
    assert h.task("j1", "a").state == TaskState.FAILED
    assert fence in h.state.clusters["east"].kills


def test_timed_out_report_is_an_application_failure(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", retry=RETRY, timeout_s=5)]))
    fence = h.assign_one("j1", "a", "east")
    assert h.finished("east", "j1", "a", fence, exit_code=-9, timed_out=True) == "accepted"
    task = h.task("j1", "a")
    assert task.attempts[-1].state == AttemptState.TIMED_OUT and task.app_failures == 1


@pytest.mark.parametrize(("on_lost", "expect"), [("replace", "RUNNABLE"), ("wait", "ASSIGNED")])
def test_assignment_timeout_honours_on_lost(h: Harness, on_lost: str, expect: str) -> None:
    h.submit("j1", job_doc([task_doc("a", on_lost=on_lost)]))
    h.assign_one("j1", "a", "east")
    h.tick(limits.ASSIGN_TIMEOUT_MS)
    assert h.states("j1") == {"a": expect}


def test_lost_cluster_replaces_or_waits_per_task(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("r"), task_doc("w", on_lost="wait")]))
    fr = h.assign_one("j1", "r", "east")
    fw = h.assign_one("j1", "w", "east")
    h.started("east", "j1", "r", fr)
    h.started("east", "j1", "w", fw)
    h.status("east", c.ClusterStatus.SUSPECT)
    assert h.states("j1") == {"r": "RUNNING", "w": "RUNNING"}
    assert h.status("east", c.ClusterStatus.LOST) == Applied(
        ClusterStatusChanged("east", changed=True, lost=1))
    assert h.states("j1") == {"r": "RUNNABLE", "w": "RUNNING"}
    assert h.task("j1", "r").infra_failures == 1 and h.task("j1", "r").app_failures == 0
    # the wait task's result still counts when the cluster comes back
    h.register("east", incarnation=1, known=(c.KnownAttempt("j1", "w", fw, True),))
    assert h.finished("east", "j1", "w", fw) == "accepted"
    assert h.task("j1", "w").state == TaskState.SUCCEEDED


def test_operator_mark_lost_replaces_a_waiting_attempt(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("w", on_lost="wait")]))
    fence = h.assign_one("j1", "w", "east")
    h.status("east", c.ClusterStatus.LOST)
    outcome = h.run(c.AttemptMarkLost("j1", "w", fence, h.now_ms, "host burned"))
    assert outcome == Applied(MarkedLost("j1", "w", fence))
    assert h.states("j1") == {"w": "RUNNABLE"}
    assert h.state.clusters["east"].kills == {}  # LOST: re-derived when east registers again
    rejected(h.run(c.AttemptMarkLost("j1", "w", fence, h.now_ms)), Code.FAILED_PRECONDITION,
             "already LOST")
    h.assign_one("j1", "w", "west")
    rejected(h.run(c.AttemptMarkLost("j1", "w", fence, h.now_ms)), Code.FAILED_PRECONDITION,
             "not the current attempt")


def test_reregister_reconciles_attempts(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a"), task_doc("b"), task_doc("c")]))
    fa = h.assign_one("j1", "a", "east")
    fb = h.assign_one("j1", "b", "east")
    h.assign_one("j1", "c", "east")
    known = (c.KnownAttempt("j1", "a", fa, True), c.KnownAttempt("j1", "b", fb, False),
             c.KnownAttempt("old", "z", 999, True))
    result = h.ok(c.ClusterRegister("east", 2, ("linux",), 8000, 16384, 0, h.now_ms, known))
    assert result == ClusterRegistered("east", created=False, lost=1, kills=0)
    assert h.states("j1") == {"a": "RUNNING", "b": "ASSIGNED", "c": "RUNNABLE"}
    assert h.state.clusters["east"].kills == {}  # an attempt the state never placed here


def test_older_incarnation_cannot_register(h: Harness) -> None:
    h.register("east", incarnation=5)
    rejected(h.register("east", incarnation=4), Code.FAILED_PRECONDITION, "incarnation")


def test_shrunk_capacity_is_overcommitted_until_released(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", resources={"cpu": 4})]))
    fence = h.assign_one("j1", "a", "east")
    h.register("east", cpu=2, known=(c.KnownAttempt("j1", "a", fence, True),))
    assert h.state.clusters["east"].overcommitted
    h.finished("east", "j1", "a", fence)
    assert not h.state.clusters["east"].overcommitted


def test_status_of_unknown_cluster_is_not_found(h: Harness) -> None:
    rejected(h.status("mars", c.ClusterStatus.LOST), Code.NOT_FOUND, "mars")


# --- failure policies ---------------------------------------------------------------------------


def _fail_a(h: Harness, policy: str, tasks: list[dict[str, object]]) -> None:
    h.submit("j1", job_doc(tasks, failure_policy=policy))
    h.run_task("east", "j1", "a", exit_code=1)


WIDE = [task_doc("a"), task_doc("b", ["a"]), task_doc("c", ["b"]), task_doc("x"),
        task_doc("fin", ["c", "x"], trigger="all_done")]


def test_skip_downstream_skips_descendants_and_runs_other_branches(h: Harness) -> None:
    _fail_a(h, "skip_downstream", WIDE)
    assert h.states("j1") == {"a": "FAILED", "b": "SKIPPED", "c": "SKIPPED", "x": "RUNNABLE",
                              "fin": "SKIPPED"}
    assert "upstream task b" in h.task("j1", "c").reason
    h.run_task("east", "j1", "x")
    assert h.job("j1").state == JobState.FAILED


def test_continue_runs_all_done_tasks(h: Harness) -> None:
    _fail_a(h, "continue", WIDE)
    assert h.states("j1") == {"a": "FAILED", "b": "SKIPPED", "c": "SKIPPED", "x": "RUNNABLE",
                              "fin": "PENDING"}
    h.run_task("east", "j1", "x")
    assert h.task("j1", "fin").state == TaskState.RUNNABLE
    h.run_task("east", "j1", "fin")
    assert h.job("j1").state == JobState.FAILED


def test_fail_fast_cancels_the_rest_and_kills_live_attempts(h: Harness) -> None:
    h.submit("j1", job_doc(WIDE, failure_policy="fail_fast"))
    fx = h.assign_one("j1", "x", "west")
    h.run_task("east", "j1", "a", exit_code=1)
    assert h.states("j1") == {"a": "FAILED", "b": "CANCELLED", "c": "CANCELLED",
                              "x": "CANCELLED", "fin": "CANCELLED"}
    assert h.job("j1").state == JobState.FAILED
    assert fx in h.state.clusters["west"].kills
    assert h.finished("west", "j1", "x", fx) == "late"


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_job_cancels_open_tasks_and_records_kills(h: Harness) -> None:
    h.submit("j1", job_doc(DIAMOND))
    h.run_task("east", "j1", "a")
    fb = h.assign_one("j1", "b", "east")
    h.started("east", "j1", "b", fb)
    outcome = h.cancel("j1")
    assert outcome == Applied(JobCancelled("j1", cancelled=3, changed=True))
    assert h.states("j1") == {"a": "SUCCEEDED", "b": "CANCELLED", "c": "CANCELLED",
                              "d": "CANCELLED"}
    assert h.job("j1").state == JobState.CANCELLED
    assert h.state.clusters["east"].kills == {fb: ("j1", "b")}
    assert h.state.clusters["east"].reserved_cpu_milli == 0
    assert h.cancel("j1") == Applied(JobCancelled("j1", cancelled=0, changed=False))
    verdict = h.report("east", c.Report(c.ReportKind.KILLED, "j1", "b", fb))
    assert verdict == ["late"] and h.state.clusters["east"].kills == {}


def test_cancel_rejections(h: Harness) -> None:
    rejected(h.cancel("nope"), Code.NOT_FOUND, "nope")
    h.submit("j1", job_doc([task_doc("a")]))
    h.run_task("east", "j1", "a")
    rejected(h.cancel("j1"), Code.FAILED_PRECONDITION, "SUCCEEDED")


def test_cancel_during_retry_wait(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a", retry=RETRY)]))
    h.run_task("east", "j1", "a", exit_code=1)
    h.cancel("j1")
    assert h.task("j1", "a").retry_at_ms is None
    assert h.tick(10**6).fired == 0


# --- queues, retention, malformed entries -------------------------------------------------------


def test_ready_order_is_priority_then_submission(h: Harness) -> None:
    h.submit("low", job_doc([task_doc("a"), task_doc("b")], priority=10))
    h.submit("high", job_doc([task_doc("a")], priority=90))
    h.submit("high2", job_doc([task_doc("a")], priority=90))
    order = [(j.id, t.spec.id) for j, t in iter_ready(h.state, "default")]
    assert order == [("high", "a"), ("high2", "a"), ("low", "a"), ("low", "b")]
    h.assign(("high2", "a", "east"))
    order = [(j.id, t.spec.id) for j, t in iter_ready(h.state, "default")]
    assert order == [("high", "a"), ("low", "a"), ("low", "b")]


def test_placed_tasks_leave_no_stale_entries_for_planning_to_walk() -> None:
    """Every planning round walks the ready heap past its stale entries: a job whose tasks were
    all placed must not leave them behind (they were walked whole by every later round)."""
    h = _big_harness()
    n = 3_000
    h.submit("wide", job_doc([task_doc(f"t{i}") for i in range(n)]))
    for first in range(0, n, 500):
        h.assign(*[("wide", f"t{i}", "east") for i in range(first, first + 500)])
    queue = h.state.queues["default"]
    assert queue.live == 0 and queue.shapes == {}


def test_stale_entries_behind_a_blocked_head_are_rebuilt_away() -> None:
    """Tasks placed from behind a head that cannot be placed (it needs a gpu) are not at the
    heap's top; once they outnumber the live entries by STALE_READY_SLACK the heap is rebuilt."""
    h = _big_harness()
    h.submit("blocked", job_doc([task_doc("g", resources={"gpu": 1})], priority=90))
    n = 2 * STALE_READY_SLACK
    h.submit("wide", job_doc([task_doc(f"t{i}") for i in range(n)]))
    for first in range(0, n, 512):
        h.assign(*[("wide", f"t{i}", "east") for i in range(first, first + 512)])
    queue = h.state.queues["default"]
    assert queue.live == 1
    assert sum(len(q.heap) for q in queue.shapes.values()) <= 2 * queue.live + STALE_READY_SLACK
    assert [(j.id, t.spec.id) for j, t in iter_ready(h.state, "default")] == [("blocked", "g")]


def test_finished_jobs_are_forgotten_after_retention(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a")], idempotency_key="k"))
    h.run_task("east", "j1", "a")
    h.tick(limits.JOB_RETENTION_MS - 1)
    assert "j1" in h.state.jobs
    assert h.tick(1).forgotten_jobs == 1
    assert "j1" not in h.state.jobs and h.state.task_count == 0


@pytest.mark.parametrize("entry", [
    b"", b"\xff", bytes([c.Tag.TICK]) + b"\xc1", bytes([c.Tag.TICK]) + b"\x92\xa1x\x00",
    bytes([c.Tag.ASSIGN_BATCH]) + b"\x92\x00\x91\x92\xa1a\xa1b",
])
def test_malformed_entries_are_rejected_not_crashing(h: Harness, entry: bytes) -> None:
    before = snapshot.dump(h.state)
    outcome = fsm.apply(h.state, entry)
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT
    assert snapshot.dump(h.state) == before


def test_time_never_goes_backwards(h: Harness) -> None:
    h.tick(5_000)
    h.ok(c.Tick(10, 0))
    assert h.state.now_ms == h.now_ms


# --- DAG shapes ---------------------------------------------------------------------------------


def _big_harness() -> Harness:
    h = Harness(check_every=500)
    h.register("east", cpu=100_000, memory_mb=10**8)
    return h


def test_long_chain_runs_strictly_in_order() -> None:
    h = _big_harness()
    n = 3_000
    h.submit("chain", job_doc([task_doc(f"t{i}", [f"t{i - 1}"] if i else []) for i in range(n)]))
    for i in range(n):
        ready = [t.spec.id for _, t in iter_ready(h.state, "default")]
        assert ready == [f"t{i}"]
        fence = h.assign_one("chain", f"t{i}", "east")
        h.report("east", c.Report(c.ReportKind.FINISHED, "chain", f"t{i}", fence, 0))
    assert h.job("chain").state == JobState.SUCCEEDED
    invariants.check_invariants(h.state)


def test_wide_fan_out_and_fan_in() -> None:
    h = _big_harness()
    width = 2_000
    tasks = [task_doc("root")] + [task_doc(f"w{i}", ["root"]) for i in range(width)]
    tasks.append(task_doc("join", [f"w{i}" for i in range(width)]))
    h.submit("fan", job_doc(tasks))
    h.run_task("east", "fan", "root")
    assert h.job("fan").counts[TaskState.RUNNABLE] == width
    result = h.assign(*[("fan", f"w{i}", "east") for i in range(width)])
    reports = [c.Report(c.ReportKind.FINISHED, "fan", p.task_id, fence, 0)
               for p, fence in result.assigned]
    h.report("east", *reports[:-1])
    assert h.task("fan", "join").state == TaskState.PENDING
    assert h.task("fan", "join").remaining_deps == 1
    h.report("east", reports[-1])
    assert h.task("fan", "join").state == TaskState.RUNNABLE
    invariants.check_invariants(h.state)


@pytest.mark.parametrize(("policy", "expect"), [
    ("fail_fast", {"a": "SUCCEEDED", "b": "FAILED", "c": "CANCELLED", "d": "CANCELLED"}),
    ("skip_downstream", {"a": "SUCCEEDED", "b": "FAILED", "c": "RUNNABLE", "d": "SKIPPED"}),
    ("continue", {"a": "SUCCEEDED", "b": "FAILED", "c": "RUNNABLE", "d": "SKIPPED"}),
])
def test_diamond_under_every_failure_policy(h: Harness, policy: str,
                                            expect: dict[str, str]) -> None:
    h.submit("j1", job_doc(DIAMOND, failure_policy=policy))
    h.run_task("east", "j1", "a")
    h.run_task("east", "j1", "b", exit_code=3)
    assert h.states("j1") == expect
    assert h.job("j1").state == (JobState.FAILED if policy == "fail_fast" else JobState.RUNNING)


def test_barriers_record_replica_addresses_within_a_bound(h: Harness) -> None:
    assert h.ok(c.Barrier("n1", h.now_ms, "10.0.0.1:7001", "10.0.0.1:8001")) \
        == BarrierResult("n1")
    h.ok(c.Barrier("n2", h.now_ms))
    assert h.state.replica_addresses == {"10.0.0.1:7001": "10.0.0.1:8001"}
    for i in range(limits.MAX_REPLICAS + 3):
        h.ok(c.Barrier(f"m{i}", h.now_ms, f"h{i}:1", f"h{i}:2"))
    assert len(h.state.replica_addresses) == limits.MAX_REPLICAS
    h.ok(c.Barrier("n3", h.now_ms, "10.0.0.1:7001", "10.0.0.1:9001"))
    assert h.state.replica_addresses["10.0.0.1:7001"] == "10.0.0.1:9001"


def test_a_report_batch_answers_one_verdict_per_report_in_order(h: Harness) -> None:
    h.submit("j1", job_doc([task_doc("a"), task_doc("b")]))
    fa = h.assign_one("j1", "a", "east")
    fb = h.assign_one("j1", "b", "east")
    batch = c.ReportBatch("east", h.now_ms, 7, (
        c.Report(c.ReportKind.STARTED, "j1", "a", fa),
        c.Report(c.ReportKind.STARTED, "j1", "a", fa),
        c.Report(c.ReportKind.STARTED, "j1", "b", fb + 1),
        c.Report(c.ReportKind.FINISHED, "j1", "b", fb, 0),
        c.Report(c.ReportKind.STARTED, "j1", "b", fb),
    ))
    V = ReportVerdict
    assert h.expect(batch, ReportResult) == ReportResult(
        (V.ACCEPTED, V.DUPLICATE, V.NOT_FOUND, V.ACCEPTED, V.LATE))
    assert h.report("west", c.Report(c.ReportKind.STARTED, "j1", "a", fa)) == [V.WRONG_CLUSTER]


def test_results_are_values_and_stay_out_of_the_snapshot(h: Harness) -> None:
    """Equal results from equal applies (replicas compare them), hashable, immutable, and the
    state's bytes do not depend on what apply returned."""
    twin = Harness(snapshot.load(snapshot.dump(h.state)))
    twin.now_ms = h.now_ms
    for harness in (h, twin):
        harness.submit("j1", job_doc([task_doc("a")]))
    first = h.assign(("j1", "a", "east"))
    assert twin.assign(("j1", "a", "east")) == first and hash(first) == hash(first)
    with pytest.raises(AttributeError):
        first.assigned = ()  # type: ignore[misc]
    assert snapshot.dump(h.state) == snapshot.dump(twin.state)
    assert h.tick(0) == TickResult(fired=0, expired_keys=0, forgotten_jobs=0)
