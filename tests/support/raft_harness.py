"""Real replica processes (`tests/support/raft_proc.py`) on 127.0.0.1 for Raft tests and benchmark.

Every process is a child of the cluster's process supervisor (`raftsched.dev.supervisor`), which
signals only what it started, never by name; `Cluster.close()` kills and reaps all of them, and
callers put it in a `finally`. A replica's stdout and stderr go to its log, where `wait_ready`
looks for its first protocol line. Waiting is always "poll a condition until a deadline", never a
bare sleep.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from raftsched.dev.ports import pick_free_ports
from raftsched.dev.supervisor import Supervisor
from tests.support import paths
from tests.support.waiting import NotYet, wait_until

REPO_ROOT = paths.REPO
PROC_SCRIPT = REPO_ROOT / "tests" / "support" / "raft_proc.py"
START_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 60.0
READY_PREFIXES = ("ready ", "error ")
"""raft_proc's first protocol line: `ready <control port>` or `error <CODE> <message>`."""
DEAD_REPLICA_SIGNS = ("failed _onTick",)
"""Log lines that mean a replica stopped working (pysyncobj keeps the process alive)."""

T = TypeVar("T")


class HarnessError(NotYet):
    pass


def free_ports(count: int) -> list[int]:
    return pick_free_ports(count)


class ReplicaProcess:
    def __init__(self, address: str, peers: list[str], data_dir: Path, secret: str | None,
                 extra_args: Iterable[str] = (), *, supervisor: Supervisor) -> None:
        self.address = address
        self.peers = peers
        self.data_dir = data_dir
        self.secret = secret
        self.extra_args = list(extra_args)
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.proc = supervisor.add(data_dir.name, [], self.log_path, env=env, cwd=REPO_ROOT)
        self.control_port = 0

    @property
    def raft_port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def launch(self) -> None:
        """Start the process (with the secret and arguments it has now); `wait_ready` reads
        its first protocol line."""
        assert not self.proc.alive(), "already running"
        argv = [sys.executable, str(PROC_SCRIPT), "--address", self.address,
                "--peers", ",".join(self.peers), "--data-dir", str(self.data_dir),
                *self.extra_args]
        if self.secret is not None:
            argv += ["--secret", self.secret]
        self.proc.argv = argv
        self.proc.start()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The first protocol line: `ready <port>` (returned, port recorded) or `error ...`."""
        line = self.proc.wait_for_line(READY_PREFIXES, timeout_s)
        if line is None:
            status = self.proc.poll()
            how = f"exited with {status}" if status is not None else f"ran {timeout_s:g} s"
            raise HarnessError(f"{self.address} {how} without saying ready or error\n"
                               f"{self.log_tail()}")
        if line.startswith("ready "):
            self.control_port = int(line.split()[1])
        return line

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.launch()
        line = self.wait_ready(timeout_s)
        if not line.startswith("ready "):
            raise HarnessError(f"{self.address} failed to start: {line!r}\n{self.log_tail()}")

    @property
    def alive(self) -> bool:
        return self.proc.alive()

    def kill(self) -> None:
        """kill -9 this process (its whole process group) and reap it."""
        self.proc.kill()

    def signal(self, signum: signal.Signals) -> None:
        sent = self.proc.signal(signum)
        assert sent, f"{self.address} is not running"

    def request(self, line: str, timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[str, Any]:
        """One request; returns (kind, value): ("ok", json), ("notleader", address | None),
        ("unknown", message) or ("error", "CODE message")."""
        with socket.create_connection(("127.0.0.1", self.control_port), timeout=timeout_s) as s:
            s.sendall(line.encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise HarnessError(f"{self.address} closed the control connection on {line!r}")
                reply += chunk
        kind, _, rest = reply.decode().strip().partition(" ")
        if kind == "ok":
            return kind, json.loads(rest)
        if kind == "notleader":
            return kind, None if rest == "-" else rest
        return kind, rest

    def ok(self, line: str, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        kind, value = self.request(line, timeout_s)
        if kind != "ok":
            raise HarnessError(f"{self.address}: {line!r} -> {kind} {value}")
        return value

    def status(self) -> dict[str, Any]:
        value: dict[str, Any] = self.ok("status")
        return value

    def jobs(self) -> list[str]:
        value: list[str] = self.ok("jobs")
        return value

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class Cluster:
    def __init__(self, root: Path, count: int, secret: str | None = "test-cluster-secret",
                 extra_args: Iterable[str] = ()) -> None:
        self.root = root
        self.secret = secret
        self.extra_args = list(extra_args)
        self.supervisor = Supervisor()
        self.addresses = [f"127.0.0.1:{p}" for p in free_ports(count)]
        self.replicas = [self._new_replica(a, self.addresses, secret, self.extra_args)
                         for a in self.addresses]
        self.extras: list[ReplicaProcess] = []

    def _new_replica(self, address: str, members: list[str], secret: str | None,
                     extra_args: Iterable[str]) -> ReplicaProcess:
        name = "r" + address.rsplit(":", 1)[1]
        peers = [m for m in members if m != address]
        return ReplicaProcess(address, peers, self.root / name, secret, extra_args,
                              supervisor=self.supervisor)

    def extra(self, members: list[str], secret: str | None,
              extra_args: Iterable[str] | None = None) -> ReplicaProcess:
        """A replica process outside the initial member list (a joiner or an intruder) on a
        fresh port, started by the caller; `close` reaps it with the others."""
        address = f"127.0.0.1:{free_ports(1)[0]}"
        args = self.extra_args if extra_args is None else extra_args
        replica = self._new_replica(address, members, secret, args)
        self.extras.append(replica)
        return replica

    def all_processes(self) -> list[ReplicaProcess]:
        return [*self.replicas, *self.extras]

    def start(self, replicas: list[ReplicaProcess] | None = None) -> None:
        """Start several replicas at once (they boot in parallel)."""
        chosen = self.replicas if replicas is None else replicas
        for replica in chosen:
            replica.launch()
        for replica in chosen:
            line = replica.wait_ready()
            if not line.startswith("ready "):
                raise HarnessError(f"{replica.address} failed: {line!r}\n{replica.log_tail()}")

    def alive(self) -> list[ReplicaProcess]:
        return [r for r in self.replicas if r.alive]

    def find_leader(self, candidates: list[ReplicaProcess] | None = None,
                    ) -> ReplicaProcess | None:
        """A replica that believes it leads AND commits a barrier now."""
        for replica in candidates or self.alive():
            try:
                if replica.status()["is_leader"] and replica.ok("confirm 2") is True:
                    return replica
            except (OSError, HarnessError):
                continue
        return None

    def wait_leader(self, candidates: list[ReplicaProcess] | None = None,
                    timeout_s: float = 20.0) -> ReplicaProcess:
        return wait_until(lambda: self.find_leader(candidates), "a confirmed leader", timeout_s)

    def wait_converged(self, replicas: list[ReplicaProcess] | None = None,
                       timeout_s: float = 20.0) -> str:
        """Poll until the replicas report the same state digest at the same state index."""
        chosen = replicas or self.alive()

        def same() -> str | None:
            views = {(s["state_digest"], s["state_index"]) for s in map(_status, chosen)}
            return next(iter(views))[0] if len(views) == 1 else None

        return wait_until(same, f"{len(chosen)} replicas to agree", timeout_s)

    def kill_all(self) -> None:
        """kill -9 every replica (paused ones too), one right after the other, then reap them."""
        self.supervisor.kill_all()

    def close(self) -> None:
        self.supervisor.close()

    def dead_replica_signs(self) -> list[str]:
        found = []
        for replica in self.all_processes():
            for line in replica.log_text().splitlines():
                if any(sign in line for sign in DEAD_REPLICA_SIGNS):
                    found.append(f"{replica.address}: {line}")
        return found

    def truncations(self) -> int:
        return sum(r.log_text().count("truncating already-applied")
                   for r in self.all_processes())

    def logs(self) -> str:
        return "\n".join(f"--- {r.address} ({r.log_path})\n{r.log_tail(60)}"
                         for r in self.all_processes())


def _status(replica: ReplicaProcess) -> dict[str, Any]:
    return replica.status()
