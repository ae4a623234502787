"""`SubprocessExecutor`: each attempt through `python -m agent.runner` on this machine."""

from __future__ import annotations

import contextlib
import hashlib
import os
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

from agent import runner
from agent.containment import AttemptContainment, Containment, kill_cgroup, session_mode
from agent.executors.base import (
    ATTEMPT_DIR_DIGITS,
    CHECKPOINT_KEEP_S,
    CHECKPOINTS_DIR,
    KILL_GRACE_MS,
    TRAVERSE_ONLY,
    VANISHED_EXIT_CODE,
    WORK_DIR,
    WRAPPER_STARTUP_GRACE_MS,
    ExecutorError,
    Launch,
    TaskUser,
    task_env,
)
from agent.files import read_json, write_json_atomic
from agent.model import Assignment, AttemptRecord, Completion, Resources
from agent.outputs import make_io_dir, with_outputs
from raftsched import limits, procfs
from raftsched.environment import TASK_CHECKPOINT_DIR_ENV
from raftsched.eventlog import EventLogger
from raftsched.protocol import task_key

log = EventLogger("agent")


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
            env.update(make_io_dir(directory, assignment.inputs,
                                   None if user is None else (user.uid, user.gid)))
            checkpoint = self._checkpoint(assignment, user) if assignment.checkpoint else None
            if checkpoint is not None:
                env[TASK_CHECKPOINT_DIR_ENV] = str(checkpoint)
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
        return with_outputs(Completion(watched.fence, None if exit_code is None else int(exit_code),
                                       bool(result.get("timed_out")), bool(result.get("killed")),
                                       str(result.get("reason", ""))), watched.attempt_dir)

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
