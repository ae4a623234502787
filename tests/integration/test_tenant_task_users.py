"""Integration: per-tenant task users on a real cluster (3 replicas, one agent running as root
with the subprocess executor and `--tenant-task-users alpha=A,beta=B`). Each tenant submits with
a user token of its own. Alpha's task holds still with a secret in its work dir and its
checkpoint dir; the agent is SIGKILLed and restarted (the attempt is adopted); beta's task, on
the same agent at the same time, tries to list, read and write alpha's work dir, list alpha's
checkpoint and signal alpha's process, and is refused each time. `id -u` shows each task its
own account, and a tenant not listed runs as the agent's task user (nobody). Needs root (as CI
runs)."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import runner
from agent.files import read_json
from tests.support.agent import spare_accounts
from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: per-tenant task users "
                       "switch users, which needs the agent to run as root (CI runs as root)"),
]

STATE_TIMEOUT_S = 60.0
AGENT = "shared"
PROBES = {
    "list alpha's work dir": 'ls "$OTHER_WORK"',
    "read alpha's file": 'cat "$OTHER_WORK/secret"',
    "write into alpha's work dir": 'touch "$OTHER_WORK/planted"',
    "list alpha's checkpoint": 'ls "$OTHER_CHECKPOINT"',
    "read alpha's checkpoint": 'cat "$OTHER_CHECKPOINT/state"',
    "signal alpha's task": 'kill -0 "$OTHER_PID"',
}
"""What beta's task tries against alpha's, running at the same time: each must fail."""
HOLD = ('echo private > secret; echo kept > "$RAFTSCHED_CHECKPOINT_DIR/state"; '
        'echo "$RAFTSCHED_CHECKPOINT_DIR" > where; '
        'while [ ! -e "$GATE" ]; do sleep 0.05; done; id -u')
"""Alpha's task: leaves a secret in its work and checkpoint dirs, says where the checkpoint
is (for the test, which reads its work dir as root), waits for the gate."""


@pytest.fixture
def accounts() -> tuple[str, str]:
    names = spare_accounts(2)
    if len(names) < 2:
        pytest.skip(f"SKIPPED LOUDLY: needs two unprivileged base accounts, found {names}")
    return names[0], names[1]


@pytest.fixture
def cluster(accounts: tuple[str, str]) -> Iterator[LocalCluster]:
    alpha, beta = accounts
    with task_user_root("raftsched-tenants-") as root, running(root) as local:
        local.add_agent(AGENT, cpu=4, executor="subprocess",
                        extra=("--tenant-task-users", f"alpha={alpha},beta={beta}"))
        local.wait_clusters_ready(AGENT)
        yield local


def _job(tenant: str, script: str, env: dict[str, str], checkpoint: bool = False) -> str:
    task: dict[str, Any] = {"id": "t", "command": ["sh", "-c", script], "env": env,
                            "retry": {"max_attempts": 1}}
    if checkpoint:
        task["checkpoint"] = True
    return json.dumps({"name": f"{tenant}-job", "tenant": tenant, "tasks": [task]})


def _task(cluster: LocalCluster, job_id: str) -> Any:
    return cluster.client(retry_budget_s=5).list_tasks(job_id).tasks[0]


def _ended(cluster: LocalCluster, job_id: str) -> Any:
    wait_until(lambda: cluster.client(retry_budget_s=5).get_job(job_id).state
               in ("SUCCEEDED", "FAILED") or None, f"job {job_id} to end", STATE_TIMEOUT_S)
    return _task(cluster, job_id)


def _attempt_dir(cluster: LocalCluster, fence: int) -> Path:
    return cluster.root / f"agent-{AGENT}" / "attempts" / f"{fence:020d}"


def _stdout(cluster: LocalCluster, task: Any) -> list[str]:
    return (_attempt_dir(cluster, int(task.fence)) / runner.STDOUT_FILE).read_text().splitlines()


def test_tenants_on_one_agent_run_as_their_own_accounts_and_cannot_reach_each_other(
        cluster: LocalCluster, accounts: tuple[str, str]) -> None:
    alpha_uid, beta_uid = (pwd.getpwnam(name).pw_uid for name in accounts)
    admin = cluster.client()
    alpha = cluster.client(token=admin.create_token("alpha", "user", "alpha").token)
    beta = cluster.client(token=admin.create_token("beta", "user", "beta").token)
    gate = cluster.root / "gate"
    held = alpha.submit(_job("alpha", HOLD, {"GATE": str(gate)}, checkpoint=True)).job_id
    fence = int(wait_until(lambda: _task(cluster, held).fence
                           if _task(cluster, held).state == "RUNNING" else None,
                           "alpha's task to run", STATE_TIMEOUT_S))
    work = _attempt_dir(cluster, fence) / "work"
    wait_until(lambda: (work / "where").exists() or None, "alpha's task to leave its secrets",
               STATE_TIMEOUT_S)
    checkpoint = (work / "where").read_text().strip()
    # The wrapper writes task.json once the task's exec went through (it reads the start's
    # outcome first), which may be after the task's first lines ran.
    task_file = wait_until(lambda: read_json(_attempt_dir(cluster, fence) / runner.TASK_FILE),
                           "the wrapper to record alpha's task", STATE_TIMEOUT_S)

    agent = cluster.agents[AGENT]
    agent.kill()  # SIGKILL: alpha's task runs on under its wrapper; the next agent adopts it
    agent.start()
    cluster.wait_clusters_ready(AGENT)

    script = "\n".join(f'if {command} >/dev/null 2>&1; then echo "ALLOWED {name}"; '
                       f'else echo "DENIED {name}"; fi' for name, command in PROBES.items())
    probe = beta.submit(_job("beta", f"{script}\nid -u", {
        "OTHER_WORK": str(work), "OTHER_CHECKPOINT": checkpoint,
        "OTHER_PID": str(task_file["pid"])})).job_id
    probed_task = _ended(cluster, probe)
    probed = _stdout(cluster, probed_task)
    assert [line for line in probed if line.startswith("ALLOWED")] == [], probed
    assert len([line for line in probed if line.startswith("DENIED")]) == len(PROBES), probed
    assert probed[-1] == str(beta_uid)
    assert _task(cluster, held).state == "RUNNING"  # beta's probes did not disturb it

    unlisted = _ended(cluster, admin.submit(_job("default", "id -u", {})).job_id)
    assert _stdout(cluster, unlisted) == [str(pwd.getpwnam("nobody").pw_uid)]

    gate.touch()
    finished = _ended(cluster, held)
    assert finished.state == "SUCCEEDED" and int(finished.fence) == fence, finished
    assert _stdout(cluster, finished) == [str(alpha_uid)]
    assert work.stat().st_uid == alpha_uid and not (work / "planted").exists()
    beta_work = _attempt_dir(cluster, int(probed_task.fence)) / "work"
    assert beta_work.stat().st_uid == beta_uid
