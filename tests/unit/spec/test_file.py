"""Reading a spec file (raftsched.spec.file): only a regular file within MAX_SPEC_BYTES is read;
anything else is a SpecError naming the path and why, decided before a byte is read."""

from __future__ import annotations

import errno
import os
import socket
import threading
from pathlib import Path

import pytest

from raftsched import limits
from raftsched.spec.file import load_spec_file, read_spec_file
from raftsched.spec.model import SpecError

FIFO_WAIT_S = 10.0
"""How long reading a FIFO may take before the test counts it as blocked (it takes microseconds)."""
SPEC = "name: tiny\ntasks:\n  - {id: a, command: [sh, -c, 'true']}\n"


def refusal(path: str | Path) -> str:
    with pytest.raises(SpecError) as caught:
        read_spec_file(path)
    [issue] = caught.value.issues
    return issue.message


def test_a_regular_file_is_read_and_parsed(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    assert read_spec_file(path) == SPEC.encode()
    assert [task.id for task in load_spec_file(path).tasks] == ["a"]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(read_spec_file(fifo))
        except SpecError as error:
            outcome.append(error.issues[0].message)

    reader = threading.Thread(target=read, name="fifo-reader", daemon=True)
    reader.start()
    reader.join(FIFO_WAIT_S)
    if reader.is_alive():
        with open(fifo, "wb"):  # a writer that closes at once lets the blocked open return
            pass
        reader.join(FIFO_WAIT_S)
        pytest.fail("reading a FIFO waited for a writer")
    assert outcome == [f"cannot read {fifo}: it is a FIFO (named pipe), not a regular file (to "
                       "read a pipe, pass '-' and redirect the pipe to standard input)"]


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device"),
                                            ("/dev/null", "a character device")])
def test_a_device_is_refused(path: str, kind: str) -> None:
    assert refusal(path) == f"cannot read {path}: it is {kind}, not a regular file"


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert refusal(tmp_path) == f"cannot read {tmp_path}: it is a directory, not a regular file"


def test_a_socket_is_refused_with_the_reason_opening_it_gave(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        assert refusal(path) == f"cannot read {path}: {os.strerror(errno.ENXIO)}"


def test_a_file_larger_than_the_limit_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path
) -> None:
    path = tmp_path / "huge.yaml"
    size = 4 * limits.MAX_SPEC_BYTES
    with open(path, "wb") as file:
        file.truncate(size)  # sparse: no disk is spent
    assert refusal(path) == (f"{path} is {size} bytes; a job spec may be at most "
                             f"{limits.MAX_SPEC_BYTES} bytes")


def test_a_missing_file_names_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    assert refusal(path) == f"cannot read {path}: No such file or directory"


def test_a_symlink_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC)
    (tmp_path / "link.yaml").symlink_to(tmp_path / "job.yaml")
    assert read_spec_file(tmp_path / "link.yaml") == SPEC.encode()
