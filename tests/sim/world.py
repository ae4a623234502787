"""The simulated scheduler: replicas on a fake log, a real `Leader` per replica, an agent per
cluster, clients, and a seeded choice of what happens next at every step.

`run(seed, steps)` plays `steps` steps of faults and work, then heals everything and runs quiet
rounds until every job is terminal (bounded). It raises AssertionError on the first broken
property; `World.trace` holds the last steps for the failure message. Every loop is bounded; the
only time is the `ManualClock`; the only randomness is `random.Random(seed)` (the leader's
barrier nonce is a uuid, but it is only compared with itself and never reaches the state).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.core import AgentCore, CoreConfig
from agent.groups import SharedExecutor
from agent.model import Directives, Resources
from agent.session import SessionError
from raftsched import limits
from raftsched.clock import ManualClock
from raftsched.errors import Code, RaftschedError
from raftsched.replica.leader import Leader, LeaderConfig
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import invariants, snapshot
from raftsched.state.model import TERMINAL_JOB_STATES, AttemptState, State
from raftsched.state.outcome import Applied, Outcome, Rejected
from raftsched.state.results import JobSubmitted
from tests.sim.gateway import Gateway
from tests.sim.history import History
from tests.sim.log import Replica, SimLog
from tests.sim.machine import ADMISSION_PAUSE_REPORTS, CoreFactory, Machine

REPLICAS = 3
CLUSTERS: dict[str, tuple[tuple[str, ...], Resources]] = {
    "east": (("linux",), Resources(4000, 4096, 0)),
    "west": (("linux", "ssd"), Resources(4000, 4096, 0)),
    "gpu": (("gpu", "linux"), Resources(4000, 4096, 2)),
}
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "": ("east", "gpu", "west"), "linux": ("east", "gpu", "west"), "ssd": ("west",),
    "gpu": ("gpu",),
}
"""A task's requirement -> the clusters that satisfy it (so every task is placeable)."""
MAX_RUNNING_ATTEMPTS = {"west": 3}
"""Clusters whose agent runs fewer attempts at once than its capacity holds (the scheduler
does not know this bound: the agent refuses past it)."""
SHARED_PARTITIONS = ("east",)
"""Clusters whose executor shares its partition with other users (as Slurm's may): what it sees
free changes under the scheduler's feet, and admission refuses what no longer fits."""
TENANTS = ("alpha", "beta")
KEYS = ("k1", "k2", "k3", "k4")
MAX_TASKS_PER_JOB = 5
MAX_JOBS = 40
SCHEDULE_ID = "tick"
SCHEDULE_EVERY_MS = 5_000
SCHEDULE_WINDOW_MS = 120_000
"""Longer than the longest clock jump (65 s) plus a leader change: no time falls out."""
SCHEDULE_PROPOSE_TRIES = 50
"""Submissions stop here so that a run's state stays small."""
QUIET_ROUNDS = 800
"""Bound of the healing phase: rounds (one simulated second each) for every job to finish."""
TRACE_STEPS = 60


@dataclass
class Client:
    """A client's submission waiting to be retried after an unknown outcome."""

    doc: dict[str, Any]
    tries: int = 0


@dataclass
class World:
    seed: int
    rng: random.Random = field(init=False)
    clock: ManualClock = field(default_factory=ManualClock)
    history: History = field(default_factory=History)
    trace: deque[str] = field(default_factory=lambda: deque(maxlen=TRACE_STEPS))
    step_number: int = 0
    core_factory: CoreFactory = AgentCore
    """The agent core every machine runs: the real one (a test may inject a broken one)."""
    schedules: bool = False
    """Run a schedule (issue 25) through it all: `every: 5s`, overlap allow, a catch-up window
    longer than any clock jump, so every nominal time must fire exactly once."""
    group: int = 0
    """With several groups (`tests.sim.groups`): which one this world's log and leaders are."""
    hubs: dict[str, SharedExecutor] | None = None
    """With several groups: each cluster's executor, shared by every group's machine there."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.log = SimLog(random.Random(self.rng.getrandbits(64)), REPLICAS)
        self.log.observers.append(self.history.observe)
        self.leaders: list[Leader] = []
        self.gateways: list[Gateway] = []
        for replica in self.log.replicas:
            node = self.log.node(replica.index)
            leader = Leader(node, self.clock, random.Random(self.rng.getrandbits(64)),
                            LeaderConfig(replica.address, f"grpc-{replica.index}:9000",
                                         suspect_after_s=5, lost_after_s=30,
                                         tick_interval_s=1),
                            version=_applied_count(replica))
            self.leaders.append(leader)
            self.gateways.append(Gateway(node, leader, self.clock,
                                         random.Random(self.rng.getrandbits(64))))
        self.agents = [Machine(_core_config(cid, caps, capacity), self.clock,
                               random.Random(self.rng.getrandbits(64)), self.history,
                               self.core_factory, shared=cid in SHARED_PARTITIONS,
                               hub=None if self.hubs is None else self.hubs[cid],
                               group=self.group)
                       for cid, (caps, capacity) in CLUSTERS.items()]
        self.job_prefix = "job" if self.hubs is None else f"g{self.group}job"
        self.down_steps: dict[str, int] = {}
        self.clients: list[Client] = []
        self.jobs_submitted = 0
        self.digests: dict[int, str] = {}
        self.checked: dict[str, tuple[int, int]] = {}
        self.key_wires: dict[tuple[str, str], list[Any]] = {}

    # -- running ---------------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        self._boot()
        actions = self._actions()
        names = list(actions)
        weights = [actions[n][0] for n in names]
        for _ in range(steps):
            self.step_number += 1
            name = self.rng.choices(names, weights)[0]
            self.note(name)
            self.history.count(f"step_{name}")
            actions[name][1]()
            self._background()
            self.check()
        self.heal_and_finish()

    def note(self, text: str) -> None:
        self.trace.append(f"step {self.step_number}: {text}")

    def _boot(self) -> None:
        """The first leader takes office; every agent starts and registers (no faults yet)."""
        self._leader_rounds()
        for agent in self.agents:
            agent.start()
            for _ in range(5):
                if not agent.need_register:
                    break
                agent.register(self.gateways[self.log.leader])
        self.check()
        if self.hubs is not None:  # what a group's first leader commits (`replica --groups`)
            groups = next(iter(self.hubs.values())).groups
            self._schedule_set(c.GroupSet(self.group, groups, limits.VIRTUAL_SHARDS,
                                          self.clock.now_ms()))
        if self.schedules:
            self._schedule_set(c.ScheduleCreate(
                SCHEDULE_ID, doc_to_wire({"name": "tick", "allow_unschedulable": True,
                                          "tasks": [{"id": "t", "command": ["true"]}]}),
                [], SCHEDULE_EVERY_MS, 0, 0, "allow", SCHEDULE_WINDOW_MS, 0,
                self.clock.now_ms()))

    def _actions(self) -> dict[str, tuple[float, Callable[[], None]]]:
        return {
            "submit": (8, self.submit),
            "client_retry": (3, self.client_retry),
            "cancel": (1.5, self.cancel),
            "leader_round": (18, self._leader_rounds),
            "agent_beat": (20, self.agent_beat),
            "agent_delayed": (4, self.agent_delayed),
            "agent_replay": (6, self.agent_replay),
            "agent_progress": (12, self.agent_progress),
            "agent_flush": (14, self.agent_flush),
            "clock": (10, self.advance_clock),
            "clock_jump": (0.8, self.jump_clock),
            "leader_change": (1.5, self.leader_change),
            "agent_crash": (1.2, self.agent_crash),
            "agent_partition": (1.2, self.agent_partition),
            "snapshot_install": (1.5, self.snapshot_install),
        }

    def _background(self) -> None:
        """Every step: followers apply at their own pace, deposed leaders get closer to noticing,
        crashed agents to their restart, partitions to their end."""
        self.log.lag_step()
        self.log.step()
        for agent in self.agents:
            if agent.partitioned_steps > 0:
                agent.partitioned_steps -= 1
            left = self.down_steps.get(agent.cluster_id)
            if left is not None:
                if left <= 1:
                    del self.down_steps[agent.cluster_id]
                    agent.start()
                    self.note(f"  {agent.cluster_id} restarted (incarnation {agent.incarnation})")
                else:
                    self.down_steps[agent.cluster_id] = left - 1

    # -- actions: clients ------------------------------------------------------------------------

    def submit(self) -> None:
        if self.jobs_submitted >= MAX_JOBS:
            return
        self.jobs_submitted += 1
        self._submit(self._random_job(), f"{self.job_prefix}{self.jobs_submitted}")

    def client_retry(self) -> None:
        if not self.clients:
            return
        client = self.clients.pop(self.rng.randrange(len(self.clients)))
        client.tries += 1
        doc = client.doc
        if self.rng.random() < 0.15:
            doc = {**doc, "priority": (doc.get("priority", 50) + 1) % 100}  # a different spec
        self.jobs_submitted += 1
        self._submit(doc, f"{self.job_prefix}{self.jobs_submitted}")

    def _submit(self, doc: dict[str, Any], job_id: str) -> None:
        key = doc.get("idempotency_key")
        tenant = doc.get("tenant", "default")
        wire = doc_to_wire(doc)
        outcome = self._client_propose(c.JobSubmit(job_id, wire, self.clock.now_ms()))
        self.note(f"  submit {job_id} key={key} -> {outcome!r}")
        if isinstance(outcome, Applied):
            result = outcome.result
            assert isinstance(result, JobSubmitted), result
            if key is not None:
                first = self.key_wires.setdefault((tenant, key), wire)
                assert result.created or first == wire, \
                    f"a different spec under key {key!r} was taken for job {result.job_id}"
            self.history.on_submit_acked(result.job_id, len(self.log.entries), tenant, key)
        elif isinstance(outcome, Rejected):
            unschedulable = outcome.code == Code.FAILED_PRECONDITION \
                and not doc.get("allow_unschedulable") and "allow_unschedulable" in outcome.reason
            assert unschedulable or (outcome.code == Code.ALREADY_EXISTS and key is not None), \
                outcome
        elif key is not None:
            self.clients.append(Client(doc))  # unknown: retry with the same key

    def cancel(self) -> None:
        if not self.history.acked_jobs:
            return
        job_id = self.rng.choice(sorted(self.history.acked_jobs))
        outcome = self._client_propose(c.JobCancel(job_id, self.clock.now_ms(), "sim"))
        self.note(f"  cancel {job_id} -> {outcome!r}")

    def _client_propose(self, command: c.Command) -> Outcome | None:
        """Through a replica believing it leads (maybe a deposed one); None if unknown."""
        candidates = [i for i, lead in enumerate(self.leaders) if lead.leading()]
        if not candidates:
            return None
        index = self.rng.choice(candidates)
        try:
            return self.log.node(index).propose(c.encode(command), 5.0)
        except RaftschedError:
            self.history.count("client_unknown")
            return None

    def _random_job(self) -> dict[str, Any]:
        rng = self.rng
        tasks = []
        for i in range(rng.randint(1, MAX_TASKS_PER_JOB)):
            deps = sorted({f"t{rng.randint(0, i - 1)}" for _ in range(rng.randint(0, 2))}) \
                if i else []
            tasks.append(self._random_task(f"t{i}", deps))
        doc: dict[str, Any] = {
            "name": "sim", "tenant": rng.choice(TENANTS), "priority": rng.randint(0, 100),
            "failure_policy": rng.choice(["fail_fast", "skip_downstream", "continue"]),
            "allow_unschedulable": rng.random() < 0.7,
            "scoring": rng.choice(["binpack", "spread"]),
            "tasks": tasks,
        }
        if rng.random() < 0.4:
            doc["idempotency_key"] = rng.choice(KEYS) + f"-{rng.randint(0, 5)}"
        return doc

    def _random_task(self, task_id: str, deps: list[str]) -> dict[str, Any]:
        rng = self.rng
        requirement = rng.choice(sorted(REQUIREMENTS))
        task: dict[str, Any] = {
            "id": task_id, "command": ["true"], "depends_on": deps,
            "resources": {"cpu": rng.choice([0.5, 1, 2]), "memory_mb": rng.choice([64, 512]),
                          "gpu": rng.choice([0, 1]) if requirement == "gpu" else 0},
            "retry": {"max_attempts": rng.randint(1, 3), "backoff_s": rng.choice([0, 0.5, 2]),
                      "backoff_max_s": 5, "jitter": rng.choice([0, 0.5]),
                      "non_retryable_exit_codes": [2]},
            "on_lost": rng.choice(["replace", "wait"]),
            "trigger": rng.choice(["all_success", "all_success", "all_done"]),
        }
        if requirement:
            task["requires"] = [requirement]
        if rng.random() < 0.35:  # pinned: its retries come back here
            task["cluster"] = rng.choice(REQUIREMENTS[requirement])
        if rng.random() < 0.15:
            task["timeout_s"] = rng.choice([2, 20])
        if deps and rng.random() < 0.3:  # task data: templates, and sometimes a for_each
            upstream = deps[0]
            task["command"] = ["true", f"{{{{ tasks.{upstream}.outputs.fence }}}}", "{{ job.id }}"]
            if rng.random() < 0.5:
                task["for_each"] = f"{{{{ tasks.{upstream}.outputs.files }}}}"
                task["env"] = {"ITEM": "{{ item }}", "INDEX": "{{ index }}"}
        return task

    # -- actions: leaders and the log ------------------------------------------------------------

    def _leader_rounds(self) -> None:
        """A round of every replica's leader loop (a follower's returns at once)."""
        for index, leader in enumerate(self.leaders):
            if not self.log.node(index).is_leader():
                continue
            try:
                leader._round()
            except RaftschedError as error:  # not leader any more, or an unknown outcome
                self.note(f"  round on replica {index}: {error.code.value}")

    def leader_change(self) -> None:
        new = self.rng.choice([r.index for r in self.log.replicas if r.index != self.log.leader])
        deposed = self.rng.choice([0, 0, 2, 6, 15])
        self.note(f"  leader {self.log.leader} -> {new}, term {self.log.term + 1}, old leader "
                  f"deposed for {deposed} steps")
        self.log.change_leader(new, deposed)

    def snapshot_install(self) -> None:
        target = self.log.install_snapshot()
        if target is not None:
            self.note(f"  replica {target.index} installed a snapshot at {target.applied}")

    # -- actions: agents -------------------------------------------------------------------------

    def _agent(self) -> Machine:
        return self.rng.choice(self.agents)

    def agent_beat(self) -> None:
        self._beat(self._agent())

    def _beat(self, agent: Machine) -> None:
        if not agent.reachable:
            return
        gateway = self.gateways[agent.target]
        if agent.need_register:  # the real heartbeat loop: register, then beat at once
            ok = agent.register(gateway)
            self.note(f"  {agent.cluster_id} registers at replica {gateway.replica_index}: {ok}")
            if not ok:
                return
            gateway = self.gateways[agent.target]
        directives = agent.beat(gateway)
        if directives is None:
            return
        self.note(f"  {agent.cluster_id} beat at replica {gateway.replica_index}: term "
                  f"{directives.term}, assign {[a.fence for a in directives.assignments]}, "
                  f"kill {[k.fence for k in directives.kills]}")
        roll = agent.rng.random()
        faults = agent.faults
        if roll < faults.lost:
            return
        if roll < faults.lost + faults.delayed:
            agent.in_flight.append(directives)
            return
        self._handle(agent, directives)
        agent.answered(directives)
        if roll < faults.lost + faults.delayed + faults.duplicated:
            self._handle(agent, directives)

    def _handle(self, agent: Machine, directives: Directives) -> bool:
        """The agent's core acts on an answer; an agent that died doing so restarts later."""
        handled = agent.handle(directives)
        if not agent.up and agent.cluster_id not in self.down_steps:
            self.down_steps[agent.cluster_id] = self.rng.randint(1, 30)
            self.note(f"  {agent.cluster_id} crashed while starting an attempt")
        return handled

    def agent_delayed(self) -> None:
        """A delayed heartbeat answer reaches its agent, or a delayed copy of a report batch
        reaches a replica (its answer goes nowhere)."""
        waiting = [a for a in self.agents if a.in_flight or a.in_flight_reports]
        if not waiting:
            return
        agent = self.rng.choice(waiting)
        if agent.in_flight_reports and (not agent.in_flight or self.rng.random() < 0.5):
            incarnation, batch = agent.in_flight_reports.pop(0)
            gateway = self.rng.choice(self.gateways)
            try:
                gateway.report(agent.cluster_id, incarnation, batch)
                self.note(f"  a delayed report batch of {agent.cluster_id} reached replica "
                          f"{gateway.replica_index}: {[(r.kind.name, r.fence) for r in batch]}")
            except SessionError:
                pass
            return
        directives = agent.in_flight.pop(self.rng.randrange(len(agent.in_flight)))
        if agent.up:
            handled = self._handle(agent, directives)
            self.note(f"  {agent.cluster_id} gets a delayed answer of term {directives.term}: "
                      f"{'handled' if handled else 'ignored'}")

    def agent_replay(self) -> None:
        """An answer an agent handled a while ago is delivered to it again. The network is an
        adversary here: mostly it picks one of the current term that assigns a task a fence
        lower than one the agent saw since (only the fences refuse it; an older term's answer
        is refused by the term rule)."""
        candidates = [(agent, d) for agent in self.agents if agent.up for d in agent.recent
                      if d.term == agent.fences.term() and any(
                          a.fence < (agent.fences.fence(a.task_key) or 0) for a in d.assignments)]
        if not candidates or self.rng.random() < 0.2:
            agent = self._agent()
            candidates = [(agent, d) for d in agent.recent] if agent.up else []
        if not candidates:
            return
        agent, directives = candidates[self.rng.randrange(len(candidates))]
        handled = self._handle(agent, directives)
        self.note(f"  {agent.cluster_id} gets an old answer again (term {directives.term}, assign "
                  f"{[a.fence for a in directives.assignments]}): "
                  f"{'handled' if handled else 'ignored'}")

    def agent_progress(self) -> None:
        for agent in self.agents:
            agent.progress()
            agent.collect()
            if not agent.up and agent.cluster_id not in self.down_steps:  # died starting one
                self.down_steps[agent.cluster_id] = self.rng.randint(1, 30)
                self.note(f"  {agent.cluster_id} crashed while starting a queued attempt")

    def agent_flush(self) -> None:
        agent = self._agent()
        if agent.reachable:
            agent.flush(self.gateways[agent.target])

    def agent_crash(self) -> None:
        agent = self._agent()
        if not agent.up:
            return
        machine = self.rng.random() < 0.4
        agent.crash(machine=machine)
        self.down_steps[agent.cluster_id] = self.rng.randint(1, 30)
        self.note(f"  {agent.cluster_id} crashed (machine={machine})")

    def agent_partition(self) -> None:
        agent = self._agent()
        agent.partitioned_steps = self.rng.randint(5, 80)
        self.note(f"  {agent.cluster_id} partitioned for {agent.partitioned_steps} steps")

    # -- actions: time ---------------------------------------------------------------------------

    def advance_clock(self) -> None:
        self.clock.advance(self.rng.choice([0.1, 0.25, 0.5, 1.0, 2.0]))

    def jump_clock(self) -> None:
        seconds = self.rng.choice([6, 12, 31, 65])
        self.note(f"  clock +{seconds} s")
        self.clock.advance(seconds)

    # -- checks ----------------------------------------------------------------------------------

    def check(self) -> None:
        """After every step: invariants on every replica; replicas that applied the same prefix
        hold byte-identical snapshots; acknowledged jobs are on every replica that applied their
        entry. A replica that applied nothing since its last check is skipped (reads are pure;
        the digest comparison would catch one that was not, at its next apply)."""
        states = [(f"replica {r.index}", r.state, r.applied, r.snapshots_installed)
                  for r in self.log.replicas]
        states.append(("oracle", self.log.oracle, len(self.log.entries), 0))
        for who, state, applied, installs in states:
            if self.checked.get(who) == (applied, installs):
                continue
            self.checked[who] = (applied, installs)
            invariants.check_invariants(state)
            _check_outputs(state, who)
            digest = hashlib.sha256(snapshot.dump(state)).hexdigest()
            expected = self.digests.setdefault(applied, digest)
            assert digest == expected, f"{who} after {applied} entries has snapshot {digest}, " \
                                       f"another replica had {expected}"
            self.history.check_acked_present(state, applied, who)

    # -- healing and liveness --------------------------------------------------------------------

    # -- schedules -------------------------------------------------------------------------------

    def _schedule_set(self, command: c.Command) -> None:
        """Propose until applied (a client retrying an unknown outcome; bounded)."""
        for _ in range(SCHEDULE_PROPOSE_TRIES):
            outcome = self._client_propose(command)
            self.note(f"  {type(command).__name__} -> {outcome!r}")
            if isinstance(outcome, Applied):
                return
            self._leader_rounds()
            self.log.step()
        raise AssertionError(f"{command!r} was not applied in {SCHEDULE_PROPOSE_TRIES} tries")

    def check_schedule(self) -> None:
        """Every nominal time from the creation to the last one passed has exactly one run (the
        catch-up window is longer than any downtime here, overlap is allow)."""
        schedule = self.log.oracle.schedules[SCHEDULE_ID]
        first = schedule.created_ms - schedule.created_ms % SCHEDULE_EVERY_MS + SCHEDULE_EVERY_MS
        due = len(range(first, schedule.last_nominal_ms + 1, SCHEDULE_EVERY_MS))
        refused = schedule.skipped.get("refused", 0)
        assert schedule.fired + refused == due and set(schedule.skipped) <= {"refused"}, \
            f"schedule: {due} times due, {schedule.fired} fired, skipped {schedule.skipped}"
        nominals = [nominal for nominal, _ in schedule.runs]
        assert len(nominals) == len(set(nominals)), f"a time ran twice: {nominals}"
        self.history.count("schedule_fired", schedule.fired)

    def heal_and_finish(self) -> None:
        """Faults stop; every agent comes back; quiet rounds until every job is terminal."""
        self.heal()
        for number in range(QUIET_ROUNDS):
            if self.finish_round():
                self.note(f"all jobs terminal after {number + 1} quiet rounds")
                self.history.count("quiet_rounds", number + 1)
                break
        else:
            raise AssertionError(f"liveness: jobs not terminal after {QUIET_ROUNDS} quiet "
                                 f"rounds: {self._open_jobs()}")
        self.check_final()

    def heal(self) -> None:
        self.note("heal")
        self.log.heal()
        if self.schedules:  # no new runs while the rest drains
            self._schedule_set(c.ScheduleSet(SCHEDULE_ID, True, "sim ends", self.clock.now_ms()))
            self.check_schedule()
        for agent in self.agents:
            agent.faults.quiet()
            agent.partitioned_steps = 0
            if not agent.up:
                self.down_steps.pop(agent.cluster_id, None)
                agent.start()

    def finish_round(self) -> bool:
        """One quiet round and the checks; True once every job is terminal."""
        self.step_number += 1
        self._quiet_round()
        self.check()
        return self._all_terminal() and not self.clients

    def check_final(self) -> None:
        """Every replica applies the whole log and holds every acknowledged job."""
        self.log.catch_up_all()
        self.check()
        for replica in self.log.replicas:
            assert replica.applied == len(self.log.entries)
            self.history.check_acked_present(replica.state, replica.applied,
                                             f"replica {replica.index}")

    def _quiet_round(self) -> None:
        self._leader_rounds()
        clients, self.clients = self.clients, []
        for client in clients:  # one retry each; an unknown outcome is retried next round
            self.jobs_submitted += 1
            self._submit(client.doc, f"{self.job_prefix}{self.jobs_submitted}")
        for agent in self.agents:
            while agent.in_flight:
                agent.handle(agent.in_flight.pop(0))  # no faults now: it cannot crash
            agent.in_flight_reports.clear()  # lost for good
            self._beat(agent)
            agent.progress()
            agent.collect()
            for _ in range(20):
                if agent.flush(self.gateways[agent.target]) and not agent.outbox.count():
                    break
        self._leader_rounds()
        self.log.lag_step()
        self.clock.advance(1.0)

    def _all_terminal(self) -> bool:
        return all(job.state in TERMINAL_JOB_STATES for job in self.log.oracle.jobs.values())

    def _open_jobs(self) -> list[str]:
        lines = []
        for job in self.log.oracle.jobs.values():
            if job.state in TERMINAL_JOB_STATES:
                continue
            tasks = ", ".join(
                f"{t.spec.id}:{t.state.name}"
                + (f"@{t.current.cluster_id}#{t.current.fence}:{t.current.state.name}"
                   if t.current else "")
                for t in job.tasks)
            lines.append(f"{job.id} {job.state.name} [{tasks}]")
        clusters = [f"{cl.id}:{cl.status.name} live={sorted(cl.live)} kills={sorted(cl.kills)}"
                    for cl in self.log.oracle.clusters.values()]
        return lines[:10] + clusters


def _check_outputs(state: State, who: str) -> None:
    """Every kept output came from the fence that succeeded (the simulated tasks write their own
    fence into their outputs), and no for_each expanded past its bounds."""
    for job in state.jobs.values():
        assert job.instance_count <= limits.MAX_INSTANCES_PER_JOB, (who, job.id)
        for task in job.tasks:
            assert task.instances is None or len(task.instances) <= limits.MAX_FOR_EACH_ITEMS
            for attempt in task.attempts:
                if attempt.outputs is None:
                    continue
                kept = json.loads(attempt.outputs)["fence"]
                assert attempt.state == AttemptState.SUCCEEDED and kept == attempt.fence, \
                    f"{who}: {job.id}/{task.spec.id} fence {attempt.fence} " \
                    f"({attempt.state.name}) keeps the outputs of fence {kept}"


def _core_config(cluster_id: str, capabilities: tuple[str, ...],
                 capacity: Resources) -> CoreConfig:
    return CoreConfig(cluster_id, capacity, capabilities, heartbeat_wait_ms=0,
                      max_running_attempts=MAX_RUNNING_ATTEMPTS.get(cluster_id,
                                                                 limits.MAX_RUNNING_ATTEMPTS),
                      admission_pause_reports=ADMISSION_PAUSE_REPORTS)


def _applied_count(replica: Replica) -> Callable[[], int]:
    """The leader's `version`: it moves whenever the replica's applied state changes."""
    return lambda: replica.applied


def run(seed: int, steps: int, core_factory: CoreFactory = AgentCore) -> World:
    world = World(seed, core_factory=core_factory)
    world.run(steps)
    return world


def summary(world: World) -> str:
    counts = ", ".join(f"{k}={v}" for k, v in sorted(world.history.counts.items()))
    return f"seed {world.seed}: {len(world.log.entries)} entries, term {world.log.term}; {counts}"
