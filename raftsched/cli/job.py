"""`raftsched job status|tasks|watch|list|cancel`."""

from __future__ import annotations

import argparse
import shlex
import sys

from raftsched.cli import render, watching
from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    JOB_STATES,
    Subparsers,
    command_parser,
    connect,
    free_text,
    now_ms,
    print_json,
    unknown_outcome,
)
from raftsched.errors import RaftschedError
from raftsched.options import INT32_MAX, integer

# --- job ------------------------------------------------------------------------------------------

_JOB_HELP = ("Inspect, follow, list and cancel jobs: raftsched job "
             "status|tasks|watch|list|cancel.")


def register_job(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    job = commands.add_parser("job", help="inspect, follow, list and cancel jobs",
                              description=_JOB_HELP)
    sub = job.add_subparsers(title="job commands", metavar="COMMAND", required=True)
    parents = [common, CONNECTION]

    status = command_parser(
        sub, "status", parents, "a job's state and task counts",
        "Show one job: its state, how many tasks are in each state (each expanded for_each "
        "task's instances too), its tenant, priority and times.",
        'output:\n  one "field  value" line each (job, state, tasks, a line per for_each task, '
        'tenant, times, reason)\n'
        '  --json: {"job_id", "state", "tasks": {STATE: count}, "name", "tenant", "priority",\n'
        '           "total_tasks", "submitted_ms", "started_ms", "finished_ms", "reason",\n'
        '           "for_each": [{"task_id", "instances", "tasks": {STATE: count}}], ...}')
    status.add_argument("job_id", metavar="JOB")
    status.set_defaults(handler=_run_job_status, reads_only=True)

    tasks = command_parser(
        sub, "tasks", parents, "every task of a job with its attempt and cluster",
        "List every task of a job: its state, attempts so far, and the cluster, fence and exit "
        "code of its current attempt. A for_each task is followed by its instances (TASK[i]), "
        "indented.",
        "output:\n  a table TASK STATE ATTEMPTS CLUSTER FENCE EXIT (REASON when any)\n"
        '  --json: a list of {"task_id", "state", "attempts", "cluster", "fence",\n'
        '           "exit_code" (null if none), "reason", "instance_of" (an instance\'s for_each '
        'task, or null),\n           "instances" (a for_each task\'s count once expanded, '
        'or null)}')
    tasks.add_argument("job_id", metavar="JOB")
    tasks.set_defaults(handler=_run_job_tasks, reads_only=True)

    watch = command_parser(
        sub, "watch", parents, "follow a job until it ends (re-attach to a running job)",
        "Follow a job until it finishes — one you submitted without --watch, or whose watch "
        "was interrupted — then show every task's outcome. Ctrl-C stops watching, not the job. "
        "A job that has already finished is shown at once.",
        "output:\n  on a terminal one status line redrawn in place (progress bar, done/total, "
        "state, counts\n  by state, elapsed); otherwise a line per change, e.g.\n"
        "    [12:00:01] RUNNING  3/7 done  (SUCCEEDED 3, RUNNING 2, RUNNABLE 2)\n"
        "  then the table TASK STATE ATTEMPTS CLUSTER FENCE EXIT (REASON), then the outcome "
        "line;\n  exit 0 if the job SUCCEEDED, 1 if it ended FAILED or CANCELLED, 2 if there "
        "is no such job,\n  130 on Ctrl-C\n"
        '  --json: {"job_id", "state", "tasks": {STATE: count}, "task_summaries": [the `job '
        'tasks`\n           list], "reason"}')
    watch.add_argument("job_id", metavar="JOB")
    watch.set_defaults(handler=_run_job_watch, reads_only=True)

    _register_list(sub, parents)

    cancel = command_parser(
        sub, "cancel", parents, "cancel a job's unfinished tasks",
        "Cancel a job: tasks not yet finished become CANCELLED and running attempts are told to "
        "stop. Cancelling is idempotent: a second cancel changes nothing.",
        'output:\n  "cancelled job JOB: N task(s) cancelled", or that nothing changed\n'
        '  --json: {"job_id", "cancelled": N, "changed": true|false}')
    cancel.add_argument("job_id", metavar="JOB")
    cancel.add_argument("--reason", default="", type=free_text,
                        help="recorded with the cancellation (printable text)")
    cancel.set_defaults(handler=_run_job_cancel)


def _register_list(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    listing = command_parser(
        sub, "list", parents, "list jobs, a page at a time",
        "List jobs, optionally only one tenant's or those in one state, one page at a time.",
        "output:\n  a table JOB NAME TENANT STATE DONE SUBMITTED, the jobs by state (of the "
        "tenant and query,\n  whatever --state), then the command for the next page if any\n"
        '  --json: {"jobs": [job status objects], "next_page_token": TOKEN or "",\n'
        '           "state_counts": {STATE: count, every job state}, "state_counts_partial": '
        'bool}')
    listing.add_argument("--tenant", default="", help="only this tenant's jobs")
    listing.add_argument("--state", default="", type=str.upper, choices=JOB_STATES,
                         help="only jobs in this state")
    listing.add_argument("--limit", type=integer(1, INT32_MAX), default=0, metavar="N",
                         help="at most N jobs (default: the server's page size)")
    listing.add_argument("--query", default="", metavar="TEXT",
                         help="only jobs whose id or name contains TEXT, ignoring case")
    listing.add_argument("--newest", action="store_true",
                         help="newest first (default: oldest first, in submission order)")
    listing.add_argument("--schedule", default="", metavar="ID",
                         help="only the runs of schedule ID (jobs it fired, named ID-<UTC time>)")
    listing.add_argument("--page-token", default="", metavar="TOKEN",
                         help="the next page, from a previous listing with the same --newest")
    listing.set_defaults(handler=_run_job_list, reads_only=True)


def _run_job_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        from raftsched.client.groups import job_group  # after connect has quietened grpc

        document = render.job_doc(client.get_job(args.job_id))
        document["group"] = job_group(client, args.job_id)
    if args.json:
        print_json(document)
    else:
        print(render.job_text(document, now_ms=now_ms()))
    return EXIT_OK


def _run_job_tasks(args: argparse.Namespace) -> int:
    with connect(args) as client:
        tasks = [render.task_doc(task) for task in client.list_tasks(args.job_id).tasks]
    if args.json:
        print_json(tasks)
    else:
        print(render.tasks_table(tasks))
    return EXIT_OK


def _run_job_watch(args: argparse.Namespace) -> int:
    with connect(args) as client:
        client.get_job(args.job_id)  # NOT_FOUND now, before anything is drawn
        final = watching.follow(args, client, args.job_id)
        tasks = [render.task_doc(task) for task in client.list_tasks(args.job_id).tasks]
    return watching.print_outcome(args, {"job_id": args.job_id}, final, tasks)


def _run_job_list(args: argparse.Namespace) -> int:
    prefix = f"{args.schedule}-" if args.schedule else ""
    with connect(args) as client:
        page = client.list_jobs(tenant=args.tenant, state=args.state, limit=args.limit,
                                page_token=args.page_token, query=args.query or prefix,
                                newest_first=args.newest)
    # a schedule's runs: the query finds ids containing "ID-"; keep the runs of that schedule
    # (not those of a schedule "ID-x", nor a job named "ID" submitted otherwise)
    jobs = [render.job_doc(job, params=False) for job in page.jobs
            if not args.schedule or job.schedule_id == args.schedule]
    counts = {state: int(page.state_counts.get(state, 0)) for state in JOB_STATES}
    unanswered = list(getattr(client, "unanswered", []))
    if args.json:
        print_json({"jobs": jobs, "next_page_token": page.next_page_token,
                    "state_counts": counts,
                    "state_counts_partial": page.state_counts_partial})
        return _unanswered(unanswered)
    print(render.jobs_table(jobs, now_ms=now_ms()))
    print(render.state_counts_line(counts, partial=page.state_counts_partial))
    if page.next_page_token:
        print(f"\nmore: {_next_page_command(args, page.next_page_token)}")
    return _unanswered(unanswered)


def _unanswered(errors: list[RaftschedError]) -> int:
    """With several groups, those a listing could not reach: named on stderr, exit 3 (their
    jobs are missing from what was printed; the other groups' are there)."""
    for error in errors:
        print(f"warning: not listed: {error.message}", file=sys.stderr)
    return EXIT_UNAVAILABLE if errors else EXIT_OK


def _next_page_command(args: argparse.Namespace, token: str) -> str:
    """The `job list` that shows the next page: the same filters and order, the new token."""
    words = ["raftsched", "job", "list"]
    for flag, value in (("--tenant", args.tenant), ("--state", args.state),
                        ("--query", args.query), ("--schedule", args.schedule)):
        if value:
            words += [flag, value]
    if args.limit:
        words += ["--limit", str(args.limit)]
    if args.newest:
        words.append("--newest")
    return shlex.join([*words, "--page-token", token])


def _run_job_cancel(args: argparse.Namespace) -> int:
    with connect(args) as client:
        try:
            reply = client.cancel(args.job_id, reason=args.reason)
        except RaftschedError as error:
            raise unknown_outcome(error, "the cancellation",
                                   "cancelling is idempotent: running the same command again "
                                   "is safe") from None
    document = {"job_id": args.job_id, "cancelled": reply.cancelled, "changed": reply.changed}
    if args.json:
        print_json(document)
    elif reply.changed:
        print(f"cancelled job {args.job_id}: {reply.cancelled} task(s) cancelled")
    else:
        print(f"job {args.job_id}: nothing changed (it was cancelled already)")
    return EXIT_OK
