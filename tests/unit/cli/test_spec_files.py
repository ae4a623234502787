"""`raftsched validate` and `raftsched submit` given a path that is not a regular file (a FIFO,
a device, a directory), through the real entry point (`python -m raftsched`): each answers at
once with the CLI's bad-input error (exit 2) naming the path and why, and submit contacts no
scheduler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXIT_INVALID = 2
PROMPT_S = 30.0
"""Wall-clock bound of one command (the interpreter's start-up included); before the fix a
FIFO blocked forever."""
NO_SCHEDULER = "127.0.0.1:1"
"""Nothing listens here: submit must refuse the file before it tries to connect."""


def raftsched(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "RAFTSCHED_SERVERS"}
    return subprocess.run([sys.executable, "-m", "raftsched", *argv], capture_output=True,
                          text=True, timeout=PROMPT_S, env=env, check=False)


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = tmp_path / "job.fifo"
    os.mkfifo(path)
    return str(path)


def test_validate_a_fifo_refuses_at_once(fifo: str) -> None:
    result = raftsched("validate", fifo)
    assert (result.returncode, result.stdout) == (EXIT_INVALID, "")
    assert result.stderr.splitlines() == [
        f"error: cannot read {fifo}: it is a FIFO (named pipe), not a regular file (to read a "
        "pipe, pass '-' and redirect the pipe to standard input)",
        "1 error(s)",
    ]


def test_validate_json_a_fifo_keeps_the_validate_error_shape(fifo: str) -> None:
    result = raftsched("validate", "--json", fifo)
    assert result.returncode == EXIT_INVALID
    assert json_of(result) == {"ok": False, "file": fifo, "errors": [{
        "path": "", "task": None,
        "message": f"cannot read {fifo}: it is a FIFO (named pipe), not a regular file (to "
                   "read a pipe, pass '-' and redirect the pipe to standard input)"}]}


@pytest.mark.parametrize("kind", ["device", "directory"])
def test_validate_json_a_device_or_a_directory_is_refused(tmp_path: Path, kind: str) -> None:
    path, what = ("/dev/zero", "a character device") if kind == "device" \
        else (str(tmp_path), "a directory")
    result = raftsched("validate", "--json", path)
    assert result.returncode == EXIT_INVALID
    [error] = json_of(result)["errors"]
    assert error["message"] == f"cannot read {path}: it is {what}, not a regular file"


def test_submit_json_a_fifo_is_invalid_argument_without_contacting_a_scheduler(
    fifo: str
) -> None:
    result = raftsched("submit", "--json", "--servers", NO_SCHEDULER, "--timeout", "1", fifo)
    assert result.returncode == EXIT_INVALID
    error = json_of(result)["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["issues"] == [{
        "path": "", "task": None,
        "message": f"cannot read {fifo}: it is a FIFO (named pipe), not a regular file (to "
                   "read a pipe, pass '-' and redirect the pipe to standard input)"}]


def test_submit_dev_zero_is_refused(tmp_path: Path) -> None:
    result = raftsched("submit", "--servers", NO_SCHEDULER, "--timeout", "1", "/dev/zero")
    assert result.returncode == EXIT_INVALID
    assert "error: cannot read /dev/zero: it is a character device, not a regular file" \
        in result.stderr.splitlines()


def test_validate_reads_a_pipe_on_standard_input(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "raftsched", "validate", "-"], input="name: n\ntasks:\n"
        "  - {id: a, command: [x]}\n", capture_output=True, text=True, timeout=PROMPT_S,
        check=False)
    assert (result.returncode, result.stdout) == (0, "ok: 1 tasks, 0 edges\n")
