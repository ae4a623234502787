"""What `up` and `add-agent` share: `_Launch` (spawn, wait for readiness, stop on failure) and
the readiness helpers. (Part of the dev cluster, `raftsched.dev`.)"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

from raftsched.dev.processes import (
    ClusterView,
    Probe,
    Spawn,
)
from raftsched.dev.record import (
    LOG_DIR_NAME,
    POLL_INTERVAL_S,
    PROGRESS_EVERY_S,
    READY,
    TRAVERSE_BITS,
    ClusterState,
    DevClusterError,
    Progress,
)
from raftsched.dev.supervisor import (
    Child,
    Identity,
    StopResult,
    log_tail,
    stop_all,
)
from raftsched.errors import Code

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    pass

Seen = TypeVar("Seen")
"""What a wait looks at (`_Launch._poll`): a probe's view, a process's metrics, ..."""


class _Launch:
    """Processes one dev command starts and then waits for: spawns them, asks the cluster until
    a condition holds, a process exits or `timeout_s` passes, and stops them on failure."""

    activity = "the cluster was starting"
    """What a process that exits early interrupted (for the error)."""

    def __init__(self, state: ClusterState, timeout_s: float, spawn: Spawn, probe: Probe,
                 progress: Progress, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.state, self.timeout_s = state, timeout_s
        self.spawn, self.probe, self.progress = spawn, probe, progress
        self.clock, self.sleep = clock, sleep
        self.started_s = clock()
        self.phase_started_s = self.started_s
        self.deadline_s = self.started_s + timeout_s
        self.children: dict[str, Child] = {}
        self.logs: dict[str, str] = {}

    def _let_tasks_through(self, data_dir: Path, executor: str) -> None:
        """A subprocess agent running as root runs tasks as an unprivileged account, which
        must pass through every directory above its data dir to reach its work and checkpoint
        dirs (the agent refuses to start otherwise): DIR (0700 when made by `mktemp -d`) and
        the directories below it on the way get o+x (g+x too), and the progress says so.
        Nothing in them becomes listable; DIR/logs is made the owner's alone."""
        if executor != "subprocess" or os.geteuid() != 0:
            return
        directory = Path(self.state.dir)
        opened = [str(path) for path in traversable(directory, data_dir.parent)]
        (directory / LOG_DIR_NAME).chmod(0o700)  # what passing through DIR must not expose
        if opened:
            self.progress(f"let task accounts pass through {', '.join(opened)} (chmod go+x): "
                          "tasks reach their work and checkpoint dirs by absolute path")

    def _spawn(self, name: str, argv: list[str], log: Path,
               env: Mapping[str, str] | None = None) -> Identity:
        child = self.spawn(name, argv, log, Path(self.state.dir), env)
        self.children[name] = child
        self.logs[name] = str(log)
        assert child.identity is not None
        return child.identity

    def _wait(self, what: str, done: Callable[[ClusterView | None], bool],
              suspect: Callable[[ClusterView | None], str],
              detail: Callable[[ClusterView | None], str] = lambda v: "",
              servers: list[str] | None = None) -> ClusterView:
        """Probe `servers` (default: the cluster's; with several groups, one group's) until
        `done`."""
        view = self._poll(what, lambda: self.probe(servers or self.state.servers,
                                                   self.state.client_tls),
                          done, suspect, detail)
        assert view is not None
        return view

    def _poll(self, what: str, look: Callable[[], Seen], done: Callable[[Seen], bool],
              suspect: Callable[[Seen], str],
              detail: Callable[[Seen], str] = lambda seen: "") -> Seen:
        """`look` until `done` says what it saw will do; raises when a process started here
        exits or `deadline_s` passes (saying so every PROGRESS_EVERY_S meanwhile)."""
        self.progress(f"waiting for {what} (up to {self.timeout_s:g} s)")
        last_report_s = self.clock()
        while True:
            self._check_children()
            seen = look()
            if done(seen):
                return seen
            now_s = self.clock()
            if now_s >= self.deadline_s:
                self._timed_out(what, detail(seen), suspect(seen))
            if now_s - last_report_s >= PROGRESS_EVERY_S:
                last_report_s = now_s
                extra = detail(seen)
                self.progress(f"still waiting for {what}: {now_s - self.phase_started_s:.0f} s "
                              f"of {self.timeout_s:g} s" + (f" ({extra})" if extra else ""))
            self.sleep(POLL_INTERVAL_S)

    def _new_phase(self) -> None:
        """The next waits get `timeout_s` of their own (`dev add-group`: each step's waits)."""
        self.phase_started_s = self.clock()
        self.deadline_s = self.phase_started_s + self.timeout_s

    def _check_children(self) -> None:
        for name, child in self.children.items():
            status = child.poll()
            if status is not None:
                raise DevClusterError(
                    Code.FAILED_PRECONDITION,
                    f"{name} (pid {child.pid}) exited with status {status} while "
                    f"{self.activity}; see {self.logs[name]}",
                    log=self.logs[name], log_tail=log_tail(self.logs[name]))

    def _timed_out(self, what: str, detail: str, suspect: str) -> NoReturn:
        """Raise UNAVAILABLE with the log of `suspect`, the process most likely to say why."""
        log = self.logs.get(suspect)
        raise DevClusterError(
            Code.UNAVAILABLE,
            f"not {what} after {self.timeout_s:g} s "
            f"(UP_TIMEOUT_S; give more with --timeout)" + (f": {detail}" if detail else "")
            + f"; logs are in {self.state.dir}/{LOG_DIR_NAME}",
            log=log, log_tail=log_tail(log) if log else ())

    def _elapsed_s(self) -> float:
        return self.clock() - self.started_s

    def _stop_children(self) -> list[StopResult]:
        children = list(self.children.values())
        if not children:
            return []
        self.progress(f"stopping the {len(children)} process(es) started")
        return stop_all(children)


def traversable(top: Path, bottom: Path) -> list[Path]:
    """Adds go+x to `top` and every directory below it down to `bottom` that lacks it; the
    directories changed."""
    chain = [bottom, *bottom.parents]
    changed = []
    for directory in reversed(chain[:chain.index(top) + 1]):
        mode = directory.stat().st_mode & 0o7777
        if mode & TRAVERSE_BITS != TRAVERSE_BITS:
            directory.chmod(mode | TRAVERSE_BITS)
            changed.append(directory)
    return changed


def _report_job_processes(pids: Sequence[int], progress: Progress) -> None:
    if pids:
        progress(f"warning: Slurm job processes {', '.join(map(str, pids))} outlived the "
                 f"private Slurm's daemons (left alone: only recorded processes are signalled)")


def _all_ready(view: ClusterView | None, names: Sequence[str]) -> bool:
    return (view is not None and view.from_leader
            and all(view.clusters.get(name) == READY for name in names))


def _first_not_ready(view: ClusterView | None, names: Sequence[str]) -> str:
    clusters = view.clusters if view is not None else {}
    return next((name for name in names if clusters.get(name) != READY), names[0])


def _readiness(view: ClusterView | None, names: Sequence[str]) -> str:
    if view is None:
        return "no replica answers"
    return ", ".join(f"{name} {view.clusters.get(name, 'not registered')}" for name in names)
