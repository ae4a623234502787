"""Integration: preemption end to end, on real replicas and a real agent running tasks as
processes (as the agent's unprivileged task user when the tests run as root). A low-class
preemptible task with a checkpoint directory fills the only cluster; a high-class task arrives;
the scheduler preempts the low one, whose process gets SIGTERM and writes its checkpoint in its
grace period; the high-class task runs; the low one runs again, finds its checkpoint and
succeeds — with `max_attempts: 1`, so a preemption that cost an application attempt would fail
the job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

JOB_DONE_S = 120.0

LOW = """\
name: train-low
priority_class: low
preemptible: true
tasks:
  - id: train
    resources: {cpu: 2}
    checkpoint: true
    grace_s: 30
    retry: {max_attempts: 1}
    command:
      - sh
      - -c
      - |
        d="$RAFTSCHED_CHECKPOINT_DIR"
        if [ -f "$d/ckpt" ]; then
          if [ "$(cat "$d/ckpt")" = "$RAFTSCHED_FENCE" ]; then exit 9; fi
          exit 0
        fi
        trap 'echo "$RAFTSCHED_FENCE" > "$d/ckpt"; exit 143' TERM
        touch "$d/trapped"
        sleep 600 &
        wait
"""

URGENT = """\
name: urgent
priority_class: high
tasks:
  - {id: serve, command: ["true"], resources: {cpu: 2}}
"""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with task_user_root("raftsched-preempt-") as root, running(root) as local:
        local.add_agent("gpu", cpu=2, executor="subprocess")
        local.wait_clusters_ready("gpu")
        yield local


def state_of(cluster: LocalCluster, job_id: str, task_id: str) -> str:
    tasks = cluster.client(retry_budget_s=5).list_tasks(job_id).tasks
    return {t.task_id: t.state for t in tasks}[task_id]


def test_a_higher_class_task_preempts_a_checkpointing_task_that_then_resumes(
        cluster: LocalCluster) -> None:
    client = cluster.client()
    low = client.submit(LOW).job_id
    wait_until(lambda: state_of(cluster, low, "train") == "RUNNING" or None,
               "the low-class task to run", JOB_DONE_S)
    # RUNNING is reported once the agent has launched the task's wrapper; a kill before the
    # wrapper starts the task stops it with nothing run. The task says when its trap is set.
    checkpoints = cluster.root / "agent-gpu" / "checkpoints"
    wait_until(lambda: list(checkpoints.glob("*/trapped")),
               "the low-class task to set its SIGTERM trap", JOB_DONE_S)
    urgent = client.submit(URGENT).job_id

    def done(job_id: str) -> str | None:
        state = cluster.client(retry_budget_s=5).get_job(job_id).state
        return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    assert wait_until(lambda: done(urgent), "the urgent job", JOB_DONE_S) == "SUCCEEDED"
    assert wait_until(lambda: done(low), "the preempted job", JOB_DONE_S) == "SUCCEEDED", \
        client.task_history(low, "train")

    history = client.task_history(low, "train")
    attempts = [(a.state, a.reason) for a in history.attempts]
    assert [state for state, _ in attempts] == ["PREEMPTED", "SUCCEEDED"], attempts
    assert f"preempted to make room for {urgent}/serve" in attempts[0][1]
    assert (history.app_failures, history.infra_failures) == (0, 0)
    served = client.task_history(urgent, "serve").attempts
    assert [a.state for a in served] == ["SUCCEEDED"]
    # The cluster was kept for the urgent task: the low one came back only after it ended (it
    # may wait for that in the agent's local queue: late binding assigns it earlier).
    assert history.attempts[1].started_ms >= served[0].finished_ms
    # The checkpoint served its purpose and is gone; no other task's is there.
    assert checkpoints.is_dir() and list(checkpoints.iterdir()) == []
