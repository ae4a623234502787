"""The contention policy in the state machine (`state/policy.py`, `fsm`): the submit-time
refusal of a task no cluster could ever take, queue limits (backpressure), tenant policies,
draining, degraded clusters and the per-job retry budget. Every refusal changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import placement, policy, snapshot
from raftsched.state.model import TenantPolicy
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.results import ClusterDrained, JobSubmitted, TenantSetResult
from tests.support.fsmkit import Harness, job_doc, task_doc


def strict(tasks: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A job that does not allow unschedulable tasks (the default outside tests)."""
    return job_doc(tasks, allow_unschedulable=False, **fields)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east", caps=("linux",), cpu=8, memory_mb=4096)
    harness.register("gpu-west", caps=("linux", "cuda"), cpu=32, memory_mb=65_536, gpu=4)
    return harness


def refused(h: Harness, doc: dict[str, Any], code: Code, *fragments: str) -> str:
    before = snapshot.dump(h.state)
    outcome = h.submit("j", doc)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == code, outcome
    for fragment in fragments:
        assert fragment in outcome.reason, (fragment, outcome.reason)
    assert snapshot.dump(h.state) == before, "a refused submit changed the state"
    return outcome.reason


# --- no cluster could ever take it --------------------------------------------------------------


@pytest.mark.parametrize(("task", "fragments"), [
    (task_doc("t", requires=["tpu"]),
     ["task t needs", "capabilities ['tpu']", "closest, east, lacks capabilities ['tpu']"]),
    (task_doc("t", resources={"cpu": 64}),
     ["cpu_milli 64000", "closest, gpu-west, has cpu_milli 32000 of 64000 (short by 32000)"]),
    (task_doc("t", resources={"gpu": 8}, requires=["cuda"]),
     ["gpu 8", "closest, gpu-west, has gpu 4 of 8 (short by 4)"]),
    (task_doc("t", cluster="nowhere"), ["cluster nowhere", "pinned to nowhere"]),
    (task_doc("t", cluster="east", resources={"gpu": 1}), ["closest, east, has gpu 0 of 1"]),
])
def test_a_task_no_registered_cluster_could_take_is_refused_at_submit(
        h: Harness, task: dict[str, Any], fragments: list[str]) -> None:
    reason = refused(h, strict([task_doc("ok"), task]), Code.FAILED_PRECONDITION, *fragments)
    assert "allow_unschedulable: true" in reason


def test_with_no_cluster_registered_the_refusal_says_so() -> None:
    h = Harness()
    h.tick()  # the state's clock moves with any command; the refusal must change nothing else
    refused(h, strict([task_doc("t")]), Code.FAILED_PRECONDITION, "no cluster is registered")


def test_a_cluster_that_is_lost_or_draining_still_counts(h: Harness) -> None:
    """What may come back counts: only what no registered cluster has is refused."""
    h.status("gpu-west", c.ClusterStatus.LOST)
    h.run(c.ClusterDrain("east", True, h.now_ms))
    outcome = h.submit("j", strict([task_doc("t", requires=["cuda"], resources={"gpu": 2})]))
    assert isinstance(outcome, Applied) and isinstance(outcome.result, JobSubmitted)


def test_allow_unschedulable_waits_and_a_cluster_registering_later_takes_it(h: Harness) -> None:
    outcome = h.submit("j", job_doc([task_doc("t", requires=["tpu"])]))
    assert isinstance(outcome, Applied)
    assert placement.plan(h.state).placements == []
    h.register("tpu-north", caps=("linux", "tpu"), cpu=4)
    assert [p.cluster_id for p in placement.plan(h.state).placements] == ["tpu-north"]


# --- backpressure -------------------------------------------------------------------------------


def test_max_queued_refuses_past_the_limit_and_keeps_what_was_accepted(h: Harness) -> None:
    h.ok(c.TenantSet("alpha", 1, 5, 0, h.now_ms))
    first = h.submit("a1", strict([task_doc(f"t{i}") for i in range(3)], tenant="alpha"))
    assert isinstance(first, Applied)
    reason = refused(h, strict([task_doc(f"t{i}") for i in range(3)], tenant="alpha"),
                     Code.RESOURCE_EXHAUSTED, "tenant alpha has 3 task(s) queued",
                     "max_queued=5", "retry after")
    assert f"{policy.BACKPRESSURE_RETRY_AFTER_MS} ms" in reason
    other = h.submit("b1", strict([task_doc(f"t{i}") for i in range(9)], tenant="beta"))
    assert isinstance(other, Applied), "another tenant is not held back"
    fence = h.assign_one("a1", "t0", "east")  # running tasks are not queued ones
    assert h.state.usage["alpha"].queued == 2 and h.state.usage["alpha"].running == 1
    assert isinstance(h.submit("a2", strict([task_doc("t0"), task_doc("t1")],
                                            tenant="alpha")), Applied)
    h.started("east", "a1", "t0", fence)
    assert h.state.usage["alpha"].queued == 4


def test_the_global_queued_bound(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_QUEUED_TASKS", 4)
    assert isinstance(h.submit("a", strict([task_doc(f"t{i}") for i in range(4)])), Applied)
    refused(h, strict([task_doc("t")], tenant="other"), Code.RESOURCE_EXHAUSTED,
            "MAX_QUEUED_TASKS=4", "retry after")


def test_lowering_a_limit_refuses_only_what_comes_next(h: Harness) -> None:
    assert isinstance(h.submit("a", strict([task_doc(f"t{i}") for i in range(4)])), Applied)
    h.ok(c.TenantSet("default", 1, 2, 0, h.now_ms))
    assert h.job("a").counts[1] == 4  # all still RUNNABLE
    refused(h, strict([task_doc("t")]), Code.RESOURCE_EXHAUSTED, "max_queued=2")


# --- tenant policies ----------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "fragment"), [
    (c.TenantSet("bad name", 1, 0, 0, 1), "tenant:"),
    (c.TenantSet("", 1, 0, 0, 1), "tenant:"),
    (c.TenantSet("alpha", 0, 0, 0, 1), "weight: must be in 1..10000"),
    (c.TenantSet("alpha", limits.MAX_TENANT_WEIGHT + 1, 0, 0, 1), "weight"),
    (c.TenantSet("alpha", 1, limits.MAX_TASKS_IN_STATE + 1, 0, 1), "max_queued"),
    (c.TenantSet("alpha", 1, 0, limits.MAX_TASKS_IN_STATE + 1, 1), "max_running"),
])
def test_a_malformed_tenant_policy_is_refused(h: Harness, command: c.TenantSet,
                                              fragment: str) -> None:
    before = snapshot.dump(h.state)
    outcome = h.run(command)
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT
    assert fragment in outcome.reason and snapshot.dump(h.state) == before


def test_tenant_set_is_idempotent_and_the_star_is_the_default(h: Harness) -> None:
    assert h.ok(c.TenantSet("alpha", 2, 10, 3, h.now_ms)) == TenantSetResult("alpha", True)
    assert h.ok(c.TenantSet("alpha", 2, 10, 3, h.now_ms)) == TenantSetResult("alpha", False)
    assert policy.policy_of(h.state, "beta") == policy.DEFAULT_POLICY
    h.ok(c.TenantSet("*", 1, 7, 0, h.now_ms))
    assert policy.policy_of(h.state, "beta").max_queued == 7
    assert policy.policy_of(h.state, "alpha") == TenantPolicy("alpha", 2, 10, 3, h.now_ms)


# --- draining -----------------------------------------------------------------------------------


def test_drain_and_undrain(h: Harness) -> None:
    assert h.ok(c.ClusterDrain("east", True, h.now_ms, "kernel")) == \
        ClusterDrained("east", True, True)
    assert h.ok(c.ClusterDrain("east", True, h.now_ms)) == ClusterDrained("east", True, False)
    assert h.state.clusters["east"].drain_reason == ""  # the latest drain's reason
    h.submit("j", job_doc([task_doc("t", cluster="east")]))
    result = h.assign(("j", "t", "east"))
    assert [d.reason.value for d in result.dropped] == ["cluster_draining"]
    h.ok(c.ClusterDrain("east", False, h.now_ms))
    assert len(h.assign(("j", "t", "east")).assigned) == 1
    outcome = h.run(c.ClusterDrain("nowhere", True, h.now_ms))
    assert isinstance(outcome, Rejected) and outcome.code == Code.NOT_FOUND


def test_re_registration_keeps_a_drain(h: Harness) -> None:
    h.ok(c.ClusterDrain("east", True, h.now_ms, "maintenance"))
    h.register("east", caps=("linux",), cpu=8, memory_mb=4096, incarnation=2)
    assert h.state.clusters["east"].draining


# --- degraded clusters --------------------------------------------------------------------------


def fail_on(h: Harness, cluster: str, job_id: str, task_id: str) -> None:
    fence = h.assign_one(job_id, task_id, cluster)
    h.started(cluster, job_id, task_id, fence)
    h.finished(cluster, job_id, task_id, fence, exit_code=1)


def test_failures_across_many_tasks_and_jobs_degrade_a_cluster_for_a_cool_down(
        h: Harness) -> None:
    jobs = policy.DEGRADE_MIN_JOBS
    per_job = -(-policy.DEGRADE_FAILED_TASKS // jobs)
    for j in range(jobs):
        h.submit(f"j{j}", job_doc([task_doc(f"t{i}") for i in range(per_job)]))
    failed = 0
    for i in range(per_job):
        for j in range(jobs):
            if failed == policy.DEGRADE_FAILED_TASKS - 1:
                assert h.state.clusters["east"].degraded_until_ms == 0
            if failed < policy.DEGRADE_FAILED_TASKS:
                fail_on(h, "east", f"j{j}", f"t{i}")
                failed += 1
    east = h.state.clusters["east"]
    assert east.degraded_until_ms == h.now_ms + policy.DEGRADE_COOLDOWN_MS
    h.submit("next", job_doc([task_doc("t", cluster="east")]))
    [dropped] = h.assign(("next", "t", "east")).dropped
    assert dropped.reason.value == "cluster_degraded" and "degraded" in dropped.detail
    h.tick(policy.DEGRADE_COOLDOWN_MS)
    assert len(h.assign(("next", "t", "east")).assigned) == 1


def test_one_jobs_failures_do_not_degrade_a_cluster(h: Harness) -> None:
    h.submit("bad", job_doc([task_doc(f"t{i}") for i in range(3 * policy.DEGRADE_FAILED_TASKS)]))
    for i in range(3 * policy.DEGRADE_FAILED_TASKS):
        fail_on(h, "east", "bad", f"t{i}")
    assert h.state.clusters["east"].degraded_until_ms == 0


def test_old_failures_leave_the_window(h: Harness) -> None:
    for j in range(policy.DEGRADE_FAILED_TASKS):
        h.submit(f"j{j}", job_doc([task_doc("t")]))
    for j in range(policy.DEGRADE_FAILED_TASKS - 1):
        fail_on(h, "east", f"j{j}", "t")
    h.tick(policy.DEGRADE_WINDOW_MS)
    fail_on(h, "east", f"j{policy.DEGRADE_FAILED_TASKS - 1}", "t")
    assert h.state.clusters["east"].degraded_until_ms == 0


# --- the per-job retry budget -------------------------------------------------------------------


def test_a_jobs_retry_budget_bounds_retries_across_its_tasks(h: Harness) -> None:
    retry = {"max_attempts": 10, "backoff_s": 0.001, "jitter": 0}
    h.submit("j", job_doc([task_doc(f"t{i}", retry=retry) for i in range(3)], retry_budget=2))
    fail_on(h, "east", "j", "t0")
    fail_on(h, "east", "j", "t1")
    assert h.job("j").retries_used == 2
    assert h.states("j") == {"t0": "RETRY_WAIT", "t1": "RETRY_WAIT", "t2": "RUNNABLE"}
    fail_on(h, "east", "j", "t2")
    assert h.states("j")["t2"] == "FAILED"
    assert "retry_budget=2 is spent" in h.task("j", "t2").reason


def test_the_last_open_cluster_is_never_degraded() -> None:
    """When every cluster fails the tasks, the tasks are the likelier cause."""
    h = Harness()
    h.register("only", cpu=64)
    for j in range(policy.DEGRADE_FAILED_TASKS):
        h.submit(f"j{j}", job_doc([task_doc("t")]))
        fail_on(h, "only", f"j{j}", "t")
    assert h.state.clusters["only"].degraded_until_ms == 0


def test_flaky_tasks_on_a_busy_cluster_do_not_degrade_it(h: Harness) -> None:
    """Failures of many tasks of many jobs, but most attempts there succeed: not degraded."""
    for j in range(policy.DEGRADE_FAILED_TASKS):
        h.submit(f"j{j}", job_doc([task_doc("bad"), task_doc("ok1"), task_doc("ok2")]))
        fail_on(h, "east", f"j{j}", "bad")
        for ok in ("ok1", "ok2"):
            fence = h.assign_one(f"j{j}", ok, "east")
            h.started("east", f"j{j}", ok, fence)
            h.finished("east", f"j{j}", ok, fence, 0)
    assert h.state.clusters["east"].degraded_until_ms == 0
