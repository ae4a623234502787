"""Value types for command-line options, shared by the CLI and the servers' own options: each
refuses a bad value with a message argparse prints as a usage error (exit 2)."""

from __future__ import annotations

import argparse
import math

MAX_OPTION_SECONDS = 24 * 3600.0
"""A duration option is at most a day."""


def count(text: str) -> int:
    """A whole number, 0 or more (a limit where 0 means none)."""
    return _integer_at_least(text, 0, "must be 0 or more")


def positive_int(text: str) -> int:
    return _integer_at_least(text, 1, "must be at least 1")


def _integer_at_least(text: str, low: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_OPTION_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be > 0 and at most {MAX_OPTION_SECONDS:g} seconds, got {text}")
    return value


METRICS_LOOPBACK = "127.0.0.1"
"""Where `--metrics-port PORT` alone serves metrics (the shorthand for 127.0.0.1:PORT)."""


def metrics_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[IPv6]:PORT`) to serve Prometheus metrics on; `0.0.0.0:PORT` serves
    every interface, so that a Prometheus on another host can scrape; port 0 turns it off."""
    host, colon, port_text = text.strip().rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() or c in "/[]" for c in host) or len(host) > 253:
        raise argparse.ArgumentTypeError(f"not a host name or address: {host!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {port_text!r}") from None
    if not 0 <= port <= 65_535:
        raise argparse.ArgumentTypeError(f"port {port} is not between 0 (off) and 65535")
    return host, port


def metrics_endpoint(address: tuple[str, int] | None, port: int) -> tuple[str, int] | None:
    """Where to serve metrics given `--metrics-address` (wins) and `--metrics-port`; None: off."""
    if address is not None:
        return address if address[1] else None
    return (METRICS_LOOPBACK, port) if port else None
