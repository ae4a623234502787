"""`raftsched.files.written_whole`: a private file (0600 whatever the umask), whole or not at
all, and a PATH.partial that exists already is refused, never followed or removed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from raftsched import files


def test_the_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    old = os.umask(0)
    try:
        with files.written_whole(str(target)) as out:
            out.write(b"data")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"data"
    assert stat.S_IMODE(target.stat().st_mode) == files.PRIVATE_FILE_MODE
    assert not (tmp_path / "snap.partial").exists()


def test_an_existing_file_is_replaced_by_a_new_private_one(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    target.write_bytes(b"old")
    target.chmod(0o644)
    with files.written_whole(str(target)) as out:
        out.write(b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize("planted", ["symlink", "dangling", "file", "directory"])
def test_a_planted_partial_is_refused_and_left_alone(tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    partial = tmp_path / "snap.partial"
    if planted == "symlink":
        partial.symlink_to(victim)
    elif planted == "dangling":
        partial.symlink_to(tmp_path / "would-be-created")
    elif planted == "file":
        partial.write_text("someone's")
    else:
        partial.mkdir()
    with pytest.raises(files.InTheWay) as refused, \
            files.written_whole(str(tmp_path / "snap")) as out:
        out.write(b"never")
    assert refused.value.partial == str(partial)
    assert "remove it" in str(refused.value)
    expected = {"symlink": f"a symbolic link to {victim}", "file": "a regular file of 9 bytes",
                "directory": "a directory"}.get(planted, "a symbolic link")
    assert expected in refused.value.what
    assert victim.read_text() == "keep"
    assert not (tmp_path / "would-be-created").exists()
    assert not (tmp_path / "snap").exists()
    assert partial.is_symlink() or partial.exists()


def test_a_failed_write_removes_its_own_partial_and_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), files.written_whole(str(target)) as out:
        out.write(b"half")
        raise RuntimeError("stream broke")
    assert target.read_bytes() == b"old"
    assert not (tmp_path / "snap.partial").exists()
