"""Structured event logs: one JSON object per line, one level vocabulary, for every process.

Replicas, agents and the tools that read their logs (the jepsen-style checker, the benchmarks)
share this module, so the format is defined once:

    {"ts": "2026-12-01T10:00:00.123Z", "level": "info", "logger": "agent", "event":
     "attempt_started", "fence": 12, "job": "etl-1", "task": "load", ...}

- `level` is one of LEVELS, lower-case, in every process;
- `event` names what happened (snake_case, a noun or past participle); records that are not our
  events (a library's own lines, such as pysyncobj's) have `"event": "log"` and a `message`;
- the remaining keys are the event's fields; a value that JSON cannot hold is written as its
  `str()`, and a string longer than MAX_FIELD_CHARS is cut (and says so);
- an exception adds `"traceback"`.

`EventLogger("name").info("event", key=value, ...)` writes one; `configure()` installs the JSON
formatter on the root logger of a process; `read_events(path)` parses a log back (lines that are
not JSON objects, e.g. a crash's raw output, are skipped and counted).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

LEVELS = ("debug", "info", "warning", "error", "critical")
"""The one level vocabulary of every process's log."""
MAX_FIELD_CHARS = 2_000
"""A string field longer than this is cut in the log (the event stays one line)."""
MAX_LINE_BYTES = 1024 * 1024
"""`read_events` skips a longer line (a log is read back line by line, bounded)."""
LOG_EVENT = "log"
"""The `event` of a record that was not written through an EventLogger."""

_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning",
                logging.ERROR: "error", logging.CRITICAL: "critical"}
_RESERVED = frozenset({"ts", "level", "logger", "event", "message", "traceback"})


class EventLogger:
    """Writes structured events through the standard `logging` machinery (so levels, handlers
    and test capture work as usual)."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    def enabled(self, level: str) -> bool:
        return self.logger.isEnabledFor(_level_number(level))

    def debug(self, event: str, **fields: object) -> None:
        self._log(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: object) -> None:
        self._log(logging.INFO, event, fields)

    def warning(self, event: str, **fields: object) -> None:
        self._log(logging.WARNING, event, fields)

    def error(self, event: str, **fields: object) -> None:
        self._log(logging.ERROR, event, fields)

    def critical(self, event: str, **fields: object) -> None:
        self._log(logging.CRITICAL, event, fields)

    def exception(self, event: str, **fields: object) -> None:
        """An error with the traceback of the exception being handled."""
        self._log(logging.ERROR, event, fields, exc_info=True)

    def bound(self, **fields: object) -> EventLogger:
        """The same logger, adding `fields` to every event (e.g. an agent's group)."""
        child = EventLogger(self.logger.name)
        child._fields = {**self._fields, **fields}
        return child

    _fields: dict[str, object] = {}
    """Added to every event (`bound`); the class's empty one is shared, never mutated."""

    def _log(self, level: int, event: str, fields: dict[str, object],
             exc_info: bool = False) -> None:
        if not self.logger.isEnabledFor(level):
            return
        if self._fields:
            fields = {**fields, **self._fields}
        clash = _RESERVED.intersection(fields)
        assert not clash, f"event {event}: reserved field names {sorted(clash)}"
        self.logger.log(level, "%s", _human(event, fields), exc_info=exc_info,
                        extra={"event": event, "fields": fields}, stacklevel=3)


def _human(event: str, fields: dict[str, object]) -> str:
    """The record's plain message (for handlers other than ours, e.g. pytest's capture)."""
    parts = [event]
    for key, value in fields.items():
        text = str(value)
        parts.append(f"{key}={text!r}" if (" " in text or not text) else f"{key}={text}")
    return " ".join(parts)


class JsonFormatter(logging.Formatter):
    """Formats every record as one JSON line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": _LEVEL_NAMES.get(record.levelno, record.levelname.lower()),
            "logger": record.name,
        }
        event = getattr(record, "event", None)
        if isinstance(event, str):
            document["event"] = event
            fields = getattr(record, "fields", {})
            for key, value in fields.items():
                document[key] = _field(value)
        else:
            document["event"] = LOG_EVENT
            document["message"] = _field(record.getMessage())
        if record.exc_info:
            document["traceback"] = self.formatException(record.exc_info)
        return json.dumps(document, ensure_ascii=False, default=str)


def _timestamp(created_s: float) -> str:
    seconds = int(created_s)
    millis = int((created_s - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _field(value: object) -> object:
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_field(item) for item in value]
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_FIELD_CHARS:
        return text[:MAX_FIELD_CHARS] + f"... ({len(text) - MAX_FIELD_CHARS} more chars)"
    return text


def _level_number(level: str) -> int:
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: one of {', '.join(LEVELS)}")
    number: int = getattr(logging, level.upper())
    return number


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record is emitted, not when it was configured:
    a program (or a test) that swaps stderr later must not leave the log writing to a closed
    stream ("--- Logging error ---" and a traceback on the new one)."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: IO[str]) -> None:
        pass


def configure(level: str = "info", stream: IO[str] | None = None) -> None:
    """Make this process log JSON lines at `level` and above to `stream` (default: stderr, as
    it is at each write)."""
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_level_number(level))


# --- reading logs back ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    ts: str
    level: str
    logger: str
    name: str
    fields: dict[str, Any] = field(default_factory=dict)
    where: str = ""
    """file:line it was read from."""


def parse_line(line: str, where: str = "") -> Event | None:
    """The event on one log line, or None for a line that is not one of ours."""
    try:
        document = json.loads(line)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("event"), str):
        return None
    fields = {k: v for k, v in document.items() if k not in ("ts", "level", "logger", "event")}
    return Event(str(document.get("ts", "")), str(document.get("level", "")),
                 str(document.get("logger", "")), document["event"], fields, where)


@dataclass(slots=True)
class ReadStats:
    lines: int = 0
    skipped: int = 0
    """Lines that were not events (raw output, torn last line, over MAX_LINE_BYTES)."""


def read_events(path: Path, names: Collection[str] | None = None,
                stats: ReadStats | None = None) -> Iterator[Event]:
    """The events of the log at `path` (only those named in `names`, when given), in order.
    Raises OSError if the file cannot be opened."""
    stats = stats if stats is not None else ReadStats()
    with open(path, "rb") as source:
        for number, raw in enumerate(source, 1):
            stats.lines += 1
            if len(raw) > MAX_LINE_BYTES:
                stats.skipped += 1
                continue
            event = parse_line(raw.decode("utf-8", errors="replace"), f"{path.name}:{number}")
            if event is None:
                stats.skipped += 1
            elif names is None or event.name in names:
                yield event
