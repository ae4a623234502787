"""The `raftsched` command line.

Each subcommand is one `_register_<name>` function that adds its parser (with the shared
`--json` option) and sets `handler`; adding a subcommand is adding such a function to
`_COMMANDS`. A handler returns the exit code. Conventions for every subcommand:
- `--json` prints exactly one JSON document on stdout, whatever the outcome (an error is
  `{"error": {"code", "message", ...}}`);
- otherwise results go to stdout and problems to stderr as one `error: CODE: message` line;
- exit codes: 0 success; 1 a watched job ended FAILED or CANCELLED; 2 refused input or usage
  (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, a bad
  spec, a local OS error); 3 no answer or an unknown outcome (UNAVAILABLE, DEADLINE_EXCEEDED);
  130 interrupted.
Expected failures never show a Python traceback. Commands that talk to a cluster get their
client from `make_client` (tests replace it); what they print is built by `raftsched.render`.
`raftsched validate` imports neither grpc nor the server: those are imported inside handlers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeAlias

from raftsched import limits
from raftsched.cli import render
from raftsched.errors import Code, RaftschedError
from raftsched.spec.file import load_spec_file
from raftsched.spec.job import JobSpec, SpecError, SpecIssue, parse_spec_text

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130
EXIT_FOR_CODE: dict[Code, int] = {
    Code.INVALID_ARGUMENT: EXIT_INVALID,
    Code.NOT_FOUND: EXIT_INVALID,
    Code.ALREADY_EXISTS: EXIT_INVALID,
    Code.FAILED_PRECONDITION: EXIT_INVALID,
    Code.RESOURCE_EXHAUSTED: EXIT_INVALID,
    Code.UNAVAILABLE: EXIT_UNAVAILABLE,
    Code.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
}
SERVERS_ENV = "RAFTSCHED_SERVERS"
DEFAULT_TIMEOUT_S = 30.0
"""How long a command keeps trying (through elections and redirects) before it gives up."""
MAX_CALL_TIMEOUT_S = 10.0
"""Deadline of one RPC attempt within that time."""
INTERRUPTED = "INTERRUPTED"
"""The error code --json prints after Ctrl-C (not an API code)."""
JOB_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
HELP_WIDTH = 92

Handler = Callable[[argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_EXIT_CODES = """\
exit status: 0 ok; 2 refused (bad input, unknown id, key conflict, wrong state, a limit) or
  usage error; 3 no replica answered, or the outcome of a change is unknown; 130 interrupted.
  Errors: stderr "error: CODE: message" (--json: stdout {"error": {"code", "message"}})."""


class ClientLike(Protocol):
    """What the CLI uses of `raftsched.client.Client` (tests pass a fake)."""

    def submit(self, spec_text: str | bytes, idempotency_key: str | None = None) -> Any: ...
    def get_job(self, job_id: str) -> Any: ...
    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "") -> Any: ...
    def list_tasks(self, job_id: str) -> Any: ...
    def cancel(self, job_id: str, reason: str = "") -> Any: ...
    def task_history(self, job_id: str, task_id: str) -> Any: ...
    def explain(self, job_id: str, task_id: str) -> Any: ...
    def watch(self, job_id: str) -> Iterator[Any]: ...
    def cluster_status(self, server: str | None = None) -> Any: ...
    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any: ...
    def remove_replica(self, raft_address: str) -> Any: ...
    def close(self) -> None: ...


def make_client(servers: list[str], timeout_s: float) -> ClientLike:
    """The one place the CLI builds a client (grpc is imported here, not at start-up)."""
    from raftsched.client.client import Client

    return Client(servers, timeout_s=min(timeout_s, MAX_CALL_TIMEOUT_S),
                  retry_budget_s=timeout_s)


class CommandError(RaftschedError):
    """An expected failure of a command: its code, a one-line message, what to do about it
    (`hint`), and extra fields for the --json error object."""

    def __init__(self, code: Code, message: str, *, hint: str = "",
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(code, message)
        self.hint = hint
        self.details = details or {}


class Interrupted(Exception):
    """Ctrl-C, with what it leaves behind (e.g. a job that goes on)."""


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the process exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "passthrough", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as stop:  # --help, or a usage error argparse already printed
        return stop.code if isinstance(stop.code, int) else EXIT_INVALID
    args.extra = extra
    handler: Handler = args.handler
    try:
        return handler(args)
    except (KeyboardInterrupt, Interrupted) as stop:
        return _report_interrupt(args, str(stop) if isinstance(stop, Interrupted) else "")
    except RaftschedError as error:
        return report_error(args, error)
    except OSError as error:
        return report_error(args, CommandError(Code.FAILED_PRECONDITION, _os_message(error)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftsched",
        description="raftsched: a Raft-replicated DAG job scheduler.",
        epilog="Run 'raftsched COMMAND --help' for what a command does and prints.\n"
        "exit status: 0 ok; 1 a job followed by `submit --watch` ended FAILED or CANCELLED;\n"
        "  2 refused (bad input, unknown id, key conflict, wrong state, a limit) or usage "
        "error;\n  3 no replica answered, or the outcome of a change is unknown; "
        "130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print exactly one JSON object on stdout"
    )
    for register in _COMMANDS:
        register(commands, common)
    return parser


def _print_json(document: Any) -> None:
    print(json.dumps(document))


def _print_issues(issues: Sequence[SpecIssue]) -> None:
    for issue in issues:
        print(f"error: {issue.render()}", file=sys.stderr)
    print(f"{len(issues)} error(s)", file=sys.stderr)


def report_error(args: argparse.Namespace, error: RaftschedError) -> int:
    """Print `error` (one line, or the --json error object) and return its exit code."""
    hint = getattr(error, "hint", "") or _default_hint(args, error.code)
    message = " ".join(error.message.split())
    log_tail: Sequence[str] = getattr(error, "log_tail", ())
    if getattr(args, "json", False):
        body: dict[str, Any] = {"code": error.code.value, "message": message}
        if hint:
            body["hint"] = hint
        body.update(getattr(error, "details", {}))
        if log_tail:
            body.update(log=getattr(error, "log", None), log_tail=list(log_tail))
        _print_json({"error": body})
    else:
        if log_tail:
            print(f"--- last {len(log_tail)} lines of {getattr(error, 'log', '?')}",
                  file=sys.stderr)
            print("\n".join(log_tail), file=sys.stderr)
            print("---", file=sys.stderr)
        print(f"error: {error.code.value}: {message}" + (f"; {hint}" if hint else ""),
              file=sys.stderr)
    return EXIT_FOR_CODE.get(error.code, EXIT_INVALID)


def _default_hint(args: argparse.Namespace, code: Code) -> str:
    if getattr(args, "reads_only", False) and code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED):
        return ("this command only reads, nothing was changed: retry it, or check the cluster "
                "with: raftsched admin status")
    return ""


def _report_interrupt(args: argparse.Namespace, message: str) -> int:
    message = message or "interrupted"
    if getattr(args, "json", False):
        _print_json({"error": {"code": INTERRUPTED, "message": message}})
    else:
        print(f"\n{message}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _os_message(error: OSError) -> str:
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


def _command_parser(commands: Subparsers, name: str, parents: Sequence[argparse.ArgumentParser],
                    summary: str, description: str, output: str) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does (`description`) and prints (`output`)."""
    return commands.add_parser(
        name, parents=list(parents), help=summary,
        description="\n\n".join(textwrap.fill(part, HELP_WIDTH)
                                for part in description.split("\n\n")),
        epilog=f"{output}\n{_EXIT_CODES}", formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# --- validate -------------------------------------------------------------------------------------

_VALIDATE_HELP = """\
Check a job spec file (YAML or JSON, the format `raftsched submit` takes) without contacting
any scheduler: field names and types, bounds, defaults, and the dependency graph (unknown or
duplicate task ids, tasks depending on themselves, cycles). Every problem is reported, not
just the first."""

_VALIDATE_OUTPUT = """\
output:
  valid:     stdout "ok: N tasks, M edges" (M = number of depends_on entries); exit 0
  invalid:   stderr one "error: PATH: MESSAGE" line per problem, e.g.
               error: tasks[2] (load).resources.cpu: must be a number > 0, got -1
             then "N error(s)"; exit 2
  --json:    stdout one object, exit 0 or 2:
               {"ok": true, "file": F, "name": NAME, "tasks": N, "edges": M}
               {"ok": false, "file": F, "errors": [{"path": P, "task": ID|null, "message": M}]}
  A cycle "a -> b -> a" reads "a depends on b, b depends on a"."""


def _register_validate(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "validate",
        parents=[common],
        help="check a job spec file and report every problem",
        description=_VALIDATE_HELP,
        epilog=_VALIDATE_OUTPUT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job spec (YAML or JSON); '-' reads stdin")
    parser.set_defaults(handler=_run_validate)


def _run_validate(args: argparse.Namespace) -> int:
    file: str = args.file
    try:
        spec = _read_spec(file)
    except SpecError as error:
        if args.json:
            errors = [{"path": i.path, "task": i.task, "message": i.message} for i in error.issues]
            _print_json({"ok": False, "file": file, "errors": errors})
        else:
            _print_issues(error.issues)
        return EXIT_INVALID
    if args.json:
        _print_json(_valid_summary(file, spec))
    else:
        print(f"ok: {len(spec.tasks)} tasks, {spec.edge_count()} edges")
    return EXIT_OK


def _valid_summary(file: str, spec: JobSpec) -> dict[str, Any]:
    return {
        "ok": True,
        "file": file,
        "name": spec.name,
        "tasks": len(spec.tasks),
        "edges": spec.edge_count(),
    }


def _read_spec(file: str) -> JobSpec:
    """The spec in `file`, or on stdin for '-'."""
    if file != "-":
        return load_spec_file(file)
    try:
        data = _read_stdin()
    except OSError as error:
        raise SpecError([SpecIssue("", f"cannot read stdin: {error}")]) from None
    return parse_spec_text(data, source="<stdin>")


def _read_stdin() -> str | bytes:
    """At most one byte more than a spec may have (the size check then refuses it)."""
    if sys.stdin is None:
        raise OSError("no standard input")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        data: bytes = buffer.read(limits.MAX_SPEC_BYTES + 1)
        return data
    return sys.stdin.read(limits.MAX_SPEC_BYTES + 1)


# --- talking to a cluster -----------------------------------------------------------------------


def _connection_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("connection")
    group.add_argument(
        "--servers", metavar="HOST:PORT,...",
        help=f"gRPC addresses of scheduler replicas (default: ${SERVERS_ENV}, else the dev "
        "cluster recorded in $RAFTSCHED_DEV_DIR or ./.raftsched-dev)",
    )
    group.add_argument(
        "--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"give up after this long, retries through elections included "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    return options


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"must be > 0 and at most 86400 seconds, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def resolve_servers(flag: str | None) -> list[str]:
    """--servers, else $RAFTSCHED_SERVERS, else the servers of the recorded dev cluster."""
    if flag:
        return parse_addresses(flag, "--servers")
    if os.environ.get(SERVERS_ENV):
        return parse_addresses(os.environ[SERVERS_ENV], SERVERS_ENV)
    from raftsched.dev import cluster as devcluster

    servers = devcluster.servers_from_state(devcluster.default_dir())
    if not servers:
        raise CommandError(Code.INVALID_ARGUMENT,
                           "no scheduler addresses: pass --servers HOST:PORT,..., set "
                           f"{SERVERS_ENV}, or start a local cluster with: raftsched dev up")
    return servers


def parse_addresses(text: str, source: str) -> list[str]:
    addresses = [part.strip() for part in text.split(",") if part.strip()]
    if not addresses:
        raise CommandError(Code.INVALID_ARGUMENT, f"{source} names no address")
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CommandError(Code.INVALID_ARGUMENT,
                               f"{source}: {address!r} is not HOST:PORT")
    return addresses


@contextlib.contextmanager
def _connect(args: argparse.Namespace) -> Iterator[ClientLike]:
    client = make_client(resolve_servers(args.servers), args.timeout)
    try:
        yield client
    finally:
        client.close()


def _unknown_outcome(error: RaftschedError, what: str, retry: str) -> RaftschedError:
    """For a change whose call failed with UNAVAILABLE or DEADLINE_EXCEEDED: say the outcome is
    unknown and how to retry safely. Other errors are returned unchanged."""
    if error.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED):
        return error
    return CommandError(error.code, error.message,
                        hint=f"the outcome is unknown: {what} may or may not have happened; "
                        f"{retry}")


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- submit ---------------------------------------------------------------------------------------

_SUBMIT_HELP = """\
Validate a job spec locally (exactly like `raftsched validate`), then submit it to the
scheduler. Every submission carries an idempotency key (--idempotency-key, else the spec's
idempotency_key, else a fresh one): sending the same spec again with the same key returns the
same job instead of creating a second one, so a submit whose outcome is unknown is safe to
repeat. With --watch, follow the job until it finishes."""

_SUBMIT_OUTPUT = """\
output:
  stdout "submitted job JOB_ID (new; idempotency key K)", or "(already existed: ...)" when the
  key was seen with this same spec. A spec with problems: the `validate` error lines, exit 2.
  --watch: a progress line per change, e.g.
    [12:00:01] RUNNING  3/7 done  (SUCCEEDED 3, RUNNING 2, RUNNABLE 2)
  then the table TASK STATE ATTEMPTS CLUSTER FENCE EXIT (REASON), then the outcome line;
  exit 0 if the job SUCCEEDED, 1 if it ended FAILED or CANCELLED. Ctrl-C stops watching
  (exit 130), not the job.
  --json: {"job_id", "created", "idempotency_key"}; with --watch also "state", "tasks"
  ({STATE: count} of the final job) and "task_summaries" (the `job tasks` list).
  A bad spec with --json: {"error": {"code": "INVALID_ARGUMENT", "message", "issues":
  [{"path", "task", "message"}]}}."""


def _register_submit(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = _command_parser(commands, "submit", [common, _CONNECTION],
                             "submit a job spec file (optionally watch it run)",
                             _SUBMIT_HELP, _SUBMIT_OUTPUT)
    parser.add_argument("file", metavar="FILE", help="job spec (YAML or JSON); '-' reads stdin")
    parser.add_argument("--watch", action="store_true",
                        help="show progress until the job finishes, then every task's outcome")
    parser.add_argument("--idempotency-key", metavar="KEY",
                        help="overrides the spec's idempotency_key")
    parser.set_defaults(handler=_run_submit)


def _run_submit(args: argparse.Namespace) -> int:
    try:
        text = _read_spec_text(args.file)
        spec = parse_spec_text(text, source="<stdin>" if args.file == "-" else args.file)
    except SpecError as error:
        return _spec_refused(args, error)
    key = _idempotency_key(args.idempotency_key, spec)
    with _connect(args) as client:
        submitted = _submit(client, text, key, args.file)
        document: dict[str, Any] = {"job_id": submitted.job_id, "created": submitted.created,
                                    "idempotency_key": key}
        if not args.json:
            print(_submitted_line(submitted.job_id, submitted.created, key), flush=True)
        if not args.watch:
            if args.json:
                _print_json(document)
            else:
                print(f"follow it with: raftsched job status {submitted.job_id}")
            return EXIT_OK
        try:
            final = _watch(args, client, submitted.job_id)
            tasks = [render.task_doc(task) for task in client.list_tasks(submitted.job_id).tasks]
        except CommandError:
            raise
        except RaftschedError as error:
            raise CommandError(error.code, error.message,
                               hint=f"job {submitted.job_id} was submitted and goes on; follow "
                               f"it with: raftsched job status {submitted.job_id}") from None
    return _print_watched(args, document, final, tasks)


def _read_spec_text(file: str) -> bytes | str:
    """The spec's bytes, read like `validate` reads them (an unreadable file is a SpecError)."""
    if file == "-":
        try:
            return _read_stdin()
        except OSError as error:
            raise SpecError([SpecIssue("", f"cannot read stdin: {error}")]) from None
    try:
        with open(file, "rb") as handle:
            return handle.read(limits.MAX_SPEC_BYTES + 1)
    except OSError as error:
        reason = error.strerror or str(error)
        raise SpecError([SpecIssue("", f"cannot read {file}: {reason}")]) from None


def _spec_refused(args: argparse.Namespace, error: SpecError) -> int:
    if not args.json:
        _print_issues(error.issues)
        return EXIT_INVALID
    issues = [{"path": i.path, "task": i.task, "message": i.message} for i in error.issues]
    return report_error(args, CommandError(Code.INVALID_ARGUMENT, str(error),
                                           details={"issues": issues}))


def _idempotency_key(flag: str | None, spec: JobSpec) -> str:
    key = flag or spec.idempotency_key or f"cli-{uuid.uuid4().hex}"
    if len(key) > limits.MAX_IDEMPOTENCY_KEY_CHARS:
        raise CommandError(Code.INVALID_ARGUMENT, f"--idempotency-key: at most "
                                                  f"{limits.MAX_IDEMPOTENCY_KEY_CHARS} characters")
    return key


def _submit(client: ClientLike, text: bytes | str, key: str, file: str) -> Any:
    retry = (f"running the same command again with --idempotency-key {key} is safe: the "
             "scheduler then returns the job instead of creating a second one")
    try:
        return client.submit(text, idempotency_key=key)
    except RaftschedError as error:
        raise _unknown_outcome(error, "the job", retry) from None
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: job {file} may or may not have been submitted; "
                          f"{retry}") from None


def _submitted_line(job_id: str, created: bool, key: str) -> str:
    if created:
        return f"submitted job {job_id} (new; idempotency key {key})"
    return (f"submitted job {job_id} (already existed: same spec and idempotency key {key}; "
            f"nothing new was created)")


def _watch(args: argparse.Namespace, client: ClientLike, job_id: str) -> dict[str, Any]:
    """Follow the job until it is terminal, printing a progress line per change (not with
    --json). Returns the final job document."""
    last: dict[str, Any] | None = None
    try:
        for job in client.watch(job_id):
            document = render.job_doc(job)
            if not args.json and (last is None or (document["state"], document["tasks"])
                                  != (last["state"], last["tasks"])):
                print(render.progress_line(document, datetime.now()), flush=True)
            last = document
        if last is None or last["state"] not in render.TERMINAL_JOB_STATES:
            last = render.job_doc(client.get_job(job_id))
    except KeyboardInterrupt:
        raise Interrupted(f"stopped watching; job {job_id} goes on (raftsched job status "
                          f"{job_id}; stop it with: raftsched job cancel {job_id})") from None
    if last["state"] not in render.TERMINAL_JOB_STATES:
        raise CommandError(Code.UNAVAILABLE, f"the watch of job {job_id} ended while the job "
                           f"is {last['state']}",
                           hint=f"the job goes on; follow it with: raftsched job status {job_id}")
    return last


def _print_watched(args: argparse.Namespace, document: dict[str, Any], final: dict[str, Any],
                   tasks: list[dict[str, Any]]) -> int:
    code = EXIT_OK if final["state"] == "SUCCEEDED" else EXIT_JOB_FAILED
    if args.json:
        _print_json({**document, "state": final["state"], "tasks": final["tasks"],
                     "task_summaries": tasks, "reason": final["reason"]})
        return code
    done, total = render.done_and_total(final)
    took = ""
    if final["started_ms"] and final["finished_ms"]:
        took = f" in {render.format_duration_ms(final['finished_ms'] - final['started_ms'])}"
    print()
    print(render.tasks_table(tasks))
    print()
    print(f"job {final['job_id']} {final['state']}{took}: {done}/{total} tasks done "
          f"({render.state_counts_text(final['tasks'])})"
          + (f"; {final['reason']}" if final["reason"] else ""))
    return code


# --- job ------------------------------------------------------------------------------------------

_JOB_HELP = "Inspect, list and cancel jobs: raftsched job status|tasks|list|cancel."


def _register_job(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    job = commands.add_parser("job", help="inspect, list and cancel jobs", description=_JOB_HELP)
    sub = job.add_subparsers(title="job commands", metavar="COMMAND", required=True)
    parents = [common, _CONNECTION]

    status = _command_parser(
        sub, "status", parents, "a job's state and task counts",
        "Show one job: its state, how many tasks are in each state, its tenant, priority and "
        "times.",
        'output:\n  one "field  value" line each (job, state, tasks, tenant, times, reason)\n'
        '  --json: {"job_id", "state", "tasks": {STATE: count}, "name", "tenant", "priority",\n'
        '           "total_tasks", "submitted_ms", "started_ms", "finished_ms", "reason", ...}')
    status.add_argument("job_id", metavar="JOB")
    status.set_defaults(handler=_run_job_status, reads_only=True)

    tasks = _command_parser(
        sub, "tasks", parents, "every task of a job with its attempt and cluster",
        "List every task of a job: its state, attempts so far, and the cluster, fence and exit "
        "code of its current attempt.",
        "output:\n  a table TASK STATE ATTEMPTS CLUSTER FENCE EXIT (REASON when any)\n"
        '  --json: a list of {"task_id", "state", "attempts", "cluster", "fence",\n'
        '           "exit_code" (null if none), "reason"}')
    tasks.add_argument("job_id", metavar="JOB")
    tasks.set_defaults(handler=_run_job_tasks, reads_only=True)

    listing = _command_parser(
        sub, "list", parents, "list jobs, a page at a time",
        "List jobs, optionally only one tenant's or those in one state, one page at a time.",
        "output:\n  a table JOB NAME TENANT STATE DONE SUBMITTED, then the command for the next "
        "page if any\n"
        '  --json: {"jobs": [job status objects], "next_page_token": TOKEN or ""}')
    listing.add_argument("--tenant", default="", help="only this tenant's jobs")
    listing.add_argument("--state", default="", type=str.upper, choices=JOB_STATES,
                         help="only jobs in this state")
    listing.add_argument("--limit", type=_positive_int, default=0, metavar="N",
                         help="at most N jobs (default: the server's page size)")
    listing.add_argument("--page-token", default="", metavar="TOKEN",
                         help="the next page, from a previous listing")
    listing.set_defaults(handler=_run_job_list, reads_only=True)

    cancel = _command_parser(
        sub, "cancel", parents, "cancel a job's unfinished tasks",
        "Cancel a job: tasks not yet finished become CANCELLED and running attempts are told to "
        "stop. Cancelling is idempotent: a second cancel changes nothing.",
        'output:\n  "cancelled job JOB: N task(s) cancelled", or that nothing changed\n'
        '  --json: {"job_id", "cancelled": N, "changed": true|false}')
    cancel.add_argument("job_id", metavar="JOB")
    cancel.add_argument("--reason", default="", help="recorded with the cancellation")
    cancel.set_defaults(handler=_run_job_cancel)


def _run_job_status(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        document = render.job_doc(client.get_job(args.job_id))
    if args.json:
        _print_json(document)
    else:
        print(render.job_text(document, now_ms=_now_ms()))
    return EXIT_OK


def _run_job_tasks(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        tasks = [render.task_doc(task) for task in client.list_tasks(args.job_id).tasks]
    if args.json:
        _print_json(tasks)
    else:
        print(render.tasks_table(tasks))
    return EXIT_OK


def _run_job_list(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        page = client.list_jobs(tenant=args.tenant, state=args.state, limit=args.limit,
                                page_token=args.page_token)
    jobs = [render.job_doc(job) for job in page.jobs]
    if args.json:
        _print_json({"jobs": jobs, "next_page_token": page.next_page_token})
        return EXIT_OK
    print(render.jobs_table(jobs, now_ms=_now_ms()))
    if page.next_page_token:
        print(f"\nmore: raftsched job list --page-token {page.next_page_token}")
    return EXIT_OK


def _run_job_cancel(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        try:
            reply = client.cancel(args.job_id, reason=args.reason)
        except RaftschedError as error:
            raise _unknown_outcome(error, "the cancellation",
                                   "cancelling is idempotent: running the same command again "
                                   "is safe") from None
    document = {"job_id": args.job_id, "cancelled": reply.cancelled, "changed": reply.changed}
    if args.json:
        _print_json(document)
    elif reply.changed:
        print(f"cancelled job {args.job_id}: {reply.cancelled} task(s) cancelled")
    else:
        print(f"job {args.job_id}: nothing changed (it was cancelled already)")
    return EXIT_OK


# --- task -----------------------------------------------------------------------------------------


def _register_task(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    task = commands.add_parser(
        "task", help="one task's attempts, or why it is not running",
        description="Look at one task of a job: raftsched task history|explain.")
    sub = task.add_subparsers(title="task commands", metavar="COMMAND", required=True)
    parents = [common, _CONNECTION]

    history = _command_parser(
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

    explain = _command_parser(
        sub, "explain", parents, "why a task is where it is (e.g. not placed)",
        "Explain a task's state; for a task waiting to be placed, say for every cluster whether "
        "it could take the task and, if not, what it lacks.",
        "output:\n  \"STATE: summary\", then a table CLUSTER ELIGIBLE WHY NOT\n"
        '  --json: {"state", "summary", "clusters": [{"cluster", "eligible", "reason"}]}')
    explain.add_argument("job_id", metavar="JOB")
    explain.add_argument("task_id", metavar="TASK")
    explain.set_defaults(handler=_run_task_explain, reads_only=True)


def _run_task_history(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        document = render.history_doc(client.task_history(args.job_id, args.task_id))
    if args.json:
        _print_json(document)
    else:
        print(render.history_text(document, now_ms=_now_ms()))
    return EXIT_OK


def _run_task_explain(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        reply = client.explain(args.job_id, args.task_id)
    document = render.explain_doc(reply, args.job_id, args.task_id)
    if args.json:
        _print_json(document)
    else:
        print(render.explain_text(document))
    return EXIT_OK


# --- admin ----------------------------------------------------------------------------------------


def _register_admin(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    admin = commands.add_parser(
        "admin", help="replicas, leadership, compute clusters, membership",
        description="Operate the scheduler: raftsched admin status|add-replica|remove-replica.")
    sub = admin.add_subparsers(title="admin commands", metavar="COMMAND", required=True)
    parents = [common, _CONNECTION]

    status = _command_parser(
        sub, "status", parents, "who leads, the replicas and the compute clusters",
        "Ask one replica what it sees (--server; else the leader, found through the first "
        "replica that answers): the leader and "
        "term, the Raft members, the commit index, and every compute cluster with its status, "
        "capacity and what is reserved on it.",
        "output:\n  the leader line, a table of replicas, a table of compute clusters\n"
        '  --json: {"leader", "term", "replicas": [{"raft_address", "grpc_address", "leader"}],'
        '\n           "clusters": [{"cluster", "status", "capabilities", "capacity", "reserved",'
        ' ...}],\n           "commit_index", "applied_index", "responder"}')
    status.add_argument("--server", metavar="HOST:PORT",
                        help="ask this replica only (its view may differ from the leader's)")
    status.set_defaults(handler=_run_admin_status, reads_only=True)

    add = _command_parser(
        sub, "add-replica", parents, "add a replica to the Raft cluster",
        "Add a replica (already started with --peers naming the current members) to the Raft "
        "membership. One change at a time.",
        'output:\n  "added RAFT_ADDR; members: ..."\n  --json: {"raft_address", "members": [...]}')
    add.add_argument("raft_address", metavar="RAFT_ADDR", help="the new replica's Raft address")
    add.add_argument("--grpc", default="", metavar="GRPC_ADDR",
                     help="the new replica's gRPC address (for redirects and status)")
    add.set_defaults(handler=_run_admin_add)

    remove = _command_parser(
        sub, "remove-replica", parents, "remove a replica from the Raft cluster",
        "Remove a replica from the Raft membership. The leader cannot remove itself: it hands "
        "leadership over first.",
        'output:\n  "removed RAFT_ADDR; members: ..."\n  --json: {"raft_address", "members": '
        '[...]}')
    remove.add_argument("raft_address", metavar="RAFT_ADDR")
    remove.set_defaults(handler=_run_admin_remove)


def _run_admin_status(args: argparse.Namespace) -> int:
    server = parse_addresses(args.server, "--server")[0] if args.server else None
    servers = [server] if server and not args.servers else None
    with _connect_to(args, servers) as client:
        status = client.cluster_status(server=server)
        if server is None and status.leader and status.leader != status.responder:
            with contextlib.suppress(RaftschedError):  # the first answer will do
                status = client.cluster_status(server=status.leader)
        document = render.cluster_status_doc(status)
    if args.json:
        _print_json(document)
    else:
        print(render.cluster_status_text(document))
    return EXIT_OK


@contextlib.contextmanager
def _connect_to(args: argparse.Namespace, servers: list[str] | None) -> Iterator[ClientLike]:
    if servers is None:
        with _connect(args) as client:
            yield client
        return
    client = make_client(servers, args.timeout)
    try:
        yield client
    finally:
        client.close()


def _run_admin_add(args: argparse.Namespace) -> int:
    parse_addresses(args.raft_address, "RAFT_ADDR")
    if args.grpc:
        parse_addresses(args.grpc, "--grpc")
    return _change_membership(args, "added", lambda client: client.add_replica(
        args.raft_address, args.grpc))


def _run_admin_remove(args: argparse.Namespace) -> int:
    parse_addresses(args.raft_address, "RAFT_ADDR")
    return _change_membership(args, "removed",
                              lambda client: client.remove_replica(args.raft_address))


def _change_membership(args: argparse.Namespace, verb: str,
                       change: Callable[[ClientLike], Any]) -> int:
    with _connect(args) as client:
        try:
            reply = change(client)
        except RaftschedError as error:
            raise _unknown_outcome(error, "the membership change",
                                   "check the members with `raftsched admin status` before "
                                   "retrying") from None
    members = list(reply.members)
    if args.json:
        _print_json({"raft_address": args.raft_address, "members": members})
    else:
        print(f"{verb} {args.raft_address}; members: {', '.join(members)}")
    return EXIT_OK


# --- dev ------------------------------------------------------------------------------------------

_DEV_JSON = (
    '  --json: {"servers": [gRPC addresses], "replicas": [{"id", "pid", "address", '
    '"raft_address",\n           "leader", "alive"}], "agents": [{"cluster", "pid", "alive", '
    '"status"}], "dir", ...}')


def _register_dev(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    dev = commands.add_parser(
        "dev", help="a local cluster of real processes (up, status, down)",
        description="Run a local cluster of real replica and agent processes on 127.0.0.1: "
        "raftsched dev up|status|down. Its state is DIR/cluster.json; while it exists, the other "
        "commands use its servers by default.")
    sub = dev.add_subparsers(title="dev commands", metavar="COMMAND", required=True)
    directory = argparse.ArgumentParser(add_help=False)
    directory.add_argument("--dir", type=Path, default=None, metavar="DIR",
                           help="the cluster's directory (default: $RAFTSCHED_DEV_DIR, else "
                           "./.raftsched-dev)")
    _register_dev_up(sub, [common, directory])

    status = _command_parser(
        sub, "status", [common, directory], "which dev cluster processes are alive, who leads",
        "Show each process recorded in DIR/cluster.json as alive or dead (by pid and start "
        "time), which replica leads, and each agent's cluster status.",
        "output:\n  tables of replicas and agents; exit 0 while a cluster is recorded, 2 if "
        f"none is\n{_DEV_JSON}")
    status.set_defaults(handler=_run_dev_status)

    down = _command_parser(
        sub, "down", [common, directory], "stop the dev cluster's processes",
        "Stop exactly the processes recorded in DIR/cluster.json: each is signalled only if its "
        "pid still has the recorded start time (SIGTERM, then SIGKILL after "
        "STOP_TIMEOUT_S). Removes the state file and nothing else: logs, secret and data stay. "
        "Running it again is harmless.",
        "output:\n  a table NAME PID OUTCOME (stopped, killed, not running), or that nothing "
        'was recorded\n  --json: {"dir", "recorded": true|false, "stopped": [{"name", "pid", '
        '"outcome"}]}')
    down.set_defaults(handler=_run_dev_down)


def _register_dev_up(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    from raftsched.dev import cluster as dc

    up = _command_parser(
        sub, "up", parents, "start replicas and agents locally and wait until ready",
        f"Start {dc.DEFAULT_REPLICAS} (or 5) replicas and {dc.DEFAULT_AGENTS} agents as "
        "background processes on ephemeral 127.0.0.1 ports, with a fresh cluster secret in "
        "DIR/secret (0600) and logs in DIR/logs; wait until a replica leads and every agent's "
        "cluster is READY. Agents: cpu-east [linux], gpu-west [linux, gpu] (2 GPUs), then "
        "agent-3, ... [linux]. On failure, stop what was started and show the failing log.",
        "output:\n  progress lines on stderr, then tables of replicas (pid, gRPC and Raft "
        "address, role)\n  and agents; exit 0 when ready, 2 if a process exits while starting "
        f"or a cluster\n  already runs in DIR, 3 on timeout\n{_DEV_JSON}")
    up.add_argument("--replicas", type=int, choices=dc.REPLICA_COUNTS,
                    default=dc.DEFAULT_REPLICAS)
    up.add_argument("--agents", type=int, choices=range(dc.MAX_AGENTS + 1),
                    default=dc.DEFAULT_AGENTS, metavar=f"0..{dc.MAX_AGENTS}",
                    help=f"agents to start (default {dc.DEFAULT_AGENTS})")
    up.add_argument("--executor", choices=dc.EXECUTORS, default=dc.DEFAULT_EXECUTOR,
                    help="mock: tasks succeed without running; subprocess: run the commands "
                    f"(default {dc.DEFAULT_EXECUTOR})")
    up.add_argument("--timeout", type=_positive_seconds, default=dc.UP_TIMEOUT_S,
                    metavar="SECONDS",
                    help=f"wait this long for readiness (UP_TIMEOUT_S, default "
                    f"{dc.UP_TIMEOUT_S:g})")
    up.set_defaults(handler=_run_dev_up)


def _dev_dir(args: argparse.Namespace) -> Path:
    from raftsched.dev import cluster as devcluster

    directory: Path | None = args.dir
    return directory if directory is not None else devcluster.default_dir()


def _progress(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def _run_dev_up(args: argparse.Namespace) -> int:
    from raftsched.dev import cluster as devcluster

    options = devcluster.UpOptions(_dev_dir(args), args.replicas, args.agents, args.executor,
                                   args.timeout)
    state, view = devcluster.up(options, progress=_progress)
    document = devcluster.cluster_doc(state, view)
    if args.json:
        _print_json(document)
        return EXIT_OK
    print(f"dev cluster up: {len(state.replicas)} replicas, {len(state.agents)} agents "
          f"({state.executor} executor)\n")
    print(render.dev_cluster_text(document))
    print(f"\nuse it:  export RAFTSCHED_DEV_DIR={state.dir}   (or RAFTSCHED_SERVERS="
          f"{','.join(state.servers)})")
    print(f"stop it: raftsched dev down --dir {state.dir}")
    return EXIT_OK


def _run_dev_status(args: argparse.Namespace) -> int:
    from raftsched.dev import cluster as devcluster

    state, view = devcluster.status(_dev_dir(args))
    document = devcluster.cluster_doc(state, view)
    if args.json:
        _print_json(document)
        return EXIT_OK
    leader = document["leader"] or "none known (no live replica answered)"
    print(f"dev cluster in {state.dir}; leader: {leader}\n")
    print(render.dev_cluster_text(document))
    return EXIT_OK


def _run_dev_down(args: argparse.Namespace) -> int:
    from raftsched.dev import cluster as devcluster

    directory = _dev_dir(args)
    results = devcluster.down(directory)
    stopped = [{"name": r.name, "pid": r.pid, "outcome": r.outcome} for r in results or []]
    if args.json:
        _print_json({"dir": str(directory.resolve()), "recorded": results is not None,
                     "stopped": stopped})
    elif results is None:
        print(f"no dev cluster recorded in {directory}: nothing to stop")
    else:
        print(render.table(["NAME", "PID", "OUTCOME"],
                           [[s["name"], s["pid"], s["outcome"]] for s in stopped], right=[1]))
        print(f"\nstopped; logs kept in {directory.resolve() / devcluster.LOG_DIR_NAME}")
    return EXIT_OK


# --- replica and agent (the servers) --------------------------------------------------------------

_SERVERS: dict[str, tuple[str, str, str]] = {
    "replica": (
        "raftsched.replica.main", "run one scheduler replica (Raft + gRPC API)",
        "Run one scheduler replica in the foreground: a Raft member (pysyncobj) that serves "
        "the gRPC API, and places work while it leads. It refuses to start without a cluster "
        "secret (--secret-file or $RAFTSCHED_SECRET) unless --insecure-dev. It logs "
        "'event key=value' lines on stderr and runs until SIGTERM or Ctrl-C.",
    ),
    "agent": (
        "agent.main", "run the agent of one compute cluster",
        "Run the agent of one compute cluster in the foreground: it registers with the leader "
        "(--servers), heartbeats its free capacity, admits fenced assignments, runs them "
        "(subprocess or mock executor) and reports results from a durable outbox. It logs "
        "'event key=value' lines on stderr and runs until SIGTERM or Ctrl-C.",
    ),
}


def _register_servers(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    for name, (_, summary, _description) in _SERVERS.items():
        parser = commands.add_parser(name, parents=[common], help=summary, add_help=False,
                                     allow_abbrev=False)
        parser.set_defaults(handler=_run_server, passthrough=True, server=name)


def _run_server(args: argparse.Namespace) -> int:
    """Parse the remaining arguments with the server's own options and run it."""
    module_name, _, description = _SERVERS[args.server]
    parser = argparse.ArgumentParser(
        prog=f"raftsched {args.server}", description=description,
        epilog="exit status: 0 after a clean shutdown; 2 bad options or a server that cannot "
        "start here; other non-zero on a fatal error.")
    module = _import_server(args.server, module_name)
    if module is None and any(flag in args.extra for flag in ("-h", "--help")):
        parser.print_help()
    if module is None:
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"'raftsched {args.server}' is not available in this installation: "
                           f"{module_name} is missing")
    module.add_arguments(parser)
    try:
        server_args = parser.parse_args(args.extra)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else EXIT_INVALID
    return int(module.run(server_args))


def _import_server(server: str, module_name: str) -> Any:
    """The server's wiring module, or None if it does not exist (yet)."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):
            return None
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"'raftsched {server}' cannot start: {error}",
                           hint="reinstall with: pip install -e .") from None
    except ImportError as error:
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"'raftsched {server}' cannot start: {error}") from None
    if not callable(getattr(module, "add_arguments", None)) or not callable(
            getattr(module, "run", None)):
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"{module_name} has no add_arguments(parser) and run(args)")
    return module


_CONNECTION = _connection_options()

_COMMANDS: tuple[Callable[[Subparsers, argparse.ArgumentParser], None], ...] = (
    _register_validate,
    _register_submit,
    _register_job,
    _register_task,
    _register_admin,
    _register_dev,
    _register_servers,
)


if __name__ == "__main__":
    raise SystemExit(main())
