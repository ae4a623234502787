"""SubmitJob and SubmitJobs in a deployment of several groups (issue 27): the job id carries a
shard of this group; a submit whose idempotency key's shard another group holds is refused
before anything is proposed, naming that group; with one group nothing is refused."""

from __future__ import annotations

import json

import grpc
import pytest

from raftsched import limits, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.spec.job import parse_spec_text
from raftsched.spec.wire import pack_wire
from raftsched.state import commands as c
from raftsched.state import fsm
from raftsched.state.model import GroupIdentity
from tests.support.fsmkit import job_doc, task_doc
from tests.unit.replica.test_service import FakeContext, Replica, make_replica, refused

SPEC = job_doc([task_doc("a")], tenant="alpha")
GROUPS = 3


def _grouped(group: int) -> Replica:
    replica = make_replica()
    fsm.apply(replica.node.state, c.encode(c.GroupSet(group, GROUPS, limits.VIRTUAL_SHARDS, 1)))
    return replica


def _key_of_group(group: int) -> str:
    return next(f"k{n}" for n in range(1000)
                if topology.group_of_key("alpha", f"k{n}", GROUPS) == group)


def test_a_keyed_submit_of_this_group_is_taken_and_its_id_names_the_shard() -> None:
    replica = _grouped(1)
    key = _key_of_group(1)
    reply = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec=json.dumps(SPEC), idempotency_key=key), FakeContext())
    assert reply.created
    assert topology.shard_of_job_id(reply.job_id) == topology.shard_of_key("alpha", key)


def test_a_keyed_submit_of_another_group_is_refused_naming_it_and_nothing_is_proposed() -> None:
    replica = _grouped(1)
    key = _key_of_group(2)
    proposed = list(replica.node.proposed)
    abort, _ = refused(replica.scheduler.SubmitJob,
                       pb.SubmitJobRequest(spec=json.dumps(SPEC), idempotency_key=key))
    assert abort.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "is group 2's (shard map epoch 0); this is group 1" in abort.details
    assert replica.node.proposed == proposed and replica.node.state.jobs == {}


def test_a_submit_without_a_key_takes_a_shard_of_this_group() -> None:
    replica = _grouped(2)
    for _ in range(20):
        reply = replica.scheduler.SubmitJob(pb.SubmitJobRequest(spec=json.dumps(SPEC)),
                                            FakeContext())
        assert topology.group_of_job_id(reply.job_id, GROUPS) == 2


def test_a_batch_answers_each_job_and_refuses_only_those_of_other_groups() -> None:
    replica = _grouped(0)
    wire = pack_wire(parse_spec_text(json.dumps(SPEC)))
    keys = [_key_of_group(0), _key_of_group(1)]
    reply = replica.scheduler.SubmitJobs(pb.SubmitJobsRequest(jobs=[
        pb.SubmitJobsItem(spec_wire=wire, idempotency_key=key) for key in keys]), FakeContext())
    assert reply.answers[0].job_id and not reply.answers[0].code
    assert reply.answers[1].code == "FAILED_PRECONDITION" and not reply.answers[1].job_id
    assert "is group 1's" in reply.answers[1].message
    assert len(replica.node.state.jobs) == 1


@pytest.mark.parametrize("key", ["", "any-key"])
def test_with_one_group_every_submit_is_taken(key: str) -> None:
    replica = make_replica()
    reply = replica.scheduler.SubmitJob(
        pb.SubmitJobRequest(spec=json.dumps(SPEC), idempotency_key=key), FakeContext())
    assert reply.created and topology.shard_of_job_id(reply.job_id) is not None


TOPOLOGY = (("10.0.0.1:7001", "10.0.0.2:7001"), ("10.0.1.1:7001",), ("10.0.2.1:7001",))


def _members(answer: pb.Topology) -> list[list[str]]:
    return [list(member.servers) for member in answer.members]


def test_topology_names_the_group_its_own_current_members_and_the_others_as_told() -> None:
    replica = make_replica()
    fsm.apply(replica.node.state, c.encode(c.GroupSet(1, GROUPS, limits.VIRTUAL_SHARDS, 1,
                                                      TOPOLOGY)))
    answer = replica.scheduler.GetTopology(pb.GetTopologyRequest(), FakeContext())
    assert (answer.group, answer.groups, answer.shards) == (1, 3, limits.VIRTUAL_SHARDS)
    assert answer.recorded
    leader = replica.node.state.replica_addresses[replica.node.leader_address()]
    assert leader not in TOPOLOGY[1]  # a member that led: added to what its group was told
    assert _members(answer) == [list(TOPOLOGY[0]), [*TOPOLOGY[1], leader], list(TOPOLOGY[2])]
    assert [member.group for member in answer.members] == [0, 1, 2]


def test_topology_of_a_group_never_told_the_others_lists_no_group() -> None:
    answer = _grouped(2).scheduler.GetTopology(pb.GetTopologyRequest(), FakeContext())
    assert (answer.group, answer.groups, list(answer.members)) == (2, 3, [])


def test_topology_of_one_group_lists_its_members() -> None:
    replica = make_replica()
    answer = replica.scheduler.GetTopology(pb.GetTopologyRequest(), FakeContext())
    assert (answer.group, answer.groups, answer.recorded) == (0, 1, True)
    assert _members(answer) == [[replica.node.state.replica_addresses[m]
                                 for m in replica.node.members()
                                 if m in replica.node.state.replica_addresses]]


def test_before_its_log_records_the_group_a_replica_answers_from_its_options_and_takes_no_submit(
        ) -> None:
    configured = GroupIdentity(2, GROUPS, limits.VIRTUAL_SHARDS, TOPOLOGY)
    replica = make_replica(configured=configured)
    answer = replica.scheduler.GetTopology(pb.GetTopologyRequest(), FakeContext())
    assert (answer.group, answer.groups, answer.recorded) == (2, 3, False)
    assert _members(answer)[:2] == [list(TOPOLOGY[0]), list(TOPOLOGY[1])]
    proposed = list(replica.node.proposed)
    abort, _ = refused(replica.scheduler.SubmitJob, pb.SubmitJobRequest(spec=json.dumps(SPEC)))
    assert abort.code == grpc.StatusCode.UNAVAILABLE
    assert "group 2 of 3, which its log has not recorded yet" in abort.details
    assert replica.node.proposed == proposed and replica.node.state.jobs == {}
    fsm.apply(replica.node.state, c.encode(c.GroupSet(2, GROUPS, limits.VIRTUAL_SHARDS, 1)))
    reply = replica.scheduler.SubmitJob(pb.SubmitJobRequest(spec=json.dumps(SPEC)),
                                        FakeContext())
    assert topology.group_of_job_id(reply.job_id, GROUPS) == 2
