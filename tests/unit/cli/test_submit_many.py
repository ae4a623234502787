"""`raftsched submit FILE FILE...` and `raftsched submit DIR` (issue 24 item 3): one SubmitJobs
batch, one answer per file in order (a file with problems answered locally, not sent), the
--json list, a non-zero exit when any was refused, --watch and --idempotency-key refused with
many files. The replica is an in-memory one (tests/unit/replica)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftsched.cli import main as cli
from tests.unit.cli.test_commands import Made, made  # noqa: F401  (a fixture)
from tests.unit.cli.test_submit_parses_once import SPEC, replica  # noqa: F401  (a fixture)
from tests.unit.replica.test_service import Replica


def test_json_answers_each_file_and_exits_non_zero_when_one_is_refused(
        replica: Replica, capsys: pytest.CaptureFixture[str],  # noqa: F811
        tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SPEC.replace("parsed-once", "a")
                                     + "idempotency_key: ka\n")
    (tmp_path / "b.yaml").write_text("name: b\ntasks:\n  - {id: x, command: [\"true\"], "
                                     "depends_on: [ghost]}\n")
    (tmp_path / "c.json").write_text(json.dumps({
        "name": "c", "idempotency_key": "ka", "allow_unschedulable": True,
        "tasks": [{"id": "z", "command": ["true"]}]}))
    assert cli.main(["submit", "--json", str(tmp_path)]) == 2
    documents = json.loads(capsys.readouterr().out)
    assert [d["file"] for d in documents] == [str(tmp_path / n) for n in ("a.yaml", "b.yaml",
                                                                          "c.json")]
    assert documents[0]["created"] is True and documents[0]["job_id"]
    assert documents[1]["error"]["code"] == "INVALID_ARGUMENT"
    assert "tasks[0] (x).depends_on[0]: unknown dependency 'ghost'" in \
        documents[1]["error"]["message"]
    assert documents[2]["error"]["code"] == "ALREADY_EXISTS"  # the key of a.yaml, another spec
    assert documents[2]["error"]["message"].startswith(
        f"jobs[1] (file {tmp_path / 'c.json'}) idempotency key 'ka'")
    assert len(replica.node.state.jobs) == 1
    # Again: a.yaml is the same job (its key), nothing new is created.
    assert cli.main(["submit", "--json", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) \
        == 2
    again = json.loads(capsys.readouterr().out)
    assert (again[0]["job_id"], again[0]["created"]) == (documents[0]["job_id"], False)
    assert len(replica.node.state.jobs) == 1


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--watch"], "--watch follows one job"),
    (["--idempotency-key", "k"], "--idempotency-key names one job"),
])
def test_flags_of_one_job_are_refused_with_many_files(
        replica: Replica, capsys: pytest.CaptureFixture[str], tmp_path: Path,  # noqa: F811
        flags: list[str], fragment: str) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(SPEC)
    assert cli.main(["submit", *flags, str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]) == 2
    assert fragment in capsys.readouterr().err
    assert replica.node.state.jobs == {}


def test_a_directory_without_specs_is_refused(replica: Replica,  # noqa: F811
                                              capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    assert cli.main(["submit", str(tmp_path)]) == 2
    assert "no *.yaml, *.yml or *.json file in this directory" in capsys.readouterr().err
