"""Integration: the contention policy through its public surfaces, on real replicas and agents
over mutual TLS: the submit-time refusal through the CLI (and a cluster registering later takes
a job that was allowed to wait), backpressure through gRPC that loses nothing accepted, tenant
policies and drains set with the CLI and shown by `admin status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import pytest

from raftsched.errors import Code, RaftschedError
from raftsched.state.policy import BACKPRESSURE_RETRY_AFTER_MS
from tests.support.cluster import LocalCluster, running
from tests.support.paths import REPO
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

CLI_TIMEOUT_S = 60.0
JOB_DONE_S = 120.0
SUBMITTERS = 8
"""Clients submitting at once past a tenant's max_queued."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        local.add_agent("east", capabilities="linux", cpu=2)
        local.add_agent("west", capabilities="linux", cpu=2)
        local.wait_clusters_ready("east", "west")
        yield local


def cli(cluster: LocalCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    assert cluster.user_tls is not None and cluster.admin_token is not None
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAFTSCHED_SERVERS": ",".join(cluster.grpc),
           "RAFTSCHED_TLS_CA": str(cluster.user_tls.ca),
           "RAFTSCHED_TLS_CERT": str(cluster.user_tls.cert),
           "RAFTSCHED_TLS_KEY": str(cluster.user_tls.key),
           "RAFTSCHED_TOKEN": cluster.admin_token, "RAFTSCHED_DEV_DIR": str(cluster.root / "none")}
    return subprocess.run([sys.executable, "-m", "raftsched", *argv], env=env,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def spec(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def finished(cluster: LocalCluster, job_id: str) -> str | None:
    state = cluster.client(retry_budget_s=5).get_job(job_id).state
    return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def test_a_task_no_cluster_could_take_is_refused_at_submit_unless_allowed_to_wait(
        cluster: LocalCluster, tmp_path: Path) -> None:
    needs_tpu = ("name: needs-tpu\ntasks:\n  - {id: prep, command: [mock]}\n"
                 "  - {id: train, command: [mock], requires: [tpu], depends_on: [prep]}\n")
    refused = cli(cluster, "submit", spec(tmp_path, "strict", needs_tpu), "--json")
    assert refused.returncode == 2, refused
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "FAILED_PRECONDITION"
    assert "task train" in error["message"] and "capabilities ['tpu']" in error["message"]
    assert "lacks capabilities ['tpu']" in error["message"]
    listed = json.loads(cli(cluster, "job", "list", "--json").stdout)
    assert listed["jobs"] == [], "a refused job must not exist"

    waiting = cli(cluster, "submit", spec(tmp_path, "waits", "allow_unschedulable: true\n"
                                          + needs_tpu), "--json")
    assert waiting.returncode == 0, waiting.stderr
    job_id = json.loads(waiting.stdout)["job_id"]

    def train_explained() -> str | None:
        answer = json.loads(cli(cluster, "task", "explain", job_id, "train", "--json").stdout)
        return answer["summary"] if answer["state"] == "RUNNABLE" else None

    summary = wait_until(train_explained, "train to wait, runnable", JOB_DONE_S)
    assert "no registered cluster could ever take it" in summary
    tasks = json.loads(cli(cluster, "job", "tasks", job_id, "--json").stdout)
    assert "no registered cluster could ever take it" in \
        {t["task_id"]: t["reason"] for t in tasks}["train"]
    cluster.add_agent("tpu-north", capabilities="linux,tpu", cpu=2)
    assert wait_until(lambda: finished(cluster, job_id), "the job", JOB_DONE_S) == "SUCCEEDED"


def test_backpressure_refuses_past_max_queued_and_loses_nothing_accepted(
        cluster: LocalCluster) -> None:
    made = cli(cluster, "admin", "tenant", "set", "alpha", "--max-queued", "6", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["max_queued"] == 6
    job = ("name: pressure\ntenant: alpha\ntasks:\n"
           "  - {id: a, command: [mock, sleep_ms=300]}\n"
           "  - {id: b, command: [mock, sleep_ms=300]}\n")

    def submit(_: int) -> str | RaftschedError:
        try:
            return str(cluster.client().submit(job).job_id)
        except RaftschedError as error:
            return error

    with futures.ThreadPoolExecutor(SUBMITTERS) as pool:
        outcomes = list(pool.map(submit, range(SUBMITTERS * 2)))
    accepted = [o for o in outcomes if isinstance(o, str)]
    refusals = [o for o in outcomes if isinstance(o, RaftschedError)]
    assert 3 <= len(accepted) < len(outcomes), outcomes
    for refusal in refusals:
        assert refusal.code == Code.RESOURCE_EXHAUSTED, refusal
        assert "max_queued=6" in refusal.message
        assert refusal.retry_after_ms == BACKPRESSURE_RETRY_AFTER_MS
    for job_id in accepted:
        assert wait_until(lambda j=job_id: finished(cluster, j), job_id, JOB_DONE_S) == "SUCCEEDED"
    listed = cluster.client().list_jobs(tenant="alpha").jobs
    assert sorted(j.job_id for j in listed) == sorted(accepted)
    other = cluster.client().submit(job.replace("tenant: alpha", "tenant: beta"))
    assert wait_until(lambda: finished(cluster, other.job_id), "beta", JOB_DONE_S) == "SUCCEEDED"


def test_drain_tenants_and_status_through_the_cli(cluster: LocalCluster,
                                                  tmp_path: Path) -> None:
    drained = cli(cluster, "admin", "drain", "east", "--reason", "kernel upgrade", "--json")
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout) == {"cluster_id": "east", "draining": True,
                                          "changed": True}
    assert cli(cluster, "admin", "tenant", "set", "ml", "--weight", "3").returncode == 0
    status = json.loads(cli(cluster, "admin", "status", "--json").stdout)
    east = {c["cluster"]: c for c in status["clusters"]}["east"]
    assert east["draining"] and east["drain_reason"] == "kernel upgrade"
    assert {t["tenant"]: t["weight"] for t in status["tenants"]}["ml"] == 3
    text = cli(cluster, "admin", "status").stdout
    assert "READY (draining)" in text and "cluster east: draining (kernel upgrade)" in text

    wide = "name: wide\ntenant: ml\ntasks:\n" + "".join(
        f"  - {{id: t{i}, command: [mock, sleep_ms=20]}}\n" for i in range(6))
    submitted = cli(cluster, "submit", spec(tmp_path, "wide", wide), "--json")
    job_id = json.loads(submitted.stdout)["job_id"]
    assert wait_until(lambda: finished(cluster, job_id), "wide", JOB_DONE_S) == "SUCCEEDED"
    tasks = json.loads(cli(cluster, "job", "tasks", job_id, "--json").stdout)
    assert {t["cluster"] for t in tasks} == {"west"}, tasks

    assert cli(cluster, "admin", "undrain", "east").returncode == 0
    listed = json.loads(cli(cluster, "admin", "tenant", "list", "--json").stdout)
    assert {t["tenant"] for t in listed["tenants"]} >= {"ml"}
    assert listed["max_queued_tasks"] > 0
    denied = cli(cluster, "admin", "drain", "nowhere")
    assert denied.returncode == 2 and "NOT_FOUND" in denied.stderr
