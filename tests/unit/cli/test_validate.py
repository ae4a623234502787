"""`raftsched validate`: output, exit codes, --json, stdin, and the real entry point."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from raftsched.cli import main as cli
from tests.support import paths

EXAMPLES = paths.EXAMPLES

BAD_SPEC = """\
name: broken
tasks:
  - id: extract
    command: [x]
    resources: {cpu: -1}
  - id: load
    comand: [x]
    depends_on: [extract, ghost]
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("name", "tasks", "edges"), [("diamond.yaml", 4, 4), ("etl.json", 4, 3),
                                                     ("map-reduce.yaml", 3, 2)])
def test_examples_are_valid(
    capsys: pytest.CaptureFixture[str], name: str, tasks: int, edges: int
) -> None:
    assert run(capsys, "validate", str(EXAMPLES / name)) == (
        0, f"ok: {tasks} tasks, {edges} edges\n", ""
    )


def test_invalid_spec_lists_every_error_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "validate", write(tmp_path, BAD_SPEC))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "error: tasks[0] (extract).resources.cpu: must be a number > 0, got -1",
        "error: tasks[1] (load).comand: unknown field 'comand' (did you mean 'command'?)",
        "error: tasks[1] (load).command: missing required field",
        "error: tasks[1] (load).depends_on[1]: unknown dependency 'ghost'",
        "4 error(s)",
    ]


def test_json_success(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "diamond.yaml")
    code, out, err = run(capsys, "validate", "--json", path)
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "ok": True, "file": path, "name": "diamond-demo", "tasks": 4, "edges": 4
    }
    assert out.count("\n") == 1


def test_json_failure(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, BAD_SPEC)
    code, out, err = run(capsys, "validate", path, "--json")
    assert (code, err) == (2, "")
    report = json.loads(out)
    assert report["ok"] is False and report["file"] == path
    assert report["errors"][0] == {
        "path": "tasks[0].resources.cpu",
        "task": "extract",
        "message": "must be a number > 0, got -1",
    }
    assert len(report["errors"]) == 4


@pytest.mark.parametrize("as_json", [False, True])
def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, as_json: bool) -> None:
    path = str(tmp_path / "nope.yaml")
    code, out, err = run(capsys, "validate", path, *(["--json"] if as_json else []))
    assert code == 2
    message = f"cannot read {path}: No such file or directory"
    if as_json:
        assert json.loads(out)["errors"] == [{"path": "", "task": None, "message": message}]
    else:
        assert err == f"error: {message}\n1 error(s)\n"


def test_yaml_syntax_error_names_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "name: x\ntasks:\n  - id: a\n   command: [x]\n")
    code, _, err = run(capsys, "validate", path)
    assert code == 2
    assert err.startswith(f"error: invalid YAML in {path} at line 4, column ")


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = (EXAMPLES / "etl.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(spec)))
    assert run(capsys, "validate", "-") == (0, "ok: 4 tasks, 3 edges\n", "")
    monkeypatch.setattr(sys, "stdin", io.StringIO("name: x\n"))
    code, out, _ = run(capsys, "validate", "-", "--json")
    assert code == 2
    assert json.loads(out) == {
        "ok": False, "file": "-",
        "errors": [{"path": "tasks", "task": None, "message": "missing required field"}],
    }


def test_help_says_what_validate_does_and_prints(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "--help")
    assert code == 0
    for fragment in ("job spec", "ok: N tasks, M edges", "error(s)", "--json", "'-' reads stdin"):
        assert fragment in out


def test_top_level_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "validate" in out


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["validate"], ["validate", "a", "b"]])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert "usage: raftsched" in err


def entry(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raftsched", *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )


def test_real_entry_point(tmp_path: Path) -> None:
    ok = entry("validate", "--json", str(EXAMPLES / "etl.json"))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {
        "ok": True, "file": str(EXAMPLES / "etl.json"), "name": "nightly-etl", "tasks": 4,
        "edges": 3,
    }

    bad = entry("validate", "--json", write(tmp_path, BAD_SPEC))
    assert bad.returncode == 2 and bad.stderr == ""
    report: dict[str, Any] = json.loads(bad.stdout)
    assert [e["path"] for e in report["errors"]][-1] == "tasks[1].depends_on[1]"

    garbage = entry("validate", "-", stdin="name: x\n  bad: indent\n")
    assert garbage.returncode == 2
    assert "Traceback" not in garbage.stderr
    assert garbage.stderr.startswith("error: invalid YAML in <stdin> at line 2, column 6")
    assert garbage.stderr.endswith("1 error(s)\n")

    human = entry("validate", str(EXAMPLES / "diamond.yaml"))
    assert (human.returncode, human.stdout) == (0, "ok: 4 tasks, 4 edges\n")
