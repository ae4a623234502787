"""The dev cluster's record: its shape, `ClusterState` and its JSON (cluster.json), the secret and
the lock. (Part of the dev cluster, `raftsched.dev`.)"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raftsched import limits
from raftsched.dev import slurm as private_slurm
from raftsched.dev.supervisor import (
    Identity,
    Recorded,
)
from raftsched.environment import DEV_DIR_ENV, SECRET_ENV, SERVERS_ENV
from raftsched.errors import Code, RaftschedError

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    from raftsched.tls import TlsFiles



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
MAX_DEV_GROUPS = 4
"""Scheduler groups a dev cluster has at most: `dev up --groups` starts, `dev add-group` adds
(each of --replicas processes)."""
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
"""How long `up` waits for a leader and then for every agent to be READY, `add-agent` for its
agent's cluster, and `add-group` for each thing it waits for (a leader, an agent to run nothing,
to be READY). (How long `down` waits for processes to exit: `supervisor.TERM_TIMEOUT_S`
and `KILL_TIMEOUT_S`.)"""
POLL_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 1.0
"""Deadline of one ClusterStatus call while polling."""
PROGRESS_EVERY_S = 5.0
SECRET_BYTES = 32
RESERVED_ENV = (SECRET_ENV, SERVERS_ENV, DEV_DIR_ENV)
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
    group: int = 0
    """Which scheduler group the replica belongs to (`dev up --groups`, `dev add-group`)."""
    joining: bool = False
    """Started by `dev add-group` with --joining, and its group not given its shards yet: the
    group is not among those clients and agents are told (`ClusterState.client_groups`) until
    the move is done; `dev status` shows it and `dev down` stops it like any replica."""


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
    groups: int = 0
    """How many scheduler groups its --servers lists (groups 0 to groups - 1); 0: a state file
    written before agents recorded it, when every agent served every client group."""


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
        """Every recorded replica's gRPC address (a joining group's too)."""
        return [replica.grpc_address for replica in self.replicas]

    @property
    def all_groups(self) -> list[list[str]]:
        """Each recorded scheduler group's gRPC addresses in group order, a joining one too."""
        count = 1 + max((replica.group for replica in self.replicas), default=0)
        return [[r.grpc_address for r in self.replicas if r.group == group]
                for group in range(count)]

    @property
    def joining_group(self) -> int | None:
        """The group `dev add-group` started and has not given its shards yet; None."""
        return next((r.group for r in self.replicas if r.joining), None)

    @property
    def client_groups(self) -> list[list[str]]:
        """The groups clients are given (every recorded group but a joining one), in order."""
        joining = self.joining_group
        return [group for index, group in enumerate(self.all_groups) if index != joining]

    @property
    def groups(self) -> list[list[str]] | None:
        """`client_groups` when there are several; None for one group."""
        groups = self.client_groups
        return groups if len(groups) > 1 else None

    def served_groups(self, agent: AgentEntry) -> int:
        """How many groups `agent` serves (the first ones): as recorded, else (a state file
        written before agents recorded it) every client group."""
        return agent.groups or len(self.client_groups)

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
    """Every client group's replicas of the recorded dev cluster, as one list."""
    groups = groups_from_state(directory)
    return [address for group in groups for address in group] if groups else None


def groups_from_state(directory: Path) -> list[list[str]] | None:
    """Each scheduler group's gRPC addresses of the recorded dev cluster (one group unless it
    was started with --groups)."""
    state = load_state(directory)
    if state is None or not state.replicas:
        return None
    return state.client_groups


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
