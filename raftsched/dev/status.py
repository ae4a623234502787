"""`raftsched dev status`: the recorded cluster and what it answers. (Part of the dev cluster,
`raftsched.dev`.)"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raftsched.dev.add_agent import recorded_state
from raftsched.dev.processes import ClusterView, Probe, probe_cluster, require_proc
from raftsched.dev.record import AgentEntry, ClusterState, SlurmEntry, WebEntry
from raftsched.dev.supervisor import (
    Identity,
)

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    pass



# --- status and down ---------------------------------------------------------------------------


def group_leaders(state: ClusterState, probe: Probe = probe_cluster) -> list[str]:
    """With several scheduler groups recorded (a joining one too, last), each group's leader
    ("" when none answers), by asking its live replicas; [] with one group (its leader is the
    view's)."""
    if len(state.all_groups) == 1:
        return []
    leaders = []
    for group in range(len(state.all_groups)):
        live = [r.grpc_address for r in state.replicas if r.group == group
                and Identity(r.pid, r.start_time_ticks).is_running()]
        view = probe(live, state.client_tls) if live else None
        leaders.append(view.leader if view is not None and view.from_leader else "")
    return leaders


def cluster_doc(state: ClusterState, view: ClusterView | None,
                leaders: list[str] | None = None) -> dict[str, Any]:
    """What `dev up` and `dev status` print with --json: {"servers", "replicas": [{"id", "pid",
    "address", "raft_address", "leader", "alive", "group", "joining"}], "agents": [{"cluster",
    "pid", "alive"}],
    "metrics": [URL of every replica's and agent's /metrics], "dir", "insecure", "user_tls":
    {"ca", "cert", "key"} | null, "slurm": {"dir", "conf", "partition", "jobcomp", "daemons":
    [{"name", "pid", "alive", "log"}]} | null, "web": {"url", "pid", "alive", "log"} | null,
    "groups": [each client group's addresses], "joining_group": the group `dev add-group` has
    not given its shards yet | null, "leaders": [each recorded group's, a joining one last]}
    and a few more fields."""
    leader = view.leader if view is not None else ""
    leading = set(leaders) if leaders else {leader}
    replicas = [{
        "id": r.id, "pid": r.pid, "address": r.grpc_address, "raft_address": r.raft_address,
        "leader": bool(r.grpc_address) and r.grpc_address in leading, "group": r.group,
        "joining": r.joining,
        "alive": Identity(r.pid, r.start_time_ticks).is_running(),
        "metrics_port": r.metrics_port, "data_dir": r.data_dir, "log": r.log,
    } for r in state.replicas]
    agents = [agent_doc(agent, view, state.executor) for agent in state.agents]
    user_tls = state.client_tls
    ports = [r.metrics_port for r in state.replicas] + [a.metrics_port for a in state.agents]
    metrics = [metrics_url(port) for port in ports if port]
    return {"servers": state.servers, "groups": state.client_groups,
            "joining_group": state.joining_group, "leaders": leaders or [leader],
            "replicas": replicas, "agents": agents, "dir": state.dir,
            "metrics": metrics,
            "leader": leader, "executor": state.executor, "secret_file": state.secret_file,
            "insecure": state.insecure,
            "user_tls": asdict(user_tls) if user_tls is not None else None,
            "slurm": slurm_doc(state.slurm) if state.slurm is not None else None,
            "web": web_doc(state.web) if state.web is not None else None}


def web_doc(web: WebEntry) -> dict[str, Any]:
    return {"url": web.url, "pid": web.pid,
            "alive": Identity(web.pid, web.start_time_ticks).is_running(), "log": web.log}


def slurm_doc(slurm: SlurmEntry) -> dict[str, Any]:
    return {"dir": slurm.dir, "conf": slurm.conf, "partition": slurm.partition,
            "jobcomp": slurm.jobcomp,
            "daemons": [{"name": d.name, "pid": d.pid,
                         "alive": Identity(d.pid, d.start_time_ticks).is_running(),
                         "log": d.log} for d in slurm.daemons]}


def metrics_url(port: int) -> str:
    """Where a dev process serves Prometheus metrics (`--metrics-port`: on 127.0.0.1)."""
    return f"http://127.0.0.1:{port}/metrics"


def agent_doc(agent: AgentEntry, view: ClusterView | None,
              cluster_executor: str = "") -> dict[str, Any]:
    """One agent as `dev status --json` and `dev add-agent --json` print it: {"cluster", "pid",
    "alive", "capabilities", "status", "cpu", "memory_mb", "gpu", "metrics_port", "data_dir",
    "log", "resources": {NAME: COUNT}, "executor", "slurm_partition" ("" unless slurm)}."""
    return {
        "cluster": agent.cluster, "pid": agent.pid,
        "alive": Identity(agent.pid, agent.start_time_ticks).is_running(),
        "capabilities": list(agent.capabilities),
        "status": view.clusters.get(agent.cluster, "") if view is not None else "",
        "cpu": agent.cpu, "memory_mb": agent.memory_mb, "gpu": agent.gpu,
        "metrics_port": agent.metrics_port, "data_dir": agent.data_dir, "log": agent.log,
        "resources": dict(agent.resources), "executor": agent.executor or cluster_executor,
        "slurm_partition": agent.slurm_partition,
    }


def status(directory: Path,
           probe: Probe = probe_cluster) -> tuple[ClusterState, ClusterView | None]:
    """The recorded cluster and what its live replicas say; NOT_FOUND when none is recorded."""
    require_proc()
    state = recorded_state(directory.resolve())
    live = [r.grpc_address for r in state.replicas
            if Identity(r.pid, r.start_time_ticks).is_running()]
    return state, probe(live, state.client_tls) if live else None
