"""Every invariant of the whole state, asserted: `check_invariants(state)`.

O(state), so it is for tests, simulations and the log auditor (every so many entries), never
for a replica's apply path. Checks: counters (live jobs, tasks, per-state task counts, ready
queue sizes, kill directives) match what they count; a job's state is the one its tasks derive;
fences are unique and grow along each task's attempts; only a task's current attempt may be
live, and exactly when the task is ASSIGNED or RUNNING, registered on its cluster; a kill
directive names an ended attempt placed on its cluster, within the cluster's bound; dependencies
were satisfied before a task became runnable; each cluster's reservations are the sum of its
live attempts and fit its capacity unless it is marked overcommitted; API tokens are within
MAX_TOKENS, each well-formed as TOKEN_PUT requires, keyed by its id, and in creation order;
tenant usage (queued, running, reserved resources) and the queued total match what they count;
ready-queue entries carry their job's rank (priority with aging); a cluster reservation names a
RUNNABLE task that names it back.
"""

from __future__ import annotations

import itertools

from raftsched import limits
from raftsched.spec.model import runs_when_upstream_done
from raftsched.state import feasibility, policy
from raftsched.state.commands import CertRevoke, ClusterStatus, TokenPut
from raftsched.state.job_index import Key
from raftsched.state.model import (
    A_ASSIGNED,
    A_QUEUED,
    A_RUNNING,
    AGED_ASSIGNED,
    AGED_RUNNABLE,
    LIVE_ATTEMPT_STATES,
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
    Cluster,
    Job,
    State,
    Task,
    TaskState,
    ready_rank_ms,
    shape_of,
)
from raftsched.state.queries import (
    attempt_of_cluster,
    derive_job_state,
    derive_usage,
    ready_entry_live,
)
from raftsched.state.rules import cert_revoke_problem, token_put_problem


def check_invariants(state: State) -> None:
    """Assert every invariant of the whole state. O(state): for tests and simulations."""
    live_jobs = 0
    task_count = 0
    fences: set[int] = set()
    runnable: dict[str, int] = {}
    live_tasks = [0] * len(state.live_task_counts)
    for job_id, job in state.jobs.items():
        assert job.id == job_id
        task_count += len(job.tasks)
        _check_job(state, job, fences)
        if job.state not in TERMINAL_JOB_STATES:
            live_jobs += 1
            live_tasks = [a + b for a, b in zip(live_tasks, job.counts, strict=True)]
        runnable[job.spec.tenant] = runnable.get(job.spec.tenant, 0) + job.counts[T_RUNNABLE]
    assert live_jobs == state.live_jobs, (live_jobs, state.live_jobs)
    assert live_tasks == state.live_task_counts, (live_tasks, state.live_task_counts)
    assert task_count == state.task_count
    assert sum(job.outputs_bytes for job in state.jobs.values()) == state.outputs_bytes
    assert all(f <= state.fence for f in fences)
    for tenant, queue in state.queues.items():
        assert queue.live == runnable.get(tenant, 0), (tenant, queue.live)
        assert queue.live == sum(q.live for q in queue.shapes.values()), tenant
        for shape, shape_queue in queue.shapes.items():
            live = [e for e in shape_queue.heap if ready_entry_live(state, e)]
            assert len(live) == shape_queue.live > 0, (tenant, shape, len(live))
            assert all(shape_of(state.jobs[e[4]].tasks[e[2]].spec) == shape for e in live), shape
            assert all(e[0] == ready_rank_ms(state.jobs[e[4]]) for e in live), shape
    for cluster in state.clusters.values():
        _check_cluster(state, cluster)
    assert state.kill_count == sum(len(c.kills) for c in state.clusters.values())
    assert state.kill_count <= limits.MAX_KILL_DIRECTIVES
    assert len(state.idempotency) <= len(state.idempotency_order)
    _check_tokens(state)
    _check_revoked_certs(state)
    assert len(state.preempted_ms) <= policy.MAX_PREEMPTIONS_PER_WINDOW
    _check_aging(state)
    _check_job_index(state)
    usage, queued_total = derive_usage(state)
    assert usage == state.usage, (usage, state.usage)
    assert queued_total == state.queued_total, (queued_total, state.queued_total)


def _check_job_index(state: State) -> None:
    """The job index holds, per (tenant, state), per tenant, per state and for all, exactly the
    jobs a scan finds, in seq order, counted; no empty order is kept."""
    expected: dict[Key, list[tuple[int, str]]] = {}
    for job in sorted(state.jobs.values(), key=lambda j: j.seq):
        tenant, number = job.spec.tenant, int(job.state)
        keys: tuple[Key, ...] = ((tenant, number), (tenant, None), (None, number), (None, None))
        for key in keys:
            expected.setdefault(key, []).append((job.seq, job.id))
    orders = state.job_index.orders
    assert orders.keys() == expected.keys(), (sorted(map(str, orders)), sorted(map(str, expected)))
    for key, order in orders.items():
        held = [(s, i) for s, i in zip(order.seqs, order.ids, strict=True) if i is not None]
        assert held == expected[key], key
        assert order.live == len(held), (key, order.live, len(held))
        assert all(a < b for a, b in zip(order.seqs, order.seqs[1:], strict=False)), key


def _check_aging(state: State) -> None:
    """The stranded-task counters agree with a scan: a bit only on a task in that state since
    before the last boundary, the count is the bits; RUNNABLE tasks enter in time order, so
    every one that became ready before the boundary is counted."""
    runnable, assigned = state.aged_runnable, state.aged_assigned
    counted = {AGED_RUNNABLE: 0, AGED_ASSIGNED: 0}
    for job in state.jobs.values():
        for task in job.tasks:
            if task.aged & AGED_RUNNABLE:
                counted[AGED_RUNNABLE] += 1
                assert task.state == T_RUNNABLE and task.ready_ms < runnable.boundary_ms
            elif task.state == T_RUNNABLE:
                assert task.ready_ms >= runnable.boundary_ms, (job.id, task.spec.id)
            if task.aged & AGED_ASSIGNED:
                counted[AGED_ASSIGNED] += 1
                attempt = task.current
                assert task.state == TaskState.ASSIGNED and attempt is not None
                assert attempt.assigned_ms < assigned.boundary_ms
    assert (counted[AGED_RUNNABLE], counted[AGED_ASSIGNED]) == (runnable.count, assigned.count)


def _check_job(state: State, job: Job, fences: set[int]) -> None:
    counts = [0] * len(TaskState)
    for task in job.tasks:
        counts[task.state] += 1
        _check_task(state, job, task)
        for attempt in task.attempts:
            assert attempt.fence not in fences, f"fence {attempt.fence} used twice"
            fences.add(attempt.fence)
    assert counts == job.counts, (job.id, counts, job.counts)
    expected = derive_job_state(job)
    assert job.state == expected, (job.id, job.state, expected)


def _check_task(state: State, job: Job, task: Task) -> None:
    attempts = task.attempts
    for older, newer in itertools.pairwise(attempts):
        assert older.fence < newer.fence, "fences must strictly increase"
        assert older.state not in LIVE_ATTEMPT_STATES, "only the current attempt may be live"
    current = task.current
    live = current is not None and current.state in LIVE_ATTEMPT_STATES
    if task.state == T_ASSIGNED:
        assert live and current is not None and current.state in (A_ASSIGNED, A_QUEUED)
    elif task.state == T_RUNNING:
        assert live and current is not None and current.state == A_RUNNING
    else:
        assert not live, (job.id, task.spec.id, task.state, current)
    if live:
        assert current is not None
        cluster = state.clusters[current.cluster_id]
        assert cluster.live.get(current.fence) == (job.id, task.index)
    _check_dependencies(job, task)
    if task.reserved_on is not None:
        assert state.clusters[task.reserved_on].reserved_for == (job.id, task.index)
    assert task.preemptions <= policy.MAX_PREEMPTIONS_PER_TASK, (job.id, task.spec.id)
    assert task.preemptions == 0 or job.spec.preemptible
    retry = task.spec.retry
    assert task.app_failures <= retry.max_attempts
    assert task.infra_failures <= limits.MAX_INFRA_RETRIES + 1
    withdrawn = policy.withdrawals(task)
    assert withdrawn <= policy.MAX_WITHDRAWALS_PER_TASK, (job.id, task.spec.id, withdrawn)
    assert len(attempts) <= (retry.max_attempts + limits.MAX_INFRA_RETRIES + 1 + task.preemptions
                             + withdrawn)
    assert (task.state == T_RETRY_WAIT) == (task.retry_at_ms is not None)


def _check_dependencies(job: Job, task: Task) -> None:
    if task.instances is not None:
        _check_expanded(job, task)
        return
    if task.instance_of >= 0:
        parent = job.tasks[task.instance_of]
        assert parent.instances is not None and task.index in parent.instances, task.spec.id
        assert task.dependents == [parent.index], task.spec.id
    deps = [job.tasks[job.index_of[d]] for d in task.spec.depends_on]
    if runs_when_upstream_done(job.spec.failure_policy, task.spec.trigger):
        satisfied = sum(1 for d in deps if d.state in TERMINAL_TASK_STATES)
    else:
        satisfied = sum(1 for d in deps if d.state == T_SUCCEEDED)
    if task.state == T_PENDING:
        assert task.remaining_deps == len(deps) - satisfied > 0, (task.spec.id, satisfied)
    elif task.state in (T_RUNNABLE, T_ASSIGNED, T_RUNNING, T_RETRY_WAIT, T_SUCCEEDED):
        assert satisfied == len(deps), f"task {task.spec.id} ran before its upstream finished"
    if task.state == T_SKIPPED:
        assert any(d.state in (T_FAILED, T_SKIPPED) for d in deps)


def _check_expanded(job: Job, task: Task) -> None:
    """An expanded for_each task: no attempt of its own; PENDING on its instances until each
    succeeded, SUCCEEDED only once all did."""
    assert task.instances is not None and not task.attempts, task.spec.id
    instances = [job.tasks[index] for index in task.instances]
    assert all(i.instance_of == task.index for i in instances), task.spec.id
    succeeded = sum(1 for i in instances if i.state == T_SUCCEEDED)
    if task.state == T_PENDING:
        assert task.remaining_deps == len(instances) - succeeded > 0, (task.spec.id, succeeded)
    elif task.state == T_SUCCEEDED:
        assert succeeded == len(instances), task.spec.id
    else:
        assert task.state in (T_FAILED, T_CANCELLED), (task.spec.id, task.state)


def _check_cluster(state: State, cluster: Cluster) -> None:
    assert cluster.preemptible == {
        fence: held for fence, held in cluster.live.items()
        if state.jobs[held[0]].spec.preemptible}, f"cluster {cluster.id}: preemptible index"
    _check_queued(state, cluster)
    custom: dict[str, int] = {}
    for fence, (job_id, index) in cluster.live.items():
        if fence not in cluster.queued:  # a queued attempt holds no room
            for name, count in state.jobs[job_id].tasks[index].spec.custom:
                custom[name] = custom.get(name, 0) + count
    assert cluster.reserved_custom == custom, (cluster.id, cluster.reserved_custom, custom)
    cpu = memory = gpu = 0
    for fence, (job_id, index) in cluster.live.items():
        task = state.jobs[job_id].tasks[index]
        attempt = task.current
        assert attempt is not None and attempt.fence == fence
        assert attempt.cluster_id == cluster.id and attempt.state in LIVE_ATTEMPT_STATES
        if fence in cluster.queued:
            continue
        cpu += task.spec.cpu_milli
        memory += task.spec.memory_mb
        gpu += task.spec.gpu
    assert (cpu, memory, gpu) == (
        cluster.reserved_cpu_milli, cluster.reserved_memory_mb, cluster.reserved_gpu
    ), f"cluster {cluster.id} reservations drifted"
    if not cluster.overcommitted:
        assert feasibility.within_capacity(cluster), \
            f"cluster {cluster.id} reserved past its capacity"
    if cluster.reserved_for is not None:
        job_id, index = cluster.reserved_for
        holder = state.jobs[job_id].tasks[index]
        assert holder.state == T_RUNNABLE and holder.reserved_on == cluster.id, \
            f"cluster {cluster.id} reserved for {job_id}/{holder.spec.id} ({holder.state.name})"
    _check_kills(state, cluster)


def _check_queued(state: State, cluster: Cluster) -> None:
    """Late binding: the queued attempts are live ones of this cluster, in fence order, none
    running; a queue holds more than `queue_depth` only after a registration lowered it."""
    fences = list(cluster.queued)
    assert fences == sorted(fences), f"cluster {cluster.id}: queue out of fence order"
    for fence, held in cluster.queued.items():
        assert cluster.live.get(fence) == held, f"cluster {cluster.id}: queued {fence} not live"
        attempt = state.jobs[held[0]].tasks[held[1]].current
        assert attempt is not None and attempt.state in (A_ASSIGNED, A_QUEUED), \
            f"cluster {cluster.id}: queued fence {fence} is {attempt and attempt.state.name}"
    assert cluster.queue_depth <= limits.MAX_AGENT_QUEUE_DEPTH
    for fence, (job_id, _task_id) in cluster.withdrawing.items():
        queued = cluster.queued.get(fence)
        assert queued is not None and queued[0] == job_id, \
            f"cluster {cluster.id}: withdrawing fence {fence} is not queued there"


def _check_kills(state: State, cluster: Cluster) -> None:
    """A kill directive names an ended attempt the state placed on this cluster (or one of a
    job since forgotten); at most MAX_KILL_DIRECTIVES_PER_CLUSTER; none on a LOST cluster."""
    assert len(cluster.kills) <= limits.MAX_KILL_DIRECTIVES_PER_CLUSTER, cluster.id
    assert cluster.kills_unrecorded >= 0, cluster.id
    if cluster.status == ClusterStatus.LOST:
        assert not cluster.kills and not cluster.kills_unrecorded, f"LOST {cluster.id} kills"
    for fence, (job_id, task_id) in cluster.kills.items():
        if job_id not in state.jobs:
            continue
        attempt = attempt_of_cluster(state, cluster.id, job_id, task_id, fence)
        assert attempt is not None, f"cluster {cluster.id}: kill of unknown {job_id}/{task_id} " \
                                    f"fence {fence}"
        assert attempt.state not in LIVE_ATTEMPT_STATES, f"kill of live fence {fence}"


def _check_revoked_certs(state: State) -> None:
    assert len(state.revoked_certs) <= limits.MAX_REVOKED_CERTS, len(state.revoked_certs)
    revoked_ms = 0
    for fingerprint, cert in state.revoked_certs.items():
        assert cert.fingerprint == fingerprint, (fingerprint, cert.fingerprint)
        problem = cert_revoke_problem(CertRevoke(fingerprint, cert.subject, cert.reason, 0))
        assert problem is None, f"revoked certificate {fingerprint}: {problem}"
        assert revoked_ms <= cert.revoked_ms <= state.now_ms, f"{fingerprint} out of order"
        revoked_ms = cert.revoked_ms


def _check_tokens(state: State) -> None:
    """Only what always holds: no "an admin exists" (a fresh cluster has no token at all)."""
    assert len(state.tokens) <= limits.MAX_TOKENS, len(state.tokens)
    created_ms = 0
    for token_id, token in state.tokens.items():
        assert token.id == token_id, (token_id, token.id)
        as_put = TokenPut(token.id, token.digest, token.tenant, str(token.role), token.note, 0)
        problem = token_put_problem(as_put)
        assert problem is None, f"token {token_id}: {problem}"
        assert created_ms <= token.created_ms <= state.now_ms, f"token {token_id} out of order"
        created_ms = token.created_ms
