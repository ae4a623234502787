"""Task containment: every process an attempt starts ends with the attempt.

Standard library only, besides the shared leaf `raftsched.procfs`: the task wrapper
(`agent.runner`) imports it. The mode is chosen once, when the agent starts
(`raftsched agent --task-containment`), and written into each attempt's spec, so the wrapper and
any later agent that adopts the attempt end it the same way.

- `cgroup`, where this machine has a cgroup v2 hierarchy (found in /proc/self/mounts) that the
  agent may write: a parent cgroup `raftsched-agent/CLUSTER-DIGEST` below the agent's own, one
  child per attempt named by its fence. The task process joins it between fork and exec, before
  it switches to the task account, so everything it ever starts (`setsid`, double forks
  included) is born in it, and an account other than root cannot move out of it. The attempt's
  end writes `cgroup.kill`, waits for `populated 0` in `cgroup.events`, and removes it.
- `session`, without one: the attempt's end kills the task's session, then scans /proc for
  processes of the task's account whose environment names the attempt (RAFTSCHED_JOB_ID,
  RAFTSCHED_TASK_ID, RAFTSCHED_FENCE) and kills them, for a bounded number of rounds. A process
  that left the session and cleared or rewrote its environment escapes it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftsched import procfs
from raftsched.environment import TASK_FENCE_ENV, TASK_JOB_ID_ENV, TASK_TASK_ID_ENV

AUTO = "auto"
MODE_CGROUP = "cgroup"
MODE_SESSION = "session"
CHOICES = (AUTO, MODE_CGROUP, MODE_SESSION)
"""`--task-containment`: auto takes a cgroup where it can, else the session fallback."""
CGROUP_PARENT = "raftsched-agent"
"""Below the agent's own cgroup: one child per agent (cluster id and data dir digest)."""
MOUNTS_FILE = Path("/proc/self/mounts")
OWN_CGROUP_FILE = Path("/proc/self/cgroup")
AGENT_DIGEST_CHARS = 12
"""Of the attempts dir's path, in the agent's cgroup name: two agents of one cluster id on one
machine (tests, a migration) never share a cgroup, one agent restarted on its data dir does."""
CGROUP_EMPTY_TIMEOUT_MS = 10_000
"""After cgroup.kill, how long the end of an attempt waits for its cgroup to empty (a process
in uninterruptible sleep dies only when it wakes); past it the cgroup is left for the sweep."""
CGROUP_POLL_FIRST_MS = 1
CGROUP_POLL_MAX_MS = 50
"""The wait for an empty cgroup re-reads cgroup.events after 1 ms, doubling up to this."""
SCAN_ROUNDS = 20
"""Session mode: /proc scans at an attempt's end, each killing what it finds, until one finds
nothing (a process that forks faster than it is killed outlasts them)."""
ATTEMPT_MARKERS = (TASK_JOB_ID_ENV, TASK_TASK_ID_ENV, TASK_FENCE_ENV)
"""Environment entries that name an attempt (session mode)."""


class ContainmentError(Exception):
    """`--task-containment cgroup` asked for what this machine cannot give."""


@dataclass(frozen=True, slots=True)
class Containment:
    """How an agent contains its attempts: `parent` is its cgroup (None in session mode);
    `reason` says why this mode, for the start-up log line."""

    mode: str
    parent: Path | None = None
    reason: str = ""

    def for_attempt(self, fence: int) -> dict[str, Any]:
        """The `containment` entry of the attempt's spec.json."""
        if self.parent is None:
            return {"mode": MODE_SESSION}
        return {"mode": MODE_CGROUP, "cgroup": str(self.parent / attempt_name(fence))}

    def attempt_cgroups(self) -> list[tuple[int, Path]]:
        """(fence, cgroup) of every attempt cgroup under the parent now (cgroup mode)."""
        if self.parent is None:
            return []
        try:
            return sorted((int(entry.name), entry) for entry in self.parent.iterdir()
                          if entry.is_dir() and entry.name.isdigit())
        except OSError:
            return []


def attempt_name(fence: int) -> str:
    return f"{fence:020d}"


def session_mode(reason: str) -> Containment:
    return Containment(MODE_SESSION, None, reason)


def choose(requested: str, cluster_id: str, attempts_root: Path) -> Containment:
    """The containment of an agent (`requested`: one of CHOICES); ContainmentError when cgroup
    was asked for and is not to be had."""
    assert requested in CHOICES, requested
    if requested == MODE_SESSION:
        return session_mode("asked for (--task-containment session)")
    parent, why = agent_cgroup(agent_cgroup_name(cluster_id, attempts_root))
    if parent is not None:
        return Containment(MODE_CGROUP, parent, why)
    if requested == MODE_CGROUP:
        raise ContainmentError(f"--task-containment cgroup: {why}")
    return session_mode(why)


def agent_cgroup_name(cluster_id: str, attempts_root: Path) -> str:
    digest = hashlib.sha256(str(attempts_root.resolve()).encode()).hexdigest()
    return f"{cluster_id}-{digest[:AGENT_DIGEST_CHARS]}"


def agent_cgroup_path(name: str) -> tuple[Path | None, str]:
    """Where the parent cgroup named `name` of an agent running in this process's cgroup is
    (made or not), or (None, why there is none)."""
    try:
        mounts, own = MOUNTS_FILE.read_text(), OWN_CGROUP_FILE.read_text()
    except OSError as error:
        return None, f"cannot read the cgroup mounts: {error}"
    mount = cgroup2_mount(mounts)
    if mount is None:
        return None, "no cgroup v2 hierarchy is mounted"
    path = own_cgroup(own)
    if path is None:
        return None, "this process is in no cgroup v2 group"
    return mount / path.lstrip("/") / CGROUP_PARENT / name, ""


def agent_cgroup(name: str) -> tuple[Path | None, str]:
    """The agent's parent cgroup, made if missing, and why; (None, why not) when there is no
    writable cgroup v2 hierarchy with cgroup.kill."""
    parent, why = agent_cgroup_path(name)
    if parent is None:
        return None, why
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return None, f"cannot create {parent}: {error.strerror}"
    if not (parent / "cgroup.kill").exists():
        return None, f"{parent} has no cgroup.kill (Linux 5.14 and later have it)"
    if not os.access(parent / "cgroup.procs", os.W_OK):
        return None, f"{parent}/cgroup.procs is not writable by this user"
    return parent, f"one cgroup per attempt under {parent}"


def cgroup2_mount(mounts: str) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted, from the text of /proc/self/mounts."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(_unescape(fields[1]))
    return None


def own_cgroup(text: str) -> str | None:
    """This process's cgroup v2 path ("0::/PATH" in /proc/self/cgroup)."""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


def _unescape(field: str) -> str:
    """A path of /proc/self/mounts, where space, tab, newline and backslash are octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace(f"\\{code}", chr(int(code, 8)))
    return field


# --- one attempt ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptContainment:
    """An attempt's containment as its spec.json says (an older spec without one: session)."""

    cgroup: Path | None
    markers: tuple[bytes, ...]
    """NAME=VALUE environment entries naming the attempt (session mode)."""
    uid: int
    """The task's account."""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> AttemptContainment:
        found = spec.get("containment") or {}
        cgroup = found.get("cgroup") if found.get("mode") == MODE_CGROUP else None
        env = spec.get("env") or {}
        markers = tuple(f"{name}={env[name]}".encode() for name in ATTEMPT_MARKERS
                        if name in env)
        user = spec.get("user")
        return cls(None if cgroup is None else Path(cgroup), markers,
                   os.geteuid() if not user else int(user[0]))

    def prepare(self) -> None:
        """Makes the attempt's cgroup (OSError if it cannot), and the agent's parent cgroup if
        a stopping agent removed it meanwhile (it does when no attempt cgroup is left)."""
        if self.cgroup is not None:
            self.cgroup.mkdir(parents=True, exist_ok=True)

    def enter(self) -> None:
        """In the task's process between fork and exec, before it leaves root: join the
        attempt's cgroup (OSError if it cannot)."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def terminate(self, task_pid: int, number: signal.Signals) -> None:
        """`number` to the task's process group and, in cgroup mode, to every process of the
        attempt (whatever left the group gets the grace period too)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task_pid, number)
        if self.cgroup is not None:
            for pid in members(self.cgroup):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, number)

    def end(self, task_pid: int | None, task_start_ticks: int | None = None) -> bool:
        """Kills every process of the attempt; True when none is left. `task_pid`: the task's
        first process (its session's id), None if it never started; its start ticks, when
        known, tell a reused pid from it (then its session is known to be empty)."""
        if self.cgroup is not None:
            return kill_cgroup(self.cgroup)
        session = task_pid
        if task_pid is not None and task_start_ticks is not None:
            found = procfs.start_ticks(task_pid)
            if found is not None and found != task_start_ticks:
                session = None  # the pid is another process's: its old session has no members
        return kill_leftovers(session, self.markers, self.uid)


def members(cgroup: Path) -> list[int]:
    try:
        return [int(line) for line in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(cgroup: Path, timeout_ms: int = CGROUP_EMPTY_TIMEOUT_MS) -> bool:
    """SIGKILL to every process in `cgroup`, a wait until it is empty, then its removal; True
    when it is gone (or never was)."""
    try:
        (cgroup / "cgroup.kill").write_text("1")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    deadline_s = time.monotonic() + timeout_ms / 1000
    pause_s = CGROUP_POLL_FIRST_MS / 1000
    while True:
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() >= deadline_s:
                return False
        time.sleep(pause_s)  # cgroup.kill is asynchronous: the processes are dying
        pause_s = min(pause_s * 2, CGROUP_POLL_MAX_MS / 1000)


def kill_leftovers(session: int | None, markers: tuple[bytes, ...], uid: int) -> bool:
    """Session mode: SIGKILL to every process in `session` and every process of `uid` whose
    environment holds all of `markers`, scanning /proc again until a scan finds none (at most
    SCAN_ROUNDS); True when the last scan found none."""
    for _ in range(SCAN_ROUNDS):
        found = [pid for pid in procfs.pids() if _belongs(pid, session, markers, uid)]
        if not found:
            return True
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return False


def _belongs(pid: int, session: int | None, markers: tuple[bytes, ...], uid: int) -> bool:
    if pid == os.getpid():
        return False
    stat = procfs.process_stat(pid)
    if stat is None or stat.state in procfs.GONE_STATES:
        return False
    if session is not None and stat.session == session:
        return True
    if len(markers) < len(ATTEMPT_MARKERS) or procfs.owner_uid(pid) != uid:
        return False
    environ = procfs.read_environ(pid)
    return environ is not None and set(markers) <= set(environ)
