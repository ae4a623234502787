"""The scale-out study (issue 27): K scheduler groups sharing 1,000 agents, in simulated time.

Each group is the real state machine and the real `Leader` (placement, ticks, health) and the
real `AgentGateway` (heartbeats, reports) over one simulated log whose commits are capped at
what one group reaches on this machine (`GROUP_ITEMS_PER_S`: jobs, assignments and reports per
second). Every agent runs one real `AgentCore` per group over one shared executor
(`agent.groups.SharedExecutor`); its simulated processes sleep for the task's duration in
simulated time. Clients keep every group's backlog full, for three tenants of weights 1, 2 and
3, each job in the group its shard names (a hash of its id, as a real submit would be routed).

What it measures, per K, after a warm-up:
- placements/s (assignments committed, all groups), and its ratio to K x one group's rate
  (K = 1, same run);
- utilisation (attempts holding a slot / slots, sampled every tick);
- capacity rejections (assignments the agents refused for room, / placements);
- each tenant's share of the slots its attempts hold, against its weight's share.

Two workloads: `paced` sizes the tasks' duration so that K groups at one group's full rate keep
the agents about 80 % busy (the throughput target is judged there); `contended` gives every
tenant more work than the cluster holds (the fair-share target is judged there). Only the
seeded `random.Random` and the `ManualClock`: a run is reproducible from its seed.
"""

from __future__ import annotations

import contextlib
import random
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent.core import AgentCore, CoreConfig, Decision
from agent.executors import Launch
from agent.fence import MemoryFenceStore
from agent.groups import OfferRule, SharedExecutor
from agent.model import (
    Assignment,
    AttemptRecord,
    Completion,
    Directives,
    Registered,
    Resources,
)
from agent.outbox import MemoryOutbox
from raftsched import limits
from raftsched.clock import ManualClock
from raftsched.errors import RaftschedError
from raftsched.replica.gateway import AgentGateway
from raftsched.replica.leader import Leader, LeaderConfig
from raftsched.replica.raft.errors import OutcomeUnknown
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm
from raftsched.state.model import State
from raftsched.state.outcome import Applied, Outcome
from raftsched.state.results import AssignResult

T = TypeVar("T")

GROUP_ITEMS_PER_S = 19_000
"""What one group commits per second here: one 10,000-task job runs ~6,300 no-op tasks/s
through one group (docs/benchmarks.md), and a task is about three items of the log (its
assignment, its STARTED and FINISHED reports) plus its share of the submit."""
AGENTS = 1_000
AGENT_CAPACITY = Resources(32_000, 131_072, 0)
TASK_RESOURCES = Resources(1_000, 1_024, 0)
"""32 tasks fill an agent (an agent fronts a whole compute cluster: a Slurm partition, a rack).
With 1,000 of them, 16 groups at full rate keep them 80 % busy with tasks of ~0.34 s, several
ticks long (with 8-slot agents they were 84 ms, under two ticks: the tick, not the scheduler,
then bounded the rate)."""
SLOTS_PER_AGENT = 32
QUEUE_DEPTH = 0
"""The agents' local queue (late binding) in the study's main rows: none, as in the rows
measured before queues worked with several groups, so that they compare. `Study.queue_depth`
(`scripts/bench scaleout --queue-depth`) runs the queue: each group's core keeps its own,
started in that group's turn (`agent.groups.SharedExecutor.may_start`), and the planner marks
what it queues (`Placement.queued`)."""
TICK_S = 0.05
"""Simulated time between two rounds of every leader, agent and client."""
TENANTS = {"alpha": 1, "beta": 2, "gamma": 3}
TASKS_PER_JOB = 50
BACKLOG_TASKS_PER_TENANT = 1_500
"""Each tenant keeps this many tasks waiting in every group (clients top it up every tick)."""
ITEMS_PER_TASK = 4
"""Log items a task costs: its part of the submit, its assignment, STARTED, FINISHED."""
UTILISATION_TARGET = 0.8


class StudyLog:
    """One group's log: the real FSM over one state, committing at most its item budget (a
    proposal past it is refused before commit: the proposer hears 'unknown' and tries again,
    as it would from a busy pysyncobj). Also the `RaftPort` the group's leader and gateway use."""

    def __init__(self, items_per_s: float) -> None:
        self.state = State()
        self.items_per_s = items_per_s
        self.budget = 0.0
        self.applied = 0
        self.placements = 0
        self.items = 0
        self.unlimited = True
        """While agents register (the study's set-up), no budget applies."""

    def refill(self, seconds: float) -> None:
        cap = self.items_per_s * TICK_S * 2
        self.budget = min(cap, self.budget + self.items_per_s * seconds)

    # -- RaftPort, as far as the leader and the gateway use it ---------------------------------

    def is_leader(self) -> bool:
        return True

    def term(self) -> int:
        return 1

    def leader_address(self) -> str:
        return "leader:7000"

    def read(self, fn: Callable[[State], T]) -> T:
        return fn(self.state)

    def submit(self, data: bytes) -> _Proposal:
        return _Proposal(self, data)

    def propose(self, data: bytes, timeout_s: float) -> Outcome:
        if not self.unlimited and self.budget <= 0:
            raise OutcomeUnknown("simulated: the group's log is at its rate")
        outcome = fsm.apply(self.state, data)
        self.applied += 1
        items = 1
        if isinstance(outcome, Applied) and isinstance(outcome.result, AssignResult):
            self.placements += len(outcome.result.assigned)
            items += len(outcome.result.assigned)
        else:
            command = c.decode(data)
            if isinstance(command, c.ReportBatch):
                items += len(command.items)
            elif isinstance(command, c.JobSubmit):
                items += TASKS_PER_JOB
        self.items += items
        if not self.unlimited:
            self.budget -= items
        return outcome


class _Proposal:
    def __init__(self, log: StudyLog, data: bytes) -> None:
        self._log, self._data = log, data

    def outcome(self, timeout_s: float) -> Outcome:
        return self._log.propose(self._data, timeout_s)


@dataclass
class _Process:
    end_ms: int
    killed: bool = False


class StudyExecutor:
    """Simulated processes: each sleeps for its task's duration (its command's second word, in
    seconds) in simulated time, then succeeds."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self.processes: dict[int, _Process] = {}
        self.tenant: dict[int, str] = {}

    def attempt_dir(self, fence: int) -> str:
        return ""

    def start(self, assignment: Assignment) -> Launch:
        duration_ms = int(float(assignment.command[1]) * 1000)
        self.processes[assignment.fence] = _Process(self._clock.now_ms() + duration_ms)
        self.tenant[assignment.fence] = assignment.tenant
        return Launch("", wrapper_pid=1)

    def adopt(self, record: AttemptRecord) -> bool:
        return False

    def kill(self, fence: int) -> bool:
        process = self.processes.get(fence)
        if process is None:
            return False
        process.killed = True
        return True

    def poll(self) -> list[Completion]:
        now = self._clock.now_ms()
        done = [f for f, p in self.processes.items() if p.killed or p.end_ms <= now]
        completions = []
        for fence in done:
            process = self.processes.pop(fence)
            self.tenant.pop(fence, None)
            completions.append(Completion(fence, None if process.killed else 0,
                                          killed=process.killed))
        return completions

    def observed_free(self) -> Resources | None:
        return None


class StudyAgent:
    """One cluster's agent: a core per group over one shared executor, beating every group's
    leader each tick, reporting what finished, handling the answers."""

    def __init__(self, cluster_id: str, clock: ManualClock, groups: int, rule: OfferRule,
                 queue_depth: int = QUEUE_DEPTH) -> None:
        self.cluster_id = cluster_id
        self.executor = StudyExecutor(clock)
        self.shared = SharedExecutor(self.executor, cluster_id, AGENT_CAPACITY, groups, rule,
                                     clock=clock)
        config = CoreConfig(cluster_id, AGENT_CAPACITY, ("linux",), queue_depth=queue_depth)
        self.cores: list[AgentCore] = []
        for group in range(groups):
            view = self.shared.view(group)
            core = AgentCore(config, clock, MemoryFenceStore(), MemoryOutbox(), view,
                             offer=view.offer, may_start=view.may_start)
            core.start()
            self.cores.append(core)
        self.decisions: Counter[Decision] = Counter()

    def register(self, gateways: list[AgentGateway]) -> None:
        for core, gateway in zip(self.cores, gateways, strict=True):
            registered = gateway.register(core.registration())
            core.registered(Registered(registered.term, "leader:7000", registered.lost,
                                       registered.kills, registered.stop))

    def tick(self, gateways: list[AgentGateway]) -> None:
        for group, (core, gateway) in enumerate(zip(self.cores, gateways, strict=True)):
            _, started = core.collect_and_start()
            self.decisions.update(started)
            self._flush(core, gateway)
            beat = core.next_beat()
            try:
                directives = gateway.heartbeat(beat)
            except RaftschedError:
                continue
            self._handle(group, core, directives, beat.free or Resources())

    def _handle(self, group: int, core: AgentCore, directives: Directives,
                offered: Resources) -> None:
        self.decisions.update(core.handle(directives))
        self.shared.answered(group, offered, len(directives.assignments))

    def _flush(self, core: AgentCore, gateway: AgentGateway) -> None:
        batch = core.pending(limits.REPORT_BATCH_MAX)
        if not batch:
            return
        try:
            reported = gateway.report(self.cluster_id, core.incarnation, batch,
                                      core.observation())
        except (RaftschedError, OutcomeUnknown):
            return
        core.reported(batch, reported)


@dataclass
class Figures:
    groups: int
    rule: str
    workload: str
    seconds: float
    placements: int
    capacity_rejections: int
    utilisation: float
    tenant_shares: dict[str, float]
    per_group_placements: list[int]
    turn_passes: int
    task_s: float
    queue_depth: int = 0

    @property
    def placements_per_s(self) -> float:
        return self.placements / self.seconds

    @property
    def rejection_rate(self) -> float:
        return self.capacity_rejections / max(1, self.placements)

    def as_dict(self) -> dict[str, Any]:
        return {"groups": self.groups, "rule": self.rule, "workload": self.workload,
                "seconds": self.seconds, "placements": self.placements,
                "placements_per_s": round(self.placements_per_s, 1),
                "capacity_rejections": self.capacity_rejections,
                "rejection_rate": round(self.rejection_rate, 4),
                "utilisation": round(self.utilisation, 3),
                "tenant_shares": {t: round(s, 3) for t, s in self.tenant_shares.items()},
                "per_group_placements": self.per_group_placements,
                "turn_passes": self.turn_passes, "task_s": self.task_s,
                "queue_depth": self.queue_depth}


@dataclass
class Study:
    groups: int
    seed: int = 1
    rule: OfferRule = OfferRule.TURN
    agents: int = AGENTS
    items_per_s: float = GROUP_ITEMS_PER_S
    workload: str = "paced"
    task_s: float = 0.0
    """The tasks' duration; 0: sized by the workload (`paced`: 80 % busy at K x one group's
    rate; `contended`: 4x longer, so the backlog outgrows the agents)."""
    queue_depth: int = QUEUE_DEPTH
    """Each agent's local queue per group (late binding); 0: none."""
    clock: ManualClock = field(default_factory=ManualClock)

    def __post_init__(self) -> None:
        assert self.workload in ("paced", "contended")
        self.rng = random.Random(self.seed)
        slots = self.agents * SLOTS_PER_AGENT
        nominal_rate = self.items_per_s / ITEMS_PER_TASK  # tasks/s one group places at most
        if not self.task_s:
            paced = UTILISATION_TARGET * slots / (self.groups * nominal_rate)
            self.task_s = round(paced if self.workload == "paced" else 4 * paced, 3)
        self.logs = [StudyLog(self.items_per_s) for _ in range(self.groups)]
        self.leaders = [Leader(log, self.clock, random.Random(self.rng.getrandbits(64)),
                               LeaderConfig(f"g{g}:7000", f"g{g}:9000", suspect_after_s=30,
                                            lost_after_s=120, tick_interval_s=1),
                               version=_applied(log))
                        for g, log in enumerate(self.logs)]
        self.gateways = [AgentGateway(log, leader, self.clock,
                                      random.Random(self.rng.getrandbits(64)))
                         for log, leader in zip(self.logs, self.leaders, strict=True)]
        self.agents_ = [StudyAgent(f"c{i:04d}", self.clock, self.groups, self.rule,
                                   self.queue_depth)
                        for i in range(self.agents)]
        self._jobs = 0

    def run(self, seconds: float, warmup_s: float | None = None) -> Figures:
        """Boots, warms up (default: two task durations, at least a second: the agents fill
        up), then measures `seconds` of simulated time."""
        if warmup_s is None:
            warmup_s = max(1.0, 2 * self.task_s)
        self._boot()
        ticks_warm = round(warmup_s / TICK_S)
        ticks = round(seconds / TICK_S)
        for _ in range(ticks_warm):
            self._tick()
        placed_before = [log.placements for log in self.logs]
        refused_before = self._capacity_rejections()
        passes_before = self._turn_passes()
        held = 0
        by_tenant: Counter[str] = Counter()
        for _ in range(ticks):
            self._tick()
            for agent in self.agents_:
                held += agent.shared.held()
                by_tenant.update(agent.executor.tenant.values())
        per_group = [log.placements - before
                     for log, before in zip(self.logs, placed_before, strict=True)]
        total_tenant = max(1, sum(by_tenant.values()))
        return Figures(self.groups, self.rule.value, self.workload, seconds, sum(per_group),
                       self._capacity_rejections() - refused_before,
                       held / (ticks * self.agents * SLOTS_PER_AGENT),
                       {t: by_tenant[t] / total_tenant for t in TENANTS}, per_group,
                       self._turn_passes() - passes_before, self.task_s, self.queue_depth)

    def _capacity_rejections(self) -> int:
        return sum(a.decisions[Decision.NO_CAPACITY] + a.decisions[Decision.TOO_MANY_RUNNING]
                   for a in self.agents_)

    def _turn_passes(self) -> int:
        return sum(a.shared.turn.passes for a in self.agents_)

    def _boot(self) -> None:
        for leader in self.leaders:
            leader._round()  # takes office
        for group, log in enumerate(self.logs):
            if self.groups > 1:  # what a group's first leader commits (`replica --groups`)
                log.propose(c.encode(c.GroupSet(group, self.groups, limits.VIRTUAL_SHARDS,
                                                self.clock.now_ms())), 1)
            for tenant, weight in TENANTS.items():
                log.propose(c.encode(c.TenantSet(tenant, weight, 0, 0, self.clock.now_ms())), 1)
        for agent in self.agents_:
            agent.register(self.gateways)
        for log in self.logs:
            log.unlimited = False

    def _tick(self) -> None:
        for log in self.logs:
            log.refill(TICK_S)
        self._top_up()
        for leader in self.leaders:
            with contextlib.suppress(RaftschedError, OutcomeUnknown):
                leader._round()
        for agent in self.agents_:
            agent.tick(self.gateways)
        self.clock.advance(TICK_S)

    def _top_up(self) -> None:
        """Every tenant keeps `BACKLOG_TASKS_PER_TENANT` tasks waiting in every group; a job goes
        to the group its id's hash names (its shard)."""
        for group, log in enumerate(self.logs):
            waiting = {t: u.queued for t, u in log.state.usage.items()}
            waiting = Counter(waiting)
            for tenant in TENANTS:
                while waiting[tenant] < BACKLOG_TASKS_PER_TENANT and log.budget > 0:
                    job_id = self._job_id(group)
                    log.propose(c.encode(c.JobSubmit(job_id, self._wire(tenant),
                                                      self.clock.now_ms())), 1)
                    waiting[tenant] += TASKS_PER_JOB

    def _job_id(self, group: int) -> str:
        """The next job id whose shard (crc32 of the id, mod the groups) is `group`."""
        while True:
            self._jobs += 1
            job_id = f"job-{self._jobs}"
            if zlib.crc32(job_id.encode()) % self.groups == group:
                return job_id

    def _wire(self, tenant: str) -> list[Any]:
        return doc_to_wire({
            "name": "study", "tenant": tenant,
            "tasks": [{"id": f"t{i}", "command": ["sleep", str(self.task_s)],
                       "resources": {"cpu": 1, "memory_mb": 1024}}
                      for i in range(TASKS_PER_JOB)]})


def _applied(log: StudyLog) -> Callable[[], int]:
    return lambda: log.applied
