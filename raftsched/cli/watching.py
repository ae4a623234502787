"""Following a job until it ends: `submit --watch` and `job watch` share it.

On a terminal (stdout is a TTY, no --json) one status line is redrawn in place — a progress
bar, done/total, the job's state, counts by state and the elapsed time, refreshed at least
every REDRAW_EVERY_S — and the line is kept when the job ends. Otherwise (a pipe, a file, CI
logs) one plain line is printed per change of state or counts. Either way the per-task table
and the outcome line follow; with --json nothing is printed until the one JSON document.
"""

from __future__ import annotations

import argparse
import queue
import shutil
import sys
import threading
import time
from datetime import datetime
from typing import Any, TextIO

from raftsched.cli import render
from raftsched.cli.common import (
    EXIT_JOB_FAILED,
    EXIT_OK,
    ClientLike,
    CommandError,
    Interrupted,
    print_json,
)
from raftsched.errors import Code
from raftsched.state.text import visible
from raftsched.states import JobStateName

REDRAW_EVERY_S = 1.0
"""The in-place line's elapsed time moves at least this often, even when the job does not."""
CLEAR_LINE = "\r\x1b[2K"
"""Back to the start of the line and erase it (ANSI): what a redraw writes first."""
_END = object()


def follow(args: argparse.Namespace, client: ClientLike, job_id: str,
           out: TextIO | None = None) -> dict[str, Any]:
    """Follow the job until it is terminal (printing progress unless --json) and return its
    final document. Ctrl-C stops watching (Interrupted, exit 130), never the job."""
    stream = sys.stdout if out is None else out
    in_place = not args.json and stream.isatty()
    try:
        last = _in_place(client, job_id, stream) if in_place else \
            _lines(client, job_id, None if args.json else stream)
        if last is None or last["state"] not in render.TERMINAL_JOB_STATES:
            last = render.job_doc(client.get_job(job_id))
    except KeyboardInterrupt:
        if in_place:
            stream.write("\n")
        raise Interrupted(f"stopped watching; job {job_id} goes on (raftsched job watch "
                          f"{job_id}; stop it with: raftsched job cancel {job_id})") from None
    from raftsched.client.groups import job_group  # a connected client: grpc is loaded

    last["group"] = job_group(client, job_id)
    if last["state"] not in render.TERMINAL_JOB_STATES:
        raise CommandError(Code.UNAVAILABLE, f"the watch of job {job_id} ended while the job "
                           f"is {last['state']}",
                           hint=f"the job goes on; follow it again with: raftsched job watch "
                           f"{job_id}")
    return last


def _lines(client: ClientLike, job_id: str, out: TextIO | None) -> dict[str, Any] | None:
    """A plain line per change of state or counts (none when `out` is None)."""
    last: dict[str, Any] | None = None
    for job in client.watch(job_id):
        document = render.job_doc(job)
        if out is not None and (last is None or (document["state"], document["tasks"])
                                != (last["state"], last["tasks"])):
            print(render.progress_line(document, datetime.now()), file=out, flush=True)
        last = document
    return last


def _in_place(client: ClientLike, job_id: str, out: TextIO) -> dict[str, Any] | None:
    """Redraw one line: the stream is read on a thread of its own, so that the elapsed time
    moves while nothing happens; an error of the stream is raised here."""
    updates: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for job in client.watch(job_id):
                updates.put(render.job_doc(job))
        except BaseException as error:  # handed to the main thread, raised there
            updates.put(error)
        updates.put(_END)

    threading.Thread(target=read, name=f"watch-{job_id}", daemon=True).start()
    last: dict[str, Any] | None = None
    started = time.monotonic()
    while True:
        try:
            item = updates.get(timeout=REDRAW_EVERY_S)
        except queue.Empty:
            item = None
        if item is _END:
            break
        if isinstance(item, BaseException):
            out.write("\n")
            raise item
        if item is not None:
            last = item
        if last is not None:
            width = shutil.get_terminal_size().columns
            line = render.status_line(last, _elapsed_ms(last, started), width)
            out.write(CLEAR_LINE + line)
            out.flush()
    if last is not None:
        out.write("\n")
        out.flush()
    return last


def _elapsed_ms(job: dict[str, Any], watching_since: float) -> int:
    """Since the job started (its own times, when it has them), else since we began watching."""
    if job["started_ms"] and job["finished_ms"]:
        return int(job["finished_ms"] - job["started_ms"])
    if job["started_ms"]:
        return max(0, int(time.time() * 1000) - int(job["started_ms"]))
    return int((time.monotonic() - watching_since) * 1000)


def print_outcome(args: argparse.Namespace, document: dict[str, Any], final: dict[str, Any],
                  tasks: list[dict[str, Any]]) -> int:
    """The per-task table and the outcome line (or the JSON document); the exit status: 0 if
    the job SUCCEEDED, 1 if it ended FAILED or CANCELLED."""
    code = EXIT_OK if final["state"] == JobStateName.SUCCEEDED else EXIT_JOB_FAILED
    if args.json:
        print_json({**document, "state": final["state"], "tasks": final["tasks"],
                    "task_summaries": tasks, "reason": final["reason"],
                    "group": final.get("group", 0)})
        return code
    done, total = render.done_and_total(final)
    took = ""
    if final["started_ms"] and final["finished_ms"]:
        took = f" in {render.format_duration_ms(final['finished_ms'] - final['started_ms'])}"
    print()
    print(render.tasks_table(tasks))
    print()
    print(visible(f"job {final['job_id']} {final['state']}{took}: {done}/{total} tasks done "
                  f"({render.state_counts_text(final['tasks'])})"
                  + (f"; {final['reason']}" if final["reason"] else "")))
    return code
