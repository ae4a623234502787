"""One compute cluster's machine in the simulation: the real agent core (`agent.core.AgentCore`)
over in-memory stores (`agent.fence.MemoryFenceStore`, `agent.outbox.MemoryOutbox`: its disk),
a simulated executor (`SimExecutor`: its processes) and the world's `ManualClock`, with the calls
to the leader made here, where the network's faults are injected.

Durable (survives a crash): the two stores. Volatile (lost in a crash): the core itself (what it
watches as running, the kills it asked for, the acks it remembers, the heartbeat sequence). The
processes belong to the executor: like the real wrapper they outlive an agent crash, or (machine
crash) vanish with it. Nothing here decides what the agent does: that is the core's, the same
code the real agent runs.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from agent import session as s
from agent.core import AgentCore, AttemptExecutor, CoreConfig, Decision, FenceStore, Outbox
from agent.executors import VANISHED_EXIT_CODE, ExecutorError, Launch
from agent.fence import MemoryFenceStore
from agent.groups import SharedExecutor
from agent.metrics import AgentMetrics
from agent.model import (
    Assignment,
    AttemptRecord,
    Completion,
    Directives,
    Report,
    ReportKind,
    Resources,
)
from agent.outbox import MemoryOutbox
from raftsched.clock import Clock, ManualClock
from raftsched.outputs import canonical
from tests.sim.gateway import Gateway
from tests.sim.history import History

REPORT_BATCH_MAX = 8
"""Small on purpose, so flushes take several batches."""
ADMISSION_PAUSE_REPORTS = 8
"""The agents' admission pause, small so that a partition's backlog of reports reaches it."""
RECENT_ANSWERS = 64
"""Answers with assignments a machine keeps, for the network to deliver one again much later."""
QUEUE_DEPTHS = (0, 0, 1, 2, 4)
"""A machine's local queue depth (late binding) is drawn from these, seeded: some none."""

NOTHING = Resources(0, 0, 0)


class CoreFactory(Protocol):
    """Builds an agent's core: `AgentCore`, or in a test a deliberately broken subclass."""

    def __call__(self, config: CoreConfig, clock: Clock, fences: FenceStore, outbox: Outbox,
                 executor: AttemptExecutor, metrics: AgentMetrics | None = None,
                 offer: Callable[[Resources], Resources] | None = None,
                 group: int | None = None,
                 may_start: Callable[[int], bool] | None = None) -> AgentCore: ...



class SimCrash(Exception):
    """The agent process dies in the middle of a call into its core."""


@dataclass
class Faults:
    lost: float = 0.08
    """A request or its answer is lost."""
    duplicated: float = 0.05
    """An answer is handled twice, or a report batch sent twice."""
    delayed: float = 0.08
    """A heartbeat answer arrives later, after newer ones."""
    mangled: float = 0.03
    """A heartbeat answer arrives with one directive broken (no fence, no command): what a
    buggy or hostile leader could send; the agent must refuse it."""
    start_failed: float = 0.02
    """The executor cannot start an attempt."""
    crash_in_launch: float = 0.01
    """The agent dies between recording an attempt and starting its process."""

    def quiet(self) -> None:
        self.lost = self.duplicated = self.delayed = self.mangled = 0.0
        self.start_failed = self.crash_in_launch = 0.0


@dataclass
class SimProcess:
    """One attempt's process, as the executor sees it."""

    fence: int
    steps_left: int
    exit_code: int
    timeout_at_ms: int | None
    resources: Resources = NOTHING
    kill_requested: bool = False
    vanished: bool = False
    done: Completion | None = None


def sim_outputs(fence: int) -> str:
    """What a simulated task that succeeds leaves at $RAFTSCHED_OUTPUT: its own fence (so the
    world can tell which attempt's outputs the state kept) and a list of 0..3 items for the
    for_each tasks downstream."""
    return canonical({"fence": fence, "files": [f"f{fence}-{k}" for k in range(fence % 4)]})


class StartObserver(Protocol):
    """Told of every start (`History.on_start`; with several groups, the group's history)."""

    def on_start(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> None: ...


class SimExecutor:
    """`agent.core.AttemptExecutor` over simulated processes; it tells the history what starts.
    With several groups (`agent.groups.SharedExecutor`) its fences are the agent's local keys:
    `fence_of` gives back the group's fence, the one a task writes into its outputs."""

    def __init__(self, cluster_id: str, clock: ManualClock, rng: random.Random,
                 history: StartObserver, faults: Faults, shared: Resources | None = None,
                 capacity: Resources | None = None,
                 fence_of: Callable[[int], int] = lambda fence: fence) -> None:
        self.cluster_id = cluster_id
        self.capacity = capacity
        """The machine's real capacity: what its processes hold together never exceeds it."""
        self.shared = shared
        """A partition other users share (like Slurm's), of this size; None: not shared."""
        self.others_cpu_milli = 0
        """What the other users take of the shared partition now."""
        self.clock = clock
        self.rng = rng
        self.history = history
        self.faults = faults
        self.fence_of = fence_of
        self.processes: dict[int, SimProcess] = {}

    def attempt_dir(self, fence: int) -> str:
        return ""

    def start(self, assignment: Assignment) -> Launch:
        if self.rng.random() < self.faults.crash_in_launch:
            raise SimCrash(f"crashed while starting fence {assignment.fence}")
        if self.rng.random() < self.faults.start_failed:
            raise ExecutorError("simulated: the wrapper did not start")
        self.history.on_start(self.cluster_id, assignment.job_id, assignment.task_id,
                              assignment.fence)
        self._check_capacity(assignment)
        now_ms = self.clock.now_ms()
        timeout_at = now_ms + assignment.timeout_ms if assignment.timeout_ms else None
        self.processes[assignment.fence] = SimProcess(
            assignment.fence, self.rng.randint(1, 6), self._exit_code(), timeout_at,
            assignment.resources)
        return Launch("", wrapper_pid=assignment.fence)

    def _check_capacity(self, assignment: Assignment) -> None:
        """No over-commit of the real capacity: every process not yet collected holds its
        resources (a queued attempt holds none until it starts)."""
        if self.capacity is None:
            return
        held = assignment.resources
        for process in self.processes.values():
            held = held.plus(process.resources)
        assert held.fits_in(self.capacity), \
            f"{self.cluster_id} over-committed: starting fence {assignment.fence} makes its " \
            f"processes hold {held}, capacity {self.capacity}"

    def adopt(self, record: AttemptRecord) -> bool:
        """Like the real executor: False for a record whose process never started; a process
        gone without a result completes as vanished."""
        process = self.processes.get(record.fence)
        if process is None and record.wrapper_pid is None:
            return False
        if process is None or process.vanished:
            self.processes[record.fence] = SimProcess(
                record.fence, 0, 0, None, vanished=True,
                done=Completion(record.fence, VANISHED_EXIT_CODE, reason="wrapper vanished"))
        return True

    def kill(self, fence: int) -> bool:
        process = self.processes.get(fence)
        if process is None or process.done is not None:
            return False
        process.kill_requested = True
        return True

    def poll(self) -> list[Completion]:
        done = [p for _, p in sorted(self.processes.items()) if p.done is not None]
        for process in done:
            del self.processes[process.fence]
        return [p.done for p in done if p.done is not None]

    def observed_free(self) -> Resources | None:
        """On a shared partition: what neither the other users nor our processes take."""
        if self.shared is None:
            return None
        free = self.shared.minus(Resources(self.others_cpu_milli, 0, 0))
        for process in self.processes.values():
            if process.done is None:
                free = free.minus(process.resources)
        return Resources(max(0, free.cpu_milli), max(0, free.memory_mb), max(0, free.gpu))

    def progress(self) -> None:
        """Time passes for the processes (whether or not the agent runs), and the other users
        of a shared partition come and go."""
        if self.shared is not None and self.rng.random() < 0.3:
            self.others_cpu_milli = self.rng.choice([0, 0, 1000, 2000, 3000])
        now_ms = self.clock.now_ms()
        for fence in sorted(self.processes):
            p = self.processes[fence]
            if p.done is not None:
                continue
            if p.vanished:
                p.done = Completion(fence, VANISHED_EXIT_CODE, reason="wrapper vanished")
            elif p.kill_requested:
                p.done = Completion(fence, None, killed=True, reason="killed")
            elif p.timeout_at_ms is not None and now_ms >= p.timeout_at_ms:
                p.done = Completion(fence, None, timed_out=True, reason="timed out")
            else:
                p.steps_left -= 1
                if p.steps_left <= 0:
                    p.done = Completion(fence, p.exit_code,
                                        outputs=sim_outputs(self.fence_of(fence))
                                        if p.exit_code == 0 else "")

    def machine_crash(self) -> None:
        for process in self.processes.values():
            if process.done is None:
                process.vanished = True

    def _exit_code(self) -> int:
        roll = self.rng.random()
        if roll < 0.12:
            return 1
        if roll < 0.16:
            return 2  # non-retryable in the generated specs
        return 0


class Machine:
    def __init__(self, config: CoreConfig, clock: ManualClock, rng: random.Random,
                 history: History, core_factory: CoreFactory = AgentCore, *,
                 shared: bool = False, queue_depth: int | None = None,
                 hub: SharedExecutor | None = None, group: int = 0) -> None:
        """`hub`: the cluster's executor shared with other groups' machines (issue 27): this
        machine is then one group's core and session on that cluster's agent, `group`."""
        if queue_depth is None:
            queue_depth = rng.choice(QUEUE_DEPTHS)
        config = replace(config, queue_depth=queue_depth)
        self.config = config
        self.cluster_id = config.cluster_id
        self.clock = clock
        self.rng = rng
        self.history = history
        self.core_factory = core_factory
        self.faults = Faults()
        self.fences = MemoryFenceStore()
        self.outbox = MemoryOutbox()
        self.hub = hub
        self.group = group
        if hub is None:
            self.executor = SimExecutor(
                config.cluster_id, clock, random.Random(rng.getrandbits(64)), history,
                self.faults, config.capacity if shared else None, config.capacity)
        else:
            assert isinstance(hub.executor, SimExecutor)
            self.executor = hub.executor
        self.offered = NOTHING
        """What the last heartbeat offered (several groups: `answered`)."""
        self.core: AgentCore | None = None
        self.in_flight: list[Directives] = []
        """Heartbeat answers on their way (delayed)."""
        self.in_flight_reports: list[tuple[int, list[Report]]] = []
        """Copies of report batches (incarnation, reports) still on their way (delayed)."""
        self.recent: deque[Directives] = deque(maxlen=RECENT_ANSWERS)
        """Answers with assignments handled lately: one delivered again, after the task was
        reassigned here with a higher fence, is how a stale fence reaches an agent."""
        self.partitioned_steps = 0
        self.target = 0
        self.crashes_in_launch = 0

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def incarnation(self) -> int:
        return 0 if self.core is None else self.core.incarnation

    @property
    def need_register(self) -> bool:
        return self.core is None or self.core.need_register

    @property
    def reachable(self) -> bool:
        return self.up and self.partitioned_steps == 0

    def start(self) -> None:
        """A new agent process: a fresh core on the same disk and processes."""
        assert self.core is None
        if self.hub is None:
            self.core = self.core_factory(self.config, self.clock, self.fences, self.outbox,
                                          self.executor, AgentMetrics())
        else:
            view = self.hub.view(self.group)
            self.core = self.core_factory(self.config, self.clock, self.fences, self.outbox,
                                          view, AgentMetrics(), offer=view.offer,
                                          may_start=view.may_start)
        self._count(self.core.start())
        self._note_queue()

    def crash(self, *, machine: bool) -> None:
        """The agent process dies (the core with it); on a machine crash the attempts'
        processes die too."""
        self.core = None
        self._note_queue()
        if machine:
            self.executor.machine_crash()

    def _note_queue(self) -> None:
        """Tells the history which fences the agent holds queued now (none once it is down),
        and which it answered REJECTED or KILLED (seen here before any can be acked)."""
        self.history.queued[self.cluster_id] = set() if self.core is None \
            else set(self.core.queued())
        self.history.refused.update(
            r.fence for r in self.outbox.pending(max(1, self.outbox.count()))
            if r.kind in (ReportKind.REJECTED, ReportKind.KILLED))

    def _count(self, decisions: Sequence[Decision]) -> None:
        for decision in decisions:
            self.history.count(f"decision_{decision.value}")

    # -- processes -------------------------------------------------------------------------------

    def progress(self) -> None:
        self.executor.progress()

    def collect(self) -> None:
        """Completions become reports, then what they freed starts from the local queue at once,
        both in one synced write before the starts (`Agent._collect`); the agent may die
        starting one (`crashes_in_launch`)."""
        if self.core is None:
            return
        try:
            self._count(self.core.collect_and_start()[1])
        except SimCrash:
            self.crashes_in_launch += 1
            self.crash(machine=False)
        self._note_queue()

    # -- the calls to the leader (Agent._register, _beat, _flush) ----------------------------------

    def register(self, gateway: Gateway) -> bool:
        assert self.core is not None
        try:
            registered = gateway.register(self.core.registration())
        except s.SessionError as error:
            self._follow(error)
            return False
        if self.rng.random() < self.faults.lost:
            return False  # committed, answer lost: registers again (same incarnation)
        self.core.registered(registered)
        return True

    def beat(self, gateway: Gateway) -> Directives | None:
        assert self.core is not None
        beat = self.core.next_beat()
        self.offered = beat.free if beat.free is not None else NOTHING
        try:
            return gateway.heartbeat(beat)
        except s.Reregister:
            self.core.reregister()
        except s.SessionError as error:
            self._follow(error)
            if self.hub is not None:
                self.hub.silent(self.group)
        return None

    def _follow(self, error: s.SessionError) -> None:
        if isinstance(error, s.NotLeader) and error.leader:
            self.target = int(error.leader.split("-")[1].split(":")[0])

    def handle(self, directives: Directives) -> bool:
        """The core acts on an answer (maybe mangled on its way); False if it was ignored or
        the agent died handling it (`crashes_in_launch` counts those)."""
        if self.core is None:
            return False
        if directives.assignments and (not self.recent or self.recent[-1] != directives):
            self.recent.append(directives)
        directives = self._mangle(directives)
        try:
            decisions = self.core.handle(directives)
        except SimCrash:
            self.crashes_in_launch += 1
            self.crash(machine=False)
            return False
        self._count(decisions)
        self._note_queue()
        if Decision.STALE_TERM in decisions:
            return False
        seen = [(k.job_id, k.task_id, k.fence) for k in directives.kills]
        if Decision.ADMISSION_PAUSED not in decisions:  # paused: the fences were not looked at
            seen += [(a.job_id, a.task_id, a.fence) for a in directives.assignments]
        for job_id, task_id, fence in seen:
            self.history.on_seen(self.cluster_id, job_id, task_id, fence)
        return True

    def answered(self, directives: Directives) -> None:
        """Several groups: the shared executor hears how this group answered the last offer
        (its turn passes on when it placed nothing, `agent.groups.OfferRule.TURN`)."""
        if self.hub is not None and self.core is not None:
            self.hub.answered(self.group, self.offered, len(directives.assignments))

    def _mangle(self, directives: Directives) -> Directives:
        if self.rng.random() >= self.faults.mangled:
            return directives
        assignments, kills = list(directives.assignments), list(directives.kills)
        if assignments and (not kills or self.rng.random() < 0.7):
            i = self.rng.randrange(len(assignments))
            broken = replace(assignments[i], command=()) if self.rng.random() < 0.6 \
                else replace(assignments[i], fence=0)
            assignments[i] = broken
        elif kills:
            i = self.rng.randrange(len(kills))
            kills[i] = replace(kills[i], fence=0)
        return replace(directives, assignments=tuple(assignments), kills=tuple(kills))

    def flush(self, gateway: Gateway) -> bool:
        """One batch of pending reports to the leader; acked ones leave the outbox."""
        assert self.core is not None
        batch = self.core.pending(REPORT_BATCH_MAX)
        if not batch:
            return True
        if self.rng.random() < self.faults.lost:
            return False  # the request is lost on its way
        if self.rng.random() < self.faults.delayed:
            self.in_flight_reports.append((self.incarnation, batch))
        observed = self.core.observation()
        sends = 2 if self.rng.random() < self.faults.duplicated else 1
        reported = None
        for _ in range(sends):
            try:
                reported = gateway.report(self.cluster_id, self.incarnation, batch, observed)
            except s.Reregister:
                self.core.reregister()
                return False
            except s.SessionError as error:
                self._follow(error)
                return False
        assert reported is not None
        if self.rng.random() < self.faults.lost:
            return False  # committed, the answer is lost: sent again later
        return len(self.core.reported(batch, reported)) == len(batch)
