"""A throwaway raftsched cluster from the public command line: 3 replicas + 2 mock agents, all
with --insecure-dev (plaintext gRPC, like the peers it is compared with; the clients here pass no
certificate).

Only `raftsched replica` / `raftsched agent` and the public client are used (the package's
internals are being refactored; the benchmark must not depend on them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from raftsched.client.client import Client

from .processes import HOST, Supervisor, free_port, log, wait_until
from .workloads import SLOTS_PER_WORKER, WORKERS

REPLICAS = 3
AGENT_IDS = ("east", "west")[:WORKERS]
AGENT_MEMORY_MB = 8_192
"""Tasks ask for memory_mb 0, so only cpu binds: --cpu 8 at 1 cpu per task is 8 slots."""
READY_TIMEOUT_S = 90.0
"""Start to: a leader exists and every agent's cluster is READY."""
STATUS_CALL_TIMEOUT_S = 2.0
READY = "READY"


class RaftschedCluster:
    def __init__(self, supervisor: Supervisor, data_dir: Path, queue_depth: int = -1,
                 profile_dir: Path | None = None) -> None:
        self.supervisor = supervisor
        self.profile_dir = profile_dir
        """When set, every process runs under `profiled.py`, saving to profile_dir/<name>."""
        self.queue_depth = queue_depth
        """The agents' --queue-depth; -1: their default."""
        self.data_dir = data_dir
        self.raft_ports = [free_port() for _ in range(REPLICAS)]
        self.grpc_ports = [free_port() for _ in range(REPLICAS)]
        self.metrics_ports = [free_port() for _ in AGENT_IDS]
        self.servers = [f"{HOST}:{port}" for port in self.grpc_ports]
        self.command = [sys.executable, "-m", "raftsched"]

    def start(self) -> None:
        for index in range(REPLICAS):
            self._start_replica(index)
        self.wait_leader()
        for agent_id, metrics_port in zip(AGENT_IDS, self.metrics_ports, strict=True):
            self._start_agent(agent_id, metrics_port)
        wait_until(self._all_ready, READY_TIMEOUT_S, f"agents {', '.join(AGENT_IDS)} READY",
                   interval_s=0.2)
        log(f"raftsched: {REPLICAS} replicas + agents {', '.join(AGENT_IDS)} ready "
            f"({self.servers[0]} ...)")

    def client(self, retry_budget_s: float = 30.0) -> Client:
        return Client(self.servers, retry_budget_s=retry_budget_s)

    def wait_leader(self) -> str:
        status = wait_until(self._status_from_leader, READY_TIMEOUT_S, "a raftsched leader",
                            interval_s=0.2)
        return str(status.leader)

    def _start_replica(self, index: int) -> None:
        raft = [f"{HOST}:{port}" for port in self.raft_ports]
        directory = self.data_dir / f"replica{index}"
        directory.mkdir(parents=True)
        peers = ",".join(address for i, address in enumerate(raft) if i != index)
        self.supervisor.start(f"replica{index}", [
            *self._command(f"replica{index}"), "replica", "--raft", raft[index],
            "--grpc", self.servers[index], "--peers", peers, "--data-dir", str(directory),
            "--insecure-dev", "--log-level", "WARNING"])

    def _start_agent(self, agent_id: str, metrics_port: int) -> None:
        directory = self.data_dir / f"agent-{agent_id}"
        directory.mkdir(parents=True)
        self.supervisor.start(f"agent-{agent_id}", [
            *self._command(f"agent-{agent_id}"), "agent", "--cluster-id", agent_id,
            "--servers", ",".join(self.servers),
            "--cpu", str(SLOTS_PER_WORKER), "--memory-mb", str(AGENT_MEMORY_MB),
            "--data-dir", str(directory), "--executor", "mock", "--insecure-dev",
            "--metrics-port", str(metrics_port), "--log-level", "warning",
            *(["--queue-depth", str(self.queue_depth)] if self.queue_depth >= 0 else [])])

    def _command(self, name: str) -> list[str]:
        if self.profile_dir is None:
            return self.command
        return [sys.executable, str(Path(__file__).with_name("profiled.py")),
                str(self.profile_dir / name), "raftsched"]

    def _status_from_leader(self) -> Any:
        """Admin.ClusterStatus as the leader answers it (None while there is none)."""
        self.supervisor.check_alive()
        with Client(self.servers, timeout_s=STATUS_CALL_TIMEOUT_S, retry_budget_s=0) as probe:
            for address in self.servers:
                try:
                    status = probe.cluster_status(server=address)
                except Exception:  # not up yet, or no leader yet: ask the next one
                    continue
                if status.leader and status.leader in (address, status.responder):
                    return status
        return None

    def _all_ready(self) -> bool:
        status = self._status_from_leader()
        if status is None:
            return False
        clusters = {c.cluster_id: c.status for c in status.clusters}
        return all(clusters.get(agent_id) == READY for agent_id in AGENT_IDS)
