"""Integration: nothing a task starts outlives its attempt (issue 21, finding 6). On a real
cluster (3 replicas, a subprocess agent; tasks as the agent's task user when the tests run as
root), tasks start processes that leave their process group — `setsid sleep &`, a double fork,
`(setsid sleep &)` — each recording its pid and start time in the task's work dir. After the
attempt SUCCEEDED, after a cancel, after a timeout and after its wrapper was SIGKILLed (the agent
ends the attempt), those processes are gone. Once per containment mode: `cgroup` (skipped where
no writable cgroup v2 hierarchy exists) and the `session` fallback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import containment, runner
from agent.files import read_json
from raftsched.procfs import is_alive
from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

AGENT = "contain"
STATE_TIMEOUT_S = 60.0
GONE_TIMEOUT_S = 15.0
"""An escaped process is SIGKILLed before the attempt's result is written; the wait covers a
busy machine."""
ESCAPE = """\
#!/bin/sh
# escape.sh OUT: records its pid and start time (proc(5) field 22) in OUT, then sleeps.
echo "$$ $(cut -d' ' -f22 /proc/$$/stat)" > "$1.tmp" && mv "$1.tmp" "$1"
exec sleep 300
"""
WAIT = "while [ ! -e esc ]; do sleep 0.02; done"
ESCAPES = {
    "setsid": f'setsid sh "$ESCAPE" "$PWD/esc" & {WAIT}',
    "double-fork": f'sh -c \'sh "$0" "$1" &\' "$ESCAPE" "$PWD/esc"; {WAIT}',
    "subshell-setsid": f'(setsid sh "$ESCAPE" "$PWD/esc" &); {WAIT}',
}
"""How each task lets a process escape its process group (and then waits until it has said
where it is, so the attempt cannot end before)."""


def _cgroup_problem() -> str | None:
    try:
        chosen = containment.choose(containment.MODE_CGROUP, "probe", Path("/nonexistent"))
    except containment.ContainmentError as error:
        return str(error)
    assert chosen.parent is not None
    with contextlib.suppress(OSError):
        chosen.parent.rmdir()
    return None


@pytest.fixture(params=[containment.MODE_CGROUP, containment.MODE_SESSION])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def cluster(mode: str) -> Iterator[LocalCluster]:
    if mode == containment.MODE_CGROUP and (problem := _cgroup_problem()) is not None:
        pytest.skip(f"SKIPPED LOUDLY: no cgroup containment on this machine: {problem}")
    with task_user_root("raftsched-contain-") as root, running(root) as local:
        script = root / "escape.sh"
        script.write_text(ESCAPE)
        script.chmod(0o755)
        local.add_agent(AGENT, cpu=4, executor="subprocess",
                        extra=("--task-containment", mode))
        local.wait_clusters_ready(AGENT)
        yield local


def _job(name: str, scripts: dict[str, str], **task: Any) -> str:
    env = {"ESCAPE": "ESCAPE_PLACEHOLDER"}
    return json.dumps({"name": name, "tasks": [
        {"id": task_id, "command": ["sh", "-c", script], "env": env, "cluster": AGENT,
         "resources": {"cpu": 1}, "retry": {"max_attempts": 1}, **task}
        for task_id, script in scripts.items()]})


def _submit(cluster: LocalCluster, name: str, scripts: dict[str, str], **task: Any) -> str:
    spec = _job(name, scripts, **task).replace("ESCAPE_PLACEHOLDER",
                                               str(cluster.root / "escape.sh"))
    return str(cluster.client().submit(spec).job_id)


def _tasks(cluster: LocalCluster, job_id: str) -> dict[str, Any]:
    return {t.task_id: t for t in cluster.client(retry_budget_s=5).list_tasks(job_id).tasks}


def _last_attempt(cluster: LocalCluster, job_id: str) -> Any:
    return cluster.client(retry_budget_s=5).task_history(job_id, "t").attempts[-1]


def _attempt_dir(cluster: LocalCluster, fence: int) -> Path:
    return cluster.root / f"agent-{AGENT}" / "attempts" / f"{fence:020d}"


def _escapee(cluster: LocalCluster, job_id: str, task_id: str,
             seen: list[tuple[int, int]]) -> tuple[int, int]:
    """The pid and start ticks the task's escaped process recorded (waited for)."""
    def recorded() -> tuple[int, int] | None:
        task = _tasks(cluster, job_id)[task_id]
        if not task.fence:
            return None
        path = _attempt_dir(cluster, int(task.fence)) / "work" / "esc"
        if not path.exists():
            return None
        pid, ticks = (int(field) for field in path.read_text().split())
        return pid, ticks

    found = wait_until(recorded, f"{task_id}'s escaped process to record itself", STATE_TIMEOUT_S)
    seen.append(found)
    return found


def _ended(cluster: LocalCluster, job_id: str) -> str:
    return str(wait_until(
        lambda: (state := cluster.client(retry_budget_s=5).get_job(job_id).state)
        in ("SUCCEEDED", "FAILED", "CANCELLED") and state, f"{job_id} to end", STATE_TIMEOUT_S))


def _assert_gone(escapees: list[tuple[int, int]], what: str) -> None:
    wait_until(lambda: not any(is_alive(pid, ticks) for pid, ticks in escapees),
               f"the processes that escaped {what} to be gone: {escapees}", GONE_TIMEOUT_S)


@pytest.fixture
def escapees() -> Iterator[list[tuple[int, int]]]:
    """Every escaped process the test saw; whatever is still alive at the end (the test
    failed) is SIGKILLed, by pid and start time."""
    seen: list[tuple[int, int]] = []
    yield seen
    for pid, ticks in seen:
        if is_alive(pid, ticks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_processes_that_left_the_group_die_with_a_successful_attempt(
        cluster: LocalCluster, mode: str, escapees: list[tuple[int, int]]) -> None:
    job_id = _submit(cluster, "escapes", ESCAPES, timeout_s=60)
    found = [_escapee(cluster, job_id, task_id, escapees) for task_id in ESCAPES]
    assert _ended(cluster, job_id) == "SUCCEEDED"
    _assert_gone(found, "a SUCCEEDED attempt")
    logged = (cluster.root / "logs" / f"agent-{AGENT}.log").read_text().splitlines()
    modes = [json.loads(line)["mode"] for line in logged if '"task_containment"' in line]
    assert modes and modes[-1] == mode  # an operator can tell which mode an agent uses


def test_cancel_timeout_and_a_vanished_wrapper_end_every_process_of_the_attempt(
        cluster: LocalCluster, escapees: list[tuple[int, int]]) -> None:
    hold = {"t": f"{ESCAPES['setsid']}; sleep 600"}
    cancelled = _submit(cluster, "cancelled", hold)
    timed_out = _submit(cluster, "timed-out", hold, timeout_s=3)
    vanished = _submit(cluster, "vanished", hold)
    cancelled_escapee = _escapee(cluster, cancelled, "t", escapees)
    timed_out_escapee = _escapee(cluster, timed_out, "t", escapees)
    vanished_escapee = _escapee(cluster, vanished, "t", escapees)

    cluster.client().cancel(cancelled, "test")
    assert _ended(cluster, cancelled) == "CANCELLED"
    _assert_gone([cancelled_escapee], "a cancelled attempt")

    assert _ended(cluster, timed_out) == "FAILED"
    assert _last_attempt(cluster, timed_out).state == "TIMED_OUT"
    _assert_gone([timed_out_escapee], "a timed-out attempt")

    fence = int(_tasks(cluster, vanished)["t"].fence)
    wrapper = read_json(_attempt_dir(cluster, fence) / runner.WRAPPER_FILE)
    assert wrapper is not None and is_alive(int(wrapper["pid"]), wrapper["start_ticks"])
    os.kill(int(wrapper["pid"]), signal.SIGKILL)  # the agent finds it gone without a result
    assert _ended(cluster, vanished) == "FAILED"
    assert "wrapper" in _last_attempt(cluster, vanished).reason
    _assert_gone([vanished_escapee], "an attempt whose wrapper vanished")
