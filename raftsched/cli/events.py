"""`raftsched events`: follow the committed changes (the WatchEvents stream) until Ctrl-C."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    Interrupted,
    Subparsers,
    command_parser,
    connect,
)
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
    "A tenant's token sees its own tenant's events only.")

_OUTPUT = (
    "output:\n  one line per event, e.g.\n"
    "    #1042.0 2026-12-04T15:00:01Z task   build-7f3a/compile SUCCEEDED\n"
    "    #1043.1 2026-12-04T15:00:01Z attempt build-7f3a/link #1 fence 88 on east RUNNING\n"
    "  --json: one JSON object per line (not one document: the stream has no end), the "
    "Event's\n  fields: {\"index\", \"seq\", \"kind\", \"job_id\", \"tenant\", \"task_id\", "
    "\"state\", \"fence\",\n  \"attempt\", \"cluster_id\", \"reason\", \"at_ms\"}; kind "
    "\"progress\" lines carry only an index\n  (the stream's place when nothing matched for a "
    "while); runs until Ctrl-C (exit 130)")


def register_events(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    events = command_parser(commands, "events", [common, CONNECTION],
                            "follow committed changes (resumable by Raft index)", _DESCRIPTION,
                            _OUTPUT)
    events.add_argument("--job", default="", metavar="JOB", help="only this job's events")
    events.add_argument("--tenant", default="", metavar="TENANT",
                        help="only this tenant's events")
    events.add_argument("--clusters", action="store_true",
                        help="cluster events too (an operator or admin token)")
    events.add_argument("--from", dest="from_index", type=integer(0, INT64_MAX), default=0,
                        metavar="N", help="the events of the entries after Raft index N "
                        "(default: from now)")
    events.set_defaults(handler=_run_events, reads_only=True)


def _run_events(args: argparse.Namespace) -> int:
    try:
        with connect(args) as client:
            for event in client.watch_events(args.from_index, args.job, args.tenant,
                                             args.clusters):
                line = json.dumps(event_doc(event)) if args.json else event_line(event)
                if line:
                    print(line, flush=True)
    except KeyboardInterrupt:
        raise Interrupted("stopped following events") from None
    return EXIT_OK


def event_doc(event: Any) -> dict[str, Any]:
    return {name: getattr(event, name) for name in EVENT_FIELDS}


def event_line(event: Any) -> str:
    """One human line; "" for a progress event (it only moves the resume point)."""
    if event.kind == "progress":
        return ""
    at = datetime.fromtimestamp(event.at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if event.kind == "cluster":
        what = f"cluster {event.cluster_id}"
    elif event.kind == "job":
        what = f"job {event.job_id}"
    else:
        what = f"{event.job_id}/{event.task_id}"
    if event.kind == "attempt":
        what += f" #{event.attempt} fence {event.fence} on {event.cluster_id}"
    reason = f"  ({event.reason})" if event.reason else ""
    return visible(f"#{event.index}.{event.seq} {at} {event.kind:<7} {what} {event.state}"
                   f"{reason}")
