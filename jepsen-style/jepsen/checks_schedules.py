"""Schedules (issue 25): every nominal time of an interval schedule, from its creation to the
last one the log reached, has exactly one run or a skip its policy names; none is skipped for
age while its window covers the run; and the log reached the times a leader had to fire by the
end. (Part of `jepsen.checker`; "at most one run per nominal time" is the auditor's
schedule_fire_once, checked during the replay.)

Accounting, per schedule, over its interval grid (anchored at start_at, else the Unix epoch):
the times in (created, last fired] are each either a run (the auditor saw the entry that started
it) or one of the skips the schedule counts by reason (overlap, refused, exists, ...); more
times without a run than skips counted is a time the log lost. A cron schedule's grid needs the
zone's rules, which the checker does not evaluate: it is counted, not checked."""

from __future__ import annotations

from jepsen.checks_history import _Findings
from jepsen.checks_replay import _Replay
from raftsched.state.model import Schedule

CHECK = "schedule_every_time"
END_SLACK_MS = 5_000
"""At the end of the replay the newest fired time may trail the replicated clock by one
interval plus this (the leader's firing period, a TICK's lag, the last entries in flight)."""


def check_schedules(run: _Replay, found: _Findings) -> None:
    if run.broken:
        return
    for schedule in run.state.schedules.values():
        if schedule.every_ms <= 0:
            found.count(CHECK)
            found.note(f"schedule {schedule.id}: a cron rule, not checked time by time")
            continue
        _check_one(schedule, run, found)


def grid(schedule: Schedule, after_ms: int, until_ms: int) -> range:
    """The schedule's interval times in (after_ms, until_ms]."""
    every, anchor = schedule.every_ms, schedule.start_at_ms
    first = max(anchor, anchor + ((after_ms - anchor) // every + 1) * every)
    return range(first, until_ms + 1, every)


def _check_one(schedule: Schedule, run: _Replay, found: _Findings) -> None:
    times = grid(schedule, schedule.created_ms, schedule.last_nominal_ms)
    found.count(CHECK, max(1, len(times)))  # the figure: nominal times accounted for
    runs = run.auditor.schedule_runs
    without_run = [t for t in times if (schedule.id, schedule.created_ms, t) not in runs]
    skipped = sum(schedule.skipped.values())
    if len(without_run) > skipped:
        found.violate(CHECK, f"schedule {schedule.id}: {len(without_run)} of its {len(times)} "
                             f"nominal times have no run but only {skipped} skips are counted "
                             f"({dict(schedule.skipped)}); first without a run: "
                             f"{without_run[:3]} (epoch ms)", keys=(schedule.id,))
    aged = schedule.skipped.get("catchup_window", 0)
    if aged and schedule.catchup_window_ms >= run.state.now_ms - schedule.created_ms:
        found.violate(CHECK, f"schedule {schedule.id}: {aged} nominal times skipped for age "
                             f"though its catch-up window ({schedule.catchup_window_ms} ms) "
                             f"covers its whole life", keys=(schedule.id,))
    if not schedule.paused and \
            schedule.last_nominal_ms < run.state.now_ms - schedule.every_ms - END_SLACK_MS:
        found.violate(CHECK, f"schedule {schedule.id}: the log's last fired time "
                             f"{schedule.last_nominal_ms} trails the replicated clock "
                             f"{run.state.now_ms} by more than an interval: times inside the "
                             f"catch-up window were not fired while a leader existed",
                      keys=(schedule.id,))
