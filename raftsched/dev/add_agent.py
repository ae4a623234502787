"""`raftsched dev add-agent`: start one more agent in a recorded cluster. (Part of the dev cluster,
`raftsched.dev`.)"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from raftsched import limits
from raftsched.dev import slurm as private_slurm
from raftsched.dev.launch import _all_ready, _Launch, _readiness
from raftsched.dev.ports import pick_free_ports
from raftsched.dev.processes import (
    ClusterView,
    Probe,
    Spawn,
    agent_command,
    child_env,
    probe_cluster,
    require_proc,
    spawn_process,
)
from raftsched.dev.record import (
    AGENT_EXECUTORS,
    EXECUTORS,
    LOG_DIR_NAME,
    MAX_CPU_CORES,
    MAX_RECORDED_AGENTS,
    SLURM_EXECUTOR,
    TLS_DIR_NAME,
    UP_TIMEOUT_S,
    AgentEntry,
    AgentShape,
    ClusterState,
    DevClusterError,
    Progress,
    Resources,
    TlsPaths,
    exclusive,
    load_state,
    save_state,
    state_path,
)
from raftsched.dev.supervisor import (
    Identity,
    StopOutcome,
)
from raftsched.errors import Code
from raftsched.protocol import id_problem  # the one id rule, the agent's --cluster-id's too

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    pass



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
        groups = self.state.all_groups  # a group `dev add-group` is adding too
        argv = agent_command(shape, groups, data_dir, executor, metrics_port, tls=tls,
                             slurm_partition=slurm_partition)
        pid, start = self._spawn(shape.cluster, argv, log, env)
        self.entry = AgentEntry(shape.cluster, pid, start, shape.capabilities, shape.cpu,
                                shape.memory_mb, shape.gpu, metrics_port, str(data_dir),
                                str(log), shape.resources, executor, slurm_partition,
                                len(groups))
        self.state.agents.append(self.entry)
        save_state(self.state)
        return self.entry

    def wait_ready(self, cluster: str) -> ClusterView:
        """READY in every scheduler group (an agent serves them all)."""
        names = [cluster]
        groups = self.state.all_groups
        for group, servers in enumerate(groups):
            where = f" in group {group}" if len(groups) > 1 else ""
            view = self._wait(f"agent {cluster} to be READY{where}",
                              lambda v: _all_ready(v, names), suspect=lambda v: cluster,
                              detail=lambda v: _readiness(v, names), servers=servers)
        self.progress(f"{cluster} ready after {self._elapsed_s():.1f} s")
        return view

    def abort(self) -> None:
        """Stop the agent and remove its entry (kept if it survived SIGKILL: `down` retries)."""
        results = self._stop_children()
        if self.entry is None or any(r.outcome is StopOutcome.SURVIVED for r in results):
            return
        self.state.agents.remove(self.entry)
        save_state(self.state)
