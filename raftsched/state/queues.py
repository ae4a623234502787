"""A task's place in the state: its state changes (`set_state`) and everything they keep in step —
the job's counts and state, tenant usage, the ready queues, the timers, the aging counters and
the change notes the event stream reads. Every other apply module moves tasks through here."""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Callable

from raftsched.state.model import (
    A_ASSIGNED,
    A_RUNNING,
    PLACED_TASK_STATES,
    PLACEMENT_LATENCY_BUCKETS_MS,
    QUEUED_TASK_STATES,
    T_ASSIGNED,
    T_CANCELLED,
    T_FAILED,
    T_PENDING,
    T_RETRY_WAIT,
    T_RUNNABLE,
    T_RUNNING,
    T_SKIPPED,
    T_SUCCEEDED,
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    Aging,
    Attempt,
    Change,
    Job,
    JobState,
    ReadyQueue,
    ShapeQueue,
    State,
    Stats,
    Task,
    TaskShape,
    TaskState,
    TimerKind,
    ready_rank_ms,
    shape_of,
)
from raftsched.state.queries import derive_job_state, ready_entry_live

_QUEUED = tuple(s in QUEUED_TASK_STATES for s in TaskState)
_PLACED = tuple(s in PLACED_TASK_STATES for s in TaskState)
"""By TaskState value: whether a task in it counts as queued / placed in its tenant's usage."""


STALE_READY_SLACK = 1024
"""A ready-queue heap is rebuilt without its stale entries once they outnumber its live ones by
this many (`_tidy`). Snapshots hold only live entries, so this shapes no replicated bytes."""


def set_state(state: State, job: Job, task: Task, new: TaskState) -> None:
    old = task.state
    if old == new:
        return
    if old == T_RETRY_WAIT:
        task.retry_at_ms = None
    task.state = new
    changes = state.changes
    if changes is not None:
        changes.append(("task", job.id, job.spec.tenant, task.spec.id, new.name, 0, 0, "",
                        task.reason, state.now_ms))
    if task.aged:
        _unage(state, task, old)
    if old == T_RUNNABLE:
        if task.reserved_on is not None:
            release_reservation(state, task)
        queue = state.queues[job.spec.tenant]
        queue.live -= 1
        shape = shape_of(task.spec)
        shape_queue = queue.shapes[shape]
        shape_queue.live -= 1
        _tidy(state, queue, shape, shape_queue)
    counts = job.counts
    counts[old] -= 1
    counts[new] += 1
    if _QUEUED[old] != _QUEUED[new] or _PLACED[old] != _PLACED[new]:
        usage = state.usage[job.spec.tenant]
        queued = _QUEUED[new] - _QUEUED[old]
        usage.queued += queued
        usage.queued_by_class[job.spec.priority_class.rank] += queued
        state.queued_total += queued
        usage.running += _PLACED[new] - _PLACED[old]
    live = state.live_task_counts  # the job is live: a terminal job's tasks never move
    live[old] -= 1
    live[new] += 1
    if job.state == JobState.PENDING and new in (T_ASSIGNED, T_RUNNING):
        job.state = JobState.RUNNING
        state.job_index.move(job.spec.tenant, JobState.PENDING, JobState.RUNNING, job.seq,
                             job.id)
        if changes is not None:
            note_job(changes, job, state.now_ms)
    if new in TERMINAL_TASK_STATES:
        _maybe_finish_job(state, job)


def _maybe_finish_job(state: State, job: Job) -> None:
    counts = job.counts
    done = counts[T_SUCCEEDED] + counts[T_FAILED] + counts[T_SKIPPED] + counts[T_CANCELLED]
    if done != len(job.tasks) or job.state in TERMINAL_JOB_STATES:
        return
    old = job.state
    job.state = derive_job_state(job)
    state.job_index.move(job.spec.tenant, old, job.state, job.seq, job.id)
    job.finished_ms = state.now_ms
    if state.changes is not None:
        note_job(state.changes, job, state.now_ms)
    state.live_jobs -= 1
    live = state.live_task_counts
    for task_state, count in enumerate(counts):
        live[task_state] -= count
    state.finished_jobs.append((state.now_ms, job.id))


def note_job(changes: list[Change], job: Job, at_ms: int) -> None:
    changes.append(("job", job.id, job.spec.tenant, "", job.state.name, 0, 0, "", job.reason,
                    at_ms))


def note_attempt(changes: list[Change], job: Job, task: Task, attempt: Attempt,
                 at_ms: int) -> None:
    changes.append(("attempt", job.id, job.spec.tenant, task.spec.id, attempt.state.name,
                    attempt.fence, attempt.number, attempt.cluster_id, attempt.reason, at_ms))


def note_cluster(state: State, cluster_id: str, status: str, reason: str) -> None:
    """A cluster's status changed (READY, SUSPECT, LOST; REMOVED; drained or not: see
    apply_cluster_drain), when changes are collected (`State.changes`)."""
    if state.changes is not None:
        state.changes.append(("cluster", "", "", "", status, 0, 0, cluster_id, reason,
                              state.now_ms))


def count_new_tasks(state: State, job: Job, count: int) -> None:
    """`count` PENDING tasks joined a live job (its creation, a `for_each` expansion): every
    counter of tasks in step."""
    job.counts[T_PENDING] += count
    state.task_count += count
    state.live_task_counts[T_PENDING] += count
    usage = state.usage[job.spec.tenant]
    usage.queued += count
    usage.queued_by_class[job.spec.priority_class.rank] += count
    state.queued_total += count


def make_runnable(state: State, job: Job, task: Task) -> None:
    """Enter the tenant's ready queue for the task's shape. Entries are never removed from the
    middle of a heap: an entry whose task left RUNNABLE, or re-entered with a newer `ready_gen`,
    is stale and is skipped, and `_tidy` drops stale entries."""
    assert task.state != T_RUNNABLE
    queue = state.queues[job.spec.tenant]
    task.ready_gen += 1
    set_state(state, job, task, T_RUNNABLE)
    shape = shape_of(task.spec)
    shape_queue = queue.shapes.get(shape)
    if shape_queue is None:
        shape_queue = queue.shapes[shape] = ShapeQueue()
    queue.live += 1
    shape_queue.live += 1
    task.ready_ms = state.now_ms
    state.aged_runnable.young.append((state.now_ms, job.id, task.index, task.ready_gen))
    heapq.heappush(shape_queue.heap,
                   (ready_rank_ms(job), job.seq, task.index, task.ready_gen, job.id))
    _tidy(state, queue, shape, shape_queue)


def _tidy(state: State, queue: ReadyQueue, shape: TaskShape, shape_queue: ShapeQueue) -> None:
    """Keep stale entries from costing every planning round: drop those at the heap's head (a
    task placed from the front of the queue: the common case, O(log n) each), rebuild the heap
    once stale entries outnumber live ones by STALE_READY_SLACK (amortised O(1)), and forget a
    shape with no live task. A walk (`iter_ready`) passes every stale entry ahead of the live
    ones it yields: without this, a placed 10,000-task job was walked whole by every later
    round."""
    heap = shape_queue.heap
    while heap and not ready_entry_live(state, heap[0]):
        heapq.heappop(heap)
    if not shape_queue.live:
        assert not heap, "a shape without live tasks holds only stale entries"
        del queue.shapes[shape]
    elif len(heap) > 2 * shape_queue.live + STALE_READY_SLACK:
        shape_queue.heap = [e for e in heap if ready_entry_live(state, e)]
        heapq.heapify(shape_queue.heap)


def push_timer(state: State, deadline_ms: int, fence: int, kind: TimerKind, job_id: str,
               index: int) -> None:
    heapq.heappush(state.timers, (deadline_ms, fence, int(kind), index, job_id))
    if len(state.timers) > state.timers_rebuild_at:
        state.timers = [e for e in state.timers if _timer_live(state, e)]
        heapq.heapify(state.timers)
        state.timers_rebuild_at = 2 * len(state.timers) + 4096


def _timer_live(state: State, entry: tuple[int, int, int, int, str]) -> bool:
    deadline, fence, kind, index, job_id = entry
    job = state.jobs.get(job_id)
    if job is None:
        return False
    task = job.tasks[index]
    if kind == TimerKind.RETRY:
        return task.state == T_RETRY_WAIT and task.retry_at_ms == deadline
    attempt = task.current
    if attempt is None or attempt.fence != fence:
        return False
    wanted = A_ASSIGNED if kind == TimerKind.ASSIGN_TIMEOUT else A_RUNNING
    return attempt.state == wanted


def release_reservation(state: State, task: Task) -> None:
    if task.reserved_on is None:
        return
    cluster = state.clusters[task.reserved_on]
    assert cluster.reserved_for is not None and cluster.reserved_for[1] == task.index
    cluster.reserved_for = None
    cluster.reserved_since_ms = 0
    task.reserved_on = None


def observe_wait(stats: Stats, waited_ms: int) -> None:
    waited_ms = max(0, waited_ms)
    stats.placement_ms_buckets[bisect.bisect_left(PLACEMENT_LATENCY_BUCKETS_MS, waited_ms)] += 1
    stats.placement_ms_sum += waited_ms


def age(state: State, aging: Aging, still: Callable[[Task, int], bool]) -> None:
    """Count the tasks that entered `aging`'s state more than `after_ms` ago and are still in it
    (`model.Aging`): each entry leaves `young` once."""
    boundary = state.now_ms - aging.after_ms
    aging.boundary_ms = boundary
    young = aging.young
    while young and young[0][0] < boundary:
        _, job_id, index, token = young.popleft()
        job = state.jobs.get(job_id)
        if job is None:
            continue
        task = job.tasks[index]
        if still(task, token) and not task.aged & aging.bit:
            task.aged |= aging.bit
            aging.count += 1


def derive_aging(state: State) -> None:
    """Rebuild both Aging counters from the tasks (a snapshot load): O(live tasks)."""
    entries: dict[int, list[tuple[int, str, int, int]]] = {T_RUNNABLE: [], T_ASSIGNED: []}
    for job in state.jobs.values():
        if job.state in TERMINAL_JOB_STATES:
            continue
        for task in job.tasks:
            task.aged = 0
            if task.state == T_RUNNABLE:
                entries[T_RUNNABLE].append((task.ready_ms, job.id, task.index, task.ready_gen))
            elif task.state == T_ASSIGNED:
                attempt = task.current
                assert attempt is not None
                entries[T_ASSIGNED].append((attempt.assigned_ms, job.id, task.index,
                                           attempt.fence))
    for aging, task_state in ((state.aged_runnable, T_RUNNABLE), (state.aged_assigned, T_ASSIGNED)):
        aging.count = 0
        aging.young = deque(sorted(entries[task_state]))
    age(state, state.aged_runnable, still_runnable)
    age(state, state.aged_assigned, still_assigned)


def still_runnable(task: Task, ready_gen: int) -> bool:
    return task.state == T_RUNNABLE and task.ready_gen == ready_gen


def still_assigned(task: Task, fence: int) -> bool:
    attempt = task.current
    return task.state == T_ASSIGNED and attempt is not None and attempt.fence == fence \
        and attempt.state == A_ASSIGNED


def _unage(state: State, task: Task, left: TaskState) -> None:
    """`task` left state `left`: uncount it from that state's Aging."""
    for aging, state_left in ((state.aged_runnable, T_RUNNABLE), (state.aged_assigned, T_ASSIGNED)):
        if left == state_left and task.aged & aging.bit:
            task.aged &= ~aging.bit
            aging.count -= 1
