"""`raftsched job watch` against a real dev cluster: re-attach to a job submitted without
--watch, through a pseudo-terminal (one status line redrawn in place, then the per-task table
and the outcome), through a pipe (plain lines), with --json, on a finished and a failed job,
and for a job that does not exist."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from raftsched.cli.watching import CLEAR_LINE

pytestmark = pytest.mark.integration

UP_TIMEOUT_S = 90
WATCH_TIMEOUT_S = 120
COLUMNS = 100
SLOW = """\
name: slow-chain
tasks:
  - {id: a, command: [mock, sleep_ms=1500]}
  - {id: b, command: [mock, sleep_ms=1500], depends_on: [a]}
  - {id: c, command: [mock, sleep_ms=1500], depends_on: [b]}
"""
"""Three tasks one after another, each 1.5 s: the job runs for at least 4.5 s."""
FAILING = """\
name: failing
tasks:
  - {id: only, command: [mock, exit=3], retry: {max_attempts: 1}}
"""


def _env(dev_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RAFTSCHED_SERVERS", "COLUMNS") and not key.startswith("RAFTSCHED_TLS_")}
    env["RAFTSCHED_DEV_DIR"] = str(dev_dir)
    return env


def run(dev_dir: Path, *argv: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftsched", *argv], capture_output=True,
                          text=True, timeout=timeout_s, env=_env(dev_dir), check=False)


def submitted(dev_dir: Path, spec: Path) -> str:
    result = run(dev_dir, "submit", str(spec), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    job_id: str = json.loads(result.stdout)["job_id"]
    return job_id


def watch_on_a_terminal(dev_dir: Path, job_id: str) -> tuple[int, str]:
    """Run `job watch` with its stdout on a pseudo-terminal COLUMNS wide; return its exit
    status and everything it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "raftsched", "job", "watch", job_id],
                               stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                               env=_env(dev_dir))
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + WATCH_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.stderr is not None
    assert process.stderr.read() == b""
    return code, b"".join(chunks).decode()


def test_job_watch_reattaches_redraws_in_place_and_summarises(tmp_path: Path) -> None:
    dev_dir = tmp_path / "dev"
    (tmp_path / "slow.yaml").write_text(SLOW)
    (tmp_path / "failing.yaml").write_text(FAILING)
    try:
        up = run(dev_dir, "dev", "up", "--dir", str(dev_dir), "--executor", "mock", "--json",
                 timeout_s=UP_TIMEOUT_S)
        assert up.returncode == 0, up.stdout + up.stderr

        job_id = submitted(dev_dir, tmp_path / "slow.yaml")
        code, screen = watch_on_a_terminal(dev_dir, job_id)
        assert code == 0, screen
        draws = screen.split(CLEAR_LINE)
        assert len(draws) >= 4, screen  # the job changed at least three times while watched
        # In place: no line break between the first and the last redraw.
        assert all("\n" not in draw for draw in draws[1:-1]), screen
        last, _, summary = draws[-1].partition("\n")
        assert last.startswith("[" + "#" * 24 + "] 3/3  SUCCEEDED  SUCCEEDED 3  "), last
        assert all(len(draw.partition("\r")[0].partition("\n")[0]) < COLUMNS
                   for draw in draws[1:]), screen
        assert "TASK" in summary and f"job {job_id} SUCCEEDED" in summary, summary

        piped = run(dev_dir, "job", "watch", job_id)  # finished: shown at once, plain lines
        assert piped.returncode == 0 and CLEAR_LINE not in piped.stdout, piped.stdout
        assert "SUCCEEDED 3/3 done" in piped.stdout.splitlines()[0]
        assert piped.stdout.rstrip().endswith("3/3 tasks done (SUCCEEDED 3)")

        failing = submitted(dev_dir, tmp_path / "failing.yaml")
        as_json = run(dev_dir, "job", "watch", failing, "--json", timeout_s=WATCH_TIMEOUT_S)
        assert as_json.returncode == 1, as_json.stdout + as_json.stderr
        document: dict[str, Any] = json.loads(as_json.stdout)
        assert (document["job_id"], document["state"], document["tasks"]) == (
            failing, "FAILED", {"FAILED": 1})
        assert [t["task_id"] for t in document["task_summaries"]] == ["only"]

        missing = run(dev_dir, "job", "watch", "no-such-job")
        assert (missing.returncode, missing.stdout) == (2, "")
        assert missing.stderr.startswith("error: NOT_FOUND"), missing.stderr
    finally:
        run(dev_dir, "dev", "down", "--dir", str(dev_dir), timeout_s=120)
