"""The leader's schedule timer (issue 25): which schedules have due fire times, proposed as
SCHEDULE_FIRE with the nominal times and the clock.

Only the leader fires, from its loop (`Leader._round`). It computes fire times from the rule
(`due_times`; apply never does, so replicas with different tzdata cannot diverge) strictly
after the schedule's committed `last_nominal_ms`, so a new leader simply continues where the
log says the last one stopped: a time the old leader fired is not after it, and a FIRE it
proposed twice is refused the second time. Times older than the schedule's catch-up window go
as a count of misses plus the newest (in pieces of MISSED_PER_COMMAND); the rest fire, at most
MAX_FIRES_PER_COMMAND per entry. `plan_fires` is pure (the state and now in, commands out);
`Firing` runs it against the node and proposes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

from raftsched import limits
from raftsched.clock import Clock
from raftsched.eventlog import EventLogger
from raftsched.replica.proposals import Proposer, for_leader
from raftsched.replica.raft.port import RaftPort
from raftsched.schedules.cron import Cron, CronError, fires_after, parse_cron, zone_of
from raftsched.state import commands as c
from raftsched.state.model import Schedule, State
from raftsched.state.results import ScheduleFired
from raftsched.state.schedule_times import has_waiting_release, interval_fires_after

log = EventLogger("raftsched.firing")

MISSED_PER_COMMAND = 10_000
"""Missed times one SCHEDULE_FIRE counts (a long outage of a fast schedule takes a few)."""

DueTimes = Callable[[Schedule, int, int, int], list[int]]
"""(schedule, after_ms, until_ms, limit) -> its fire times in (after_ms, until_ms], ascending,
at most limit."""


def due_times(schedule: Schedule, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """An interval rule's times, by arithmetic; a cron rule's on its zone's wall clock (this
    replica's tzdata: only the leader asks), within start_at/end_at."""
    if schedule.every_ms > 0:
        return interval_fires_after(schedule, after_ms, limit, until_ms)
    rule = cron_rule(schedule.rule)
    if rule is None:
        return []
    cron, zone = rule
    after = max(after_ms, schedule.start_at_ms - 1)
    until = min(until_ms, schedule.end_at_ms) if schedule.end_at_ms else until_ms
    return fires_after(cron, zone, after, limit, until) if until > after else []


@functools.lru_cache(maxsize=limits.MAX_SCHEDULES)
def _parsed(text: str, zone_name: str) -> tuple[Cron, ZoneInfo] | None:
    try:
        return parse_cron(text), zone_of(zone_name)
    except CronError as error:  # a zone this replica's tzdata lacks: say so, fire nothing
        log.warning("schedule_rule_unusable", rule=text, zone=zone_name, error=str(error))
        return None


def cron_rule(rule: list[Any]) -> tuple[Cron, ZoneInfo] | None:
    """The cron rule and zone of a stored ["cron", text, zone] wire form, else None."""
    if len(rule) == 3 and rule[0] == "cron" and isinstance(rule[1], str) \
            and isinstance(rule[2], str):
        return _parsed(rule[1], rule[2])
    return None


def plan_fires(state: State, now_ms: int, due: DueTimes = due_times) -> list[c.ScheduleFire]:
    """The fires due at `now_ms`, one command per schedule that has something to do."""
    plans = []
    for schedule in state.schedules.values():
        plan = _plan_one(state, schedule, now_ms, due)
        if plan is not None:
            plans.append(plan)
    return plans


def _plan_one(state: State, schedule: Schedule, now_ms: int,
              due: DueTimes) -> c.ScheduleFire | None:
    if schedule.paused:
        return None
    after = schedule.last_nominal_ms
    cut = now_ms - schedule.catchup_window_ms  # a time before it is a miss
    missed = due(schedule, after, cut - 1, MISSED_PER_COMMAND) if cut - 1 > after else []
    if len(missed) == MISSED_PER_COMMAND:  # more misses follow: count these first
        return c.ScheduleFire(schedule.id, (), len(missed), missed[-1], now_ms)
    start = missed[-1] if missed else after
    nominals = tuple(due(schedule, start, now_ms, limits.MAX_FIRES_PER_COMMAND))
    if missed or nominals or has_waiting_release(state, schedule):
        return c.ScheduleFire(schedule.id, nominals, len(missed),
                              missed[-1] if missed else 0, now_ms)
    return None


class Firing:
    """Proposes what `plan_fires` finds, every SCHEDULE_FIRE_PERIOD_S at most. `lag` hears
    each fired nominal time's lag (seconds from the nominal time to the proposal)."""

    def __init__(self, node: RaftPort, proposer: Proposer, clock: Clock,
                 lag: Callable[[float], None] = lambda _s: None,
                 due: DueTimes = due_times) -> None:
        self._node = node
        self._proposer = proposer
        self._clock = clock
        self._lag = lag
        self._due = due
        self._last_s = float("-inf")

    def fire_due(self) -> None:
        now_s = self._clock.monotonic_s()
        if now_s - self._last_s < limits.SCHEDULE_FIRE_PERIOD_S:
            return
        self._last_s = now_s
        now_ms = self._clock.now_ms()
        for command in self._node.read(lambda s: plan_fires(s, now_ms, self._due)):
            result = for_leader(self._proposer.propose(command), "schedule_fire")
            if isinstance(result, ScheduleFired):
                for nominal in command.nominals:
                    self._lag(max(0.0, (now_ms - nominal) / 1000))
                log.info("schedule_fired", schedule=command.schedule_id,
                         jobs=list(result.job_ids), skipped=result.skipped)
