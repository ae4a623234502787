"""The agent core: admit fenced assignments, run them, report results durably.

Transport-free: it takes a `Session` (gRPC in production, an in-memory fake in tests) and an
`Executor`. Two threads:
- the heartbeat thread (the caller of `run()`): registers, long-polls the leader, and handles
  each answer under the agent's lock: term check, kill directives, then assignments;
- the reporter thread: turns executor completions into FINISHED/KILLED reports and flushes the
  outbox to the leader, acking what the leader answers.

Durability order, so that a crash at any point is safe (DESIGN.md §2 "Fences", §3):
1. the fences of an answer's assignments are stored (synced) before any is started or refused;
2. an attempt's record is stored (synced) before its process starts, so a restarted agent finds
   every process it may have started;
3. a report is stored (synced) before it is sent, and dropped only once the leader answers that
   it is committed; a FINISHED/KILLED report and the end of its attempt's running state are one
   transaction, so a result is reported once even if the agent restarts at any point.
On start the agent bumps its incarnation, re-adopts the attempts in its records (results written
while it was down become FINISHED reports), and registers with every attempt it knows of. On
stop it leaves running attempts alone: their wrappers outlive it and the next start picks them
up.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agent.executor import Executor, ExecutorError
from agent.fence import Admission, FenceStore, admit
from agent.logs import LogServer
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
    Registration,
    Report,
    ReportKey,
    ReportKind,
    Resources,
    Verdict,
)
from agent.outbox import Outbox
from agent.session import Reregister, Session, SessionError
from agent.slots import SlotTurnaround
from raftsched import limits
from raftsched.clock import wall_ms
from raftsched.eventlog import EventLogger
from raftsched.protocol import Observation, ReportVerdict

log = EventLogger("agent")

assert limits.MAX_ATTEMPT_RECORDS <= limits.MAX_REGISTER_KNOWN_ATTEMPTS  # one Register lists all

HEARTBEAT_WAIT_MS = 1_000
"""Long-poll wait asked of the leader (it caps it too)."""
POLL_INTERVAL_MS = 50
"""The reporter checks the executor for completions at least this often."""
RETRY_BACKOFF_INITIAL_MS = 100
RETRY_BACKOFF_MAX_MS = 5_000
"""Capped exponential backoff between failed calls to the leader."""
NEVER_STARTED_REASON = "the agent stopped before starting it"
STOP_JOIN_TIMEOUT_MS = 10_000
ATTEMPT_DIR_PRUNE_INTERVAL_MS = 60_000
ACK_CROSSING_WINDOW_MS = 10_000
"""For this long after a report is acked, a directive it answered (an assignment for STARTED or
REJECTED, a kill for FINISHED or KILLED) is taken as having crossed that commit and draws no
second answer. Past it, a repeated directive is answered again. Longer than the server's
long-poll cap plus a heartbeat's deadline slack."""

ATTEMPTS_DIR = "attempts"
FENCE_DIR = "fence.lmdb"
OUTBOX_DIR = "outbox.lmdb"
LOCK_FILE = "agent.lock"


class AgentError(Exception):
    """The agent cannot start (data dir in use or unusable) or stopped on an internal error."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    cluster_id: str
    data_dir: Path
    capacity: Resources
    capabilities: tuple[str, ...] = ()
    heartbeat_wait_ms: int = HEARTBEAT_WAIT_MS
    poll_interval_ms: int = POLL_INTERVAL_MS
    report_batch_max: int = limits.REPORT_BATCH_MAX
    retry_backoff_initial_ms: int = RETRY_BACKOFF_INITIAL_MS
    retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS
    ack_crossing_window_ms: int = ACK_CROSSING_WINDOW_MS
    custom: tuple[tuple[str, int], ...] = ()
    """Named custom resources this cluster offers (advertised; the scheduler accounts them)."""


def attempts_root(data_dir: Path) -> Path:
    """Where a SubprocessExecutor of an agent on `data_dir` keeps attempt dirs."""
    return data_dir / ATTEMPTS_DIR


class Agent:
    def __init__(self, config: AgentConfig, session: Session, executor: Executor, *,
                 metrics: AgentMetrics | None = None,
                 stop: threading.Event | None = None) -> None:
        assert config.heartbeat_wait_ms >= 0 and config.poll_interval_ms > 0
        assert config.report_batch_max >= 1
        self._config = config
        self._session = session
        self._executor = executor
        self._metrics = metrics or AgentMetrics()
        self._stop = stop or threading.Event()
        self._lock_handle = _lock_data_dir(config.data_dir)
        try:
            self._fences = FenceStore(config.data_dir / FENCE_DIR)
            try:
                self._outbox = Outbox(config.data_dir / OUTBOX_DIR)
            except BaseException:
                self._fences.close()
                raise
        except BaseException:
            self._lock_handle.close()
            raise
        self._lock = threading.RLock()
        self._running: dict[int, AttemptRecord] = {}
        self._slots = SlotTurnaround()
        self._idle_counted = 0
        self._kills_requested: set[int] = set()
        self._acked: dict[ReportKey, float] = {}  # -> monotonic s of the ack
        self._acked_order: deque[ReportKey] = deque()
        self._wake = threading.Event()
        self._need_register = threading.Event()
        self._need_register.set()
        self._incarnation = 0
        self._seq = 0
        self._failure: BaseException | None = None
        self._closed = False
        executor.subscribe(self._wake.set)
        self._logs = LogServer(executor.attempt_dir,
                               lambda chunk: session.send_log(config.cluster_id, chunk),
                               self._stop)

    # -- public --------------------------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        return self._incarnation

    def running(self) -> list[int]:
        with self._lock:
            return sorted(self._running)

    def pending_reports(self) -> int:
        return int(self._outbox.count())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def run(self) -> None:
        """Runs until stop(); raises AgentError if it stopped on an internal error."""
        self._guarded(self._start)
        if self._failure is None:
            reporter = threading.Thread(target=self._guarded, args=(self._report_loop,),
                                        name="agent-reporter", daemon=True)
            reporter.start()
            try:
                self._guarded(self._heartbeat_loop)
            finally:
                self.stop()
                reporter.join(timeout=STOP_JOIN_TIMEOUT_MS / 1000)
                self._logs.close()
        log.info("agent_stopped", cluster=self._config.cluster_id, running=len(self._running),
                 pending_reports=self.pending_reports())
        if self._failure is not None:
            raise AgentError(f"agent stopped on an internal error: {self._failure!r}") \
                from self._failure

    def close(self) -> None:
        """Closes the stores and releases the data dir (after run() has returned)."""
        if self._closed:
            return
        self._closed = True
        self._outbox.close()
        self._fences.close()
        self._lock_handle.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- startup -------------------------------------------------------------------------------

    def _start(self) -> None:
        """A new incarnation; attempts an earlier agent left are watched again, and results
        written while no agent ran become reports before the registration lists them."""
        self._incarnation = self._fences.bump_incarnation()
        log.info("agent_starting", cluster=self._config.cluster_id, incarnation=self._incarnation)
        self._adopt()
        self._collect()
        self._prune_attempt_dirs()

    def _adopt(self) -> None:
        """Watches again every attempt an earlier agent left running. One it stopped before
        launching never ran: it is rejected (an infrastructure failure, retried at once) and
        not listed as running at registration."""
        with self._lock:
            never_started: list[AttemptRecord] = []
            for record in self._outbox.attempts():
                if record.state != AttemptState.RUNNING:
                    continue
                if not self._executor.adopt(record):
                    never_started.append(record)
                    log.info("attempt_never_started", fence=record.fence, job=record.job_id,
                             task=record.task_id)
                    continue
                self._running[record.fence] = record
                log.info("attempt_adopted", fence=record.fence, job=record.job_id,
                         task=record.task_id, pid=record.wrapper_pid)
            if never_started:
                self._outbox.write(
                    reports=[Report(ReportKind.REJECTED, r.job_id, r.task_id, r.fence,
                                    reason=NEVER_STARTED_REASON) for r in never_started],
                    delete_records=[r.fence for r in never_started])
            self._metrics.attempts_running.set(len(self._running))

    def _register(self) -> None:
        known = tuple(record.known() for record in self._outbox.attempts())
        registered = self._session.register(Registration(
            self._config.cluster_id, self._incarnation, self._config.capabilities,
            self._config.capacity, known, self._config.custom))
        with self._lock:
            self._fences.raise_term(registered.term)
            self._stop_unknown(registered.stop)
        self._need_register.clear()
        log.info("agent_registered", cluster=self._config.cluster_id, incarnation=self._incarnation,
                 term=registered.term, known=len(known), lost=registered.lost,
                 kills=registered.kills, stop=len(registered.stop))

    def _stop_unknown(self, stop: Sequence[KillDirective]) -> None:
        """Stops the running attempts the scheduler answered it does not know as this
        cluster's (`Registered.stop`: forgotten jobs, a restored older state): the kill
        directive's path without a directive. Their KILLED reports are answered not_found and
        leave the outbox. Only attempts this agent runs are touched."""
        for kill in stop[:limits.MAX_REGISTER_KNOWN_ATTEMPTS]:
            if kill.fence not in self._running or kill.fence in self._kills_requested:
                continue
            if self._executor.kill(kill.fence):
                self._kills_requested.add(kill.fence)
                log.warning("attempt_not_known_stopped", fence=kill.fence, job=kill.job_id,
                            task=kill.task_id)

    # -- heartbeat thread ----------------------------------------------------------------------

    def _guarded(self, loop: Callable[[], None]) -> None:
        """Runs a loop; an unexpected error (a store failure, a broken invariant) stops the
        whole agent: crash-only, the next start recovers from the durable state."""
        try:
            loop()
        except BaseException as error:
            if self._failure is None:
                self._failure = error
            log.exception("agent_failed", error=repr(error))
            self.stop()

    def _heartbeat_loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._need_register.is_set():
                    self._register()
                directives = self._beat()
            except Reregister as error:
                log.info("reregister", reason=str(error))
                self._need_register.set()
                failures += 1
                self._pause(failures - 1)
                continue
            except SessionError as error:
                failures += 1
                self._metrics.session_errors.labels(type(error).__name__).inc()
                log.warning("heartbeat_failed", error=type(error).__name__, detail=str(error),
                            failures=failures)
                self._pause(failures)
                continue
            failures = 0
            if not self._handle(directives):
                self._pause(1)

    def _beat(self) -> Directives:
        with self._lock:
            self._seq += 1
            beat = Beat(self._config.cluster_id, self._incarnation, self._seq, self._free(),
                        tuple(sorted(self._running)), self._config.heartbeat_wait_ms)
        started_s = time.monotonic()
        directives = self._session.heartbeat(beat)
        self._metrics.heartbeat_latency_seconds.observe(time.monotonic() - started_s)
        return directives

    def _observe(self) -> Observation:
        """The free capacity now, numbered in the heartbeats' sequence."""
        with self._lock:
            self._seq += 1
            return Observation(self._seq, self._free())

    def _pause(self, failures: int) -> None:
        if failures <= 0:
            return
        delay_ms = min(self._config.retry_backoff_max_ms,
                       self._config.retry_backoff_initial_ms * (1 << min(failures - 1, 20)))
        self._stop.wait(delay_ms / 1000)

    def _free(self) -> Resources:
        """What this cluster can still admit: its capacity less what its attempts hold, and no
        more than the executor itself sees free (a Slurm partition other users share)."""
        free = self._config.capacity
        for record in self._running.values():
            free = free.minus(record.resources)
        seen = self._executor.observed_free()
        if seen is not None:
            free = Resources(min(free.cpu_milli, seen.cpu_milli),
                             min(free.memory_mb, seen.memory_mb), min(free.gpu, seen.gpu))
        return free

    def _handle(self, directives: Directives) -> bool:
        """Acts on one heartbeat answer; False when it came from a lower term (ignored)."""
        if directives.assignments or directives.kills:
            log.debug("directives_received", term=directives.term,
                      assignments=len(directives.assignments), kills=len(directives.kills))
        if directives.log_requests:  # reads of files we keep: safe from any term
            self._logs.submit(directives.log_requests)
        with self._lock:
            stored_term = self._fences.term()
            if directives.term < stored_term:
                self._metrics.stale_directives.inc()
                log.warning("stale_term_ignored", term=directives.term, stored_term=stored_term,
                            assignments=len(directives.assignments), kills=len(directives.kills))
                return False
            if self._fences.raise_term(directives.term):
                log.info("term_seen", term=directives.term)
            self._handle_kills(directives.kills)
            self._handle_assignments(directives.assignments[:limits.MAX_ASSIGNMENTS_PER_BEAT],
                                     directives.term)
        self._wake.set()
        return True

    def _handle_kills(self, kills: Sequence[KillDirective]) -> None:
        fences: dict[str, int] = {}
        reports: list[Report] = []
        for kill in kills:
            if kill.fence < 1:
                log.warning("malformed_kill", job=kill.job_id, task=kill.task_id)
                continue
            if kill.fence in self._running:
                if self._executor.kill(kill.fence) and kill.fence not in self._kills_requested:
                    self._kills_requested.add(kill.fence)
                    log.info("attempt_kill_requested", fence=kill.fence, job=kill.job_id,
                             task=kill.task_id)
                continue
            if self._outbox.attempt(kill.fence) is not None:
                continue  # finished: its FINISHED or KILLED report settles the directive
            if self._crossed(kill.fence, *TERMINAL_REPORT_KINDS):
                continue  # settled already; this answer crossed that commit
            # Not running here: say so at once, and remember the fence so that this attempt can
            # never start here later (an assignment of it is then a redelivery).
            fences[kill.task_key] = max(fences.get(kill.task_key, 0), kill.fence)
            reports.append(Report(ReportKind.KILLED, kill.job_id, kill.task_id, kill.fence,
                                  reason="not running on this agent"))
        self._fences.raise_fences(fences)
        self._store_reports(reports)

    def _handle_assignments(self, assignments: Sequence[Assignment], term: int) -> None:
        if not assignments:
            return
        pending = self._outbox.count()
        if pending >= limits.OUTBOX_ADMISSION_PAUSE_REPORTS:
            log.warning("admission_paused", pending_reports=pending)
            return
        free = self._free()
        fences: dict[str, int] = {}
        to_run: list[Assignment] = []
        reports: list[Report] = []
        for assignment in assignments:
            if assignment.fence < 1:
                log.warning("malformed_assignment", job=assignment.job_id, task=assignment.task_id)
                continue
            key = assignment.task_key
            stored = fences.get(key) or self._fences.fence(key)
            admission = admit(stored, assignment.fence, term, term)
            if admission == Admission.RUN:
                fences[key] = assignment.fence
                refusal = self._refusal(assignment, free, len(self._running) + len(to_run))
                if refusal is None:
                    to_run.append(assignment)
                    free = free.minus(assignment.resources)
                else:
                    reports.append(_rejected(assignment, refusal))
            elif admission == Admission.REDELIVERY:
                report = self._redelivered(assignment)
                if report is not None:
                    reports.append(report)
            else:
                assert admission == Admission.STALE_FENCE, admission
                log.info("stale_fence_rejected", fence=assignment.fence, job=assignment.job_id,
                         task=assignment.task_id, seen=stored)
                reports.append(_rejected(assignment, f"stale fence {assignment.fence}: fence "
                                                     f"{stored} was seen for this task"))
        self._fences.raise_fences(fences)  # durable before anything is started or refused
        self._launch(to_run, reports)

    def _refusal(self, assignment: Assignment, free: Resources, running: int) -> str | None:
        """Why admission says no to a new fence, or None."""
        if not assignment.command:
            return "empty command"
        if running >= limits.MAX_RUNNING_ATTEMPTS:
            return f"{running} attempts running, the most this agent runs"
        if not assignment.resources.fits_in(free):
            needed = assignment.resources
            return (f"no capacity: needs cpu_milli={needed.cpu_milli} "
                    f"memory_mb={needed.memory_mb} gpu={needed.gpu}, free cpu_milli="
                    f"{free.cpu_milli} memory_mb={free.memory_mb} gpu={free.gpu}")
        return None

    def _redelivered(self, assignment: Assignment) -> Report | None:
        """The same fence again: acknowledge again, never run twice."""
        fence = assignment.fence
        record = self._running.get(fence) or self._outbox.attempt(fence)
        if record is None and self._crossed(fence, ReportKind.REJECTED, *TERMINAL_REPORT_KINDS):
            return None  # answered and committed already; this answer crossed that commit
        if record is None:
            # Its fence was stored but it never started here: refused earlier, killed before it
            # arrived, or the agent stopped between storing the fence and recording the attempt.
            return _rejected(assignment, "fence seen before; the attempt is not running here")
        if record.state == AttemptState.RUNNING:
            if self._crossed(fence, ReportKind.STARTED):
                return None  # committed already; this answer crossed that commit
            return _report(ReportKind.STARTED, record)
        return None  # finished: its FINISHED/KILLED report is in the outbox

    def _launch(self, to_run: Sequence[Assignment], refused: Sequence[Report]) -> None:
        now_ms = wall_ms()
        records = [AttemptRecord(a.fence, a.job_id, a.task_id, a.attempt, AttemptState.RUNNING,
                                 a.resources, self._executor.attempt_dir(a.fence), now_ms)
                   for a in to_run]
        # Recorded before the processes start: a restart then finds anything that may run.
        self._outbox.write(records=records)
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
                log.error("attempt_start_failed", fence=record.fence, error=str(error))
                continue
            started = record.launched(launch.wrapper_pid, launch.wrapper_start_ticks)
            launched.append(started)
            reports.append(_report(ReportKind.STARTED, started))
            self._running[started.fence] = started
            log.info("attempt_started", fence=started.fence, job=started.job_id,
                     task=started.task_id, attempt=started.attempt, pid=started.wrapper_pid)
        self._outbox.write(records=launched, reports=reports, delete_records=failed)
        self._metrics.attempts_started.inc(len(launched))
        for turnaround_s in self._slots.started(len(launched), time.monotonic()):
            self._metrics.slot_turnaround_seconds.observe(turnaround_s)
        self._metrics.slots_idle.inc(self._slots.idle - self._idle_counted)
        self._idle_counted = self._slots.idle
        self._metrics.attempts_rejected.inc(len(failed))
        self._metrics.attempts_running.set(len(self._running))
        self._metrics.reports_pending.set(self._outbox.count())

    def _store_reports(self, reports: Sequence[Report]) -> None:
        """Stores the reports not already waiting (a repeated one would cost a synced write)."""
        new = [r for r in reports if not self._outbox.has(r.key)]
        if new:
            self._outbox.put(new)
            self._metrics.reports_pending.set(self._outbox.count())

    # -- reporter thread -----------------------------------------------------------------------

    def _report_loop(self) -> None:
        failures = 0
        next_flush_s = 0.0
        next_prune_s = time.monotonic() + ATTEMPT_DIR_PRUNE_INTERVAL_MS / 1000
        poll_s = self._config.poll_interval_ms / 1000
        while not self._stop.is_set():
            self._wake.clear()
            self._collect()
            now_s = time.monotonic()
            if now_s >= next_flush_s:
                if self._flush():
                    failures = 0
                    next_flush_s = now_s
                else:
                    failures += 1
                    next_flush_s = now_s + self._backoff_s(failures)
            if now_s >= next_prune_s:
                next_prune_s = now_s + ATTEMPT_DIR_PRUNE_INTERVAL_MS / 1000
                self._prune_attempt_dirs()
            self._wake.wait(poll_s)

    def _backoff_s(self, failures: int) -> float:
        delay_ms = min(self._config.retry_backoff_max_ms,
                       self._config.retry_backoff_initial_ms * (1 << min(failures - 1, 20)))
        return delay_ms / 1000

    def _collect(self) -> None:
        """Executor completions become FINISHED/KILLED reports, each attempt's exactly once."""
        with self._lock:
            completions = self._executor.poll()
            if not completions:
                return
            records: list[AttemptRecord] = []
            reports: list[Report] = []
            for completion in completions:
                record = self._running.pop(completion.fence, None) \
                    or self._outbox.attempt(completion.fence)
                self._kills_requested.discard(completion.fence)
                if record is None or record.state != AttemptState.RUNNING:
                    log.warning("completion_ignored", fence=completion.fence)
                    continue
                report = _completion_report(record, completion)
                records.append(record.finished())
                reports.append(report)
                self._metrics.attempts_finished.labels(report.kind.name).inc()
                log.info("attempt_finished", fence=record.fence, job=record.job_id,
                         task=record.task_id, report=report.kind.name, exit_code=report.exit_code,
                         timed_out=report.timed_out, reason=report.reason)
            self._outbox.write(records=records, reports=reports)
            self._slots.freed(len(records), time.monotonic())
            self._metrics.attempts_running.set(len(self._running))
            self._metrics.reports_pending.set(self._outbox.count())
        self._wake.set()

    def _flush(self) -> bool:
        """Sends pending reports in bounded batches; True when the outbox was drained as far as
        one flush goes, False after a failed call (the caller backs off)."""
        for _ in range(limits.MAX_REPORT_BATCHES_PER_FLUSH):
            if self._need_register.is_set():
                return True  # reports wait for the (re-)registration; they stay in the outbox
            batch = self._outbox.pending(self._config.report_batch_max)
            if not batch:
                return True
            try:
                reported = self._session.report(self._config.cluster_id, self._incarnation,
                                                batch, self._observe())
            except Reregister as error:
                log.info("reregister", reason=str(error))
                self._need_register.set()
                return False
            except SessionError as error:
                self._metrics.session_errors.labels(type(error).__name__).inc()
                log.warning("report_failed", error=type(error).__name__, detail=str(error),
                            reports=len(batch))
                return False
            acked = _answered(batch, reported.verdicts)
            with self._lock:
                self._fences.raise_term(reported.term)
                self._outbox.ack(acked)
                self._remember_acks(acked)
                self._metrics.reports_pending.set(self._outbox.count())
            self._metrics.reports_acked.inc(len(acked))
            for verdict in reported.verdicts:
                if verdict.verdict != ReportVerdict.ACCEPTED:
                    log.info("report_verdict", fence=verdict.fence, verdict=verdict.verdict)
            if len(acked) < len(batch):
                log.warning("report_unanswered", reports=len(batch) - len(acked))
                return False
            if len(batch) < self._config.report_batch_max:
                return True
        return True

    def _remember_acks(self, keys: Iterable[ReportKey]) -> None:
        now_s = time.monotonic()
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
        window."""
        now_s = time.monotonic()
        window_s = self._config.ack_crossing_window_ms / 1000
        for kind in kinds:
            acked_s = self._acked.get(ReportKey(fence, kind))
            if acked_s is not None and now_s - acked_s <= window_s:
                return True
        return False

    def _prune_attempt_dirs(self) -> None:
        """Keeps the newest limits.MAX_RETAINED_ATTEMPT_DIRS attempt dirs that no record needs."""
        root = attempts_root(self._config.data_dir)
        if not root.is_dir():
            return
        with self._lock:
            needed = {record.fence for record in self._outbox.attempts()}
        finished = sorted(entry for entry in os.listdir(root)
                          if entry.isdigit() and int(entry) not in needed)
        for entry in finished[:max(0, len(finished) - limits.MAX_RETAINED_ATTEMPT_DIRS)]:
            shutil.rmtree(root / entry, ignore_errors=True)


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


def _rejected(assignment: Assignment, reason: str) -> Report:
    return Report(ReportKind.REJECTED, assignment.job_id, assignment.task_id, assignment.fence,
                  reason=reason[:limits.MAX_REASON_CHARS])


def _completion_report(record: AttemptRecord, completion: Completion) -> Report:
    kind = ReportKind.KILLED if completion.killed else ReportKind.FINISHED
    return Report(kind, record.job_id, record.task_id, record.fence, completion.exit_code,
                  completion.timed_out, completion.reason[:limits.MAX_REASON_CHARS])


def _lock_data_dir(data_dir: Path) -> IO[str]:
    """An exclusive lock on the data dir for this agent's lifetime: two agents on one data dir
    would each run the other's attempts again."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        handle = (data_dir / LOCK_FILE).open("a+")
    except OSError as error:
        raise AgentError(f"cannot use data dir {data_dir}: {error}") from error
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise AgentError(f"data dir {data_dir} is in use by another agent (pid {holder})") \
            from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
