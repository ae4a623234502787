"""The one process supervisor: start programs, know them again later, stop them, leave nothing
behind. `raftsched dev`, the integration-test clusters, the bare-Raft harness and the
jepsen-style harness all start and stop their processes through it.

- `Child`: a program this process starts (and may start again once it has exited) in its own
  session and process group, stdin from /dev/null, stdout and stderr appended to a log file
  after a header line. Signals go to its whole group, and only while its leader is not reaped:
  until then neither its pid nor its group id can belong to anyone else. When the leader exits,
  what is left of its group is SIGKILLed before the leader is reaped, so a child never leaves
  orphans behind.
- `Identity`: a pid plus its start time from /proc (`raftsched.procfs`). Saved to a file, it lets
  a later program find exactly that process again through a `Recorded` handle (`dev down` stops
  what `dev up` started), which signals only while /proc still shows that start time: never a
  process that merely reused the pid.
- `stop_all`: SIGTERM to each group (then SIGCONT, so a paused process can act on it), a bounded
  wait, SIGKILL to what is left, a second bounded wait; what is still there is reported as a
  survivor.
- `Supervisor`: the children of one program; `close()` (also on leaving a `with` block) kills
  and reaps every one of them.

Nothing is ever signalled by name. Every wait is bounded by a named constant or by a timeout the
caller passes. Linux only (/proc, waitid).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Protocol

from raftsched import procfs
from raftsched.errors import Code, RaftschedError

TERM_TIMEOUT_S = 10.0
"""How long a stop waits after SIGTERM before it sends SIGKILL."""
KILL_TIMEOUT_S = 5.0
"""How long a stop or a kill waits after SIGKILL before it calls a process a survivor."""
POLL_INTERVAL_S = 0.05
"""Between two looks at processes that are expected to exit."""
LOG_TAIL_LINES = 30
LOG_TAIL_BYTES = 64 * 1024
"""A log tail reads at most this much of the end of a log file."""
MAX_OUTPUT_BYTES = 1024 * 1024
"""`Child.output_since_start` reads at most this much."""
MAX_CHILDREN = 1024
"""Children of one `Supervisor` (a restarted child counts once)."""


class SupervisorError(RaftschedError):
    """A process did not go away when killed."""


# --- identity ----------------------------------------------------------------------------------


class Identity(NamedTuple):
    """A process as this machine knows it: its pid and its start time in clock ticks since boot
    (a pid alone may be reused)."""

    pid: int
    start_time_ticks: int

    def is_running(self) -> bool:
        """Whether this very process still runs (not a zombie, not a later one with its pid)."""
        return procfs.is_alive(self.pid, self.start_time_ticks)

    def to_doc(self) -> dict[str, int]:
        return {"pid": self.pid, "start_time_ticks": self.start_time_ticks}

    @classmethod
    def from_doc(cls, doc: object) -> Identity:
        """The identity in `doc` (other keys are ignored); raises ValueError naming what is
        wrong."""
        if not isinstance(doc, dict):
            raise ValueError("a process identity must be an object")
        values = []
        for key in ("pid", "start_time_ticks"):
            value = doc.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{key} must be an integer")
            values.append(value)
        return cls(*values)


def signal_identity(identity: Identity, number: signal.Signals) -> bool:
    """Send `number` to the process group `identity` leads (to the process alone when it leads
    none), only while /proc shows the recorded start time. Returns whether it was sent. (Between
    the check and the kill the pid could only be reused if the process exited and the kernel
    went through its whole pid space in those microseconds.)"""
    if not identity.is_running():
        return False
    try:
        if os.getpgid(identity.pid) == identity.pid:
            os.killpg(identity.pid, number)
        else:
            os.kill(identity.pid, number)
    except ProcessLookupError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Recorded:
    """A process known by a saved identity, maybe started by another program."""

    name: str
    identity: Identity

    @property
    def pid(self) -> int:
        return self.identity.pid

    def alive(self) -> bool:
        return self.identity.is_running()

    def signal(self, number: signal.Signals) -> bool:
        return signal_identity(self.identity, number)


# --- stopping ----------------------------------------------------------------------------------


class StopOutcome(StrEnum):
    STOPPED = "stopped"
    """It exited after SIGTERM."""
    KILLED = "killed"
    """It needed SIGKILL."""
    NOT_RUNNING = "not running"
    SURVIVED = "survived"
    """Still there KILL_TIMEOUT_S after SIGKILL (stuck in the kernel)."""


@dataclass(frozen=True, slots=True)
class StopResult:
    name: str
    pid: int
    outcome: StopOutcome


class Stoppable(Protocol):
    """A `Child` or a `Recorded` process."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int: ...

    def alive(self) -> bool: ...

    def signal(self, number: signal.Signals) -> bool: ...


def stop_all(targets: Sequence[Stoppable], *, term_timeout_s: float = TERM_TIMEOUT_S,
             kill_timeout_s: float = KILL_TIMEOUT_S) -> list[StopResult]:
    """SIGTERM every target that runs, wait up to `term_timeout_s` for all of them together,
    SIGKILL the rest, wait up to `kill_timeout_s`. One result per target, in order."""
    outcomes = [StopOutcome.STOPPED if _terminate(target) else StopOutcome.NOT_RUNNING
                for target in targets]
    running = [i for i, outcome in enumerate(outcomes) if outcome is StopOutcome.STOPPED]
    running = _still_alive(targets, running, term_timeout_s)
    for i in running:
        if targets[i].signal(signal.SIGKILL):
            outcomes[i] = StopOutcome.KILLED
    for i in _still_alive(targets, running, kill_timeout_s):
        outcomes[i] = StopOutcome.SURVIVED
    return [StopResult(target.name, target.pid, outcome)
            for target, outcome in zip(targets, outcomes, strict=True)]


def _terminate(target: Stoppable) -> bool:
    if not target.signal(signal.SIGTERM):
        return False
    target.signal(signal.SIGCONT)  # a paused process acts on SIGTERM only once continued
    return True


def _still_alive(targets: Sequence[Stoppable], indices: list[int],
                 timeout_s: float) -> list[int]:
    """The indices of the targets still alive after waiting up to `timeout_s` for them."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        indices = [i for i in indices if targets[i].alive()]
        if not indices or time.monotonic() >= deadline_s:
            return indices
        time.sleep(POLL_INTERVAL_S)


# --- children ----------------------------------------------------------------------------------


class Child:
    """One program this process starts, and may start again once it has exited. `argv`, `env`
    (None: this process's environment) and `cwd` take effect at the next start. Thread-safe: a
    fault injector may kill and restart it while another thread asks whether it is alive."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = None if env is None else dict(env)
        self.cwd = cwd
        self.starts = 0
        self.paused = False
        self._popen: subprocess.Popen[bytes] | None = None
        self._identity: Identity | None = None
        self._output_offset_bytes = 0
        self._lock = threading.RLock()

    @property
    def pid(self) -> int:
        """The pid of the latest start; 0 before the first."""
        return 0 if self._popen is None else self._popen.pid

    @property
    def identity(self) -> Identity | None:
        """The identity of the latest start, to save for a later program; None before it."""
        return self._identity

    def start(self, note: str = "") -> Identity:
        """Start the program (again); `note` goes into the header line written to the log."""
        with self._lock:
            assert not self.alive(), f"{self.name} is running (pid {self.pid})"
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                log.write(self._header(note).encode())
                log.flush()
                self._output_offset_bytes = log.tell()
                self._popen = subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    cwd=self.cwd, env=self.env, start_new_session=True, close_fds=True)
            start_ticks = procfs.start_ticks(self._popen.pid)
            assert start_ticks is not None, "an unreaped child has a /proc entry"
            self._identity = Identity(self._popen.pid, start_ticks)
            self.starts += 1
            self.paused = False
            return self._identity

    def _header(self, note: str) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        detail = f" ({note})" if note else ""
        return (f"--- {stamp} start #{self.starts + 1} of {self.name}{detail}: "
                f"{shlex.join(self.argv)}\n")

    def poll(self) -> int | None:
        """The exit status once the program has exited (it is reaped then, and what was left of
        its group killed); None while it runs, or before it was started."""
        with self._lock:
            popen = self._popen
            if popen is None or popen.returncode is not None:
                return None if popen is None else popen.returncode
            try:
                exited = os.waitid(os.P_PID, popen.pid,
                                   os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:  # reaped behind our back: its group id is not ours now
                return self._reap(popen, KILL_TIMEOUT_S)
            if not exited:
                return None
            _kill_group(popen.pid)  # the leader is not reaped yet: the group id is still ours
            return self._reap(popen, KILL_TIMEOUT_S)

    def alive(self) -> bool:
        return self._popen is not None and self.poll() is None

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once the program exits within `timeout_s`; None if it runs on."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            status = self.poll()
            if status is not None or self._popen is None or time.monotonic() >= deadline_s:
                return status
            time.sleep(POLL_INTERVAL_S)

    def signal(self, number: signal.Signals) -> bool:
        """Send `number` to the program's process group while it runs; returns whether it was
        sent. SIGSTOP and SIGCONT also set `paused`."""
        with self._lock:
            if not self.alive():
                return False
            assert self._popen is not None
            try:
                os.killpg(self._popen.pid, number)
            except ProcessLookupError:
                return False
            if number in (signal.SIGSTOP, signal.SIGCONT):
                self.paused = number is signal.SIGSTOP
            return True

    def pause(self) -> bool:
        return self.signal(signal.SIGSTOP)

    def resume(self) -> bool:
        return self.signal(signal.SIGCONT)

    def stop(self, term_timeout_s: float = TERM_TIMEOUT_S,
             kill_timeout_s: float = KILL_TIMEOUT_S) -> StopResult:
        """SIGTERM, wait up to `term_timeout_s`, then SIGKILL (see `stop_all`)."""
        return stop_all([self], term_timeout_s=term_timeout_s, kill_timeout_s=kill_timeout_s)[0]

    def kill(self, timeout_s: float = KILL_TIMEOUT_S) -> int | None:
        """kill -9 the program's whole process group (paused or not) and reap it. Returns its
        exit status (None if it was never started); raises SupervisorError if it is still there
        after `timeout_s`."""
        with self._lock:
            popen = self._popen
            if popen is None or popen.returncode is not None:
                return None if popen is None else popen.returncode
            _kill_group(popen.pid)  # not reaped yet: the group id is still ours
            return self._reap(popen, timeout_s)

    def _reap(self, popen: subprocess.Popen[bytes], timeout_s: float) -> int:
        try:
            status = popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise SupervisorError(Code.UNAVAILABLE,
                                  f"{self.name} (pid {popen.pid}) is still there {timeout_s:g} s "
                                  f"after SIGKILL") from None
        self.paused = False
        return status

    def output_since_start(self) -> str:
        """What the program wrote to its log since its latest start (at most
        MAX_OUTPUT_BYTES)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._output_offset_bytes)
                data = log.read(MAX_OUTPUT_BYTES)
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def wait_for_line(self, prefixes: tuple[str, ...], timeout_s: float) -> str | None:
        """The first complete line of output since the latest start that begins with one of
        `prefixes`, as soon as there is one; None if the program exits without writing one or
        `timeout_s` passes first."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            running = self.alive()  # before reading: a line written before the exit is seen
            complete = self.output_since_start().rpartition("\n")[0]
            line = next((line for line in complete.splitlines() if line.startswith(prefixes)),
                        None)
            if line is not None or not running or time.monotonic() >= deadline_s:
                return line
            time.sleep(POLL_INTERVAL_S)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        return log_tail(self.log_path, lines)

    def recorded(self) -> Recorded:
        """This child as a later program may know it (after its identity was saved)."""
        assert self._identity is not None, f"{self.name} was never started"
        return Recorded(self.name, self._identity)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return


class Supervisor:
    """The children of one program (a test cluster, a harness, one `dev up`). `close()`, also on
    leaving a `with` block, kills and reaps every one of them."""

    def __init__(self) -> None:
        self._children: list[Child] = []
        self._lock = threading.Lock()

    @property
    def children(self) -> list[Child]:
        with self._lock:
            return list(self._children)

    def add(self, name: str, argv: Sequence[str], log_path: Path, *,
            env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Child:
        """A new child, not started yet."""
        child = Child(name, argv, log_path, env=env, cwd=cwd)
        with self._lock:
            if len(self._children) >= MAX_CHILDREN:
                raise SupervisorError(Code.RESOURCE_EXHAUSTED,
                                      f"a supervisor starts at most {MAX_CHILDREN} children")
            self._children.append(child)
        return child

    def start(self, name: str, argv: Sequence[str], log_path: Path, *,
              env: Mapping[str, str] | None = None, cwd: Path | None = None,
              note: str = "") -> Child:
        child = self.add(name, argv, log_path, env=env, cwd=cwd)
        child.start(note)
        return child

    def stop_all(self, *, term_timeout_s: float = TERM_TIMEOUT_S,
                 kill_timeout_s: float = KILL_TIMEOUT_S) -> list[StopResult]:
        return stop_all(self.children, term_timeout_s=term_timeout_s,
                        kill_timeout_s=kill_timeout_s)

    def kill_all(self) -> None:
        """kill -9 every child, one right after the other, then reap them; raises
        SupervisorError naming those still there."""
        children = self.children
        for child in children:
            child.signal(signal.SIGKILL)
        failures = []
        for child in children:
            try:
                child.kill()
            except SupervisorError as error:
                failures.append(error.message)
        if failures:
            raise SupervisorError(Code.UNAVAILABLE, "; ".join(failures))

    def close(self) -> None:
        self.kill_all()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` lines of a log file (reads at most LOG_TAIL_BYTES); [] if unreadable."""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - LOG_TAIL_BYTES))
            data = file.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]
