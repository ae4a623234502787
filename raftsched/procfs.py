"""Process identity from Linux /proc: a pid plus its start time, since a pid alone may be reused.

The one /proc reader of the project. A shared leaf, standard library only: the agent and its task
wrapper (`agent.runner`) import it as well as the process supervisor (`raftsched.dev`).

A start time is `starttime` of proc(5): clock ticks since boot, an integer that never changes for
the life of a process, so "same pid, same start ticks" is "same process" (exact, no float
rounding), and it can be written to a file and compared again by a later program.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

PROC_ROOT = Path("/proc")
STARTTIME_FIELD = 22
"""`starttime` in proc(5), counted from 1; the fields after `comm` (field 2) start at field 3."""
SESSION_FIELD = 6
"""`session` in proc(5), counted as STARTTIME_FIELD is."""
GONE_STATES = frozenset({"Z", "X", "x"})
"""States of a process that has exited (zombie: not reaped yet; dead)."""

StatReader = Callable[[int], "str | None"]


class ProcStat(NamedTuple):
    state: str
    """One letter: R S D T t Z X ..."""
    start_ticks: int
    ppid: int
    comm: str
    """The command name (the executable's, at most 15 characters)."""
    session: int = 0
    """The session id (`session`, field 6): the pid of the session's leader, which no new
    process is given while the session has members."""


def parse_stat(text: str) -> ProcStat:
    """The state, start time, parent, command name and session from a /proc/PID/stat line. The
    command name (field 2) is in parentheses and may itself hold spaces and parentheses, so
    fields are counted from the last ')'."""
    close = text.rindex(")")
    rest = text[close + 2:].split()
    return ProcStat(rest[0], int(rest[STARTTIME_FIELD - 3]), int(rest[1]),
                    text[text.index("(") + 1:close], int(rest[SESSION_FIELD - 3]))


def read_stat(pid: int) -> str | None:
    """The text of /proc/PID/stat, or None when there is no such process."""
    if pid <= 0:
        return None
    try:
        return (PROC_ROOT / str(pid) / "stat").read_text()
    except OSError:  # FileNotFoundError, ProcessLookupError (it exited while being read), ...
        return None


def process_stat(pid: int, read: StatReader = read_stat) -> ProcStat | None:
    """The state and start time of `pid`, or None when there is no such process."""
    text = read(pid)
    return None if text is None else parse_stat(text)


def start_ticks(pid: int, read: StatReader = read_stat) -> int | None:
    """The start time of `pid` (also of a zombie, which still holds its pid), or None."""
    stat = process_stat(pid, read)
    return None if stat is None else stat.start_ticks


def is_alive(pid: int, expected_start_ticks: int | None, read: StatReader = read_stat) -> bool:
    """True if `pid` is a live (not zombie) process that started at `expected_start_ticks`.

    With no expected start time, any live process with that pid counts (the caller accepts the
    risk of a reused pid)."""
    stat = process_stat(pid, read)
    if stat is None or stat.state in GONE_STATES:
        return False
    return expected_start_ticks is None or stat.start_ticks == expected_start_ticks


def pids() -> list[int]:
    """Every process id /proc lists now."""
    try:
        return [int(entry.name) for entry in PROC_ROOT.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def read_environ(pid: int) -> list[bytes] | None:
    """`pid`'s environment as NAME=VALUE entries, or None when it is gone or not ours to read."""
    try:
        return (PROC_ROOT / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None


def owner_uid(pid: int) -> int | None:
    """The effective uid `pid` runs as (the owner of /proc/PID), or None when it is gone."""
    try:
        return (PROC_ROOT / str(pid)).stat().st_uid
    except OSError:
        return None


def available() -> bool:
    """Whether this machine has a Linux /proc to read identities from."""
    return (PROC_ROOT / "self" / "stat").exists()


def resident_bytes(pid: int) -> int | None:
    """The resident set size of `pid` in bytes (`VmRSS` in /proc/PID/status, given in kB), or
    None when there is no such process or it has no memory left (a zombie)."""
    try:
        text = (PROC_ROOT / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None
