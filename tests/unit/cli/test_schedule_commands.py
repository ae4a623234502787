"""`raftsched schedule ...` and `job list --schedule` against a fake client: the JSON contract
of issue 25 (create -> {"schedule_id"}; show -> {"schedule_id", "paused", "next", "runs"}
newest first), a bad file refused naming the field before anything is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftsched.api import raftsched_pb2 as pb
from raftsched.cli import common
from tests.unit.cli.test_commands import FakeClient, Made, made, run, run_json

__all__ = ["made"]  # the fixture, used by name

SCHEDULE = """
name: nightly
schedule: {every: 1h, overlap: buffer_one}
tasks:
  - {id: a, command: ["true"]}
"""


class ScheduleClient(FakeClient):
    def create_schedule(self, schedule_id: str, spec_text: str) -> Any:
        self._call("create_schedule", schedule_id, spec_text)
        return pb.CreateScheduleResponse(schedule_id=schedule_id, created=True)

    def get_schedule(self, schedule_id: str) -> Any:
        self._call("get_schedule", schedule_id)
        return pb.ScheduleInfo(
            schedule_id=schedule_id, tenant="default", rule="every 3600s", zone="Europe/Berlin",
            overlap="buffer_one", next_ms=[7_200_000 * k for k in range(1, 11)],
            runs=[pb.ScheduleRun(nominal_ms=3_600_000, job_id="nightly-19700101T010000Z",
                                 state="RUNNING"),
                  pb.ScheduleRun(nominal_ms=0, job_id="nightly-19700101T000000Z",
                                 state="SUCCEEDED")], fired=2, skipped={"overlap": 1})

    def set_schedule(self, schedule_id: str, paused: bool, note: str = "") -> Any:
        self._call("set_schedule", schedule_id, paused, note)
        return self.get_schedule(schedule_id)

    def backfill_schedule(self, schedule_id: str, from_ms: int, to_ms: int,
                          max_concurrent: int = 1) -> Any:
        self._call("backfill_schedule", schedule_id, from_ms, to_ms, max_concurrent)
        return pb.ScheduleRunsResponse(job_ids=["x"], queued=3, skipped=1)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, made: Made) -> ScheduleClient:
    client = ScheduleClient()
    monkeypatch.setattr(common, "make_client", lambda *_a, **_k: client)
    return client


def test_create_checks_the_file_then_sends_it(capsys: pytest.CaptureFixture[str],
                                              fake: ScheduleClient, tmp_path: Path) -> None:
    path = tmp_path / "nightly.yaml"
    path.write_text(SCHEDULE)
    code, document = run_json(capsys, "schedule", "create", str(path))
    assert (code, document) == (0, {"schedule_id": "nightly", "created": True})
    assert fake.calls[-1] == ("create_schedule", ("nightly", SCHEDULE))


def test_a_bad_schedule_table_is_refused_naming_the_field_and_sends_nothing(
        capsys: pytest.CaptureFixture[str], fake: ScheduleClient, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(SCHEDULE.replace("every: 1h", "every: 25x"))
    code, out, err = run(capsys, "schedule", "create", str(path))
    assert code == 2 and "schedule.every" in out + err, out + err
    assert fake.calls == []
    code, document = run_json(capsys, "schedule", "create", str(path))
    assert code == 2 and document["error"]["issues"][0]["path"] == "schedule.every"
    assert fake.calls == []


def test_show_json_contract(capsys: pytest.CaptureFixture[str], fake: ScheduleClient) -> None:
    code, document = run_json(capsys, "schedule", "show", "nightly")
    assert code == 0 and document["schedule_id"] == "nightly" and document["paused"] is False
    assert document["next"][:2] == ["1970-01-01T02:00:00Z", "1970-01-01T04:00:00Z"]
    assert len(document["next"]) == 10
    assert document["runs"][0] == {"nominal_time": "1970-01-01T01:00:00Z",
                                   "job_id": "nightly-19700101T010000Z", "state": "RUNNING"}


def test_pause_note_and_backfill_times(capsys: pytest.CaptureFixture[str],
                                       fake: ScheduleClient) -> None:
    assert run(capsys, "schedule", "pause", "nightly", "--note", "db migration")[0] == 0
    assert fake.calls[0] == ("set_schedule", ("nightly", True, "db migration"))
    code, document = run_json(capsys, "schedule", "backfill", "nightly", "--from",
                              "1970-01-01T00:00:00Z", "--to", "1970-01-01T03:00:00+01:00",
                              "--max-concurrent", "2")
    assert code == 0 and fake.calls[-1] == ("backfill_schedule", ("nightly", 0, 7_200_000, 2))
    assert document == {"schedule_id": "nightly", "job_ids": ["x"], "queued": 3, "skipped": 1}
    code, document = run_json(capsys, "schedule", "backfill", "nightly", "--from", "yesterday",
                              "--to", "1970-01-01T00:00:00Z")
    assert code == 2 and "--from" in document["error"]["message"]


def test_job_list_schedule_keeps_only_its_runs(capsys: pytest.CaptureFixture[str],
                                               fake: ScheduleClient,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs of exactly that schedule: not those of a schedule "demo-eu" nor an ordinary
    job whose id starts with "demo-" (the server's query finds all three)."""
    found = [pb.Job(job_id="demo-20261205T010000Z", state="SUCCEEDED", schedule_id="demo"),
             pb.Job(job_id="demo-eu-20261205T010000Z", state="SUCCEEDED",
                    schedule_id="demo-eu"),
             pb.Job(job_id="demo-1f00a2b3c4d5e6f7", state="SUCCEEDED")]

    def listed(*args: Any, **kwargs: Any) -> Any:
        fake._call("list_jobs", *args, *kwargs.values())
        return pb.ListJobsResponse(jobs=found)

    monkeypatch.setattr(fake, "list_jobs", listed)
    code, document = run_json(capsys, "job", "list", "--schedule", "demo")
    assert code == 0 and fake.calls[-1] == ("list_jobs", ("", "", 0, "", "demo-", False))
    assert [j["job_id"] for j in document["jobs"]] == ["demo-20261205T010000Z"]
    assert document["jobs"][0]["schedule_id"] == "demo"
    code, document = run_json(capsys, "job", "list", "--schedule", "dem")
    assert code == 0 and document["jobs"] == []


def test_show_text(capsys: pytest.CaptureFixture[str], fake: ScheduleClient) -> None:
    code, out, _ = run(capsys, "schedule", "show", "nightly")
    lines = out.splitlines()
    assert code == 0 and "paused             no" in lines
    assert "skipped            overlap 1" in lines
    # the next 10 times on the schedule zone's wall clock, one per line
    at = lines.index("next (Europe/Berlin) 1970-01-01T03:00:00+01:00")
    assert lines[at + 1:at + 10] == [f"                   1970-01-{1 + h // 24:02d}T"
                                     f"{h % 24:02d}:00:00+01:00" for h in range(5, 23, 2)]
    assert lines[-3:] == ["NOMINAL               JOB                       STATE",
                          "1970-01-01T01:00:00Z  nightly-19700101T010000Z  RUNNING",
                          "1970-01-01T00:00:00Z  nightly-19700101T000000Z  SUCCEEDED"]
