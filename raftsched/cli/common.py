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
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeAlias

from raftsched import limits
from raftsched.environment import SERVERS_ENV, TLS_ENV, TOKEN_ENV
from raftsched.errors import Code, CouldNotConnect, RaftschedError
from raftsched.options import parse_address_list, positive_seconds
from raftsched.spec.issue import SpecIssue
from raftsched.spec.model import JobSpec
from raftsched.spec.params import parse_assignments
from raftsched.state.text import unprintable, visible
from raftsched.states import JOB_STATE_NAMES

if TYPE_CHECKING:  # raftsched.tls imports grpc: only the commands that connect load it
    from raftsched.tls import TlsFiles

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""stdout was closed by its reader (`raftsched events --json | head`): 128 + SIGPIPE, as a shell
reports a command killed by the signal; nothing more is printed."""
EXIT_FOR_CODE: dict[Code, int] = {
    Code.INVALID_ARGUMENT: EXIT_INVALID,
    Code.NOT_FOUND: EXIT_INVALID,
    Code.ALREADY_EXISTS: EXIT_INVALID,
    Code.FAILED_PRECONDITION: EXIT_INVALID,
    Code.RESOURCE_EXHAUSTED: EXIT_INVALID,
    Code.UNAUTHENTICATED: EXIT_INVALID,
    Code.PERMISSION_DENIED: EXIT_INVALID,
    Code.UNAVAILABLE: EXIT_UNAVAILABLE,
    Code.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
}
GRPC_VERBOSITY_ENV = "GRPC_VERBOSITY"
NOT_TLS_MARKER = "WRONG_VERSION_NUMBER"
"""What OpenSSL says when the other side of a TLS handshake answers in plaintext."""
DEFAULT_TIMEOUT_S = 30.0
"""How long a command keeps trying (through elections and redirects) before it gives up."""
RETRY_NOTICE_EVERY_S = 5.0
"""A retrying command says why on stderr at most this often."""
MAX_CALL_TIMEOUT_S = 10.0
"""Deadline of one RPC attempt within that time."""
INTERRUPTED = "INTERRUPTED"
"""The error code --json prints after Ctrl-C (not an API code)."""
JOB_STATES = JOB_STATE_NAMES
HELP_WIDTH = 92

Handler = Callable[[argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_EXIT_CODES = """\
exit status: 0 ok; 2 refused (bad input, unknown id, key conflict, wrong state, a limit) or
  usage error; 3 no replica answered, or the outcome of a change is unknown; 130 interrupted.
  Errors: stderr "error: CODE: message" (--json: stdout {"error": {"code", "message"}})."""


class ClientLike(Protocol):
    """What the CLI uses of `raftsched.client.Client` (tests pass a fake)."""

    def submit_spec(self, spec: JobSpec, idempotency_key: str | None = None) -> Any: ...

    def submit_jobs(self, specs: Sequence[JobSpec], keys: Sequence[str | None] = (),
                    labels: Sequence[str] = ()) -> list[Any]: ...
    def get_job(self, job_id: str) -> Any: ...
    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", *, query: str = "",
                  newest_first: bool = False) -> Any: ...
    def list_tasks(self, job_id: str) -> Any: ...
    def cancel(self, job_id: str, reason: str = "") -> Any: ...
    def task_history(self, job_id: str, task_id: str) -> Any: ...
    def explain(self, job_id: str, task_id: str) -> Any: ...
    def watch(self, job_id: str) -> Iterator[Any]: ...
    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]: ...
    def cluster_status(self, server: str | None = None, *,
                       include_digest: bool = False) -> Any: ...
    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any: ...
    def remove_replica(self, raft_address: str) -> Any: ...
    def create_token(self, tenant: str, role: str, note: str = "") -> Any: ...
    def revoke_token(self, token_id: str) -> Any: ...
    def list_tokens(self) -> Any: ...
    def revoke_certificate(self, fingerprint: str, subject: str = "",
                           reason: str = "") -> Any: ...
    def list_revoked_certificates(self) -> Any: ...
    def remove_cluster(self, cluster_id: str) -> Any: ...
    def drain_cluster(self, cluster_id: str, drain: bool, reason: str = "") -> Any: ...
    def set_tenant(self, tenant: str, *, weight: int | None = None,
                   max_queued: int | None = None, max_running: int | None = None) -> Any: ...
    def list_tenants(self) -> Any: ...
    def task_logs(self, job_id: str, task_id: str, *, attempt: int = 0, stream: str = "stdout",
                  follow: bool = False, tail_bytes: int = 0) -> Iterator[Any]: ...
    def save_snapshot(self, out: BinaryIO,
                      progress: Callable[[int, int], None] | None = None) -> Any: ...
    def create_schedule(self, schedule_id: str, spec_text: str) -> Any: ...
    def list_schedules(self, tenant: str = "") -> Any: ...
    def get_schedule(self, schedule_id: str) -> Any: ...
    def set_schedule(self, schedule_id: str, paused: bool, note: str = "") -> Any: ...
    def trigger_schedule(self, schedule_id: str) -> Any: ...
    def backfill_schedule(self, schedule_id: str, from_ms: int, to_ms: int,
                          max_concurrent: int = 1) -> Any: ...
    def delete_schedule(self, schedule_id: str) -> Any: ...
    def close(self) -> None: ...


def make_client(servers: list[str], timeout_s: float,
                tls_files: TlsFiles | None = None, token: str | None = None) -> ClientLike:
    """The one place the CLI builds a client (grpc is imported here, not at start-up), over
    mutual TLS with `tls_files` (None: plaintext). While a call retries, what it waits for is
    said on stderr (see `RetryNotices`)."""
    quiet_grpc()
    from raftsched.client.client import Client

    return Client(servers, timeout_s=min(timeout_s, MAX_CALL_TIMEOUT_S),
                  retry_budget_s=timeout_s, on_retry=RetryNotices(timeout_s, servers=servers),
                  tls_files=tls_files, token=token)


def quiet_grpc() -> None:
    """gRPC core logs every refused TLS handshake on stderr at its default verbosity; a command
    says what went wrong itself, in one line. Call before grpc is first imported ($GRPC_VERBOSITY
    set by the user wins)."""
    os.environ.setdefault(GRPC_VERBOSITY_ENV, "ERROR")


class RetryNotices:
    """Says on stderr why a call is retrying — at the first retry, then at most every
    RETRY_NOTICE_EVERY_S — so a command never waits out its --timeout in silence (e.g. on a
    dead address). stdout, and so `--json`, is untouched.

    Once as many distinct servers as `servers` names have refused the TLS handshake, it ends
    the call with that error instead: certificates do not get better by waiting."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic, *,
                 servers: Sequence[str] = ()) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._started_s = clock()
        self._last_s: float | None = None
        self._server_count = len(servers)
        self._refused_by: set[str] = set()

    def __call__(self, error: RaftschedError, delay_s: float) -> None:
        if self._server_count and isinstance(error, CouldNotConnect) and \
                _handshake_failed(error):
            self._refused_by.add(error.address)
            if len(self._refused_by) >= self._server_count:
                raise error
            return  # no "waiting" line: the next server answers or refuses at once
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


def free_text(text: str) -> str:
    """The value type of a free-text option the replicas store (--reason, --note, --subject):
    their rule (`raftsched.state.text`, printable text), so that a value they would refuse is
    a usage error (exit 2) before anything is sent."""
    problem = unprintable(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def print_json(document: Any) -> None:
    print(json.dumps(document))


def print_issues(issues: Sequence[SpecIssue]) -> None:
    for issue in issues:
        print(f"error: {issue.render()}", file=sys.stderr)
    print(f"{len(issues)} error(s)", file=sys.stderr)


def report_error(args: argparse.Namespace, error: RaftschedError) -> int:
    """Print `error` (one line, or the --json error object) and return its exit code."""
    hint = getattr(error, "hint", "") or _default_hint(args, error.code)
    retry_after_ms = getattr(error, "retry_after_ms", 0)
    if retry_after_ms and not hint:
        hint = f"retry after {retry_after_ms / 1000:g} s"
    message = " ".join(error.message.split())
    log_tail: Sequence[str] = getattr(error, "log_tail", ())
    if getattr(args, "json", False):
        body: dict[str, Any] = {"code": error.code.value, "message": message}
        if hint:
            body["hint"] = hint
        if retry_after_ms:
            body["retry_after_s"] = retry_after_ms / 1000
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
        print(visible(f"error: {error.code.value}: {message}" + (f"; {hint}" if hint else "")),
              file=sys.stderr)
    return EXIT_FOR_CODE.get(error.code, EXIT_INVALID)


def _handshake_failed(error: RaftschedError) -> bool:
    if not isinstance(error, CouldNotConnect):
        return False
    from raftsched import rpc  # loaded already: a client made the call

    return isinstance(error, rpc.HandshakeFailed)


def tls_hint(error: RaftschedError, secure: bool) -> str:
    """What to do about a refused TLS handshake or a refused certificate ("" for any other
    error); `secure`: whether the client presented a certificate."""
    from raftsched import rpc

    ca, cert, key = (f"${name}" for name in TLS_ENV)
    if isinstance(error, rpc.AccessDenied) and "certificate" not in error.message:
        return (f"pass an API token with --token or ${TOKEN_ENV} (an admin makes one with: "
                "raftsched admin token create --tenant T --role user|operator|admin)")
    if isinstance(error, rpc.AccessDenied):
        return ("the server refused this certificate: client commands need a user certificate "
                "(common name raftsched-user:NAME) signed by the cluster's CA: --tls-cert and "
                f"--tls-key, or {cert} and {key}")
    if not isinstance(error, rpc.HandshakeFailed):
        return ""
    if error.server_closed and secure:
        return ("the server refused this certificate: it must be signed by the cluster's CA, "
                f"be valid now and be meant for clients (--tls-cert/--tls-key, or {cert}/{key})")
    if error.server_closed:
        return ("the server accepts mutual TLS only: pass --tls-ca, --tls-cert and --tls-key, or "
                f"set {ca}, {cert} and {key}")
    if NOT_TLS_MARKER in error.detail:
        return ("the server does not speak TLS: a cluster run with --insecure-dev is reached "
                "with --insecure-dev")
    return (f"this client refused the server's certificate: --tls-ca (or {ca}) must be the CA "
            "that signed the replicas' certificates, and those must name the addresses dialled")


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
        "--servers", type=server_groups, metavar="HOST:PORT,...[;HOST:PORT,...]",
        help=f"gRPC addresses of scheduler replicas (default: ${SERVERS_ENV}, else the dev "
        "cluster recorded in $RAFTSCHED_DEV_DIR or ./.raftsched-dev). With several scheduler "
        "groups, each group's list, separated by ';', in group order: submits go to the group "
        "of their key, a job's calls to the group its id names, listings merge every group",
    )
    group.add_argument(
        "--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"give up after this long, retries through elections included "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    ca, cert, key = TLS_ENV
    group.add_argument(
        "--tls-ca", metavar="PEM",
        help=f"the CA that signs the cluster's certificates (default: ${ca}, else the recorded "
        "dev cluster's)")
    group.add_argument(
        "--tls-cert", metavar="PEM",
        help=f"your user certificate, common name raftsched-user:NAME (default: ${cert}, else "
        "the recorded dev cluster's user certificate)")
    group.add_argument(
        "--tls-key", metavar="PEM",
        help=f"its private key (default: ${key}, else the recorded dev cluster's user key)")
    group.add_argument(
        "--token", metavar="TOKEN",
        help=f"your API token, rst_... (default: ${TOKEN_ENV}, else the recorded dev cluster's "
        "admin token); its role and tenant decide what you may do. Prefer the variable: "
        "options show in the process list")
    group.add_argument(
        "--insecure-dev", action="store_true",
        help="plaintext, no certificate: only for a throwaway cluster run with --insecure-dev "
        "(a dev cluster recorded as such needs no option)")
    return options


def server_groups(text: str) -> list[list[str]]:
    """The argparse type of --servers: one group's HOST:PORT,... list, or several separated by
    ';' (`raftsched.topology.parse_groups`)."""
    from raftsched import topology

    try:
        return topology.parse_groups(text, "--servers")
    except ValueError as error:
        message = str(error).removeprefix("--servers: ").removeprefix("--servers ")
        raise argparse.ArgumentTypeError(message) from None


def resolve_groups(flag: list[list[str]] | None) -> list[list[str]]:
    """--servers (checked by its option type), else $RAFTSCHED_SERVERS, else the servers of
    the recorded dev cluster: each scheduler group's replicas (one list: one group)."""
    from raftsched import topology

    if flag:
        return flag
    if os.environ.get(SERVERS_ENV):
        try:
            return topology.parse_groups(os.environ[SERVERS_ENV], SERVERS_ENV)
        except ValueError as error:
            raise CommandError(Code.INVALID_ARGUMENT, str(error)) from None
    from raftsched.dev import record

    groups = record.groups_from_state(record.default_dir())
    if not groups:
        raise CommandError(Code.INVALID_ARGUMENT,
                           "no scheduler addresses: pass --servers HOST:PORT,..., set "
                           f"{SERVERS_ENV}, or start a local cluster with: raftsched dev up")
    return groups


def resolve_servers(flag: list[list[str]] | None) -> list[str]:
    """`resolve_groups` for a command that talks to one group: its replicas; several groups
    are refused, saying which option to change."""
    groups = resolve_groups(flag)
    if len(groups) > 1:
        raise CommandError(Code.INVALID_ARGUMENT,
                           f"this command acts on one scheduler group; {len(groups)} are "
                           "given: pass --servers with one group's replicas (no ';')")
    return groups[0]


def parse_addresses(text: str, source: str) -> list[str]:
    """`options.parse_address_list` (the one HOST:PORT rule) as a CLI usage error."""
    try:
        return parse_address_list(text, source)
    except ValueError as error:
        raise CommandError(Code.INVALID_ARGUMENT, str(error)) from None


def resolve_tls(args: argparse.Namespace) -> TlsFiles | None:
    """The client's certificate, resolved like `resolve_servers`: --tls-ca/--tls-cert/--tls-key
    (each else its $RAFTSCHED_TLS_* variable), else the user certificate of the recorded dev
    cluster. None (plaintext) with --insecure-dev, or for a dev cluster run with --insecure-dev.
    Nothing found: INVALID_ARGUMENT (the API is mutual TLS only)."""
    quiet_grpc()
    from raftsched import tls

    flags = (args.tls_ca, args.tls_cert, args.tls_key)
    if args.insecure_dev:
        if any(flags):
            raise CommandError(Code.INVALID_ARGUMENT,
                               "--insecure-dev (plaintext) and --tls-* exclude each other")
        return None
    files = tls.files_from(*flags)
    if files is not None:
        return files
    from raftsched.dev import record

    directory = record.default_dir()
    state = record.load_state(directory)
    if state is not None and state.replicas:
        if state.insecure:
            return None
        if state.user_tls is not None:
            return state.user_tls.files()
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"the dev cluster recorded in {directory} has no user certificate; "
                           f"restart it: raftsched dev down && raftsched dev up")
    ca, cert, key = TLS_ENV
    raise CommandError(Code.INVALID_ARGUMENT,
                       "no client certificate: the scheduler's API is mutual TLS only; pass "
                       f"--tls-ca, --tls-cert and --tls-key, set ${ca}, ${cert} and ${key}, or "
                       "start a local cluster with: raftsched dev up (--insecure-dev: plaintext, "
                       "for a cluster run with --insecure-dev)")


def resolve_token(args: argparse.Namespace) -> str | None:
    """--token, else $RAFTSCHED_TOKEN, else the recorded dev cluster's admin token; None when
    none is found or the connection is plaintext (the replica then answers UNAUTHENTICATED,
    with a hint). A malformed one: INVALID_ARGUMENT before anything is sent."""
    from raftsched import tokens

    given = getattr(args, "token", None) or os.environ.get(TOKEN_ENV, "")
    if given:
        if tokens.parse_token(given) is None:
            raise CommandError(Code.INVALID_ARGUMENT,
                               "--token / $RAFTSCHED_TOKEN is not a token (rst_<16 hex>_<secret>)")
        return given.strip()
    if getattr(args, "insecure_dev", False):
        return None
    from raftsched.dev import record

    state = record.load_state(record.default_dir())
    if state is not None and state.replicas and state.user_tls is not None:
        return state.user_tls.read_token()
    return None


@contextlib.contextmanager
def connect(args: argparse.Namespace, servers: list[str] | None = None, *,
            one_group: bool = False) -> Iterator[ClientLike]:
    """A client for `servers` (default: `resolve_groups(--servers)`) with the certificate of
    `resolve_tls`, closed afterwards. A refused handshake or certificate gets a hint. Given
    one group's servers, a command that is not about that group alone (`one_group`) learns
    every group's from a replica (GetTopology) and talks to all of them."""
    groups = [servers] if servers else resolve_groups(args.servers)
    tls_files = resolve_tls(args)
    token = resolve_token(args) if tls_files is not None else None

    def make(group: list[str]) -> ClientLike:
        return make_client(group, args.timeout, tls_files=tls_files, token=token)

    clients = [make(group) for group in groups]
    client: ClientLike
    if len(clients) == 1 and (one_group or servers):
        client = clients[0]
    elif len(clients) == 1:
        from raftsched.client.groups import with_topology

        client = with_topology(clients[0], make)  # type: ignore[arg-type]
    else:
        from raftsched.client.groups import GroupedClient

        client = GroupedClient(clients)  # type: ignore[arg-type]
    try:
        yield client
    except RaftschedError as error:
        hint = tls_hint(error, tls_files is not None)
        if not hint:
            raise
        raise CommandError(error.code, error.message, hint=hint) from None
    finally:
        client.close()


def unknown_outcome(error: RaftschedError, what: str, retry: str) -> RaftschedError:
    """For a change whose call failed with UNAVAILABLE or DEADLINE_EXCEEDED: say the outcome is
    unknown and how to retry safely. Other errors, and a TLS handshake every server refused
    (nothing was sent), are returned unchanged."""
    if error.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) or _handshake_failed(error):
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


def add_param_option(parser: argparse.ArgumentParser) -> None:
    """`--param NAME=VALUE` (submit, validate, schedule create)."""
    parser.add_argument("--param", metavar="NAME=VALUE", action="append", default=[],
                        help="a value for the spec's param NAME (repeatable; NAME= gives the "
                             "empty string)")


def param_values(args: argparse.Namespace) -> dict[str, str]:
    """The --param values; a malformed one is a usage error naming it."""
    try:
        return parse_assignments(args.param)
    except ValueError as error:
        raise CommandError(Code.INVALID_ARGUMENT, str(error)) from None
