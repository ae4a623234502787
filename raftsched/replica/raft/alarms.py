"""pysyncobj log lines that mean trouble, counted per replica (by tick thread)."""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(slots=True)
class LibraryAlarms:
    """pysyncobj log lines that mean trouble, counted per replica (by tick thread)."""

    truncated_applied: int = 0
    """CRITICAL "truncating already-applied log entries" (see the module docstring)."""
    tick_failures: int = 0
    """"failed _onTick in _autoTickThread": an exception escaped a tick."""
    dump_failures: int = 0
    """"Failed to store full dump" / "failed to load full dump"."""


_ALARM_PREFIXES = (
    ("truncating already-applied", "truncated_applied"),
    ("failed _onTick", "tick_failures"),
    ("Failed to store full dump", "dump_failures"),
    ("failed to load full dump", "dump_failures"),
)


class _AlarmFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.by_thread: dict[int, LibraryAlarms] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        alarms = self.by_thread.get(record.thread or 0)
        if alarms is not None and isinstance(record.msg, str):
            for prefix, counter in _ALARM_PREFIXES:
                if record.msg.startswith(prefix):
                    setattr(alarms, counter, getattr(alarms, counter) + 1)
        return True


ALARM_FILTER = _AlarmFilter()
logging.getLogger("pysyncobj.syncobj").addFilter(ALARM_FILTER)
