"""A schedule file's `schedule:` table with a cron rule, a zone and start/end bounds: what it
stores, the errors (each names the field and the bad token), and the fire times the leader's
timer derives from the stored rule."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from raftsched.replica.firing import cron_rule, due_times
from raftsched.schedules.file import ScheduleFile, parse_schedule_text
from raftsched.spec.model import SpecError
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm
from raftsched.state.model import State
from raftsched.state.outcome import Applied
from tests.support.fsmkit import job_doc, task_doc

JOB = """
name: nightly
tasks:
  - id: a
    command: ["true"]
schedule:
"""


def parse(table: str) -> ScheduleFile:
    return parse_schedule_text(JOB + table, source="nightly.yaml")


def ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def test_a_cron_rule_in_a_zone_is_stored_normalised_with_its_bounds() -> None:
    parsed = parse("  cron: '@daily'\n  timezone: Europe/Berlin\n"
                   "  start_at: '2026-03-01T00:00:00+01:00'\n  end_at: 2026-12-31T00:00:00Z\n")
    assert parsed.rule == ["cron", "0 0 * * *", "Europe/Berlin"] and parsed.every_ms == 0
    assert parsed.start_at_ms == ms("2026-02-28T23:00Z")
    assert parsed.end_at_ms == ms("2026-12-31T00:00Z")
    assert parsed.text == "cron '0 0 * * *' (Europe/Berlin)"


def test_an_interval_keeps_its_wire_form_and_may_start_at_a_time() -> None:
    parsed = parse("  every: 1h30m\n  start_at: '2026-01-01T00:00:00Z'\n")
    assert parsed.rule == ["every", 5_400_000] and parsed.every_ms == 5_400_000
    assert parsed.start_at_ms == ms("2026-01-01T00:00Z")


@pytest.mark.parametrize(("table", "message"), [
    ("  cron: '0 25 * * *'\n", "schedule.cron: field 2 (hour): '25' is out of range 0-23"),
    ("  cron: '0 0 * * *'\n  timezone: Europe/Berlinn\n",
     "schedule.timezone: unknown zone 'Europe/Berlinn'"),
    ("  cron: '0 0 * * *'\n  every: 5m\n", "schedule: give exactly one of 'cron'"),
    ("  overlap: skip\n", "schedule: give exactly one of 'cron'"),
    ("  cron: '0 0 * * *'\n  start_at: yesterday\n",
     "schedule.start_at: expected an RFC 3339 time with an offset or Z"),
    ("  cron: '0 0 * * *'\n  start_at: '2026-01-01T00:00:00'\n",
     "schedule.start_at: expected an RFC 3339 time with an offset or Z"),
    ("  cron: '0 0 * * *'\n  start_at: '2026-02-01T00:00:00Z'\n"
     "  end_at: '2026-01-01T00:00:00Z'\n", "schedule.end_at: must be after start_at"),
    ("  cron: '0 0 * * *'\n  tz: UTC\n", "schedule.tz: unknown key"),
])
def test_a_bad_table_names_the_field_and_token(table: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse(table)
    rendered = [issue.render() for issue in caught.value.issues]
    assert any(message in line for line in rendered), rendered


def _created(rule: list[Any], start_ms: int = 0, end_ms: int = 0) -> State:
    state = State()
    spec = doc_to_wire(job_doc([task_doc("a")]))
    outcome = fsm.apply_command(state, c.ScheduleCreate(
        "berlin", spec, rule, 0, start_ms, end_ms, "allow", 600_000, 0, ms("2026-10-01T00:00Z")))
    assert isinstance(outcome, Applied), outcome
    return state


def test_the_leaders_timer_fires_a_cron_rule_on_its_zones_wall_clock() -> None:
    """Across Berlin's fall-back night "30 2 * * *" fires twice (two instants an hour apart),
    and end_at bounds what is due."""
    state = _created(["cron", "30 2 * * *", "Europe/Berlin"], end_ms=ms("2026-10-26T23:00Z"))
    schedule = state.schedules["berlin"]
    got = due_times(schedule, ms("2026-10-24T00:00Z"), ms("2026-12-01T00:00Z"), 10)
    assert got == [ms("2026-10-24T00:30Z"), ms("2026-10-25T00:30Z"), ms("2026-10-25T01:30Z"),
                   ms("2026-10-26T01:30Z")]


def test_start_at_bounds_a_cron_rule_from_below() -> None:
    state = _created(["cron", "0 * * * *", "UTC"], start_ms=ms("2026-10-24T05:00Z"))
    got = due_times(state.schedules["berlin"], 0, ms("2026-10-24T07:00Z"), 10)
    assert got == [ms("2026-10-24T05:00Z"), ms("2026-10-24T06:00Z"), ms("2026-10-24T07:00Z")]


def test_a_rule_this_replica_cannot_read_fires_nothing() -> None:
    """A zone missing from this replica's tzdata (or a corrupt wire form) is no crash: nothing
    is due, and the replica says why in its log."""
    assert cron_rule(["cron", "0 0 * * *", "Nowhere/Atlantis"]) is None
    assert cron_rule(["cron", 5]) is None
    state = _created(["cron", "0 0 * * *", "Nowhere/Atlantis"])
    assert due_times(state.schedules["berlin"], 0, ms("2027-01-01T00:00Z"), 10) == []


def test_a_schedules_job_may_have_params_with_defaults_but_none_required() -> None:
    with_default = JOB.replace("name: nightly\n", "name: nightly\nparams: {region: eu}\n")
    parsed = parse_schedule_text(with_default + "  every: 1h\n", source="nightly.yaml")
    assert parsed.spec.params == (("region", "eu"),)
    required = JOB.replace("name: nightly\n", "name: nightly\nparams: {date: null}\n")
    with pytest.raises(SpecError) as refused:
        parse_schedule_text(required + "  every: 1h\n", source="nightly.yaml")
    assert str(refused.value) == ("params.date: required (no default): a schedule's job needs a "
                                  "default for every param (nobody can give one when it fires)")
