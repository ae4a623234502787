"""The web console in a real browser: Debian's chromium (headless, driven by Playwright) against
a real cluster (three replicas, a subprocess agent) and a real `raftsched web` process over
HTTPS with its certificate from the cluster's CA. One cluster, one console and one browser for
the module. Screenshots of each page go to the test's temp dir (printed at the end).

Sign in; the list shows the job; its page shows every task as a node with its state; a running
task turns SUCCEEDED on the open page without a reload; a task page shows the output; an
operator cancels a job through the page and the CLI agrees; an unauthenticated browser and
another tenant's user see none of it; a forged or missing CSRF token is refused (403); bad
input gets a clean 4xx. The job page's header and timeline follow the job live; the timeline
has a bar per attempt; a 2,000-task fan-out is wrapped to the window's width; a 10,000-task job
collapses into counted groups that follow the job live.
The task page of a running task shows its lines as it prints them;
/clusters shows the free capacity the agent reports; an admin drains and undrains a cluster
through the page (the CLI agrees) and nobody else can."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raftsched import tokens
from raftsched.dev import pki
from raftsched.dev.ports import port_open
from tests.support.cluster import LocalCluster, free_port, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
STATE_TIMEOUT_S = 60.0
PAGE_TIMEOUT_MS = 30_000
LIVE_TIMEOUT_MS = 60_000

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (scripts/lib/system.sh "
                "ensure_chromium, as root) to run the browser tests", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="the playwright package (test extra) is not installed")


def _spec(tenant: str, gate: Path) -> str:
    return json.dumps({"name": "web-demo", "tenant": tenant, "tasks": [
        {"id": "hello", "command": ["sh", "-c", "echo hello-from-task; echo oops >&2"]},
        {"id": "gate", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"]},
        {"id": "after", "command": ["true"], "depends_on": ["hello", "gate"]},
    ]})


PARKED = json.dumps({"name": "parked", "tenant": "acme", "allow_unschedulable": True, "tasks": [
    {"id": f"p{i}", "command": ["true"], "requires": ["nowhere"]} for i in range(3)]})


@dataclass
class Site:
    cluster: LocalCluster
    url: str
    tokens: dict[str, str]
    job_id: str
    gate: Path
    shots: Path
    browser: Any


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    shots = tmp_path_factory.mktemp("web-screenshots")
    with task_user_root("raftsched-web-") as root, running(root) as cluster, \
            sync_api.sync_playwright() as playwright:
        cluster.add_agent("east", cpu=4, executor="subprocess")
        cluster.wait_clusters_ready("east")
        url = _start_console(cluster, root)
        admin = cluster.client()
        tokens = {name: str(admin.create_token(tenant, role, f"web {name}").token)
                  for name, tenant, role in (("acme", "acme", "user"),
                                             ("other", "other", "user"),
                                             ("operator", "*", "operator"),
                                             ("admin", "*", "admin"))}
        gate = root / "gate"
        job_id = cluster.client(token=tokens["acme"]).submit(_spec("acme", gate)).job_id
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield Site(cluster, url, tokens, job_id, gate, shots, browser)
        finally:
            browser.close()
            print(f"screenshots: {shots}")


def _start_console(cluster: LocalCluster, root: Path, name: str = "web",
                   extra: tuple[str, ...] = ()) -> str:
    assert cluster.authority is not None
    files = pki.issue_web(cluster.authority)
    address = f"127.0.0.1:{free_port()}"
    cluster.supervisor.start(name, [
        sys.executable, "-m", "raftsched", "web", "--listen", address,
        "--servers", ",".join(cluster.grpc), "--tls-ca", str(files.ca),
        "--tls-cert", str(files.cert), "--tls-key", str(files.key),
        "--https-cert", str(files.cert), "--https-key", str(files.key), *extra],
        root / "logs" / f"{name}.log")
    wait_until(lambda: port_open(address), f"the console on {address}", STATE_TIMEOUT_S)
    return f"https://{address}"


def _page(site: Site, token: str | None) -> Any:
    """A fresh browser context (its own cookies), signed in with `token` unless None."""
    context = site.browser.new_context(ignore_https_errors=True,
                                       viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    if token is not None:
        page.goto(f"{site.url}/login")
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_url(f"{site.url}/jobs")
    return page


def _shot(site: Site, page: Any, name: str, full_page: bool = True) -> None:
    page.screenshot(path=str(site.shots / f"{name}.png"), full_page=full_page)


def _task_states(site: Site) -> dict[str, str]:
    tasks = site.cluster.client(retry_budget_s=5).list_tasks(site.job_id).tasks
    return {t.task_id: t.state for t in tasks}


def test_sign_in_list_graph_and_a_task_turning_succeeded_live(site: Site) -> None:
    page = _page(site, site.tokens["acme"])
    _shot(site, page, "01-jobs")
    assert page.locator(f'tr[data-job-id="{site.job_id}"]').count() == 1
    wait_until(lambda: _task_states(site)["gate"] == "RUNNING" or None, "the gate task to run",
               STATE_TIMEOUT_S)
    fetched: list[str] = []  # the timeline's fragment, fetched again by the page
    page.on("request", lambda r: fetched.append(r.url) if r.url.endswith("/timeline") else None)
    page.click(f'a[href="/jobs/{site.job_id}"]')
    page.wait_for_selector("svg g.node")
    expected = _task_states(site)
    drawn = {node.get_attribute("data-task-id"): node.get_attribute("data-state")
             for node in page.locator("svg g[data-task-id]").all()}
    assert set(drawn) == set(expected) == {"hello", "gate", "after"}
    assert drawn["gate"] == "RUNNING" and drawn["after"] in ("PENDING", "RUNNABLE")
    assert page.locator(".graph .edge").count() == 2
    assert page.locator("#job-finished").inner_text() == "—"
    assert page.locator('svg.timeline rect.bar[data-task-id="after"]').count() == 0
    _shot(site, page, "02-job-running")
    page.evaluate("window.__notReloaded = true")
    site.gate.touch()
    page.wait_for_selector('svg g[data-task-id="gate"][data-state="SUCCEEDED"]',
                           timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('tr[data-task-id="after"][data-state="SUCCEEDED"]',
                           timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('#job[data-state="SUCCEEDED"]', timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('svg.timeline rect.bar[data-task-id="after"][data-state="SUCCEEDED"]',
                           timeout=LIVE_TIMEOUT_MS)  # the timeline was fetched again
    assert page.evaluate("window.__notReloaded") is True  # recoloured in place
    assert page.locator("#job-state").inner_text() == "SUCCEEDED"
    finished = site.cluster.client().get_job(site.job_id).finished_ms
    assert page.locator("#job-finished").inner_text() == time.strftime(
        "%Y-%m-%d %H:%M:%S UTC", time.gmtime(finished / 1000))  # the header, live
    assert page.locator("#progress-text").inner_text() == "3 / 3 tasks done"
    print(f"the running job's timeline was fetched again {len(fetched)} times")
    assert 1 <= len(fetched) <= 4  # gate ends, after starts, after ends (or fewer: coalesced)
    assert page.locator('tr[data-task-id="after"] .attempts-cell').inner_text() == "1"
    assert not page.locator("#cancel").is_visible()  # nothing left to cancel
    _shot(site, page, "03-job-succeeded")


def test_a_task_page_shows_attempts_and_output(site: Site) -> None:
    wait_until(lambda: _task_states(site)["hello"] == "SUCCEEDED" or None, "hello to succeed",
               STATE_TIMEOUT_S)
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{site.job_id}/tasks/hello")
    assert "hello-from-task" in page.locator("#output").inner_text()
    assert page.locator("table.attempts tbody tr").count() == 1
    _shot(site, page, "04-task")
    page.select_option("#stream", "stderr")
    page.click("form.filters button")
    assert page.locator("#output").inner_text().strip() == "oops"
    with page.expect_download() as download:
        page.click("text=Download stderr")
    assert Path(download.value.path()).read_text() == "oops\n"


def _fan_out(gate: Path) -> str:
    return json.dumps({"name": "web-fan-out", "tenant": "acme", "tasks": [
        {"id": "ls", "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done; "
                                             "printf '{\"items\": [\"a\", \"bb\", \"ccc\"]}' "
                                             '> "$RAFTSCHED_OUTPUT"']},
        {"id": "map", "depends_on": ["ls"], "for_each": "{{ tasks.ls.outputs.items }}",
         "env": {"ITEM": "{{ item }}"},
         "command": ["sh", "-c", 'printf \'{"item": "%s", "n": %d}\' "$ITEM" "${#ITEM}" '
                                 '> "$RAFTSCHED_OUTPUT"']},
        {"id": "reduce", "depends_on": ["map"], "command": ["echo", "{{ '{{' }}x}}"]},
    ]})


def test_a_for_each_job_grows_its_instances_live_and_a_task_shows_its_outputs(
        site: Site) -> None:
    gate = site.gate.with_name("fan-out-gate")
    job_id = site.cluster.client(token=site.tokens["acme"]).submit(_fan_out(gate)).job_id
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{job_id}")
    page.wait_for_selector('svg g[data-task-id="ls"]')
    assert page.locator('tr[data-task-id="map[0]"]').count() == 0  # not expanded yet
    gate.touch()
    page.wait_for_selector('tr.instance[data-task-id="map[2]"]', timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('#job[data-state="SUCCEEDED"]', timeout=LIVE_TIMEOUT_MS)
    rows = [row.get_attribute("data-task-id") for row in page.locator("table.tasks tbody tr").all()]
    assert rows == ["ls", "map", "map[0]", "map[1]", "map[2]", "reduce"]
    assert "for each of 3" in page.locator('tr[data-task-id="map"]').inner_text()
    drawn = {n.get_attribute("data-task-id") for n in page.locator("svg g[data-task-id]").all()}
    assert drawn == {"ls", "map", "reduce"}  # the instances are rows, the node stands for them
    _shot(site, page, "05-fan-out-job")
    page.goto(f"{site.url}/jobs/{job_id}/tasks/map%5B1%5D")
    assert json.loads(page.locator("#outputs").inner_text()) == {"item": "bb", "n": 2}
    assert page.locator('a[href$="/tasks/map"]').inner_text() == "map"  # "instance of"
    page.goto(f"{site.url}/jobs/{job_id}/tasks/map")
    assert [o["n"] for o in json.loads(page.locator("#outputs").inner_text())] == [1, 2, 3]
    instances = page.locator("table.tasks tbody tr")
    assert [r.get_attribute("data-task-id") for r in instances.all()] == [
        "map[0]", "map[1]", "map[2]"]
    assert page.locator("#output").count() == 0  # a for_each task runs no process itself
    _shot(site, page, "06-fan-out-task-outputs")
    page.goto(f"{site.url}/jobs/{job_id}/tasks/reduce")
    assert "{{x}}" in page.locator("#output").inner_text()  # {{ '{{' }}: two braces, as text


def test_an_operator_cancels_through_the_page_and_the_cli_agrees(site: Site) -> None:
    parked = site.cluster.client(token=site.tokens["acme"]).submit(PARKED).job_id
    page = _page(site, site.tokens["operator"])
    page.goto(f"{site.url}/jobs/{parked}")
    page.click("text=Cancel this job")
    assert page.locator("#affected").inner_text() == "3"
    assert parked in page.locator("h1").inner_text()
    _shot(site, page, "05-cancel-confirm")
    page.click("button.danger")
    page.wait_for_url(f"{site.url}/jobs/{parked}")
    status = site.cluster.cli("job", "status", parked, "--json")
    assert json.loads(status.stdout)["state"] == "CANCELLED", status.stdout
    for path, name in (("/clusters", "06-clusters"), ("/replicas", "07-replicas"),
                       ("/tenants", "08-tenants")):
        page.goto(site.url + path)
        assert page.locator("h1").count() == 1 and "403" not in page.title()
        _shot(site, page, name)


LAB_JOBS = (("nightly-etl-a", False), ("report-weekly", False), ("Nightly-ETL-b", True))
"""Jobs of tenant "lab" (name, cancelled?), submitted in this order and parked (no cluster
offers "nowhere"): PENDING, PENDING, CANCELLED. A tenant of their own keeps the counts exact
whatever the other tests submit."""


@pytest.fixture(scope="module")
def lab(site: Site) -> tuple[str, list[str]]:
    """A "lab" user's token and the ids of LAB_JOBS, oldest first."""
    admin = site.cluster.client()
    token = str(admin.create_token("lab", "user", "web lab").token)
    ids = []
    for name, cancelled in LAB_JOBS:
        spec = json.dumps({"name": name, "tenant": "lab", "allow_unschedulable": True,
                           "tasks": [{"id": "t", "command": ["true"], "requires": ["nowhere"]}]})
        ids.append(admin.submit(spec).job_id)
        if cancelled:
            admin.cancel(ids[-1])
    return token, ids


def _tabs(page: Any) -> dict[str, int]:
    tabs = page.locator("nav.tabs a.tab")
    return {tabs.nth(i).get_attribute("data-tab"): int(tabs.nth(i).get_attribute("data-count"))
            for i in range(tabs.count())}


def _listed(page: Any) -> list[str]:
    rows = page.locator("table.jobs tbody tr")
    return [rows.nth(i).get_attribute("data-job-id") for i in range(rows.count())]


def test_jobs_search_by_name_tabs_with_counts_newest_first(site: Site,
                                                           lab: tuple[str, list[str]]) -> None:
    token, (etl_a, weekly, etl_b) = lab
    page = _page(site, token)
    assert _listed(page) == [etl_b, weekly, etl_a]  # newest first
    assert _tabs(page) == {"ALL": 3, "PENDING": 2, "RUNNING": 0, "SUCCEEDED": 0, "FAILED": 0,
                           "CANCELLED": 1}
    page.fill("input[name=q]", "NIGHTLY-etl")  # ignoring case
    page.press("input[name=q]", "Enter")
    page.wait_for_url("**/jobs?q=NIGHTLY-etl*")
    assert _listed(page) == [etl_b, etl_a]
    assert _tabs(page) == {"ALL": 2, "PENDING": 1, "RUNNING": 0, "SUCCEEDED": 0, "FAILED": 0,
                           "CANCELLED": 1}
    _shot(site, page, "13-jobs-search")
    page.click('nav.tabs a[data-tab="PENDING"]')
    page.wait_for_url("**/jobs?state=PENDING&q=NIGHTLY-etl")
    assert _listed(page) == [etl_a]
    assert page.locator('nav.tabs a[aria-current="page"]').get_attribute("data-tab") == "PENDING"
    assert page.input_value("input[name=q]") == "NIGHTLY-etl"  # the search box keeps it
    _shot(site, page, "14-jobs-search-pending-tab")
    page.click('nav.tabs a[data-tab="RUNNING"]')
    assert _listed(page) == []
    assert page.locator("[data-empty]").inner_text() == (
        "No job matches state RUNNING, id or name containing “NIGHTLY-etl”.")
    _shot(site, page, "15-jobs-nothing-matches")
    for query, words in (("q=" + "x" * 129, "query is 129 characters long"),
                         ("page=123", "continues an oldest-first listing")):
        answer = page.goto(f"{site.url}/jobs?{query}")
        assert answer.status == 400 and words in page.content(), query


def test_job_list_cli_json_query_newest_first_and_counts(site: Site,
                                                         lab: tuple[str, list[str]]) -> None:
    _, (etl_a, _, etl_b) = lab
    done = site.cluster.cli("job", "list", "--tenant", "lab", "--query", "nightly-ETL",
                            "--newest", "--limit", "1", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [j["job_id"] for j in document["jobs"]] == [etl_b]
    assert document["state_counts"] == {"PENDING": 1, "RUNNING": 0, "SUCCEEDED": 0,
                                        "FAILED": 0, "CANCELLED": 1}
    assert document["state_counts_partial"] is False
    rest = site.cluster.cli("job", "list", "--tenant", "lab", "--query", "nightly-ETL",
                            "--newest", "--page-token", document["next_page_token"], "--json")
    assert [j["job_id"] for j in json.loads(rest.stdout)["jobs"]] == [etl_a], rest.stderr
    wrong = site.cluster.cli("job", "list", "--page-token", document["next_page_token"])
    assert wrong.returncode != 0 and "newest-first" in wrong.stderr, wrong.stderr


def test_a_2000_task_job_draws_every_task_wrapped_to_the_windows_width(site: Site) -> None:
    wide = site.cluster.client(token=site.tokens["acme"]).submit(_parked_fan(1_998)).job_id
    page = _page(site, site.tokens["acme"])
    started = time.monotonic()
    page.goto(f"{site.url}/jobs/{wide}")
    page.wait_for_selector("svg g[data-task-id]")
    drawn_s = time.monotonic() - started
    assert page.locator("svg g[data-task-id]").count() == 2000
    assert page.locator(".graph .edge").count() == 2 * 1998
    print(f"a 2,000-task job page: graph drawn {drawn_s:.2f} s after navigation")
    width = float(page.locator(".graph svg").get_attribute("width"))
    assert width <= 1280, width  # the 1,998-wide layer is wrapped, not one 80,000 px column
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # no page h-scroll
    _shot(site, page, "12-job-2000-tasks", full_page=False)  # the first screen
    page.locator(".graph").evaluate("e => e.scrollTop = e.scrollHeight")  # the sink's end
    _shot(site, page, "12b-job-2000-tasks-end", full_page=False)
    site.cluster.client().cancel(wide)


def _retrying_spec() -> str:
    """A job whose timeline has retries, failures and overlapping attempts: `flaky` fails its
    first attempt then succeeds, `boom` fails twice, four `ok` tasks run side by side (cpu 4)."""
    again = {"max_attempts": 2, "backoff_s": 0}
    return json.dumps({"name": "timeline", "tenant": "acme", "failure_policy": "continue",
                       "tasks": [
        {"id": "flaky", "retry": again,
         "command": ["sh", "-c", 'test "$RAFTSCHED_ATTEMPT" -gt 1 || exit 3']},
        {"id": "boom", "retry": again, "command": ["sh", "-c", "exit 4"]},
        *({"id": f"ok{i}", "command": ["sleep", "1"]} for i in range(4))]})


def test_the_timeline_draws_a_bar_per_attempt_of_a_finished_job(site: Site) -> None:
    client = site.cluster.client(token=site.tokens["acme"])
    job_id = client.submit(_retrying_spec()).job_id
    wait_until(lambda: client.get_job(job_id).state in ("SUCCEEDED", "FAILED") or None,
               "the retrying job to end", STATE_TIMEOUT_S)
    history = {t.task_id: client.task_history(job_id, t.task_id).attempts
               for t in client.list_tasks(job_id).tasks}
    assert len(history["flaky"]) == len(history["boom"]) == 2
    expected = {(task_id, str(a.number), str(a.fence), a.cluster, a.state)
                for task_id, attempts in history.items() for a in attempts}
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{job_id}")
    bars = page.locator("svg.timeline rect.bar").all()
    drawn = {(b.get_attribute("data-task-id"), b.get_attribute("data-attempt"),
              b.get_attribute("data-fence"), b.get_attribute("data-cluster"),
              b.get_attribute("data-state")) for b in bars}
    assert len(bars) == len(expected) == 8 and drawn == expected
    assert [a.state for a in history["flaky"]] == ["FAILED", "SUCCEEDED"]
    assert page.locator("svg.timeline g.lane").count() == 1  # one cluster: east
    _assert_overlaps_stacked(bars, history)
    title = page.locator('svg.timeline rect.bar[data-task-id="boom"][data-attempt="2"] title')
    assert title.text_content().startswith("boom attempt 2 (fence ")
    page.click('svg.timeline rect.bar[data-task-id="boom"][data-attempt="1"]')
    page.wait_for_url(f"{site.url}/jobs/{job_id}/tasks/boom")
    page.go_back()
    _shot(site, page, "13-job-timeline")


def _assert_overlaps_stacked(bars: list[Any], history: dict[str, Any]) -> None:
    """Two attempts that overlap in time are drawn in different rows (neither hides the
    other)."""
    rows = {(b.get_attribute("data-task-id"), b.get_attribute("data-attempt")):
            float(b.get_attribute("y")) for b in bars}
    spans = [((task_id, str(a.number)), a.started_ms or a.assigned_ms, a.finished_ms)
             for task_id, attempts in history.items() for a in attempts]
    overlapping = 0
    for i, (one, start, end) in enumerate(spans):
        for other, other_start, other_end in spans[i + 1:]:
            if start < other_end and other_start < end:
                overlapping += 1
                assert rows[one] != rows[other], (one, other)
    print(f"timeline: {overlapping} overlapping pairs of attempts, each in its own row")


def _parked_fan(width: int) -> str:
    """root -> `width` tasks -> sink, parked (no cluster offers `nowhere`): costs no run."""
    tasks = [{"id": "root", "command": ["true"], "requires": ["nowhere"]},
             *({"id": f"t{i}", "command": ["true"], "depends_on": ["root"]}
               for i in range(width)),
             {"id": "sink", "command": ["true"], "depends_on": [f"t{i}" for i in range(width)]}]
    return json.dumps({"name": f"fan-{width}", "tenant": "acme", "allow_unschedulable": True,
                       "tasks": tasks})


def test_a_10000_task_job_collapses_and_its_groups_follow_live(site: Site) -> None:
    client = site.cluster.client(token=site.tokens["acme"])
    started = time.monotonic()
    job_id = client.submit(_parked_fan(9_998)).job_id
    print(f"a 10,000-task job: submitted in {time.monotonic() - started:.2f} s")
    page = _page(site, site.tokens["acme"])
    started = time.monotonic()
    page.goto(f"{site.url}/jobs/{job_id}")
    page.wait_for_selector("svg g.group")
    print(f"a 10,000-task job page: collapsed graph drawn {time.monotonic() - started:.2f} s "
          "after navigation")
    assert page.locator("svg g.group").count() == 3
    assert page.locator(".graph svg g[data-task-id]").count() == 0
    counts = 'g.group[data-layer="1"] text[data-count-state="PENDING"]'
    assert page.locator(counts).text_content() == "PENDING 9998"
    _shot(site, page, "14-job-10000-collapsed", full_page=False)
    page.wait_for_selector("#live:text('live')")
    client.cancel(job_id)
    page.wait_for_selector('g.group[data-layer="1"][data-state="CANCELLED"]',
                           timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('g.group[data-layer="1"] text[data-count-state="CANCELLED"]',
                           timeout=LIVE_TIMEOUT_MS)
    assert page.locator('g.group[data-layer="1"] text.small').all_text_contents() == [
        "CANCELLED 9998"]
    share = page.locator('g.group[data-layer="1"] rect.share')
    assert share.count() == 1 and share.get_attribute("data-state") == "CANCELLED"
    page.wait_for_selector('#job-state[data-state="CANCELLED"]', timeout=LIVE_TIMEOUT_MS)
    _shot(site, page, "15-job-10000-cancelled", full_page=False)


def test_a_collapsed_group_grows_live_when_its_layer_gains_states(site: Site) -> None:
    """One layer of 2,003 tasks (collapsed): 2,001 parked, `ok` and `bad` wait for a gate, then
    one succeeds and one fails: the group's lines go from RUNNABLE+RUNNING to three, and its
    node grows to hold them, on the open page."""
    gate = site.gate.parent / "gate-collapsed"
    wait_then = f"while [ ! -e {gate} ]; do sleep 0.1; done; exit"
    tasks = [{"id": f"p{i}", "command": ["true"], "requires": ["nowhere"]} for i in range(2_001)]
    tasks += [{"id": "ok", "command": ["sh", "-c", f"{wait_then} 0"]},
              {"id": "bad", "command": ["sh", "-c", f"{wait_then} 1"]}]
    client = site.cluster.client(token=site.tokens["acme"])
    job_id = client.submit(json.dumps({"name": "growing", "tenant": "acme", "tasks": tasks,
                                       "allow_unschedulable": True})).job_id
    wait_until(lambda: client.get_job(job_id).tasks.get("RUNNING") == 2 or None,
               "ok and bad to run", STATE_TIMEOUT_S)
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{job_id}")
    lines = 'g.group[data-layer="0"] text.small'
    assert page.locator(lines).all_text_contents() == ["RUNNABLE 2001", "RUNNING 2"]
    rect = page.locator('g.group[data-layer="0"] > rect')
    before = float(rect.get_attribute("height"))
    page.wait_for_selector("#live:text('live')")
    gate.touch()
    for state in ("FAILED", "SUCCEEDED"):  # each sees the gate at its own poll
        page.wait_for_selector(f'g.group[data-layer="0"] text[data-count-state="{state}"]',
                               timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('g.group[data-layer="0"][data-state="FAILED"]')
    assert page.locator(lines).all_text_contents() == ["FAILED 1", "RUNNABLE 2001",
                                                       "SUCCEEDED 1"]
    failed = page.locator('g.group[data-layer="0"] rect.share[data-state="FAILED"]')
    assert float(failed.get_attribute("width")) >= 3  # one failure in 2,003 still shows
    after = float(rect.get_attribute("height"))
    assert after > before
    last = page.locator(f"{lines} >> nth=2").bounding_box()
    box = rect.bounding_box()
    assert last["y"] + last["height"] <= box["y"] + box["height"]  # the third line is inside
    _shot(site, page, "16-collapsed-grown", full_page=False)
    site.cluster.client().cancel(job_id)


def test_strangers_and_other_tenants_see_nothing(site: Site) -> None:
    stranger = _page(site, None)
    for path in ("/jobs", f"/jobs/{site.job_id}", f"/jobs/{site.job_id}/tasks/hello",
                 f"/jobs/{site.job_id}/timeline"):
        stranger.goto(site.url + path)
        assert stranger.url == f"{site.url}/login"
        assert site.job_id not in stranger.content()
    _shot(site, stranger, "09-login")
    other = _page(site, site.tokens["other"])
    assert site.job_id not in other.content()
    for path in (f"/jobs/{site.job_id}", f"/jobs/{site.job_id}/tasks/hello",
                 f"/jobs/{site.job_id}/events", f"/jobs/{site.job_id}/timeline"):
        answer = other.goto(site.url + path)
        assert answer.status == 404, path
        assert "hello-from-task" not in other.content()
    _shot(site, other, "10-other-tenant-404")
    assert other.goto(f"{site.url}/clusters").status == 403


def test_forged_or_missing_csrf_tokens_are_refused(site: Site) -> None:
    parked = site.cluster.client(token=site.tokens["acme"]).submit(PARKED).job_id
    page = _page(site, site.tokens["acme"])
    for form in ({}, {"csrf": "forged"}):
        answer = page.request.post(f"{site.url}/jobs/{parked}/cancel", form=form,
                                   max_redirects=0)
        assert answer.status == 403, form
    assert site.cluster.client().get_job(parked).state != "CANCELLED"


def test_bad_input_gets_a_clean_4xx(site: Site) -> None:
    page = _page(site, site.tokens["acme"])
    assert page.goto(f"{site.url}/jobs/no-such-job").status == 404
    assert "no job" in page.content().lower() or "404" in page.title()
    _shot(site, page, "11-unknown-job")
    host, port = site.url.removeprefix("https://").rsplit(":", 1)
    cookie = {c["name"]: c["value"] for c in page.context.cookies()}
    headers = {"cookie": "; ".join(f"{k}={v}" for k, v in cookie.items())}
    for path in ("/jobs/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/static/../web/console.py",
                 "/jobs/x/tasks/..%2f..%2fetc"):
        status, body = _raw_get(host, int(port), path, headers)
        assert status == 404 and b"Traceback" not in body, path
    answer = _raw_request(host, int(port), b"GET /jobs?tenant=" + b"a" * (10 * 1024 * 1024)
                          + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 4") and b"Traceback" not in answer, answer[:200]


def _raw_request(host: str, port: int, request: bytes) -> bytes:
    """Send `request` over HTTPS in pieces until the server stops reading; its answer."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=30) as raw, \
            context.wrap_socket(raw) as tls:
        with contextlib.suppress(OSError):  # the server answered and closed before reading it all
            for start in range(0, len(request), 64 * 1024):
                tls.sendall(request[start:start + 64 * 1024])
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := tls.recv(65536):
                answer += chunk
        return answer


def _raw_get(host: str, port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """A GET sent as written (no client-side normalising of `..`), over HTTPS."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=30)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_no_token_reaches_the_consoles_log(site: Site) -> None:
    page = _page(site, None)
    page.goto(f"{site.url}/login")
    page.fill("input[name=token]", "rst_0123456789abcdef_not-a-real-token-secret")
    page.click("button[type=submit]")
    assert page.locator(".error").inner_text().startswith("this token is not valid")
    web = next(c for c in site.cluster.supervisor.children if c.name == "web")
    text = Path(web.log_path).read_text(errors="replace")
    assert "web_listening" in text
    for token in site.tokens.values():
        parsed = tokens.parse_token(token)
        assert parsed is not None
        assert parsed[1] not in text  # the secret (it may itself contain "_")
    assert "not-a-real-token-secret" not in text


def _live_spec(gates: Path) -> str:
    script = (f"echo first-line; while [ ! -e {gates}/print ]; do sleep 0.1; done; "
              f"echo second-line; while [ ! -e {gates}/end ]; do sleep 0.1; done")
    return json.dumps({"name": "live-output", "tenant": "acme", "tasks": [
        {"id": "talk", "command": ["sh", "-c", script]}]})


def test_a_running_tasks_page_shows_its_lines_as_it_prints_them(site: Site) -> None:
    gates = site.gate.parent / "live-gates"
    gates.mkdir()
    client = site.cluster.client(token=site.tokens["acme"])
    job_id = client.submit(_live_spec(gates)).job_id
    wait_until(lambda: client.task_history(job_id, "talk").state == "RUNNING" or None,
               "the talking task to run", STATE_TIMEOUT_S)
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{job_id}/tasks/talk")
    page.wait_for_selector("pre#output:has-text('first-line')", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector("#task-live:has-text('following the output live')")
    assert "Where it runs" in page.content()  # running: where, not why not
    page.evaluate("window.__notReloaded = true")
    (gates / "print").touch()
    started = time.monotonic()
    page.wait_for_selector("pre#output:has-text('second-line')", timeout=LIVE_TIMEOUT_MS)
    print(f"the second line reached the open page {time.monotonic() - started:.2f} s after "
          "its gate opened")
    assert page.evaluate("window.__notReloaded") is True  # appended in place
    assert page.locator("#output").inner_text().split() == ["first-line", "second-line"]
    _shot(site, page, "13-task-live-output")
    (gates / "end").touch()  # the attempt ends: the page reloads once, finished
    page.wait_for_selector('table.attempts tr[data-state="SUCCEEDED"]', timeout=LIVE_TIMEOUT_MS)
    assert page.evaluate("window.__notReloaded") is None
    assert "Why not running" not in page.content()
    assert page.locator("#output").inner_text().split() == ["first-line", "second-line"]
    _shot(site, page, "14-task-finished")


def test_a_finished_tasks_page_says_nothing_of_why_it_is_not_running(site: Site) -> None:
    wait_until(lambda: _task_states(site)["hello"] == "SUCCEEDED" or None, "hello to succeed",
               STATE_TIMEOUT_S)
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{site.job_id}/tasks/hello")
    assert "Why not running" not in page.content() and page.locator("#explain").count() == 0
    assert page.locator("#task-live").inner_text() == ""  # nothing to follow


def _resource_cell(page: Any, cluster: str, resource: str, column: str) -> str:
    cell = page.locator(f'tbody[data-cluster-id="{cluster}"] tr[data-resource="{resource}"] '
                        f"td.{column}")
    return str(cell.inner_text()).strip()


def _holding(site: Site, tenant: str, cpu: int, gate: Path) -> tuple[str, Any]:
    """A job of `tenant` whose one task holds `cpu` cpus until `gate` exists."""
    spec = json.dumps({"name": f"hold-{tenant}", "tenant": tenant, "tasks": [
        {"id": "hold", "resources": {"cpu": cpu},
         "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"]}]})
    client = site.cluster.client(token=site.tokens[tenant])
    return client.submit(spec).job_id, client


def test_clusters_and_tenants_show_reported_free_and_fair_share(site: Site) -> None:
    gate = site.gate.parent / "hold-gate"
    site.cluster.client().set_tenant("other", weight=3)
    held = [_holding(site, "acme", 2, gate), _holding(site, "other", 1, gate)]
    try:
        for job_id, client in held:
            wait_until(lambda j=job_id, c=client: c.task_history(j, "hold").state == "RUNNING"
                       or None, f"{job_id} to run", STATE_TIMEOUT_S)
        admin = site.cluster.client()
        leader = admin.cluster_status(server=admin.cluster_status().leader)
        follower = next(a for a in site.cluster.grpc if a != leader.responder)
        assert leader.clusters[0].HasField("reported_free")  # only the leader knows it
        assert not admin.cluster_status(server=follower).clusters[0].HasField("reported_free")
        page = _page(site, site.tokens["operator"])
        page.goto(f"{site.url}/clusters")
        assert page.locator("#not-leader").count() == 0  # the leader answered
        reported = _resource_cell(page, "east", "cpu", "reported-free")
        memory = _resource_cell(page, "east", "memory", "reported-free")
        assert reported.endswith(" CPU") and memory.endswith(" MB"), (reported, memory)
        assert 0 <= float(reported.split()[0]) <= 4  # the agent offers 4 cpus
        assert float(_resource_cell(page, "east", "cpu", "committed").split()[0]) >= 3
        assert _resource_cell(page, "east", "cpu", "unusable") != "unknown"
        assert page.locator('a[href="/clusters/east/drain"]').count() == 0  # operators cannot
        _shot(site, page, "15-clusters")
        # The weights of the tenants with work (other tests' parked jobs count too).
        total = sum(t.weight for t in admin.list_tenants().tenants if t.queued or t.running)
        page.goto(f"{site.url}/tenants")
        rows = {name: page.locator(f'tr[data-tenant="{name}"]') for name in ("acme", "other")}
        for name, weight in (("acme", 1), ("other", 3)):
            assert rows[name].locator(".fair-share").inner_text() == f"{100 * weight / total:.1f} %"
        assert rows["acme"].get_attribute("data-standing") == "over"  # 2+ of 4 cpus
        assert rows["other"].get_attribute("data-standing") == "under"  # 1 of 4
        _shot(site, page, "16-tenants")
    finally:
        gate.touch()


def _draining(site: Site, cluster: str) -> bool:
    status = site.cluster.cli("admin", "status", "--json")
    assert status.returncode == 0, status.stderr
    found = [c for c in json.loads(status.stdout)["clusters"] if c["cluster"] == cluster]
    return bool(found[0]["draining"])


def test_an_admin_drains_and_undrains_a_cluster_through_the_page(site: Site) -> None:
    page = _page(site, site.tokens["admin"])
    page.goto(f"{site.url}/clusters")
    try:
        page.click('a[href="/clusters/east/drain"]')
        page.wait_for_url(f"{site.url}/clusters/east/drain")
        assert "east" in page.locator("h1").inner_text()
        assert "keep running" in page.locator("main").inner_text()
        _shot(site, page, "17-drain-confirm")
        page.fill("#reason", "web test drain")
        page.click("#confirm")
        page.wait_for_url(f"{site.url}/clusters")
        assert _draining(site, "east")
        assert page.locator('tbody[data-cluster-id="east"][data-draining="true"]').count() == 1
        _shot(site, page, "18-clusters-draining")
        page.click('a[href="/clusters/east/undrain"]')
        page.click("#confirm")
        page.wait_for_url(f"{site.url}/clusters")
        assert not _draining(site, "east")
    finally:
        site.cluster.client().drain_cluster("east", False)


def _csrf_of(page: Any) -> str:
    return str(page.locator('form.logout input[name="csrf"]').get_attribute("value"))


def test_only_an_admin_may_drain_and_never_with_a_forged_csrf_token(site: Site) -> None:
    for name in ("operator", "acme"):
        page = _page(site, site.tokens[name])
        answer = page.goto(f"{site.url}/clusters")
        assert page.locator('a[href$="/drain"]').count() == 0, name
        assert answer.status == (200 if name == "operator" else 403)
        refused = page.request.post(f"{site.url}/clusters/east/drain",
                                    form={"csrf": _csrf_of(page)}, max_redirects=0)
        assert refused.status == 403, name
    admin = _page(site, site.tokens["admin"])
    for form in ({}, {"csrf": "forged"}):
        refused = admin.request.post(f"{site.url}/clusters/east/drain", form=form,
                                     max_redirects=0)
        assert refused.status == 403, form
    assert not _draining(site, "east")


OPEN_PAGES = 30
"""Job pages open at once in one test: more than three replicas serve streams to one caller
(3 x MAX_STREAMS_PER_CALLER = 24): pages each holding a replica stream of their own could not
all be live."""


@pytest.fixture(scope="module")
def shared_console(site: Site, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second console with its own watch token (--watch-token-file): ONE event stream for
    every page of every user."""
    token = site.cluster.client().create_token("*", "operator", "web watch").token
    path = tmp_path_factory.mktemp("watch") / "web-watch.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return _start_console(site.cluster, path.parent, "web-shared",
                          ("--watch-token-file", str(path)))


@pytest.mark.parametrize(("console", "tenants"), [("per-session", ("acme",)),
                                                  ("shared", ("acme", "other"))])
def test_thirty_open_job_pages_all_follow_their_jobs_live(site: Site, console: str,
                                                          tenants: tuple[str, ...],
                                                          request: pytest.FixtureRequest) -> None:
    """Thirty pages of parked jobs (of one session, or of two users' sessions on a console with
    its own watch token): every page turns CANCELLED in place when its job is cancelled, and
    none lost its stream (a page holding a replica stream of its own, past the caller's bound,
    would end it: "finished" without the cancel)."""
    url = site.url if console == "per-session" else request.getfixturevalue("shared_console")
    shown = Site(site.cluster, url, site.tokens, site.job_id, site.gate, site.shots,
                 site.browser)
    pages = []
    for tenant in tenants:
        client = site.cluster.client(token=site.tokens[tenant])
        first = _page(shown, site.tokens[tenant])
        for n in range(OPEN_PAGES // len(tenants)):
            job_id = client.submit(PARKED.replace('"acme"', f'"{tenant}"')).job_id
            page = first if n == 0 else first.context.new_page()
            page.goto(f"{url}/jobs/{job_id}")
            page.evaluate("""() => { window.__live = [];
                new MutationObserver(() => window.__live.push(
                    document.getElementById("live").textContent))
                .observe(document.getElementById("live"), {childList: true}); }""")
            pages.append((job_id, page))
    for _, page in pages:
        page.wait_for_selector("#live:text('live')")
    # The pages hold no replica stream of acme's: acme's own watch is still served (pages
    # holding one each would hold all 24 acme may have: RESOURCE_EXHAUSTED).
    with site.cluster.client(token=site.tokens["acme"], retry_budget_s=5) as probe:
        watch = probe.watch_events()
        assert next(watch).kind == "progress"
        watch.close()
    admin = site.cluster.client()
    for job_id, _ in pages:
        admin.cancel(job_id, "a dozen pages")
    for job_id, page in pages:
        page.wait_for_selector('#job[data-state="CANCELLED"]', timeout=LIVE_TIMEOUT_MS)
        seen = page.evaluate("window.__live")
        assert "reconnecting…" not in seen, (job_id, seen)
    _shot(site, pages[-1][1], f"20-thirty-pages-{console}")
    for context in {id(page.context): page.context for _, page in pages}.values():
        context.close()
