"""The task wrapper: `python -m agent.runner ATTEMPT_DIR`, one per attempt.

The agent starts it in a session of its own so that it outlives the agent (even `kill -9`); the
agent then watches the attempt dir, and a restarted agent picks the attempt up again from there.
Standard library only, besides the agent's file helpers and the shared leaf `raftsched.procfs`.

In ATTEMPT_DIR the wrapper reads `spec.json` (argv, env, cwd, timeout_ms, max_output_bytes,
kill_grace_ms, user: [uid, gid] or null, containment: see `agent.containment`; checkpoint_dir is
the executor's) and writes:
- `wrapper.json` {pid, start_ticks} first, so a restarted agent can find it;
- `task.json` {pid, start_ticks} once the task runs (the task leads a session and process group
  of its own);
- `stdout`, `stderr`: the task's output, each capped at max_output_bytes; the pipes are drained to
  the end past the cap so the task never blocks on a full pipe;
- `result.json` {exit_code, timed_out, killed, reason, contained, ...} last, atomically.

Timeout or SIGTERM/SIGINT/SIGHUP to the wrapper (a kill directive): SIGTERM to the task's group
(and, in cgroup mode, to every process of the attempt), SIGKILL after kill_grace_ms; exit_code is
then null and timed_out or killed is true. A task that could not be started gets exit code 127
(not found) or 126 (any other reason, a cwd its account may not enter included), like a shell;
one ended by signal N gets 128+N. When the wrapper dies the task is SIGKILLed by the kernel
(PR_SET_PDEATHSIG). When the task's first process exits, every other process of the attempt is
SIGKILLed before the result is written (`agent.containment`: its cgroup, else its session and
the processes carrying its fence): nothing an attempt started outlives it.

With `user` set, the wrapper (the agent's user, typically root) starts the task as that uid and
gid with no supplementary groups, and the task enters its cwd only after that switch: the task
cannot signal the wrapper, write any file of the attempt dir but its own `work/`, read the
wrapper's /proc/PID/environ, or start in a directory its account may not enter.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, NoReturn

from agent.containment import AttemptContainment
from agent.files import read_json, write_json_atomic
from raftsched.procfs import start_ticks

SUPERVISE_MAX_SLEEP_MS = 1_000
"""The wrapper wakes when the task exits, a signal arrives or a deadline passes, and at least
this often anyway."""
REAP_TIMEOUT_MS = 5_000
"""Reaping a task already seen exited (waitid WNOWAIT) cannot take long; bounded anyway."""
DRAIN_CHUNK_BYTES = 64 * 1024
DRAIN_JOIN_TIMEOUT_MS = 5_000
"""After the task's group is gone, output still held open by an escaped descendant is
abandoned after this long."""
EXIT_NOT_FOUND = 127
EXIT_CANNOT_START = 126
EXIT_SIGNAL_BASE = 128
_PR_SET_PDEATHSIG = 1

SPEC_FILE = "spec.json"
WRAPPER_FILE = "wrapper.json"
TASK_FILE = "task.json"
RESULT_FILE = "result.json"
STDOUT_FILE = "stdout"
STDERR_FILE = "stderr"


class _Stop:
    """Set from a signal handler: the wrapper was told to kill the task."""

    def __init__(self) -> None:
        self.requested_by: str | None = None

    def handle(self, number: int, _frame: object) -> None:
        self.requested_by = self.requested_by or signal.Signals(number).name


class _Wakeup:
    """A sleep that any handled signal (SIGCHLD when the task exits, SIGTERM) cuts short:
    Python's wakeup fd gets a byte per signal, and sleeping is a select() on it."""

    def __init__(self) -> None:
        self._read_fd, write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda _number, _frame: None)  # delivered, so it wakes

    def sleep(self, seconds: float) -> None:
        ready, _, _ = select.select([self._read_fd], [], [], seconds)
        if ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self._read_fd, DRAIN_CHUNK_BYTES)


class _Drain(threading.Thread):
    """Copies a pipe into a file up to a cap, then keeps reading and discarding. Each piece read
    is written through at once (an unbuffered file): `task logs --follow` and the console read
    the file while the task runs (a buffered file held a small output until the task ended)."""

    def __init__(self, pipe: IO[bytes], path: Path, cap_bytes: int) -> None:
        super().__init__(name=f"drain-{path.name}", daemon=True)
        self._pipe = pipe
        self._path = path
        self._cap_bytes = cap_bytes
        self.total_bytes = 0

    def run(self) -> None:
        descriptor = self._pipe.fileno()
        with self._path.open("wb", buffering=0) as sink:
            while True:
                chunk = os.read(descriptor, DRAIN_CHUNK_BYTES)
                if not chunk:
                    break
                room = self._cap_bytes - self.total_bytes
                if room > 0:
                    _write_all(sink, chunk[:room])
                self.total_bytes += len(chunk)
            os.fsync(sink.fileno())
        self._pipe.close()

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self._cap_bytes


def _write_all(sink: IO[bytes], data: bytes) -> None:
    """An unbuffered write may write less than asked: write the rest."""
    view = memoryview(data)
    while view:
        written = sink.write(view)
        assert written, "a blocking write to a file wrote nothing"
        view = view[written:]


def _die_with_wrapper() -> None:
    """preexec_fn: the kernel SIGKILLs the task when the wrapper's main thread dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return


def _kill_group(pgid: int, number: signal.Signals) -> None:
    try:
        os.killpg(pgid, number)
    except (ProcessLookupError, PermissionError):
        return


def _exited(pid: int) -> bool:
    """True once the task has exited, without reaping it (WNOWAIT)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


class _Enter:
    """preexec_fn of the task's process (after fork and setsid, before exec; the wrapper has no
    other thread yet, so this is safe): joins the attempt's cgroup while still root, switches
    to the task's account, then asks for SIGKILL when the wrapper dies (the switch would clear
    an earlier request) and only then enters the task's cwd, as the task's account: a directory
    it may not enter starts nothing. Why it failed goes to `report_fd` (closed on exec)."""

    def __init__(self, spec: dict[str, Any], cwd: str, containment: AttemptContainment,
                 report_fd: int) -> None:
        user = spec.get("user")
        self._identity = None if not user else (int(user[0]), int(user[1]))
        self._cwd = cwd
        self._containment = containment
        self._report_fd = report_fd
        self._wrapper_pid = os.getpid()
        self._cwd_problem = (f"cannot enter cwd {cwd} as {_account(self._identity)}: it does "
                             f"not exist or that account may not enter it").encode()

    def __call__(self) -> None:
        try:
            self._containment.enter()
        except OSError as error:
            self._fail(f"cannot join the attempt's cgroup: {error}".encode())
        if self._identity is not None:
            try:
                os.setgroups([])
                os.setgid(self._identity[1])
                os.setuid(self._identity[0])
            except OSError as error:
                self._fail(f"cannot switch to uid {self._identity[0]}: {error}".encode())
        _die_with_wrapper()
        if os.getppid() != self._wrapper_pid:
            os._exit(EXIT_CANNOT_START)  # the wrapper died before the request took hold
        try:
            os.chdir(self._cwd)
        except OSError:
            self._fail(self._cwd_problem)  # ENOENT and EACCES alike: no oracle about paths

    def _fail(self, problem: bytes) -> NoReturn:
        os.write(self._report_fd, problem)
        raise _CannotStart


class _CannotStart(Exception):
    """Raised in the task's process before exec: Popen reports it as a SubprocessError."""


def _account(identity: tuple[int, int] | None) -> str:
    uid = os.geteuid() if identity is None else identity[0]
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _spawn(spec: dict[str, Any], attempt_dir: Path, containment: AttemptContainment
           ) -> subprocess.Popen[bytes] | dict[str, Any]:
    cwd = spec.get("cwd") or str(attempt_dir)
    report_read, report_write = os.pipe()  # both close on exec
    try:
        containment.prepare()
        enter = _Enter(spec, cwd, containment, report_write)
        return subprocess.Popen(
            list(spec["argv"]), env=dict(spec["env"]), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            close_fds=True, preexec_fn=enter)
    except FileNotFoundError as error:
        return _result(EXIT_NOT_FOUND, reason=f"cannot start: {error}")
    except OSError as error:
        return _result(EXIT_CANNOT_START, reason=f"cannot start: {error}")
    except subprocess.SubprocessError:
        os.close(report_write)
        report_write = -1
        return _result(EXIT_CANNOT_START, reason=f"cannot start: {_read_all(report_read)}")
    finally:
        os.close(report_read)
        if report_write >= 0:
            os.close(report_write)


def _read_all(descriptor: int) -> str:
    """What the task's process reported before it failed (its write end is closed)."""
    chunks = []
    while chunk := os.read(descriptor, DRAIN_CHUNK_BYTES):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace") or "the task's process failed before exec"


def _result(exit_code: int | None, *, timed_out: bool = False, killed: bool = False,
            reason: str = "") -> dict[str, Any]:
    return {"exit_code": exit_code, "timed_out": timed_out, "killed": killed, "reason": reason}


def _supervise(process: subprocess.Popen[bytes], spec: dict[str, Any], stop: _Stop,
               wakeup: _Wakeup, containment: AttemptContainment) -> dict[str, Any]:
    """Waits for the task, enforcing the timeout and kill requests; returns the result.
    Sleeps until the task exits, a signal arrives or a deadline passes (no busy polling)."""
    timeout_ms = int(spec.get("timeout_ms") or 0)
    grace_s = int(spec["kill_grace_ms"]) / 1000
    deadline_s = time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else None
    cause: str | None = None
    term_sent_s: float | None = None
    killed_hard = False
    while not _exited(process.pid):
        now_s = time.monotonic()
        if cause is None and stop.requested_by is not None:
            cause = "killed"
        elif cause is None and deadline_s is not None and now_s >= deadline_s:
            cause = "timed_out"
        if cause is not None and term_sent_s is None:
            term_sent_s = now_s
            containment.terminate(process.pid, signal.SIGTERM)
        elif term_sent_s is not None and not killed_hard and now_s - term_sent_s >= grace_s:
            killed_hard = True
            containment.terminate(process.pid, signal.SIGKILL)
        wake_s = [now_s + SUPERVISE_MAX_SLEEP_MS / 1000]
        if cause is None and deadline_s is not None:
            wake_s.append(deadline_s)
        if term_sent_s is not None and not killed_hard:
            wake_s.append(term_sent_s + grace_s)
        wakeup.sleep(max(0.0, min(wake_s) - now_s))
    # The leader has exited but is not reaped yet, so its pid still names its group and its
    # session: whatever is left of the group dies now, then every other process of the attempt
    # (its cgroup, or its session and the processes that carry its fence), before the result
    # is written: an attempt that ended has nothing left running.
    _kill_group(process.pid, signal.SIGKILL)
    contained = containment.end(process.pid)
    returncode = process.wait(timeout=REAP_TIMEOUT_MS / 1000)
    result = _classify(returncode, cause, timeout_ms, stop, killed_hard)
    result["contained"] = contained
    return result


def _classify(returncode: int, cause: str | None, timeout_ms: int, stop: _Stop,
              killed_hard: bool) -> dict[str, Any]:
    hard = " (SIGKILL after the grace period)" if killed_hard else ""
    if cause == "timed_out":
        return _result(None, timed_out=True, reason=f"timed out after {timeout_ms} ms{hard}")
    if cause == "killed":
        return _result(None, killed=True,
                       reason=f"killed: the wrapper got {stop.requested_by}{hard}")
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return _result(EXIT_SIGNAL_BASE - returncode, reason=f"terminated by {name}")
    return _result(returncode, reason="" if returncode == 0 else f"exit code {returncode}")


def run(attempt_dir: Path) -> int:
    stop = _Stop()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, stop.handle)
    wakeup = _Wakeup()
    if (attempt_dir / RESULT_FILE).exists():
        return 0  # this attempt ran to its end already: never run it twice
    write_json_atomic(attempt_dir / WRAPPER_FILE,
                      {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())})
    spec = read_json(attempt_dir / SPEC_FILE)
    assert spec is not None, f"{attempt_dir}: no {SPEC_FILE}"
    if stop.requested_by is not None:  # killed before the task started: it never will
        write_json_atomic(attempt_dir / RESULT_FILE, _result(
            None, killed=True, reason=f"killed before start: the wrapper got {stop.requested_by}"))
        return 0
    containment = AttemptContainment.from_spec(spec)
    spawned = _spawn(spec, attempt_dir, containment)
    if isinstance(spawned, dict):
        containment.end(None)  # its cgroup, if it was made
        write_json_atomic(attempt_dir / RESULT_FILE, spawned)
        return 0
    process = spawned
    write_json_atomic(attempt_dir / TASK_FILE,
                      {"pid": process.pid, "start_ticks": start_ticks(process.pid)})
    cap_bytes = int(spec["max_output_bytes"])
    assert process.stdout is not None and process.stderr is not None
    drains = [_Drain(process.stdout, attempt_dir / STDOUT_FILE, cap_bytes),
              _Drain(process.stderr, attempt_dir / STDERR_FILE, cap_bytes)]
    for drain in drains:
        drain.start()
    result = _supervise(process, spec, stop, wakeup, containment)
    deadline_s = time.monotonic() + DRAIN_JOIN_TIMEOUT_MS / 1000
    for drain in drains:
        drain.join(timeout=max(0.0, deadline_s - time.monotonic()))
    result.update(stdout_bytes=drains[0].total_bytes, stderr_bytes=drains[1].total_bytes,
                  output_truncated=any(drain.truncated for drain in drains))
    write_json_atomic(attempt_dir / RESULT_FILE, result)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m agent.runner ATTEMPT_DIR", file=sys.stderr)
        return 2
    return run(Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
