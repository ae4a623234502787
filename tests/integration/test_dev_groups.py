"""Integration (issue 27): `raftsched dev up --groups 2` — two scheduler groups of three real
replicas each and two real agents serving both — used through the CLI only: jobs land in the
group of their key and run there, `job status` / `job list` / `admin status` see every group,
and a group that loses its quorum stalls only its own jobs while the CLI names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched import topology
from raftsched.dev import record
from raftsched.dev.add_agent import _issue_agent_certificate
from tests.support.cli import dev_cluster_dir, parsed_ok, run_cli
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

UP_TIMEOUT_S = 180
STATE_TIMEOUT_S = 120.0
JOB = """\
name: pair
tasks:
  - {id: a, command: ["mock", "sleep_ms=50"]}
  - {id: b, command: ["mock"], depends_on: [a]}
"""
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
WIDE_TASKS = 12
"""Per group: more one-cpu tasks than the two 4-cpu agents have slots, so that both groups'
work waits in the agents' local queues (late binding with several groups)."""
WIDE_JOB = "name: wide\ntasks:\n" + "".join(
    f"  - {{id: t{i}, command: [mock, sleep_ms=300], resources: {{cpu: 1}}}}\n"
    for i in range(WIDE_TASKS))

raftsched, parsed = run_cli, parsed_ok


@pytest.fixture
def dev_dir() -> Iterator[Path]:
    with dev_cluster_dir("raftsched-groups-") as directory:
        yield directory


def _keys_of_each_group(count: int) -> list[tuple[str, int]]:
    """`count` idempotency keys of the default tenant for each of the two groups."""
    found: dict[int, list[str]] = {0: [], 1: []}
    for n in range(1000):
        key = f"groups-test-{n}"
        group = topology.group_of_key("default", key, 2)
        if len(found[group]) < count:
            found[group].append(key)
    return [(key, group) for group in (0, 1) for key in found[group]]


def _state(directory: Path, job_id: str) -> Any:
    return parsed(raftsched(directory, "job", "status", job_id, "--json"))


def _one_groups_servers_reach_every_group(dev_dir: Path, groups: list[list[str]],
                                          jobs: set[str], tmp_path: Path) -> None:
    """Given one group's servers only, the CLI and an agent learn every group's from a
    replica (GetTopology); a token made with several groups works in each."""
    for servers in groups:
        listed = parsed(raftsched(dev_dir, "job", "list", "--servers", ",".join(servers),
                                  "--json"))
        assert {job["job_id"] for job in listed["jobs"]} == jobs
        status = parsed(raftsched(dev_dir, "admin", "status", "--servers", ",".join(servers),
                                  "--json"))
        assert [g["group"] for g in status["groups"]] == [0, 1]
    made = parsed(raftsched(dev_dir, "admin", "token", "create", "--tenant", "default",
                            "--role", "user", "--note", "both groups", "--json"))
    as_user = parsed(raftsched(dev_dir, "job", "list", "--token", made["token"], "--json"))
    assert {job["job_id"] for job in as_user["jobs"]} == jobs  # honoured by both groups
    for servers in groups:
        tokens_listed = parsed(raftsched(dev_dir, "admin", "token", "list", "--servers",
                                         ",".join(servers), "--json"))
        assert made["token_id"] in {t["token_id"] for t in tokens_listed}

    paths = _issue_agent_certificate(dev_dir, "edge-1")
    log = tmp_path / "edge-1.log"
    with log.open("w") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "raftsched", "agent", "--cluster-id", "edge-1",
             "--servers", ",".join(groups[0]), "--data-dir", str(tmp_path / "edge-1"),
             "--cpu", "1", "--memory-mb", "256", "--executor", "mock", *paths.flags()],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        def edge_ready_in_both() -> bool:
            status = parsed(raftsched(dev_dir, "admin", "status", "--json"))
            return all({c["cluster"]: c["status"] for c in g["clusters"]}.get("edge-1")
                       == "READY" for g in status["groups"])

        wait_until(edge_ready_in_both, "the agent given group 0's servers to be READY in both "
                   "groups", STATE_TIMEOUT_S)
        assert "topology_learned" in log.read_text()
        assert sorted(os.listdir(tmp_path / "edge-1" / "groups")) == ["0", "1"]
        learned = json.loads((tmp_path / "edge-1" / "topology.json").read_text())
        assert learned["groups"][1] == groups[1]  # kept for a restart no replica answers
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(timeout=30)
    assert agent.returncode == 0, log.read_text()[-2000:]
    parsed(raftsched(dev_dir, "admin", "remove-cluster", "edge-1", "--json"))


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGE_TIMEOUT_MS = 30_000
SLOW_JOB = """\
name: slow-pair
tasks:
  - {id: a, command: ["mock", "sleep_ms=3000"]}
  - {id: b, command: ["mock"], depends_on: [a]}
"""


class _Console:
    """The dev cluster's web console (given group 0's servers: it learns group 1's) in
    Debian's chromium, signed in as the dev cluster's admin; screenshots in the test's dir."""

    def __init__(self, dev_dir: Path, url: str, shots: Path, playwright: Any) -> None:
        self.dev_dir, self.url, self.shots = dev_dir, url, shots
        self._playwright = playwright
        self._browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = self._browser.new_context(ignore_https_errors=True,
                                            viewport={"width": 1280, "height": 900})
        self.page = context.new_page()
        self.page.set_default_timeout(PAGE_TIMEOUT_MS)
        state = record.load_state(dev_dir)
        assert state is not None and state.user_tls is not None
        token = state.user_tls.read_token()
        assert token
        self.page.goto(f"{url}/login")
        self.page.fill("input[name=token]", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"{url}/jobs")

    @classmethod
    def open(cls, dev_dir: Path, cluster: Any, tmp_path: Path) -> _Console:
        if not os.path.exists(CHROMIUM):
            pytest.skip(f"{CHROMIUM} is missing (scripts/lib/system.sh ensure_chromium)")
        sync_api = pytest.importorskip("playwright.sync_api")
        assert cluster.get("web"), cluster
        shots = tmp_path / "screenshots"
        shots.mkdir()
        playwright = sync_api.sync_playwright().start()
        try:
            return cls(dev_dir, cluster["web"]["url"].rstrip("/"), shots, playwright)
        except BaseException:
            playwright.stop()
            raise

    def close(self) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()
            print(f"screenshots: {self.shots}")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def shows_every_group(self, spec: Path, jobs: dict[str, int]) -> None:
        """Jobs of both groups listed; a group-1 job's page names its group and follows it
        live to its end; /clusters and /replicas show a line per group."""
        page = self.page
        page.goto(f"{self.url}/jobs")
        for job_id in jobs:
            assert page.locator(f"a[href='/jobs/{job_id}']").count() >= 1, job_id
        self.shot("groups-01-jobs")
        slow = spec.parent / "slow.yaml"
        slow.write_text(SLOW_JOB)
        key = next(k for k, g in _keys_of_each_group(6) if g == 1 and
                   k not in {"groups-test-0"})
        submitted = parsed(raftsched(self.dev_dir, "submit", str(slow), "--idempotency-key",
                                     f"slow-{key}", "--json"))
        job_id = submitted["job_id"]
        group = topology.group_of_job_id(job_id, 2)
        page.goto(f"{self.url}/jobs/{job_id}")
        assert page.locator("#job-group").get_attribute("data-group") == str(group)
        assert page.locator("#job").get_attribute("data-state") not in TERMINAL
        page.wait_for_selector("#job[data-state=SUCCEEDED]")  # live: no reload
        self.shot("groups-02-job-live")
        page.goto(f"{self.url}/clusters?group=1")
        rows = page.locator("#groups tbody tr")
        assert rows.count() == 2 and page.locator("#groups tr.current").get_attribute(
            "data-group") == "1"
        assert page.locator("#groups .error").count() == 0
        assert page.locator("tbody[data-cluster-id=cpu-east]").count() == 1
        self.shot("groups-03-clusters")
        page.goto(f"{self.url}/replicas?group=1")
        assert page.locator("#groups tbody tr").count() == 2
        bad = page.goto(f"{self.url}/clusters?group=7")
        assert bad is not None and bad.status == 400
        assert "groups 0 to 1" in page.content()

    def names_the_group_without_quorum(self, alive_job: str) -> None:
        page = self.page
        page.goto(f"{self.url}/jobs")
        alert = page.locator("[data-missing-group]")
        assert alert.count() == 1 and "group 1" in alert.inner_text()
        assert page.locator(f"a[href='/jobs/{alive_job}']").count() >= 1
        self.shot("groups-04-jobs-group-1-down")
        page.goto(f"{self.url}/clusters")
        assert "not answering" in page.locator("#groups tr[data-group='1']").inner_text()
        self.shot("groups-05-clusters-group-1-down")


def test_two_groups_run_jobs_side_by_side_and_one_without_quorum_stalls_only_its_own(
        dev_dir: Path, tmp_path: Path) -> None:
    cluster = parsed(raftsched(dev_dir, "dev", "up", "--dir", str(dev_dir), "--groups", "2",
                               "--agents", "2", "--executor", "mock", "--json",
                               timeout_s=UP_TIMEOUT_S))
    assert len(cluster["groups"]) == 2 and all(len(g) == 3 for g in cluster["groups"])
    assert sum(1 for r in cluster["replicas"] if r["leader"]) == 2  # one leader per group
    for agent in cluster["agents"]:  # one agent, one store per group
        assert sorted(os.listdir(Path(agent["data_dir"]) / "groups")) == ["0", "1"]
    spec = tmp_path / "pair.yaml"
    spec.write_text(JOB)

    jobs = _succeed_in_their_groups(dev_dir, spec, _keys_of_each_group(3))
    jobs.update(_both_groups_queue_on_the_agents(dev_dir, cluster, tmp_path))
    listed = parsed(raftsched(dev_dir, "job", "list", "--json"))
    assert {job["job_id"] for job in listed["jobs"]} == set(jobs)
    assert listed["state_counts"]["SUCCEEDED"] == len(jobs)
    status = parsed(raftsched(dev_dir, "admin", "status", "--json"))
    assert [g["group"] for g in status["groups"]] == [0, 1]
    for group in status["groups"]:
        assert {c["cluster"]: c["status"] for c in group["clusters"]} == {
            "cpu-east": "READY", "gpu-west": "READY"}, group

    _one_groups_servers_reach_every_group(dev_dir, cluster["groups"], set(jobs), tmp_path)
    console = _Console.open(dev_dir, cluster, tmp_path)
    try:
        console.shows_every_group(spec, jobs)
        alive = _group_1_loses_its_quorum(dev_dir, status, spec)
        console.names_the_group_without_quorum(alive)
    finally:
        console.close()


def _succeed_in_their_groups(dev_dir: Path, spec: Path,
                             keys: list[tuple[str, int]]) -> dict[str, int]:
    """Submit `spec` once per (key, group); each job lands in its key's group and succeeds
    there. The jobs' ids and groups."""
    jobs: dict[str, int] = {}
    for key, group in keys:
        submitted = parsed(raftsched(dev_dir, "submit", str(spec), "--idempotency-key", key,
                                     "--json"))
        assert topology.group_of_job_id(submitted["job_id"], 2) == group
        jobs[submitted["job_id"]] = group
    for job_id, group in jobs.items():
        wait_until(lambda job_id=job_id: _state(dev_dir, job_id)["state"] in TERMINAL,
                   f"{job_id} to end", STATE_TIMEOUT_S)
        status = _state(dev_dir, job_id)
        assert (status["state"], status["group"]) == ("SUCCEEDED", group), status
    return jobs


def _both_groups_queue_on_the_agents(dev_dir: Path, cluster: Any,
                                     tmp_path: Path) -> dict[str, int]:
    """A wide job in each group, more tasks than slots: both succeed, and the agents (a local
    queue of one per group: `--queue-depth` defaults to max(1, cores // 10)) held work of both
    groups in their queues and started it from there. The jobs' ids and groups."""
    spec = tmp_path / "wide.yaml"
    spec.write_text(WIDE_JOB)
    keys = _keys_of_each_group(5)
    wide = _succeed_in_their_groups(dev_dir, spec, [keys[4], keys[9]])
    events = [json.loads(line) for agent in cluster["agents"]
              for line in Path(agent["log"]).read_text().splitlines()
              if line.startswith("{") and ('"attempt_queued"' in line
                                           or '"attempt_started"' in line)]
    queued = {(e["group"], e["job"]) for e in events if e["event"] == "attempt_queued"}
    assert {(group, job_id) for job_id, group in wide.items()} <= queued, queued
    started = {(e["group"], e["fence"]) for e in events if e["event"] == "attempt_started"}
    assert {(e["group"], e["fence"]) for e in events if e["event"] == "attempt_queued"} \
        <= started  # every queued attempt started (none was refused or left behind)
    return wide


def _group_1_loses_its_quorum(dev_dir: Path, status: Any, spec: Path) -> str:
    """Group 1 loses its leader and one more replica; the CLI names it and group 0 runs on.
    The id of a job group 0 ran meanwhile."""
    # processes this test started by dev up
    leader = status["groups"][1]["leader"]
    state = json.loads((dev_dir / "cluster.json").read_text())
    group1 = [r for r in state["replicas"] if r.get("group") == 1]
    victims = [r for r in group1 if r["grpc_address"] == leader]
    victims += [r for r in group1 if r["grpc_address"] != leader][:1]
    assert len(victims) == 2, (leader, group1)
    for replica in victims:
        os.kill(replica["pid"], 9)

    def group_1_down() -> bool:
        answer = raftsched(dev_dir, "admin", "status", "--timeout", "5")
        return answer.returncode == 3 and "group 1" in answer.stderr \
            and "== group 0\n" in answer.stdout and "== group 1: NOT ANSWERING" in answer.stdout

    wait_until(group_1_down, "admin status to name group 1 as not answering", STATE_TIMEOUT_S)
    (key0, _), (key1, _) = _keys_of_each_group(4)[3], _keys_of_each_group(4)[7]
    alive = parsed(raftsched(dev_dir, "submit", str(spec), "--idempotency-key", key0, "--json"))
    wait_until(lambda: _state(dev_dir, alive["job_id"])["state"] in TERMINAL,
               "group 0's job to end while group 1 has no quorum", STATE_TIMEOUT_S)
    assert _state(dev_dir, alive["job_id"])["state"] == "SUCCEEDED"
    stalled = raftsched(dev_dir, "submit", str(spec), "--idempotency-key", key1, "--timeout", "5")
    assert stalled.returncode == 3 and "group 1:" in stalled.stderr, stalled.stderr
    listing = raftsched(dev_dir, "job", "list", "--timeout", "5")
    assert listing.returncode == 3 and "not listed: group 1:" in listing.stderr
    assert alive["job_id"] in listing.stdout
    return str(alive["job_id"])
