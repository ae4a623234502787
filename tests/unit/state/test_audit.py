"""The log auditor's contention checks (`state/audit.py`): placement_open, reservation_respected,
tenant_running_limit and retry_budget.

A clean log the real state machine wrote (drains, a degraded cluster, reservations, tenant limits,
a retry budget) gives no violation and evaluates each check. The state machine re-validates every
assignment at apply, so no log can make the real one break these properties: each forged log is
written, and replayed, by a state machine with one guard monkeypatched to allow, and the auditor
must name exactly the check that guard protects. Other properties of the auditor are tested with
the jepsen-style checker (tests/jepsen/test_checker.py).
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable
from typing import Any

import pytest

from raftsched import limits
from raftsched.spec.wire import doc_to_wire
from raftsched.state import assign, feasibility, fsm, invariants, lifecycle, policy, schedules, tick
from raftsched.state import commands as c
from raftsched.state.audit import LogAuditor
from raftsched.state.feasibility import Unfit
from raftsched.state.model import Cluster, Job, State, Task
from raftsched.state.results import AssignResult, DropReason
from tests.support.fsmkit import Harness, job_doc, task_doc

CONTENTION = ("placement_open", "reservation_respected", "tenant_running_limit", "retry_budget")
RETRY = {"max_attempts": 5, "backoff_s": 0.001, "jitter": 0}
"""Retries soon enough that a one-second tick makes a failed task RUNNABLE again."""


def audit(h: Harness, *, before: bool = True) -> LogAuditor:
    """Replay `h`'s log from an empty state through the state machine (as patched now) and audit
    it; `before`: tell the auditor each entry before it is applied, as the jepsen-style checker
    does (the simulation only shows it the state after)."""
    state = State()
    auditor = LogAuditor(invariants_every=1)
    for index, entry in enumerate(h.log, 1):
        command = c.decode(entry)
        if before:
            auditor.before(index, command, state)
        outcome = fsm.apply_command(state, command)
        auditor.observe(index, command, outcome, state)
    auditor.finish(len(h.log), state)
    return auditor


def found(auditor: LogAuditor) -> set[str]:
    return {v.check for v in auditor.violations}


def only(auditor: LogAuditor, check: str) -> str:
    """The one violation's message; it must be of `check`."""
    assert [v.check for v in auditor.violations] == [check], auditor.violations
    return auditor.violations[0].message


def small(task_id: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("resources", {"cpu": 1, "memory_mb": 64})
    return task_doc(task_id, **fields)


def big(task_id: str, cpu: int = 2) -> dict[str, Any]:
    return task_doc(task_id, resources={"cpu": cpu, "memory_mb": 64})


def finish(h: Harness, job_id: str, task_id: str, exit_code: int = 0) -> None:
    attempt = h.current(job_id, task_id)
    h.started(attempt.cluster_id, job_id, task_id, attempt.fence)
    h.finished(attempt.cluster_id, job_id, task_id, attempt.fence, exit_code)


def fail_on(h: Harness, cluster: str, job_id: str, task_id: str) -> None:
    h.assign_one(job_id, task_id, cluster)
    finish(h, job_id, task_id, exit_code=1)


def batch(h: Harness, items: tuple[tuple[str, str, str], ...] = (),
          reservations: tuple[tuple[str, str, str], ...] = ()) -> AssignResult:
    return h.expect(c.AssignBatch(h.now_ms, tuple(c.Placement(*i) for i in items),
                                  tuple(c.Reservation(*r) for r in reservations)), AssignResult)


def reasons(result: AssignResult) -> list[DropReason | Unfit]:
    return [dropped.reason for dropped in result.dropped]


def refused(h: Harness, *items: tuple[str, str, str]) -> list[DropReason | Unfit]:
    """Why the state machine (as patched now) drops these placements, asked of a copy: the log
    replayed with a guard broken must not hold the entries the real guard dropped."""
    return reasons(Harness(copy.deepcopy(h.state)).assign(*items))


def degrade(h: Harness, cluster: str) -> None:
    """Fail attempts of enough tasks of enough jobs on `cluster` to degrade it."""
    jobs = policy.DEGRADE_MIN_JOBS
    per_job = -(-policy.DEGRADE_FAILED_TASKS // jobs)
    for j in range(jobs):
        h.submit(f"bad{j}", job_doc([small(f"t{i}") for i in range(per_job)]))
    for n in range(policy.DEGRADE_FAILED_TASKS):
        fail_on(h, cluster, f"bad{n % jobs}", f"t{n // jobs}")
    assert h.state.clusters[cluster].degraded_until_ms > h.now_ms


# --- a clean log ---------------------------------------------------------------------------------


def contended() -> Harness:
    """A log of the real state machine where every contention rule drops something."""
    h = Harness()
    h.register("east", cpu=2)
    h.register("west", cpu=8)
    h.register("north", cpu=8)
    h.register("south", cpu=64)
    h.register("tiny", cpu=4)
    # A tenant at its max_running: the second placement of one batch is dropped.
    h.ok(c.TenantSet("alpha", 1, 0, 1, h.now_ms))
    h.submit("lim", job_doc([small("l0"), small("l1")], tenant="alpha"))
    assert reasons(batch(h, (("lim", "l0", "west"), ("lim", "l1", "west")))) \
        == [DropReason.TENANT_AT_LIMIT]
    finish(h, "lim", "l0")
    assert reasons(batch(h, (("lim", "l1", "west"),))) == []
    # The `*` defaults bind a tenant with no record of its own.
    h.ok(c.TenantSet("*", 1, 0, 2, h.now_ms))
    h.submit("dflt", job_doc([small("d0"), small("d1"), small("d2")], tenant="gamma"))
    assert reasons(batch(h, (("dflt", "d0", "west"), ("dflt", "d1", "west"),
                             ("dflt", "d2", "west")))) == [DropReason.TENANT_AT_LIMIT]
    h.ok(c.TenantSet("*", 1, 0, 0, h.now_ms))
    assert reasons(batch(h, (("dflt", "d2", "west"),))) == []
    # A drained cluster takes nothing until undrained; a SUSPECT one nothing until READY.
    h.ok(c.ClusterDrain("north", True, h.now_ms, "maintenance"))
    h.submit("d", job_doc([small("t"), small("u")]))
    assert reasons(batch(h, (("d", "t", "north"),))) == [Unfit.CLUSTER_DRAINING]
    h.ok(c.ClusterDrain("north", False, h.now_ms))
    assert reasons(batch(h, (("d", "t", "north"),))) == []
    h.status("north", c.ClusterStatus.SUSPECT)
    assert reasons(batch(h, (("d", "u", "north"),))) == [Unfit.CLUSTER_NOT_READY]
    h.status("north", c.ClusterStatus.READY)
    assert reasons(batch(h, (("d", "u", "north"),))) == []
    # A degraded cluster takes nothing until its cool-down has passed.
    degrade(h, "south")
    h.submit("dg", job_doc([small("t")]))
    assert reasons(batch(h, (("dg", "t", "south"),))) == [Unfit.CLUSTER_DEGRADED]
    h.tick(policy.DEGRADE_COOLDOWN_MS)
    assert reasons(batch(h, (("dg", "t", "south"),))) == []
    # Reservations: east (2 cpu) half full, kept for a 2-cpu task.
    h.submit("small", job_doc([small("s0"), small("m0"), small("m1")]))
    h.submit("big", job_doc([big("b")]))
    batch(h, (("small", "s0", "east"),), reservations=(("big", "b", "east"),))
    result = batch(h, (("small", "m0", "east"),))
    assert reasons(result) == [DropReason.CLUSTER_RESERVED]
    assert reasons(batch(h, (("small", "m0", "west"),))) == []
    finish(h, "small", "s0")
    result = batch(h, (("small", "m1", "east"), ("big", "b", "east")))
    assert reasons(result) == [DropReason.CLUSTER_RESERVED]  # m1 first: east is still kept
    assert h.state.clusters["east"].reserved_for is None
    finish(h, "big", "b")
    # A batch's own reservations apply after its items: one for a task the batch places is
    # refused, and binds none of the batch's items.
    h.submit("big2", job_doc([big("b"), big("c")]))
    result = batch(h, (("big2", "b", "west"), ("small", "m1", "east")),
                   reservations=(("big2", "b", "east"),))
    assert reasons(result) == [] and h.state.clusters["east"].reserved_for is None
    finish(h, "small", "m1")
    result = batch(h, (("big2", "c", "east"),), reservations=(("big2", "c", "east"),))
    assert reasons(result) == []
    # A reservation that binds nothing: its task could never fit the cluster, re-registered smaller.
    h.submit("huge", job_doc([big("h", cpu=4)]))
    h.submit("other", job_doc([small("o")]))
    batch(h, reservations=(("huge", "h", "tiny"),))
    assert h.state.clusters["tiny"].reserved_for == ("huge", 0)
    h.register("tiny", cpu=2, incarnation=2)
    assert reasons(batch(h, (("other", "o", "tiny"),))) == []
    # A job's retry budget: one retry across its tasks.
    h.submit("rb", job_doc([small("r0", retry=RETRY), small("r1", retry=RETRY)], retry_budget=1))
    fail_on(h, "west", "rb", "r0")
    h.tick(1_000)
    fail_on(h, "west", "rb", "r0")  # its retry
    fail_on(h, "west", "rb", "r1")
    assert h.states("rb") == {"r0": "FAILED", "r1": "FAILED"}
    assert "retry_budget=1 is spent" in h.task("rb", "r1").reason
    return h


def test_a_clean_log_has_no_violation_and_evaluates_every_contention_check() -> None:
    h = contended()
    auditor = audit(h)
    assert auditor.violations == []
    for name in CONTENTION:
        assert auditor.checks.get(name, 0) > 0, name
    assert auditor.checks["placement_open"] == auditor.checks["reservation_respected"] \
        == auditor.checks["fence_unique"]


def test_without_before_the_reservations_are_not_judged() -> None:
    """The simulation shows the auditor only the state after each entry: the rest still holds."""
    auditor = audit(contended(), before=False)
    assert auditor.violations == []
    assert "reservation_respected" not in auditor.checks
    for name in ("placement_open", "tenant_running_limit", "retry_budget"):
        assert auditor.checks.get(name, 0) > 0, name


def test_before_for_another_entry_is_not_used() -> None:
    """What `before` saw is for the entry at its index only."""
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([small("t")]))
    batch(h, (("j", "t", "east"),))
    state = State()
    auditor = LogAuditor()
    commands = [c.decode(entry) for entry in h.log]
    for index, command in enumerate(commands, 1):
        if index == len(commands):
            auditor.before(index + 1, command, state)  # a caller that lost count
        outcome = fsm.apply_command(state, command)
        auditor.observe(index, command, outcome, state)
    assert auditor.violations == []
    assert "reservation_respected" not in auditor.checks
    assert auditor.checks["placement_open"] == 1


# --- a state machine with a guard broken ---------------------------------------------------------


def open_every_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply re-validates room, capabilities and pins, but no longer whether the cluster is
    READY, undrained and not degraded."""
    real = feasibility.unfit_committed

    def lenient(spec: Any, cluster: Cluster, now_ms: int) -> Unfit | None:
        opened = dataclasses.replace(cluster, status=c.ClusterStatus.READY, draining=False,
                                     degraded_until_ms=0)
        return real(spec, opened, now_ms)

    monkeypatch.setattr(assign, "unfit_committed", lenient)


def drained(h: Harness) -> None:
    h.ok(c.ClusterDrain("east", True, h.now_ms, "kernel upgrade"))


def suspect(h: Harness) -> None:
    h.status("east", c.ClusterStatus.SUSPECT)


def degraded(h: Harness) -> None:
    degrade(h, "east")


@pytest.mark.parametrize(("close", "words"), [
    (drained, "which was draining"),
    (suspect, "which was SUSPECT"),
    (degraded, "which was degraded until"),
])
@pytest.mark.parametrize("before", [True, False])
def test_an_assignment_on_a_closed_cluster(monkeypatch: pytest.MonkeyPatch,
                                           close: Callable[[Harness], None], words: str,
                                           before: bool) -> None:
    h = Harness()
    h.register("east", cpu=64)
    h.register("west", cpu=8)
    close(h)
    h.submit("j", job_doc([small("t")]))
    assert refused(h, ("j", "t", "east")) != []  # the real guard drops it
    open_every_cluster(monkeypatch)
    fence = h.assign_one("j", "t", "east")
    message = only(audit(h, before=before), "placement_open")
    assert message.startswith(f"log index {len(h.log)}: j/t assigned fence {fence} on cluster "
                              f"east, {words}")


def test_a_degraded_cluster_is_judged_at_the_batch_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open again once the batch's now_ms reaches degraded_until_ms, not before."""
    h = Harness()
    h.register("east", cpu=64)
    h.register("west", cpu=8)
    degrade(h, "east")
    until = h.state.clusters["east"].degraded_until_ms
    h.submit("j", job_doc([small("early"), small("on_time")]))
    open_every_cluster(monkeypatch)
    h.now_ms = until - 1
    h.assign_one("j", "early", "east")
    h.now_ms = until
    h.assign_one("j", "on_time", "east")
    message = only(audit(h), "placement_open")
    assert "j/early" in message and f"the batch's now_ms is {until - 1}" in message


def ignore_reservations(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(state: State, cluster: Cluster, job: Job, task: Task) -> str | None:
        return None

    monkeypatch.setattr(assign, "reserved_for_other", never)


def reserved_east() -> Harness:
    """east (2 cpu) runs one 1-cpu task; `big/b` (2 cpu) waits for it; `small/m` fits now."""
    h = Harness()
    h.register("east", cpu=2)
    h.register("west", cpu=8)
    h.submit("small", job_doc([small("s"), small("m")]))
    h.submit("big", job_doc([big("b")]))
    batch(h, (("small", "s", "east"),))
    return h


def test_an_assignment_on_a_cluster_reserved_by_an_earlier_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = reserved_east()
    batch(h, reservations=(("big", "b", "east"),))
    assert refused(h, ("small", "m", "east")) == [DropReason.CLUSTER_RESERVED]
    ignore_reservations(monkeypatch)
    fence = h.assign_one("small", "m", "east")
    message = only(audit(h), "reservation_respected")
    assert message == (f"log index {len(h.log)}: small/m assigned fence {fence} on cluster "
                       f"east, which was reserved for task big/b")
    assert audit(h, before=False).violations == []  # the state after cannot tell


def test_a_batchs_own_reservation_binds_none_of_its_items() -> None:
    """The real state machine, no guard disabled: the item applies first, then the batch
    keeps the cluster (`assign.apply_assign_batch`); no violation."""
    h = reserved_east()
    result = batch(h, (("small", "m", "east"),), reservations=(("big", "b", "east"),))
    assert len(result.assigned) == 1 and h.state.clusters["east"].reserved_for == ("big", 0)
    auditor = audit(h)
    assert auditor.violations == [] and auditor.checks["reservation_respected"] >= 1


def test_an_assignment_before_the_holder_is_placed_elsewhere_in_the_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder's placement releases the reservation: the state after shows none."""
    h = reserved_east()
    batch(h, reservations=(("big", "b", "east"),))
    ignore_reservations(monkeypatch)
    result = batch(h, (("small", "m", "east"), ("big", "b", "west")))
    assert len(result.assigned) == 2 and h.state.clusters["east"].reserved_for is None
    assert "small/m" in only(audit(h), "reservation_respected")


def test_a_reservation_moved_by_the_batch_frees_the_cluster_it_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """big/b's reservation moves from east to west after the batch's items: for them east was
    still kept."""
    h = reserved_east()
    batch(h, reservations=(("big", "b", "east"),))
    ignore_reservations(monkeypatch)
    h.submit("more", job_doc([small("w")]))
    result = batch(h, (("small", "m", "east"), ("more", "w", "west")),
                   reservations=(("big", "b", "west"),))
    assert len(result.assigned) == 2 and h.state.clusters["west"].reserved_for == ("big", 0)
    assert h.state.clusters["east"].reserved_for is None
    message = only(audit(h), "reservation_respected")  # east was kept before the batch
    assert "small/m" in message and "on cluster east" in message


def test_a_refused_reservation_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reservation apply refuses (its task is not RUNNABLE) keeps no cluster."""
    h = reserved_east()
    ignore_reservations(monkeypatch)
    result = batch(h, (("small", "m", "east"),), reservations=(("small", "s", "east"),))
    assert len(result.assigned) == 1 and h.state.clusters["east"].reserved_for is None
    assert audit(h).violations == []


def test_a_batch_places_a_clusters_holder_then_keeps_the_cluster_for_another() -> None:
    """The real state machine: the batch places big/b on east, kept for it, which frees east
    for the batch's own reservation (reservations apply after the items)."""
    h = Harness()
    h.register("east", cpu=2)
    h.submit("big", job_doc([big("b"), big("c")]))
    batch(h, reservations=(("big", "b", "east"),))
    result = batch(h, (("big", "b", "east"),), reservations=(("big", "c", "east"),))
    assert reasons(result) == [] and h.state.clusters["east"].reserved_for == ("big", 1)
    auditor = audit(h)
    assert auditor.violations == [] and auditor.checks["reservation_respected"] == 1


def no_running_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(state: State, tenant: str, extra: int = 0) -> bool:
        return False

    monkeypatch.setattr(policy, "at_running_limit", never)


@pytest.mark.parametrize("tenant", ["alpha", "*"])
@pytest.mark.parametrize("before", [True, False])
def test_assignments_past_a_tenants_max_running(monkeypatch: pytest.MonkeyPatch, tenant: str,
                                                before: bool) -> None:
    h = Harness()
    h.register("east")
    h.ok(c.TenantSet(tenant, 1, 0, 2, h.now_ms))
    h.submit("j", job_doc([small("a"), small("b"), small("c")], tenant="alpha"))
    h.assign_one("j", "a", "east")
    assert refused(h, ("j", "b", "east"), ("j", "c", "east")) == [DropReason.TENANT_AT_LIMIT]
    no_running_limit(monkeypatch)
    fences = [fence for _, fence in batch(h, (("j", "b", "east"), ("j", "c", "east"))).assigned]
    assert len(fences) == 2
    message = only(audit(h, before=before), "tenant_running_limit")
    assert message == (f"log index {len(h.log)}: j/c assigned fence {fences[1]} while tenant "
                       f"alpha already had 2 task(s) ASSIGNED or RUNNING, its max_running=2")


def test_a_running_limit_counts_only_that_tenants_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.register("east")
    h.ok(c.TenantSet("alpha", 1, 0, 1, h.now_ms))
    h.submit("a", job_doc([small("t"), small("u")], tenant="alpha"))
    h.submit("b", job_doc([small("t"), small("u")], tenant="beta"))
    no_running_limit(monkeypatch)
    batch(h, (("b", "t", "east"), ("a", "t", "east"), ("b", "u", "east")))
    assert audit(h).violations == []
    batch(h, (("a", "u", "east"),))
    assert "tenant alpha already had 1" in only(audit(h), "tenant_running_limit")


def ignore_retry_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Application failures retry as if no job had a retry_budget."""
    real = lifecycle.app_failure

    def lenient(state: State, job: Job, task: Task, exit_code: int | None,
                entropy: int) -> None:
        spec = job.spec
        job.spec = dataclasses.replace(spec, retry_budget=None)
        try:
            real(state, job, task, exit_code, entropy)
        finally:
            job.spec = spec

    for module in (lifecycle, tick):  # the two callers of app_failure
        monkeypatch.setattr(module, "app_failure", lenient)


def test_retries_past_a_jobs_retry_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([small("a", retry=RETRY), small("b", retry=RETRY)], retry_budget=1))
    ignore_retry_budgets(monkeypatch)
    fail_on(h, "east", "j", "a")
    fail_on(h, "east", "j", "b")
    assert h.states("j") == {"a": "RETRY_WAIT", "b": "RETRY_WAIT"}  # the real one fails b
    h.tick(1_000)
    h.assign_one("j", "a", "east")
    assert audit(h).violations == []
    fence = h.assign_one("j", "b", "east")
    message = only(audit(h), "retry_budget")
    assert message == (f"log index {len(h.log)}: j/b got a retry (fence {fence}) after an "
                       f"application failure, retry 2 of job j, past its retry_budget=1")
    assert "retry_budget" in only(audit(h, before=False), "retry_budget")


def test_a_zero_retry_budget_allows_infrastructure_retries() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([small("a", retry=RETRY)], retry_budget=0))
    fence = h.assign_one("j", "a", "east")
    assert h.rejected("east", "j", "a", fence) == "accepted"
    h.tick(60_000)
    fail_on(h, "east", "j", "a")
    assert h.states("j") == {"a": "FAILED"}
    auditor = audit(h)
    assert auditor.violations == [] and "retry_budget" not in auditor.checks


def preempted_often() -> Harness:
    """One low-class preemptible task on east, preempted MAX_PREEMPTIONS_PER_TASK times by
    high-class tasks (a window apart) and placed again after each: more preemptions than
    MAX_INFRA_RETRIES would allow, were they infrastructure failures."""
    h = Harness()
    h.register("east")
    h.submit("low", job_doc([small("v")], priority_class="low", preemptible=True))
    for round_number in range(policy.MAX_PREEMPTIONS_PER_TASK):
        fence = h.assign_one("low", "v", "east")
        h.submit(f"u{round_number}", job_doc([small("u")], priority_class="high"))
        result = h.expect(c.AssignBatch(h.now_ms, (), (), (
            c.Preemption("low", "v", fence, f"u{round_number}", "u"),)), AssignResult)
        assert result.preempted == (fence,)
        h.now_ms += policy.PREEMPTION_WINDOW_MS
    h.assign_one("low", "v", "east")
    return h


def test_preemptions_the_rules_allow_cost_no_retry_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_INFRA_RETRIES", 1)
    h = preempted_often()
    auditor = audit(h)
    assert auditor.violations == []
    assert auditor.checks["preemption_bounds"] == policy.MAX_PREEMPTIONS_PER_TASK


def lenient_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state machine applies every preemption of a live attempt (no class, count or rate
    rule) and its invariants allow any count; the auditor's preemption_bounds still judges by
    the real rules."""
    rules = types.SimpleNamespace(**vars(policy))
    rules.may_preempt = lambda by, victim, task: True
    rules.preemption_budget = lambda state, now_ms: 1
    rules.MAX_PREEMPTIONS_PER_TASK = 1_000
    monkeypatch.setattr(assign, "policy", rules)
    monkeypatch.setattr(invariants, "policy", rules)


def test_a_preemption_past_the_count_per_task(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient_preemption(monkeypatch)
    h = preempted_often()
    fence = h.current("low", "v").fence
    h.submit("last", job_doc([small("u")], priority_class="high"))
    h.expect(c.AssignBatch(h.now_ms, (), (), (c.Preemption("low", "v", fence, "last", "u"),)),
             AssignResult)
    message = only(audit(h), "preemption_bounds")
    assert message == (f"log index {len(h.log)}: preempted low/v fence {fence} for last/u: "
                       f"preempted {policy.MAX_PREEMPTIONS_PER_TASK + 1} times, past "
                       f"MAX_PREEMPTIONS_PER_TASK={policy.MAX_PREEMPTIONS_PER_TASK}")


def test_a_preemption_of_an_equal_class(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient_preemption(monkeypatch)
    h = Harness()
    h.register("east")
    h.submit("low", job_doc([small("v")], priority_class="low", preemptible=True))
    h.submit("peer", job_doc([small("p")], priority_class="low"))
    fence = h.assign_one("low", "v", "east")
    h.expect(c.AssignBatch(h.now_ms, (), (), (c.Preemption("low", "v", fence, "peer", "p"),)),
             AssignResult)
    assert "class low preempted for class low" in only(audit(h), "preemption_bounds")


def test_preemptions_past_the_rate_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    lenient_preemption(monkeypatch)
    most = policy.MAX_PREEMPTIONS_PER_WINDOW
    h = Harness()
    h.register("east", cpu=most + 1)
    h.submit("low", job_doc([small(f"v{i}") for i in range(most + 1)], priority_class="low",
                            preemptible=True))
    fences = [h.assign_one("low", f"v{i}", "east") for i in range(most + 1)]
    h.submit("high", job_doc([small(f"u{i}") for i in range(most + 1)], priority_class="high"))
    h.expect(c.AssignBatch(h.now_ms, (), (), tuple(
        c.Preemption("low", f"v{i}", fences[i], "high", f"u{i}") for i in range(most))),
        AssignResult)
    h.now_ms += policy.PREEMPTION_WINDOW_MS - 1
    h.expect(c.AssignBatch(h.now_ms, (), (), (
        c.Preemption("low", f"v{most}", fences[most], "high", f"u{most}"),)), AssignResult)
    assert f"{most + 1} preemptions within" in only(audit(h), "preemption_bounds")


# --- schedules (issue 25) -------------------------------------------------------------------------


def _scheduled(h: Harness) -> None:
    """A schedule every second fired at 2 s and 3 s, the 3 s fire proposed again, then a
    backfill of 1 s and 2 s (2 s ran already)."""
    spec = doc_to_wire(job_doc([task_doc("a")]))
    h.ok(c.ScheduleCreate("s", spec, [], 1_000, 0, 0, "allow", 60_000, 0, h.now_ms))
    h.now_ms = 3_000
    h.run(c.ScheduleFire("s", (2_000,), 0, 0, h.now_ms))
    h.run(c.ScheduleFire("s", (3_000,), 0, 0, h.now_ms))
    h.run(c.ScheduleFire("s", (3_000,), 0, 0, h.now_ms))  # a retried proposal
    h.run(c.ScheduleBackfill("s", (1_000, 2_000), 1, h.now_ms))  # 2 s ran already


def test_schedule_runs_once_per_nominal_time_passes() -> None:
    h = Harness()
    _scheduled(h)
    auditor = audit(h)
    assert auditor.violations == [] and auditor.checks["schedule_fire_once"] == 3  # 1 refused
    assert sorted(n for _, _, n in auditor.schedule_runs) == [1_000, 2_000, 3_000]


def test_a_planted_double_fire_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply without the 'after the last fired time' rule, and runs named apart (a counter): the
    retried fire runs 3 s a second time."""
    real = schedules.run_job_id
    calls = iter(range(1_000))
    monkeypatch.setattr(schedules, "_fire_refusal", lambda *_: None)
    monkeypatch.setattr(schedules, "run_job_id",
                        lambda sid, ms, manual=False: f"{real(sid, ms, manual)}-{next(calls)}")
    h = Harness()
    _scheduled(h)
    assert "schedule_fire_once" in found(audit(h))
