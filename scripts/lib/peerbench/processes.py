"""Processes a runner starts, ports they listen on, deadlines: standard library only.

Children stay in the runner's process group: the orchestrator starts each runner in a session of
its own and, on a timeout or Ctrl-C, signals that whole group, so nothing outlives the run even
when a runner is killed before its own `finally` runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0
"""After SIGTERM a child gets this long to exit before SIGKILL."""
POLL_INTERVAL_S = 0.05
LOG_TAIL_BYTES = 4_000
MAX_PORT_TRIES = 1_000

T = TypeVar("T")
_handed_out: set[int] = set()


class Timeout(Exception):
    """A bounded wait ran out."""


def free_port() -> int:
    """An ephemeral port on 127.0.0.1 that was free a moment ago (never the same one twice)."""
    for _ in range(MAX_PORT_TRIES):
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port found")


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
        return True
    return False


def wait_until(probe: Callable[[], T | None], timeout_s: float, what: str,
               interval_s: float = POLL_INTERVAL_S) -> T:
    """Call `probe` until it returns something other than None or False; raise Timeout after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise Timeout(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the result line."""
    print(message, file=sys.stderr, flush=True)


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so that `finally` blocks stop the children."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(f"stopped by signal {signum}")
    signal.signal(signal.SIGTERM, handler)


class Supervisor:
    """Starts children with logs in `log_dir`; `stop_all` (always call it) reaps every one."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{name}.log", "ab") as out:
            child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                     cwd=cwd, close_fds=True)
        self.children.append((name, child))
        return child

    def check_alive(self) -> None:
        for name, child in self.children:
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited with {child.returncode}:\n{self.tail(name)}")

    def tail(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return path.read_bytes()[-LOG_TAIL_BYTES:].decode("utf-8", "replace")

    def stop_all(self) -> None:
        for _, child in self.children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for _, child in self.children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children.clear()


@contextlib.contextmanager
def reporting(result: dict[str, Any], supervisor: Supervisor) -> Iterator[None]:
    """A runner's body: an exception becomes `result["error"]` (with each child's log tail on
    stderr), and every child is stopped whatever happens."""
    try:
        yield
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
        for name, _ in supervisor.children:
            log(f"--- {name} log tail:\n{supervisor.tail(name)}")
    finally:
        supervisor.stop_all()
