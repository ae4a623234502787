"""Raw TCP connections that never authenticate, for tests of a replica's Raft and gRPC ports:
open them from a chosen loopback address, see whether the replica still holds them, and wait
(on the socket itself, never a sleep) until it closes them."""

from __future__ import annotations

import socket
import time

CONNECT_TIMEOUT_S = 5.0

PARTIAL_CLIENT_HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00,  # TLS handshake record, 512 bytes
                              0x01, 0x00, 0x01, 0xFC, 0x03, 0x03])  # ... of which 6 are sent
"""The start of a TLS ClientHello whose record header promises 512 bytes: the server waits for
the rest, which never comes."""


def connect(port: int, source: str = "127.0.0.1", send: bytes = b"") -> socket.socket:
    """A connection to 127.0.0.1:`port` from `source` (any 127.x.y.z address is this host),
    which sends `send` and then nothing more. The caller closes it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S,
                                    source_address=(source, 0))
    if send:
        sock.sendall(send)
    return sock


def is_open(sock: socket.socket) -> bool:
    """The peer has neither closed nor reset the connection (so far): looked at, not waited."""
    sock.settimeout(0.0)  # with a timeout, Python would wait for it before recv
    try:
        data = sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    return bool(data)


def wait_closed(sock: socket.socket, timeout_s: float) -> float:
    """Block on `sock` until the peer closes or resets it, reading (and dropping) whatever it
    sends before; the seconds waited. AssertionError if it is still open after `timeout_s`."""
    started = time.monotonic()
    while True:
        left = started + timeout_s - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the connection was still open after {timeout_s:g} s")
        sock.settimeout(left)
        try:
            if not sock.recv(4096):
                return time.monotonic() - started
        except ConnectionResetError:
            return time.monotonic() - started
        except TimeoutError:
            continue
