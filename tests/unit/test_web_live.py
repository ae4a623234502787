"""The live job page's document (raftsched/web/live.py `document_of`): the header, the listed
tasks only, a collapsed graph's group counts recomputed from layers computed once. And its
stream against a fake client: the job's end may be seen while a snapshot is being taken; that
snapshot may predate the end, so the stream must take one more before it says `end` — never a
last page showing RUNNING for a job that has ended."""

from __future__ import annotations

import asyncio
import json
import queue
import time
from collections.abc import Iterator
from typing import Any

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.web import live
from raftsched.web.hub import EventHub


def _listed(count: int, state: str = "RUNNING") -> pb.ListTasksResponse:
    tasks = [pb.TaskSummary(task_id="root", state="SUCCEEDED", attempts=1)] + [
        pb.TaskSummary(task_id=f"t{i}", state=state, depends_on=["root"])
        for i in range(count - 1)]
    return pb.ListTasksResponse(job_id="j", tasks=tasks, applied_index=9)


JOB = pb.Job(job_id="j", state="SUCCEEDED", reason="", total_tasks=3, started_ms=1_000,
             finished_ms=61_000, tasks={"SUCCEEDED": 3})


def test_the_header_has_its_state_times_and_progress() -> None:
    document = live.document_of(JOB, _listed(3, "SUCCEEDED"), [])
    assert document["job"] == {"state": "SUCCEEDED", "reason": "",
                               "started": "1970-01-01 00:00:01 UTC",
                               "finished": "1970-01-01 00:01:01 UTC", "done": 3, "total": 3}
    assert document["index"] == 9 and "groups" not in document


def test_a_collapsed_graph_gets_its_group_counts_and_the_layers_are_kept() -> None:
    count = limits.WEB_GRAPH_MAX_NODES + 10
    layers: list[list[str]] = []
    document = live.document_of(JOB, _listed(count), layers)
    assert document["groups"] == [["SUCCEEDED", [["SUCCEEDED", 1]]],
                                  ["RUNNING", [["RUNNING", count - 1]]]]
    assert len(layers) == 2  # computed once, reused at the next change
    tasks = document["tasks"]
    assert isinstance(tasks, dict) and len(tasks) == limits.WEB_TASK_TABLE_MAX_ROWS
    again = live.document_of(JOB, _listed(count, "FAILED"), layers)
    assert again["groups"] == [["SUCCEEDED", [["SUCCEEDED", 1]]],
                               ["FAILED", [["FAILED", count - 1]]]]


def test_the_attempts_version_moves_when_an_attempt_is_made_starts_or_ends_only() -> None:
    def version(*tasks: tuple[str, int]) -> str:
        return live.attempts_version([pb.TaskSummary(task_id=f"t{i}", state=state, attempts=n)
                                      for i, (state, n) in enumerate(tasks)])

    waiting = version(("RUNNABLE", 0), ("PENDING", 0))
    assigned = version(("ASSIGNED", 1), ("PENDING", 0))
    running = version(("RUNNING", 1), ("PENDING", 0))
    retried = version(("RETRY_WAIT", 1), ("PENDING", 0))
    again = version(("RUNNING", 2), ("PENDING", 0))
    assert len({waiting, assigned, running, retried, again}) == 5
    assert version(("RUNNING", 1), ("PENDING", 0)) == running  # nothing moved: no refetch
    assert live.document_of(JOB, _listed(3), [])["attempts_version"] == "1:RUNNING=2,SUCCEEDED=1"


WAIT_S = 10.0


class Racing:
    """The first GetJob runs while the hub sees the job's end (a terminal job event, which
    marks the page); that read still shows RUNNING, later ones SUCCEEDED."""

    def __init__(self) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.hub = EventHub(self, "test")
        self.gets = 0

    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]:
        while True:
            yield self.events.get(timeout=WAIT_S)

    def get_job(self, job_id: str) -> Any:
        self.gets += 1
        if self.gets == 1:
            self.events.put(pb.Event(index=5, kind="job", job_id=job_id, state="SUCCEEDED"))
            deadline = time.monotonic() + WAIT_S
            while self.hub.index < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            return pb.Job(job_id=job_id, state="RUNNING", tasks={"RUNNING": 1})
        return pb.Job(job_id=job_id, state="SUCCEEDED", tasks={"SUCCEEDED": 1})

    def list_tasks(self, job_id: str) -> Any:
        state = "RUNNING" if self.gets == 1 else "SUCCEEDED"
        return pb.ListTasksResponse(job_id=job_id, tasks=[pb.TaskSummary(task_id="a",
                                                                         state=state)])


def test_an_end_seen_during_a_snapshot_gets_one_more_before_the_end() -> None:
    client = Racing()

    async def streamed() -> list[str]:
        return [chunk async for chunk in
                live._stream(client, client.hub, "j")]  # type: ignore[arg-type]

    chunks = asyncio.run(asyncio.wait_for(streamed(), 30))
    client.hub.close()
    client.events.put(pb.Event(index=6, kind="progress"))
    kinds = [chunk.split("\n", 1)[0] for chunk in chunks]
    assert kinds == ["event: tasks", "event: tasks", "event: end"], chunks
    last = json.loads(chunks[1].split("data: ", 1)[1])
    assert last["job_state"] == "SUCCEEDED" and last["tasks"] == {"a": "SUCCEEDED"}
