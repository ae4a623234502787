"""A schedule file (issue 25): a job spec document with a top-level `schedule:` table. Parsed
into the validated job spec and the fields SCHEDULE_CREATE carries; every problem is a
`SpecError` whose issue names the field ("schedule.every: ...").

The table's keys: exactly one of `cron` (5 fields or an @shortcut, on the wall clock of
`timezone`, an IANA name, default UTC: `raftsched.schedules.cron`) and `every` (a duration: "30s",
"5m", "2h", "1d", "1h30m"; at least SCHEDULE_MIN_EVERY_MS; absolute time, anchored at start_at or
the Unix epoch); `start_at` / `end_at` (RFC 3339 with an offset or Z); `overlap` (skip | allow |
buffer_one | cancel_other), `catchup_window_s`, `pause_after_failures`. The rule's wire form is
["every", ms] or ["cron", normalised expression, zone]: opaque to apply, read by the leader."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from raftsched import limits
from raftsched.schedules.cron import CronError, parse_cron, zone_of
from raftsched.spec.issue import SpecIssue
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.text import load_document
from raftsched.spec.validation import validate_job_doc

OVERLAPS = ("skip", "allow", "buffer_one", "cancel_other")
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_UNITS_MS = (86_400_000, 3_600_000, 60_000, 1_000)
SCHEDULE_LAST_TIME_MS = 253_402_300_799_000
"""9999-12-31T23:59:59Z: start_at/end_at past it are refused (and datetime cannot hold more)."""
_KEYS = ("cron", "every", "timezone", "start_at", "end_at", "overlap", "catchup_window_s",
         "pause_after_failures")


@dataclass(frozen=True, slots=True)
class ScheduleFile:
    spec: JobSpec
    rule: list[Any]
    """The rule's wire form (stored, opaque to apply)."""
    text: str
    """The rule as people read it ("every 2s")."""
    every_ms: int
    start_at_ms: int
    end_at_ms: int
    overlap: str
    catchup_window_ms: int
    pause_after_failures: int


def _for_a_schedule(issue: SpecIssue) -> SpecIssue:
    """A required param (no default) says that a schedule's run cannot be given one."""
    if issue.path.startswith("params.") and issue.message.startswith("required"):
        return SpecIssue(issue.path, "required (no default): a schedule's job needs a default "
                                     "for every param (nobody can give one when it fires)")
    return issue


def parse_schedule_text(text: str | bytes, *, source: str) -> ScheduleFile:
    doc = load_document(text, source, bounded=True)
    if not isinstance(doc, dict) or not isinstance(doc.get("schedule"), dict):
        raise SpecError([SpecIssue("schedule", "a schedule file is a job spec with a "
                                               "top-level 'schedule:' table")])
    job = {key: value for key, value in doc.items() if key != "schedule"}
    issues: list[SpecIssue] = []
    fields = _table(doc["schedule"], issues)
    try:
        spec = validate_job_doc(job)
    except SpecError as error:
        issues.extend(_for_a_schedule(issue) for issue in error.issues)
    if issues:
        raise SpecError(issues)
    (rule, text, every_ms), (start_ms, end_ms), overlap, window_ms, failures = fields
    return ScheduleFile(spec, rule, text, every_ms, start_ms, end_ms, overlap, window_ms,
                        failures)


def _table(table: dict[Any, Any],
           issues: list[SpecIssue]) -> tuple[tuple[list[Any], str, int], tuple[int, int], str,
                                             int, int]:
    for key in table:
        if key not in _KEYS:
            issues.append(SpecIssue(f"schedule.{key}", f"unknown key; known: {', '.join(_KEYS)}"))
    rule = _rule(table, issues)
    bounds = _bounds(table, issues)
    overlap = table.get("overlap", "skip")
    if overlap not in OVERLAPS:
        issues.append(SpecIssue("schedule.overlap", f"{overlap!r} is not one of "
                                                    f"{', '.join(OVERLAPS)}"))
    window_s = table.get("catchup_window_s", limits.DEFAULT_SCHEDULE_CATCHUP_WINDOW_MS // 1000)
    window_ms = _bounded_int(window_s, "catchup_window_s", 1000,
                             limits.SCHEDULE_MAX_CATCHUP_WINDOW_MS, issues)
    failures = _bounded_int(table.get("pause_after_failures", 0), "pause_after_failures", 1,
                            limits.SCHEDULE_MAX_PAUSE_AFTER_FAILURES, issues)
    return rule, bounds, str(overlap), window_ms, failures


def _rule(table: dict[Any, Any], issues: list[SpecIssue]) -> tuple[list[Any], str, int]:
    """(wire form, the rule as people read it, every_ms) of exactly one of cron and every."""
    if ("cron" in table) == ("every" in table):
        issues.append(SpecIssue("schedule", "give exactly one of 'cron' (e.g. '0 2 * * *') and "
                                            "'every' (e.g. '30m')"))
        return [], "", 0
    zone = table.get("timezone", "UTC")
    try:
        zone_of(zone)
    except CronError as error:
        issues.append(SpecIssue("schedule.timezone", str(error)))
        zone = "UTC"
    if "every" in table:
        every_ms = _every(table["every"], issues)
        return ["every", every_ms], f"every {_show(every_ms)}", every_ms
    try:
        cron = parse_cron(table["cron"])
    except CronError as error:
        issues.append(SpecIssue("schedule.cron", str(error)))
        return [], "", 0
    return ["cron", cron.text, zone], f"cron '{cron.text}' ({zone})", 0


def _bounds(table: dict[Any, Any], issues: list[SpecIssue]) -> tuple[int, int]:
    """(start_at, end_at) in UTC epoch ms, 0 for none; end after start."""
    found = []
    for key in ("start_at", "end_at"):
        value = table.get(key)
        try:
            found.append(0 if value is None else parse_time(value))
        except ValueError as error:
            issues.append(SpecIssue(f"schedule.{key}", str(error)))
            found.append(0)
    start_ms, end_ms = found
    if start_ms and end_ms and end_ms <= start_ms:
        issues.append(SpecIssue("schedule.end_at", f"must be after start_at "
                                                   f"({table['start_at']}), got "
                                                   f"{table['end_at']}"))
    return start_ms, end_ms


def parse_time(value: object) -> int:
    """An RFC 3339 time with an offset or Z ("2026-03-29T01:00:00Z") as UTC epoch ms, or
    ValueError saying what is expected. YAML may have read it as a datetime already."""
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
    else:
        moment = value if isinstance(value, dt.datetime) else None
    if moment is None or moment.tzinfo is None:
        raise ValueError(f"expected an RFC 3339 time with an offset or Z, like "
                         f"'2026-03-29T01:00:00Z', got {value!r}")
    ms = int(moment.timestamp() * 1000)
    if not 0 < ms <= SCHEDULE_LAST_TIME_MS:
        raise ValueError(f"must lie between 1970 and 9999, got {value!r}")
    return ms


def _every(value: object, issues: list[SpecIssue]) -> int:
    match = _DURATION.fullmatch(value) if isinstance(value, str) and value else None
    if match is None:
        issues.append(SpecIssue("schedule.every", f"expected a duration like '30s', '5m', "
                                                  f"'1h30m', got {value!r}"))
        return 0
    every_ms = sum(int(n) * unit for n, unit in zip(match.groups(), _UNITS_MS, strict=True)
                   if n is not None)
    if not limits.SCHEDULE_MIN_EVERY_MS <= every_ms <= limits.SCHEDULE_MAX_EVERY_MS:
        issues.append(SpecIssue("schedule.every", f"{value!r} is outside "
                                                  f"{_show(limits.SCHEDULE_MIN_EVERY_MS)}.."
                                                  f"{_show(limits.SCHEDULE_MAX_EVERY_MS)}"))
    return every_ms


def _bounded_int(value: object, key: str, scale: int, high_ms: int,
                 issues: list[SpecIssue]) -> int:
    if type(value) is not int or not 0 <= value * scale <= high_ms:
        issues.append(SpecIssue(f"schedule.{key}", f"expected an integer in 0.."
                                                   f"{high_ms // scale}, got {value!r}"))
        return 0
    return value * scale


def _show(ms: int) -> str:
    parts = []
    for unit, name in zip(_UNITS_MS, "dhms", strict=True):
        count, ms = divmod(ms, unit)
        if count:
            parts.append(f"{count}{name}")
    return "".join(parts) or "0s"
