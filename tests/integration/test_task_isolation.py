"""Integration: a hostile task on a real cluster (3 replicas, an agent running as root with the
subprocess executor) tries what a task once could — read the agent's stores, another attempt's
spec (env secrets included), the Raft journal and the wrapper's environment; forge its own
result; kill its wrapper — and is refused each time. Needs root (as CI runs)."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator

import pytest

from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: task isolation switches "
                       "users, which needs the agent to run as root (CI runs as root)"),
]

PROBES = {
    "list the agent's data dir": "ls ../../..",
    "read the fence store": "cat ../../../fence.lmdb/data.mdb",
    "read the outbox": "cat ../../../outbox.lmdb/data.mdb",
    "read its own attempt's spec": "cat ../spec.json",
    "read another attempt's spec": 'cat "$OTHER_SPEC"',
    "read the raft journal": 'cat "$JOURNAL"',
    "read the wrapper's environment": 'cat "/proc/$PPID/environ"',
    "forge its result": "echo '{\"exit_code\": 0}' > ../result.json",
    "kill its wrapper": 'kill -9 "$PPID"',
}
"""What the task tries: each must fail (the shell prints DENIED)."""


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with task_user_root("raftsched-isolation-") as root, running(root) as local:
        yield local


def _fence(cluster: LocalCluster, job_id: str) -> int:
    return int(cluster.client().list_tasks(job_id).tasks[0].fence)


def test_a_task_cannot_touch_the_agent_other_attempts_or_its_own_result(
        cluster: LocalCluster) -> None:
    cluster.add_agent("iso", executor="subprocess")
    cluster.wait_clusters_ready("iso")
    client = cluster.client()
    secret_job = client.submit(
        "name: secret\ntasks:\n  - {id: t, command: [sh, -c, 'true'], "
        "env: {API_TOKEN: hunter2}}\n").job_id
    wait_until(lambda: client.get_job(secret_job).state == "SUCCEEDED" or None,
               "the job with a secret to finish", 60)
    attempts = cluster.root / "agent-iso" / "attempts"
    other_spec = attempts / f"{_fence(cluster, secret_job):020d}" / "spec.json"
    assert "hunter2" in other_spec.read_text()  # the file is there: only access is refused

    journal = cluster.root / "replica-0" / "raft.journal"
    assert journal.exists() and journal.stat().st_mode & 0o077 == 0, oct(journal.stat().st_mode)
    script = "\n".join(
        f'if {command} >/dev/null 2>&1; then echo "ALLOWED {name}"; '
        f'else echo "DENIED {name}"; fi' for name, command in PROBES.items())
    script += "\nid -u\nexit 3\n"
    spec = {"name": "hostile", "tasks": [{
        "id": "t", "command": ["sh", "-c", script],
        "env": {"OTHER_SPEC": str(other_spec), "JOURNAL": str(journal)}}]}
    job_id = client.submit(json.dumps(spec)).job_id
    wait_until(lambda: client.get_job(job_id).state in ("FAILED", "SUCCEEDED") or None,
               "the hostile job to end", 60)
    task = client.list_tasks(job_id).tasks[0]
    output = (attempts / f"{task.fence:020d}" / "stdout").read_text().splitlines()
    assert [line for line in output if line.startswith("ALLOWED")] == [], output
    assert len([line for line in output if line.startswith("DENIED")]) == len(PROBES), output
    assert output[-1] != "0", "the task ran as root"
    # Its real exit code, not a forged success; and its wrapper lived to report it.
    assert client.get_job(job_id).state == "FAILED"
    assert task.exit_code == 3, task


def test_a_cwd_the_task_account_may_not_enter_starts_nothing(cluster: LocalCluster) -> None:
    """`cwd: /root` (root-only) and a missing cwd fail alike, exit 126, with a reason naming
    the cwd and the account, and the command never runs (issue 21, finding 14): the wrapper
    enters the cwd as the task's account, after the switch, not as root before it."""
    cluster.add_agent("iso", executor="subprocess")
    cluster.wait_clusters_ready("iso")
    client = cluster.client()
    ran = cluster.root / "ran"
    ran.mkdir(mode=0o777)
    ran.chmod(0o777)  # the task account may write here: a marker proves the command ran
    jobs = {}
    for cwd in ("/root", "/root/no-such-dir", "/no-such-dir"):
        spec = {"name": "cwd", "tasks": [{
            "id": "t", "cwd": cwd, "retry": {"max_attempts": 1},
            "command": ["sh", "-c", f"touch {ran}/marker-$RAFTSCHED_FENCE"]}]}
        jobs[cwd] = client.submit(json.dumps(spec)).job_id
    reasons = {}
    for cwd, job_id in jobs.items():
        wait_until(lambda job_id=job_id: client.get_job(job_id).state in ("FAILED", "SUCCEEDED")
                   or None, f"the job with cwd {cwd} to end", 60)
        attempt = client.task_history(job_id, "t").attempts[-1]
        assert (client.get_job(job_id).state, attempt.exit_code) == ("FAILED", 126), attempt
        reasons[cwd] = attempt.reason
    assert list(ran.iterdir()) == [], "a command ran in a cwd its account may not enter"
    for cwd, reason in reasons.items():
        assert reason == (f"cannot start: cannot enter cwd {cwd} as nobody (uid "
                          f"{pwd.getpwnam('nobody').pw_uid}): it does not exist or that "
                          "account may not enter it"), reason
