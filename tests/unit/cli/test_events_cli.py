"""`raftsched events`'s lines: one human line per event with free text escaped, none for a
progress event, and the --json fields."""

from __future__ import annotations

from raftsched.api import raftsched_pb2 as pb
from raftsched.cli.events import EVENT_FIELDS, event_doc, event_line


def test_a_human_line_escapes_free_text_and_names_the_attempt() -> None:
    event = pb.Event(index=42, seq=1, kind="attempt", job_id="j", task_id="t", state="FAILED",
                     fence=7, attempt=2, cluster_id="east", reason="boom\x1b[2J\n",
                     at_ms=1_700_000_000_000)
    line = event_line(event)
    assert line.startswith("#42.1 2023-11-14T22:13:20Z attempt j/t #2 fence 7 on east FAILED")
    assert "\x1b" not in line and "\n" not in line and "boom\\x1b[2J\\n" in line


def test_a_progress_event_prints_no_human_line_and_every_field_in_json() -> None:
    assert event_line(pb.Event(index=9, kind="progress")) == ""
    doc = event_doc(pb.Event(index=9, kind="progress"))
    assert tuple(doc) == EVENT_FIELDS and doc["index"] == 9 and doc["kind"] == "progress"
    assert set(EVENT_FIELDS) == {f.name for f in pb.Event.DESCRIPTOR.fields}
