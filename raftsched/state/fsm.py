"""The deterministic scheduler state machine.

`apply(state, entry) -> Outcome` is a pure function of the state and the entry bytes: no clock,
no randomness, no environment, no I/O. Time and entropy arrive inside the commands. Two replicas
fed the same log reach byte-identical snapshots (`snapshot.dump`).

One `apply_<command>` handler per command tag. Handlers return `Applied` or `Rejected`; they raise
only for bugs (assertions). Every event costs O(out-degree of the task it touches); nothing scans
a job or the state, except the operations whose inherent cost is the job (cancel, fail_fast) and
`invariants.check_invariants`, which tests and simulations run after each apply.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from raftsched import limits
from raftsched.errors import Code
from raftsched.protocol import ReportVerdict, id_problem
from raftsched.protocol import id_problem as tenant_name_problem  # the spec's one rule
from raftsched.spec.issue import show
from raftsched.spec.model import FailurePolicy, JobSpec, OnLost, SpecError, Trigger
from raftsched.spec.wire import validate_wire
from raftsched.state import feasibility, policy
from raftsched.state.commands import (
    AssignBatch,
    AttemptMarkLost,
    Barrier,
    CertRevoke,
    ClusterDrain,
    ClusterRegister,
    ClusterRemove,
    ClusterStatus,
    ClusterStatusChange,
    Command,
    CommandError,
    JobCancel,
    JobSubmit,
    Placement,
    Preemption,
    Report,
    ReportBatch,
    ReportKind,
    Reservation,
    TenantSet,
    Tick,
    TokenPut,
    TokenRevoke,
    decode,
)
from raftsched.state.feasibility import Unfit, unfit_committed
from raftsched.state.model import (
    ALL_TENANTS,
    LIVE_ATTEMPT_STATES,
    PLACED_TASK_STATES,
    PLACEMENT_LATENCY_BUCKETS_MS,
    QUEUED_TASK_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    TOKEN_DIGEST_BYTES,
    TOKEN_ID_CHARS,
    Aging,
    Attempt,
    AttemptState,
    Change,
    Cluster,
    IdempotencyRecord,
    Job,
    JobState,
    Note,
    ReadyQueue,
    RevokedCert,
    Role,
    ShapeQueue,
    State,
    Stats,
    Task,
    TaskShape,
    TaskState,
    TenantPolicy,
    TenantUsage,
    TimerKind,
    TokenRecord,
    ready_rank_ms,
    shape_of,
)
from raftsched.state.results import (
    Assigned,
    AssignResult,
    BarrierResult,
    CertRevoked,
    ClusterDrained,
    ClusterRegistered,
    ClusterRemoved,
    ClusterStatusChanged,
    Dropped,
    DropReason,
    JobCancelled,
    JobSubmitted,
    MarkedLost,
    ReportResult,
    Result,
    TenantSetResult,
    TickResult,
    TokenPutResult,
    TokenRevokeResult,
)
from raftsched.state.text import text_problem, visible

# Module-level aliases: attribute lookups on enum classes are slow in the per-task hot path.
_PENDING = TaskState.PENDING
_RUNNABLE = TaskState.RUNNABLE
_ASSIGNED = TaskState.ASSIGNED
_RUNNING = TaskState.RUNNING
_RETRY_WAIT = TaskState.RETRY_WAIT
_SUCCEEDED = TaskState.SUCCEEDED
_FAILED = TaskState.FAILED
_SKIPPED = TaskState.SKIPPED
_CANCELLED = TaskState.CANCELLED
_A_ASSIGNED = AttemptState.ASSIGNED
_A_RUNNING = AttemptState.RUNNING
_CLUSTER_FAILURES = frozenset({AttemptState.FAILED, AttemptState.TIMED_OUT, AttemptState.REJECTED})
"""Attempt outcomes that count against the cluster they ended on (`policy.note_failure`)."""
_QUEUED = tuple(s in QUEUED_TASK_STATES for s in TaskState)
_PLACED = tuple(s in PLACED_TASK_STATES for s in TaskState)
"""By TaskState value: whether a task in it counts as queued / placed in its tenant's usage."""

STALE_READY_SLACK = 1024
"""A ready-queue heap is rebuilt without its stale entries once they outnumber its live ones by
this many (`_tidy`). Snapshots hold only live entries, so this shapes no replicated bytes."""

FORGOTTEN_FOR_AGE = "retention: finished more than JOB_RETENTION_MS ago"
"""The reason of a "forgotten" event of a job dropped by a TICK (`_expire_jobs`)."""
FORGOTTEN_FOR_ROOM = "retention: the oldest finished job makes room (MAX_RETAINED_JOBS)"
"""The reason of a "forgotten" event of a job dropped to admit a new one."""

# --- outcomes -----------------------------------------------------------------------------------


R = TypeVar("R", covariant=True)


@dataclass(frozen=True, slots=True)
class Applied(Generic[R]):
    """The command took effect (possibly as a no-op, e.g. a repeated cancel); `result` is the
    command's own result type (`state/results.py`)."""

    result: R


@dataclass(frozen=True, slots=True)
class Rejected:
    code: Code
    reason: str
    retry_after_ms: int = 0
    """Past a limit that drains by itself (a queue limit): when to try again; 0 for none."""


Outcome = Applied[Result] | Rejected


def apply(state: State, entry: bytes) -> Outcome:
    """Apply one log entry. A malformed entry is rejected, deterministically, on every replica."""
    try:
        cmd = decode(entry)
    except CommandError as exc:
        return Rejected(Code.INVALID_ARGUMENT, str(exc))
    return apply_command(state, cmd)


def apply_command(state: State, cmd: Command) -> Outcome:
    state.now_ms = max(state.now_ms, cmd.now_ms)
    match cmd:
        case JobSubmit():
            return apply_job_submit(state, cmd)
        case JobCancel():
            return apply_job_cancel(state, cmd)
        case ClusterRegister():
            return apply_cluster_register(state, cmd)
        case ClusterStatusChange():
            return apply_cluster_status(state, cmd)
        case AssignBatch():
            return apply_assign_batch(state, cmd)
        case ReportBatch():
            return apply_report_batch(state, cmd)
        case Tick():
            return apply_tick(state, cmd)
        case AttemptMarkLost():
            return apply_attempt_mark_lost(state, cmd)
        case Barrier():
            return apply_barrier(state, cmd)
        case TokenPut():
            return apply_token_put(state, cmd)
        case TokenRevoke():
            return apply_token_revoke(state, cmd)
        case ClusterRemove():
            return apply_cluster_remove(state, cmd)
        case TenantSet():
            return apply_tenant_set(state, cmd)
        case ClusterDrain():
            return apply_cluster_drain(state, cmd)
        case CertRevoke():
            return apply_cert_revoke(state, cmd)
    raise AssertionError(f"unhandled command {cmd!r}")


def apply_barrier(state: State, cmd: Barrier) -> Applied[BarrierResult]:
    if cmd.raft_address and cmd.grpc_address:
        known = state.replica_addresses
        if cmd.raft_address in known or len(known) < limits.MAX_REPLICAS:
            known[cmd.raft_address] = cmd.grpc_address
    return Applied(BarrierResult(cmd.nonce))


# --- API tokens ---------------------------------------------------------------------------------

_HEX_DIGITS = frozenset("0123456789abcdef")
_ROLES = {role.value: role for role in Role}


def apply_token_put(state: State, cmd: TokenPut) -> Applied[TokenPutResult] | Rejected:
    """Create a token. The same id again with the same digest, tenant and role is a retry
    (`created=False`); with any of them different it is ALREADY_EXISTS. A bootstrap token
    changes nothing once an admin token exists. An operator or admin token of one tenant is
    kept as older versions kept it (a log written then must replay the same); the replicas
    refuse to propose a new one (`token_scope_problem`) and honour one only as a user."""
    problem = token_put_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    role = _ROLES[cmd.role]
    if cmd.bootstrap and _has_admin(state):
        return Applied(TokenPutResult(cmd.token_id, created=False))
    record = state.tokens.get(cmd.token_id)
    if record is not None:
        differences = _token_differences(record, cmd.digest, cmd.tenant, role)
        if differences:
            return Rejected(Code.ALREADY_EXISTS,
                            f"token {cmd.token_id} already exists with a different "
                            f"{', '.join(differences)}")
        return Applied(TokenPutResult(cmd.token_id, created=False))
    if len(state.tokens) >= limits.MAX_TOKENS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"{len(state.tokens)} tokens held, the bound MAX_TOKENS="
                        f"{limits.MAX_TOKENS}: revoke one first")
    state.tokens[cmd.token_id] = TokenRecord(cmd.token_id, cmd.digest, cmd.tenant, role,
                                             state.now_ms, cmd.note)
    assert len(state.tokens) <= limits.MAX_TOKENS
    return Applied(TokenPutResult(cmd.token_id, created=True))


def token_put_problem(cmd: TokenPut) -> str | None:
    """Why a TOKEN_PUT is malformed (INVALID_ARGUMENT), naming the field, or None. Pure: the
    gRPC side may ask before proposing."""
    if not is_token_id(cmd.token_id):
        return (f"token_id: must be {TOKEN_ID_CHARS} lowercase hex characters, "
                f"got {show(cmd.token_id)}")
    if len(cmd.digest) != TOKEN_DIGEST_BYTES:
        return (f"digest: must be {TOKEN_DIGEST_BYTES} bytes (the sha256 of the secret), "
                f"got {len(cmd.digest)}")
    if cmd.tenant != ALL_TENANTS:
        problem = tenant_name_problem(cmd.tenant)
        if problem is not None:
            return f"tenant: a tenant name (or {ALL_TENANTS!r} for every tenant) {problem}"
    if cmd.role not in _ROLES:
        roles = ", ".join(repr(role) for role in _ROLES)
        return f"role: must be one of {roles}, got {show(cmd.role)}"
    if len(cmd.note) > limits.MAX_TOKEN_NOTE_CHARS:
        return (f"note: must be at most MAX_TOKEN_NOTE_CHARS={limits.MAX_TOKEN_NOTE_CHARS} "
                f"characters, got {len(cmd.note)}")
    if (problem := text_problem("note", cmd.note)) is not None:
        return problem
    if cmd.bootstrap and cmd.role != Role.ADMIN:
        return f"bootstrap: the bootstrap token must have role 'admin', got {show(cmd.role)}"
    return None


def token_scope_problem(cmd: TokenPut) -> str | None:
    """Why a new token's role does not fit its tenant (INVALID_ARGUMENT), or None: an operator
    or admin token is of every tenant, since the Admin RPCs act on every tenant. Older versions
    made such tokens of one tenant, and a state may hold one (it is well formed, and honoured as
    a user: `honoured_role`); the replicas refuse to propose a new one."""
    if cmd.role != Role.USER and cmd.tenant != ALL_TENANTS:
        return (f"role: an {cmd.role} token acts for every tenant, so its tenant must be "
                f"{ALL_TENANTS!r}, got tenant {show(cmd.tenant)}: give --tenant '{ALL_TENANTS}', "
                f"or --role user for a token of tenant {show(cmd.tenant)}")
    return None


def is_token_id(value: str) -> bool:
    """Exactly TOKEN_ID_CHARS lowercase hex characters."""
    return len(value) == TOKEN_ID_CHARS and _HEX_DIGITS.issuperset(value)


def _token_differences(record: TokenRecord, digest: bytes, tenant: str, role: Role) -> list[str]:
    """What makes a TOKEN_PUT differ from the token of its id (the digest itself is not shown)."""
    differences = []
    if record.digest != digest:
        differences.append("digest")
    if record.tenant != tenant:
        differences.append(f"tenant ({show(record.tenant)}, not {show(tenant)})")
    if record.role != role:
        differences.append(f"role ({record.role.value!r}, not {role.value!r})")
    return differences


def apply_token_revoke(state: State, cmd: TokenRevoke) -> Applied[TokenRevokeResult] | Rejected:
    record = state.tokens.get(cmd.token_id)
    if record is None:
        return Rejected(Code.NOT_FOUND, f"token {show(cmd.token_id)} not found")
    if honoured_role(record) == Role.ADMIN and _admin_count(state) == 1:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"token {cmd.token_id} is the last admin token: without one the cluster "
                        f"cannot be managed; create another admin token first")
    del state.tokens[cmd.token_id]
    assert _admin_count(state) > 0 or honoured_role(record) != Role.ADMIN
    return Applied(TokenRevokeResult(cmd.token_id))


def apply_cluster_remove(state: State, cmd: ClusterRemove) -> Applied[ClusterRemoved] | Rejected:
    """Forget a cluster an admin decommissions. Refused while anything still runs or may run
    there (live attempts): first cancel or wait, or let the cluster go LOST so its attempts are
    replaced or confirmed dead. Its unconfirmed kill directives go with it: an agent that
    registers again under that id brings the cluster back, and its registration re-derives a
    kill for every stale attempt it still runs. Finished attempts keep its id in their history;
    tasks pinned to it wait (explain says why)."""
    cluster = state.clusters.get(cmd.cluster_id)
    if cluster is None:
        return Rejected(Code.NOT_FOUND, f"cluster {show(cmd.cluster_id)} not found")
    if cluster.live:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"cluster {cmd.cluster_id} still has {len(cluster.live)} live "
                        "attempt(s): stop its agent and wait until it is LOST and its attempts "
                        "are replaced or confirmed dead, or cancel their jobs, then remove it")
    assert not (cluster.reserved_cpu_milli or cluster.reserved_memory_mb or cluster.reserved_gpu)
    _drop_kills(state, cluster)
    if cluster.reserved_for is not None:
        job_id, index = cluster.reserved_for
        _release_reservation(state, state.jobs[job_id].tasks[index])
    del state.clusters[cmd.cluster_id]
    _note_cluster(state, cmd.cluster_id, "REMOVED", "removed by an admin")
    return Applied(ClusterRemoved(cmd.cluster_id))


def apply_tenant_set(state: State, cmd: TenantSet) -> Applied[TenantSetResult] | Rejected:
    """Set a tenant's weight and limits. Lowering a limit below what the tenant holds refuses
    nothing already accepted: queued tasks stay queued and running ones run on; it bounds what
    comes next."""
    problem = tenant_set_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    record = state.tenants.get(cmd.tenant)
    if record is None and len(state.tenants) >= limits.MAX_TENANTS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"{len(state.tenants)} tenants configured, the bound "
                        f"MAX_TENANTS={limits.MAX_TENANTS}")
    wanted = (cmd.weight, cmd.max_queued, cmd.max_running)
    if record is not None and (record.weight, record.max_queued, record.max_running) == wanted:
        return Applied(TenantSetResult(cmd.tenant, changed=False))
    state.tenants[cmd.tenant] = TenantPolicy(cmd.tenant, cmd.weight, cmd.max_queued,
                                             cmd.max_running, state.now_ms)
    return Applied(TenantSetResult(cmd.tenant, changed=True))


def tenant_set_problem(cmd: TenantSet) -> str | None:
    """Why a TENANT_SET is malformed (INVALID_ARGUMENT), naming the field, or None."""
    if cmd.tenant != ALL_TENANTS:
        problem = tenant_name_problem(cmd.tenant)
        if problem is not None:
            return f"tenant: a tenant name (or {ALL_TENANTS!r} for the defaults) {problem}"
    if not 1 <= cmd.weight <= limits.MAX_TENANT_WEIGHT:
        return f"weight: must be in 1..{limits.MAX_TENANT_WEIGHT}, got {cmd.weight}"
    for name, value in (("max_queued", cmd.max_queued), ("max_running", cmd.max_running)):
        if value > limits.MAX_TASKS_IN_STATE:
            return (f"{name}: must be in 0..{limits.MAX_TASKS_IN_STATE} (0: no limit), "
                    f"got {value}")
    return None


def apply_cluster_drain(state: State, cmd: ClusterDrain) -> Applied[ClusterDrained] | Rejected:
    cluster = state.clusters.get(cmd.cluster_id)
    if cluster is None:
        return Rejected(Code.NOT_FOUND, f"cluster {show(cmd.cluster_id)} not found")
    changed = cluster.draining != cmd.drain
    cluster.draining = cmd.drain
    cluster.drain_reason = visible(cmd.reason)[:limits.MAX_REASON_CHARS] if cmd.drain else ""
    if changed:  # the event's state: DRAINING, or the status it is back to
        _note_cluster(state, cluster.id, "DRAINING" if cmd.drain else cluster.status.name,
                      cluster.drain_reason or "undrained")
    return Applied(ClusterDrained(cluster.id, cmd.drain, changed))


# --- revoked certificates -----------------------------------------------------------------------

CERT_FINGERPRINT_CHARS = 64
"""A certificate fingerprint: the sha256 of its DER bytes, in lowercase hex."""


def apply_cert_revoke(state: State, cmd: CertRevoke) -> Applied[CertRevoked] | Rejected:
    """Remember a revoked client certificate. Revoking one twice is no error (`created=False`,
    the first record stays); there is no un-revoke: issue a new certificate."""
    problem = cert_revoke_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    if cmd.fingerprint in state.revoked_certs:
        return Applied(CertRevoked(cmd.fingerprint, created=False))
    if len(state.revoked_certs) >= limits.MAX_REVOKED_CERTS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"{len(state.revoked_certs)} certificates revoked, the bound "
                        f"MAX_REVOKED_CERTS={limits.MAX_REVOKED_CERTS}: rotate the CA")
    state.revoked_certs[cmd.fingerprint] = RevokedCert(
        cmd.fingerprint, visible(cmd.subject)[:limits.MAX_CERT_SUBJECT_CHARS],
        visible(cmd.reason)[:limits.MAX_REASON_CHARS], state.now_ms)
    return Applied(CertRevoked(cmd.fingerprint, created=True))


def cert_revoke_problem(cmd: CertRevoke) -> str | None:
    """Why a CERT_REVOKE is malformed (INVALID_ARGUMENT), naming the field, or None."""
    if len(cmd.fingerprint) != CERT_FINGERPRINT_CHARS \
            or not _HEX_DIGITS.issuperset(cmd.fingerprint):
        return (f"fingerprint: must be the sha256 of the certificate, "
                f"{CERT_FINGERPRINT_CHARS} lowercase hex characters, got {show(cmd.fingerprint)}")
    if len(cmd.subject) > limits.MAX_CERT_SUBJECT_CHARS:
        return (f"subject: must be at most MAX_CERT_SUBJECT_CHARS="
                f"{limits.MAX_CERT_SUBJECT_CHARS} characters, got {len(cmd.subject)}")
    if len(cmd.reason) > limits.MAX_REASON_CHARS:
        return (f"reason: must be at most MAX_REASON_CHARS={limits.MAX_REASON_CHARS} "
                f"characters, got {len(cmd.reason)}")
    return None


def cert_revoked(state: State, fingerprint: str) -> bool:
    return fingerprint in state.revoked_certs


def token_of(state: State, token_id: str) -> TokenRecord | None:
    """The token of that id, or None. The caller compares digests (in constant time)."""
    return state.tokens.get(token_id)


def honoured_role(token: TokenRecord) -> Role:
    """The role a token acts with: its own when it is of every tenant; `user` otherwise. An
    operator or admin token of one tenant cannot be made any more (`token_put_problem`), but
    an older version made them and a snapshot may hold one: its tenant could not be kept by the
    Admin RPCs, so it is honoured as a user of its tenant only."""
    return token.role if token.tenant == ALL_TENANTS else Role.USER


def _has_admin(state: State) -> bool:
    return any(honoured_role(token) == Role.ADMIN for token in state.tokens.values())


def _admin_count(state: State) -> int:
    """O(tokens), at most MAX_TOKENS: only token commands ask, and they are rare."""
    return sum(1 for token in state.tokens.values() if honoured_role(token) == Role.ADMIN)


# --- job submit ---------------------------------------------------------------------------------


def apply_job_submit(state: State, cmd: JobSubmit) -> Applied[JobSubmitted] | Rejected:
    try:
        spec = validate_wire(cmd.spec)
    except SpecError as exc:
        return Rejected(Code.INVALID_ARGUMENT, "; ".join(i.render() for i in exc.issues))
    # The digest only serves idempotency; hashing a 100,000-task spec is not free.
    digest = spec.digest() if spec.idempotency_key is not None else b""
    if spec.idempotency_key is not None:
        record = state.idempotency.get((spec.tenant, spec.idempotency_key))
        if record is not None:
            if record.digest != digest:
                return Rejected(
                    Code.ALREADY_EXISTS,
                    f"idempotency key {spec.idempotency_key!r} of tenant {spec.tenant!r} was used "
                    f"for job {record.job_id} with a different spec",
                )
            return Applied(JobSubmitted(record.job_id, created=False))
    refusal = _check_submit_bounds(state, cmd.job_id, spec) or _check_unschedulable(state, spec)
    if refusal is not None:
        return refusal
    job = _create_job(state, cmd.job_id, spec, digest, cmd.now_ms)
    if spec.idempotency_key is not None:
        _remember_key(state, spec.tenant, spec.idempotency_key, job.id, digest)
    return Applied(JobSubmitted(job.id, created=True))


def _check_submit_bounds(state: State, job_id: str, spec: JobSpec) -> Rejected | None:
    """The job id, then `policy.admission_refusal` (the rule the leader also checks before
    proposing): the state's bounds — room is made by forgetting the oldest finished jobs —
    then the queue limits (RESOURCE_EXHAUSTED, with a retry-after hint)."""
    if not job_id:
        return Rejected(Code.INVALID_ARGUMENT, "job_id: must not be empty")
    if job_id in state.jobs:
        return Rejected(Code.ALREADY_EXISTS, f"job {job_id} already exists")
    refusal = policy.bounds_refusal(state, spec.tenant, len(spec.tasks))
    if refusal is None:
        while len(state.jobs) >= limits.MAX_RETAINED_JOBS:
            assert state.finished_jobs, "bounds_refusal leaves finished jobs to forget"
            _forget_job(state, state.finished_jobs[0][1], FORGOTTEN_FOR_ROOM)
        refusal = policy.submit_refusal(state, spec.tenant, len(spec.tasks))
    if refusal is None:
        return None
    return Rejected(Code.RESOURCE_EXHAUSTED, refusal.reason, refusal.retry_after_ms)


def _check_unschedulable(state: State, spec: JobSpec) -> Rejected | None:
    """Unless the job allows it, a task no registered cluster could ever take
    (FAILED_PRECONDITION)."""
    if spec.allow_unschedulable:
        return None
    return _unschedulable(state, spec)


def _unschedulable(state: State, spec: JobSpec) -> Rejected | None:
    """The first task no registered cluster could take even empty. Tasks of one shape share
    the answer, so a job costs O(shapes x clusters), and stops at the first refusal."""
    seen: set[TaskShape] = set()
    clusters = sorted(state.clusters.values(), key=lambda c: (-c.cpu_milli, c.id))
    for task in spec.tasks:
        shape = shape_of(task)
        if shape in seen:
            continue
        seen.add(shape)
        problem = feasibility.unschedulable(task, clusters)
        if problem is not None:
            return Rejected(Code.FAILED_PRECONDITION,
                            f"task {task.id} {problem} (set allow_unschedulable: true to queue "
                            f"the job anyway: it waits until such a cluster registers)")
    return None


def _create_job(state: State, job_id: str, spec: JobSpec, digest: bytes, now_ms: int) -> Job:
    index_of = {t.id: i for i, t in enumerate(spec.tasks)}
    tasks = [
        Task(spec=t, index=i, state=_PENDING, remaining_deps=len(t.depends_on), dependents=[])
        for i, t in enumerate(spec.tasks)
    ]
    for task in tasks:
        for dep in task.spec.depends_on:
            tasks[index_of[dep]].dependents.append(task.index)
    counts = [0] * len(TaskState)
    counts[_PENDING] = len(tasks)
    job = Job(id=job_id, seq=state.next_job_seq, spec=spec, digest=digest, tasks=tasks,
              index_of=index_of, counts=counts, state=JobState.PENDING, submitted_ms=now_ms)
    state.next_job_seq += 1
    state.jobs[job_id] = job
    state.job_index.add(spec.tenant, JobState.PENDING, job.seq, job_id)
    if state.changes is not None:
        _note_job(state.changes, job, now_ms)
    state.live_jobs += 1
    state.task_count += len(tasks)
    state.live_task_counts[_PENDING] += len(tasks)
    state.queues.setdefault(spec.tenant, ReadyQueue())
    usage = state.usage.setdefault(spec.tenant, TenantUsage())
    usage.queued += len(tasks)
    usage.queued_by_class[spec.priority_class.rank] += len(tasks)
    state.queued_total += len(tasks)
    for task in tasks:
        if task.remaining_deps == 0:
            _make_runnable(state, job, task)
    return job


def _remember_key(state: State, tenant: str, key: str, job_id: str, digest: bytes) -> None:
    if len(state.idempotency) >= limits.MAX_IDEMPOTENCY_KEYS:
        _expire_oldest_key(state)
    state.idempotency[(tenant, key)] = IdempotencyRecord(job_id, digest, state.now_ms)
    state.idempotency_order.append((state.now_ms, tenant, key))


def _expire_oldest_key(state: State) -> None:
    created_ms, tenant, key = state.idempotency_order.popleft()
    record = state.idempotency.get((tenant, key))
    if record is not None and record.created_ms == created_ms:
        del state.idempotency[(tenant, key)]


# --- job cancel ---------------------------------------------------------------------------------


def apply_job_cancel(state: State, cmd: JobCancel) -> Applied[JobCancelled] | Rejected:
    job = state.jobs.get(cmd.job_id)
    if job is None:
        return Rejected(Code.NOT_FOUND, f"job {cmd.job_id} not found")
    if job.state in TERMINAL_JOB_STATES:
        if job.state == JobState.CANCELLED:
            return Applied(JobCancelled(job.id, cancelled=0, changed=False))
        return Rejected(Code.FAILED_PRECONDITION, f"job {job.id} is already {job.state.name}")
    job.cancel_requested = True
    job.reason = visible(cmd.reason)[:limits.MAX_REASON_CHARS] or "cancelled by request"
    cancelled = _cancel_open_tasks(state, job, f"job cancelled: {job.reason}")
    return Applied(JobCancelled(job.id, cancelled=cancelled, changed=True))


def _cancel_open_tasks(state: State, job: Job, reason: str) -> int:
    cancelled = 0
    for task in job.tasks:
        if task.state in TERMINAL_TASK_STATES:
            continue
        attempt = task.current
        if attempt is not None and attempt.state in LIVE_ATTEMPT_STATES:
            _end_attempt(state, job, task, attempt, AttemptState.CANCELLED, reason, kill=True)
        task.reason = reason
        _set_state(state, job, task, _CANCELLED)
        cancelled += 1
    return cancelled


# --- clusters -----------------------------------------------------------------------------------


def apply_cluster_register(state: State,
                           cmd: ClusterRegister) -> Applied[ClusterRegistered] | Rejected:
    problem = cluster_register_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    cluster = state.clusters.get(cmd.cluster_id)
    created = cluster is None
    if cluster is None:
        if len(state.clusters) >= limits.MAX_CLUSTERS:
            return Rejected(Code.RESOURCE_EXHAUSTED, f"MAX_CLUSTERS={limits.MAX_CLUSTERS} reached")
        cluster = Cluster(
            id=cmd.cluster_id, incarnation=cmd.incarnation,
            capabilities=frozenset(cmd.capabilities), cpu_milli=cmd.cpu_milli,
            memory_mb=cmd.memory_mb, gpu=cmd.gpu, status=ClusterStatus.READY,
            status_since_ms=cmd.now_ms, custom=dict(cmd.custom),
        )
        state.clusters[cluster.id] = cluster
        _note_cluster(state, cluster.id, cluster.status.name, "registered")
    elif cmd.incarnation < cluster.incarnation:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"cluster {cluster.id}: incarnation {cmd.incarnation} is older than "
                        f"{cluster.incarnation}")
    cluster.incarnation = cmd.incarnation
    cluster.capabilities = frozenset(cmd.capabilities)
    cluster.cpu_milli, cluster.memory_mb, cluster.gpu = cmd.cpu_milli, cmd.memory_mb, cmd.gpu
    cluster.custom = dict(cmd.custom)
    if cluster.status != ClusterStatus.READY:
        cluster.status, cluster.status_since_ms = ClusterStatus.READY, cmd.now_ms
        _note_cluster(state, cluster.id, cluster.status.name, "registered")
    lost, kills = _reconcile(state, cluster, cmd)
    _refresh_overcommit(cluster)
    return Applied(ClusterRegistered(cluster.id, created=created, lost=lost, kills=kills))


def cluster_register_problem(cmd: ClusterRegister) -> str | None:
    """Why a CLUSTER_REGISTER is malformed (INVALID_ARGUMENT), naming the field, or None: the
    cluster id and every capability follow the spec's id rule (so no empty id, no control
    characters for `admin status` to print). Pure: the gateway asks before proposing, apply
    asks again (a replicated command is not trusted because a proposer sent it)."""
    problem = id_problem(cmd.cluster_id)
    if problem is not None:
        return f"cluster_id: {problem}"
    if len(cmd.capabilities) > limits.MAX_CAPABILITIES_PER_CLUSTER:
        return (f"capabilities: at most MAX_CAPABILITIES_PER_CLUSTER="
                f"{limits.MAX_CAPABILITIES_PER_CLUSTER}, got {len(cmd.capabilities)}")
    for position, capability in enumerate(cmd.capabilities):
        problem = id_problem(capability)
        if problem is not None:
            return f"capabilities[{position}]: {problem}"
    for name, count in cmd.custom:
        problem = id_problem(name)
        if problem is not None:
            return f"custom: a resource name {problem}"
        if not 1 <= count <= limits.MAX_CUSTOM_RESOURCE_COUNT:
            return (f"custom[{name}]: must be in 1..{limits.MAX_CUSTOM_RESOURCE_COUNT}, "
                    f"got {count}")
    for name, value, most in (("cpu_milli", cmd.cpu_milli, limits.MAX_CPU_MILLI),
                              ("memory_mb", cmd.memory_mb, limits.MAX_MEMORY_MB),
                              ("gpu", cmd.gpu, limits.MAX_GPU)):
        if not 0 <= value <= most:
            return f"capacity.{name}: must be in 0..{most}, got {value}"
    return None


def _reconcile(state: State, cluster: Cluster, cmd: ClusterRegister) -> tuple[int, int]:
    """Match the agent's attempts with ours: current ones resume, unknown ones are lost (the
    agent never admitted them, so nothing runs), and stale ones the agent still runs are killed
    — only those the state placed on this very cluster (`attempt_of_cluster`). What else the
    agent claims (unknown jobs, tasks or fences, another cluster's attempts) is recorded nowhere:
    the gateway tells the agent to stop those itself (`Registered.stop`). The count of kills not
    recorded starts over: this registration re-derives every kill the agent is owed."""
    known = {k.fence: k for k in cmd.known}
    lost = 0
    for fence, (job_id, index) in list(cluster.live.items()):
        job = state.jobs[job_id]
        task = job.tasks[index]
        attempt = task.current
        assert attempt is not None and attempt.fence == fence
        held = known.pop(fence, None)
        if held is None:
            _end_attempt(state, job, task, attempt, AttemptState.LOST,
                         "agent re-registered without this attempt", kill=False)
            _infra_failure(state, job, task, immediate=True, entropy=0)
            lost += 1
        elif held.running and attempt.state == _A_ASSIGNED:
            _mark_started(state, job, task, attempt)
    cluster.kills_unrecorded = 0
    kills = 0
    for fence, held in sorted(known.items()):
        # Not running means finished with the result still in the agent's outbox: no kill.
        if held.running and fence not in cluster.kills and attempt_of_cluster(
                state, cluster.id, held.job_id, held.task_id, fence) is not None:
            kills += _add_kill(state, cluster, fence, held.job_id, held.task_id)
    return lost, kills


def attempt_of_cluster(state: State, cluster_id: str, job_id: str, task_id: str,
                       fence: int) -> Attempt | None:
    """The attempt of that task with that fence, if the state placed it on `cluster_id`; None
    for an unknown job, task or fence, or another cluster's attempt. O(the task's attempts)."""
    job = state.jobs.get(job_id)
    index = None if job is None else job.index_of.get(task_id)
    if job is None or index is None:
        return None
    attempt = _find_attempt(job.tasks[index], fence)
    return attempt if attempt is not None and attempt.cluster_id == cluster_id else None


def _refresh_overcommit(cluster: Cluster) -> None:
    cluster.overcommitted = not feasibility.within_capacity(cluster)


def apply_cluster_status(state: State,
                         cmd: ClusterStatusChange) -> Applied[ClusterStatusChanged] | Rejected:
    cluster = state.clusters.get(cmd.cluster_id)
    if cluster is None:
        return Rejected(Code.NOT_FOUND, f"cluster {cmd.cluster_id} not registered")
    if cluster.status == cmd.status:
        return Applied(ClusterStatusChanged(cluster.id, changed=False, lost=0))
    cluster.status, cluster.status_since_ms = cmd.status, cmd.now_ms
    _note_cluster(state, cluster.id, cluster.status.name, cmd.reason)
    lost = 0
    if cmd.status == ClusterStatus.LOST:
        lost = _lose_cluster_attempts(state, cluster, cmd.reason or "cluster lost")
        _drop_kills(state, cluster)
    return Applied(ClusterStatusChanged(cluster.id, changed=True, lost=lost))


def _lose_cluster_attempts(state: State, cluster: Cluster, reason: str) -> int:
    """`on_lost: replace` attempts become LOST and their tasks go back to the queue with a new
    fence to come; `on_lost: wait` attempts stay as they are (unknown), never run twice. No
    kill is recorded for them: the agent hears nothing until it registers again, and that
    registration's reconcile kills each one it still runs."""
    lost = 0
    for _fence, (job_id, index) in sorted(cluster.live.items()):
        job = state.jobs[job_id]
        task = job.tasks[index]
        if task.spec.on_lost != OnLost.REPLACE:
            continue
        attempt = task.current
        assert attempt is not None
        _end_attempt(state, job, task, attempt, AttemptState.LOST, reason, kill=False)
        _infra_failure(state, job, task, immediate=True, entropy=0)
        lost += 1
    return lost


def _drop_kills(state: State, cluster: Cluster) -> None:
    """Forget the cluster's kill directives (LOST, removed): its agent cannot hear them until it
    registers again, and that registration re-derives each one it is still owed."""
    state.kill_count -= len(cluster.kills)
    cluster.kills.clear()
    cluster.kills_unrecorded = 0


# --- assignment ---------------------------------------------------------------------------------


def apply_assign_batch(state: State, cmd: AssignBatch) -> Applied[AssignResult]:
    """Re-validate every placement against the committed state (Nomad's plan applier): parts
    that no longer hold are dropped with a reason, the rest get fresh fences."""
    assigned: list[Assigned] = []
    dropped: list[Dropped] = []
    preempted = tuple(p.fence for p in cmd.preemptions if _preempt(state, p))
    for placement in cmd.items:
        outcome = _assign_one(state, placement, cmd.now_ms)
        if type(outcome) is int:
            assigned.append((placement, outcome))
        else:
            assert isinstance(outcome, Dropped)
            dropped.append(outcome)
    for reservation in cmd.reservations:  # after the items: one may free a cluster's holder
        _reserve(state, reservation, cmd.now_ms)
    stats = state.stats
    stats.placements += len(assigned)
    stats.preemptions += len(preempted)
    for drop in dropped:
        name = drop.reason.name.lower()
        stats.dropped[name] = stats.dropped.get(name, 0) + 1
    return Applied(AssignResult(tuple(assigned), tuple(dropped), preempted))


def _preempt(state: State, preemption: Preemption) -> bool:
    """Stop a running attempt to make room for a RUNNABLE task of a higher priority class.
    Refused, changing nothing, unless the attempt is its task's current live one, its job is
    preemptible and of a lower class than the task it makes room for, the victim was preempted
    fewer than MAX_PREEMPTIONS_PER_TASK times, and the rate bound allows one more. The victim's
    task goes back to the queue at once, at no cost to either retry budget; the agent gets a
    kill directive (SIGTERM, the task's grace, SIGKILL)."""
    job = state.jobs.get(preemption.job_id)
    by_job = state.jobs.get(preemption.by_job_id)
    index = None if job is None else job.index_of.get(preemption.task_id)
    by_index = None if by_job is None else by_job.index_of.get(preemption.by_task_id)
    if job is None or by_job is None or index is None or by_index is None:
        return False
    task, by_task = job.tasks[index], by_job.tasks[by_index]
    attempt = task.current
    if attempt is None or attempt.fence != preemption.fence or not attempt.live \
            or by_task.state != _RUNNABLE or not policy.may_preempt(by_job.spec, job.spec, task) \
            or policy.preemption_budget(state, state.now_ms) <= 0:
        return False
    _end_attempt(state, job, task, attempt, AttemptState.PREEMPTED,
                 f"preempted to make room for {by_job.id}/{by_task.spec.id} (priority class "
                 f"{by_job.spec.priority_class.value})", kill=True)
    task.preemptions += 1
    _make_runnable(state, job, task)
    state.preempted_ms.append(state.now_ms)
    while len(state.preempted_ms) > policy.MAX_PREEMPTIONS_PER_WINDOW:
        state.preempted_ms.popleft()
    return True


def _reserve(state: State, reservation: Reservation, now_ms: int) -> bool:
    """Keep a cluster for a RUNNABLE task (moving the task's reservation, if it held one).
    Refused, changing nothing, when either is gone, the task is not RUNNABLE, could never fit
    that cluster, or the cluster is kept for another task."""
    job = state.jobs.get(reservation.job_id)
    index = None if job is None else job.index_of.get(reservation.task_id)
    cluster = state.clusters.get(reservation.cluster_id)
    if job is None or index is None or cluster is None:
        return False
    task = job.tasks[index]
    if task.state != _RUNNABLE or reservation_holder(state, cluster) is not None \
            or feasibility.never_fits(task.spec, cluster):
        return False
    if cluster.reserved_for is not None:  # a holder that no longer fits here: void
        holder_job, holder_index = cluster.reserved_for
        _release_reservation(state, state.jobs[holder_job].tasks[holder_index])
    _release_reservation(state, task)
    cluster.reserved_for = (job.id, index)
    cluster.reserved_since_ms = now_ms
    task.reserved_on = cluster.id
    return True


def _release_reservation(state: State, task: Task) -> None:
    if task.reserved_on is None:
        return
    cluster = state.clusters[task.reserved_on]
    assert cluster.reserved_for is not None and cluster.reserved_for[1] == task.index
    cluster.reserved_for = None
    cluster.reserved_since_ms = 0
    task.reserved_on = None


def reservation_holder(state: State, cluster: Cluster) -> tuple[Job, Task] | None:
    """The task `cluster` is kept for, unless it could no longer fit there even empty (the
    cluster re-registered smaller): such a reservation binds nothing."""
    if cluster.reserved_for is None:
        return None
    job_id, index = cluster.reserved_for
    job = state.jobs[job_id]
    task = job.tasks[index]
    if feasibility.never_fits(task.spec, cluster):
        return None
    return job, task


def reserved_for_other(state: State, cluster: Cluster, job: Job, task: Task) -> str | None:
    """Why `cluster` is not for `task`: kept for another task (the words), or None."""
    holder = reservation_holder(state, cluster)
    if holder is None or holder[1] is task:
        return None
    return (f"cluster {cluster.id} is reserved for task {holder[0].id}/{holder[1].spec.id}, "
            f"which has waited for room there since {cluster.reserved_since_ms} ms")


def _assign_one(state: State, placement: Placement, now_ms: int) -> int | Dropped:
    """The new fence, or why the placement was dropped."""
    job = state.jobs.get(placement.job_id)
    if job is None:
        return _dropped(placement, DropReason.JOB_NOT_FOUND, "job not found")
    index = job.index_of.get(placement.task_id)
    if index is None:
        return _dropped(placement, DropReason.TASK_NOT_FOUND, "task not found")
    task = job.tasks[index]
    if task.state != _RUNNABLE:
        return _dropped(placement, DropReason.TASK_NOT_RUNNABLE,
                        f"task is {task.state.name}, not RUNNABLE")
    cluster = state.clusters.get(placement.cluster_id)
    if cluster is None:
        return _dropped(placement, DropReason.CLUSTER_NOT_REGISTERED, "cluster not registered")
    spec = task.spec
    if unfit_committed(spec, cluster, now_ms) is not None:
        infeasible = feasibility.explain_committed(spec, cluster, now_ms)
        assert infeasible is not None
        return _dropped(placement, infeasible.reason, infeasible.detail)
    reserved = reserved_for_other(state, cluster, job, task)
    if reserved is not None:
        return _dropped(placement, DropReason.CLUSTER_RESERVED, reserved)
    if policy.at_running_limit(state, job.spec.tenant):
        return _dropped(placement, DropReason.TENANT_AT_LIMIT,
                        f"tenant {job.spec.tenant} runs its max_running="
                        f"{policy.policy_of(state, job.spec.tenant).max_running} tasks")
    state.fence += 1
    fence = state.fence
    _observe_wait(state.stats, now_ms - task.ready_ms)
    state.aged_assigned.young.append((now_ms, job.id, index, fence))
    attempt = Attempt(fence=fence, number=len(task.attempts) + 1, cluster_id=cluster.id,
                      state=_A_ASSIGNED, assigned_ms=now_ms)
    task.attempts.append(attempt)
    if state.changes is not None:
        _note_attempt(state.changes, job, task, attempt, now_ms)
    cluster.live[fence] = (job.id, index)
    if job.spec.preemptible:
        cluster.preemptible[fence] = (job.id, index)
    cluster.reserved_cpu_milli += spec.cpu_milli
    cluster.reserved_memory_mb += spec.memory_mb
    cluster.reserved_gpu += spec.gpu
    for name, count in spec.custom:
        cluster.reserved_custom[name] = cluster.reserved_custom.get(name, 0) + count
    usage = state.usage[job.spec.tenant]
    usage.cpu_milli += spec.cpu_milli
    usage.memory_mb += spec.memory_mb
    usage.gpu += spec.gpu
    _set_state(state, job, task, _ASSIGNED)
    _push_timer(state, now_ms + limits.ASSIGN_TIMEOUT_MS, fence, TimerKind.ASSIGN_TIMEOUT,
                job.id, index)
    if job.started_ms is None:
        job.started_ms = now_ms
    return fence


def _dropped(placement: Placement, reason: DropReason | Unfit, detail: str) -> Dropped:
    return Dropped(placement, reason, detail)


# --- reports from agents ------------------------------------------------------------------------


def apply_report_batch(state: State, cmd: ReportBatch) -> Applied[ReportResult]:
    """Each item's verdict: accepted, duplicate, late, or refused (not found / wrong cluster).
    Every verdict is final: the agent may drop the report from its outbox once committed."""
    cluster_id, now_ms, entropy = cmd.cluster_id, cmd.now_ms, cmd.entropy
    verdicts = tuple([_report_one(state, cluster_id, report, now_ms, entropy + index)
                      for index, report in enumerate(cmd.items)])
    counted = state.stats.reports
    for verdict in verdicts:
        counted[verdict] = counted.get(verdict, 0) + 1
    return Applied(ReportResult(verdicts))


def _report_one(state: State, cluster_id: str, report: Report, now_ms: int, entropy: int,
                ) -> ReportVerdict:
    job = state.jobs.get(report.job_id)
    index = None if job is None else job.index_of.get(report.task_id)
    if job is None or index is None:
        if report.kind != ReportKind.STARTED:
            _confirm_kill(state, cluster_id, report)
        return ReportVerdict.NOT_FOUND
    task = job.tasks[index]
    attempt = _find_attempt(task, report.fence)
    if attempt is None:
        return ReportVerdict.NOT_FOUND
    if attempt.cluster_id != cluster_id:
        return ReportVerdict.WRONG_CLUSTER
    if report.kind != ReportKind.STARTED:
        _confirm_kill(state, cluster_id, report)  # the process is gone either way
    current = task.attempts[-1]
    if attempt is not current or attempt.state not in LIVE_ATTEMPT_STATES:
        return _note_stale(task, attempt, report, now_ms)
    if report.kind == ReportKind.STARTED:
        if attempt.state == _A_RUNNING:
            return _note(task, ReportVerdict.DUPLICATE, report, now_ms, "already RUNNING")
        _mark_started(state, job, task, attempt)
        return ReportVerdict.ACCEPTED
    if report.kind == ReportKind.REJECTED:
        if attempt.state == _A_RUNNING:
            return _note(task, ReportVerdict.LATE, report, now_ms, "rejection of a RUNNING attempt")
        _end_attempt(state, job, task, attempt, AttemptState.REJECTED,
                     report.reason or "rejected by agent admission", kill=False)
        _infra_failure(state, job, task, immediate=False, entropy=entropy)
        return ReportVerdict.ACCEPTED
    if report.kind == ReportKind.KILLED:
        _end_attempt(state, job, task, attempt, AttemptState.PREEMPTED,
                     report.reason or "stopped by the agent", kill=False)
        _infra_failure(state, job, task, immediate=True, entropy=entropy)
        return ReportVerdict.ACCEPTED
    _finish_attempt(state, job, task, attempt, report, entropy)
    return ReportVerdict.ACCEPTED


def _find_attempt(task: Task, fence: int) -> Attempt | None:
    """Attempts are in fence order; the current one is asked about almost always."""
    for attempt in reversed(task.attempts):
        if attempt.fence == fence:
            return attempt
        if attempt.fence < fence:
            return None
    return None


def _note_stale(task: Task, attempt: Attempt, report: Report, now_ms: int) -> ReportVerdict:
    if attempt is task.attempts[-1] and _same_outcome(attempt, report):
        return _note(task, ReportVerdict.DUPLICATE, report, now_ms,
                     f"attempt already {attempt.state.name}")
    detail = f"attempt {attempt.number} is {attempt.state.name}"
    if attempt is not task.attempts[-1]:
        detail += f"; current fence is {task.attempts[-1].fence}"
    return _note(task, ReportVerdict.LATE, report, now_ms, detail)


def _same_outcome(attempt: Attempt, report: Report) -> bool:
    if report.kind == ReportKind.FINISHED:
        return attempt.state == _finished_state(report) and attempt.exit_code == report.exit_code
    if report.kind == ReportKind.REJECTED:
        return attempt.state == AttemptState.REJECTED
    if report.kind == ReportKind.KILLED:
        return attempt.state == AttemptState.PREEMPTED
    return False


def _note(task: Task, kind: ReportVerdict, report: Report, now_ms: int,
          detail: str) -> ReportVerdict:
    if len(task.notes) < limits.MAX_NOTES_PER_TASK:
        task.notes.append(Note(kind.value, report.fence, report.kind.name, now_ms, detail))
    else:
        task.notes_dropped += 1
    return kind


def _finished_state(report: Report) -> AttemptState:
    if report.timed_out:
        return AttemptState.TIMED_OUT
    return AttemptState.SUCCEEDED if report.exit_code == 0 else AttemptState.FAILED


def _finish_attempt(state: State, job: Job, task: Task, attempt: Attempt, report: Report,
                    entropy: int) -> None:
    if attempt.state == _A_ASSIGNED:
        _mark_started(state, job, task, attempt)
    outcome = _finished_state(report)
    attempt.exit_code = report.exit_code
    _end_attempt(state, job, task, attempt, outcome, report.reason, kill=False)
    if outcome == AttemptState.SUCCEEDED:
        _set_state(state, job, task, _SUCCEEDED)
        _on_success(state, job, task)
    else:
        _app_failure(state, job, task, report.exit_code, entropy)


def _mark_started(state: State, job: Job, task: Task, attempt: Attempt) -> None:
    attempt.state = _A_RUNNING
    attempt.started_ms = state.now_ms
    if state.changes is not None:
        _note_attempt(state.changes, job, task, attempt, state.now_ms)
    _set_state(state, job, task, _RUNNING)
    if task.spec.timeout_ms is not None:
        deadline = state.now_ms + task.spec.timeout_ms + limits.RUN_TIMEOUT_GRACE_MS
        _push_timer(state, deadline, attempt.fence, TimerKind.RUN_TIMEOUT, job.id, task.index)


def _confirm_kill(state: State, cluster_id: str, report: Report) -> None:
    cluster = state.clusters.get(cluster_id)
    if cluster is not None and cluster.kills.pop(report.fence, None) is not None:
        state.kill_count -= 1


# --- operator: confirm an attempt dead ----------------------------------------------------------


def apply_attempt_mark_lost(state: State, cmd: AttemptMarkLost) -> Applied[MarkedLost] | Rejected:
    job = state.jobs.get(cmd.job_id)
    index = None if job is None else job.index_of.get(cmd.task_id)
    if job is None or index is None:
        return Rejected(Code.NOT_FOUND, f"task {cmd.job_id}/{cmd.task_id} not found")
    task = job.tasks[index]
    attempt = task.current
    if attempt is None or attempt.fence != cmd.fence:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"fence {cmd.fence} is not the current attempt of {cmd.task_id}")
    if attempt.state not in LIVE_ATTEMPT_STATES:
        return Rejected(Code.FAILED_PRECONDITION, f"attempt is already {attempt.state.name}")
    _end_attempt(state, job, task, attempt, AttemptState.LOST,
                 cmd.reason or "confirmed dead by an operator", kill=True)
    _infra_failure(state, job, task, immediate=True, entropy=0)
    return Applied(MarkedLost(job.id, task.spec.id, cmd.fence))


# --- time ---------------------------------------------------------------------------------------


def apply_tick(state: State, cmd: Tick) -> Applied[TickResult]:
    fired = 0
    timers = state.timers
    while timers and timers[0][0] <= state.now_ms and fired < limits.MAX_TIMER_EXPIRIES_PER_TICK:
        entry = heapq.heappop(timers)
        if _fire_timer(state, entry, cmd.entropy + fired):
            fired += 1
    expired_keys = _expire_keys(state)
    forgotten = _expire_jobs(state)
    age(state, state.aged_runnable, _still_runnable)
    age(state, state.aged_assigned, _still_assigned)
    return Applied(TickResult(fired, expired_keys, forgotten))


# --- stranded tasks (metrics) --------------------------------------------------------------------


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
    entries: dict[int, list[tuple[int, str, int, int]]] = {_RUNNABLE: [], _ASSIGNED: []}
    for job in state.jobs.values():
        if job.state in TERMINAL_JOB_STATES:
            continue
        for task in job.tasks:
            task.aged = 0
            if task.state == _RUNNABLE:
                entries[_RUNNABLE].append((task.ready_ms, job.id, task.index, task.ready_gen))
            elif task.state == _ASSIGNED:
                attempt = task.current
                assert attempt is not None
                entries[_ASSIGNED].append((attempt.assigned_ms, job.id, task.index,
                                           attempt.fence))
    for aging, task_state in ((state.aged_runnable, _RUNNABLE), (state.aged_assigned, _ASSIGNED)):
        aging.count = 0
        aging.young = deque(sorted(entries[task_state]))
    age(state, state.aged_runnable, _still_runnable)
    age(state, state.aged_assigned, _still_assigned)


def _still_runnable(task: Task, ready_gen: int) -> bool:
    return task.state == _RUNNABLE and task.ready_gen == ready_gen


def _still_assigned(task: Task, fence: int) -> bool:
    attempt = task.current
    return task.state == _ASSIGNED and attempt is not None and attempt.fence == fence \
        and attempt.state == _A_ASSIGNED


def _unage(state: State, task: Task, left: TaskState) -> None:
    """`task` left state `left`: uncount it from that state's Aging."""
    for aging, state_left in ((state.aged_runnable, _RUNNABLE), (state.aged_assigned, _ASSIGNED)):
        if left == state_left and task.aged & aging.bit:
            task.aged &= ~aging.bit
            aging.count -= 1


def _fire_timer(state: State, entry: tuple[int, int, int, int, str], entropy: int) -> bool:
    deadline, fence, kind, index, job_id = entry
    job = state.jobs.get(job_id)
    if job is None:
        return False
    task = job.tasks[index]
    attempt = task.current
    if kind == TimerKind.RETRY:
        if task.state != _RETRY_WAIT or task.retry_at_ms != deadline:
            return False
        _make_runnable(state, job, task)
        return True
    if attempt is None or attempt.fence != fence:
        return False
    if kind == TimerKind.ASSIGN_TIMEOUT:
        if attempt.state != _A_ASSIGNED or task.spec.on_lost != OnLost.REPLACE:
            return False
        _end_attempt(state, job, task, attempt, AttemptState.LOST,
                     "assignment never confirmed by the agent", kill=True)
        _infra_failure(state, job, task, immediate=True, entropy=entropy)
        return True
    if attempt.state != _A_RUNNING:
        return False
    _end_attempt(state, job, task, attempt, AttemptState.TIMED_OUT,
                 "no result within timeout_s", kill=True)
    _app_failure(state, job, task, None, entropy)
    return True


def _expire_keys(state: State) -> int:
    expired = 0
    order = state.idempotency_order
    while order and order[0][0] + limits.IDEMPOTENCY_TTL_MS <= state.now_ms:
        _expire_oldest_key(state)
        expired += 1
    return expired


def _expire_jobs(state: State) -> int:
    forgotten = 0
    while (state.finished_jobs
           and state.finished_jobs[0][0] + limits.JOB_RETENTION_MS <= state.now_ms):
        _forget_job(state, state.finished_jobs[0][1], FORGOTTEN_FOR_AGE)
        forgotten += 1
    return forgotten


def _forget_job(state: State, job_id: str, why: str) -> None:
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
    key = job.spec.idempotency_key
    if key is not None:
        record = state.idempotency.get((job.spec.tenant, key))
        if record is not None and record.job_id == job_id:
            del state.idempotency[(job.spec.tenant, key)]


# --- task lifecycle core ------------------------------------------------------------------------


def _set_state(state: State, job: Job, task: Task, new: TaskState) -> None:
    old = task.state
    if old == new:
        return
    if old == _RETRY_WAIT:
        task.retry_at_ms = None
    task.state = new
    changes = state.changes
    if changes is not None:
        changes.append(("task", job.id, job.spec.tenant, task.spec.id, new.name, 0, 0, "",
                        task.reason, state.now_ms))
    if task.aged:
        _unage(state, task, old)
    if old == _RUNNABLE:
        if task.reserved_on is not None:
            _release_reservation(state, task)
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
    if job.state == JobState.PENDING and new in (_ASSIGNED, _RUNNING):
        job.state = JobState.RUNNING
        state.job_index.move(job.spec.tenant, JobState.PENDING, JobState.RUNNING, job.seq,
                             job.id)
        if changes is not None:
            _note_job(changes, job, state.now_ms)
    if new in TERMINAL_TASK_STATES:
        _maybe_finish_job(state, job)


def _maybe_finish_job(state: State, job: Job) -> None:
    counts = job.counts
    done = counts[_SUCCEEDED] + counts[_FAILED] + counts[_SKIPPED] + counts[_CANCELLED]
    if done != len(job.tasks) or job.state in TERMINAL_JOB_STATES:
        return
    old = job.state
    job.state = derive_job_state(job)
    state.job_index.move(job.spec.tenant, old, job.state, job.seq, job.id)
    job.finished_ms = state.now_ms
    if state.changes is not None:
        _note_job(state.changes, job, state.now_ms)
    state.live_jobs -= 1
    live = state.live_task_counts
    for task_state, count in enumerate(counts):
        live[task_state] -= count
    state.finished_jobs.append((state.now_ms, job.id))


def _note_job(changes: list[Change], job: Job, at_ms: int) -> None:
    changes.append(("job", job.id, job.spec.tenant, "", job.state.name, 0, 0, "", job.reason,
                    at_ms))


def _note_attempt(changes: list[Change], job: Job, task: Task, attempt: Attempt,
                  at_ms: int) -> None:
    changes.append(("attempt", job.id, job.spec.tenant, task.spec.id, attempt.state.name,
                    attempt.fence, attempt.number, attempt.cluster_id, attempt.reason, at_ms))


def _note_cluster(state: State, cluster_id: str, status: str, reason: str) -> None:
    """A cluster's status changed (READY, SUSPECT, LOST; REMOVED; drained or not: see
    apply_cluster_drain), when changes are collected (`State.changes`)."""
    if state.changes is not None:
        state.changes.append(("cluster", "", "", "", status, 0, 0, cluster_id, reason,
                              state.now_ms))


def derive_job_state(job: Job) -> JobState:
    """A job's state as a function of its task counts (and whether a cancel was asked)."""
    counts = job.counts
    total = len(job.tasks)
    done = counts[_SUCCEEDED] + counts[_FAILED] + counts[_SKIPPED] + counts[_CANCELLED]
    if done == total:
        if job.cancel_requested:
            return JobState.CANCELLED
        return JobState.SUCCEEDED if counts[_SUCCEEDED] == total else JobState.FAILED
    if job.started_ms is None:
        return JobState.PENDING
    return JobState.RUNNING


def _end_attempt(state: State, job: Job, task: Task, attempt: Attempt, outcome: AttemptState,
                 reason: str, *, kill: bool) -> None:
    """Close a live attempt: release its reservation and, when the agent may still be running
    it, record a kill directive for that cluster."""
    assert attempt.state in LIVE_ATTEMPT_STATES and attempt is task.attempts[-1]
    attempt.state = outcome
    attempt.finished_ms = state.now_ms
    attempt.reason = reason
    if state.changes is not None:
        _note_attempt(state.changes, job, task, attempt, state.now_ms)
    cluster = state.clusters[attempt.cluster_id]
    del cluster.live[attempt.fence]
    cluster.preemptible.pop(attempt.fence, None)
    spec = task.spec
    cluster.reserved_cpu_milli -= spec.cpu_milli
    cluster.reserved_memory_mb -= spec.memory_mb
    cluster.reserved_gpu -= spec.gpu
    for name, count in spec.custom:
        held = cluster.reserved_custom[name] - count
        if held:
            cluster.reserved_custom[name] = held
        else:
            del cluster.reserved_custom[name]
    usage = state.usage[job.spec.tenant]
    usage.cpu_milli -= spec.cpu_milli
    usage.memory_mb -= spec.memory_mb
    usage.gpu -= spec.gpu
    if outcome in _CLUSTER_FAILURES or outcome == AttemptState.SUCCEEDED:
        policy.note_outcome(state, cluster, job.id, task.index, outcome != AttemptState.SUCCEEDED)
    if cluster.overcommitted:
        _refresh_overcommit(cluster)
    if kill:
        _add_kill(state, cluster, attempt.fence, job.id, spec.id)


def _add_kill(state: State, cluster: Cluster, fence: int, job_id: str, task_id: str) -> int:
    """Record that the cluster's agent must stop `fence`: 1 when recorded, else 0. Not on a
    LOST cluster (its agent's next registration re-derives it); past the cluster's bound it is
    counted in `kills_unrecorded`, which closes the cluster to new work until that
    registration: never dropped unseen."""
    if fence in cluster.kills or cluster.status == ClusterStatus.LOST:
        return 0
    if len(cluster.kills) >= limits.MAX_KILL_DIRECTIVES_PER_CLUSTER:
        cluster.kills_unrecorded += 1
        return 0
    cluster.kills[fence] = (job_id, task_id)
    state.kill_count += 1
    return 1


def _app_failure(state: State, job: Job, task: Task, exit_code: int | None,
                 entropy: int) -> None:
    task.app_failures += 1
    retry = task.spec.retry
    if exit_code is not None and exit_code in retry.non_retryable_exit_codes:
        _fail_task(state, job, task, f"exit code {exit_code} is non-retryable")
    elif task.app_failures >= retry.max_attempts:
        _fail_task(state, job, task, f"failed {task.app_failures} of max_attempts="
                                     f"{retry.max_attempts}")
    elif job.spec.retry_budget is not None and job.retries_used >= job.spec.retry_budget:
        _fail_task(state, job, task, f"the job's retry_budget={job.spec.retry_budget} is spent "
                                     f"(retries across its tasks)")
    else:
        job.retries_used += 1
        _count_retry(state, "application")
        exponent = task.app_failures - 1
        delay = min(retry.backoff_ms * retry.multiplier ** exponent, retry.backoff_max_ms)
        _wait_retry(state, job, task, _jittered(delay, retry.jitter, entropy))


def _infra_failure(state: State, job: Job, task: Task, *, immediate: bool, entropy: int) -> None:
    """Rejected, lost or preempted: not the task's fault, so a separate bounded budget."""
    task.infra_failures += 1
    if task.infra_failures > limits.MAX_INFRA_RETRIES:
        _fail_task(state, job, task, f"infrastructure retry budget exhausted "
                                     f"(MAX_INFRA_RETRIES={limits.MAX_INFRA_RETRIES})")
    elif immediate:
        _count_retry(state, "infra")
        _make_runnable(state, job, task)
    else:
        _count_retry(state, "infra")
        delay = min(limits.INFRA_BACKOFF_MS * 2 ** (task.infra_failures - 1),
                    limits.INFRA_BACKOFF_MAX_MS)
        _wait_retry(state, job, task, _jittered(delay, 0.2, entropy))


def _count_retry(state: State, kind: str) -> None:
    retries = state.stats.retries
    retries[kind] = retries.get(kind, 0) + 1


def _wait_retry(state: State, job: Job, task: Task, delay_ms: int) -> None:
    task.retry_at_ms = state.now_ms + delay_ms
    _set_state(state, job, task, _RETRY_WAIT)
    _push_timer(state, task.retry_at_ms, 0, TimerKind.RETRY, job.id, task.index)


def _jittered(delay_ms: float, jitter: float, seed: int) -> int:
    """delay * (1 +- jitter), the sign and size drawn from the proposer's entropy. `seed` is the
    command's entropy plus the item's position; it is mixed here, on the rare retry path only."""
    unit = (_mix(seed) >> 11) / float(1 << 53)
    return max(0, round(delay_ms * (1.0 + jitter * (2.0 * unit - 1.0))))


def _mix(seed: int) -> int:
    """splitmix64: neighbouring seeds give unrelated, well-spread 64-bit values."""
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def _fail_task(state: State, job: Job, task: Task, reason: str) -> None:
    task.reason = reason
    _set_state(state, job, task, _FAILED)
    policy = job.spec.failure_policy
    if policy == FailurePolicy.FAIL_FAST:
        _cancel_open_tasks(state, job, f"fail_fast: task {task.spec.id} failed")
    else:
        _propagate_failure(state, job, task, continue_policy=policy == FailurePolicy.CONTINUE)


def _on_success(state: State, job: Job, task: Task) -> None:
    tasks = job.tasks
    for index in task.dependents:
        dependent = tasks[index]
        if dependent.state != _PENDING:
            continue  # cancelled meanwhile
        dependent.remaining_deps -= 1
        if dependent.remaining_deps == 0:
            _make_runnable(state, job, dependent)


def _propagate_failure(state: State, job: Job, failed: Task, *, continue_policy: bool) -> None:
    """Walk downstream of a FAILED task. skip_downstream: every PENDING descendant is SKIPPED.
    continue: `all_done` dependents count the failure as done; `all_success` ones are SKIPPED,
    which in turn counts as done for their own dependents. Each task is visited once per
    upstream edge: O(edges reached)."""
    stack = [failed]
    tasks = job.tasks
    while stack:
        upstream = stack.pop()
        for index in upstream.dependents:
            dependent = tasks[index]
            if dependent.state != _PENDING:
                continue
            if continue_policy and dependent.spec.trigger == Trigger.ALL_DONE:
                dependent.remaining_deps -= 1
                if dependent.remaining_deps == 0:
                    _make_runnable(state, job, dependent)
                continue
            dependent.reason = f"upstream task {upstream.spec.id} {upstream.state.name}"
            _set_state(state, job, dependent, _SKIPPED)
            stack.append(dependent)


# --- ready queues and timers --------------------------------------------------------------------


def _make_runnable(state: State, job: Job, task: Task) -> None:
    """Enter the tenant's ready queue for the task's shape. Entries are never removed from the
    middle of a heap: an entry whose task left RUNNABLE, or re-entered with a newer `ready_gen`,
    is stale and is skipped, and `_tidy` drops stale entries."""
    assert task.state != _RUNNABLE
    queue = state.queues[job.spec.tenant]
    task.ready_gen += 1
    _set_state(state, job, task, _RUNNABLE)
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


def ready_entry_live(state: State, entry: tuple[int, int, int, int, str]) -> bool:
    """Whether a ready-queue entry stands for a task still RUNNABLE in that very generation."""
    job = state.jobs.get(entry[4])
    if job is None:
        return False
    task = job.tasks[entry[2]]
    return task.state == _RUNNABLE and task.ready_gen == entry[3]


def iter_ready(state: State, tenant: str,
               skip: Container[TaskShape] = ()) -> Iterator[tuple[Job, Task]]:
    """A tenant's RUNNABLE tasks in queue order (priority, then submission order), lazily, in
    O(k log k) for the first k: a best-first walk of the implicit trees of the tenant's heaps
    (one per shape) at once, which never pops or copies a heap, so placement cost grows with
    what it looks at, not what is stored. A shape in `skip` is passed over whole, also when the
    caller adds it during the walk (the planner does, once a task of that shape fit nowhere)."""
    queue = state.queues.get(tenant)
    if queue is None:
        return
    heaps = [(shape, shape_queue.heap) for shape, shape_queue in queue.shapes.items()]
    frontier = [(heap[0], which, 0) for which, (shape, heap) in enumerate(heaps)
                if heap and shape not in skip]
    heapq.heapify(frontier)  # entries are unique: `which` never decides an order
    while frontier:
        entry, which, position = heapq.heappop(frontier)
        shape, heap = heaps[which]
        if shape in skip:
            continue
        for child in (2 * position + 1, 2 * position + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], which, child))
        if ready_entry_live(state, entry):
            job = state.jobs[entry[4]]
            yield job, job.tasks[entry[2]]


def _push_timer(state: State, deadline_ms: int, fence: int, kind: TimerKind, job_id: str,
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
        return task.state == _RETRY_WAIT and task.retry_at_ms == deadline
    attempt = task.current
    if attempt is None or attempt.fence != fence:
        return False
    wanted = _A_ASSIGNED if kind == TimerKind.ASSIGN_TIMEOUT else _A_RUNNING
    return attempt.state == wanted


def _observe_wait(stats: Stats, waited_ms: int) -> None:
    waited_ms = max(0, waited_ms)
    stats.placement_ms_buckets[bisect.bisect_left(PLACEMENT_LATENCY_BUCKETS_MS, waited_ms)] += 1
    stats.placement_ms_sum += waited_ms


# --- derived counters ---------------------------------------------------------------------------


def derive_usage(state: State) -> tuple[dict[str, TenantUsage], int]:
    """Every tenant's usage and the queued total, counted from the jobs and the clusters' live
    attempts: O(state). What a snapshot load sets and the invariants compare with."""
    usage = {tenant: TenantUsage() for tenant in state.queues}
    queued_total = 0
    for job in state.jobs.values():
        if job.state in TERMINAL_JOB_STATES:
            continue
        held = usage.setdefault(job.spec.tenant, TenantUsage())
        counts = job.counts
        queued = counts[_PENDING] + counts[_RUNNABLE] + counts[_RETRY_WAIT]
        held.queued += queued
        held.queued_by_class[job.spec.priority_class.rank] += queued
        queued_total += queued
        held.running += counts[_ASSIGNED] + counts[_RUNNING]
    for cluster in state.clusters.values():
        for job_id, index in cluster.live.values():
            job = state.jobs[job_id]
            spec = job.tasks[index].spec
            held = usage.setdefault(job.spec.tenant, TenantUsage())
            held.cpu_milli += spec.cpu_milli
            held.memory_mb += spec.memory_mb
            held.gpu += spec.gpu
    return usage, queued_total
