"""The client's own decisions (raftsched.client.client), without a server."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.api import raftsched_pb2 as pb
from raftsched.spec.job import parse_spec_text
from raftsched.spec.wire import decode_wire, pack_wire


def test_a_big_spec_gets_a_longer_submit_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job at the task limit took the leader ~10 s to parse, validate and commit: with the
    plain call timeout the client gave up (DEADLINE_EXCEEDED) and re-sent it all."""
    from raftsched.client import client as module

    seen: list[float | None] = []
    requests: list[Any] = []

    def call(self: Any, stub: Any, method: str, request: Any,
             timeout_s: float | None = None) -> Any:
        seen.append(timeout_s)
        requests.append(request)
        return pb.SubmitJobResponse(job_id="j", created=True)

    monkeypatch.setattr(module.Client, "_call", call)
    small = "name: s\ntasks:\n  - {id: t, command: [\"true\"]}\n"
    tasks = ",".join(f'{{"id": "t{i}", "command": ["true"]}}' for i in range(40_000))
    big = f'{{"name": "b", "tasks": [{tasks}]}}'
    client = module.Client(["127.0.0.1:1"], timeout_s=1)
    client.submit(small)
    client.submit(big)
    assert seen[0] == 1
    wire = requests[1].spec_wire
    assert seen[1] == pytest.approx(len(wire) / 1e6 * module.SUBMIT_TIMEOUT_PER_MB_S)
    assert seen[1] > 4


def test_the_client_sends_the_wire_form_of_the_spec_it_validated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The replicas parse no document the client could parse itself: a YAML file goes as its
    wire form (`spec_wire`), the same bytes whether given as text or as a validated spec."""
    from raftsched.client import client as module

    requests: list[Any] = []

    def call(self: Any, stub: Any, method: str, request: Any,
             timeout_s: float | None = None) -> Any:
        requests.append(request)
        return pb.SubmitJobResponse(job_id="j", created=True)

    monkeypatch.setattr(module.Client, "_call", call)
    text = "name: s\nidempotency_key: k\ntasks:\n  - {id: t, command: [\"true\"]}\n"
    client = module.Client(["127.0.0.1:1"])
    client.submit(text)
    client.submit_spec(parse_spec_text(text))
    first, second = requests
    assert first.spec == "" and first.idempotency_key == "k"
    assert first.spec_wire == second.spec_wire == pack_wire(parse_spec_text(text))
    assert decode_wire(first.spec_wire) == parse_spec_text(text)


def test_submit_jobs_keys_each_job_once_and_splits_calls_at_the_bounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`submit_jobs`: each job its key (given, the spec's, else a fresh `auto-` one made before
    the first try), calls of at most MAX_BATCH_JOBS jobs, answers in order, a refusal as the
    job's RaftschedError."""
    from raftsched import limits
    from raftsched.client import client as module
    from raftsched.errors import Code, RaftschedError

    monkeypatch.setattr(limits, "MAX_BATCH_JOBS", 2)
    calls: list[Any] = []

    def call(self: Any, stub: Any, method: str, request: Any,
             timeout_s: float | None = None) -> Any:
        assert method == "SubmitJobs"
        calls.append(request)
        answers = [pb.SubmitJobsAnswer(code="INVALID_ARGUMENT", message=f"{job.label} bad")
                   if job.label == "refuse me" else
                   pb.SubmitJobsAnswer(job_id=f"j-{job.idempotency_key}", created=True)
                   for job in request.jobs]
        return pb.SubmitJobsResponse(answers=answers)

    monkeypatch.setattr(module.Client, "_call", call)
    plain = parse_spec_text("name: s\ntasks:\n  - {id: t, command: [\"true\"]}\n")
    keyed = parse_spec_text("name: s\nidempotency_key: mine\ntasks:\n  - {id: t, command: "
                            "[\"true\"]}\n")
    results = module.Client(["127.0.0.1:1"]).submit_jobs(
        [plain, keyed, plain], keys=["given"], labels=["", "", "refuse me"])
    assert [len(request.jobs) for request in calls] == [2, 1]
    assert [r.idempotency_key for r in results[:2] if isinstance(r, module.Submitted)] == [
        "given", "mine"]
    assert isinstance(results[2], RaftschedError) and results[2].code == Code.INVALID_ARGUMENT
    assert results[2].message == "refuse me bad"
    assert calls[1].jobs[0].idempotency_key.startswith("auto-")
