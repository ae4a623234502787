"""The replicated state's data types: jobs, tasks, attempts, clusters, ready queues, timers,
API tokens.

Plain slotted records with no behaviour beyond small derived properties; `fsm.py` owns every
transition. Kept separate so `snapshot.py`, `placement.py` and the read side can import the
types without the handlers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from raftsched.spec.model import JobSpec, PriorityClass, TaskSpec
from raftsched.state.commands import ClusterStatus
from raftsched.state.job_index import JobIndex


class TaskState(IntEnum):
    PENDING = 0
    RUNNABLE = 1
    ASSIGNED = 2
    RUNNING = 3
    RETRY_WAIT = 4
    SUCCEEDED = 5
    FAILED = 6
    SKIPPED = 7
    CANCELLED = 8


TERMINAL_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.SKIPPED, TaskState.CANCELLED}
)


class AttemptState(IntEnum):
    ASSIGNED = 0
    RUNNING = 1
    SUCCEEDED = 2
    FAILED = 3
    REJECTED = 4
    LOST = 5
    TIMED_OUT = 6
    PREEMPTED = 7
    CANCELLED = 8
    QUEUED = 9
    """Admitted into its agent's local queue (late binding: `Cluster.queued`): it starts the
    moment a slot frees there. No ASSIGN_TIMEOUT runs while it waits."""
    WITHDRAWN = 10
    """Taken back from its agent's queue before it started, for a task of a higher priority:
    its task went back to the ready queue at no cost."""


LIVE_ATTEMPT_STATES = frozenset({AttemptState.ASSIGNED, AttemptState.RUNNING,
                                 AttemptState.QUEUED})

# Module-level aliases for the per-task hot path (an attribute lookup on an enum class is slow
# there): the state machine's modules import these rather than spell `TaskState.X` each time.
T_PENDING = TaskState.PENDING
T_RUNNABLE = TaskState.RUNNABLE
T_ASSIGNED = TaskState.ASSIGNED
T_RUNNING = TaskState.RUNNING
T_RETRY_WAIT = TaskState.RETRY_WAIT
T_SUCCEEDED = TaskState.SUCCEEDED
T_FAILED = TaskState.FAILED
T_SKIPPED = TaskState.SKIPPED
T_CANCELLED = TaskState.CANCELLED
A_ASSIGNED = AttemptState.ASSIGNED
A_RUNNING = AttemptState.RUNNING
A_QUEUED = AttemptState.QUEUED


class JobState(IntEnum):
    PENDING = 0
    RUNNING = 1
    SUCCEEDED = 2
    FAILED = 3
    CANCELLED = 4


TERMINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class TimerKind(IntEnum):
    RETRY = 0
    """A RETRY_WAIT task's backoff ends."""
    ASSIGN_TIMEOUT = 1
    """An attempt was never confirmed started."""
    RUN_TIMEOUT = 2
    """A RUNNING attempt outlived its task's timeout (plus grace) without a report."""


@dataclass(slots=True)
class Attempt:
    fence: int
    number: int
    """1-based position among the task's attempts."""
    cluster_id: str
    state: AttemptState
    assigned_ms: int
    started_ms: int | None = None
    finished_ms: int | None = None
    exit_code: int | None = None
    reason: str = ""
    outputs: str | None = None
    """A SUCCEEDED attempt's outputs (canonical JSON text of one object, judged at apply by
    `raftsched.outputs.judge`); None for every other attempt and for a task that left none. Only
    the current attempt's report can set them: a late or stale attempt's are refused."""

    @property
    def live(self) -> bool:
        return self.state in LIVE_ATTEMPT_STATES


@dataclass(slots=True)
class Note:
    """A report that changed nothing: `late` (not the current attempt) or `duplicate`."""

    kind: str
    fence: int
    report: str
    at_ms: int
    detail: str


@dataclass(frozen=True, slots=True)
class Resolved:
    """A task's command, env and cwd with their templates resolved (`spec.templates`)."""

    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None


@dataclass(slots=True)
class Task:
    spec: TaskSpec
    index: int
    state: TaskState
    remaining_deps: int
    """Upstream tasks not yet satisfying this task's trigger."""
    dependents: list[int]
    attempts: list[Attempt] = field(default_factory=list)
    app_failures: int = 0
    infra_failures: int = 0
    ready_gen: int = 0
    """Bumped each time the task enters a ready queue; stale queue entries carry an older one."""
    retry_at_ms: int | None = None
    reason: str = ""
    """Why the task is in its state, for FAILED/SKIPPED/CANCELLED."""
    notes: list[Note] = field(default_factory=list)
    notes_dropped: int = 0
    ready_ms: int = 0
    """When the task last became RUNNABLE (the wait a large task's reservation counts)."""
    aged: int = field(default=0, compare=False)
    """Bits of the `Aging` counters this task is counted in now (AGED_RUNNABLE, AGED_ASSIGNED):
    derived, not in snapshots."""
    reserved_on: str | None = None
    """The cluster kept for this RUNNABLE task (`Cluster.reserved_for` names it back)."""
    preemptions: int = 0
    """Attempts of this task stopped to make room for a higher class (at most
    MAX_PREEMPTIONS_PER_TASK: then it is no longer preempted)."""
    resolved: Resolved | None = None
    """A task whose command, env or cwd holds templates: their values, resolved when its
    upstream tasks were done (what every attempt of it runs); None for a task without."""
    instances: list[int] | None = None
    """A `for_each` task once expanded: the indexes of its instances in the job's tasks, in item
    order. It has no attempt of its own: it waits PENDING with `remaining_deps` counting its
    instances not yet SUCCEEDED, succeeds when all have, fails when one fails for good."""
    instance_of: int = -1
    """An instance: the index of the `for_each` task it belongs to (-1 for any other task).
    Its spec is that task's, with the id `task[i]` and no for_each."""

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(slots=True)
class Job:
    id: str
    seq: int
    spec: JobSpec
    digest: bytes
    tasks: list[Task]
    index_of: dict[str, int]
    counts: list[int]
    """Tasks per TaskState, kept incrementally."""
    state: JobState
    submitted_ms: int
    started_ms: int | None = None
    finished_ms: int | None = None
    cancel_requested: bool = False
    reason: str = ""
    retries_used: int = 0
    """Retries after application failures across the job's tasks (bounded by its
    `retry_budget`)."""
    outputs_bytes: int = 0
    """UTF-8 bytes of the outputs its tasks' attempts keep (bounded by MAX_JOB_OUTPUTS_BYTES;
    derived: not in snapshots)."""
    instance_count: int = 0
    """Instances its `for_each` tasks expanded into (bounded by MAX_INSTANCES_PER_JOB; derived:
    not in snapshots)."""
    expanded: list[int] = field(default_factory=list)
    """Indexes of its `for_each` tasks that expanded, ascending (derived: not in snapshots)."""
    schedule_id: str = ""
    """The schedule whose run this job is ("" for a job submitted by anyone else)."""
    nominal_ms: int = 0
    """That run's nominal time (`{{ schedule.nominal_time }}`)."""


@dataclass(slots=True)
class Cluster:
    id: str
    incarnation: int
    capabilities: frozenset[str]
    cpu_milli: int
    memory_mb: int
    gpu: int
    status: ClusterStatus
    status_since_ms: int
    reserved_cpu_milli: int = 0
    reserved_memory_mb: int = 0
    reserved_gpu: int = 0
    custom: dict[str, int] = field(default_factory=dict)
    """Named custom resources it offers (agent --resource NAME=COUNT), by name."""
    reserved_custom: dict[str, int] = field(default_factory=dict)
    """What its live attempts hold of them (no zero entries)."""
    live: dict[int, tuple[str, int]] = field(default_factory=dict)
    """fence -> (job id, task index) of every live attempt placed here."""
    preemptible: dict[int, tuple[str, int]] = field(default_factory=dict)
    """The part of `live` whose jobs are preemptible: what the planner's preemption pass walks
    (derived: kept on every transition, rebuilt when a snapshot loads, not in snapshots)."""
    kills: dict[int, tuple[str, str]] = field(default_factory=dict)
    """fence -> (job id, task id) the agent must stop, until it confirms: only attempts the
    state placed here, at most limits.MAX_KILL_DIRECTIVES_PER_CLUSTER."""
    kills_unrecorded: int = 0
    """Kills owed here that the bound kept out of `kills` since the agent last registered: while
    above 0 the cluster takes no new work (`feasibility.Unfit.KILLS_UNRECORDED`); its agent's
    next registration re-derives a kill for every stale attempt it still holds."""
    overcommitted: bool = False
    """Set when a re-registration shrank capacity below what live attempts hold."""
    draining: bool = False
    """An operator stopped new placements here (`admin drain`); what runs, runs on."""
    drain_reason: str = ""
    degraded_until_ms: int = 0
    """Attempts of many tasks failed here within DEGRADE_WINDOW_MS: no new work before this."""
    reserved_for: tuple[str, int] | None = None
    """(job id, task index) of the RUNNABLE task this cluster is kept for: nothing else is
    placed here until it is (a large task that waited too long for room; see `placement`)."""
    reserved_since_ms: int = 0
    outcomes: deque[tuple[int, str, int, bool]] = field(default_factory=deque)
    """(at ms, job id, task index, failed) of the attempts that ended here lately, oldest first,
    at most DEGRADE_OUTCOME_MEMORY: what decides `degraded_until_ms`."""
    queue_depth: int = 0
    """Attempts its agent holds in a local queue beyond its room (late binding, declared at
    registration, at most MAX_AGENT_QUEUE_DEPTH); 0: placements only where they fit."""
    queued: dict[int, tuple[str, int]] = field(default_factory=dict)
    """fence -> (job id, task index) of the live attempts committed here beyond its room, in
    fence order (a subset of `live`; at most `queue_depth` when one is added). They hold none of
    the `reserved_*` room until promoted: in fence order as room frees here
    (`lifecycle.promote_queued`, the rule the agent follows with its real capacity), or at once
    when the agent reports one STARTED."""
    withdrawing: dict[int, tuple[str, str]] = field(default_factory=dict)
    """fence -> (job id, task id) of queued attempts a batch asked the agent to withdraw for a
    task of a higher priority (a subset of `queued`; their queue places are free to new
    placements): until the agent answers WITHDRAWN (the attempt ends) or STARTED (it stays)."""


ReadyEntry = tuple[int, int, int, int, str]
"""(rank ms, job seq, task index, ready_gen, job id), where rank = the job's submission time -
priority x AGING_MS_PER_PRIORITY - class rank x CLASS_RANK_MS (`ready_rank_ms`): heap order is
priority class, then priority, then submission order, then the task's position in its job —
with aging: a job that has waited AGING_MS_PER_PRIORITY longer goes before one a priority level
higher (of its class)."""

AGING_MS_PER_PRIORITY = 30_000
"""Aging: one priority level is worth this much earlier submission. A task never waits behind
a job submitted more than (PRIORITY_MAX - PRIORITY_MIN) x this after its own (50 minutes)."""


CLASS_RANK_MS = 1_000 * 24 * 3600 * 1000
"""A priority class is worth this much earlier submission (1,000 days): classes go first,
whatever the priorities and waits inside them."""


def ready_rank_ms(job: Job) -> int:
    return (job.submitted_ms - job.spec.priority * AGING_MS_PER_PRIORITY
            - job.spec.priority_class.rank * CLASS_RANK_MS)

TimerEntry = tuple[int, int, int, int, str]
"""(deadline ms, fence or 0, timer kind, task index, job id)."""


TaskShape = tuple[Any, ...]
"""What decides where a task fits (`feasibility.unfit`): cpu milli, memory MB, gpu, required
capabilities, pinned cluster, and its custom resources when it has any. Tasks of one shape fit
the same clusters and room."""


def shape_of(spec: TaskSpec) -> TaskShape:
    if spec.custom:
        return (spec.cpu_milli, spec.memory_mb, spec.gpu, spec.requires, spec.cluster,
                spec.custom)
    return (spec.cpu_milli, spec.memory_mb, spec.gpu, spec.requires, spec.cluster)


@dataclass(slots=True)
class ShapeQueue:
    """The RUNNABLE tasks of one tenant and one shape: a heap with lazy deletion."""

    heap: list[ReadyEntry] = field(default_factory=list)
    live: int = 0


@dataclass(slots=True)
class ReadyQueue:
    """One tenant's RUNNABLE tasks, a heap per task shape (see `queues.make_runnable`). Planning
    merges the heaps in queue order and drops a shape as soon as one of its tasks fits nowhere,
    so a backlog of tasks that cannot be placed (a capability no cluster has, more gpu than any
    cluster has free) costs a planning round one look, not a walk of the backlog. A shape
    with no live task has no entry."""

    shapes: dict[TaskShape, ShapeQueue] = field(default_factory=dict)
    live: int = 0


@dataclass(slots=True)
class IdempotencyRecord:
    job_id: str
    digest: bytes
    created_ms: int


class Role(StrEnum):
    """What an API token's holder may do; which RPC needs which role is the gRPC side's rule."""

    USER = "user"
    OPERATOR = "operator"
    ADMIN = "admin"


ALL_TENANTS = "*"
"""A token's `tenant` that stands for every tenant (never a tenant name: names start with a
letter or digit)."""
TOKEN_ID_CHARS = 16
"""A token id is exactly this many lowercase hex characters."""
TOKEN_DIGEST_BYTES = 32
"""A token's digest: the sha256 of its secret."""


@dataclass(frozen=True, slots=True)
class RevokedCert:
    """A client certificate (an agent's or a user's) replicas refuse from now on, known by the
    sha256 of its DER bytes (`raftsched.tls.fingerprint`)."""

    fingerprint: str
    """64 lowercase hex characters."""
    subject: str
    """Its common name as the admin gave it (for listings; not checked against the cert)."""
    reason: str
    revoked_ms: int


@dataclass(slots=True)
class TokenRecord:
    """An API token as the state holds it. The secret never enters the log or the state: the
    caller hashes it, and the state keeps only the digest."""

    id: str
    digest: bytes
    """sha256 of the token's secret (TOKEN_DIGEST_BYTES)."""
    tenant: str
    """The tenant the token acts for, or ALL_TENANTS."""
    role: Role
    created_ms: int
    note: str


@dataclass(frozen=True, slots=True)
class GroupIdentity:
    """Which scheduler group this state is (issue 27, `raftsched.topology`): set once by
    GROUP_SET; None for a deployment of one group."""

    group: int
    groups: int
    shards: int
    servers: tuple[tuple[str, ...], ...] = ()
    """Every group's gRPC addresses, in group order, as its replicas were told
    (`replica --topology`; what `GetTopology` answers of the other groups); () if never told."""


@dataclass(frozen=True, slots=True)
class ShardMap:
    """Which group owns each shard, once shards have moved (SHARD_MAP_SET; docs/scale-out.md
    §5). Before any move there is none: shard s is group s mod groups (epoch 0). Every group
    holds the same map; apply takes only the same epoch again or the next one, and a shard
    changes owner only once it was marked moving to that group in the epoch before."""

    epoch: int
    owners: bytes
    """One byte per shard (VIRTUAL_SHARDS): its owning group. b"": this group joined a running
    deployment and has not been told the map yet: it owns no shard."""
    moving: tuple[tuple[int, int], ...] = ()
    """(shard, the group it moves to), by shard: their owner refuses their submits (UNAVAILABLE)
    until the next epoch hands them over."""
    formers: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """(shard, its former owners newest first), by shard: where its older jobs still live."""
    schedule_groups: int = 1
    """Schedules stay in group crc32(id) mod this (the deployment's first group count): a
    schedule's runs have no shard in their ids."""


@dataclass(slots=True)
class TenantPolicy:
    """A tenant's share and limits, set by an admin (`TENANT_SET`). The record of ALL_TENANTS
    holds the defaults of every tenant without a record of its own."""

    name: str
    weight: int = 1
    """Fair-share weight: under contention a tenant's dominant share of what runs goes as its
    weight (1..MAX_TENANT_WEIGHT)."""
    max_queued: int = 0
    """Tasks accepted and not yet running or finished; 0: no limit of its own."""
    max_running: int = 0
    """Tasks placed (ASSIGNED or RUNNING) at once; 0: no limit of its own."""
    updated_ms: int = 0


@dataclass(slots=True)
class TenantUsage:
    """What a tenant holds now, kept on every transition (derived: not in snapshots)."""

    queued: int = 0
    """Tasks of its live jobs that are PENDING, RUNNABLE or RETRY_WAIT."""
    queued_by_class: list[int] = field(default_factory=lambda: [0] * len(PriorityClass))
    """`queued` by the jobs' priority class, indexed by `PriorityClass.rank`."""
    running: int = 0
    """Tasks of its live jobs that are ASSIGNED or RUNNING (each holds a live attempt)."""
    cpu_milli: int = 0
    memory_mb: int = 0
    gpu: int = 0
    """What its live attempts reserve: the measure of dominant-resource fair share."""


PLACEMENT_LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000,
                                30_000, 60_000, 300_000, 1_800_000)
"""Upper bounds of the ready -> assigned histogram (`Stats`), in state-machine milliseconds."""


@dataclass(slots=True)
class Stats:
    """What applying entries did, counted for metrics (`replica/metrics.py`): deterministic
    (every replica counts the same for the same entries), kept on apply, never read by a
    decision, and not in snapshots — they start from zero when a replica starts or loads one,
    as a process's counters do. O(1) per placement and per report."""

    placements: int = 0
    placement_ms_buckets: list[int] = field(
        default_factory=lambda: [0] * (len(PLACEMENT_LATENCY_BUCKETS_MS) + 1))
    """How long each placed task waited RUNNABLE (ready -> assigned), per bucket of
    PLACEMENT_LATENCY_BUCKETS_MS, the last one unbounded (not cumulative)."""
    placement_ms_sum: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """Placements refused at apply, by reason (a stale plan, not an error)."""
    preemptions: int = 0
    retries: dict[str, int] = field(default_factory=dict)
    """Attempts that ended and were tried again: "application" (the task failed), "infra"
    (rejected, lost, timed out on the agent's side)."""
    reports: dict[str, int] = field(default_factory=dict)
    """Agents' reports by verdict: accepted, duplicate, late, not_found, wrong_cluster."""


AGED_RUNNABLE = 1
AGED_ASSIGNED = 2
RUNNABLE_STRANDED_AFTER_MS = 600_000
"""A RUNNABLE task not placed within 10 minutes counts as stranded (metrics, not a decision)."""
ASSIGNED_STRANDED_AFTER_MS = 30_000
"""An attempt its agent has not started within 30 s (half of ASSIGN_TIMEOUT_MS) counts as
stranded."""


@dataclass(slots=True)
class Aging:
    """How many tasks have been in one state for longer than `after_ms`, kept without a scan:
    tasks entering the state are appended (in the order they enter, which is time order up to
    a proposal's lag); as the state machine's time passes (each TICK) the entries older than
    `now - after_ms` leave `young`, and those whose task is still in that state (and in the
    same stay: `token` is its ready_gen or fence) set the task's `aged` bit and count. A task
    leaving the state uncounts itself by its bit. Amortised O(1) per transition; `young`
    holds the entries of the last `after_ms` only. Derived: rebuilt when a snapshot loads."""

    after_ms: int
    bit: int
    count: int = 0
    boundary_ms: int = -1
    """The last `now - after_ms` aged against: entries that entered before it left `young`."""
    young: deque[tuple[int, str, int, int]] = field(default_factory=deque)
    """(entered ms, job id, task index, token), oldest first."""


QUEUED_TASK_STATES = frozenset({TaskState.PENDING, TaskState.RUNNABLE, TaskState.RETRY_WAIT})
PLACED_TASK_STATES = frozenset({TaskState.ASSIGNED, TaskState.RUNNING})


class Overlap(StrEnum):
    """What a schedule's fire does while its previous run is still live (the rule's own
    `Overlap` has the same values)."""

    SKIP = "skip"
    ALLOW = "allow"
    BUFFER_ONE = "buffer_one"
    CANCEL_OTHER = "cancel_other"


@dataclass(slots=True)
class Schedule:
    """A job spec on a clock (issue 25). Apply never evaluates the rule (`rule` is the leader's
    opaque wire form, so replicas with different tzdata cannot diverge); the fields it checks a
    fire against travel beside it: the interval (alignment), start/end, the policies."""

    id: str
    tenant: str
    spec: list[Any]
    """The job spec's validated wire form; each run is this spec under its own id and key."""
    rule: list[Any]
    every_ms: int
    """> 0: an interval rule (a fire's alignment is checked at apply); 0: cron (not checked)."""
    start_at_ms: int
    end_at_ms: int
    overlap: Overlap
    catchup_window_ms: int
    pause_after_failures: int
    created_ms: int
    paused: bool = False
    note: str = ""
    last_nominal_ms: int = 0
    """The newest nominal time fired, skipped or passed over (a resume moves it to the resume
    time): the next fire's nominal time must be strictly after it."""
    pending_ms: int = 0
    """buffer_one: the one nominal time waiting for the live run to end (0: none)."""
    last_job_id: str = ""
    """The newest regular run's job (what overlap looks at)."""
    runs: deque[tuple[int, str]] = field(default_factory=deque)
    """(nominal ms, job id) of the newest runs, oldest first, at most MAX_SCHEDULE_RUNS_KEPT."""
    judged_ms: int = 0
    """Runs with a nominal time up to this are counted in `consecutive_failures`."""
    consecutive_failures: int = 0
    fired: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """Nominal times that started no run, by reason (catchup_window, overlap, paused,
    refused, buffer_replaced, backfill_exists)."""
    backfill: deque[int] = field(default_factory=deque)
    """Backfill nominal times not yet started, oldest first."""
    backfill_max: int = 1
    backfill_live: list[str] = field(default_factory=list)
    """Jobs of backfill runs started and, when last looked at, live."""


@dataclass(slots=True)
class State:
    now_ms: int = 0
    """Highest `now_ms` seen in any command: the state machine's only notion of time."""
    fence: int = 0
    """Last fence issued; only grows."""
    next_job_seq: int = 1
    jobs: dict[str, Job] = field(default_factory=dict)
    live_jobs: int = 0
    task_count: int = 0
    outputs_bytes: int = 0
    """UTF-8 bytes of the outputs every job's attempts keep (bounded by
    MAX_OUTPUTS_BYTES_IN_STATE; derived: not in snapshots)."""
    clusters: dict[str, Cluster] = field(default_factory=dict)
    queues: dict[str, ReadyQueue] = field(default_factory=dict)
    idempotency: dict[tuple[str, str], IdempotencyRecord] = field(default_factory=dict)
    idempotency_order: deque[tuple[int, str, str]] = field(default_factory=deque)
    """(created ms, tenant, key) in creation order, for TTL expiry."""
    timers: list[TimerEntry] = field(default_factory=list)
    timers_rebuild_at: int = 4096
    """When the timer heap grows past this, stale entries are dropped (amortised O(1))."""
    finished_jobs: deque[tuple[int, str]] = field(default_factory=deque)
    """(finished ms, job id) in finishing order, for retention."""
    kill_count: int = 0
    replica_addresses: dict[str, str] = field(default_factory=dict)
    """Raft address -> gRPC address, as announced in barriers."""
    tokens: dict[str, TokenRecord] = field(default_factory=dict)
    """API tokens by id, in creation order (at most MAX_TOKENS)."""
    revoked_certs: dict[str, RevokedCert] = field(default_factory=dict)
    """Revoked client certificates by fingerprint, in revocation order (at most
    MAX_REVOKED_CERTS)."""
    tenants: dict[str, TenantPolicy] = field(default_factory=dict)
    """Tenant policies set by admins, in the order first set (at most MAX_TENANTS)."""
    schedules: dict[str, Schedule] = field(default_factory=dict)
    """Schedules by id, in creation order (at most MAX_SCHEDULES)."""
    group: GroupIdentity | None = None
    """Which group of a deployment of several this is (GROUP_SET); None: the only one."""
    shard_map: ShardMap | None = None
    """Who owns each shard once shards have moved (SHARD_MAP_SET); None: shard s is group
    s mod groups."""
    usage: dict[str, TenantUsage] = field(default_factory=dict)
    """Per tenant with a live job or a live attempt: what it holds now. Derived (not in
    snapshots: recomputed when one is loaded)."""
    queued_total: int = 0
    """Sum of every tenant's `usage.queued` (the global MAX_QUEUED_TASKS bound). Derived."""
    preempted_ms: deque[int] = field(default_factory=deque)
    """When the latest preemptions were applied, oldest first, at most
    MAX_PREEMPTIONS_PER_WINDOW: the rate bound (`policy.preemption_budget`)."""
    aged_runnable: Aging = field(
        default_factory=lambda: Aging(RUNNABLE_STRANDED_AFTER_MS, AGED_RUNNABLE), compare=False)
    """RUNNABLE tasks unplaced for RUNNABLE_STRANDED_AFTER_MS (derived, for metrics)."""
    aged_assigned: Aging = field(
        default_factory=lambda: Aging(ASSIGNED_STRANDED_AFTER_MS, AGED_ASSIGNED), compare=False)
    """Attempts ASSIGNED and not started for ASSIGNED_STRANDED_AFTER_MS (derived, for metrics)."""
    stats: Stats = field(default_factory=Stats, compare=False)
    """Counts for metrics, of the entries applied since this replica started or loaded a
    snapshot: not part of what the state is (not compared, not in snapshots or digests)."""
    live_task_counts: list[int] = field(default_factory=lambda: [0] * len(TaskState))
    """Tasks of jobs not yet terminal, by state: kept on every transition so that gauges read
    it in O(1). Derived (not in snapshots: recomputed when one is loaded)."""
    job_index: JobIndex = field(default_factory=JobIndex, compare=False)
    """The jobs in submission order per tenant and per job state, counted (what ListJobs pages
    and counts by). Derived (not in snapshots or digests: rebuilt when one is loaded; checked
    against a recount by `check_invariants`)."""
    changes: list[Change] | None = field(default=None, compare=False)
    """Set by whoever applies an entry to collect what it changed (the replica's event stream):
    None, nothing is collected; a list, each job, task, attempt and cluster state change of the
    entries applied is appended (`Change`), O(1) each. Not part of what the state is (not
    compared, not in snapshots or digests)."""


Change = tuple[str, str, str, str, str, int, int, str, str, int]
"""One state change an applied entry made, as the state machine collects it (`State.changes`):
(kind, job_id, tenant, task_id, state, fence, attempt, cluster_id, reason, at_ms). kind is
"job", "task", "attempt" or "cluster"; state the new state's name; at_ms the replicated time.
kind "forgotten": a finished job dropped from the state by retention (state: its final state,
reason: which bound), after which it is NOT_FOUND."""
