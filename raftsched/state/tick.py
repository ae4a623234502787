"""Time: a TICK fires due timers (retries, assignment and run timeouts), expires what retention
forgets, and ages the stranded-task counters."""

from __future__ import annotations

import heapq

from raftsched import limits
from raftsched.spec.model import OnLost
from raftsched.state.commands import Tick
from raftsched.state.lifecycle import app_failure, end_attempt, infra_failure
from raftsched.state.model import (
    A_ASSIGNED,
    A_RUNNING,
    T_RETRY_WAIT,
    AttemptState,
    State,
    TimerKind,
)
from raftsched.state.outcome import Applied
from raftsched.state.queues import age, make_runnable, still_assigned, still_runnable
from raftsched.state.results import TickResult
from raftsched.state.retention import expire_jobs, expire_keys


def apply_tick(state: State, cmd: Tick) -> Applied[TickResult]:
    fired = 0
    timers = state.timers
    while timers and timers[0][0] <= state.now_ms and fired < limits.MAX_TIMER_EXPIRIES_PER_TICK:
        entry = heapq.heappop(timers)
        if _fire_timer(state, entry, cmd.entropy + fired):
            fired += 1
    expired_keys = expire_keys(state)
    forgotten = expire_jobs(state)
    age(state, state.aged_runnable, still_runnable)
    age(state, state.aged_assigned, still_assigned)
    return Applied(TickResult(fired, expired_keys, forgotten))


def _fire_timer(state: State, entry: tuple[int, int, int, int, str], entropy: int) -> bool:
    deadline, fence, kind, index, job_id = entry
    job = state.jobs.get(job_id)
    if job is None:
        return False
    task = job.tasks[index]
    attempt = task.current
    if kind == TimerKind.RETRY:
        if task.state != T_RETRY_WAIT or task.retry_at_ms != deadline:
            return False
        make_runnable(state, job, task)
        return True
    if attempt is None or attempt.fence != fence:
        return False
    if kind == TimerKind.ASSIGN_TIMEOUT:
        if attempt.state != A_ASSIGNED or task.spec.on_lost != OnLost.REPLACE:
            return False
        end_attempt(state, job, task, attempt, AttemptState.LOST,
                    "assignment never confirmed by the agent", kill=True)
        infra_failure(state, job, task, immediate=True, entropy=entropy)
        return True
    if attempt.state != A_RUNNING:
        return False
    end_attempt(state, job, task, attempt, AttemptState.TIMED_OUT,
                "no result within timeout_s", kill=True)
    app_failure(state, job, task, None, entropy)
    return True
