"""Integration: replicas and agents as real processes on 127.0.0.1; jobs run end to end."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from raftsched import limits, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import Code, RaftschedError
from tests.support.cluster import LocalCluster, plus_one, running, task_user_root, with_token
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

DAG = """
name: across-clusters
tasks:
  - {id: prep, command: [mock, sleep_ms=50]}
  - {id: gpu-train, command: [mock, sleep_ms=100], requires: [gpu], depends_on: [prep]}
  - {id: pinned, command: [mock, sleep_ms=100], cluster: east, depends_on: [prep]}
  - {id: flaky, command: [mock, fail_attempts=1], depends_on: [prep],
     retry: {max_attempts: 3, backoff_s: 0.1}}
  - {id: join, command: [mock], depends_on: [gpu-train, pinned, flaky]}
"""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    # Not tmp_path (below a 0700 dir): the subprocess agent's task account must pass through.
    with task_user_root("raftsched-agents-") as root, \
            running(root, replica_flags=["--suspect-after-s", "1", "--lost-after-s", "3"]) as local:
        local.add_agent("east", capabilities="linux")
        local.add_agent("west", capabilities="linux,gpu", gpu=1)
        local.wait_clusters_ready("east", "west")
        yield local


def wait_state(cluster: LocalCluster, job_id: str, timeout_s: float = 60) -> str:
    client = cluster.client()
    terminal = ("SUCCEEDED", "FAILED", "CANCELLED")
    state: str = wait_until(lambda: _terminal(client.get_job(job_id).state, terminal),
                            f"job {job_id} to finish", timeout_s)
    return state


def _terminal(state: str, terminal: tuple[str, ...]) -> str | None:
    return state if state in terminal else None


def assert_one_accepted_completion_each(cluster: LocalCluster, job_id: str) -> dict[str, list]:
    client = cluster.client()
    histories = {}
    for task in client.list_tasks(job_id).tasks:
        history = client.task_history(job_id, task.task_id)
        fences = [a.fence for a in history.attempts]
        assert fences == sorted(set(fences)), f"{task.task_id}: fences {fences} not increasing"
        succeeded = [a for a in history.attempts if a.state == "SUCCEEDED"]
        assert len(succeeded) <= 1, f"{task.task_id}: two accepted completions"
        assert history.attempts[-1].state in ("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED")
        histories[task.task_id] = list(history.attempts)
    return histories


def test_dag_runs_across_two_agents_honouring_capabilities_and_pins(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit(DAG).job_id
    assert wait_state(cluster, job_id) == "SUCCEEDED"
    attempts = assert_one_accepted_completion_each(cluster, job_id)
    assert attempts["gpu-train"][-1].cluster == "west"
    assert attempts["pinned"][-1].cluster == "east"
    assert [a.state for a in attempts["flaky"]] == ["FAILED", "SUCCEEDED"]
    assert attempts["flaky"][0].fence < attempts["flaky"][1].fence


def test_leader_kill_9_mid_job_completes_with_one_completion_per_task(
        cluster: LocalCluster) -> None:
    client = cluster.client(retry_budget_s=60)
    wide = "name: wide\ntasks:\n" + "".join(
        f"  - {{id: t{i}, command: [mock, sleep_ms=300], resources: {{cpu: 0.5}}}}\n"
        for i in range(40))
    acked = [client.submit(wide).job_id for _ in range(3)]
    old = cluster.wait_leader()
    wait_until(lambda: client.get_job(acked[0]).state == "RUNNING", "the job to start", 30)
    cluster.replicas[old].kill()
    wait_until(lambda: plus_one(_other(cluster.leader_index(), old)), "a new leader", 30)
    for job_id in acked:
        assert wait_state(cluster, job_id, timeout_s=120) == "SUCCEEDED"
        assert_one_accepted_completion_each(cluster, job_id)


def _other(index: int | None, old: int) -> int | None:
    return None if index is None or index == old else index


def test_agent_restart_mid_task_reports_the_result_once(cluster: LocalCluster) -> None:
    cluster.add_agent("solo", capabilities="linux", executor="subprocess")
    cluster.wait_clusters_ready("solo")
    client = cluster.client()
    job_id = client.submit("name: restart\ntasks:\n  - {id: slow, command: [sh, -c, 'sleep 3'], "
                           "cluster: solo}\n").job_id
    wait_until(lambda: _running_on(client, job_id), "the task to run on solo", 30)
    cluster.agents["solo"].kill()  # kill -9 the agent only: the task's wrapper lives on
    cluster.agents["solo"].start()  # same data dir: it re-adopts the attempt
    assert wait_state(cluster, job_id) == "SUCCEEDED"
    attempts = assert_one_accepted_completion_each(cluster, job_id)["slow"]
    assert [a.state for a in attempts] == ["SUCCEEDED"]
    history = client.task_history(job_id, "slow")
    assert [n.kind for n in history.notes if n.report == "FINISHED"] == []


def test_lost_cluster_replaces_attempt_and_rejects_the_stale_result(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit("name: lost\ntasks:\n  - {id: t, command: [mock, sleep_ms=4000]}\n"
                           ).job_id
    first = wait_until(lambda: _running_on(client, job_id), "the task to start", 30)
    cluster.agents[first].signal(signal.SIGSTOP)  # silent beyond lost_after, not dead
    try:
        second = wait_until(lambda: _running_on(client, job_id, not_on=first),
                            "a replacement attempt elsewhere", 30)
        assert second != first
    finally:
        cluster.agents[first].signal(signal.SIGCONT)
    assert wait_state(cluster, job_id) == "SUCCEEDED"
    history = client.task_history(job_id, "t")
    states = [(a.cluster, a.state) for a in history.attempts]
    assert states[0] == (first, "LOST") and states[-1] == (second, "SUCCEEDED")
    time.sleep(0)  # the stale attempt's fate is checked through the notes below
    late = wait_until(lambda: [n for n in client.task_history(job_id, "t").notes] or None,
                      "the stale attempt's report to be recorded as late", 30)
    assert all(n.fence == history.attempts[0].fence for n in late)


def _running_on(client: object, job_id: str, not_on: str | None = None) -> str | None:
    tasks = client.list_tasks(job_id).tasks  # type: ignore[attr-defined]
    task = tasks[0]
    if task.state == "RUNNING" and task.cluster and task.cluster != not_on:
        return str(task.cluster)
    return None


# --- server streams cannot starve agents -------------------------------------------------------

UNPLACEABLE = ("name: unplaceable\nallow_unschedulable: true\ntasks:\n"
               "  - {id: t, command: [mock], requires: [nobody-has-this]}\n")
"""A job that stays live (no agent has the capability): watches of it stay open."""
STREAM_DEADLINE_S = 120.0
FIRST_ANSWER_S = 15.0
"""Every watch must be answered (a first message, or refused) within this: none waits for a
worker."""
OBSERVE_S = 4.0
"""How long agents must stay un-LOST with the streams held: past the fixture's lost-after, 3 s."""
READY_AGAIN_S = 10.0
"""Then both READY, streams still held (a heartbeat a busy machine delayed has come since)."""
OPEN = "open"


def first_answer(call: Any) -> Any:
    """OPEN once the stream's first message arrives, or the status code it ended with."""
    try:
        next(call)
        return OPEN
    except grpc.RpcError as error:
        return error.code()


def test_watch_streams_past_the_caps_are_refused_and_agents_stay_served(
        cluster: LocalCluster) -> None:
    """The probe: MAX_RPC_WORKERS WatchJob streams at once (they took every RPC worker; agents
    went SUSPECT then LOST). For one caller (a token), MAX_STREAMS_PER_CALLER open and the rest
    are RESOURCE_EXHAUSTED at once; a reflection stream of the same host is another caller (its
    certificate) and is served; heartbeats and submits go on; once the streams are cancelled
    their slots are free again."""
    client = cluster.client()
    job_id = client.submit(UNPLACEABLE).job_id
    assert cluster.admin_token is not None
    channel = with_token(tls.open_channel(cluster.grpc[cluster.wait_leader()], cluster.user_tls,
                                          ()), cluster.admin_token)
    request = pb.WatchJobRequest(job_id=job_id)
    calls = [pb_grpc.SchedulerStub(channel).WatchJob(request, timeout=STREAM_DEADLINE_S)
             for _ in range(limits.MAX_RPC_WORKERS)]
    pool = futures.ThreadPoolExecutor(len(calls))
    try:
        answers = [pool.submit(first_answer, call) for call in calls]
        _, late = futures.wait(answers, timeout=FIRST_ANSWER_S)
        assert not late, f"{len(late)} watches got no answer in {FIRST_ANSWER_S:g} s: starved"
        outcomes = [answer.result() for answer in answers]
        assert outcomes.count(OPEN) == limits.MAX_STREAMS_PER_CALLER, outcomes
        assert {o for o in outcomes if o != OPEN} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        refused = next(c for c, o in zip(calls, outcomes, strict=True) if o != OPEN)
        assert "MAX_STREAMS_PER_CALLER" in refused.details() and "retry later" in refused.details()

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10.0)
        assert first_answer(reflection) == OPEN
        reflection.cancel()

        deadline = time.monotonic() + OBSERVE_S
        while time.monotonic() < deadline:  # an invariant over a window, not a wait
            # Starved heartbeats make a cluster LOST within the fixture's 3 s; a busy machine
            # may delay one past its 1 s suspect-after, a blip the next heartbeat heals.
            states = {c.cluster_id: c.status for c in client.cluster_status().clusters}
            assert set(states) == {"east", "west"} and "LOST" not in states.values(), states
            time.sleep(0.2)
        wait_until(lambda: all(c.status == "READY" for c in client.cluster_status().clusters)
                   or None, "both clusters READY with the streams still held", READY_AGAIN_S)
        assert client.submit(UNPLACEABLE).job_id != job_id
    finally:
        for call in calls:
            call.cancel()
        pool.shutdown(wait=True)

    def all_slots_free() -> bool:
        again = [pb_grpc.SchedulerStub(channel).WatchJob(request, timeout=STREAM_DEADLINE_S)
                 for _ in range(limits.MAX_STREAMS_PER_CALLER)]
        try:
            return all(first_answer(call) == OPEN for call in again)
        finally:
            for call in again:
                call.cancel()

    wait_until(all_slots_free, "the cancelled watches' slots to be free again", 10.0)
    channel.close()


def test_an_admin_removes_an_idle_cluster_but_not_one_running_work(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit("name: pinned\ntasks:\n  - {id: t, command: [mock, sleep_ms=60000], "
                           "cluster: east}\n").job_id
    wait_until(lambda: client.list_tasks(job_id).tasks[0].state == "RUNNING" or None,
               "the task to run on east", 30)
    with pytest.raises(RaftschedError) as refused:
        client.remove_cluster("east")
    assert refused.value.code == Code.FAILED_PRECONDITION and "live attempt" in str(refused.value)
    cluster.add_agent("gone")
    cluster.wait_clusters_ready("gone")
    cluster.agents["gone"].kill()  # decommissioned: its agent is stopped first
    assert client.remove_cluster("gone").cluster_id == "gone"

    def ids() -> set[str]:  # the first replica that answers: a follower applies it a bit later
        return {c.cluster_id for c in client.cluster_status().clusters}

    wait_until(lambda: "gone" not in ids(), "the replica asked to apply the removal", 30)
    assert {"east", "west"} <= ids()
    with pytest.raises(RaftschedError) as missing:
        client.remove_cluster("gone")
    assert missing.value.code == Code.NOT_FOUND
