"""`raftsched task history|outputs|explain|logs`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from raftsched.cli import render
from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    CommandError,
    Interrupted,
    Subparsers,
    command_parser,
    connect,
    now_ms,
    print_json,
)
from raftsched.errors import Code
from raftsched.options import UINT32_MAX, UINT64_MAX, integer
from raftsched.protocol import LOG_STREAMS
from raftsched.state.text import visible

# --- task -----------------------------------------------------------------------------------------


def register_task(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    task = commands.add_parser(
        "task", help="one task's attempts, or why it is not running",
        description="Look at one task of a job: raftsched task history|outputs|explain|logs.")
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

    outputs = command_parser(
        sub, "outputs", parents, "the outputs a succeeded task handed downstream",
        "Print the outputs a task left at $RAFTSCHED_OUTPUT (one JSON object), as the state "
        "kept them from its succeeded attempt: what its dependents received in "
        "$RAFTSCHED_INPUTS and their templates. A task that left none has {}; a for_each "
        "task has the list of its instances' outputs (an instance is TASK[i]).",
        "output:\n  the outputs as indented JSON (pipe it to jq)\n"
        "  exit 2 if the job or task does not exist or the task has not succeeded (its state "
        "is said)\n"
        '  --json: {"job_id", "task_id", "outputs": OBJECT (a list for a for_each task)}')
    outputs.add_argument("job_id", metavar="JOB")
    outputs.add_argument("task_id", metavar="TASK")
    outputs.set_defaults(handler=_run_task_outputs, reads_only=True)

    explain = command_parser(
        sub, "explain", parents, "why a task is where it is (e.g. not placed)",
        "Explain a task's state; for a task waiting to be placed, say for every cluster whether "
        "it could take the task and, if not, what it lacks.",
        "output:\n  \"STATE: summary\", then a table CLUSTER ELIGIBLE WHY NOT\n"
        '  --json: {"state", "summary", "clusters": [{"cluster", "eligible", "reason"}]}')
    explain.add_argument("job_id", metavar="JOB")
    explain.add_argument("task_id", metavar="TASK")
    explain.set_defaults(handler=_run_task_explain, reads_only=True)

    logs = command_parser(
        sub, "logs", parents, "a task attempt's stdout or stderr, from its agent",
        "Print what a task attempt wrote to stdout (or --stream stderr), read from the agent of "
        "the cluster it ran on through the leader; the agent keeps each attempt's output (8 "
        "MiB of each, MAX_TASK_OUTPUT_BYTES) after the attempt ends and across its own "
        "restarts, until it prunes old attempt dirs. Default: the latest attempt.",
        "output:\n  the bytes as written, on stdout; a line naming the attempt, fence, cluster "
        "and state on\n  stderr first. --follow: go on while the attempt runs (Ctrl-C stops "
        "following, not the task).\n  exit 2 if the job, task or attempt does not exist or "
        "has no output kept; 3 if its agent\n  does not answer\n"
        '  --json: {"job_id", "task_id", "attempt", "fence", "cluster", "attempt_state", '
        '"stream",\n           "offset", "bytes", "output" (UTF-8, undecodable bytes '
        'replaced)}')
    logs.add_argument("job_id", metavar="JOB")
    logs.add_argument("task_id", metavar="TASK")
    logs.add_argument("--attempt", type=integer(1, UINT32_MAX), default=0, metavar="N",
                      help="attempt number, 1 for the first (default: the latest)")
    logs.add_argument("--stream", choices=LOG_STREAMS, default=LOG_STREAMS[0],
                      help="which output (default stdout)")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing while the attempt runs")
    logs.add_argument("--tail", type=integer(1, UINT64_MAX), default=0, metavar="BYTES",
                      help="start this many bytes before the end (default: from the start)")
    logs.set_defaults(handler=_run_task_logs, reads_only=True)


def _run_task_history(args: argparse.Namespace) -> int:
    with connect(args) as client:
        document = render.history_doc(client.task_history(args.job_id, args.task_id))
    if args.json:
        print_json(document)
    else:
        print(render.history_text(document, now_ms=now_ms()))
    return EXIT_OK


def _run_task_outputs(args: argparse.Namespace) -> int:
    with connect(args) as client:
        history = client.task_history(args.job_id, args.task_id)
    outputs = render.outputs_of(history)
    if outputs is None:
        raise CommandError(
            Code.FAILED_PRECONDITION,
            f"task {args.job_id}/{args.task_id} is {history.state}: only a SUCCEEDED task "
            "has outputs", hint=f"raftsched task history {args.job_id} {args.task_id}",
            details={"state": history.state})
    if args.json:
        print_json({"job_id": args.job_id, "task_id": args.task_id, "outputs": outputs})
    else:
        print(json.dumps(outputs, indent=2, sort_keys=True, ensure_ascii=False))
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


def _run_task_logs(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    received = bytearray()
    head: Any = None
    first_offset = 0
    try:
        with connect(args) as client:
            for message in client.task_logs(args.job_id, args.task_id, attempt=args.attempt,
                                            stream=args.stream, follow=args.follow,
                                            tail_bytes=args.tail):
                if head is None:
                    head = message
                    if not args.json:
                        print(visible(f"== {args.job_id}/{args.task_id} attempt "
                                      f"{head.attempt} (fence {head.fence}) on "
                                      f"{head.cluster_id}, {head.attempt_state}: "
                                      f"{args.stream} =="), file=sys.stderr, flush=True)
                    continue
                if not received:
                    first_offset = message.offset
                if args.json:
                    received += message.data
                else:
                    out.write(message.data)
                    out.flush()
    except KeyboardInterrupt:
        raise Interrupted("stopped following; the task goes on") from None
    if args.json:
        print_json({"job_id": args.job_id, "task_id": args.task_id,
                    "attempt": head.attempt if head is not None else 0,
                    "fence": head.fence if head is not None else 0,
                    "cluster": head.cluster_id if head is not None else "",
                    "attempt_state": head.attempt_state if head is not None else "",
                    "stream": args.stream, "offset": first_offset, "bytes": len(received),
                    "output": received.decode("utf-8", errors="replace")})
    return EXIT_OK
