"""Cron rules on a zone's wall clock: real DST transitions (both directions, a 30-minute shift),
leap days, month ends, day-of-month OR day-of-week, shortcuts, errors that name the field and
token, and properties of `fires_after` (ascending, bounded, resumable from any fire)."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftsched.schedules.cron import CronError, fires_after, parse_cron, zone_of


def ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def utc(values: list[int]) -> list[str]:
    return [dt.datetime.fromtimestamp(v / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
            for v in values]


def local(values: list[int], zone: str) -> list[str]:
    return [dt.datetime.fromtimestamp(v / 1000, zone_of(zone)).strftime("%m-%d %H:%M%z")
            for v in values]


def fires(expr: str, zone: str, after: str, limit: int) -> list[int]:
    return fires_after(parse_cron(expr), zone_of(zone), ms(after), limit)


# --- DST ------------------------------------------------------------------------------------


def test_berlin_spring_forward_skips_the_local_time_that_does_not_exist() -> None:
    """2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist that day, so it fires nothing."""
    got = fires("30 2 * * *", "Europe/Berlin", "2026-03-27T00:00Z", 4)
    assert local(got, "Europe/Berlin") == ["03-27 02:30+0100", "03-28 02:30+0100",
                                           "03-30 02:30+0200", "03-31 02:30+0200"]


def test_berlin_fall_back_fires_each_occurrence_of_the_repeated_hour() -> None:
    """2026-10-25 03:00 CEST -> 02:00 CET: 02:00 and 02:30 happen twice, an hour apart."""
    got = fires("*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00Z", 6)
    assert utc(got) == ["2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T01:00Z",
                        "2026-10-25T01:30Z", "2026-10-26T01:00Z", "2026-10-26T01:30Z"]


def test_an_hourly_rule_across_berlin_fall_back_fires_25_times_that_day() -> None:
    got = fires("0 * * * *", "Europe/Berlin", "2026-10-24T21:59Z", 30)
    day = [v for v in got if local([v], "Europe/Berlin")[0].startswith("10-25")]
    assert len(day) == 25 and len(set(day)) == 25
    assert all(b - a == 3_600_000 for a, b in itertools.pairwise(got))


def test_new_york_both_transitions() -> None:
    """2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST."""
    spring = fires("15 2 * * *", "America/New_York", "2026-03-07T00:00Z", 2)
    assert local(spring, "America/New_York") == ["03-07 02:15-0500", "03-09 02:15-0400"]
    fall = fires("15 1 * * *", "America/New_York", "2026-10-31T12:00Z", 3)
    assert local(fall, "America/New_York") == ["11-01 01:15-0400", "11-01 01:15-0500",
                                               "11-02 01:15-0500"]


def test_lord_howe_shifts_by_half_an_hour() -> None:
    """Australia/Lord_Howe: +11 in summer, +10:30 in winter; on 2026-04-05 02:00 local goes back
    to 01:30, so 01:30..01:59 happen twice, 30 minutes apart."""
    got = fires("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00Z", 3)
    assert local(got, "Australia/Lord_Howe") == ["04-05 01:45+1100", "04-05 01:45+1030",
                                                 "04-06 01:45+1030"]
    assert got[1] - got[0] == 30 * 60_000


def test_a_fold_at_midnight_fires_each_occurrence_in_order() -> None:
    """America/Santiago ends DST at midnight: 2026-04-05 00:00 -03 goes back to 04-04 23:00 -04,
    so 23:30 of 4 April happens twice, and the walk must look back across the local day."""
    got = fires("30 23 * * *", "America/Santiago", "2026-04-04T12:00Z", 3)
    assert local(got, "America/Santiago") == ["04-04 23:30-0300", "04-04 23:30-0400",
                                              "04-05 23:30-0400"]


def test_a_half_hour_zone_without_dst_keeps_its_offset() -> None:
    got = fires("0 9 * * *", "Asia/Kolkata", "2026-03-01T00:00Z", 2)
    assert utc(got) == ["2026-03-01T03:30Z", "2026-03-02T03:30Z"]


# --- calendar -------------------------------------------------------------------------------


def test_29_february_fires_only_in_leap_years() -> None:
    got = fires("0 12 29 2 *", "UTC", "2026-01-01T00:00Z", 3)
    assert utc(got) == ["2028-02-29T12:00Z", "2032-02-29T12:00Z", "2036-02-29T12:00Z"]


def test_the_31st_skips_the_months_without_one() -> None:
    got = fires("0 0 31 * *", "UTC", "2026-01-01T00:00Z", 4)
    assert utc(got) == ["2026-01-31T00:00Z", "2026-03-31T00:00Z", "2026-05-31T00:00Z",
                        "2026-07-31T00:00Z"]


def test_day_of_month_and_day_of_week_are_ored_when_both_are_restricted() -> None:
    """Vixie cron: "0 0 13 * 5" is every 13th AND every Friday; "*/1" in one makes it AND."""
    got = fires("0 0 13 * fri", "UTC", "2026-02-01T00:00Z", 5)
    assert utc(got) == ["2026-02-06T00:00Z", "2026-02-13T00:00Z", "2026-02-20T00:00Z",
                        "2026-02-27T00:00Z", "2026-03-06T00:00Z"]
    anded = fires("0 0 */1 * 5", "UTC", "2026-02-01T00:00Z", 2)
    assert utc(anded) == ["2026-02-06T00:00Z", "2026-02-13T00:00Z"]


def test_sunday_is_0_and_7_and_names_work() -> None:
    assert parse_cron("0 0 * * 7").weekdays == parse_cron("0 0 * * sun").weekdays == {0}
    assert parse_cron("0 0 * jan-mar mon-fri").months == {1, 2, 3}


@pytest.mark.parametrize(("shortcut", "expanded"), [
    ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *")])
def test_shortcuts_expand(shortcut: str, expanded: str) -> None:
    assert parse_cron(shortcut).text == expanded
    assert parse_cron(shortcut.upper()).text == expanded


def test_steps_ranges_and_lists() -> None:
    cron = parse_cron("5/15 1-5/2,20 * * *")
    assert cron.minutes == (5, 20, 35, 50) and cron.hours == (1, 3, 5, 20)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("expr", "message"), [
    ("61 * * * *", "field 1 (minute): '61' is out of range 0-59"),
    ("* 25 * * *", "field 2 (hour): '25' is out of range 0-23"),
    ("* * 0 * *", "field 3 (day of month): '0' is out of range 1-31"),
    ("* * * 13 *", "field 4 (month): '13' is out of range 1-12"),
    ("* * * * 8", "field 5 (day of week): '8' is out of range 0-7"),
    ("* * * * * *", "expected 5 fields"),
    ("@reboot", "unknown shortcut '@reboot'"),
    ("0 0 30 2 *", "day 30 occurs in none of the rule's months (2): it would never fire"),
    ("x * * * *", "field 1 (minute): 'x' is not a number"),
    ("5-1 * * * *", "range '5-1' runs backwards"),
    ("*/0 * * * *", "step '0' in '*/0' must be an integer in 1-59"),
    ("1,,2 * * * *", "field 1 (minute): an empty item"),
    ("* * * foo *", "field 4 (month): 'foo' is not a number or a name (jan"),
    ("", "expected 5 fields"),
])
def test_a_bad_expression_names_its_field_and_token(expr: str, message: str) -> None:
    with pytest.raises(CronError) as caught:
        parse_cron(expr)
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["Europe/Berlinn", "../../etc/passwd", "", "/etc/localtime",
                                  "Mars/Olympus_Mons"])
def test_an_unknown_zone_is_refused_by_name(name: str) -> None:
    with pytest.raises(CronError) as caught:
        zone_of(name)
    assert repr(name) in str(caught.value)


# --- bounds and properties ------------------------------------------------------------------


def test_until_and_limit_bound_the_answer() -> None:
    cron, zone = parse_cron("* * * * *"), zone_of("UTC")
    start = ms("2026-01-01T00:00Z")
    assert fires_after(cron, zone, start, 0) == []
    assert len(fires_after(cron, zone, start, 10)) == 10
    assert fires_after(cron, zone, start, 100, until_ms=start + 180_000) == [
        start + 60_000, start + 120_000, start + 180_000]


EXPRESSIONS = ["* * * * *", "*/7 * * * *", "0 2 * * *", "30 1,2,3 * * *", "0 0 29 2 *",
               "15 */5 1,15 * mon", "0 12 * * 1-5", "@hourly", "45 23 31 12 *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata",
         "Pacific/Apia", "America/St_Johns"]
INSTANTS = st.integers(min_value=ms("2000-01-01T00:00Z"), max_value=ms("2090-01-01T00:00Z"))


@settings(max_examples=150, deadline=None, print_blob=True)
@given(expr=st.sampled_from(EXPRESSIONS), zone=st.sampled_from(ZONES), after=INSTANTS,
       limit=st.integers(min_value=1, max_value=12), k=st.integers(min_value=1, max_value=11))
def test_fires_ascend_and_resuming_from_any_fire_gives_the_same_rest(
        expr: str, zone: str, after: int, limit: int, k: int) -> None:
    """What makes a failover fire nothing twice and skip nothing: a new leader resumes from the
    last fired time and finds exactly the times the old one would have fired next."""
    cron, tz = parse_cron(expr), zone_of(zone)
    got = fires_after(cron, tz, after, limit)
    assert got == sorted(set(got)) and all(v > after for v in got) and len(got) <= limit
    if 0 < k < len(got):
        assert fires_after(cron, tz, got[k - 1], limit - k) == got[k:]
    for value in got:  # each instant reads, on the zone's wall clock, as a time the rule names
        wall = dt.datetime.fromtimestamp(value / 1000, tz)
        assert wall.minute in cron.minutes and wall.hour in cron.hours
        assert cron.day_matches(wall.date())


@settings(max_examples=60, deadline=None, print_blob=True)
@given(zone=st.sampled_from(ZONES), after=INSTANTS)
def test_no_matching_minute_is_missed(zone: str, after: int) -> None:
    """Against brute force: every minute of the next two days whose wall-clock reading matches
    "*/20 * * * *" is a fire, and nothing else is."""
    cron, tz = parse_cron("*/20 * * * *"), zone_of(zone)
    horizon = after + 2 * 86_400_000
    got = fires_after(cron, tz, after, 1_000, until_ms=horizon)
    first = (after // 60_000 + 1) * 60_000
    expected = [m for m in range(first, horizon + 1, 60_000)
                if dt.datetime.fromtimestamp(m / 1000, tz).minute % 20 == 0]
    assert got == expected
