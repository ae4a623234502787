"""Schedules in the replicated state (issue 25): exactly one run per nominal time under
replayed and duplicated fires, the catch-up window, each overlap policy, pause/resume,
pause_after_failures, backfill bounds, snapshots; every refusal changes nothing (the snapshot
digest before and after is the same)."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.invariants import check_invariants
from raftsched.state.model import JobState, State
from raftsched.state.outcome import Rejected
from raftsched.state.results import ScheduleBackfilled, ScheduleCreated, ScheduleFired
from raftsched.state.schedule_times import interval_fires_after, run_job_id, stamp
from tests.support.fsmkit import Harness, job_doc, task_doc

EVERY = 2_000
T0 = 1_793_000_000_000  # 2026-10-26T07:33:20Z, a multiple of EVERY


@pytest.fixture
def h() -> Harness:
    harness = Harness(State())
    harness.now_ms = T0 + 500
    harness.register("east")
    return harness


def create(h: Harness, sid: str = "nightly", overlap: str = "skip", failures: int = 0,
           window_ms: int = 60_000, end_ms: int = 0) -> None:
    spec = doc_to_wire(job_doc([task_doc("a")], tenant="t1"))
    assert h.ok(c.ScheduleCreate(sid, spec, ["opaque", "rule"], EVERY, 0, end_ms, overlap,
                                 window_ms, failures, h.now_ms)) == ScheduleCreated(sid, True)


def fire(h: Harness, *nominals: int, sid: str = "nightly", missed: int = 0,
         newest: int = 0) -> ScheduleFired:
    return h.expect(c.ScheduleFire(sid, nominals, missed, newest, h.now_ms), ScheduleFired)


def refused(h: Harness, cmd: c.Command, code: Code, fragment: str) -> None:
    h.tick()  # the state's clock at the command's: a refusal then moves nothing at all
    before = snapshot.digest(h.state)
    outcome = h.run(cmd)
    assert isinstance(outcome, Rejected) and outcome.code == code, outcome
    assert fragment in outcome.reason, outcome
    assert snapshot.digest(h.state) == before


def test_run_ids_derive_from_schedule_and_nominal_time() -> None:
    assert stamp(0) == "19700101T000000Z"
    assert stamp(1_792_890_000_000) == "20261025T010000Z"
    assert stamp(951_782_400_250) == "20000229T000000.250Z"  # a leap day, with ms
    assert run_job_id("s", 1_792_890_000_000) == "s-20261025T010000Z"
    assert run_job_id("s", 0, manual=True) == "s-manual-19700101T000000Z"


def test_a_fire_creates_its_run_and_a_replayed_or_duplicated_fire_creates_nothing(
        h: Harness) -> None:
    create(h)
    h.now_ms = T0 + 2 * EVERY + 10
    result = fire(h, T0 + EVERY)
    assert result.job_ids == (run_job_id("nightly", T0 + EVERY),)
    job = h.job(result.job_ids[0])
    assert job.spec.idempotency_key == result.job_ids[0] and job.spec.tenant == "t1"
    # the same entry again (a retried proposal, a new leader's stale view): refused, no change
    refused(h, c.ScheduleFire("nightly", (T0 + EVERY,), 0, 0, h.now_ms),
            Code.FAILED_PRECONDITION, "fired already")
    # replaying the whole log on a fresh replica gives the same state, one job per time
    replica = Harness(State())
    for entry in h.log + h.log:  # every entry twice: duplicates change nothing
        fsm.apply(replica.state, entry)
    assert [j for j in replica.state.jobs if j.startswith("nightly-")] == list(result.job_ids)
    s = h.state.schedules["nightly"]
    assert (s.fired, s.last_nominal_ms, list(s.runs)) == (1, T0 + EVERY,
                                                         [(T0 + EVERY, result.job_ids[0])])
    check_invariants(h.state)


@pytest.mark.parametrize(("nominals", "code", "fragment"), [
    ((T0 + 3 * EVERY,), Code.INVALID_ARGUMENT, "after now_ms"),
    ((T0 + EVERY + 1,), Code.INVALID_ARGUMENT, "interval's grid"),
    ((T0 - EVERY,), Code.FAILED_PRECONDITION, "fired already"),  # before the creation
    ((T0 + 2 * EVERY, T0 + EVERY), Code.FAILED_PRECONDITION, "fired already"),  # not ascending
])
def test_a_bad_fire_is_refused_naming_why_and_changes_nothing(
        h: Harness, nominals: tuple[int, ...], code: Code, fragment: str) -> None:
    create(h)
    h.now_ms = T0 + 2 * EVERY + 10
    refused(h, c.ScheduleFire("nightly", nominals, 0, 0, h.now_ms), code, fragment)
    refused(h, c.ScheduleFire("nope", (T0 + EVERY,), 0, 0, h.now_ms), Code.NOT_FOUND, "nope")


def test_misses_older_than_the_catchup_window_are_counted_and_newer_ones_fire(h: Harness) -> None:
    create(h, window_ms=5 * EVERY)
    h.now_ms = T0 + 100 * EVERY
    due = interval_fires_after(h.state.schedules["nightly"], T0, 1000, h.now_ms)
    old = [t for t in due if t < h.now_ms - 5 * EVERY]
    # the newest missed time must really be outside the window
    refused(h, c.ScheduleFire("nightly", (), 1, due[-1], h.now_ms), Code.INVALID_ARGUMENT,
            "inside the catch-up window")
    recent = tuple(t for t in due if t >= h.now_ms - 5 * EVERY)
    result = fire(h, *recent, missed=len(old), newest=old[-1])
    s = h.state.schedules["nightly"]
    assert s.skipped["catchup_window"] == len(old) == 94
    # overlap skip: the first recent time runs; the rest find it live
    assert len(result.job_ids) == 1 and s.skipped["overlap"] == len(recent) - 1
    assert s.last_nominal_ms == due[-1]


def finish(h: Harness, job_id: str, exit_code: int = 0) -> None:
    h.run_task("east", job_id, "a", exit_code)


@pytest.mark.parametrize("overlap", ["skip", "allow", "buffer_one", "cancel_other"])
def test_each_overlap_policy(h: Harness, overlap: str) -> None:
    create(h, overlap=overlap)
    h.now_ms = T0 + 4 * EVERY
    first = fire(h, T0 + EVERY).job_ids[0]
    second = fire(h, T0 + 2 * EVERY, T0 + 3 * EVERY)  # the first run is still live
    s = h.state.schedules["nightly"]
    if overlap == "skip":
        assert second.job_ids == () and s.skipped == {"overlap": 2}
    elif overlap == "allow":
        assert len(second.job_ids) == 2
    elif overlap == "buffer_one":
        assert second.job_ids == () and s.pending_ms == T0 + 3 * EVERY
        assert s.skipped == {"buffer_replaced": 1}
        assert fire(h).job_ids == ()  # nothing to release while the first is live
        finish(h, first)
        released = fire(h)  # an empty fire starts the buffered time
        assert released.job_ids == (run_job_id("nightly", T0 + 3 * EVERY),)
        assert s.pending_ms == 0
    else:
        # each newer run cancels the live one: the first, then the second
        assert second.job_ids == (run_job_id("nightly", T0 + 2 * EVERY),
                                  run_job_id("nightly", T0 + 3 * EVERY))
        assert [h.job(j).state for j in (first, *second.job_ids)] == [
            JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING]
    check_invariants(h.state)


def test_pause_stops_fires_and_resume_fires_nothing_from_the_paused_span(h: Harness) -> None:
    create(h, overlap="allow")
    h.ok(c.ScheduleSet("nightly", True, "maintenance", h.now_ms))
    assert h.state.schedules["nightly"].note == "maintenance"
    h.now_ms = T0 + 10 * EVERY
    refused(h, c.ScheduleFire("nightly", (T0 + EVERY,), 0, 0, h.now_ms),
            Code.FAILED_PRECONDITION, "is paused")
    h.now_ms += 1
    h.ok(c.ScheduleSet("nightly", False, "", h.now_ms))
    refused(h, c.ScheduleFire("nightly", (T0 + 9 * EVERY,), 0, 0, h.now_ms),
            Code.FAILED_PRECONDITION, "fired already")
    h.now_ms = T0 + 11 * EVERY
    assert len(fire(h, T0 + 11 * EVERY).job_ids) == 1


def test_pause_after_failures_pauses_with_a_note(h: Harness) -> None:
    create(h, failures=2)
    for k in (1, 2):
        h.now_ms = T0 + k * EVERY
        job_id = fire(h, T0 + k * EVERY).job_ids[0]
        finish(h, job_id, exit_code=1)
        assert h.job(job_id).state == JobState.FAILED
    h.now_ms = T0 + 3 * EVERY
    result = fire(h, T0 + 3 * EVERY)
    s = h.state.schedules["nightly"]
    assert result.job_ids == () and s.paused and s.skipped == {"paused": 1}
    assert "2 consecutive failed runs (pause_after_failures: 2)" in s.note


def test_a_manual_trigger_runs_outside_the_rule(h: Harness) -> None:
    create(h)
    result = h.expect(c.ScheduleFire("nightly", (h.now_ms,), 0, 0, h.now_ms, manual=True),
                      ScheduleFired)
    assert result.job_ids == (run_job_id("nightly", h.now_ms, manual=True),)
    assert h.state.schedules["nightly"].last_nominal_ms == T0 + 500  # the rule's time stays


def test_backfill_runs_past_times_once_with_at_most_max_concurrent_live(h: Harness) -> None:
    create(h)
    h.now_ms = T0 + 2 * EVERY
    regular = fire(h, T0 + 2 * EVERY).job_ids[0]
    times = (T0 - 2 * EVERY, T0 - EVERY, T0, T0 + 2 * EVERY)  # the last already ran
    result = h.expect(c.ScheduleBackfill("nightly", times, 2, h.now_ms), ScheduleBackfilled)
    assert (result.queued, result.skipped, len(result.job_ids)) == (3, 1, 2)
    finish(h, result.job_ids[0])
    assert fire(h).job_ids == (run_job_id("nightly", T0),)
    assert h.job(regular).id == regular
    refused(h, c.ScheduleBackfill("nightly", (T0 + 3 * EVERY,), 1, h.now_ms),
            Code.INVALID_ARGUMENT, "ascending past fire time")
    refused(h, c.ScheduleBackfill("nightly", (T0,), 0, h.now_ms), Code.INVALID_ARGUMENT,
            "max_concurrent")


def test_backfill_bound(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    create(h)
    monkeypatch.setattr(limits, "MAX_BACKFILL_RUNS", 2)
    h.expect(c.ScheduleBackfill("nightly", (T0 - 5 * EVERY, T0 - 4 * EVERY), 1, h.now_ms),
             ScheduleBackfilled)  # one starts, one waits
    refused(h, c.ScheduleBackfill("nightly", (T0 - 3 * EVERY, T0 - 2 * EVERY), 1, h.now_ms),
            Code.RESOURCE_EXHAUSTED, "MAX_BACKFILL_RUNS=2")


def test_create_refusals_name_the_field_and_change_nothing(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = doc_to_wire(job_doc([task_doc("a")]))
    refused(h, c.ScheduleCreate("bad id", spec, [], EVERY, 0, 0, "skip", 1, 0, h.now_ms),
            Code.INVALID_ARGUMENT, "schedule_id")
    refused(h, c.ScheduleCreate("s", spec, [], EVERY, 0, 0, "sometimes", 1, 0, h.now_ms),
            Code.INVALID_ARGUMENT, "overlap: 'sometimes'")
    refused(h, c.ScheduleCreate("s", spec, [], EVERY, 5, 5, "skip", 1, 0, h.now_ms),
            Code.INVALID_ARGUMENT, "end_at")
    refused(h, c.ScheduleCreate("s", ["junk"], [], EVERY, 0, 0, "skip", 1, 0, h.now_ms),
            Code.INVALID_ARGUMENT, "")
    long_id = "s" * (limits.MAX_SCHEDULE_ID_CHARS + 1)
    refused(h, c.ScheduleCreate(long_id, spec, [], EVERY, 0, 0, "skip", 1, 0, h.now_ms),
            Code.INVALID_ARGUMENT, "MAX_SCHEDULE_ID_CHARS")
    create(h, "one")
    monkeypatch.setattr(limits, "MAX_SCHEDULES_PER_TENANT", 1)
    refused(h, c.ScheduleCreate("two", doc_to_wire(job_doc([task_doc("a")], tenant="t1")), [],
                                EVERY, 0, 0, "skip", 1, 0, h.now_ms),
            Code.RESOURCE_EXHAUSTED, "MAX_SCHEDULES_PER_TENANT=1")


def test_delete_forgets_the_schedule_but_not_its_runs(h: Harness) -> None:
    create(h)
    h.now_ms = T0 + EVERY
    job_id = fire(h, T0 + EVERY).job_ids[0]
    h.ok(c.ScheduleDelete("nightly", h.now_ms))
    assert "nightly" not in h.state.schedules and job_id in h.state.jobs
    refused(h, c.ScheduleDelete("nightly", h.now_ms), Code.NOT_FOUND, "nightly")


def test_commands_round_trip_through_the_log() -> None:
    cmds: list[c.Command] = [
        c.ScheduleCreate("s", [1], ["r"], 5, 1, 9, "allow", 3, 2, 7),
        c.ScheduleSet("s", True, "why", 8), c.ScheduleDelete("s", 9),
        c.ScheduleFire("s", (1, 2), 3, 0, 10, manual=False),
        c.ScheduleBackfill("s", (1, 5), 2, 11),
    ]
    for cmd in cmds:
        assert c.decode(c.encode(cmd)) == cmd
    with pytest.raises(c.CommandError, match="nominals"):
        c.decode(bytes((c.Tag.SCHEDULE_FIRE,)) + __import__("msgpack").packb(
            ["s", list(range(limits.MAX_FIRES_PER_COMMAND + 1)), 0, 0, 1, False]))


def test_snapshots_keep_schedules_and_a_state_without_them_dumps_as_before(h: Harness) -> None:
    plain = snapshot.dump(h.state)
    create(h, overlap="buffer_one")
    h.now_ms = T0 + 3 * EVERY
    fire(h, T0 + EVERY, T0 + 2 * EVERY)
    h.expect(c.ScheduleBackfill("nightly", (T0 - EVERY, T0), 1, h.now_ms), ScheduleBackfilled)
    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert loaded.schedules == h.state.schedules
    assert snapshot.dump(loaded) == data
    check_invariants(loaded)
    # a fire after the restore is still refused for a time already fired
    refused(h, c.ScheduleFire(
        "nightly", (T0 + 2 * EVERY,), 0, 0, h.now_ms), Code.FAILED_PRECONDITION, "fired already")
    h.ok(c.ScheduleDelete("nightly", h.now_ms))
    assert snapshot.load(plain).schedules == {}


def test_a_runs_templates_see_its_schedule_and_nominal_time_across_a_snapshot(
        h: Harness) -> None:
    spec = doc_to_wire(job_doc([task_doc("a", command=[
        "report", "{{ schedule.id }}", "{{ schedule.nominal_time }}", "{{ job.id }}"])],
        tenant="t1"))
    assert h.ok(c.ScheduleCreate("nightly", spec, ["opaque", "rule"], EVERY, 0, 0, "allow",
                                 60_000, 0, h.now_ms)) == ScheduleCreated("nightly", True)
    h.now_ms = T0 + 2 * EVERY + 10
    [job_id] = fire(h, T0 + EVERY).job_ids
    resolved = h.task(job_id, "a").resolved
    assert resolved is not None
    assert resolved.command == ("report", "nightly", "2026-10-26T07:33:22Z", job_id)
    restored = snapshot.load(snapshot.dump(h.state))
    assert (restored.jobs[job_id].schedule_id, restored.jobs[job_id].nominal_ms) == (
        "nightly", T0 + EVERY)
    assert snapshot.digest(restored) == snapshot.digest(h.state)


def test_a_run_says_which_schedule_fired_it_and_a_submitted_job_says_none(h: Harness) -> None:
    """`Job.schedule_id` in the API (what `job list --schedule ID` keeps exactly)."""
    from raftsched.replica.views import job_message

    create(h)
    h.now_ms = T0 + 2 * EVERY + 10
    fired = fire(h, T0 + EVERY)
    assert job_message(h.job(fired.job_ids[0])).schedule_id == "nightly"
    h.submit("nightly-x", job_doc([task_doc("a")], tenant="t1"))
    assert job_message(h.job("nightly-x")).schedule_id == ""
