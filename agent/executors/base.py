"""What every executor shares: the `Executor` protocol, `Launch`, `TaskUser`, `ExecutorError`,
the attempt-dir layout and the task environment (`task_env`)."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.model import Assignment, AttemptRecord, Completion, Resources
from raftsched.environment import (
    TASK_ATTEMPT_ENV,
    TASK_FENCE_ENV,
    TASK_IDEMPOTENCY_KEY_ENV,
    TASK_JOB_ID_ENV,
    TASK_TASK_ID_ENV,
)

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
MOCK_KEYS = ("sleep_ms", "exit", "fail_attempts")
MOCK_BAD_ARGUMENT_EXIT_CODE = 2
MOCK_CLOSE_TIMEOUT_MS = 2_000
MOCK_IDLE_WAIT_MS = 1_000
"""The mock's timer thread re-checks at least this often (start and close also wake it)."""



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
        TASK_JOB_ID_ENV: assignment.job_id,
        TASK_TASK_ID_ENV: assignment.task_id,
        TASK_ATTEMPT_ENV: str(assignment.attempt),
        TASK_FENCE_ENV: str(assignment.task_fence or assignment.fence),
        TASK_IDEMPOTENCY_KEY_ENV: assignment.idempotency_key,
    })
    return env
