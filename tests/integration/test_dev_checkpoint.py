"""Integration: a preempted task resumes from its checkpoint in a dev cluster made in a private
(0700, as `mktemp -d` makes it) directory, as a new user runs `raftsched dev up --dir
"$(mktemp -d)"` (issue 21, finding 15). The tasks run as the agent's unprivileged task account
(the tests run as root, as CI does), which must pass through that directory to reach its
$RAFTSCHED_CHECKPOINT_DIR: `dev up` lets it through and says so. Everything through the CLI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import dev_cluster_dir, parsed_ok, run_cli
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: tasks run as another account "
                       "only when the agent runs as root (CI runs as root)"),
]

UP_TIMEOUT_S = 90
STATE_TIMEOUT_S = 120.0
LOW = """\
name: train-low
priority_class: low
preemptible: true
tasks:
  - id: train
    cluster: cpu-east
    resources: {cpu: 4}
    checkpoint: true
    grace_s: 30
    retry: {max_attempts: 1}
    command:
      - sh
      - -c
      - |
        d="$RAFTSCHED_CHECKPOINT_DIR"
        if [ -f "$d/counter" ]; then echo "resumed from $(cat "$d/counter")"; exit 0; fi
        if [ "$RAFTSCHED_ATTEMPT" != 1 ]; then echo "resumed from nothing"; exit 0; fi
        trap 'echo 41 > "$d/counter"; exit 143' TERM
        touch trapped
        sleep 600 &
        wait
"""
"""Counts to 41 (saved on SIGTERM), says where it resumed from; `trapped` (in its work dir,
reached by a relative path) says its trap is set."""
URGENT = """\
name: urgent
priority_class: high
tasks:
  - {id: serve, cluster: cpu-east, command: ["true"], resources: {cpu: 4}}
"""


raftsched, parsed = run_cli, parsed_ok


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """`mktemp -d`: 0700; the dev cluster in it is stopped at the end whatever happened."""
    with dev_cluster_dir("raftsched-dev-") as directory:
        assert directory.stat().st_mode & 0o777 == 0o700
        yield directory


def _job_state(dev_dir: Path, job_id: str) -> str:
    return str(parsed(raftsched(dev_dir, "job", "status", job_id, "--json"))["state"])


def test_a_preempted_task_resumes_from_its_checkpoint_in_a_dev_cluster_under_a_private_dir(
        private_dir: Path, tmp_path: Path) -> None:
    up = raftsched(private_dir, "dev", "up", "--dir", str(private_dir), "--executor",
                   "subprocess", "--agents", "1", "--json", timeout_s=UP_TIMEOUT_S)
    cluster = parsed(up)
    assert f"let task accounts pass through {private_dir}" in up.stderr, up.stderr
    attempts = Path(cluster["agents"][0]["data_dir"]) / "attempts"
    (tmp_path / "low.yaml").write_text(LOW)
    (tmp_path / "urgent.yaml").write_text(URGENT)

    low = parsed(raftsched(private_dir, "submit", str(tmp_path / "low.yaml"), "--json"))["job_id"]

    def trapped() -> bool:
        tasks = parsed(raftsched(private_dir, "job", "tasks", low, "--json"))
        fence = tasks[0]["fence"]
        return bool(fence) and (attempts / f"{fence:020d}" / "work" / "trapped").exists()

    wait_until(trapped, "the low-class task to set its SIGTERM trap", STATE_TIMEOUT_S)
    urgent = parsed(raftsched(private_dir, "submit", str(tmp_path / "urgent.yaml"),
                              "--json"))["job_id"]
    for job_id in (urgent, low):
        wait_until(lambda job_id=job_id: _job_state(private_dir, job_id)
                   in ("SUCCEEDED", "FAILED", "CANCELLED"), f"{job_id} to end", STATE_TIMEOUT_S)
        assert _job_state(private_dir, job_id) == "SUCCEEDED"
    history = parsed(raftsched(private_dir, "task", "history", low, "train", "--json"))
    assert [attempt["state"] for attempt in history["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    logs = raftsched(private_dir, "task", "logs", low, "train")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "resumed from 41\n"  # the checkpoint the preempted attempt saved
