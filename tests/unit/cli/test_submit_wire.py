"""`raftsched submit` sends the spec it validated as its wire form (the replicas parse no
document), and a spec meant as JSON that is not JSON is reported as invalid JSON by `validate`
and `submit` alike, with the line and column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raftsched import environment, limits
from raftsched.cli import common
from raftsched.client.client import Client
from raftsched.spec.file import load_spec_file
from raftsched.spec.model import JobSpec
from raftsched.spec.wire import pack_wire
from tests.unit.cli.test_commands import DIAMOND, FakeClient, run


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(common.SERVERS_ENV, "127.0.0.1:7001")
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(tmp_path / "no-dev-cluster"))
    for name in common.TLS_ENV:  # never read: the client is a fake, or never connects
        monkeypatch.setenv(name, f"/tls/{name.lower()}.pem")


class Recording(FakeClient):
    def __init__(self) -> None:
        super().__init__()
        self.specs: list[JobSpec] = []

    def submit_spec(self, spec: JobSpec, idempotency_key: str | None = None) -> Any:
        self.specs.append(spec)
        return super().submit_spec(spec, idempotency_key)


def test_submit_sends_the_validated_spec(monkeypatch: pytest.MonkeyPatch, servers: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    recording = Recording()
    monkeypatch.setattr(common, "make_client", lambda *_, **__: recording)
    code, out, _ = run(capsys, "submit", DIAMOND, "--json")
    assert code == 0, out
    assert recording.specs == [load_spec_file(DIAMOND)]


def test_a_spec_whose_wire_form_is_too_large_is_refused_locally(
        monkeypatch: pytest.MonkeyPatch, servers: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The real client's check (`Client.submit_spec`), reported like any spec error, exit 2:
    the wire form fills in every default, so it can be larger than a terse file."""
    path = tmp_path / "terse.yaml"
    path.write_text("name: t\ntasks:\n" + "".join(f"- {{id: t{i}, command: [x]}}\n"
                                                  for i in range(20)))
    size = len(pack_wire(load_spec_file(path)))
    assert path.stat().st_size < size
    monkeypatch.setattr(limits, "MAX_SPEC_BYTES", size - 1)
    monkeypatch.setattr(common, "make_client", lambda servers, *_, **__: Client(servers))
    code, out, err = run(capsys, "submit", str(path))
    assert (code, out) == (2, "")
    assert err == (f"error: the spec's wire form is {size} bytes; a job spec may be at most "
                   f"{size - 1} bytes\n1 error(s)\n")


@pytest.mark.parametrize("command", ["validate", "submit"])
def test_a_json_spec_that_is_not_json_is_reported_as_invalid_json(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    recording = Recording()
    monkeypatch.setattr(common, "make_client", lambda *_, **__: recording)
    path = tmp_path / "spec.json"
    path.write_text('{\n  "name": "x",\n  "tasks": [\n    {"id": "a" "command": ["x"]}\n  ]\n}\n')
    code, out, _ = run(capsys, command, str(path), "--json")
    assert code == 2
    answer = json.loads(out)
    [problem] = answer["errors"] if command == "validate" else answer["error"]["issues"]
    assert problem["message"] == (f"invalid JSON in {path} at line 4, column 16: Expecting ',' "
                                  "delimiter")
    assert recording.calls == []
