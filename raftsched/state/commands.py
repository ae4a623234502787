"""Replicated-log commands: one tag byte (append-only, never renumbered) followed by msgpack.

`encode` and `decode` are the only way bytes enter or leave the log. `decode` checks every field's
type and every size bound, so the state machine only ever sees well-formed commands; a malformed
entry is a `CommandError` that `fsm.apply` turns into a deterministic rejection (a replica never
crashes on what a buggy or hostile proposer wrote).

Time (`now_ms`) and randomness (`entropy`) are chosen by the proposer and carried in the command;
the state machine never reads either itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import msgpack

from raftsched import limits

# Report items and known attempts are the protocol's own types (one copy, shared with agents).
from raftsched.protocol import KnownAttempt as KnownAttempt
from raftsched.protocol import Report as Report
from raftsched.protocol import ReportKind as ReportKind
from raftsched.protocol import id_problem
from raftsched.spec import packing


class Tag(IntEnum):
    """Append-only: a tag keeps its number forever; retired tags are never reused."""

    JOB_SUBMIT = 1
    JOB_CANCEL = 2
    CLUSTER_REGISTER = 3
    CLUSTER_STATUS = 4
    ASSIGN_BATCH = 5
    REPORT_BATCH = 6
    TICK = 7
    ATTEMPT_MARK_LOST = 8
    BARRIER = 9
    TOKEN_PUT = 10
    TOKEN_REVOKE = 11
    CLUSTER_REMOVE = 12
    TENANT_SET = 13
    CLUSTER_DRAIN = 14
    CERT_REVOKE = 15
    JOB_SUBMIT_BATCH = 16
    # 22 is kept spare for schedules.
    SCHEDULE_CREATE = 17
    SCHEDULE_SET = 18
    SCHEDULE_DELETE = 19
    SCHEDULE_FIRE = 20
    SCHEDULE_BACKFILL = 21
    GROUP_SET = 23
    SHARD_MAP_SET = 24
    KEYS_IMPORT = 25


class ClusterStatus(IntEnum):
    READY = 1
    SUSPECT = 2
    LOST = 3
    DRAINING = 4


class CommandError(ValueError):
    """A malformed or oversized command; the message names the field."""


# --- command types ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSubmit:
    job_id: str
    spec: list[Any]
    """The job spec in wire form (`raftsched.spec.wire.to_wire`) the leader validated; apply
    decodes it with `wire.decode_trusted` (shape, types, bounds and graph checked, not the
    user-facing text rules)."""
    now_ms: int


@dataclass(frozen=True, slots=True)
class JobSubmitBatch:
    """Many validated job specs in one entry (SubmitJobs), applied one by one in order, each
    exactly as a JOB_SUBMIT of (job_id, spec, now_ms) with its own result: one refusal refuses no
    other job."""

    items: tuple[tuple[str, list[Any]], ...]
    """(job_id, wire spec) of each job, in request order."""
    now_ms: int


@dataclass(frozen=True, slots=True)
class JobCancel:
    job_id: str
    now_ms: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ClusterRegister:
    cluster_id: str
    incarnation: int
    capabilities: tuple[str, ...]
    cpu_milli: int
    memory_mb: int
    gpu: int
    now_ms: int
    known: tuple[KnownAttempt, ...] = ()
    custom: tuple[tuple[str, int], ...] = ()
    """Named custom resources the cluster offers, (name, count) sorted by name (an entry of
    an agent before they existed has none: 8 fields, not 9)."""
    queue_depth: int = 0
    """Attempts beyond its free capacity the agent holds in its local queue (late binding); an
    entry from before it existed has none: 8 or 9 fields, not 10."""


@dataclass(frozen=True, slots=True)
class ClusterStatusChange:
    cluster_id: str
    status: ClusterStatus
    now_ms: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: str
    task_id: str
    cluster_id: str
    queued: bool = False
    """The planner put it in the cluster's agent's local queue (late binding): apply queues it
    whatever the committed room (with several scheduler groups a group's committed room does
    not see the other groups' attempts, so it cannot tell a queued placement from one that
    starts; docs/scale-out.md §2), and drops it when the queue has no place. False: it queues
    only when the committed room lacks and a place is free (every log before issue 27's late
    binding with several groups)."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """Keep `cluster_id` for one task that waited too long for room (see `placement`): no other
    task is placed there until that task is placed or leaves the queue."""

    job_id: str
    task_id: str
    cluster_id: str


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop the running attempt `fence` of task `task_id` (of a preemptible job of a lower
    priority class) to make room for task `by_task_id` of job `by_job_id`."""

    job_id: str
    task_id: str
    fence: int
    by_job_id: str
    by_task_id: str


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """Take the queued, not yet started attempt `fence` of task `task_id` back from its agent's
    local queue (late binding) so that task `by_task_id` of job `by_job_id`, of a higher
    priority, takes its place: the agent drops it unless it started it meanwhile."""

    job_id: str
    task_id: str
    fence: int
    by_job_id: str
    by_task_id: str


@dataclass(frozen=True, slots=True)
class AssignBatch:
    now_ms: int
    items: tuple[Placement, ...]
    reservations: tuple[Reservation, ...] = ()
    """Applied after the items (an item may place the task a cluster was kept for, so that the
    cluster is free to keep for another)."""
    preemptions: tuple[Preemption, ...] = ()
    """Applied first: each re-checked (classes, preemptible, bounds) and dropped if it fails."""
    withdrawals: tuple[Withdrawal, ...] = ()
    """Applied first too: each re-checked (queued, not started, of a lower priority) and dropped
    if it fails. A withdrawn attempt frees its queue place for this batch's items."""


@dataclass(frozen=True, slots=True)
class ReportBatch:
    cluster_id: str
    now_ms: int
    entropy: int
    """Proposer-drawn randomness for retry jitter (unsigned 64-bit)."""
    items: tuple[Report, ...]


@dataclass(frozen=True, slots=True)
class Tick:
    now_ms: int
    entropy: int


@dataclass(frozen=True, slots=True)
class AttemptMarkLost:
    """Operator confirms an attempt dead (e.g. an `on_lost: wait` task on a lost cluster)."""

    job_id: str
    task_id: str
    fence: int
    now_ms: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Barrier:
    """A no-op a leader commits to confirm it leads (`nonce` lets it recognise its own). When it
    names a replica's Raft and gRPC addresses, the state records them, so every replica can
    point clients at the leader's gRPC address."""

    nonce: str
    now_ms: int
    raft_address: str = ""
    grpc_address: str = ""


@dataclass(frozen=True, slots=True)
class TokenPut:
    """Create an API token. The caller hashes the secret: only its sha256 `digest` is logged.
    `role` is a `model.Role` value, checked at apply like every other semantic rule.

    `bootstrap`: the token applies only while no admin token exists (the leader proposes the
    bootstrap admin token from a file each time it takes office, so it must be idempotent)."""

    token_id: str
    digest: bytes
    tenant: str
    role: str
    note: str
    now_ms: int
    bootstrap: bool = False


@dataclass(frozen=True, slots=True)
class TokenRevoke:
    token_id: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class ClusterRemove:
    """Forget a compute cluster (an admin's decision): only one with no live attempt and no
    kill directive left."""

    cluster_id: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class TenantSet:
    """Set a tenant's fair-share weight and limits (0: no limit of its own); the tenant `*`
    sets the defaults of every tenant without a record of its own."""

    tenant: str
    weight: int
    max_queued: int
    max_running: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class GroupSet:
    """Which scheduler group this log is, of how many, over how many shards (issue 27,
    `raftsched.topology`): set once, by the first leader of a group configured with several;
    the same again is a no-op, anything else is refused (a replica configured for another
    group must not change what the log says)."""

    group: int
    groups: int
    shards: int
    now_ms: int
    servers: tuple[tuple[str, ...], ...] = ()
    """Every group's gRPC addresses in group order (the replica's `--topology`); (): keep what
    the log says. The same group with other servers replaces them (an operator moved a group's
    replicas); entries written before it existed have four fields."""
    joining: bool = False
    """A group added to a running deployment (`replica --joining`): it owns no shard until
    `admin groups add` writes the map into it. Written (a sixth field) only when true."""


@dataclass(frozen=True, slots=True)
class ShardMapSet:
    """The whole shard map of the deployment at `epoch` (docs/scale-out.md §5), written into
    every group by `raftsched admin groups add`: owners, the shards moving and where, their
    former owners, and every group's servers. A log of one group takes it as group 0."""

    epoch: int
    groups: int
    owners: bytes
    moving: tuple[tuple[int, int], ...]
    formers: tuple[tuple[int, tuple[int, ...]], ...]
    schedule_groups: int
    servers: tuple[tuple[str, ...], ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class KeysImport:
    """Idempotency keys of shards moving to this group, read from their owner after it stopped
    taking their submits: (tenant, key, job id, spec digest, created ms). Keys this group holds
    already stay as they are."""

    epoch: int
    records: tuple[tuple[str, str, str, bytes, int], ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class ClusterDrain:
    """Stop (`drain`) or resume new placements on a cluster; what runs there runs on."""

    cluster_id: str
    drain: bool
    now_ms: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CertRevoke:
    """Refuse a client certificate from now on (an admin's decision, for a stolen or retired
    agent's or user's key): known by the sha256 of its DER bytes."""

    fingerprint: str
    subject: str
    reason: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleCreate:
    """A job spec on a clock. `rule` is the rule's wire form, opaque to apply; the fields apply
    checks fires against (interval, bounds, policies) travel beside it, decoded by the
    proposer from the same rule."""

    schedule_id: str
    spec: list[Any]
    """The job spec's wire form (re-validated at apply, like a submit's)."""
    rule: list[Any]
    every_ms: int
    start_at_ms: int
    end_at_ms: int
    overlap: str
    catchup_window_ms: int
    pause_after_failures: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleSet:
    """Pause (with a note saying why) or resume. A resume fires nothing from the paused span."""

    schedule_id: str
    paused: bool
    note: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleDelete:
    schedule_id: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleFire:
    """The leader's fire: `nominals` (ascending, each strictly after the schedule's last) start
    runs under the overlap policy; `missed` older times, the newest `missed_newest_ms`, fell out
    of the catch-up window and are counted, not run. No nominals and no misses: only start what
    waits (a buffered time, backfill runs). `manual`: an operator's trigger, one run at
    nominals[0] == now_ms, outside the rule (the schedule's last time stays)."""

    schedule_id: str
    nominals: tuple[int, ...]
    missed: int
    missed_newest_ms: int
    now_ms: int
    manual: bool = False


@dataclass(frozen=True, slots=True)
class ScheduleBackfill:
    """Run the schedule's nominal times `nominals` (the proposer computed them from the rule
    over the asked range), at most `max_concurrent` live at once; a time that already has its
    run is skipped."""

    schedule_id: str
    nominals: tuple[int, ...]
    max_concurrent: int
    now_ms: int


Command = (
    JobSubmit
    | JobCancel
    | ClusterRegister
    | ClusterStatusChange
    | AssignBatch
    | ReportBatch
    | Tick
    | AttemptMarkLost
    | Barrier
    | TokenPut
    | TokenRevoke
    | ClusterRemove
    | TenantSet
    | GroupSet
    | ShardMapSet
    | KeysImport
    | ClusterDrain
    | CertRevoke
    | JobSubmitBatch
    | ScheduleCreate
    | ScheduleSet
    | ScheduleDelete
    | ScheduleFire
    | ScheduleBackfill
)

# --- encoding -----------------------------------------------------------------------------------


def _payload(cmd: Command) -> tuple[Tag, Any]:
    match cmd:
        case JobSubmit():
            return Tag.JOB_SUBMIT, [cmd.job_id, cmd.spec, cmd.now_ms]
        case JobCancel():
            return Tag.JOB_CANCEL, [cmd.job_id, cmd.now_ms, cmd.reason]
        case ClusterRegister():
            known = [[k.job_id, k.task_id, k.fence, k.running] for k in cmd.known]
            fields = [
                cmd.cluster_id, cmd.incarnation, list(cmd.capabilities),
                cmd.cpu_milli, cmd.memory_mb, cmd.gpu, cmd.now_ms, known,
            ]
            if cmd.custom or cmd.queue_depth:
                fields.append([[name, count] for name, count in cmd.custom])
            if cmd.queue_depth:
                fields.append(cmd.queue_depth)
            return Tag.CLUSTER_REGISTER, fields
        case ClusterStatusChange():
            return Tag.CLUSTER_STATUS, [cmd.cluster_id, int(cmd.status), cmd.now_ms, cmd.reason]
        case AssignBatch():
            items = [_placement_item(p) for p in cmd.items]
            if not cmd.reservations and not cmd.preemptions and not cmd.withdrawals:
                return Tag.ASSIGN_BATCH, [cmd.now_ms, items]
            reservations = [[r.job_id, r.task_id, r.cluster_id] for r in cmd.reservations]
            if not cmd.preemptions and not cmd.withdrawals:
                return Tag.ASSIGN_BATCH, [cmd.now_ms, items, reservations]
            preemptions = [[p.job_id, p.task_id, p.fence, p.by_job_id, p.by_task_id]
                           for p in cmd.preemptions]
            if not cmd.withdrawals:
                return Tag.ASSIGN_BATCH, [cmd.now_ms, items, reservations, preemptions]
            withdrawals = [[w.job_id, w.task_id, w.fence, w.by_job_id, w.by_task_id]
                           for w in cmd.withdrawals]
            return Tag.ASSIGN_BATCH, [cmd.now_ms, items, reservations, preemptions, withdrawals]
        case ReportBatch():
            reports = [_report_item(r) for r in cmd.items]
            return Tag.REPORT_BATCH, [cmd.cluster_id, cmd.now_ms, cmd.entropy, reports]
        case Tick():
            return Tag.TICK, [cmd.now_ms, cmd.entropy]
        case AttemptMarkLost():
            return Tag.ATTEMPT_MARK_LOST, [
                cmd.job_id, cmd.task_id, cmd.fence, cmd.now_ms, cmd.reason,
            ]
        case Barrier():
            return Tag.BARRIER, [cmd.nonce, cmd.now_ms, cmd.raft_address, cmd.grpc_address]
        case TokenPut():
            return Tag.TOKEN_PUT, [
                cmd.token_id, cmd.digest, cmd.tenant, cmd.role, cmd.note, cmd.now_ms,
                cmd.bootstrap,
            ]
        case TokenRevoke():
            return Tag.TOKEN_REVOKE, [cmd.token_id, cmd.now_ms]
        case ClusterRemove():
            return Tag.CLUSTER_REMOVE, [cmd.cluster_id, cmd.now_ms]
        case TenantSet():
            return Tag.TENANT_SET, [cmd.tenant, cmd.weight, cmd.max_queued, cmd.max_running,
                                    cmd.now_ms]
        case ClusterDrain():
            return Tag.CLUSTER_DRAIN, [cmd.cluster_id, cmd.drain, cmd.now_ms, cmd.reason]
        case GroupSet() | ShardMapSet() | KeysImport():
            return _group_payload(cmd)
        case CertRevoke():
            return Tag.CERT_REVOKE, [cmd.fingerprint, cmd.subject, cmd.reason, cmd.now_ms]
        case JobSubmitBatch():
            return Tag.JOB_SUBMIT_BATCH, [cmd.now_ms, [[job_id, spec] for job_id, spec in
                                                        cmd.items]]
        case ScheduleCreate() | ScheduleSet() | ScheduleDelete() | ScheduleFire() \
                | ScheduleBackfill():
            return _schedule_payload(cmd)
    raise TypeError(f"not a command: {cmd!r}")


def _group_payload(cmd: GroupSet | ShardMapSet | KeysImport) -> tuple[Tag, Any]:
    match cmd:
        case GroupSet():
            return Tag.GROUP_SET, [cmd.group, cmd.groups, cmd.shards, cmd.now_ms,
                                   [list(servers) for servers in cmd.servers],
                                   *([True] if cmd.joining else [])]
        case ShardMapSet():
            return Tag.SHARD_MAP_SET, [
                cmd.epoch, cmd.groups, cmd.owners, [list(m) for m in cmd.moving],
                [[shard, list(groups)] for shard, groups in cmd.formers], cmd.schedule_groups,
                [list(servers) for servers in cmd.servers], cmd.now_ms]
        case KeysImport():
            return Tag.KEYS_IMPORT, [cmd.epoch, [list(r) for r in cmd.records], cmd.now_ms]


def _schedule_payload(cmd: ScheduleCreate | ScheduleSet | ScheduleDelete | ScheduleFire
                      | ScheduleBackfill) -> tuple[Tag, Any]:
    match cmd:
        case ScheduleCreate():
            return Tag.SCHEDULE_CREATE, [
                cmd.schedule_id, cmd.spec, cmd.rule, cmd.every_ms, cmd.start_at_ms,
                cmd.end_at_ms, cmd.overlap, cmd.catchup_window_ms, cmd.pause_after_failures,
                cmd.now_ms,
            ]
        case ScheduleSet():
            return Tag.SCHEDULE_SET, [cmd.schedule_id, cmd.paused, cmd.note, cmd.now_ms]
        case ScheduleDelete():
            return Tag.SCHEDULE_DELETE, [cmd.schedule_id, cmd.now_ms]
        case ScheduleFire():
            return Tag.SCHEDULE_FIRE, [cmd.schedule_id, list(cmd.nominals), cmd.missed,
                                       cmd.missed_newest_ms, cmd.now_ms, cmd.manual]
        case ScheduleBackfill():
            return Tag.SCHEDULE_BACKFILL, [cmd.schedule_id, list(cmd.nominals),
                                           cmd.max_concurrent, cmd.now_ms]


def encode(cmd: Command) -> bytes:
    tag, payload = _payload(cmd)
    packed = _pack_large_submit(cmd) if isinstance(cmd, JobSubmit) else None
    if packed is None:
        packed = msgpack.packb(payload, use_bin_type=True)
    data = bytes((tag,)) + packed
    if len(data) > limits.MAX_ENTRY_BYTES:
        raise CommandError(f"command {tag.name} is {len(data)} bytes, over "
                           f"MAX_ENTRY_BYTES={limits.MAX_ENTRY_BYTES}")
    return data


_SPEC_RETRIES, _SPEC_TASKS = 6, 7
"""Where the retry table and the task list sit in a spec's wire form (`spec.wire`)."""


def _pack_large_submit(cmd: JobSubmit) -> bytes | None:
    """`msgpack.packb` of the JOB_SUBMIT payload, byte for byte, its spec's retry table and
    task list packed in pieces (`packing`); None when its spec has no more tasks than one piece
    (or is not a wire form: `decode` judges it)."""
    spec = cmd.spec
    if (type(spec) is not list or len(spec) <= _SPEC_TASKS or type(spec[_SPEC_TASKS]) is not list
            or len(spec[_SPEC_TASKS]) <= packing.PACK_PIECE_ITEMS):
        return None
    packer = msgpack.Packer(use_bin_type=True)
    parts = [packer.pack_array_header(3), packer.pack(cmd.job_id),
             packer.pack_array_header(len(spec))]
    for index, field in enumerate(spec):
        if index in (_SPEC_RETRIES, _SPEC_TASKS) and type(field) is list:
            parts.extend(packing.list_in_pieces(packer, field))
        else:
            parts.append(packer.pack(field))
    parts.append(packer.pack(cmd.now_ms))
    return b"".join(parts)


# --- decoding -----------------------------------------------------------------------------------

_U64_MAX = (1 << 64) - 1
_MAX_DIGEST_BYTES = 64
"""Decode's size bound on a token digest; apply requires exactly `model.TOKEN_DIGEST_BYTES`."""
_EXIT_MIN, _EXIT_MAX = -(1 << 31), (1 << 31) - 1


def _is_exit_code(value: Any) -> bool:
    return type(value) is int and _EXIT_MIN <= value <= _EXIT_MAX


def _fields(payload: Any, count: int, what: str) -> list[Any]:
    if not isinstance(payload, list) or len(payload) != count:
        raise CommandError(f"{what}: expected a list of {count} fields")
    return payload


def _str(value: Any, field: str, max_chars: int = limits.MAX_ID_CHARS) -> str:
    if not isinstance(value, str):
        raise CommandError(f"{field}: expected a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise CommandError(f"{field}: longer than {max_chars} characters")
    return value


def _int(value: Any, field: str, low: int = 0, high: int = _U64_MAX) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CommandError(f"{field}: expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise CommandError(f"{field}: {value} is outside {low}..{high}")
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise CommandError(f"{field}: expected a boolean")
    return value


def _bytes(value: Any, field: str, max_bytes: int) -> bytes:
    if not isinstance(value, bytes):
        raise CommandError(f"{field}: expected bytes, got {type(value).__name__}")
    if len(value) > max_bytes:
        raise CommandError(f"{field}: longer than {max_bytes} bytes")
    return value


def _list(value: Any, field: str, max_items: int) -> list[Any]:
    if not isinstance(value, list):
        raise CommandError(f"{field}: expected a list")
    if len(value) > max_items:
        raise CommandError(f"{field}: {len(value)} items, over the bound of {max_items}")
    return value


def _reason(value: Any, field: str) -> str:
    return _str(value, field, limits.MAX_REASON_CHARS)


def _decode_submit(p: Any) -> JobSubmit:
    job_id, spec, now_ms = _fields(p, 3, "JOB_SUBMIT")
    if not isinstance(spec, list):
        raise CommandError("JOB_SUBMIT.spec: expected a list (the wire form of a job spec)")
    return JobSubmit(_str(job_id, "job_id"), spec, _int(now_ms, "now_ms"))


def _decode_submit_batch(p: Any) -> JobSubmitBatch:
    now_ms, items = _fields(p, 2, "JOB_SUBMIT_BATCH")
    decoded: list[tuple[str, list[Any]]] = []
    for index, item in enumerate(_list(items, "JOB_SUBMIT_BATCH.items", limits.MAX_BATCH_JOBS)):
        job_id, spec = _fields(item, 2, f"JOB_SUBMIT_BATCH.items[{index}]")
        if not isinstance(spec, list):
            raise CommandError(f"JOB_SUBMIT_BATCH.items[{index}].spec: expected a list (the "
                               f"wire form of a job spec)")
        decoded.append((_str(job_id, f"items[{index}].job_id"), spec))
    return JobSubmitBatch(tuple(decoded), _int(now_ms, "now_ms"))


def _decode_cancel(p: Any) -> JobCancel:
    job_id, now_ms, reason = _fields(p, 3, "JOB_CANCEL")
    return JobCancel(_str(job_id, "job_id"), _int(now_ms, "now_ms"), _reason(reason, "reason"))


def _decode_known(value: Any) -> KnownAttempt:
    job_id, task_id, fence, running = _fields(value, 4, "CLUSTER_REGISTER.known[]")
    return KnownAttempt(
        _str(job_id, "known.job_id"), _str(task_id, "known.task_id"),
        _int(fence, "known.fence"), _bool(running, "known.running"),
    )


def _decode_register(p: Any) -> ClusterRegister:
    custom_raw: Any = []
    queue_depth: Any = 0
    if isinstance(p, list) and len(p) == 10:
        p, queue_depth = p[:9], p[9]
    if isinstance(p, list) and len(p) == 9:
        p, custom_raw = p[:8], p[8]
    cid, incarnation, caps, cpu, mem, gpu, now_ms, known = _fields(p, 8, "CLUSTER_REGISTER")
    capabilities = tuple(
        _str(c, "capabilities[]")
        for c in _list(caps, "capabilities", limits.MAX_CAPABILITIES_PER_CLUSTER)
    )
    return ClusterRegister(
        cluster_id=_str(cid, "cluster_id"),
        incarnation=_int(incarnation, "incarnation"),
        capabilities=capabilities,
        cpu_milli=_int(cpu, "cpu_milli", 0, limits.MAX_CPU_MILLI),
        memory_mb=_int(mem, "memory_mb", 0, limits.MAX_MEMORY_MB),
        gpu=_int(gpu, "gpu", 0, limits.MAX_GPU),
        now_ms=_int(now_ms, "now_ms"),
        known=tuple(_decode_known(k) for k in _list(known, "known",
                                                     limits.MAX_REGISTER_KNOWN_ATTEMPTS)),
        custom=_decode_custom(custom_raw),
        queue_depth=_int(queue_depth, "queue_depth", 0, limits.MAX_AGENT_QUEUE_DEPTH),
    )


def _decode_custom(value: Any) -> tuple[tuple[str, int], ...]:
    pairs = []
    for pair in _list(value, "custom", limits.MAX_CUSTOM_RESOURCES_PER_CLUSTER):
        name, count = _fields(pair, 2, "CLUSTER_REGISTER.custom[]")
        problem = id_problem(name)
        if problem is not None:
            raise CommandError(f"CLUSTER_REGISTER.custom: a resource name {problem}")
        pairs.append((_str(name, "custom.name"),
                      _int(count, "custom.count", 1, limits.MAX_CUSTOM_RESOURCE_COUNT)))
    names = [name for name, _ in pairs]
    if names != sorted(set(names)):
        raise CommandError("CLUSTER_REGISTER.custom: names must be distinct and sorted")
    return tuple(pairs)


def _decode_status(p: Any) -> ClusterStatusChange:
    cid, status, now_ms, reason = _fields(p, 4, "CLUSTER_STATUS")
    try:
        parsed = ClusterStatus(_int(status, "status"))
    except ValueError:
        raise CommandError(f"status: unknown cluster status {status}") from None
    return ClusterStatusChange(
        _str(cid, "cluster_id"), parsed, _int(now_ms, "now_ms"), _reason(reason, "reason")
    )


def _placement_item(p: Placement) -> list[Any]:
    """A placement in ASSIGN_BATCH: three fields, a fourth (true) when it is marked queued."""
    return [p.job_id, p.task_id, p.cluster_id, True] if p.queued \
        else [p.job_id, p.task_id, p.cluster_id]


def _is_id(value: Any) -> bool:
    return type(value) is str and len(value) <= limits.MAX_ID_CHARS


def _is_u64(value: Any) -> bool:
    return type(value) is int and 0 <= value <= _U64_MAX


def _decode_placement(value: Any) -> Placement:
    # Fast path: batches carry thousands of items. The checked path below finds the message.
    if type(value) is list and len(value) == 3:
        job_id, task_id, cluster_id = value
        if _is_id(job_id) and _is_id(task_id) and _is_id(cluster_id):
            return Placement(job_id, task_id, cluster_id)
    if isinstance(value, list) and len(value) == 4:
        job_id, task_id, cluster_id, queued = value
        if queued is not True:
            raise CommandError(f"ASSIGN_BATCH.items[].queued: expected true, got {queued!r}")
    else:
        job_id, task_id, cluster_id = _fields(value, 3, "ASSIGN_BATCH.items[]")
        queued = False
    return Placement(_str(job_id, "job_id"), _str(task_id, "task_id"),
                     _str(cluster_id, "cluster_id"), queued)


def _decode_reservation(value: Any) -> Reservation:
    job_id, task_id, cluster_id = _fields(value, 3, "ASSIGN_BATCH.reservations[]")
    return Reservation(_str(job_id, "job_id"), _str(task_id, "task_id"),
                       _str(cluster_id, "cluster_id"))


def _decode_preemption(value: Any) -> Preemption:
    job_id, task_id, fence, by_job_id, by_task_id = _fields(
        value, 5, "ASSIGN_BATCH.preemptions[]")
    return Preemption(_str(job_id, "job_id"), _str(task_id, "task_id"), _int(fence, "fence"),
                      _str(by_job_id, "by_job_id"), _str(by_task_id, "by_task_id"))


def _decode_assign(p: Any) -> AssignBatch:
    reservations: tuple[Reservation, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    withdrawals: tuple[Withdrawal, ...] = ()
    if isinstance(p, list) and len(p) in (3, 4, 5):
        now_ms, items, raw = p[:3]
        reservations = tuple(_decode_reservation(r)
                             for r in _list(raw, "reservations", limits.MAX_CLUSTERS))
        if len(p) >= 4:
            preemptions = tuple(_decode_preemption(r) for r in _list(
                p[3], "preemptions", limits.MAX_PREEMPTIONS_PER_BATCH))
        if len(p) == 5:
            withdrawals = tuple(_decode_withdrawal(r) for r in _list(
                p[4], "withdrawals", limits.MAX_WITHDRAWALS_PER_BATCH))
    else:
        now_ms, items = _fields(p, 2, "ASSIGN_BATCH")
    placements = tuple(map(_decode_placement, _list(items, "items", limits.MAX_BATCH_ITEMS)))
    return AssignBatch(_int(now_ms, "now_ms"), placements, reservations, preemptions,
                       withdrawals)


def _decode_withdrawal(value: Any) -> Withdrawal:
    job_id, task_id, fence, by_job_id, by_task_id = _fields(
        value, 5, "ASSIGN_BATCH.withdrawals[]")
    return Withdrawal(_str(job_id, "job_id"), _str(task_id, "task_id"), _int(fence, "fence"),
                      _str(by_job_id, "by_job_id"), _str(by_task_id, "by_task_id"))


_REPORT_KINDS = {int(k): k for k in ReportKind}


def _decode_report(value: Any) -> Report:
    # Fast path for well-formed items; anything odd falls through to the checked path.
    if type(value) is list and len(value) == 7:
        kind, job_id, task_id, fence, exit_code, timed_out, reason = value
        if (type(kind) is int and kind in _REPORT_KINDS and _is_id(job_id) and _is_id(task_id)
                and _is_u64(fence) and (exit_code is None or _is_exit_code(exit_code))
                and type(timed_out) is bool and type(reason) is str
                and len(reason) <= limits.MAX_REASON_CHARS):
            return Report(_REPORT_KINDS[kind], job_id, task_id, fence, exit_code, timed_out,
                          reason)
    if type(value) is list and len(value) == _REPORT_FIELDS_WITH_OUTPUTS:
        outputs, refused = value[7], value[8]
        base = _decode_report(value[:7])
        return replace(base, outputs=_outputs(outputs), outputs_refused=_bool(refused,
                                                                               "outputs_refused"))
    kind, job_id, task_id, fence, exit_code, timed_out, reason = _fields(
        value, 7, "REPORT_BATCH.items[]"
    )
    try:
        parsed = ReportKind(_int(kind, "kind"))
    except ValueError:
        raise CommandError(f"kind: unknown report kind {kind}") from None
    code = None if exit_code is None else _int(exit_code, "exit_code", _EXIT_MIN, _EXIT_MAX)
    return Report(
        parsed, _str(job_id, "job_id"), _str(task_id, "task_id"), _int(fence, "fence"),
        code, _bool(timed_out, "timed_out"), _reason(reason, "reason"),
    )


def _report_item(r: Report) -> list[Any]:
    if not (r.outputs or r.outputs_refused):
        return [int(r.kind), r.job_id, r.task_id, r.fence, r.exit_code, r.timed_out, r.reason]
    return [int(r.kind), r.job_id, r.task_id, r.fence, r.exit_code, r.timed_out, r.reason,
            r.outputs, r.outputs_refused]


_REPORT_FIELDS_WITH_OUTPUTS = 9
"""A report item with outputs (or refused outputs) appends them: 9 fields, not 7 (an entry
written before outputs existed has 7)."""


def _outputs(value: Any) -> str:
    """A report's outputs text: a string of at most MAX_TASK_RESULT_OUTPUTS_BYTES bytes (apply
    checks that it is one JSON object)."""
    if type(value) is not str:
        raise CommandError(f"outputs: must be a string, got {type(value).__name__}")
    if len(value) > limits.MAX_TASK_RESULT_OUTPUTS_BYTES or \
            len(value.encode("utf-8", "surrogatepass")) > limits.MAX_TASK_RESULT_OUTPUTS_BYTES:
        raise CommandError(f"outputs: more than {limits.MAX_TASK_RESULT_OUTPUTS_BYTES} bytes")
    return value


def _decode_reports(p: Any) -> ReportBatch:
    cid, now_ms, entropy, items = _fields(p, 4, "REPORT_BATCH")
    reports = tuple(map(_decode_report, _list(items, "items", limits.MAX_BATCH_ITEMS)))
    return ReportBatch(_str(cid, "cluster_id"), _int(now_ms, "now_ms"),
                       _int(entropy, "entropy"), reports)


def _decode_tick(p: Any) -> Tick:
    now_ms, entropy = _fields(p, 2, "TICK")
    return Tick(_int(now_ms, "now_ms"), _int(entropy, "entropy"))


def _decode_mark_lost(p: Any) -> AttemptMarkLost:
    job_id, task_id, fence, now_ms, reason = _fields(p, 5, "ATTEMPT_MARK_LOST")
    return AttemptMarkLost(
        _str(job_id, "job_id"), _str(task_id, "task_id"), _int(fence, "fence"),
        _int(now_ms, "now_ms"), _reason(reason, "reason"),
    )


def _decode_barrier(p: Any) -> Barrier:
    nonce, now_ms, raft_address, grpc_address = _fields(p, 4, "BARRIER")
    return Barrier(_str(nonce, "nonce"), _int(now_ms, "now_ms"),
                   _str(raft_address, "raft_address", limits.MAX_ADDRESS_CHARS),
                   _str(grpc_address, "grpc_address", limits.MAX_ADDRESS_CHARS))


def _decode_token_put(p: Any) -> TokenPut:
    token_id, digest, tenant, role, note, now_ms, bootstrap = _fields(p, 7, "TOKEN_PUT")
    return TokenPut(
        _str(token_id, "token_id"), _bytes(digest, "digest", _MAX_DIGEST_BYTES),
        _str(tenant, "tenant"), _str(role, "role"),
        _str(note, "note", limits.MAX_TOKEN_NOTE_CHARS), _int(now_ms, "now_ms"),
        _bool(bootstrap, "bootstrap"),
    )


def _decode_token_revoke(p: Any) -> TokenRevoke:
    token_id, now_ms = _fields(p, 2, "TOKEN_REVOKE")
    return TokenRevoke(_str(token_id, "token_id"), _int(now_ms, "now_ms"))


def _decode_cluster_remove(p: Any) -> ClusterRemove:
    cluster_id, now_ms = _fields(p, 2, "CLUSTER_REMOVE")
    return ClusterRemove(_str(cluster_id, "cluster_id"), _int(now_ms, "now_ms"))


def _decode_tenant_set(p: Any) -> TenantSet:
    tenant, weight, max_queued, max_running, now_ms = _fields(p, 5, "TENANT_SET")
    return TenantSet(_str(tenant, "tenant"), _int(weight, "weight"),
                     _int(max_queued, "max_queued"), _int(max_running, "max_running"),
                     _int(now_ms, "now_ms"))


def _decode_group_set(p: Any) -> GroupSet:
    count = len(p) if isinstance(p, list) and len(p) in (5, 6) else 4
    group, groups, shards, now_ms, *rest = _fields(p, count, "GROUP_SET")
    servers = rest[0] if rest else []
    joining = _bool(rest[1], "joining") if len(rest) > 1 else False
    return GroupSet(_int(group, "group"), _int(groups, "groups"), _int(shards, "shards"),
                    _int(now_ms, "now_ms"), _servers(servers), joining)


def _servers(value: Any) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(_str(address, "servers[]", limits.MAX_ADDRESS_CHARS)
                       for address in _list(members, "servers[]", limits.MAX_REPLICAS))
                 for members in _list(value, "servers", limits.MAX_GROUPS))


def _decode_shard_map_set(p: Any) -> ShardMapSet:
    epoch, groups, owners, moving, formers, schedule_groups, servers, now_ms = _fields(
        p, 8, "SHARD_MAP_SET")
    shard = limits.VIRTUAL_SHARDS - 1
    return ShardMapSet(
        _int(epoch, "epoch"), _int(groups, "groups", 1, limits.MAX_GROUPS),
        _bytes(owners, "owners", limits.VIRTUAL_SHARDS),
        tuple((_int(_fields(m, 2, "moving[]")[0], "moving[].shard", 0, shard),
               _int(m[1], "moving[].to", 0, limits.MAX_GROUPS - 1))
              for m in _list(moving, "moving", limits.VIRTUAL_SHARDS)),
        tuple((_int(_fields(f, 2, "formers[]")[0], "formers[].shard", 0, shard),
               tuple(_int(g, "formers[].groups[]", 0, limits.MAX_GROUPS - 1)
                     for g in _list(f[1], "formers[].groups", limits.MAX_GROUPS)))
              for f in _list(formers, "formers", limits.VIRTUAL_SHARDS)),
        _int(schedule_groups, "schedule_groups", 1, limits.MAX_GROUPS), _servers(servers),
        _int(now_ms, "now_ms"))


def _decode_keys_import(p: Any) -> KeysImport:
    epoch, records, now_ms = _fields(p, 3, "KEYS_IMPORT")
    return KeysImport(_int(epoch, "epoch"), tuple(
        (_str(_fields(r, 5, "records[]")[0], "records[].tenant"),
         _str(r[1], "records[].key", limits.MAX_IDEMPOTENCY_KEY_CHARS),
         _str(r[2], "records[].job_id"), _bytes(r[3], "records[].digest", 64),
         _int(r[4], "records[].created_ms"))
        for r in _list(records, "records", limits.MAX_KEYS_PER_IMPORT)), _int(now_ms, "now_ms"))


def _decode_cluster_drain(p: Any) -> ClusterDrain:
    cluster_id, drain, now_ms, reason = _fields(p, 4, "CLUSTER_DRAIN")
    return ClusterDrain(_str(cluster_id, "cluster_id"), _bool(drain, "drain"),
                        _int(now_ms, "now_ms"), _reason(reason, "reason"))


def _decode_cert_revoke(p: Any) -> CertRevoke:
    fingerprint, subject, reason, now_ms = _fields(p, 4, "CERT_REVOKE")
    return CertRevoke(_str(fingerprint, "fingerprint"),
                      _str(subject, "subject", limits.MAX_CERT_SUBJECT_CHARS),
                      _reason(reason, "reason"), _int(now_ms, "now_ms"))


def _decode_schedule_create(p: Any) -> ScheduleCreate:
    (sid, spec, rule, every_ms, start_ms, end_ms, overlap, window_ms, failures,
     now_ms) = _fields(p, 10, "SCHEDULE_CREATE")
    if not isinstance(spec, list):
        raise CommandError("SCHEDULE_CREATE.spec: expected a list (the wire form of a job spec)")
    if not isinstance(rule, list):
        raise CommandError("SCHEDULE_CREATE.rule: expected a list (the wire form of a rule)")
    if len(msgpack.packb(rule, use_bin_type=True)) > limits.MAX_SCHEDULE_RULE_WIRE_BYTES:
        raise CommandError(f"SCHEDULE_CREATE.rule: over MAX_SCHEDULE_RULE_WIRE_BYTES="
                           f"{limits.MAX_SCHEDULE_RULE_WIRE_BYTES}")
    return ScheduleCreate(
        _str(sid, "schedule_id"), spec, rule, _int(every_ms, "every_ms"),
        _int(start_ms, "start_at_ms"), _int(end_ms, "end_at_ms"),
        _str(overlap, "overlap"), _int(window_ms, "catchup_window_ms"),
        _int(failures, "pause_after_failures"), _int(now_ms, "now_ms"),
    )


def _decode_schedule_set(p: Any) -> ScheduleSet:
    sid, paused, note, now_ms = _fields(p, 4, "SCHEDULE_SET")
    return ScheduleSet(_str(sid, "schedule_id"), _bool(paused, "paused"),
                       _str(note, "note", limits.MAX_SCHEDULE_NOTE_CHARS), _int(now_ms, "now_ms"))


def _decode_schedule_delete(p: Any) -> ScheduleDelete:
    sid, now_ms = _fields(p, 2, "SCHEDULE_DELETE")
    return ScheduleDelete(_str(sid, "schedule_id"), _int(now_ms, "now_ms"))


def _times(value: Any, field: str, max_items: int) -> tuple[int, ...]:
    return tuple(_int(t, f"{field}[]") for t in _list(value, field, max_items))


def _decode_schedule_fire(p: Any) -> ScheduleFire:
    sid, nominals, missed, newest, now_ms, manual = _fields(p, 6, "SCHEDULE_FIRE")
    return ScheduleFire(_str(sid, "schedule_id"),
                        _times(nominals, "nominals", limits.MAX_FIRES_PER_COMMAND),
                        _int(missed, "missed"), _int(newest, "missed_newest_ms"),
                        _int(now_ms, "now_ms"), _bool(manual, "manual"))


def _decode_schedule_backfill(p: Any) -> ScheduleBackfill:
    sid, nominals, max_concurrent, now_ms = _fields(p, 4, "SCHEDULE_BACKFILL")
    return ScheduleBackfill(_str(sid, "schedule_id"),
                            _times(nominals, "nominals", limits.MAX_BACKFILL_RUNS),
                            _int(max_concurrent, "max_concurrent"), _int(now_ms, "now_ms"))


_DECODERS = {
    Tag.JOB_SUBMIT: _decode_submit,
    Tag.JOB_CANCEL: _decode_cancel,
    Tag.CLUSTER_REGISTER: _decode_register,
    Tag.CLUSTER_STATUS: _decode_status,
    Tag.ASSIGN_BATCH: _decode_assign,
    Tag.REPORT_BATCH: _decode_reports,
    Tag.TICK: _decode_tick,
    Tag.ATTEMPT_MARK_LOST: _decode_mark_lost,
    Tag.BARRIER: _decode_barrier,
    Tag.TOKEN_PUT: _decode_token_put,
    Tag.TOKEN_REVOKE: _decode_token_revoke,
    Tag.CLUSTER_REMOVE: _decode_cluster_remove,
    Tag.TENANT_SET: _decode_tenant_set,
    Tag.CLUSTER_DRAIN: _decode_cluster_drain,
    Tag.CERT_REVOKE: _decode_cert_revoke,
    Tag.JOB_SUBMIT_BATCH: _decode_submit_batch,
    Tag.SCHEDULE_CREATE: _decode_schedule_create,
    Tag.SCHEDULE_SET: _decode_schedule_set,
    Tag.SCHEDULE_DELETE: _decode_schedule_delete,
    Tag.SCHEDULE_FIRE: _decode_schedule_fire,
    Tag.SCHEDULE_BACKFILL: _decode_schedule_backfill,
    Tag.GROUP_SET: _decode_group_set,
    Tag.SHARD_MAP_SET: _decode_shard_map_set,
    Tag.KEYS_IMPORT: _decode_keys_import,
}


def decode(data: bytes) -> Command:
    if not data:
        raise CommandError("empty entry")
    if len(data) > limits.MAX_ENTRY_BYTES:
        raise CommandError(f"entry is {len(data)} bytes, over MAX_ENTRY_BYTES")
    try:
        tag = Tag(data[0])
    except ValueError:
        raise CommandError(f"unknown command tag {data[0]}") from None
    try:
        payload = msgpack.unpackb(data[1:], raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CommandError(f"{tag.name}: malformed msgpack: {exc}") from None
    decoder: Any = _DECODERS[tag]
    result: Command = decoder(payload)
    return result
