"""Snapshots of the state machine: a versioned header, then a stream of msgpack records.

Layout: MAGIC, a 2-byte big-endian format version, then records in a fixed order — meta, the
clusters, one record per job (spec in wire form + runtime of every task), the ready queues, the
idempotency keys, the timers, the finished-job order, the API tokens (format 3), and a trailing
`extra` record (opaque to us; the Raft adapter keeps the library's bookkeeping there). Dict
insertion orders are preserved, so `dump(load(b)) == b` and a replica restored from a snapshot
keeps producing the same bytes as one that never was.

Formats 2 and 3 end with the CRC-32 of everything before it (4 bytes, big-endian). A snapshot is
only ever written by a replica from its own validated state, so once the checksum holds its job
specs are rebuilt without re-validation (`wire.from_trusted_wire`): loading a million tasks costs
a few seconds, not a minute. Format 1 (no checksum) is still read, re-validating every spec.

Format 3 adds the tokens record (id, digest, tenant, role, created ms, note per token, in
creation order) before `extra`; every other record is byte for byte what format 2 wrote. Formats 1
and 2 still load, with no tokens.

Format 4 (the contention policy) adds the record of tenant policies and recent preemption
times after the tokens; a cluster's draining flag, drain reason, degraded-until time, recent
attempt outcomes and the task it is reserved for; a job's retries used; a task's ready time
and preemptions; and ready-queue entries ranked by `model.ready_rank_ms` (class, then
priority with aging). Earlier formats load with no tenant policies, no
drains and the tasks' ready times at their jobs' submission; their ready queues are rebuilt
from the RUNNABLE tasks in the new order.
Revoked client certificates (fingerprint, subject, reason, ms) are a third element of that
record, present only when there are some: a snapshot without any is byte for byte format 4's.
Likewise a cluster's record grows by its custom resources (21st field) only when it offers some,
and by its count of kill directives it could not record (22nd, the 21st then present, maybe
empty) only when that count is not 0.
Schedules (issue 25) are a fourth element of that record (the third then present, maybe
empty), only when there are some: a snapshot without any is byte for byte what it was.
Tenant usage is derived, never stored (`queries.derive_usage`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import io
import zlib
from collections import deque
from typing import IO, Any

import msgpack

from raftsched import limits
from raftsched.spec.model import JobSpec, SpecError, TaskSpec
from raftsched.spec.wire import from_trusted_wire, to_wire, validate_wire
from raftsched.state.commands import ClusterStatus
from raftsched.state.mapping import instance_id, instance_position
from raftsched.state.model import (
    TERMINAL_JOB_STATES,
    Attempt,
    AttemptState,
    Cluster,
    GroupIdentity,
    IdempotencyRecord,
    Job,
    JobState,
    Note,
    Overlap,
    ReadyEntry,
    ReadyQueue,
    Resolved,
    RevokedCert,
    Role,
    Schedule,
    ShapeQueue,
    ShardMap,
    State,
    Task,
    TaskState,
    TenantPolicy,
    TokenRecord,
    ready_rank_ms,
    shape_of,
)
from raftsched.state.queries import derive_usage, ready_entry_live
from raftsched.state.queues import derive_aging

MAGIC = b"RSFSM\x00"
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
_TOKENS_SINCE_VERSION = 3
_POLICY_SINCE_VERSION = 4
_CRC_BYTES = 4
_TASK_STATES = {int(s): s for s in TaskState}
_ATTEMPT_STATES = {int(s): s for s in AttemptState}
_ATTEMPT_FIELDS = 9
"""An attempt record's fields; one with outputs appends them (a tenth)."""
_JOB_STATES = {int(s): s for s in JobState}


class SnapshotError(ValueError):
    """The bytes are not a snapshot this version can read."""


# --- dump ---------------------------------------------------------------------------------------


def dump(state: State, extra: Any = None) -> bytes:
    out = io.BytesIO()
    dump_to(out, state, extra)
    return out.getvalue()


class _Checksummed:
    """Writes through to `out`, keeping the CRC-32 of everything written."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.crc = 0

    def write(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self._out.write(data)


def dump_to(target: IO[bytes], state: State, extra: Any = None) -> None:
    packer = msgpack.Packer(use_bin_type=True)
    out = _Checksummed(target)
    out.write(MAGIC + FORMAT_VERSION.to_bytes(2, "big"))
    out.write(packer.pack([
        state.now_ms, state.fence, state.next_job_seq, state.live_jobs, state.task_count,
        state.timers_rebuild_at, state.kill_count, len(state.jobs),
        list(state.replica_addresses.items()),
    ]))
    out.write(packer.pack([_cluster_record(c) for c in state.clusters.values()]))
    for job in state.jobs.values():
        out.write(packer.pack(_job_record(job)))
    out.write(packer.pack([[t, q.live, _live_entries(state, q)] for t, q in state.queues.items()]))
    out.write(packer.pack([
        [tenant, key, r.job_id, r.digest, r.created_ms]
        for (tenant, key), r in state.idempotency.items()
    ]))
    out.write(packer.pack(list(state.idempotency_order)))
    out.write(packer.pack(state.timers))
    out.write(packer.pack(list(state.finished_jobs)))
    out.write(packer.pack([
        [t.id, t.digest, t.tenant, t.role.value, t.created_ms, t.note]
        for t in state.tokens.values()
    ]))
    policy: list[Any] = [
        [[t.name, t.weight, t.max_queued, t.max_running, t.updated_ms]
         for t in state.tenants.values()],
        list(state.preempted_ms),
    ]
    if state.revoked_certs or state.schedules or state.group:  # absent when none: as
        policy.append([[r.fingerprint, r.subject, r.reason, r.revoked_ms]  # format 4 wrote
                       for r in state.revoked_certs.values()])
    if state.schedules or state.group:  # likewise
        policy.append([_schedule_record(s) for s in state.schedules.values()])
    if state.group:  # likewise (issue 27: a deployment of several groups)
        policy.append([state.group.group, state.group.groups, state.group.shards,
                       [list(servers) for servers in state.group.servers],
                       *([_shard_map_record(state.shard_map)] if state.shard_map else [])])
    out.write(packer.pack(policy))
    out.write(packer.pack(extra))
    target.write(out.crc.to_bytes(_CRC_BYTES, "big"))


def _shard_map_record(shard_map: ShardMap) -> list[Any]:
    return [shard_map.epoch, shard_map.owners, [list(m) for m in shard_map.moving],
            [[shard, list(groups)] for shard, groups in shard_map.formers],
            shard_map.schedule_groups]


def _shard_map_from(record: list[Any]) -> ShardMap:
    epoch, owners, moving, formers, schedule_groups = record
    return ShardMap(epoch, bytes(owners), tuple((s, to) for s, to in moving),
                    tuple((s, tuple(groups)) for s, groups in formers), schedule_groups)


def _schedule_record(s: Schedule) -> list[Any]:
    return [
        s.id, s.tenant, s.spec, s.rule, s.every_ms, s.start_at_ms, s.end_at_ms, s.overlap.value,
        s.catchup_window_ms, s.pause_after_failures, s.created_ms, s.paused, s.note,
        s.last_nominal_ms, s.pending_ms, s.last_job_id, [list(r) for r in s.runs], s.judged_ms,
        s.consecutive_failures, s.fired, list(s.skipped.items()), list(s.backfill),
        s.backfill_max, s.backfill_live,
    ]


def _schedule_from(r: Any) -> Schedule:
    (sid, tenant, spec, rule, every_ms, start_ms, end_ms, overlap, window_ms, failures,
     created_ms, paused, note, last_ms, pending_ms, last_job, runs, judged_ms, consecutive,
     fired, skipped, backfill, backfill_max, backfill_live) = r
    return Schedule(
        id=sid, tenant=tenant, spec=_lists(spec), rule=_lists(rule), every_ms=every_ms,
        start_at_ms=start_ms, end_at_ms=end_ms, overlap=Overlap(overlap),
        catchup_window_ms=window_ms, pause_after_failures=failures, created_ms=created_ms,
        paused=paused, note=note, last_nominal_ms=last_ms, pending_ms=pending_ms,
        last_job_id=last_job, runs=deque((n, j) for n, j in runs), judged_ms=judged_ms,
        consecutive_failures=consecutive, fired=fired, skipped=dict(skipped),
        backfill=deque(backfill), backfill_max=backfill_max, backfill_live=list(backfill_live),
    )


def _cluster_record(c: Cluster) -> list[Any]:
    record = [
        c.id, c.incarnation, sorted(c.capabilities), c.cpu_milli, c.memory_mb, c.gpu,
        int(c.status), c.status_since_ms, c.reserved_cpu_milli, c.reserved_memory_mb,
        c.reserved_gpu, [[f, j, i] for f, (j, i) in c.live.items()],
        [[f, j, t] for f, (j, t) in c.kills.items()], c.overcommitted, c.draining,
        c.drain_reason, c.degraded_until_ms, [list(o) for o in c.outcomes],
        None if c.reserved_for is None else list(c.reserved_for), c.reserved_since_ms,
    ]
    late = c.queue_depth or c.queued
    if c.custom or c.kills_unrecorded or late:  # only then: others keep their earlier bytes
        record.append([[name, count] for name, count in sorted(c.custom.items())])
    if c.kills_unrecorded or late:  # likewise: the count only where kills were not recorded
        record.append(c.kills_unrecorded)
    if late:  # late binding (`Cluster.queued`): only a cluster whose agent declared a queue
        record.append(c.queue_depth)
        record.append([[f, j, i] for f, (j, i) in c.queued.items()])
    if c.withdrawing:
        record.append([[f, j, t] for f, (j, t) in c.withdrawing.items()])
    return record


def _job_record(job: Job) -> list[Any]:
    return [
        job.id, job.seq, to_wire(job.spec), job.digest, job.counts, int(job.state),
        job.submitted_ms, job.started_ms, job.finished_ms, job.cancel_requested, job.reason,
        [_task_record(t) for t in job.tasks], job.retries_used,
        *([job.schedule_id, job.nominal_ms] if job.schedule_id else []),
    ]


def _task_record(t: Task) -> list[Any]:
    return [
        int(t.state), t.remaining_deps, t.app_failures, t.infra_failures, t.ready_gen,
        t.retry_at_ms, t.reason, t.notes_dropped,
        [[n.kind, n.fence, n.report, n.at_ms, n.detail] for n in t.notes],
        [[a.fence, a.number, a.cluster_id, int(a.state), a.assigned_ms, a.started_ms,
          a.finished_ms, a.exit_code, a.reason] if a.outputs is None else
         [a.fence, a.number, a.cluster_id, int(a.state), a.assigned_ms, a.started_ms,
          a.finished_ms, a.exit_code, a.reason, a.outputs] for a in t.attempts],
        t.ready_ms, t.preemptions, *_task_data_record(t),
    ]


def _task_data_record(t: Task) -> list[Any]:
    """What a task record appends for issue 26 (nothing for a task without templates or
    for_each, so such records are what they were): its resolved values, then, for an instance
    or an expanded for_each task, [its task's index, its position] and its instances."""
    resolved = None if t.resolved is None else [
        list(t.resolved.command), [list(pair) for pair in t.resolved.env], t.resolved.cwd]
    if t.instance_of >= 0 or t.instances is not None:
        position = -1 if t.instance_of < 0 else instance_position(t.spec.id)
        return [resolved, [t.instance_of, position], t.instances]
    return [] if resolved is None else [resolved]


def _live_entries(state: State, queue: ReadyQueue) -> list[ReadyEntry]:
    """A ready queue as snapshots hold it: its live entries, sorted (which is a heap), whatever
    stale entries and heap layout the replica that wrote it had (those depend on when it last
    tidied, or whether it restarted from a snapshot), so replicas in one state write one byte
    string."""
    return sorted(e for q in queue.shapes.values() for e in q.heap if ready_entry_live(state, e))


def _queue_from(state: State, entries: Any, live: int) -> ReadyQueue:
    """A ready queue back from its entries: split by shape (each part stays sorted, so a heap).
    Snapshots written before queues were split may hold stale entries and any heap layout: those
    are dropped and each part heapified, which leaves a sorted one as it is."""
    queue = ReadyQueue(live=live)
    for raw in entries:
        entry: ReadyEntry = tuple(raw)
        if not ready_entry_live(state, entry):
            continue
        shape = shape_of(state.jobs[entry[4]].tasks[entry[2]].spec)
        shape_queue = queue.shapes.get(shape)
        if shape_queue is None:
            shape_queue = queue.shapes[shape] = ShapeQueue()
        shape_queue.heap.append(entry)
        shape_queue.live += 1
    for shape_queue in queue.shapes.values():
        heapq.heapify(shape_queue.heap)
    return queue


def digest(state: State) -> str:
    """A short hash of the snapshot bytes: replicas compare it to prove they agree."""
    return hashlib.sha256(dump(state)).hexdigest()[:16]


def jobs_digest(state: State) -> str:
    """A short hash of the jobs alone — each job's id, spec digest and state, and each task's
    state and attempts (fence, cluster, state, exit code) — in job id order: what a restore
    must keep, unlike `digest`, which also covers the clock, timers and the replicas'
    addresses that a new cluster changes as soon as it runs."""
    hasher = hashlib.sha256()
    packer = msgpack.Packer(use_bin_type=True)
    for job_id in sorted(state.jobs):
        job = state.jobs[job_id]
        hasher.update(packer.pack([job.id, job.digest, job.state.name, [
            [task.spec.id, task.state.name,
             [[a.fence, a.cluster_id, a.state.name, a.exit_code] if a.outputs is None else
             [a.fence, a.cluster_id, a.state.name, a.exit_code, a.outputs]
             for a in task.attempts]]
            for task in job.tasks]]))
    return hasher.hexdigest()[:16]


RAFT_EXTRA_FORMAT = 1
"""The Raft bookkeeping a replica stores in its snapshots' `extra`: {"format", "last",
"previous", "members"}, the entries as [command bytes, index, term]."""
RaftEntry = tuple[bytes, int, int]


def parse_raft_extra(extra: Any) -> tuple[RaftEntry, RaftEntry, list[str]]:
    """(last entry, the one before, members) of the Raft bookkeeping a replica's snapshot
    carries; SnapshotError when it has none or it is malformed."""
    if not isinstance(extra, dict) or extra.get("format") != RAFT_EXTRA_FORMAT:
        raise SnapshotError("snapshot has no Raft bookkeeping (not written by a replica)")
    members = extra.get("members")
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise SnapshotError("snapshot extra: bad member list")
    last, previous = _raft_entry(extra.get("last")), _raft_entry(extra.get("previous"))
    if previous[1] + 1 != last[1]:
        raise SnapshotError("snapshot extra: entries are not consecutive")
    return last, previous, members


def _raft_entry(value: Any) -> RaftEntry:
    if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], bytes)
            or type(value[1]) is not int or type(value[2]) is not int):
        raise SnapshotError(f"bad Raft entry in snapshot extra: {value!r:.80}")
    return value[0], value[1], value[2]


# --- load ---------------------------------------------------------------------------------------


def load(data: bytes) -> State:
    state, _ = load_with_extra(io.BytesIO(data))
    return state


def load_with_extra(source: IO[bytes]) -> tuple[State, Any]:
    header = source.read(len(MAGIC) + 2)
    if header[: len(MAGIC)] != MAGIC:
        raise SnapshotError("not a raftsched snapshot (bad magic)")
    version = int.from_bytes(header[len(MAGIC):], "big")
    if version not in READABLE_VERSIONS:
        raise SnapshotError(f"snapshot format {version} is not one of {READABLE_VERSIONS}")
    if version == 1:
        unpacker = msgpack.Unpacker(source, raw=False, strict_map_key=False,
                                    max_buffer_size=2**31 - 1)
        return _read(unpacker, version, trusted=False)
    body = source.read(limits.MAX_SNAPSHOT_BYTES + 1)
    if len(body) > limits.MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"snapshot larger than MAX_SNAPSHOT_BYTES={limits.MAX_SNAPSHOT_BYTES}")
    records, trailer = body[:-_CRC_BYTES], body[-_CRC_BYTES:]
    if len(trailer) != _CRC_BYTES or \
            zlib.crc32(records, zlib.crc32(header)) != int.from_bytes(trailer, "big"):
        raise SnapshotError("corrupt snapshot: checksum mismatch (torn or damaged file)")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=False,
                                max_buffer_size=max(len(records), 1))
    unpacker.feed(records)
    return _read(unpacker, version, trusted=True)


def _read(unpacker: msgpack.Unpacker, version: int, *, trusted: bool) -> tuple[State, Any]:
    try:
        state, extra = _read_records(unpacker, version, trusted)
    except (StopIteration, ValueError, TypeError, KeyError, IndexError) as exc:
        raise SnapshotError(f"corrupt snapshot: {exc!r}") from exc
    if trusted and next(unpacker, None) is not None:
        raise SnapshotError("corrupt snapshot: records after the last one")
    return state, extra


def _read_records(unpacker: msgpack.Unpacker, version: int,
                  trusted: bool) -> tuple[State, Any]:
    meta = next(unpacker)
    state = State(now_ms=meta[0], fence=meta[1], next_job_seq=meta[2], live_jobs=meta[3],
                  task_count=meta[4], timers_rebuild_at=meta[5], kill_count=meta[6],
                  replica_addresses={raft: grpc for raft, grpc in meta[8]})
    for record in next(unpacker):
        cluster = _cluster_from(record)
        state.clusters[cluster.id] = cluster
    for _ in range(meta[7]):
        job = _job_from(next(unpacker), trusted)
        state.jobs[job.id] = job
    for tenant, live, entries in next(unpacker):
        if version < _POLICY_SINCE_VERSION:  # entries ranked the old way: rank them anew
            entries = _runnable_entries(state, tenant)
        state.queues[tenant] = _queue_from(state, entries, live)
    for tenant, key, job_id, digest, created_ms in next(unpacker):
        state.idempotency[(tenant, key)] = IdempotencyRecord(job_id, digest, created_ms)
    state.idempotency_order = deque(tuple(e) for e in next(unpacker))
    state.timers = [tuple(e) for e in next(unpacker)]
    state.finished_jobs = deque(tuple(e) for e in next(unpacker))
    if version >= _TOKENS_SINCE_VERSION:
        for token_id, digest, tenant, role, created_ms, note in next(unpacker):
            state.tokens[token_id] = TokenRecord(token_id, digest, tenant, Role(role),
                                                 created_ms, note)
    if version >= _POLICY_SINCE_VERSION:
        tenants, preempted_ms, *revoked = next(unpacker)
        for name, weight, max_queued, max_running, updated_ms in tenants:
            state.tenants[name] = TenantPolicy(name, weight, max_queued, max_running, updated_ms)
        state.preempted_ms = deque(preempted_ms)
        for fingerprint, subject, reason, revoked_ms in (revoked[0] if revoked else ()):
            state.revoked_certs[fingerprint] = RevokedCert(fingerprint, subject, reason,
                                                           revoked_ms)
        for record in (revoked[1] if len(revoked) > 1 else ()):
            schedule = _schedule_from(record)
            state.schedules[schedule.id] = schedule
        if len(revoked) > 2:
            group, groups, shards, *rest = revoked[2]  # servers since issue 27's topology,
            state.group = GroupIdentity(group, groups, shards,  # then the map once shards moved
                                        tuple(tuple(s) for s in rest[0]) if rest else ())
            state.shard_map = _shard_map_from(rest[1]) if len(rest) > 1 else None
    for job in state.jobs.values():
        state.job_index.add(job.spec.tenant, job.state, job.seq, job.id)
        state.outputs_bytes += job.outputs_bytes
        if job.state not in TERMINAL_JOB_STATES:
            for task_state, count in enumerate(job.counts):
                state.live_task_counts[task_state] += count
    state.usage, state.queued_total = derive_usage(state)
    derive_aging(state)
    for cluster in state.clusters.values():
        cluster.preemptible = {fence: (job_id, index)
                               for fence, (job_id, index) in cluster.live.items()
                               if state.jobs[job_id].spec.preemptible}
        cluster.reserved_custom = {}  # derived: what the live attempts hold
        for job_id, index in cluster.live.values():
            for name, count in state.jobs[job_id].tasks[index].spec.custom:
                cluster.reserved_custom[name] = cluster.reserved_custom.get(name, 0) + count
        if cluster.reserved_for is not None:
            job_id, index = cluster.reserved_for
            state.jobs[job_id].tasks[index].reserved_on = cluster.id
    extra = _lists(next(unpacker))
    return state, extra


def _runnable_entries(state: State, tenant: str) -> list[ReadyEntry]:
    """A tenant's ready-queue entries rebuilt from its RUNNABLE tasks (formats before 4)."""
    return sorted((ready_rank_ms(job), job.seq, task.index, task.ready_gen, job.id)
                  for job in state.jobs.values() if job.spec.tenant == tenant
                  for task in job.tasks if task.state == TaskState.RUNNABLE)


def _lists(value: Any) -> Any:
    """`extra` as it was written (format 2 reads arrays as tuples, for speed)."""
    if isinstance(value, tuple | list):
        return [_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: _lists(item) for key, item in value.items()}
    return value


def _cluster_from(r: list[Any]) -> Cluster:
    return Cluster(
        id=r[0], incarnation=r[1], capabilities=frozenset(r[2]), cpu_milli=r[3],
        memory_mb=r[4], gpu=r[5], status=ClusterStatus(r[6]), status_since_ms=r[7],
        reserved_cpu_milli=r[8], reserved_memory_mb=r[9], reserved_gpu=r[10],
        live={f: (j, i) for f, j, i in r[11]}, kills={f: (j, t) for f, j, t in r[12]},
        overcommitted=r[13],
        draining=r[14] if len(r) > 14 else False, drain_reason=r[15] if len(r) > 15 else "",
        degraded_until_ms=r[16] if len(r) > 16 else 0,
        outcomes=deque(tuple(o) for o in r[17]) if len(r) > 17 else deque(),
        reserved_for=tuple(r[18]) if len(r) > 18 and r[18] is not None else None,
        reserved_since_ms=r[19] if len(r) > 19 else 0,
        custom={name: count for name, count in r[20]} if len(r) > 20 else {},
        kills_unrecorded=r[21] if len(r) > 21 else 0,
        queue_depth=r[22] if len(r) > 22 else 0,
        queued={f: (j, i) for f, j, i in r[23]} if len(r) > 23 else {},
        withdrawing={f: (j, t) for f, j, t in r[24]} if len(r) > 24 else {},
    )


def _job_from(r: list[Any], trusted: bool) -> Job:
    if trusted:
        spec = from_trusted_wire(r[2])
    else:
        try:
            spec = validate_wire(r[2])
        except SpecError as exc:
            raise SnapshotError(f"job {r[0]}: stored spec no longer validates: {exc}") from exc
    index_of = {t.id: i for i, t in enumerate(spec.tasks)}
    tasks: list[Task] = []
    for i, rec in enumerate(r[11]):
        tasks.append(_task_from(_spec_of(spec, tasks, i, rec), i, rec, r[6]))
        index_of[tasks[-1].spec.id] = i
    for task in tasks:
        if task.instance_of >= 0:  # its upstream tasks were done before it existed
            task.dependents.append(task.instance_of)
            continue
        for dep in task.spec.depends_on:
            tasks[index_of[dep]].dependents.append(task.index)
    return Job(
        id=r[0], seq=r[1], spec=spec, digest=r[3], tasks=tasks, index_of=index_of,
        counts=list(r[4]), state=_JOB_STATES[r[5]], submitted_ms=r[6], started_ms=r[7],
        finished_ms=r[8],
        cancel_requested=r[9], reason=r[10], retries_used=r[12] if len(r) > 12 else 0,
        schedule_id=r[13] if len(r) > 13 else "", nominal_ms=r[14] if len(r) > 14 else 0,
        outputs_bytes=sum(len(a.outputs.encode("utf-8", "surrogatepass"))
                          for t in tasks for a in t.attempts if a.outputs is not None),
        instance_count=len(tasks) - len(spec.tasks),
        expanded=_expanded(tasks),
    )


def _expanded(tasks: list[Task]) -> list[int]:
    return [t.index for t in tasks if t.instances is not None]


def _spec_of(spec: JobSpec, tasks: list[Task], index: int, record: list[Any]) -> TaskSpec:
    """A task record's spec: the job's own, or for an instance (past the job's tasks) its
    for_each task's, renamed."""
    if index < len(spec.tasks):
        return spec.tasks[index]
    parent, position = record[13]
    parent_spec: TaskSpec = tasks[parent].spec
    return dataclasses.replace(parent_spec, id=instance_id(parent_spec.id, position),
                               for_each=None)


def _task_from(spec: Any, index: int, r: list[Any], submitted_ms: int) -> Task:
    return Task(
        spec=spec, index=index, state=_TASK_STATES[r[0]], remaining_deps=r[1], dependents=[],
        app_failures=r[2], infra_failures=r[3], ready_gen=r[4], retry_at_ms=r[5], reason=r[6],
        notes_dropped=r[7], notes=[Note(*n) for n in r[8]],
        attempts=[
            Attempt(fence=a[0], number=a[1], cluster_id=a[2], state=_ATTEMPT_STATES[a[3]],
                    assigned_ms=a[4], started_ms=a[5], finished_ms=a[6], exit_code=a[7],
                    reason=a[8], outputs=a[9] if len(a) > _ATTEMPT_FIELDS else None)
            for a in r[9]
        ],
        ready_ms=r[10] if len(r) > 10 else submitted_ms,
        preemptions=r[11] if len(r) > 11 else 0,
        resolved=Resolved(tuple(r[12][0]), tuple((n, v) for n, v in r[12][1]), r[12][2])
        if len(r) > 12 and r[12] is not None else None,
        instance_of=r[13][0] if len(r) > 13 else -1,
        instances=list(r[14]) if len(r) > 14 and r[14] is not None else None,
    )
