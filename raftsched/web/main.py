"""`raftsched web`: the console process (uvicorn serving the Starlette app over HTTPS)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import uvicorn

from raftsched import eventlog, tls
from raftsched.errors import RaftschedError
from raftsched.web.app import build_app
from raftsched.web.console import ConsoleClient, Options

LOG = eventlog.EventLogger("web")
EXIT_USAGE = 2
GRACEFUL_SHUTDOWN_S = 5.0
"""Open streams (live pages, downloads) get this long to end when the console stops."""


@dataclass(frozen=True)
class WebConfig:
    host: str
    port: int
    servers: tuple[str, ...]
    client_tls: tls.TlsFiles | None
    https_cert: str
    https_key: str
    read_only: bool = False


def client_factory(config: WebConfig) -> Options:
    from raftsched.client.client import Client

    def make(token: str) -> ConsoleClient:
        return Client(config.servers, tls_files=config.client_tls, token=token or None,
                      retry_budget_s=10.0)

    return Options(make_client=make, read_only=config.read_only)


def serve(config: WebConfig) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn handles both)."""
    eventlog.configure("info")
    app = build_app(client_factory(config))
    server = uvicorn.Server(uvicorn.Config(
        app, host=config.host, port=config.port, ssl_certfile=config.https_cert,
        ssl_keyfile=config.https_key, access_log=False, log_config=None, log_level="warning",
        timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_S), server_header=False))
    LOG.info("web_listening", url=f"https://{config.host}:{config.port}/",
             read_only=config.read_only, servers=",".join(config.servers))
    server.run()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", required=True, metavar="HOST:PORT",
                        help="where the console serves HTTPS, e.g. 127.0.0.1:8443")
    parser.add_argument("--servers", metavar="HOST:PORT,...",
                        default=os.environ.get("RAFTSCHED_SERVERS", ""),
                        help="gRPC addresses of the replicas (default: $RAFTSCHED_SERVERS)")
    parser.add_argument("--tls-ca", metavar="PEM", help="the cluster's CA (default: "
                        "$RAFTSCHED_TLS_CA)")
    parser.add_argument("--tls-cert", metavar="PEM",
                        help="the console's own client certificate (raftsched-user:NAME) for "
                        "its calls to the replicas (default: $RAFTSCHED_TLS_CERT)")
    parser.add_argument("--tls-key", metavar="PEM", help="its key (default: $RAFTSCHED_TLS_KEY)")
    parser.add_argument("--insecure-dev", action="store_true",
                        help="plaintext gRPC to a cluster run with --insecure-dev")
    parser.add_argument("--https-cert", required=True, metavar="PEM",
                        help="the HTTPS listener's certificate (chain)")
    parser.add_argument("--https-key", required=True, metavar="PEM", help="its private key")
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
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {args.listen!r} is not HOST:PORT")
    servers = tuple(s.strip() for s in args.servers.split(",") if s.strip())
    if not servers:
        raise ValueError("no replica addresses: pass --servers HOST:PORT,...")
    files = None if args.insecure_dev else tls.files_from(args.tls_ca, args.tls_cert,
                                                          args.tls_key)
    if files is None and not args.insecure_dev:
        raise ValueError("no client certificate: pass --tls-ca, --tls-cert and --tls-key "
                         "(or --insecure-dev for a plaintext dev cluster)")
    for path in (args.https_cert, args.https_key):
        if not os.path.isfile(path):
            raise ValueError(f"{path}: no such file")
    return WebConfig(host.strip("[]"), int(port), servers, files, args.https_cert,
                     args.https_key, read_only=args.read_only)
