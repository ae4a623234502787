"""`raftsched schedule create|list|show|pause|resume|trigger|backfill|delete` (issue 25)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from collections.abc import Iterable
from typing import Any

from raftsched import limits
from raftsched.cli.common import (
    CONNECTION,
    EXIT_INVALID,
    EXIT_OK,
    CommandError,
    Subparsers,
    command_parser,
    connect,
    free_text,
    print_issues,
    print_json,
    report_error,
)
from raftsched.errors import Code
from raftsched.options import integer
from raftsched.schedules.cron import zone_or_utc
from raftsched.schedules.file import parse_schedule_text
from raftsched.spec.file import read_spec_file
from raftsched.spec.model import SpecError

_HELP = ("Jobs on a clock: a schedule is a job spec with a top-level 'schedule:' table: one "
         "rule, either 'cron' (5 fields, e.g. '30 2 * * *', or @hourly/@daily/@weekly/@monthly/"
         "@yearly, read on the wall clock of 'timezone', an IANA zone, default UTC: a local "
         "time skipped by DST does not fire, a repeated one fires each time) or 'every' (e.g. "
         "30s, 2h); and optionally start_at/end_at (RFC 3339), overlap (skip, the default | "
         "allow | buffer_one | cancel_other), catchup_window_s (missed times older than it "
         "are skipped and counted) and pause_after_failures. Only the leader fires, once per "
         "nominal time: each run is a job named <schedule>-<UTC time>, so a failover never runs "
         "a time twice. A schedule's runs: `raftsched job list --schedule ID`. Everything: "
         "docs/schedules.md.")
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def register_schedule(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    schedule = commands.add_parser("schedule", help="jobs on a clock (create, list, show, ...)",
                                   description=_HELP)
    sub = schedule.add_subparsers(title="schedule commands", metavar="COMMAND", required=True)
    parents = [common, CONNECTION]
    create = command_parser(
        sub, "create", parents, "create a schedule from a spec file with a schedule: table",
        "Create a schedule: FILE is a job spec (as `submit` takes) with a top-level "
        "'schedule:' table. The file is checked here first; errors name the field and create "
        "nothing. Creating the same schedule again is not an error.",
        'output:\n  "created schedule ID"\n  --json: {"schedule_id", "created": bool}')
    create.add_argument("file", metavar="FILE")
    create.add_argument("--id", default="", metavar="ID",
                        help="the schedule's id (default: the spec's name)")
    create.set_defaults(handler=_run_create)
    _register_reads(sub, parents)
    _register_changes(sub, parents)


def _register_reads(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    listing = command_parser(
        sub, "list", parents, "every schedule you may see",
        "List schedules: id, rule, paused, runs fired, the last nominal time.",
        "output:\n  a table SCHEDULE RULE PAUSED FIRED LAST\n"
        '  --json: {"schedules": [{"schedule_id", "tenant", "rule", "paused", "note", "fired",\n'
        '           "skipped": {REASON: n}, "last_nominal_time"}]}')
    listing.add_argument("--tenant", default="", help="only this tenant's schedules")
    listing.set_defaults(handler=_run_list, reads_only=True)
    show = command_parser(
        sub, "show", parents, "a schedule: its next fire times and its last runs",
        "Show one schedule: its rule and policies, the next 10 fire times, and its last runs "
        "(newest first) with their job ids and states.",
        'output:\n  "field  value" lines, then NEXT times, then a table NOMINAL JOB STATE\n'
        '  --json: {"schedule_id", "paused", "note", "next": [RFC 3339 UTC x10],\n'
        '           "runs": [{"nominal_time", "job_id", "state"}] newest first, ...}')
    show.add_argument("schedule_id", metavar="ID")
    show.set_defaults(handler=_run_show, reads_only=True)


def _register_changes(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    pause = command_parser(
        sub, "pause", parents, "stop firing (runs already started go on)",
        "Pause a schedule: no fire until it is resumed.",
        'output:\n  "paused schedule ID"\n  --json: the `show` object')
    pause.add_argument("schedule_id", metavar="ID")
    pause.add_argument("--note", default="", type=free_text, help="why (shown by `show`)")
    pause.set_defaults(handler=_run_pause)
    resume = command_parser(
        sub, "resume", parents, "fire again from now on (the paused span is not run)",
        "Resume a paused schedule. Fire times that passed while it was paused are NOT run; "
        "use `schedule backfill` to run them.",
        'output:\n  "resumed schedule ID"\n  --json: the `show` object')
    resume.add_argument("schedule_id", metavar="ID")
    resume.set_defaults(handler=_run_resume, note="")
    for name, summary, text, handler in (
            ("trigger", "one run now, outside the rule",
             "Start one run now (job <schedule>-manual-<UTC time>); the rule's times are "
             "unchanged.", _run_trigger),
            ("delete", "forget a schedule (its runs stay jobs)",
             "Delete a schedule. Its runs are jobs and stay.", _run_delete)):
        command = command_parser(sub, name, parents, summary, text,
                                 'output:\n  one line\n  --json: {"schedule_id", ...}')
        command.add_argument("schedule_id", metavar="ID")
        command.set_defaults(handler=handler)
    backfill = command_parser(
        sub, "backfill", parents, "run the rule's past fire times in a range, once each",
        "Run every fire time of the schedule's rule in [--from, --to] (RFC 3339) that has no "
        "run yet, at most --max-concurrent live at once.",
        'output:\n  "backfill of ID: N started, M waiting, K had their run"\n'
        '  --json: {"schedule_id", "job_ids", "queued", "skipped"}')
    backfill.add_argument("schedule_id", metavar="ID")
    backfill.add_argument("--from", dest="from_time", required=True, metavar="T",
                          help="the first time (RFC 3339 with Z or an offset)")
    backfill.add_argument("--to", dest="to_time", required=True, metavar="T",
                          help="the last time (RFC 3339; at most now)")
    backfill.add_argument("--max-concurrent", type=integer(1, limits.MAX_BACKFILL_RUNS),
                          default=1, metavar="N", help="runs live at once (default 1)")
    backfill.set_defaults(handler=_run_backfill)


def _time(text: str, flag: str) -> int:
    """RFC 3339 with an offset or Z -> UTC epoch ms; INVALID_ARGUMENT naming the flag."""
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(Code.INVALID_ARGUMENT,
                           f"{flag}: not an RFC 3339 time: {text!r}") from None
    if parsed.tzinfo is None:
        raise CommandError(Code.INVALID_ARGUMENT, f"{flag}: {text!r} has no offset: add Z or "
                                                  f"+HH:MM")
    return int(parsed.timestamp() * 1000)


def rfc3339(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"


def local_times(times_ms: Iterable[int], zone_name: str) -> list[str]:
    """The times on the zone's wall clock, RFC 3339 with the offset in force
    ("2026-10-25T02:30:00+01:00"); in UTC when this machine's tzdata lacks the zone."""
    zone = zone_or_utc(zone_name)
    return [dt.datetime.fromtimestamp(ms / 1000, zone).isoformat(timespec="seconds")
            for ms in times_ms]


def _run_create(args: argparse.Namespace) -> int:
    try:
        raw = read_spec_file(args.file)
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        parsed = parse_schedule_text(text, source=args.file)
    except (SpecError, UnicodeDecodeError) as error:
        return _refused(args, error)
    schedule_id = args.id or _SLUG.sub("-", parsed.spec.name).strip("-._")[
        :limits.MAX_SCHEDULE_ID_CHARS]
    with connect(args) as client:
        reply = client.create_schedule(schedule_id, text)
    if args.json:
        print_json({"schedule_id": reply.schedule_id, "created": reply.created})
    else:
        print(f"{'created' if reply.created else 'exists already:'} schedule "
              f"{reply.schedule_id} ({parsed.text})")
    return EXIT_OK


def _refused(args: argparse.Namespace, error: SpecError | UnicodeDecodeError) -> int:
    if isinstance(error, UnicodeDecodeError):
        return report_error(args, CommandError(Code.INVALID_ARGUMENT, f"{args.file}: not UTF-8"))
    if not args.json:
        print_issues(error.issues)
        return EXIT_INVALID
    issues = [{"path": i.path, "task": i.task, "message": i.message} for i in error.issues]
    return report_error(args, CommandError(Code.INVALID_ARGUMENT, str(error),
                                           details={"issues": issues}))


def schedule_doc(info: Any) -> dict[str, Any]:
    return {
        "schedule_id": info.schedule_id, "tenant": info.tenant, "paused": info.paused,
        "note": info.note, "rule": info.rule, "zone": info.zone, "overlap": info.overlap,
        "catchup_window_s": info.catchup_window_ms // 1000,
        "pause_after_failures": info.pause_after_failures, "fired": info.fired,
        "skipped": dict(info.skipped), "consecutive_failures": info.consecutive_failures,
        "last_nominal_time": rfc3339(info.last_nominal_ms),
        "backfill_waiting": info.backfill_waiting,
        "next": [rfc3339(ms) for ms in info.next_ms],
        "next_local": local_times(info.next_ms, info.zone),
        "runs": [{"nominal_time": rfc3339(r.nominal_ms), "job_id": r.job_id, "state": r.state}
                 for r in info.runs],
    }


def _run_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        docs = [schedule_doc(s) for s in client.list_schedules(args.tenant).schedules]
    if args.json:
        print_json({"schedules": [{k: v for k, v in d.items() if k not in ("next", "runs")}
                                  for d in docs]})
        return EXIT_OK
    rows = [("SCHEDULE", "RULE", "PAUSED", "FIRED", "LAST")] + [
        (d["schedule_id"], d["rule"], "yes" if d["paused"] else "no", str(d["fired"]),
         d["last_nominal_time"]) for d in docs]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return EXIT_OK


def _run_show(args: argparse.Namespace) -> int:
    with connect(args) as client:
        _print_schedule(args, client.get_schedule(args.schedule_id))
    return EXIT_OK


def _print_schedule(args: argparse.Namespace, info: Any) -> None:
    doc = schedule_doc(info)
    if args.json:
        print_json(doc)
        return
    shown = {**doc, "paused": "yes" if doc["paused"] else "no", "note": doc["note"] or "-",
             "skipped": ", ".join(f"{reason} {count}" for reason, count in
                                  sorted(doc["skipped"].items())) or "-"}
    for key in ("schedule_id", "tenant", "rule", "zone", "overlap", "paused", "note", "fired",
                "skipped", "last_nominal_time"):
        print(f"{key:<18} {shown[key]}")
    print(f"next ({doc['zone']}){'':<{max(0, 11 - len(doc['zone']))}} "
          + ("\n                   ".join(doc["next_local"]) or "-"))
    width = max((len(run["job_id"]) for run in doc["runs"]), default=0)
    if doc["runs"]:
        print(f"\n{'NOMINAL':<20}  {'JOB':<{width}}  STATE")
    for run in doc["runs"]:
        print(f"{run['nominal_time']:<20}  {run['job_id']:<{width}}  {run['state']}")


def _run_pause(args: argparse.Namespace) -> int:
    return _set(args, True)


def _run_resume(args: argparse.Namespace) -> int:
    return _set(args, False)


def _set(args: argparse.Namespace, paused: bool) -> int:
    with connect(args) as client:
        info = client.set_schedule(args.schedule_id, paused, args.note)
    if args.json:
        print_json(schedule_doc(info))
    else:
        print(f"{'paused' if paused else 'resumed'} schedule {args.schedule_id}")
    return EXIT_OK


def _run_trigger(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.trigger_schedule(args.schedule_id)
    if args.json:
        print_json({"schedule_id": args.schedule_id, "job_ids": list(reply.job_ids)})
    else:
        print(f"schedule {args.schedule_id}: started {', '.join(reply.job_ids) or 'nothing'}")
    return EXIT_OK


def _run_backfill(args: argparse.Namespace) -> int:
    from_ms, to_ms = _time(args.from_time, "--from"), _time(args.to_time, "--to")
    with connect(args) as client:
        reply = client.backfill_schedule(args.schedule_id, from_ms, to_ms, args.max_concurrent)
    if args.json:
        print_json({"schedule_id": args.schedule_id, "job_ids": list(reply.job_ids),
                    "queued": reply.queued, "skipped": reply.skipped})
    else:
        print(f"backfill of {args.schedule_id}: {len(reply.job_ids)} started, "
              f"{reply.queued - len(reply.job_ids)} waiting, {reply.skipped} had their run")
    return EXIT_OK


def _run_delete(args: argparse.Namespace) -> int:
    with connect(args) as client:
        client.delete_schedule(args.schedule_id)
    if args.json:
        print_json({"schedule_id": args.schedule_id, "deleted": True})
    else:
        print(f"deleted schedule {args.schedule_id}")
    return EXIT_OK
