"""Reading a job spec from a file: the one place the spec package touches the file system (the
rest of it is pure, so the state machine can use it)."""

from __future__ import annotations

import os

from raftsched import limits
from raftsched.spec.job import JobSpec, SpecError, SpecIssue, parse_spec_text


def load_spec_file(path: str | os.PathLike[str]) -> JobSpec:
    """Read, parse and validate a spec file; an unreadable file is a SpecError too."""
    try:
        with open(path, "rb") as file:
            data = file.read(limits.MAX_SPEC_BYTES + 1)
    except OSError as error:
        reason = error.strerror or str(error)
        raise SpecError([SpecIssue("", f"cannot read {os.fspath(path)}: {reason}")]) from None
    return parse_spec_text(data, source=os.fspath(path))
