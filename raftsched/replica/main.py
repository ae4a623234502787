"""`raftsched replica`: one scheduler replica — Raft node, leader loop, gRPC server. Wiring only."""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from raftsched import config, eventlog, limits, rpc, tls, tokens, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.clock import ProposalClock, SystemClock, configure_skew_from_env
from raftsched.environment import SECRET_ENV, SERVERS_ENV, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV
from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.options import (
    address,
    integer,
    metrics_address,
    metrics_endpoint,
    optional_address_list,
    port,
    positive_int,
    positive_seconds,
)
from raftsched.replica import identity, metrics
from raftsched.replica.events import EventLog
from raftsched.replica.leader import LOST_AFTER_S, SUSPECT_AFTER_S, Leader, LeaderConfig
from raftsched.replica.schedule_service import SchedulesService
from raftsched.replica.service import (
    AdminService,
    AgentGatewayService,
    ChangeFeed,
    Context,
    HealthService,
    SchedulerService,
    enable_reflection,
)
from raftsched.state import commands as c
from raftsched.state.model import ALL_TENANTS, GroupIdentity, Role

SHUTDOWN_GRACE_S = 3.0
GIL_SWITCH_INTERVAL_S = 0.001
"""How long a thread may hold the interpreter lock while another waits (CPython's default is
5 ms). Raft's tick thread does many short waits for I/O, each followed by a wait for the lock;
behind a thread parsing a large spec, at 5 ms a turn, its heartbeats came late enough to cost
elections (20 concurrent 10,000-task submits: 5 leader changes at 5 ms, 1 at 1 ms)."""
HEALTH_POLL_S = 0.5
MAX_TOKEN_FILE_CHARS = 4096
"""A bootstrap token file is read up to this much (a token is ~70 characters)."""
PRIVATE_UMASK = 0o077
"""The journal, snapshots and applied log hold every job's spec (env included): files a replica
creates are readable by its own user only (the journal was 0644)."""

log = EventLogger("raftsched.replica")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_option(parser, "replica")
    parser.add_argument("--raft", required=True, type=address, metavar="HOST:PORT",
                        help="address this replica's Raft endpoint binds and peers reach")
    parser.add_argument("--grpc", required=True, type=address, metavar="HOST:PORT",
                        help="address of the gRPC API (clients, agents, admin)")
    parser.add_argument("--peers", type=optional_address_list, default="",
                        metavar="RAFT_ADDR,...",
                        help="Raft addresses of the other members (after the first start the "
                             "member list stored in the snapshot wins)")
    parser.add_argument("--data-dir", required=True, help="journal, snapshot and lock live here")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--secret-file", help="file holding the cluster secret (Raft frames are "
                                              f"authenticated with it); or set {SECRET_ENV}")
    secret.add_argument("--insecure-dev", action="store_true",
                        help="run without a secret and serve gRPC in plaintext without client "
                             "certificates: anyone reaching the Raft port can run code and "
                             "anyone reaching the gRPC port can do anything; only for a "
                             "throwaway local cluster")
    parser.add_argument("--tls-ca", metavar="PEM", help="CA that signs every client certificate "
                        f"(or ${TLS_CA_ENV}); required unless --insecure-dev")
    parser.add_argument("--tls-cert", metavar="PEM", help="this replica's certificate, valid "
                        f"for the --grpc host (or ${TLS_CERT_ENV})")
    parser.add_argument("--tls-key", metavar="PEM", help=f"its private key (or ${TLS_KEY_ENV})")
    parser.add_argument("--bootstrap-token-file", metavar="FILE",
                        help="a file holding the first admin token (rst_...; `raftsched dev up` "
                             "makes one): whichever replica leads first stores its sha256 with "
                             "role admin for every tenant, unless an admin token exists already. "
                             "Give every replica the same file; remove it once other admin "
                             "tokens exist")
    parser.add_argument("--group", type=integer(0, limits.MAX_GROUPS - 1), default=0,
                        metavar="I",
                        help="with several scheduler groups (issue 27): which one this replica "
                             "is, 0-based (default 0). Every replica of a group gives the same; "
                             "the group's first leader records it in the log, which then refuses "
                             "another answer")
    parser.add_argument("--groups", type=integer(1, limits.MAX_GROUPS), default=1, metavar="K",
                        help="how many groups the deployment has (default 1: the only one). "
                             "Jobs are spread over VIRTUAL_SHARDS shards, shard s in group "
                             "s mod K; clients list the groups' replicas separated by ';' in "
                             f"${SERVERS_ENV}")
    parser.add_argument("--topology", metavar="HOST:PORT,...;HOST:PORT,...", default="",
                        help="with several groups: every group's gRPC addresses, groups "
                             "separated by ';' in group order (the --groups count is theirs). "
                             "The log records them, and any replica then tells clients, agents "
                             "and the console given one group's servers where every group is "
                             "(GetTopology). A replica without it keeps what the log says")
    parser.add_argument("--joining", action="store_true",
                        help="this group is being added to a running deployment (with --group "
                             "and --groups counting it, and --topology): it owns no shard, and "
                             "takes no submit, until `raftsched admin groups add` moves shards "
                             "to it (docs/scale-out.md §5). Harmless once it has some")
    _add_tuning_arguments(parser)


def _add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suspect-after-s", type=positive_seconds, default=SUSPECT_AFTER_S,
                        help="a cluster whose agent is silent this long gets no new work "
                             f"(SUSPECT; default {SUSPECT_AFTER_S:g})")
    parser.add_argument("--lost-after-s", type=positive_seconds, default=LOST_AFTER_S,
                        help="silent this long, its attempts are LOST and `on_lost: replace` "
                             f"tasks run elsewhere (default {LOST_AFTER_S:g})")
    parser.add_argument("--applied-log", metavar="FILE",
                        help="append every applied entry (index, bytes) to FILE, for audits and "
                             "the fault-injection harness's checker (default: off)")
    parser.add_argument("--snapshot-entries", type=positive_int, default=None, metavar="N",
                        help="write a snapshot (and compact the log) once the log holds more "
                             "than N entries (default 20000); a forked child writes it, so the "
                             "replica keeps serving meanwhile")
    parser.add_argument("--snapshot-interval-s", type=positive_seconds, default=None,
                        metavar="SECONDS",
                        help="... or once this long has passed since the last one (default 600)")
    parser.add_argument("--restore-from", metavar="FILE",
                        help="start a NEW cluster from a saved snapshot (`raftsched admin "
                             "snapshot save`): seeds this replica's empty data dir with it, its "
                             "members becoming --raft and --peers. Give every replica of the new "
                             "cluster the same FILE. Refused if the data dir holds a replica's "
                             "state already")
    parser.add_argument("--max-stream-age-s", type=positive_seconds,
                        default=limits.MAX_STREAM_AGE_S, metavar="SECONDS",
                        help="end a WatchJob, WatchEvents, TaskLogs, health-watch or "
                             "reflection stream after this long so that its slot is contended "
                             "for again; the client re-opens a watch, event or log stream where "
                             "it was (default "
                             f"{limits.MAX_STREAM_AGE_S:g})")
    parser.add_argument("--event-retention", type=positive_int, default=limits.EVENT_RETENTION,
                        metavar="N",
                        help="keep the last N events of the event stream (WatchEvents) in memory "
                             "for resumes; a resume from an older index is refused as too old "
                             f"(default {limits.EVENT_RETENTION})")
    _add_connection_arguments(parser)
    parser.add_argument("--metrics-port", type=port, default=0,
                        help="serve Prometheus metrics on 127.0.0.1:PORT (0: off)")
    parser.add_argument("--metrics-address", type=metrics_address, default=None,
                        metavar="HOST:PORT",
                        help="serve Prometheus metrics on HOST:PORT instead, e.g. 0.0.0.0:9100 "
                             "so that a Prometheus on another host can scrape (port 0: off). "
                             "The replicated state's figures come from the leader only, so "
                             "sum() over replicas never multiplies them")
    parser.add_argument("--log-level", default="info", type=str.lower, choices=eventlog.LEVELS,
                        help="log events at this level and above, as JSON lines on stderr "
                             "(default info)")


def _add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--handshake-timeout-s", type=positive_seconds,
                        default=limits.HANDSHAKE_TIMEOUT_S, metavar="SECONDS",
                        help="close a connection to the Raft or gRPC port that has not "
                             "authenticated (the cluster secret; TLS) this long after it was "
                             f"accepted (default {limits.HANDSHAKE_TIMEOUT_S:g})")
    parser.add_argument("--max-grpc-connections", type=positive_int,
                        default=limits.MAX_GRPC_CONNECTIONS, metavar="N",
                        help="gRPC connections held at once, authenticated or not; one more is "
                             "closed at accept (default "
                             f"{limits.MAX_GRPC_CONNECTIONS}, and at most half the open-file "
                             "limit)")


def _secret(args: argparse.Namespace) -> str | None:
    if args.secret_file:
        with open(args.secret_file, encoding="utf-8") as f:
            return f.read().strip() or None
    return os.environ.get(SECRET_ENV) or None


class _StartError(Exception):
    """A replica that cannot start: `message` goes to stderr, `status` is the exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def run(args: argparse.Namespace) -> int:
    eventlog.configure(args.log_level)
    os.umask(PRIVATE_UMASK)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        return _run(args)
    except _StartError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return error.status


def _run(args: argparse.Namespace) -> int:
    # pysyncobj is imported only here, at start: `raftsched --help` stays light.
    from raftsched.replica.raft.node import RaftNode

    secret = _checked_secret(args)
    tls_files = _checked_tls(args)
    configured = configured_group(args)
    on_office = _checked_bootstrap(args, configured)
    peers = [peer for peer in args.peers if peer != args.raft]
    if args.restore_from:
        _restore(args, peers)
    changes = ChangeFeed()
    events = EventLog(args.event_retention)
    telemetry = metrics.ReplicaMetrics()
    try:
        tuning: dict[str, Any] = {"handshake_timeout_s": args.handshake_timeout_s}
        if args.snapshot_entries is not None:
            tuning["compaction_min_entries"] = args.snapshot_entries
        if args.snapshot_interval_s is not None:
            tuning["compaction_min_time_s"] = args.snapshot_interval_s
        node = RaftNode(args.raft, peers, args.data_dir, secret, insecure_dev=args.insecure_dev,
                        on_leader_change=telemetry.leadership_changed,
                        on_applied=changes.notify, applied_log=args.applied_log,
                        on_proposal=telemetry.proposal, on_changes=events.record, **tuning)
    except RaftschedError as error:
        raise _StartError(error.message) from error
    except OSError as error:
        raise _StartError(f"cannot open --applied-log {args.applied_log}: "
                          f"{error.strerror}") from error
    clock = ProposalClock(SystemClock(), node.state_time_ms)
    leader = Leader(node, clock, random.SystemRandom(),
                    LeaderConfig(raft_address=args.raft, grpc_address=args.grpc,
                                 suspect_after_s=args.suspect_after_s,
                                 lost_after_s=args.lost_after_s, on_office=on_office),
                    version=changes.version, fire_lag=telemetry.fire_lag)
    try:
        server = _server(Context(node, leader, clock, changes, args.grpc,
                                 max_stream_age_s=args.max_stream_age_s, events=events,
                                 configured=configured),
                         args.grpc, tls_files,
                         _connection_options(args.handshake_timeout_s, args.max_grpc_connections))
    except RaftschedError as error:
        node.close()
        raise _StartError(error.message) from error
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    telemetry.watch(node, leader.leading, leader.reported_free, leader.unusable)
    _serve_metrics(args, telemetry, node.close)
    leader.start()
    server.start()
    log.info("replica_started", raft=args.raft, grpc=args.grpc, peers=",".join(peers))
    stop.wait()
    log.info("replica_stopping", raft=args.raft)
    server.stop(SHUTDOWN_GRACE_S).wait(SHUTDOWN_GRACE_S)
    leader.stop()
    node.close()
    return 0


def _checked_secret(args: argparse.Namespace) -> str | None:
    """The cluster secret and the injected clock skew, or a `_StartError`."""
    try:
        secret = _secret(args)
    except OSError as error:
        raise _StartError(f"cannot read --secret-file: {error.strerror}") from error
    try:
        skew_s = configure_skew_from_env()
    except ValueError as error:
        raise _StartError(str(error)) from error
    if skew_s:
        log.warning("wall_clock_skew_injected", seconds=skew_s)
    return secret


def _checked_tls(args: argparse.Namespace) -> tls.TlsFiles | None:
    try:
        tls_files = tls.files_from(args.tls_ca, args.tls_cert, args.tls_key)
        if tls_files is None and not args.insecure_dev:
            raise RaftschedError(
                Code.INVALID_ARGUMENT,
                "the gRPC API is served over mutual TLS only: pass --tls-ca, --tls-cert and "
                "--tls-key (`raftsched dev up` makes a throwaway CA), or --insecure-dev for a "
                "plaintext throwaway cluster")
        if tls_files is not None:
            tls_files.load()  # a missing or unreadable file is an error now, not at bind
    except RaftschedError as error:
        raise _StartError(error.message) from error
    return tls_files


def _checked_bootstrap(args: argparse.Namespace, wanted: GroupIdentity | None,
                       ) -> tuple[Callable[[int], bytes], ...]:
    try:
        on_office = _bootstrap_commands(args.bootstrap_token_file)
    except RaftschedError as error:
        raise _StartError(error.message) from error
    if wanted is not None:
        on_office += (lambda now_ms: c.encode(c.GroupSet(
            wanted.group, wanted.groups, wanted.shards, now_ms, wanted.servers,
            joining=args.joining)),)
    elif args.joining:
        raise _StartError("--joining: a group added to a deployment is one of several; give "
                          "--group and --groups (counting it) or --topology")
    if not 0 < args.suspect_after_s < args.lost_after_s:
        raise _StartError("need 0 < --suspect-after-s < --lost-after-s")
    return on_office


def configured_group(args: argparse.Namespace) -> GroupIdentity | None:
    """The group of several `--group`, `--groups` and `--topology` say this replica is (None:
    a deployment of one group); _StartError naming the option that does not fit."""
    servers: tuple[tuple[str, ...], ...] = ()
    groups = args.groups
    if args.topology:
        try:
            parsed = topology.parse_groups(args.topology, "--topology")
        except ValueError as error:
            raise _StartError(str(error)) from None
        servers = tuple(tuple(members) for members in parsed)
        if groups == 1:
            groups = len(servers)
        elif groups != len(servers):
            raise _StartError(f"--topology names {len(servers)} groups, --groups says {groups}")
    if args.group >= groups:
        raise _StartError(f"--group {args.group} is not one of the --groups {groups} "
                          f"(0..{groups - 1})")
    if groups == 1:
        return None
    return GroupIdentity(args.group, groups, limits.VIRTUAL_SHARDS, servers)


def _restore(args: argparse.Namespace, peers: list[str]) -> None:
    from raftsched.replica.raft.restore import seed_data_dir

    try:
        seeded = seed_data_dir(args.data_dir, args.restore_from, args.raft, peers)
    except RaftschedError as error:
        raise _StartError(error.message) from error
    log.info("replica_restored", source=args.restore_from, index=seeded.index,
             term=seeded.term, members=",".join(seeded.members))


def _serve_metrics(args: argparse.Namespace, telemetry: metrics.ReplicaMetrics,
                   close_node: Callable[[], None]) -> None:
    endpoint = metrics_endpoint(args.metrics_address, args.metrics_port)
    if endpoint is None:
        return
    try:
        telemetry.serve(*endpoint)
    except OSError as error:
        close_node()
        raise _StartError(f"cannot serve metrics on {endpoint[0]}:{endpoint[1]}: "
                          f"{error.strerror}", status=1) from error


_STANDARD_SERVICES = (health_pb2.DESCRIPTOR.services_by_name["Health"],
                      reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"])
"""Served beside ours, through the same interceptors: undecodable requests to them are
INVALID_ARGUMENT too, not gRPC's INTERNAL with a logged traceback, and their callers are checked
(`identity.Rule.CERTIFICATE`)."""


def _bootstrap_commands(path: str | None) -> tuple[Callable[[int], bytes], ...]:
    """The TOKEN_PUT of the bootstrap admin token in `path` (none without a path)."""
    if not path:
        return ()
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_TOKEN_FILE_CHARS)
    except OSError as error:
        raise RaftschedError(Code.INVALID_ARGUMENT, f"--bootstrap-token-file {path}: "
                             f"{error.strerror or error}") from None
    parsed = tokens.parse_token(text)
    if parsed is None:
        raise RaftschedError(Code.INVALID_ARGUMENT, f"--bootstrap-token-file {path}: not a "
                             "token (expected one line rst_<16 hex>_<secret>)")
    token_id, secret = parsed
    digest = tokens.secret_digest(secret)
    return (lambda now_ms: c.encode(c.TokenPut(token_id, digest, ALL_TENANTS, Role.ADMIN.value,
                                               "bootstrap", now_ms, bootstrap=True)),)


def _connection_options(handshake_timeout_s: float,
                        max_connections: int) -> list[tuple[str, int]]:
    """grpc's own bounds on the connections of the gRPC port (both checked by tests against
    the grpcio in use: tests/integration/test_connection_limits.py). A connection whose TLS
    handshake is not done within `handshake_timeout_s` is closed; past `max_connections` (at
    most half this process's open-file limit) one more is closed at accept. An authenticated
    connection is never closed for being idle (no `grpc.max_connection_idle_ms`): agents' long
    polls and users' watches keep theirs."""
    allowed = max_connections
    soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit != resource.RLIM_INFINITY and max_connections > soft_limit // 2:
        allowed = max(1, soft_limit // 2)
        log.warning("grpc_connections_capped_by_open_file_limit", max_connections=allowed,
                    requested=max_connections, open_file_limit=soft_limit)
    return [("grpc.server_handshake_timeout_ms", max(1, round(handshake_timeout_s * 1000))),
            ("grpc.max_allowed_incoming_connections", allowed)]


def _server(ctx: Context, address: str, tls_files: tls.TlsFiles | None,
            connection_options: list[tuple[str, int]]) -> grpc.Server:
    """The gRPC server: mutual TLS with `tls_files` and every RPC checked against its caller's
    certificate (`identity`); plaintext and unchecked without (--insecure-dev).
    `connection_options`: `_connection_options`."""
    services = [pb.DESCRIPTOR.services_by_name[n]
                for n in ("Scheduler", "AgentGateway", "Admin", "Schedules")]
    served = [*services, *_STANDARD_SERVICES]
    # Every method of every service served is checked against its caller by one interceptor
    # (built even when it is not installed: an RPC without a rule is a KeyError at start).
    check = identity.IdentityCheck(served, ctx)
    interceptors: list[grpc.ServerInterceptor] = [
        # An undecodable request is INVALID_ARGUMENT, not INTERNAL with a logged traceback.
        rpc.RequestGuard(served, replica=address),
        *([check] if tls_files is not None else [])]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=limits.MAX_RPC_WORKERS, thread_name_prefix="rpc"),
        interceptors=interceptors,
        options=[("grpc.max_receive_message_length", limits.MAX_MESSAGE_BYTES),
                 ("grpc.max_send_message_length", limits.MAX_MESSAGE_BYTES),
                 ("grpc.so_reuseport", 0), *connection_options],
    )
    pb_grpc.add_SchedulerServicer_to_server(SchedulerService(ctx), server)
    pb_grpc.add_AgentGatewayServicer_to_server(AgentGatewayService(ctx), server)
    pb_grpc.add_AdminServicer_to_server(AdminService(ctx, address), server)
    pb_grpc.add_SchedulesServicer_to_server(SchedulesService(ctx), server)
    health_servicer = HealthService(ctx)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _track_health(ctx, health_servicer)
    names = [service.full_name for service in services]
    enable_reflection(ctx, [*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    try:
        bound = server.add_insecure_port(address) if tls_files is None \
            else server.add_secure_port(address, tls_files.server_credentials())
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise RaftschedError(Code.UNAVAILABLE, f"cannot bind the gRPC address {address}")
    return server


def _track_health(ctx: Context, servicer: health.HealthServicer) -> None:
    """SERVING while this replica knows a leader (it can answer or redirect)."""

    def loop() -> None:
        while True:
            known = ctx.node.leader_address() is not None
            status = health_pb2.HealthCheckResponse.SERVING if known \
                else health_pb2.HealthCheckResponse.NOT_SERVING
            servicer.set("", status)
            servicer.set("raftsched.v1.Scheduler", status)
            time.sleep(HEALTH_POLL_S)

    threading.Thread(target=loop, name="health", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftsched replica", description=__doc__)
    add_arguments(parser)
    try:
        args = config.parse_args(parser, argv, "replica")
    except config.ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
