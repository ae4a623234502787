"""The read views (raftsched.replica.views): states built with the real state machine
(tests/support/fsmkit.py), rendered as API messages."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.protocol import ReportVerdict
from raftsched.replica import views
from raftsched.state import commands as c
from raftsched.state import feasibility, snapshot
from tests.support.fsmkit import Harness, job_doc, task_doc

RETRY_ONCE = {"max_attempts": 2, "backoff_s": 1, "jitter": 0}
"""One retry after exactly 1000 ms: no jitter, so the backoff deadline is known."""


def submitted(*job_ids: str, tasks: int = 1, **fields: Any) -> Harness:
    h = Harness()
    for job_id in job_ids:
        h.submit(job_id, job_doc([task_doc(f"t{i}") for i in range(tasks)], **fields))
    return h


def page(h: Harness, **request: Any) -> tuple[list[str], str]:
    response = views.list_jobs(h.state, pb.ListJobsRequest(**request))
    return [j.job_id for j in response.jobs], response.next_page_token


# --- job_of / task_of ---------------------------------------------------------------------------


def test_job_of_an_unknown_id_is_not_found_naming_it() -> None:
    h = submitted("j1")
    with pytest.raises(RaftschedError) as caught:
        views.job_of(h.state, "nope")
    assert caught.value.code == Code.NOT_FOUND and "nope" in caught.value.message


def test_task_of_an_unknown_task_is_not_found_naming_task_and_job() -> None:
    h = submitted("j1")
    with pytest.raises(RaftschedError) as caught:
        views.task_of(h.state, "j1", "ghost")
    assert caught.value.code == Code.NOT_FOUND
    assert "ghost" in caught.value.message and "j1" in caught.value.message


def test_task_of_an_unknown_job_is_not_found_naming_the_job() -> None:
    with pytest.raises(RaftschedError) as caught:
        views.task_of(Harness().state, "nope", "t0")
    assert caught.value.code == Code.NOT_FOUND and "nope" in caught.value.message


LONG_ID = "\U0001f642" * (limits.LARGE_SPEC_BYTES + 1)
"""An id of 1 MiB (in UTF-8): a gRPC client reads at most 16 KiB of status message."""
MAX_MESSAGE_CHARS = 200


@pytest.mark.parametrize("call", [
    pytest.param(lambda s: views.job_of(s, LONG_ID), id="job_of"),
    pytest.param(lambda s: views.task_of(s, LONG_ID, "t0"), id="task_of-job"),
    pytest.param(lambda s: views.task_of(s, "j1", LONG_ID), id="task_of-task"),
])
def test_not_found_shows_a_long_id_truncated(call: Any) -> None:
    """Found by tests/integration/test_fuzz_rpc.py: GetJob of a 256 KiB id answered NOT_FOUND
    echoing it, and the client saw RESOURCE_EXHAUSTED (metadata over its limit)."""
    with pytest.raises(RaftschedError) as caught:
        call(submitted("j1").state)
    assert caught.value.code == Code.NOT_FOUND
    assert len(caught.value.message) <= MAX_MESSAGE_CHARS and "\U0001f642" in caught.value.message


def test_task_of_finds_the_task_by_id() -> None:
    h = submitted("j1", tasks=3)
    job, task = views.task_of(h.state, "j1", "t2")
    assert job.id == "j1" and task.spec.id == "t2"


# --- job_message --------------------------------------------------------------------------------


def test_job_message_counts_tasks_by_state_name_and_leaves_empty_states_out() -> None:
    h = Harness()
    h.register("east")
    h.submit("j1", job_doc([task_doc("a"), task_doc("b", ["a"]), task_doc("c"),
                            task_doc("d", ["b"])], tenant="acme", priority=70))
    h.now_ms = 2_000
    h.run_task("east", "j1", "a")
    h.assign_one("j1", "c", "east")
    message = views.job_message(h.job("j1"), applied_index=42)
    assert dict(message.tasks) == {"SUCCEEDED": 1, "RUNNABLE": 1, "ASSIGNED": 1, "PENDING": 1}
    assert message.total_tasks == 4 and message.state == "RUNNING"
    assert (message.job_id, message.name, message.tenant, message.priority) == \
        ("j1", "test-job", "acme", 70)
    assert message.failure_policy == "skip_downstream" and message.applied_index == 42
    assert (message.submitted_ms, message.started_ms, message.finished_ms) == (1_000, 2_000, 0)


def test_job_message_of_a_cancelled_job_has_its_reason_and_finish_time() -> None:
    h = submitted("j1", tasks=2)
    h.now_ms = 5_000
    h.cancel("j1")
    message = views.job_message(h.job("j1"))
    assert message.state == "CANCELLED" and message.reason == "test"
    assert dict(message.tasks) == {"CANCELLED": 2}
    assert message.finished_ms == 5_000 and message.started_ms == 0


# --- list_jobs ----------------------------------------------------------------------------------


def test_list_jobs_answers_in_submission_order() -> None:
    h = submitted("zz", "aa", "mm")
    assert page(h) == (["zz", "aa", "mm"], "")


def test_list_jobs_filters_by_tenant_and_by_state() -> None:
    h = Harness()
    for job_id, tenant in (("j1", "a"), ("j2", "b"), ("j3", "a"), ("j4", "b")):
        h.submit(job_id, job_doc([task_doc("t")], tenant=tenant))
    h.cancel("j3")
    h.cancel("j4")
    assert page(h, tenant="a")[0] == ["j1", "j3"]
    assert page(h, state="CANCELLED")[0] == ["j3", "j4"]
    assert page(h, tenant="b", state="PENDING")[0] == ["j2"]
    assert page(h, tenant="nobody")[0] == []


def test_list_jobs_pages_follow_one_another_with_a_token_only_for_full_pages() -> None:
    h = submitted("j1", "j2", "j3", "j4", "j5")
    first, token = page(h, limit=2)
    assert first == ["j1", "j2"] and token
    second, token = page(h, limit=2, page_token=token)
    assert second == ["j3", "j4"] and token
    third, token = page(h, limit=2, page_token=token)
    assert third == ["j5"] and token == ""


def test_list_jobs_paging_with_a_filter_continues_after_the_last_match() -> None:
    h = Harness()
    for i in range(6):
        h.submit(f"j{i}", job_doc([task_doc("t")], tenant="a" if i % 2 else "b"))
    seen: list[str] = []
    token = ""
    for _ in range(10):
        jobs, token = page(h, tenant="a", limit=1, page_token=token)
        seen += jobs
        if not token:
            break
    assert seen == ["j1", "j3", "j5"]


def test_list_jobs_default_page_size_and_maximum() -> None:
    count = limits.MAX_PAGE_SIZE + 5
    h = Harness(check_every=count)
    for i in range(count):
        h.submit(f"j{i}", job_doc([task_doc("t")]))
    default, token = page(h)
    assert len(default) == limits.DEFAULT_PAGE_SIZE and token
    full, token = page(h, limit=limits.MAX_PAGE_SIZE)
    assert len(full) == limits.MAX_PAGE_SIZE
    rest, token = page(h, limit=limits.MAX_PAGE_SIZE, page_token=token)
    assert rest == [f"j{i}" for i in range(limits.MAX_PAGE_SIZE, count)] and token == ""
    for larger in (limits.MAX_PAGE_SIZE + 1, 2**31 - 1):  # capped, as AIP-158 asks
        capped, token = page(h, limit=larger)
        assert capped == full and token


def refused(h: Harness, **request: Any) -> str:
    """The message of the INVALID_ARGUMENT a ListJobs request gets (it returns nothing)."""
    with pytest.raises(RaftschedError) as caught:
        views.list_jobs(h.state, pb.ListJobsRequest(**request))
    assert caught.value.code == Code.INVALID_ARGUMENT
    return caught.value.message


@pytest.mark.parametrize("limit", [-1, -(2**31)])
def test_list_jobs_a_negative_limit_is_invalid_argument(limit: int) -> None:
    """It once returned every job, past the page maximum."""
    h = submitted(*(f"j{i}" for i in range(limits.DEFAULT_PAGE_SIZE + 1)))
    message = refused(h, limit=limit)
    assert message.startswith("limit must be 0") and str(limits.MAX_PAGE_SIZE) in message
    assert str(limit) in message


@pytest.mark.parametrize("token", ["\u00b2", "\u0663", "-1", "+1", " 1", "1 ", "1.0", "abc",
                                   "1" * (limits.MAX_PAGE_TOKEN_CHARS + 1), "9" * 5000])
def test_list_jobs_a_malformed_page_token_is_invalid_argument(token: str) -> None:
    message = refused(submitted("j1"), page_token=token)
    assert message.startswith("page_token") and "malformed" in message
    assert len(message) < 300  # a huge token is not echoed whole


@pytest.mark.parametrize(("request_fields", "words"), [
    ({"page_token": "n3"}, ["page_token 'n3'", "newest-first", "newest_first=true"]),
    ({"page_token": "3", "newest_first": True}, ["page_token '3'", "oldest-first",
                                                 "newest_first=false"]),
    ({"page_token": "nn3", "newest_first": True}, ["page_token", "malformed"]),
    ({"state": "DONE"}, ["state 'DONE'", "PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED"]),
    ({"state": "pending"}, ["state 'pending'", "not a job state"]),
    ({"query": "q" * (limits.MAX_LIST_QUERY_CHARS + 1)},
     ["query is 129 characters long", "at most 128"]),
    ({"query": "a\x1b[31m"}, ["query: must be printable"]),
])
def test_list_jobs_bad_input_is_invalid_argument_naming_field_and_value(
        request_fields: dict[str, Any], words: list[str]) -> None:
    h = submitted("j1", "j2")
    before = snapshot.dump(h.state)
    message = refused(h, **request_fields)
    assert all(w in message for w in words), message
    assert snapshot.dump(h.state) == before


def test_list_jobs_a_query_of_the_maximum_length_is_accepted() -> None:
    assert page(submitted("j1"), query="q" * limits.MAX_LIST_QUERY_CHARS) == ([], "")


def test_list_jobs_a_token_of_the_maximum_length_is_a_page_past_every_job() -> None:
    assert page(submitted("j1"), page_token="9" * limits.MAX_PAGE_TOKEN_CHARS) == ([], "")


def named(*jobs: tuple[str, str, str]) -> Harness:
    """Jobs (id, name, tenant) of one task each, submitted in this order."""
    h = Harness()
    for job_id, name, tenant in jobs:
        h.submit(job_id, job_doc([task_doc("t")], name=name, tenant=tenant))
    return h


def test_list_jobs_newest_first_pages_back_with_tokens_of_their_own() -> None:
    h = submitted("j1", "j2", "j3", "j4", "j5")
    first, token = page(h, limit=2, newest_first=True)
    assert first == ["j5", "j4"] and token.startswith("n")
    second, token = page(h, limit=2, newest_first=True, page_token=token)
    assert second == ["j3", "j2"] and token
    third, token = page(h, limit=2, newest_first=True, page_token=token)
    assert third == ["j1"] and token == ""
    assert page(h, newest_first=True)[0] == ["j5", "j4", "j3", "j2", "j1"]
    assert page(h, newest_first=True, page_token="n3")[0] == ["j2", "j1"]  # before seq 3


def test_list_jobs_newest_first_with_filters_continues_before_the_last_match() -> None:
    h = Harness()
    for i in range(6):
        h.submit(f"j{i}", job_doc([task_doc("t")], tenant="a" if i % 2 else "b"))
    h.cancel("j3")
    assert page(h, tenant="a", newest_first=True) == (["j5", "j3", "j1"], "")
    assert page(h, tenant="a", state="PENDING", newest_first=True)[0] == ["j5", "j1"]
    one, token = page(h, tenant="a", newest_first=True, limit=1)
    assert one == ["j5"] and page(h, tenant="a", newest_first=True, limit=5,
                                  page_token=token)[0] == ["j3", "j1"]


def test_list_jobs_query_matches_id_or_name_ignoring_case() -> None:
    h = named(("etl-7", "Nightly ETL", "a"), ("render-1", "frames", "a"),
              ("x-9", "ETL backfill", "b"), ("y", "Straße", "a"))
    assert page(h, query="etl")[0] == ["etl-7", "x-9"]
    assert page(h, query="ETL", newest_first=True)[0] == ["x-9", "etl-7"]
    assert page(h, query="RENDER-1")[0] == ["render-1"]  # the id
    assert page(h, query="etl", tenant="b")[0] == ["x-9"]
    assert page(h, query="strasse")[0] == ["y"]  # casefolded, not only lowered
    assert page(h, query="nothing") == ([], "")


def counts_of(h: Harness, **request: Any) -> dict[str, int]:
    return dict(views.list_jobs(h.state, pb.ListJobsRequest(**request)).state_counts)


def test_list_jobs_counts_by_state_for_the_tenant_and_query_whatever_the_state_filter() -> None:
    h = named(("j1", "etl one", "a"), ("j2", "etl two", "a"), ("j3", "other", "a"),
              ("j4", "etl four", "b"))
    h.cancel("j2")
    none = dict.fromkeys(("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"), 0)
    assert counts_of(h) == none | {"PENDING": 3, "CANCELLED": 1}
    assert counts_of(h, state="CANCELLED") == counts_of(h)  # the tabs, whatever tab is open
    assert counts_of(h, tenant="a") == none | {"PENDING": 2, "CANCELLED": 1}
    assert counts_of(h, tenant="a", query="ETL") == none | {"PENDING": 1, "CANCELLED": 1}
    assert counts_of(h, tenant="nobody") == none
    response = views.list_jobs(h.state, pb.ListJobsRequest(query="etl"))
    assert not response.state_counts_partial


def test_list_jobs_a_query_examines_a_bounded_number_of_jobs_per_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A page cut by the bound ends early with a token; the counts say they are partial."""
    monkeypatch.setattr(limits, "LIST_QUERY_MAX_SCAN_JOBS", 3)
    h = named(*((f"j{i}", "match" if i in (0, 5) else "other", "a") for i in range(8)))
    response = views.list_jobs(h.state, pb.ListJobsRequest(query="match", newest_first=True))
    # j7, j6, j5 examined (seqs 8, 7, 6): j5 matches, the page ends there
    assert [j.job_id for j in response.jobs] == ["j5"] and response.next_page_token == "n6"
    assert response.state_counts_partial and response.state_counts["PENDING"] == 1
    seen, token = [], ""
    for _ in range(5):
        jobs, token = page(h, query="match", newest_first=True, page_token=token)
        seen += jobs
        if not token:
            break
    assert seen == ["j5", "j0"] and token == ""


def test_list_jobs_without_a_query_counts_and_pages_from_the_index_not_a_scan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first newest-first page of a tenant and state looks at the page's jobs only."""
    h = Harness(check_every=10_000)
    for i in range(300):
        h.submit(f"j{i}", job_doc([task_doc("t")], tenant="a" if i < 290 else "b"))
    looked: list[str] = []
    original = views.job_message

    def counting(job: Any, applied_index: int = 0, **options: Any) -> Any:
        looked.append(job.id)
        return original(job, applied_index, **options)

    monkeypatch.setattr(views, "job_message", counting)

    class Jobs(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: str) -> Any:
            looked.append(key)
            return super().__getitem__(key)

        def __iter__(self) -> Any:
            raise AssertionError("the view scanned every job")

        values = items = keys = __reversed__ = __iter__

    h.state.jobs = Jobs(h.state.jobs)
    assert page(h, tenant="b", state="PENDING", limit=3, newest_first=True)[0] == [
        "j299", "j298", "j297"]
    assert set(looked) == {"j299", "j298", "j297"}


# --- list_tasks ---------------------------------------------------------------------------------


def test_list_tasks_summarises_each_task_in_spec_order() -> None:
    h = Harness()
    h.register("east")
    h.submit("j1", job_doc([task_doc("a"), task_doc("b", ["a"]), task_doc("c")]))
    fence = h.run_task("east", "j1", "a", exit_code=0)
    running = h.assign_one("j1", "c", "east")
    h.started("east", "j1", "c", running)
    response = views.list_tasks(h.state, "j1")
    assert response.job_id == "j1"
    a, b, c_ = response.tasks
    assert (a.task_id, a.state, a.attempts, a.cluster, a.fence) == ("a", "SUCCEEDED", 1, "east",
                                                                   fence)
    assert a.HasField("exit_code") and a.exit_code == 0
    assert (b.task_id, b.state, b.attempts, b.cluster, b.fence) == ("b", "RUNNABLE", 0, "", 0)
    assert not b.HasField("exit_code")
    assert (c_.state, c_.fence) == ("RUNNING", running) and not c_.HasField("exit_code")


def test_list_tasks_with_spans_gives_the_latest_attempts_times_only_when_asked() -> None:
    h = Harness()
    h.register("east")
    h.submit("j1", job_doc([task_doc("a"), task_doc("b")]))
    for _ in range(limits.TASK_SUMMARY_MAX_SPANS + 1):  # rejected: infra retries, after backoff
        fence = h.assign_one("j1", "a", "east")
        h.rejected("east", "j1", "a", fence)
        h.tick(limits.INFRA_BACKOFF_MAX_MS)
    running = h.assign_one("j1", "a", "east")
    h.started("east", "j1", "a", running)
    assert not any(t.spans for t in views.list_tasks(h.state, "j1").tasks)
    a, b = views.list_tasks(h.state, "j1", with_spans=True).tasks
    assert not b.spans
    assert a.attempts == limits.TASK_SUMMARY_MAX_SPANS + 2
    assert [s.number for s in a.spans] == list(range(3, a.attempts + 1))  # the latest, in order
    last = a.spans[-1]
    assert (last.fence, last.cluster, last.state, last.finished_ms) == (running, "east",
                                                                        "RUNNING", 0)
    assert last.started_ms >= last.assigned_ms > 0
    assert all(s.state == "REJECTED" and s.finished_ms >= s.assigned_ms for s in a.spans[:-1])


def test_list_tasks_of_an_unknown_job_is_not_found() -> None:
    with pytest.raises(RaftschedError) as caught:
        views.list_tasks(Harness().state, "nope")
    assert caught.value.code == Code.NOT_FOUND


# --- task_history -------------------------------------------------------------------------------


def retried(h: Harness) -> tuple[int, int]:
    """Task t of job j fails with exit code 3, then succeeds on its second attempt."""
    h.register("east")
    h.submit("j", job_doc([task_doc("t", retry=RETRY_ONCE)]))
    first = h.run_task("east", "j", "t", exit_code=3)
    h.tick(1_000)
    second = h.run_task("east", "j", "t", exit_code=0)
    return first, second


def test_task_history_lists_every_attempt_with_fence_cluster_state_and_exit_code() -> None:
    h = Harness()
    first, second = retried(h)
    history = views.task_history(h.state, "j", "t")
    assert (history.job_id, history.task_id, history.state) == ("j", "t", "SUCCEEDED")
    assert [(a.fence, a.number, a.cluster, a.state, a.exit_code) for a in history.attempts] == \
        [(first, 1, "east", "FAILED", 3), (second, 2, "east", "SUCCEEDED", 0)]
    assert history.app_failures == 1 and history.infra_failures == 0
    assert all(a.finished_ms >= a.started_ms >= a.assigned_ms for a in history.attempts)


def test_task_history_an_attempt_not_finished_has_no_exit_code() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    h.assign_one("j", "t", "east")
    [attempt] = views.task_history(h.state, "j", "t").attempts
    assert attempt.state == "ASSIGNED" and not attempt.HasField("exit_code")
    assert attempt.started_ms == 0 and attempt.finished_ms == 0


def test_task_history_notes_late_and_duplicate_reports() -> None:
    h = Harness()
    first, second = retried(h)
    assert h.finished("east", "j", "t", first, exit_code=3) == ReportVerdict.LATE
    assert h.finished("east", "j", "t", second, exit_code=0) == ReportVerdict.DUPLICATE
    notes = views.task_history(h.state, "j", "t").notes
    assert [(n.kind, n.fence, n.report) for n in notes] == \
        [("late", first, "FINISHED"), ("duplicate", second, "FINISHED")]
    assert f"current fence is {second}" in notes[0].detail
    assert "SUCCEEDED" in notes[1].detail


def test_task_history_of_an_unknown_task_is_not_found() -> None:
    with pytest.raises(RaftschedError) as caught:
        views.task_history(submitted("j").state, "j", "ghost")
    assert caught.value.code == Code.NOT_FOUND and "ghost" in caught.value.message


# --- explain_task -------------------------------------------------------------------------------


def explained(h: Harness, task_id: str = "t") -> tuple[str, dict[str, tuple[bool, str]]]:
    response = views.explain_task(h.state, "j", task_id)
    return response.summary, {v.cluster: (v.eligible, v.reason) for v in response.clusters}


def test_explain_task_gives_each_cluster_the_feasibility_rules_reason() -> None:
    h = Harness()
    h.register("west", caps=("linux",), cpu=2)
    h.register("east", caps=("linux", "gpu"), cpu=8)
    h.register("down", caps=("linux", "gpu"), cpu=8)
    h.register("tiny", caps=("linux", "gpu"), cpu=1)
    h.status("down", c.ClusterStatus.SUSPECT)
    h.submit("j", job_doc([task_doc("t", requires=["gpu"], resources={"cpu": 4})]))
    response = views.explain_task(h.state, "j", "t")
    assert [v.cluster for v in response.clusters] == ["down", "east", "tiny", "west"]
    _, verdicts = explained(h)
    assert verdicts == {
        "down": (False, "cluster down is SUSPECT"),
        "east": (True, ""),
        "tiny": (False, "cluster tiny has no room: cpu_milli 4000 > 1000 free"),
        "west": (False, "cluster west lacks capabilities ['gpu']"),
    }
    spec = h.task("j", "t").spec
    for name, (_, reason) in verdicts.items():
        infeasible = feasibility.explain_committed(spec, h.state.clusters[name], h.state.now_ms)
        assert reason == ("" if infeasible is None else infeasible.detail)


def test_explain_task_a_pinned_task_is_eligible_only_on_its_cluster() -> None:
    h = Harness()
    h.register("east")
    h.register("west")
    h.submit("j", job_doc([task_doc("t", cluster="west")]))
    summary, verdicts = explained(h)
    assert verdicts == {"east": (False, "task is pinned to cluster west"), "west": (True, "")}
    assert summary == "runnable; fits now on west — placement is imminent"


def test_explain_task_pending_summary_names_the_upstream_tasks_not_yet_succeeded() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("a"), task_doc("b"), task_doc("t", ["a", "b"])]))
    h.run_task("east", "j", "a")
    summary, _ = explained(h)
    assert summary == "waiting for 1 upstream task(s): b"


def test_explain_task_pending_summary_shows_ten_upstream_tasks_at_most() -> None:
    h = Harness()
    upstream = [f"u{i:02}" for i in range(12)]
    h.submit("j", job_doc([task_doc(u) for u in upstream] + [task_doc("t", upstream)]))
    summary, _ = explained(h)
    assert summary == f"waiting for 12 upstream task(s): {', '.join(upstream[:10])} ..."


def test_explain_task_runnable_summary_without_any_cluster() -> None:
    summary, verdicts = explained(submitted("j", tasks=1), "t0")
    assert summary == "runnable; no cluster is registered" and verdicts == {}


def test_explain_task_runnable_summary_when_no_cluster_fits() -> None:
    h = Harness()
    h.register("east", cpu=2)
    h.submit("j", job_doc([task_doc("t", resources={"cpu": 2}), task_doc("u")]))
    h.assign_one("j", "u", "east")
    summary, verdicts = explained(h)
    assert summary == "runnable; no cluster can take it now (see the reasons per cluster)"
    assert verdicts["east"][0] is False


def test_explain_task_runnable_summary_when_no_cluster_could_ever_take_it() -> None:
    h = Harness()
    h.register("east", cpu=1)
    h.submit("j", job_doc([task_doc("t", resources={"cpu": 2})]))  # allow_unschedulable
    summary, _ = explained(h)
    assert summary == ("runnable; it needs cpu_milli 2000, memory_mb 128, gpu 0; no registered "
                       "cluster could ever take it: the closest, east, has cpu_milli 1000 of "
                       "2000 (short by 1000) — it waits for such a cluster to register")


def test_explain_names_the_policy_that_holds_a_task_back() -> None:
    h = Harness()
    h.register("east", cpu=4)
    h.register("west", cpu=4)
    h.run(c.TenantSet("alpha", 1, 0, 1, h.now_ms))
    h.submit("j", job_doc([task_doc("t"), task_doc("u")], tenant="alpha"))
    h.assign_one("j", "u", "east")
    summary, _ = explained(h)
    assert summary == ("runnable; tenant alpha already runs its max_running=1 tasks: it waits "
                       "for one of them to end")
    h.run(c.TenantSet("alpha", 1, 0, 0, h.now_ms))
    h.submit("k", job_doc([task_doc("t")], tenant="beta"))
    summary, _ = explained(h)
    assert summary.startswith("runnable; fits now on east, west; tenant alpha is over its fair "
                              "share (its weighted dominant share 0.12; beta 0.00)")
    h.run(c.ClusterDrain("west", True, h.now_ms, "disk swap"))
    _, verdicts = explained(h)
    assert verdicts["west"] == (False, "cluster west is draining (disk swap): it takes no new "
                                       "work")
    h.submit("big", job_doc([task_doc("b", resources={"cpu": 4})], tenant="gamma"))
    h.ok(c.AssignBatch(h.now_ms, (), (c.Reservation("big", "b", "east"),)))
    answer = views.explain_task(h.state, "big", "b")
    assert answer.summary.startswith("runnable; cluster east is reserved for it")
    summary, _ = explained(h)
    assert summary.startswith("runnable; it fits east only, and each is reserved")


def test_job_tasks_give_each_waiting_task_its_reason() -> None:
    h = Harness()
    h.register("east", cpu=4)
    h.submit("j", job_doc([task_doc("a"), task_doc("b", ["a"]), task_doc("g", requires=["gpu"])]))
    reasons = {t.task_id: t.reason for t in views.list_tasks(h.state, "j").tasks}
    assert reasons["a"] == "runnable; fits now on east — placement is imminent"
    assert reasons["b"] == "waiting for 1 upstream task(s): a"
    assert "lacks capabilities ['gpu']" in reasons["g"]


def test_explain_task_runnable_summary_names_every_cluster_it_fits_sorted() -> None:
    h = Harness()
    h.register("west")
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    summary, _ = explained(h)
    assert summary == "runnable; fits now on east, west — placement is imminent"


def test_explain_task_retry_wait_summary_says_until_when_and_why() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t", retry=RETRY_ONCE)]))
    h.run_task("east", "j", "t", exit_code=1)
    task = h.task("j", "t")
    assert task.state.name == "RETRY_WAIT"
    summary, _ = explained(h)
    assert summary == f"backing off until {h.now_ms + 1_000} ms (attempts failed: 1 app, 0 infra)"
    assert task.retry_at_ms == h.now_ms + 1_000


def test_explain_task_assigned_and_running_summaries_name_cluster_fence_and_status() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    fence = h.assign_one("j", "t", "east")
    assert explained(h)[0] == f"assigned on east (fence {fence}, cluster READY)"
    h.started("east", "j", "t", fence)
    h.status("east", c.ClusterStatus.SUSPECT)
    response = views.explain_task(h.state, "j", "t")
    assert response.state == "RUNNING"
    assert response.summary == f"running on east (fence {fence}, cluster SUSPECT)"


def test_explain_task_terminal_summary_is_the_state_and_its_reason() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t"), task_doc("ok")]))
    h.run_task("east", "j", "t", exit_code=1)
    h.run_task("east", "j", "ok")
    assert explained(h)[0] == "FAILED: failed 1 of max_attempts=1"
    assert explained(h, "ok")[0] == "SUCCEEDED"


# --- compute_cluster ----------------------------------------------------------------------------


def test_compute_cluster_renders_capacity_reservations_and_pending_work() -> None:
    h = Harness()
    h.register("east", caps=("linux", "gpu", "avx"), cpu=8, memory_mb=4_096, gpu=2,
               incarnation=3)
    h.submit("j", job_doc([task_doc("a", resources={"cpu": 2, "memory_mb": 512, "gpu": 1}),
                           task_doc("b")]))
    h.assign_one("j", "a", "east")
    h.started("east", "j", "a", h.assign_one("j", "b", "east"))
    message = views.compute_cluster(h.state, h.state.clusters["east"], heartbeat_age_ms=1_234)
    assert (message.cluster_id, message.status, message.incarnation) == ("east", "READY", 3)
    assert (message.capacity.cpu_milli, message.capacity.memory_mb, message.capacity.gpu) == \
        (8_000, 4_096, 2)
    assert (message.reserved.cpu_milli, message.reserved.memory_mb, message.reserved.gpu) == \
        (3_000, 640, 1)
    assert list(message.capabilities) == ["avx", "gpu", "linux"]
    assert (message.live_attempts, message.pending_kills) == (2, 0)
    assert message.heartbeat_age_ms == 1_234


def test_compute_cluster_counts_the_kills_a_cancel_leaves_behind() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    h.assign_one("j", "a", "east")
    h.assign_one("j", "b", "east")
    h.cancel("j")
    message = views.compute_cluster(h.state, h.state.clusters["east"], heartbeat_age_ms=-1)
    assert (message.live_attempts, message.pending_kills) == (0, 2)
    assert message.reserved.cpu_milli == 0 and message.heartbeat_age_ms == -1


def test_explain_says_a_task_was_preempted_and_for_what() -> None:
    h = Harness()
    h.register("east", cpu=2)
    h.submit("low", job_doc([task_doc("train", resources={"cpu": 2})], priority_class="low",
                            preemptible=True))
    fence = h.assign_one("low", "train", "east")
    h.started("east", "low", "train", fence)
    h.submit("urgent", job_doc([task_doc("u", resources={"cpu": 2})], priority_class="high"))
    h.ok(c.AssignBatch(h.now_ms, (), (c.Reservation("urgent", "u", "east"),),
                       (c.Preemption("low", "train", fence, "urgent", "u"),)))
    summary = views.explain_task(h.state, "low", "train").summary
    assert summary.startswith("preempted (1 of at most 3 times: preempted to make room for "
                              "urgent/u (priority class high)); runnable; "), summary
    reserved = views.explain_task(h.state, "urgent", "u").summary
    assert reserved.startswith("runnable; cluster east is reserved for it"), reserved
    tasks = {t.task_id: t.reason for t in views.list_tasks(h.state, "low").tasks}
    assert tasks["train"] == summary
