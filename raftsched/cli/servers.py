"""`raftsched replica` and `raftsched agent`: run a server in the foreground with its options.

The server modules are imported only when their command runs (explicitly, so the import graph
shows the dependency): `raftsched --help`, `validate` and the client commands stay light.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from raftsched import config
from raftsched.cli.common import EXIT_INVALID, CommandError, Subparsers
from raftsched.environment import SECRET_ENV
from raftsched.errors import Code


class ServerModule(Protocol):
    """What a server's wiring module offers the command line."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


def _replica() -> ServerModule:
    from raftsched.replica import main as replica_main

    return replica_main


def _agent() -> ServerModule:
    from agent import main as agent_main

    return agent_main


def _web() -> ServerModule:
    from raftsched.web import main as web_main

    return web_main


@dataclass(frozen=True, slots=True)
class Server:
    load: Callable[[], ServerModule]
    summary: str
    description: str


SERVERS: dict[str, Server] = {
    "replica": Server(
        _replica, "run one scheduler replica (Raft + gRPC API)",
        "Run one scheduler replica in the foreground: a Raft member (pysyncobj) that serves "
        "the gRPC API (mutual TLS: --tls-ca, --tls-cert, --tls-key), and places work while it "
        "leads. It refuses to start without a cluster secret (--secret-file or "
        f"${SECRET_ENV}) and TLS files unless --insecure-dev. It logs "
        "'event key=value' lines on stderr and runs until SIGTERM or Ctrl-C.",
    ),
    "agent": Server(
        _agent, "run the agent of one compute cluster",
        "Run the agent of one compute cluster in the foreground: it registers with the leader "
        "(--servers, over mutual TLS with a certificate for raftsched-agent:CLUSTER_ID, or "
        "--insecure-dev), heartbeats its free capacity, admits fenced assignments, runs them "
        "(subprocess or mock executor) and reports results from a durable outbox. It logs "
        "'event key=value' lines on stderr and runs until SIGTERM or Ctrl-C.",
    ),
    "web": Server(
        _web, "run the web console (HTTPS) for a cluster",
        "Run the web console in the foreground: HTTPS pages of jobs, their DAG graphs, tasks, "
        "attempts and output, clusters, replicas and tenants, live. Users sign in with their API "
        "token; the console calls the replicas (--servers) as a client with its own certificate "
        "(--tls-ca, --tls-cert, --tls-key) and the user's token. It serves HTTPS only "
        "(--https-cert, --https-key). --read-only hides every action. It runs until SIGTERM or "
        "Ctrl-C.",
    ),
}


def register_servers(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    for name, server in SERVERS.items():
        parser = commands.add_parser(name, parents=[common], help=server.summary,
                                     add_help=False, allow_abbrev=False)
        parser.set_defaults(handler=_run_server, passthrough=True, server=name)


def _run_server(args: argparse.Namespace) -> int:
    """Parse the remaining arguments with the server's own options and run it."""
    server = SERVERS[args.server]
    parser = argparse.ArgumentParser(
        prog=f"raftsched {args.server}", description=server.description,
        epilog="exit status: 0 after a clean shutdown; 2 bad options or a server that cannot "
        "start here; other non-zero on a fatal error.")
    module = _load(args.server, server)
    module.add_arguments(parser)
    try:
        server_args = config.parse_args(parser, args.extra, args.server)
    except config.ConfigError as error:  # printed as the server itself prints a usage error
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else EXIT_INVALID
    return int(module.run(server_args))


def _load(name: str, server: Server) -> ServerModule:
    """The server's wiring module; a missing dependency is a clear error, not a traceback."""
    try:
        return server.load()
    except ModuleNotFoundError as error:
        raise CommandError(Code.FAILED_PRECONDITION, f"'raftsched {name}' cannot start: {error}",
                           hint="reinstall with: pip install -e .") from None
    except ImportError as error:
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"'raftsched {name}' cannot start: {error}") from None
