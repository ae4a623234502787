"""What the state forgets, and when: idempotency keys past IDEMPOTENCY_TTL_MS or past
MAX_IDEMPOTENCY_KEYS, and finished jobs past JOB_RETENTION_MS or MAX_RETAINED_JOBS (each with a
"forgotten" event)."""

from __future__ import annotations

from raftsched import limits
from raftsched.state.model import TERMINAL_JOB_STATES, IdempotencyRecord, State

FORGOTTEN_FOR_AGE = "retention: finished more than JOB_RETENTION_MS ago"
"""The reason of a "forgotten" event of a job dropped by a TICK (`expire_jobs`)."""


FORGOTTEN_FOR_ROOM = "retention: the oldest finished job makes room (MAX_RETAINED_JOBS)"
"""The reason of a "forgotten" event of a job dropped to admit a new one."""


def remember_key(state: State, tenant: str, key: str, job_id: str, digest: bytes,
                 created_ms: int | None = None) -> None:
    """Remember an idempotency key, made now or (a key handed over with its shard) at
    `created_ms`; the oldest key makes room past MAX_IDEMPOTENCY_KEYS."""
    made_ms = state.now_ms if created_ms is None else created_ms
    if len(state.idempotency) >= limits.MAX_IDEMPOTENCY_KEYS:
        expire_oldest_key(state)
    state.idempotency[(tenant, key)] = IdempotencyRecord(job_id, digest, made_ms)
    state.idempotency_order.append((made_ms, tenant, key))


def expire_oldest_key(state: State) -> None:
    created_ms, tenant, key = state.idempotency_order.popleft()
    record = state.idempotency.get((tenant, key))
    if record is not None and record.created_ms == created_ms:
        del state.idempotency[(tenant, key)]


def expire_keys(state: State) -> int:
    expired = 0
    order = state.idempotency_order
    while order and order[0][0] + limits.IDEMPOTENCY_TTL_MS <= state.now_ms:
        expire_oldest_key(state)
        expired += 1
    return expired


def expire_jobs(state: State) -> int:
    forgotten = 0
    while (state.finished_jobs
           and state.finished_jobs[0][0] + limits.JOB_RETENTION_MS <= state.now_ms):
        forget_job(state, state.finished_jobs[0][1], FORGOTTEN_FOR_AGE)
        forgotten += 1
    return forgotten


def forget_job(state: State, job_id: str, why: str) -> None:
    """Drop a finished job from the state (retention); a "forgotten" event says so, with the
    job's final state and `why`, so that a console or integration drops it too."""
    state.finished_jobs.popleft()
    job = state.jobs.pop(job_id)
    assert job.state in TERMINAL_JOB_STATES
    state.job_index.remove(job.spec.tenant, job.state, job.seq)
    if state.changes is not None:
        state.changes.append(("forgotten", job.id, job.spec.tenant, "", job.state.name, 0, 0,
                              "", why, state.now_ms))
    state.task_count -= len(job.tasks)
    state.outputs_bytes -= job.outputs_bytes
    key = job.spec.idempotency_key
    if key is not None:
        record = state.idempotency.get((job.spec.tenant, key))
        if record is not None and record.job_id == job_id:
            del state.idempotency[(job.spec.tenant, key)]
