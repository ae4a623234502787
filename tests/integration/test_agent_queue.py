"""Late binding with a real agent process (issue 24, item 1): a one-slot agent with a local
queue of one holds the second task while the first runs, and starts it the moment the first
ends, without a round trip to the leader."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

JOB = """
name: queued
tasks:
  - {id: a, command: [mock, sleep_ms=1500], cluster: solo, resources: {cpu: 1}}
  - {id: b, command: [mock, sleep_ms=1500], cluster: solo, resources: {cpu: 1}}
"""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with task_user_root("raftsched-queue-") as root, running(root) as local:
        local.add_agent("solo", cpu=1, extra=("--queue-depth", "1"))
        local.wait_clusters_ready("solo")
        yield local


def test_a_one_slot_agent_starts_its_queued_task_as_soon_as_the_first_ends(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit(JOB).job_id

    def states() -> dict[str, str] | None:
        shown = {t.task_id: t.state for t in client.list_tasks(job_id).tasks}
        return shown if sorted(shown.values()) == ["QUEUED", "RUNNING"] else None

    held = wait_until(states, "one task RUNNING and the other QUEUED at the agent", 30)
    first, queued = sorted(held, key=lambda task_id: held[task_id] == "QUEUED")
    wait_until(lambda: client.get_job(job_id).state == "SUCCEEDED" or None, "the job", 60)
    ran = {task_id: list(client.task_history(job_id, task_id).attempts)
           for task_id in (first, queued)}
    for task_id, attempts in ran.items():  # each ran once: the queued one was never refused
        assert [(a.state, a.cluster) for a in attempts] == [("SUCCEEDED", "solo")], task_id
    gap_ms = ran[queued][0].started_ms - ran[first][0].finished_ms
    print(f"queued task started {gap_ms} ms after the first finished (leader's commit times; "
          "informational)")
    log = (cluster.root / "logs" / "agent-solo.log").read_text()
    assert '"attempt_queued"' in log
