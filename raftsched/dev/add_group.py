"""`raftsched dev add-group`: grow the recorded dev cluster by one scheduler group, the way
docs/scale-out.md §5 grows a deployment. (Part of the dev cluster, `raftsched.dev`.)

1. The new group K's replicas (as many as group 0 has) start on fresh data dirs with
   `--group K --groups K+1 --joining --topology <every group's, K's too>` and the cluster's
   security, each recorded as soon as it is spawned, as joining (`ReplicaEntry.joining`:
   `dev status` shows it, `dev down` stops it, clients are not sent there yet); then the group's
   leader, and its record of which group it is.
2. Every agent that does not serve every group is restarted with all of them, one after the
   other (the others keep running): drained in the groups it serves, waited for until it runs
   nothing (the leaders say so; an agent of one group's own metrics too: it refuses to start
   with several while its data dir records an attempt), stopped (the recorded process only),
   started again with every group's servers on the same data dir, metrics port, certificate
   and flags, waited for until READY in every group (registered again where it was known),
   and undrained where this command drained it (a drain of someone else's stays).
3. The move (`raftsched.client.shards.add_group`), its steps said as they go; then group K is
   recorded as a client group, so every later command given the dev dir talks to it too.

If step 1 fails, the replicas it started are stopped and forgotten. After that nothing is
stopped: whatever runs is recorded, and running the command again finishes the work (the
joining group is found in the record, agents that serve every group are left alone, and the
move goes on from where it stopped). Every wait is bounded by `--timeout` (UP_TIMEOUT_S by
default), each of them on its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from raftsched.dev.add_agent import _slurm_env, _slurm_shape, recorded_state
from raftsched.dev.group_calls import DRAIN_REASON, AgentWork, ClientCalls, GroupCalls
from raftsched.dev.launch import _all_ready, _Launch, _readiness
from raftsched.dev.ports import LOOPBACK, pick_free_ports
from raftsched.dev.processes import (
    ClusterFacts,
    ClusterView,
    Probe,
    Spawn,
    agent_command,
    probe_cluster,
    replica_command,
    require_proc,
    spawn_process,
    topology_text,
)
from raftsched.dev.record import (
    EXECUTORS,
    LOG_DIR_NAME,
    MAX_DEV_GROUPS,
    SLURM_EXECUTOR,
    TLS_DIR_NAME,
    UP_TIMEOUT_S,
    WEB_NAME,
    AgentEntry,
    AgentShape,
    ClusterState,
    DevClusterError,
    Progress,
    ReplicaEntry,
    TlsPaths,
    exclusive,
    save_state,
)
from raftsched.dev.status import metrics_url
from raftsched.dev.supervisor import Identity, Recorded, StopOutcome, log_tail, stop_all
from raftsched.errors import Code, RaftschedError

if TYPE_CHECKING:  # grpc: loaded only when the cluster is asked
    from raftsched.client.shards import MoveReport


@dataclass(frozen=True, slots=True)
class AddGroupOptions:
    dir: Path
    timeout_s: float = UP_TIMEOUT_S
    """Each wait on its own: the new group's leader, an agent to run nothing, to be READY."""


@dataclass(frozen=True, slots=True)
class AddGroupResult:
    state: ClusterState
    group: int
    """The group added (the one an earlier run left joining, when `resumed`)."""
    report: MoveReport
    restarted: tuple[str, ...]
    """The agents restarted to serve every group, in order."""
    resumed: bool


# --- pure helpers ------------------------------------------------------------------------------


def new_replica_names(count: int, taken: Collection[str], first: int) -> list[str]:
    """`count` names replica-N, N from `first` up, none of them `taken` (by a recorded
    process, or by a data dir an earlier run left)."""
    assert count >= 1 and first >= 1
    names: list[str] = []
    number = first
    while len(names) < count:
        name = f"replica-{number}"
        if name not in taken:
            names.append(name)
        number += 1
    return names


def group_to_add(state: ClusterState) -> tuple[int, bool]:
    """The group this run adds and whether an earlier run started it (its replicas are
    recorded as joining); refuses, naming why, a cluster that is not running, has a group
    without a quorum, or has MAX_DEV_GROUPS groups already."""
    if state.executor not in EXECUTORS:
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"{state.dir}/cluster.json records the executor "
                              f"{state.executor!r}, not one of {', '.join(EXECUTORS)}")
    for group in range(len(state.all_groups)):
        members = [r for r in state.replicas if r.group == group]
        alive = sum(Identity(r.pid, r.start_time_ticks).is_running() for r in members)
        if alive <= len(members) // 2:
            why = ("an earlier 'dev add-group' started it, and its move cannot go on without "
                   "it" if members and members[0].joining else "start the cluster again")
            raise DevClusterError(Code.FAILED_PRECONDITION,
                                  f"group {group} of the dev cluster in {state.dir} has {alive} "
                                  f"of its {len(members)} replicas running: too few to elect a "
                                  f"leader ({why}: raftsched dev down --dir {state.dir}; "
                                  f"raftsched dev up --dir {state.dir})")
    joining = state.joining_group
    if joining is not None:
        return joining, True
    groups = len(state.all_groups)
    if groups >= MAX_DEV_GROUPS:
        raise DevClusterError(Code.RESOURCE_EXHAUSTED,
                              f"the dev cluster in {state.dir} has {groups} scheduler groups "
                              f"already (MAX_DEV_GROUPS)")
    return groups, False


def agents_to_restart(state: ClusterState, groups: int) -> list[AgentEntry]:
    """The recorded agents that serve fewer than `groups` groups, in record order."""
    return [agent for agent in state.agents if state.served_groups(agent) < groups]


# --- add-group ---------------------------------------------------------------------------------


def add_group(options: AddGroupOptions, *, progress: Progress, spawn: Spawn = spawn_process,
              probe: Probe = probe_cluster, calls: GroupCalls | None = None,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> AddGroupResult:
    """Add one scheduler group to the dev cluster running in `options.dir` (the module's three
    steps), or finish the one an earlier run left joining. Refuses before starting anything a
    directory without a running cluster, one of MAX_DEV_GROUPS groups, missing certificates
    and a Slurm agent whose Slurm does not answer."""
    require_proc()
    directory = options.dir.resolve()
    recorded_state(directory)  # before `exclusive`, which would create the directory
    with exclusive(directory):
        state = recorded_state(directory)
        group, resumed = group_to_add(state)
        kit = _kit(state, agents_to_restart(state, group + 1))
        grower = _Grower(state, options.timeout_s, spawn, probe, progress, clock, sleep,
                         calls or ClientCalls(state.client_tls), kit)
        if not resumed:
            grower.start_group(group)  # on failure, its replicas are stopped and forgotten
        try:
            if resumed:
                progress(f"going on with group {group}, which an earlier run started "
                         "(recorded as joining)")
                grower.wait_group(group)
            restarted = grower.restart_agents(group + 1)
            report = grower.move(group)
        except DevClusterError as error:
            raise _unfinished(error, state, group) from None
        except BaseException:
            grower.stop_unrecorded()
            raise
        return AddGroupResult(state, group, report, tuple(restarted), resumed)


def _unfinished(error: DevClusterError, state: ClusterState, group: int) -> DevClusterError:
    return DevClusterError(
        error.code, f"{error.message}. Group {group}'s replicas keep running, recorded in "
        f"{state.dir}/cluster.json: finish with 'raftsched dev add-group --dir {state.dir}' "
        f"(it goes on from here), or stop everything with 'raftsched dev down --dir "
        f"{state.dir}'", log=error.log, log_tail=error.log_tail)


@dataclass(frozen=True, slots=True)
class _Kit:
    """What starting the new replicas and restarting the agents needs, found before anything
    starts: the cluster's security (none with --insecure-dev) and Slurm agents' environment."""

    secret: Path | None = None
    replica: TlsPaths | None = None
    bootstrap_token: str = ""
    agents: dict[str, TlsPaths] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    """A Slurm agent's: SLURM_CONF naming its Slurm."""


def _kit(state: ClusterState, agents: Sequence[AgentEntry]) -> _Kit:
    envs = _slurm_envs(state, agents)
    if state.insecure:
        return _Kit(envs=envs)
    from raftsched.dev import pki  # cryptography: loaded only when certificates are used

    tls_dir = Path(state.dir) / TLS_DIR_NAME
    try:
        replica = TlsPaths.of(pki.issued(tls_dir, pki.REPLICA_FILE_STEM))
        tls = {a.cluster: TlsPaths.of(pki.issued(tls_dir, pki.agent_file_stem(a.cluster)))
               for a in agents}
    except OSError as error:
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"the dev cluster's certificates in {tls_dir} are incomplete "
                              f"({error}); restart the cluster (raftsched dev down, dev up)"
                              ) from None
    if not Path(state.secret_file).is_file():
        raise DevClusterError(Code.FAILED_PRECONDITION,
                              f"the dev cluster's secret {state.secret_file} is missing; "
                              "restart the cluster (raftsched dev down, dev up)")
    token = state.user_tls.token if state.user_tls is not None else ""
    return _Kit(Path(state.secret_file), replica, token, tls, envs)


def _slurm_envs(state: ClusterState, agents: Sequence[AgentEntry]) -> dict[str, dict[str, str]]:
    """Each Slurm agent's environment, as `add-agent` gives it: the private Slurm's (refused if
    it no longer runs), else this one's, whose Slurm must answer for the agent's partition."""
    envs = {}
    for agent in agents:
        if (agent.executor or state.executor) != SLURM_EXECUTOR:
            continue
        env = _slurm_env(state)
        if state.slurm is None:
            _slurm_shape(AgentShape(agent.cluster, (), 0, 0, 0), agent.slurm_partition, env,
                         own=False)
        envs[agent.cluster] = env
    return envs


class _Grower(_Launch):
    """One `add-group`: spawns and records, waits, drains and restarts agents, moves."""

    activity = "the dev cluster was growing by a scheduler group"

    def __init__(self, state: ClusterState, timeout_s: float, spawn: Spawn, probe: Probe,
                 progress: Progress, clock: Callable[[], float],
                 sleep: Callable[[float], None], calls: GroupCalls, kit: _Kit) -> None:
        super().__init__(state, timeout_s, spawn, probe, progress, clock, sleep)
        self.calls, self.kit = calls, kit

    # -- step 1: the new group --------------------------------------------------------------

    def start_group(self, group: int) -> None:
        """Group `group`'s replicas, recorded as joining, then its leader and group record;
        on failure (or Ctrl-C) they are stopped and forgotten."""
        self._new_phase()
        count = len(self.state.all_groups[0])
        ports = pick_free_ports(3 * count)
        rafts = [f"{LOOPBACK}:{port}" for port in ports[:count]]
        grpcs = [f"{LOOPBACK}:{port}" for port in ports[count:2 * count]]
        run_dir = Path(self.state.replicas[0].data_dir).parent
        taken = {r.id for r in self.state.replicas} | {a.cluster for a in self.state.agents}
        taken |= {WEB_NAME} | {p.name for p in run_dir.iterdir()}
        names = new_replica_names(count, taken, len(self.state.replicas) + 1)
        topology = topology_text([*self.state.all_groups, grpcs])
        self.progress(f"starting group {group}: {count} replicas joining ({', '.join(names)}; "
                      f"logs in {self.state.dir}/{LOG_DIR_NAME})")
        started: list[ReplicaEntry] = []
        try:
            for index, name in enumerate(names):
                started.append(self._start_replica(run_dir / name, rafts, index, grpcs[index],
                                                   ports[2 * count + index], group, topology))
            self.wait_group(group)
        except BaseException:
            self._forget_replicas(started)
            raise

    def _start_replica(self, data_dir: Path, rafts: list[str], index: int, grpc: str,
                       metrics_port: int, group: int, topology: str) -> ReplicaEntry:
        """Replica `index` of the new group (named by its data dir), recorded at once."""
        data_dir.mkdir(parents=True)
        peers = [other for other in rafts if other != rafts[index]]
        argv = replica_command(rafts[index], grpc, peers, data_dir, self.kit.secret,
                               metrics_port, tls=self.kit.replica,
                               bootstrap_token=self.kit.bootstrap_token,
                               group=(group, group + 1), topology=topology, joining=True)
        log = Path(self.state.dir) / LOG_DIR_NAME / f"{data_dir.name}.log"
        pid, start = self._spawn(data_dir.name, argv, log)
        entry = ReplicaEntry(data_dir.name, pid, start, grpc, rafts[index], metrics_port,
                             str(data_dir), str(log), group, joining=True)
        self.state.replicas.append(entry)
        save_state(self.state)
        return entry

    def _forget_replicas(self, started: list[ReplicaEntry]) -> None:
        """Stop the replicas of `start_group` and forget them (kept if one survived SIGKILL:
        `down` retries)."""
        results = self._stop_children()
        if any(r.outcome is StopOutcome.SURVIVED for r in results):
            return
        for entry in started:
            self.state.replicas.remove(entry)
        save_state(self.state)

    def wait_group(self, group: int) -> None:
        """Group `group`'s leader, and its record of which group it is (the move needs it)."""
        self._new_phase()
        members = [r for r in self.state.replicas if r.group == group]
        servers = [r.grpc_address for r in members]
        for replica in members:  # an earlier run's too: a timeout shows the first one's log
            self.logs.setdefault(replica.id, replica.log)
        view = self._wait(f"a leader of group {group}",
                          lambda v: v is not None and v.from_leader,
                          suspect=lambda v: members[0].id, servers=servers)
        self.progress(f"{view.leader} leads group {group} (term {view.term}) after "
                      f"{self.clock() - self.phase_started_s:.1f} s")
        self._poll(f"group {group} to record which group it is", lambda: self.calls.recorded(
            servers), done=bool, suspect=lambda seen: members[0].id)

    # -- step 2: the agents -----------------------------------------------------------------

    def restart_agents(self, groups: int) -> list[str]:
        """Restart, one by one, every agent that serves fewer than `groups` groups."""
        agents = agents_to_restart(self.state, groups)
        if agents:
            self.progress(f"restarting {len(agents)} agent(s) to serve every group, one after "
                          f"the other: {', '.join(a.cluster for a in agents)}")
        for agent in agents:
            self._restart(agent)
        return [agent.cluster for agent in agents]

    def _restart(self, agent: AgentEntry) -> None:
        self._new_phase()
        name, groups = agent.cluster, self.state.all_groups
        served = self.state.served_groups(agent)
        alive = Identity(agent.pid, agent.start_time_ticks).is_running()
        before = {group: self._facts(name, groups[group]) for group in range(served)}
        drained = self._drain(name, groups, before, alive)
        try:
            if alive:
                self._wait_idle(agent, groups[:served])
                self._stop_agent(agent, groups[:served])
            else:
                self.progress(f"agent {name} (pid {agent.pid}) is not running: starting it "
                              "serving every group")
            self._start_agent(agent, groups)
            self._new_phase()
            self._wait_ready(name, groups, before)
        except BaseException:
            with contextlib.suppress(DevClusterError):
                self._undrain(name, groups, drained)
            raise
        self._undrain(name, groups, drained)

    def _facts(self, cluster: str, servers: list[str]) -> ClusterFacts | None:
        """What the leader of the group of `servers` knows of `cluster` (None: not
        registered there)."""
        view = self.probe(servers, self.state.client_tls)
        if view is None or not view.from_leader:
            first = next(r.id for r in self.state.replicas if r.grpc_address == servers[0])
            view = self._wait(f"the leader of {first}'s group to answer",
                              lambda v: v is not None and v.from_leader,
                              suspect=lambda v: first, servers=servers)
        if cluster not in view.clusters:
            return None
        return view.facts.get(cluster, ClusterFacts())

    def _drain(self, cluster: str, groups: list[list[str]],
               before: dict[int, ClusterFacts | None], alive: bool) -> list[int]:
        """Drain `cluster` where it is registered and not drained yet (if its agent runs); the
        groups where it is drained by this command now, to undrain afterwards."""
        ours = []
        for group, facts in before.items():
            if facts is None or (facts.draining and facts.drain_reason != DRAIN_REASON):
                continue  # not there, or drained by someone else (and so it stays)
            if not facts.draining and alive:
                self._call(f"draining {cluster} in group {group}",
                           partial(self.calls.drain, groups[group], cluster, True))
            ours.append(group)
        if ours:
            self.progress(f"{cluster} drained in group(s) {', '.join(map(str, ours))}: no new "
                          "work is placed there")
        return ours

    def _undrain(self, cluster: str, groups: list[list[str]], drained: list[int]) -> None:
        for group in drained:
            self._call(f"undraining {cluster} in group {group}",
                       partial(self.calls.drain, groups[group], cluster, False))
        if drained:
            self.progress(f"{cluster} undrained in group(s) {', '.join(map(str, drained))}")

    def _call(self, step: str, call: Callable[[], object]) -> None:
        try:
            call()
        except RaftschedError as error:
            raise DevClusterError(error.code, f"{step}: {error.message} (logs are in "
                                              f"{self.state.dir}/{LOG_DIR_NAME})") from None

    def _wait_idle(self, agent: AgentEntry, groups: list[list[str]]) -> None:
        """Until the leader of every group `agent` serves says its cluster holds nothing, and
        an agent of one group's metrics say it holds nothing either."""
        name = agent.cluster
        for group, servers in enumerate(groups):
            self._wait(f"{name} to run nothing in group {group}",
                       lambda v: v is not None and v.from_leader and _holds(v, name) == 0,
                       suspect=lambda v: name, servers=servers,
                       detail=lambda v: f"{_holds(v, name)} attempt(s) there"
                       if v is not None else "no replica answers")
        if len(groups) == 1 and agent.metrics_port:
            url = metrics_url(agent.metrics_port)
            self._poll(f"agent {name} to hold nothing ({url})",
                       lambda: self.calls.agent_work(agent.metrics_port),
                       done=lambda work: work is not None and work.idle,
                       suspect=lambda work: name, detail=lambda work: _work_text(work, url))

    def _stop_agent(self, agent: AgentEntry, served: list[list[str]]) -> None:
        """Stop the recorded agent; an agent of one group whose data dir still records an
        attempt (it needed SIGKILL) is started again as it was, and the error says so."""
        self.progress(f"stopping agent {agent.cluster} (pid {agent.pid})")
        result = stop_all([Recorded(agent.cluster,
                                    Identity(agent.pid, agent.start_time_ticks))])[0]
        if result.outcome is StopOutcome.SURVIVED:
            raise DevClusterError(Code.UNAVAILABLE,
                                  f"agent {agent.cluster} (pid {agent.pid}) is still running "
                                  f"after SIGKILL; see {agent.log}",
                                  log=agent.log, log_tail=log_tail(agent.log))
        problem = _one_group_leftovers(Path(agent.data_dir)) if len(served) == 1 else None
        if problem is not None:
            self._start_agent(agent, served)
            raise DevClusterError(Code.FAILED_PRECONDITION,
                                  f"agent {agent.cluster} stopped ({result.outcome}) with "
                                  f"attempts still recorded: {problem}; it was started again "
                                  "serving its one group, as before", log=agent.log,
                                  log_tail=log_tail(agent.log))

    def _start_agent(self, agent: AgentEntry, groups: list[list[str]]) -> None:
        """`agent` started again with `groups`' servers, its data dir, port and flags; its
        entry in the record replaced at once."""
        name = agent.cluster
        shape = AgentShape(name, agent.capabilities, agent.cpu, agent.memory_mb, agent.gpu,
                           agent.resources)
        argv = agent_command(shape, groups, Path(agent.data_dir),
                             agent.executor or self.state.executor, agent.metrics_port,
                             tls=None if self.state.insecure else self.kit.agents[name],
                             slurm_partition=agent.slurm_partition)
        self.progress(f"starting agent {name} serving {len(groups)} group(s) (log {agent.log})")
        pid, start = self._spawn(name, argv, Path(agent.log), self.kit.envs.get(name))
        index = next(i for i, a in enumerate(self.state.agents) if a.cluster == name)
        self.state.agents[index] = replace(agent, pid=pid, start_time_ticks=start,
                                           groups=len(groups))
        save_state(self.state)

    def _wait_ready(self, name: str, groups: list[list[str]],
                    before: dict[int, ClusterFacts | None]) -> None:
        """READY in every group; where it was registered, with a newer incarnation."""
        for group, servers in enumerate(groups):
            known = before.get(group)
            again = " (registered again)" if known is not None else ""
            self._wait(f"agent {name} to be READY in group {group}{again}",
                       _ready_again(name, known), suspect=lambda v: name,
                       detail=lambda v: _readiness(v, [name]), servers=servers)
        self.progress(f"{name} serves {len(groups)} groups after "
                      f"{self.clock() - self.phase_started_s:.1f} s")

    def stop_unrecorded(self) -> None:
        """Stop what this run spawned and did not record yet (Ctrl-C between the two)."""
        recorded = {process.identity for process in self.state.processes()}
        strays = [child for child in self.children.values()
                  if child.identity not in recorded]
        if strays:
            stop_all(strays)

    # -- step 3: the move ---------------------------------------------------------------------

    def move(self, group: int) -> MoveReport:
        """The shard move into `group`; then it is recorded as a client group."""
        groups = self.state.all_groups
        self.progress(f"moving shards to group {group} (docs/scale-out.md §5)")
        if not self.state.agents:
            self.progress(f"no agent is recorded: group {group} takes shards without a READY "
                          "compute cluster (there is none anywhere)")
        try:
            report = self.calls.move(groups, self.progress, not self.state.agents)
        except RaftschedError as error:
            raise DevClusterError(error.code, f"the shard move: {error.message}") from None
        self.state.replicas[:] = [replace(r, joining=False) for r in self.state.replicas]
        save_state(self.state)
        return report


def _ready_again(cluster: str,
                 known: ClusterFacts | None) -> Callable[[ClusterView | None], bool]:
    """READY, and registered by a newer incarnation than `known` (None: not known before)."""
    def ready(view: ClusterView | None) -> bool:
        return _all_ready(view, [cluster]) and (
            known is None or _incarnation(view, cluster) > known.incarnation)
    return ready


def _holds(view: ClusterView | None, cluster: str) -> int:
    facts = view.facts.get(cluster) if view is not None else None
    return facts.holds if facts is not None else 0


def _incarnation(view: ClusterView | None, cluster: str) -> int:
    facts = view.facts.get(cluster) if view is not None else None
    return facts.incarnation if facts is not None else 0


def _work_text(work: AgentWork | None, url: str) -> str:
    if work is None:
        return f"{url} does not answer with the agent's gauges"
    return (f"{work.running} running, {work.queued} queued, {work.reports_pending} report(s) "
            "not acked")


def _one_group_leftovers(data_dir: Path) -> str | None:
    """Why an agent of one group on `data_dir` could not start serving several (attempts its
    data dir still records: `agent.agent.group_store_dir`), or None."""
    from agent.agent import AgentError, group_store_dir
    from agent.store import StoreError

    try:
        group_store_dir(data_dir, 0)
    except (AgentError, StoreError) as error:
        return str(error)
    return None
