"""The event stream's derivation (State.changes, collected by the state machine), its window
on a replica (EventLog: order, retention, too old) and its filter."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.replica.events import SEQ_END, EventFilter, EventLog, TooOld
from raftsched.state import commands as c
from raftsched.state.model import Change
from raftsched.state.retention import FORGOTTEN_FOR_AGE, FORGOTTEN_FOR_ROOM
from tests.support.fsmkit import Harness, job_doc, task_doc


def _collect(h: Harness, step: object) -> list[Change]:
    h.state.changes = []
    try:
        step() if callable(step) else h.ok(step)  # type: ignore[arg-type]
        return list(h.state.changes)
    finally:
        h.state.changes = None


def _brief(changes: list[Change]) -> list[tuple[str, str, str]]:
    return [(ch[0], ch[3] or ch[1] or ch[7], ch[4]) for ch in changes]


def test_each_kind_of_change_is_collected_in_the_order_it_happened() -> None:
    h = Harness()
    assert _brief(_collect(h, lambda: h.register("east"))) == [("cluster", "east", "READY")]
    submitted = _collect(h, lambda: h.submit("j", job_doc([task_doc("a"), task_doc("b", ["a"])],
                                                          tenant="acme")))
    assert _brief(submitted) == [("job", "j", "PENDING"), ("task", "a", "RUNNABLE")]
    assert submitted[0][2] == "acme" and submitted[1][2] == "acme"
    fence = h.assign_one("j", "a", "east")
    started = _collect(h, lambda: h.started("east", "j", "a", fence))
    assert _brief(started) == [("attempt", "a", "RUNNING"), ("task", "a", "RUNNING")]
    finished = _collect(h, lambda: h.finished("east", "j", "a", fence))
    assert _brief(finished) == [("attempt", "a", "SUCCEEDED"), ("task", "a", "SUCCEEDED"),
                                ("task", "b", "RUNNABLE")]
    attempt = finished[0]
    assert (attempt[5], attempt[6], attempt[7]) == (fence, 1, "east")
    cancelled = _collect(h, lambda: h.cancel("j"))
    assert _brief(cancelled) == [("task", "b", "CANCELLED"), ("job", "j", "CANCELLED")]
    lost = _collect(h, lambda: h.status("east", c.ClusterStatus.LOST))
    assert _brief(lost) == [("cluster", "east", "LOST")]


def test_an_assignment_is_an_attempt_and_a_task_event_and_starts_the_job() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("a")]))
    assigned = _collect(h, lambda: h.assign_one("j", "a", "east"))
    assert _brief(assigned) == [("attempt", "a", "ASSIGNED"), ("task", "a", "ASSIGNED"),
                                ("job", "j", "RUNNING")]


def test_a_job_forgotten_after_its_retention_is_a_forgotten_event() -> None:
    h = Harness()
    h.register("east")
    h.submit("old", job_doc([task_doc("a")], tenant="acme"))
    h.run_task("east", "old", "a")
    assert _collect(h, lambda: h.tick(limits.JOB_RETENTION_MS - 1)) == []
    forgotten = _collect(h, lambda: h.tick(1))
    assert forgotten == [("forgotten", "old", "acme", "", "SUCCEEDED", 0, 0, "",
                          FORGOTTEN_FOR_AGE, h.now_ms)]
    assert "old" not in h.state.jobs


def test_a_job_forgotten_to_make_room_is_a_forgotten_event_before_the_new_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_RETAINED_JOBS", 2)
    h = Harness()
    h.register("east")
    h.submit("first", job_doc([task_doc("a")]))
    h.run_task("east", "first", "a", exit_code=1)
    h.submit("second", job_doc([task_doc("a")]))
    submitted = _collect(h, lambda: h.submit("third", job_doc([task_doc("a")])))
    assert _brief(submitted) == [("forgotten", "first", "FAILED"), ("job", "third", "PENDING"),
                                 ("task", "a", "RUNNABLE")]
    assert submitted[0][8] == FORGOTTEN_FOR_ROOM
    assert EventFilter(job_id="first").matches(submitted[0])
    assert not EventFilter(tenant="other").matches(submitted[0])


def test_nothing_is_collected_unless_asked() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("a")]))
    assert h.state.changes is None


def _change(job: str = "j", tenant: str = "t", kind: str = "task") -> Change:
    return (kind, job, tenant, "a", "RUNNING", 0, 0, "", "", 1)


def test_the_window_serves_events_after_a_cursor_in_index_and_seq_order() -> None:
    log = EventLog(retention=100)
    log.record(5, [_change(), _change(job="k")])
    log.record(6, [])
    log.record(7, [_change()])
    batch = log.after((0, SEQ_END), 10)
    assert [(i, s) for i, s, _ in batch.events] == [(5, 0), (5, 1), (7, 0)]
    assert batch.last_index == 7
    assert [(i, s) for i, s, _ in log.after((5, 0), 10).events] == [(5, 1), (7, 0)]
    assert [(i, s) for i, s, _ in log.after((5, SEQ_END), 1).events] == [(7, 0)]


def test_a_resume_from_before_what_is_kept_is_too_old() -> None:
    log = EventLog(retention=8)
    for index in range(1, 21):
        log.record(index, [_change()])
    with pytest.raises(TooOld) as raised:
        log.after((1, SEQ_END), 10)
    assert "list again" in str(raised.value) and raised.value.oldest > 1
    kept = log.after((raised.value.oldest, SEQ_END), 100).events
    assert [i for i, _, _ in kept] == list(range(raised.value.oldest + 1, 21))


def test_an_entry_larger_than_the_window_is_kept_whole_for_a_stream_that_had_caught_up() -> None:
    log = EventLog(retention=8)
    for index in range(1, 6):
        log.record(index, [_change()])
    caught_up = (log.last_index(), SEQ_END)
    log.record(6, [_change(job=f"j{n}") for n in range(20)])
    assert [s for _, s, _ in log.after(caught_up, 100).events] == list(range(20))
    with pytest.raises(TooOld):
        log.after((4, SEQ_END), 100)


def test_a_snapshot_install_starts_the_window_again() -> None:
    log = EventLog(retention=100)
    log.record(3, [_change()])
    log.record(50, None)
    with pytest.raises(TooOld):
        log.after((3, SEQ_END), 10)
    assert not log.after((50, SEQ_END), 10).events and log.last_index() == 50


def test_the_filter_matches_job_tenant_and_clusters() -> None:
    cluster: Change = ("cluster", "", "", "", "LOST", 0, 0, "east", "", 1)
    assert EventFilter().matches(_change()) and not EventFilter().matches(cluster)
    assert EventFilter(clusters=True).matches(cluster)
    assert not EventFilter(job_id="k").matches(_change(job="j"))
    assert not EventFilter(tenant="u").matches(_change(tenant="t"))
    assert EventFilter(tenant="t", job_id="j").matches(_change())
