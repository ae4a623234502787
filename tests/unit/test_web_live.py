"""A live job page's stream (`raftsched.web.live._stream`) against a fake client: the follower
of the job's events may end (the job ended) while a snapshot is being taken; that snapshot may
predate the end, so the stream must take one more before it says `end` — never a last page
showing RUNNING for a job that has ended."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from raftsched.api import raftsched_pb2 as pb
from raftsched.web import live


class Racing:
    """The first GetJob runs while the follower sees the job's end (it ends and marks the
    page, as `_Dirty.follow` does); that read still shows RUNNING, later ones SUCCEEDED."""

    def __init__(self) -> None:
        self.dirty: Any = None
        self.gets = 0

    def get_job(self, job_id: str) -> Any:
        self.gets += 1
        if self.gets == 1:
            self.dirty.ended = True
            self.dirty.mark()
            return pb.Job(job_id=job_id, state="RUNNING", tasks={"RUNNING": 1})
        return pb.Job(job_id=job_id, state="SUCCEEDED", tasks={"SUCCEEDED": 1})

    def list_tasks(self, job_id: str) -> Any:
        state = "RUNNING" if self.gets == 1 else "SUCCEEDED"
        return pb.ListTasksResponse(job_id=job_id, tasks=[pb.TaskSummary(task_id="a",
                                                                         state=state)])


def test_a_follower_ending_during_a_snapshot_gets_one_more_before_the_end() -> None:
    client = Racing()

    async def streamed() -> list[str]:
        dirty = live._Dirty(asyncio.get_running_loop())
        client.dirty = dirty
        dirty.mark()  # the stream's first event
        return [chunk async for chunk in live._stream(client, "j", dirty)]  # type: ignore[arg-type]

    chunks = asyncio.run(asyncio.wait_for(streamed(), 30))
    kinds = [chunk.split("\n", 1)[0] for chunk in chunks]
    assert kinds == ["event: tasks", "event: tasks", "event: end"], chunks
    last = json.loads(chunks[1].split("data: ", 1)[1])
    assert last["job_state"] == "SUCCEEDED" and last["tasks"] == {"a": "SUCCEEDED"}
