"""Value types for command-line options, shared by the CLI and the servers' own options: each
refuses a bad value with a message argparse prints as a usage error (exit 2)."""

from __future__ import annotations

import argparse
import math
import re

MAX_OPTION_SECONDS = 24 * 3600.0
"""A duration option is at most a day."""


INT32_MAX = 2**31 - 1
"""The largest value of a proto `int32` field (e.g. `ListJobsRequest.limit`)."""
UINT32_MAX = 2**32 - 1
"""The largest value of a proto `uint32` field (e.g. `TaskLogsRequest.attempt`)."""
INT64_MAX = 2**63 - 1
"""The largest value of a proto `int64` field."""
UINT64_MAX = 2**64 - 1
"""The largest value of a proto `uint64` field (e.g. `TaskLogsRequest.tail_bytes`)."""
PORT_MAX = 65_535
MAX_NUMBER_CHARS = 40
"""A number option's text is at most this long (no int() of a megabyte of digits)."""

_INTEGER = re.compile(r"[+-]?[0-9]+")


class BoundedOption:
    """The value type of a numeric option: a number of `kind` (int, or float for fractions) in
    `low`..`high` — the width of the proto field it fills, or a tighter named limit. Anything
    else (out of range, `1e23` for an integer, `2^64`, nan) is a usage error naming the option:
    argparse prints it and the command exits 2, before any request is built. `meaning` says
    what special values mean, e.g. "0: no limit". The enumeration test of the CLI's options
    (tests/unit/cli/test_options.py) finds every numeric option through this type."""

    def __init__(self, kind: type[int] | type[float], low: float, high: float,
                 meaning: str = "") -> None:
        assert low <= high
        self.kind, self.low, self.high = kind, low, high
        self.__name__ = kind.__name__  # argparse names the type in "invalid int value"
        # config.py reads an option's TOML type from its `type`'s return annotation.
        self.__annotations__ = {"text": str, "return": kind}
        self._range = f"{low:g}..{high:g}" if kind is float else f"{low}..{high}"
        self._meaning = f" ({meaning})" if meaning else ""

    def __call__(self, text: str) -> float:
        stripped = text.strip()
        value: float
        try:
            if len(stripped) > MAX_NUMBER_CHARS:
                raise ValueError(stripped)
            if self.kind is int:
                if not _INTEGER.fullmatch(stripped):
                    raise ValueError(stripped)
                value = int(stripped)
            else:
                value = float(stripped)
        except ValueError:
            what = "an integer" if self.kind is int else "a number"
            raise argparse.ArgumentTypeError(
                f"not {what} in {self._range}{self._meaning}: {text[:MAX_NUMBER_CHARS]!r}"
            ) from None
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise argparse.ArgumentTypeError(
                f"must be in {self._range}{self._meaning}, got {text.strip()}")
        return value


def integer(low: int, high: int, meaning: str = "") -> BoundedOption:
    """An integer option in `low`..`high`."""
    return BoundedOption(int, low, high, meaning)


def number(low: float, high: float, meaning: str = "") -> BoundedOption:
    """A number option (fractions allowed) in `low`..`high`."""
    return BoundedOption(float, low, high, meaning)


positive_int = integer(1, INT64_MAX)
"""A whole number, 1 or more, at most a proto int64."""

port = integer(0, PORT_MAX, "0: off")
"""A TCP port where 0 turns the service off."""


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
