"""Reading a job spec from a file: the one place the spec package touches the file system (the
rest of it is pure, so the state machine can use it)."""

from __future__ import annotations

import os
import stat
from typing import NoReturn

from raftsched import limits
from raftsched.spec.issue import SpecIssue
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import JobSpec, SpecError

_PIPE_HINT = " (to read a pipe, pass '-' and redirect the pipe to standard input)"
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory", ""),
    (stat.S_ISFIFO, "a FIFO (named pipe)", _PIPE_HINT),
    (stat.S_ISCHR, "a character device", ""),
    (stat.S_ISBLK, "a block device", ""),
)
"""What a spec file must not be: (test of st_mode, what it is, how to read it anyway). A socket
never gets this far: opening one fails (ENXIO)."""


def load_spec_file(path: str | os.PathLike[str]) -> JobSpec:
    """Read (`read_spec_file`), parse and validate a spec file; any refusal is a SpecError."""
    return parse_spec_text(read_spec_file(path), source=os.fspath(path))


def read_spec_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the spec file at `path`. Raises SpecError naming the path and why, unless it
    is a regular file of at most MAX_SPEC_BYTES: anything else is refused before a byte is read
    (a FIFO would block until a writer came, /dev/zero would never end), and so is a file whose
    size says it is too large. A file that grows while it is read is read one byte past the
    limit at most (the parser then refuses its size)."""
    name = os.fspath(path)
    try:
        # Non-blocking: opening a FIFO for reading otherwise waits for a writer. It changes
        # nothing for a regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        _refuse(name, error.strerror or str(error))
    try:
        _check_regular_file(name, os.fstat(fd))
        with open(fd, "rb", closefd=False) as file:
            return file.read(limits.MAX_SPEC_BYTES + 1)
    except OSError as error:
        _refuse(name, error.strerror or str(error))
    finally:
        os.close(fd)


def _check_regular_file(name: str, info: os.stat_result) -> None:
    for is_kind, kind, hint in _NOT_REGULAR:
        if is_kind(info.st_mode):
            _refuse(name, f"it is {kind}, not a regular file{hint}")
    if not stat.S_ISREG(info.st_mode):
        _refuse(name, "it is not a regular file")
    if info.st_size > limits.MAX_SPEC_BYTES:
        raise SpecError([SpecIssue("", f"{name} is {info.st_size} bytes; a job spec may be at "
                                       f"most {limits.MAX_SPEC_BYTES} bytes")])


def _refuse(name: str, reason: str) -> NoReturn:
    raise SpecError([SpecIssue("", f"cannot read {name}: {reason}")])
