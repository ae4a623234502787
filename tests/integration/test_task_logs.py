"""`raftsched task logs` end to end: a task run as a process by a real agent writes to stdout and
stderr and fails; its output is read through the leader from the agent — followed while it
runs (the command ends when the attempt does), by stream, as JSON, from the tail, after the
agent was killed with SIGKILL and restarted — and every refusal is one precise error."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

STATE_TIMEOUT_S = 60.0
TALK = """\
name: talk
tasks:
  - id: talk
    retry: {max_attempts: 1}
    command:
      - sh
      - -c
      - |
        for i in 1 2 3 4 5; do echo "tick $i"; sleep 0.4; done
        echo "bye" >&2
        exit 3
"""
NEVER = """\
name: never
allow_unschedulable: true
tasks:
  - {id: t, command: ["true"], requires: [nowhere]}
"""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with task_user_root("raftsched-logs-") as root, running(root) as local:
        local.add_agent("east", cpu=2, executor="subprocess")
        local.wait_clusters_ready("east")
        yield local


def task_state(cluster: LocalCluster, job_id: str) -> str:
    return str(cluster.client(retry_budget_s=5).list_tasks(job_id).tasks[0].state)


def test_task_output_through_the_leader(cluster: LocalCluster) -> None:
    client = cluster.client()
    job_id = client.submit(TALK).job_id
    wait_until(lambda: task_state(cluster, job_id) == "RUNNING" or None, "the task to run",
               STATE_TIMEOUT_S)

    followed = cluster.cli("task", "logs", job_id, "talk", "--follow")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "".join(f"tick {i}\n" for i in range(1, 6))
    assert f"== {job_id}/talk attempt 1 (fence " in followed.stderr
    assert task_state(cluster, job_id) == "FAILED"  # --follow ended with the attempt

    errors = cluster.cli("task", "logs", job_id, "talk", "--stream", "stderr")
    assert (errors.returncode, errors.stdout) == (0, "bye\n"), errors.stderr
    as_json = json.loads(cluster.cli("task", "logs", job_id, "talk", "--json").stdout)
    assert {key: as_json[key] for key in ("attempt", "cluster", "attempt_state", "stream",
                                          "offset", "bytes")} == {
        "attempt": 1, "cluster": "east", "attempt_state": "FAILED", "stream": "stdout",
        "offset": 0, "bytes": 35}
    assert as_json["output"].splitlines()[-1] == "tick 5"
    tail = cluster.cli("task", "logs", job_id, "talk", "--tail", "7")
    assert tail.stdout == "tick 5\n"

    agent = cluster.agents["east"]
    agent.kill()  # SIGKILL: the output stays in the attempt dir
    agent.start()
    cluster.wait_clusters_ready("east")
    again = cluster.cli("task", "logs", job_id, "talk")
    assert again.returncode == 0 and again.stdout == followed.stdout, again.stderr

    never = client.submit(NEVER).job_id
    for argv, code, message in [
        ((job_id, "nope"), 2, "task 'nope' not found"),
        ((job_id, "talk", "--attempt", "2"), 2, "has 1 attempt(s), not 2"),
        ((never, "t"), 2, "has not run yet"),
        (("no-such-job", "t"), 2, "not found"),
    ]:
        refused = cluster.cli("task", "logs", *argv)
        assert (refused.returncode, refused.stdout) == (code, ""), refused.stderr
        assert refused.stderr.startswith("error: ") and message in refused.stderr, \
            refused.stderr
        assert "Traceback" not in refused.stderr
