"""raftsched.dev.supervisor with real short-lived children (`python -c ...`): start, identity
across a save and a load (also in another process), refusing a reused pid, stop with SIGKILL
escalation, pause/resume, kill, the log. Every child is reaped at the end, pass or fail."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftsched import procfs
from raftsched.dev import supervisor as sv
from raftsched.errors import Code
from tests.support.waiting import wait_until

WAIT_TIMEOUT_S = 10.0
"""Bound on every wait for a child to reach a state; far more than any of them needs."""
POLL_S = 0.01
SHORT_TERM_TIMEOUT_S = 0.3
"""What a test gives a child to obey SIGTERM before SIGKILL, when it knows the child will not."""
ONE_MINUTE = "import time; time.sleep(60)"
IGNORE_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('ready', flush=True); time.sleep(60)")
ORPHAN_A_GRANDCHILD = (
    "import subprocess, sys; "
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print('grandchild', grandchild.pid, flush=True)")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def supervisor() -> Iterator[sv.Supervisor]:
    with sv.Supervisor() as children:
        yield children


def state_of(pid: int) -> str:
    stat = procfs.process_stat(pid)
    return "gone" if stat is None else stat.state


def ready(child: sv.Child) -> sv.Child:
    assert child.wait_for_line(("ready",), WAIT_TIMEOUT_S) == "ready", child.log_tail()
    return child


# --- start, wait, the log -------------------------------------------------------------------------


def test_a_started_child_runs_in_its_own_group_and_writes_to_its_log(
        supervisor: sv.Supervisor, tmp_path: Path) -> None:
    child = supervisor.start("hello", python("print('hello'); raise SystemExit(3)"),
                             tmp_path / "logs" / "hello.log", env={"PATH": "/usr/bin"},
                             cwd=tmp_path, note="first try")
    identity = child.identity
    assert identity is not None and identity.pid == child.pid
    assert identity.start_time_ticks == procfs.start_ticks(child.pid)
    assert child.wait(WAIT_TIMEOUT_S) == 3
    assert not child.alive() and child.poll() == 3
    assert child.output_since_start() == "hello\n"
    header, output = (tmp_path / "logs" / "hello.log").read_text().splitlines()
    assert header.startswith("--- ") and "start #1 of hello (first try): " in header
    assert output == "hello"
    assert not identity.is_running()


def test_a_child_runs_in_a_session_of_its_own(supervisor: sv.Supervisor, tmp_path: Path) -> None:
    child = supervisor.start("group", python("import os; print(os.getsid(0), os.getpgid(0))"),
                             tmp_path / "group.log")
    assert child.wait(WAIT_TIMEOUT_S) == 0
    assert child.output_since_start().split() == [str(child.pid), str(child.pid)]


def test_wait_returns_none_while_the_child_runs_on(supervisor: sv.Supervisor,
                                                   tmp_path: Path) -> None:
    child = supervisor.start("sleeper", python(ONE_MINUTE), tmp_path / "sleeper.log")
    assert child.wait(0.1) is None and child.alive()
    assert child.kill() == -signal.SIGKILL
    assert child.kill() == -signal.SIGKILL  # again: nothing more to do


def test_a_child_starts_again_once_it_exited_and_not_before(supervisor: sv.Supervisor,
                                                            tmp_path: Path) -> None:
    child = supervisor.add("again", python(ONE_MINUTE), tmp_path / "again.log")
    assert child.identity is None and not child.alive() and child.kill() is None
    first = child.start()
    with pytest.raises(AssertionError, match="again is running"):
        child.start()
    child.kill()
    second = child.start()
    assert second != first and child.starts == 2 and child.alive()
    headers = [line for line in (tmp_path / "again.log").read_text().splitlines()
               if line.startswith("--- ")]
    assert ["start #1 of again" in headers[0], "start #2 of again" in headers[1]] == [True, True]


def test_wait_for_line_sees_a_line_written_just_before_the_exit(
        supervisor: sv.Supervisor, tmp_path: Path) -> None:
    child = supervisor.start("said", python("print('noise'); print('error BAD no', flush=True); "
                                            "raise SystemExit(2)"), tmp_path / "said.log")
    assert child.wait_for_line(("ready ", "error "), WAIT_TIMEOUT_S) == "error BAD no"
    assert child.wait(WAIT_TIMEOUT_S) == 2
    silent = supervisor.start("silent", python("pass"), tmp_path / "silent.log")
    assert silent.wait_for_line(("ready ",), WAIT_TIMEOUT_S) is None  # exited without it
    assert silent.poll() == 0


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    assert sv.log_tail(log, 3) == ["line 97", "line 98", "line 99"]
    assert sv.log_tail(tmp_path / "missing.log") == []
    child = sv.Child("x", python("pass"), log)
    assert child.log_tail(1) == ["line 99"]


# --- identity ------------------------------------------------------------------------------------


def test_identity_survives_a_save_and_a_load_also_in_another_process(
        supervisor: sv.Supervisor, tmp_path: Path) -> None:
    child = supervisor.start("kept", python(ONE_MINUTE), tmp_path / "kept.log")
    saved = tmp_path / "identity.json"
    saved.write_text(json.dumps(child.recorded().identity.to_doc()))
    loaded = sv.Identity.from_doc(json.loads(saved.read_text()))
    assert loaded == child.identity and loaded.is_running()
    # A later program (as `dev down` is) stops it from the saved identity alone.
    code = ("import json, sys; from raftsched.dev import supervisor as sv; "
            "identity = sv.Identity.from_doc(json.load(open(sys.argv[1]))); "
            "print(sv.stop_all([sv.Recorded('kept', identity)])[0].outcome)")
    done = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True,
                          text=True, timeout=WAIT_TIMEOUT_S * 2, check=False)
    assert (done.returncode, done.stdout) == (0, "stopped\n"), done.stderr
    assert child.wait(WAIT_TIMEOUT_S) == -signal.SIGTERM
    assert not loaded.is_running()


@pytest.mark.parametrize("doc", [[], {"pid": 1}, {"pid": "1", "start_time_ticks": 2},
                                 {"pid": 1, "start_time_ticks": True}])
def test_a_damaged_identity_is_refused_by_name(doc: object) -> None:
    with pytest.raises(ValueError, match=r"integer|object"):
        sv.Identity.from_doc(doc)


def test_a_pid_whose_start_time_differs_is_never_signalled(supervisor: sv.Supervisor,
                                                           tmp_path: Path) -> None:
    child = supervisor.start("victim", python(ONE_MINUTE), tmp_path / "victim.log")
    identity = child.identity
    assert identity is not None
    impostor = sv.Recorded("impostor", identity._replace(
        start_time_ticks=identity.start_time_ticks - 1))
    assert not impostor.alive()
    assert not impostor.signal(signal.SIGKILL)
    assert sv.stop_all([impostor], term_timeout_s=SHORT_TERM_TIMEOUT_S, kill_timeout_s=0.1) == [
        sv.StopResult("impostor", child.pid, sv.StopOutcome.NOT_RUNNING)]
    assert child.alive() and identity.is_running()


# --- stop, kill, pause ---------------------------------------------------------------------------


def test_stop_escalates_to_sigkill_for_a_child_that_ignores_sigterm(
        supervisor: sv.Supervisor, tmp_path: Path) -> None:
    polite = supervisor.start("polite", python(ONE_MINUTE), tmp_path / "polite.log")
    stubborn = ready(supervisor.start("stubborn", python(IGNORE_TERM), tmp_path / "stub.log"))
    started_s = time.monotonic()
    results = sv.stop_all([polite, stubborn], term_timeout_s=SHORT_TERM_TIMEOUT_S)
    assert [(r.name, r.pid, r.outcome) for r in results] == [
        ("polite", polite.pid, sv.StopOutcome.STOPPED),
        ("stubborn", stubborn.pid, sv.StopOutcome.KILLED)]
    assert time.monotonic() - started_s < sv.KILL_TIMEOUT_S  # not the default term timeout
    assert (polite.poll(), stubborn.poll()) == (-signal.SIGTERM, -signal.SIGKILL)
    again = sv.stop_all([polite, stubborn.recorded()])
    assert [r.outcome for r in again] == [sv.StopOutcome.NOT_RUNNING] * 2


def test_stop_of_a_recorded_process_escalates_too(supervisor: sv.Supervisor,
                                                  tmp_path: Path) -> None:
    child = ready(supervisor.start("stubborn", python(IGNORE_TERM), tmp_path / "stub.log"))
    result = sv.stop_all([child.recorded()], term_timeout_s=SHORT_TERM_TIMEOUT_S)
    assert result[0].outcome is sv.StopOutcome.KILLED
    assert child.poll() == -signal.SIGKILL


def test_pause_and_resume_the_whole_group(supervisor: sv.Supervisor, tmp_path: Path) -> None:
    child = supervisor.start("napper", python(ORPHAN_A_GRANDCHILD + "; import time; "
                                              "time.sleep(60)"), tmp_path / "napper.log")
    grandchild = grandchild_of(child)
    try:
        assert child.pause() and child.paused
        wait_until(lambda: {state_of(child.pid), state_of(grandchild.pid)} == {"T"}, "both stopped")
        assert child.alive()  # paused is not exited
        assert child.resume() and not child.paused
        wait_until(lambda: "T" not in {state_of(child.pid), state_of(grandchild.pid)},
                   "both running")
        assert child.pause()
        result = child.stop(term_timeout_s=WAIT_TIMEOUT_S)  # a paused child still stops
        assert result.outcome is sv.StopOutcome.STOPPED and not child.paused
        wait_until(lambda: not grandchild.is_running(), "the grandchild gone")
    finally:
        sv.signal_identity(grandchild, signal.SIGKILL)


def test_kill_reaches_a_paused_child(supervisor: sv.Supervisor, tmp_path: Path) -> None:
    child = supervisor.start("frozen", python(ONE_MINUTE), tmp_path / "frozen.log")
    assert child.pause()
    assert child.kill() == -signal.SIGKILL and not child.paused
    assert not child.signal(signal.SIGCONT) and not child.resume()


def test_what_is_left_of_a_group_dies_with_its_leader(supervisor: sv.Supervisor,
                                                      tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    # The parent waits for the gate before it exits: exiting at once, it could be reaped (and
    # its group killed) before the grandchild was even looked at.
    child = supervisor.start("parent", python(
        ORPHAN_A_GRANDCHILD + "; import os, time; "
        f"[time.sleep(0.01) for _ in iter(lambda: os.path.exists({str(gate)!r}), True)]"),
        tmp_path / "parent.log")
    grandchild = grandchild_of(child)
    try:
        assert grandchild.is_running()
        gate.touch()
        assert child.wait(WAIT_TIMEOUT_S) == 0  # reaping the leader kills the rest of its group
        wait_until(lambda: not grandchild.is_running(), "the orphan gone")
    finally:
        sv.signal_identity(grandchild, signal.SIGKILL)


def grandchild_of(child: sv.Child) -> sv.Identity:
    line = child.wait_for_line(("grandchild ",), WAIT_TIMEOUT_S)
    assert line is not None, child.log_tail()
    pid = int(line.split()[1])
    start_ticks = procfs.start_ticks(pid)
    assert start_ticks is not None
    return sv.Identity(pid, start_ticks)


# --- the supervisor ------------------------------------------------------------------------------


def test_leaving_the_with_block_on_an_error_kills_and_reaps_every_child(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), sv.Supervisor() as supervisor:
        first = supervisor.start("one", python(ONE_MINUTE), tmp_path / "one.log")
        second = supervisor.start("two", python(ONE_MINUTE), tmp_path / "two.log")
        second.pause()
        raise RuntimeError("boom")
    assert (first.poll(), second.poll()) == (-signal.SIGKILL, -signal.SIGKILL)
    assert first.identity is not None and not first.identity.is_running()


def test_stop_all_of_a_supervisor(supervisor: sv.Supervisor, tmp_path: Path) -> None:
    supervisor.start("a", python(ONE_MINUTE), tmp_path / "a.log")
    supervisor.add("never", python(ONE_MINUTE), tmp_path / "never.log")
    results = supervisor.stop_all()
    assert [(r.name, r.outcome) for r in results] == [("a", sv.StopOutcome.STOPPED),
                                                      ("never", sv.StopOutcome.NOT_RUNNING)]


def test_a_supervisor_has_a_bound(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sv, "MAX_CHILDREN", 1)
    supervisor = sv.Supervisor()
    supervisor.add("one", python("pass"), tmp_path / "one.log")
    with pytest.raises(sv.SupervisorError) as caught:
        supervisor.add("two", python("pass"), tmp_path / "two.log")
    assert caught.value.code is Code.RESOURCE_EXHAUSTED
