"""Cron rules on a time zone's wall clock (issue 25): parse a 5-field expression with precise
errors, and list its fire instants. Pure: no clock, no randomness; time zones from `zoneinfo`.

The rule (docs/schedules.md, "Time zones and DST"):
- an expression is matched against the zone's WALL CLOCK: the matching local times are
  enumerated minute by minute in calendar order, each then mapped to UTC;
- a local time that does not exist (a spring-forward gap) is SKIPPED: it fires nothing;
- a local time that occurs twice (a fall-back fold) fires for EACH occurrence: two UTC instants,
  an hour (or the zone's shift) apart;
- day-of-month and day-of-week are OR-ed when both are restricted, AND-ed when either starts with
  `*` (Vixie cron, as every peer's cron does); 0 and 7 are both Sunday; names jan..dec, sun..sat.

Written here rather than taken from `croniter`: its errors do not name the field and token, and
its DST behaviour is its own (it moves a skipped time forward and fires a repeated one once),
while the rule above is what the peers converged on and what this scheduler documents. The
matcher is a set per field and a day-by-day walk that gives up after CRON_SEARCH_DAYS days
without a match."""

from __future__ import annotations

import calendar
import datetime as dt
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from raftsched import limits

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1)
"""Naive: UTC wall time of epoch ms 0."""
MAX_UTC_OFFSET = dt.timedelta(hours=14)
"""A zone's offset lies in [-12 h, +14 h] (Etc/GMT+12 .. Pacific/Kiritimati), so a local time
maps to an instant at most this far from the same digits read as UTC."""
MIN_UTC_OFFSET = dt.timedelta(hours=-12)
OFFSET_SAMPLE_H = 6
OFFSET_SAMPLE_FROM_S = -2_208_988_800  # 1900-01-01
OFFSET_SAMPLE_TO_S = 4_102_444_800  # 2100-01-01

SHORTCUTS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = {name: n for n, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
WEEKDAYS = {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


FIELDS = (Field("minute", 0, 59, {}), Field("hour", 0, 23, {}),
          Field("day of month", 1, 31, {}), Field("month", 1, 12, MONTHS),
          Field("day of week", 0, 7, WEEKDAYS))


class CronError(ValueError):
    """What is wrong with an expression or a zone, as one sentence naming the field and token."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression: the allowed values of each field (day of week 0..6, Sunday 0)."""

    text: str
    """The normalised 5-field text (a shortcut expanded, single spaces)."""
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_restricted: bool
    weekdays_restricted: bool

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        in_weekdays = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays


def parse_cron(text: object) -> Cron:
    """The expression, or CronError: "field 2 (hour) '25' is out of range 0-23"."""
    if not isinstance(text, str) or not text.strip():
        raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week) or one "
                        f"of {', '.join(SHORTCUTS)}, got {text!r}")
    if len(text) > limits.MAX_CRON_CHARS:
        raise CronError(f"at most MAX_CRON_CHARS={limits.MAX_CRON_CHARS} characters, "
                        f"got {len(text)}")
    source = text.strip().lower()
    if source.startswith("@"):
        if source not in SHORTCUTS:
            raise CronError(f"unknown shortcut {text.strip()!r}; known: {', '.join(SHORTCUTS)}")
        source = SHORTCUTS[source]
    parts = source.split()
    if len(parts) != len(FIELDS):
        raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week), got "
                        f"{len(parts)} in {text!r}")
    values = [_field(position, spec, part)
              for position, (spec, part) in enumerate(zip(FIELDS, parts, strict=True), 1)]
    weekdays = frozenset(v % 7 for v in values[4])
    cron = Cron(" ".join(parts), tuple(sorted(values[0])), tuple(sorted(values[1])),
                frozenset(values[2]), frozenset(values[3]), weekdays,
                not parts[2].startswith("*"), not parts[4].startswith("*"))
    _check_days_exist(cron)
    return cron


def _field(position: int, spec: Field, text: str) -> set[int]:
    where = f"field {position} ({spec.name})"
    allowed: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{where}: an empty item in {text!r}")
        allowed.update(_item(where, spec, item))
    return allowed


def _item(where: str, spec: Field, item: str) -> range:
    body, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or not 1 <= int(step_text) <= spec.high:
            raise CronError(f"{where}: step {step_text!r} in {item!r} must be an integer in "
                            f"1-{spec.high}")
        step = int(step_text)
    if body == "*":
        return range(spec.low, spec.high + 1, step)
    first_text, dash, last_text = body.partition("-")
    first = _value(where, spec, first_text, item)
    # Vixie cron: "a/s" is "a-high/s"; a plain "a" is that value alone
    last = _value(where, spec, last_text, item) if dash else (spec.high if slash else first)
    if last < first:
        raise CronError(f"{where}: range {item!r} runs backwards ({first} > {last})")
    return range(first, last + 1, step)


def _value(where: str, spec: Field, text: str, item: str) -> int:
    if text in spec.names:
        return spec.names[text]
    if not text.isdigit():
        names = f" or a name ({', '.join(spec.names)})" if spec.names else ""
        inside = f" in {item!r}" if item != text else ""
        raise CronError(f"{where}: {text!r}{inside} is not a number{names}")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise CronError(f"{where}: {text!r} is out of range {spec.low}-{spec.high}")
    return value


def _check_days_exist(cron: Cron) -> None:
    """A day-of-month-only rule whose days occur in none of its months never fires: refuse it
    ("0 0 30 2 *") rather than accept a schedule that waits forever."""
    if cron.weekdays_restricted and cron.days_restricted:
        return
    longest = max(calendar.monthrange(2024, month)[1] for month in cron.months)  # leap year
    if min(cron.days) > longest:
        months = ", ".join(str(m) for m in sorted(cron.months))
        raise CronError(f"field 3 (day of month): day {min(cron.days)} occurs in none of the "
                        f"rule's months ({months}): it would never fire")


def zone_of(name: object) -> ZoneInfo:
    """The IANA zone, or CronError naming it ("unknown zone 'Europe/Berlinn'")."""
    if not isinstance(name, str) or not name or len(name) > limits.MAX_ZONE_NAME_CHARS \
            or name.startswith(("/", ".")) or ".." in name:
        raise CronError(f"expected an IANA time zone name like 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown zone {name!r} (an IANA name like 'Europe/Berlin' or "
                        f"'America/New_York')") from None


def zone_or_utc(name: str) -> dt.tzinfo:
    """The zone to show times in: `name`'s, or UTC when this machine's tzdata lacks it (a reader
    shows a schedule created on a replica with newer zones)."""
    try:
        return zone_of(name)
    except CronError:
        return UTC


def fires_after(cron: Cron, zone: ZoneInfo, after_ms: int, limit: int,
                until_ms: int | None = None) -> list[int]:
    """The rule's fire instants (UTC epoch ms) strictly after `after_ms`, ascending, at most
    `limit`, none after `until_ms`. Local times are enumerated in calendar order from the
    earliest that can map after `after_ms`; an instant is the local digits read as UTC minus the
    zone's offset, so once `limit` instants are known the walk stops at the first local time
    that cannot map before the last of them (the zone's offset range bounds both)."""
    if limit <= 0:
        return []
    least, most = offset_range(zone)
    after = EPOCH + dt.timedelta(milliseconds=after_ms)
    found: list[int] = []
    for local in _local_times(cron, after + least):
        earliest = _ms(local - most)
        if until_ms is not None and earliest > until_ms:
            break
        if len(found) >= limit and earliest > found[limit - 1]:
            break
        for instant in _instants(local, zone):
            if instant > after_ms and (until_ms is None or instant <= until_ms):
                found.append(instant)
        found.sort()
    return found[:limit]


@functools.lru_cache(maxsize=limits.MAX_ZONES_CACHED)
def offset_range(zone: ZoneInfo) -> tuple[dt.timedelta, dt.timedelta]:
    """(least, most) UTC offset the zone has had or will have, sampled every OFFSET_SAMPLE_H
    hours from 1900 to 2100 (every transition in tzdata lasts far longer), widened by an hour
    each way for safety and clamped to [-12 h, +14 h]. Europe/Berlin: (0 h, +3 h)."""
    step = OFFSET_SAMPLE_H * 3600
    offsets = {dt.datetime.fromtimestamp(t, zone).utcoffset()
               for t in range(OFFSET_SAMPLE_FROM_S, OFFSET_SAMPLE_TO_S, step)}
    known = [o for o in offsets if o is not None]
    least = max(MIN_UTC_OFFSET, min(known, default=MIN_UTC_OFFSET) - dt.timedelta(hours=1))
    most = min(MAX_UTC_OFFSET, max(known, default=MAX_UTC_OFFSET) + dt.timedelta(hours=1))
    return least, most


def _local_times(cron: Cron, start: dt.datetime) -> Iterator[dt.datetime]:
    """The matching local (naive) minutes from `start` on, in calendar order; the walk ends
    after CRON_SEARCH_DAYS days without a match (a rule that fires once in years, 29 February,
    still finds its next day) or at the calendar's end."""
    first_minute = start.hour * 60 + start.minute
    day, last_match = start.date(), start.date()
    while (day - last_match).days <= limits.CRON_SEARCH_DAYS:
        if cron.day_matches(day):
            for hour in cron.hours:
                for minute in cron.minutes:
                    if day == start.date() and hour * 60 + minute < first_minute:
                        continue
                    last_match = day
                    yield dt.datetime(day.year, day.month, day.day, hour, minute)
        if day == dt.date.max:
            return
        day += dt.timedelta(days=1)


def _instants(local: dt.datetime, zone: ZoneInfo) -> list[int]:
    """The UTC instants at which the zone's wall clock reads `local`: none in a gap, two in a
    fold (fold=0 first), else one."""
    instants = []
    for fold in (0, 1):
        aware = local.replace(tzinfo=zone, fold=fold)
        instant = aware.astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == local:  # exists at this fold
            ms = _ms(instant.replace(tzinfo=None))
            if ms not in instants:
                instants.append(ms)
    return instants


def _ms(naive_utc: dt.datetime) -> int:
    delta = naive_utc - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
