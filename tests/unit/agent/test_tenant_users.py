"""Per-tenant task users: SubprocessExecutor(tenant_users=...) runs each tenant's tasks as its
own account (work dir, HOME/USER/LOGNAME, checkpoint dir, spec.json "user"); a tenant not listed
runs as the agent's task user; an adopted attempt keeps the account it started with; a
checkpoint another account wrote is discarded. `agent.main.shared_task_users` names the accounts
several tenants share. Switching users needs root (as CI runs); those tests skip loudly
otherwise."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import runner
from agent.executors import Launch, SubprocessExecutor, TaskUser
from agent.files import read_json
from agent.main import UNLISTED_TENANTS, shared_task_users
from agent.model import AttemptRecord, AttemptState, Completion, Resources
from tests.support.agent import assignment, kill_attempt_processes, spare_accounts
from tests.support.waiting import wait_until

GRACE_MS = 300
COMPLETION_TIMEOUT_S = 20.0
ALPHA = TaskUser("alpha-account", 60_001, 60_001)
BETA = TaskUser("beta-account", 60_002, 60_002)
DEFAULT = TaskUser("nobody", 65_534, 65_534)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="SKIPPED LOUDLY: running tasks as other users needs root (CI "
                              "runs as root)")


@pytest.fixture
def root() -> Iterator[Path]:
    """An attempts dir under a 0711 directory (pytest's tmp_path lies below a 0700 one, which
    the task users could not pass through to their HOME and checkpoint paths)."""
    with tempfile.TemporaryDirectory(prefix="raftsched-tenants-") as name:
        top = Path(name)
        top.chmod(0o711)
        attempts = top / "agent" / "attempts"
        try:
            yield attempts
        finally:
            kill_attempt_processes(attempts)


@pytest.fixture
def accounts() -> tuple[TaskUser, TaskUser]:
    """Two real unprivileged accounts of their own uids."""
    names = spare_accounts(2)
    if len(names) < 2:
        pytest.skip(f"SKIPPED LOUDLY: needs two of the base accounts, found only {names}")
    first, second = (TaskUser.resolve(name) for name in names)
    return first, second


def _complete(executor: SubprocessExecutor, fence: int) -> Completion:
    found: list[Completion] = []

    def done() -> bool:
        found.extend(executor.poll())
        return any(c.fence == fence for c in found)

    wait_until(done, f"completion of fence {fence}", COMPLETION_TIMEOUT_S)
    return next(c for c in found if c.fence == fence)


def _stdout(root: Path, fence: int) -> list[str]:
    return (root / f"{fence:020d}" / runner.STDOUT_FILE).read_text().splitlines()


def _sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


def test_a_task_runs_as_its_tenants_account_else_as_the_task_user(root: Path) -> None:
    executor = SubprocessExecutor(root, task_user=DEFAULT,
                                  tenant_users={"alpha": ALPHA, "beta": BETA})
    try:
        assert executor.user_of(assignment(1, tenant="alpha")) == ALPHA
        assert executor.user_of(assignment(2, tenant="beta")) == BETA
        assert executor.user_of(assignment(3, tenant="gamma")) == DEFAULT
        assert executor.user_of(assignment(4)) == DEFAULT  # from an older leader: no tenant
    finally:
        executor.close()
    alone = SubprocessExecutor(root, tenant_users={"alpha": ALPHA})
    try:
        assert alone.user_of(assignment(5, tenant="alpha")) == ALPHA
        assert alone.user_of(assignment(6, tenant="beta")) is None  # the agent's own
    finally:
        alone.close()
    assert root.stat().st_mode & 0o777 == 0o711  # the mapped users pass through to work/


@pytest.mark.parametrize(("task_user", "tenant_users", "shared"), [
    (DEFAULT, {"alpha": ALPHA, "beta": BETA}, []),
    (DEFAULT, {"alpha": ALPHA, "beta": ALPHA}, [("alpha-account", ["alpha", "beta"])]),
    (DEFAULT, {"alpha": ALPHA, "beta": DEFAULT}, [("nobody", [UNLISTED_TENANTS, "beta"])]),
    (None, {"alpha": ALPHA}, []),
    (DEFAULT, {"alpha": ALPHA, "b": TaskUser("other-name", ALPHA.uid, 7)},
     [("alpha-account", ["alpha", "b"])]),
])
def test_accounts_several_tenants_share_are_named(
        task_user: TaskUser | None, tenant_users: dict[str, TaskUser],
        shared: list[tuple[str, list[str]]]) -> None:
    found = shared_task_users(task_user, tenant_users)
    assert [(user.name, tenants) for user, tenants in found] == shared


PROBES = {
    "list the other tenant's work dir": 'ls "$OTHER_WORK"',
    "read the other tenant's file": 'cat "$OTHER_WORK/secret"',
    "write into the other tenant's work dir": 'touch "$OTHER_WORK/planted"',
    "list the other tenant's checkpoint": 'ls "$OTHER_CHECKPOINT"',
    "signal the other tenant's task": 'kill -0 "$OTHER_PID"',
}
"""What beta's task tries against alpha's, running at the same time: each must fail."""


@needs_root
def test_tenants_running_at_once_cannot_reach_each_others_work(
        root: Path, accounts: tuple[TaskUser, TaskUser]) -> None:
    alpha, beta = accounts
    gate = root.parent.parent / "gate"
    executor = SubprocessExecutor(root, kill_grace_ms=GRACE_MS, task_user=DEFAULT,
                                  tenant_users={"alpha": alpha, "beta": beta})
    try:
        executor.start(assignment(1, tenant="alpha", checkpoint=True, command=_sh(
            f'echo private > secret; echo kept > "$RAFTSCHED_CHECKPOINT_DIR/state"; '
            f'while [ ! -e {gate} ]; do sleep 0.02; done; id -u; echo "$HOME $USER $LOGNAME"')))
        work = root / f"{1:020d}" / "work"
        task_file = root / f"{1:020d}" / runner.TASK_FILE
        wait_until(lambda: (work / "secret").exists() and task_file.exists(),
                   "alpha's task to write its secret")
        task = read_json(task_file)
        assert task is not None
        script = "\n".join(f'if {command} >/dev/null 2>&1; then echo "ALLOWED {name}"; '
                           f'else echo "DENIED {name}"; fi' for name, command in PROBES.items())
        executor.start(assignment(2, tenant="beta", job_id="other", command=_sh(
            f"{script}\nid -u"), env={
                "OTHER_WORK": str(work), "OTHER_PID": str(task["pid"]),
                "OTHER_CHECKPOINT": str(executor.checkpoint_dir("job", "t"))}))
        assert _complete(executor, 2).exit_code == 0
        probed = _stdout(root, 2)
        assert [line for line in probed if line.startswith("ALLOWED")] == [], probed
        assert len([line for line in probed if line.startswith("DENIED")]) == len(PROBES)
        assert probed[-1] == str(beta.uid)
        gate.touch()
        assert _complete(executor, 1).exit_code == 0
    finally:
        executor.close()
    assert _stdout(root, 1) == [str(alpha.uid), f"{work} {alpha.name} {alpha.name}"]
    assert (work.stat().st_uid, (root / f"{2:020d}" / "work").stat().st_uid) == (
        alpha.uid, beta.uid)
    assert not (work / "planted").exists()
    spec = read_json(root / f"{2:020d}" / runner.SPEC_FILE)
    assert spec is not None and spec["user"] == [beta.uid, beta.gid]
    assert not executor.checkpoint_dir("job", "t").exists()  # alpha's task succeeded


@needs_root
def test_an_unlisted_tenant_runs_as_the_task_user(
        root: Path, accounts: tuple[TaskUser, TaskUser]) -> None:
    alpha, _ = accounts
    nobody = TaskUser.resolve("nobody")
    executor = SubprocessExecutor(root, task_user=nobody, tenant_users={"alpha": alpha})
    try:
        executor.start(assignment(1, tenant="gamma", command=("id", "-u")))
        assert _complete(executor, 1).exit_code == 0
    finally:
        executor.close()
    assert _stdout(root, 1) == [str(nobody.uid)]


@needs_root
def test_a_checkpoint_follows_the_tenants_account_and_another_accounts_is_discarded(
        root: Path, accounts: tuple[TaskUser, TaskUser]) -> None:
    alpha, beta = accounts
    step = ('cat "$RAFTSCHED_CHECKPOINT_DIR/step" 2>/dev/null || echo fresh; '
            'echo "$RAFTSCHED_FENCE" > "$RAFTSCHED_CHECKPOINT_DIR/step"; exit 3')
    first = SubprocessExecutor(root, task_user=DEFAULT, tenant_users={"alpha": alpha})
    try:
        for fence in (1, 2):
            first.start(assignment(fence, tenant="alpha", checkpoint=True, attempt=fence,
                                   command=_sh(step)))
            assert _complete(first, fence).exit_code == 3
        directory = first.checkpoint_dir("job", "t")
        assert directory.stat().st_uid == alpha.uid
    finally:
        first.close()
    assert (_stdout(root, 1), _stdout(root, 2)) == (["fresh"], ["1"])
    # The operator gives tenant alpha another account: what the old one wrote is not handed on.
    second = SubprocessExecutor(root, task_user=DEFAULT, tenant_users={"alpha": beta})
    try:
        second.start(assignment(3, tenant="alpha", checkpoint=True, attempt=3,
                                command=_sh(step)))
        assert _complete(second, 3).exit_code == 3
    finally:
        second.close()
    assert _stdout(root, 3) == ["fresh"]
    assert (directory / "step").read_text() == "3\n"  # its own now, and it could write it
    assert directory.stat().st_uid == beta.uid and directory.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in directory.parent.iterdir()] == [directory.name]  # nothing left


def _record(fence: int, launch: Launch) -> AttemptRecord:
    return AttemptRecord(fence, "job", "t", 1, AttemptState.RUNNING, Resources(),
                         launch.attempt_dir, time.time_ns() // 1_000_000, launch.wrapper_pid,
                         launch.wrapper_start_ticks)


@needs_root
def test_an_adopted_attempt_keeps_the_account_it_started_with(
        root: Path, accounts: tuple[TaskUser, TaskUser]) -> None:
    """The wrapper reads the account from spec.json: an agent restarted with another mapping
    (here none) neither changes nor needs it."""
    alpha, _ = accounts
    gate = root.parent.parent / "gate"
    first = SubprocessExecutor(root, kill_grace_ms=GRACE_MS, tenant_users={"alpha": alpha})
    launch = first.start(assignment(7, tenant="alpha", command=_sh(
        f"while [ ! -e {gate} ]; do sleep 0.02; done; id -u")))
    first.close()
    second = SubprocessExecutor(root, kill_grace_ms=GRACE_MS)
    try:
        assert second.adopt(_record(7, launch))
        gate.touch()
        assert _complete(second, 7).exit_code == 0
    finally:
        second.close()
    assert _stdout(root, 7) == [str(alpha.uid)]
