"""raftsched.procfs: process identity (pid + start time) from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from raftsched import procfs

PID_ABOVE_MAX = 2**22 + 1
"""Above the kernel's largest pid_max: no process has it."""
EXIT_TIMEOUT_S = 10.0
POLL_S = 0.01


def stat_line(state: str, start_ticks: int, command: str = "sh") -> str:
    """A /proc/PID/stat line with `state` (field 3) and `start_ticks` (field 22)."""
    middle = " ".join(["0"] * (procfs.STARTTIME_FIELD - 4))
    return f"77 ({command}) {state} {middle} {start_ticks} 0 0 0\n"


def test_parse_stat_survives_odd_command_names() -> None:
    assert procfs.parse_stat(stat_line("S", 22, "a) (b c")) == ("S", 22, 0, "a) (b c", 0)


def test_this_process_is_listed_with_its_parent_name_and_environment() -> None:
    stat = procfs.process_stat(os.getpid())
    assert stat is not None and stat.ppid == os.getppid() and stat.comm
    assert stat.session == os.getsid(0)
    assert procfs.owner_uid(os.getpid()) == os.geteuid()
    assert procfs.owner_uid(PID_ABOVE_MAX) is None
    assert os.getpid() in procfs.pids()
    environ = procfs.read_environ(os.getpid())
    assert environ is not None and any(entry.startswith(b"PATH=") for entry in environ)
    assert procfs.read_environ(PID_ABOVE_MAX) is None


def test_start_ticks_and_liveness_of_this_process() -> None:
    own = procfs.start_ticks(os.getpid())
    assert own is not None and own > 0
    assert procfs.is_alive(os.getpid(), own)
    assert procfs.is_alive(os.getpid(), None)
    assert not procfs.is_alive(os.getpid(), own + 1)  # the pid was "reused"
    assert procfs.available()


def test_no_such_process() -> None:
    for pid in (0, -1, PID_ABOVE_MAX):
        assert procfs.start_ticks(pid) is None
        assert not procfs.is_alive(pid, None)


def test_a_zombie_keeps_its_start_time_but_is_not_alive() -> None:
    zombie = stat_line("Z", 999)
    assert procfs.start_ticks(77, read=lambda pid: zombie) == 999
    assert not procfs.is_alive(77, 999, read=lambda pid: zombie)
    assert procfs.is_alive(77, 999, read=lambda pid: stat_line("S", 999))


def test_a_real_zombie() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        ticks = procfs.start_ticks(child.pid)
        assert ticks is not None
        wait_exited_unreaped(child.pid)
        assert procfs.start_ticks(child.pid) == ticks
        assert not procfs.is_alive(child.pid, ticks)
    finally:
        child.kill()
        child.wait(timeout=10)


def wait_exited_unreaped(pid: int) -> None:
    deadline_s = time.monotonic() + EXIT_TIMEOUT_S
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline_s, f"pid {pid} did not exit in {EXIT_TIMEOUT_S} s"
        time.sleep(POLL_S)
