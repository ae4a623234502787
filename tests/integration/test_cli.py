"""The CLI against a real local cluster: `dev up` (mock executor, mutual TLS with the throwaway CA
it makes) -> `submit --watch --json` -> `job status` -> `dev add-agent` (a bigger cluster, its
certificate from the same CA) -> a job pinned to it -> `dev down`, through the real entry point
(`python -m raftsched`), the commands finding servers and certificate in the dev state. Skipped
until the servers exist."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from raftsched import procfs
from tests.support import paths
from tests.support.cli import run_cli

pytest.importorskip("raftsched.replica.main")
pytest.importorskip("agent.main")

pytestmark = pytest.mark.integration

EXAMPLES = paths.EXAMPLES
UP_TIMEOUT_S = 60
WATCH_TIMEOUT_S = 120
ON_BIG = """\
name: on-big
tenant: demo
tasks:
  - id: crunch
    command: ["sh", "-c", "echo crunching"]
    resources: {cpu: 32, memory_mb: 256}
    cluster: big
    timeout_s: 60
"""
"""Pinned to the added cluster, and too big for cpu-east and gpu-west (4 cores each)."""


raftsched = run_cli


def parsed(result: subprocess.CompletedProcess[str]) -> Any:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def refused(result: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 2 with one `error:` line naming `message`, nothing on stdout."""
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def _https_get(url: str, ca: Path) -> str:
    """`url` over HTTPS, verified against `ca` (the dev CA signs the console's certificate)."""
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(url, context=context, timeout=30) as answer:
        return str(answer.read().decode())


def test_demo_runs_on_a_dev_cluster(tmp_path: Path) -> None:
    dev_dir = tmp_path / "dev"
    refused(raftsched(dev_dir, "dev", "add-agent", "--cluster-id", "big"),
            "error: NOT_FOUND: no dev cluster recorded in")
    big_pid, big_start_ticks = 0, None
    try:
        up = raftsched(dev_dir, "dev", "up", "--dir", str(dev_dir), "--executor", "mock",
                       "--json", timeout_s=UP_TIMEOUT_S + 30)
        assert up.returncode == 0, up.stdout + up.stderr
        cluster = parsed(up)
        assert len(cluster["servers"]) == 3
        assert sum(replica["leader"] for replica in cluster["replicas"]) == 1
        assert {agent["cluster"] for agent in cluster["agents"]} == {"cpu-east", "gpu-west"}
        assert cluster["insecure"] is False
        assert Path(cluster["user_tls"]["ca"]) == dev_dir / "tls" / "ca.pem"
        login = _https_get(cluster["web"]["url"] + "login", dev_dir / "tls" / "ca.pem")
        assert 'name="token"' in login  # the console, its certificate from the dev CA

        submit = raftsched(dev_dir, "submit", str(EXAMPLES / "demo.yaml"), "--watch", "--json",
                           timeout_s=WATCH_TIMEOUT_S)
        outcome = parsed(submit)
        assert submit.returncode == 0, outcome
        assert outcome["created"] is True
        assert outcome["state"] == "SUCCEEDED"
        assert outcome["tasks"] == {"SUCCEEDED": 7}

        tasks = parsed(raftsched(dev_dir, "job", "tasks", outcome["job_id"], "--json"))
        by_id = {task["task_id"]: task for task in tasks}
        assert by_id["train"]["cluster"] == "gpu-west"  # the only cluster with a GPU
        assert all(task["state"] == "SUCCEEDED" and task["fence"] > 0 for task in tasks)
        assert len({task["fence"] for task in tasks}) == len(tasks)

        job = parsed(raftsched(dev_dir, "job", "status", outcome["job_id"], "--json"))
        assert (job["job_id"], job["state"]) == (outcome["job_id"], "SUCCEEDED")

        plaintext = raftsched(dev_dir, "job", "status", outcome["job_id"], "--insecure-dev")
        assert plaintext.returncode == 3 and plaintext.stdout == ""
        assert plaintext.stderr.count("\n") == 1, plaintext.stderr
        assert "the server accepts mutual TLS only" in plaintext.stderr

        status = parsed(raftsched(dev_dir, "dev", "status", "--json"))
        assert all(process["alive"] for process in status["replicas"] + status["agents"])
        assert status["web"]["alive"] and status["web"]["url"] == cluster["web"]["url"]

        refused(raftsched(dev_dir, "dev", "add-agent", "--cluster-id", "gpu-west"),
                "error: ALREADY_EXISTS: --cluster-id 'gpu-west' is taken")
        negative = raftsched(dev_dir, "dev", "add-agent", "--cluster-id", "big", "--cpu", "-1")
        assert (negative.returncode, negative.stdout) == (2, ""), negative.stderr  # a usage error
        assert "error: argument --cpu: must be in 0..1000000, got -1" in negative.stderr
        add = raftsched(dev_dir, "dev", "add-agent", "--cluster-id", "big", "--cpu", "64",
                        "--json", timeout_s=UP_TIMEOUT_S + 30)
        assert add.returncode == 0, add.stdout + add.stderr
        assert "waiting for agent big to be READY" in add.stderr
        big = parsed(add)
        assert {key: big[key] for key in ("cluster", "cpu", "gpu", "status", "alive")} == {
            "cluster": "big", "cpu": 64, "gpu": 0, "status": "READY", "alive": True}
        assert {"pid", "capabilities", "memory_mb", "metrics_port", "data_dir", "log"} <= set(big)
        big_pid, big_start_ticks = big["pid"], procfs.start_ticks(big["pid"])

        status = parsed(raftsched(dev_dir, "dev", "status", "--json"))
        assert status["agents"][-1] == {**big, "status": "READY", "alive": True}
        assert status["metrics"][-1] == f"http://127.0.0.1:{big['metrics_port']}/metrics"
        assert len(set(status["metrics"])) == 6  # 3 replicas, 3 agents

        spec = tmp_path / "on-big.yaml"
        spec.write_text(ON_BIG)
        submit = raftsched(dev_dir, "submit", str(spec), "--watch", "--json",
                           timeout_s=WATCH_TIMEOUT_S)
        outcome = parsed(submit)
        assert submit.returncode == 0 and outcome["state"] == "SUCCEEDED", outcome
        tasks = parsed(raftsched(dev_dir, "job", "tasks", outcome["job_id"], "--json"))
        assert [(task["task_id"], task["cluster"]) for task in tasks] == [("crunch", "big")]
    finally:
        down = raftsched(dev_dir, "dev", "down", "--dir", str(dev_dir), "--json")
    assert down.returncode == 0, down.stdout + down.stderr
    stopped = parsed(down)["stopped"]
    assert [process["name"] for process in stopped][-2:] == ["big", "web"]
    assert len(stopped) == 7
    assert {process["outcome"] for process in stopped} == {"stopped"}
    assert not procfs.is_alive(big_pid, big_start_ticks)
    assert not (dev_dir / "cluster.json").exists()
