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
that explains it.

`add_agent` starts one more agent on the running cluster (a cluster of another id, size or
executor, for tests, benchmarks and demos): it checks the shape by the agent's own rules, issues
its certificate from the CA in DIR/tls (`pki.load_authority`), spawns it like `up` does, records
it, and waits until its cluster is READY; on failure it stops the agent and forgets it again.
`status` and `down` treat it like any agent `up` started.

DIR/cluster.json records every process: its identity (pid and start time from /proc, see
`supervisor.Identity`) and addresses. `down` signals a pid only while /proc still shows that same
start time, so it never signals a process that merely reused the pid; it stops exactly those
processes (`supervisor.stop_all`: SIGTERM to the process group, a named wait, then SIGKILL),
removes the state file and nothing else (logs, secret and data stay), and is idempotent. Linux
only (/proc).

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
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import raftsched
from raftsched import limits, procfs
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
DEFAULT_EXECUTOR = "mock"
UP_TIMEOUT_S = 60.0
"""How long `up` waits for a leader and then for every agent to be READY, and `add-agent` for
its agent's cluster. (How long `down` waits for processes to exit: `supervisor.TERM_TIMEOUT_S`
and `KILL_TIMEOUT_S`.)"""
POLL_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 1.0
"""Deadline of one ClusterStatus call while polling."""
CONNECT_TIMEOUT_S = 0.2
PROGRESS_EVERY_S = 5.0
SECRET_BYTES = 32
MAX_PORTS = 128
LOOPBACK = "127.0.0.1"
RESERVED_ENV = ("RAFTSCHED_SECRET", "RAFTSCHED_SERVERS", DEV_DIR_ENV)
"""Not passed on to the processes: everything they need is on their command line."""
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


@dataclass(frozen=True, slots=True)
class AgentShape:
    cluster: str
    capabilities: tuple[str, ...]
    cpu: int
    memory_mb: int
    gpu: int


FIRST_AGENTS = (
    AgentShape("cpu-east", ("linux",), cpu=4, memory_mb=8192, gpu=0),
    AgentShape("gpu-west", ("linux", "gpu"), cpu=4, memory_mb=16384, gpu=2),
)


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

    @property
    def servers(self) -> list[str]:
        return [replica.grpc_address for replica in self.replicas]

    @property
    def client_tls(self) -> TlsPaths | None:
        """What a client of this cluster presents; None: plaintext."""
        return None if self.insecure else self.user_tls

    def processes(self) -> list[Recorded]:
        return ([Recorded(r.id, Identity(r.pid, r.start_time_ticks)) for r in self.replicas]
                + [Recorded(a.cluster, Identity(a.pid, a.start_time_ticks))
                   for a in self.agents])

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["version"] = STATE_VERSION
        return doc

    @classmethod
    def from_doc(cls, doc: object) -> ClusterState:
        """Raises ValueError naming what is wrong."""
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {STATE_VERSION}")
        replicas = [ReplicaEntry(**_entry(ReplicaEntry, item)) for item in _list(doc, "replicas")]
        agents = []
        for item in _list(doc, "agents"):
            values = _entry(AgentEntry, item)
            values["capabilities"] = tuple(values["capabilities"])
            agents.append(AgentEntry(**values))
        directory, executor, secret_file = (_string(doc, name)
                                            for name in ("dir", "executor", "secret_file"))
        created_ms = doc.get("created_ms")
        if not isinstance(created_ms, int):
            raise ValueError("created_ms must be an integer")
        # A state file written before TLS has neither key: its processes serve plaintext.
        insecure = doc.get("insecure", "user_tls" not in doc)
        if not isinstance(insecure, bool):
            raise ValueError("insecure must be true or false")
        return cls(directory, executor, secret_file, created_ms, replicas, agents, insecure,
                   _tls_paths(doc.get("user_tls")))


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


def _entry(kind: type[ReplicaEntry] | type[AgentEntry], item: object) -> dict[str, Any]:
    """The fields of one recorded process; its identity (pid, start time) must be integers."""
    names = [f.name for f in fields(kind)]
    if not isinstance(item, dict) or set(names) - set(item):
        raise ValueError(f"a {kind.__name__} needs the fields {', '.join(names)}")
    Identity.from_doc(item)
    return {name: item[name] for name in names}


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


def issue_certificates(directory: Path, clusters: Sequence[str], user: str) -> Certificates:
    """A fresh CA in DIR/tls (replacing an earlier run's) and the certificates it signs: the
    replicas' (127.0.0.1 and localhost), one per agent of `clusters`, and `user`'s."""
    from raftsched.dev import pki  # cryptography and grpc: loaded only when a cluster starts

    authority = pki.create_authority(directory / TLS_DIR_NAME)
    token_file = directory / TLS_DIR_NAME / ADMIN_TOKEN_FILE_NAME
    pki.write_admin_token(token_file)
    return Certificates(
        replica=TlsPaths.of(pki.issue_replica(authority, [LOOPBACK])),
        agents={cluster: TlsPaths.of(pki.issue_agent(authority, cluster))
                for cluster in clusters},
        user=TlsPaths.of(pki.issue_user(authority, user), token=str(token_file)))


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
                  metrics_port: int, *, tls: TlsPaths | None) -> list[str]:
    """`python -m raftsched agent ...`; without TLS files: --insecure-dev."""
    return [sys.executable, "-m", "raftsched", "agent", "--cluster-id", shape.cluster,
            "--servers", ",".join(servers), "--capabilities", ",".join(shape.capabilities),
            "--cpu", str(shape.cpu), "--memory-mb", str(shape.memory_mb), "--gpu",
            str(shape.gpu), "--data-dir", str(data_dir), "--executor", executor,
            "--metrics-port", str(metrics_port),
            *(tls.flags() if tls is not None else ["--insecure-dev"])]


def child_env() -> dict[str, str]:
    """This environment minus RESERVED_ENV, unbuffered, with this checkout importable."""
    env = {key: value for key, value in os.environ.items() if key not in RESERVED_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    root = str(Path(raftsched.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def spawn_process(name: str, argv: list[str], log_path: Path, cwd: Path) -> Child:
    """Start `argv` through the supervisor: its own session, output appended to `log_path`."""
    child = Child(name, argv, log_path, env=child_env(), cwd=cwd)
    child.start(note="raftsched dev")
    return child


Spawn = Callable[[str, list[str], Path, Path], Child]


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


def up(options: UpOptions, *, progress: Progress, spawn: Spawn = spawn_process,
       probe: Probe = probe_cluster, clock: Callable[[], float] = time.monotonic,
       sleep: Callable[[float], None] = time.sleep) -> tuple[ClusterState, ClusterView]:
    """Start a dev cluster in `options.dir` and wait until it has a leader and every agent is
    READY. On failure (or Ctrl-C) stop what was started and re-raise."""
    assert options.replicas in REPLICA_COUNTS and 0 <= options.agents <= MAX_AGENTS
    assert options.executor in EXECUTORS
    require_proc()
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
        try:
            return state, starter.run()
        except BaseException:
            starter.abort()
            raise


def _refuse_if_running(directory: Path, progress: Progress) -> None:
    previous = load_state(directory)
    if previous is None:
        return
    alive = [process for process in previous.processes() if process.alive()]
    if alive:
        names = ", ".join(f"{process.name} (pid {process.pid})" for process in alive)
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"a dev cluster is already running in {directory}: {names}; "
                              f"stop it first with: raftsched dev down --dir {directory}")
    progress(f"forgetting the earlier dev cluster recorded in {directory} (none of its "
             f"processes is running)")
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

    def _spawn(self, name: str, argv: list[str], log: Path) -> Identity:
        child = self.spawn(name, argv, log, Path(self.state.dir))
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

    def run(self) -> ClusterView:
        count = self.options.replicas
        ports = pick_free_ports(3 * count + self.options.agents)
        rafts = [f"{LOOPBACK}:{port}" for port in ports[:count]]
        grpcs = [f"{LOOPBACK}:{port}" for port in ports[count:2 * count]]
        self.progress(f"starting {count} replicas (logs in {self.state.dir}/{LOG_DIR_NAME})")
        for index in range(count):
            self._start_replica(index, rafts, grpcs[index], ports[2 * count + index])
        view = self._wait("a leader", lambda v: v is not None and v.from_leader,
                          suspect=lambda v: "replica-1")
        self.progress(f"{view.leader} leads (term {view.term}) after {self._elapsed_s():.1f} s")
        shapes = agent_shapes(self.options.agents)
        if not shapes:
            return view
        self.progress(f"starting {len(shapes)} agents ({self.options.executor} executor): "
                      + ", ".join(shape.cluster for shape in shapes))
        for index, shape in enumerate(shapes):
            self._start_agent(shape, ports[3 * count + index])
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

    def _start_agent(self, shape: AgentShape, metrics_port: int) -> None:
        data_dir, log = self._prepare(shape.cluster)
        argv = agent_command(shape, self.state.servers, data_dir, self.options.executor,
                             metrics_port, tls=self.certificates.agents[shape.cluster]
                             if self.certificates else None)
        pid, start = self._spawn(shape.cluster, argv, log)
        self.state.agents.append(AgentEntry(shape.cluster, pid, start, shape.capabilities,
                                            shape.cpu, shape.memory_mb, shape.gpu, metrics_port,
                                            str(data_dir), str(log)))
        save_state(self.state)

    def _prepare(self, name: str) -> tuple[Path, Path]:
        data_dir = self.run_dir / name
        data_dir.mkdir(parents=True)
        return data_dir, Path(self.state.dir) / LOG_DIR_NAME / f"{name}.log"

    def abort(self) -> None:
        if not self._stop_children():
            return
        with contextlib.suppress(FileNotFoundError):
            state_path(Path(self.state.dir)).unlink()


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
    """Cores; None: this machine's, as `raftsched agent` defaults."""
    memory_mb: int | None = None
    """None: this machine's memory, as `raftsched agent` defaults."""
    gpu: int = 0
    executor: str | None = None
    """None: the executor the cluster was started with."""
    timeout_s: float = UP_TIMEOUT_S


def requested_shape(options: AddAgentOptions) -> AgentShape:
    """The agent `options` asks for, with the agent's defaults (this machine's cores and memory,
    no GPU, no capabilities) and its rules for ids and sizes; INVALID_ARGUMENT naming the option
    otherwise."""
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
    cpu = options.cpu if options.cpu is not None else os.cpu_count() or 1
    memory_mb = options.memory_mb if options.memory_mb is not None else machine_memory_mb()
    for option, value, most in (("--cpu", cpu, MAX_CPU_CORES),
                                ("--memory-mb", memory_mb, limits.MAX_MEMORY_MB),
                                ("--gpu", options.gpu, limits.MAX_GPU)):
        if not 0 <= value <= most:
            raise DevClusterError(Code.INVALID_ARGUMENT,
                                  f"{option} {value}: between 0 and {most}")
    return AgentShape(options.cluster, capabilities, cpu, memory_mb, options.gpu)


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
    assert options.executor is None or options.executor in EXECUTORS
    require_proc()
    shape = requested_shape(options)
    directory = options.dir.resolve()
    recorded_state(directory)  # before `exclusive`, which would create the directory
    with exclusive(directory):
        state = recorded_state(directory)
        _refuse_to_add(state, shape.cluster)
        executor = options.executor or state.executor
        tls = None if state.insecure else _issue_agent_certificate(directory, shape.cluster)
        adder = _Adder(state, options.timeout_s, spawn, probe, progress, clock, sleep)
        try:
            entry = adder.start(shape, executor, tls)
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

    def start(self, shape: AgentShape, executor: str, tls: TlsPaths | None) -> AgentEntry:
        directory = Path(self.state.dir)
        # The run's data dir, next to the replicas'. A failed earlier add of this id left its
        # agent's data there: the new agent resumes from it, as a restarted agent would.
        data_dir = Path(self.state.replicas[0].data_dir).parent / shape.cluster
        data_dir.mkdir(parents=True, exist_ok=True)
        (directory / LOG_DIR_NAME).mkdir(exist_ok=True)
        log = directory / LOG_DIR_NAME / f"{shape.cluster}.log"
        metrics_port = pick_free_ports(1)[0]
        self.progress(f"starting agent {shape.cluster} ({executor} executor; cpu {shape.cpu}, "
                      f"memory {shape.memory_mb} MB, gpu {shape.gpu}; capabilities "
                      f"{','.join(shape.capabilities) or 'none'}; log {log})")
        argv = agent_command(shape, self.state.servers, data_dir, executor, metrics_port,
                             tls=tls)
        pid, start = self._spawn(shape.cluster, argv, log)
        self.entry = AgentEntry(shape.cluster, pid, start, shape.capabilities, shape.cpu,
                                shape.memory_mb, shape.gpu, metrics_port, str(data_dir),
                                str(log))
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
    {"ca", "cert", "key"} | null} and a few more fields."""
    leader = view.leader if view is not None else ""
    replicas = [{
        "id": r.id, "pid": r.pid, "address": r.grpc_address, "raft_address": r.raft_address,
        "leader": bool(leader) and r.grpc_address == leader,
        "alive": Identity(r.pid, r.start_time_ticks).is_running(),
        "metrics_port": r.metrics_port, "data_dir": r.data_dir, "log": r.log,
    } for r in state.replicas]
    agents = [agent_doc(agent, view) for agent in state.agents]
    user_tls = state.client_tls
    ports = [r.metrics_port for r in state.replicas] + [a.metrics_port for a in state.agents]
    metrics = [metrics_url(port) for port in ports if port]
    return {"servers": state.servers, "replicas": replicas, "agents": agents, "dir": state.dir,
            "metrics": metrics,
            "leader": leader, "executor": state.executor, "secret_file": state.secret_file,
            "insecure": state.insecure,
            "user_tls": asdict(user_tls) if user_tls is not None else None}


def metrics_url(port: int) -> str:
    """Where a dev process serves Prometheus metrics (`--metrics-port`: on 127.0.0.1)."""
    return f"http://127.0.0.1:{port}/metrics"


def agent_doc(agent: AgentEntry, view: ClusterView | None) -> dict[str, Any]:
    """One agent as `dev status --json` and `dev add-agent --json` print it: {"cluster", "pid",
    "alive", "capabilities", "status", "cpu", "memory_mb", "gpu", "metrics_port", "data_dir",
    "log"}."""
    return {
        "cluster": agent.cluster, "pid": agent.pid,
        "alive": Identity(agent.pid, agent.start_time_ticks).is_running(),
        "capabilities": list(agent.capabilities),
        "status": view.clusters.get(agent.cluster, "") if view is not None else "",
        "cpu": agent.cpu, "memory_mb": agent.memory_mb, "gpu": agent.gpu,
        "metrics_port": agent.metrics_port, "data_dir": agent.data_dir, "log": agent.log,
    }


def status(directory: Path,
           probe: Probe = probe_cluster) -> tuple[ClusterState, ClusterView | None]:
    """The recorded cluster and what its live replicas say; NOT_FOUND when none is recorded."""
    require_proc()
    state = recorded_state(directory.resolve())
    live = [r.grpc_address for r in state.replicas
            if Identity(r.pid, r.start_time_ticks).is_running()]
    return state, probe(live, state.client_tls) if live else None


def down(directory: Path) -> list[StopResult] | None:
    """Stop the processes recorded in DIR/cluster.json and remove that file; None when nothing
    is recorded (already down). Raises, keeping the file, if a process survives SIGKILL."""
    require_proc()
    directory = directory.resolve()
    if load_state(directory) is None:  # before `exclusive`, which would create the directory
        return None
    with exclusive(directory):
        state = load_state(directory)
        if state is None:
            return None
        results = stop_all(state.processes())
        survivors = [r for r in results if r.outcome is StopOutcome.SURVIVED]
        if survivors:
            names = ", ".join(f"{r.name} (pid {r.pid})" for r in survivors)
            raise DevClusterError(Code.UNAVAILABLE, f"still running after SIGKILL: {names}; "
                                                    f"{state_path(directory)} is kept")
        state_path(directory).unlink()
        return results
