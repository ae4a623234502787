"""What every `raftsched` subcommand shares: exit codes, the client it talks through, error
reporting, help layout, and the connection options."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeAlias

from raftsched import limits
from raftsched.errors import Code, RaftschedError
from raftsched.options import positive_seconds
from raftsched.spec.job import SpecIssue

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
RETRY_NOTICE_EVERY_S = 5.0
"""A retrying command says why on stderr at most this often."""
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
    def cluster_status(self, server: str | None = None, *,
                       include_digest: bool = False) -> Any: ...
    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any: ...
    def remove_replica(self, raft_address: str) -> Any: ...
    def close(self) -> None: ...


def make_client(servers: list[str], timeout_s: float) -> ClientLike:
    """The one place the CLI builds a client (grpc is imported here, not at start-up). While a
    call retries, what it waits for is said on stderr (see `RetryNotices`)."""
    from raftsched.client.client import Client

    return Client(servers, timeout_s=min(timeout_s, MAX_CALL_TIMEOUT_S),
                  retry_budget_s=timeout_s, on_retry=RetryNotices(timeout_s))


class RetryNotices:
    """Says on stderr why a call is retrying — at the first retry, then at most every
    RETRY_NOTICE_EVERY_S — so a command never waits out its --timeout in silence (e.g. on a
    dead address). stdout, and so `--json`, is untouched."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._started_s = clock()
        self._last_s: float | None = None

    def __call__(self, error: RaftschedError, delay_s: float) -> None:
        now_s = self._clock()
        if self._last_s is not None and now_s - self._last_s < RETRY_NOTICE_EVERY_S:
            return
        self._last_s = now_s
        left_s = max(0.0, self._timeout_s - (now_s - self._started_s))
        print(f"waiting: {' '.join(error.message.split())}; retrying for up to {left_s:.0f} s "
              "more (--timeout; Ctrl-C stops)", file=sys.stderr, flush=True)


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


def print_json(document: Any) -> None:
    print(json.dumps(document))


def print_issues(issues: Sequence[SpecIssue]) -> None:
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
        print_json({"error": body})
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


def report_interrupt(args: argparse.Namespace, message: str) -> int:
    message = message or "interrupted"
    if getattr(args, "json", False):
        print_json({"error": {"code": INTERRUPTED, "message": message}})
    else:
        print(f"\n{message}", file=sys.stderr)
    return EXIT_INTERRUPTED


def os_message(error: OSError) -> str:
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


def command_parser(commands: Subparsers, name: str, parents: Sequence[argparse.ArgumentParser],
                    summary: str, description: str, output: str) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does (`description`) and prints (`output`)."""
    return commands.add_parser(
        name, parents=list(parents), help=summary,
        description="\n\n".join(textwrap.fill(part, HELP_WIDTH)
                                for part in description.split("\n\n")),
        epilog=f"{output}\n{_EXIT_CODES}", formatter_class=argparse.RawDescriptionHelpFormatter,
    )


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
        "--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"give up after this long, retries through elections included "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    return options


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
def connect(args: argparse.Namespace, servers: list[str] | None = None) -> Iterator[ClientLike]:
    """A client for `servers` (default: `resolve_servers(--servers)`), closed afterwards."""
    client = make_client(servers or resolve_servers(args.servers), args.timeout)
    try:
        yield client
    finally:
        client.close()


def unknown_outcome(error: RaftschedError, what: str, retry: str) -> RaftschedError:
    """For a change whose call failed with UNAVAILABLE or DEADLINE_EXCEEDED: say the outcome is
    unknown and how to retry safely. Other errors are returned unchanged."""
    if error.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED):
        return error
    return CommandError(error.code, error.message,
                        hint=f"the outcome is unknown: {what} may or may not have happened; "
                        f"{retry}")


def now_ms() -> int:
    return int(time.time() * 1000)



CONNECTION = _connection_options()


def read_stdin() -> str | bytes:
    """At most one byte more than a spec may have (the size check then refuses it)."""
    if sys.stdin is None:
        raise OSError("no standard input")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        data: bytes = buffer.read(limits.MAX_SPEC_BYTES + 1)
        return data
    return sys.stdin.read(limits.MAX_SPEC_BYTES + 1)
