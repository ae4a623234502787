"""The gRPC servicers (raftsched.replica.service), called directly with a fake ServicerContext
around an in-memory node (the real FSM, no Raft) and the real leader loop on a manual clock."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
import pytest

from raftsched import limits, rpc
from raftsched.api import raftsched_pb2 as pb
from raftsched.clock import ManualClock
from raftsched.protocol import (
    LEADER_METADATA_KEY,
    Beat,
    Observation,
    Registration,
    Report,
    ReportKind,
    ReportVerdict,
    Resources,
)
from raftsched.replica import service
from raftsched.replica.leader import Leader, LeaderConfig
from raftsched.replica.raft.port import RaftStatus
from raftsched.replica.service import (
    AdminService,
    AgentGatewayService,
    ChangeFeed,
    Context,
    SchedulerService,
)
from raftsched.state import commands as c
from raftsched.state import snapshot
from raftsched.state.model import GroupIdentity, State
from tests.support.fsmkit import job_doc, task_doc
from tests.support.memory_node import MemoryNode

RAFT = "10.0.0.1:7000"
GRPC = "10.0.0.1:50051"
"""This replica's Raft and gRPC addresses."""
PEER_RAFT = "10.0.0.2:7000"
PEER_GRPC = "10.0.0.2:50051"
GATE_WAIT_S = 0.02
"""LARGE_SPEC_WAIT_S in the gate tests."""
THREAD_DEADLINE_S = 10.0


class ServiceNode(MemoryNode):
    """MemoryNode with what the servicers read besides: confirmed reads, the index a read
    reflects, the Raft leader's address, status and members."""

    def __init__(self) -> None:
        super().__init__()
        self.raft_leader: str | None = RAFT
        self.confirms = True
        self.digest_requests: list[bool] = []

    def is_leader_confirmed(self, timeout_s: float) -> bool:
        return self.leader and self.confirms

    def read_indexed(self, fn: Callable[[State], Any]) -> tuple[Any, int]:
        return fn(self.state), self.applied

    def leader_address(self) -> str | None:
        return self.raft_leader

    def members(self) -> list[str]:
        return [RAFT, PEER_RAFT]

    def status(self, include_digest: bool = False) -> RaftStatus:
        self.digest_requests.append(include_digest)
        return RaftStatus(
            address=RAFT, leader=self.raft_leader, term=self.current_term,
            commit_index=self.applied, last_applied=self.applied, is_leader=self.leader,
            members=self.members(),
            state_digest=snapshot.digest(self.state) if include_digest else "",
            state_index=self.applied, log_first_index=1, log_last_index=self.applied,
            durability={}, replication={}, unauthenticated_connections={}, apply_backlog=0,
            dumps_written=0, dumps_loaded=0, library_alarms={}, membership_change=None,
            fatal=None)


class Aborted(Exception):
    """What FakeContext.abort raises (grpc's own abort raises too)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class FakeContext:
    def __init__(self) -> None:
        self.trailing: tuple[tuple[str, str], ...] = ()
        self.active = True

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Aborted(code, details)

    def set_trailing_metadata(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.trailing = tuple(pairs)

    def is_active(self) -> bool:
        return self.active


@dataclass
class Replica:
    node: ServiceNode
    clock: ManualClock
    leader: Leader
    scheduler: SchedulerService
    gateway: AgentGatewayService
    admin: AdminService

    def submit(self, doc: dict[str, Any], key: str = "") -> Any:
        request = pb.SubmitJobRequest(spec=json.dumps(doc), idempotency_key=key)
        return self.scheduler.SubmitJob(request, FakeContext())


def make_replica(*, in_office: bool = True, configured: GroupIdentity | None = None) -> Replica:
    node = ServiceNode()
    clock = ManualClock()
    leader = Leader(node, clock, random.Random(7),
                    LeaderConfig(RAFT, GRPC, suspect_after_s=5, lost_after_s=30,
                                 tick_interval_s=1),
                    version=lambda: node.applied)
    if in_office:
        leader._round()  # commits the barrier that announces GRPC
        assert leader.leading()
    ctx = Context(node, leader, clock, ChangeFeed(), grpc_address=GRPC, configured=configured)
    return Replica(node, clock, leader, SchedulerService(ctx), AgentGatewayService(ctx),
                   AdminService(ctx, GRPC))


@pytest.fixture
def replica() -> Replica:
    return make_replica()


def refused(method: Callable[[Any, Any], Any], request: Any) -> tuple[Aborted, dict[str, str]]:
    """Call `method`; it must abort. The abort and the trailing metadata it set."""
    context = FakeContext()
    with pytest.raises(Aborted) as caught:
        method(request, context)
    return caught.value, dict(context.trailing)


def one_task_doc(**fields: Any) -> dict[str, Any]:
    return job_doc([task_doc("t")], **fields)


def padded(doc: dict[str, Any], chars: int) -> str:
    """`doc` as JSON, padded with trailing spaces to exactly `chars` characters."""
    text = json.dumps(doc)
    assert len(text) <= chars
    return text + " " * (chars - len(text))


def register_east(replica: Replica) -> Any:
    """Register cluster east (incarnation 1, 4 cpu) through the gateway servicer."""
    registration = Registration("east", 1, ("linux",), Resources(4000, 4096, 0), ())
    return replica.gateway.Register(rpc.registration_to_pb(registration), FakeContext())


# --- SubmitJob ----------------------------------------------------------------------------------


def test_submit_job_creates_the_job_and_returns_its_id(replica: Replica) -> None:
    response = replica.submit(one_task_doc())
    assert response.created
    assert re.fullmatch(r"test-job-[0-9a-f]{16}", response.job_id)
    job = replica.node.state.jobs[response.job_id]
    assert job.submitted_ms == replica.clock.now_ms()
    assert replica.node.proposed[-1] == "JobSubmit"


def test_submit_job_again_with_the_same_key_and_spec_returns_the_same_job(
        replica: Replica) -> None:
    first = replica.submit(one_task_doc(), key="k-1")
    again = replica.submit(one_task_doc(), key="k-1")
    assert (again.job_id, again.created) == (first.job_id, False)
    assert list(replica.node.state.jobs) == [first.job_id]


def test_submit_job_with_a_used_key_and_another_spec_is_already_exists(
        replica: Replica) -> None:
    first = replica.submit(one_task_doc(), key="k-1")
    other = pb.SubmitJobRequest(spec=json.dumps(one_task_doc(priority=90)),
                                idempotency_key="k-1")
    abort, _ = refused(replica.scheduler.SubmitJob, other)
    assert abort.code == grpc.StatusCode.ALREADY_EXISTS
    assert "k-1" in abort.details and first.job_id in abort.details


def test_submit_job_the_key_given_apart_overrides_the_specs_own(replica: Replica) -> None:
    response = replica.submit(one_task_doc(idempotency_key="in-spec"), key="in-request")
    assert replica.node.state.jobs[response.job_id].spec.idempotency_key == "in-request"


def test_submit_job_a_bad_spec_is_invalid_argument_naming_the_field(replica: Replica) -> None:
    proposed = list(replica.node.proposed)
    bad = job_doc([task_doc("t", resources={"cpu": -1})])
    abort, metadata = refused(replica.scheduler.SubmitJob,
                              pb.SubmitJobRequest(spec=json.dumps(bad)))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "resources.cpu" in abort.details
    assert metadata[rpc.REPLICA_METADATA_KEY] == GRPC  # and the field violations (rpc.abort)
    assert replica.node.proposed == proposed and replica.node.state.jobs == {}


def test_submit_job_an_invalid_key_given_apart_is_invalid_argument_naming_it(
        replica: Replica) -> None:
    proposed = list(replica.node.proposed)
    request = pb.SubmitJobRequest(spec=json.dumps(one_task_doc()),
                                  idempotency_key="k" * (limits.MAX_IDEMPOTENCY_KEY_CHARS + 1))
    abort, _ = refused(replica.scheduler.SubmitJob, request)
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "idempotency_key" in abort.details
    assert replica.node.proposed == proposed and replica.node.state.jobs == {}


# --- not the leader -----------------------------------------------------------------------------


def follower_of_peer() -> Replica:
    """This replica led, then the peer (which announced its gRPC address) took over."""
    replica = make_replica()
    replica.node.propose(c.encode(c.Barrier("peer", 0, PEER_RAFT, PEER_GRPC)), 1)
    replica.node.leader = False
    replica.node.raft_leader = PEER_RAFT
    return replica


def test_writes_before_the_leader_takes_office_are_unavailable_marked_by_this_replica() -> None:
    replica = make_replica(in_office=False)
    submit = pb.SubmitJobRequest(spec=json.dumps(one_task_doc()))
    for method, request in ((replica.scheduler.SubmitJob, submit),
                            (replica.scheduler.CancelJob, pb.CancelJobRequest(job_id="j"))):
        abort, metadata = refused(method, request)
        assert abort.code == grpc.StatusCode.UNAVAILABLE
        # The Raft leader is this replica, whose gRPC address no barrier has announced yet.
        assert metadata == {rpc.REPLICA_METADATA_KEY: GRPC}
    assert replica.node.proposed == []


def test_writes_on_a_follower_are_unavailable_and_name_the_leaders_grpc_address() -> None:
    replica = follower_of_peer()
    proposed = list(replica.node.proposed)
    submit = pb.SubmitJobRequest(spec=json.dumps(one_task_doc()))
    for method, request in ((replica.scheduler.SubmitJob, submit),
                            (replica.scheduler.CancelJob, pb.CancelJobRequest(job_id="j"))):
        abort, metadata = refused(method, request)
        assert abort.code == grpc.StatusCode.UNAVAILABLE
        assert metadata == {rpc.REPLICA_METADATA_KEY: GRPC, LEADER_METADATA_KEY: PEER_GRPC}
    assert replica.node.proposed == proposed


def test_reads_on_a_follower_are_unavailable_with_the_leader_hint() -> None:
    replica = follower_of_peer()
    abort, metadata = refused(replica.scheduler.GetJob, pb.GetJobRequest(job_id="j"))
    assert abort.code == grpc.StatusCode.UNAVAILABLE
    assert metadata[LEADER_METADATA_KEY] == PEER_GRPC


def test_a_read_whose_leadership_cannot_be_confirmed_is_unavailable(replica: Replica) -> None:
    job_id = replica.submit(one_task_doc()).job_id
    replica.node.confirms = False
    abort, _ = refused(replica.scheduler.GetJob, pb.GetJobRequest(job_id=job_id))
    assert abort.code == grpc.StatusCode.UNAVAILABLE and "confirm" in abort.details


# --- reads --------------------------------------------------------------------------------------


def test_get_job_of_an_unknown_id_is_not_found(replica: Replica) -> None:
    abort, metadata = refused(replica.scheduler.GetJob, pb.GetJobRequest(job_id="nope"))
    assert abort.code == grpc.StatusCode.NOT_FOUND and "nope" in abort.details
    assert metadata == {rpc.REPLICA_METADATA_KEY: GRPC}


def test_get_job_answers_the_job_and_the_index_it_reflects(replica: Replica) -> None:
    job_id = replica.submit(one_task_doc()).job_id
    message = replica.scheduler.GetJob(pb.GetJobRequest(job_id=job_id), FakeContext())
    assert (message.job_id, message.state, message.total_tasks) == (job_id, "PENDING", 1)
    assert message.applied_index == replica.node.applied > 0


def test_the_other_reads_answer_from_the_state(replica: Replica) -> None:
    job_id = replica.submit(one_task_doc()).job_id
    context = FakeContext()
    listed = replica.scheduler.ListJobs(pb.ListJobsRequest(), context)
    assert [j.job_id for j in listed.jobs] == [job_id]
    tasks = replica.scheduler.ListTasks(pb.ListTasksRequest(job_id=job_id), context)
    assert [(t.task_id, t.state) for t in tasks.tasks] == [("t", "RUNNABLE")]
    task = pb.GetTaskHistoryRequest(job_id=job_id, task_id="t")
    assert replica.scheduler.GetTaskHistory(task, context).state == "RUNNABLE"
    explain = pb.ExplainTaskRequest(job_id=job_id, task_id="t")
    assert replica.scheduler.ExplainTask(explain, context).summary == \
        "runnable; no cluster is registered"
    abort, _ = refused(replica.scheduler.ExplainTask,
                       pb.ExplainTaskRequest(job_id=job_id, task_id="ghost"))
    assert abort.code == grpc.StatusCode.NOT_FOUND and "ghost" in abort.details


# --- CancelJob ----------------------------------------------------------------------------------


def test_cancel_job_cuts_the_reason_and_a_second_cancel_changes_nothing(
        replica: Replica) -> None:
    job_id = replica.submit(job_doc([task_doc("a"), task_doc("b", ["a"])])).job_id
    request = pb.CancelJobRequest(job_id=job_id, reason="x" * (limits.MAX_REASON_CHARS + 100))
    first = replica.scheduler.CancelJob(request, FakeContext())
    assert (first.cancelled, first.changed) == (2, True)
    job = replica.node.state.jobs[job_id]
    assert job.state.name == "CANCELLED" and job.reason == "x" * limits.MAX_REASON_CHARS
    second = replica.scheduler.CancelJob(request, FakeContext())
    assert (second.cancelled, second.changed) == (0, False)


def test_cancel_job_of_an_unknown_id_is_not_found(replica: Replica) -> None:
    abort, _ = refused(replica.scheduler.CancelJob, pb.CancelJobRequest(job_id="nope"))
    assert abort.code == grpc.StatusCode.NOT_FOUND and "nope" in abort.details


# --- the large-spec gate ------------------------------------------------------------------------


class Turnstile(threading.BoundedSemaphore):
    """The gate's semaphore, telling when someone asks for a turn."""

    def __init__(self) -> None:
        super().__init__(limits.MAX_CONCURRENT_LARGE_SPECS)
        self.asked = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.asked.set()
        return super().acquire(blocking, timeout)


@pytest.fixture
def held(replica: Replica, monkeypatch: pytest.MonkeyPatch) -> Turnstile:
    """Every large-spec slot of `replica` taken; waits for a turn last GATE_WAIT_S."""
    monkeypatch.setattr(service, "LARGE_SPEC_WAIT_S", GATE_WAIT_S)
    gate = Turnstile()
    for _ in range(limits.MAX_CONCURRENT_LARGE_SPECS):
        assert gate.acquire(blocking=False)
    gate.asked.clear()
    replica.scheduler._large_specs = gate
    return gate


def test_a_large_spec_waits_for_a_slot_then_is_resource_exhausted(
        replica: Replica, held: Turnstile) -> None:
    proposed = list(replica.node.proposed)
    request = pb.SubmitJobRequest(spec=padded(one_task_doc(), limits.LARGE_SPEC_BYTES))
    started_s = time.monotonic()
    abort, _ = refused(replica.scheduler.SubmitJob, request)
    assert time.monotonic() - started_s >= GATE_WAIT_S * 0.9
    assert abort.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(limits.LARGE_SPEC_BYTES) in abort.details
    assert held.asked.is_set() and replica.node.proposed == proposed


def test_a_spec_just_under_the_large_size_is_never_gated(
        replica: Replica, held: Turnstile) -> None:
    request = pb.SubmitJobRequest(spec=padded(one_task_doc(), limits.LARGE_SPEC_BYTES - 1))
    assert replica.scheduler.SubmitJob(request, FakeContext()).created
    assert not held.asked.is_set()


def test_a_waiting_large_spec_is_parsed_once_a_slot_frees(
        replica: Replica, held: Turnstile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "LARGE_SPEC_WAIT_S", THREAD_DEADLINE_S)
    request = pb.SubmitJobRequest(spec=padded(one_task_doc(), limits.LARGE_SPEC_BYTES))
    answers: list[Any] = []

    def submit() -> None:
        try:
            answers.append(replica.scheduler.SubmitJob(request, FakeContext()))
        except Aborted as abort:
            answers.append(abort)

    worker = threading.Thread(target=submit, daemon=True)
    worker.start()
    assert held.asked.wait(THREAD_DEADLINE_S)
    held.release()
    worker.join(THREAD_DEADLINE_S)
    assert not worker.is_alive()
    [answer] = answers
    assert not isinstance(answer, Aborted) and answer.created


def test_the_slot_is_given_back_after_a_large_spec_fails_to_parse(replica: Replica) -> None:
    bad = padded(job_doc([task_doc("t", resources={"cpu": -1})]), limits.LARGE_SPEC_BYTES)
    abort, _ = refused(replica.scheduler.SubmitJob, pb.SubmitJobRequest(spec=bad))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    for _ in range(limits.MAX_CONCURRENT_LARGE_SPECS):
        assert replica.scheduler._large_specs.acquire(blocking=False)


# --- AdminService.ClusterStatus -----------------------------------------------------------------


def test_cluster_status_includes_the_digest_only_when_asked(replica: Replica) -> None:
    replica.submit(one_task_doc())
    plain = replica.admin.ClusterStatus(pb.ClusterStatusRequest(), FakeContext())
    assert plain.state_digest == ""
    audited = replica.admin.ClusterStatus(pb.ClusterStatusRequest(include_digest=True),
                                          FakeContext())
    assert audited.state_digest == snapshot.digest(replica.node.state) != ""
    assert replica.node.digest_requests == [False, True]


def test_cluster_status_names_replicas_leader_and_cluster_heartbeat_ages(
        replica: Replica) -> None:
    register_east(replica)
    replica.clock.advance(2.5)
    status = replica.admin.ClusterStatus(pb.ClusterStatusRequest(), FakeContext())
    assert (status.leader, status.responder, status.term) == (GRPC, GRPC, 3)
    assert [(r.raft_address, r.grpc_address, r.leader) for r in status.replicas] == \
        [(RAFT, GRPC, True), (PEER_RAFT, "", False)]
    [east] = status.clusters
    assert (east.cluster_id, east.status, east.heartbeat_age_ms) == ("east", "READY", 2_500)
    assert status.applied_index == status.state_index == replica.node.applied


def test_cluster_status_off_the_leader_reports_no_heartbeat_age() -> None:
    replica = make_replica()
    replica.node.propose(c.encode(c.ClusterRegister("east", 1, ("linux",), 1000, 64, 0, 0)), 1)
    replica.node.leader = False
    [east] = replica.admin.ClusterStatus(pb.ClusterStatusRequest(), FakeContext()).clusters
    assert east.heartbeat_age_ms == -1


# --- AgentGatewayService ------------------------------------------------------------------------


def report(replica: Replica, *reports: Report) -> list[tuple[int, ReportVerdict]]:
    request = rpc.report_request_to_pb("east", 1, reports,
                                       Observation(2, Resources(4000, 4096, 0)))
    reported = rpc.reported_from_pb(replica.gateway.Report(request, FakeContext()))
    assert reported.term == replica.node.term()
    return [(v.fence, v.verdict) for v in reported.verdicts]


def test_agent_register_heartbeat_report_round_trip(replica: Replica) -> None:
    registered = rpc.registered_from_pb(register_east(replica))
    assert (registered.term, registered.leader, registered.lost, registered.kills) == \
        (3, GRPC, 0, 0)
    job_id = replica.submit(one_task_doc()).job_id
    replica.leader._round()  # places the task
    beat = rpc.beat_to_pb(Beat("east", 1, 1, Resources(4000, 4096, 0), (), 0))
    directives = rpc.directives_from_pb(replica.gateway.Heartbeat(beat, FakeContext()))
    [assignment] = directives.assignments
    assert (assignment.job_id, assignment.task_id, assignment.command) == (job_id, "t", ("true",))
    assert not directives.reregister and directives.term == 3
    fence = assignment.fence
    assert report(replica, Report(ReportKind.STARTED, job_id, "t", fence)) == \
        [(fence, ReportVerdict.ACCEPTED)]
    assert report(replica, Report(ReportKind.FINISHED, job_id, "t", fence, exit_code=0)) == \
        [(fence, ReportVerdict.ACCEPTED)]
    assert replica.node.state.jobs[job_id].state.name == "SUCCEEDED"


def test_an_assignment_carries_the_tasks_grace_checkpoint_and_tenant(replica: Replica) -> None:
    register_east(replica)
    replica.submit(job_doc([task_doc("t", grace_s=2.5, checkpoint=True)], tenant="analytics"))
    replica.submit(job_doc([task_doc("plain")]))
    replica.leader._round()
    beat = rpc.beat_to_pb(Beat("east", 1, 1, Resources(4000, 4096, 0), (), 0))
    directives = rpc.directives_from_pb(replica.gateway.Heartbeat(beat, FakeContext()))
    got = {a.task_id: (a.kill_grace_ms, a.checkpoint, a.tenant) for a in directives.assignments}
    assert got == {"t": (2_500, True, "analytics"), "plain": (0, False, "default")}


def test_a_heartbeat_from_an_unknown_incarnation_is_told_to_register(replica: Replica) -> None:
    register_east(replica)
    beat = rpc.beat_to_pb(Beat("east", 2, 1, None, (), 0))
    assert replica.gateway.Heartbeat(beat, FakeContext()).reregister


def test_a_report_of_an_unknown_kind_is_invalid_argument_naming_the_fence(
        replica: Replica) -> None:
    register_east(replica)
    proposed = list(replica.node.proposed)
    newer_kind: Any = 9  # a kind from a newer agent: an open proto3 enum keeps the number
    request = pb.ReportRequest(cluster_id="east", incarnation=1,
                               reports=[pb.AgentReport(kind=newer_kind, job_id="j", task_id="t",
                                                       fence=4242)])
    abort, _ = refused(replica.gateway.Report, request)
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT and "4242" in abort.details
    assert replica.node.proposed == proposed


def test_agent_calls_before_the_leader_takes_office_are_unavailable() -> None:
    replica = make_replica(in_office=False)
    registration = pb.RegisterRequest(cluster_id="east", incarnation=1)
    beat = pb.HeartbeatRequest(cluster_id="east", incarnation=1, seq=1)
    for method, request in ((replica.gateway.Register, registration),
                            (replica.gateway.Heartbeat, beat),
                            (replica.gateway.Report, pb.ReportRequest(cluster_id="east"))):
        abort, metadata = refused(method, request)
        assert abort.code == grpc.StatusCode.UNAVAILABLE
        assert metadata[rpc.REPLICA_METADATA_KEY] == GRPC
    assert replica.node.state.clusters == {}


# --- stream slots (WatchJob, reflection) -------------------------------------------------------


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:10.0.0.7:51234", "10.0.0.7"),
    ("ipv6:[::1]:51234", "[::1]"),
    ("ipv6:[fe80::1%eth0]:7", "[fe80::1%eth0]"),
    ("unix:/tmp/raftsched.sock", "unix"),
])
def test_peer_host_drops_the_port(peer: str, host: str) -> None:
    assert service.peer_host(peer) == host


def test_stream_slots_are_bounded_per_caller_and_in_all_and_given_back() -> None:
    slots = service.StreamSlots(total=4, per_caller=2, admin_reserve=1)
    assert slots.acquire("a") is None and slots.acquire("a") is None
    refusal = slots.acquire("a")
    assert refusal is not None and "MAX_STREAMS_PER_CALLER" in refusal and "retry later" in refusal
    assert slots.acquire("b") is None
    refusal = slots.acquire("c")
    assert refusal is not None and "MAX_STREAMS=4" in refusal and "ADMIN_STREAM_RESERVE" in refusal
    assert slots.acquire("root", admin=True) is None  # the slot kept for admins
    refusal = slots.acquire("root", admin=True)
    assert refusal is not None and "MAX_STREAMS=4" in refusal and "ADMIN" not in refusal
    slots.release("a")
    slots.release("root")
    assert slots.acquire("c") is None and slots.open_count() == 3


def test_the_stream_caps_leave_most_rpc_workers_to_unary_calls() -> None:
    assert 0 < limits.MAX_STREAMS_PER_CALLER \
        <= limits.MAX_STREAMS - limits.ADMIN_STREAM_RESERVE < limits.MAX_STREAMS
    assert limits.MAX_STREAMS <= limits.MAX_RPC_WORKERS // 4


class PeerContext(FakeContext):
    def __init__(self, peer: str) -> None:
        super().__init__()
        self._peer = peer

    def peer(self) -> str:
        return self._peer


def test_a_watch_ends_at_the_maximum_stream_age_with_the_max_age_trailer(
        replica: Replica) -> None:
    job_id = replica.submit(one_task_doc()).job_id
    replica.scheduler.ctx.max_stream_age_s = 60.0
    context = PeerContext("ipv4:10.0.0.9:1")
    stream = replica.scheduler.WatchJob(pb.WatchJobRequest(job_id=job_id), context)
    assert next(stream).job_id == job_id
    replica.clock.advance(61.0)
    assert next(stream, None) is None  # ended, cleanly, with the job not terminal
    assert context.trailing == ((rpc.STREAM_END_KEY, rpc.STREAM_END_MAX_AGE),)
    assert replica.scheduler.ctx.streams.open_count() == 0


def test_a_watch_past_the_cap_is_resource_exhausted_and_an_ended_one_frees_its_slot(
        replica: Replica) -> None:
    job_id = replica.submit(one_task_doc()).job_id
    request = pb.WatchJobRequest(job_id=job_id)

    def watch(port: int) -> Any:
        stream = replica.scheduler.WatchJob(request, PeerContext(f"ipv4:10.0.0.9:{port}"))
        assert next(stream).job_id == job_id  # open: it holds a slot
        return stream

    streams = [watch(port) for port in range(limits.MAX_STREAMS_PER_CALLER)]
    with pytest.raises(Aborted) as caught:
        watch(9999)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "MAX_STREAMS_PER_CALLER" in caught.value.details
    streams.pop().close()  # the client went away (gRPC closes the generator)
    streams.append(watch(9999))
    streams.pop().close()
    with pytest.raises(Aborted) as caught:  # it takes the freed slot, then fails
        next(replica.scheduler.WatchJob(pb.WatchJobRequest(job_id="no-such-job"),
                                        PeerContext("ipv4:10.0.0.9:1")))
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    streams.append(watch(10_000))  # the failed watch gave its slot back
    for stream in streams:
        stream.close()
    assert replica.scheduler.ctx.streams.open_count() == 0
