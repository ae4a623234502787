"""`--param NAME=VALUE` on `submit` and `validate`: the values sent, the usage errors, several
files refused as one before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftsched.cli import common
from tests.unit.cli.test_commands import run
from tests.unit.cli.test_submit_wire import Recording, servers  # noqa: F401

SPEC = """\
name: daily
params: {date: null, region: eu, n: 3}
tasks:
- {id: a, command: [echo, x]}
"""


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "daily.yaml"
    path.write_text(SPEC)
    return str(path)


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> Recording:
    client = Recording()
    monkeypatch.setattr(common, "make_client", lambda *_, **__: client)
    return client


def test_submit_sends_the_effective_values(spec: str, recording: Recording,
                                           servers: None,  # noqa: F811
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "submit", spec, "--param", "date=2026-12-05", "--param",
                       "region=", "--json")
    assert code == 0, out
    [sent] = recording.specs
    assert sent.params == (("date", "2026-12-05"), ("n", "3"), ("region", ""))


def test_a_required_param_without_a_value_is_refused_and_nothing_sent(
        spec: str, recording: Recording, servers: None,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "submit", spec)
    assert (code, out, recording.specs) == (2, "", [])
    assert "error: params.date: required (no default): give it with --param date=VALUE" in err


def test_an_unknown_param_is_refused_naming_it(spec: str, recording: Recording,
                                               servers: None,  # noqa: F811
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "submit", spec, "--param", "date=x", "--param", "nope=1")
    assert (code, out, recording.specs) == (2, "", [])
    assert ("error: --param nope: the job has no param 'nope' (it has: date, n, region)"
            in err)


@pytest.mark.parametrize(("arg", "message"), [
    ("date", "--param 'date': expected NAME=VALUE"),
    ("9x=1", "--param '9x=1': a param name must match"),
])
def test_a_malformed_param_is_a_usage_error_naming_it(
        spec: str, recording: Recording, servers: None,  # noqa: F811
        capsys: pytest.CaptureFixture[str], arg: str, message: str) -> None:
    code, _, err = run(capsys, "submit", spec, "--param", arg)
    assert (code, recording.specs) == (2, [])
    assert message in err


def test_validate_takes_params(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", spec, "--param", "date=d", "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    assert json.loads(out)["params"] == {"date": "d", "n": "3", "region": "eu"}
    code, out, _ = run(capsys, "validate", spec, "--json")
    assert code == 2
    assert json.loads(out)["errors"][0]["path"] == "params.date"


def test_with_several_files_every_one_must_take_the_params(
        spec: str, tmp_path: Path, recording: Recording, servers: None,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("name: o\ntasks:\n- {id: a, command: [x]}\n")
    code, out, err = run(capsys, "submit", spec, str(other), "--param", "date=d")
    assert (code, out, recording.specs) == (2, "", [])
    assert f"{other}: --param date: the job has no param 'date' (it has: none)" in err
