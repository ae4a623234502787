"""The console's HTTP surface in process (Starlette's TestClient, a fake scheduler client):
sign-in and its cookie, CSRF, roles, read-only, bounds and clean error pages. The browser tests
(tests/integration/test_web_console.py) cover the same against a real cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.web.app import build_app
from raftsched.web.console import COOKIE, Options
from tests.support.web import csrf_of

USER, OPERATOR = "rst_" + "1" * 16 + "_" + "u" * 30, "rst_" + "2" * 16 + "_" + "o" * 30
JOB = pb.Job(job_id="j1", name="demo", tenant="t", state="RUNNING", total_tasks=2,
             tasks={"RUNNING": 1, "SUCCEEDED": 1})
T0 = 1_700_000_000_000
TASKS = pb.ListTasksResponse(job_id="j1", applied_index=42, tasks=[
    pb.TaskSummary(task_id="a", state="SUCCEEDED", attempts=1, spans=[
        pb.AttemptSpan(fence=1, number=1, cluster="east", state="SUCCEEDED", assigned_ms=T0,
                       started_ms=T0 + 10, finished_ms=T0 + 1_000)]),
    pb.TaskSummary(task_id="b", state="RUNNING", attempts=1, depends_on=["a"], spans=[
        pb.AttemptSpan(fence=2, number=1, cluster="west", state="RUNNING",
                       assigned_ms=T0 + 1_000, started_ms=T0 + 1_100)]),
    pb.TaskSummary(task_id="c", state="FAILED", attempts=2, depends_on=["a"], exit_code=3,
                   reason="<b>exit 3</b> after 2 attempts", spans=[
        pb.AttemptSpan(fence=3, number=1, cluster="east", state="FAILED",
                       assigned_ms=T0 + 1_000, started_ms=T0 + 1_050, finished_ms=T0 + 2_000),
        pb.AttemptSpan(fence=4, number=2, cluster="east", state="FAILED",
                       assigned_ms=T0 + 2_500, started_ms=T0 + 2_600, finished_ms=T0 + 3_000)])])


class FakeClient:
    def __init__(self, token: str) -> None:
        self.token = token
        self.cancelled: list[str] = []
        self.listed: list[dict[str, Any]] = []

    def _known(self, token: str) -> None:
        if self.token not in (USER, OPERATOR):
            raise RaftschedError(Code.UNAUTHENTICATED, "unknown token")

    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", *, query: str = "", newest_first: bool = False) -> Any:
        self._known(self.token)
        self.listed.append({"tenant": tenant, "state": state, "page_token": page_token,
                            "query": query, "newest_first": newest_first})
        counts = {"RUNNING": 1, "FAILED": 3}
        if query.strip() in ("nothing", "j1") or state == "FAILED":  # j1: older than a search
            return pb.ListJobsResponse(state_counts=counts)
        return pb.ListJobsResponse(jobs=[JOB], next_page_token="n7", state_counts=counts)

    def list_tenants(self) -> Any:
        if self.token != OPERATOR:
            raise RaftschedError(Code.PERMISSION_DENIED, "needs operator")
        return pb.ListTenantsResponse()

    def list_tokens(self) -> Any:
        raise RaftschedError(Code.PERMISSION_DENIED, "needs admin")

    def get_job(self, job_id: str) -> Any:
        if job_id != "j1":
            raise RaftschedError(Code.NOT_FOUND, f"no job {job_id}")
        return JOB

    def list_tasks(self, job_id: str, with_spans: bool = False) -> Any:
        self.get_job(job_id)
        if with_spans:
            return TASKS
        plain = pb.ListTasksResponse()
        plain.CopyFrom(TASKS)
        for task in plain.tasks:
            del task.spans[:]
        return plain

    def cancel(self, job_id: str, reason: str = "") -> Any:
        self.cancelled.append(job_id)
        return pb.Job()

    def cluster_status(self, server: str | None = None, *, include_digest: bool = False) -> Any:
        return pb.ClusterStatusResponse(leader="r1", term=3)

    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]:
        # The console's hub follows every job (job_id ""): these are j1's.
        yield pb.Event(index=7, kind="progress")
        yield pb.Event(index=8, kind="task", job_id=job_id or "j1", task_id="b", state="RUNNING")
        yield pb.Event(index=9, kind="job", job_id=job_id or "j1", state="SUCCEEDED")

    def close(self) -> None:
        pass


@pytest.fixture
def made() -> list[FakeClient]:
    return []


def _app(made: list[FakeClient], read_only: bool = False) -> TestClient:
    def make(token: str) -> FakeClient:
        made.append(FakeClient(token))
        return made[-1]
    app = build_app(Options(make_client=make, read_only=read_only))
    return TestClient(app, base_url="https://console.test", follow_redirects=False)


def _signed_in(made: list[FakeClient], token: str, read_only: bool = False) -> TestClient:
    browser = _app(made, read_only)
    answer = browser.post("/login", data={"token": token})
    assert answer.status_code == 303, answer.text
    return browser


def test_sign_in_sets_a_strict_httponly_secure_cookie_holding_no_token(
        made: list[FakeClient]) -> None:
    browser = _app(made)
    answer = browser.post("/login", data={"token": USER})
    cookie = answer.headers["set-cookie"]
    assert answer.headers["location"] == "/jobs"
    for flag in ("HttpOnly", "Secure", "SameSite=strict"):
        assert flag.lower() in cookie.lower()
    assert USER not in cookie and USER[-30:] not in cookie


def test_a_bad_token_is_refused_on_the_login_page(made: list[FakeClient]) -> None:
    answer = _app(made).post("/login", data={"token": "rst_nope"})
    assert answer.status_code == 401 and "not valid" in answer.text
    assert COOKIE not in answer.headers.get("set-cookie", "")


def test_without_a_session_every_page_sends_to_sign_in(made: list[FakeClient]) -> None:
    browser = _app(made)
    for path in ("/jobs", "/jobs/j1", "/jobs/j1/events", "/clusters", "/jobs/j1/tasks/a"):
        answer = browser.get(path)
        assert (answer.status_code, answer.headers["location"]) == (303, "/login"), path


def test_the_job_page_draws_every_task_as_a_node_with_its_state(made: list[FakeClient]) -> None:
    page = _signed_in(made, USER).get("/jobs/j1").text
    assert 'data-task-id="a" data-state="SUCCEEDED"' in page
    assert 'data-task-id="b" data-state="RUNNING"' in page
    assert page.count('<polyline class="edge"') == 2  # a -> b, a -> c
    failures = page.split('<ul class="failures">')[1].split("</ul>")[0]
    assert "(exit 3): &lt;b&gt;exit 3&lt;/b&gt; after 2 attempts" in failures  # escaped
    assert 'data-task-id="a"' not in failures and 'data-task-id="b"' not in failures
    assert "Cancel this job" in page


def test_jobs_asks_newest_first_with_the_urls_filters_and_shows_tabs_keeping_them(
        made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    page = browser.get("/jobs", params={"tenant": "t", "q": "<b>x&y</b>"}).text
    assert made[-1].listed[-1] == {"tenant": "t", "state": "", "page_token": "",
                                   "query": "<b>x&y</b>", "newest_first": True}
    assert "<b>x&y</b>" not in page and "&lt;b&gt;x&amp;y&lt;/b&gt;" in page
    assert 'href="/jobs?tenant=t&amp;state=FAILED&amp;q=%3Cb%3Ex%26y%3C%2Fb%3E"' in page
    assert 'data-tab="FAILED" data-count="3"' in page and 'data-tab="ALL" data-count="4"' in page
    assert 'href="/jobs?tenant=t&amp;q=%3Cb%3Ex%26y%3C%2Fb%3E&amp;page=n7" rel="next"' in page
    assert 'rel="first"' not in page  # the first page already
    older = browser.get("/jobs", params={"q": "a", "page": "n7"}).text
    assert made[-1].listed[-1]["page_token"] == "n7"
    assert 'href="/jobs?q=a" rel="first"' in older


def test_a_search_for_an_exact_job_id_links_the_job_even_when_the_page_misses_it(
        made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    page = browser.get("/jobs", params={"q": " j1 "}).text  # pasted with spaces
    assert 'data-exact-job="j1"' in page and 'href="/jobs/j1"' in page
    assert 'data-exact-job' not in browser.get("/jobs", params={"q": "j2"}).text  # no such job
    assert 'data-exact-job' not in browser.get("/jobs", params={"q": "../x"}).text  # not an id
    assert 'data-exact-job' not in browser.get("/jobs", params={"q": "demo"}).text  # listed


def test_jobs_says_which_filter_matched_nothing(made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    page = browser.get("/jobs", params={"tenant": "t", "q": "nothing"}).text
    assert "No job matches tenant “t”, id or name containing “nothing”." in page
    page = browser.get("/jobs", params={"state": "FAILED"}).text
    assert "No job matches state FAILED." in page
    assert 'aria-current="page"><span class="state" data-state="FAILED">FAILED</span> 3' in page


def test_the_job_page_has_a_timeline_bar_per_attempt_and_serves_it_alone(
        made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    for page in (browser.get("/jobs/j1").text, browser.get("/jobs/j1/timeline").text):
        bars = page.count('<rect class="bar" x=')
        assert bars == 4, page  # c's two attempts are two bars
        assert 'data-task-id="c" data-attempt="2" data-fence="4" data-cluster="east" ' \
               'data-state="FAILED"' in page
        assert page.count('class="lane"') == 2  # east, west
        assert "c attempt 2 (fence 4) on east: FAILED" in page
    assert 'id="timeline" data-src="/jobs/j1/timeline"' in browser.get("/jobs/j1").text
    assert browser.get("/jobs/nope/timeline").status_code == 404


def test_read_only_hides_and_refuses_cancel(made: list[FakeClient]) -> None:
    browser = _signed_in(made, OPERATOR, read_only=True)
    page = browser.get("/jobs/j1").text
    assert "Cancel this job" not in page
    answer = browser.post("/jobs/j1/cancel", data={"csrf": csrf_of(page)})
    assert answer.status_code == 403 and made[-1].cancelled == []


def test_cancel_needs_the_sessions_csrf_token(made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    page = browser.get("/jobs/j1/cancel").text
    assert "affects <strong id=\"affected\">1</strong>" in page
    assert browser.post("/jobs/j1/cancel", data={}).status_code == 403
    assert browser.post("/jobs/j1/cancel", data={"csrf": "forged"}).status_code == 403
    assert made[-1].cancelled == []
    answer = browser.post("/jobs/j1/cancel", data={"csrf": csrf_of(page)})
    assert answer.status_code == 303 and made[-1].cancelled == ["j1"]


def test_a_user_gets_a_clean_403_on_operator_pages(made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    for path in ("/clusters", "/replicas", "/tenants"):
        answer = browser.get(path)
        assert answer.status_code == 403 and "operators" in answer.text
    assert "Clusters" not in browser.get("/jobs").text.split("<main>")[0]
    assert _signed_in(made, OPERATOR).get("/replicas").status_code == 200


def test_bad_input_gets_a_clean_4xx_page(made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    assert browser.get("/jobs/nope").status_code == 404
    assert browser.get("/jobs/" + "x" * 1000).status_code == 404
    assert browser.get("/jobs/%2e%2e%2fetc").status_code == 404
    assert browser.get("/jobs?state=BOGUS").status_code == 400
    assert browser.get("/jobs/j1/tasks/a?stream=../../etc").status_code == 400
    huge = browser.get("/jobs?tenant=" + "a" * 60_000)  # httpx sends 64 KiB at most
    assert huge.status_code == 414
    big_form = browser.post("/login", content=b"token=" + b"a" * 100_000,
                            headers={"content-type": "application/x-www-form-urlencoded"})
    assert big_form.status_code == 413
    for answer in (browser.get("/jobs/nope"), big_form):
        assert "Traceback" not in answer.text


def test_logout_ends_the_session(made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    page = browser.get("/jobs").text
    assert browser.post("/logout", data={"csrf": "forged"}).status_code == 403
    assert browser.post("/logout", data={"csrf": csrf_of(page)}).status_code == 303
    assert browser.get("/jobs").headers["location"] == "/login"


def test_the_events_stream_sends_the_task_states_then_ends(made: list[FakeClient]) -> None:
    browser = _signed_in(made, USER)
    with browser.stream("GET", "/jobs/j1/events") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        text = answer.read().decode()  # the fake job ends: the stream says so and ends
    tasks = text.index("event: tasks\ndata: ")
    assert '"b": "RUNNING"' in text[tasks:] and "event: end" in text[tasks:]
    document = json.loads(text[tasks:].split("data: ", 1)[1].split("\n", 1)[0])
    assert document["job"] == {"state": "RUNNING", "reason": "", "started": "",
                               "finished": "", "done": 1, "total": 2}
    assert document["index"] == 42 and "groups" not in document  # not collapsed
    assert browser.get("/jobs/nope/events").status_code == 404


def test_pages_carry_the_security_headers(made: list[FakeClient]) -> None:
    answer = _app(made).get("/login")
    assert "default-src 'self'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"
