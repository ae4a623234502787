"""`raftsched agent` (agent.main): argument errors (--tenant-task-users among them, from the
command line and the config file), the data dir, and the agent as a real process over gRPC,
killed with SIGKILL mid-task and restarted."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.agent import Agent
from agent.executors import MockExecutor
from agent.main import add_arguments, main
from agent.model import ReportKind
from raftsched import config as config_file
from tests.support import paths
from tests.support.agent import (
    FakeSession,
    assignment,
    config,
    kill_attempt_processes,
    remove_agent_cgroups,
)
from tests.support.agent_gateway import serve
from tests.support.waiting import wait_until

PROCESS_TIMEOUT_S = 15.0
_PR_SET_CHILD_SUBREAPER = 36


def test_help_explains_every_option() -> None:
    parser = argparse.ArgumentParser(prog="raftsched agent")
    add_arguments(parser)
    text = parser.format_help()
    for option in ("--cluster-id", "--servers", "--capabilities", "--cpu", "--memory-mb",
                   "--gpu", "--data-dir", "--executor", "--metrics-port", "--metrics-address",
                   "--task-user", "--tenant-task-users"):
        assert option in text
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help"


@pytest.mark.parametrize(("argv", "message"), [
    (["--cluster-id", "east", "--data-dir", "d"], "no scheduler addresses"),
    (["--cluster-id", "ea/st", "--servers", "h:1", "--data-dir", "d"], "--cluster-id"),
    (["--cluster-id", "", "--servers", "h:1", "--data-dir", "d"],
     "--cluster-id must use only letters"),  # the replicas' rule for a Register (issue 21)
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--capabilities",
      "linux,gpu\x1b[31m"], "'gpu\\x1b[31m' is not a valid name: it must use only"),
    (["--cluster-id", "east", "--servers", "nohost", "--data-dir", "d"], "is not HOST:PORT"),
    (["--cluster-id", "east", "--servers", "h:1"], "no data dir"),
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--capabilities", "a b"],
     "not a valid name"),
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--metrics-address",
      "9100"], "--metrics-address: not HOST:PORT"),
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--resources", "fpga"],
     "--resources: 'fpga' is not NAME=COUNT"),
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--resources", "fpga=0"],
     "the count must be 1.."),
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--resources",
      "fpga=1,fpga=2"], "'fpga' is named twice"),
    (["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", "--metrics-address",
      "0.0.0.0:99999"], "port 99999 is not between 0 (off) and 65535"),
])
def test_bad_arguments_are_one_clear_error(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAFTSCHED_SERVERS", raising=False)
    monkeypatch.delenv("RAFTSCHED_AGENT_DATA_DIR", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["--cpu", "-1"], "argument --cpu: must be in 0..1e+06, got -1"),
    (["--gpu", "-2"], "argument --gpu: must be in 0..1000000, got -2"),
])
def test_out_of_range_numbers_are_usage_errors(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Bounded number options (raftsched.options) refuse before anything starts: argparse's
    usage line, then the one error naming the option."""
    assert main(["--cluster-id", "east", "--servers", "h:1", "--data-dir", "d", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ") and message in err and "Traceback" not in err


TENANTS_ARGV = ["--cluster-id", "east", "--servers", "127.0.0.1:1", "--insecure-dev"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: checking the accounts "
                                "of --tenant-task-users needs root (CI runs as root)")


@pytest.mark.parametrize(("value", "extra", "message"), [
    ("alpha", (), "--tenant-task-users: 'alpha' is not TENANT=USER"),
    ("=bin", (), "--tenant-task-users: '=bin' is not TENANT=USER"),
    ("alpha=", (), "--tenant-task-users: 'alpha=' is not TENANT=USER"),
    ("al/pha=bin", (), "'al/pha' is not a tenant name"),
    ("alpha=bin, alpha=sys", (), "--tenant-task-users: tenant 'alpha' is named twice"),
    ("alpha=bin", ("--executor", "mock"),
     "--tenant-task-users applies to --executor subprocess only (the mock executor"),
    ("alpha=bin", ("--executor", "slurm", "--slurm-partition", "p"),
     "subprocess only (Slurm runs each job as the account that submits it"),
    pytest.param("alpha=no-such-account-here", (),
                 "--tenant-task-users: alpha=no-such-account-here: no such user on this machine",
                 marks=needs_root),
    pytest.param("alpha=bin,beta=root", (), "--tenant-task-users: beta=root: that is root",
                 marks=needs_root),
    pytest.param("beta=0", (), "--tenant-task-users: beta=0: that is root", marks=needs_root),
])
def test_bad_tenant_task_users_are_one_clear_error(
        value: str, extra: tuple[str, ...], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*TENANTS_ARGV, "--data-dir", str(tmp_path / "data"), *extra]
    assert main([*argv, "--tenant-task-users", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # refused before anything was made


@pytest.mark.parametrize(("executor", "why"), [
    (("--executor", "mock"), "(the mock executor runs no processes)"),
    (("--executor", "slurm", "--slurm-partition", "p"), "(Slurm runs each job as the account"),
])
def test_a_task_user_for_an_executor_that_cannot_switch_is_refused(
        executor: tuple[str, ...], why: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*TENANTS_ARGV, "--data-dir", str(tmp_path / "data"), *executor]
    assert main([*argv, "--task-user", "nobody"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --task-user applies to --executor subprocess only ") \
        and why in err, err
    assert not (tmp_path / "data").exists()


def test_tenant_task_users_need_the_agent_to_run_as_root(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    argv = [*TENANTS_ARGV, "--data-dir", str(tmp_path / "data")]
    assert main([*argv, "--tenant-task-users", "alpha=bin"]) == 2
    assert capsys.readouterr().err == ("error: --tenant-task-users: running tasks as other "
                                       "users needs the agent to run as root\n")


def test_tenant_task_users_come_from_the_config_file_unless_the_flag_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="raftsched agent")
    add_arguments(parser)
    plain = tmp_path / "plain.toml"
    plain.write_text('[agent]\ncluster-id = "east"\n')
    assert config_file.parse_args(parser, ["--config", str(plain)], "agent") \
        .tenant_task_users == ""
    mapped = tmp_path / "agent.toml"
    mapped.write_text('[agent]\ncluster-id = "east"\n'
                      'tenant-task-users = ["alpha=bin", "alpha=sys"]\n')
    parser = argparse.ArgumentParser(prog="raftsched agent")
    add_arguments(parser)
    args = config_file.parse_args(parser, ["--config", str(mapped)], "agent")
    assert args.tenant_task_users == "alpha=bin,alpha=sys"
    parser = argparse.ArgumentParser(prog="raftsched agent")
    add_arguments(parser)
    args = config_file.parse_args(
        parser, ["--config", str(mapped), "--tenant-task-users", "beta=bin"], "agent")
    assert args.tenant_task_users == "beta=bin"
    argv = ["--config", str(mapped), "--servers", "127.0.0.1:1", "--insecure-dev",
            "--data-dir", str(tmp_path / "data")]
    assert main(argv) == 2
    assert "--tenant-task-users: tenant 'alpha' is named twice" in capsys.readouterr().err


def test_an_unusable_data_dir_is_a_clear_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    argv = ["--cluster-id", "east", "--servers", "127.0.0.1:1", "--executor", "mock",
            "--insecure-dev"]
    assert main([*argv, "--data-dir", str(blocker / "sub")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    holder = Agent(config(tmp_path / "busy"), FakeSession(), MockExecutor())
    try:
        assert main([*argv, "--data-dir", str(tmp_path / "busy")]) == 1
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert "in use by another agent" in err and "Traceback" not in err


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Orphans (a wrapper whose agent was SIGKILLed) become our children, so we can reap them."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _agent_process(address: str, data_dir: Path, *extra: str,
                   keep_tasks: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """An agent process, stopped (and its cgroups removed, which kills what runs in them) when
    the block ends — unless `keep_tasks`: its tasks are to outlive it (the caller cleans up)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", "--cluster-id", "east", "--servers", address,
         "--data-dir", str(data_dir), "--cpu", "2", "--memory-mb", "512",
         "--heartbeat-wait-ms", "200", "--insecure-dev",  # the fake gateway is plaintext
         "--task-user", "",  # tasks wait on a file in pytest's root-only tmp dir
         *extra],
        stdout=subprocess.DEVNULL, stderr=(data_dir.parent / "agent.log").open("ab"),
        env={**os.environ, "PYTHONPATH": str(paths.REPO)})
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(PROCESS_TIMEOUT_S)
        if not keep_tasks:
            remove_agent_cgroups("east", data_dir / "attempts")  # a SIGKILLed agent leaves them


@pytest.mark.integration
def test_the_agent_process_survives_sigkill_and_reports_once(tmp_path: Path,
                                                             subreaper: None) -> None:
    session = FakeSession()
    data_dir = tmp_path / "data"
    gate = tmp_path / "gate"
    attempts = data_dir / "attempts"
    result = attempts / f"{1:020d}" / "result.json"
    try:
        with serve(session) as address:
            session.assign(assignment(1, command=(
                "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; echo out; exit 5")))
            with _agent_process(address, data_dir, keep_tasks=True) as first:
                wait_until(lambda: ReportKind.STARTED in session.kinds(1), "STARTED",
                           PROCESS_TIMEOUT_S)
                first.send_signal(signal.SIGKILL)
                first.wait(PROCESS_TIMEOUT_S)
            gate.touch()  # the task ends while no agent runs; its wrapper writes the result
            wait_until(result.exists, "the orphaned wrapper's result", PROCESS_TIMEOUT_S)
            metrics_port = _free_port()
            with _agent_process(address, data_dir, "--metrics-port", str(metrics_port)) as second:
                wait_until(lambda: ReportKind.FINISHED in session.kinds(1), "FINISHED",
                           PROCESS_TIMEOUT_S)
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                            timeout=PROCESS_TIMEOUT_S) as response:
                    metrics = response.read().decode()
                assert 'raftsched_agent_attempts_finished_total{kind="FINISHED"} 1.0' in metrics
                second.send_signal(signal.SIGTERM)
                assert second.wait(PROCESS_TIMEOUT_S) == 0
    finally:
        kill_attempt_processes(attempts)  # also reaps the orphaned wrapper, now our child
    finished = session.report_of(1, ReportKind.FINISHED)
    assert finished is not None and finished.exit_code == 5
    # STARTED may be sent twice (SIGKILL can fall between its commit and its ack: the leader
    # dedupes); the result is sent once.
    assert session.kinds(1).count(ReportKind.FINISHED) == 1
    assert ReportKind.STARTED in session.kinds(1)
    assert [r.incarnation for r in session.registrations] == [1, 2]
    assert [(k.fence, k.running) for k in session.registrations[1].known] == [(1, False)]
    assert (attempts / f"{1:020d}" / "stdout").read_text() == "out\n"


@pytest.mark.integration
def test_metrics_served_on_every_interface_with_metrics_address(tmp_path: Path) -> None:
    """--metrics-address 0.0.0.0:PORT answers on an address other than 127.0.0.1 (127.0.0.2
    reaches this host too, but not a socket bound to 127.0.0.1 alone): a Prometheus on another
    host can scrape the agent."""
    session = FakeSession()
    port = _free_port()
    with serve(session) as address, \
            _agent_process(address, tmp_path / "data", "--metrics-address", f"0.0.0.0:{port}"):
        def scrape() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics",
                                            timeout=PROCESS_TIMEOUT_S) as response:
                    return str(response.read().decode())
            except OSError:
                return None

        text = wait_until(scrape, "metrics on 127.0.0.2", PROCESS_TIMEOUT_S)
    assert "# TYPE raftsched_agent_attempts_started_total counter" in str(text)


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="SKIPPED LOUDLY: a task account other than the "
                    "agent's needs the agent to run as root (CI runs as root)")
def test_a_data_dir_the_task_account_cannot_reach_stops_the_agent_at_start() -> None:
    """Issue 21, finding 15: under a 0700 directory, the task account (nobody, the default as
    root) could not resolve its HOME or RAFTSCHED_CHECKPOINT_DIR, and checkpoints were lost
    without a word. The agent, as a real process, refuses to start: exit 2, one `error:` line
    naming the directory in the way and the fix."""
    with tempfile.TemporaryDirectory(prefix="raftsched-closed-") as name:
        closed = Path(name)  # mkdtemp makes it 0700, as `mktemp -d` does
        assert closed.stat().st_mode & 0o777 == 0o700
        data_dir = closed / "agent"
        started = subprocess.run(
            [sys.executable, "-m", "agent", "--cluster-id", "east", "--servers",
             "127.0.0.1:1", "--insecure-dev", "--data-dir", str(data_dir),
             "--executor", "subprocess"],
            capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S * 4, check=False,
            env={**os.environ, "PYTHONPATH": str(paths.REPO)})
        assert started.returncode == 2, started.stderr
        lines = started.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: task account nobody "), lines
        assert f"cannot pass through {closed} (mode 0700, owner uid 0)" in lines[0]
        assert f"chmod o+x {closed}" in lines[0]
        closed.chmod(0o711)  # the fix it names: the agent starts (and is stopped at once)
        port = _free_port()
        with _agent_process("127.0.0.1:1", data_dir, "--task-user", "nobody",
                            "--metrics-port", str(port)) as agent:
            log = closed / "agent.log"
            wait_until(lambda: log.exists() and "task_containment" in log.read_text(),
                       "the agent to pass its start-up checks", PROCESS_TIMEOUT_S)
            assert agent.poll() is None
            mode = next(json.loads(line)["mode"] for line in log.read_text().splitlines()
                        if '"task_containment"' in line)
            assert mode in ("cgroup", "session")
            # How an operator tells which containment an agent uses, beside the log line.
            wait_until(lambda: f'raftsched_agent_task_containment{{mode="{mode}"}} 1.0'
                       in _scrape(port), "the containment metric", PROCESS_TIMEOUT_S)


def _scrape(port: int) -> str:
    """The agent's /metrics, or '' while it does not serve them yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=PROCESS_TIMEOUT_S) as response:
            return str(response.read().decode())
    except OSError:
        return ""
