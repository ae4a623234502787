"""The cluster under test: N replicas and M agents as real processes, each in its own network
namespace (see netns.py), with their data, logs and applied logs under the results folder.

The gRPC API is mutual TLS, as in production: a throwaway CA in RESULTS/tls (`raftsched.dev.pki`)
signs one replica certificate naming every replica's IP, one certificate per agent
(raftsched-agent:CLUSTER) and one for the harness's clients (raftsched-user:jepsen), and one
for the hostile-agent fault (raftsched-agent:hostile, a cluster no real agent runs).

Every node program is a child of the harness's process supervisor (`raftsched.dev.supervisor`):
only processes started here are ever signalled, each in its own process group. Clock skew
restarts a process with RAFTSCHED_FAILPOINT_WALL_CLOCK_SKEW_S set (its wall clock only; monotonic
clocks, which Raft timeouts use, are left alone). libfaketime would be the classic tool, but it
breaks CPython's timed waits (time.sleep fails with EINVAL, condition waits hang), so replicas
would die of it rather than run with a wrong clock.

With `groups` K > 1 (issue 27) the cluster is K scheduler groups of `replica_count` replicas
each, named g<group>r<i>: each group its own Raft peers and log (`--group i --groups K`), one
bootstrap token file for all (one admin token works in every group); every agent is given every
group's gRPC servers, the groups separated by ';', and `client()` is a `GroupedClient`.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jepsen.hostile import HOSTILE_CLUSTER
from jepsen.netns import Net, NodeNs
from jepsen.workload import connect
from raftsched.client.client import Client
from raftsched.client.groups import GroupedClient
from raftsched.dev import pki
from raftsched.dev.supervisor import Child, StopResult, Supervisor, stop_all
from raftsched.environment import WALL_CLOCK_SKEW_ENV
from raftsched.errors import RaftschedError
from raftsched.tls import TlsFiles

RAFT_PORT = 7000
GRPC_PORT = 7100
SECRET = "jepsen-style-harness-secret"
USER_NAME = "jepsen"
"""The harness's clients present raftsched-user:jepsen."""
STOP_TIMEOUT_S = 10.0
"""At the end of a run, how long nodes get to exit after SIGTERM before SIGKILL."""
STATUS_TIMEOUT_S = 1.0
POLL_S = 0.1


@dataclass
class NodeProc:
    """A replica or an agent program inside its node's network namespace (`nsenter --net`
    execs it, so the child's pid is the program's)."""

    kind: str  # "replica" | "agent"
    ns: NodeNs
    child: Child
    skew_s: float = 0.0

    @property
    def name(self) -> str:
        return self.child.name

    @property
    def paused(self) -> bool:
        return self.child.paused

    def start(self, skew_s: float = 0.0) -> None:
        """Start the program, with its wall clock `skew_s` off (0: the true clock)."""
        env = dict(os.environ)
        env.pop(WALL_CLOCK_SKEW_ENV, None)
        if skew_s:
            env[WALL_CLOCK_SKEW_ENV] = f"{skew_s:g}"
        self.child.env = env
        self.skew_s = skew_s
        self.child.start(note=f"skew={skew_s:+.0f}s")

    def alive(self) -> bool:
        return self.child.alive()

    def kill(self) -> None:
        """kill -9 (a paused process dies too) and reap."""
        self.child.kill()

    def pause(self) -> None:
        if not self.child.paused:
            self.child.pause()

    def resume(self) -> None:
        self.child.resume()


def _tls_flags(files: TlsFiles) -> list[str]:
    return ["--tls-ca", str(files.ca), "--tls-cert", str(files.cert), "--tls-key", str(files.key)]


@dataclass
class ClusterUnderTest:
    root: Path
    net: Net
    replica_count: int
    agent_specs: dict[str, dict[str, Any]]
    """cluster id -> {"cpu", "memory_mb", "gpu", "capabilities"}."""
    suspect_after_s: float
    lost_after_s: float
    groups: int = 1
    """Scheduler groups, each of `replica_count` replicas (1: the single group of before)."""
    joining: bool = False
    """The last group joins a running deployment (`run --grow`): its replicas are started with
    `--joining` and own no shard until shards move to it; the others are started as a
    deployment of one group fewer, and every agent is given every group's servers."""
    replicas: dict[str, NodeProc] = field(default_factory=dict)
    agents: dict[str, NodeProc] = field(default_factory=dict)
    grpc: dict[str, str] = field(default_factory=dict)
    group_of: dict[str, int] = field(default_factory=dict)
    """replica name -> its group."""
    supervisor: Supervisor = field(default_factory=Supervisor)

    def __post_init__(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        secret = self.root / "secret"
        secret.write_text(SECRET)
        if self.groups == 1:
            names = [f"r{i}" for i in range(self.replica_count)]
            self.group_of = dict.fromkeys(names, 0)
        else:
            self.group_of = {f"g{g}r{i}": g for g in range(self.groups)
                             for i in range(self.replica_count)}
            names = list(self.group_of)
        spaces = {name: self.net.add_node(name) for name in names}
        raft = {g: [f"{spaces[n].ip}:{RAFT_PORT}" for n in names if self.group_of[n] == g]
                for g in range(self.groups)}
        authority = pki.create_authority(self.root / "tls")
        replica_tls = pki.issue_replica(authority, [spaces[n].ip for n in names])
        self.user_tls: TlsFiles = pki.issue_user(authority, USER_NAME)
        self.hostile_tls: TlsFiles = pki.issue_agent(authority, HOSTILE_CLUSTER)
        """A real agent certificate for a cluster no agent runs: the hostile-agent fault's."""
        token_file = self.root / "tls" / "admin.token"
        self.admin_token = pki.write_admin_token(token_file)
        """The bootstrap admin token (every tenant): the workload acts for several tenants."""
        self.grpc = {name: f"{spaces[name].ip}:{GRPC_PORT}" for name in names}
        for name in names:
            ns = spaces[name]
            home = self.root / "replicas" / name
            home.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-m", "raftsched.replica.main",
                    "--raft", f"{ns.ip}:{RAFT_PORT}", "--grpc", self.grpc[name],
                    "--peers", ",".join(raft[self.group_of[name]]),
                    "--data-dir", str(home / "data"), "--secret-file", str(secret),
                    *_tls_flags(replica_tls), "--bootstrap-token-file", str(token_file),
                    "--applied-log", str(home / "applied.log"),
                    "--suspect-after-s", str(self.suspect_after_s),
                    "--lost-after-s", str(self.lost_after_s)]
            argv += self._group_flags(self.group_of[name])
            self.replicas[name] = self._node(name, "replica", ns, argv,
                                             self.root / "logs" / f"replica-{name}.log")
        for index, (cluster_id, spec) in enumerate(self.agent_specs.items()):
            ns = self.net.add_node(cluster_id)
            # With several groups each agent is given one group's replicas (in turn) and learns
            # the others from them (GetTopology): learning, and the topology it keeps for a
            # restart during a partition, run under the faults too.
            given = self.servers_text() if self.joining \
                else ",".join(self.group_servers(index % self.groups))
            argv = [sys.executable, "-m", "agent", "--cluster-id", cluster_id,
                    "--servers", given,
                    "--capabilities", ",".join(spec["capabilities"]),
                    "--cpu", str(spec["cpu"]), "--memory-mb", str(spec["memory_mb"]),
                    "--gpu", str(spec["gpu"]),
                    "--data-dir", str(self.root / "agents" / cluster_id),
                    "--executor", "subprocess",
                    *_tls_flags(pki.issue_agent(authority, cluster_id)),
                    # The workload's tasks append to one ledger file the checker reads: they
                    # run as the harness's own user, not the agent's default task user.
                    "--task-user", ""]
            self.agents[cluster_id] = self._node(cluster_id, "agent", ns, argv,
                                                 self.root / "logs" / f"agent-{cluster_id}.log")

    def _group_flags(self, group: int) -> list[str]:
        """A replica's --group/--groups/--topology (and --joining): the deployment it starts
        in is every group, or with `joining` every group but the last, which joins it."""
        known = self.groups - 1 if self.joining and group < self.groups - 1 else self.groups
        if known == 1:
            return []
        topology = ";".join(",".join(self.grpc[n] for n in self.group_replicas(g))
                            for g in range(known))
        return ["--group", str(group), "--groups", str(known), "--topology", topology,
                *(["--joining"] if self.joining and group == self.groups - 1 else [])]

    def group_replicas(self, group: int) -> list[str]:
        """The names of `group`'s replicas, sorted."""
        return sorted(n for n, g in self.group_of.items() if g == group)

    def group_servers(self, group: int) -> list[str]:
        return [self.grpc[n] for n in self.group_replicas(group)]

    def servers_text(self) -> str:
        """Every group's gRPC servers, comma-separated, the groups separated by ';' (with one
        group: today's list)."""
        return ";".join(",".join(self.group_servers(g)) for g in range(self.groups))

    def _node(self, name: str, kind: str, ns: NodeNs, argv: list[str], log: Path) -> NodeProc:
        return NodeProc(kind, ns, self.supervisor.add(name, [*ns.enter(), *argv], log))

    @property
    def nodes(self) -> dict[str, NodeProc]:
        return {**self.replicas, **self.agents}

    def start(self) -> None:
        for proc in self.nodes.values():
            proc.start()

    def client(self, **kwargs: Any) -> Client | GroupedClient:
        """A client of the cluster: with several groups, a GroupedClient over one Client per
        group (it routes submits by key, job calls by job id)."""
        return connect([self.group_servers(g) for g in range(self.groups)],
                       tls_files=self.user_tls, token=self.admin_token, **kwargs)

    # -- observing the replicas -------------------------------------------------------------

    def status(self, name: str, *, include_digest: bool = False) -> Any | None:
        """The replica's own ClusterStatus, or None when it does not answer promptly."""
        proc = self.replicas[name]
        if not proc.alive() or proc.paused:
            return None
        client = Client([self.grpc[name]], timeout_s=STATUS_TIMEOUT_S,
                        retry_budget_s=STATUS_TIMEOUT_S, tls_files=self.user_tls,
                        token=self.admin_token)
        try:
            return client.cluster_status(self.grpc[name], include_digest=include_digest)
        except RaftschedError:
            return None
        finally:
            client.close()

    def leader(self, group: int = 0) -> str | None:
        """The replica of `group` that says it leads, with the highest term among those that
        say so."""
        best: tuple[int, str] | None = None
        for name in self.group_replicas(group):
            status = self.status(name)
            if status is None or status.leader != self.grpc[name]:
                continue
            if best is None or status.term > best[0]:
                best = (status.term, name)
        return None if best is None else best[1]

    def wait_leader(self, timeout_s: float, group: int = 0) -> str | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.leader(group)
            if leader is not None:
                return leader
            time.sleep(POLL_S)
        return None

    def wait_agents_ready(self, timeout_s: float) -> bool:
        """Every agent READY in every group (each group's leader says so)."""
        deadline = time.monotonic() + timeout_s
        waiting = list(range(self.groups))
        while time.monotonic() < deadline:
            group = waiting[0]
            leader = self.leader(group)
            status = self.status(leader) if leader else None
            if status is not None:
                states = {c.cluster_id: c.status for c in status.clusters}
                if all(states.get(a) == "READY" for a in self.agents):
                    waiting.pop(0)
                    if not waiting:
                        return True
                    continue
            time.sleep(POLL_S)
        return False

    def ensure_running(self) -> list[str]:
        """Resume paused and restart dead nodes (without skew); returns the names touched."""
        touched = []
        for proc in self.nodes.values():
            if proc.paused:
                proc.resume()
                touched.append(proc.name)
            if not proc.alive() or proc.skew_s:
                proc.kill()
                proc.start()
                touched.append(proc.name)
        return touched

    def stop(self) -> list[StopResult]:
        """SIGTERM the agents, then the replicas (paused ones are continued to act on it), each
        group given STOP_TIMEOUT_S before SIGKILL."""
        return [result for group in (self.agents, self.replicas)
                for result in stop_all([proc.child for proc in group.values()],
                                       term_timeout_s=STOP_TIMEOUT_S)]

    def kill_all(self) -> None:
        self.supervisor.kill_all()
