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
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(timeout=30)
    assert agent.returncode == 0, log.read_text()[-2000:]
    parsed(raftsched(dev_dir, "admin", "remove-cluster", "edge-1", "--json"))


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

    jobs: dict[str, int] = {}
    for key, group in _keys_of_each_group(3):
        submitted = parsed(raftsched(dev_dir, "submit", str(spec), "--idempotency-key", key,
                                     "--json"))
        assert topology.group_of_job_id(submitted["job_id"], 2) == group
        jobs[submitted["job_id"]] = group
    for job_id, group in jobs.items():
        wait_until(lambda job_id=job_id: _state(dev_dir, job_id)["state"] in TERMINAL,
                   f"{job_id} to end", STATE_TIMEOUT_S)
        status = _state(dev_dir, job_id)
        assert (status["state"], status["group"]) == ("SUCCEEDED", group), status
    listed = parsed(raftsched(dev_dir, "job", "list", "--json"))
    assert {job["job_id"] for job in listed["jobs"]} == set(jobs)
    assert listed["state_counts"]["SUCCEEDED"] == len(jobs)
    status = parsed(raftsched(dev_dir, "admin", "status", "--json"))
    assert [g["group"] for g in status["groups"]] == [0, 1]
    for group in status["groups"]:
        assert {c["cluster"]: c["status"] for c in group["clusters"]} == {
            "cpu-east": "READY", "gpu-west": "READY"}, group

    _one_groups_servers_reach_every_group(dev_dir, cluster["groups"], set(jobs), tmp_path)

    # Group 1 loses its leader and one more replica (processes this test started by dev up).
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
