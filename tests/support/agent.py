"""Helpers for the agent tests: deadline polling, an in-memory leader, an agent in a thread,
cleanup of every process an attempt dir names, and spare accounts to run tasks as."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agent import containment
from agent.agent import Agent, AgentConfig
from agent.executors import Executor
from agent.files import read_json
from agent.model import (
    Assignment,
    Beat,
    Directives,
    KillDirective,
    Registered,
    Registration,
    Report,
    Reported,
    ReportKind,
    Resources,
    Verdict,
)
from agent.session import Reregister, Unknown
from raftsched.procfs import is_alive
from raftsched.protocol import Observation, ReportVerdict
from tests.support.waiting import wait_until

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
POLL_S = 0.01
FAKE_LONG_POLL_CAP_MS = 50
"""The fake leader holds a heartbeat at most this long, to keep tests fast."""
AGENT_JOIN_TIMEOUT_S = 10.0
REAP_TIMEOUT_S = 5.0
TASK_RESOURCES = Resources(100, 10, 0)
CAPACITY = Resources(4000, 4096, 1)


def assignment(fence: int, *, job_id: str = "job", task_id: str = "t",
               command: Sequence[str] = ("mock",), attempt: int = 1,
               resources: Resources = TASK_RESOURCES, timeout_ms: int = 0,
               env: dict[str, str] | None = None, cwd: str = "", kill_grace_ms: int = 0,
               checkpoint: bool = False, tenant: str = "", inputs: str = "") -> Assignment:
    return Assignment(job_id, task_id, fence, attempt, tuple(command), dict(env or {}), cwd,
                      resources, timeout_ms, f"{job_id}/{task_id}/{attempt}", kill_grace_ms,
                      checkpoint, tenant, inputs)


class FakeSession:
    """An in-memory leader with the contract the agent relies on: every ASSIGNED attempt is
    delivered until its STARTED or REJECTED report is committed, every kill until a KILLED or
    FINISHED report for it is; every report is "committed" when Report answers."""

    def __init__(self, term: int = 1) -> None:
        self.condition = threading.Condition()
        self.term = term
        self.assigned: dict[int, Assignment] = {}
        self.kills: dict[int, KillDirective] = {}
        self.queued: list[Directives] = []
        """Answers handed out verbatim by the next heartbeats (e.g. from a lower term)."""
        self.registrations: list[Registration] = []
        self.beats: list[Beat] = []
        self.reports: list[Report] = []
        """Every report committed, in order (a resend appears again)."""
        self.report_calls = 0
        self.observations: list[Observation | None] = []
        """The capacity observation each Report call carried."""
        self.report_call_kinds: list[list[ReportKind]] = []
        """The kinds of the reports each Report call carried."""
        self.fail_reports = 0
        """The next N Report calls fail with Unknown before committing anything."""
        self.lose_report_answers = 0
        """The next N Report calls commit, then fail with Unknown (the answer is lost)."""
        self.leave_last_unanswered = 0
        """The next N Report calls neither commit nor answer their last report."""
        self.keep_redelivering = False
        """Keep delivering an assignment after its STARTED report (a slow commit)."""
        self.reregister_next = False
        self.stop_on_register: tuple[KillDirective, ...] = ()
        """`Registered.stop` of the next registrations: attempts the leader does not know."""
        self.incarnation: int | None = None
        self.log_chunks: list[tuple[str, Any]] = []
        """(cluster id, LogChunk) of every SendLog, in order."""

    # -- the Session protocol ------------------------------------------------------------------

    def register(self, registration: Registration) -> Registered:
        with self.condition:
            self.registrations.append(registration)
            self.incarnation = registration.incarnation
            self.condition.notify_all()
            return Registered(self.term, "fake-leader", 0, 0, self.stop_on_register)

    def heartbeat(self, beat: Beat) -> Directives:
        with self.condition:
            self.beats.append(beat)
            self.condition.notify_all()
            if self.reregister_next or beat.incarnation != self.incarnation:
                self.reregister_next = False
                raise Reregister(f"unknown incarnation {beat.incarnation}")
            if self.queued:
                return self.queued.pop(0)
            if not (self.assigned or self.kills):
                self.condition.wait(min(beat.wait_ms, FAKE_LONG_POLL_CAP_MS) / 1000)
            return Directives(self.term, tuple(self.assigned.values()),
                              tuple(self.kills.values()))

    def send_log(self, cluster_id: str, chunk: Any) -> None:
        with self.condition:
            self.log_chunks.append((cluster_id, chunk))
            self.condition.notify_all()

    def report(self, cluster_id: str, incarnation: int, reports: Sequence[Report],
               observed: Observation | None = None) -> Reported:
        with self.condition:
            self.report_calls += 1
            self.observations.append(observed)
            self.report_call_kinds.append([r.kind for r in reports])
            if self.fail_reports > 0:
                self.fail_reports -= 1
                raise Unknown("injected: outcome unknown")
            if self.leave_last_unanswered > 0 and reports:
                self.leave_last_unanswered -= 1
                reports = reports[:-1]
            for report in reports:
                self._commit(report)
            self.condition.notify_all()
            if self.lose_report_answers > 0:
                self.lose_report_answers -= 1
                raise Unknown("injected: committed, answer lost")
            return Reported(self.term, tuple(Verdict(r.fence, ReportVerdict.ACCEPTED)
                                             for r in reports))

    def _commit(self, report: Report) -> None:
        self.reports.append(report)
        if report.kind == ReportKind.REJECTED or (
                report.kind == ReportKind.STARTED and not self.keep_redelivering):
            self.assigned.pop(report.fence, None)
        if report.kind in (ReportKind.FINISHED, ReportKind.KILLED):
            self.assigned.pop(report.fence, None)
            self.kills.pop(report.fence, None)

    # -- test controls -------------------------------------------------------------------------

    def assign(self, *assignments: Assignment) -> None:
        with self.condition:
            for item in assignments:
                self.assigned[item.fence] = item
            self.condition.notify_all()

    def kill(self, job_id: str, task_id: str, fence: int) -> None:
        with self.condition:
            self.kills[fence] = KillDirective(job_id, task_id, fence)
            self.condition.notify_all()

    def queue(self, directives: Directives) -> None:
        with self.condition:
            self.queued.append(directives)
            self.condition.notify_all()

    def kinds(self, fence: int) -> list[ReportKind]:
        with self.condition:
            return [r.kind for r in self.reports if r.fence == fence]

    def report_of(self, fence: int, kind: ReportKind) -> Report | None:
        with self.condition:
            return next((r for r in self.reports if r.fence == fence and r.kind == kind), None)

    def beat_count(self) -> int:
        with self.condition:
            return len(self.beats)

    def wait_beats(self, more: int, what: str) -> None:
        """Waits until `more` further heartbeats arrived: the agent has fully handled every
        answer before the last of them."""
        target = self.beat_count() + more
        wait_until(lambda: self.beat_count() >= target, what)


def config(data_dir: Path, *, capacity: Resources = CAPACITY,
           cluster_id: str = "east") -> AgentConfig:
    return AgentConfig(cluster_id, data_dir, capacity, ("linux",), heartbeat_wait_ms=200,
                       poll_interval_ms=10, retry_backoff_initial_ms=10,
                       retry_backoff_max_ms=100)


@contextlib.contextmanager
def running_agent(agent_config: AgentConfig, session: FakeSession,
                  executor: Executor) -> Iterator[Agent]:
    """An agent running in a thread; stopped, joined and closed on exit (also on failure)."""
    agent = Agent(agent_config, session, executor)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            agent.run()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run, name="test-agent", daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.stop()
        thread.join(AGENT_JOIN_TIMEOUT_S)
        agent.close()
        assert not thread.is_alive(), "the agent did not stop"
    if errors:
        raise errors[0]


SPARE_ACCOUNTS = ("games", "bin", "sys", "daemon", "man", "lp")
"""Unprivileged accounts every Debian base image has (base-passwd) that own nothing a test task
could harm: tests that run tasks as several accounts take theirs from here (`nobody` is the
agent's default task user, so it is left out)."""


def spare_accounts(count: int) -> list[str]:
    """`count` accounts of SPARE_ACCOUNTS present here, each of its own uid (fewer if this
    machine lacks them: the caller skips, saying so)."""
    found: dict[int, str] = {}
    for name in SPARE_ACCOUNTS:
        with contextlib.suppress(KeyError):
            uid = pwd.getpwnam(name).pw_uid
            if uid != 0 and len(found) < count:
                found.setdefault(uid, name)
    return list(found.values())


def kill_attempt_processes(root: Path) -> None:
    """SIGKILLs the wrapper and task groups every attempt dir under `root` names (if still
    alive and the same processes), then reaps those that are our children."""
    pids: list[int] = []
    if not root.is_dir():
        return
    for directory in root.iterdir():
        for name in ("task.json", "wrapper.json"):
            try:
                found = read_json(directory / name)
            except ValueError:
                found = None
            if found is None:
                continue
            pid = int(found["pid"])
            if is_alive(pid, found.get("start_ticks")):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            pids.append(pid)
    for pid in pids:
        reap(pid)


def remove_agent_cgroups(cluster_id: str, attempts: Path) -> None:
    """Kills what is left in the attempt cgroups of the agent of `cluster_id` whose attempts
    dir is `attempts` (one this process started: it runs in this process's cgroup) and removes
    them and its parent cgroup (a SIGKILLed agent leaves them)."""
    parent, _ = containment.agent_cgroup_path(containment.agent_cgroup_name(cluster_id, attempts))
    if parent is None or not parent.is_dir():
        return
    for _, cgroup in containment.Containment(containment.MODE_CGROUP, parent).attempt_cgroups():
        containment.kill_cgroup(cgroup)
    with contextlib.suppress(OSError):
        parent.rmdir()


def reap(pid: int) -> None:
    """Reaps `pid` if it is our child, waiting at most REAP_TIMEOUT_S for it to exit."""
    deadline = time.monotonic() + REAP_TIMEOUT_S
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child, or reaped already
        if done or time.monotonic() >= deadline:
            return
        time.sleep(POLL_S)
