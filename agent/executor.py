"""Executors: what runs an attempt. `SubprocessExecutor` for real work, `MockExecutor` for tests
and benchmarks, both behind the `Executor` protocol.

Both are thread-safe: the agent starts and kills from its heartbeat thread and polls from its
reporter thread. Each completion is handed out by `poll()` exactly once per executor instance;
the agent's durable attempt records make it exactly once across restarts.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent import runner
from agent.containment import AttemptContainment, Containment, kill_cgroup, session_mode
from agent.files import read_json, write_json_atomic
from agent.model import Assignment, AttemptRecord, Completion, Resources
from raftsched import limits, procfs
from raftsched.eventlog import EventLogger
from raftsched.protocol import task_key

KILL_GRACE_MS = 5_000
"""After SIGTERM (timeout or kill directive), the task's group gets SIGKILL this much later."""
WRAPPER_STARTUP_GRACE_MS = 10_000
"""An adopted attempt with no trace of its wrapper is taken as vanished only this long after
its record was written (the wrapper may be starting up)."""
VANISHED_EXIT_CODE = -1
"""Reported when the wrapper is gone without a result: counted as an application failure."""
INHERITED_ENV_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER",
                      "LOGNAME", "SHELL")
"""Taken from the agent's environment into every task's; nothing else of it leaks (no secrets
or RAFTSCHED_SERVERS)."""
ATTEMPT_DIR_DIGITS = 20
CHECKPOINTS_DIR = "checkpoints"
"""Beside the attempts dir: one directory per task whose spec sets `checkpoint: true`, kept
across the task's attempts on this cluster (a preempted or failed attempt's successor resumes
from it), removed when an attempt of the task succeeds."""
CHECKPOINT_KEEP_S = 7 * 24 * 3600
"""A checkpoint directory untouched this long (its task ended elsewhere, or never succeeded) is
removed when the executor starts."""
CHECKPOINT_ENV_VAR = "RAFTSCHED_CHECKPOINT_DIR"
MOCK_KEYS = ("sleep_ms", "exit", "fail_attempts")
MOCK_BAD_ARGUMENT_EXIT_CODE = 2
MOCK_CLOSE_TIMEOUT_MS = 2_000
MOCK_IDLE_WAIT_MS = 1_000
"""The mock's timer thread re-checks at least this often (start and close also wake it)."""

log = EventLogger("agent")


WORK_DIR = "work"
"""In each attempt dir: the one directory the task owns, and its default cwd and HOME."""
TRAVERSE_ONLY = 0o711
"""Directories between the agent's data dir and a task's work dir, when tasks run as another
user: the task may pass through them to its own work dir but list or read nothing in them."""


class ExecutorError(Exception):
    """An attempt could not be started; nothing of it runs."""


@dataclass(frozen=True, slots=True)
class TaskUser:
    """The unprivileged account tasks run as (`raftsched agent --task-user`)."""

    name: str
    uid: int
    gid: int

    @classmethod
    def resolve(cls, user: str) -> TaskUser:
        """By name or numeric uid; KeyError if the system has no such account."""
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)

    def blocked_at(self, path: Path) -> Path | None:
        """The first directory from / down to `path` itself that this account may not pass
        through (None: it reaches into `path`). Asked of a child process switched to the
        account's uid and gid with no supplementary groups, as its tasks run, so that the
        answer is the kernel's (ACLs included); needs root unless the account is this
        process's. OSError when the child cannot switch."""
        chain = [*reversed(path.resolve().parents), path.resolve()]
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: system calls only, then _exit whatever happens
            try:
                if self.uid != os.geteuid():
                    os.setgroups([])
                    os.setgid(self.gid)
                    os.setuid(self.uid)
                index = next((i for i, directory in enumerate(chain)
                              if not os.access(directory, os.X_OK)), len(chain))
                os.write(write_fd, str(index).encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            answer = pipe.read()
        os.waitpid(pid, 0)
        if not answer:
            raise OSError(f"cannot switch to account {self.name} (uid {self.uid}) to check {path}")
        index = int(answer)
        return chain[index] if index < len(chain) else None


@dataclass(frozen=True, slots=True)
class Launch:
    """Where an attempt was started, for its durable record."""

    attempt_dir: str
    wrapper_pid: int | None = None
    wrapper_start_ticks: int | None = None


class Executor(Protocol):
    def attempt_dir(self, fence: int) -> str:
        """Where the attempt's files go ('' when it has none); known before start()."""
        ...

    def start(self, assignment: Assignment) -> Launch:
        """Starts the attempt; raises ExecutorError when it cannot."""
        ...

    def adopt(self, record: AttemptRecord) -> bool:
        """Watches an attempt started by an earlier agent (from its durable record). False, and
        nothing watched, when it certainly never started: the earlier agent stopped between
        recording the attempt and launching it."""
        ...

    def kill(self, fence: int) -> bool:
        """Asks a watched attempt to stop; its completion will say killed. False if unknown."""
        ...

    def poll(self) -> list[Completion]:
        """Attempts that ended since the last poll, each once."""
        ...

    def running(self) -> list[int]:
        """Fences of the attempts watched and not yet handed out by poll()."""
        ...

    def subscribe(self, listener: Callable[[], None]) -> None:
        """`listener` is called (from any thread) when poll() may have something new; an
        executor that cannot tell never calls it and is polled on a timer."""
        ...

    def observed_free(self) -> Resources | None:
        """What the executor itself sees free (a Slurm partition shared with other users), as
        of its last poll; None when the agent's own accounting is all there is. Cheap: the
        agent asks under its lock."""
        ...

    def close(self) -> None:
        """Stops watching. Running attempts are left alone."""
        ...


def task_env(assignment: Assignment, agent_env: dict[str, str]) -> dict[str, str]:
    """The task's environment: a few inherited names, the spec's env, then the fence variables
    (RAFTSCHED_* names are reserved in specs, and these are set last anyway)."""
    env = {name: agent_env[name] for name in INHERITED_ENV_VARS if name in agent_env}
    env.update(assignment.env)
    env.update({
        "RAFTSCHED_JOB_ID": assignment.job_id,
        "RAFTSCHED_TASK_ID": assignment.task_id,
        "RAFTSCHED_ATTEMPT": str(assignment.attempt),
        "RAFTSCHED_FENCE": str(assignment.fence),
        "RAFTSCHED_IDEMPOTENCY_KEY": assignment.idempotency_key,
    })
    return env


# --- subprocess ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Watched:
    fence: int
    attempt_dir: Path
    pid: int | None
    start_ticks: int | None
    startup_deadline_s: float
    """Monotonic time until which a wrapper without a pid file may still be starting."""
    process: subprocess.Popen[bytes] | None = None
    """Set when this executor started the wrapper (it reaps it); None when adopted."""
    kill_requested: bool = False


class SubprocessExecutor:
    """Runs each attempt through `python -m agent.runner` in a session of its own, so the
    attempt survives the agent; the attempt dir is the interface between the two."""

    def __init__(self, root: Path, *, max_output_bytes: int = limits.MAX_TASK_OUTPUT_BYTES,
                 kill_grace_ms: int = KILL_GRACE_MS,
                 startup_grace_ms: int = WRAPPER_STARTUP_GRACE_MS,
                 python: str = sys.executable, task_user: TaskUser | None = None,
                 tenant_users: Mapping[str, TaskUser] | None = None,
                 containment: Containment | None = None) -> None:
        """`task_user`: run every task as this account (the wrapper stays the agent's, so a
        task can neither signal it nor write its result); None: as the agent's own user.
        `tenant_users`: the tasks of these tenants run as these accounts instead (`raftsched
        agent --tenant-task-users`), so that tenants cannot read each other's work.
        `containment`: how an attempt's end ends all it started (`agent.containment`; None:
        the session fallback). In cgroup mode, attempt cgroups left by wrappers that died
        (with whatever still runs in them) are removed here."""
        assert max_output_bytes >= 0 and kill_grace_ms >= 0 and startup_grace_ms >= 0
        self._root = root
        self._task_user = task_user
        self._tenant_users = dict(tenant_users or {})
        self._max_output_bytes = max_output_bytes
        self._kill_grace_ms = kill_grace_ms
        self._startup_grace_ms = startup_grace_ms
        self._python = python
        self.containment = containment or session_mode("no cgroup asked for")
        self._lock = threading.Lock()
        self._watched: dict[int, _Watched] = {}
        root.mkdir(parents=True, exist_ok=True)
        self._checkpoints = root.parent / CHECKPOINTS_DIR
        self._checkpoints.mkdir(mode=0o700, exist_ok=True)
        if task_user is not None or self._tenant_users:
            for directory in (root.parent, root, self._checkpoints):
                directory.chmod(TRAVERSE_ONLY)
        _sweep_checkpoints(self._checkpoints, time.time() - CHECKPOINT_KEEP_S)
        self._sweep_cgroups()

    def task_dirs(self) -> list[Path]:
        """The directories below which tasks get their work dir (also their HOME) and their
        checkpoint dir: every task account must be able to pass through them."""
        return [self._root, self._checkpoints]

    def _sweep_cgroups(self) -> None:
        """Kills and removes the attempt cgroups whose wrapper is gone (an agent or machine
        crash left them); a live wrapper ends its own."""
        for fence, cgroup in self.containment.attempt_cgroups():
            wrapper = _wrapper_of(Path(self.attempt_dir(fence)))
            if wrapper is not None and procfs.is_alive(*wrapper):
                continue
            gone = kill_cgroup(cgroup)
            log.info("attempt_cgroup_swept", fence=fence, cgroup=str(cgroup), removed=gone)

    def checkpoint_dir(self, job_id: str, task_id: str) -> Path:
        """The task's checkpoint directory on this agent (named by a digest of its ids, which
        may hold characters a file name should not)."""
        digest = hashlib.sha256(task_key(job_id, task_id).encode()).hexdigest()[:32]
        return self._checkpoints / digest

    def user_of(self, assignment: Assignment) -> TaskUser | None:
        """The account the assignment's task runs as (None: the agent's own): its tenant's,
        else the agent's task user."""
        return self._tenant_users.get(assignment.tenant, self._task_user)

    def _checkpoint(self, assignment: Assignment, user: TaskUser | None) -> Path:
        """Creates (or keeps) the task's checkpoint directory, owned by the task's user. One
        that another account owns (the operator changed --task-user or --tenant-task-users
        since an earlier attempt) is discarded, not handed over: what it holds was writable by
        that account, which may be another tenant's."""
        directory = self.checkpoint_dir(assignment.job_id, assignment.task_id)
        uid = os.geteuid() if user is None else user.uid
        with contextlib.suppress(FileNotFoundError):
            owner = directory.stat(follow_symlinks=False).st_uid
            if owner != uid:
                log.warning("checkpoint_discarded", job=assignment.job_id,
                            task=assignment.task_id, fence=assignment.fence, owner_uid=owner,
                            task_uid=uid, reason="written by another account")
                _discard(directory, assignment.fence)
        directory.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            os.chown(directory, user.uid, user.gid)
        os.utime(directory)  # fresh for CHECKPOINT_KEEP_S
        return directory

    def attempt_dir(self, fence: int) -> str:
        return str(self._root / f"{fence:0{ATTEMPT_DIR_DIGITS}d}")

    def start(self, assignment: Assignment) -> Launch:
        directory = Path(self.attempt_dir(assignment.fence))
        with self._lock:
            if len(self._watched) >= limits.MAX_RUNNING_ATTEMPTS:
                raise ExecutorError(f"{limits.MAX_RUNNING_ATTEMPTS} attempts already running")
            if assignment.fence in self._watched:
                raise ExecutorError(f"fence {assignment.fence} is already running")
        try:
            directory.mkdir(parents=True, exist_ok=False)
            work = directory / WORK_DIR
            work.mkdir(mode=0o700)
            env = task_env(assignment, dict(os.environ))
            user = self.user_of(assignment)
            if user is not None:
                directory.chmod(TRAVERSE_ONLY)
                os.chown(work, user.uid, user.gid)
                env.update(HOME=str(work), USER=user.name, LOGNAME=user.name)
            checkpoint = self._checkpoint(assignment, user) if assignment.checkpoint else None
            if checkpoint is not None:
                env[CHECKPOINT_ENV_VAR] = str(checkpoint)
            write_json_atomic(directory / runner.SPEC_FILE, {
                "argv": list(assignment.command), "env": env,
                "cwd": assignment.cwd or str(work), "timeout_ms": assignment.timeout_ms,
                "max_output_bytes": self._max_output_bytes,
                "kill_grace_ms": assignment.kill_grace_ms or self._kill_grace_ms,
                "user": None if user is None else [user.uid, user.gid],
                "checkpoint_dir": None if checkpoint is None else str(checkpoint),
                "containment": self.containment.for_attempt(assignment.fence)})
            with (directory / "wrapper.log").open("ab") as wrapper_log:
                process = subprocess.Popen(
                    [self._python, "-m", "agent.runner", str(directory)], cwd=directory,
                    env=_runner_env(), stdin=subprocess.DEVNULL, stdout=wrapper_log,
                    stderr=wrapper_log, start_new_session=True, close_fds=True)
        except OSError as error:
            raise ExecutorError(f"cannot start fence {assignment.fence}: {error}") from error
        ticks = procfs.start_ticks(process.pid)
        write_json_atomic(directory / runner.WRAPPER_FILE,
                          {"pid": process.pid, "start_ticks": ticks})
        with self._lock:
            self._watched[assignment.fence] = _Watched(
                assignment.fence, directory, process.pid, ticks, self._startup_deadline_s(),
                process)
        return Launch(str(directory), process.pid, ticks)

    def adopt(self, record: AttemptRecord) -> bool:
        directory = Path(record.attempt_dir)
        if record.wrapper_pid is None and not (directory / runner.SPEC_FILE).exists():
            return False  # start() writes the spec before it launches the wrapper
        with self._lock:
            if record.fence not in self._watched:
                # The grace for a wrapper that may still be starting runs on this process's
                # monotonic clock: a wall clock stepped since the record was made cannot
                # stretch it.
                self._watched[record.fence] = _Watched(
                    record.fence, directory, record.wrapper_pid, record.wrapper_start_ticks,
                    self._startup_deadline_s())
        return True

    def _startup_deadline_s(self) -> float:
        return time.monotonic() + self._startup_grace_ms / 1000

    def kill(self, fence: int) -> bool:
        with self._lock:
            watched = self._watched.get(fence)
        if watched is None:
            return False
        watched.kill_requested = True
        pid, ticks = _identity(watched)
        if pid is not None and procfs.is_alive(pid, ticks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        return True

    def poll(self) -> list[Completion]:
        with self._lock:
            watched = list(self._watched.values())
        completions = [c for c in (self._check(w) for w in watched) if c is not None]
        by_fence = {w.fence: w for w in watched}
        for completion in completions:
            if completion.exit_code == 0 and not completion.timed_out \
                    and not completion.killed:
                self._drop_checkpoint(by_fence[completion.fence])
        with self._lock:
            for completion in completions:
                self._watched.pop(completion.fence, None)
        return completions

    def _drop_checkpoint(self, watched: _Watched) -> None:
        """The task succeeded: its checkpoint has served (the dir named in its spec, and only
        one inside this executor's checkpoints dir)."""
        try:
            spec = read_json(watched.attempt_dir / runner.SPEC_FILE)
        except ValueError:
            return
        named = None if spec is None else spec.get("checkpoint_dir")
        if isinstance(named, str) and Path(named).parent == self._checkpoints:
            shutil.rmtree(named, ignore_errors=True)

    def running(self) -> list[int]:
        with self._lock:
            return sorted(self._watched)

    def subscribe(self, listener: Callable[[], None]) -> None:
        return  # cannot tell without a thread of its own: the agent polls on a timer

    def observed_free(self) -> Resources | None:
        return None  # the machine is the agent's alone: its own accounting is the truth

    def close(self) -> None:
        with self._lock:
            self._watched.clear()
        if self.containment.parent is not None:
            with contextlib.suppress(OSError):  # busy while attempts run on: they stay
                self.containment.parent.rmdir()

    def _check(self, watched: _Watched) -> Completion | None:
        """The attempt's completion if its wrapper is done, else None."""
        if watched.process is not None:
            if watched.process.poll() is None:
                return None
            return self._result(watched, f"wrapper exited with {watched.process.returncode}")
        completion = self._read_result(watched)
        if completion is not None:
            return completion
        pid, ticks = _identity(watched)
        if pid is None:
            if time.monotonic() < watched.startup_deadline_s:
                return None
            return self._vanished(watched, "wrapper never started")
        if procfs.is_alive(pid, ticks):
            return None
        return self._result(watched, "wrapper vanished")

    def _result(self, watched: _Watched, why: str) -> Completion:
        """Reads result.json of a wrapper known to be gone (it writes the file before exiting)."""
        completion = self._read_result(watched)
        return completion if completion is not None else self._vanished(watched, why)

    def _read_result(self, watched: _Watched) -> Completion | None:
        try:
            result = read_json(watched.attempt_dir / runner.RESULT_FILE)
        except ValueError as error:
            return Completion(watched.fence, VANISHED_EXIT_CODE, reason=f"bad result: {error}")
        if result is None:
            return None
        exit_code = result.get("exit_code")
        return Completion(watched.fence, None if exit_code is None else int(exit_code),
                          bool(result.get("timed_out")), bool(result.get("killed")),
                          str(result.get("reason", "")))

    def _vanished(self, watched: _Watched, why: str) -> Completion:
        """The wrapper is gone without a result. Its task cannot outlive it (PDEATHSIG), but
        whatever else the attempt started is ended here (its cgroup, or its session and the
        processes carrying its fence), as the wrapper would have."""
        try:
            spec = read_json(watched.attempt_dir / runner.SPEC_FILE)
            task = read_json(watched.attempt_dir / runner.TASK_FILE)
        except ValueError:
            spec, task = None, None
        if spec is not None:
            pid = None if task is None else int(task["pid"])
            ticks = None if task is None else task.get("start_ticks")
            AttemptContainment.from_spec(spec).end(pid, None if ticks is None else int(ticks))
        if watched.kill_requested:
            # SIGTERM reached the wrapper before its handler was installed, i.e. before it
            # started the task: the kill did what it was asked.
            return Completion(watched.fence, None, killed=True, reason=f"killed ({why})")
        return Completion(watched.fence, VANISHED_EXIT_CODE, reason=why)


def _discard(directory: Path, fence: int) -> None:
    """Removes a checkpoint directory: renamed away first (atomic), so the task's fresh one is
    made whatever the removal leaves behind (the sweep takes any rest later)."""
    aside = directory.with_name(f"{directory.name}.discarded-{fence}")
    directory.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)


def _sweep_checkpoints(checkpoints: Path, older_than_s: float) -> None:
    """Removes the checkpoint directories last used before `older_than_s` (epoch seconds)."""
    for entry in checkpoints.iterdir():
        with contextlib.suppress(OSError):
            found = entry.stat(follow_symlinks=False)
            if found.st_mtime < older_than_s:
                if stat.S_ISDIR(found.st_mode):
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()


def _wrapper_of(attempt_dir: Path) -> tuple[int, int | None] | None:
    """The pid and start ticks in the attempt's wrapper.json, or None."""
    try:
        found = read_json(attempt_dir / runner.WRAPPER_FILE)
    except ValueError:
        return None
    if found is None:
        return None
    ticks = found.get("start_ticks")
    return int(found["pid"]), None if ticks is None else int(ticks)


def _identity(watched: _Watched) -> tuple[int | None, int | None]:
    """The wrapper's pid and start time: from the record, else from wrapper.json."""
    if watched.pid is not None:
        return watched.pid, watched.start_ticks
    try:
        found = read_json(watched.attempt_dir / runner.WRAPPER_FILE)
    except ValueError:
        return None, None
    if found is None:
        return None, None
    ticks = found.get("start_ticks")
    watched.pid = int(found["pid"])
    watched.start_ticks = None if ticks is None else int(ticks)
    return watched.pid, watched.start_ticks


def _runner_env() -> dict[str, str]:
    """The wrapper's own environment: the agent's, plus a path to import `agent` from."""
    env = dict(os.environ)
    package_parent = str(Path(runner.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


# --- mock ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MockPlan:
    """What a mock attempt does: wait `sleep_ms`, then end with `exit_code` (None + timed_out
    when the task's timeout is shorter)."""

    sleep_ms: int
    exit_code: int | None
    timed_out: bool
    reason: str




def mock_plan(assignment: Assignment) -> MockPlan:
    """`["mock", "sleep_ms=N", "exit=K", "fail_attempts=M"]` (any subset, defaults 0): exit 1
    while the attempt number is <= M, then exit K. Any argv not starting with "mock" succeeds at
    once; a "mock" argv with an unknown or malformed argument exits 2 at once."""
    argv = assignment.command
    if not argv or argv[0] != "mock":
        return MockPlan(0, 0, False, "")
    values = dict.fromkeys(MOCK_KEYS, 0)
    for argument in argv[1:]:
        name, _, value = argument.partition("=")
        if name not in values or not value.lstrip("-").isdigit():
            return MockPlan(0, MOCK_BAD_ARGUMENT_EXIT_CODE, False,
                            f"bad mock argument {argument!r}")
        values[name] = int(value)
    exit_code = 1 if assignment.attempt <= values["fail_attempts"] else values["exit"]
    sleep_ms = max(0, values["sleep_ms"])
    if 0 < assignment.timeout_ms < sleep_ms:
        return MockPlan(assignment.timeout_ms, None, True,
                        f"timed out after {assignment.timeout_ms} ms")
    return MockPlan(sleep_ms, exit_code, False, "" if exit_code == 0 else f"exit code {exit_code}")


class MockExecutor:
    """No processes: one timer thread completes attempts as their plans say. An attempt lives
    as long as this object, so a test that "restarts" an agent hands the same executor to the
    new agent, as a real wrapper outlives a real agent."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._condition = threading.Condition()
        self._due: list[tuple[float, int, Completion]] = []  # (monotonic s, fence, completion)
        self._pending: dict[int, Completion] = {}   # fence -> what it will end with
        self._done: list[Completion] = []
        self._listeners: list[Callable[[], None]] = []
        self._closed = False
        self.started: list[int] = []
        """Fences in the order they were started (tests check nothing runs twice)."""
        self._thread = threading.Thread(target=self._run, name="mock-executor", daemon=True)
        self._thread.start()

    def attempt_dir(self, fence: int) -> str:
        return "" if self._root is None else str(self._root / f"{fence:0{ATTEMPT_DIR_DIGITS}d}")

    def start(self, assignment: Assignment) -> Launch:
        plan = mock_plan(assignment)
        completion = Completion(assignment.fence, plan.exit_code, plan.timed_out, False,
                                plan.reason)
        with self._condition:
            if self._closed:
                raise ExecutorError("executor closed")
            if len(self._pending) >= limits.MAX_RUNNING_ATTEMPTS:
                raise ExecutorError(f"{limits.MAX_RUNNING_ATTEMPTS} attempts already running")
            if assignment.fence in self._pending:
                raise ExecutorError(f"fence {assignment.fence} is already running")
            self.started.append(assignment.fence)
            self._pending[assignment.fence] = completion
            heapq.heappush(self._due, (time.monotonic() + plan.sleep_ms / 1000,
                                       assignment.fence, completion))
            self._condition.notify_all()
        return Launch(self.attempt_dir(assignment.fence))

    def adopt(self, record: AttemptRecord) -> bool:
        with self._condition:
            known = record.fence in self._pending or any(
                c.fence == record.fence for c in self._done)
            if not known:
                self._done.append(Completion(record.fence, VANISHED_EXIT_CODE,
                                             reason="mock attempt lost with its executor"))
        self._notify()
        return True

    def kill(self, fence: int) -> bool:
        with self._condition:
            if self._pending.pop(fence, None) is None:
                return False
            self._done.append(Completion(fence, None, killed=True, reason="killed"))
        self._notify()
        return True

    def poll(self) -> list[Completion]:
        with self._condition:
            done, self._done = self._done, []
        return done

    def running(self) -> list[int]:
        with self._condition:
            return sorted(self._pending)

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._condition:
            self._listeners.append(listener)

    def observed_free(self) -> Resources | None:
        return None

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        self._thread.join(timeout=MOCK_CLOSE_TIMEOUT_MS / 1000)

    def _run(self) -> None:
        while True:
            with self._condition:
                if self._closed:
                    return
                now = time.monotonic()
                fired = False
                while self._due and self._due[0][0] <= now:
                    _, fence, completion = heapq.heappop(self._due)
                    if self._pending.get(fence) is completion:  # not killed meanwhile
                        del self._pending[fence]
                        self._done.append(completion)
                        fired = True
                wait_s = self._due[0][0] - now if self._due else MOCK_IDLE_WAIT_MS / 1000
                if not fired:
                    self._condition.wait(timeout=min(wait_s, MOCK_IDLE_WAIT_MS / 1000))
                    continue
            self._notify()

    def _notify(self) -> None:
        with self._condition:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
