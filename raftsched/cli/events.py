"""`raftsched events`: follow the committed changes (the WatchEvents stream) until Ctrl-C, or
with --until-job-ends until the job's terminal event."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    ClientLike,
    Interrupted,
    Subparsers,
    command_parser,
    connect,
)
from raftsched.cli.render import TERMINAL_JOB_STATES
from raftsched.errors import Code, RaftschedError
from raftsched.options import INT64_MAX, integer
from raftsched.state.text import visible

EVENT_FIELDS = ("index", "seq", "kind", "job_id", "tenant", "task_id", "state", "fence",
                "attempt", "cluster_id", "reason", "at_ms")
"""The fields of one --json line, as the Event message names them."""

_DESCRIPTION = (
    "Follow the scheduler's committed changes as they are applied: jobs, tasks and attempts "
    "changing state, and with --clusters compute clusters changing status (an operator or "
    "admin token). Each event carries the Raft index of the log entry that made it; events "
    "come in log order and any replica can serve them.\n\n"
    "Resume: --from N gives the events of the entries after index N. Take N from the last "
    "event you handled (an event may then come twice, none is missed), or from the "
    "applied_index of a `job list` or `job tasks` answer to list first and then watch without "
    "losing anything. Without --from the events start now. Leader changes, lost connections "
    "and the replicas' maximum stream age are followed transparently. A replica keeps only "
    "the last events (EVENT_RETENTION, --event-retention) since it started: a resume from "
    "older than that is refused as too old (exit 2): list again, then watch from the list's "
    "applied_index.\n\n"
    "With several scheduler groups each has its own log and indexes: --job follows the group "
    "the job's id names; without --job, give one group's replicas (--servers without ';') and "
    "its events are followed.\n\n"
    "--until-job-ends (with --job): stop, exit 0, once the job has ended, after printing its "
    "terminal event (kind job, state SUCCEEDED, FAILED or CANCELLED, or kind forgotten); "
    "exit 0 at once if it had ended before the events followed start. Without --from it "
    "follows from the index the job was read at, so an end in between is not missed.\n\n"
    "A tenant's token sees its own tenant's events only.")

_OUTPUT = (
    "output:\n  one line per event, e.g.\n"
    "    #1042.0 2026-12-04T15:00:01Z task   build-7f3a/compile SUCCEEDED\n"
    "    #1043.1 2026-12-04T15:00:01Z attempt build-7f3a/link #1 fence 88 on east RUNNING\n"
    "  --json: JSON lines, one JSON object per event and line (not one document: the stream\n"
    "  has no end), the Event's fields: {\"index\", \"seq\", \"kind\", \"job_id\", \"tenant\",\n"
    "  \"task_id\", \"state\", \"fence\", \"attempt\", \"cluster_id\", \"reason\", "
    "\"at_ms\"}; kind\n  \"progress\" lines carry only an index (the stream's place when "
    "nothing matched for a\n"
    "  while); an error is one {\"error\": ...} line. Runs until Ctrl-C (exit 130), or with\n"
    "  --until-job-ends until the job has ended (exit 0, whatever its outcome: see `job\n"
    "  status` or `job watch` for an exit status by outcome)")

JSON_HELP = ("print JSON lines on stdout: one JSON object per event, a line each (an error: "
             "one {\"error\": ...} line)")
"""events' own --json help: the shared one says "exactly one JSON object"."""


def register_events(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    """`common` (the shared --json, "exactly one JSON object") is not a parent: events prints
    JSON lines and says so in its own --json help."""
    events = command_parser(commands, "events", [CONNECTION],
                            "follow committed changes (resumable by Raft index)", _DESCRIPTION,
                            _OUTPUT)
    events.add_argument("--json", action="store_true", help=JSON_HELP)
    events.add_argument("--job", default="", metavar="JOB", help="only this job's events")
    events.add_argument("--tenant", default="", metavar="TENANT",
                        help="only this tenant's events")
    events.add_argument("--clusters", action="store_true",
                        help="cluster events too (an operator or admin token)")
    events.add_argument("--from", dest="from_index", type=integer(0, INT64_MAX), default=0,
                        metavar="N", help="the events of the entries after Raft index N "
                        "(default: from now)")
    events.add_argument("--until-job-ends", action="store_true",
                        help="with --job: exit 0 once the job has ended (after its terminal "
                        "event)")
    events.set_defaults(handler=_run_events, reads_only=True)


def _run_events(args: argparse.Namespace) -> int:
    if args.until_job_ends and not args.job:
        raise RaftschedError(Code.INVALID_ARGUMENT, "--until-job-ends needs --job JOB (the job "
                             "whose end ends the command)")
    try:
        with connect(args, one_group=not args.job) as client:
            _follow(client, args)
    except KeyboardInterrupt:
        raise Interrupted("stopped following events") from None
    return EXIT_OK


def _follow(client: ClientLike, args: argparse.Namespace) -> None:
    """Print the events; with --until-job-ends return after the job's terminal one, or once
    the stream has passed the index at which the job was read already ended (it ended at or
    before --from: its terminal event is not among those followed)."""
    from_index, ended_by = args.from_index, None
    if args.until_job_ends:
        job = client.get_job(args.job)
        if job.state in TERMINAL_JOB_STATES:
            ended_by = job.applied_index
        from_index = from_index or job.applied_index
    for event in client.watch_events(from_index, args.job, args.tenant, args.clusters):
        line = json.dumps(event_doc(event)) if args.json else event_line(event)
        if line:
            print(line, flush=True)
        if args.until_job_ends and (job_ended(event, args.job) or
                                    (ended_by is not None and _passed(event) >= ended_by)):
            return


def _passed(event: Any) -> int:
    """The index up to which every entry's events have come (a progress event's index is
    passed whole; an event's entry may have more events after it)."""
    return int(event.index) if event.kind == "progress" else int(event.index) - 1


def job_ended(event: Any, job_id: str) -> bool:
    """`event` says that job `job_id` has ended (its terminal job event, or it was forgotten)."""
    if event.job_id != job_id:
        return False
    return event.kind == "forgotten" or (event.kind == "job" and
                                         event.state in TERMINAL_JOB_STATES)


def event_doc(event: Any) -> dict[str, Any]:
    return {name: getattr(event, name) for name in EVENT_FIELDS}


def event_line(event: Any) -> str:
    """One human line; "" for a progress event (it only moves the resume point)."""
    if event.kind == "progress":
        return ""
    at = datetime.fromtimestamp(event.at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if event.kind == "cluster":
        what = f"cluster {event.cluster_id}"
    elif event.kind in ("job", "forgotten"):
        what = f"job {event.job_id}"
    else:
        what = f"{event.job_id}/{event.task_id}"
    if event.kind == "attempt":
        what += f" #{event.attempt} fence {event.fence} on {event.cluster_id}"
    reason = f"  ({event.reason})" if event.reason else ""
    return visible(f"#{event.index}.{event.seq} {at} {event.kind:<7} {what} {event.state}"
                   f"{reason}")
