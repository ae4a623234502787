"""`raftsched task history|explain`."""

from __future__ import annotations

import argparse

from raftsched.cli import render
from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    Subparsers,
    command_parser,
    connect,
    now_ms,
    print_json,
)

# --- task -----------------------------------------------------------------------------------------


def register_task(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    task = commands.add_parser(
        "task", help="one task's attempts, or why it is not running",
        description="Look at one task of a job: raftsched task history|explain.")
    sub = task.add_subparsers(title="task commands", metavar="COMMAND", required=True)
    parents = [common, CONNECTION]

    history = command_parser(
        sub, "history", parents, "every attempt of a task, with fences and exit codes",
        "Show every attempt of a task (fence, cluster, state, exit code, times) and reports "
        "that arrived late or twice and so changed nothing.",
        "output:\n  the task line, a table # FENCE CLUSTER STATE EXIT ASSIGNED STARTED "
        "FINISHED TOOK REASON,\n  then the late/duplicate reports\n"
        '  --json: {"job_id", "task_id", "state", "attempts": [{"number", "fence", "cluster",\n'
        '           "state", "exit_code", "assigned_ms", "started_ms", "finished_ms", '
        '"reason"}],\n'
        '           "notes": [{"kind", "fence", "report", "at_ms", "detail"}], ...}')
    history.add_argument("job_id", metavar="JOB")
    history.add_argument("task_id", metavar="TASK")
    history.set_defaults(handler=_run_task_history, reads_only=True)

    explain = command_parser(
        sub, "explain", parents, "why a task is where it is (e.g. not placed)",
        "Explain a task's state; for a task waiting to be placed, say for every cluster whether "
        "it could take the task and, if not, what it lacks.",
        "output:\n  \"STATE: summary\", then a table CLUSTER ELIGIBLE WHY NOT\n"
        '  --json: {"state", "summary", "clusters": [{"cluster", "eligible", "reason"}]}')
    explain.add_argument("job_id", metavar="JOB")
    explain.add_argument("task_id", metavar="TASK")
    explain.set_defaults(handler=_run_task_explain, reads_only=True)


def _run_task_history(args: argparse.Namespace) -> int:
    with connect(args) as client:
        document = render.history_doc(client.task_history(args.job_id, args.task_id))
    if args.json:
        print_json(document)
    else:
        print(render.history_text(document, now_ms=now_ms()))
    return EXIT_OK


def _run_task_explain(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.explain(args.job_id, args.task_id)
    document = render.explain_doc(reply, args.job_id, args.task_id)
    if args.json:
        print_json(document)
    else:
        print(render.explain_text(document))
    return EXIT_OK
