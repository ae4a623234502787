"""Process identity from /proc: a pid plus its start time, since a pid alone may be reused.

Standard library only: the task wrapper (`agent.runner`) imports it. Linux-specific, like the
agent.
"""

from __future__ import annotations

from pathlib import Path

PROC_ROOT = Path("/proc")
_STARTTIME_FIELD = 22
"""`starttime` in proc(5), counted from 1; the fields after `comm` start at field 3."""


def process_status(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of `pid`, or None if there is no
    such process."""
    try:
        text = (PROC_ROOT / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return None
    # comm (field 2) is in parentheses and may itself contain spaces and ')'.
    rest = text[text.rindex(")") + 2:].split()
    state = rest[0]
    start_ticks = int(rest[_STARTTIME_FIELD - 3])
    return state, start_ticks


def start_ticks(pid: int) -> int | None:
    status = process_status(pid)
    return None if status is None else status[1]


def is_alive(pid: int, expected_start_ticks: int | None) -> bool:
    """True if `pid` is a live (not zombie) process that started at `expected_start_ticks`.

    With no expected start time, a live pid counts (the caller accepts the reuse risk)."""
    status = process_status(pid)
    if status is None:
        return False
    state, ticks = status
    if state in ("Z", "X", "x"):
        return False
    return expected_start_ticks is None or ticks == expected_start_ticks
