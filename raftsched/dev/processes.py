"""What the dev cluster's verbs share: certificates, the commands of its processes, spawning them,
asking the cluster (`probe_cluster`). (Part of the dev cluster, `raftsched.dev`.)"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import raftsched
from raftsched import procfs
from raftsched.dev.ports import LOOPBACK, port_open
from raftsched.dev.record import (
    ADMIN_TOKEN_FILE_NAME,
    DEFAULT_USER_NAME,
    MAX_USER_NAME_CHARS,
    PROBE_TIMEOUT_S,
    RESERVED_ENV,
    SLURM_EXECUTOR,
    TLS_DIR_NAME,
    AgentShape,
    DevClusterError,
    TlsPaths,
)
from raftsched.dev.supervisor import (
    Child,
)
from raftsched.errors import Code, RaftschedError

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    pass



# --- certificates ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Certificates:
    """What one `up` issues from its throwaway CA."""

    replica: TlsPaths
    agents: dict[str, TlsPaths]
    """Compute cluster id -> its agent's certificate (raftsched-agent:CLUSTER)."""
    user: TlsPaths
    web: TlsPaths
    """The web console's: its client identity (raftsched-user:web-console) and HTTPS."""


def issue_certificates(directory: Path, clusters: Sequence[str], user: str) -> Certificates:
    """A fresh CA in DIR/tls (replacing an earlier run's) and the certificates it signs: the
    replicas' (127.0.0.1 and localhost), one per agent of `clusters`, `user`'s and the web
    console's."""
    from raftsched.dev import pki  # cryptography and grpc: loaded only when a cluster starts

    authority = pki.create_authority(directory / TLS_DIR_NAME)
    token_file = directory / TLS_DIR_NAME / ADMIN_TOKEN_FILE_NAME
    pki.write_admin_token(token_file)
    return Certificates(
        replica=TlsPaths.of(pki.issue_replica(authority, [LOOPBACK])),
        agents={cluster: TlsPaths.of(pki.issue_agent(authority, cluster))
                for cluster in clusters},
        user=TlsPaths.of(pki.issue_user(authority, user), token=str(token_file)),
        web=TlsPaths.of(pki.issue_web(authority, [LOOPBACK])))


def local_user_name() -> str:
    """NAME of the dev user's certificate (raftsched-user:NAME): the login name, keeping only
    ASCII letters, digits and . _ -, at most MAX_USER_NAME_CHARS; DEFAULT_USER_NAME without."""
    try:
        login = getpass.getuser()
    except (OSError, KeyError):  # no $USER/$LOGNAME and a uid without a passwd entry
        login = ""
    name = "".join(c for c in login if c.isascii() and (c.isalnum() or c in "._-"))
    return name[:MAX_USER_NAME_CHARS] or DEFAULT_USER_NAME


# --- processes ---------------------------------------------------------------------------------


def require_proc() -> None:
    if not procfs.available():
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              "raftsched dev needs Linux /proc (to tell a recorded process from "
                              "a later one that reused its pid)")


# --- commands of the processes ----------------------------------------------------------------


def replica_command(raft_address: str, grpc_address: str, peers: Sequence[str], data_dir: Path,
                    secret_file: Path | None, metrics_port: int, *,
                    tls: TlsPaths | None, bootstrap_token: str = "",
                    group: tuple[int, int] = (0, 1), topology: str = "",
                    joining: bool = False) -> list[str]:
    """`python -m raftsched replica ...`; `peers` are the other replicas' Raft addresses. With
    neither a secret nor TLS files: --insecure-dev. `bootstrap_token`: the file of the first
    admin token (every group's replicas get the same: one admin token for the deployment).
    `group`: (which, of how many) scheduler groups; `topology`: every group's gRPC addresses
    ('a:1,b:2;c:3,d:4'), so that any replica can tell a client where every group is;
    `joining`: a group added to the running cluster (`dev add-group`), owning no shard yet."""
    assert (secret_file is None) == (tls is None), "a secret and TLS go together"
    security = (["--insecure-dev"] if secret_file is None or tls is None
                else ["--secret-file", str(secret_file), *tls.flags(),
                      *(["--bootstrap-token-file", bootstrap_token] if bootstrap_token else [])])
    return [sys.executable, "-m", "raftsched", "replica", "--raft", raft_address,
            "--grpc", grpc_address, "--peers", ",".join(peers), "--data-dir", str(data_dir),
            *security, "--metrics-port", str(metrics_port),
            *(["--group", str(group[0]), "--groups", str(group[1])] if group[1] > 1 else []),
            *(["--topology", topology] if topology else []),
            *(["--joining"] if joining else [])]


def topology_text(groups: Sequence[Sequence[str]]) -> str:
    """Every group's gRPC addresses as `replica --topology` and `agent --servers` take them:
    groups separated by ';', in group order."""
    return ";".join(",".join(group) for group in groups)


def agent_command(shape: AgentShape, groups: Sequence[Sequence[str]], data_dir: Path,
                  executor: str, metrics_port: int, *, tls: TlsPaths | None,
                  slurm_partition: str = "") -> list[str]:
    """`python -m raftsched agent ...`, serving every scheduler group of `groups` (each its
    replicas' gRPC addresses); without TLS files: --insecure-dev. A Slurm agent gets
    --slurm-partition instead of sizes (it reads its partition's with sinfo)."""
    assert (executor == SLURM_EXECUTOR) == bool(slurm_partition)
    sizes = (["--slurm-partition", slurm_partition] if slurm_partition else
             ["--cpu", str(shape.cpu), "--memory-mb", str(shape.memory_mb), "--gpu",
              str(shape.gpu)])
    resources = ",".join(f"{name}={count}" for name, count in shape.resources)
    return [sys.executable, "-m", "raftsched", "agent", "--cluster-id", shape.cluster,
            "--servers", topology_text(groups),
            "--capabilities", ",".join(shape.capabilities),
            *sizes, *(["--resources", resources] if resources else []),
            "--data-dir", str(data_dir), "--executor", executor,
            "--metrics-port", str(metrics_port),
            *(tls.flags() if tls is not None else ["--insecure-dev"])]


def web_command(address: str, servers: Sequence[str], tls: TlsPaths,
                watch_token: Path | None = None) -> list[str]:
    """`python -m raftsched web ...`: HTTPS on `address` with its certificate, which is also
    its client identity towards the replicas; `watch_token`: the file of its own token."""
    return [sys.executable, "-m", "raftsched", "web", "--listen", address,
            "--servers", ",".join(servers), *tls.flags(), "--https-cert", tls.cert,
            "--https-key", tls.key,
            *(["--watch-token-file", str(watch_token)] if watch_token else [])]


def child_env() -> dict[str, str]:
    """This environment minus RESERVED_ENV, unbuffered, with this checkout importable."""
    env = {key: value for key, value in os.environ.items() if key not in RESERVED_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    root = str(Path(raftsched.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def spawn_process(name: str, argv: list[str], log_path: Path, cwd: Path,
                  env: Mapping[str, str] | None = None) -> Child:
    """Start `argv` through the supervisor: its own session, output appended to `log_path`,
    with `env` (default `child_env()`)."""
    child = Child(name, argv, log_path, env=child_env() if env is None else env, cwd=cwd)
    child.start(note="raftsched dev")
    return child


class Spawn(Protocol):
    """`spawn_process`, or a stand-in for tests."""

    def __call__(self, name: str, argv: list[str], log_path: Path, cwd: Path,
                 env: Mapping[str, str] | None = None) -> Child: ...


# --- asking the cluster ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What a replica says about one compute cluster beyond its status (`dev add-group`)."""

    incarnation: int = 0
    """Its agent's; a restarted agent registers with a higher one."""
    holds: int = 0
    """Its live attempts, the kills owed there and the attempts queued on its agent: 0 when it
    runs nothing."""
    draining: bool = False
    drain_reason: str = ""


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What one replica (the leader, when it answered) says about the cluster."""

    leader: str
    """The leader's gRPC address; "" when unknown."""
    term: int
    responder: str
    clusters: dict[str, str]
    """Compute cluster id -> status (READY SUSPECT LOST DRAINING)."""
    from_leader: bool
    facts: dict[str, ClusterFacts] = field(default_factory=dict)
    """Compute cluster id -> its facts (`probe_cluster` fills it; stand-ins may not)."""


Probe = Callable[[Sequence[str], "TlsPaths | None"], "ClusterView | None"]


def probe_cluster(servers: Sequence[str], tls: TlsPaths | None) -> ClusterView | None:
    """Ask each replica whose port accepts connections for Admin.ClusterStatus, presenting the
    user certificate `tls` (None: plaintext); the answer of the replica that says it leads
    wins, else the first answer, else None."""
    from raftsched.client.client import Client  # grpc is imported only when a cluster is asked

    best: ClusterView | None = None
    with Client(list(servers), timeout_s=PROBE_TIMEOUT_S, retry_budget_s=0,
                tls_files=tls.files() if tls is not None else None,
                token=tls.read_token() if tls is not None else None) as client:
        for address in servers:
            if not port_open(address):
                continue
            try:
                status = client.cluster_status(server=address)
            except RaftschedError:
                continue
            view = ClusterView(
                leader=status.leader, term=status.term, responder=status.responder,
                clusters={c.cluster_id: c.status for c in status.clusters},
                from_leader=bool(status.leader) and status.leader in (address, status.responder),
                facts={c.cluster_id: ClusterFacts(
                    int(c.incarnation), int(c.live_attempts) + int(c.pending_kills)
                    + int(c.queued), bool(c.draining), str(c.drain_reason))
                    for c in status.clusters},
            )
            if view.from_leader:
                return view
            best = best or view
    return best
