"""`raftsched web`: the console process (hypercorn serving the Starlette app over HTTPS).

Hypercorn, not uvicorn: it speaks HTTP/2 (ALPN h2, then http/1.1), so one browser's many open
pages share one connection. Over HTTP/1.1 a browser opens at most six connections to a host,
and each live page holds one for its server-sent events: the seventh tab of the console would
hang until another closed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypercorn.asyncio import serve as serve_asgi
from hypercorn.config import Config as HypercornConfig

from raftsched import eventlog, tls, topology
from raftsched.environment import SERVERS_ENV, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV
from raftsched.errors import RaftschedError
from raftsched.options import host_port, listen_address
from raftsched.web.app import build_app
from raftsched.web.console import ConsoleClient, Options

LOG = eventlog.EventLogger("web")
EXIT_USAGE = 2
GRACEFUL_SHUTDOWN_S = 5.0
"""Open streams (live pages, downloads) get this long to end when the console stops."""
CONSOLE_RETRY_BUDGET_S = 10.0
"""How long a page's call to the replicas is retried (through an election, say) before the page
says the scheduler does not answer; a listing of several groups gives up on one sooner
(`raftsched.client.groups.GROUP_STRAGGLER_S`)."""


@dataclass(frozen=True)
class WebConfig:
    host: str
    port: int
    servers: tuple[tuple[str, ...], ...]
    """Each scheduler group's replicas (one: the console learns the others from them)."""
    client_tls: tls.TlsFiles | None
    https_cert: str
    https_key: str
    read_only: bool = False
    watch_token: str = ""
    """The console's own token for its one shared event stream ("": one per session)."""


def client_factory(config: WebConfig) -> Options:
    """Each session's client: of every group `--servers` names, or, given one group's, of
    every group a replica names (GetTopology, asked at each sign-in)."""
    from raftsched.client.client import Client
    from raftsched.client.groups import GroupedClient, with_topology

    def make(token: str) -> ConsoleClient:
        def of(servers: Sequence[str]) -> Client:
            return Client(servers, tls_files=config.client_tls, token=token or None,
                          retry_budget_s=CONSOLE_RETRY_BUDGET_S)

        if len(config.servers) > 1:
            grouped: ConsoleClient = GroupedClient([of(group) for group in config.servers])
            return grouped
        learned: ConsoleClient = with_topology(of(config.servers[0]), of)
        return learned

    watch = make(config.watch_token) if config.watch_token else None
    return Options(make_client=make, read_only=config.read_only, watch_client=watch)


def serve(config: WebConfig) -> None:
    """Serve until SIGINT/SIGTERM; open streams get GRACEFUL_SHUTDOWN_S to end."""
    eventlog.configure("info")
    app = build_app(client_factory(config))
    LOG.info("web_listening", url=f"https://{_bind(config)}/", read_only=config.read_only,
             servers=";".join(",".join(group) for group in config.servers),
             shared_events=bool(config.watch_token))
    asyncio.run(_serve_until_signalled(app, _hypercorn_config(config)))


def _bind(config: WebConfig) -> str:
    return f"[{config.host}]:{config.port}" if ":" in config.host else \
        f"{config.host}:{config.port}"


def _hypercorn_config(config: WebConfig) -> HypercornConfig:
    hyper = HypercornConfig()
    hyper.bind = [_bind(config)]
    hyper.certfile = config.https_cert
    hyper.keyfile = config.https_key
    hyper.alpn_protocols = ["h2", "http/1.1"]
    hyper.graceful_timeout = GRACEFUL_SHUTDOWN_S
    hyper.include_server_header = False
    hyper.accesslog = None  # nothing of a request (its query string) reaches a log
    hyper.errorlog = logging.getLogger("hypercorn.error")  # as JSON lines, like the rest
    return hyper


async def _serve_until_signalled(app: Any, hyper: HypercornConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await serve_asgi(app, hyper, shutdown_trigger=stop.wait)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", required=True, type=listen_address, metavar="HOST:PORT",
                        help="where the console serves HTTPS, e.g. 127.0.0.1:8443")
    parser.add_argument("--servers", metavar="HOST:PORT,...",
                        default=None,
                        help=f"gRPC addresses of the replicas (default: ${SERVERS_ENV}). With "
                        "several scheduler groups, each group's list separated by ';' in group "
                        "order, or one group's: the console learns the others from them")
    parser.add_argument("--tls-ca", metavar="PEM", help="the cluster's CA (default: "
                        f"${TLS_CA_ENV})")
    parser.add_argument("--tls-cert", metavar="PEM",
                        help="the console's own client certificate (raftsched-user:NAME) for "
                        f"its calls to the replicas (default: ${TLS_CERT_ENV})")
    parser.add_argument("--tls-key", metavar="PEM", help=f"its key (default: ${TLS_KEY_ENV})")
    parser.add_argument("--insecure-dev", action="store_true",
                        help="plaintext gRPC to a cluster run with --insecure-dev")
    parser.add_argument("--https-cert", required=True, metavar="PEM",
                        help="the HTTPS listener's certificate (chain)")
    parser.add_argument("--https-key", required=True, metavar="PEM", help="its private key")
    parser.add_argument("--watch-token-file", metavar="FILE",
                        help="a file holding the console's own API token (role operator): the "
                        "console then follows ONE event stream for every open job page instead of "
                        "one per signed-in user (a replica serves few streams); it only wakes "
                        "pages, whose data is always read with the user's own token")
    parser.add_argument("--read-only", action="store_true",
                        help="offer no action (no cancel, no drain): pages only")


def run(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except (RaftschedError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    serve(config)
    return 0


def _config(args: argparse.Namespace) -> WebConfig:
    host, port = host_port(args.listen, port_zero="any free port")
    source, text = ("--servers", args.servers) if args.servers is not None else \
        (f"${SERVERS_ENV}", os.environ.get(SERVERS_ENV, ""))
    if not text.strip():
        raise ValueError("no replica addresses: pass --servers HOST:PORT,...")
    servers = tuple(tuple(group) for group in topology.parse_groups(text, source))
    files = None if args.insecure_dev else tls.files_from(args.tls_ca, args.tls_cert,
                                                          args.tls_key)
    if files is None and not args.insecure_dev:
        raise ValueError("no client certificate: pass --tls-ca, --tls-cert and --tls-key "
                         "(or --insecure-dev for a plaintext dev cluster)")
    for path in (args.https_cert, args.https_key):
        if not os.path.isfile(path):
            raise ValueError(f"{path}: no such file")
    return WebConfig(host, port, servers, files, args.https_cert,
                     args.https_key, read_only=args.read_only,
                     watch_token=_watch_token(args.watch_token_file))


def _watch_token(path: str | None) -> str:
    if not path:
        return ""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ValueError(f"--watch-token-file {path}: {error.strerror}") from None
    if not token:
        raise ValueError(f"--watch-token-file {path} is empty")
    return token
