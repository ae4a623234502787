"""The live job page's document (raftsched/web/live.py `document_of`): the header, the listed
tasks only, a collapsed graph's group counts recomputed from layers computed once."""

from __future__ import annotations

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.web import live


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
