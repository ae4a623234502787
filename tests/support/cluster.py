"""A real local cluster for integration tests: replica and agent processes on 127.0.0.1 with
ephemeral ports and a temp dir, started through the process supervisor (`raftsched.dev.supervisor`)
and killed and reaped by `close()` (always called by the fixture)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from raftsched import tls
from raftsched.client.client import Client
from raftsched.dev import pki
from raftsched.dev.ports import pick_free_ports, port_open
from raftsched.dev.supervisor import Child, Supervisor
from raftsched.errors import Code, RaftschedError
from tests.support.agent import kill_attempt_processes, remove_agent_cgroups
from tests.support.waiting import wait_until

T = TypeVar("T")
START_TIMEOUT_S = 30.0
LEADER_PROBE_TIMEOUT_S = 5.0
"""One replica's answer to "who leads?" (TLS handshake included): generous, as a busy machine
is slow to answer, and a wait for a leader polls again until its own deadline anyway."""
POLL_S = 0.05
CLI_TIMEOUT_S = 120.0
SECRET = "integration-test-secret"


def free_port() -> int:
    return pick_free_ports(1)[0]


@dataclass
class LocalCluster:
    root: Path
    replica_count: int = 3
    replica_flags: list[str] = field(default_factory=list)
    agent_flags: list[str] = field(default_factory=list)
    supervisor: Supervisor = field(default_factory=Supervisor)
    secure: bool = True
    """Mutual TLS with a throwaway CA in root/tls (False: every process with --insecure-dev)."""
    replicas: list[Child] = field(default_factory=list)
    agents: dict[str, Child] = field(default_factory=dict)
    grpc: list[str] = field(default_factory=list)
    raft: list[str] = field(default_factory=list)
    clients: list[Client] = field(default_factory=list)

    def __post_init__(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.secret_file = self.root / "secret"
        self.secret_file.write_text(SECRET)
        self.authority: pki.Authority | None = None
        self.user_tls: tls.TlsFiles | None = None
        self.admin_token: str | None = None
        """The bootstrap admin token (role admin, every tenant): `client()` sends it."""
        if self.secure:
            self.authority = pki.create_authority(self.root / "tls")
            self.replica_tls: tls.TlsFiles = pki.issue_replica(self.authority, ["127.0.0.1"])
            self.user_tls = pki.issue_user(self.authority, "tests")
            self.token_file = self.root / "tls" / "admin.token"
            self.admin_token = pki.write_admin_token(self.token_file)
        # All at once: ports picked one by one can repeat (a port released by one pick is the
        # next pick's), and two replicas given one gRPC port left a cluster of two.
        ports = [f"127.0.0.1:{port}" for port in pick_free_ports(2 * self.replica_count)]
        self.raft, self.grpc = ports[:self.replica_count], ports[self.replica_count:]
        for i in range(self.replica_count):
            argv = [sys.executable, "-m", "raftsched.replica.main", "--raft", self.raft[i],
                    "--grpc", self.grpc[i], "--peers", ",".join(self.raft),
                    "--data-dir", str(self.root / f"replica-{i}"),
                    "--applied-log", str(self.applied_log(i)),
                    *self._replica_security(), *self.replica_flags]
            self.replicas.append(self.supervisor.add(f"replica-{i}", argv,
                                                     self.root / "logs" / f"r{i}.log"))

    # -- replicas --------------------------------------------------------------------------------

    def applied_log(self, i: int) -> Path:
        """Replica i's audit file of applied entries (`--applied-log`)."""
        return self.root / f"replica-{i}.applied"

    def start(self) -> LocalCluster:
        for proc in self.replicas:
            proc.start()
        self.wait_leader()
        return self

    def _replica_security(self) -> list[str]:
        if not self.secure:
            return ["--insecure-dev"]
        files = self.replica_tls
        return ["--secret-file", str(self.secret_file), "--tls-ca", str(files.ca),
                "--tls-cert", str(files.cert), "--tls-key", str(files.key),
                "--bootstrap-token-file", str(self.token_file)]

    def agent_tls(self, cluster_id: str) -> tls.TlsFiles | None:
        """A certificate for the agent of `cluster_id` (made on first use); None if insecure."""
        if self.authority is None:
            return None
        return pki.issue_agent(self.authority, cluster_id)

    def client(self, **kwargs: Any) -> Client:
        kwargs.setdefault("tls_files", self.user_tls)
        kwargs.setdefault("token", self.admin_token)
        client = Client(self.grpc, **kwargs)
        self.clients.append(client)
        return client

    def cli(self, *argv: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """`python -m raftsched ARGV` against this cluster (its servers, the user certificate,
        the admin token as flags; no RAFTSCHED_* variable of the caller leaks in)."""
        connection = ["--servers", ",".join(self.grpc)]
        if self.user_tls is not None and self.admin_token is not None:
            connection += ["--tls-ca", str(self.user_tls.ca), "--tls-cert",
                           str(self.user_tls.cert), "--tls-key", str(self.user_tls.key),
                           "--token", self.admin_token]
        else:
            connection.append("--insecure-dev")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED_")}
        return subprocess.run([sys.executable, "-m", "raftsched", *argv, *connection],
                              capture_output=True, text=True, timeout=timeout_s, env=env,
                              check=False)

    def leader_index(self) -> int | None:
        """The replica that leads, as seen by a live replica (None if none is known)."""
        for i, proc in enumerate(self.replicas):
            if not proc.alive():
                continue
            try:
                status = self.client(retry_budget_s=LEADER_PROBE_TIMEOUT_S,
                                     timeout_s=LEADER_PROBE_TIMEOUT_S).cluster_status(self.grpc[i])
            except RaftschedError:
                continue
            if status.leader in self.grpc:
                leader = self.grpc.index(status.leader)
                if self.replicas[leader].alive():
                    return leader
        return None

    def wait_leader(self, timeout_s: float = START_TIMEOUT_S) -> int:
        index = wait_until(lambda: plus_one(self.leader_index()), "a leader", timeout_s)
        return index - 1

    def spawn_joiner(self) -> tuple[Child, str, str]:
        """Start a replica that is not yet a member (peers: every member and itself); add it
        with Admin.AddReplica. Returns the process and its Raft and gRPC addresses."""
        raft, grpc = (f"127.0.0.1:{port}" for port in pick_free_ports(2))
        argv = [sys.executable, "-m", "raftsched.replica.main", "--raft", raft, "--grpc", grpc,
                "--peers", ",".join([*self.raft, raft]),
                "--data-dir", str(self.root / f"joiner-{raft.rsplit(':', 1)[1]}"),
                *self._replica_security(), *self.replica_flags]
        proc = self.supervisor.start(f"joiner-{raft}", argv,
                                     self.root / "logs" / f"joiner-{raft}.log")
        self.replicas.append(proc)
        wait_until(lambda: port_open(raft), f"the joiner to listen on {raft}", START_TIMEOUT_S)
        return proc, raft, grpc

    # -- agents ----------------------------------------------------------------------------------

    def add_agent(self, cluster_id: str, capabilities: str = "linux", cpu: float = 4,
                  memory_mb: int = 8192, gpu: int = 0, executor: str = "mock",
                  extra: tuple[str, ...] = ()) -> Child:
        argv = [sys.executable, "-m", "agent", "--cluster-id", cluster_id,
                "--servers", ",".join(self.grpc), "--capabilities", capabilities,
                "--cpu", str(cpu), "--memory-mb", str(memory_mb), "--gpu", str(gpu),
                "--data-dir", str(self.root / f"agent-{cluster_id}"), "--executor", executor,
                *self._agent_security(cluster_id), *self.agent_flags, *extra]
        proc = self.supervisor.start(f"agent-{cluster_id}", argv,
                                     self.root / "logs" / f"agent-{cluster_id}.log")
        self.agents[cluster_id] = proc
        return proc

    def _agent_security(self, cluster_id: str) -> list[str]:
        files = self.agent_tls(cluster_id)
        if files is None:
            return ["--insecure-dev"]
        return ["--tls-ca", str(files.ca), "--tls-cert", str(files.cert),
                "--tls-key", str(files.key)]

    def wait_clusters_ready(self, *cluster_ids: str, timeout_s: float = START_TIMEOUT_S) -> None:
        def ready() -> bool:
            status = self.client(retry_budget_s=2).cluster_status()
            states = {c.cluster_id: c.status for c in status.clusters}
            return all(states.get(cid) == "READY" for cid in cluster_ids)
        wait_until(ready, f"clusters {cluster_ids} READY", timeout_s)

    def wait_all_applied(self, timeout_s: float = START_TIMEOUT_S) -> int:
        """Every live replica has applied what the leader had committed when this was called
        (a follower may lag behind the leader's answers); returns that index."""
        client = self.client(retry_budget_s=2)
        target = client.cluster_status().commit_index

        def caught_up() -> bool:
            for address, proc in zip(self.grpc, self.replicas, strict=False):
                if proc.alive() and client.cluster_status(server=address).applied_index < target:
                    return False
            return True
        wait_until(caught_up, f"every replica to apply index {target}", timeout_s)
        return int(target)

    # -- teardown --------------------------------------------------------------------------------

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.supervisor.close()
        # Subprocess tasks outlive their agent by design (the next agent adopts them): those
        # our agents started and left (a test that failed before its task ended) go too.
        for cluster_id in self.agents:
            attempts = self.root / f"agent-{cluster_id}" / "attempts"
            kill_attempt_processes(attempts)
            remove_agent_cgroups(cluster_id, attempts)

    def logs(self) -> str:
        return "\n".join(f"--- {child.name}\n" + "\n".join(child.log_tail())
                         for child in self.supervisor.children)


@contextmanager
def task_user_root(prefix: str) -> Iterator[Path]:
    """A temporary directory (0711) for a cluster whose agent runs tasks as its unprivileged
    task user when the tests run as root: a task reaches its work and checkpoint directories by
    absolute path, so every directory above the agent's data dir must let it through, and
    pytest's tmp_path lies under a 0700 directory."""
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        root = Path(name)
        root.chmod(0o711)
        yield root


@contextmanager
def running(root: Path, **options: Any) -> Iterator[LocalCluster]:
    """A started LocalCluster (options as LocalCluster's), closed afterwards; if the body fails,
    the processes' log tails are printed (pytest shows them with the failure)."""
    local = LocalCluster(root, **options)
    try:
        yield local.start()
    except BaseException:
        print(local.logs())
        raise
    finally:
        local.close()


def with_token(channel: grpc.Channel, token: str) -> grpc.Channel:
    """`channel` sending `authorization: Bearer TOKEN` with every unary and server-stream call
    (raw calls in tests; the Client does this itself)."""
    return grpc.intercept_channel(channel, _Bearer(token))


class _Bearer(grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
              grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    def _with_token(self, details: Any) -> Any:
        return details._replace(metadata=(*(details.metadata or ()), *self._metadata))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


def plus_one(index: int | None) -> int | None:
    return None if index is None else index + 1


def code_of(call: Callable[[], Any]) -> Code | None:
    """The code `call` was refused with (a RaftschedError), or None when it went through."""
    try:
        call()
    except RaftschedError as error:
        return error.code
    return None
