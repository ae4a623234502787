"""The console's clusters, tenants, drain actions and task page in process (Starlette's
TestClient, a fake scheduler client), and the figures those pages show (`web.capacity`). The
browser tests (tests/integration/test_web_console.py) cover the same against a real cluster."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.web import capacity, output
from raftsched.web.app import build_app
from raftsched.web.console import Options
from tests.support.web import csrf_of
from tests.unit.test_web_app import OPERATOR, USER, FakeClient

ADMIN = "rst_" + "3" * 16 + "_" + "a" * 30
NOW_MS = 1_000_000


def _cluster(cluster_id: str, **fields: Any) -> pb.ComputeCluster:
    values: dict[str, Any] = {"status": "READY", "live_attempts": 2, **fields}
    return pb.ComputeCluster(
        cluster_id=cluster_id, capacity=pb.Resources(cpu_milli=4000, memory_mb=8000, gpu=0),
        reserved=pb.Resources(cpu_milli=1000, memory_mb=2000, gpu=0), **values)


CLUSTERS = [
    _cluster("east", reported_free=pb.Resources(cpu_milli=2500, memory_mb=6000, gpu=0),
             heartbeat_age_ms=300, queue_depth=2, queued=1),
    _cluster("west", draining=True, drain_reason="disk swap", heartbeat_age_ms=200,
             reported_free=pb.Resources(cpu_milli=3000, memory_mb=6000, gpu=0),
             custom={"licence": 4}, custom_reserved={"licence": 1}),
]


class OperatorsClient(FakeClient):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.drained: list[tuple[str, bool, str]] = []
        self.task_state = "RUNNING"
        self.explained = 0

    def _known(self, token: str) -> None:
        if self.token not in (USER, OPERATOR, ADMIN):
            raise RaftschedError(Code.UNAUTHENTICATED, "unknown token")

    def list_tenants(self) -> Any:
        if self.token == USER:
            raise RaftschedError(Code.PERMISSION_DENIED, "needs operator")
        return pb.ListTenantsResponse(tenants=[
            pb.TenantInfo(tenant="a", weight=1, queued=3, running=1, dominant_share=0.5),
            pb.TenantInfo(tenant="b", weight=3, queued=0, running=2, dominant_share=0.1),
            pb.TenantInfo(tenant="idle", weight=5)], queued_total=3, max_queued_tasks=100)

    def list_tokens(self) -> Any:
        if self.token != ADMIN:
            raise RaftschedError(Code.PERMISSION_DENIED, "needs admin")
        return pb.ListTokensResponse()

    def cluster_status(self, server: str | None = None, *, include_digest: bool = False) -> Any:
        return pb.ClusterStatusResponse(leader="r1", responder="r1", term=3, now_ms=NOW_MS,
                                        clusters=CLUSTERS)

    def drain_cluster(self, cluster_id: str, drain: bool, reason: str = "") -> Any:
        if self.token != ADMIN:
            raise RaftschedError(Code.PERMISSION_DENIED, "needs admin")
        self.drained.append((cluster_id, drain, reason))
        return pb.DrainClusterResponse(cluster_id=cluster_id, draining=drain, changed=True)

    def task_history(self, job_id: str, task_id: str) -> Any:
        self.get_job(job_id)
        return pb.TaskHistory(job_id=job_id, task_id=task_id, state=self.task_state)

    def explain(self, job_id: str, task_id: str) -> Any:
        self.explained += 1
        return pb.ExplainTaskResponse(summary="waits for a cluster with room")

    def task_logs(self, job_id: str, task_id: str, *, attempt: int = 0, stream: str = "stdout",
                  follow: bool = False, tail_bytes: int = 0, offset: int = 0,
                  on_stream: Any = None) -> Iterator[Any]:
        if self.task_state == "RUNNABLE":
            raise RaftschedError(Code.FAILED_PRECONDITION, f"task {task_id} has not run")
        state = "RUNNING" if self.task_state == "RUNNING" else "SUCCEEDED"
        yield pb.TaskLogsChunk(attempt=1, fence=7, cluster_id="east", attempt_state=state)
        text = "first line\né second\n".encode()
        if not follow:
            yield pb.TaskLogsChunk(data=text[:11], offset=0)
            return
        assert offset == 11, offset
        yield pb.TaskLogsChunk(data=text[11:12], offset=11)  # half of "é"
        yield pb.TaskLogsChunk(data=text[12:], offset=12)


@pytest.fixture
def made() -> list[OperatorsClient]:
    return []


def _signed_in(made: list[OperatorsClient], token: str, read_only: bool = False) -> TestClient:
    def make(token: str) -> OperatorsClient:
        made.append(OperatorsClient(token))
        return made[-1]
    browser = TestClient(build_app(Options(make_client=make, read_only=read_only)),
                         base_url="https://console.test", follow_redirects=False)
    assert browser.post("/login", data={"token": token}).status_code == 303
    return browser


# --- the figures --------------------------------------------------------------------------------


def test_unusable_capacity_is_the_gap_on_an_open_cluster_and_all_free_room_on_a_closed_one(
        ) -> None:
    east, west = capacity.cluster_rows(CLUSTERS, NOW_MS)
    cpu = east.resources[0]
    assert (cpu.name, cpu.capacity, cpu.committed, cpu.committed_free) == ("cpu", 4000, 1000,
                                                                             3000)
    assert (cpu.reported_free, cpu.unusable) == (2500, 500)  # 3000 free by the books, 2500 said
    assert [r.name for r in east.resources] == ["cpu", "memory"]  # no gpu: none offered
    assert east.closed_because == () and west.closed_because == ("draining",)
    assert [(r.name, r.unusable) for r in west.resources] == [
        ("cpu", 3000), ("memory", 6000), ("licence", 3)]
    assert west.resources[2].reported_free is None  # heartbeats carry no custom resource
    bar = cpu.bar
    assert bar.committed_px + bar.unusable_px + bar.free_px == capacity.BAR_PX
    assert (bar.committed_px, bar.unusable_px) == (40, 20)


def test_a_followers_answer_has_no_reported_free_and_unknown_unusable_room() -> None:
    follower = _cluster("east")  # reported_free unset
    (row,) = capacity.cluster_rows([follower], NOW_MS)
    assert row.resources[0].reported_free is None and row.resources[0].unusable is None
    assert row.resources[0].show(None) == "unknown"
    lost = _cluster("lost", status="LOST")
    degraded = _cluster("slow", degraded_until_ms=NOW_MS + 1)
    assert capacity.cluster_rows([lost, degraded], NOW_MS)[0].closed_because == ("LOST",)
    assert capacity.cluster_rows([lost, degraded], NOW_MS)[1].resources[0].unusable == 3000


def test_fair_share_is_weight_over_the_weights_of_tenants_with_work() -> None:
    a, b, idle = capacity.tenant_rows(OperatorsClient(OPERATOR).list_tenants().tenants)
    assert (a.fair_share, b.fair_share, idle.fair_share) == (0.25, 0.75, None)
    assert (a.share, b.share) == (0.5, pytest.approx(0.3))
    assert (a.standing, b.standing, idle.standing) == ("over", "under", "")
    assert capacity.standing(0.26, 0.25) == "at"


# --- the pages and actions ----------------------------------------------------------------------


def test_roles_are_found_at_sign_in_and_only_an_admin_is_offered_drain(
        made: list[OperatorsClient]) -> None:
    admin = _signed_in(made, ADMIN).get("/clusters").text
    assert "role: admin" in admin
    assert 'href="/clusters/east/drain"' in admin and 'href="/clusters/west/undrain"' in admin
    assert "2.5 CPU" in admin and "unknown" in admin  # east's reported cpu; west's licence
    operator = _signed_in(made, OPERATOR).get("/clusters").text
    assert "role: operator" in operator and "/drain" not in operator
    read_only = _signed_in(made, ADMIN, read_only=True).get("/clusters").text
    assert "/drain" not in read_only
    assert _signed_in(made, USER).get("/clusters").status_code == 403


def test_an_admin_drains_after_a_confirmation_naming_the_cluster(
        made: list[OperatorsClient]) -> None:
    browser = _signed_in(made, ADMIN)
    page = browser.get("/clusters/east/drain").text
    assert "Drain cluster <code>east</code>?" in page
    assert '<strong id="live-attempts">2</strong> live attempts keep running' in page
    assert browser.post("/clusters/east/drain", data={"csrf": "forged"}).status_code == 403
    assert made[-1].drained == []
    answer = browser.post("/clusters/east/drain", data={"csrf": csrf_of(page), "reason": "fix"})
    assert (answer.status_code, answer.headers["location"]) == (303, "/clusters")
    assert made[-1].drained == [("east", True, "fix")]
    assert browser.get("/clusters/east/undrain").status_code == 409  # not draining (the fake)
    page = browser.get("/clusters/west/undrain").text
    assert "Undrain cluster <code>west</code>?" in page and "disk swap" in page
    browser.post("/clusters/west/undrain", data={"csrf": csrf_of(page)})
    assert made[-1].drained[-1] == ("west", False, "")
    assert browser.get("/clusters/nowhere/drain").status_code == 404


def test_others_are_refused_drain_even_with_the_right_csrf_token(
        made: list[OperatorsClient]) -> None:
    for token, read_only in ((OPERATOR, False), (USER, False), (ADMIN, True)):
        browser = _signed_in(made, token, read_only)
        assert browser.get("/clusters/east/drain").status_code == 403
        csrf = csrf_of(browser.get("/jobs").text)
        answer = browser.post("/clusters/east/drain", data={"csrf": csrf})
        assert answer.status_code == 403, token
        assert made[-1].drained == []


def test_the_tenants_page_shows_fair_share_and_standing(made: list[OperatorsClient]) -> None:
    page = _signed_in(made, OPERATOR).get("/tenants").text
    assert '<tr data-tenant="a" data-standing="over">' in page
    assert '<tr data-tenant="b" data-standing="under">' in page
    assert '<tr data-tenant="idle" data-standing="">' in page
    assert "25.0 %" in page and "75.0 %" in page and "sum of the weights" in page


def test_why_not_running_is_shown_only_while_the_task_is_not_finished(
        made: list[OperatorsClient]) -> None:
    browser = _signed_in(made, USER)
    running = browser.get("/jobs/j1/tasks/b").text
    assert "Where it runs" in running and made[-1].explained == 1
    assert 'data-output="/jobs/j1/tasks/b/output/live?stream=stdout&amp;attempt=1&amp;offset=11"' \
        in running and "/static/task.js" in running
    made[-1].task_state = "SUCCEEDED"
    finished = browser.get("/jobs/j1/tasks/b").text
    assert "Why not running" not in finished and made[-1].explained == 1
    assert 'data-output=""' in finished and 'data-watch=""' in finished
    assert "first line" in finished
    made[-1].task_state = "RUNNABLE"  # never ran: the page watches the job for its start
    waiting = browser.get("/jobs/j1/tasks/b").text
    assert 'data-output=""' in waiting and 'data-watch="/jobs/j1/events"' in waiting
    assert "No output: the task has not run." in waiting and "Why not running" in waiting


def test_the_live_output_stream_sends_each_piece_then_says_the_attempt_ended(
        made: list[OperatorsClient]) -> None:
    browser = _signed_in(made, USER)
    with browser.stream("GET", "/jobs/j1/tasks/b/output/live?attempt=1&offset=11") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        text = answer.read().decode()
    assert '"next": 11}' not in text  # half a character waits for its rest
    assert 'data: {"text": "\\u00e9 second\\n", "next": 21}' in text
    assert text.rstrip().endswith("event: ended\ndata: {}")
    for query in ("attempt=0&offset=1", "attempt=1&offset=-1", "attempt=1&offset=1&stream=x"):
        assert browser.get(f"/jobs/j1/tasks/b/output/live?{query}").status_code == 400, query
    assert browser.get("/jobs/nope/tasks/b/output/live?attempt=1&offset=0").status_code == 404


def test_a_closed_live_output_page_cancels_its_follow_and_frees_its_slot() -> None:
    """A silent attempt's follow must not outlive its page (it holds a replica's stream slot)."""
    cancelled = threading.Event()

    class Call:
        def cancel(self) -> bool:
            cancelled.set()
            return True

    class Silent:
        def task_logs(self, *args: Any, on_stream: Any = None, **kwargs: Any) -> Iterator[Any]:
            on_stream(Call())
            yield pb.TaskLogsChunk(attempt=1, attempt_state="RUNNING")
            assert cancelled.wait(10), "never cancelled"
            raise RaftschedError(Code.DEADLINE_EXCEEDED, "the call was cancelled")

    async def open_then_close() -> threading.Thread:
        follower = output._Follower(asyncio.get_running_loop())
        assert output._open_streams.acquire(blocking=False)  # as `live` does
        thread = threading.Thread(target=follower.run, daemon=True,
                                  args=(Silent(), "j1", "b", "stdout", 1, 0))
        thread.start()
        events = output._events(follower)
        with pytest.raises(TimeoutError):  # nothing to send: the page closes meanwhile
            await asyncio.wait_for(events.__anext__(), 0.3)
        return thread

    thread = asyncio.run(open_then_close())
    thread.join(10)
    assert cancelled.is_set() and not thread.is_alive()
    taken = [output._open_streams.acquire(blocking=False)
             for _ in range(limits.WEB_LIVE_MAX_STREAMS)]
    assert all(taken)  # every slot is free again
    for _ in taken:
        output._open_streams.release()


def test_the_clusters_page_says_what_each_agent_holds_in_its_queue(
        made: list[OperatorsClient]) -> None:
    """Late binding: a cluster whose agent has a queue says how many live attempts wait in it;
    one without a queue says nothing of it."""
    east, west = capacity.cluster_rows(CLUSTERS, NOW_MS)
    assert (east.queued, east.queue_depth, west.queue_depth) == (1, 2, 0)
    page = _signed_in(made, ADMIN).get("/clusters").text
    assert page.count("queued at its agent") == 1
    assert "1 of 2 queued at its agent" in page
