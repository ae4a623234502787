"""Every numeric option of every `raftsched` command has a bounded value type: a value out of
its range, or not a number of its kind, is a usage error naming the option (exit 2), never a
traceback from the request it would have filled (issue 21, finding 13).

The options are found by walking the parsers (the client commands' and the servers' own), so
an option added later with `type=int` or `type=float` fails `test_every_numeric_option_is_
bounded`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from raftsched.cli import main as cli
from raftsched.cli.common import free_text
from raftsched.options import BoundedOption, positive_seconds

NUMERIC_TYPES = (int, float)


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        else:
            yield path, parser, action


def _server_parsers() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    from agent import main as agent_main
    from raftsched.replica import main as replica_main

    for name, module in (("replica", replica_main), ("agent", agent_main)):
        parser = argparse.ArgumentParser(prog=f"raftsched {name}")
        module.add_arguments(parser)
        yield (name,), parser


def all_options() -> list[tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action]]:
    found = list(_walk(cli.build_parser(), ()))
    for path, parser in _server_parsers():
        found += [(path, parser, action) for action in parser._actions]
    return found


ALL = all_options()
PARSER_OF = {id(action): parser for _path, parser, action in ALL}


def numeric_options() -> list[tuple[tuple[str, ...], argparse.Action]]:
    """(command path, action) of every option whose value is a number."""
    numeric = []
    for path, _parser, action in ALL:
        kind = action.type
        if kind in NUMERIC_TYPES or isinstance(kind, BoundedOption) or kind is positive_seconds:
            numeric.append((path, action))
    return numeric


def _name(path: tuple[str, ...], action: argparse.Action) -> str:
    return " ".join(path) + " " + (action.option_strings or [action.dest])[0]


NUMERIC = numeric_options()
BOUNDED = [(path, action) for path, action in NUMERIC if isinstance(action.type, BoundedOption)]


def test_the_walk_finds_the_options_of_the_issue() -> None:
    names = {_name(path, action) for path, action in NUMERIC}
    assert {"task logs --attempt", "task logs --tail", "job list --limit",
            "admin tenant set --weight", "admin tenant set --max-queued",
            "admin tenant set --max-running", "replica --metrics-port",
            "agent --heartbeat-wait-ms"} <= names


@pytest.mark.parametrize(("path", "action"), NUMERIC, ids=[_name(*n) for n in NUMERIC])
def test_every_numeric_option_is_bounded(path: tuple[str, ...], action: argparse.Action) -> None:
    assert isinstance(action.type, BoundedOption) or action.type is positive_seconds, (
        f"{_name(path, action)} takes a number without bounds: give it "
        "raftsched.options.integer(LOW, HIGH) (the proto field's width or a named limit)")


def _outside(kind: BoundedOption) -> list[str]:
    values = [str(kind.high + 1) if kind.kind is int else repr(kind.high * 2),
              "1e23" if kind.kind is int else "1e999", "2^64", "nan", "", "9" * 5000]
    if kind.low > -(2**63):
        values.append(str(int(kind.low) - 1))
    return values


@pytest.mark.parametrize(("path", "action"), BOUNDED, ids=[_name(*n) for n in BOUNDED])
def test_a_value_outside_the_bounds_is_a_usage_error(
        path: tuple[str, ...], action: argparse.Action) -> None:
    kind = action.type
    assert isinstance(kind, BoundedOption)
    for text in _outside(kind):
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)
    assert kind(str(kind.high)) == kind.high and kind(str(kind.low)) == kind.low


CLIENT_BOUNDED = [(path, action) for path, action in BOUNDED
                  if path[0] not in ("replica", "agent")]


def _argv(path: tuple[str, ...], action: argparse.Action, value: str) -> list[str]:
    """The command with its positionals filled in and the option set to `value`."""
    parser = PARSER_OF[id(action)]
    positionals = ["x" for a in parser._actions
                   if not a.option_strings and a.required and a.nargs is None
                   and not isinstance(a, argparse._SubParsersAction)]
    required = [arg for a in parser._actions if a.option_strings and a.required
                for arg in (a.option_strings[0], str(next(iter(a.choices or ["x"]))))]
    return [*path, *positionals, *required, action.option_strings[0], value]


@pytest.mark.parametrize(("path", "action"), CLIENT_BOUNDED,
                         ids=[_name(*n) for n in CLIENT_BOUNDED])
def test_the_cli_refuses_an_out_of_range_value_with_a_usage_error(
        path: tuple[str, ...], action: argparse.Action,
        capsys: pytest.CaptureFixture[str]) -> None:
    kind = action.type
    assert isinstance(kind, BoundedOption)
    argv = _argv(path, action, str(int(kind.high) + 1))
    assert cli.main([*argv, "--servers", "127.0.0.1:1", "--insecure-dev"]
                    if "dev" not in path else argv) == 2
    err = capsys.readouterr().err
    assert f"argument {action.option_strings[0]}: must be in" in err, err


@pytest.mark.parametrize("server", ["replica", "agent"])
def test_the_servers_refuse_an_out_of_range_value_with_a_usage_error(
        server: str, capsys: pytest.CaptureFixture[str]) -> None:
    for path, action in BOUNDED:
        if path != (server,):
            continue
        assert isinstance(action.type, BoundedOption)
        too_big = str(int(action.type.high) + 1)
        assert cli.main([server, action.option_strings[0], too_big]) == 2
        err = capsys.readouterr().err
        assert f"argument {action.option_strings[0]}: must be in" in err, err


ISSUE_EXAMPLES = [
    ("task", "logs", "j", "t", "--attempt", "99999999999"),
    ("task", "logs", "j", "t", "--tail", "1e23"),
    ("task", "logs", "j", "t", "--tail", "100000000000000000000000"),
    ("job", "list", "--limit", "2147483648"),
    ("admin", "tenant", "set", "t", "--weight", "4294967297"),
    ("admin", "tenant", "set", "t", "--max-queued", "2^64"),
    ("admin", "tenant", "set", "t", "--max-queued", "18446744073709551616"),
]


@pytest.mark.parametrize("argv", ISSUE_EXAMPLES, ids=[" ".join(a[-2:]) for a in ISSUE_EXAMPLES])
def test_the_issues_examples_are_usage_errors_without_a_traceback(argv: tuple[str, ...]) -> None:
    """Through the installed command, as the probe ran it (a dead address: nothing may be
    sent; before the fix the request's protobuf raised ValueError: a traceback, exit 1)."""
    result = subprocess.run([sys.executable, "-m", "raftsched", *argv, "--insecure-dev",
                             "--servers", "127.0.0.1:1", "--timeout", "1"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"error: argument {argv[-2]}:" in result.stderr, result.stderr


FREE_TEXT = [(path, action) for path, _parser, action in ALL if action.type is free_text]


def test_the_free_text_options_are_those_the_replicas_store() -> None:
    assert {_name(path, action) for path, action in FREE_TEXT} == {
        "job cancel --reason", "admin drain --reason", "admin token create --note",
        "admin cert revoke --subject", "admin cert revoke --reason", "schedule pause --note"}


@pytest.mark.parametrize(("path", "action"), FREE_TEXT, ids=[_name(*n) for n in FREE_TEXT])
def test_unprintable_free_text_is_a_usage_error_before_anything_is_sent(
        path: tuple[str, ...], action: argparse.Action,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21, finding 12: the replicas refuse it too (and the state machine at apply)."""
    argv = _argv(path, action, "\x1b[2J\nfake line")
    assert cli.main([*argv, "--servers", "127.0.0.1:1", "--insecure-dev"]) == 2
    err = capsys.readouterr().err
    assert f"argument {action.option_strings[0]}: must be printable text" in err, err
    assert "\x1b" not in err
