"""The job page of a large job in process (the console app, a fake scheduler client): a
2,000-task job with 6,000 attempts draws at most WEB_TIMELINE_MAX_BARS bars and says how many it
left out, and its wide layer is wrapped (the graph about a window wide). Timings are printed,
never asserted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.web import layout
from tests.unit import test_web_app as app

T0 = 1_700_000_000_000
RETRIED = 3  # attempts per task: more than the page draws in all


def _big_job() -> pb.ListTasksResponse:
    tasks = []
    for i in range(2_000):
        spans = [pb.AttemptSpan(fence=i * RETRIED + n, number=n, cluster=f"c{i % 4}",
                                state="SUCCEEDED" if n == RETRIED else "FAILED",
                                assigned_ms=T0 + i * 100 + n * 10_000,
                                started_ms=T0 + i * 100 + n * 10_000 + 5,
                                finished_ms=T0 + i * 100 + n * 10_000 + 5_000)
                 for n in range(1, RETRIED + 1)]
        tasks.append(pb.TaskSummary(task_id=f"t{i}", state="SUCCEEDED", attempts=RETRIED + 2,
                                    depends_on=[] if i == 0 else ["t0"], spans=spans))
    return pb.ListTasksResponse(job_id="j1", tasks=tasks, applied_index=5)


@pytest.fixture
def big(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(app, "TASKS", _big_job())
    monkeypatch.setattr(app, "JOB", pb.Job(job_id="j1", name="big", tenant="t",
                                           state="SUCCEEDED", total_tasks=2_000,
                                           tasks={"SUCCEEDED": 2_000}))
    yield


def test_a_2000_task_job_page_bounds_its_bars_and_wraps_its_fan_out(big: None) -> None:
    browser = app._signed_in([], app.USER)
    started = time.perf_counter()
    page = browser.get("/jobs/j1").text
    print(f"a 2,000-task, 6,000-span job page: {len(page) / 1e6:.2f} MB rendered in "
          f"{time.perf_counter() - started:.2f} s (in process, fake scheduler)")
    assert page.count('<rect class="bar" x=') == limits.WEB_TIMELINE_MAX_BARS
    attempts = 2_000 * (RETRIED + 2)
    assert f"showing the latest {limits.WEB_TIMELINE_MAX_BARS} of {attempts}" in page
    assert page.count('class="node" data-task-id=') == 2_000
    width = int(page.split('<svg xmlns="http://www.w3.org/2000/svg" width="')[1].split('"')[0])
    assert width == 2 * layout.MARGIN + layout.NODE_W + layout.GAP_X + \
        limits.WEB_GRAPH_WRAP_COLUMNS * (layout.NODE_W + layout.WRAP_GAP_X) - layout.WRAP_GAP_X


def test_the_job_page_shows_its_params_when_it_has_any(monkeypatch: pytest.MonkeyPatch) -> None:
    browser = app._signed_in([], app.USER)
    assert 'id="params"' not in browser.get("/jobs/j1").text
    monkeypatch.setattr(app, "JOB", pb.Job(job_id="j1", name="demo", tenant="t",
                                           state="RUNNING", total_tasks=2,
                                           params={"region": "<eu>", "date": "2026-12-05"}))
    page = browser.get("/jobs/j1").text
    rows = page.split('<table class="params" id="params">')[1].split("</table>")[0]
    assert rows.index('data-param="date"') < rows.index('data-param="region"')
    assert "<code>2026-12-05</code>" in rows and "<code>&lt;eu&gt;</code>" in rows
