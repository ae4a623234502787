"""`raftsched events`'s lines: one human line per event with free text escaped, none for a
progress event, and the --json fields; --until-job-ends against a fake client; its help."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched import environment
from raftsched.api import raftsched_pb2 as pb
from raftsched.cli import common
from raftsched.cli import main as cli
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


class _EventsClient:
    """A fake client: `job` for get_job, `events` for watch_events (which records its call)."""

    def __init__(self, job: Any, events: list[Any]) -> None:
        self.job, self.events = job, events
        self.watched: list[tuple[Any, ...]] = []

    def get_job(self, job_id: str) -> Any:
        return self.job

    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]:
        self.watched.append((from_index, job_id, tenant, clusters))
        yield from self.events
        raise AssertionError("followed past the job's end")

    def close(self) -> None:
        pass


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.setenv(common.SERVERS_ENV, "127.0.0.1:7001")
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(tmp_path / "no-dev-cluster"))
    for name in common.TLS_ENV:
        monkeypatch.setenv(name, f"/tls/{name.lower()}.pem")
    return monkeypatch


def _use(monkeypatch: pytest.MonkeyPatch, client: _EventsClient) -> None:
    monkeypatch.setattr(common, "make_client", lambda *args, **kwargs: client)


def _task(index: int, seq: int, state: str) -> Any:
    return pb.Event(index=index, seq=seq, kind="task", job_id="j", task_id="a", state=state)


def test_until_job_ends_exits_0_after_printing_the_terminal_event(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    client = _EventsClient(pb.Job(job_id="j", state="RUNNING", applied_index=40), [
        pb.Event(index=40, kind="progress"), _task(41, 0, "SUCCEEDED"),
        pb.Event(index=41, seq=1, kind="job", job_id="j", state="FAILED")])
    _use(env, client)
    assert cli.main(["events", "--job", "j", "--until-job-ends", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["index"], d["kind"], d["state"]) for d in lines] == [
        (40, "progress", ""), (41, "task", "SUCCEEDED"), (41, "job", "FAILED")]
    assert client.watched == [(40, "j", "", False)]  # from the index the job was read at


def test_until_job_ends_stops_once_past_an_end_from_before_what_it_follows(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The job had ended (read at index 50) before --from 45: its terminal event is not
    among those followed; an event of entry 50 itself does not end it (the terminal event may
    be later in that entry), the next progress past 50 does."""
    client = _EventsClient(pb.Job(job_id="j", state="SUCCEEDED", applied_index=50), [
        pb.Event(index=45, kind="progress"), _task(50, 0, "SUCCEEDED"),
        pb.Event(index=52, kind="progress")])
    _use(env, client)
    assert cli.main(["events", "--job", "j", "--until-job-ends", "--from", "45"]) == 0
    assert capsys.readouterr().out.count("\n") == 1
    assert client.watched == [(45, "j", "", False)]


def test_until_job_ends_ends_on_a_forgotten_job(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _use(env, _EventsClient(pb.Job(job_id="j", state="RUNNING", applied_index=7), [
        pb.Event(index=9, kind="forgotten", job_id="j", state="SUCCEEDED", reason="retention")]))
    assert cli.main(["events", "--job", "j", "--until-job-ends"]) == 0
    assert "forgotten job j SUCCEEDED  (retention)" in capsys.readouterr().out


def test_until_job_ends_needs_a_job(env: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["events", "--until-job-ends"]) == 2
    assert "--until-job-ends needs --job" in capsys.readouterr().err


def test_the_events_help_says_it_prints_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["events", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "print JSON lines on stdout: one JSON object per event" in text
    assert "exactly one JSON object" not in text


def test_a_reader_that_goes_away_ends_the_command_quietly_with_141(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`raftsched events --json | head -1`: stdout is a pipe whose reader closed; the command
    ends with 128 + SIGPIPE and no traceback, and nothing it prints afterwards raises."""
    import os
    import sys

    events = [_task(41 + i, 0, "RUNNING") for i in range(3)]
    _use(env, _EventsClient(pb.Job(job_id="j", state="RUNNING", applied_index=40), events))
    read_end, write_end = os.pipe()
    os.close(read_end)
    with capsys.disabled(), open(write_end, "w") as closed_pipe:
        env.setattr(sys, "stdout", closed_pipe)
        code = cli.main(["events", "--job", "j", "--json"])
        print("after the reader went away")  # lands in /dev/null, does not raise
        closed_pipe.flush()
    assert code == common.EXIT_BROKEN_PIPE == 141
