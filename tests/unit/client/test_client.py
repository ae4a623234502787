"""The client's own decisions (raftsched.client.client), without a server."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.api import raftsched_pb2 as pb


def test_a_big_spec_gets_a_longer_submit_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job at the task limit took the leader ~10 s to parse, validate and commit: with the
    plain call timeout the client gave up (DEADLINE_EXCEEDED) and re-sent it all."""
    from raftsched.client import client as module

    seen: list[float | None] = []

    def call(self: Any, stub: Any, method: str, request: Any,
             timeout_s: float | None = None) -> Any:
        seen.append(timeout_s)
        return pb.SubmitJobResponse(job_id="j", created=True)

    monkeypatch.setattr(module.Client, "_call", call)
    small = "name: s\ntasks:\n  - {id: t, command: [\"true\"]}\n"
    tasks = ",".join(f'{{"id": "t{i}", "command": ["true"]}}' for i in range(40_000))
    big = f'{{"name": "b", "tasks": [{tasks}]}}'
    client = module.Client(["127.0.0.1:1"], timeout_s=1)
    client.submit(small)
    client.submit(big)
    assert seen[0] == 1
    assert seen[1] == pytest.approx(len(big) / 1e6 * module.SUBMIT_TIMEOUT_PER_MB_S)
    assert seen[1] > 4
