"""Executors. SubprocessExecutor with real processes (exit codes, env, cwd, timeout, kill,
capped output, atomic result, re-adoption by a new executor); MockExecutor's argv language."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import containment, runner
from agent.executors import (
    VANISHED_EXIT_CODE,
    Launch,
    MockExecutor,
    SubprocessExecutor,
    TaskUser,
    mock_plan,
)
from agent.files import read_json, write_json_atomic
from agent.model import AttemptRecord, AttemptState, Completion, Resources
from raftsched.procfs import is_alive, start_ticks
from tests.support.agent import assignment, kill_attempt_processes
from tests.support.waiting import wait_until

CAP_BYTES = 1_000
GRACE_MS = 300


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    attempts = tmp_path / "attempts"
    try:
        yield attempts
    finally:
        kill_attempt_processes(attempts)


@pytest.fixture
def executor(root: Path) -> Iterator[SubprocessExecutor]:
    subject = SubprocessExecutor(root, max_output_bytes=CAP_BYTES, kill_grace_ms=GRACE_MS)
    try:
        yield subject
    finally:
        subject.close()


def _complete(executor: SubprocessExecutor | MockExecutor, fence: int,
              timeout_s: float = 10.0) -> Completion:
    found: list[Completion] = []

    def done() -> bool:
        found.extend(executor.poll())
        return any(c.fence == fence for c in found)

    wait_until(done, f"completion of fence {fence}", timeout_s)
    assert [c.fence for c in found] == [fence], found
    return found[0]


def _run(executor: SubprocessExecutor, fence: int, *command: str, **options: object) -> Completion:
    executor.start(assignment(fence, command=command, **options))  # type: ignore[arg-type]
    return _complete(executor, fence)


def _sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


def test_exit_codes_are_reported(executor: SubprocessExecutor) -> None:
    assert _run(executor, 1, "true") == Completion(1, 0, False, False, "")
    failed = _run(executor, 2, *_sh("exit 7"))
    assert (failed.exit_code, failed.timed_out, failed.killed) == (7, False, False)
    assert failed.reason == "exit code 7"
    signalled = _run(executor, 3, *_sh("kill -9 $$"))
    assert signalled.exit_code == 128 + 9 and "SIGKILL" in signalled.reason


def test_a_command_that_cannot_start_exits_127(executor: SubprocessExecutor) -> None:
    completion = _run(executor, 1, "/nonexistent/raftsched-test-binary")
    assert completion.exit_code == runner.EXIT_NOT_FOUND
    assert "cannot start" in completion.reason


def test_the_task_gets_the_fence_variables_and_a_filtered_env(
        executor: SubprocessExecutor, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_TEST_SECRET", "do-not-leak")
    item = assignment(41, job_id="etl", task_id="load", attempt=3, command=("env",),
                      env={"STAGE": "prod"})
    executor.start(item)
    assert _complete(executor, 41).exit_code == 0
    lines = (root / f"{41:020d}" / "stdout").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert env["RAFTSCHED_JOB_ID"] == "etl"
    assert env["RAFTSCHED_TASK_ID"] == "load"
    assert env["RAFTSCHED_ATTEMPT"] == "3"
    assert env["RAFTSCHED_FENCE"] == "41"
    assert env["RAFTSCHED_IDEMPOTENCY_KEY"] == "etl/load/3"
    assert env["STAGE"] == "prod"
    assert env["PATH"] == os.environ["PATH"]
    assert "AGENT_TEST_SECRET" not in env


def test_a_task_reads_its_inputs_and_its_outputs_reach_the_completion(
        executor: SubprocessExecutor) -> None:
    # the task turns its inputs into its outputs: what a map step downstream of `ls` does
    script = ("import json, os; up = json.load(open(os.environ['RAFTSCHED_INPUTS'])); "
              "json.dump({'n': len(up['ls']['files'])}, open(os.environ['RAFTSCHED_OUTPUT'], 'w'))")
    done = _run(executor, 1, sys.executable, "-c", script,
                inputs='{"ls":{"files":["a","b","c"]}}')
    assert (done.exit_code, done.outputs, done.outputs_refused) == (0, '{"n":3}', False)
    silent = _run(executor, 2, "true")
    assert (silent.outputs, silent.outputs_refused) == ("", False)
    bad = _run(executor, 3, *_sh('echo "count=3" > "$RAFTSCHED_OUTPUT"'))
    assert bad.exit_code == 0 and bad.outputs_refused and "is not JSON" in bad.reason
    failed = _run(executor, 4, *_sh('echo "{}" > "$RAFTSCHED_OUTPUT"; exit 3'))
    assert (failed.exit_code, failed.outputs, failed.outputs_refused) == (3, "", False)


def test_cwd_is_the_assignments_or_else_the_attempts_work_dir(executor: SubprocessExecutor,
                                                              root: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    assert _run(executor, 1, "pwd", cwd=str(workdir)).exit_code == 0
    assert _run(executor, 2, "pwd").exit_code == 0
    assert (root / f"{1:020d}" / "stdout").read_text().strip() == str(workdir)
    assert (root / f"{2:020d}" / "stdout").read_text().strip() == str(root / f"{2:020d}" / "work")


def test_timeout_terminates_the_task(executor: SubprocessExecutor) -> None:
    started = time.monotonic()
    completion = _run(executor, 1, "sleep", "30", timeout_ms=200)
    assert (completion.exit_code, completion.timed_out, completion.killed) == (None, True, False)
    assert "timed out after 200 ms" in completion.reason
    assert time.monotonic() - started < 5


def test_timeout_escalates_to_sigkill_after_the_grace(executor: SubprocessExecutor) -> None:
    completion = _run(executor, 1, *_sh("trap '' TERM; sleep 30"), timeout_ms=200)
    assert completion.timed_out and completion.exit_code is None
    assert "SIGKILL" in completion.reason


def test_kill_stops_the_task_and_says_killed(executor: SubprocessExecutor, root: Path) -> None:
    executor.start(assignment(1, command=_sh("echo up; exec sleep 30")))
    stdout = root / f"{1:020d}" / "stdout"
    wait_until(lambda: (root / f"{1:020d}" / runner.TASK_FILE).exists(), "the task to start")
    assert executor.running() == [1]
    assert executor.kill(1) is True
    completion = _complete(executor, 1)
    assert (completion.exit_code, completion.timed_out, completion.killed) == (None, False, True)
    assert "SIGTERM" in completion.reason
    assert stdout.read_text() == "up\n"
    assert executor.running() == []
    assert executor.kill(1) is False


def test_output_reaches_its_file_while_the_task_still_runs(executor: SubprocessExecutor,
                                                          root: Path) -> None:
    """What `task logs --follow` and the console's live output read: a small output was held in
    the copy's buffer until the task ended."""
    executor.start(assignment(1, command=_sh("echo first-line; exec sleep 30")))
    stdout = root / f"{1:020d}" / "stdout"
    wait_until(lambda: stdout.exists() and stdout.read_bytes() == b"first-line\n",
               "the line in the stdout file while the task sleeps")
    assert executor.running() == [1]
    assert executor.kill(1) is True
    _complete(executor, 1)


def test_a_killed_wrapper_takes_its_task_along_and_is_reported(executor: SubprocessExecutor,
                                                                root: Path) -> None:
    launch = executor.start(assignment(1, command=("sleep", "30")))
    task_file = root / f"{1:020d}" / runner.TASK_FILE
    wait_until(task_file.exists, "the task to start")
    task = read_json(task_file)
    assert task is not None and launch.wrapper_pid is not None
    os.kill(launch.wrapper_pid, signal.SIGKILL)
    # The kernel kills the task (PR_SET_PDEATHSIG) before the executor even looks.
    wait_until(lambda: not is_alive(int(task["pid"]), task["start_ticks"]),
               "the task to die with its wrapper")
    completion = _complete(executor, 1)
    assert completion.exit_code == VANISHED_EXIT_CODE and not completion.killed
    assert "wrapper exited with -9" in completion.reason


def test_output_is_capped_and_the_task_never_blocks(executor: SubprocessExecutor,
                                                   root: Path) -> None:
    script = "import sys; sys.stdout.write('x' * 2_000_000); sys.stderr.write('e' * 5)"
    completion = _run(executor, 1, sys.executable, "-c", script, timeout_ms=20_000)
    assert completion.exit_code == 0 and not completion.timed_out
    directory = root / f"{1:020d}"
    assert (directory / "stdout").read_bytes() == b"x" * CAP_BYTES
    assert (directory / "stderr").read_bytes() == b"eeeee"
    result = read_json(directory / runner.RESULT_FILE)
    assert result is not None
    assert result["stdout_bytes"] == 2_000_000 and result["output_truncated"] is True


def test_result_json_is_whole_and_leaves_no_temporary_files(executor: SubprocessExecutor,
                                                            root: Path) -> None:
    _run(executor, 1, *_sh("exit 3"))
    directory = root / f"{1:020d}"
    assert json.loads((directory / runner.RESULT_FILE).read_text())["exit_code"] == 3
    assert [p.name for p in directory.iterdir() if p.name.endswith(".tmp")] == []


def test_atomic_writes_are_never_seen_torn(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    write_json_atomic(path, {"n": -1, "pad": ""})
    stop = threading.Event()
    torn: list[str] = []

    def read() -> None:
        while not stop.is_set():
            text = path.read_text()
            try:
                json.loads(text)
            except ValueError:
                torn.append(text[:40])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(100):
            write_json_atomic(path, {"n": n, "pad": "p" * 50_000})
    finally:
        stop.set()
        reader.join(10)
    assert torn == []
    assert json.loads(path.read_text())["n"] == 99


def _record(fence: int, launch: Launch, created_ms: int | None = None) -> AttemptRecord:
    return AttemptRecord(fence, "job", "t", 1, AttemptState.RUNNING, Resources(),
                         launch.attempt_dir, created_ms or time.time_ns() // 1_000_000,
                         launch.wrapper_pid, launch.wrapper_start_ticks)


def test_the_wrapper_outlives_its_executor_and_a_new_one_gets_the_result_once(
        root: Path) -> None:
    first = SubprocessExecutor(root, kill_grace_ms=GRACE_MS)
    gate = root.parent / "gate"
    launch = first.start(assignment(7, command=_sh(f"while [ ! -e {gate} ]; do sleep 0.02; "
                                                   "done; echo finished; exit 4")))
    first.close()
    del first  # the "agent" is gone; its wrapper is not
    assert launch.wrapper_pid is not None
    second = SubprocessExecutor(root, kill_grace_ms=GRACE_MS)
    second.adopt(_record(7, launch))
    assert second.poll() == []
    assert second.running() == [7]
    gate.touch()
    completion = _complete(second, 7)
    assert (completion.exit_code, completion.killed) == (4, False)
    assert (Path(launch.attempt_dir) / "stdout").read_text() == "finished\n"
    time.sleep(0.05)
    assert second.poll() == []  # exactly once
    assert second.running() == []


def test_a_new_executor_can_kill_an_adopted_attempt(root: Path) -> None:
    first = SubprocessExecutor(root, kill_grace_ms=GRACE_MS)
    launch = first.start(assignment(8, command=("sleep", "30")))
    first.close()
    second = SubprocessExecutor(root, kill_grace_ms=GRACE_MS)
    second.adopt(_record(8, launch))
    wait_until(lambda: (Path(launch.attempt_dir) / runner.TASK_FILE).exists(), "the task")
    assert second.kill(8) is True
    assert _complete(second, 8).killed is True


def test_a_reused_pid_is_not_taken_for_the_wrapper(root: Path) -> None:
    directory = root / "00000000000000000009"
    directory.mkdir(parents=True)
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    launch = Launch(str(directory), os.getpid(), ticks + 1)  # a live pid, another start time
    executor = SubprocessExecutor(root)
    executor.adopt(_record(9, launch))
    completion = _complete(executor, 9)
    assert (completion.exit_code, completion.reason) == (VANISHED_EXIT_CODE, "wrapper vanished")


def test_a_wrapper_that_may_be_starting_is_waited_for_then_reported(root: Path) -> None:
    directory = root / "00000000000000000010"
    directory.mkdir(parents=True)
    write_json_atomic(directory / runner.SPEC_FILE, {"argv": ["true"]})  # launched, no pid file
    executor = SubprocessExecutor(root, startup_grace_ms=300)
    # Recorded by an agent whose wall clock was two minutes fast: the grace must not stretch.
    future_ms = time.time_ns() // 1_000_000 + 120_000
    assert executor.adopt(_record(10, Launch(str(directory)), created_ms=future_ms)) is True
    assert executor.poll() == []  # within the grace: it may still be starting
    started = time.monotonic()
    completion = _complete(executor, 10)
    assert (completion.exit_code, completion.reason) == (VANISHED_EXIT_CODE,
                                                         "wrapper never started")
    assert time.monotonic() - started < 5  # the 0.3 s grace, not the 120 s skew


def test_an_attempt_recorded_but_never_launched_is_not_adopted(root: Path) -> None:
    executor = SubprocessExecutor(root)
    assert executor.adopt(_record(12, Launch(str(root / "00000000000000000012")))) is False
    assert executor.running() == [] and executor.poll() == []


def test_a_result_written_while_nobody_watched_is_read_on_adoption(root: Path) -> None:
    directory = root / "00000000000000000011"
    directory.mkdir(parents=True)
    write_json_atomic(directory / runner.RESULT_FILE,
                      {"exit_code": 0, "timed_out": False, "killed": False, "reason": ""})
    executor = SubprocessExecutor(root)
    executor.adopt(_record(11, Launch(str(directory), 999_999_999, 1)))
    assert _complete(executor, 11) == Completion(11, 0, False, False, "")


# --- mock ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "attempt", "timeout_ms", "expected"), [
    (("sh", "-c", "anything"), 1, 0, (0, 0, False)),
    (("mock",), 1, 0, (0, 0, False)),
    (("mock", "exit=3"), 1, 0, (0, 3, False)),
    (("mock", "sleep_ms=40", "exit=0"), 1, 0, (40, 0, False)),
    (("mock", "fail_attempts=2", "exit=0"), 2, 0, (0, 1, False)),
    (("mock", "fail_attempts=2", "exit=5"), 3, 0, (0, 5, False)),
    (("mock", "sleep_ms=500"), 1, 100, (100, None, True)),
    (("mock", "bogus=1"), 1, 0, (0, 2, False)),
    (("mock", "exit=x"), 1, 0, (0, 2, False)),
])
def test_mock_plans(command: tuple[str, ...], attempt: int, timeout_ms: int,
                    expected: tuple[int, int | None, bool]) -> None:
    plan = mock_plan(assignment(1, command=command, attempt=attempt, timeout_ms=timeout_ms))
    assert (plan.sleep_ms, plan.exit_code, plan.timed_out) == expected


def test_mock_executor_completes_kills_and_adopts() -> None:
    executor = MockExecutor()
    woken = threading.Event()
    executor.subscribe(woken.set)
    try:
        executor.start(assignment(1, command=("mock", "sleep_ms=30", "exit=3")))
        executor.start(assignment(2, command=("mock", "sleep_ms=60000")))
        assert _complete(executor, 1) == Completion(1, 3, False, False, "exit code 3")
        assert woken.is_set()
        assert executor.running() == [2]
        assert executor.kill(2) is True
        assert _complete(executor, 2).killed is True
        assert executor.kill(2) is False
        unknown = AttemptRecord(3, "job", "t", 1, AttemptState.RUNNING, Resources(), "", 0)
        executor.adopt(unknown)  # a fresh mock cannot know it: reported as vanished
        assert _complete(executor, 3).exit_code == VANISHED_EXIT_CODE
        assert executor.started == [1, 2]
    finally:
        executor.close()


def test_an_assignments_grace_overrides_the_agents(root: Path) -> None:
    """The agent's default grace is a minute; the task's spec asks 300 ms: SIGKILL comes then."""
    executor = SubprocessExecutor(root, kill_grace_ms=60_000)
    try:
        executor.start(assignment(1, command=_sh("trap '' TERM; touch trapped; sleep 30"),
                                  kill_grace_ms=GRACE_MS))
        wait_until((root / f"{1:020d}" / "work" / "trapped").exists, "the task to trap SIGTERM")
        assert executor.kill(1) is True
        completion = _complete(executor, 1, timeout_s=30.0)
        assert completion.killed and "SIGKILL" in completion.reason
        spec = read_json(root / f"{1:020d}" / runner.SPEC_FILE)
        assert spec is not None and spec["kill_grace_ms"] == GRACE_MS
    finally:
        executor.close()


CHECKPOINTED = ('test -f "$RAFTSCHED_CHECKPOINT_DIR/step" && cat "$RAFTSCHED_CHECKPOINT_DIR/step"; '
                'echo "$RAFTSCHED_FENCE" > "$RAFTSCHED_CHECKPOINT_DIR/step"; exit "$STATUS"')


def test_a_checkpoint_dir_persists_across_attempts_until_one_succeeds(
        executor: SubprocessExecutor, root: Path) -> None:
    first = _run(executor, 1, *_sh(CHECKPOINTED), checkpoint=True, env={"STATUS": "3"})
    assert first.exit_code == 3
    assert (root / f"{1:020d}" / "stdout").read_text() == ""
    directory = executor.checkpoint_dir("job", "t")
    assert (directory / "step").read_text() == "1\n"
    assert directory.stat().st_mode & 0o777 == 0o700
    # The next attempt of the same task (a new fence) finds it, succeeds, and it is removed.
    assert _run(executor, 2, *_sh(CHECKPOINTED), checkpoint=True, attempt=2,
                env={"STATUS": "0"}).exit_code == 0
    assert (root / f"{2:020d}" / "stdout").read_text() == "1\n"
    assert not directory.exists()
    # Without `checkpoint` a task gets no directory and no variable.
    assert _run(executor, 3, *_sh('echo "[${RAFTSCHED_CHECKPOINT_DIR-unset}]"')).exit_code == 0
    assert (root / f"{3:020d}" / "stdout").read_text() == "[unset]\n"


def test_checkpoints_of_other_tasks_are_apart_and_stale_ones_are_swept(root: Path) -> None:
    executor = SubprocessExecutor(root)
    try:
        assert _run(executor, 1, *_sh(CHECKPOINTED), checkpoint=True, task_id="a",
                    env={"STATUS": "1"}).exit_code == 1
        assert _run(executor, 2, *_sh(CHECKPOINTED), checkpoint=True, task_id="b",
                    env={"STATUS": "1"}).exit_code == 1
        kept, stale = executor.checkpoint_dir("job", "a"), executor.checkpoint_dir("job", "b")
        assert kept != stale and (kept / "step").read_text() == "1\n"
        assert (stale / "step").read_text() == "2\n"
    finally:
        executor.close()
    long_ago = time.time() - 8 * 24 * 3600
    os.utime(stale, (long_ago, long_ago))
    SubprocessExecutor(root).close()
    assert kept.exists() and not stale.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: the check switches to the "
                    "account in a child process, which needs root (CI runs as root)")
def test_a_task_user_is_told_where_it_cannot_pass() -> None:
    stranger = TaskUser("stranger", 65_000, 65_000)
    # Under /tmp (every ancestor passable), not pytest's tmp_path (below a 0700 dir).
    with tempfile.TemporaryDirectory() as name:
        top = Path(name)
        top.chmod(0o711)
        closed = top / "closed"
        data = closed / "agent" / "data"
        data.mkdir(parents=True)
        closed.chmod(0o700)
        assert stranger.blocked_at(data) == closed
        owner = TaskUser("owner", closed.stat().st_uid, 65_000)
        assert owner.blocked_at(data) is None
        closed.chmod(0o701)
        assert stranger.blocked_at(data) is None
        assert stranger.blocked_at(top / "missing" / "data") == top / "missing"


def _cgroup_or_skip(root: Path) -> containment.Containment:
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: attempt cgroups need root here (CI runs as root)")
    try:
        return containment.choose(containment.MODE_CGROUP, "sweep-test", root)
    except containment.ContainmentError as error:
        pytest.skip(f"SKIPPED LOUDLY: no cgroup containment on this machine: {error}")


def test_an_attempt_cgroup_left_by_a_dead_wrapper_is_swept_at_start(root: Path) -> None:
    """After a crash, an attempt cgroup whose wrapper is gone still holds what its task
    started: a new executor kills it and removes the cgroup; one whose wrapper lives (it will
    end its attempt itself) is left alone."""
    chosen = _cgroup_or_skip(root)
    assert chosen.parent is not None
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for fence, wrapper_ticks in ((1, -1), (2, start_ticks(os.getpid()))):
            attempt = root / f"{fence:020d}"
            attempt.mkdir(parents=True)
            write_json_atomic(attempt / runner.WRAPPER_FILE,
                              {"pid": os.getpid(), "start_ticks": wrapper_ticks})
            cgroup = chosen.parent / containment.attempt_name(fence)
            cgroup.mkdir()
            processes.append(subprocess.Popen(
                ["sleep", "300"], preexec_fn=containment.AttemptContainment(
                    cgroup, (), os.geteuid()).enter))
        SubprocessExecutor(root, containment=chosen).close()
        assert processes[0].wait(timeout=10) == -signal.SIGKILL
        assert not (chosen.parent / containment.attempt_name(1)).exists()
        assert processes[1].poll() is None  # its wrapper (this process) lives
    finally:
        for fence in (1, 2):
            containment.kill_cgroup(chosen.parent / containment.attempt_name(fence))
        for process in processes:
            process.wait(timeout=10)
        chosen.parent.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: a task account other than the "
                    "agent's needs root (CI runs as root)")
def test_a_cwd_is_entered_as_the_task_account_after_the_switch() -> None:
    nobody = TaskUser.resolve("nobody")
    with tempfile.TemporaryDirectory() as name:
        top = Path(name)
        top.chmod(0o711)
        attempts = top / "data" / "attempts"
        executor = SubprocessExecutor(attempts, task_user=nobody)
        try:
            denied = _run(executor, 1, "sh", "-c", "id -u > /dev/null", cwd="/root")
            missing = _run(executor, 2, "true", cwd="/no-such-dir")
            allowed = _run(executor, 3, "sh", "-c", "pwd; id -u", cwd="/tmp")
        finally:
            executor.close()
            kill_attempt_processes(attempts)
        for completion, cwd in ((denied, "/root"), (missing, "/no-such-dir")):
            assert (completion.exit_code, completion.reason) == (
                126, f"cannot start: cannot enter cwd {cwd} as nobody (uid {nobody.uid}): it "
                     "does not exist or that account may not enter it")
        assert allowed.exit_code == 0
        output = (attempts / f"{3:020d}" / runner.STDOUT_FILE).read_text()
        assert output == f"/tmp\n{nobody.uid}\n"
