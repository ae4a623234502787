"""The agent: admit fenced assignments, run them, report results durably.

The decisions are `agent.core.AgentCore`'s (the same code the seeded simulation runs); this is
its shell: lmdb stores, the data dir's lock, threads, the calls to the leader with their
backoff, task log reads, and the pruning of attempt dirs. Transport-free: it takes a `Session`
(gRPC in production, an in-memory fake in tests), an `Executor` and a `Clock`. Two threads:
- the heartbeat thread (the caller of `run()`): registers, long-polls the leader, and handles
  each answer under the agent's lock: term check, kill directives, then assignments;
- the reporter thread: turns executor completions into FINISHED/KILLED reports and flushes the
  outbox to the leader, acking what the leader answers.

The durability order that makes a crash at any point safe is the core's (its docstring): here
every store write is a synced lmdb transaction.
On start the agent bumps its incarnation, re-adopts the attempts in its records (results written
while it was down become FINISHED reports), and registers with every attempt it knows of. On
stop it leaves running attempts alone: their wrappers outlive it and the next start picks them
up.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from agent.core import (
    ACK_CROSSING_WINDOW_MS,
    NEVER_STARTED_REASON,
    AgentCore,
    AttemptExecutor,
    CoreConfig,
    Decision,
)
from agent.executors import Executor
from agent.fence import FenceStore
from agent.groups import GroupExecutor, SharedExecutor, local_key, split_key
from agent.logs import LogServer
from agent.metrics import AgentMetrics
from agent.model import Directives, Resources
from agent.outbox import Outbox
from agent.session import Reregister, Session, SessionError
from raftsched import limits
from raftsched.client.retry import Backoff
from raftsched.clock import Clock, SystemClock
from raftsched.eventlog import EventLogger
from raftsched.protocol import ReportVerdict

__all__ = ["ACK_CROSSING_WINDOW_MS", "NEVER_STARTED_REASON", "Agent", "AgentConfig", "AgentError",
           "GroupSeat", "GroupedAgent", "attempts_root", "group_store_dir"]

log = EventLogger("agent")

assert limits.MAX_ATTEMPT_RECORDS <= limits.MAX_REGISTER_KNOWN_ATTEMPTS  # one Register lists all

HEARTBEAT_WAIT_MS = 1_000
"""Long-poll wait asked of the leader (it caps it too)."""
POLL_INTERVAL_MS = 50
"""The reporter checks the executor for completions at least this often."""
RETRY_BACKOFF_INITIAL_MS = 100
RETRY_BACKOFF_MAX_MS = 5_000
"""The session's failed heartbeats and report flushes wait the one jittered backoff
(`raftsched.client.retry.Backoff`) from RETRY_BACKOFF_INITIAL_MS up to this."""
STOP_JOIN_TIMEOUT_MS = 10_000
ATTEMPT_DIR_PRUNE_INTERVAL_MS = 60_000

ATTEMPTS_DIR = "attempts"
FENCE_DIR = "fence.lmdb"
OUTBOX_DIR = "outbox.lmdb"
LOCK_FILE = "agent.lock"
GROUPED_HEARTBEAT_WAIT_MS = 100
"""An agent serving several groups long-polls each for at most this long: a group learns that
the turn to be offered the free capacity came to it (or went) with its next heartbeat, so a
long wait is capacity left idle (a leader answers at once when it has work due anyway)."""
GROUPS_DIR = "groups"
"""With several scheduler groups: DATA/groups/N/ holds group N's fence store and outbox."""


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
    queue_depth: int = 0
    """Attempts held in the local queue beyond the free capacity (late binding; 0: none)."""


def group_store_dir(data_dir: Path, group: int) -> Path:
    """Where group `group`'s fence store and outbox live in an agent serving several groups:
    DATA/groups/N; but group 0 of an agent that served one group before (a deployment that
    grew: docs/scale-out.md §5) keeps DATA's, so the fences it remembers stay in force. An
    attempt of that one-group agent still recorded there cannot be adopted (its key has no
    group in it): AgentError saying to drain the cluster first."""
    if group != 0 or not (data_dir / FENCE_DIR).exists() \
            or (data_dir / GROUPS_DIR / "0").exists():
        return data_dir / GROUPS_DIR / str(group)
    with Outbox(data_dir / OUTBOX_DIR) as outbox:
        live = outbox.attempts()
    if live:
        raise AgentError(
            f"data dir {data_dir} holds {len(live)} attempt(s) of this agent when it served one "
            "scheduler group; it cannot adopt them serving several. Drain the cluster "
            "(raftsched admin drain CLUSTER), wait until it runs nothing, then start the agent "
            "with every group")
    return data_dir


def attempts_root(data_dir: Path) -> Path:
    """Where a SubprocessExecutor of an agent on `data_dir` keeps attempt dirs."""
    return data_dir / ATTEMPTS_DIR


@dataclass(frozen=True, slots=True)
class GroupSeat:
    """One scheduler group's place in an agent serving several (`GroupedAgent`): the group's
    view of the shared executor, the lock every group's core runs under, and the directory of
    the group's own fence store and outbox."""

    view: GroupExecutor
    lock: threading.RLock
    store_dir: Path


class Agent:
    def __init__(self, config: AgentConfig, session: Session, executor: Executor, *,
                 metrics: AgentMetrics | None = None,
                 stop: threading.Event | None = None, clock: Clock | None = None,
                 rng: random.Random | None = None, seat: GroupSeat | None = None) -> None:
        """`rng` draws the backoff's jitter (a seeded one makes the waits repeatable). `seat`:
        one group of an agent serving several (`GroupedAgent`, which holds the data dir's
        lock); None: the only one."""
        assert config.heartbeat_wait_ms >= 0 and config.poll_interval_ms > 0
        assert config.report_batch_max >= 1
        self._config = config
        self._session = session
        self._executor = executor
        self._seat = seat
        self._clock = clock or SystemClock()
        self._metrics = metrics or AgentMetrics()
        self._stop = stop or threading.Event()
        self._rng = rng or random.Random()
        self._backoff = Backoff(config.retry_backoff_initial_ms / 1000,
                                config.retry_backoff_max_ms / 1000)
        store_dir = config.data_dir if seat is None else seat.store_dir
        self._lock_handle = _lock_data_dir(config.data_dir) if seat is None else None
        try:
            store_dir.mkdir(parents=True, exist_ok=True)
            self._fences = FenceStore(store_dir / FENCE_DIR)
            try:
                self._outbox = Outbox(store_dir / OUTBOX_DIR)
            except BaseException:
                self._fences.close()
                raise
        except BaseException:
            if self._lock_handle is not None:
                self._lock_handle.close()
            raise
        self._lock = threading.RLock() if seat is None else seat.lock
        """Held around every call into the core (the heartbeat and reporter threads share it;
        with several groups, every group's threads do)."""
        core_executor: AttemptExecutor = executor if seat is None else seat.view
        self._core = AgentCore(_core_config(config), self._clock, self._fences, self._outbox,
                               core_executor, self._metrics,
                               offer=None if seat is None else seat.view.offer,
                               group=None if seat is None else seat.view.group,
                               may_start=None if seat is None else seat.view.may_start)
        self._offered: Resources | None = None
        """What the last heartbeat reported free (several groups: `GroupExecutor.answered`)."""
        self._wake = threading.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._prepared = False
        executor.subscribe(self._wake.set)
        self._logs = LogServer(core_executor.attempt_dir,
                               lambda chunk: session.send_log(config.cluster_id, chunk),
                               self._stop)

    # -- public --------------------------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        return self._core.incarnation

    def running(self) -> list[int]:
        with self._lock:
            return self._core.running()

    def pending_reports(self) -> int:
        return int(self._outbox.count())

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def prepare(self) -> None:
        """Starts the core (a new incarnation; the attempts an earlier agent left are adopted)
        without running the loops: an agent serving several groups prepares every group's core
        before any admits an assignment, so that admission counts every adopted attempt."""
        if not self._prepared:
            self._prepared = True
            self._guarded(self._start)

    def run(self) -> None:
        """Runs until stop(); raises AgentError if it stopped on an internal error."""
        self.prepare()
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
        log.info("agent_stopped", cluster=self._config.cluster_id, running=len(self.running()),
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
        if self._lock_handle is not None:
            self._lock_handle.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- startup -------------------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            self._core.start()
        self._wake.set()
        self._prune_attempt_dirs()

    def _register(self) -> None:
        with self._lock:
            registration = self._core.registration()
        registered = self._session.register(registration)
        with self._lock:
            self._core.registered(registered)
        log.info("agent_registered", cluster=self._config.cluster_id, incarnation=self.incarnation,
                 term=registered.term, known=len(registration.known), lost=registered.lost,
                 kills=registered.kills, stop=len(registered.stop))

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
                with self._lock:
                    need_register = self._core.need_register
                if need_register:
                    self._register()
                directives = self._beat()
            except Reregister as error:
                log.info("reregister", reason=str(error))
                with self._lock:
                    self._core.reregister()
                failures += 1
                self._pause(failures - 1)
                continue
            except SessionError as error:
                failures += 1
                self._metrics.session_errors.labels(type(error).__name__).inc()
                log.warning("heartbeat_failed", error=type(error).__name__, detail=str(error),
                            failures=failures)
                if self._seat is not None:
                    with self._lock:
                        self._seat.view.silent()
                self._pause(failures)
                continue
            failures = 0
            if not self._handle(directives):
                self._pause(1)

    def _beat(self) -> Directives:
        with self._lock:
            beat = self._core.next_beat()
            self._offered = beat.free
        started_s = self._clock.monotonic_s()
        directives = self._session.heartbeat(beat)
        self._metrics.heartbeat_latency_seconds.observe(self._clock.monotonic_s() - started_s)
        return directives

    def _pause(self, failures: int) -> None:
        if failures <= 0:
            return
        self._stop.wait(self._backoff_s(failures))

    def _handle(self, directives: Directives) -> bool:
        """Acts on one heartbeat answer; False when it came from a lower term (ignored)."""
        if directives.assignments or directives.kills:
            log.debug("directives_received", term=directives.term,
                      assignments=len(directives.assignments), kills=len(directives.kills))
        if directives.log_requests:  # reads of files we keep: safe from any term
            self._logs.submit(directives.log_requests)
        with self._lock:
            decisions = self._core.handle(directives)
            if self._seat is not None and self._offered is not None:
                self._seat.view.answered(self._offered, len(directives.assignments))
        if Decision.STALE_TERM in decisions:
            return False
        self._wake.set()
        return True

    # -- reporter thread -----------------------------------------------------------------------

    def _report_loop(self) -> None:
        failures = 0
        next_flush_s = 0.0
        next_prune_s = self._clock.monotonic_s() + ATTEMPT_DIR_PRUNE_INTERVAL_MS / 1000
        poll_s = self._config.poll_interval_ms / 1000
        while not self._stop.is_set():
            self._wake.clear()
            self._collect()
            now_s = self._clock.monotonic_s()
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
        """The wait after the `failures`-th failed call in a row (the one jittered backoff)."""
        return self._backoff.delay_s(failures, self._rng)

    def _collect(self) -> None:
        with self._lock:
            # What it freed goes to the local queue at once: no round trip, no heartbeat wait,
            # and one synced write before the starts.
            collected, _ = self._core.collect_and_start()
        if collected:
            self._wake.set()

    def _flush(self) -> bool:
        """Sends pending reports in bounded batches; True when the outbox was drained as far as
        one flush goes, False after a failed call (the caller backs off)."""
        for _ in range(limits.MAX_REPORT_BATCHES_PER_FLUSH):
            with self._lock:
                batch = self._core.pending(self._config.report_batch_max)
                observed = self._core.observation() if batch else None
            if not batch:
                return True  # drained, or the reports wait for the (re-)registration
            try:
                reported = self._session.report(self._config.cluster_id, self.incarnation,
                                                batch, observed)
            except Reregister as error:
                log.info("reregister", reason=str(error))
                with self._lock:
                    self._core.reregister()
                return False
            except SessionError as error:
                self._metrics.session_errors.labels(type(error).__name__).inc()
                log.warning("report_failed", error=type(error).__name__, detail=str(error),
                            reports=len(batch))
                return False
            with self._lock:
                acked = self._core.reported(batch, reported)
            for verdict in reported.verdicts:
                if verdict.verdict != ReportVerdict.ACCEPTED:
                    log.info("report_verdict", fence=verdict.fence, verdict=verdict.verdict)
            if len(acked) < len(batch):
                log.warning("report_unanswered", reports=len(batch) - len(acked))
                return False
            if len(batch) < self._config.report_batch_max:
                return True
        return True

    def _prune_attempt_dirs(self) -> None:
        """Keeps the newest limits.MAX_RETAINED_ATTEMPT_DIRS attempt dirs that no record needs."""
        root = attempts_root(self._config.data_dir)
        if not root.is_dir():
            return
        with self._lock:
            needed = {self._dir_key(record.fence) for record in self._outbox.attempts()}
        finished = sorted(entry for entry in os.listdir(root)
                          if entry.isdigit() and self._owns_dir(int(entry))
                          and int(entry) not in needed)
        for entry in finished[:max(0, len(finished) - limits.MAX_RETAINED_ATTEMPT_DIRS)]:
            shutil.rmtree(root / entry, ignore_errors=True)


    def _dir_key(self, fence: int) -> int:
        """The number an attempt's dir is named by: its fence, or with several groups its
        local key (`agent.groups.local_key`)."""
        return fence if self._seat is None else local_key(self._seat.view.group, fence)

    def _owns_dir(self, key: int) -> bool:
        """Whether this group prunes the attempt dir named `key` (with several groups each
        prunes its own only: another group's records are not read here)."""
        return self._seat is None or split_key(key)[0] == self._seat.view.group


class GroupedAgent:
    """The agent of a cluster serving several scheduler groups (issue 27, `agent/groups.py`):
    one `Agent` per group (its own session, core, fence store and outbox in
    DATA/groups/N/, its own heartbeat and reporter threads) over one executor shared through
    `SharedExecutor`, every group's core under one lock. Holds the data dir's lock. Each
    group's core keeps its own local queue of `queue_depth` (late binding), started only in
    that group's turn (`SharedExecutor.may_start`), and each group is long-polled for at most
    GROUPED_HEARTBEAT_WAIT_MS."""

    def __init__(self, config: AgentConfig, sessions: list[Session], executor: Executor, *,
                 metrics: AgentMetrics | None = None,
                 stop: threading.Event | None = None) -> None:
        assert 1 < len(sessions) <= limits.MAX_GROUPS
        self._stop = stop or threading.Event()
        self._lock_handle = _lock_data_dir(config.data_dir)
        self.shared = SharedExecutor(executor, config.cluster_id, config.capacity,
                                     len(sessions))
        lock = threading.RLock()
        config = replace(config, heartbeat_wait_ms=min(config.heartbeat_wait_ms,
                                               GROUPED_HEARTBEAT_WAIT_MS))
        self.agents: list[Agent] = []
        try:
            for group, session in enumerate(sessions):
                seat = GroupSeat(self.shared.view(group), lock,
                                 group_store_dir(config.data_dir, group))
                self.agents.append(Agent(config, session, executor, metrics=metrics,
                                         stop=self._stop, seat=seat))
        except BaseException:
            self.close()
            raise

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()

    def run(self) -> None:
        """Runs every group's agent until stop(); AgentError if one stopped on an internal
        error (which stops the others: crash-only, as one agent)."""
        failures: list[AgentError] = []

        def run_one(agent: Agent) -> None:
            try:
                agent.run()
            except AgentError as error:
                failures.append(error)
            finally:
                self.stop()

        for agent in self.agents:  # every group's attempts adopted before any group admits
            agent.prepare()
        threads = [threading.Thread(target=run_one, args=(agent,), name=f"agent-group-{g}",
                                    daemon=True) for g, agent in enumerate(self.agents)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self._lock_handle.close()


def _core_config(config: AgentConfig) -> CoreConfig:
    return CoreConfig(config.cluster_id, config.capacity, config.capabilities, config.custom,
                      config.heartbeat_wait_ms, config.ack_crossing_window_ms,
                      queue_depth=config.queue_depth)


def check_data_dir_free(data_dir: Path) -> None:
    """AgentError now if the data dir cannot be used or another agent holds it (before a start
    waits for anything else; the agent takes the lock for good when it is made)."""
    _lock_data_dir(data_dir).close()


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
