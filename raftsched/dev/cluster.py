"""A local cluster of real processes for development and the demo: `raftsched dev
up|add-agent|status|down`.

`up` starts 3 or 5 replicas (`python -m raftsched replica`) and N agents (`python -m raftsched
agent`) in the background through the process supervisor (`raftsched.dev.supervisor`): each in
its own session, its output appended to DIR/logs/NAME.log, all on ephemeral ports of 127.0.0.1,
with a fresh random cluster secret in DIR/secret (mode 0600, passed as --secret-file) and a fresh
throwaway CA in DIR/tls (`raftsched.dev.pki`) that signs the replicas' certificate (127.0.0.1,
localhost), one per agent (raftsched-agent:CLUSTER) and one for the local user
(raftsched-user:LOGIN), which the state file records so that the CLI finds it. `up --insecure-dev`
makes none of these: every process runs with --insecure-dev (plaintext, no secret). It waits,
up to a named timeout, until a replica says it leads and every agent's cluster is READY; on any
failure it stops what it started and raises a `DevClusterError` carrying the tail of the log
that explains it. `up --slurm` first starts a private single-node Slurm in DIR/slurm
(`raftsched.dev.slurm`: munged, slurmctld, slurmd, each recorded as soon as it is spawned; the
node has cpu-east's size and its capabilities as features) and runs cpu-east's agent with
`--executor slurm --slurm-partition debug` and that Slurm's SLURM_CONF in its environment.

`add_agent` starts one more agent on the running cluster (a cluster of another id, size,
executor or custom resources, for tests, benchmarks and demos): it checks the shape by the
agent's own rules, issues its certificate from the CA in DIR/tls (`pki.load_authority`), spawns
it like `up` does, records it, and waits until its cluster is READY; on failure it stops the
agent and forgets it again. A Slurm agent (`executor="slurm"`) fronts a partition of the
cluster's own private Slurm, else of the Slurm SLURM_CONF names; its sizes and node features are
read from the partition first (`agent.executors.slurm.partition_capacity`), so a Slurm that does not
answer or has no such partition is refused before anything starts. `status` and `down` treat it
like any agent `up` started.

DIR/cluster.json records every process: its identity (pid and start time from /proc, see
`supervisor.Identity`) and addresses. `down` signals a pid only while /proc still shows that same
start time, so it never signals a process that merely reused the pid; it stops exactly those
processes (`supervisor.stop_all`: SIGTERM to the process group, a named wait, then SIGKILL),
removes the state file and nothing else (logs, secret and data stay), and is idempotent. The
private Slurm's daemons go last, once no agent submits any more: its jobs are cancelled through
its controller and their processes waited for, then the daemons stop the same way, slurmd
first (`raftsched.dev.slurm.stop_daemons`). Linux only (/proc).

A run's Raft and agent data go to DIR/data/RUN/NAME with a fresh RUN per `up`: a replica
restarted on an old data dir would remember the previous run's membership and ports.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import raftsched
from raftsched import limits, procfs
from raftsched.dev import slurm as private_slurm
from raftsched.dev.ports import LOOPBACK, pick_free_ports, port_open
from raftsched.dev.supervisor import (
    Child,
    Identity,
    Recorded,
    StopOutcome,
    StopResult,
    log_tail,
    stop_all,
)
from raftsched.errors import Code, RaftschedError

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    from raftsched.tls import TlsFiles

DEV_DIR_ENV = "RAFTSCHED_DEV_DIR"
DEFAULT_DEV_DIR = ".raftsched-dev"
STATE_FILE_NAME = "cluster.json"
SECRET_FILE_NAME = "secret"
LOCK_FILE_NAME = "lock"
LOG_DIR_NAME = "logs"
TLS_DIR_NAME = "tls"
ADMIN_TOKEN_FILE_NAME = "admin.token"
"""In DIR/tls: the bootstrap admin token, which `raftsched dev up` gives the replicas and the
local user (0600)."""
MAX_USER_NAME_CHARS = 32
DEFAULT_USER_NAME = "dev"
DATA_DIR_NAME = "data"
STATE_VERSION = 1
WEB_WATCH_TOKEN_FILE_NAME = "web-watch.token"
"""In DIR/tls: the web console's own operator token (its one shared event stream), made by `up`
through CreateToken once the cluster has a leader."""
WEB_NAME = "web"
"""The web console's name in cluster.json, the logs and `dev status`."""
REPLICA_COUNTS = (3, 5)
DEFAULT_REPLICAS = 3
DEFAULT_AGENTS = 2
MAX_AGENTS = 16
"""Agents `up` starts."""
MAX_RECORDED_AGENTS = 64
"""Agents one dev cluster records: those `up` started and those `add-agent` added."""
MAX_CPU_CORES = limits.MAX_CPU_MILLI // 1000
"""The largest `add-agent --cpu`: the most a cluster may declare (`limits.MAX_CPU_MILLI`)."""
EXECUTORS = ("mock", "subprocess")
"""What `up --executor` runs the agents with (the cluster's executor)."""
DEFAULT_EXECUTOR = "mock"
SLURM_EXECUTOR = "slurm"
TRAVERSE_BITS = 0o011
"""go+x: what `dev up` adds to DIR and the directories on the way to each subprocess agent's
data dir when it runs as root (its tasks run as another account and must pass through)."""
AGENT_EXECUTORS = (*EXECUTORS, SLURM_EXECUTOR)
"""What one agent may run with (`add-agent --executor`; cpu-east's with `up --slurm`)."""
SLURM_DIR_NAME = "slurm"
"""DIR/slurm: the private Slurm of `up --slurm` (its conf, state, spool, logs)."""
UP_TIMEOUT_S = 60.0
"""How long `up` waits for a leader and then for every agent to be READY, and `add-agent` for
its agent's cluster. (How long `down` waits for processes to exit: `supervisor.TERM_TIMEOUT_S`
and `KILL_TIMEOUT_S`.)"""
POLL_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 1.0
"""Deadline of one ClusterStatus call while polling."""
PROGRESS_EVERY_S = 5.0
SECRET_BYTES = 32
RESERVED_ENV = ("RAFTSCHED_SECRET", "RAFTSCHED_SERVERS", DEV_DIR_ENV)
"""Not passed on to the processes: everything they need is on their command line (a Slurm
agent also gets SLURM_CONF in its environment)."""
READY = "READY"

Progress = Callable[[str], None]


class DevClusterError(RaftschedError):
    """A dev cluster operation failed; `log_tail` holds the lines of `log` that explain it."""

    def __init__(self, code: Code, message: str, *, log: str | None = None,
                 log_tail: Sequence[str] = ()) -> None:
        super().__init__(code, message)
        self.log = log
        self.log_tail = tuple(log_tail)


# --- the shape of a dev cluster ----------------------------------------------------------------


Resources = tuple[tuple[str, int], ...]
"""Named custom resources an agent offers (`--resources NAME=COUNT,...`), sorted by name."""


@dataclass(frozen=True, slots=True)
class AgentShape:
    cluster: str
    capabilities: tuple[str, ...]
    cpu: int
    memory_mb: int
    gpu: int
    resources: Resources = ()


FIRST_AGENTS = (
    AgentShape("cpu-east", ("linux",), cpu=4, memory_mb=8192, gpu=0),
    AgentShape("gpu-west", ("linux", "gpu"), cpu=4, memory_mb=16384, gpu=2),
)


SLURM_AGENT = FIRST_AGENTS[0]
"""The agent `up --slurm` puts in front of the private Slurm, whose node has its size and its
capabilities as features."""


def agent_shapes(count: int) -> list[AgentShape]:
    """cpu-east, gpu-west, then agent-3, agent-4, ... (plain linux clusters)."""
    assert 0 <= count <= MAX_AGENTS
    return [FIRST_AGENTS[index] if index < len(FIRST_AGENTS)
            else AgentShape(f"agent-{index + 1}", ("linux",), cpu=4, memory_mb=8192, gpu=0)
            for index in range(count)]


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    id: str
    pid: int
    start_time_ticks: int
    grpc_address: str
    raft_address: str
    metrics_port: int
    data_dir: str
    log: str


@dataclass(frozen=True, slots=True)
class AgentEntry:
    cluster: str
    pid: int
    start_time_ticks: int
    capabilities: tuple[str, ...]
    cpu: int
    memory_mb: int
    gpu: int
    metrics_port: int
    data_dir: str
    log: str
    resources: Resources = ()
    """In the state file: {NAME: COUNT}."""
    executor: str = ""
    """mock, subprocess or slurm; "": the cluster's (a state file written before agents
    recorded theirs)."""
    slurm_partition: str = ""
    """With the slurm executor: the partition the agent fronts."""


@dataclass(frozen=True, slots=True)
class DaemonEntry:
    """One daemon of the private Slurm."""

    name: str
    pid: int
    start_time_ticks: int
    log: str


@dataclass(frozen=True, slots=True)
class WebEntry:
    """The web console `up` started (`raftsched web`, HTTPS on 127.0.0.1)."""

    pid: int
    start_time_ticks: int
    url: str
    log: str


@dataclass(slots=True)
class SlurmEntry:
    """The private Slurm `up --slurm` started in DIR/slurm."""

    dir: str
    conf: str
    """Its slurm.conf: the SLURM_CONF of its client commands and of its agents."""
    partition: str
    jobcomp: str
    """Its job completion log (jobcomp/filetxt): one line per finished job."""
    socket_dir: str = ""
    """A temporary directory holding munge's socket when DIR is too deep ("": none); `down`
    removes it."""
    daemons: list[DaemonEntry] = field(default_factory=list)

    def processes(self) -> dict[str, Recorded]:
        return {d.name: Recorded(d.name, Identity(d.pid, d.start_time_ticks))
                for d in self.daemons}

    def client_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with SLURM_CONF naming this Slurm (and no other Slurm's settings)."""
        return private_slurm.client_env(Path(self.conf), base)


@dataclass(frozen=True, slots=True)
class TlsPaths:
    """One identity's PEM files, as the state file records them."""

    ca: str
    cert: str
    key: str
    token: str = ""
    """A file holding the API token this identity sends (the user's: the bootstrap admin
    token); "" for none (replicas, agents)."""

    @classmethod
    def of(cls, files: TlsFiles, token: str = "") -> TlsPaths:
        return cls(str(files.ca), str(files.cert), str(files.key), token)

    def read_token(self) -> str | None:
        """The token in `token`'s file; None without one (or when it cannot be read)."""
        if not self.token:
            return None
        try:
            return Path(self.token).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def files(self) -> TlsFiles:
        from raftsched.tls import TlsFiles

        return TlsFiles(Path(self.ca), Path(self.cert), Path(self.key))

    def flags(self) -> list[str]:
        """The --tls-* options of `raftsched replica` and `raftsched agent`."""
        return ["--tls-ca", self.ca, "--tls-cert", self.cert, "--tls-key", self.key]


@dataclass(slots=True)
class ClusterState:
    """The contents of DIR/cluster.json."""

    dir: str
    executor: str
    secret_file: str
    """Empty with `insecure`."""
    created_ms: int
    replicas: list[ReplicaEntry] = field(default_factory=list)
    agents: list[AgentEntry] = field(default_factory=list)
    insecure: bool = False
    """Every process runs with --insecure-dev: plaintext gRPC, no Raft secret."""
    user_tls: TlsPaths | None = None
    """The local user's certificate (raftsched-user:LOGIN) and the cluster's CA; None with
    `insecure`."""
    slurm: SlurmEntry | None = None
    """The private Slurm of `up --slurm`; None without."""
    web: WebEntry | None = None
    """The web console; None with `insecure` (it serves HTTPS with a certificate of the CA)."""

    @property
    def servers(self) -> list[str]:
        return [replica.grpc_address for replica in self.replicas]

    @property
    def client_tls(self) -> TlsPaths | None:
        """What a client of this cluster presents; None: plaintext."""
        return None if self.insecure else self.user_tls

    def processes(self) -> list[Recorded]:
        """The replicas, agents and web console (the private Slurm's daemons: `slurm_daemons`)."""
        return ([Recorded(r.id, Identity(r.pid, r.start_time_ticks)) for r in self.replicas]
                + [Recorded(a.cluster, Identity(a.pid, a.start_time_ticks))
                   for a in self.agents]
                + ([Recorded(WEB_NAME, Identity(self.web.pid, self.web.start_time_ticks))]
                   if self.web is not None else []))

    def slurm_daemons(self) -> list[Recorded]:
        return list(self.slurm.processes().values()) if self.slurm is not None else []

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        for agent, entry in zip(doc["agents"], self.agents, strict=True):
            agent["resources"] = dict(entry.resources)
        doc["version"] = STATE_VERSION
        return doc

    @classmethod
    def from_doc(cls, doc: object) -> ClusterState:
        """Raises ValueError naming what is wrong."""
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {STATE_VERSION}")
        directory, executor, secret_file = (_string(doc, name)
                                            for name in ("dir", "executor", "secret_file"))
        replicas = [ReplicaEntry(**_entry(ReplicaEntry, item)) for item in _list(doc, "replicas")]
        agents = [_agent_entry(item) for item in _list(doc, "agents")]
        created_ms = doc.get("created_ms")
        if not isinstance(created_ms, int):
            raise ValueError("created_ms must be an integer")
        # A state file written before TLS has neither key: its processes serve plaintext.
        insecure = doc.get("insecure", "user_tls" not in doc)
        if not isinstance(insecure, bool):
            raise ValueError("insecure must be true or false")
        web = doc.get("web")
        return cls(directory, executor, secret_file, created_ms, replicas, agents, insecure,
                   _tls_paths(doc.get("user_tls")), _slurm_entry(doc.get("slurm")),
                   WebEntry(**_entry(WebEntry, web)) if web is not None else None)


def _agent_entry(item: object) -> AgentEntry:
    values = _entry(AgentEntry, item)
    values["capabilities"] = tuple(values["capabilities"])
    resources = values.get("resources", {})
    if not isinstance(resources, dict) or not all(
            isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool)
            for name, count in resources.items()):
        raise ValueError("an agent's resources must be {NAME: COUNT}")
    values["resources"] = tuple(sorted(resources.items()))
    return AgentEntry(**values)


def _slurm_entry(item: object) -> SlurmEntry | None:
    if item is None:
        return None
    values = _entry(SlurmEntry, item)
    if not all(isinstance(values.get(name, ""), str)
               for name in ("dir", "conf", "partition", "jobcomp", "socket_dir")):
        raise ValueError("slurm's dir, conf, partition, jobcomp and socket_dir must be strings")
    daemons = values.get("daemons", [])
    if not isinstance(daemons, list):
        raise ValueError("slurm's daemons must be a list")
    values["daemons"] = [DaemonEntry(**_entry(DaemonEntry, daemon)) for daemon in daemons]
    return SlurmEntry(**values)


def _tls_paths(item: object) -> TlsPaths | None:
    if item is None:
        return None
    if not isinstance(item, dict) or not all(isinstance(item.get(name), str)
                                             for name in ("ca", "cert", "key")):
        raise ValueError("user_tls must be null or {\"ca\", \"cert\", \"key\"} file names")
    token = item.get("token", "")
    if not isinstance(token, str):
        raise ValueError("user_tls.token must be a file name")
    return TlsPaths(item["ca"], item["cert"], item["key"], token)


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list")
    return value


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _entry(kind: type[ReplicaEntry] | type[AgentEntry] | type[DaemonEntry] | type[SlurmEntry]
           | type[WebEntry], item: object) -> dict[str, Any]:
    """The fields of one recorded entry (those with a default may be missing: written before
    they were); a process's identity (pid, start time) must be integers."""
    names = [f.name for f in fields(kind)]
    required = [f.name for f in fields(kind)
                if f.default is MISSING and f.default_factory is MISSING]
    if not isinstance(item, dict) or set(required) - set(item):
        raise ValueError(f"a {kind.__name__} needs the fields {', '.join(required)}")
    if "pid" in names:
        Identity.from_doc(item)
    return {name: item[name] for name in names if name in item}


# --- state file, secret, lock ------------------------------------------------------------------


def default_dir() -> Path:
    """$RAFTSCHED_DEV_DIR, else ./.raftsched-dev."""
    return Path(os.environ.get(DEV_DIR_ENV) or DEFAULT_DEV_DIR)


def state_path(directory: Path) -> Path:
    return directory / STATE_FILE_NAME


def load_state(directory: Path) -> ClusterState | None:
    """The recorded cluster, or None when DIR/cluster.json does not exist."""
    path = state_path(directory)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return ClusterState.from_doc(json.loads(text))
    except ValueError as error:
        raise DevClusterError(
            Code.FAILED_PRECONDITION,
            f"{path} is not a raftsched dev cluster state file ({error}); move it away",
        ) from None


def save_state(state: ClusterState) -> None:
    """Write DIR/cluster.json atomically (temporary file, then rename)."""
    path = state_path(Path(state.dir))
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(state.to_doc(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def servers_from_state(directory: Path) -> list[str] | None:
    state = load_state(directory)
    return state.servers if state is not None and state.replicas else None


def write_secret(directory: Path) -> Path:
    """A fresh random cluster secret in DIR/secret, readable by its owner only (0600)."""
    path = directory / SECRET_FILE_NAME
    temporary = directory / f"{SECRET_FILE_NAME}.tmp"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(secrets.token_urlsafe(SECRET_BYTES))
    os.replace(temporary, path)
    return path


@contextlib.contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Only one `up`, `add-agent` or `down` at a time in one directory."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_FILE_NAME, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DevClusterError(Code.FAILED_PRECONDITION,
                                  f"another 'raftsched dev' command is working in {directory}"
                                  ) from None
        yield


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
                    tls: TlsPaths | None, bootstrap_token: str = "") -> list[str]:
    """`python -m raftsched replica ...`; `peers` are the other replicas' Raft addresses. With
    neither a secret nor TLS files: --insecure-dev. `bootstrap_token`: the file of the first
    admin token."""
    assert (secret_file is None) == (tls is None), "a secret and TLS go together"
    security = (["--insecure-dev"] if secret_file is None or tls is None
                else ["--secret-file", str(secret_file), *tls.flags(),
                      *(["--bootstrap-token-file", bootstrap_token] if bootstrap_token else [])])
    return [sys.executable, "-m", "raftsched", "replica", "--raft", raft_address,
            "--grpc", grpc_address, "--peers", ",".join(peers), "--data-dir", str(data_dir),
            *security, "--metrics-port", str(metrics_port)]


def agent_command(shape: AgentShape, servers: Sequence[str], data_dir: Path, executor: str,
                  metrics_port: int, *, tls: TlsPaths | None,
                  slurm_partition: str = "") -> list[str]:
    """`python -m raftsched agent ...`; without TLS files: --insecure-dev. A Slurm agent gets
    --slurm-partition instead of sizes (it reads its partition's with sinfo)."""
    assert (executor == SLURM_EXECUTOR) == bool(slurm_partition)
    sizes = (["--slurm-partition", slurm_partition] if slurm_partition else
             ["--cpu", str(shape.cpu), "--memory-mb", str(shape.memory_mb), "--gpu",
              str(shape.gpu)])
    resources = ",".join(f"{name}={count}" for name, count in shape.resources)
    return [sys.executable, "-m", "raftsched", "agent", "--cluster-id", shape.cluster,
            "--servers", ",".join(servers), "--capabilities", ",".join(shape.capabilities),
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
class ClusterView:
    """What one replica (the leader, when it answered) says about the cluster."""

    leader: str
    """The leader's gRPC address; "" when unknown."""
    term: int
    responder: str
    clusters: dict[str, str]
    """Compute cluster id -> status (READY SUSPECT LOST DRAINING)."""
    from_leader: bool


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
            )
            if view.from_leader:
                return view
            best = best or view
    return best


# --- up ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UpOptions:
    dir: Path
    replicas: int = DEFAULT_REPLICAS
    agents: int = DEFAULT_AGENTS
    executor: str = DEFAULT_EXECUTOR
    timeout_s: float = UP_TIMEOUT_S
    insecure: bool = False
    """--insecure-dev: no CA, no secret, plaintext everywhere."""
    slurm: bool = False
    """--slurm: also a private Slurm in DIR/slurm, with cpu-east's agent in front of it."""


def create_web_watch_token(servers: Sequence[str], user: TlsPaths, budget_s: float) -> str:
    """An operator token for the web console's shared event stream, made with the bootstrap
    admin token (the cluster has a leader by now; the client retries within `budget_s`)."""
    from raftsched.client.client import Client

    with Client(list(servers), tls_files=user.files(), token=user.read_token(),
                retry_budget_s=budget_s) as client:
        return str(client.create_token("*", "operator",
                                       "web console (dev): its event stream").token)


WebToken = Callable[[Sequence[str], TlsPaths, float], str]


def up(options: UpOptions, *, progress: Progress, spawn: Spawn = spawn_process,
       probe: Probe = probe_cluster, clock: Callable[[], float] = time.monotonic,
       sleep: Callable[[float], None] = time.sleep,
       web_ready: Callable[[str], bool] = port_open,
       web_token: WebToken = create_web_watch_token) -> tuple[ClusterState, ClusterView]:
    """Start a dev cluster in `options.dir` and wait until it has a leader and every agent is
    READY, then start the web console (not with --insecure-dev) and wait until `web_ready`
    (its address). With `options.slurm`, first a private Slurm in DIR/slurm (its daemons
    recorded like the other processes), and cpu-east's agent runs in front of its partition.
    On failure (or Ctrl-C) stop what was started and re-raise."""
    assert options.replicas in REPLICA_COUNTS and 0 <= options.agents <= MAX_AGENTS
    assert options.executor in EXECUTORS
    require_proc()
    if options.slurm and (reason := private_slurm.slurm_available()) is not None:
        raise DevClusterError(Code.FAILED_PRECONDITION, f"--slurm: {reason}")
    directory = options.dir.resolve()
    with exclusive(directory):
        _refuse_if_running(directory, progress)
        (directory / LOG_DIR_NAME).mkdir(exist_ok=True)
        created_ms = int(time.time() * 1000)
        certificates: Certificates | None = None
        if options.insecure:
            state = ClusterState(str(directory), options.executor, "", created_ms, insecure=True)
        else:
            certificates = issue_certificates(
                directory, [shape.cluster for shape in agent_shapes(options.agents)],
                local_user_name())
            state = ClusterState(str(directory), options.executor, str(write_secret(directory)),
                                 created_ms, user_tls=certificates.user)
        starter = _Starter(state, options, certificates, spawn, probe, progress, clock, sleep)
        starter.web_ready = web_ready
        starter.web_token = web_token
        try:
            return state, starter.run()
        except BaseException:
            starter.abort()
            raise


def _refuse_if_running(directory: Path, progress: Progress) -> None:
    previous = load_state(directory)
    if previous is None:
        return
    alive = [process for process in previous.processes() + previous.slurm_daemons()
             if process.alive()]
    if alive:
        names = ", ".join(f"{process.name} (pid {process.pid})" for process in alive)
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"a dev cluster is already running in {directory}: {names}; "
                              f"stop it first with: raftsched dev down --dir {directory}")
    progress(f"forgetting the earlier dev cluster recorded in {directory} (none of its "
             f"processes is running)")
    if previous.slurm is not None and previous.slurm.socket_dir:
        shutil.rmtree(previous.slurm.socket_dir, ignore_errors=True)
    state_path(directory).unlink()


class _Launch:
    """Processes one dev command starts and then waits for: spawns them, asks the cluster until
    a condition holds, a process exits or `timeout_s` passes, and stops them on failure."""

    activity = "the cluster was starting"
    """What a process that exits early interrupted (for the error)."""

    def __init__(self, state: ClusterState, timeout_s: float, spawn: Spawn, probe: Probe,
                 progress: Progress, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.state, self.timeout_s = state, timeout_s
        self.spawn, self.probe, self.progress = spawn, probe, progress
        self.clock, self.sleep = clock, sleep
        self.started_s = clock()
        self.deadline_s = self.started_s + timeout_s
        self.children: dict[str, Child] = {}
        self.logs: dict[str, str] = {}

    def _let_tasks_through(self, data_dir: Path, executor: str) -> None:
        """A subprocess agent running as root runs tasks as an unprivileged account, which
        must pass through every directory above its data dir to reach its work and checkpoint
        dirs (the agent refuses to start otherwise): DIR (0700 when made by `mktemp -d`) and
        the directories below it on the way get o+x (g+x too), and the progress says so.
        Nothing in them becomes listable; DIR/logs is made the owner's alone."""
        if executor != "subprocess" or os.geteuid() != 0:
            return
        directory = Path(self.state.dir)
        opened = [str(path) for path in traversable(directory, data_dir.parent)]
        (directory / LOG_DIR_NAME).chmod(0o700)  # what passing through DIR must not expose
        if opened:
            self.progress(f"let task accounts pass through {', '.join(opened)} (chmod go+x): "
                          "tasks reach their work and checkpoint dirs by absolute path")

    def _spawn(self, name: str, argv: list[str], log: Path,
               env: Mapping[str, str] | None = None) -> Identity:
        child = self.spawn(name, argv, log, Path(self.state.dir), env)
        self.children[name] = child
        self.logs[name] = str(log)
        assert child.identity is not None
        return child.identity

    def _wait(self, what: str, done: Callable[[ClusterView | None], bool],
              suspect: Callable[[ClusterView | None], str],
              detail: Callable[[ClusterView | None], str] = lambda v: "") -> ClusterView:
        self.progress(f"waiting for {what} (up to {self.timeout_s:g} s)")
        last_report_s = self.clock()
        while True:
            self._check_children()
            view = self.probe(self.state.servers, self.state.client_tls)
            if done(view):
                assert view is not None
                return view
            now_s = self.clock()
            if now_s >= self.deadline_s:
                self._timed_out(what, detail(view), suspect(view))
            if now_s - last_report_s >= PROGRESS_EVERY_S:
                last_report_s = now_s
                extra = detail(view)
                self.progress(f"still waiting for {what}: {self._elapsed_s():.0f} s of "
                              f"{self.timeout_s:g} s" + (f" ({extra})" if extra else ""))
            self.sleep(POLL_INTERVAL_S)

    def _check_children(self) -> None:
        for name, child in self.children.items():
            status = child.poll()
            if status is not None:
                raise DevClusterError(
                    Code.FAILED_PRECONDITION,
                    f"{name} (pid {child.pid}) exited with status {status} while "
                    f"{self.activity}; see {self.logs[name]}",
                    log=self.logs[name], log_tail=log_tail(self.logs[name]))

    def _timed_out(self, what: str, detail: str, suspect: str) -> None:
        """Raise UNAVAILABLE with the log of `suspect`, the process most likely to say why."""
        log = self.logs.get(suspect)
        raise DevClusterError(
            Code.UNAVAILABLE,
            f"not {what} after {self.timeout_s:g} s "
            f"(UP_TIMEOUT_S; give more with --timeout)" + (f": {detail}" if detail else "")
            + f"; logs are in {self.state.dir}/{LOG_DIR_NAME}",
            log=log, log_tail=log_tail(log) if log else ())

    def _elapsed_s(self) -> float:
        return self.clock() - self.started_s

    def _stop_children(self) -> list[StopResult]:
        children = list(self.children.values())
        if not children:
            return []
        self.progress(f"stopping the {len(children)} process(es) started")
        return stop_all(children)


class _Starter(_Launch):
    """One `up`: spawns, records, waits; `abort` undoes it."""

    def __init__(self, state: ClusterState, options: UpOptions,
                 certificates: Certificates | None, spawn: Spawn, probe: Probe,
                 progress: Progress, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        super().__init__(state, options.timeout_s, spawn, probe, progress, clock, sleep)
        self.options, self.certificates = options, certificates
        run = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"
        self.run_dir = Path(state.dir) / DATA_DIR_NAME / run
        self.slurm: private_slurm.LocalSlurm | None = None
        self.web_ready: Callable[[str], bool] = port_open
        self.web_token: WebToken = create_web_watch_token

    def run(self) -> ClusterView:
        if self.options.slurm:
            self._start_slurm()
        count = self.options.replicas
        ports = pick_free_ports(3 * count + self.options.agents + 1)  # the last: the web's
        rafts = [f"{LOOPBACK}:{port}" for port in ports[:count]]
        grpcs = [f"{LOOPBACK}:{port}" for port in ports[count:2 * count]]
        self.progress(f"starting {count} replicas (logs in {self.state.dir}/{LOG_DIR_NAME})")
        for index in range(count):
            self._start_replica(index, rafts, grpcs[index], ports[2 * count + index])
        view = self._wait("a leader", lambda v: v is not None and v.from_leader,
                          suspect=lambda v: "replica-1")
        self.progress(f"{view.leader} leads (term {view.term}) after {self._elapsed_s():.1f} s")
        view = self._start_agents(view, ports[3 * count:-1])
        self._start_web(ports[-1])
        self._wait_web()
        return view

    def _start_agents(self, view: ClusterView, metrics_ports: list[int]) -> ClusterView:
        shapes = agent_shapes(self.options.agents)
        if not shapes:
            return view
        in_slurm = (f"; {SLURM_AGENT.cluster}: Slurm partition {self.slurm.partition}"
                    if self.slurm is not None else "")
        self.progress(f"starting {len(shapes)} agents ({self.options.executor} executor"
                      f"{in_slurm}): " + ", ".join(shape.cluster for shape in shapes))
        for index, shape in enumerate(shapes):
            self._start_agent(shape, metrics_ports[index])
        names = [shape.cluster for shape in shapes]
        view = self._wait("every agent to be READY", lambda v: _all_ready(v, names),
                          suspect=lambda v: _first_not_ready(v, names),
                          detail=lambda v: _readiness(v, names))
        self.progress(f"ready after {self._elapsed_s():.1f} s")
        return view

    def _start_replica(self, index: int, rafts: list[str], grpc: str, metrics_port: int) -> None:
        name = f"replica-{index + 1}"
        data_dir, log = self._prepare(name)
        peers = [raft for other, raft in enumerate(rafts) if other != index]
        secure = self.certificates is not None
        argv = replica_command(rafts[index], grpc, peers, data_dir,
                               Path(self.state.secret_file) if secure else None, metrics_port,
                               tls=self.certificates.replica if self.certificates else None,
                               bootstrap_token=self.certificates.user.token
                               if self.certificates else "")
        pid, start = self._spawn(name, argv, log)
        self.state.replicas.append(ReplicaEntry(name, pid, start, grpc, rafts[index],
                                                metrics_port, str(data_dir), str(log)))
        save_state(self.state)

    def _start_web(self, port: int) -> None:
        """The web console on `port` of 127.0.0.1, recorded at once (`down` stops it)."""
        if self.certificates is None:
            return
        address = f"{LOOPBACK}:{port}"
        log = Path(self.state.dir) / LOG_DIR_NAME / f"{WEB_NAME}.log"
        watch = Path(self.state.dir) / TLS_DIR_NAME / WEB_WATCH_TOKEN_FILE_NAME
        self._write_watch_token(watch)
        pid, start = self._spawn(WEB_NAME, web_command(address, self.state.servers,
                                                       self.certificates.web, watch), log)
        self.state.web = WebEntry(pid, start, f"https://{address}/", str(log))
        save_state(self.state)

    def _write_watch_token(self, path: Path) -> None:
        """The console's own operator token, in `path` (0600)."""
        from raftsched.dev import pki

        assert self.certificates is not None
        token = self.web_token(self.state.servers, self.certificates.user,
                               max(1.0, self.deadline_s - self.clock()))
        pki.write_token(path, token)

    def _wait_web(self) -> None:
        web = self.state.web
        if web is None:
            return
        address = web.url.removeprefix("https://").rstrip("/")
        while not self.web_ready(address):
            self._check_children()
            if self.clock() >= self.deadline_s:
                self._timed_out(f"the web console listening on {address}", "", WEB_NAME)
            self.sleep(POLL_INTERVAL_S)
        self.progress(f"web console: {web.url}")

    def _start_slurm(self) -> None:
        """The private Slurm in DIR/slurm: one node of cpu-east's size whose features are its
        capabilities, each daemon recorded as soon as it is spawned."""
        remaining_s = max(self.deadline_s - self.clock(), POLL_INTERVAL_S)
        self.slurm = private_slurm.LocalSlurm(
            Path(self.state.dir) / SLURM_DIR_NAME, start_timeout_s=remaining_s,
            cpus=SLURM_AGENT.cpu, memory_mb=SLURM_AGENT.memory_mb,
            features=SLURM_AGENT.capabilities, spawn=self._spawn_daemon)
        self.progress(f"starting a private Slurm in {self.slurm.directory} (munged, slurmctld, "
                      f"slurmd; partition {self.slurm.partition}: one node of "
                      f"{SLURM_AGENT.cpu} cpus, {SLURM_AGENT.memory_mb} MB, features "
                      f"{','.join(SLURM_AGENT.capabilities)})")
        try:
            self.slurm.start()
        except private_slurm.SlurmError as error:
            log = str(error.log) if error.log is not None else None
            raise DevClusterError(Code.FAILED_PRECONDITION,
                                  f"the private Slurm did not start: {error.message}; its logs "
                                  f"are in {self.slurm.log_dir}",
                                  log=log, log_tail=log_tail(log) if log else ()) from None
        self.progress(f"Slurm node {self.slurm.node} idle after {self.slurm.startup_s or 0:.1f} "
                      f"s (SLURM_CONF={self.slurm.conf})")

    def _spawn_daemon(self, name: str, argv: list[str], log: Path, env: dict[str, str],
                      cwd: Path) -> Child:
        """Start one daemon of the private Slurm and record it at once (so that `down` stops
        it even if this `up` dies)."""
        slurm = self.slurm
        assert slurm is not None
        env = {key: value for key, value in env.items() if key not in RESERVED_ENV}
        child = self.spawn(name, argv, log, cwd, env)
        assert child.identity is not None
        if self.state.slurm is None:
            self.state.slurm = SlurmEntry(str(slurm.directory), str(slurm.conf),
                                          slurm.partition, str(slurm.jobcomp),
                                          str(slurm.socket_dir or ""))
        self.state.slurm.daemons.append(DaemonEntry(name, *child.identity,
                                                    str(slurm.log_dir / f"{name}.log")))
        save_state(self.state)
        return child

    def _start_agent(self, shape: AgentShape, metrics_port: int) -> None:
        data_dir, log = self._prepare(shape.cluster)
        executor, partition, env = self.options.executor, "", None
        if self.state.slurm is not None and shape.cluster == SLURM_AGENT.cluster:
            executor, partition = SLURM_EXECUTOR, self.state.slurm.partition
            env = self.state.slurm.client_env(child_env())
        self._let_tasks_through(data_dir, executor)
        argv = agent_command(shape, self.state.servers, data_dir, executor, metrics_port,
                             tls=self.certificates.agents[shape.cluster]
                             if self.certificates else None, slurm_partition=partition)
        pid, start = self._spawn(shape.cluster, argv, log, env)
        self.state.agents.append(AgentEntry(shape.cluster, pid, start, shape.capabilities,
                                            shape.cpu, shape.memory_mb, shape.gpu, metrics_port,
                                            str(data_dir), str(log), shape.resources, executor,
                                            partition))
        save_state(self.state)

    def _prepare(self, name: str) -> tuple[Path, Path]:
        data_dir = self.run_dir / name
        data_dir.mkdir(parents=True)
        return data_dir, Path(self.state.dir) / LOG_DIR_NAME / f"{name}.log"

    def abort(self) -> None:
        """Stop the agents and replicas, then the private Slurm; forget them unless one
        survived SIGKILL (then `down` retries)."""
        results = self._stop_children()
        if self.slurm is not None:
            stopped = self.slurm.stop()
            results += stopped.results
            _report_job_processes(stopped.job_processes, self.progress)
        if not results or any(r.outcome is StopOutcome.SURVIVED for r in results):
            return
        with contextlib.suppress(FileNotFoundError):
            state_path(Path(self.state.dir)).unlink()


def traversable(top: Path, bottom: Path) -> list[Path]:
    """Adds go+x to `top` and every directory below it down to `bottom` that lacks it; the
    directories changed."""
    chain = [bottom, *bottom.parents]
    changed = []
    for directory in reversed(chain[:chain.index(top) + 1]):
        mode = directory.stat().st_mode & 0o7777
        if mode & TRAVERSE_BITS != TRAVERSE_BITS:
            directory.chmod(mode | TRAVERSE_BITS)
            changed.append(directory)
    return changed


def _report_job_processes(pids: Sequence[int], progress: Progress) -> None:
    if pids:
        progress(f"warning: Slurm job processes {', '.join(map(str, pids))} outlived the "
                 f"private Slurm's daemons (left alone: only recorded processes are signalled)")


def _all_ready(view: ClusterView | None, names: Sequence[str]) -> bool:
    return (view is not None and view.from_leader
            and all(view.clusters.get(name) == READY for name in names))


def _first_not_ready(view: ClusterView | None, names: Sequence[str]) -> str:
    clusters = view.clusters if view is not None else {}
    return next((name for name in names if clusters.get(name) != READY), names[0])


def _readiness(view: ClusterView | None, names: Sequence[str]) -> str:
    if view is None:
        return "no replica answers"
    return ", ".join(f"{name} {view.clusters.get(name, 'not registered')}" for name in names)


# --- add-agent ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddAgentOptions:
    dir: Path
    cluster: str
    capabilities: tuple[str, ...] = ()
    cpu: int | None = None
    """Cores; None: this machine's, as `raftsched agent` defaults (a Slurm agent: its
    partition's)."""
    memory_mb: int | None = None
    """None: this machine's memory, as `raftsched agent` defaults."""
    gpu: int | None = None
    """None: 0."""
    executor: str | None = None
    """None: the executor the cluster was started with."""
    timeout_s: float = UP_TIMEOUT_S
    resources: Resources = ()
    """Named custom resources (`parse_resources`)."""
    slurm_partition: str = ""
    """With executor "slurm": the partition the agent fronts."""


def requested_shape(options: AddAgentOptions) -> AgentShape:
    """The agent `options` asks for, with the agent's defaults (this machine's cores and memory,
    no GPU, no capabilities, no custom resources) and its rules for ids and sizes;
    INVALID_ARGUMENT naming the option otherwise. A Slurm agent's sizes are 0 here: its
    partition's replace them (`add_agent`)."""
    from raftsched.spec.job import id_problem  # the one id rule, the agent's --cluster-id's too

    problem = id_problem(options.cluster)
    if problem is not None:
        raise DevClusterError(Code.INVALID_ARGUMENT, f"--cluster-id {problem}")
    capabilities = tuple(dict.fromkeys(options.capabilities))
    if len(capabilities) > limits.MAX_CAPABILITIES_PER_CLUSTER:
        raise DevClusterError(Code.INVALID_ARGUMENT, f"--capabilities: at most "
                                                     f"{limits.MAX_CAPABILITIES_PER_CLUSTER}")
    for capability in capabilities:
        problem = id_problem(capability)
        if problem is not None:
            raise DevClusterError(Code.INVALID_ARGUMENT, f"--capabilities: each {problem}")
    check_resources(options.resources)
    if _check_executor(options):
        return AgentShape(options.cluster, capabilities, 0, 0, 0, options.resources)
    cpu = options.cpu if options.cpu is not None else os.cpu_count() or 1
    memory_mb = options.memory_mb if options.memory_mb is not None else machine_memory_mb()
    gpu = options.gpu or 0
    for option, value, most in (("--cpu", cpu, MAX_CPU_CORES),
                                ("--memory-mb", memory_mb, limits.MAX_MEMORY_MB),
                                ("--gpu", gpu, limits.MAX_GPU)):
        if not 0 <= value <= most:
            raise DevClusterError(Code.INVALID_ARGUMENT,
                                  f"{option} {value}: between 0 and {most}")
    return AgentShape(options.cluster, capabilities, cpu, memory_mb, gpu, options.resources)


def _check_executor(options: AddAgentOptions) -> bool:
    """Whether `options` ask for a Slurm agent, which needs --slurm-partition and takes no
    sizes (the agent reads its partition's); INVALID_ARGUMENT otherwise."""
    assert options.executor is None or options.executor in AGENT_EXECUTORS
    if options.executor != SLURM_EXECUTOR:
        if options.slurm_partition:
            raise DevClusterError(Code.INVALID_ARGUMENT, "--slurm-partition goes with "
                                                         "--executor slurm")
        return False
    if not options.slurm_partition:
        raise DevClusterError(Code.INVALID_ARGUMENT,
                              "--executor slurm needs --slurm-partition NAME (the private Slurm "
                              f"of 'raftsched dev up --slurm' has partition "
                              f"{private_slurm.PARTITION!r})")
    sizes = [option for option, value in (("--cpu", options.cpu),
                                          ("--memory-mb", options.memory_mb),
                                          ("--gpu", options.gpu)) if value is not None]
    if sizes:
        raise DevClusterError(Code.INVALID_ARGUMENT,
                              f"{', '.join(sizes)}: not with --executor slurm (a Slurm "
                              f"agent's capacity is its partition's, read with sinfo)")
    return True


def parse_resources(text: str) -> Resources:
    """`fpga=2,license=10` as sorted (name, count) pairs, by the agent's `--resources` rules;
    INVALID_ARGUMENT naming the entry that is wrong."""
    from agent.main import parse_custom_resources

    try:
        return parse_custom_resources(text)
    except ValueError as error:
        raise DevClusterError(Code.INVALID_ARGUMENT, str(error)) from None


def check_resources(resources: Resources) -> None:
    """The agent's rules for custom resources (`agent.main.custom_resources_problem`);
    INVALID_ARGUMENT naming what is wrong."""
    from agent.main import custom_resources_problem

    problem = custom_resources_problem(resources)
    if problem is not None:
        raise DevClusterError(Code.INVALID_ARGUMENT, problem)


def machine_memory_mb() -> int:
    """This machine's memory in MiB (0 when unknown), the agent's default --memory-mb."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 0


def add_agent(options: AddAgentOptions, *, progress: Progress, spawn: Spawn = spawn_process,
              probe: Probe = probe_cluster, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep
              ) -> tuple[ClusterState, AgentEntry, ClusterView]:
    """Start one more agent on the dev cluster running in `options.dir`, record it and wait
    until its cluster is READY. Refuses (before starting anything) a bad shape, a cluster id
    already recorded, and a directory without a running cluster. On failure (or Ctrl-C) stop
    the agent, forget it and re-raise."""
    require_proc()
    shape = requested_shape(options)
    directory = options.dir.resolve()
    recorded_state(directory)  # before `exclusive`, which would create the directory
    with exclusive(directory):
        state = recorded_state(directory)
        _refuse_to_add(state, shape.cluster)
        executor = options.executor or state.executor
        env = None
        if executor == SLURM_EXECUTOR:
            env = _slurm_env(state)
            shape = _slurm_shape(shape, options.slurm_partition, env, state.slurm is not None)
        tls = None if state.insecure else _issue_agent_certificate(directory, shape.cluster)
        adder = _Adder(state, options.timeout_s, spawn, probe, progress, clock, sleep)
        try:
            entry = adder.start(shape, executor, tls, env, options.slurm_partition)
            return state, entry, adder.wait_ready(shape.cluster)
        except BaseException:
            adder.abort()
            raise


def recorded_state(directory: Path) -> ClusterState:
    """The cluster recorded in `directory`; NOT_FOUND when none is."""
    state = load_state(directory)
    if state is None:
        raise DevClusterError(Code.NOT_FOUND, f"no dev cluster recorded in {directory} "
                                              f"(start one with: raftsched dev up)")
    return state


def _refuse_to_add(state: ClusterState, cluster: str) -> None:
    path = state_path(Path(state.dir))
    alive = sum(Identity(r.pid, r.start_time_ticks).is_running() for r in state.replicas)
    if alive == 0:
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"the dev cluster recorded in {state.dir} is not running (none of "
                              f"its replicas is alive); start one with: raftsched dev up "
                              f"--dir {state.dir}")
    if alive <= len(state.replicas) // 2:
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"only {alive} of the {len(state.replicas)} replicas of the dev "
                              f"cluster in {state.dir} are running: too few to elect a leader")
    if state.executor not in EXECUTORS:
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"{path} records the executor {state.executor!r}, not one of "
                              f"{', '.join(EXECUTORS)}")
    same = next((a for a in state.agents if a.cluster == cluster), None)
    if same is not None:
        running = Identity(same.pid, same.start_time_ticks).is_running()
        raise DevClusterError(Code.ALREADY_EXISTS,
                              f"--cluster-id {cluster!r} is taken: {path} records its agent "
                              f"(pid {same.pid}, {'alive' if running else 'not running'}); "
                              f"pick another id")
    if any(r.id == cluster for r in state.replicas):
        raise DevClusterError(Code.ALREADY_EXISTS,
                              f"--cluster-id {cluster!r} is the name of a replica of this dev "
                              f"cluster (their logs and data dirs would mix); pick another id")
    if len(state.agents) >= MAX_RECORDED_AGENTS:
        raise DevClusterError(Code.RESOURCE_EXHAUSTED,
                              f"the dev cluster in {state.dir} already has {len(state.agents)} "
                              f"agents (MAX_RECORDED_AGENTS)")


def _slurm_env(state: ClusterState) -> dict[str, str]:
    """The environment of a Slurm agent: SLURM_CONF naming the dev cluster's private Slurm when
    it has one (FAILED_PRECONDITION if that one no longer runs), else this environment's."""
    if state.slurm is None:
        return child_env()
    dead = [d for d in state.slurm.processes().values() if not d.alive()]
    if dead:
        names = ", ".join(f"{d.name} (pid {d.pid})" for d in dead)
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"the private Slurm of the dev cluster in {state.dir} is not "
                              f"running ({names} gone); restart the cluster: raftsched dev down "
                              f"--dir {state.dir}; raftsched dev up --slurm --dir {state.dir}")
    return state.slurm.client_env(child_env())


def _slurm_shape(shape: AgentShape, partition: str, env: dict[str, str],
                 own: bool) -> AgentShape:
    """`shape` with the partition's sizes, and its nodes' features beside the capabilities, as
    the agent will read them (`agent.executors.slurm.partition_capacity`); FAILED_PRECONDITION
    saying which Slurm was asked when it does not answer or has no such partition."""
    from agent.executors import ExecutorError
    from agent.executors.slurm import partition_capacity

    try:
        found = partition_capacity(partition, env)
    except ExecutorError as error:
        asked = ("the dev cluster's private Slurm" if own else
                 f"the Slurm SLURM_CONF={env['SLURM_CONF']} names" if env.get("SLURM_CONF")
                 else "the Slurm of this machine's default configuration (SLURM_CONF is unset)")
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"--slurm-partition {partition}: {error} (asked {asked}; "
                              f"--executor slurm needs a Slurm: the dev cluster's own, from "
                              f"'raftsched dev up --slurm', or one SLURM_CONF names)") from None
    capabilities = tuple(dict.fromkeys((*shape.capabilities, *found.capabilities)))
    return replace(shape, capabilities=capabilities, cpu=found.cpu_milli // 1000,
                   memory_mb=found.memory_mb, gpu=found.gpu)


def _issue_agent_certificate(directory: Path, cluster: str) -> TlsPaths:
    """raftsched-agent:CLUSTER, signed by the CA `up` made in DIR/tls."""
    from raftsched.dev import pki  # cryptography: loaded only when a certificate is issued

    tls_dir = directory / TLS_DIR_NAME
    try:
        authority = pki.load_authority(tls_dir)
    except (OSError, ValueError) as error:
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"cannot issue a certificate for agent {cluster!r}: the dev "
                              f"cluster's CA in {tls_dir} is unusable ({error}); restart the "
                              f"cluster (raftsched dev down, dev up)") from None
    return TlsPaths.of(pki.issue_agent(authority, cluster))


class _Adder(_Launch):
    """One `add-agent`: spawns and records the agent, waits; `abort` undoes it."""

    activity = "it was joining the cluster"

    entry: AgentEntry | None = None

    def start(self, shape: AgentShape, executor: str, tls: TlsPaths | None,
              env: dict[str, str] | None = None, slurm_partition: str = "") -> AgentEntry:
        directory = Path(self.state.dir)
        # The run's data dir, next to the replicas'. A failed earlier add of this id left its
        # agent's data there: the new agent resumes from it, as a restarted agent would.
        data_dir = Path(self.state.replicas[0].data_dir).parent / shape.cluster
        data_dir.mkdir(parents=True, exist_ok=True)
        (directory / LOG_DIR_NAME).mkdir(exist_ok=True)
        log = directory / LOG_DIR_NAME / f"{shape.cluster}.log"
        metrics_port = pick_free_ports(1)[0]
        partition = f", Slurm partition {slurm_partition}" if slurm_partition else ""
        resources = ",".join(f"{name}={count}" for name, count in shape.resources)
        self.progress(f"starting agent {shape.cluster} ({executor} executor{partition}; cpu "
                      f"{shape.cpu}, memory {shape.memory_mb} MB, gpu {shape.gpu}; capabilities "
                      f"{','.join(shape.capabilities) or 'none'}; resources {resources or 'none'}"
                      f"; log {log})")
        self._let_tasks_through(data_dir, executor)
        argv = agent_command(shape, self.state.servers, data_dir, executor, metrics_port,
                             tls=tls, slurm_partition=slurm_partition)
        pid, start = self._spawn(shape.cluster, argv, log, env)
        self.entry = AgentEntry(shape.cluster, pid, start, shape.capabilities, shape.cpu,
                                shape.memory_mb, shape.gpu, metrics_port, str(data_dir),
                                str(log), shape.resources, executor, slurm_partition)
        self.state.agents.append(self.entry)
        save_state(self.state)
        return self.entry

    def wait_ready(self, cluster: str) -> ClusterView:
        names = [cluster]
        view = self._wait(f"agent {cluster} to be READY", lambda v: _all_ready(v, names),
                          suspect=lambda v: cluster, detail=lambda v: _readiness(v, names))
        self.progress(f"{cluster} ready after {self._elapsed_s():.1f} s")
        return view

    def abort(self) -> None:
        """Stop the agent and remove its entry (kept if it survived SIGKILL: `down` retries)."""
        results = self._stop_children()
        if self.entry is None or any(r.outcome is StopOutcome.SURVIVED for r in results):
            return
        self.state.agents.remove(self.entry)
        save_state(self.state)


# --- status and down ---------------------------------------------------------------------------


def cluster_doc(state: ClusterState, view: ClusterView | None) -> dict[str, Any]:
    """What `dev up` and `dev status` print with --json: {"servers", "replicas": [{"id", "pid",
    "address", "raft_address", "leader", "alive"}], "agents": [{"cluster", "pid", "alive"}],
    "metrics": [URL of every replica's and agent's /metrics], "dir", "insecure", "user_tls":
    {"ca", "cert", "key"} | null, "slurm": {"dir", "conf", "partition", "jobcomp", "daemons":
    [{"name", "pid", "alive", "log"}]} | null, "web": {"url", "pid", "alive", "log"} | null}
    and a few more fields."""
    leader = view.leader if view is not None else ""
    replicas = [{
        "id": r.id, "pid": r.pid, "address": r.grpc_address, "raft_address": r.raft_address,
        "leader": bool(leader) and r.grpc_address == leader,
        "alive": Identity(r.pid, r.start_time_ticks).is_running(),
        "metrics_port": r.metrics_port, "data_dir": r.data_dir, "log": r.log,
    } for r in state.replicas]
    agents = [agent_doc(agent, view, state.executor) for agent in state.agents]
    user_tls = state.client_tls
    ports = [r.metrics_port for r in state.replicas] + [a.metrics_port for a in state.agents]
    metrics = [metrics_url(port) for port in ports if port]
    return {"servers": state.servers, "replicas": replicas, "agents": agents, "dir": state.dir,
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


def down(directory: Path, progress: Progress = lambda message: None) -> list[StopResult] | None:
    """Stop the processes recorded in DIR/cluster.json and remove that file; None when nothing
    is recorded (already down). The agents and replicas go first (so nothing submits to Slurm
    any more), then the private Slurm: its jobs cancelled, their processes waited for, its
    daemons stopped (`private_slurm.stop_daemons`). Raises, keeping the file, if a process
    survives SIGKILL."""
    require_proc()
    directory = directory.resolve()
    if load_state(directory) is None:  # before `exclusive`, which would create the directory
        return None
    with exclusive(directory):
        state = load_state(directory)
        if state is None:
            return None
        results = stop_all(state.processes())
        if state.slurm is not None:
            stopped = private_slurm.stop_daemons(state.slurm.processes(), Path(state.slurm.conf))
            results += stopped.results
            _report_job_processes(stopped.job_processes, progress)
            if state.slurm.socket_dir:
                shutil.rmtree(state.slurm.socket_dir, ignore_errors=True)
        survivors = [r for r in results if r.outcome is StopOutcome.SURVIVED]
        if survivors:
            names = ", ".join(f"{r.name} (pid {r.pid})" for r in survivors)
            raise DevClusterError(Code.UNAVAILABLE, f"still running after SIGKILL: {names}; "
                                                    f"{state_path(directory)} is kept")
        state_path(directory).unlink()
        return results
