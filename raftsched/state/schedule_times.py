"""Schedules' pure arithmetic, for apply and for readers (the leader's firing component, the
service): a run's job id from (schedule, nominal time), an interval rule's fire times and
alignment, and which of a schedule's runs are live. No clock, no tzdata: civil time from epoch
milliseconds by integer arithmetic (days from civil, H. Hinnant's algorithm)."""

from __future__ import annotations

from raftsched.state.model import TERMINAL_JOB_STATES, Schedule, State

_MS_PER_DAY = 86_400_000


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the day `days` after 1970-01-01 (proleptic Gregorian)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day


def stamp(ms: int) -> str:
    """"20261025T010000Z" (UTC; "20261025T010000.250Z" when the time has milliseconds)."""
    year, month, day, hour, minute, second, millis = _utc_fields(ms)
    text = f"{year:04d}{month:02d}{day:02d}T{hour:02d}{minute:02d}{second:02d}"
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def rfc3339(ms: int) -> str:
    """"2026-10-25T01:00:00Z" (UTC; "2026-10-25T01:00:00.250Z" when the time has
    milliseconds), without the clock or a time zone database: what templates render."""
    year, month, day, hour, minute, second, millis = _utc_fields(ms)
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def _utc_fields(ms: int) -> tuple[int, int, int, int, int, int, int]:
    """(year, month, day, hour, minute, second, millisecond) of a UTC instant in ms."""
    days, rest = divmod(ms, _MS_PER_DAY)
    year, month, day = _civil(days)
    seconds, millis = divmod(rest, 1000)
    return year, month, day, seconds // 3600, seconds // 60 % 60, seconds % 60, millis


def run_job_id(schedule_id: str, nominal_ms: int, manual: bool = False) -> str:
    """The job id (and idempotency key) of a schedule's run: one per (schedule, nominal time),
    so no leader, retry or restored snapshot can make a second."""
    return f"{schedule_id}-{'manual-' if manual else ''}{stamp(nominal_ms)}"


def anchor_ms(schedule: Schedule) -> int:
    """Where an interval rule's fire times are counted from: start_at, else the Unix epoch."""
    return schedule.start_at_ms


def aligned(schedule: Schedule, nominal_ms: int) -> bool:
    """Whether `nominal_ms` can be a fire time: inside start/end, and on the interval's grid
    (cron times are the leader's word: apply has no tzdata to check them with)."""
    if nominal_ms < schedule.start_at_ms:
        return False
    if schedule.end_at_ms and nominal_ms > schedule.end_at_ms:
        return False
    return schedule.every_ms == 0 or (nominal_ms - anchor_ms(schedule)) % schedule.every_ms == 0


def interval_fires_after(schedule: Schedule, after_ms: int, limit: int,
                         until_ms: int) -> list[int]:
    """An interval rule's fire times strictly after `after_ms`, none after `until_ms` (or
    end_at), at most `limit`."""
    every, anchor = schedule.every_ms, anchor_ms(schedule)
    assert every > 0, "an interval rule"
    first = max(anchor, anchor + ((after_ms - anchor) // every + 1) * every)
    last = min(until_ms, schedule.end_at_ms) if schedule.end_at_ms else until_ms
    if first > last:
        return []
    return list(range(first, last + 1, every)[:max(limit, 0)])


def job_live(state: State, job_id: str) -> bool:
    job = state.jobs.get(job_id) if job_id else None
    return job is not None and job.state not in TERMINAL_JOB_STATES


def has_waiting_release(state: State, schedule: Schedule) -> bool:
    """Whether an empty SCHEDULE_FIRE would start something: a buffered time whose blocking
    run ended, or a backfill time with room under its max_concurrent."""
    if schedule.paused:
        return False
    if schedule.pending_ms and not job_live(state, schedule.last_job_id):
        return True
    if not schedule.backfill:
        return False
    live = sum(1 for job_id in schedule.backfill_live if job_live(state, job_id))
    return live < schedule.backfill_max
