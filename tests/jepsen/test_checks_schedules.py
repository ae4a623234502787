"""The checker's schedule property (jepsen.checks_schedules) over logs made with the real state
machine and auditor: a schedule fired at every time passes; a lost time, a time skipped for age
inside the window, a schedule the log stopped firing, and a planted double fire (the auditor's
schedule_fire_once) are each caught."""

from __future__ import annotations

import sys
from pathlib import Path

from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm
from tests.support import paths
from tests.support.fsmkit import job_doc, task_doc

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen.checks_history import _Findings
from jepsen.checks_replay import _Replay
from jepsen.checks_schedules import CHECK, check_schedules

EVERY = 2_000
T0 = 1_800_000_000_000
WINDOW = 3_600_000


def _run(*commands: c.Command) -> _Replay:
    run = _Replay()
    for index, command in enumerate(commands, 1):
        run.auditor.before(index, command, run.state)
        outcome = fsm.apply_command(run.state, command)
        run.auditor.observe(index, command, outcome, run.state)
    return run


def _create(window_ms: int = WINDOW) -> c.Command:
    spec = doc_to_wire(job_doc([task_doc("a")], allow_unschedulable=True))
    return c.ScheduleCreate("s", spec, ["every", EVERY], EVERY, 0, 0, "allow", window_ms, 0, T0)


def _fire(*nominals: int, now: int, missed: int = 0, newest: int = 0) -> c.Command:
    return c.ScheduleFire("s", nominals, missed, newest, now)


def _violations(run: _Replay, tmp_path: Path) -> list[str]:
    found = _Findings(tmp_path)
    check_schedules(run, found)
    assert found.report.invariants_checked.get(CHECK, 0) >= 1
    return [v.message for v in found.report.violations if v.check == CHECK]


def test_every_time_fired_once_passes(tmp_path: Path) -> None:
    run = _run(_create(), _fire(T0 + EVERY, now=T0 + EVERY),
               _fire(T0 + 2 * EVERY, T0 + 3 * EVERY, now=T0 + 3 * EVERY + 100))
    assert run.state.schedules["s"].fired == 3
    assert _violations(run, tmp_path) == []
    assert [v.check for v in run.auditor.violations] == []


def test_a_time_with_neither_a_run_nor_a_counted_skip_is_caught(tmp_path: Path) -> None:
    run = _run(_create(), _fire(T0 + EVERY, now=T0 + EVERY),
               _fire(T0 + 3 * EVERY, now=T0 + 3 * EVERY))  # T0 + 2 EVERY was lost
    assert any("1 of its 3 nominal times have no run but only 0 skips" in m
               for m in _violations(run, tmp_path))


def test_a_time_skipped_for_age_inside_the_window_is_caught(tmp_path: Path) -> None:
    """Apply refuses a miss inside the window; the plant is a log whose apply did not (a
    schedule whose window covers its life, yet with times skipped for age)."""
    run = _run(_create(window_ms=EVERY), _fire(T0 + 3 * EVERY, now=T0 + 3 * EVERY + 1, missed=2,
                                               newest=T0 + 2 * EVERY))
    assert run.state.schedules["s"].skipped == {"catchup_window": 2}
    assert _violations(run, tmp_path) == []  # a window of one interval: the skips are right
    run.state.schedules["s"].catchup_window_ms = WINDOW
    assert any("skipped for age" in m for m in _violations(run, tmp_path))


def test_a_schedule_the_log_stopped_firing_is_caught(tmp_path: Path) -> None:
    run = _run(_create(), _fire(T0 + EVERY, now=T0 + EVERY))
    fsm.apply_command(run.state, c.Tick(T0 + 60_000, 0))
    assert any("trails the replicated clock" in m for m in _violations(run, tmp_path))


def test_a_planted_double_fire_is_caught_by_the_auditor(tmp_path: Path) -> None:
    """A scratch copy of a log whose second fire repeats the first time's run: the state machine
    refuses a time that is not after the last, so the plant forges the state, as a bug would."""
    run = _run(_create(), _fire(T0 + EVERY, now=T0 + EVERY))
    run.state.schedules["s"].last_nominal_ms = T0  # the bug: the schedule forgets it fired
    run.state.jobs.pop(next(iter(run.state.jobs)))
    run.state.idempotency.clear()  # ... and the run it started
    command = _fire(T0 + EVERY, now=T0 + EVERY + 500)
    run.auditor.before(3, command, run.state)
    run.auditor.observe(3, command, fsm.apply_command(run.state, command), run.state)
    assert [v.check for v in run.auditor.violations] == ["schedule_fire_once"]
