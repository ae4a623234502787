"""Structured event logs (raftsched.eventlog): the JSON line format, one level vocabulary, the
shared reader."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftsched import eventlog
from raftsched.eventlog import EventLogger, ReadStats, read_events


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    buffer = io.StringIO()
    eventlog.configure("debug", buffer)
    try:
        yield buffer
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_an_event_is_one_json_line_with_its_fields(stream: io.StringIO) -> None:
    EventLogger("agent").info("attempt_finished", fence=12, job="etl-1", timed_out=False,
                              exit_code=None, reason="killed: fence=9 is newer\nsecond line")
    (document,) = lines(stream)
    assert document["event"] == "attempt_finished" and document["level"] == "info"
    assert document["logger"] == "agent"
    assert (document["fence"], document["job"], document["timed_out"], document["exit_code"]) \
        == (12, "etl-1", False, None)
    assert document["reason"] == "killed: fence=9 is newer\nsecond line"
    assert str(document["ts"]).endswith("Z") and len(str(document["ts"])) == 24


@pytest.mark.parametrize(("method", "level"), [("debug", "debug"), ("info", "info"),
                                               ("warning", "warning"), ("error", "error"),
                                               ("critical", "critical")])
def test_one_level_vocabulary(stream: io.StringIO, method: str, level: str) -> None:
    getattr(EventLogger("raftsched.leader"), method)("something", n=1)
    assert lines(stream)[0]["level"] == level
    assert level in eventlog.LEVELS


def test_a_library_line_and_an_exception_are_events_too(stream: io.StringIO) -> None:
    logging.getLogger("pysyncobj.syncobj").warning("failed _onTick in %s", "tick")
    try:
        raise ValueError("boom")
    except ValueError:
        EventLogger("raftsched.replica").exception("tick_failed", index=3)
    library, failure = lines(stream)
    assert (library["event"], library["message"], library["level"]) == \
        ("log", "failed _onTick in tick", "warning")
    assert failure["event"] == "tick_failed" and failure["index"] == 3
    assert "ValueError: boom" in str(failure["traceback"])


def test_long_values_are_cut_and_odd_values_stringified(stream: io.StringIO) -> None:
    EventLogger("x").info("big", text="a" * (eventlog.MAX_FIELD_CHARS + 10), path=Path("/p"),
                          fences=(1, 2))
    (document,) = lines(stream)
    assert str(document["text"]).endswith("... (10 more chars)")
    assert document["path"] == "/p" and document["fences"] == [1, 2]


def test_reserved_field_names_are_a_bug(stream: io.StringIO) -> None:
    with pytest.raises(AssertionError, match="reserved"):
        EventLogger("x").info("oops", level="high")


def test_below_the_threshold_nothing_is_written() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    buffer = io.StringIO()
    eventlog.configure("warning", buffer)
    try:
        EventLogger("x").info("quiet")
        EventLogger("x").warning("loud")
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    assert [d["event"] for d in lines(buffer)] == ["loud"]
    with pytest.raises(ValueError, match="unknown log level"):
        eventlog.configure("verbose", buffer)


def test_the_reader_returns_events_and_skips_other_lines(stream: io.StringIO,
                                                         tmp_path: Path) -> None:
    log = EventLogger("agent")
    log.info("attempt_started", fence=1, job="j", task="a")
    log.info("heartbeat_failed", error="Unreachable")
    log.info("attempt_started", fence=2, job="j", task="b")
    path = tmp_path / "agent.log"
    path.write_text(stream.getvalue() + "Traceback (most recent call last):\n" + '{"torn": ')
    stats = ReadStats()
    events = list(read_events(path, {"attempt_started"}, stats))
    assert [(e.name, e.fields["fence"], e.where) for e in events] == \
        [("attempt_started", 1, "agent.log:1"), ("attempt_started", 2, "agent.log:3")]
    assert (stats.lines, stats.skipped) == (5, 2)
    assert events[0].level == "info" and events[0].logger == "agent"


def test_the_default_stream_is_stderr_as_it_is_at_each_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stderr swapped after `configure` (pytest's capture does it per test) gets the lines; the
    one it replaced may be closed by then ("--- Logging error ---" once failed a CLI test)."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        eventlog.configure("info")
        later = io.StringIO()
        monkeypatch.setattr(sys, "stderr", later)
        EventLogger("raftsched.test").info("swapped", n=1)
        event = eventlog.parse_line(later.getvalue().strip())
        assert event is not None and event.name == "swapped" and event.fields == {"n": 1}
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
