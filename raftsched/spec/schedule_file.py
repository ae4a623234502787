"""A schedule file (issue 25): a job spec document with a top-level `schedule:` table. Parsed
into the validated job spec and the fields SCHEDULE_CREATE carries; every problem is a
`SpecError` whose issue names the field ("schedule.every: ...").

The table's keys here: `every` (a duration: "30s", "5m", "2h", "1d", "1h30m"; at least
SCHEDULE_MIN_EVERY_MS), `overlap` (skip | allow | buffer_one | cancel_other), `catchup_window_s`,
`pause_after_failures`. Cron rules, time zones and start_at/end_at belong to the rule module
(issue 25 part A); until it is merged into this build they are refused
by name. The rule's wire form is ["every", ms]."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from raftsched import limits
from raftsched.spec.issue import SpecIssue
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.text import load_document
from raftsched.spec.validation import validate_job_doc

OVERLAPS = ("skip", "allow", "buffer_one", "cancel_other")
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_UNITS_MS = (86_400_000, 3_600_000, 60_000, 1_000)
_KEYS = ("every", "overlap", "catchup_window_s", "pause_after_failures")
_LATER = ("cron", "timezone", "start_at", "end_at")


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
        issues.extend(error.issues)
    if issues:
        raise SpecError(issues)
    every_ms, overlap, window_ms, failures = fields
    return ScheduleFile(spec, ["every", every_ms], f"every {_show(every_ms)}", every_ms, 0, 0,
                        overlap, window_ms, failures)


def _table(table: dict[Any, Any], issues: list[SpecIssue]) -> tuple[int, str, int, int]:
    for key in table:
        if key in _LATER:
            issues.append(SpecIssue(f"schedule.{key}", "not supported by this build yet (cron "
                                                       "rules, zones and bounds come with the "
                                                       "rule module); use 'every'"))
        elif key not in _KEYS:
            issues.append(SpecIssue(f"schedule.{key}", f"unknown key; known: {', '.join(_KEYS)}"))
    every_ms = _every(table.get("every"), issues)
    overlap = table.get("overlap", "skip")
    if overlap not in OVERLAPS:
        issues.append(SpecIssue("schedule.overlap", f"{overlap!r} is not one of "
                                                    f"{', '.join(OVERLAPS)}"))
    window_s = table.get("catchup_window_s", limits.DEFAULT_SCHEDULE_CATCHUP_WINDOW_MS // 1000)
    window_ms = _bounded_int(window_s, "catchup_window_s", 1000,
                             limits.SCHEDULE_MAX_CATCHUP_WINDOW_MS, issues)
    failures = _bounded_int(table.get("pause_after_failures", 0), "pause_after_failures", 1,
                            limits.SCHEDULE_MAX_PAUSE_AFTER_FAILURES, issues)
    return every_ms, str(overlap), window_ms, failures


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
