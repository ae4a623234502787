"""deploy/systemd: the example config files are accepted by the real option parsers (through
both entry points, `raftsched replica|agent` and the server modules' own `main`), every option
the examples and the units name exists, and `systemd-analyze verify` passes on every unit.
No server process is started: `run` is replaced where an entry point would start one."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent import main as agent_main
from raftsched import config
from raftsched.cli import main as cli
from raftsched.cli import servers
from raftsched.replica import main as replica_main
from tests.support import paths

SYSTEMD = paths.REPO / "deploy" / "systemd"
TABLES = ("replica", "agent")
EXAMPLE = {table: SYSTEMD / f"{table}.toml" for table in TABLES}
UNIT = {table: SYSTEMD / f"raftsched-{table}.service" for table in TABLES}
INSTALLED_CONFIG = {table: f"/etc/raftsched/{table}.toml" for table in TABLES}
ENVIRONMENT = ("RAFTSCHED_SERVERS", "RAFTSCHED_AGENT_DATA_DIR", "RAFTSCHED_SECRET",
               "RAFTSCHED_TLS_CA", "RAFTSCHED_TLS_CERT", "RAFTSCHED_TLS_KEY")
VERIFY_TIMEOUT_S = 60
_KEY = re.compile(r"^#?\s*([a-z][a-z0-9_-]*)\s*=", re.MULTILINE)
"""A key of an example file, commented-out ones included (they are meant to be uncommented)."""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Option defaults read from these at parser build time: the file alone must decide."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def server_parser(table: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"raftsched {table}")
    servers.SERVERS[table].load().add_arguments(parser)
    return parser


def example_args(table: str) -> argparse.Namespace:
    return config.parse_args(server_parser(table), ["--config", str(EXAMPLE[table])], table)


def long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--")}


def unit_settings(path: Path) -> dict[str, dict[str, str]]:
    """{section: {key: value}} of a unit file (no key repeats in ours)."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[] "), {})
            continue
        key, equals, value = line.partition("=")
        assert equals, f"{path.name}: {line!r}"
        assert key.strip() not in current, f"{path.name}: {key} twice"
        current[key.strip()] = value.strip()
    return sections


# --- the example config files -------------------------------------------------------------------


def test_the_replica_example_is_accepted_by_the_replica_parser() -> None:
    args = example_args("replica")
    assert (args.raft, args.grpc) == ("10.0.0.1:7000", "10.0.0.1:8000")
    assert args.peers == ["10.0.0.2:7000", "10.0.0.3:7000"]  # the address-list option type
    assert args.data_dir == "/var/lib/raftsched"
    assert args.secret_file == "/etc/raftsched/secret" and args.insecure_dev is False
    assert (args.tls_ca, args.tls_cert, args.tls_key) == (
        "/etc/raftsched/ca.pem", "/etc/raftsched/replica.pem", "/etc/raftsched/replica.key")
    assert args.bootstrap_token_file is None  # commented out: only for a first start
    assert args.metrics_address == ("10.0.0.1", 9100)
    assert args.log_level == "info"
    assert (args.suspect_after_s, args.lost_after_s) == (5.0, 30.0)
    assert (args.snapshot_entries, args.snapshot_interval_s) == (20000, 600.0)
    assert 0 < args.suspect_after_s < args.lost_after_s  # what `run` checks first


def test_the_agent_example_is_accepted_by_the_agent_parser() -> None:
    args = example_args("agent")
    assert args.cluster_id == "gpu-west"
    assert args.servers == "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000"
    assert args.capabilities == "linux,gpu"
    assert (args.cpu, args.memory_mb, args.gpu) == (64.0, 262144, 8)
    assert args.data_dir == "/var/lib/raftsched-agent"
    assert args.executor == "subprocess" and args.task_user == "raftsched-task"
    assert args.tls_cert == "/etc/raftsched/agent-gpu-west.pem" and args.insecure_dev is False
    # ... and by the agent's own checks of those values (ids, HOST:PORT, capabilities, limits):
    agent_config, addresses = agent_main._config(args)
    assert agent_config.cluster_id == "gpu-west" and addresses == [[
        "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]]  # one scheduler group
    assert agent_config.capabilities == ("linux", "gpu")
    assert args.metrics_address == ("0.0.0.0", 9101)


@pytest.mark.parametrize("table", TABLES)
def test_every_key_of_the_examples_is_an_option_commented_ones_included(
        table: str, tmp_path: Path) -> None:
    text = EXAMPLE[table].read_text(encoding="utf-8")
    keys = {key.replace("_", "-") for key in _KEY.findall(text)}
    assert {"data-dir", "tls-ca", "log-level"} <= keys
    parser = server_parser(table)
    unknown = {key for key in keys if f"--{key}" not in long_options(parser)}
    assert not unknown, f"{EXAMPLE[table].name} names options that do not exist: {unknown}"
    uncommented = tmp_path / EXAMPLE[table].name
    uncommented.write_text(re.sub(r"^#\s*(?=[a-z][a-z0-9_-]*\s*=)", "", text, flags=re.MULTILINE),
                           encoding="utf-8")
    values = config.file_defaults(parser, str(uncommented), table)
    assert len(values) == len(keys)  # with the commented-out keys, valid values too


# --- both entry points honour --config ----------------------------------------------------------


def recorder(seen: list[argparse.Namespace]) -> Callable[[argparse.Namespace], int]:
    """A server's `run` that records its arguments instead of starting the server."""

    def run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    return run


@pytest.mark.parametrize("table", TABLES)
def test_raftsched_replica_and_agent_read_the_config_file(
        table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []
    module = servers.SERVERS[table].load()
    monkeypatch.setattr(module, "run", recorder(seen))
    assert cli.main([table, "--config", str(EXAMPLE[table]), "--log-level", "debug"]) == 0
    assert seen[0].data_dir == example_args(table).data_dir
    assert seen[0].log_level == "debug"  # the flag wins over the file's "info"


@pytest.mark.parametrize("table", TABLES)
def test_the_modules_own_main_reads_the_config_file(table: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []
    module: Any = replica_main if table == "replica" else agent_main
    monkeypatch.setattr(module, "run", recorder(seen))
    assert module.main(["--config", str(EXAMPLE[table])]) == 0
    assert seen[0].data_dir == example_args(table).data_dir


@pytest.mark.parametrize("entry", ["cli", "module"])
@pytest.mark.parametrize("table", TABLES)
def test_a_bad_config_file_is_one_error_line_and_exit_2(
        table: str, entry: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'[{table}]\ndata-dri = "/var/lib/x"\n', encoding="utf-8")
    module: Any = replica_main if table == "replica" else agent_main
    code = cli.main([table, "--config", str(path)]) if entry == "cli" \
        else module.main(["--config", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"error: {path} [{table}]: unknown key data-dri; did you mean data-dir?\n"


# --- the units ----------------------------------------------------------------------------------


@pytest.mark.parametrize("table", TABLES)
def test_the_units_run_the_server_with_options_that_exist(table: str) -> None:
    service = unit_settings(UNIT[table])["Service"]
    words = shlex.split(service["ExecStart"])
    assert Path(words[0]).name == "raftsched" and words[1] == table
    options = {word.partition("=")[0] for word in words[2:] if word.startswith("-")}
    assert options <= long_options(server_parser(table)), options
    assert words[words.index("--config") + 1] == INSTALLED_CONFIG[table]
    assert Path(INSTALLED_CONFIG[table]).name == EXAMPLE[table].name
    assert f"/var/lib/{service['StateDirectory']}" == example_args(table).data_dir
    assert service["Restart"] == "on-failure" and service["LimitNOFILE"]


def test_the_replica_runs_as_its_own_user_and_the_agent_as_root() -> None:
    replica = unit_settings(UNIT["replica"])["Service"]
    agent = unit_settings(UNIT["agent"])["Service"]
    assert replica["User"] == "raftsched" and replica["NoNewPrivileges"] == "yes"
    assert agent.get("User", "root") == "root"  # it switches to the task user
    assert example_args("agent").task_user not in ("", None, "root")
    # Tasks outlive an agent restart and a task's OOM kill must not stop the unit:
    assert agent["KillMode"] == "process" and agent["OOMPolicy"] == "continue"
    # ... and keep the devices (GPUs) and setuid helpers the unit would otherwise take away:
    for option in ("PrivateDevices", "ProtectClock", "NoNewPrivileges", "PrivateTmp",
                   "CapabilityBoundingSet", "User"):
        assert option not in agent, option


def _raftsched_executable() -> str | None:
    beside = Path(sys.executable).with_name("raftsched")
    return str(beside) if beside.exists() else shutil.which("raftsched")


@pytest.mark.parametrize("table", (*TABLES, "web"))
def test_systemd_analyze_verify_passes(table: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze NOT FOUND: the systemd units in deploy/systemd are NOT "
                    "verified on this machine (install systemd to check them)")
    executable = _raftsched_executable()
    if executable is None:
        pytest.skip("the raftsched command is NOT INSTALLED (pip install -e .): verify needs "
                    "ExecStart's binary, so the units are NOT verified")
    unit_file = SYSTEMD / f"raftsched-{table}.service"
    text = unit_file.read_text(encoding="utf-8")
    rendered, count = re.subn(r"^ExecStart=\S+", f"ExecStart={executable}", text,
                              flags=re.MULTILINE)
    assert count == 1
    unit = tmp_path / unit_file.name
    unit.write_text(rendered, encoding="utf-8")
    result = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True,
                            text=True, check=False, timeout=VERIFY_TIMEOUT_S)
    about_unit = [line for line in (result.stdout + result.stderr).splitlines()
                  if unit.name in line]
    assert result.returncode == 0 and not about_unit, result.stdout + result.stderr
