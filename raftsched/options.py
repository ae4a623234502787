"""Value types for command-line options, shared by the CLI and the servers' own options: each
refuses a bad value with a message argparse prints as a usage error (exit 2)."""

from __future__ import annotations

import argparse
import ipaddress
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
    try:
        return host_port(text.strip(), port_zero="off")
    except ValueError as error:
        raise _refused(text, error) from None


def metrics_endpoint(address: tuple[str, int] | None, port: int) -> tuple[str, int] | None:
    """Where to serve metrics given `--metrics-address` (wins) and `--metrics-port`; None: off."""
    if address is not None:
        return address if address[1] else None
    return (METRICS_LOOPBACK, port) if port else None


# --- addresses: the one HOST:PORT rule --------------------------------------------------------

MAX_HOST_CHARS = 253
"""A DNS name's longest text form (RFC 1035); a 300-character host once made every pysyncobj
tick fail after it was added as a replica."""
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
"""One label of a DNS name (RFC 1123): at most 63 letters, digits and inner '-'."""


def host_port(text: str, *, port_zero: str = "") -> tuple[str, int]:
    """The one HOST:PORT rule of every address (the options `--servers`, `--peers`, `--raft`,
    `--grpc`, `--listen`, `--server`, `--metrics-address`, and a replica's membership checks):
    HOST is a DNS name (RFC 1123 labels: letters, digits, inner '-'; at most MAX_HOST_CHARS),
    an IPv4 address, or an IPv6 address in brackets (`[::1]:7001`); PORT is 1..65535, or also
    0 when `port_zero` says what 0 means. Nothing around it (callers strip what they split).
    Returns (host without brackets, port); ValueError saying what is wrong otherwise."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        raise ValueError("no ':PORT'")
    if not host:
        raise ValueError("no host")
    if host.startswith("[") and host.endswith("]"):
        _check_ipv6(host[1:-1])
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 address goes in brackets, e.g. [{host}]:{port_text}")
    else:
        _check_host(host)
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise ValueError(f"not a port number: {port_text[:20]!r}")
    port, low = int(port_text), 0 if port_zero else 1
    if not low <= port <= PORT_MAX:
        zero = f" ({port_zero})" if port_zero else ""
        raise ValueError(f"port {port} is not between {low}{zero} and {PORT_MAX}")
    return host, port


def _check_ipv6(host: str) -> None:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise ValueError(f"not a host name or address: {'[' + host + ']'!r}") from None


def _check_host(host: str) -> None:
    try:
        ipaddress.IPv4Address(host)
        return
    except ValueError:
        pass
    labels = host.split(".")
    if len(host) > MAX_HOST_CHARS or not host.isascii() or labels[-1].isdigit() or \
            not all(_HOST_LABEL.fullmatch(label) for label in labels):
        shown = host if len(host) <= 60 else host[:60] + "..."
        raise ValueError(f"not a host name or address: {shown!r} (DNS labels of letters, "
                         f"digits and inner '-'; or an IP, [...] for IPv6)")


def address_list_problem(text: str, *, allow_empty: bool = False) -> tuple[list[str], str]:
    """The addresses of a comma-separated list (items stripped, empty items skipped, each as
    given) and "" — or ([], why the list is refused: which item, and what is wrong with it)."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items and not allow_empty:
        return [], "names no address"
    for item in items:
        try:
            host_port(item)
        except ValueError as error:
            return [], f"{item!r} is not HOST:PORT ({error})"
    return items, ""


def parse_address_list(text: str, source: str, *, allow_empty: bool = False) -> list[str]:
    """`address_list_problem` for text from `source` (an option, or the environment variable
    it defaults to): the addresses, or ValueError naming the source and the bad item."""
    items, problem = address_list_problem(text, allow_empty=allow_empty)
    if problem:
        raise ValueError(f"{source} {problem}" if problem == "names no address"
                         else f"{source}: {problem}")
    return items


def _refused(text: str, error: ValueError) -> argparse.ArgumentTypeError:
    """The usage error of a single-address option: the text, and what is wrong with it when
    more than that it is not HOST:PORT at all."""
    reason = str(error)
    detail = "" if reason in ("no ':PORT'", "no host") else f" ({reason})"
    return argparse.ArgumentTypeError(f"not HOST:PORT: {text.strip()!r}{detail}")


def address(text: str) -> str:
    """The argparse type of a single HOST:PORT option (`--raft`, `--grpc`, `--server`): the
    address as given (stripped)."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"one HOST:PORT only, got {text.strip()!r}")
    try:
        host_port(text.strip())
    except ValueError as error:
        raise _refused(text, error) from None
    return text.strip()


def listen_address(text: str) -> str:
    """`address` where port 0 asks for any free port (`raftsched web --listen`)."""
    try:
        host_port(text.strip(), port_zero="any free port")
    except ValueError as error:
        raise _refused(text, error) from None
    return text.strip()


def address_list(text: str) -> list[str]:
    """The argparse type of a HOST:PORT,... option (`--servers`): at least one address."""
    items, problem = address_list_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return items


def optional_address_list(text: str) -> list[str]:
    """`address_list` that may be empty (`--peers` of a first replica)."""
    items, problem = address_list_problem(text, allow_empty=True)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return items
