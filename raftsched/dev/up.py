"""`raftsched dev up`: start a local cluster and record it. (Part of the dev cluster,
`raftsched.dev`.)"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raftsched.dev import slurm as private_slurm
from raftsched.dev.launch import (
    _all_ready,
    _first_not_ready,
    _Launch,
    _readiness,
    _report_job_processes,
)
from raftsched.dev.ports import LOOPBACK, pick_free_ports, port_open
from raftsched.dev.processes import (
    Certificates,
    ClusterView,
    Probe,
    Spawn,
    agent_command,
    child_env,
    issue_certificates,
    local_user_name,
    probe_cluster,
    replica_command,
    require_proc,
    spawn_process,
    topology_text,
    web_command,
)
from raftsched.dev.record import (
    DATA_DIR_NAME,
    DEFAULT_AGENTS,
    DEFAULT_EXECUTOR,
    DEFAULT_REPLICAS,
    EXECUTORS,
    LOG_DIR_NAME,
    MAX_AGENTS,
    POLL_INTERVAL_S,
    REPLICA_COUNTS,
    RESERVED_ENV,
    SLURM_AGENT,
    SLURM_DIR_NAME,
    SLURM_EXECUTOR,
    TLS_DIR_NAME,
    UP_TIMEOUT_S,
    WEB_NAME,
    WEB_WATCH_TOKEN_FILE_NAME,
    AgentEntry,
    AgentShape,
    ClusterState,
    DaemonEntry,
    DevClusterError,
    Progress,
    ReplicaEntry,
    SlurmEntry,
    TlsPaths,
    WebEntry,
    agent_shapes,
    exclusive,
    load_state,
    save_state,
    state_path,
    write_secret,
)
from raftsched.dev.supervisor import (
    Child,
    StopOutcome,
    log_tail,
)
from raftsched.errors import Code

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    pass


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
    groups: int = 1
    """--groups: scheduler groups (issue 27), each of `replicas` replicas; every agent serves
    every group."""


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


def _named(name: str) -> Callable[[ClusterView | None], str]:
    """A `suspect` that always names `name` (the first replica of a group without a leader)."""
    return lambda _view: name


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
        count, groups = self.options.replicas, self.options.groups
        total = count * groups
        ports = pick_free_ports(3 * total + self.options.agents + 1)  # the last: the web's
        rafts = [f"{LOOPBACK}:{port}" for port in ports[:total]]
        grpcs = [f"{LOOPBACK}:{port}" for port in ports[total:2 * total]]
        in_groups = f" in each of {groups} scheduler groups" if groups > 1 else ""
        self.progress(f"starting {count} replicas{in_groups} (logs in "
                      f"{self.state.dir}/{LOG_DIR_NAME})")
        topology = topology_text([grpcs[group * count:(group + 1) * count]
                                  for group in range(groups)]) if groups > 1 else ""
        for group in range(groups):
            members = range(group * count, (group + 1) * count)
            for index in members:
                self._start_replica(index, [rafts[i] for i in members], grpcs[index],
                                    ports[2 * total + index], group, topology)
        view = None
        for group in range(groups):
            servers = self._group_servers(group)
            first = f"replica-{group * count + 1}"
            view = self._wait(f"a leader{self._of(group)}",
                              lambda v: v is not None and v.from_leader,
                              suspect=_named(first), servers=servers)
            self.progress(f"{view.leader} leads{self._of(group)} (term {view.term}) after "
                          f"{self._elapsed_s():.1f} s")
        assert view is not None
        view = self._start_agents(view, ports[3 * total:-1])
        self._start_web(ports[-1])
        self._wait_web()
        return view

    def _group_servers(self, group: int) -> list[str]:
        return [r.grpc_address for r in self.state.replicas if r.group == group]

    def _of(self, group: int) -> str:
        return f" of group {group}" if self.options.groups > 1 else ""

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
        for group in range(self.options.groups):  # every agent registers with every group
            view = self._wait(f"every agent to be READY{self._of(group)}",
                              lambda v: _all_ready(v, names),
                              suspect=lambda v: _first_not_ready(v, names),
                              detail=lambda v: _readiness(v, names),
                              servers=self._group_servers(group))
        self.progress(f"ready after {self._elapsed_s():.1f} s")
        return view

    def _start_replica(self, index: int, rafts: list[str], grpc: str, metrics_port: int,
                       group: int = 0, topology: str = "") -> None:
        """Replica `index` (0-based over every group) of `group`, whose Raft addresses are
        `rafts` (every group has its own members and its own log); `topology`: every group's
        gRPC addresses (`replica --topology`), with several."""
        name = f"replica-{index + 1}"
        data_dir, log = self._prepare(name)
        raft = rafts[index % len(rafts)]
        peers = [other for other in rafts if other != raft]
        secure = self.certificates is not None
        argv = replica_command(raft, grpc, peers, data_dir,
                               Path(self.state.secret_file) if secure else None, metrics_port,
                               tls=self.certificates.replica if self.certificates else None,
                               bootstrap_token=self.certificates.user.token
                               if self.certificates else "",
                               group=(group, self.options.groups), topology=topology)
        pid, start = self._spawn(name, argv, log)
        self.state.replicas.append(ReplicaEntry(name, pid, start, grpc, raft, metrics_port,
                                                str(data_dir), str(log), group))
        save_state(self.state)

    def _start_web(self, port: int) -> None:
        """The web console on `port` of 127.0.0.1, recorded at once (`down` stops it)."""
        if self.certificates is None:
            return
        address = f"{LOOPBACK}:{port}"
        log = Path(self.state.dir) / LOG_DIR_NAME / f"{WEB_NAME}.log"
        watch = Path(self.state.dir) / TLS_DIR_NAME / WEB_WATCH_TOKEN_FILE_NAME
        self._write_watch_token(watch)
        pid, start = self._spawn(WEB_NAME, web_command(address, self._group_servers(0),
                                                       self.certificates.web, watch), log)
        self.state.web = WebEntry(pid, start, f"https://{address}/", str(log))
        save_state(self.state)

    def _write_watch_token(self, path: Path) -> None:
        """The console's own operator token, in `path` (0600)."""
        from raftsched.dev import pki

        assert self.certificates is not None
        token = self.web_token(self._group_servers(0), self.certificates.user,
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
        groups = self.state.client_groups
        argv = agent_command(shape, groups, data_dir, executor, metrics_port,
                             tls=self.certificates.agents[shape.cluster]
                             if self.certificates else None, slurm_partition=partition)
        pid, start = self._spawn(shape.cluster, argv, log, env)
        self.state.agents.append(AgentEntry(shape.cluster, pid, start, shape.capabilities,
                                            shape.cpu, shape.memory_mb, shape.gpu, metrics_port,
                                            str(data_dir), str(log), shape.resources, executor,
                                            partition, len(groups)))
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


