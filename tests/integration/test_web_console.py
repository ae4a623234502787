"""The web console in a real browser: Debian's chromium (headless, driven by Playwright) against
a real cluster (three replicas, a subprocess agent) and a real `raftsched web` process over
HTTPS with its certificate from the cluster's CA. One cluster, one console and one browser for
the module. Screenshots of each page go to the test's temp dir (printed at the end).

Sign in; the list shows the job; its page shows every task as a node with its state; a running
task turns SUCCEEDED on the open page without a reload; a task page shows the output; an
operator cancels a job through the page and the CLI agrees; an unauthenticated browser and
another tenant's user see none of it; a forged or missing CSRF token is refused (403); bad
input gets a clean 4xx. The task page of a running task shows its lines as it prints them;
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
from tests.support.cluster import LocalCluster, free_port, running, task_user_root, wait_for

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


def _start_console(cluster: LocalCluster, root: Path) -> str:
    assert cluster.authority is not None
    files = pki.issue_web(cluster.authority)
    address = f"127.0.0.1:{free_port()}"
    cluster.supervisor.start("web", [
        sys.executable, "-m", "raftsched", "web", "--listen", address,
        "--servers", ",".join(cluster.grpc), "--tls-ca", str(files.ca),
        "--tls-cert", str(files.cert), "--tls-key", str(files.key),
        "--https-cert", str(files.cert), "--https-key", str(files.key)],
        root / "logs" / "web.log")
    wait_for(lambda: port_open(address), STATE_TIMEOUT_S, f"the console on {address}")
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
    wait_for(lambda: _task_states(site)["gate"] == "RUNNING" or None, STATE_TIMEOUT_S,
             "the gate task to run")
    page.click(f'a[href="/jobs/{site.job_id}"]')
    page.wait_for_selector("svg g.node")
    expected = _task_states(site)
    drawn = {node.get_attribute("data-task-id"): node.get_attribute("data-state")
             for node in page.locator("svg g[data-task-id]").all()}
    assert set(drawn) == set(expected) == {"hello", "gate", "after"}
    assert drawn["gate"] == "RUNNING" and drawn["after"] in ("PENDING", "RUNNABLE")
    assert page.locator("svg line").count() == 2
    _shot(site, page, "02-job-running")
    page.evaluate("window.__notReloaded = true")
    site.gate.touch()
    page.wait_for_selector('svg g[data-task-id="gate"][data-state="SUCCEEDED"]',
                           timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector('tr[data-task-id="after"][data-state="SUCCEEDED"]',
                           timeout=LIVE_TIMEOUT_MS)
    assert page.evaluate("window.__notReloaded") is True  # recoloured in place
    assert page.locator("#job-state").inner_text() == "SUCCEEDED"
    assert page.locator('tr[data-task-id="after"] .attempts-cell').inner_text() == "1"
    assert not page.locator("#cancel").is_visible()  # nothing left to cancel
    _shot(site, page, "03-job-succeeded")


def test_a_task_page_shows_attempts_and_output(site: Site) -> None:
    wait_for(lambda: _task_states(site)["hello"] == "SUCCEEDED" or None, STATE_TIMEOUT_S,
             "hello to succeed")
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


def test_a_2000_task_job_draws_every_task(site: Site) -> None:
    tasks = [{"id": "root", "command": ["true"], "requires": ["nowhere"]}] + [
        {"id": f"t{i}", "command": ["true"], "depends_on": ["root"]} for i in range(1999)]
    spec = json.dumps({"name": "wide", "tenant": "acme", "allow_unschedulable": True,
                       "tasks": tasks})
    wide = site.cluster.client(token=site.tokens["acme"]).submit(spec).job_id
    page = _page(site, site.tokens["acme"])
    started = time.monotonic()
    page.goto(f"{site.url}/jobs/{wide}")
    page.wait_for_selector("svg g[data-task-id]")
    drawn_s = time.monotonic() - started
    assert page.locator("svg g[data-task-id]").count() == 2000
    assert page.locator("svg line").count() == 1999
    print(f"a 2,000-task job page: graph drawn {drawn_s:.2f} s after navigation")
    _shot(site, page, "12-job-2000-tasks", full_page=False)  # the first screen
    site.cluster.client().cancel(wide)


def test_strangers_and_other_tenants_see_nothing(site: Site) -> None:
    stranger = _page(site, None)
    for path in ("/jobs", f"/jobs/{site.job_id}", f"/jobs/{site.job_id}/tasks/hello"):
        stranger.goto(site.url + path)
        assert stranger.url == f"{site.url}/login"
        assert site.job_id not in stranger.content()
    _shot(site, stranger, "09-login")
    other = _page(site, site.tokens["other"])
    assert site.job_id not in other.content()
    for path in (f"/jobs/{site.job_id}", f"/jobs/{site.job_id}/tasks/hello",
                 f"/jobs/{site.job_id}/events"):
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
    wait_for(lambda: client.task_history(job_id, "talk").state == "RUNNING" or None,
             STATE_TIMEOUT_S, "the talking task to run")
    page = _page(site, site.tokens["acme"])
    page.goto(f"{site.url}/jobs/{job_id}/tasks/talk")
    page.wait_for_selector("pre#output:has-text('first-line')", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_selector("#task-live:has-text('following the output live')")
    assert "Why not running" in page.content()  # not finished yet
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
    wait_for(lambda: _task_states(site)["hello"] == "SUCCEEDED" or None, STATE_TIMEOUT_S,
             "hello to succeed")
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
            wait_for(lambda j=job_id, c=client: c.task_history(j, "hold").state == "RUNNING"
                     or None, STATE_TIMEOUT_S, f"{job_id} to run")
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
        page.goto(f"{site.url}/tenants")
        rows = {name: page.locator(f'tr[data-tenant="{name}"]') for name in ("acme", "other")}
        assert rows["acme"].locator(".fair-share").inner_text() == "25.0 %"  # 1 / (1 + 3)
        assert rows["other"].locator(".fair-share").inner_text() == "75.0 %"
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
