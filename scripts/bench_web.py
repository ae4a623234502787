"""scripts/bench web — the web console at scale, on this machine.

3 replicas + 2 mock agents + a `raftsched web` console (HTTPS, its certificate from the cluster's
CA) as real processes on 127.0.0.1, measured in one run:
  1. the state filled with --jobs N jobs of one task each (default 100,000), submitted through
     the API with many in flight (the submit rate is printed); most run a no-op mock task and
     succeed, one in PARKED_EVERY waits on a `requires` no cluster has (allow_unschedulable),
     one in FAILED_EVERY fails; ten tenants;
  2. `/jobs` (signed in, over HTTPS) p50/p99 over --requests requests: the first page, and
     filtered pages (PAGE_CASES: by tenant, by a common state, by a rare one), each next to
     the ListJobs call alone;
  3. a 2,000-task job's page in Chromium (Playwright, /usr/bin/chromium): navigation until the
     graph's 2,000 `svg g[data-task-id]` nodes are in the DOM, p50 over --loads loads;
  4. --streams open job pages streaming (server-sent events of `/jobs/{id}/events`, plus
     --browser-pages real pages) while tasks complete as fast as the agents' slots allow
     (aimed at AIM_TASKS_S): the replicas' submit latency p50/p99 (sequential submits of a
     small job through the Client) with and without the streams, and the ratio; how many
     streams followed their job to its end; and, to tell the event stream's share from the
     console's, the same load with as many bare `Client.watch_events` streams instead.
--quick: 5,000 jobs, fewer requests, loads and streams (a couple of minutes). Every phase is
bounded in time; every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raftsched.client.client import Client  # noqa: E402
from raftsched.dev import pki  # noqa: E402
from raftsched.dev.ports import port_open  # noqa: E402
from raftsched.errors import RaftschedError  # noqa: E402
from raftsched.spec.job import parse_spec_text  # noqa: E402
from raftsched.spec.model import JobSpec  # noqa: E402
from raftsched.states import TERMINAL_JOB_STATE_NAMES, JobStateName  # noqa: E402
from tests.support.cluster import LocalCluster, free_port  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

PHASE_TIMEOUT_S = 900.0
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TENANTS = tuple(f"t{i}" for i in range(10))
PARKED_EVERY = 10
"""One fill job in this many waits for good (MAX_LIVE_JOBS is 100,000: they cannot all)."""
FAILED_EVERY = 1_000
"""One fill job in this many fails (a rare state to filter by)."""
AGENT_SLOTS = 64
"""cpu of each of the 2 agents: load tasks take 1 cpu, so this many run on each at once."""
LOAD_TASK_MS = 100
"""How long a load task runs: 2 x AGENT_SLOTS / LOAD_TASK_MS tasks/s at most (1,280/s)."""
AIM_TASKS_S = 1_000
UNPLACEABLE = ("name: probe\nallow_unschedulable: true\n"
               "tasks:\n  - {id: t, command: [mock], requires: [nowhere]}\n")
PAGE_CASES: tuple[tuple[str, dict[str, str]], ...] = (
    ("first page", {}),
    ("tenant t3 (10 %)", {"tenant": "t3"}),
    ("state SUCCEEDED (~90 %)", {"state": JobStateName.SUCCEEDED}),
    ("state FAILED (0.1 %)", {"state": JobStateName.FAILED}),
)
"""(label, query) of the /jobs pages timed; the query goes to ListJobs as it is (a text query,
`q`, is one more line here once ListJobs has it)."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(samples: list[float]) -> str:
    return f"p50 {pct(samples, 0.5):7.1f} ms  p99 {pct(samples, 0.99):7.1f} ms"


# --- the console over HTTPS -------------------------------------------------------------------


@dataclass
class Console:
    host: str
    port: int
    tls: ssl.SSLContext

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def connect(self, timeout_s: float = 60.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.tls,
                                           timeout=timeout_s)

    def sign_in(self, token: str) -> str:
        """The session cookie ("name=value") of a sign-in with `token`."""
        connection = self.connect()
        try:
            connection.request("POST", "/login", body=urlencode({"token": token}),
                               headers={"content-type": "application/x-www-form-urlencoded"})
            response = connection.getresponse()
            response.read()
            cookie = response.getheader("set-cookie") or ""
            if response.status != 303 or not cookie:
                raise SystemExit(f"sign-in answered {response.status}, cookie {bool(cookie)}")
            return cookie.split(";", 1)[0]
        finally:
            connection.close()


def start_console(cluster: LocalCluster, root: Path) -> Console:
    assert cluster.authority is not None
    files = pki.issue_web(cluster.authority)
    port = free_port()
    # As deployed (deploy/README.md): the console's own operator token for its one event
    # stream, which wakes every open page.
    watch = root / "web-watch.token"
    pki.write_token(watch, str(cluster.client().create_token(
        "*", "operator", "bench web: the console's event stream").token))
    cluster.supervisor.start("web", [
        sys.executable, "-m", "raftsched", "web", "--listen", f"127.0.0.1:{port}",
        "--servers", ",".join(cluster.grpc), "--tls-ca", str(files.ca),
        "--tls-cert", str(files.cert), "--tls-key", str(files.key),
        "--https-cert", str(files.cert), "--https-key", str(files.key),
        "--watch-token-file", str(watch)],
        root / "logs" / "web.log")
    wait_until(lambda: port_open(f"127.0.0.1:{port}"), "the console to listen", 60)
    return Console("127.0.0.1", port, ssl.create_default_context(cafile=str(files.ca)))


# --- 1. the state -----------------------------------------------------------------------------


def fill_specs() -> dict[tuple[str, str], JobSpec]:
    """(tenant, kind) -> a parsed one-task spec: kind "ok" (a no-op), "parked", "failed"."""
    commands = {"ok": "[mock]", "parked": "[mock]", "failed": "[mock, exit=1]"}
    specs = {}
    for tenant in TENANTS:
        for kind, command in commands.items():
            extra = ", requires: [nowhere]" if kind == "parked" else ""
            specs[tenant, kind] = parse_spec_text(
                f"name: fill-{kind}\ntenant: {tenant}\nallow_unschedulable: true\n"
                f"tasks:\n  - {{id: t, command: {command}{extra}, "
                f"resources: {{cpu: 0.001, memory_mb: 0}}}}\n")
    return specs


def kind_of(i: int) -> str:
    if i % FAILED_EVERY == FAILED_EVERY - 1:
        return "failed"
    return "parked" if i % PARKED_EVERY == 0 else "ok"


def fill(cluster: LocalCluster, jobs: int, in_flight: int) -> list[str]:
    """Submit `jobs` jobs from `in_flight` clients; prints the rate as it goes."""
    specs = fill_specs()
    pool = [cluster.client(retry_budget_s=120) for _ in range(in_flight)]
    done = [0]
    lock = threading.Lock()
    started = time.perf_counter()
    step = max(1, jobs // 10)

    def submit(i: int) -> str:
        spec = specs[TENANTS[i % len(TENANTS)], kind_of(i)]
        job_id = pool[i % in_flight].submit_spec(spec).job_id
        with lock:
            done[0] += 1
            if done[0] % step == 0:
                elapsed = time.perf_counter() - started
                print(f"  {done[0]:>9,} jobs submitted  {done[0] / elapsed:7.0f} submits/s",
                      flush=True)
        return job_id

    with ThreadPoolExecutor(in_flight) as executor:
        job_ids = list(executor.map(submit, range(jobs)))
    elapsed = time.perf_counter() - started
    print(f"filled: {jobs:,} jobs in {elapsed:.1f} s = {jobs / elapsed:.0f} submits/s "
          f"({in_flight} in flight)", flush=True)
    return job_ids


def wait_ran(client: Client, job_ids: list[str]) -> None:
    """Until the last jobs that run have ended (the agents run them in about submit order)."""
    last = [j for i, j in enumerate(job_ids) if kind_of(i) != "parked"][-20:]
    started = time.perf_counter()
    ended = (JobStateName.SUCCEEDED, JobStateName.FAILED)
    wait_until(lambda: all(client.get_job(j).state in ended for j in last) or None,
               "the fill jobs to run", PHASE_TIMEOUT_S)
    print(f"  the fill jobs that run had ended {time.perf_counter() - started:.1f} s later",
          flush=True)


# --- 2. /jobs ---------------------------------------------------------------------------------


def timed_get(connection: http.client.HTTPSConnection, path: str, cookie: str) -> float:
    started = time.perf_counter()
    connection.request("GET", path, headers={"cookie": cookie})
    response = connection.getresponse()
    body = response.read()
    elapsed_ms = (time.perf_counter() - started) * 1000
    if response.status != 200 or b"data-job-id" not in body:
        raise SystemExit(f"GET {path}: {response.status}, {len(body)} bytes without a job row")
    return elapsed_ms


def time_jobs_pages(console: Console, cookie: str, client: Client, requests: int) -> None:
    connection = console.connect()
    try:
        for label, query in PAGE_CASES:
            path = "/jobs" + (f"?{urlencode(query)}" if query else "")
            timed_get(connection, path, cookie)  # warm
            pages = [timed_get(connection, path, cookie) for _ in range(requests)]
            calls = []
            for _ in range(requests):
                started = time.perf_counter()
                client.list_jobs(limit=50, **query)
                calls.append((time.perf_counter() - started) * 1000)
            print(f"/jobs {label:<24} {figures(pages)}   (ListJobs alone {figures(calls)}; "
                  f"{requests} requests)", flush=True)
    finally:
        connection.close()


# --- 3. a 2,000-task job in Chromium ----------------------------------------------------------


def wide_spec(tenant: str) -> str:
    tasks = [{"id": "root", "command": ["mock"], "requires": ["nowhere"]}] + [
        {"id": f"t{i}", "command": ["mock"], "depends_on": ["root"]} for i in range(1999)]
    return json.dumps({"name": "wide", "tenant": tenant, "allow_unschedulable": True,
                       "tasks": tasks})


def time_graph(console: Console, token: str, client: Client, loads: int) -> None:
    """Each load in a fresh tab (the last one closed: its live stream ends); the same page
    fetched over HTTPS without a browser, for the server's share."""
    from playwright.sync_api import sync_playwright

    job_id = client.submit(wide_spec("t0")).job_id
    samples = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(ignore_https_errors=True,
                                          viewport={"width": 1280, "height": 900})
            signed_in_page(context, console, token).close()
            for _ in range(loads):
                page = context.new_page()
                started = time.perf_counter()
                page.goto(f"{console.url}/jobs/{job_id}", wait_until="commit")
                # the 2,000th node attached (no script evaluated: the page's CSP forbids eval)
                page.locator("svg g[data-task-id]").nth(1999).wait_for(state="attached",
                                                                        timeout=120_000)
                samples.append((time.perf_counter() - started) * 1000)
                page.close()
        finally:
            browser.close()
    served, size = time_page(console, console.sign_in(token), f"/jobs/{job_id}", loads)
    client.cancel(job_id)
    print(f"a 2,000-task job's page, navigation -> 2,000 nodes in the DOM: p50 "
          f"{pct(samples, 0.5) / 1000:.2f} s  (each: "
          f"{', '.join(f'{s / 1000:.2f}' for s in samples)} s; {loads} loads); the page alone "
          f"over HTTPS p50 {pct(served, 0.5) / 1000:.2f} s ({size / 1e6:.1f} MB)", flush=True)


def time_page(console: Console, cookie: str, path: str, count: int) -> tuple[list[float], int]:
    connection = console.connect()
    samples, size = [], 0
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", path, headers={"cookie": cookie})
            response = connection.getresponse()
            size = len(response.read())
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        connection.close()
    return samples, size


def signed_in_page(context: Any, console: Console, token: str) -> Any:
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{console.url}/login")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{console.url}/jobs")
    return page


# --- 4. live pages while tasks complete -------------------------------------------------------


@dataclass
class Stream:
    """One open job page's server-sent events, read on a thread."""

    job_id: str
    updates: int = 0
    first_s: float = -1.0
    """Seconds from opening to the first `tasks` event (-1: none came)."""
    opened: float = 0.0
    followed_to_end: bool = False
    """It said `end` after a `tasks` event showing the job terminal."""
    ended_early: bool = False
    """It said `end` (or `failed`, or closed) before its job had ended: no longer live."""
    last_state: str = ""
    error: str = ""
    connection: Any = None
    thread: Any = None

    def read(self, console: Console, cookie: str) -> None:
        self.opened = time.perf_counter()
        try:
            self.connection = console.connect(timeout_s=PHASE_TIMEOUT_S)
            self.connection.request("GET", f"/jobs/{self.job_id}/events",
                                    headers={"cookie": cookie, "accept": "text/event-stream"})
            response = self.connection.getresponse()
            if response.status != 200:
                self.error = f"HTTP {response.status}"
                return
            self._events(response)
        except (OSError, http.client.HTTPException) as error:
            self.error = self.error or type(error).__name__
        finally:
            if not self.followed_to_end:
                self.ended_early = True

    def _events(self, response: Any) -> None:
        kind = ""
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "tasks":
                self.updates += 1
                if self.first_s < 0:
                    self.first_s = time.perf_counter() - self.opened
                self.last_state = json.loads(line[6:])["job_state"]
            elif line.startswith("data: ") and kind in ("end", "failed"):
                self.followed_to_end = kind == "end" and self.last_state in \
                    TERMINAL_JOB_STATE_NAMES
                if not self.followed_to_end:
                    self.error = f"{kind} while its job was {self.last_state or 'not shown'}" + (
                        f": {json.loads(line[6:])}" if kind == "failed" else "")
                return


def load_spec(tenant: str, tasks: int) -> str:
    return json.dumps({"name": "load", "tenant": tenant, "tasks": [
        {"id": f"t{i}", "command": ["mock", f"sleep_ms={LOAD_TASK_MS}"],
         "resources": {"cpu": 1, "memory_mb": 0}} for i in range(tasks)]})


@dataclass
class Phase:
    label: str
    submits: list[float] = field(default_factory=list)
    tasks_s: float = 0.0


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds so far of the replicas (together) and of the console."""
    web = [c for c in cluster.supervisor.children if c.name == "web"]
    return {"replicas": sum(cpu_s(r.pid) for r in cluster.replicas),
            "console": sum(cpu_s(c.pid) for c in web)}


def run_load(cluster: LocalCluster, phase: Phase, jobs: int, tasks_each: int,
             opened: Callable[[list[str]], None]) -> None:
    """Submit `jobs` load jobs, call `opened(job_ids)` (opens the pages), then submit a probe
    job after another through a Client until every load job has ended; the tasks/s achieved."""
    client = cluster.client(retry_budget_s=120)
    probe = cluster.client(retry_budget_s=120)
    cpu_before = cpu_of(cluster)
    started = time.perf_counter()
    job_ids = [client.submit(load_spec(TENANTS[i % len(TENANTS)], tasks_each)).job_id
               for i in range(jobs)]
    opened(job_ids)
    ended: list[float] = []

    def watch() -> None:
        wait_until(lambda: all(client.get_job(j).state in TERMINAL_JOB_STATE_NAMES
                             for j in job_ids) or None, "the load to end", PHASE_TIMEOUT_S)
        ended.append(time.perf_counter())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    while not ended and time.perf_counter() - started < PHASE_TIMEOUT_S:
        t0 = time.perf_counter()
        probe.submit(UNPLACEABLE)
        phase.submits.append((time.perf_counter() - t0) * 1000)
    watcher.join(PHASE_TIMEOUT_S)
    phase.tasks_s = jobs * tasks_each / ((ended[0] if ended else time.perf_counter()) - started)
    used = {name: spent - cpu_before[name] for name, spent in cpu_of(cluster).items()}
    per_k = 1000 / (jobs * tasks_each)
    print(f"{phase.label:<34} {phase.tasks_s:6.0f} tasks/s achieved (aim {AIM_TASKS_S}); "
          f"submit {figures(phase.submits)} ({len(phase.submits)} submits); CPU per 1,000 "
          f"tasks: replicas {used['replicas'] * per_k:.2f} s, console "
          f"{used['console'] * per_k:.2f} s", flush=True)


def open_streams(console: Console, cookies: dict[str, str], job_ids: list[str],
                 streams: list[Stream]) -> None:
    for i, job_id in enumerate(job_ids):
        stream = Stream(job_id)
        cookie = cookies[TENANTS[i % len(TENANTS)]]
        stream.thread = threading.Thread(target=stream.read, args=(console, cookie), daemon=True)
        stream.thread.start()
        streams.append(stream)


def stream_phases(cluster: LocalCluster, console: Console, user_tokens: dict[str, str],
                  args: Any) -> None:
    cookies = {tenant: console.sign_in(token) for tenant, token in user_tokens.items()}
    idle = Phase("no load, no streams")
    probe = cluster.client()
    for _ in range(100):
        t0 = time.perf_counter()
        probe.submit(UNPLACEABLE)
        idle.submits.append((time.perf_counter() - t0) * 1000)
    print(f"{idle.label:<34} submit {figures(idle.submits)} (100 submits)", flush=True)
    tasks_each = args.load_tasks // args.streams
    without = Phase("load, no pages open")
    run_load(cluster, without, args.streams, tasks_each, lambda ids: None)
    raw = Phase(f"load, {args.streams} bare WatchEvents")
    watchers = RawWatches(cluster, user_tokens)
    run_load(cluster, raw, args.streams, tasks_each, watchers.open)
    print(f"  (the event streams alone, no console: {watchers.followed()} of {args.streams} "
          f"saw their job end; submit p50 {pct(raw.submits, 0.5) / pct(without.submits, 0.5):.2f}x"
          f" without)", flush=True)
    streams: list[Stream] = []
    with_streams = Phase(f"load, {args.streams} job pages streaming")
    browsers = BrowserPages(console, user_tokens, args.browser_pages)
    try:
        run_load(cluster, with_streams, args.streams, tasks_each, lambda ids: (
            open_streams(console, cookies, ids, streams), browsers.open(ids)))
    finally:
        browsers.close()
    deadline = time.monotonic() + 60  # the load has ended: the streams end soon after
    for stream in streams:
        stream.thread.join(max(0.0, deadline - time.monotonic()))
        if stream.connection is not None:
            stream.connection.close()
    again = Phase("load, no pages open (again)")  # brackets the phases with streams: drift
    run_load(cluster, again, args.streams, tasks_each, lambda ids: None)
    baseline = Phase("both runs without", without.submits + again.submits,
                     (without.tasks_s + again.tasks_s) / 2)
    report_streams(streams, baseline, with_streams)


def report_streams(streams: list[Stream], without: Phase, with_streams: Phase) -> None:
    followed = sum(s.followed_to_end for s in streams)
    updates = sorted(s.updates for s in streams)
    lost = sorted({s.error or f"ended with the job {s.last_state or 'not yet shown'}"
                   for s in streams if not s.followed_to_end})
    first = sorted(s.first_s for s in streams if s.first_s >= 0)
    print(f"streams: {followed} of {len(streams)} followed their job to its end; updates per "
          f"stream min {updates[0]} median {updates[len(updates) // 2]} max {updates[-1]}; "
          f"first update after p50 {pct(first, 0.5):.2f} s, max {first[-1]:.2f} s"
          + (f"; the others: {lost}" if lost else ""), flush=True)
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        ratio = pct(with_streams.submits, q) / pct(without.submits, q)
        print(f"submit latency {name}, with the streams / both runs without: {ratio:.2f}x",
              flush=True)
    print(f"tasks/s, with the streams / both runs without: "
          f"{with_streams.tasks_s / without.tasks_s:.2f}x", flush=True)


class RawWatches:
    """`Client.watch_events(job_id=...)` per load job, each tenant's with its own token, read on
    threads until the job's terminal event: what the pages' streams cost the replicas without
    the console's task-list refreshes."""

    def __init__(self, cluster: LocalCluster, tokens: dict[str, str]) -> None:
        self._clients = {t: cluster.client(token=token, retry_budget_s=120)
                         for t, token in tokens.items()}
        self._ended: list[str] = []
        self._threads: list[threading.Thread] = []
        self._start = cluster.client().list_jobs(limit=1).applied_index
        """Before the load is submitted: a stream that waits for a slot misses nothing."""

    def open(self, job_ids: list[str]) -> None:
        for i, job_id in enumerate(job_ids):
            client = self._clients[TENANTS[i % len(TENANTS)]]
            thread = threading.Thread(target=self._follow, args=(client, job_id), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _follow(self, client: Client, job_id: str) -> None:
        try:
            for event in client.watch_events(self._start, job_id=job_id):
                if event.kind == "job" and event.state in TERMINAL_JOB_STATE_NAMES:
                    self._ended.append(job_id)
                    return
        except RaftschedError as error:  # counted, not raised: the figure says it
            print(f"  a bare stream of {job_id} failed: {error}", flush=True)

    def followed(self) -> int:
        deadline = time.monotonic() + 60  # the load has ended: the streams end soon after
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return len(self._ended)


class BrowserPages:
    """A few real job pages in Chromium during the streaming phase (their own live updates);
    none when `count` is 0."""

    def __init__(self, console: Console, tokens: dict[str, str], count: int) -> None:
        self._console, self._tokens, self._count = console, tokens, count
        self._playwright: Any = None
        self._browser: Any = None

    def open(self, job_ids: list[str]) -> None:
        if not self._count:
            return
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM,
                                                         args=CHROMIUM_ARGS)
        for i, job_id in enumerate(job_ids[:self._count]):
            context = self._browser.new_context(ignore_https_errors=True)
            page = signed_in_page(context, self._console, self._tokens[TENANTS[i % 10]])
            page.goto(f"{self._console.url}/jobs/{job_id}")

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._playwright is not None:
            self._playwright.stop()


# --- the run ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="5,000 jobs, 50 requests, 3 loads, 10 streams, no browser page")
    parser.add_argument("--jobs", type=int, default=None, help="jobs in the state (100,000)")
    parser.add_argument("--in-flight", type=int, default=32, help="concurrent submits (32)")
    parser.add_argument("--requests", type=int, default=None, help="per /jobs case (200)")
    parser.add_argument("--loads", type=int, default=None, help="of the 2,000-task page (5)")
    parser.add_argument("--streams", type=int, default=None, help="open job pages (50)")
    parser.add_argument("--browser-pages", type=int, default=None,
                        help="real Chromium job pages among them (2)")
    parser.add_argument("--load-tasks", type=int, default=None,
                        help="tasks completed per streaming phase (20,000)")
    args = parser.parse_args()
    quick = {"jobs": 5_000, "requests": 50, "loads": 3, "streams": 10, "browser_pages": 0,
             "load_tasks": 4_000}
    full = {"jobs": 100_000, "requests": 200, "loads": 5, "streams": 50, "browser_pages": 2,
            "load_tasks": 20_000}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    with tempfile.TemporaryDirectory(prefix="raftsched-bench-web-") as tmp:
        cluster = LocalCluster(Path(tmp))
        try:
            run(cluster, Path(tmp), args)
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            raise
        finally:
            cluster.close()


def run(cluster: LocalCluster, root: Path, args: Any) -> None:
    cluster.start()
    for name in ("east", "west"):
        cluster.add_agent(name, cpu=AGENT_SLOTS, memory_mb=10**7)
    cluster.wait_clusters_ready("east", "west")
    console = start_console(cluster, root)
    admin = cluster.client(retry_budget_s=120)
    user_tokens = {t: str(admin.create_token(t, "user", "bench").token) for t in TENANTS}
    print(f"raftsched web console benchmark: 3 replicas + 2 mock agents + the console on "
          f"127.0.0.1 (2 cores); {args.jobs:,} jobs", flush=True)
    job_ids = fill(cluster, args.jobs, args.in_flight)
    wait_ran(admin, job_ids)
    cookie = console.sign_in(str(cluster.admin_token))
    time_jobs_pages(console, cookie, admin, args.requests)
    time_graph(console, user_tokens["t0"], admin, args.loads)
    stream_phases(cluster, console, user_tokens, args)


if __name__ == "__main__":
    main()
