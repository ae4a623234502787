"""The Python client: finds the leader, follows redirects, retries what is safe to retry.

Every call is safe to retry: reads are reads, cancel is idempotent, and `submit` always carries an
idempotency key (`keys.submit_key`: the one rule, the CLI's too), so a call whose outcome is unknown
(DEADLINE_EXCEEDED, or a connection lost mid-call) is simply sent again. Retries are bounded by
`MAX_CALL_ATTEMPTS` and by the caller's `retry_budget_s`; what is left when they run out is raised
as a `RaftschedError` with the last code seen.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import grpc

from raftsched import limits, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.client import retry
from raftsched.client.keys import submit_key
from raftsched.client.retry import RetryPolicy, Servers
from raftsched.errors import Code, RaftschedError
from raftsched.rpc import CHANNEL_OPTIONS, ended_for_age, error_from_rpc, retryable
from raftsched.spec.issue import SpecIssue
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.params import spec_with_params
from raftsched.spec.wire import pack_wire
from raftsched.states import TERMINAL_JOB_STATE_NAMES

DEFAULT_CALL_TIMEOUT_S = 10.0
"""Deadline of one RPC attempt."""
TOPOLOGY_CALL_TIMEOUT_S = 3.0
"""GetTopology per replica (a local read): a client learning the groups does not wait long on
one that does not answer."""
SUBMIT_TIMEOUT_PER_MB_S = 4.0
"""A SubmitJob attempt's deadline grows by this much per MB of spec above the call timeout (a
retry after DEADLINE_EXCEEDED is safe, the key makes it idempotent, but it parses it all again)."""
MEMBERSHIP_CALL_TIMEOUT_S = 60.0
"""Deadline of one AddReplica/RemoveReplica attempt: the leader waits up to 30 s for a new member
to catch up, then may remove it again (replica/raft/membership.JOIN_CATCH_UP_TIMEOUT_S)."""
DEFAULT_RETRY_BUDGET_S = 30.0
"""How long a call keeps retrying through elections and redirects."""
MAX_CALL_ATTEMPTS = 200
"""With BACKOFF_MAX_S this lets a call retry through the whole retry budget."""
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 0.2
"""Retries during an election come this often at the least; elections take ~0.5-1 s here."""
WATCH_RECONNECTS = 100
"""A watch re-opens its stream after a leader change at most this many times in a row."""
LOGS_TIMEOUT_S = 300.0
"""`task logs` without --follow: reading a whole output file (64 KiB a round trip)."""
LOGS_FOLLOW_TIMEOUT_S = 7 * 24 * 3600.0
"""`task logs --follow` lasts as long as the attempt runs (up to a week)."""
SNAPSHOT_STREAM_TIMEOUT_S = 3_600.0
"""A snapshot save: the leader writes it (up to limits.SNAPSHOT_SAVE_TIMEOUT_S), then streams it."""
TERMINAL_JOB_STATES = TERMINAL_JOB_STATE_NAMES
STREAM_WAIT_BACKOFF_MAX_S = 1.0
"""Opening a stream a replica refused for lack of stream slots (RESOURCE_EXHAUSTED) is tried
again this often at the least, within the retry budget (the CLI's --timeout)."""

class Cancellable(Protocol):
    """An open server stream (a gRPC call) another thread may end."""

    def cancel(self) -> bool: ...


OnRetry = Callable[[RaftschedError, float], None]
"""Told of each failed try that will be retried (the error, the wait before the next try)."""


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: str
    created: bool
    idempotency_key: str


class Client:
    """Thread-safe: one channel per replica, shared by every call."""

    def __init__(self, servers: Sequence[str], *, timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
                 on_retry: OnRetry | None = None, tls_files: tls.TlsFiles | None = None,
                 token: str | None = None) -> None:
        """`tls_files`: a user certificate (raftsched-user:NAME) and the cluster's CA; None:
        plaintext, for clusters run with --insecure-dev. `token`: the API token sent with every
        call (`authorization: Bearer TOKEN`); its role and tenant decide what the call may do."""
        self._tls = tls_files
        self._metadata: tuple[tuple[str, str], ...] = \
            () if not token else (("authorization", f"Bearer {token.strip()}"),)
        self._servers = Servers(servers)
        self._timeout_s = timeout_s
        self._policy = RetryPolicy(budget_s=retry_budget_s, max_attempts=MAX_CALL_ATTEMPTS,
                                   backoff_initial_s=BACKOFF_MIN_S, backoff_max_s=BACKOFF_MAX_S)
        self._watch_policy = RetryPolicy(budget_s=retry_budget_s, max_attempts=WATCH_RECONNECTS,
                                         backoff_initial_s=BACKOFF_MIN_S,
                                         backoff_max_s=STREAM_WAIT_BACKOFF_MAX_S)
        # Enough tries to wait out the whole budget for a stream slot, a try a second at most.
        self._stream_policy = RetryPolicy(
            budget_s=retry_budget_s, backoff_initial_s=BACKOFF_MIN_S,
            backoff_max_s=STREAM_WAIT_BACKOFF_MAX_S,
            max_attempts=MAX_CALL_ATTEMPTS + int(retry_budget_s / STREAM_WAIT_BACKOFF_MAX_S * 2))
        self._on_retry = on_retry
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}

    @property
    def servers(self) -> tuple[str, ...]:
        return self._servers.addresses

    # -- plumbing --------------------------------------------------------------------------------

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = tls.open_channel(address, self._tls, CHANNEL_OPTIONS)
                self._channels[address] = channel
            return channel

    def _invoke(self, stub_type: Callable[[grpc.Channel], Any], method: str, request: Any,
                address: str, timeout_s: float | None = None) -> Any:
        stub = stub_type(self._channel(address))
        try:
            return getattr(stub, method)(
                request, timeout=self._timeout_s if timeout_s is None else timeout_s,
                metadata=self._metadata)
        except grpc.RpcError as error:
            raise error_from_rpc(error, address) from None

    def _call(self, stub_type: Callable[[grpc.Channel], Any], method: str, request: Any,
              timeout_s: float | None = None) -> Any:
        """Call `method` on the leader, retrying what is retryable (`retry.Attempts`); each try
        gets `timeout_s` (default: the client's call timeout)."""
        return retry.call(
            self._servers, self._policy,
            lambda address: self._invoke(stub_type, method, request, address, timeout_s),
            on_retry=self._on_retry)

    def _scheduler(self, method: str, request: Any) -> Any:
        return self._call(pb_grpc.SchedulerStub, method, request)

    # -- scheduler -------------------------------------------------------------------------------

    def submit(self, spec_text: str | bytes, idempotency_key: str | None = None,
               params: Mapping[str, str] | None = None) -> Submitted:
        """Parse the document, apply `params` (values for its `params:`) and validate it
        locally (SpecError names every problem), then `submit_spec`."""
        return self.submit_spec(parse_spec_text(spec_text, params=params), idempotency_key)

    def submit_spec(self, spec: JobSpec, idempotency_key: str | None = None,
                    params: Mapping[str, str] | None = None) -> Submitted:
        """Submit a validated spec, with `params` applied (`spec_with_params`), in its wire form
        (SubmitJobRequest.spec_wire: the replicas parse no document, whatever its size): nothing
        is parsed or validated again here. The key is `submit_key`'s. SpecError when the wire
        form is over MAX_SPEC_BYTES or a param is unknown."""
        spec = spec_with_params(spec, params or {})
        key = submit_key(idempotency_key, spec)
        wire = pack_wire(spec)
        if len(wire) > limits.MAX_SPEC_BYTES:
            raise SpecError([SpecIssue("", f"the spec's wire form is {len(wire)} bytes; a job "
                                           f"spec may be at most {limits.MAX_SPEC_BYTES} bytes")])
        # The leader decodes, validates and commits the spec before it answers: a job at the
        # task limit (~7 MB) takes it seconds on a busy 2-core machine, so big specs get longer.
        timeout_s = max(self._timeout_s, len(wire) / 1e6 * SUBMIT_TIMEOUT_PER_MB_S)
        reply = self._call(pb_grpc.SchedulerStub, "SubmitJob",
                           pb.SubmitJobRequest(spec_wire=wire, idempotency_key=key), timeout_s)
        return Submitted(reply.job_id, reply.created, key)

    def submit_jobs(self, specs: Sequence[JobSpec], keys: Sequence[str | None] = (),
                    labels: Sequence[str] = (), params: Mapping[str, str] | None = None,
                    ) -> list[Submitted | RaftschedError]:
        """Submit many validated specs in SubmitJobs calls (one while they fit MAX_BATCH_JOBS
        and MAX_BATCH_BYTES; nothing is parsed again here),
        each with its `submit_key` (keys[i] when given): one answer per spec, in order, a
        Submitted or the job's own refusal (a RaftschedError whose message names it, with
        `labels[i]` — e.g. its file — when given). Retrying the call is safe: every job carries
        its key. `params` apply to every spec. SpecError when a wire form is over MAX_SPEC_BYTES
        or a spec has not every param given (nothing is sent)."""
        items, made = [], []
        for index, spec in enumerate(specs):
            spec = spec_with_params(spec, params or {})
            key = submit_key(keys[index] if index < len(keys) else None, spec)
            wire = pack_wire(spec)
            if len(wire) > limits.MAX_SPEC_BYTES:
                raise SpecError([SpecIssue(f"jobs[{index}]", f"the spec's wire form is "
                                           f"{len(wire)} bytes; a job spec may be at most "
                                           f"{limits.MAX_SPEC_BYTES} bytes")])
            label = labels[index] if index < len(labels) else ""
            items.append(pb.SubmitJobsItem(spec_wire=wire, idempotency_key=key, label=label))
            made.append(key)
        answers: list[Any] = []
        for call in _batch_calls(items):
            size = sum(len(item.spec_wire) for item in call)
            timeout_s = max(self._timeout_s, size / 1e6 * SUBMIT_TIMEOUT_PER_MB_S)
            reply = self._call(pb_grpc.SchedulerStub, "SubmitJobs",
                               pb.SubmitJobsRequest(jobs=call), timeout_s)
            answers.extend(reply.answers)
        return [_batch_answer(answer, key) for answer, key in zip(answers, made, strict=True)]

    def get_job(self, job_id: str) -> Any:
        return self._scheduler("GetJob", pb.GetJobRequest(job_id=job_id))

    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", *, query: str = "", newest_first: bool = False) -> Any:
        """A page of jobs (ListJobsResponse: jobs, next_page_token, state_counts, ...): `query`
        keeps those whose id or name contains it, ignoring case; `newest_first` pages from the
        newest (a page_token continues the order it came from)."""
        request = pb.ListJobsRequest(tenant=tenant, state=state, limit=limit,
                                     page_token=page_token, query=query,
                                     newest_first=newest_first)
        return self._scheduler("ListJobs", request)

    def list_tasks(self, job_id: str, with_spans: bool = False) -> Any:
        """`with_spans`: each task's latest attempts' times too (a timeline's bars)."""
        return self._scheduler("ListTasks", pb.ListTasksRequest(job_id=job_id,
                                                                with_spans=with_spans))

    def cancel(self, job_id: str, reason: str = "") -> Any:
        return self._scheduler("CancelJob", pb.CancelJobRequest(job_id=job_id, reason=reason))

    def task_history(self, job_id: str, task_id: str) -> Any:
        return self._scheduler("GetTaskHistory",
                               pb.GetTaskHistoryRequest(job_id=job_id, task_id=task_id))

    def explain(self, job_id: str, task_id: str) -> Any:
        return self._scheduler("ExplainTask",
                               pb.ExplainTaskRequest(job_id=job_id, task_id=task_id))

    def watch(self, job_id: str) -> Iterator[Any]:
        """Yield the job each time it changes, until it is terminal. After a leader change the
        stream is re-opened on the new leader (`WATCH_RECONNECTS` times in a row at most); a
        stream the replica ended for its age is re-opened at once; a replica out of stream
        slots (RESOURCE_EXHAUSTED) is asked again within the retry budget."""
        attempts = retry.Attempts(self._servers, self._watch_policy, on_retry=self._on_retry,
                                  retryable=_stream_retryable)
        request = pb.WatchJobRequest(job_id=job_id)
        last: Any = None
        for address in attempts:
            stream = pb_grpc.SchedulerStub(self._channel(address)).WatchJob(
                request, metadata=self._metadata)
            try:
                for job in stream:
                    attempts.progressed()
                    if job != last:  # a re-opened stream starts with the job as it is
                        yield job
                        last = job
                    if job.state in TERMINAL_JOB_STATES:
                        return
                if not ended_for_age(stream):
                    return
            except grpc.RpcError as error:
                attempts.failed(error_from_rpc(error, address), address)

    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]:
        """Committed changes as Event messages, in (index, seq) order, from any replica, after
        `from_index` (0: from now). Each stream's first message is a "progress" event naming
        the index it starts after. Never ends by itself: a stream the replica ended for its age
        (after a "progress" event saying where) or a lost connection is re-opened (on another
        replica if need be, within the retry budget) from the last entry whose events were all
        yielded: after a lost connection an event may come twice, none is missed. A replica
        that no longer keeps the events asked for ("too old": each keeps its own window, a
        restarted one less) is left for each other configured replica in turn; when every one
        of them has said so (with nothing received meanwhile) it raises RaftschedError
        FAILED_PRECONDITION: list again, then watch from its applied_index."""
        attempts = retry.Attempts(self._servers, self._watch_policy, on_retry=self._on_retry,
                                  retryable=_stream_retryable)
        too_old = _TooOld(self._servers.addresses)
        done = from_index
        # every event of the entries up to index `done` has been yielded
        for target in attempts:
            address = too_old.instead_of(target)
            request = pb.WatchEventsRequest(from_index=done, job_id=job_id, tenant=tenant,
                                            clusters=clusters)
            stream = pb_grpc.SchedulerStub(self._channel(address)).WatchEvents(
                request, metadata=self._metadata)
            try:
                for event in stream:
                    attempts.progressed()
                    too_old.progressed()
                    # An entry's events come together: one of index i means all before i came.
                    done = max(done, event.index if event.kind == "progress" else event.index - 1)
                    yield event
                if not ended_for_age(stream):
                    attempts.failed(RaftschedError(Code.UNAVAILABLE, f"{address} ended the "
                                                   "event stream"), address)
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error, address)
                if error.code == Code.FAILED_PRECONDITION:
                    too_old.refused(address, error)  # raises when every replica has
                else:
                    attempts.failed(error, address)

    def task_logs(self, job_id: str, task_id: str, *, attempt: int = 0, stream: str = "stdout",
                  follow: bool = False, tail_bytes: int = 0, offset: int = 0,
                  on_stream: Callable[[Cancellable], None] | None = None) -> Iterator[Any]:
        """The attempt's output as TaskLogsChunk messages: the first names the attempt, the
        rest carry data in order. Follows the leader until the first message; a stream broken
        after that raises UNAVAILABLE (ask again, with --tail or from an offset). A stream the
        replica ended for its age is re-opened where it was (that attempt, that offset).
        `offset` > 0: from that byte of the output (overrides `tail_bytes`). `on_stream` is
        given each call opened, so another thread can end a follow (`cancel()`; the iterator
        then raises)."""
        request = pb.TaskLogsRequest(job_id=job_id, task_id=task_id, attempt=attempt,
                                     stream=stream, follow=follow, tail_bytes=tail_bytes,
                                     offset=offset)
        head: Any = None
        while True:
            address, first, messages = self._open_logs(request)
            if on_stream is not None:
                on_stream(messages)
            if first is None:
                return
            if head is None:
                head = first
                yield head
            try:
                for message in messages:
                    request.offset = message.offset + len(message.data)
                    yield message
            except grpc.RpcError as error:
                raise error_from_rpc(error, address) from None
            if not ended_for_age(messages):
                return
            request.attempt = head.attempt  # resume the attempt we were reading
            if request.offset:
                request.tail_bytes = 0

    def _open_logs(self, request: Any) -> tuple[str, Any, Any]:
        timeout = LOGS_FOLLOW_TIMEOUT_S if request.follow else LOGS_TIMEOUT_S
        return self._first_message(lambda channel: pb_grpc.SchedulerStub(
            channel).TaskLogs(request, metadata=self._metadata, timeout=timeout))

    def _first_message(self, open_stream: Callable[[grpc.Channel], Any]
                       ) -> tuple[str, Any, Any]:
        """Opens a server stream on the leader (following it, retrying by the policy, and
        waiting for a stream slot within the retry budget) until its first message arrives:
        (the address, that message or None when the stream ended without one, the rest of the
        stream: the call, whose trailers say whether it ended for its age)."""
        attempts = retry.Attempts(self._servers, self._stream_policy, on_retry=self._on_retry,
                                  retryable=_stream_retryable)
        for address in attempts:
            stream = open_stream(self._channel(address))
            try:
                return address, next(stream), stream
            except grpc.RpcError as error:
                attempts.failed(error_from_rpc(error, address), address)
            except StopIteration:
                return address, None, stream
        raise AssertionError("retry.Attempts ends by raising")  # pragma: no cover

    # -- admin -----------------------------------------------------------------------------------

    def save_snapshot(self, out: BinaryIO,
                      progress: Callable[[int, int], None] | None = None) -> SavedSnapshot:
        """Write a snapshot the leader takes now to `out`; `progress(bytes so far, size)` after
        each chunk. Follows the leader until the first byte arrives; a stream broken after that
        raises UNAVAILABLE, as does a size or sha256 that does not match what arrived: the
        caller then discards what `out` holds (and may try again)."""
        address, head, stream = self._first_message(lambda channel: pb_grpc.AdminStub(
            channel).SaveSnapshot(pb.SaveSnapshotRequest(), metadata=self._metadata,
                                  timeout=SNAPSHOT_STREAM_TIMEOUT_S))
        if head is None:
            raise RaftschedError(Code.UNAVAILABLE, f"{address} sent no snapshot")
        try:
            return _receive_snapshot(head, stream, out, progress)
        except grpc.RpcError as error:
            failed = error_from_rpc(error, address)
            raise RaftschedError(Code.UNAVAILABLE, f"the snapshot stream from {address} "
                                 f"broke: {failed.message}") from None

    def set_shard_map(self, request: Any) -> Any:
        """Write the deployment's shard map at an epoch into this group (admin only; a
        `SetShardMapRequest`): `raftsched admin groups add` does it in every group."""
        return self._call(pb_grpc.AdminStub, "SetShardMap", request)

    def export_shard_keys(self, epoch: int, shards: Sequence[int]) -> list[Any]:
        """The remembered idempotency keys of `shards` (moving away from this group at
        `epoch`), as pages of at most MAX_KEYS_PER_IMPORT (admin only)."""
        address, head, stream = self._first_message(lambda channel: pb_grpc.AdminStub(
            channel).ExportShardKeys(pb.ExportShardKeysRequest(epoch=epoch, shards=shards),
                                     metadata=self._metadata,
                                     timeout=SNAPSHOT_STREAM_TIMEOUT_S))
        pages = [] if head is None else [head]
        try:
            pages.extend(stream)
        except grpc.RpcError as error:
            raise error_from_rpc(error, address) from None
        return pages

    def import_shard_keys(self, page: Any) -> Any:
        """Keys of shards moving to this group (a `ShardKeys` page; admin only)."""
        return self._call(pb_grpc.AdminStub, "ImportShardKeys", page)

    def topology(self) -> Any:
        """Which group the first replica that answers is, of how many, and every group's
        servers (`Topology`); asks each configured replica in turn, like `cluster_status`."""
        return self._first_answer(pb_grpc.SchedulerStub, "GetTopology", pb.GetTopologyRequest(),
                                  self._servers.addresses,
                                  min(self._timeout_s, TOPOLOGY_CALL_TIMEOUT_S))

    def cluster_status(self, server: str | None = None, *, include_digest: bool = False) -> Any:
        """Ask `server` (or each configured replica in turn until one answers): any replica can
        say what it sees, so this does not follow the leader. `include_digest` costs the replica
        a pass over its whole state (for audits, not for polling)."""
        return self._first_answer(pb_grpc.AdminStub, "ClusterStatus",
                                  pb.ClusterStatusRequest(include_digest=include_digest),
                                  [server] if server else self._servers.addresses)

    def _first_answer(self, stub_type: Callable[[grpc.Channel], Any], method: str, request: Any,
                      addresses: Sequence[str], timeout_s: float | None = None) -> Any:
        """`method` asked of each of `addresses` in turn (a read any replica answers, the
        leader not followed): the first answer, or the last error."""
        last: RaftschedError | None = None
        for address in addresses:
            try:
                return self._invoke(stub_type, method, request, address, timeout_s)
            except RaftschedError as error:
                last = error
        assert last is not None
        raise last

    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any:
        """Waits (up to MEMBERSHIP_CALL_TIMEOUT_S) while the leader checks that every member is
        live, adds the replica and waits for it to catch up (or removes it again)."""
        request = pb.ReplicaRequest(raft_address=raft_address, grpc_address=grpc_address)
        return self._call(pb_grpc.AdminStub, "AddReplica", request, MEMBERSHIP_CALL_TIMEOUT_S)

    def create_token(self, tenant: str, role: str, note: str = "", *, token_id: str = "",
                     digest: str = "") -> Any:
        """A new API token (admin only): the answer holds its secret, shown this once. With
        `token_id` and `digest` (a token this caller made: `tokens.new_token`), that token,
        and the answer holds no secret."""
        return self._call(pb_grpc.AdminStub, "CreateToken",
                          pb.CreateTokenRequest(tenant=tenant, role=role, note=note,
                                                token_id=token_id, digest=digest))

    def revoke_token(self, token_id: str) -> Any:
        return self._call(pb_grpc.AdminStub, "RevokeToken",
                          pb.RevokeTokenRequest(token_id=token_id))

    def remove_cluster(self, cluster_id: str) -> Any:
        return self._call(pb_grpc.AdminStub, "RemoveCluster",
                          pb.RemoveClusterRequest(cluster_id=cluster_id))

    def revoke_certificate(self, fingerprint: str, subject: str = "", reason: str = "") -> Any:
        """Refuse a client certificate from now on (admin only)."""
        return self._call(pb_grpc.AdminStub, "RevokeCertificate", pb.RevokeCertificateRequest(
            fingerprint=fingerprint, subject=subject, reason=reason))

    def list_revoked_certificates(self) -> Any:
        return self._call(pb_grpc.AdminStub, "ListRevokedCertificates",
                          pb.ListRevokedCertificatesRequest())

    def list_tokens(self, with_digests: bool = False) -> Any:
        """Every token (admin only); `with_digests`: each one's sha256 digest too."""
        return self._call(pb_grpc.AdminStub, "ListTokens",
                          pb.ListTokensRequest(with_digests=with_digests))

    def drain_cluster(self, cluster_id: str, drain: bool, reason: str = "") -> Any:
        """Stop (`drain`) or resume new placements on a compute cluster (admin only)."""
        return self._call(pb_grpc.AdminStub, "DrainCluster", pb.DrainClusterRequest(
            cluster_id=cluster_id, drain=drain, reason=reason))

    def set_tenant(self, tenant: str, *, weight: int | None = None,
                   max_queued: int | None = None, max_running: int | None = None) -> Any:
        """Set a tenant's weight and limits (admin only); None keeps the current value."""
        request = pb.SetTenantRequest(tenant=tenant)
        if weight is not None:
            request.weight = weight
        if max_queued is not None:
            request.max_queued = max_queued
        if max_running is not None:
            request.max_running = max_running
        return self._call(pb_grpc.AdminStub, "SetTenant", request)

    def list_tenants(self) -> Any:
        return self._call(pb_grpc.AdminStub, "ListTenants", pb.ListTenantsRequest())

    def remove_replica(self, raft_address: str) -> Any:
        return self._call(pb_grpc.AdminStub, "RemoveReplica",
                          pb.ReplicaRequest(raft_address=raft_address), MEMBERSHIP_CALL_TIMEOUT_S)

    # -- schedules (issue 25) ---------------------------------------------------------------------

    def create_schedule(self, schedule_id: str, spec_text: str) -> Any:
        return self._call(pb_grpc.SchedulesStub, "CreateSchedule",
                          pb.CreateScheduleRequest(schedule_id=schedule_id, spec=spec_text))

    def list_schedules(self, tenant: str = "") -> Any:
        return self._call(pb_grpc.SchedulesStub, "ListSchedules",
                          pb.ListSchedulesRequest(tenant=tenant))

    def get_schedule(self, schedule_id: str) -> Any:
        return self._call(pb_grpc.SchedulesStub, "GetSchedule",
                          pb.GetScheduleRequest(schedule_id=schedule_id))

    def set_schedule(self, schedule_id: str, paused: bool, note: str = "") -> Any:
        return self._call(pb_grpc.SchedulesStub, "SetSchedule", pb.SetScheduleRequest(
            schedule_id=schedule_id, paused=paused, note=note))

    def trigger_schedule(self, schedule_id: str) -> Any:
        return self._call(pb_grpc.SchedulesStub, "TriggerSchedule",
                          pb.TriggerScheduleRequest(schedule_id=schedule_id))

    def backfill_schedule(self, schedule_id: str, from_ms: int, to_ms: int,
                          max_concurrent: int = 1) -> Any:
        return self._call(pb_grpc.SchedulesStub, "BackfillSchedule", pb.BackfillScheduleRequest(
            schedule_id=schedule_id, from_ms=from_ms, to_ms=to_ms,
            max_concurrent=max_concurrent))

    def delete_schedule(self, schedule_id: str) -> Any:
        return self._call(pb_grpc.SchedulesStub, "DeleteSchedule",
                          pb.DeleteScheduleRequest(schedule_id=schedule_id))

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stream_retryable(error: RaftschedError) -> bool:
    """Opening a stream is tried again on what any call is, and when the replica holds every
    stream slot it may give this caller (RESOURCE_EXHAUSTED): slots free up, and streams end
    at the replica's maximum stream age."""
    return retryable(error) or error.code == Code.RESOURCE_EXHAUSTED


class _TooOld:
    """The replicas that said "too old" to one event stream since it last received something:
    the next try goes to one that has not (each keeps its own window of events); once every
    configured replica has, the last refusal is raised (FAILED_PRECONDITION)."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self._addresses = addresses
        self._refused: list[str] = []

    def instead_of(self, target: str) -> str:
        """Where to open the stream: `target` (the client's current one) unless it refused."""
        if target not in self._refused:
            return target
        return next(a for a in self._addresses if a not in self._refused)

    def refused(self, address: str, error: RaftschedError) -> None:
        if address not in self._refused:
            self._refused.append(address)
        if all(a in self._refused for a in self._addresses):
            tried = ", ".join(self._refused)
            raise RaftschedError(error.code, f"{error.message} (every replica tried says so: "
                                             f"{tried})") from None

    def progressed(self) -> None:
        self._refused.clear()


@dataclass(frozen=True, slots=True)
class SavedSnapshot:
    index: int
    term: int
    size: int
    sha256: str


def _receive_snapshot(head: Any, stream: Iterator[Any], out: BinaryIO,
                      progress: Callable[[int, int], None] | None) -> SavedSnapshot:
    digest = hashlib.sha256()
    received = 0
    claimed = ""
    for chunk in stream:
        if chunk.sha256:
            claimed = chunk.sha256
            break
        out.write(chunk.data)
        digest.update(chunk.data)
        received += len(chunk.data)
        if progress is not None:
            progress(received, head.size)
    if received != head.size:
        raise RaftschedError(Code.UNAVAILABLE, f"the snapshot stream ended after {received} of "
                             f"{head.size} bytes")
    if claimed != digest.hexdigest():
        raise RaftschedError(Code.UNAVAILABLE, "the snapshot's sha256 " + (
            "does not match what arrived" if claimed else "never arrived"))
    return SavedSnapshot(head.index, head.term, received, claimed)


def _batch_answer(answer: Any, key: str) -> Submitted | RaftschedError:
    if answer.code:
        return RaftschedError(Code(answer.code), answer.message,
                              retry_after_ms=answer.retry_after_ms)
    return Submitted(answer.job_id, answer.created, key)


def _batch_calls(items: list[Any]) -> Iterator[list[Any]]:
    """The items in order, in runs that fit one SubmitJobs call (MAX_BATCH_JOBS jobs,
    MAX_BATCH_BYTES of spec_wire)."""
    run: list[Any] = []
    size = 0
    for item in items:
        if run and (len(run) >= limits.MAX_BATCH_JOBS
                    or size + len(item.spec_wire) > limits.MAX_BATCH_BYTES):
            yield run
            run, size = [], 0
        run.append(item)
        size += len(item.spec_wire)
    if run:
        yield run
