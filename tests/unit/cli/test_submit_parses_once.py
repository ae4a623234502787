"""One parse per submit (issue 24 item 2, issue 23 item 4): `raftsched submit FILE` parses and
validates the spec text once in the CLI and hands the client the parsed form (the client parses
nothing again); the leader's service decodes and validates the wire form once; and one rule
(`client.keys.submit_key`) makes the idempotency key, in the CLI and the client alike. Counted
with wrappers around the parsers, the replica an in-memory one (tests/unit/replica)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched.cli import common
from raftsched.cli import main as cli
from raftsched.client import client as client_module
from raftsched.spec import job as spec_job
from raftsched.spec import wire as spec_wire
from raftsched.spec.job import parse_spec_text
from tests.unit.cli.test_commands import Made, made  # noqa: F401  (a fixture)
from tests.unit.replica.test_service import FakeContext, Replica, make_replica

SPEC = """\
name: parsed-once
allow_unschedulable: true
tasks:
  - {id: a, command: ["true"]}
  - {id: b, command: ["true"], depends_on: [a]}
"""
WHERE = ["cli"]
"""Which side runs now: "cli" (the command and the client), or "service" (the replica)."""


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[tuple[str, str]]]:
    """Counts (side, parser) calls: the text loader, the document validator, the wire one."""
    counts: Counter[tuple[str, str]] = Counter()

    def counted(module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[(WHERE[0], name)] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(spec_job, "load_document")
    counted(spec_job, "validate_job_doc")
    counted(spec_wire, "validate_wire")  # decode_wire's (the state machine holds its own name)
    yield counts


@pytest.fixture
def replica(monkeypatch: pytest.MonkeyPatch, made: Made) -> Replica:  # noqa: F811
    """A real Client whose calls reach an in-memory replica's SchedulerService directly."""
    replica = make_replica()

    def call(self: Any, stub: Any, method: str, request: Any,
             timeout_s: float | None = None) -> Any:
        assert method in ("SubmitJob", "SubmitJobs")
        WHERE[0] = "service"
        try:
            return getattr(replica.scheduler, method)(request, FakeContext())
        finally:
            WHERE[0] = "cli"

    monkeypatch.setattr(client_module.Client, "_call", call)
    monkeypatch.setattr(common, "make_client",
                        lambda servers, timeout_s, tls_files=None, token=None:
                        client_module.Client(servers))
    return replica


ONCE_EACH_SIDE = {("cli", "load_document"): 1, ("cli", "validate_job_doc"): 1,
                  ("service", "validate_wire"): 1}


def test_raftsched_submit_parses_the_spec_once_on_each_side(
        replica: Replica, parses: Counter[tuple[str, str]],
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC)
    assert cli.main(["submit", str(tmp_path / "job.yaml")]) == 0
    out = capsys.readouterr().out
    assert dict(parses) == ONCE_EACH_SIDE
    (job,) = replica.node.state.jobs.values()
    key = job.spec.idempotency_key
    assert key is not None and key.startswith("auto-")  # the one fallback rule
    assert f"(new; idempotency key {key})" in out


def test_a_batch_of_files_parses_each_once_on_each_side(
        replica: Replica, parses: Counter[tuple[str, str]],
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for name in ("one.yaml", "two.yml", "three.json.txt"):
        (tmp_path / name).write_text(SPEC.replace("parsed-once", name.split(".")[0]))
    assert cli.main(["submit", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert dict(parses) == {key: 2 for key in ONCE_EACH_SIDE}  # three.json.txt is not a spec
    assert [line.split(":")[0] for line in out] == [str(tmp_path / "one.yaml"),
                                                    str(tmp_path / "two.yml")]
    assert all("submitted job" in line and "(new)" in line for line in out)
    assert len(replica.node.state.jobs) == 2
    assert replica.node.proposed[-1] == "JobSubmitBatch"


def test_the_client_parses_text_once_and_a_parsed_spec_not_at_all(
        replica: Replica, parses: Counter[tuple[str, str]]) -> None:
    client = client_module.Client(["127.0.0.1:1"])
    text = SPEC
    first = client.submit(text)
    assert dict(parses) == ONCE_EACH_SIDE
    parses.clear()
    spec = parse_spec_text(text)
    parses.clear()
    again = client.submit_spec(spec, idempotency_key=first.idempotency_key)
    assert dict(parses) == {("service", "validate_wire"): 1}
    assert (again.job_id, again.created) == (first.job_id, False)


def test_one_rule_makes_the_key_for_the_cli_and_the_client() -> None:
    from raftsched.cli import submit
    from raftsched.client.keys import submit_key

    spec = parse_spec_text(SPEC)
    keyed = parse_spec_text(SPEC + "idempotency_key: mine\n")
    for make in (submit_key, submit._idempotency_key):
        assert make("given", keyed) == "given" and make(None, keyed) == "mine"
        made_once = make(None, spec)
        assert made_once.startswith("auto-") and len(made_once) == len("auto-") + 32
        assert make(None, spec) != made_once  # fresh per submit
