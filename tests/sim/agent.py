"""An in-memory agent that follows the real agent's rules (`agent/agent.py`) without threads,
lmdb, subprocesses or real time.

Durable (survives a crash): the highest fence per task, the highest term, the incarnation
counter, the outbox of unacked reports and the attempt records. Volatile (lost in a crash): what
it watches as running, the kills it asked for, the acks it remembers for the crossing window, the
heartbeat sequence. The "processes" (`SimProcess`) belong to the executor: like the real wrapper
they may outlive an agent crash, or (machine crash) vanish with it.

Admission is the real `agent.fence.admit`; report helpers are the real agent's. The order of the
durable writes is the real agent's too: fences before anything starts or is refused, the attempt
record before its process starts, a report stored before it is sent and dropped only once acked.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent import agent as real
from agent import session as s
from agent.executor import VANISHED_EXIT_CODE
from agent.fence import Admission, admit
from agent.model import (
    TERMINAL_REPORT_KINDS,
    Assignment,
    AttemptRecord,
    AttemptState,
    Beat,
    Completion,
    Directives,
    KillDirective,
    Registration,
    Report,
    ReportKey,
    ReportKind,
    Resources,
)
from raftsched.clock import ManualClock
from tests.sim.gateway import Gateway
from tests.sim.history import History

REPORT_BATCH_MAX = 8
"""Small on purpose, so flushes take several batches."""
ACK_CROSSING_WINDOW_S = 10.0


@dataclass
class SimProcess:
    """One attempt's process, as the executor sees it."""

    fence: int
    steps_left: int
    exit_code: int
    timeout_at_ms: int | None
    kill_requested: bool = False
    vanished: bool = False
    done: Completion | None = None


@dataclass
class Durable:
    fences: dict[str, int] = field(default_factory=dict)
    term: int = 0
    incarnation: int = 0
    reports: dict[ReportKey, Report] = field(default_factory=dict)
    records: dict[int, AttemptRecord] = field(default_factory=dict)

    def raise_term(self, term: int) -> bool:
        if term <= self.term:
            return False
        self.term = term
        return True

    def raise_fences(self, fences: dict[str, int]) -> None:
        for key, fence in fences.items():
            self.fences[key] = max(self.fences.get(key, 0), fence)

    def store_reports(self, reports: Sequence[Report]) -> None:
        for report in reports:
            self.reports.setdefault(report.key, report)  # stored once per (fence, kind)

    def ack(self, keys: Sequence[ReportKey]) -> None:
        for key in keys:
            self.reports.pop(key, None)
            record = self.records.get(key.fence)
            if key.kind in TERMINAL_REPORT_KINDS and record is not None \
                    and record.state == AttemptState.FINISHED:
                del self.records[key.fence]

    def pending(self, limit: int) -> list[Report]:
        return [self.reports[k] for k in sorted(self.reports)[:limit]]


@dataclass
class MessageFaults:
    lost: float = 0.08
    """A request or its answer is lost."""
    duplicated: float = 0.05
    """An answer is handled twice, or a report batch sent twice."""
    delayed: float = 0.08
    """A heartbeat answer arrives later, after newer ones."""

    def quiet(self) -> None:
        self.lost = self.duplicated = self.delayed = 0.0


class SimAgent:
    def __init__(self, cluster_id: str, capabilities: tuple[str, ...], capacity: Resources,
                 clock: ManualClock, rng: random.Random, history: History) -> None:
        self.cluster_id = cluster_id
        self.capabilities = capabilities
        self.capacity = capacity
        self.clock = clock
        self.rng = rng
        self.history = history
        self.faults = MessageFaults()
        self.durable = Durable()
        self.processes: dict[int, SimProcess] = {}
        self.in_flight: list[Directives] = []
        """Heartbeat answers on their way (delayed)."""
        self.in_flight_reports: list[tuple[int, list[Report]]] = []
        """Copies of report batches (incarnation, reports) still on their way (delayed)."""
        self.up = False
        self.partitioned_steps = 0
        self.target = 0
        self._reset_volatile()

    def _reset_volatile(self) -> None:
        self.running: dict[int, AttemptRecord] = {}
        self.kills_requested: set[int] = set()
        self.acked: dict[ReportKey, float] = {}
        self.seq = 0
        self.need_register = True
        self.incarnation = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """A new incarnation; re-adopt what the records say runs, collect what finished."""
        assert not self.up
        self._reset_volatile()
        self.durable.incarnation += 1
        self.incarnation = self.durable.incarnation
        for record in sorted(self.durable.records.values(), key=lambda r: r.fence):
            if record.state != AttemptState.RUNNING:
                continue
            process = self.processes.get(record.fence)
            if process is None or process.vanished:
                self.processes[record.fence] = SimProcess(
                    record.fence, 0, 0, None, vanished=True,
                    done=Completion(record.fence, VANISHED_EXIT_CODE, reason="wrapper vanished"))
            self.running[record.fence] = record
        self.up = True
        self.collect()

    def crash(self, *, machine: bool) -> None:
        """The agent process dies (its volatile state with it); on a machine crash the attempts'
        processes die too."""
        self.up = False
        self._reset_volatile()
        if machine:
            for process in self.processes.values():
                if process.done is None:
                    process.vanished = True

    @property
    def reachable(self) -> bool:
        return self.up and self.partitioned_steps == 0

    # -- executor --------------------------------------------------------------------------------

    def progress(self) -> None:
        """Time passes for the processes (whether or not the agent runs)."""
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
                    p.done = Completion(fence, p.exit_code)

    def _poll(self) -> list[Completion]:
        done = [p for _, p in sorted(self.processes.items()) if p.done is not None]
        for process in done:
            del self.processes[process.fence]
        return [p.done for p in done if p.done is not None]

    def collect(self) -> None:
        """`Agent._collect`: completions become FINISHED/KILLED reports, each once."""
        if not self.up:
            return
        for completion in self._poll():
            record = self.running.pop(completion.fence, None) \
                or self.durable.records.get(completion.fence)
            self.kills_requested.discard(completion.fence)
            if record is None or record.state != AttemptState.RUNNING:
                continue
            self.durable.records[record.fence] = record.finished()
            self.durable.store_reports([real._completion_report(record, completion)])

    # -- session -----------------------------------------------------------------------------------

    def register(self, gateway: Gateway) -> bool:
        known = tuple(r.known() for _, r in sorted(self.durable.records.items()))
        try:
            registered = gateway.register(Registration(
                self.cluster_id, self.incarnation, self.capabilities, self.capacity, known))
        except s.SessionError as error:
            self._follow(error)
            return False
        if self.rng.random() < self.faults.lost:
            return False  # committed, answer lost: registers again (same incarnation)
        self.durable.raise_term(registered.term)
        self._stop_unknown(registered.stop)
        self.need_register = False
        return True

    def _stop_unknown(self, stop: Sequence[KillDirective]) -> None:
        """Agent._stop_unknown: running attempts the scheduler does not know as ours stop."""
        for kill in stop:
            process = self.processes.get(kill.fence)
            if kill.fence in self.running and process is not None and process.done is None:
                process.kill_requested = True
                self.kills_requested.add(kill.fence)

    def beat(self, gateway: Gateway) -> Directives | None:
        self.seq += 1
        free = self.capacity
        for record in self.running.values():
            free = free.minus(record.resources)
        try:
            return gateway.heartbeat(Beat(self.cluster_id, self.incarnation, self.seq, free,
                                          tuple(sorted(self.running)), 0))
        except s.Reregister:
            self.need_register = True
        except s.SessionError as error:
            self._follow(error)
        return None

    def _follow(self, error: s.SessionError) -> None:
        if isinstance(error, s.NotLeader) and error.leader:
            self.target = int(error.leader.split("-")[1].split(":")[0])

    # -- handling directives (Agent._handle) -----------------------------------------------------

    def handle(self, directives: Directives) -> bool:
        if directives.term < self.durable.term:
            self.history.count("stale_term_ignored")
            return False
        self.durable.raise_term(directives.term)
        self._handle_kills(directives.kills)
        self._handle_assignments(directives.assignments, directives.term)
        seen = [(k.job_id, k.task_id, k.fence) for k in directives.kills]
        seen += [(a.job_id, a.task_id, a.fence) for a in directives.assignments]
        for job_id, task_id, fence in seen:
            self.history.on_seen(self.cluster_id, job_id, task_id, fence)
        return True

    def _handle_kills(self, kills: Sequence[KillDirective]) -> None:
        fences: dict[str, int] = {}
        reports: list[Report] = []
        for kill in kills:
            if kill.fence in self.running:
                process = self.processes.get(kill.fence)
                if process is not None and process.done is None:
                    process.kill_requested = True
                    self.kills_requested.add(kill.fence)
                continue
            if kill.fence in self.durable.records:
                continue
            if self._crossed(kill.fence, *TERMINAL_REPORT_KINDS):
                continue
            fences[kill.task_key] = max(fences.get(kill.task_key, 0), kill.fence)
            reports.append(Report(ReportKind.KILLED, kill.job_id, kill.task_id, kill.fence,
                                  reason="not running on this agent"))
        self.durable.raise_fences(fences)
        self._store_reports(reports)

    def _handle_assignments(self, assignments: Sequence[Assignment], term: int) -> None:
        free = self.capacity
        for record in self.running.values():
            free = free.minus(record.resources)
        fences: dict[str, int] = {}
        to_run: list[Assignment] = []
        reports: list[Report] = []
        for assignment in assignments:
            key = assignment.task_key
            stored = fences.get(key) or self.durable.fences.get(key)
            admission = admit(stored, assignment.fence, term, term)
            if admission == Admission.RUN:
                fences[key] = assignment.fence
                if assignment.resources.fits_in(free):
                    to_run.append(assignment)
                    free = free.minus(assignment.resources)
                else:
                    reports.append(real._rejected(assignment, "no capacity"))
            elif admission == Admission.REDELIVERY:
                report = self._redelivered(assignment)
                if report is not None:
                    reports.append(report)
            else:
                assert admission == Admission.STALE_FENCE, admission
                self.history.count("stale_fence_rejected")
                reports.append(real._rejected(assignment, f"stale fence {assignment.fence}"))
        self.durable.raise_fences(fences)
        self._launch(to_run, reports)

    def _redelivered(self, assignment: Assignment) -> Report | None:
        fence = assignment.fence
        self.history.count("redelivered")
        record = self.running.get(fence) or self.durable.records.get(fence)
        if record is None and self._crossed(fence, ReportKind.REJECTED, *TERMINAL_REPORT_KINDS):
            return None
        if record is None:
            return real._rejected(assignment, "fence seen before; not running here")
        if record.state == AttemptState.RUNNING:
            if self._crossed(fence, ReportKind.STARTED):
                return None
            return real._report(ReportKind.STARTED, record)
        return None

    def _launch(self, to_run: Sequence[Assignment], refused: Sequence[Report]) -> None:
        now_ms = self.clock.now_ms()
        records = [AttemptRecord(a.fence, a.job_id, a.task_id, a.attempt, AttemptState.RUNNING,
                                 a.resources, "", now_ms) for a in to_run]
        for record in records:
            self.durable.records[record.fence] = record  # before the process starts
        self._store_reports(refused)
        started: list[Report] = []
        for assignment, record in zip(to_run, records, strict=True):
            self.history.on_start(self.cluster_id, assignment.job_id, assignment.task_id,
                                  assignment.fence)
            timeout_at = now_ms + assignment.timeout_ms if assignment.timeout_ms else None
            self.processes[record.fence] = SimProcess(
                record.fence, self.rng.randint(1, 6), self._exit_code(), timeout_at)
            self.running[record.fence] = record
            started.append(real._report(ReportKind.STARTED, record))
        self.durable.store_reports(started)

    def _exit_code(self) -> int:
        roll = self.rng.random()
        if roll < 0.12:
            return 1
        if roll < 0.16:
            return 2  # non-retryable in the generated specs
        return 0

    def _store_reports(self, reports: Sequence[Report]) -> None:
        self.durable.store_reports([r for r in reports if r.key not in self.durable.reports])

    def _crossed(self, fence: int, *kinds: ReportKind) -> bool:
        now_s = self.clock.monotonic_s()
        for kind in kinds:
            acked_s = self.acked.get(ReportKey(fence, kind))
            if acked_s is not None and now_s - acked_s <= ACK_CROSSING_WINDOW_S:
                return True
        return False

    # -- reports (Agent._flush) ------------------------------------------------------------------

    def flush(self, gateway: Gateway) -> bool:
        """One batch of pending reports to the leader; acked ones leave the outbox."""
        if self.need_register:
            return True
        batch = self.durable.pending(REPORT_BATCH_MAX)
        if not batch:
            return True
        if self.rng.random() < self.faults.lost:
            return False  # the request is lost on its way
        if self.rng.random() < self.faults.delayed:
            self.in_flight_reports.append((self.incarnation, batch))
        sends = 2 if self.rng.random() < self.faults.duplicated else 1
        reported = None
        for _ in range(sends):
            try:
                reported = gateway.report(self.cluster_id, self.incarnation, batch)
            except s.Reregister:
                self.need_register = True
                return False
            except s.SessionError as error:
                self._follow(error)
                return False
        assert reported is not None
        if self.rng.random() < self.faults.lost:
            return False  # committed, the answer is lost: sent again later
        acked = real._answered(batch, reported.verdicts)
        self.durable.raise_term(reported.term)
        self.durable.ack(acked)
        now_s = self.clock.monotonic_s()
        for key in acked:
            self.acked[key] = now_s
        return len(acked) == len(batch)
