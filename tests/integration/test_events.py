"""Integration: the public event stream (WatchEvents, Client.watch_events, `raftsched events`)
on real replicas: list then watch from the list's applied_index loses nothing, a resume across
a leader kill -9, "too old" past a small retention window (and on a restarted replica: another
one serves), a tenant's token scoped, `raftsched events --until-job-ends`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched.client.client import Client
from raftsched.errors import Code, RaftschedError
from tests.support.cluster import LocalCluster, code_of, running
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

RETENTION = 300
"""--event-retention of the replicas here: small, so that the window moves within a test."""
MAX_AGE_S = 3
"""--max-stream-age-s of the replicas here: streams end, and are resumed, within a test."""
CHAIN = ("name: chain\ntenant: {tenant}\ntasks:\n"
         "  - {{id: a, command: [mock, sleep_ms={ms}]}}\n"
         "  - {{id: b, command: [mock, sleep_ms={ms}], depends_on: [a]}}\n"
         "  - {{id: c, command: [mock, sleep_ms={ms}], depends_on: [b]}}\n")
EVENT_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running(tmp_path_factory.mktemp("events"),
                 replica_flags=["--event-retention", str(RETENTION),
                                "--max-stream-age-s", str(MAX_AGE_S)]) as local:
        local.add_agent("east", cpu=8)
        local.wait_clusters_ready("east")
        yield local


def _until_job_ends(events: Iterator[Any], job_id: str, got: list[Any]) -> None:
    for event in events:
        if event.kind == "progress":  # where a stream starts or ends: no change
            continue
        got.append(event)
        if event.kind == "job" and event.job_id == job_id and \
                event.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return


def _collected(events: Iterator[Any], job_id: str) -> list[Any]:
    """Every event until the job's terminal one, read on a thread (bounded by a deadline),
    progress events left out."""
    got: list[Any] = []
    reader = threading.Thread(target=_until_job_ends, args=(events, job_id, got), daemon=True)
    reader.start()
    reader.join(EVENT_TIMEOUT_S)
    assert not reader.is_alive(), f"no terminal event of {job_id} in {EVENT_TIMEOUT_S} s: {got}"
    return got


def _once(events: list[Any]) -> list[Any]:
    """Each event once (a reconnect may repeat the events of one entry: at least once)."""
    return list({(e.index, e.seq): e for e in events}.values())


def test_list_then_watch_from_its_applied_index_sees_every_change_in_order(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    listed = client.list_jobs()
    assert listed.applied_index > 0
    job_id = client.submit(CHAIN.format(tenant="acme", ms=50)).job_id
    assert client.list_tasks(job_id).applied_index > listed.applied_index - 1
    got = _collected(client.watch_events(listed.applied_index, job_id=job_id), job_id)
    keys = [(e.index, e.seq) for e in got]
    assert keys == sorted(keys)
    got = _once(got)
    assert all(e.index > listed.applied_index for e in got)
    tasks = {t: [e.state for e in got if e.kind == "task" and e.task_id == t] for t in "abc"}
    for states in tasks.values():
        assert states[-1] == "SUCCEEDED" and "RUNNING" in states, tasks
    assert [e.state for e in got if e.kind == "job"] == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert got[-1].kind == "job" and all(e.tenant == "acme" for e in got)


def test_a_tenant_token_sees_only_its_tenant(cluster: LocalCluster) -> None:
    admin = cluster.client()
    alpha = cluster.client(token=str(admin.create_token("alpha", "user", "t").token))
    beta = cluster.client(token=str(admin.create_token("beta", "user", "t").token),
                          retry_budget_s=5)
    start = admin.list_jobs().applied_index
    alpha_job = alpha.submit(CHAIN.format(tenant="alpha", ms=10)).job_id
    assert code_of(lambda: next(iter(beta.watch_events(start, job_id=alpha_job)))) \
        == Code.NOT_FOUND
    assert code_of(lambda: next(iter(beta.watch_events(start, tenant="alpha")))) \
        == Code.PERMISSION_DENIED
    assert code_of(lambda: next(iter(beta.watch_events(start, clusters=True)))) \
        == Code.PERMISSION_DENIED
    beta_job = beta.submit(CHAIN.format(tenant="beta", ms=10)).job_id
    seen = _collected(beta.watch_events(start), beta_job)
    assert {e.tenant for e in seen} == {"beta"}, {(e.tenant, e.job_id) for e in seen}
    assert alpha_job not in {e.job_id for e in seen}


def test_a_resume_from_before_the_window_is_too_old(cluster: LocalCluster) -> None:
    client = cluster.client()
    many = "name: many\ntasks:\n" + "".join(
        f"  - {{id: t{i}, command: [mock]}}\n" for i in range(RETENTION // 3))
    for _ in range(3):  # each runs every task: several events each, past the window
        job_id = client.submit(many).job_id
        wait_until(lambda j=job_id: client.get_job(j).state == "SUCCEEDED" or None,
                   "the job to succeed", EVENT_TIMEOUT_S)
    with pytest.raises(RaftschedError) as raised:
        next(iter(client.watch_events(1)))
    assert raised.value.code == Code.FAILED_PRECONDITION
    assert "list again" in raised.value.message and "applied_index" in raised.value.message
    result = cluster.cli("events", "--from", "1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "list again" in result.stderr
    result = cluster.cli("events", "--from", "1", "--json")
    assert result.returncode == 2 and json.loads(result.stdout)["error"]["code"] \
        == "FAILED_PRECONDITION"


def test_a_resume_survives_a_leader_kill(tmp_path: Path) -> None:
    with running(tmp_path) as local:
        local.add_agent("east", cpu=8)
        local.wait_clusters_ready("east")
        leader = local.wait_leader()
        # The leader first: the stream is served by the replica that is killed.
        servers = [local.grpc[leader]] + [a for a in local.grpc if a != local.grpc[leader]]
        client = Client(servers, tls_files=local.user_tls, token=local.admin_token,
                        retry_budget_s=60)
        local.clients.append(client)
        start = client.list_jobs().applied_index
        job_id = client.submit(CHAIN.format(tenant="acme", ms=3000)).job_id
        events = client.watch_events(start, job_id=job_id)
        got: list[Any] = []
        for event in events:  # until task a runs: the job is mid-way
            if event.kind != "progress":
                got.append(event)
            if event.kind == "task" and event.task_id == "a" and event.state == "RUNNING":
                break
        local.replicas[leader].kill()
        got += _collected(events, job_id)
        succeeded = {e.task_id for e in got if e.kind == "task" and e.state == "SUCCEEDED"}
        assert succeeded == {"a", "b", "c"}, [(e.index, e.kind, e.task_id, e.state) for e in got]
        firsts = list(dict.fromkeys((e.index, e.seq) for e in got))
        assert firsts == sorted(firsts)  # a repeat after a reconnect is allowed, a jump back not
        survivor = next(i for i, proc in enumerate(local.replicas) if proc.alive())
        with Client([local.grpc[survivor]], tls_files=local.user_tls,
                    token=local.admin_token) as reference:
            expected = _collected(reference.watch_events(start, job_id=job_id), job_id)
        assert {_key(e) for e in got} == {_key(e) for e in expected}


def test_a_resume_too_old_on_a_restarted_replica_goes_on_from_another(tmp_path: Path) -> None:
    """A replica restarted after a snapshot keeps events only from that snapshot on; a client
    pointed at it first, resuming from an older index, is told "too old" there and goes on
    from a replica that keeps them: the same events as a reference read from that one."""
    with running(tmp_path, replica_flags=["--snapshot-entries", "20"]) as local:
        local.add_agent("east", cpu=8)
        local.wait_clusters_ready("east")
        admin = local.client()
        start = admin.list_jobs().applied_index
        job_id = admin.submit(CHAIN.format(tenant="acme", ms=10)).job_id
        wait_until(lambda: admin.get_job(job_id).state == "SUCCEEDED" or None, "the job to succeed",
                   EVENT_TIMEOUT_S)
        # Snapshots every 20 entries (ticks and heartbeats make entries): three times as many.
        wait_until(lambda: admin.list_jobs().applied_index > start + 60 or None,
                   "60 more entries applied", EVENT_TIMEOUT_S)
        victim = (local.wait_leader() + 1) % 3
        local.replicas[victim].kill()
        local.replicas[victim].start()
        alone = Client([local.grpc[victim]], tls_files=local.user_tls, token=local.admin_token,
                       retry_budget_s=60)
        local.clients.append(alone)
        assert code_of(lambda: next(iter(alone.watch_events(start, job_id=job_id)))) \
            == Code.FAILED_PRECONDITION  # the scenario: the restarted replica lost its window
        others = [a for i, a in enumerate(local.grpc) if i != victim]
        client = Client([local.grpc[victim], *others], tls_files=local.user_tls,
                        token=local.admin_token)
        local.clients.append(client)
        got = _collected(client.watch_events(start, job_id=job_id), job_id)
        with Client(others[:1], tls_files=local.user_tls, token=local.admin_token) as reference:
            expected = _collected(reference.watch_events(start, job_id=job_id), job_id)
        assert [_key(e) for e in got] == [_key(e) for e in expected]
        assert {e.task_id for e in got if e.kind == "task" and e.state == "SUCCEEDED"} \
            == {"a", "b", "c"}


def _key(event: Any) -> tuple[Any, ...]:
    return (event.index, event.seq, event.kind, event.task_id, event.state, event.fence)


def test_the_cli_follows_across_stream_ends_in_json_lines_until_interrupted(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    start = client.list_jobs().applied_index
    job_id = client.submit(CHAIN.format(tenant="acme", ms=1500)).job_id  # longer than MAX_AGE_S
    assert cluster.user_tls is not None and cluster.admin_token is not None
    argv = [sys.executable, "-m", "raftsched", "events", "--job", job_id, "--from", str(start),
            "--json", "--servers", ",".join(cluster.grpc), "--tls-ca", str(cluster.user_tls.ca),
            "--tls-cert", str(cluster.user_tls.cert), "--tls-key", str(cluster.user_tls.key),
            "--token", cluster.admin_token]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED_")}
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        lines = _collected(_json_lines(process), job_id)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=EVENT_TIMEOUT_S) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    succeeded = [e.task_id for e in lines if e.kind == "task" and e.state == "SUCCEEDED"]
    assert sorted(set(succeeded)) == ["a", "b", "c"], [vars(e) for e in lines]


def test_the_cli_until_job_ends_exits_0_after_the_jobs_last_event(cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit(CHAIN.format(tenant="acme", ms=1500)).job_id  # outlasts the start
    result = cluster.cli("events", "--job", job_id, "--until-job-ends", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert (lines[-1]["kind"], lines[-1]["job_id"], lines[-1]["state"]) \
        == ("job", job_id, "SUCCEEDED"), lines
    again = cluster.cli("events", "--job", job_id, "--until-job-ends")  # ended already: at once
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr


def test_a_stream_from_now_is_resumed_after_each_max_age_end(cluster: LocalCluster) -> None:
    """The stream is open (its first, "progress" event came) before the job is submitted, and
    the job runs longer than MAX_AGE_S: the replica ends the stream for its age at least once
    meanwhile, and the client resumes it without losing an event or repeating one (the
    replica's last "progress" event says where it ended)."""
    client = cluster.client()
    ended_before = _age_ends(cluster)
    events = client.watch_events()
    first = next(events)
    assert first.kind == "progress" and first.index > 0
    job_id = client.submit(CHAIN.format(tenant="acme", ms=1500)).job_id
    got = _collected(events, job_id)
    assert _age_ends(cluster) > ended_before
    keys = [(e.index, e.seq) for e in got if e.kind != "progress"]
    assert keys == sorted(set(keys)), keys  # resumed where it ended: no event twice
    assert all(e.index > first.index for e in got)
    tasks = {t: [e.state for e in got if e.kind == "task" and e.task_id == t] for t in "abc"}
    assert all(states[-1] == "SUCCEEDED" and "RUNNING" in states for states in tasks.values()), \
        tasks
    assert [e.state for e in got if e.kind == "job"] == ["PENDING", "RUNNING", "SUCCEEDED"]


def _age_ends(cluster: LocalCluster) -> int:
    return sum((cluster.root / "logs" / f"r{i}.log").read_text().count("stream_ended_for_age")
               for i in range(len(cluster.replicas)))


class _Line:
    def __init__(self, document: dict[str, Any]) -> None:
        self.__dict__.update(document)


def _json_lines(process: subprocess.Popen[str]) -> Iterator[Any]:
    assert process.stdout is not None
    for line in process.stdout:
        document = json.loads(line)
        assert set(document) == {"index", "seq", "kind", "job_id", "tenant", "task_id", "state",
                                 "fence", "attempt", "cluster_id", "reason", "at_ms"}, document
        yield _Line(document)
