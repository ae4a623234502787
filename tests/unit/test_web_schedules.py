"""The console's schedules pages in process (Starlette's TestClient, a fake scheduler client):
the list, one schedule with its next times on the zone's wall clock and its runs linking to
their jobs, pause / resume behind the session's CSRF token, read-only and unknown schedules."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.web.app import build_app
from raftsched.web.console import Options
from tests.support.web import csrf_of
from tests.unit.test_web_app import USER, FakeClient

FALL_BACK_0030Z = 1_792_888_200_000  # 2026-10-25T00:30:00Z: 02:30 CEST in Europe/Berlin
HOUR_MS = 3_600_000


class SchedulesClient(FakeClient):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.set_calls: list[tuple[str, bool, str]] = []

    def _info(self, schedule_id: str, paused: bool = False) -> pb.ScheduleInfo:
        return pb.ScheduleInfo(
            schedule_id=schedule_id, tenant="a", rule="cron 30 2 * * *", zone="Europe/Berlin",
            overlap="skip", catchup_window_ms=600_000, paused=paused, note="",
            fired=3, skipped={"overlap": 1},
            next_ms=[FALL_BACK_0030Z, FALL_BACK_0030Z + HOUR_MS],
            runs=[pb.ScheduleRun(nominal_ms=FALL_BACK_0030Z - 24 * HOUR_MS,
                                 job_id="nightly-20261024T003000Z", state="SUCCEEDED")])

    def list_schedules(self, tenant: str = "") -> Any:
        return pb.ListSchedulesResponse(schedules=[self._info("nightly"),
                                                   self._info("hourly", paused=True)])

    def get_schedule(self, schedule_id: str) -> Any:
        if schedule_id != "nightly":
            raise RaftschedError(Code.NOT_FOUND, f"schedule {schedule_id} not found")
        return self._info(schedule_id)

    def set_schedule(self, schedule_id: str, paused: bool, note: str = "") -> Any:
        self.set_calls.append((schedule_id, paused, note))
        return self._info(schedule_id, paused)


def _signed_in(made: list[SchedulesClient], read_only: bool = False) -> TestClient:
    def make(token: str) -> SchedulesClient:
        made.append(SchedulesClient(token))
        return made[-1]
    browser = TestClient(build_app(Options(make_client=make, read_only=read_only)),
                         base_url="https://console.test", follow_redirects=False)
    assert browser.post("/login", data={"token": USER}).status_code == 303
    return browser


def test_the_list_links_each_schedule_with_its_rule_zone_and_state() -> None:
    page = _signed_in([]).get("/schedules").text
    assert 'href="/schedules/nightly"' in page and 'data-paused="yes"' in page
    assert "cron 30 2 * * *" in page and "Europe/Berlin" in page
    assert '<a href="/schedules">Schedules</a>' in page  # in the navigation


def test_a_schedule_shows_its_next_times_on_the_zones_wall_clock_and_its_runs() -> None:
    page = _signed_in([]).get("/schedules/nightly").text
    # the fall-back night: 02:30 CEST, then 02:30 again an hour later in CET
    assert "Sun 2026-10-25 02:30:00 CEST (+0200)" in page
    assert "Sun 2026-10-25 02:30:00 CET (+0100)" in page
    assert "2026-10-25 00:30:00 UTC" in page and "2026-10-25 01:30:00 UTC" in page
    assert 'href="/jobs/nightly-20261024T003000Z"' in page
    assert 'data-reason="overlap"' in page


def test_pause_needs_the_sessions_csrf_token_and_carries_the_note() -> None:
    made: list[SchedulesClient] = []
    browser = _signed_in(made)
    page = browser.get("/schedules/nightly").text
    assert browser.post("/schedules/nightly/pause", data={"csrf": "forged"}).status_code == 403
    assert made[-1].set_calls == []
    answer = browser.post("/schedules/nightly/pause",
                          data={"csrf": csrf_of(page), "note": "disk swap"})
    assert answer.status_code == 303 and answer.headers["location"] == "/schedules/nightly"
    browser.post("/schedules/nightly/resume", data={"csrf": csrf_of(page)})
    assert made[-1].set_calls == [("nightly", True, "disk swap"), ("nightly", False, "")]


def test_a_read_only_console_shows_no_action_and_refuses_one() -> None:
    made: list[SchedulesClient] = []
    browser = _signed_in(made, read_only=True)
    page = browser.get("/schedules/nightly").text
    assert 'data-action="pause"' not in page
    csrf = csrf_of(browser.get("/jobs").text)  # the sign-out form's: a valid token
    assert browser.post("/schedules/nightly/pause", data={"csrf": csrf}).status_code == 403
    assert made[-1].set_calls == []


@pytest.mark.parametrize("path", ["/schedules/nope", "/schedules/%00bad"])
def test_an_unknown_or_malformed_schedule_is_404(path: str) -> None:
    answer = _signed_in([]).get(path)
    assert answer.status_code == 404
