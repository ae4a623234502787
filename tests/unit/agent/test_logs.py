"""The agent's side of `task logs` (agent.logs.read_piece): a piece of an attempt's output file
by offset or from the end, and a precise reason when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.logs import MAX_LOG_PIECE_BYTES, read_piece
from raftsched.protocol import LogRequest


def request(offset: int, max_bytes: int = 1024, stream: str = "stdout") -> LogRequest:
    return LogRequest("r1", 5, stream, offset, max_bytes)


@pytest.fixture
def attempt(tmp_path: Path) -> Path:
    (tmp_path / "stdout").write_bytes(b"0123456789")
    return tmp_path


@pytest.mark.parametrize(("offset", "max_bytes", "start", "data"), [
    (0, 1024, 0, b"0123456789"),
    (4, 3, 4, b"456"),
    (-3, 1024, 7, b"789"),
    (-100, 1024, 0, b"0123456789"),
    (10, 1024, 10, b""),
    (50, 1024, 10, b""),
])
def test_a_piece_by_offset_or_from_the_end(attempt: Path, offset: int, max_bytes: int,
                                           start: int, data: bytes) -> None:
    chunk = read_piece(str(attempt), request(offset, max_bytes))
    assert (chunk.offset, chunk.data, chunk.size, chunk.error) == (start, data, 10, "")
    assert (chunk.request_id, chunk.fence) == ("r1", 5)


def test_a_piece_is_never_bigger_than_the_bound(tmp_path: Path) -> None:
    (tmp_path / "stdout").write_bytes(b"x" * (MAX_LOG_PIECE_BYTES + 10))
    assert len(read_piece(str(tmp_path), request(0, 10**9)).data) == MAX_LOG_PIECE_BYTES


def test_no_output_yet_is_an_empty_piece(tmp_path: Path) -> None:
    chunk = read_piece(str(tmp_path), request(0, stream="stderr"))
    assert (chunk.data, chunk.size, chunk.error) == (b"", 0, "")


@pytest.mark.parametrize(("where", "stream", "says"), [
    ("", "stdout", "keeps no task output"),
    ("gone", "stdout", "no longer on this agent"),
    ("here", "passwd", "no output stream 'passwd'"),
    ("here", "../stdout", "no output stream"),
])
def test_why_there_is_nothing(attempt: Path, where: str, stream: str, says: str) -> None:
    directory = {"": "", "gone": str(attempt / "gone"), "here": str(attempt)}[where]
    chunk = read_piece(directory, request(0, stream=stream))
    assert chunk.data == b"" and says in chunk.error


def test_a_symlinked_output_file_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"agent key")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    (attempt / "stdout").symlink_to(secret)
    chunk = read_piece(str(attempt), request(0))
    assert chunk.data == b"" and "cannot read the stdout" in chunk.error
