"""Late binding (issue 24): a cluster's agent holds up to `queue_depth` attempts beyond its room
and starts the next the moment a slot frees. The state machine commits such an attempt without
room (`Cluster.queued`), promotes it in fence order as room frees (the agent's order), and
treats it as any live attempt for cancel, kill, LOST and reconciliation."""

from __future__ import annotations

import msgpack
import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.protocol import ReportVerdict
from raftsched.replica import views
from raftsched.replica.gateway import deliveries
from raftsched.state import commands as c
from raftsched.state import placement, rules, snapshot
from raftsched.state.feasibility import Unfit
from raftsched.state.model import AttemptState, ClusterStatus
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.results import ClusterRegistered
from tests.support.fsmkit import Harness, job_doc, task_doc

ONE_CPU = {"resources": {"cpu": 1}}


def one_slot(depth: int = 2, tasks: int = 4, **fields: object) -> Harness:
    """One cluster with one cpu and a queue of `depth`; one job of `tasks` one-cpu tasks."""
    h = Harness()
    h.register("east", cpu=1, queue_depth=depth)
    h.submit("j", job_doc([task_doc(f"t{i}", **ONE_CPU, **fields) for i in range(tasks)]))
    return h


def test_an_assignment_beyond_the_room_is_queued_up_to_the_depth() -> None:
    h = one_slot(depth=2)
    running = h.assign_one("j", "t0", "east")
    first, second = h.assign_one("j", "t1", "east"), h.assign_one("j", "t2", "east")
    cluster = h.state.clusters["east"]
    assert list(cluster.queued) == [first, second] and running not in cluster.queued
    assert cluster.reserved_cpu_milli == 1000  # queued attempts hold no room
    result = h.assign(("j", "t3", "east"))
    assert result.assigned == () and result.dropped[0].reason is Unfit.NO_ROOM
    assert h.states("j") == {"t0": "ASSIGNED", "t1": "ASSIGNED", "t2": "ASSIGNED",
                             "t3": "RUNNABLE"}


def test_no_queue_without_a_declared_depth() -> None:
    h = one_slot(depth=0)
    h.assign_one("j", "t0", "east")
    assert h.assign(("j", "t1", "east")).dropped[0].reason is Unfit.NO_ROOM


def test_a_queued_attempt_has_no_assign_timeout_but_an_unanswered_one_does() -> None:
    h = one_slot(depth=2)
    h.assign_one("j", "t0", "east")
    acked, silent = h.assign_one("j", "t1", "east"), h.assign_one("j", "t2", "east")
    assert h.queued("east", "j", "t1", acked) == ReportVerdict.ACCEPTED
    assert h.current("j", "t1").state == AttemptState.QUEUED
    assert h.queued("east", "j", "t1", acked) == ReportVerdict.DUPLICATE
    h.tick(limits.ASSIGN_TIMEOUT_MS + 1)
    assert h.current("j", "t1").state == AttemptState.QUEUED  # the agent holds it: no timeout
    assert h.current("j", "t2").fence == silent and not h.current("j", "t2").live
    assert h.states("j")["t2"] == "RUNNABLE"
    assert silent not in h.state.clusters["east"].queued


def test_room_freed_goes_to_the_queue_in_fence_order() -> None:
    h = one_slot(depth=2)
    running = h.assign_one("j", "t0", "east")
    first, second = h.assign_one("j", "t1", "east"), h.assign_one("j", "t2", "east")
    for task, fence in (("t1", first), ("t2", second)):
        h.queued("east", "j", task, fence)
    h.started("east", "j", "t0", running)
    h.finished("east", "j", "t0", running)
    cluster = h.state.clusters["east"]
    assert list(cluster.queued) == [second] and cluster.reserved_cpu_milli == 1000
    assert h.started("east", "j", "t1", first) == ReportVerdict.ACCEPTED
    assert h.current("j", "t1").state == AttemptState.RUNNING
    assert cluster.reserved_cpu_milli == 1000 and not cluster.overcommitted


def test_an_agent_that_starts_a_queued_attempt_first_overcommits_the_view_until_reports_land(
) -> None:
    """The agent's slot freed before the FINISHED report committed: its STARTED report makes the
    attempt hold its room at once; the cluster is closed to new work until the report of the
    attempt that made way commits."""
    h = one_slot(depth=1)
    running = h.assign_one("j", "t0", "east")
    queued = h.assign_one("j", "t1", "east")
    h.started("east", "j", "t0", running)
    assert h.started("east", "j", "t1", queued) == ReportVerdict.ACCEPTED
    cluster = h.state.clusters["east"]
    assert cluster.overcommitted and cluster.reserved_cpu_milli == 2000 and not cluster.queued
    assert h.assign(("j", "t2", "east")).dropped[0].reason is Unfit.NO_ROOM  # queue closed
    h.finished("east", "j", "t0", running)
    assert not cluster.overcommitted and cluster.reserved_cpu_milli == 1000


def test_cancel_reaches_a_queued_attempt() -> None:
    h = one_slot(depth=1)
    h.assign_one("j", "t0", "east")
    queued = h.assign_one("j", "t1", "east")
    h.queued("east", "j", "t1", queued)
    assert isinstance(h.cancel("j"), Applied)
    cluster = h.state.clusters["east"]
    assert not cluster.queued and not cluster.live and cluster.reserved_cpu_milli == 0
    assert queued in cluster.kills  # the agent drops it from its queue when it hears
    assert h.current("j", "t1").state == AttemptState.CANCELLED


@pytest.mark.parametrize(("on_lost", "expect"), [("replace", "RUNNABLE"), ("wait", "ASSIGNED")])
def test_a_lost_cluster_replaces_queued_attempts_by_on_lost(on_lost: str, expect: str) -> None:
    h = one_slot(depth=1, on_lost=on_lost)
    h.assign_one("j", "t0", "east")
    queued = h.assign_one("j", "t1", "east")
    h.queued("east", "j", "t1", queued)
    h.status("east", ClusterStatus.LOST)
    assert h.states("j")["t1"] == expect
    assert (queued in h.state.clusters["east"].queued) == (on_lost == "wait")


def test_reregistration_reconciles_queued_attempts() -> None:
    """Known and running: started; not known (the agent restarted and dropped its queue):
    lost and replaced at once."""
    h = one_slot(depth=2)
    running = h.assign_one("j", "t0", "east")
    started, dropped = h.assign_one("j", "t1", "east"), h.assign_one("j", "t2", "east")
    h.queued("east", "j", "t1", started)
    h.queued("east", "j", "t2", dropped)
    known = (c.KnownAttempt("j", "t0", running, True), c.KnownAttempt("j", "t1", started, True))
    outcome = h.register("east", cpu=2, incarnation=2, known=known, queue_depth=2)
    assert isinstance(outcome, Applied) and isinstance(outcome.result, ClusterRegistered)
    assert outcome.result.lost == 1
    assert h.current("j", "t1").state == AttemptState.RUNNING
    assert h.states("j")["t2"] == "RUNNABLE"
    assert h.current("j", "t2").fence == dropped and h.current("j", "t2").state == AttemptState.LOST
    cluster = h.state.clusters["east"]
    assert not cluster.queued and cluster.reserved_cpu_milli == 2000


def test_a_larger_registration_promotes_the_queue() -> None:
    h = one_slot(depth=2)
    running = h.assign_one("j", "t0", "east")
    queued = h.assign_one("j", "t1", "east")
    known = (c.KnownAttempt("j", "t0", running, True), c.KnownAttempt("j", "t1", queued, False))
    h.register("east", cpu=2, incarnation=2, known=known, queue_depth=2)
    cluster = h.state.clusters["east"]
    assert not cluster.queued and cluster.reserved_cpu_milli == 2000
    assert h.current("j", "t1").fence == queued


def test_snapshots_keep_the_queue_and_older_clusters_their_bytes() -> None:
    h = one_slot(depth=2)
    h.register("west", cpu=4)
    h.assign_one("j", "t0", "east")
    queued = h.assign_one("j", "t1", "east")
    h.queued("east", "j", "t1", queued)
    loaded = snapshot.load(snapshot.dump(h.state))
    assert loaded.clusters["east"].queue_depth == 2
    assert loaded.clusters["east"].queued == {queued: ("j", 1)}
    assert loaded.clusters["west"].queue_depth == 0 and not loaded.clusters["west"].queued
    assert snapshot.dump(loaded) == snapshot.dump(h.state)
    twin = Harness(loaded)
    twin.started("east", "j", "t0", h.current("j", "t0").fence)
    twin.finished("east", "j", "t0", h.current("j", "t0").fence)
    assert not twin.state.clusters["east"].queued


def test_the_planner_queues_what_fits_no_room_in_fair_share_order() -> None:
    h = Harness()
    h.register("east", cpu=1, queue_depth=2)
    h.register("west", cpu=1, queue_depth=1)
    h.submit("a", job_doc([task_doc(f"a{i}", **ONE_CPU) for i in range(4)], tenant="alpha"))
    h.submit("b", job_doc([task_doc(f"b{i}", **ONE_CPU) for i in range(4)], tenant="beta"))
    planned = placement.plan(h.state, now_ms=h.now_ms).placements
    # two fit (one per cluster), three more queue (east 2, west 1); tenants alternate
    assert len(planned) == 5
    assert sorted(p.job_id for p in planned) == ["a", "a", "a", "b", "b"] \
        or sorted(p.job_id for p in planned) == ["a", "a", "b", "b", "b"]
    assert sum(p.cluster_id == "east" for p in planned) == 3
    result = h.expect(c.AssignBatch(h.now_ms, tuple(planned)), type(h.assign()))
    assert len(result.assigned) == 5 and not result.dropped
    assert len(h.state.clusters["east"].queued) == 2 and len(h.state.clusters["west"].queued) == 1
    assert placement.plan(h.state, now_ms=h.now_ms).placements == []  # queues full


def test_views_say_queued() -> None:
    h = one_slot(depth=2)
    h.assign_one("j", "t0", "east")
    first, second = h.assign_one("j", "t1", "east"), h.assign_one("j", "t2", "east")
    h.queued("east", "j", "t2", second)
    assert list(h.state.clusters["east"].queued) == [first, second]
    listed = {t.task_id: t for t in views.list_tasks(h.state, "j").tasks}
    states = {task_id: t.state for task_id, t in listed.items()}
    assert states == {"t0": "ASSIGNED", "t1": "ASSIGNED", "t2": "QUEUED", "t3": "RUNNABLE"}
    assert listed["t3"].reason == ("runnable; no room now and the agents' queues of east are "
                                   "full: it goes to the first slot or queue place that frees")
    explained = views.explain_task(h.state, "j", "t2").summary
    assert explained.startswith(f"queued on east (fence {second}): held in its agent's queue, "
                                "place 2 of 2")
    assert "sent to its agent's queue, place 1 of 2" in views.explain_task(h.state, "j",
                                                                           "t1").summary
    cluster = views.compute_cluster(h.state, h.state.clusters["east"], 0)
    assert (cluster.queue_depth, cluster.queued) == (2, 2)
    assert [a.state for a in views.task_history(h.state, "j", "t2").attempts] == ["QUEUED"]


# --- withdrawal: a task of a higher priority does not wait behind a queue it outranks ---------


def queued_low(depth: int = 1) -> tuple[Harness, int]:
    """east: 1 cpu running a low-priority task, its queue full of another (acknowledged)."""
    h = Harness()
    h.register("east", cpu=1, queue_depth=depth)
    h.submit("low", job_doc([task_doc(f"l{i}", **ONE_CPU) for i in range(3)], priority=1))
    running = h.assign_one("low", "l0", "east")
    h.started("east", "low", "l0", running)
    queued = h.assign_one("low", "l1", "east")
    h.queued("east", "low", "l1", queued)
    h.submit("high", job_doc([task_doc("h", **ONE_CPU)], priority=9))
    return h, queued


def withdraw(h: Harness, fence: int, *items: tuple[str, str, str]) -> c.AssignBatch:
    return c.AssignBatch(h.now_ms, tuple(c.Placement(*item) for item in items), (), (),
                         (c.Withdrawal("low", "l1", fence, "high", "h"),))


def test_the_planner_takes_a_queue_place_back_for_a_task_that_outranks_it() -> None:
    h, queued = queued_low()
    plan = placement.plan(h.state, now_ms=h.now_ms)
    assert plan.withdrawals == [c.Withdrawal("low", "l1", queued, "high", "h")]
    assert [(p.job_id, p.task_id, p.cluster_id) for p in plan.placements] == [
        ("high", "h", "east")]
    result = h.expect(c.AssignBatch(h.now_ms, tuple(plan.placements), (), (),
                                    tuple(plan.withdrawals)), type(h.assign()))
    assert result.withdrawing == (queued,) and len(result.assigned) == 1
    cluster = h.state.clusters["east"]
    assert cluster.withdrawing == {queued: ("low", "l1")}
    assert list(cluster.queued) == [queued, result.assigned[0][1]]
    assert placement.plan(h.state, now_ms=h.now_ms).withdrawals == []  # asked once


def test_the_planner_withdraws_nothing_for_an_equal_priority() -> None:
    h = Harness()
    h.register("east", cpu=1, queue_depth=1)
    h.submit("a", job_doc([task_doc(f"t{i}", **ONE_CPU) for i in range(3)]))
    h.assign_one("a", "t0", "east")
    h.assign_one("a", "t1", "east")
    h.submit("b", job_doc([task_doc("t", **ONE_CPU)]))
    plan = placement.plan(h.state, now_ms=h.now_ms)
    assert plan.withdrawals == [] and plan.placements == []


def test_a_withdrawn_attempt_ends_at_no_cost_and_its_task_is_placed_again() -> None:
    h, queued = queued_low()
    h.expect(withdraw(h, queued, ("high", "h", "east")), type(h.assign()))
    _, kills = deliveries(h.state, "east")
    assert [(k.fence, k.withdraw) for k in kills] == [(queued, True)]
    verdict = h.report("east", c.Report(c.ReportKind.WITHDRAWN, "low", "l1", queued))[0]
    assert verdict == ReportVerdict.ACCEPTED
    task = h.task("low", "l1")
    assert task.state.name == "RUNNABLE" and task.infra_failures == 0 and task.app_failures == 0
    assert h.current("low", "l1").state == AttemptState.WITHDRAWN
    cluster = h.state.clusters["east"]
    assert not cluster.withdrawing and queued not in cluster.queued
    assert deliveries(h.state, "east")[1] == []
    again = h.report("east", c.Report(c.ReportKind.WITHDRAWN, "low", "l1", queued))[0]
    assert again == ReportVerdict.DUPLICATE


def test_a_withdrawal_the_agent_answers_with_started_is_void() -> None:
    h, queued = queued_low()
    h.expect(withdraw(h, queued), type(h.assign()))
    running = h.current("low", "l0").fence
    h.finished("east", "low", "l0", running)
    assert h.started("east", "low", "l1", queued) == ReportVerdict.ACCEPTED
    cluster = h.state.clusters["east"]
    assert not cluster.withdrawing and h.current("low", "l1").state == AttemptState.RUNNING
    late = h.report("east", c.Report(c.ReportKind.WITHDRAWN, "low", "l1", queued))[0]
    assert late == ReportVerdict.LATE


def test_a_withdrawal_is_refused_for_what_it_may_not_take() -> None:
    """Not of a lower priority, started, promoted into room, or asked already: nothing."""
    h, queued = queued_low()
    h.submit("peer", job_doc([task_doc("p", **ONE_CPU)], priority=1))
    same = c.AssignBatch(h.now_ms, (), (), (), (c.Withdrawal("low", "l1", queued, "peer", "p"),))
    assert h.expect(same, type(h.assign())).withdrawing == ()
    assert h.expect(withdraw(h, queued), type(h.assign())).withdrawing == (queued,)
    assert h.expect(withdraw(h, queued), type(h.assign())).withdrawing == ()  # asked already
    h2, queued2 = queued_low()
    h2.finished("east", "low", "l0", h2.current("low", "l0").fence)  # promoted into the room
    assert queued2 not in h2.state.clusters["east"].queued
    assert h2.expect(withdraw(h2, queued2), type(h2.assign())).withdrawing == ()


def test_snapshots_keep_withdrawals() -> None:
    h, queued = queued_low()
    h.expect(withdraw(h, queued), type(h.assign()))
    loaded = snapshot.load(snapshot.dump(h.state))
    assert loaded.clusters["east"].withdrawing == {queued: ("low", "l1")}
    assert snapshot.dump(loaded) == snapshot.dump(h.state)


def test_a_task_asking_for_a_custom_resource_is_never_queued() -> None:
    """Only the scheduler counts custom resources (the agent checks cpu, memory and gpu before a
    start), so such a task goes only into committed room: never into a queue."""
    h = Harness()
    h.run(c.ClusterRegister("east", 1, ("linux",), 8000, 16_384, 0, h.now_ms, (),
                            (("fpga", 1),), queue_depth=4))
    fpga = {"cpu": 1, "custom": {"fpga": 1}}
    h.submit("j", job_doc([task_doc(f"f{i}", resources=fpga) for i in range(2)]
                          + [task_doc("plain", **ONE_CPU)]))
    h.assign_one("j", "f0", "east")
    assert h.assign(("j", "f1", "east")).dropped[0].reason is Unfit.NO_ROOM
    assert placement.plan(h.state, now_ms=h.now_ms).placements == [
        c.Placement("j", "plain", "east")]
    assert not h.state.clusters["east"].queued


def test_a_task_waiting_for_a_queue_place_is_told_so() -> None:
    h = one_slot(depth=1, tasks=2)
    h.assign_one("j", "t0", "east")
    reason = {t.task_id: t.reason for t in views.list_tasks(h.state, "j").tasks}["t1"]
    assert reason.startswith("runnable; no room now, but the agent's queue of east has a place")


def test_a_registration_past_the_queue_bound_is_refused_by_name_and_changes_nothing() -> None:
    """The gateway asks the same rule before proposing (`rules.cluster_register_problem`)."""
    h = Harness()
    too_deep = c.ClusterRegister("east", 1, ("linux",), 1000, 64, 0, h.now_ms, (),
                                 queue_depth=limits.MAX_AGENT_QUEUE_DEPTH + 1)
    assert rules.cluster_register_problem(too_deep) == (
        f"queue_depth: must be in 0..{limits.MAX_AGENT_QUEUE_DEPTH} (MAX_AGENT_QUEUE_DEPTH), got "
        f"{limits.MAX_AGENT_QUEUE_DEPTH + 1}")
    outcome = h.run(too_deep)
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT
    assert "east" not in h.state.clusters


# -- several scheduler groups (issue 27, docs/scale-out.md §2) -----------------------------------


def grouped(depth: int = 2) -> Harness:
    """`one_slot` in a log that is group 0 of 2 (GROUP_SET)."""
    h = one_slot(depth=depth)
    h.ok(c.GroupSet(0, 2, limits.VIRTUAL_SHARDS, h.now_ms))
    return h


def test_with_one_group_the_planner_marks_nothing_and_entries_keep_their_shape() -> None:
    """A replica of the release before can still apply the entries (rolling upgrades)."""
    h = one_slot(depth=2)
    planned = placement.plan(h.state, now_ms=h.now_ms, reported_free={"east": (0, 0, 0)})
    assert len(planned.placements) == 2 and not any(p.queued for p in planned.placements)
    entry = c.encode(c.AssignBatch(h.now_ms, tuple(planned.placements)))
    assert all(len(item) == 3 for item in msgpack.unpackb(entry[1:], raw=False)[1])


def queued_item(job_id: str, task_id: str, cluster_id: str) -> c.AssignBatch:
    """A placement the planner meant for the cluster's local queue (`Placement.queued`)."""
    return c.AssignBatch(0, (c.Placement(job_id, task_id, cluster_id, queued=True),))


def test_the_planner_marks_what_it_queues_and_apply_queues_it_whatever_the_committed_room(
) -> None:
    """The agent reported its cluster full (another group's work holds it): the planner queues
    the task, and apply queues it although this log's committed room would fit it."""
    h = grouped(depth=2)
    planned = placement.plan(h.state, now_ms=h.now_ms, reported_free={"east": (0, 0, 0)})
    assert [p.queued for p in planned.placements] == [True, True]
    result = h.expect(c.AssignBatch(h.now_ms, tuple(planned.placements)), type(h.assign()))
    cluster = h.state.clusters["east"]
    assert [fence for _, fence in result.assigned] == list(cluster.queued)
    assert cluster.reserved_cpu_milli == 0  # nothing holds room: the agent queues both
    unmarked = placement.plan(h.state, now_ms=h.now_ms).placements
    assert unmarked and not any(p.queued for p in unmarked)  # the room is free to this log


def test_a_placement_marked_queued_is_dropped_naming_the_full_queue_and_changes_nothing() -> None:
    h = one_slot(depth=1)
    h.ok(queued_item("j", "t0", "east"))
    cluster = h.state.clusters["east"]
    before = (h.state.fence, dict(cluster.live), dict(cluster.queued), h.states("j"))
    result = h.expect(queued_item("j", "t1", "east"), type(h.assign()))
    assert result.assigned == () and result.dropped[0].reason is Unfit.NO_ROOM
    assert "local queue is full (1 of queue_depth=1)" in result.dropped[0].detail
    assert (h.state.fence, dict(cluster.live), dict(cluster.queued), h.states("j")) == before


def test_a_placement_marked_queued_that_could_never_run_there_names_why() -> None:
    h = one_slot(depth=2)
    h.ok(c.ClusterStatusChange("east", ClusterStatus.SUSPECT, h.now_ms, "no heartbeat"))
    result = h.expect(queued_item("j", "t0", "east"), type(h.assign()))
    assert result.dropped[0].reason is Unfit.CLUSTER_NOT_READY


@pytest.mark.parametrize("raw", [["j", "t", "east", False], ["j", "t", "east", 1],
                                 ["j", "t", "east", True, True]])
def test_a_malformed_queued_mark_is_refused_at_decode(raw: list[object]) -> None:
    entry = c.encode(c.AssignBatch(0, (c.Placement("j", "t", "east", queued=True),)))
    payload = msgpack.unpackb(entry[1:], raw=False)
    assert payload[1] == [["j", "t", "east", True]]
    assert c.decode(entry) == c.AssignBatch(0, (c.Placement("j", "t", "east", queued=True),))
    payload[1] = [raw]
    with pytest.raises(c.CommandError, match=r"ASSIGN_BATCH\.items\[\]"):
        c.decode(entry[:1] + msgpack.packb(payload, use_bin_type=True))


def test_with_several_groups_freed_room_does_not_go_to_the_queue_until_the_agent_says_so(
) -> None:
    """The agent starts one group's queue at a time (its turn): room this group's attempt
    freed may go to another group's work, so the queue's head holds room only once STARTED."""
    h = grouped(depth=2)
    running = h.assign_one("j", "t0", "east")
    first = h.assign_one("j", "t1", "east")
    h.queued("east", "j", "t1", first)
    h.started("east", "j", "t0", running)
    h.finished("east", "j", "t0", running)
    cluster = h.state.clusters["east"]
    assert list(cluster.queued) == [first] and cluster.reserved_cpu_milli == 0
    assert h.started("east", "j", "t1", first) == ReportVerdict.ACCEPTED
    assert not cluster.queued and cluster.reserved_cpu_milli == 1000


def test_with_one_group_freed_room_still_goes_to_the_queue_at_once() -> None:
    h = one_slot(depth=2)
    h.ok(c.GroupSet(0, 1, limits.VIRTUAL_SHARDS, h.now_ms))
    running = h.assign_one("j", "t0", "east")
    first = h.assign_one("j", "t1", "east")
    h.started("east", "j", "t0", running)
    h.finished("east", "j", "t0", running)
    assert not h.state.clusters["east"].queued
    assert h.state.clusters["east"].reserved_cpu_milli == 1000
    assert h.current("j", "t1").fence == first
