"""Private files written whole: a snapshot file (`admin snapshot save`, `snapshot export`, the
data dir `replica --restore-from` seeds) holds every job's env values, so only its owner may
read it, and nothing already at its path may redirect the write.

`written_whole(PATH)` creates PATH.partial itself — mode 0600, O_CREAT|O_EXCL|O_NOFOLLOW, so a
planted PATH.partial (a symbolic link to another file, a file, anything) is refused, never
followed, truncated or removed — then fsyncs it, renames it over PATH and fsyncs the
directory. On failure it removes only the PATH.partial it created."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

PRIVATE_FILE_MODE = 0o600
"""Read and write for the owner only (the umask can only narrow it)."""
PARTIAL_SUFFIX = ".partial"


class InTheWay(Exception):
    """PATH.partial exists already: what is there, and what to do."""

    def __init__(self, partial: str, what: str) -> None:
        super().__init__(
            f"{partial} exists ({what}): it may be another save's, or an interrupted one's. "
            f"Nothing was written; if nothing is writing it, remove it and retry")
        self.partial = partial
        self.what = what


@contextlib.contextmanager
def written_whole(path: str) -> Iterator[BinaryIO]:
    """Yield PATH.partial, created private and new, to write; once the block ends without an
    exception it is fsync'd and renamed over `path` (the caller decides before whether `path`
    may be replaced). InTheWay when PATH.partial exists; OSError as the system says."""
    partial = path + PARTIAL_SUFFIX
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(partial, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        raise InTheWay(partial, describe(partial)) from None
    done = False
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
        done = True
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(partial)
    _fsync_directory(path)


def describe(path: str) -> str:
    """What is at `path`, without following a symbolic link: "a symbolic link to TARGET", "a
    regular file of N bytes", "a directory", ..."""
    try:
        found = os.lstat(path)
    except OSError as error:
        return f"unreadable: {error.strerror}"
    if stat.S_ISLNK(found.st_mode):
        try:
            return f"a symbolic link to {os.readlink(path)}"
        except OSError:
            return "a symbolic link"
    if stat.S_ISREG(found.st_mode):
        return f"a regular file of {found.st_size} bytes"
    if stat.S_ISDIR(found.st_mode):
        return "a directory"
    return "a special file"


def _fsync_directory(path: str) -> None:
    directory = os.open(os.path.dirname(os.path.abspath(path)),
                        os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
