"""The agent's decisions, with its I/O injected: one piece of code run by the real agent
(`agent.agent.Agent`, over lmdb, a real executor, gRPC and the system clock) and by the seeded
simulation (`tests/sim`, over in-memory stores, a simulated executor and a manual clock).

`AgentCore` decides: the term rule and fence admission (`agent.fence`), every refusal, the
answer to a redelivered fence, kill directives, what a heartbeat and a report carry, what an
ack settles, and the order of the durable writes:
1. the fences of an answer's assignments are stored before any is started or refused;
2. an attempt's record is stored before its process starts, so a restarted agent finds every
   process it may have started;
3. a report is stored before it is sent and dropped only once the leader answers that it is
   committed; a FINISHED/KILLED report and the end of its attempt's running state are one write.

It does no I/O of its own: the clock, the fence store, the outbox and the executor are ports
(Protocols below); the calls to the leader stay with the caller, which hands the core what the
leader answered (`registered`, `handle`, `reported`). Not thread-safe: the real agent calls it
under its lock. Every decision on a directive is a `Decision`; `handle` returns them, so the
simulation can count that each refusal the agent makes actually occurs.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agent.executors import ExecutorError, Launch
from agent.fence import Admission, admit, term_is_stale
from agent.metrics import AgentMetrics
from agent.model import (
    TERMINAL_REPORT_KINDS,
    Assignment,
    AttemptRecord,
    AttemptState,
    Beat,
    Completion,
    Directives,
    KillDirective,
    Registered,
    Registration,
    Report,
    Reported,
    ReportKey,
    ReportKind,
    Resources,
    Verdict,
)
from agent.slots import SlotTurnaround
from raftsched import limits
from raftsched.clock import Clock
from raftsched.eventlog import EventLogger
from raftsched.protocol import Observation

log = EventLogger("agent")

NEVER_STARTED_REASON = "the agent stopped before starting it"
NOT_RUNNING_REASON = "not running on this agent"
SEEN_BEFORE_REASON = "fence seen before; the attempt is not running here"
EMPTY_COMMAND_REASON = "empty command"
QUEUE_WITHDRAWN_REASON = "withdrawn from the agent's queue before it started"
QUEUED_AT_RESTART_REASON = "the agent restarted before starting it"
WITHDRAWN_REASON = "withdrawn from the agent's queue for a task of a higher priority"
SUPERSEDED_REASON = "superseded in the agent's queue by a later fence of the task"
NOT_THIS_GROUPS_TURN_REASON = (
    "no capacity for this scheduler group now: the cluster's free capacity is another group's "
    "turn (agent.groups), and this group's local queue on it is full")
NOTHING = Resources(0, 0, 0)
ACK_CROSSING_WINDOW_MS = 10_000
"""For this long after a report is acked, a directive it answered (an assignment for STARTED or
REJECTED, a kill for FINISHED or KILLED) is taken as having crossed that commit and draws no
second answer. Past it, a repeated directive is answered again. Longer than the server's
long-poll cap plus a heartbeat's deadline slack."""


class FenceStore(Protocol):
    """The highest fence per task, the highest term, the incarnation counter; every write
    durable before it returns (`agent.fence.FenceStore`, `agent.fence.MemoryFenceStore`)."""

    def fence(self, task_key: str) -> int | None: ...

    def term(self) -> int: ...

    def raise_term(self, term: int) -> bool: ...

    def raise_fences(self, fences: Mapping[str, int]) -> None: ...

    def bump_incarnation(self) -> int: ...


class Outbox(Protocol):
    """Unacked reports and attempt records (`agent.outbox.Outbox`, `agent.outbox.MemoryOutbox`)."""

    def write(self, *, reports: Sequence[Report] = (), records: Sequence[AttemptRecord] = (),
              delete_records: Sequence[int] = ()) -> int: ...

    def put(self, reports: Sequence[Report]) -> int: ...

    def ack(self, keys: Iterable[ReportKey]) -> int: ...

    def pending(self, limit: int) -> list[Report]: ...

    def has(self, key: ReportKey) -> bool: ...

    def count(self) -> int: ...

    def attempt(self, fence: int) -> AttemptRecord | None: ...

    def attempts(self) -> list[AttemptRecord]: ...


class AttemptExecutor(Protocol):
    """What the core asks of an executor (`agent.executors.Executor` is a wider one)."""

    def attempt_dir(self, fence: int) -> str: ...

    def start(self, assignment: Assignment) -> Launch: ...

    def adopt(self, record: AttemptRecord) -> bool: ...

    def kill(self, fence: int) -> bool: ...

    def poll(self) -> list[Completion]: ...

    def observed_free(self) -> Resources | None: ...


class Decision(enum.Enum):
    """What the core did with one directive (or, at start, with one attempt record)."""

    STARTED = "started"
    """Admitted and started."""
    QUEUED = "queued"
    """Admitted but no room now (capacity or the running bound): held in the local queue
    (late binding), QUEUED; it starts the moment a slot frees."""
    QUEUED_PAST_DEPTH = "queued_past_depth"
    """QUEUED while the core is held back (another scheduler group's turn) with its queue
    full: placed by its leader on its last offer before the turn passed on (`_can_queue`)."""
    QUEUE_STARTED = "queue_started"
    """A queued attempt started because a slot freed (`start_queued`)."""
    STALE_TERM = "stale_term"
    """The whole answer came from a lower term than one seen: ignored."""
    MALFORMED = "malformed"
    """An assignment or kill without a valid fence: skipped."""
    ADMISSION_PAUSED = "admission_paused"
    """Too many reports wait for the leader: not admitted now (it is delivered again)."""
    STALE_FENCE = "stale_fence"
    """Lower than the fence stored for the task: rejected."""
    EMPTY_COMMAND = "empty_command"
    TOO_MANY_RUNNING = "too_many_running"
    NO_CAPACITY = "no_capacity"
    START_FAILED = "start_failed"
    """The executor could not start it: rejected."""
    SEEN_BEFORE = "seen_before"
    """A redelivered fence that does not run here: rejected again."""
    REDELIVERY_ANSWERED = "redelivery_answered"
    """A redelivered fence that runs or is queued here: STARTED (or QUEUED) again."""
    REDELIVERY_CROSSED = "redelivery_crossed"
    """A redelivered fence whose answer was acked within the crossing window: no answer."""
    REDELIVERY_FINISHED = "redelivery_finished"
    """A redelivered fence that finished here: its FINISHED/KILLED report answers it."""
    KILL_REQUESTED = "kill_requested"
    KILL_SETTLED = "kill_settled"
    """A kill of an attempt that finished here, or whose answer crossed the directive."""
    KILL_NOT_RUNNING = "kill_not_running"
    """A kill of a fence that never ran here: KILLED at once, and the fence is stored."""
    KILL_QUEUED = "kill_queued"
    """A kill of a queued fence: withdrawn from the queue, KILLED at once; the fence stays
    stored, so it never starts here later."""
    WITHDRAWN = "withdrawn"
    """A withdraw directive for a queued fence (or one never seen): dropped unstarted,
    WITHDRAWN at once; the fence stays stored, so it never starts here later."""
    WITHDRAW_TOO_LATE = "withdraw_too_late"
    """A withdraw directive for a fence that runs or ran here: left alone (its STARTED or
    FINISHED report answers)."""
    NEVER_STARTED = "never_started"
    """At start: a record of an attempt an earlier agent stopped before launching: rejected."""
    QUEUED_AT_RESTART = "queued_at_restart"
    """At start: a record of an attempt an earlier agent held queued: rejected, never started."""


REFUSALS = frozenset({
    Decision.STALE_TERM, Decision.MALFORMED, Decision.ADMISSION_PAUSED, Decision.STALE_FENCE,
    Decision.EMPTY_COMMAND, Decision.TOO_MANY_RUNNING, Decision.NO_CAPACITY,
    Decision.START_FAILED, Decision.SEEN_BEFORE, Decision.KILL_NOT_RUNNING,
    Decision.NEVER_STARTED, Decision.QUEUED_AT_RESTART,
})
"""The decisions that say no (or ignore): the simulation asserts each one occurs."""
_NO_ROOM = frozenset({Decision.NO_CAPACITY, Decision.TOO_MANY_RUNNING})
"""The refusals a local queue with room turns into QUEUED."""
_ANSWERS = {AttemptState.RUNNING: ReportKind.STARTED, AttemptState.QUEUED: ReportKind.QUEUED}
_Carry = tuple[Sequence["AttemptRecord"], Sequence[Report]]
"""Finished records and their reports not written yet (`collect_and_start`)."""
"""What a redelivered fence with a record in this state is answered again."""


@dataclass(frozen=True, slots=True)
class CoreConfig:
    cluster_id: str
    capacity: Resources
    capabilities: tuple[str, ...] = ()
    custom: tuple[tuple[str, int], ...] = ()
    heartbeat_wait_ms: int = 0
    ack_crossing_window_ms: int = ACK_CROSSING_WINDOW_MS
    max_running_attempts: int = limits.MAX_RUNNING_ATTEMPTS
    admission_pause_reports: int = limits.OUTBOX_ADMISSION_PAUSE_REPORTS
    queue_depth: int = 0
    """Attempts held in the local queue at most (late binding; 0: none, every assignment that
    finds no room is refused). Declared in the registration: the leader commits no more."""


@dataclass
class _Admitting:
    """One answer's assignments on their way through admission."""

    free: Resources
    running: int
    fences: dict[str, int] = field(default_factory=dict)
    to_run: list[Assignment] = field(default_factory=list)
    queued: list[Assignment] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    starting: bool = True
    """False while this core may not start work (`AgentCore` `may_start`): `free` is then
    nothing, so what arrives is queued or refused..."""
    spare: Resources = NOTHING
    """...except what arrives with the queue full (placed on the group's last offer before its
    turn passed on), which runs if this much free room is there."""


class AgentCore:
    def __init__(self, config: CoreConfig, clock: Clock, fences: FenceStore, outbox: Outbox,
                 executor: AttemptExecutor, metrics: AgentMetrics | None = None,
                 offer: Callable[[Resources], Resources] | None = None,
                 group: int | None = None,
                 may_start: Callable[[int], bool] | None = None) -> None:
        """`offer`: what heartbeats and observations report of the free capacity (an agent
        serving several groups offers each its share, `agent.groups`); default: all of it.
        Admission always judges the whole free capacity. `group`: with several scheduler
        groups, this core's, named in each of its log events (its fences are that group's).
        `may_start(waiting)`: whether this core, `waiting` attempts in its local queue, may
        start work now (with several groups, only the group whose turn it is on this cluster:
        `SharedExecutor.may_start`, which also learns which groups have work waiting); while it
        may not, a new assignment goes to the local queue (or is refused when that is full)
        and the queue waits. Default: always."""
        assert config.max_running_attempts >= 1 and config.admission_pause_reports >= 1
        assert 0 <= config.queue_depth <= limits.MAX_AGENT_QUEUE_DEPTH
        self._config = config
        self._clock = clock
        self._fences = fences
        self._outbox = outbox
        self._executor = executor
        self._offer = offer
        self._may_start = may_start
        self._log = log if group is None else log.bound(group=group)
        self._metrics = metrics or AgentMetrics()
        self._running: dict[int, AttemptRecord] = {}
        self._queue: dict[int, Assignment] = {}
        """Queued attempts by fence (their records are QUEUED); they start in fence order."""
        self._slots = SlotTurnaround()
        self._idle_counted = 0
        self._kills_requested: set[int] = set()
        self._acked: dict[ReportKey, float] = {}  # -> monotonic s of the ack
        self._acked_order: deque[ReportKey] = deque()
        self.need_register = True
        """Set until a registration is answered, and again when the leader asks for one."""
        self.incarnation = 0
        self._seq = 0

    # -- reads ---------------------------------------------------------------------------------

    def running(self) -> list[int]:
        return sorted(self._running)

    def queued(self) -> list[int]:
        return sorted(self._queue)

    def pending_reports(self) -> int:
        return int(self._outbox.count())

    # -- start and registration ----------------------------------------------------------------

    def start(self) -> list[Decision]:
        """A new incarnation; attempts an earlier agent left are watched again, and results
        written while no agent ran become reports before the registration lists them."""
        self.incarnation = self._fences.bump_incarnation()
        self._log.info("agent_starting", cluster=self._config.cluster_id,
                       incarnation=self.incarnation)
        decisions = self._adopt()
        self.collect()
        return decisions

    def _adopt(self) -> list[Decision]:
        """Watches again every attempt an earlier agent left running. One it stopped before
        launching never ran: it is rejected (an infrastructure failure, retried at once) and
        not listed as running at registration. So is one it held queued: the queue is not kept
        across a restart, and rejecting it (never starting it) can never run a fence twice."""
        never_started: list[AttemptRecord] = []
        queued = [r for r in self._outbox.attempts() if r.state == AttemptState.QUEUED]
        for record in self._outbox.attempts():
            if record.state != AttemptState.RUNNING:
                continue
            if not self._executor.adopt(record):
                never_started.append(record)
                self._log.info("attempt_never_started", fence=record.fence, job=record.job_id,
                         task=record.task_id)
                continue
            self._running[record.fence] = record
            self._log.info("attempt_adopted", fence=record.fence, job=record.job_id,
                     task=record.task_id, pid=record.wrapper_pid)
        for record in queued:
            self._log.info("attempt_queued_at_restart", fence=record.fence, job=record.job_id,
                     task=record.task_id)
        if never_started or queued:
            self._outbox.write(
                reports=[_record_rejected(r, NEVER_STARTED_REASON) for r in never_started] +
                [_record_rejected(r, QUEUED_AT_RESTART_REASON) for r in queued],
                delete_records=[r.fence for r in never_started + queued])
        self._metrics.attempts_running.set(len(self._running))
        return [Decision.NEVER_STARTED] * len(never_started) + \
            [Decision.QUEUED_AT_RESTART] * len(queued)

    def registration(self) -> Registration:
        """What Register says: every attempt this agent knows of."""
        known = tuple(record.known() for record in self._outbox.attempts())
        return Registration(self._config.cluster_id, self.incarnation, self._config.capabilities,
                            self._config.capacity, known, self._config.custom,
                            queue_depth=self._config.queue_depth)

    def registered(self, registered: Registered) -> None:
        self._fences.raise_term(registered.term)
        self._stop_unknown(registered.stop)
        self.need_register = False

    def reregister(self) -> None:
        """The leader does not know this incarnation: register before the next call."""
        self.need_register = True

    def _stop_unknown(self, stop: Sequence[KillDirective]) -> None:
        """Stops the running attempts the scheduler answered it does not know as this
        cluster's (`Registered.stop`: forgotten jobs, a restored older state): the kill
        directive's path without a directive. Their KILLED reports are answered not_found and
        leave the outbox. Only attempts this agent runs or holds queued are touched."""
        for kill in stop[:limits.MAX_REGISTER_KNOWN_ATTEMPTS]:
            if kill.fence in self._queue:
                self._withdraw(kill.fence)
                continue
            if kill.fence not in self._running or kill.fence in self._kills_requested:
                continue
            if self._executor.kill(kill.fence):
                self._kills_requested.add(kill.fence)
                self._log.warning("attempt_not_known_stopped", fence=kill.fence, job=kill.job_id,
                            task=kill.task_id)

    # -- heartbeats ----------------------------------------------------------------------------

    def next_beat(self) -> Beat:
        self._seq += 1
        return Beat(self._config.cluster_id, self.incarnation, self._seq, self.offered(),
                    tuple(sorted(self._running)), self._config.heartbeat_wait_ms)

    def observation(self) -> Observation:
        """The free capacity now, numbered in the heartbeats' sequence."""
        self._seq += 1
        return Observation(self._seq, self.offered())

    def offered(self) -> Resources:
        """What this core tells its leader is free: `free()`, or the share `offer` gives of
        what its local queue will not take (with several groups the group's state does not
        hand freed room to its queue, `lifecycle.promotes_on_free`: what its queue waits to
        start is taken off here instead, so that its leader does not place on that room)."""
        free = self.free()
        if self._offer is None:
            return free
        for assignment in self._queue.values():
            free = free.minus(assignment.resources)
        return self._offer(Resources(max(0, free.cpu_milli), max(0, free.memory_mb),
                                     max(0, free.gpu)))

    def free(self) -> Resources:
        """What this cluster can still admit: its capacity less what its attempts hold, and no
        more than the executor itself sees free (a Slurm partition other users share)."""
        free = self._config.capacity
        for record in self._running.values():
            free = free.minus(record.resources)
        seen = self._executor.observed_free()
        return free if seen is None else free.capped(seen)

    def handle(self, directives: Directives) -> list[Decision]:
        """Acts on one heartbeat answer (its log requests are the caller's): the term first,
        then kills, then assignments."""
        stored_term = self._fences.term()
        if term_is_stale(stored_term, directives.term):
            self._metrics.stale_directives.inc()
            self._log.warning("stale_term_ignored", term=directives.term, stored_term=stored_term,
                        assignments=len(directives.assignments), kills=len(directives.kills))
            return [Decision.STALE_TERM]
        if self._fences.raise_term(directives.term):
            self._log.info("term_seen", term=directives.term)
        decisions = self._handle_kills(directives.kills)
        decisions += self.start_queued()  # FIFO: what waits goes before this answer's work
        decisions += self._handle_assignments(
            directives.assignments[:limits.MAX_ASSIGNMENTS_PER_BEAT])
        return decisions

    # -- kills ---------------------------------------------------------------------------------

    def _handle_kills(self, kills: Sequence[KillDirective]) -> list[Decision]:
        fences: dict[str, int] = {}
        reports: list[Report] = []
        decisions = [self._kill(kill, fences, reports) for kill in kills]
        self._fences.raise_fences(fences)
        self._store_reports(reports)
        return decisions

    def _kill(self, kill: KillDirective, fences: dict[str, int],
              reports: list[Report]) -> Decision:
        if kill.fence < 1:
            self._log.warning("malformed_kill", job=kill.job_id, task=kill.task_id)
            return Decision.MALFORMED
        if kill.withdraw:
            return self._take_back(kill, fences, reports)
        if kill.fence in self._queue:
            self._withdraw(kill.fence)
            return Decision.KILL_QUEUED
        if kill.fence in self._running:
            if self._executor.kill(kill.fence) and kill.fence not in self._kills_requested:
                self._kills_requested.add(kill.fence)
                self._log.info("attempt_kill_requested", fence=kill.fence, job=kill.job_id,
                         task=kill.task_id)
            return Decision.KILL_REQUESTED
        if self._outbox.attempt(kill.fence) is not None:
            return Decision.KILL_SETTLED  # finished: its FINISHED or KILLED report settles it
        if self._crossed(kill.fence, *TERMINAL_REPORT_KINDS):
            return Decision.KILL_SETTLED  # settled already; this answer crossed that commit
        # Not running here: say so at once, and remember the fence so that this attempt can
        # never start here later (an assignment of it is then a redelivery).
        fences[kill.task_key] = max(fences.get(kill.task_key, 0), kill.fence)
        reports.append(Report(ReportKind.KILLED, kill.job_id, kill.task_id, kill.fence,
                              reason=NOT_RUNNING_REASON))
        return Decision.KILL_NOT_RUNNING

    def _take_back(self, kill: KillDirective, fences: dict[str, int],
                   reports: list[Report]) -> Decision:
        """A withdraw directive (late binding: a task of a higher priority takes the place):
        only an attempt that has not started leaves, answered WITHDRAWN; one that runs or ran
        here is left alone, its STARTED or FINISHED report answers the leader."""
        if kill.fence in self._queue:
            self._withdraw(kill.fence, ReportKind.WITHDRAWN, WITHDRAWN_REASON)
            return Decision.WITHDRAWN
        if kill.fence in self._running or self._outbox.attempt(kill.fence) is not None \
                or self._crossed(kill.fence, ReportKind.STARTED, *TERMINAL_REPORT_KINDS):
            return Decision.WITHDRAW_TOO_LATE
        # Never seen here (its assignment is still on its way): it can never start here now.
        fences[kill.task_key] = max(fences.get(kill.task_key, 0), kill.fence)
        reports.append(Report(ReportKind.WITHDRAWN, kill.job_id, kill.task_id, kill.fence,
                              reason=WITHDRAWN_REASON))
        return Decision.WITHDRAWN

    def _withdraw(self, fence: int, kind: ReportKind = ReportKind.KILLED,
                  reason: str = QUEUE_WITHDRAWN_REASON) -> None:
        """A queued attempt leaves the queue unstarted: its record goes and its KILLED (or
        WITHDRAWN) report is stored in one write (its fence stays stored: it never starts here
        later)."""
        queued = self._queue[fence]
        self._outbox.write(reports=[_rejected(queued, reason, kind)], delete_records=[fence])
        del self._queue[fence]
        self._metrics.attempts_queued.set(len(self._queue))
        self._log.info("attempt_withdrawn_from_queue", fence=fence, job=queued.job_id,
                 task=queued.task_id)

    # -- assignments ---------------------------------------------------------------------------

    def _handle_assignments(self, assignments: Sequence[Assignment]) -> list[Decision]:
        if not assignments:
            return []
        pending = self._outbox.count()
        if pending >= self._config.admission_pause_reports:
            self._log.warning("admission_paused", pending_reports=pending)
            return [Decision.ADMISSION_PAUSED] * len(assignments)
        starting = not self._held_back()
        free = self.free()
        admitting = _Admitting(free if starting else NOTHING, len(self._running),
                               starting=starting, spare=NOTHING if starting else free)
        for assignment in assignments:
            decision = self._admit(assignment, admitting)
            if decision is not None:
                admitting.decisions.append(decision)
        self._fences.raise_fences(admitting.fences)  # durable before anything starts or is refused
        return admitting.decisions + self._launch(admitting.to_run, admitting.reports,
                                                  admitting.queued)

    def _admit(self, assignment: Assignment, admitting: _Admitting) -> Decision | None:
        """One assignment's admission; None when it is to be started (`_launch` decides)."""
        if assignment.fence < 1:
            self._log.warning("malformed_assignment", job=assignment.job_id,
                              task=assignment.task_id)
            return Decision.MALFORMED
        key = assignment.task_key
        stored = admitting.fences.get(key) or self._fences.fence(key)
        admission = self._admission(stored, assignment.fence)
        if admission == Admission.REDELIVERY:
            decision, report = self._redelivered(assignment)
            if report is not None:
                admitting.reports.append(report)
            return decision
        if admission == Admission.STALE_FENCE:
            self._log.info("stale_fence_rejected", fence=assignment.fence, job=assignment.job_id,
                     task=assignment.task_id, seen=stored)
            admitting.reports.append(_rejected(assignment, f"stale fence {assignment.fence}: "
                                                           f"fence {stored} was seen for this "
                                                           "task"))
            return Decision.STALE_FENCE
        assert admission == Admission.RUN, admission
        admitting.fences[key] = assignment.fence
        if not admitting.starting and self._queue_full(admitting) and self._refusal(
                assignment, admitting.spare, admitting.running + len(admitting.to_run)) is None:
            # Held back with its queue full: placed on this group's last offer before its
            # turn passed on. Run now if the room is there: queued, it would wait a whole turn.
            admitting.to_run.append(assignment)
            admitting.spare = admitting.spare.minus(assignment.resources)
            return None
        refusal = self._refusal(assignment, admitting.free,
                                admitting.running + len(admitting.to_run))
        if refusal is not None:
            decision, reason = refusal
            if decision in _NO_ROOM and self._can_queue(assignment, admitting):
                past = self._queue_full(admitting)
                admitting.queued.append(assignment)
                return Decision.QUEUED_PAST_DEPTH if past else Decision.QUEUED
            if not admitting.starting and decision == Decision.NO_CAPACITY:
                reason = NOT_THIS_GROUPS_TURN_REASON
            admitting.reports.append(_rejected(assignment, reason))
            return decision
        admitting.to_run.append(assignment)
        admitting.free = admitting.free.minus(assignment.resources)
        return None

    def _admission(self, stored: int | None, fence: int) -> Admission:
        """The fence rule, `agent.fence.admit` (a method: a test plants a broken one in the
        simulation to show that the simulation catches it)."""
        return admit(stored, fence)

    def _refusal(self, assignment: Assignment, free: Resources,
                 running: int) -> tuple[Decision, str] | None:
        """Why admission says no to a new fence, or None."""
        if not assignment.command:
            return Decision.EMPTY_COMMAND, EMPTY_COMMAND_REASON
        if running >= self._config.max_running_attempts:
            return Decision.TOO_MANY_RUNNING, f"{running} attempts running, the most this " \
                                              "agent runs"
        if not assignment.resources.fits_in(free):
            needed = assignment.resources
            return Decision.NO_CAPACITY, (
                f"no capacity: needs cpu_milli={needed.cpu_milli} "
                f"memory_mb={needed.memory_mb} gpu={needed.gpu}, free cpu_milli="
                f"{free.cpu_milli} memory_mb={free.memory_mb} gpu={free.gpu}")
        return None

    def _queue_full(self, admitting: _Admitting) -> bool:
        """The local queue, with what this answer queues so far, is at its depth."""
        return len(self._queue) + len(admitting.queued) >= self._config.queue_depth

    def _held_back(self) -> bool:
        """This core may not start work now (`may_start`: with several groups, not this
        group's turn). A core without a local queue is never held back: what it is handed it
        starts if it fits, as an agent without a queue always did."""
        return self._may_start is not None and self._config.queue_depth > 0 \
            and not self._may_start(len(self._queue))

    def _can_queue(self, assignment: Assignment, admitting: _Admitting) -> bool:
        """Room in the local queue, and it fits this cluster's total capacity (so it can start
        once enough has finished). While this core is held back (another group's turn), past
        its depth too as long as everything it holds queued fits the capacity: its leader
        placed such an assignment on its last offer, before the turn passed on (the state
        holds room for it and counts it in no queue), so refusing it would cost a round trip
        and log entries for nothing; one offer's worth of work is what can cross so."""
        if not assignment.resources.fits_in(self._config.capacity):
            return False
        if not self._queue_full(admitting):
            return True
        if admitting.starting or not self._config.queue_depth:
            return False
        held = assignment.resources
        for queued in (*self._queue.values(), *admitting.queued):
            held = held.plus(queued.resources)
        return held.fits_in(self._config.capacity)

    def _redelivered(self, assignment: Assignment) -> tuple[Decision, Report | None]:
        """The same fence again: acknowledge again, never run twice."""
        fence = assignment.fence
        record = self._running.get(fence) or self._outbox.attempt(fence)
        if record is None and self._crossed(fence, ReportKind.REJECTED, *TERMINAL_REPORT_KINDS):
            return Decision.REDELIVERY_CROSSED, None  # answered and committed already
        if record is None:
            # Its fence was stored but it never started here: refused earlier, killed before it
            # arrived, or the agent stopped between storing the fence and recording the attempt.
            return Decision.SEEN_BEFORE, _rejected(assignment, SEEN_BEFORE_REASON)
        if record.state in _ANSWERS:
            kind = _ANSWERS[record.state]  # STARTED, or QUEUED: never queued or run twice
            if self._crossed(fence, kind):
                return Decision.REDELIVERY_CROSSED, None  # this answer crossed that commit
            return Decision.REDELIVERY_ANSWERED, _report(kind, record)
        return Decision.REDELIVERY_FINISHED, None  # its FINISHED/KILLED report is in the outbox

    def _launch(self, to_run: Sequence[Assignment], refused: Sequence[Report],
                queued: Sequence[Assignment] = (), carry: _Carry = ((), ())) -> list[Decision]:
        now_ms = self._clock.now_ms()
        records = [self._record(a, AttemptState.RUNNING, now_ms) for a in to_run]
        # Recorded before the processes start: a restart then finds anything that may run. A
        # queued attempt's record and its QUEUED report are one write, before it is answered.
        # `carry`: completions' records and reports written in this one transaction.
        self._outbox.write(
            records=[*carry[0], *records,
                     *(self._record(a, AttemptState.QUEUED, now_ms) for a in queued)],
            reports=[*carry[1], *(_rejected(a, "", ReportKind.QUEUED) for a in queued)])
        self._enqueue(queued)
        self._store_reports(refused)
        self._metrics.attempts_rejected.inc(sum(r.kind == ReportKind.REJECTED for r in refused))
        launched: list[AttemptRecord] = []
        reports: list[Report] = []
        failed: list[int] = []
        for assignment, record in zip(to_run, records, strict=True):
            try:
                launch = self._executor.start(assignment)
            except ExecutorError as error:
                failed.append(record.fence)
                reports.append(_rejected(assignment, f"could not start: {error}"))
                self._log.error("attempt_start_failed", fence=record.fence, error=str(error))
                continue
            started = record.launched(launch.wrapper_pid, launch.wrapper_start_ticks)
            launched.append(started)
            reports.append(_report(ReportKind.STARTED, started))
            self._running[started.fence] = started
            self._log.info("attempt_started", fence=started.fence, job=started.job_id,
                     task=started.task_id, attempt=started.attempt, pid=started.wrapper_pid)
        self._outbox.write(records=launched, reports=reports, delete_records=failed)
        self._count_launched(len(launched), len(failed))
        return [Decision.STARTED] * len(launched) + [Decision.START_FAILED] * len(failed)

    def _record(self, assignment: Assignment, state: AttemptState, now_ms: int) -> AttemptRecord:
        a = assignment
        return AttemptRecord(a.fence, a.job_id, a.task_id, a.attempt, state, a.resources,
                             self._executor.attempt_dir(a.fence), now_ms)

    def _enqueue(self, queued: Sequence[Assignment]) -> None:
        for assignment in queued:
            self._queue[assignment.fence] = assignment
            self._log.info("attempt_queued", fence=assignment.fence, job=assignment.job_id,
                     task=assignment.task_id, queued=len(self._queue))
        self._metrics.attempts_queued.set(len(self._queue))
        if queued:
            self._held_back()  # tells `may_start` that work waits here now

    def start_queued(self, carry: _Carry = ((), ())) -> list[Decision]:
        """Starts queued attempts in fence order while they fit the free capacity and the
        running bound, stopping at the first that does not (FIFO: the leader hands freed room
        to its queue in the same order). Each starts exactly as an admitted one: RUNNING
        record, process, STARTED report. Called after `collect()` (whose FINISHED reports are
        then written first), by `collect_and_start()` (whose records and reports, `carry`, are
        written with the RUNNING records, before any start) and by `handle`."""
        self._drop_superseded()
        if not self._queue or self._held_back():
            self._outbox.write(records=carry[0], reports=carry[1])
            return []
        free, running = self.free(), len(self._running)
        to_run: list[Assignment] = []
        for fence in sorted(self._queue):
            assignment = self._queue[fence]
            if running + len(to_run) >= self._config.max_running_attempts or \
                    not assignment.resources.fits_in(free):
                break
            to_run.append(assignment)
            free = free.minus(assignment.resources)
        for assignment in to_run:
            del self._queue[assignment.fence]
        self._metrics.attempts_queued.set(len(self._queue))
        return [Decision.QUEUE_STARTED if d == Decision.STARTED else d
                for d in self._launch(to_run, (), carry=carry)]

    def _drop_superseded(self) -> None:
        """A queued attempt whose task has since been handed a higher fence never starts: the
        leader ended it and placed the task again (its assignment timed out while the QUEUED
        answer was lost, say), and the kill that should have taken it out of the queue may
        still be on its way. It leaves the queue REJECTED (seen first in the simulation with
        several groups: started from the queue, it ran beside the task's current attempt)."""
        for fence in sorted(self._queue):
            assignment = self._queue[fence]
            stored = self._fences.fence(assignment.task_key)
            if stored is not None and stored > fence:
                self._withdraw(fence, ReportKind.REJECTED, SUPERSEDED_REASON)
                self._log.info("queued_attempt_superseded", fence=fence, job=assignment.job_id,
                         task=assignment.task_id, stored_fence=stored)

    def _count_launched(self, launched: int, failed: int) -> None:
        self._metrics.attempts_started.inc(launched)
        for turnaround_s in self._slots.started(launched, self._clock.monotonic_s()):
            self._metrics.slot_turnaround_seconds.observe(turnaround_s)
        self._metrics.slots_idle.inc(self._slots.idle - self._idle_counted)
        self._idle_counted = self._slots.idle
        self._metrics.attempts_rejected.inc(failed)
        self._metrics.attempts_running.set(len(self._running))
        self._metrics.reports_pending.set(self._outbox.count())

    def _store_reports(self, reports: Sequence[Report]) -> None:
        """Stores the reports not already waiting (a repeated one would cost a synced write)."""
        new = [r for r in reports if not self._outbox.has(r.key)]
        if new:
            self._outbox.put(new)
            self._metrics.reports_pending.set(self._outbox.count())

    # -- completions and reports ---------------------------------------------------------------

    def collect(self) -> int:
        """Executor completions become FINISHED/KILLED reports, each attempt's exactly once.
        Returns how many completions the executor handed over. The caller then calls
        `start_queued()` (or calls `collect_and_start()` instead): what the completions freed
        goes to the local queue at once."""
        records, reports, count = self._completions()
        if not count:
            return 0
        self._outbox.write(records=records, reports=reports)
        self._freed(len(records))
        self._metrics.reports_pending.set(self._outbox.count())
        return count

    def collect_and_start(self) -> tuple[int, list[Decision]]:
        """`collect()` then `start_queued()` with one synced write before the starts, not two:
        the completions' finished records and FINISHED/KILLED reports go in the same
        transaction as the RUNNING records of the queued attempts they make room for (a restart
        finds all of them or none, and a completion found again after a crash is reported as
        after any crash before its write). Returns (completions, the starts' decisions)."""
        records, reports, count = self._completions()
        if not count:
            return 0, self.start_queued() if self._queue_head_fits() else []
        self._freed(len(records))
        decisions = self.start_queued((records, reports))
        self._metrics.reports_pending.set(self._outbox.count())
        return count, decisions

    def _queue_head_fits(self) -> bool:
        """With several groups: this core may start now and its queue's head fits the free
        capacity (room another group's attempt freed, or a turn that came to this group: no
        completion of this core's says so). False with one group, whose queue starts on its
        own completions and heartbeat answers."""
        if self._may_start is None or self._held_back() or not self._queue:
            return False  # (asked even with an empty queue: it says that nothing waits)
        head = self._queue[min(self._queue)]
        return len(self._running) < self._config.max_running_attempts and \
            head.resources.fits_in(self.free())

    def _completions(self) -> tuple[list[AttemptRecord], list[Report], int]:
        """(finished records, their reports, completions handed over), nothing written."""
        completions = self._executor.poll()
        records: list[AttemptRecord] = []
        reports: list[Report] = []
        for completion in completions:
            record = self._running.pop(completion.fence, None) \
                or self._outbox.attempt(completion.fence)
            self._kills_requested.discard(completion.fence)
            if record is None or record.state != AttemptState.RUNNING:
                self._log.warning("completion_ignored", fence=completion.fence)
                continue
            report = _completion_report(record, completion)
            records.append(record.finished())
            reports.append(report)
            self._metrics.attempts_finished.labels(report.kind.name).inc()
            self._log.info("attempt_finished", fence=record.fence, job=record.job_id,
                     task=record.task_id, report=report.kind.name, exit_code=report.exit_code,
                     timed_out=report.timed_out, reason=report.reason)
        return records, reports, len(completions)

    def _freed(self, finished: int) -> None:
        self._slots.freed(finished, self._clock.monotonic_s())
        self._metrics.attempts_running.set(len(self._running))

    def pending(self, limit: int) -> list[Report]:
        """The next batch to send (empty while a registration is due: reports wait for it)."""
        return [] if self.need_register else self._outbox.pending(limit)

    def reported(self, batch: Sequence[Report], reported: Reported) -> list[ReportKey]:
        """The leader answered a batch: the reports it answered leave the outbox. Returns
        them; the rest stay and are sent again."""
        acked = _answered(batch, reported.verdicts)
        self._fences.raise_term(reported.term)
        self._outbox.ack(acked)
        self._remember_acks(acked)
        self._metrics.reports_pending.set(self._outbox.count())
        self._metrics.reports_acked.inc(len(acked))
        return acked

    def _remember_acks(self, keys: Iterable[ReportKey]) -> None:
        now_s = self._clock.monotonic_s()
        for key in keys:
            if key not in self._acked:
                self._acked_order.append(key)
            self._acked[key] = now_s
        window_s = self._config.ack_crossing_window_ms / 1000
        while self._acked_order and (len(self._acked_order) > limits.MAX_REMEMBERED_ACKS or
                                     now_s - self._acked[self._acked_order[0]] > window_s):
            self._acked.pop(self._acked_order.popleft(), None)

    def _crossed(self, fence: int, *kinds: ReportKind) -> bool:
        """True if a report of one of `kinds` for `fence` was acked within the crossing
        window (ACK_CROSSING_WINDOW_MS)."""
        now_s = self._clock.monotonic_s()
        window_s = self._config.ack_crossing_window_ms / 1000
        for kind in kinds:
            acked_s = self._acked.get(ReportKey(fence, kind))
            if acked_s is not None and now_s - acked_s <= window_s:
                return True
        return False


def _answered(batch: Sequence[Report], verdicts: Sequence[Verdict]) -> list[ReportKey]:
    """The reports a verdict answers. Verdicts name only a fence and one batch may hold two
    reports of a fence (STARTED and FINISHED), so each verdict answers the first unanswered
    report of its fence, in batch order (the server answers in that order). A report left
    without a verdict stays in the outbox and is sent again."""
    remaining = Counter(verdict.fence for verdict in verdicts)
    answered: list[ReportKey] = []
    for report in batch:
        if remaining[report.fence] > 0:
            remaining[report.fence] -= 1
            answered.append(report.key)
    return answered


def _report(kind: ReportKind, record: AttemptRecord) -> Report:
    return Report(kind, record.job_id, record.task_id, record.fence)


def _rejected(assignment: Assignment, reason: str,
              kind: ReportKind = ReportKind.REJECTED) -> Report:
    """A report answering an assignment without a process: REJECTED (or KILLED, QUEUED)."""
    return Report(kind, assignment.job_id, assignment.task_id, assignment.fence,
                  reason=reason[:limits.MAX_REASON_CHARS])


def _record_rejected(record: AttemptRecord, reason: str) -> Report:
    return Report(ReportKind.REJECTED, record.job_id, record.task_id, record.fence,
                  reason=reason[:limits.MAX_REASON_CHARS])


def _completion_report(record: AttemptRecord, completion: Completion) -> Report:
    kind = ReportKind.KILLED if completion.killed else ReportKind.FINISHED
    return Report(kind, record.job_id, record.task_id, record.fence, completion.exit_code,
                  completion.timed_out, completion.reason[:limits.MAX_REASON_CHARS],
                  completion.outputs, completion.outputs_refused)
