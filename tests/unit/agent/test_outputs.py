"""The agent's side of outputs and inputs (agent/outputs.py): the `io` directory, the inputs
file, and a bounded, link-proof read of what the task left at $RAFTSCHED_OUTPUT."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.model import Completion
from agent.outputs import (
    IO_DIR,
    OUTPUT_FILE,
    make_io_dir,
    read_outputs,
    with_outputs,
)
from raftsched import limits
from raftsched.environment import TASK_INPUTS_ENV, TASK_OUTPUT_ENV
from raftsched.outputs import OutputsAccepted, OutputsRefused


def _attempt(tmp_path: Path, inputs: str = "") -> tuple[Path, dict[str, str]]:
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    return attempt, make_io_dir(attempt, inputs, None)


def test_the_io_dir_holds_the_inputs_and_the_variables_name_both_files(tmp_path: Path) -> None:
    attempt, env = _attempt(tmp_path, '{"up":{"n":1}}')
    assert Path(env[TASK_INPUTS_ENV]).read_text() == '{"up":{"n":1}}'
    assert Path(env[TASK_OUTPUT_ENV]) == attempt / IO_DIR / OUTPUT_FILE
    other = tmp_path / "other"
    other.mkdir()
    _, empty = _attempt(other, "")
    assert Path(empty[TASK_INPUTS_ENV]).read_text() == "{}"


def test_no_file_is_no_outputs_and_an_object_is_read_canonical(tmp_path: Path) -> None:
    attempt, env = _attempt(tmp_path)
    assert read_outputs(attempt) == OutputsAccepted("")
    Path(env[TASK_OUTPUT_ENV]).write_text('{"b": 2, "a": 1}')
    assert read_outputs(attempt) == OutputsAccepted('{"a":1,"b":2}')


def test_a_big_file_is_read_only_one_byte_past_the_bound(tmp_path: Path) -> None:
    attempt, env = _attempt(tmp_path)
    Path(env[TASK_OUTPUT_ENV]).write_bytes(b"x" * (limits.MAX_TASK_RESULT_OUTPUTS_BYTES * 4))
    outcome = read_outputs(attempt)
    assert isinstance(outcome, OutputsRefused) and "over the" in outcome.reason


def test_a_symlink_to_a_secret_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"key": "the agent\'s private key"}')
    attempt, env = _attempt(tmp_path)
    Path(env[TASK_OUTPUT_ENV]).symlink_to(secret)
    outcome = read_outputs(attempt)
    assert outcome == OutputsRefused("$RAFTSCHED_OUTPUT could not be read: it is a symbolic link")


def test_a_fifo_does_not_block_the_read_and_is_refused(tmp_path: Path) -> None:
    attempt, env = _attempt(tmp_path)
    os.mkfifo(env[TASK_OUTPUT_ENV])
    assert read_outputs(attempt) == OutputsRefused("$RAFTSCHED_OUTPUT is not a regular file")


def test_a_file_owned_by_another_account_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file away (CI runs as root)")
    attempt, env = _attempt(tmp_path)
    Path(env[TASK_OUTPUT_ENV]).write_text("{}")
    os.chown(env[TASK_OUTPUT_ENV], 65534, 65534)
    assert read_outputs(attempt) == OutputsRefused(
        "$RAFTSCHED_OUTPUT is not owned by the task's account")


def test_only_exit_code_zero_reads_outputs_and_a_refusal_fails_with_its_reason(
        tmp_path: Path) -> None:
    attempt, env = _attempt(tmp_path)
    Path(env[TASK_OUTPUT_ENV]).write_text("[1]")
    failed = Completion(7, 3, reason="exit code 3")
    assert with_outputs(failed, attempt) is failed
    refused = with_outputs(Completion(7, 0), attempt)
    assert refused.outputs_refused and refused.outputs == ""
    assert refused.reason == "$RAFTSCHED_OUTPUT holds a JSON array, not an object"
    Path(env[TASK_OUTPUT_ENV]).write_text('{"n": 1}')
    kept = with_outputs(Completion(7, 0), attempt)
    assert kept.outputs == '{"n":1}' and not kept.outputs_refused
