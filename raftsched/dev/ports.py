"""Loopback ports for local processes: the dev cluster's replicas and agents, a private Slurm's
controller and node daemon, the test clusters."""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"
MAX_PORTS = 128
"""Ports one `pick_free_ports` call hands out."""
CONNECT_TIMEOUT_S = 0.2


def pick_free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports that were free on `host` a moment ago (bound to port 0 together,
    then released; a process elsewhere could still take one before our servers bind it)."""
    assert 0 < count <= MAX_PORTS
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
    return ports


def port_open(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False
