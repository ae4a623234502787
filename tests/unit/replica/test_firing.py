"""The leader's schedule timer (`replica/firing.py`) over the real state machine: what it plans,
and a seeded failover run — leaders change exactly at fire times, stale leaders' proposals
commit late or twice, the clock jumps over downtimes with no leader — after which every nominal
time has at most one run, and every time whose catch-up window saw a leader has exactly one."""

from __future__ import annotations

import os
import random

import pytest

from raftsched.replica.firing import MISSED_PER_COMMAND, plan_fires
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.invariants import check_invariants
from raftsched.state.model import State
from raftsched.state.outcome import Applied
from raftsched.state.results import ScheduleFired
from raftsched.state.schedule_times import stamp
from tests.support.fsmkit import job_doc, task_doc

EVERY = 1_000
WINDOW = 30_000
T0 = 1_800_000_000_000


def created(overlap: str = "allow", window_ms: int = WINDOW) -> State:
    state = State()
    spec = doc_to_wire(job_doc([task_doc("a")]))
    outcome = fsm.apply_command(state, c.ScheduleCreate(
        "every1s", spec, [], EVERY, 0, 0, overlap, window_ms, 0, T0))
    assert isinstance(outcome, Applied)
    return state


def test_nothing_is_due_before_the_first_interval_and_one_time_after_it() -> None:
    state = created()
    assert plan_fires(state, T0 + 999) == []
    assert plan_fires(state, T0 + 1_000) == [
        c.ScheduleFire("every1s", (T0 + 1_000,), 0, 0, T0 + 1_000)]


def test_a_long_outage_is_counted_in_pieces_then_the_window_fires() -> None:
    state = created()
    now = T0 + (2 * MISSED_PER_COMMAND + 100) * EVERY
    first = plan_fires(state, now)[0]
    assert (first.nominals, first.missed) == ((), MISSED_PER_COMMAND)
    for _ in range(3):
        (plan,) = plan_fires(state, now)
        assert isinstance(fsm.apply_command(state, plan), Applied)
    s = state.schedules["every1s"]
    # the window [now - WINDOW, now] holds 31 times; the older ones are counted misses
    assert s.skipped["catchup_window"] == 2 * MISSED_PER_COMMAND + 100 - 31
    assert s.fired == 31 and s.last_nominal_ms == now
    assert plan_fires(state, now) == []


def test_a_paused_schedule_plans_nothing() -> None:
    state = created()
    fsm.apply_command(state, c.ScheduleSet("every1s", True, "", T0))
    assert plan_fires(state, T0 + 10 * EVERY) == []


SEED = int(os.environ.get("RAFTSCHED_SEED", "0")) or random.randrange(1, 1 << 30)


@pytest.mark.parametrize("run", range(6))
def test_failovers_fire_each_nominal_time_once(run: int) -> None:
    seed = SEED + run
    print(f"seed {seed} (RAFTSCHED_SEED={SEED} to repeat)")
    rng = random.Random(seed)
    state = created()
    started: list[str] = []
    leader_at: list[int] = []
    stale: list[c.ScheduleFire] = []
    now = T0
    for _ in range(300):
        now += rng.choice([EVERY, 1, 137, 999, EVERY * rng.randint(1, 80)])
        if rng.random() < 0.1:
            now -= now % EVERY  # a leader change exactly at a fire time
        if rng.random() < 0.15:
            continue  # no leader now
        leader_at.append(now)
        view = state if rng.random() < 0.7 else snapshot.load(snapshot.dump(state))
        plans = plan_fires(view, now)
        if stale and rng.random() < 0.3:
            plans.insert(rng.randrange(len(plans) + 1), stale.pop(0))  # committed late
        for plan in plans:
            for _copy in range(rng.choice([1, 1, 2])):  # a retried proposal commits twice
                outcome = fsm.apply(state, c.encode(plan))
                if isinstance(outcome, Applied) and isinstance(outcome.result, ScheduleFired):
                    started.extend(outcome.result.job_ids)
            stale.append(plan)
    check_invariants(state)
    assert len(started) == len(set(started)), f"seed {seed}: a time fired twice"
    assert set(started) == set(state.jobs)
    expected = _expected(leader_at, state.schedules["every1s"].last_nominal_ms)
    got = {_nominal(job_id) for job_id in state.jobs}
    assert got == expected, f"seed {seed}: missing {sorted(expected - got)[:5]}, " \
                            f"extra {sorted(got - expected)[:5]}"


def _nominal(job_id: str) -> str:
    return job_id.removeprefix("every1s-")


def _expected(leader_at: list[int], last_ms: int) -> set[str]:
    """Every grid time up to the last one passed whose first leader step came within the
    catch-up window."""
    out, index = set(), 0
    for t in range(T0 + EVERY, last_ms + 1, EVERY):
        while index < len(leader_at) and leader_at[index] < t:
            index += 1
        if index < len(leader_at) and leader_at[index] - WINDOW <= t:
            out.add(stamp(t))
    return out
