"""Thin gRPC servicers: translate requests into commands or views, and errors into status codes.

Writes go to the leader only: a follower answers UNAVAILABLE with the leader's gRPC address in
the trailing metadata `raftsched-leader`. Reads that must be current go through a leader that
has just confirmed its leadership with a committed barrier, since an isolated
pysyncobj leader believes it leads for a while. A proposal whose outcome is unknown is answered
DEADLINE_EXCEEDED, never as a failure: the client retries with the same idempotency key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

import grpc
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from raftsched import limits, rpc, tokens, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.clock import Clock
from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.protocol import LOG_STREAMS
from raftsched.replica import batch, gc_pause, identity, shard_moves, views
from raftsched.replica.events import SEQ_END, Cursor, EventFilter, EventLog, TooOld
from raftsched.replica.gateway import AgentGateway, propose
from raftsched.replica.leader import Leader
from raftsched.replica.logs import LOG_CHUNK_BYTES, LogBroker
from raftsched.replica.raft.port import RaftPort
from raftsched.spec.issue import show
from raftsched.spec.job import parse_submitted_text
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.params import params_refused, spec_with_params
from raftsched.spec.validation import with_idempotency_key
from raftsched.spec.wire import decode_wire, drop_items, release_wire, to_wire
from raftsched.state import commands as c
from raftsched.state.model import (
    TERMINAL_JOB_STATES,
    TOKEN_DIGEST_BYTES,
    Change,
    GroupIdentity,
    Role,
    State,
)
from raftsched.state.policy import policy_of, refusal_before_proposal
from raftsched.state.queries import honoured_role
from raftsched.state.results import (
    CertRevoked,
    ClusterDrained,
    ClusterRemoved,
    JobCancelled,
    JobsSubmitted,
    JobSubmitted,
    KeysImported,
    Result,
    ShardMapSetResult,
    TenantSetResult,
    TokenPutResult,
    TokenRevokeResult,
)
from raftsched.state.rules import HEX_DIGITS, token_put_problem, token_scope_problem
from raftsched.state.text import text_problem

log = EventLogger("raftsched.service")

READ_CONFIRM_TIMEOUT_S = 2.0
LARGE_SPEC_WAIT_S = 30.0
"""A large spec waits this long at most for its turn to be submitted."""
WATCH_POLL_S = 1.0
"""A watch re-checks its job at least this often (and at every applied entry)."""
LOG_FOLLOW_POLL_S = 0.5
"""`task logs --follow` asks the agent again this often while the output does not grow."""
JOB_ID_SLUG_CHARS = 40

T = TypeVar("T")
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


class ChangeFeed:
    """A version number bumped after every applied entry; waiters block until it moves."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._version = 0

    def notify(self, *_: object) -> None:
        with self._condition:
            self._version += 1
            self._condition.notify_all()

    def version(self) -> int:
        with self._condition:
            return self._version

    def wait(self, seen: int, timeout_s: float) -> int:
        with self._condition:
            self._condition.wait_for(lambda: self._version != seen, timeout_s)
            return self._version


def peer_host(peer: str) -> str:
    """The client host of a gRPC peer string: `ipv4:10.0.0.7:51234` -> `10.0.0.7`,
    `ipv6:[::1]:51234` -> `[::1]`; any other kind (a unix socket) is one host, its kind."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return address.rsplit(":", 1)[0]
    return kind


class StreamSlots:
    """The long-lived server streams open on this replica, in all and per caller. A stream
    holds an RPC worker for its whole life, so without a bound MAX_RPC_WORKERS of them (64
    WatchJobs) took every worker: heartbeats waited, agents went SUSPECT then LOST, clients
    timed out. `acquire` refuses past limits.MAX_STREAMS_PER_CALLER for one caller (a token, a
    cluster, a certificate: `identity.Principal.key`), past MAX_STREAMS less
    ADMIN_STREAM_RESERVE for any caller but an admin, past MAX_STREAMS for an admin, and says
    which."""

    def __init__(self, total: int = limits.MAX_STREAMS,
                 per_caller: int = limits.MAX_STREAMS_PER_CALLER,
                 admin_reserve: int = limits.ADMIN_STREAM_RESERVE) -> None:
        assert 0 < per_caller <= total - admin_reserve and admin_reserve >= 0
        self._lock = threading.Lock()
        self._total = total
        self._per_caller = per_caller
        self._admin_reserve = admin_reserve
        self._by_caller: dict[str, int] = {}
        """Open streams per caller; a caller without any has no key."""
        self._open = 0

    def acquire(self, caller: str, admin: bool = False) -> str | None:
        """Take a slot for a stream of `caller`: None, or why not (a message for the client)."""
        with self._lock:
            held = self._by_caller.get(caller, 0)
            if held >= self._per_caller:
                return (f"{held} streams are open for {caller}, the most one caller may hold "
                        f"(MAX_STREAMS_PER_CALLER); retry later")
            room = self._total if admin else self._total - self._admin_reserve
            if self._open >= room:
                kept = "" if admin else f", {self._admin_reserve} of them kept for admins " \
                    "(ADMIN_STREAM_RESERVE)"
                return (f"{self._open} streams are open on this replica, the most it holds "
                        f"(MAX_STREAMS={self._total}{kept}); retry later")
            self._by_caller[caller] = held + 1
            self._open += 1
            return None

    def release(self, caller: str) -> None:
        with self._lock:
            held = self._by_caller.pop(caller)
            assert held > 0 and self._open > 0, caller
            if held > 1:
                self._by_caller[caller] = held - 1
            self._open -= 1

    def open_count(self) -> int:
        with self._lock:
            return self._open


@dataclasses.dataclass(frozen=True, slots=True)
class StreamLease:
    """A stream slot held, and until when (the replica's maximum stream age)."""

    ends_s: float
    """On `monotonic`'s clock."""
    monotonic: Callable[[], float]

    def expired(self) -> bool:
        return self.monotonic() >= self.ends_s

    def remaining_s(self) -> float:
        return max(0.0, self.ends_s - self.monotonic())


class Context:
    """What the servicers share: the node, the leader loop, time, the stream slots, and the
    error plumbing."""

    def __init__(self, node: RaftPort, leader: Leader, clock: Clock, changes: ChangeFeed,
                 grpc_address: str = "", max_stream_age_s: float = limits.MAX_STREAM_AGE_S,
                 events: EventLog | None = None, configured: GroupIdentity | None = None,
                 ) -> None:
        self.node = node
        self.configured = configured
        """The group of several this replica's options say it is (`--group`, `--groups`,
        `--topology`); None for a deployment of one group. Until its log records it (GROUP_SET)
        a submit is refused UNAVAILABLE (it cannot judge its shard yet) and GetTopology answers
        from it."""
        self.grpc_address = grpc_address
        """This replica's own gRPC address (marks its answers, see `rpc.abort`)."""
        self.leader = leader
        self.clock = clock
        self.changes = changes
        self.rng = random.SystemRandom()
        self.streams = StreamSlots()
        self.max_stream_age_s = max_stream_age_s
        """A stream ends after this long (limits.MAX_STREAM_AGE_S, --max-stream-age-s)."""
        self.logs = LogBroker(changes.notify)
        self.events = events if events is not None else EventLog()
        """The events of the entries applied here (`RaftNode(on_changes=events.record)`)."""

    def leader_grpc_address(self) -> str | None:
        raft_leader = self.node.leader_address()
        if raft_leader is None:
            return None
        address: str | None = self.node.read(lambda s: s.replica_addresses.get(raft_leader))
        return address

    def abort(self, context: grpc.ServicerContext, error: RaftschedError,
              violations: Sequence[rpc.FieldViolation] = ()) -> NoReturn:
        hint = self.leader_grpc_address() if error.code == Code.UNAVAILABLE else None
        rpc.abort(context, error, replica=self.grpc_address, leader_hint=hint,
                  violations=violations)

    @contextlib.contextmanager
    def stream_slot(self, context: grpc.ServicerContext) -> Iterator[StreamLease]:
        """Hold one of `streams` for the `with` block (a server stream's life, however it ends:
        client cancel, last message, error), for the checked caller (`identity`; the client
        host under --insecure-dev, where every caller may do anything); RESOURCE_EXHAUSTED when
        none is free. The lease says when the stream has lived the maximum stream age."""
        principal = identity.current_principal()
        caller, admin = (principal.key, principal.admin) if principal is not None \
            else (f"host {peer_host(context.peer())}", True)
        refusal = self.streams.acquire(caller, admin)
        if refusal is not None:
            self.abort(context, RaftschedError(Code.RESOURCE_EXHAUSTED, refusal))
        try:
            yield StreamLease(self.clock.monotonic_s() + self.max_stream_age_s,
                              self.clock.monotonic_s)
        finally:
            self.streams.release(caller)

    def end_for_age(self, context: grpc.ServicerContext) -> None:
        """Mark a stream about to end (OK) as ended for its age: the client re-opens it."""
        context.set_trailing_metadata(((rpc.STREAM_END_KEY, rpc.STREAM_END_MAX_AGE),))
        log.info("stream_ended_for_age", peer=context.peer(), max_age_s=self.max_stream_age_s)

    @contextlib.contextmanager
    def cancelled_at_age(self, lease: StreamLease, cancel: Callable[[], Any]) -> Iterator[None]:
        """Call `cancel` once `lease` has reached its age, unless the block is over first: for
        streams that block where they cannot look at the time (reflection, health watches)."""
        timer = threading.Timer(lease.remaining_s(), cancel)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def leads(self) -> bool:
        """Leads, its election barrier applied (`Leader.leading`)."""
        return self.leader.leading()

    def require_leader(self, context: grpc.ServicerContext) -> None:
        if not self.leader.leading():
            self.abort(context, RaftschedError(Code.UNAVAILABLE, "not the leader"))

    def read(self, fn: Callable[[State], T]) -> T:
        """`fn` over this replica's state as applied here (may be stale on a follower)."""
        return self.node.read(fn)

    def read_unlocked(self, fn: Callable[[State], T]) -> T:
        """`fn` over this replica's state without the apply lock: one dict lookup only
        (`RaftNode.read_unlocked`)."""
        return self.node.read_unlocked(fn)

    def current_read(self, context: grpc.ServicerContext, fn: Callable[[State], T]) -> T:
        return self.current_read_indexed(context, fn)[0]

    def current_read_indexed(self, context: grpc.ServicerContext,
                             fn: Callable[[State], T]) -> tuple[T, int]:
        """`fn(state)` after confirming leadership, and the log index the state reflects."""
        self.require_leader(context)
        # One barrier per read: simple and correct; reads are not the hot path (watches confirm
        # once, then follow applied entries).
        if not self.node.is_leader_confirmed(READ_CONFIRM_TIMEOUT_S):
            self.abort(context, RaftschedError(Code.UNAVAILABLE,
                                               "could not confirm leadership for a read"))
        try:
            return self.node.read_indexed(fn)
        except RaftschedError as error:
            self.abort(context, error)

    def propose(self, context: grpc.ServicerContext, command: c.Command) -> Result:
        """Commit `command`; the Applied result, or abort with the matching status."""
        try:
            return propose(self.node, self.leader, command)
        except RaftschedError as error:
            self.abort(context, error)


class SchedulerService(pb_grpc.SchedulerServicer):  # type: ignore[misc]
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._large_specs = threading.BoundedSemaphore(limits.MAX_CONCURRENT_LARGE_SPECS)

    @contextlib.contextmanager
    def _large_spec_turn(self, context: grpc.ServicerContext, size: int) -> Iterator[None]:
        """Submit at most MAX_CONCURRENT_LARGE_SPECS large specs at once, each from its decode
        to the release of what was built from it, with the cyclic GC paused (`gc_pause`).
        Decoding and validating run beside the replica's Raft thread and yield the interpreter
        lock often, but several at once, or a full collection over the million objects a big
        spec is made of, starve it (heartbeats late, elections); and what a spec was built into
        is freed before the pause ends, so no collection is left to walk it afterwards.
        Waiting for a turn is bounded; past it RESOURCE_EXHAUSTED says when to retry."""
        if size < limits.LARGE_SPEC_BYTES:
            yield
            return
        if not self._large_specs.acquire(timeout=LARGE_SPEC_WAIT_S):
            self.ctx.abort(context, RaftschedError(
                Code.RESOURCE_EXHAUSTED,
                f"{limits.MAX_CONCURRENT_LARGE_SPECS} large job specs (over "
                f"{limits.LARGE_SPEC_BYTES} bytes) are being submitted; retry in a few seconds"))
        try:
            with gc_pause.paused():
                yield
        finally:
            self._large_specs.release()

    def SubmitJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.ctx.require_leader(context)  # a follower does not decode what it cannot propose
        if bool(request.spec) == bool(request.spec_wire):
            both = "both are set" if request.spec else "neither is set"
            message = (f"exactly one of spec (a YAML or JSON document) and spec_wire (its wire "
                       f"form) must be set; {both}")
            self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, message),
                           [("spec", message), ("spec_wire", message)])
        size = len(request.spec_wire) if request.spec_wire else _utf8_size(request.spec)
        with self._large_spec_turn(context, size):
            result, task_count = self._submit(request, context)
        log.debug("job_submitted", job=result.job_id, created=result.created, tasks=task_count)
        return pb.SubmitJobResponse(job_id=result.job_id, created=result.created)

    def _submit(self, request: Any, context: grpc.ServicerContext) -> tuple[JobSubmitted, int]:
        """Admit the request's spec, propose it, and free both its forms task by task (freed
        whole, a big one held the interpreter lock for as long as building it: 25 ms at
        100,000 tasks, more with env). The result and the job's task count."""
        spec, wire = self._admitted(request, context)
        try:
            job_id = self._new_job_id(spec)
        except RaftschedError as error:
            self.ctx.abort(context, error)
        tasks = list(spec.tasks)
        task_count = len(tasks)
        del spec
        try:
            result = self.ctx.propose(context, c.JobSubmit(job_id, wire,
                                                           self.ctx.clock.now_ms()))
        finally:
            release_wire(wire)
            drop_items(tasks)
        assert isinstance(result, JobSubmitted), result
        return result, task_count

    def _new_job_id(self, spec: JobSpec) -> str:
        """The job's slug and 16 hex digits: its shard (`raftsched.topology`), then 52 random
        bits (unique among millions of jobs of one name). With several groups, a submit whose
        idempotency key's shard belongs to another group is FAILED_PRECONDITION naming it (the
        client routes it there), one whose shard is moving UNAVAILABLE (retried); one without a
        key takes a shard of this group (`shard_moves.new_job_shard`; apply checks it again)."""
        group = self.ctx.read(lambda s: s.group)
        if group is None and self.ctx.configured is not None:
            raise RaftschedError(
                Code.UNAVAILABLE,
                f"this replica is group {self.ctx.configured.group} of "
                f"{self.ctx.configured.groups}, which its log has not recorded yet (its first "
                "leader does that on taking office): retry", retry_after_ms=200)
        bits = self.ctx.rng.getrandbits(64)
        shard = self.ctx.read(lambda s: shard_moves.new_job_shard(
            s, spec.tenant, spec.idempotency_key, bits))
        slug = _SLUG.sub('-', spec.name)[:JOB_ID_SLUG_CHARS].strip('-') or 'job'
        return f"{slug}-{topology.job_id_tail(shard, bits)}"

    def _admitted(self, request: Any, context: grpc.ServicerContext) -> tuple[JobSpec, list[Any]]:
        """The validated spec of a SubmitJob and the wire form to propose, or abort: a bad spec
        or key INVALID_ARGUMENT, another tenant's PERMISSION_DENIED, a submit JOB_SUBMIT would
        refuse by the applied state RESOURCE_EXHAUSTED."""
        spec = self._submitted_spec(request, context)
        if request.idempotency_key:
            try:
                spec = with_idempotency_key(spec, request.idempotency_key)
            except SpecError as error:
                self._refuse_spec(context, error, "")
        try:
            identity.require_tenant(spec.tenant)
        except identity.Refused as refused:
            context.abort(refused.code, refused.message)
        self._refuse_before_proposal(context, spec)
        return spec, to_wire(spec)

    def _submitted_spec(self, request: Any, context: grpc.ServicerContext) -> JobSpec:
        """The validated spec of its document (`spec`, YAML or JSON, parsed only up to
        MAX_YAML_SPEC_BYTES / MAX_JSON_SPEC_BYTES) or of its wire form (`spec_wire`, decoded
        within bounds)."""
        field = "spec_wire" if request.spec_wire else "spec"
        params = dict(request.params)
        try:
            if request.spec_wire:
                return spec_with_params(decode_wire(request.spec_wire), params)
            return parse_submitted_text(request.spec, source="spec", params=params)
        except SpecError as error:
            self._refuse_spec(context, error, "" if params_refused(error) else field)

    def _refuse_before_proposal(self, context: grpc.ServicerContext, spec: JobSpec) -> None:
        """RESOURCE_EXHAUSTED, before anything is written to the log, for a submit JOB_SUBMIT
        would refuse by the applied state's bounds and queue limits (the same rule, message and
        retry-after: `policy.refusal_before_proposal`); apply checks again."""
        refusal = self.ctx.read(lambda s: refusal_before_proposal(s, spec))
        if refusal is not None:
            self.ctx.abort(context, RaftschedError(Code.RESOURCE_EXHAUSTED, refusal.reason,
                                                   retry_after_ms=refusal.retry_after_ms))

    def _refuse_spec(self, context: grpc.ServicerContext, error: SpecError,
                     field: str) -> NoReturn:
        """INVALID_ARGUMENT naming the spec's problems, in the message and as field violations
        (`rpc.abort`). `field` is the request field the problems' paths are inside: "spec" for
        the document (spec.tasks[2].resources.cpu), "" when a path is a request field itself."""
        shown = error.issues[:limits.MAX_REPORTED_SPEC_ISSUES]
        self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, _issues(error)),
                       [(".".join(p for p in (field, issue.path) if p), issue.message)
                        for issue in shown])

    def GetTopology(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Which group this is and every group's servers: its own group's as its replicas were
        told and every current member's the log knows (a replica's gRPC address is recorded
        when it leads), the others' as told; before the log records the group, the replica's
        options."""
        members = self.ctx.node.members()

        answer = pb.Topology()

        def view(state: State) -> tuple[GroupIdentity | None, list[str]]:
            shard_moves.add_map(answer, state)
            return state.group, [state.replica_addresses[m] for m in members
                                 if m in state.replica_addresses]

        recorded, current = self.ctx.read(view)
        group = recorded or self.ctx.configured or GroupIdentity(0, 1, limits.VIRTUAL_SHARDS)
        told = [list(servers) for servers in group.servers]
        known = told if len(told) == group.groups else [[] for _ in range(group.groups)]
        known[group.group] = list(dict.fromkeys([*known[group.group], *current])) \
            or [self.ctx.grpc_address]
        answer.MergeFrom(pb.Topology(
            group=group.group, groups=group.groups, shards=group.shards,
            responder=self.ctx.grpc_address,
            recorded=recorded is not None or self.ctx.configured is None))
        if not answer.schedule_groups:
            answer.schedule_groups = group.groups
        if all(known):  # every group's servers are known: none, else a partial topology
            answer.members.extend(pb.TopologyGroup(group=i, servers=servers)
                                  for i, servers in enumerate(known))
        return answer

    def SubmitJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Each job admitted as SubmitJob admits one (a refused one answered at once, naming
        it), the rest committed in as few JOB_SUBMIT_BATCH entries as MAX_ENTRY_BYTES allows,
        each answered as apply decided (`batch`)."""
        self.ctx.require_leader(context)
        jobs = list(request.jobs)
        problem = batch.call_problem([len(j.spec_wire) for j in jobs], [j.label for j in jobs])
        if problem is not None:
            self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, problem))
        answers: list[Any] = [None] * len(jobs)
        admitted: list[batch.Admitted] = []
        with self._large_spec_turn(context, sum(len(j.spec_wire) for j in jobs)):
            for index, job in enumerate(jobs):
                try:
                    admitted.append(self._admit_batch_job(index, job))
                except RaftschedError as error:
                    answers[index] = batch.refused(index, job.label, error)
            for run in batch.entries(admitted):
                self._propose_batch(context, run, jobs, answers)
        log.debug("jobs_submitted", jobs=len(jobs), admitted=len(admitted))
        return pb.SubmitJobsResponse(answers=answers)

    def _admit_batch_job(self, index: int, job: Any) -> batch.Admitted:
        """One job of a SubmitJobs call admitted exactly as SubmitJob admits one, or
        RaftschedError (its message names the field: spec_wire.tasks[2].depends_on ...)."""
        try:
            spec = spec_with_params(decode_wire(job.spec_wire), dict(job.params))
            if job.idempotency_key:
                spec = with_idempotency_key(spec, job.idempotency_key)
        except SpecError as error:
            raise RaftschedError(Code.INVALID_ARGUMENT, _issues(error)) from None
        try:
            identity.require_tenant(spec.tenant)
        except identity.Refused as denied:
            raise RaftschedError(Code(denied.code.name), denied.message) from None
        refusal = self.ctx.read(lambda s: refusal_before_proposal(s, spec))
        if refusal is not None:
            raise RaftschedError(Code.RESOURCE_EXHAUSTED, refusal.reason,
                                 retry_after_ms=refusal.retry_after_ms)
        return batch.Admitted(index, self._new_job_id(spec), to_wire(spec))

    def _propose_batch(self, context: grpc.ServicerContext, run: list[batch.Admitted],
                       jobs: list[Any], answers: list[Any]) -> None:
        """Commit one JOB_SUBMIT_BATCH of `run` and put each job's answer in its place."""
        command = c.JobSubmitBatch(tuple((a.job_id, a.wire) for a in run),
                                   self.ctx.clock.now_ms())
        try:
            result = self.ctx.propose(context, command)
        finally:
            for admitted in run:
                release_wire(admitted.wire)
        assert isinstance(result, JobsSubmitted), result
        for admitted, answer in zip(run, result.answers, strict=True):
            answers[admitted.index] = batch.applied(admitted.index, jobs[admitted.index].label,
                                                    answer)

    def GetJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        message, index = self.ctx.current_read_indexed(
            context, lambda s: views.job_message(views.job_of(s, request.job_id)))
        message.applied_index = index
        return message

    def ListJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            views.page_of(request)  # a malformed page is refused before any barrier is spent
        except RaftschedError as error:
            self.ctx.abort(context, error)
        message, index = self.ctx.current_read_indexed(
            context, lambda s: views.list_jobs(s, request))
        message.applied_index = index
        return message

    def ListTasks(self, request: Any, context: grpc.ServicerContext) -> Any:
        message, index = self.ctx.current_read_indexed(
            context, lambda s: views.list_tasks(s, request.job_id, request.with_spans))
        message.applied_index = index
        return message

    def CancelJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        refuse_unprintable(self.ctx, context, reason=request.reason)
        result = self.ctx.propose(context, c.JobCancel(request.job_id, self.ctx.clock.now_ms(),
                                                       request.reason[:limits.MAX_REASON_CHARS]))
        assert isinstance(result, JobCancelled), result
        return pb.CancelJobResponse(cancelled=result.cancelled, changed=result.changed)

    def GetTaskHistory(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.ctx.current_read(
            context, lambda s: views.task_history(s, request.job_id, request.task_id))

    def ExplainTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.ctx.current_read(
            context, lambda s: views.explain_task(s, request.job_id, request.task_id))

    def WatchJob(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        with self.ctx.stream_slot(context) as lease:
            yield from self._watch(request, context, lease)

    def WatchEvents(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """The events of the entries applied on this replica (leader or follower) after
        `from_index` (0: from now), in (index, seq) order, filtered here. A tenant's token has
        its filter scoped to its tenant (identity.scope_request); cluster events need an
        operator or admin token. A resume from before what is kept: FAILED_PRECONDITION."""
        wanted = self._event_filter(request, context)
        with self.ctx.stream_slot(context) as lease:
            yield from self._events(request.from_index, wanted, context, lease)

    def _event_filter(self, request: Any, context: grpc.ServicerContext) -> EventFilter:
        who = identity.current_caller()
        if request.clusters and who is not None and who.role not in (Role.OPERATOR,
                                                                     Role.ADMIN):
            message = (f"cluster events need an operator or admin token; this token acts as "
                       f"{who.role.value}")
            self.ctx.abort(context, RaftschedError(Code.PERMISSION_DENIED, message),
                           [("clusters", message)])
        return EventFilter(request.job_id, request.tenant, request.clusters)

    def _events(self, from_index: int, wanted: EventFilter, context: grpc.ServicerContext,
                lease: StreamLease) -> Iterator[Any]:
        """Kept events after the cursor, batch by batch (limits.EVENT_BATCH: a stream holds no
        more than that), then wait for the next entry (and EVENT_SETTLE_S more: one wake-up
        per batch of entries, not per entry). A first "progress" event says where the
        stream starts (from now: the last index applied here), at once; another after
        EVENT_PROGRESS_S of entries applied that matched nothing, and one before the stream
        ends for its age (so the client resumes with no event twice)."""
        events = self.ctx.events
        cursor: Cursor = (from_index or events.last_index(), SEQ_END)
        told = -1
        quiet_since = self.ctx.clock.monotonic_s()
        while context.is_active():
            seen = events.version()
            try:
                batch = events.after(cursor, limits.EVENT_BATCH)
            except TooOld as too_old:
                self.ctx.abort(context, RaftschedError(Code.FAILED_PRECONDITION, str(too_old)))
            if told < 0:  # not too old: where it starts
                yield pb.Event(index=cursor[0], kind="progress")
                told = cursor[0]
            for index, seq, change in batch.events:
                cursor = (index, seq)
                if wanted.matches(change):
                    yield _event_message(index, seq, change)
                    told, quiet_since = index, self.ctx.clock.monotonic_s()
            if len(batch.events) == limits.EVENT_BATCH:
                continue  # more are kept: no wait
            cursor = max(cursor, (batch.last_index, SEQ_END))
            quiet = self.ctx.clock.monotonic_s() - quiet_since >= limits.EVENT_PROGRESS_S
            if cursor[0] > told and quiet:
                yield pb.Event(index=cursor[0], kind="progress")
                told, quiet_since = cursor[0], self.ctx.clock.monotonic_s()
            if lease.expired():  # every event up to the cursor's index was passed: say so,
                yield pb.Event(index=cursor[0], kind="progress")  # the client resumes there
                self.ctx.end_for_age(context)
                return
            if events.wait(seen, min(limits.EVENT_PROGRESS_S, lease.remaining_s())) != seen:
                time.sleep(limits.EVENT_SETTLE_S)  # more entries, one batch: see the bound

    def TaskLogs(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        with self.ctx.stream_slot(context) as lease:
            yield from self._task_logs(request, context, lease)

    def _task_logs(self, request: Any, context: grpc.ServicerContext,
                   lease: StreamLease) -> Iterator[Any]:
        """Piece after piece of the attempt's output file, each fetched from its agent
        (`logs.LogBroker`). Without follow: up to the file's size at the first piece. With
        follow: on while the attempt is live, polling every LOG_FOLLOW_POLL_S when nothing is
        new, then up to the size its agent reports once it has ended. From `request.offset`
        when set (a resumed stream); ended for its age when the lease is (`end_for_age`)."""
        stream = request.stream or LOG_STREAMS[0]
        if stream not in LOG_STREAMS:
            self.ctx.abort(context, RaftschedError(
                Code.INVALID_ARGUMENT, f"stream must be one of {', '.join(LOG_STREAMS)}, got "
                f"{show(stream)}"))
        self.ctx.require_leader(context)
        source = self.ctx.current_read(context, lambda s: views.log_source(
            s, request.job_id, request.task_id, request.attempt))
        yield pb.TaskLogsChunk(attempt=source.number, fence=source.fence,
                               cluster_id=source.cluster_id, attempt_state=source.state)
        offset = request.offset or (-min(request.tail_bytes, limits.MAX_LOG_TAIL_BYTES)
                                    if request.tail_bytes else 0)
        end: int | None = None
        while context.is_active():
            if lease.expired():
                self.ctx.end_for_age(context)
                return
            try:
                chunk = self.ctx.logs.fetch(source.cluster_id, source.fence, stream, offset)
            except RaftschedError as error:
                self.ctx.abort(context, error)
            if chunk.error:
                self.ctx.abort(context, RaftschedError(Code.FAILED_PRECONDITION, chunk.error))
            if chunk.data:
                yield pb.TaskLogsChunk(data=chunk.data, offset=chunk.offset)
            offset = chunk.offset + len(chunk.data)
            if end is None and not request.follow:
                end = chunk.size
            if end is not None and offset >= end:
                return
            if not chunk.data:
                live = self.ctx.read(lambda s: views.attempt_live(s, request.job_id,
                                                                  request.task_id, source.fence))
                if not live:
                    end = chunk.size  # ended: what is there now is all there will be
                    if offset >= end:
                        return
                    continue
                time.sleep(LOG_FOLLOW_POLL_S)  # not the change feed: it moves at every commit

    def _watch(self, request: Any, context: grpc.ServicerContext,
               lease: StreamLease) -> Iterator[Any]:
        last: Any = None
        seen = self.ctx.changes.version()
        job = self.ctx.current_read(context, lambda s: views.job_of(s, request.job_id))
        while context.is_active():
            message = self.ctx.node.read(lambda s: _job_or_none(s, request.job_id))
            if message is None:
                self.ctx.abort(context, RaftschedError(Code.NOT_FOUND,
                                                       f"job {job.id} was forgotten"))
            if message != last:
                yield message
                last = message
            if message.state in _TERMINAL_NAMES:
                return
            if lease.expired():
                self.ctx.end_for_age(context)
                return
            seen = self.ctx.changes.wait(seen, min(WATCH_POLL_S, lease.remaining_s()))
            self.ctx.require_leader(context)


_TERMINAL_NAMES = frozenset(s.name for s in TERMINAL_JOB_STATES)


def _event_message(index: int, seq: int, change: Change) -> Any:
    kind, job_id, tenant, task_id, state, fence, attempt, cluster_id, reason, at_ms = change
    return pb.Event(index=index, seq=seq, kind=kind, job_id=job_id, tenant=tenant,
                    task_id=task_id, state=state, fence=fence, attempt=attempt,
                    cluster_id=cluster_id, reason=reason, at_ms=at_ms)


def _utf8_size(text: str) -> int:
    """The bytes `text` takes in UTF-8 (encoded only when it could matter: up to 4 per char)."""
    if len(text) * 4 < limits.LARGE_SPEC_BYTES:
        return len(text)
    return len(text.encode("utf-8", errors="surrogatepass"))


def _job_or_none(state: State, job_id: str) -> Any:
    job = state.jobs.get(job_id)
    return None if job is None else views.job_message(job)


def _issues(error: SpecError) -> str:
    shown = [issue.render() for issue in error.issues[:limits.MAX_REPORTED_SPEC_ISSUES]]
    more = len(error.issues) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


class AgentGatewayService(pb_grpc.AgentGatewayServicer):  # type: ignore[misc]
    """gRPC around `gateway.AgentGateway` (the logic the simulation drives too); messages are
    mapped by `raftsched.rpc`, the same mapping the agent's session uses."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gateway = AgentGateway(ctx.node, ctx.leader, ctx.clock, ctx.rng,
                                    ctx.changes.wait, ctx.changes.version, ctx.logs)

    def Register(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            registered = self.gateway.register(rpc.registration_from_pb(request))
        except RaftschedError as error:
            self.ctx.abort(context, error)
        log.info("agent_registered", cluster=request.cluster_id, incarnation=request.incarnation,
                 lost=registered.lost, kills=registered.kills, stop=len(registered.stop))
        return rpc.registered_to_pb(dataclasses.replace(registered,
                                                        leader=_self_address(self.ctx)))

    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        beat = rpc.beat_from_pb(request)
        beat = dataclasses.replace(beat, wait_ms=min(beat.wait_ms, limits.MAX_LONG_POLL_MS))
        try:
            directives = self.gateway.heartbeat(beat, context.is_active)
        except RaftschedError as error:
            self.ctx.abort(context, error)
        return rpc.directives_to_pb(directives)

    def Report(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            reports = [rpc.report_from_pb(r) for r in request.reports]
            reported = self.gateway.report(request.cluster_id, request.incarnation, reports,
                                           rpc.observation_from_pb(request))
        except ValueError as error:
            self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, str(error)))
        except RaftschedError as error:
            self.ctx.abort(context, error)
        return rpc.reported_to_pb(reported)

    def SendLog(self, request: Any, context: grpc.ServicerContext) -> Any:
        if len(request.data) > LOG_CHUNK_BYTES:
            self.ctx.abort(context, RaftschedError(
                Code.INVALID_ARGUMENT, f"{len(request.data)} bytes of output in one piece, over "
                f"LOG_CHUNK_BYTES={LOG_CHUNK_BYTES}"))
        self.gateway.send_log(request.cluster_id, rpc.log_chunk_from_pb(request))
        return pb.LogAck()


class ReflectionService(reflection.ReflectionServicer):  # type: ignore[misc]
    """gRPC server reflection whose streams take a stream slot like WatchJob's: a reflection
    stream holds an RPC worker until its client closes it, or until the maximum stream age,
    when it is cancelled (it waits for its client's next request, where no clock is looked at;
    grpcurl opens one per command)."""

    def __init__(self, ctx: Context, service_names: list[str]) -> None:
        super().__init__(service_names)
        self.ctx = ctx

    def ServerReflectionInfo(self, request_iterator: Iterator[Any],
                             context: grpc.ServicerContext) -> Iterator[Any]:
        with self.ctx.stream_slot(context) as lease, \
                self.ctx.cancelled_at_age(lease, context.cancel):
            yield from super().ServerReflectionInfo(request_iterator, context)


class HealthService(health.HealthServicer):  # type: ignore[misc]
    """The standard health service, whose Watch streams take a stream slot and end at the
    maximum stream age (OK, trailer STREAM_END_KEY). Its Watch is the blocking kind, holding an
    RPC worker: the interceptors wrap every handler, which hides the non-blocking kind."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(experimental_non_blocking=False)
        self.ctx = ctx

    def Watch(self, request: Any, context: grpc.ServicerContext,
              send_response_callback: Any = None) -> Iterator[Any]:
        with self.ctx.stream_slot(context) as lease:
            watcher = super().Watch(request, context)
            with self.ctx.cancelled_at_age(lease, watcher.close):
                yield from watcher
            if lease.expired():
                self.ctx.end_for_age(context)


def enable_reflection(ctx: Context, service_names: list[str], server: grpc.Server) -> None:
    """`reflection.enable_server_reflection`, with `ReflectionService`."""
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        ReflectionService(ctx, service_names), server)


def _self_address(ctx: Context) -> str:
    return str(ctx.leader_grpc_address() or "")


class AdminService(pb_grpc.AdminServicer):  # type: ignore[misc]
    def __init__(self, ctx: Context, grpc_address: str) -> None:
        self.ctx = ctx
        self.grpc_address = grpc_address
        self._saving = threading.Lock()

    def ClusterStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = self.ctx.node.status(include_digest=request.include_digest)
        leading = self.ctx.leader.leading()
        free = self.ctx.leader.reported_free() if leading else {}

        def view(state: State) -> Any:
            replicas = [pb.ReplicaInfo(raft_address=m, grpc_address=state.replica_addresses.get(
                m, ""), leader=m == status.leader) for m in status.members]
            clusters = [views.compute_cluster(state, cl, self.ctx.leader.heartbeat_age_ms(cl.id)
                                              if leading else -1, free.get(cl.id))
                        for cl in sorted(state.clusters.values(), key=lambda x: x.id)]
            leader_grpc = state.replica_addresses.get(status.leader or "", "")
            return replicas, clusters, leader_grpc, views.list_tenants(state), state.now_ms

        replicas, clusters, leader_grpc, tenants, now_ms = self.ctx.node.read(view)
        return pb.ClusterStatusResponse(
            leader=leader_grpc, term=status.term, replicas=replicas, clusters=clusters,
            commit_index=status.commit_index, applied_index=status.last_applied,
            responder=self.grpc_address, state_digest=status.state_digest,
            state_index=status.state_index, tenants=tenants.tenants,
            queued_total=tenants.queued_total, max_queued_tasks=tenants.max_queued_tasks,
            now_ms=now_ms)

    def AddReplica(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._change(context, request, add=True)

    def CreateToken(self, request: Any, context: grpc.ServicerContext) -> Any:
        """A new token: its secret is made here and answered once; the log and the state get
        its sha256 only. Or the token the caller made (its id and digest: a deployment of
        several groups holds the same token in each); its secret never comes here."""
        refuse_unprintable(self.ctx, context, note=request.note)
        token_id, digest, secret = self._token_to_create(request, context)
        command = c.TokenPut(token_id, digest, request.tenant, request.role,
                             request.note, self.ctx.clock.now_ms())
        problem = token_put_problem(command) or token_scope_problem(command)
        if problem is not None:
            self.ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, problem))
        result = self.ctx.propose(context, command)
        # created is False only for a retried copy of this very token (same id and digest).
        assert isinstance(result, TokenPutResult) and result.token_id == token_id, result
        who = identity.current_caller()
        log.info("token_created", token=token_id, tenant=request.tenant, role=request.role,
                 by=who.token.id if who is not None else "", made_by_caller=not secret)
        return pb.CreateTokenResponse(token_id=token_id, token=secret)

    def _token_to_create(self, request: Any,
                         context: grpc.ServicerContext) -> tuple[str, bytes, str]:
        """(id, sha256 of the secret, the secret or "" when the caller made it)."""
        if not request.token_id and not request.digest:
            made = tokens.new_token()
            return made.token_id, made.digest, made.token
        if not request.token_id or not request.digest:
            missing = "token_id" if not request.token_id else "digest"
            self.ctx.abort(context, RaftschedError(
                Code.INVALID_ARGUMENT, f"{missing}: a token made by the caller needs both its "
                "token_id and the digest of its secret"))
        if len(request.digest) != 2 * TOKEN_DIGEST_BYTES \
                or not HEX_DIGITS.issuperset(request.digest):
            self.ctx.abort(context, RaftschedError(
                Code.INVALID_ARGUMENT, f"digest: must be the sha256 of the secret as "
                f"{2 * TOKEN_DIGEST_BYTES} lowercase hex characters, got {show(request.digest)}"))
        return request.token_id, bytes.fromhex(request.digest), ""

    def RevokeToken(self, request: Any, context: grpc.ServicerContext) -> Any:
        result = self.ctx.propose(context, c.TokenRevoke(request.token_id,
                                                         self.ctx.clock.now_ms()))
        assert isinstance(result, TokenRevokeResult), result
        log.info("token_revoked", token=request.token_id)
        return pb.RevokeTokenResponse(token_id=request.token_id)

    def RemoveCluster(self, request: Any, context: grpc.ServicerContext) -> Any:
        result = self.ctx.propose(context, c.ClusterRemove(request.cluster_id,
                                                           self.ctx.clock.now_ms()))
        assert isinstance(result, ClusterRemoved), result
        log.info("cluster_removed", cluster=request.cluster_id)
        return pb.RemoveClusterResponse(cluster_id=request.cluster_id)

    def DrainCluster(self, request: Any, context: grpc.ServicerContext) -> Any:
        refuse_unprintable(self.ctx, context, reason=request.reason)
        result = self.ctx.propose(context, c.ClusterDrain(
            request.cluster_id, request.drain, self.ctx.clock.now_ms(),
            request.reason[:limits.MAX_REASON_CHARS]))
        assert isinstance(result, ClusterDrained), result
        log.info("cluster_drained" if request.drain else "cluster_undrained",
                 cluster=request.cluster_id, changed=result.changed, reason=request.reason)
        return pb.DrainClusterResponse(cluster_id=result.cluster_id, draining=result.draining,
                                       changed=result.changed)

    def SetTenant(self, request: Any, context: grpc.ServicerContext) -> Any:
        current = self.ctx.read(lambda s: policy_of(s, request.tenant))
        result = self.ctx.propose(context, c.TenantSet(
            request.tenant,
            request.weight if request.HasField("weight") else current.weight,
            request.max_queued if request.HasField("max_queued") else current.max_queued,
            request.max_running if request.HasField("max_running") else current.max_running,
            self.ctx.clock.now_ms()))
        assert isinstance(result, TenantSetResult), result
        log.info("tenant_set", tenant=request.tenant, weight=request.weight,
                 max_queued=request.max_queued, max_running=request.max_running,
                 changed=result.changed)
        info: Any = self.ctx.read(lambda s: views.tenant_info(s, request.tenant))
        info.changed = result.changed
        return info

    def SetShardMap(self, request: Any, context: grpc.ServicerContext) -> Any:
        result = self.ctx.propose(context, shard_moves.map_command(request,
                                                                   self.ctx.clock.now_ms()))
        assert isinstance(result, ShardMapSetResult), result
        group = self.ctx.read(lambda s: s.group)
        log.info("shard_map_set", epoch=result.epoch, changed=result.changed,
                 groups=request.groups, moving=len(request.moving))
        return pb.SetShardMapResponse(group=group.group if group else 0, epoch=result.epoch,
                                      changed=result.changed)

    def ExportShardKeys(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        with self.ctx.stream_slot(context):
            shards = set(request.shards)
            try:
                items = self.ctx.current_read(
                    context, lambda s: shard_moves.keys_of(s, request.epoch, shards))
            except RaftschedError as error:
                self.ctx.abort(context, error)
            yield from shard_moves.key_pages(items, shards, request.epoch)

    def ImportShardKeys(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            command = shard_moves.import_command(request, self.ctx.clock.now_ms())
        except RaftschedError as error:
            self.ctx.abort(context, error)
        result = self.ctx.propose(context, command)
        assert isinstance(result, KeysImported), result
        log.info("shard_keys_imported", epoch=request.epoch, imported=result.imported,
                 kept=result.kept)
        return pb.ImportShardKeysResponse(imported=result.imported, kept=result.kept)

    def ListTenants(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.ctx.current_read(context, views.list_tenants)

    def SaveSnapshot(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """Stream a snapshot the leader writes now (`RaftNode.fresh_dump`): a stream slot while
        it lasts, and one save at a time per replica."""
        with self.ctx.stream_slot(context):
            self.ctx.require_leader(context)
            if not self._saving.acquire(blocking=False):
                self.ctx.abort(context, RaftschedError(
                    Code.RESOURCE_EXHAUSTED, "a snapshot save is already running on this "
                    "replica; retry when it is done"))
            try:
                yield from self._save(context)
            finally:
                self._saving.release()

    def _save(self, context: grpc.ServicerContext) -> Iterator[Any]:
        started = self.ctx.clock.monotonic_s()
        try:
            file, index, term = self.ctx.node.fresh_dump(limits.SNAPSHOT_SAVE_TIMEOUT_S)
        except RaftschedError as error:
            self.ctx.abort(context, error)
        with file:
            size = os.fstat(file.fileno()).st_size
            log.info("snapshot_save_started", index=index, term=term, bytes=size,
                     wrote_ms=round((self.ctx.clock.monotonic_s() - started) * 1000))
            yield pb.SnapshotChunk(index=index, term=term, size=size)
            digest = hashlib.sha256()
            sent = 0
            while context.is_active():
                data = file.read(limits.SNAPSHOT_CHUNK_BYTES)
                if not data:
                    break
                digest.update(data)
                sent += len(data)
                yield pb.SnapshotChunk(data=data)
            if sent != size:
                log.warning("snapshot_save_abandoned", index=index, sent=sent, bytes=size)
                return
        log.info("snapshot_saved", index=index, term=term, bytes=size,
                 ms=round((self.ctx.clock.monotonic_s() - started) * 1000))
        yield pb.SnapshotChunk(sha256=digest.hexdigest())

    def RevokeCertificate(self, request: Any, context: grpc.ServicerContext) -> Any:
        refuse_unprintable(self.ctx, context, subject=request.subject, reason=request.reason)
        result = self.ctx.propose(context, c.CertRevoke(
            request.fingerprint.strip().lower(), request.subject, request.reason,
            self.ctx.clock.now_ms()))
        assert isinstance(result, CertRevoked), result
        who = identity.current_caller()
        log.info("certificate_revoked", fingerprint=result.fingerprint, subject=request.subject,
                 created=result.created, by=who.token.id if who is not None else "")
        return pb.RevokeCertificateResponse(fingerprint=result.fingerprint,
                                            created=result.created)

    def ListRevokedCertificates(self, request: Any, context: grpc.ServicerContext) -> Any:
        revoked = self.ctx.current_read(context, lambda s: [
            pb.RevokedCertificate(fingerprint=r.fingerprint, subject=r.subject, reason=r.reason,
                                  revoked_ms=r.revoked_ms) for r in s.revoked_certs.values()])
        return pb.ListRevokedCertificatesResponse(certificates=revoked)

    def ListTokens(self, request: Any, context: grpc.ServicerContext) -> Any:
        tokens = self.ctx.current_read(context, lambda s: [
            pb.TokenInfo(token_id=t.id, tenant=t.tenant, role=t.role.value, note=t.note,
                         created_ms=t.created_ms, acts_as=honoured_role(t).value,
                         digest=t.digest.hex() if request.with_digests else "")
            for t in s.tokens.values()])
        return pb.ListTokensResponse(tokens=tokens)

    def RemoveReplica(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._change(context, request, add=False)

    def _change(self, context: grpc.ServicerContext, request: Any, *, add: bool) -> Any:
        self.ctx.require_leader(context)
        try:
            if add:
                self.ctx.node.add_replica(request.raft_address, limits.PROPOSE_TIMEOUT_S * 2)
            else:
                self.ctx.node.remove_replica(request.raft_address, limits.PROPOSE_TIMEOUT_S * 2)
        except RaftschedError as error:
            self.ctx.abort(context, error)
        if add and request.grpc_address:
            self.ctx.propose(context, c.Barrier(f"announce-{request.raft_address}", 0,
                                                request.raft_address, request.grpc_address))
        log.info("replica_added" if add else "replica_removed", raft=request.raft_address)
        return pb.ReplicaResponse(members=self.ctx.node.members())


def refuse_unprintable(ctx: Context, context: grpc.ServicerContext, **fields: str) -> None:
    """INVALID_ARGUMENT naming the field, before anything is proposed, for free text that is not
    printable (`text_problem`). The state machine stores such text escaped rather than refuse
    it (raftsched/state/text.py), so this is where a caller hears of it."""
    for field, value in fields.items():
        problem = text_problem(field, value)
        if problem is not None:
            ctx.abort(context, RaftschedError(Code.INVALID_ARGUMENT, problem), [(field, problem)])
