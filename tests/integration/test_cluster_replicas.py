"""Integration: real replica processes on 127.0.0.1 (no agents needed for these)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft.applied_log import read_applied_log
from raftsched.state import fsm, snapshot
from raftsched.state.model import State
from tests.support.cluster import LocalCluster, plus_one, running
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

NEW_LEADER_TIMEOUT_S = 60.0
"""Elections take a second or two; a busy machine (two clusters' replicas on two cores) more."""
JOB = """
name: integration
allow_unschedulable: true
tasks:
  - {id: a, command: [sh, -c, "true"], requires: [nowhere]}
  - {id: b, command: [sh, -c, "true"], depends_on: [a]}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        yield local


def test_writes_to_a_follower_are_redirected_and_reads_are_current(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    follower = cluster.grpc[(leader + 1) % 3]
    client = cluster.client()
    client._preferred = follower  # start at the follower on purpose
    submitted = client.submit(JOB)
    assert submitted.created
    job = client.get_job(submitted.job_id)
    assert job.state == "PENDING" and dict(job.tasks) == {"RUNNABLE": 1, "PENDING": 1}
    again = cluster.client().submit(JOB, idempotency_key=submitted.idempotency_key)
    assert (again.job_id, again.created) == (submitted.job_id, False)


def test_bad_spec_and_unknown_job_get_precise_errors(cluster: LocalCluster) -> None:
    client = cluster.client()
    with pytest.raises(RaftschedError) as missing:
        client.get_job("no-such-job")
    assert missing.value.code == Code.NOT_FOUND
    with pytest.raises(RaftschedError) as conflict:
        key = client.submit(JOB).idempotency_key
        client.submit(JOB.replace("integration", "other"), idempotency_key=key)
    assert conflict.value.code == Code.ALREADY_EXISTS


def test_acknowledged_jobs_survive_kill_9_of_every_replica(cluster: LocalCluster) -> None:
    client = cluster.client()
    acked = [client.submit(JOB).job_id for _ in range(20)]
    for proc in cluster.replicas:
        proc.signal(signal.SIGKILL)
    for proc in cluster.replicas:
        proc.kill()
        proc.start()
    cluster.wait_leader()
    fresh = cluster.client()
    for job_id in acked:
        assert fresh.get_job(job_id).job_id == job_id


def test_leader_kill_9_then_a_new_leader_takes_writes(cluster: LocalCluster) -> None:
    client = cluster.client()
    before = client.submit(JOB).job_id
    old = cluster.wait_leader()
    cluster.replicas[old].kill()
    new = wait_until(lambda: plus_one(_other_leader(cluster, old)), "a new leader",
                     NEW_LEADER_TIMEOUT_S) - 1
    assert new != old
    after = client.submit(JOB).job_id
    assert client.get_job(before).job_id == before and client.get_job(after).job_id == after


def _other_leader(cluster: LocalCluster, old: int) -> int | None:
    index = cluster.leader_index()
    return None if index is None or index == old else index


def test_add_and_remove_a_replica_through_the_admin_api(cluster: LocalCluster) -> None:
    client = cluster.client()
    before = client.submit(JOB).job_id
    proc, raft, grpc = cluster.spawn_joiner()
    members = list(client.add_replica(raft, grpc).members)
    assert raft in members and len(members) == 4
    after = client.submit(JOB).job_id

    def caught_up() -> bool:
        status = cluster.client(retry_budget_s=1).cluster_status(grpc)
        leader = client.cluster_status()
        return status.applied_index >= leader.commit_index - 2 and bool(status.leader)
    wait_until(caught_up, "the new replica to catch up", 30)
    for job_id in (before, after):
        assert client.get_job(job_id).job_id == job_id
    members = list(client.remove_replica(raft).members)
    assert raft not in members and len(members) == 3
    proc.kill()
    assert client.submit(JOB).created


def test_membership_cannot_be_talked_into_losing_its_majority(cluster: LocalCluster) -> None:
    """The probe that left a cluster without a leader for good: AddReplica of unreachable and
    malformed addresses. Every one is refused, the members stay three, writes go on."""
    client = cluster.client()
    before = sorted(r.raft_address for r in client.cluster_status().replicas)
    for bad in ("../../etc:1", "\x00:1", "h" * 300 + ":1", "host:0", "host:99999", "a b:1",
                ":1", "127.0.0.1", "host:\u0661"):
        with pytest.raises(RaftschedError) as refused:
            client.add_replica(bad)
        assert refused.value.code == Code.INVALID_ARGUMENT, (bad, refused.value)
    for _ in range(3):
        with socket.create_server(("127.0.0.1", 0)) as closed:
            nobody = f"127.0.0.1:{closed.getsockname()[1]}"
        with pytest.raises(RaftschedError) as refused:
            client.add_replica(nobody)
        assert refused.value.code == Code.FAILED_PRECONDITION
        assert "nothing accepted connections" in str(refused.value)
    status = client.cluster_status()
    assert sorted(r.raft_address for r in status.replicas) == before and status.leader
    assert client.submit(JOB).created


def test_a_dead_replica_is_replaced_and_a_live_one_is_not_removed_instead(
        cluster: LocalCluster) -> None:
    """README, "Replacing a dead replica": remove the dead member (a live majority remains),
    then add a fresh replica started with the current members as its peers. Removing a live
    member instead would leave one live replica of two: refused."""
    client = cluster.client()
    before = client.submit(JOB).job_id
    leader = cluster.wait_leader()
    dead, live = (i for i in range(3) if i != leader)
    cluster.replicas[dead].kill()
    with pytest.raises(RaftschedError) as refused:
        client.remove_replica(cluster.raft[live])
    assert refused.value.code == Code.FAILED_PRECONDITION and "majority" in str(refused.value)
    with pytest.raises(RaftschedError) as refused:
        client.add_replica("127.0.0.1:1")  # any add waits until the dead member is removed
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert cluster.raft[dead] in str(refused.value)
    members = list(client.remove_replica(cluster.raft[dead]).members)
    assert sorted(members) == sorted(cluster.raft[i] for i in (leader, live))
    _joiner, raft, grpc = cluster.spawn_joiner()
    members = list(client.add_replica(raft, grpc).members)
    assert raft in members and len(members) == 3
    after = client.submit(JOB).job_id
    wait_until(lambda: cluster.client(retry_budget_s=1).cluster_status(grpc).applied_index
               >= client.cluster_status().commit_index - 2, "the new replica to catch up", 30)
    for job_id in (before, after):
        assert client.get_job(job_id).job_id == job_id


def test_applied_logs_replay_to_every_replicas_digest_also_after_kill_9(
        cluster: LocalCluster) -> None:
    """State machine safety, observed from outside: the entries each replica applied (its
    --applied-log) agree index by index, and replaying them through the pure FSM gives the
    state digest the replica reports, also after a kill -9 and restart re-applied them."""
    client = cluster.client()
    for _ in range(3):
        client.submit(JOB)
    victim = (cluster.wait_leader() + 1) % 3
    # A follower applies what the leader acknowledged a little later (on a busy machine, much
    # later): only what it applied before the kill can be re-applied after the restart.
    wait_until(lambda: applied_jobs(cluster, victim) >= 3, "the victim to apply 3 jobs", 30)
    cluster.replicas[victim].kill()
    client.submit(JOB)
    cluster.replicas[victim].start()
    target = client.submit(JOB).job_id

    def converged() -> list[Any] | None:
        statuses = [cluster.client(retry_budget_s=1).cluster_status(g, include_digest=True)
                    for g in cluster.grpc]
        indices = {s.state_index for s in statuses}
        if len(indices) != 1:
            return None
        return statuses

    statuses: list[Any] = wait_until(converged, "all replicas at one applied index", 30)
    logs = [read_applied_log(str(cluster.applied_log(i))) for i in range(3)]
    assert logs[victim].reapplied > 0, "the restarted replica did not re-apply its journal"
    for i, log in enumerate(logs):
        assert not log.conflicts, f"replica {i} applied two different entries at one index"
        # pysyncobj's own entries are recorded empty: no replica's log has a gap.
        assert sorted(log.entries) == list(range(1, max(log.entries) + 1)), f"replica {i}"
        for index, entry in log.entries.items():
            for other in logs:
                assert other.entries.get(index, entry) == entry, f"entry {index} differs"
    for i, status in enumerate(statuses):
        state = State()
        for index in sorted(logs[i].entries):
            if index <= status.state_index and logs[i].entries[index]:
                fsm.apply(state, logs[i].entries[index])
        assert target in state.jobs
        assert snapshot.digest(state) == status.state_digest


def applied_jobs(cluster: LocalCluster, replica: int) -> int:
    """The entries replica `replica` has applied to its state machine, by its --applied-log
    (pysyncobj's own entries are recorded empty)."""
    entries = read_applied_log(str(cluster.applied_log(replica))).entries.values()
    return sum(1 for entry in entries if entry)
