"""The Python client: finds the leader, follows redirects, retries what is safe to retry.

Every call is safe to retry: reads are reads, cancel is idempotent, and `submit` always carries an
idempotency key (the spec's own, or one made here), so a call whose outcome is unknown
(DEADLINE_EXCEEDED, or a connection lost mid-call) is simply sent again. Retries are bounded by
`MAX_CALL_ATTEMPTS` and by the caller's `retry_budget_s`; what is left when they run out is raised
as a `RaftschedError` with the last code seen.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import Code, RaftschedError
from raftsched.spec.job import parse_spec_text

LEADER_METADATA_KEY = "raftsched-leader"
DEFAULT_CALL_TIMEOUT_S = 10.0
"""Deadline of one RPC attempt."""
DEFAULT_RETRY_BUDGET_S = 30.0
"""How long a call keeps retrying through elections and redirects."""
MAX_CALL_ATTEMPTS = 200
"""With BACKOFF_MAX_S this lets a call retry through the whole retry budget."""
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 0.2
"""Retries during an election come this often at the least; elections take ~0.5-1 s here."""
WATCH_RECONNECTS = 100
"""A watch re-opens its stream after a leader change at most this many times."""
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})

T = TypeVar("T")

_CODES = {status.name: Code(status.name) for status in grpc.StatusCode
          if status.name in Code.__members__}


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: str
    created: bool
    idempotency_key: str


def error_from_rpc(error: grpc.RpcError) -> RaftschedError:
    """One place that maps a gRPC failure to our error type."""
    status = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    code = _CODES.get(status.name, Code.UNAVAILABLE)
    return RaftschedError(code, details or status.name)


def leader_hint(error: grpc.RpcError) -> str | None:
    metadata = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in metadata or ():
        if key == LEADER_METADATA_KEY and value:
            return str(value)
    return None


class Client:
    def __init__(self, servers: Sequence[str], *, timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 retry_budget_s: float = DEFAULT_RETRY_BUDGET_S) -> None:
        if not servers:
            raise RaftschedError(Code.INVALID_ARGUMENT, "no scheduler addresses given")
        self._servers = list(dict.fromkeys(servers))
        self._timeout_s = timeout_s
        self._retry_budget_s = retry_budget_s
        self._channels: dict[str, grpc.Channel] = {}
        self._preferred = self._servers[0]

    # -- plumbing --------------------------------------------------------------------------------

    def _channel(self, address: str) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.insecure_channel(address)
            self._channels[address] = channel
        return channel

    def _call(self, stub_type: Callable[[grpc.Channel], Any], method: str, request: Any,
              *, server: str | None = None) -> Any:
        """Call `method` on the leader (or on `server` only), retrying what is retryable."""
        deadline = time.monotonic() + self._retry_budget_s
        backoff = BACKOFF_MIN_S
        address = server or self._preferred
        last: RaftschedError | None = None
        for attempt in range(MAX_CALL_ATTEMPTS):
            stub = stub_type(self._channel(address))
            try:
                result = getattr(stub, method)(request, timeout=self._timeout_s)
                if server is None:
                    self._preferred = address
                return result
            except grpc.RpcError as error:
                last = error_from_rpc(error)
                if last.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) or server:
                    raise last from None
                hint = leader_hint(error)
            if time.monotonic() + backoff > deadline:
                break
            if hint and hint != address:
                address = hint  # a redirect: go at once
                continue
            address = self._servers[(self._servers.index(address) + 1) % len(self._servers)
                                    if address in self._servers else attempt % len(self._servers)]
            time.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        assert last is not None
        raise RaftschedError(last.code, f"{last.message} (gave up after retrying "
                                        f"{self._retry_budget_s:g} s across "
                                        f"{', '.join(self._servers)})")

    def _scheduler(self, method: str, request: Any) -> Any:
        return self._call(pb_grpc.SchedulerStub, method, request)

    # -- scheduler -------------------------------------------------------------------------------

    def submit(self, spec_text: str | bytes, idempotency_key: str | None = None) -> Submitted:
        """Validate locally (SpecError names every problem), then submit. Without a key in the
        spec or the call, one is made here so that retries cannot create a second job."""
        spec = parse_spec_text(spec_text)
        key = idempotency_key or spec.idempotency_key or f"auto-{uuid.uuid4().hex}"
        text = spec_text.decode("utf-8") if isinstance(spec_text, bytes) else spec_text
        reply = self._scheduler("SubmitJob", pb.SubmitJobRequest(spec=text, idempotency_key=key))
        return Submitted(reply.job_id, reply.created, key)

    def get_job(self, job_id: str) -> Any:
        return self._scheduler("GetJob", pb.GetJobRequest(job_id=job_id))

    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "") -> Any:
        request = pb.ListJobsRequest(tenant=tenant, state=state, limit=limit,
                                     page_token=page_token)
        return self._scheduler("ListJobs", request)

    def list_tasks(self, job_id: str) -> Any:
        return self._scheduler("ListTasks", pb.ListTasksRequest(job_id=job_id))

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
        stream is re-opened on the new leader (at most WATCH_RECONNECTS times)."""
        address = self._preferred
        for attempt in range(WATCH_RECONNECTS):
            stub = pb_grpc.SchedulerStub(self._channel(address))
            try:
                for job in stub.WatchJob(pb.WatchJobRequest(job_id=job_id)):
                    yield job
                    if job.state in TERMINAL_JOB_STATES:
                        return
                return
            except grpc.RpcError as error:
                failure = error_from_rpc(error)
                if failure.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED):
                    raise failure from None
                hint = leader_hint(error)
            if hint and hint != address:
                address = hint
                continue
            address = self._servers[attempt % len(self._servers)]
            time.sleep(min(BACKOFF_MIN_S * 2 ** attempt, BACKOFF_MAX_S))
        raise RaftschedError(Code.UNAVAILABLE, f"watch of {job_id} lost its stream "
                                               f"{WATCH_RECONNECTS} times")

    # -- admin -----------------------------------------------------------------------------------

    def cluster_status(self, server: str | None = None) -> Any:
        """Ask `server` (or whichever replica answers first): any replica can say what it sees."""
        targets = [server] if server else self._servers
        last: RaftschedError | None = None
        for address in targets:
            try:
                return self._call(pb_grpc.AdminStub, "ClusterStatus", pb.ClusterStatusRequest(),
                                  server=address)
            except RaftschedError as error:
                last = error
        assert last is not None
        raise last

    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any:
        request = pb.ReplicaRequest(raft_address=raft_address, grpc_address=grpc_address)
        return self._call(pb_grpc.AdminStub, "AddReplica", request)

    def remove_replica(self, raft_address: str) -> Any:
        return self._call(pb_grpc.AdminStub, "RemoveReplica",
                          pb.ReplicaRequest(raft_address=raft_address))

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
