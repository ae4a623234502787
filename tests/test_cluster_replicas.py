"""Integration: real replica processes on 127.0.0.1 (no agents needed for these)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftsched.errors import Code, RaftschedError
from tests.cluster import LocalCluster, plus_one, wait_for

pytestmark = [pytest.mark.integration]

JOB = """
name: integration
tasks:
  - {id: a, command: [sh, -c, "true"], requires: [nowhere]}
  - {id: b, command: [sh, -c, "true"], depends_on: [a]}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path)
    try:
        yield local.start()
    except BaseException:
        print(local.logs())
        raise
    finally:
        local.close()


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
    new = wait_for(lambda: plus_one(_other_leader(cluster, old)), 30, "a new leader") - 1
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
    wait_for(caught_up, 30, "the new replica to catch up")
    for job_id in (before, after):
        assert client.get_job(job_id).job_id == job_id
    members = list(client.remove_replica(raft).members)
    assert raft not in members and len(members) == 3
    proc.kill()
    assert client.submit(JOB).created
