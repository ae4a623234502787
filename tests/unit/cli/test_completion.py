"""`raftsched completion bash|zsh`: the script made from the argparse tree completes commands,
subcommands, options and choices when bash runs it as bash-completion would."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from raftsched.cli import main as cli
from raftsched.cli.completion import command_tree, completion_script

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed: the completion "
                                "script cannot be run, so it is NOT tested here")
TIMEOUT_S = 30


def script(capsys: pytest.CaptureFixture[str], shell: str = "bash") -> str:
    assert cli.main(["completion", shell]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "raftsched.bash"
    path.write_text(completion_script(cli.build_parser(), "bash"), encoding="utf-8")
    return path


def complete(script_path: Path, line: str) -> list[str]:
    """What `_raftsched` offers for `line` (a trailing space: completing a new, empty word)."""
    assert BASH is not None
    program = ('source "$1"; read -ra COMP_WORDS <<< "$2"; '
               '[[ $2 == *" " ]] && COMP_WORDS+=(""); '
               "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _raftsched; "
               'printf "%s\\n" "${COMPREPLY[@]}"')
    result = subprocess.run([BASH, "--norc", "--noprofile", "-c", program, "bash",
                             str(script_path), line],
                            capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [word for word in result.stdout.splitlines() if word]


@needs_bash
@pytest.mark.parametrize(("line", "expected"), [
    ("raftsched jo", ["job"]),
    ("raftsched job w", ["watch"]),
    ("raftsched admin token c", ["create"]),
    ("raftsched admin snapshot ", ["save", "inspect", "export"]),
    ("raftsched completion ", ["bash", "zsh"]),
    ("raftsched job list --st", ["--state"]),
    ("raftsched job list --state R", ["RUNNING"]),
    ("raftsched agent --exec", ["--executor"]),
    ("raftsched agent --executor m", ["mock"]),
    ("raftsched replica --conf", ["--config"]),
    ("raftsched replica --insecure-dev --log-level d", ["debug"]),
    ("raftsched admin status --server x --d", ["--digest"]),
])
def test_bash_completes_commands_options_and_choices(bash_script: Path, line: str,
                                                     expected: list[str]) -> None:
    assert complete(bash_script, line) == expected


@needs_bash
def test_bash_completes_file_names_where_a_file_goes(bash_script: Path, tmp_path: Path) -> None:
    (tmp_path / "replica.toml").write_text("")
    assert complete(bash_script, f"raftsched agent --config {tmp_path}/rep") == [
        f"{tmp_path}/replica.toml"]
    assert complete(bash_script, f"raftsched validate {tmp_path}/rep") == [
        f"{tmp_path}/replica.toml"]


@needs_bash
def test_the_zsh_script_is_the_bash_one_behind_bashcompinit(
        capsys: pytest.CaptureFixture[str]) -> None:
    bash, zsh = script(capsys, "bash"), script(capsys, "zsh")
    assert zsh.endswith(bash) and "bashcompinit" in zsh[: len(zsh) - len(bash)]
    checked = subprocess.run([str(BASH), "-n"], input=bash, capture_output=True, text=True,
                             check=False, timeout=TIMEOUT_S)
    assert checked.returncode == 0, checked.stderr


def test_the_tree_holds_every_command_and_the_servers_options() -> None:
    nodes = {node.path: node for node in command_tree(cli.build_parser())}
    assert "job" in nodes["raftsched"].commands and "completion" in nodes["raftsched"].commands
    assert "watch" in nodes["raftsched job"].commands
    assert {"--config", "--raft", "--peers", "--help"} <= set(nodes["raftsched replica"].options)
    assert {"--config", "--cluster-id", "--task-user"} <= set(nodes["raftsched agent"].options)
    assert "--insecure-dev" not in nodes["raftsched agent"].valued
    assert "--config" in nodes["raftsched agent"].valued


def test_json_prints_the_script_in_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "bash", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["shell"] == "bash" and "complete -F _raftsched raftsched" in document["script"]


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "fish"]) == 2
    assert "invalid choice: 'fish'" in capsys.readouterr().err
