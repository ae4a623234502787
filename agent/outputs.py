"""A task's outputs and inputs as files in its attempt's `io` directory (issue 26).

`$RAFTSCHED_INPUTS` names `io/inputs.json`, written before the task starts (its upstream tasks'
outputs); `$RAFTSCHED_OUTPUT` names `io/output.json`, which the task may write. After the task
exits 0 the executor reads the latter with `read_outputs` (one bounded read) and judges it with
the one rule the state machine applies too (`raftsched.outputs.judge`): a refusal fails the
attempt with a reason saying exactly what was wrong.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import replace
from pathlib import Path

from agent.model import Completion
from raftsched import limits
from raftsched.environment import TASK_INPUTS_ENV, TASK_OUTPUT_ENV
from raftsched.outputs import (
    NO_OUTPUTS,
    OutputsAccepted,
    OutputsOutcome,
    OutputsRefused,
    judge_bytes,
)

IO_DIR = "io"
"""The attempt's directory for its inputs and outputs (the task's account may write it)."""
OUTPUT_FILE = "output.json"
INPUTS_FILE = "inputs.json"


def io_env(attempt_dir: Path) -> dict[str, str]:
    """The variables that name the two files."""
    io = attempt_dir / IO_DIR
    return {TASK_OUTPUT_ENV: str(io / OUTPUT_FILE), TASK_INPUTS_ENV: str(io / INPUTS_FILE)}


def write_inputs(attempt_dir: Path, inputs: str) -> None:
    """Writes the task's inputs file (`{}` for a task with no upstream tasks) before the task
    starts; the `io` directory must exist. Not synced: an attempt whose machine crashes before
    its task read the file is lost with it."""
    (attempt_dir / IO_DIR / INPUTS_FILE).write_bytes((inputs or NO_OUTPUTS).encode())


def make_io_dir(attempt_dir: Path, inputs: str, owner: tuple[int, int] | None) -> dict[str, str]:
    """Makes the attempt's `io` directory (owned by the task's account when it runs as one),
    writes its inputs file there, and returns the variables naming the two files."""
    io = attempt_dir / IO_DIR
    io.mkdir(mode=0o700)
    write_inputs(attempt_dir, inputs)
    if owner is not None:
        os.chown(io / INPUTS_FILE, *owner)
        os.chown(io, *owner)
    return io_env(attempt_dir)


def read_outputs(attempt_dir: Path) -> OutputsOutcome:
    """The outputs the attempt left: at most one byte past the bound is read; a missing file is
    no outputs (`OutputsAccepted("")`). The task may have put anything at that path: a symbolic
    link is not followed, only a regular file owned by the directory's owner (the task's
    account) is read (a hard link to someone else's file is refused), and a FIFO never blocks
    the read."""
    io = attempt_dir / IO_DIR
    try:
        descriptor = os.open(io / OUTPUT_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return OutputsAccepted("")
    except OSError as error:
        return OutputsRefused(f"${TASK_OUTPUT_ENV} could not be read: {_why(error)}")
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            return OutputsRefused(f"${TASK_OUTPUT_ENV} is not a regular file")
        if found.st_uid != os.stat(io).st_uid:
            return OutputsRefused(f"${TASK_OUTPUT_ENV} is not owned by the task's account")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(limits.MAX_TASK_RESULT_OUTPUTS_BYTES + 1)
    except OSError as error:
        return OutputsRefused(f"${TASK_OUTPUT_ENV} could not be read: {_why(error)}")
    finally:
        os.close(descriptor)
    return judge_bytes(data)


def with_outputs(completion: Completion, attempt_dir: Path) -> Completion:
    """A completion of exit code 0 with the outputs its task left (or their refusal); any other
    completion as it is (a failed task's outputs are not kept)."""
    if completion.exit_code != 0 or completion.timed_out or completion.killed:
        return completion
    outcome = read_outputs(attempt_dir)
    if isinstance(outcome, OutputsRefused):
        return replace(completion, outputs_refused=True,
                       reason=outcome.reason[:limits.MAX_REASON_CHARS])
    return replace(completion, outputs=outcome.text)


def _why(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "it is a symbolic link"
    return error.strerror or type(error).__name__
