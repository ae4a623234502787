"""`raftsched.config`: options from a TOML file's table, checked against the parser's own actions.
Precedence (flag > file > default, env-derived defaults included), TOML arrays for comma-list
options, booleans, and one-line errors that name the file, the table and the key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from raftsched import config
from raftsched.options import metrics_address, positive_int, positive_seconds


def parser(env_servers: str = "") -> argparse.ArgumentParser:
    """A stand-in with the shapes the servers' options have."""
    result = argparse.ArgumentParser(prog="raftsched replica")
    config.add_option(result, "replica")
    result.add_argument("--raft", required=True, metavar="HOST:PORT", help="x")
    result.add_argument("--peers", default="", metavar="RAFT_ADDR,...", help="x")
    result.add_argument("--servers", default=env_servers, metavar="HOST:PORT,...", help="x")
    result.add_argument("--data-dir", default="", help="x")
    secret = result.add_mutually_exclusive_group()
    secret.add_argument("--secret-file", help="x")
    secret.add_argument("--insecure-dev", action="store_true", help="x")
    result.add_argument("--lost-after-s", type=float, default=30.0, help="x")
    result.add_argument("--snapshot-entries", type=positive_int, default=None, help="x")
    result.add_argument("--snapshot-interval-s", type=positive_seconds, default=None, help="x")
    result.add_argument("--memory-mb", type=int, default=1024, help="x")
    result.add_argument("--metrics-address", type=metrics_address, default=None, help="x")
    result.add_argument("--log-level", default="info", type=str.lower,
                        choices=("debug", "info", "warning"), help="x")
    result.add_argument("--executor", choices=("subprocess", "mock"), default="subprocess",
                        help="x")
    return result


def write(tmp_path: Path, text: str, name: str = "raftsched.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def parse(argv: list[str], env_servers: str = "") -> argparse.Namespace:
    return config.parse_args(parser(env_servers), argv, "replica")


def error(argv: list[str]) -> str:
    with pytest.raises(config.ConfigError) as caught:
        parse(argv)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- precedence -------------------------------------------------------------------------------


def test_a_flag_wins_over_the_file_which_wins_over_the_default(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nraft = "10.0.0.1:7000"\nlost-after-s = 60\n'
                           'data-dir = "/var/lib/raftsched"\n')
    args = parse(["--config", path, "--lost-after-s", "90"])
    assert args.lost_after_s == 90.0  # flag
    assert args.data_dir == "/var/lib/raftsched"  # file
    assert args.raft == "10.0.0.1:7000"  # file
    assert args.memory_mb == 1024 and args.log_level == "info"  # defaults
    assert args.config == path


def test_without_config_the_parse_is_argparse_s_own(tmp_path: Path) -> None:
    args = parse(["--raft", "h:1"])
    assert (args.raft, args.config, args.lost_after_s) == ("h:1", None, 30.0)


@pytest.mark.parametrize("spelling", [["--config={path}"], ["--conf", "{path}"]])
def test_config_is_found_in_every_spelling_argparse_takes(tmp_path: Path,
                                                          spelling: list[str]) -> None:
    path = write(tmp_path, '[replica]\nraft = "h:7000"\n')
    args = parse([word.format(path=path) for word in spelling])
    assert args.raft == "h:7000"


def test_a_required_option_is_satisfied_by_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nraft = "h:7000"\n')
    assert parse(["--config", path]).raft == "h:7000"
    assert parse(["--config", path, "--raft", "other:1"]).raft == "other:1"


def test_a_required_option_neither_in_the_file_nor_given_is_still_required(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, '[replica]\ndata-dir = "d"\n')
    with pytest.raises(SystemExit) as stop:
        parse(["--config", path])
    assert stop.value.code == 2
    assert "the following arguments are required: --raft" in capsys.readouterr().err


def test_the_file_wins_over_an_environment_default_and_the_environment_stays_the_fallback(
        tmp_path: Path) -> None:
    with_servers = write(tmp_path, '[replica]\nraft = "h:1"\nservers = ["a:1", "b:2"]\n', "a.toml")
    without = write(tmp_path, '[replica]\nraft = "h:1"\n', "b.toml")
    assert parse(["--config", with_servers], env_servers="env:1").servers == "a:1,b:2"
    assert parse(["--config", without], env_servers="env:1").servers == "env:1"


# --- values -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("toml", "expected"), [
    ('peers = ["10.0.0.2:7000", "10.0.0.3:7000"]', "10.0.0.2:7000,10.0.0.3:7000"),
    ('peers = "10.0.0.2:7000,10.0.0.3:7000"', "10.0.0.2:7000,10.0.0.3:7000"),
    ("peers = []", ""),
])
def test_comma_list_options_take_an_array_or_a_string(tmp_path: Path, toml: str,
                                                      expected: str) -> None:
    path = write(tmp_path, f'[replica]\nraft = "h:1"\n{toml}\n')
    assert parse(["--config", path]).peers == expected


@pytest.mark.parametrize(("toml", "expected"), [("true", True), ("false", False)])
def test_booleans_set_store_true_flags(tmp_path: Path, toml: str, expected: bool) -> None:
    path = write(tmp_path, f'[replica]\nraft = "h:1"\ninsecure-dev = {toml}\n')
    assert parse(["--config", path]).insecure_dev is expected


def test_values_are_converted_and_checked_as_the_flag_s_text_would_be(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nraft = "h:1"\nsnapshot_entries = 500\n'
                           'snapshot-interval-s = 90\nmetrics-address = "0.0.0.0:9100"\n'
                           'log-level = "DEBUG"\nexecutor = "mock"\nlost-after-s = 12.5\n')
    args = parse(["--config", path])
    assert args.snapshot_entries == 500 and isinstance(args.snapshot_entries, int)
    assert args.snapshot_interval_s == 90.0
    assert args.metrics_address == ("0.0.0.0", 9100)
    assert args.log_level == "debug"
    assert args.executor == "mock"
    assert args.lost_after_s == 12.5


def test_one_file_holds_both_tables(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nraft = "h:1"\n\n[agent]\ncluster-id = "east"\n')
    assert parse(["--config", path]).raft == "h:1"


# --- errors -----------------------------------------------------------------------------------


def test_an_unknown_key_names_the_file_the_table_and_close_matches(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nraft = "h:1"\ndata-dri = "x"\n')
    message = error(["--config", path])
    assert message == f"{path} [replica]: unknown key data-dri; did you mean data-dir?"


def test_an_unknown_key_without_a_close_match_lists_the_keys(tmp_path: Path) -> None:
    path = write(tmp_path, '[replica]\nzzzz = 1\n')
    message = error(["--config", path])
    assert message.startswith(f"{path} [replica]: unknown key zzzz (valid keys: data-dir, ")
    assert "raft" in message and "help" not in message and "config" not in message


@pytest.mark.parametrize(("toml", "expected"), [
    ('lost-after-s = "30"', "lost-after-s: expected a number, got a string ('30')"),
    ("memory-mb = 1.5", "memory-mb: expected an integer, got a number (1.5)"),
    ("memory-mb = true", "memory-mb: expected an integer, got a boolean (true)"),
    ('insecure-dev = "yes"',
     "insecure-dev: expected a boolean (true or false), got a string ('yes')"),
    ("data-dir = 5", "data-dir: expected a string, got an integer (5)"),
    ("data-dir = []", "data-dir: expected a string, got an array"),
    ("peers = 5", "peers: expected a string or an array of strings, got an integer (5)"),
    ("peers = [1, 2]", "peers: expected an array of strings, got an array holding an integer (1)"),
    ('peers = ["a:1,b:2"]', "peers: 'a:1,b:2': one item per array element, no commas"),
    ("snapshot-entries = 0", "snapshot-entries: must be in 1..9223372036854775807, got 0"),
    ('metrics-address = "9100"', "metrics-address: not HOST:PORT: '9100'"),
    ('log-level = "loud"', "log-level: 'loud' is not one of 'debug', 'info', 'warning'"),
    ("raft = 1979-05-27", "raft: expected a string, got a date or time (1979-05-27)"),
])
def test_a_wrong_value_names_the_key_and_the_expected_type(tmp_path: Path, toml: str,
                                                            expected: str) -> None:
    path = write(tmp_path, f"[replica]\n{toml}\n")
    assert error(["--config", path]) == f"{path} [replica] {expected}"


@pytest.mark.parametrize(("toml", "expected"), [
    ('[replica]\ndata-dir = "a"\ndata_dir = "b"\n',
     " [replica]: data-dir and data_dir set the same option"),
    ("[replica]\nhelp = true\n", " [replica]: help cannot be set in a config file"),
    ('[replica]\nconfig = "other.toml"\n', " [replica]: config cannot be set in a config file"),
    ('[agent]\ncluster-id = "x"\n', ": no [replica] table (the file has [agent])"),
    ('[replcia]\nraft = "h:1"\n', ": unknown table [replcia]; did you mean [replica]?"),
    ('raft = "h:1"\n', ": key raft is outside any table; put it under [replica] or [agent]"),
    ("replica = 5\n", " [replica]: expected a table, got an integer (5)"),
    ("[replica\n", ": not valid TOML: "),
])
def test_a_malformed_file_is_one_error_naming_the_file(tmp_path: Path, toml: str,
                                                       expected: str) -> None:
    path = write(tmp_path, toml)
    assert error(["--config", path]).startswith(f"{path}{expected}")


def test_a_missing_file_is_one_error_naming_it(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.toml")
    assert error(["--config", path]) == f"cannot read --config {path}: No such file or directory"


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[replica]\ndata-dir = "caf\xe9"\n')
    assert error(["--config", str(path)]) == f"{path}: not UTF-8 text"


def test_options_that_exclude_each_other_are_refused_across_file_and_flags(
        tmp_path: Path) -> None:
    insecure = write(tmp_path, '[replica]\nraft = "h:1"\ninsecure-dev = true\n', "a.toml")
    message = error(["--config", insecure, "--secret-file", "/etc/secret"])
    assert message == (f"{insecure} [replica]: --secret-file and --insecure-dev exclude each "
                       "other (set in the file or on the command line); keep one")
    both = write(tmp_path, '[replica]\nraft = "h:1"\ninsecure-dev = true\nsecret-file = "s"\n',
                 "b.toml")
    assert "exclude each other" in error(["--config", both])
    secure = write(tmp_path, '[replica]\nraft = "h:1"\ninsecure-dev = false\nsecret-file = "s"\n',
                   "c.toml")
    assert parse(["--config", secure]).secret_file == "s"


def test_config_without_a_value_is_argparse_s_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(["--raft", "h:1", "--config"])
    assert stop.value.code == 2
    assert "argument --config: expected one argument" in capsys.readouterr().err


def test_a_parser_without_config_ignores_it() -> None:
    plain = argparse.ArgumentParser()
    plain.add_argument("--raft")
    assert config.parse_args(plain, ["--raft", "h:1"], "replica").raft == "h:1"


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, "#" * (config.MAX_CONFIG_BYTES + 1))
    assert "larger than" in error(["--config", path])
