"""The cluster-facing CLI commands against a fake client (injected through `cli.make_client`):
arguments, human and --json output with the contract's keys, and error -> exit code mapping."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched import environment, procfs
from raftsched.api import raftsched_pb2 as pb
from raftsched.cli import common, servers
from raftsched.cli import main as cli
from raftsched.client.client import Submitted
from raftsched.dev import add_agent as dev_add_agent
from raftsched.dev import down as dev_down
from raftsched.dev import processes, record, supervisor
from raftsched.dev import status as dev_status
from raftsched.dev import up as dev_up
from raftsched.errors import Code, RaftschedError
from raftsched.spec.model import JobSpec
from tests.support import paths

EXAMPLES = paths.EXAMPLES
DEMO = str(EXAMPLES / "demo.yaml")
DIAMOND = str(EXAMPLES / "diamond.yaml")
PROGRESS = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


def job(state: str = "RUNNING", **tasks: int) -> Any:
    return pb.Job(job_id="demo-1", name="demo", tenant="demo", priority=50, state=state,
                  tasks=tasks or {"PENDING": 7}, total_tasks=7, failure_policy="skip_downstream",
                  submitted_ms=1_000, started_ms=2_000 if state != "PENDING" else 0,
                  finished_ms=9_000 if state in ("SUCCEEDED", "FAILED", "CANCELLED") else 0)


TASKS = [
    pb.TaskSummary(task_id="fetch", state="SUCCEEDED", attempts=1, cluster="cpu-east", fence=1,
                   exit_code=0),
    pb.TaskSummary(task_id="train", state="SUCCEEDED", attempts=2, cluster="gpu-west", fence=7,
                   exit_code=0),
]


class FakeClient:
    """Canned answers; `fail[method]` makes that method raise; `calls` records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail: dict[str, BaseException] = {}
        self.created = True
        self.watched: list[Any] = [job("RUNNING", PENDING=7), job("RUNNING", PENDING=7),
                                   job("RUNNING", SUCCEEDED=3, RUNNING=4),
                                   job("SUCCEEDED", SUCCEEDED=7)]
        self.watch_interrupt = False
        self.final = job("SUCCEEDED", SUCCEEDED=7)
        self.status = pb.ClusterStatusResponse(
            leader="127.0.0.1:5001", term=2, commit_index=40, applied_index=40,
            responder="127.0.0.1:5001",
            replicas=[pb.ReplicaInfo(raft_address="127.0.0.1:6001",
                                     grpc_address="127.0.0.1:5001", leader=True),
                      pb.ReplicaInfo(raft_address="127.0.0.1:6002")],
            clusters=[pb.ComputeCluster(cluster_id="cpu-east", status="READY",
                                        capabilities=["linux"],
                                        capacity=pb.Resources(cpu_milli=4000, memory_mb=8192))])
        self.closed = False

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name in self.fail:
            raise self.fail[name]

    def submit_spec(self, spec: JobSpec, idempotency_key: str | None = None) -> Any:
        self._call("submit", idempotency_key)
        assert idempotency_key is not None
        return Submitted("demo-1", self.created, idempotency_key)

    def get_job(self, job_id: str) -> Any:
        self._call("get_job", job_id)
        return self.final

    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", *, query: str = "", newest_first: bool = False) -> Any:
        self._call("list_jobs", tenant, state, limit, page_token, query, newest_first)
        return pb.ListJobsResponse(jobs=[job("SUCCEEDED", SUCCEEDED=7)], next_page_token="p2",
                                   state_counts={"SUCCEEDED": 7, "FAILED": 1})

    def list_tasks(self, job_id: str) -> Any:
        self._call("list_tasks", job_id)
        return pb.ListTasksResponse(job_id=job_id, tasks=TASKS)

    def cancel(self, job_id: str, reason: str = "") -> Any:
        self._call("cancel", job_id, reason)
        return pb.CancelJobResponse(cancelled=3, changed=True)

    def task_history(self, job_id: str, task_id: str) -> Any:
        self._call("task_history", job_id, task_id)
        return pb.TaskHistory(job_id=job_id, task_id=task_id, state="SUCCEEDED", app_failures=1,
                              attempts=[pb.AttemptRecord(fence=4, number=1, cluster="cpu-east",
                                                         state="FAILED", exit_code=1),
                                        pb.AttemptRecord(fence=5, number=2, cluster="cpu-east",
                                                         state="SUCCEEDED", exit_code=0)])

    def explain(self, job_id: str, task_id: str) -> Any:
        self._call("explain", job_id, task_id)
        return pb.ExplainTaskResponse(state="RUNNABLE", summary="waiting for a GPU", clusters=[
            pb.ClusterVerdict(cluster="cpu-east", eligible=False, reason="lacks gpu")])

    def watch(self, job_id: str) -> Iterator[Any]:
        self._call("watch", job_id)
        yield from self.watched
        if self.watch_interrupt:
            raise KeyboardInterrupt

    def cluster_status(self, server: str | None = None, *,
                       include_digest: bool = False) -> Any:
        self._call("cluster_status", server, include_digest)
        return self.status

    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any:
        self._call("add_replica", raft_address, grpc_address)
        return pb.ReplicaResponse(members=["127.0.0.1:6001", raft_address])

    def remove_replica(self, raft_address: str) -> Any:
        self._call("remove_replica", raft_address)
        return pb.ReplicaResponse(members=["127.0.0.1:6001"])

    def remove_cluster(self, cluster_id: str) -> Any:
        self._call("remove_cluster", cluster_id)
        return pb.RemoveClusterResponse(cluster_id=cluster_id)

    def drain_cluster(self, cluster_id: str, drain: bool, reason: str = "") -> Any:
        self._call("drain_cluster", cluster_id, drain, reason)
        return pb.DrainClusterResponse(cluster_id=cluster_id, draining=drain, changed=True)

    def set_tenant(self, tenant: str, *, weight: int | None = None,
                   max_queued: int | None = None, max_running: int | None = None) -> Any:
        self._call("set_tenant", tenant, weight, max_queued, max_running)
        return pb.TenantInfo(tenant=tenant, weight=weight or 1, max_queued=max_queued or 0,
                             max_running=max_running or 0, configured=True, queued=3, running=1,
                             reserved=pb.Resources(cpu_milli=1000, memory_mb=128),
                             dominant_share=0.25, changed=True)

    def list_tenants(self) -> Any:
        self._call("list_tenants")
        return pb.ListTenantsResponse(tenants=[
            pb.TenantInfo(tenant="*", weight=1, max_queued=100, configured=True),
            pb.TenantInfo(tenant="ml", weight=3, queued=7, running=2, configured=True,
                          dominant_share=0.5),
            pb.TenantInfo(tenant="etl", weight=1, max_queued=100, queued=1)],
            queued_total=8, max_queued_tasks=1_000_000)

    def create_token(self, tenant: str, role: str, note: str = "") -> Any:
        self._call("create_token", tenant, role, note)
        return pb.CreateTokenResponse(token_id="0123456789abcdef",
                                      token="rst_0123456789abcdef_" + "s" * 43)

    def revoke_token(self, token_id: str) -> Any:
        self._call("revoke_token", token_id)
        return pb.RevokeTokenResponse(token_id=token_id)

    def revoke_certificate(self, fingerprint: str, subject: str = "", reason: str = "") -> Any:
        self._call("revoke_certificate", fingerprint, subject, reason)
        return pb.RevokeCertificateResponse(fingerprint=fingerprint, created=True)

    def list_tokens(self) -> Any:
        self._call("list_tokens")
        return pb.ListTokensResponse(tokens=[pb.TokenInfo(
            token_id="0123456789abcdef", tenant="*", role="admin", note="bootstrap",
            created_ms=1_000)])

    def close(self) -> None:
        self.closed = True


class Made:
    """What make_client was asked for."""

    def __init__(self) -> None:
        self.servers: list[list[str]] = []
        self.timeouts: list[float] = []
        self.tls: list[Any] = []


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Made:
    monkeypatch.setenv(common.SERVERS_ENV, "127.0.0.1:7001,127.0.0.1:7002")
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(tmp_path / "no-dev-cluster"))
    for name in common.TLS_ENV:  # never read: the client is a fake (test_tls_options.py)
        monkeypatch.setenv(name, f"/tls/{name.lower()}.pem")
    return Made()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, made: Made) -> FakeClient:
    client = FakeClient()

    def make_client(servers: list[str], timeout_s: float, tls_files: Any = None,
                    token: str | None = None) -> FakeClient:
        made.servers.append(servers)
        made.timeouts.append(timeout_s)
        made.tls.append(tls_files)
        return client

    monkeypatch.setattr(common, "make_client", make_client)
    return client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert out.count("\n") == 1, out
    assert "error" not in err  # with --json, errors go to stdout as JSON
    return code, json.loads(out)


# --- submit -------------------------------------------------------------------------------------


def test_submit(capsys: pytest.CaptureFixture[str], fake: FakeClient, made: Made) -> None:
    code, out, err = run(capsys, "submit", DEMO)
    assert (code, err) == (0, "")
    key = fake.calls[0][1][0]
    assert key.startswith("auto-")  # the one rule (client.keys.submit_key)
    assert out.splitlines() == [f"submitted job demo-1 (new; idempotency key {key})",
                                "follow it with: raftsched job status demo-1"]
    assert made.servers == [["127.0.0.1:7001", "127.0.0.1:7002"]]
    assert made.timeouts == [common.DEFAULT_TIMEOUT_S] and fake.closed


def test_submit_json_and_key_precedence(capsys: pytest.CaptureFixture[str],
                                        fake: FakeClient) -> None:
    code, document = run_json(capsys, "submit", DIAMOND)  # the spec names its own key
    assert code == 0
    assert document == {"job_id": "demo-1", "created": True,
                        "idempotency_key": "diamond-demo-2026-11-30"}
    fake.created = False
    code, document = run_json(capsys, "submit", DIAMOND, "--idempotency-key", "mine")
    assert (code, document["created"], document["idempotency_key"]) == (0, False, "mine")
    assert [call[1][0] for call in fake.calls] == ["diamond-demo-2026-11-30", "mine"]


def test_submit_existing_job_says_nothing_new_was_created(
        capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.created = False
    code, out, _ = run(capsys, "submit", DIAMOND)
    assert code == 0
    assert out.splitlines()[0] == ("submitted job demo-1 (already existed: same spec and "
                                   "idempotency key diamond-demo-2026-11-30; nothing new was "
                                   "created)")


BAD_SPEC = "name: broken\ntasks:\n  - id: a\n    command: [x]\n    depends_on: [ghost]\n"


def test_submit_refuses_a_bad_spec_like_validate(
        capsys: pytest.CaptureFixture[str], fake: FakeClient, made: Made,
        tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_SPEC)
    code, out, err = run(capsys, "submit", str(path))
    assert (code, out) == (2, "")
    assert err.splitlines() == ["error: tasks[0] (a).depends_on[0]: unknown dependency 'ghost'",
                                "1 error(s)"]
    code, document = run_json(capsys, "submit", str(path), "--watch")
    assert code == 2
    assert document["error"]["code"] == "INVALID_ARGUMENT"
    assert document["error"]["issues"] == [
        {"path": "tasks[0].depends_on[0]", "task": "a", "message": "unknown dependency 'ghost'"}]
    assert made.servers == []  # refused before any connection


def test_submit_unreadable_file(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                                tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    code, _, err = run(capsys, "submit", missing)
    assert code == 2
    assert err == f"error: cannot read {missing}: No such file or directory\n1 error(s)\n"


def test_submit_reads_stdin(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(
        buffer=types.SimpleNamespace(read=lambda size: Path(DEMO).read_bytes())))
    assert run(capsys, "submit", "-")[0] == 0


def test_submit_watch(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, err = run(capsys, "submit", DEMO, "--watch")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("submitted job demo-1 (new; ")
    progress = [line for line in lines if PROGRESS.match(line)]
    assert [PROGRESS.sub("", line) for line in progress] == [  # the repeat is not printed
        "RUNNING  0/7 done  (PENDING 7)",
        "RUNNING  3/7 done  (SUCCEEDED 3, RUNNING 4)",
        "SUCCEEDED 7/7 done  (SUCCEEDED 7)",
    ]
    table = lines[lines.index("") + 1:]
    assert table[:3] == [
        "TASK   STATE      ATTEMPTS  CLUSTER   FENCE  EXIT",
        "fetch  SUCCEEDED         1  cpu-east      1     0",
        "train  SUCCEEDED         2  gpu-west      7     0",
    ]
    assert table[-1] == "job demo-1 SUCCEEDED in 7.0s: 7/7 tasks done (SUCCEEDED 7)"


def test_submit_watch_json(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, document = run_json(capsys, "submit", DEMO, "--watch")
    assert code == 0
    assert {"job_id", "created", "state", "tasks"} <= document.keys()
    assert (document["state"], document["tasks"]) == ("SUCCEEDED", {"SUCCEEDED": 7})
    assert document["group"] == 0
    assert document["task_summaries"][1] == {
        "task_id": "train", "state": "SUCCEEDED", "attempts": 2, "cluster": "gpu-west",
        "fence": 7, "exit_code": 0, "reason": "",
        "instance_of": None, "instances": None}


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED"])
def test_submit_watch_exits_1_when_the_job_did_not_succeed(
        capsys: pytest.CaptureFixture[str], fake: FakeClient, state: str) -> None:
    fake.watched = [job("RUNNING", RUNNING=7), job(state, SUCCEEDED=5, **{state: 2})]
    code, out, _ = run(capsys, "submit", DEMO, "--watch")
    assert code == 1
    assert out.splitlines()[-1].startswith(f"job demo-1 {state} ")
    assert run_json(capsys, "submit", DEMO, "--watch")[0] == 1


def test_watch_that_ends_early_asks_for_the_job(capsys: pytest.CaptureFixture[str],
                                                fake: FakeClient) -> None:
    fake.watched = [job("RUNNING", RUNNING=7)]
    assert run(capsys, "submit", DEMO, "--watch")[0] == 0  # get_job says SUCCEEDED
    fake.final = job("RUNNING", RUNNING=7)
    code, _, err = run(capsys, "submit", DEMO, "--watch")
    assert code == 3
    assert err.startswith("error: UNAVAILABLE: the watch of job demo-1 ended while the job is "
                          "RUNNING; the job goes on")


def test_ctrl_c_while_watching_leaves_the_job_running(
        capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.watched = [job("RUNNING", RUNNING=7)]
    fake.watch_interrupt = True
    code, _, err = run(capsys, "submit", DEMO, "--watch")
    assert code == 130
    assert "stopped watching; job demo-1 goes on" in err
    code, document = run_json(capsys, "submit", DEMO, "--watch")
    assert code == 130 and document["error"]["code"] == "INTERRUPTED"


def test_ctrl_c_during_submit_says_the_outcome_is_unknown(
        capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.fail["submit"] = KeyboardInterrupt()
    code, _, err = run(capsys, "submit", DEMO, "--idempotency-key", "k1")
    assert code == 130
    assert "may or may not have been submitted" in err and "--idempotency-key k1" in err


@pytest.mark.parametrize("code", [Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED])
def test_submit_with_unknown_outcome_says_how_to_retry(
        capsys: pytest.CaptureFixture[str], fake: FakeClient, code: Code) -> None:
    fake.fail["submit"] = RaftschedError(code, "no leader")
    exit_code, out, err = run(capsys, "submit", DEMO, "--idempotency-key", "k1")
    assert (exit_code, out) == (3, "")
    assert err.count("\n") == 1
    assert err.startswith(f"error: {code.value}: no leader; the outcome is unknown: the job "
                          "may or may not have happened; running the same command again with "
                          "--idempotency-key k1 is safe")
    exit_code, document = run_json(capsys, "submit", DEMO, "--idempotency-key", "k1")
    assert exit_code == 3
    assert document["error"]["code"] == code.value
    assert document["error"]["message"] == "no leader"
    assert "--idempotency-key k1" in document["error"]["hint"]


def test_submit_key_conflict(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.fail["submit"] = RaftschedError(Code.ALREADY_EXISTS, "key k1 names another spec")
    code, _, err = run(capsys, "submit", DEMO, "--idempotency-key", "k1")
    assert (code, err) == (2, "error: ALREADY_EXISTS: key k1 names another spec\n")


# --- job, task ----------------------------------------------------------------------------------


def test_job_status(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.final = job("RUNNING", SUCCEEDED=3, RUNNING=2, RUNNABLE=2)
    code, out, _ = run(capsys, "job", "status", "demo-1")
    assert code == 0
    assert out.splitlines()[:3] == ["job        demo-1 (demo)",
                                    "state      RUNNING  3/7 tasks done",
                                    "tasks      SUCCEEDED 3, RUNNING 2, RUNNABLE 2"]
    code, document = run_json(capsys, "job", "status", "demo-1")
    assert code == 0
    assert {key: document[key] for key in ("job_id", "state", "tasks")} == {
        "job_id": "demo-1", "state": "RUNNING",
        "tasks": {"SUCCEEDED": 3, "RUNNING": 2, "RUNNABLE": 2}}
    assert document["group"] == 0  # one scheduler group
    assert fake.calls[-1] == ("get_job", ("demo-1",))


def test_job_tasks(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "job", "tasks", "demo-1")
    assert code == 0 and out.splitlines()[0].split() == [
        "TASK", "STATE", "ATTEMPTS", "CLUSTER", "FENCE", "EXIT"]
    code, document = run_json(capsys, "job", "tasks", "demo-1")
    assert code == 0 and isinstance(document, list)
    assert document[0] == {"task_id": "fetch", "state": "SUCCEEDED", "attempts": 1,
                           "cluster": "cpu-east", "fence": 1, "exit_code": 0, "reason": "",
                           "instance_of": None, "instances": None}


def test_job_list(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "job", "list", "--tenant", "ml", "--state", "succeeded",
                       "--limit", "5", "--page-token", "p1")
    assert code == 0
    assert fake.calls[-1] == ("list_jobs", ("ml", "SUCCEEDED", 5, "p1", "", False))
    assert out.splitlines()[0].split() == ["JOB", "NAME", "TENANT", "STATE", "DONE", "SUBMITTED"]
    assert "by state: SUCCEEDED 7, FAILED 1" in out.splitlines()
    assert out.splitlines()[-1] == ("more: raftsched job list --tenant ml --state SUCCEEDED "
                                    "--limit 5 --page-token p2")
    code, document = run_json(capsys, "job", "list")
    assert code == 0 and fake.calls[-1] == ("list_jobs", ("", "", 0, "", "", False))
    assert document["next_page_token"] == "p2"
    assert document["jobs"][0]["job_id"] == "demo-1"
    assert document["jobs"][0]["tasks"] == {"SUCCEEDED": 7}
    assert document["state_counts"] == {"PENDING": 0, "RUNNING": 0, "SUCCEEDED": 7,
                                        "FAILED": 1, "CANCELLED": 0}
    assert document["state_counts_partial"] is False


def test_job_list_query_and_newest_first(capsys: pytest.CaptureFixture[str],
                                         fake: FakeClient) -> None:
    """The next-page hint keeps the order and the query (a token belongs to its order)."""
    code, out, _ = run(capsys, "job", "list", "--query", "etl night", "--newest")
    assert code == 0 and fake.calls[-1] == ("list_jobs", ("", "", 0, "", "etl night", True))
    assert out.splitlines()[-1] == ("more: raftsched job list --query 'etl night' --newest "
                                    "--page-token p2")


@pytest.mark.parametrize("argv", [["--state", "BOGUS"], ["--limit", "0"], ["--limit", "x"]])
def test_job_list_refuses_bad_options(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                                      argv: list[str]) -> None:
    code, _, err = run(capsys, "job", "list", *argv)
    assert code == 2 and "usage: raftsched job list" in err


def test_job_cancel(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "job", "cancel", "demo-1", "--reason", "enough")
    assert (code, out) == (0, "cancelled job demo-1: 3 task(s) cancelled\n")
    assert fake.calls[-1] == ("cancel", ("demo-1", "enough"))
    code, document = run_json(capsys, "job", "cancel", "demo-1")
    assert (code, document) == (0, {"job_id": "demo-1", "cancelled": 3, "changed": True})


def test_job_cancel_twice_and_with_unknown_outcome(capsys: pytest.CaptureFixture[str],
                                                   fake: FakeClient,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake, "cancel", lambda job_id, reason="": pb.CancelJobResponse())
    code, out, _ = run(capsys, "job", "cancel", "demo-1")
    assert (code, out) == (0, "job demo-1: nothing changed (it was cancelled already)\n")

    def fail(job_id: str, reason: str = "") -> Any:
        raise RaftschedError(Code.DEADLINE_EXCEEDED, "timed out")

    monkeypatch.setattr(fake, "cancel", fail)
    code, _, err = run(capsys, "job", "cancel", "demo-1")
    assert code == 3 and "cancelling is idempotent" in err


def test_task_history(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "task", "history", "demo-1", "flaky")
    assert code == 0
    assert out.splitlines()[0] == ("task demo-1/flaky  SUCCEEDED  (1 application / 0 "
                                   "infrastructure failure(s))")
    code, document = run_json(capsys, "task", "history", "demo-1", "flaky")
    assert code == 0
    assert {"job_id", "task_id", "state", "attempts", "notes"} <= document.keys()
    assert set(document["attempts"][0]) >= {"fence", "cluster", "state", "exit_code", "number",
                                            "assigned_ms", "started_ms", "finished_ms",
                                            "reason"}
    assert [a["fence"] for a in document["attempts"]] == [4, 5]


def test_task_explain(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "task", "explain", "demo-1", "train")
    assert code == 0 and out.splitlines()[0] == "RUNNABLE: waiting for a GPU"
    code, document = run_json(capsys, "task", "explain", "demo-1", "train")
    assert code == 0
    assert {key: document[key] for key in ("state", "summary", "clusters")} == {
        "state": "RUNNABLE", "summary": "waiting for a GPU",
        "clusters": [{"cluster": "cpu-east", "eligible": False, "reason": "lacks gpu"}]}


# --- admin --------------------------------------------------------------------------------------


def test_admin_status(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "admin", "status")
    assert code == 0
    assert out.splitlines()[0] == ("leader 127.0.0.1:5001  term 2  commit index 40  applied 40"
                                   "  (answered by 127.0.0.1:5001)")
    code, document = run_json(capsys, "admin", "status")
    assert code == 0
    assert {"leader", "term", "replicas", "clusters", "commit_index", "responder"} <= set(document)
    assert document["replicas"][0] == {"raft_address": "127.0.0.1:6001",
                                       "grpc_address": "127.0.0.1:5001", "leader": True}
    assert document["clusters"][0]["cluster"] == "cpu-east"


def test_admin_status_follows_to_the_leader_unless_told_which_server(
        capsys: pytest.CaptureFixture[str], fake: FakeClient, made: Made) -> None:
    fake.status.responder = "127.0.0.1:7001"
    run(capsys, "admin", "status")
    assert fake.calls == [("cluster_status", (None, False)),
                          ("cluster_status", ("127.0.0.1:5001", False))]
    fake.calls.clear()
    run(capsys, "admin", "status", "--server", "127.0.0.1:7002")
    assert fake.calls == [("cluster_status", ("127.0.0.1:7002", False))]
    assert made.servers[-1] == ["127.0.0.1:7002"]


def test_admin_status_digest_only_when_asked(capsys: pytest.CaptureFixture[str],
                                            fake: FakeClient) -> None:
    fake.status.responder = fake.status.leader
    fake.status.state_digest, fake.status.state_index = "", 41
    code, out, _ = run(capsys, "admin", "status")
    assert code == 0 and "state digest" not in out
    assert fake.calls[-1] == ("cluster_status", (None, False))
    fake.status.state_digest = "0123456789abcdef"
    code, out, _ = run(capsys, "admin", "status", "--digest")
    assert fake.calls[-1] == ("cluster_status", (None, True))
    assert "state digest 0123456789abcdef at index 41" in out
    code, document = run_json(capsys, "admin", "status", "--digest")
    assert (document["state_digest"], document["state_index"]) == ("0123456789abcdef", 41)


def test_admin_remove_cluster_and_tokens(capsys: pytest.CaptureFixture[str],
                                         fake: FakeClient) -> None:
    code, out, _ = run(capsys, "admin", "remove-cluster", "east")
    assert (code, out) == (0, "removed cluster east\n")
    assert fake.calls[-1] == ("remove_cluster", ("east",))
    code, document = run_json(capsys, "admin", "token", "create", "--tenant", "ml", "--role",
                              "user", "--note", "ci")
    assert code == 0 and document["token"].startswith("rst_") and document["tenant"] == "ml"
    assert fake.calls[-1] == ("create_token", ("ml", "user", "ci"))
    code, document = run_json(capsys, "admin", "token", "list")
    assert document == [{"token_id": "0123456789abcdef", "tenant": "*", "role": "admin",
                         "acts_as": "admin", "note": "bootstrap", "created_ms": 1_000}]
    code, out, _ = run(capsys, "admin", "token", "revoke", "0123456789abcdef")
    assert (code, out) == (0, "revoked 0123456789abcdef\n")
    code, _, err = run(capsys, "admin", "token", "create", "--tenant", "ml", "--role", "root")
    assert code == 2 and "invalid choice" in err


def test_admin_cert_revoke_normalises_a_fingerprint_and_refuses_a_muddled_target(
        capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    """A fingerprint as openssl prints it (colons, upper case) is sent as the replicas keep it;
    naming no certificate or two, or a --subject beside CERT_PEM, is refused before any call."""
    colons = ":".join(["AB"] * 32)
    code, document = run_json(capsys, "admin", "cert", "revoke", "--fingerprint", colons,
                              "--subject", "raftsched-agent:east", "--reason", "stolen")
    assert code == 0 and document == {"fingerprint": "ab" * 32,
                                      "subject": "raftsched-agent:east", "created": True}
    assert fake.calls[-1] == ("revoke_certificate", ("ab" * 32, "raftsched-agent:east",
                                                     "stolen"))
    calls = len(fake.calls)
    for argv, says in (((), "CERT_PEM or --fingerprint SHA256 (one)"),
                       (("c.pem", "--fingerprint", "ab" * 32), "CERT_PEM or --fingerprint"),
                       (("c.pem", "--subject", "x"), "--subject goes with --fingerprint"),
                       (("--fingerprint", "ab" * 31), "--fingerprint: the sha256")):
        code, _, err = run(capsys, "admin", "cert", "revoke", *argv)
        assert code == 2 and says in err, (argv, err)
    assert len(fake.calls) == calls  # nothing was sent


def test_admin_drain_and_undrain(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, out, _ = run(capsys, "admin", "drain", "east", "--reason", "kernel upgrade")
    assert (code, out) == (0, "draining east\n")
    assert fake.calls[-1] == ("drain_cluster", ("east", True, "kernel upgrade"))
    code, document = run_json(capsys, "admin", "undrain", "east")
    assert (code, document) == (0, {"cluster_id": "east", "draining": False, "changed": True})
    assert fake.calls[-1] == ("drain_cluster", ("east", False, ""))


def test_admin_tenant_set_and_list(capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    code, document = run_json(capsys, "admin", "tenant", "set", "ml", "--weight", "3",
                              "--max-queued", "500")
    assert code == 0 and fake.calls[-1] == ("set_tenant", ("ml", 3, 500, None))
    assert document == {"tenant": "ml", "weight": 3, "max_queued": 500, "max_running": 0,
                        "configured": True, "queued": 3, "running": 1,
                        "reserved": {"cpu_milli": 1000, "memory_mb": 128, "gpu": 0},
                        "dominant_share": 0.25, "changed": True}
    code, out, _ = run(capsys, "admin", "tenant", "set", "ml", "--max-running", "0")
    assert code == 0 and fake.calls[-1] == ("set_tenant", ("ml", None, None, 0))
    assert out.splitlines()[0].split() == ["TENANT", "WEIGHT", "MAX", "QUEUED", "MAX",
                                           "RUNNING", "QUEUED", "RUNNING", "SHARE", "POLICY"]
    code, _, err = run(capsys, "admin", "tenant", "set", "ml")
    assert code == 2 and "nothing to set" in err
    for bad in (["--weight", "0"], ["--weight", "x"], ["--max-queued", "-1"]):
        code, _, err = run(capsys, "admin", "tenant", "set", "ml", *bad)
        assert code == 2 and bad[0] in err, bad
    code, document = run_json(capsys, "admin", "tenant", "list")
    assert [t["tenant"] for t in document["tenants"]] == ["*", "ml", "etl"]
    assert (document["queued_total"], document["max_queued_tasks"]) == (8, 1_000_000)
    code, out, _ = run(capsys, "admin", "tenant", "list")
    assert "etl" in out and "defaults" in out and "queued tasks 8 of at most 1000000" in out


def test_a_refusal_past_a_limit_says_when_to_retry(capsys: pytest.CaptureFixture[str],
                                                   fake: FakeClient) -> None:
    fake.fail["submit"] = RaftschedError(Code.RESOURCE_EXHAUSTED, "tenant ml has 9 queued",
                                         retry_after_ms=5_000)
    code, document = run_json(capsys, "submit", DEMO)
    assert code == 2
    assert document["error"]["retry_after_s"] == 5.0
    assert document["error"]["hint"] == "retry after 5 s"
    code, _, err = run(capsys, "submit", DEMO)
    assert code == 2 and "retry after 5 s" in err


def test_admin_membership(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run(capsys, "admin", "add-replica", "127.0.0.1:6003", "--grpc",
                       "127.0.0.1:5003")
    assert (code, out) == (0, "added 127.0.0.1:6003; members: 127.0.0.1:6001, 127.0.0.1:6003\n")
    assert fake.calls[-1] == ("add_replica", ("127.0.0.1:6003", "127.0.0.1:5003"))
    code, document = run_json(capsys, "admin", "remove-replica", "127.0.0.1:6003")
    assert (code, document) == (0, {"raft_address": "127.0.0.1:6003",
                                    "members": ["127.0.0.1:6001"]})
    code, _, err = run(capsys, "admin", "add-replica", "nonsense")
    assert code == 2 and "argument RAFT_ADDR: not HOST:PORT: 'nonsense'" in err

    def fail(raft_address: str) -> Any:
        raise RaftschedError(Code.UNAVAILABLE, "no leader")

    monkeypatch.setattr(fake, "remove_replica", fail)
    code, _, err = run(capsys, "admin", "remove-replica", "127.0.0.1:6003")
    assert code == 3 and "check the members with `raftsched admin status`" in err


# --- errors, exit codes, servers ----------------------------------------------------------------


@pytest.mark.parametrize(("code", "exit_code"), [
    (Code.INVALID_ARGUMENT, 2), (Code.NOT_FOUND, 2), (Code.ALREADY_EXISTS, 2),
    (Code.FAILED_PRECONDITION, 2), (Code.RESOURCE_EXHAUSTED, 2),
    (Code.UNAVAILABLE, 3), (Code.DEADLINE_EXCEEDED, 3),
])
def test_error_codes_map_to_exit_codes(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                                       code: Code, exit_code: int) -> None:
    fake.fail["get_job"] = RaftschedError(code, "it went\nwrong")
    result, out, err = run(capsys, "job", "status", "demo-1")
    assert (result, out) == (exit_code, "")
    assert err.startswith(f"error: {code.value}: it went wrong")
    assert err.count("\n") == 1 and "Traceback" not in err
    result, document = run_json(capsys, "job", "status", "demo-1")
    assert result == exit_code
    assert document["error"]["code"] == code.value
    assert document["error"]["message"] == "it went wrong"


def test_reads_say_nothing_changed_when_no_replica_answers(
        capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.fail["list_tasks"] = RaftschedError(Code.UNAVAILABLE, "no replica answered")
    _, _, err = run(capsys, "job", "tasks", "demo-1")
    assert "this command only reads, nothing was changed" in err


def test_a_watch_failing_after_the_submit_says_the_job_goes_on(
        capsys: pytest.CaptureFixture[str], fake: FakeClient) -> None:
    fake.fail["watch"] = RaftschedError(Code.UNAVAILABLE, "stream lost")
    code, _, err = run(capsys, "submit", DEMO, "--watch")
    assert code == 3
    assert err.splitlines()[-1] == ("error: UNAVAILABLE: stream lost; job demo-1 was submitted "
                                    "and goes on; follow it with: raftsched job status demo-1")


def test_os_errors_and_ctrl_c_never_show_a_traceback(capsys: pytest.CaptureFixture[str],
                                                     fake: FakeClient) -> None:
    fake.fail["get_job"] = PermissionError(13, "Permission denied", "/some/file")
    assert run(capsys, "job", "status", "x")[0:3:2] == (
        2, "error: FAILED_PRECONDITION: /some/file: Permission denied\n")
    fake.fail["get_job"] = KeyboardInterrupt()
    assert run(capsys, "job", "status", "x")[0:3:2] == (130, "\ninterrupted\n")


def test_servers_come_from_the_flag_then_the_environment_then_the_dev_cluster(
        capsys: pytest.CaptureFixture[str], fake: FakeClient, made: Made,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run(capsys, "job", "status", "x", "--servers", "10.0.0.1:1, 10.0.0.2:2", "--timeout", "4")
    assert (made.servers[-1], made.timeouts[-1]) == (["10.0.0.1:1", "10.0.0.2:2"], 4.0)
    run(capsys, "job", "status", "x")
    assert made.servers[-1] == ["127.0.0.1:7001", "127.0.0.1:7002"]

    monkeypatch.delenv(common.SERVERS_ENV)
    code, _, err = run(capsys, "job", "status", "x")
    assert code == 2
    assert err.startswith("error: INVALID_ARGUMENT: no scheduler addresses: pass --servers")

    dev_dir = tmp_path / "dev"
    dev_dir.mkdir()
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(dev_dir))
    state = record.ClusterState(str(dev_dir), "mock", str(dev_dir / "secret"), 0)
    state.replicas.append(record.ReplicaEntry("replica-1", 1, 1, "127.0.0.1:9001",
                                                  "127.0.0.1:9101", 0, "d", "l"))
    record.save_state(state)
    run(capsys, "job", "status", "x")
    assert made.servers[-1] == ["127.0.0.1:9001"]


@pytest.mark.parametrize(("argv", "says"), [
    (["--servers", "nohost"], "'nohost' is not HOST:PORT (no ':PORT')"),
    (["--servers", "h:1,h:99999"], "'h:99999' is not HOST:PORT (port 99999 is not between 1 "
                                   "and 65535)"),
    (["--servers", ","], "names no address"),
    (["--servers", "::1:7001"], "'::1:7001' is not HOST:PORT (an IPv6 address goes in "
                                "brackets, e.g. [::1]:7001)"),
])
def test_bad_server_addresses(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                              argv: list[str], says: str) -> None:
    """The one address-list option type: a usage error naming the option and the bad item."""
    code, _, err = run(capsys, "job", "status", "x", *argv)
    assert code == 2 and f"error: argument --servers: {says}\n" in err


def test_bad_server_addresses_from_the_environment_name_the_variable(
        capsys: pytest.CaptureFixture[str], fake: FakeClient,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.SERVERS_ENV, "h:1,h:x")
    code, _, err = run(capsys, "job", "status", "x")
    assert code == 2 and err.startswith("error: INVALID_ARGUMENT: RAFTSCHED_SERVERS: 'h:x' is "
                                        "not HOST:PORT (not a port number: 'x')")


@pytest.mark.parametrize("timeout", ["0", "-1", "abc"])
def test_bad_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str], fake: FakeClient,
                                      timeout: str) -> None:
    code, _, err = run(capsys, "job", "status", "x", "--timeout", timeout)
    assert code == 2 and "--timeout" in err


@pytest.mark.parametrize("argv", [
    ["submit"], ["job", "status"], ["job", "tasks"], ["job", "list"], ["job", "cancel"],
    ["task", "history"], ["task", "explain"], ["admin", "status"], ["admin", "add-replica"],
    ["admin", "remove-replica"], ["admin", "remove-cluster"], ["admin", "token", "create"],
    ["admin", "token", "list"], ["admin", "token", "revoke"], ["admin", "drain"],
    ["admin", "undrain"], ["admin", "tenant", "set"], ["admin", "tenant", "list"], ["dev", "up"],
    ["dev", "add-agent"], ["dev", "add-group"], ["dev", "status"], ["dev", "down"],
])
def test_every_command_help_says_what_it_prints_and_exits_with(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run(capsys, *argv, "--help")
    assert code == 0
    assert "output:" in out and "--json" in out and "exit status:" in out


@pytest.mark.parametrize("argv", [["job"], ["task", "history", "j"], ["admin"], ["dev"],
                                  ["job", "frob"]])
def test_incomplete_commands_are_usage_errors(capsys: pytest.CaptureFixture[str],
                                              argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert "usage: raftsched" in err


# --- replica and agent --------------------------------------------------------------------------


def test_server_commands_delegate_to_the_server_modules(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def run_replica(args: Any) -> int:
        seen.append(args.raft)
        return 0

    module = types.SimpleNamespace(
        add_arguments=lambda parser: parser.add_argument("--raft", required=True),
        run=run_replica,
    )
    replica = servers.SERVERS["replica"]
    monkeypatch.setitem(servers.SERVERS, "replica", dataclasses.replace(replica,
                                                                         load=lambda: module))
    assert run(capsys, "replica", "--raft", "127.0.0.1:1")[0] == 0
    assert seen == ["127.0.0.1:1"]
    code, _, err = run(capsys, "replica")
    assert code == 2 and "the following arguments are required: --raft" in err
    code, out, _ = run(capsys, "replica", "--help")
    assert code == 0 and "Run one scheduler replica" in out and "--raft" in out


@pytest.mark.parametrize("command", ["replica", "agent"])
def test_server_command_with_a_broken_dependency(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 command: str) -> None:
    def broken() -> Any:
        raise ModuleNotFoundError("No module named 'lmdb'", name="lmdb")

    server = servers.SERVERS[command]
    monkeypatch.setitem(servers.SERVERS, command, dataclasses.replace(server, load=broken))
    code, out, err = run(capsys, command, "--x", "1")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: FAILED_PRECONDITION: 'raftsched {command}' cannot start: No "
                          "module named 'lmdb'; reinstall")
    code, document = run_json(capsys, command)
    assert code == 2 and document["error"]["code"] == "FAILED_PRECONDITION"


def test_validate_and_start_up_import_neither_grpc_nor_the_servers() -> None:
    code = ("import sys; from raftsched.cli import main as cli; cli.build_parser(); "
            "bad = [m for m in ('grpc', 'pysyncobj', 'raftsched.replica.main', 'raftsched.client') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# --- dev ----------------------------------------------------------------------------------------


def own_state(directory: Path) -> record.ClusterState:
    """A recorded cluster whose 'processes' are this test process (alive) and a dead pid."""
    start = procfs.start_ticks(os.getpid())
    assert start is not None
    state = record.ClusterState(str(directory), "mock", str(directory / "secret"), 0)
    state.replicas += [
        record.ReplicaEntry("replica-1", os.getpid(), start, "127.0.0.1:5001",
                                "127.0.0.1:6001", 0, "d1", "l1"),
        record.ReplicaEntry("replica-2", os.getpid(), start + 1, "127.0.0.1:5002",
                                "127.0.0.1:6002", 0, "d2", "l2"),
    ]
    state.agents.append(record.AgentEntry("gpu-west", os.getpid(), start, ("linux", "gpu"),
                                              4, 8192, 2, 0, "d3", "l3"))
    return state


VIEW = processes.ClusterView(leader="127.0.0.1:5001", term=1, responder="127.0.0.1:5001",
                              clusters={"gpu-west": "READY"}, from_leader=True)


def test_dev_up(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                tmp_path: Path) -> None:
    asked: list[dev_up.UpOptions] = []

    def up(options: dev_up.UpOptions, *, progress: Any) -> Any:
        asked.append(options)
        progress("starting")
        return own_state(tmp_path), VIEW

    monkeypatch.setattr(dev_up, "up", up)
    code, out, err = run(capsys, "dev", "up", "--dir", str(tmp_path), "--replicas", "5",
                         "--agents", "3", "--executor", "subprocess", "--timeout", "9")
    assert code == 0
    assert asked == [dev_up.UpOptions(tmp_path, 5, 3, "subprocess", 9.0)]
    assert PROGRESS.match(err) and err.endswith("starting\n")
    assert out.splitlines()[0] == "dev cluster up: 2 replicas, 1 agents (mock executor)"
    assert f"stop it: raftsched dev down --dir {tmp_path}" in out

    code, document = run_json(capsys, "dev", "up", "--dir", str(tmp_path))
    assert code == 0 and asked[-1] == dev_up.UpOptions(tmp_path)
    assert document["servers"] == ["127.0.0.1:5001", "127.0.0.1:5002"]
    assert document["dir"] == str(tmp_path)
    assert document["replicas"][0] == {
        **{key: document["replicas"][0][key] for key in ("metrics_port", "data_dir", "log")},
        "id": "replica-1", "pid": os.getpid(), "address": "127.0.0.1:5001",
        "raft_address": "127.0.0.1:6001", "leader": True, "alive": True, "group": 0,
        "joining": False}
    assert document["groups"] == [document["servers"]]  # one scheduler group
    assert (document["replicas"][1]["alive"], document["replicas"][1]["leader"]) == (False,
                                                                                     False)
    assert {key: document["agents"][0][key] for key in ("cluster", "pid", "alive")} == {
        "cluster": "gpu-west", "pid": os.getpid(), "alive": True}


@pytest.mark.parametrize("argv", [["--replicas", "4"], ["--agents", "17"],
                                  ["--executor", "docker"]])
def test_dev_up_refuses_bad_options(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert run(capsys, "dev", "up", *argv)[0] == 2


def test_dev_up_slurm(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                     tmp_path: Path) -> None:
    asked: list[dev_up.UpOptions] = []

    def up(options: dev_up.UpOptions, *, progress: Any) -> Any:
        asked.append(options)
        state = own_state(tmp_path)
        state.slurm = record.SlurmEntry(str(tmp_path / "slurm"), "/d/slurm.conf", "debug",
                                            "/d/jobcomp.txt")
        return state, VIEW

    monkeypatch.setattr(dev_up, "up", up)
    code, out, _ = run(capsys, "dev", "up", "--dir", str(tmp_path), "--slurm")
    assert code == 0 and asked == [dev_up.UpOptions(tmp_path, slurm=True)]
    assert out.splitlines()[0] == ("dev cluster up: 2 replicas, 1 agents (mock executor; a "
                                   "private Slurm, partition debug)")
    assert "slurm:   partition debug; client commands need SLURM_CONF=/d/slurm.conf" in out
    code, document = run_json(capsys, "dev", "up", "--dir", str(tmp_path), "--slurm")
    assert code == 0 and document["slurm"]["conf"] == "/d/slurm.conf"


def test_dev_add_agent_passes_slurm_and_resources(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    asked: list[dev_add_agent.AddAgentOptions] = []
    entry = record.AgentEntry("hpc", os.getpid(), 1, ("linux",), 8, 4000, 0, 9, "d", "l",
                                  (("lic", 2),), "slurm", "debug")

    def add_agent(options: dev_add_agent.AddAgentOptions, *, progress: Any) -> Any:
        asked.append(options)
        return own_state(tmp_path), entry, VIEW

    monkeypatch.setattr(dev_add_agent, "add_agent", add_agent)
    code, document = run_json(capsys, "dev", "add-agent", "--dir", str(tmp_path),
                              "--cluster-id", "hpc", "--executor", "slurm",
                              "--slurm-partition", "debug", "--resources", "lic=2, fpga=1")
    assert code == 0
    assert asked == [dev_add_agent.AddAgentOptions(tmp_path, "hpc", executor="slurm",
                                                resources=(("fpga", 1), ("lic", 2)),
                                                slurm_partition="debug")]
    assert (document["resources"], document["executor"], document["slurm_partition"]) == (
        {"lic": 2}, "slurm", "debug")
    code, out, _ = run(capsys, "dev", "add-agent", "--dir", str(tmp_path), "--cluster-id", "x",
                       "--gpu", "0")
    assert code == 0 and asked[-1].gpu == 0 and asked[-1].executor is None
    assert "executor:  slurm:debug" in out and "resources: lic=2" in out
    code, _, err = run(capsys, "dev", "add-agent", "--dir", str(tmp_path), "--cluster-id", "x",
                       "--resources", "lic")
    assert (code, err) == (2, "error: INVALID_ARGUMENT: --resources: 'lic' is not NAME=COUNT "
                              "(a whole number)\n")
    assert run(capsys, "dev", "add-agent", "--cluster-id", "x", "--executor", "docker")[0] == 2


def test_dev_add_group(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                       tmp_path: Path) -> None:
    from raftsched.client.shards import MoveReport
    from raftsched.dev import add_group as dev_add_group

    asked: list[dev_add_group.AddGroupOptions] = []
    state = own_state(tmp_path)
    state.replicas.append(record.ReplicaEntry("replica-3", os.getpid(), 0, "127.0.0.1:5003",
                                              "127.0.0.1:6003", 0, "d4", "l4", 1))
    report = MoveReport(groups=2, epoch=2, moved=2048, keys_imported=3, steps=["group 0: 1"])

    def add_group(options: dev_add_group.AddGroupOptions, *, progress: Any) -> Any:
        asked.append(options)
        progress("step 1/3")
        return dev_add_group.AddGroupResult(state, 1, report, ("gpu-west",), False)

    monkeypatch.setattr(dev_add_group, "add_group", add_group)
    monkeypatch.setattr(dev_status, "group_leaders", lambda state: [])
    code, document = run_json(capsys, "dev", "add-group", "--dir", str(tmp_path), "--timeout",
                              "9")
    assert code == 0 and asked == [dev_add_group.AddGroupOptions(tmp_path, 9.0)]
    assert {key: document[key] for key in ("group", "groups", "epoch", "moved", "keys_imported",
                                           "keys_kept", "restarted", "resumed")} == {
        "group": 1, "groups": 2, "epoch": 2, "moved": 2048, "keys_imported": 3, "keys_kept": 0,
        "restarted": ["gpu-west"], "resumed": False}
    assert document["servers"] == [["127.0.0.1:5001", "127.0.0.1:5002"], ["127.0.0.1:5003"]]
    assert [r["id"] for r in document["replicas"]] == ["replica-3"]
    code, out, err = run(capsys, "dev", "add-group", "--dir", str(tmp_path))
    assert code == 0 and PROGRESS.match(err) and err.endswith("step 1/3\n")
    assert out.splitlines()[0] == (f"group 1 added to the dev cluster in {tmp_path}: 2 "
                                   "scheduler groups at shard map epoch 2; 2048 shards moved, "
                                   "3 idempotency keys handed over")
    assert "agents restarted to serve every group: gpu-west" in out
    assert run(capsys, "dev", "add-group", "--timeout", "0")[0] == 2


def test_dev_up_failure_shows_the_log_tail(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    def up(options: dev_up.UpOptions, *, progress: Any) -> Any:
        raise record.DevClusterError(Code.FAILED_PRECONDITION, "replica-1 exited",
                                         log="/d/logs/replica-1.log",
                                         log_tail=["line 1", "error: no secret"])

    monkeypatch.setattr(dev_up, "up", up)
    code, out, err = run(capsys, "dev", "up", "--dir", str(tmp_path))
    assert (code, out) == (2, "")
    assert err.splitlines() == ["--- last 2 lines of /d/logs/replica-1.log", "line 1",
                                "error: no secret", "---",
                                "error: FAILED_PRECONDITION: replica-1 exited"]
    code, document = run_json(capsys, "dev", "up", "--dir", str(tmp_path))
    assert code == 2
    assert document["error"]["log_tail"] == ["line 1", "error: no secret"]


def test_dev_up_timeout_exits_3_without_a_read_only_hint(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    def up(options: dev_up.UpOptions, *, progress: Any) -> Any:
        raise record.DevClusterError(Code.UNAVAILABLE, "not a leader after 60 s")

    monkeypatch.setattr(dev_up, "up", up)
    code, _, err = run(capsys, "dev", "up", "--dir", str(tmp_path))
    assert (code, err) == (3, "error: UNAVAILABLE: not a leader after 60 s\n")


def test_dev_status(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                    tmp_path: Path) -> None:
    monkeypatch.setattr(dev_status, "status", lambda directory: (own_state(tmp_path), VIEW))
    code, out, _ = run(capsys, "dev", "status", "--dir", str(tmp_path))
    assert code == 0 and out.splitlines()[0].endswith("leader: 127.0.0.1:5001")
    assert "DEAD" in out
    code, document = run_json(capsys, "dev", "status", "--dir", str(tmp_path))
    assert code == 0 and {"servers", "replicas", "agents", "dir"} <= document.keys()


def test_dev_status_and_down_without_a_cluster(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    code, _, err = run(capsys, "dev", "status", "--dir", str(tmp_path))
    assert code == 2 and err.startswith("error: NOT_FOUND: no dev cluster recorded in")
    code, out, _ = run(capsys, "dev", "down", "--dir", str(tmp_path))
    assert (code, out) == (0, f"no dev cluster recorded in {tmp_path}: nothing to stop\n")
    code, document = run_json(capsys, "dev", "down", "--dir", str(tmp_path))
    assert (code, document) == (0, {"dir": str(tmp_path), "recorded": False, "stopped": []})


def test_dev_down(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                  tmp_path: Path) -> None:
    results = [supervisor.StopResult("replica-1", 10, "stopped"),
               supervisor.StopResult("cpu-east", 11, "not running")]
    monkeypatch.setattr(dev_down, "down", lambda directory, progress: results)
    code, out, _ = run(capsys, "dev", "down", "--dir", str(tmp_path))
    assert code == 0
    assert out.splitlines()[:3] == ["NAME       PID  OUTCOME", "replica-1   10  stopped",
                                    "cpu-east    11  not running"]
    code, document = run_json(capsys, "dev", "down", "--dir", str(tmp_path))
    assert document["stopped"][1] == {"name": "cpu-east", "pid": 11, "outcome": "not running"}


def test_dev_dir_defaults_to_the_environment(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    seen: list[Path] = []
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(tmp_path / "from-env"))
    monkeypatch.setattr(dev_down, "down",
                        lambda directory, progress: seen.append(directory))
    run(capsys, "dev", "down")
    monkeypatch.delenv(environment.DEV_DIR_ENV)
    run(capsys, "dev", "down")
    assert seen == [tmp_path / "from-env", Path(record.DEFAULT_DEV_DIR)]


# --- retry notices ------------------------------------------------------------------------------


def test_a_retrying_command_says_why_at_most_every_few_seconds(
        capsys: pytest.CaptureFixture[str]) -> None:
    now = [100.0]
    notices = common.RetryNotices(30.0, clock=lambda: now[0])
    refused = RaftschedError(Code.UNAVAILABLE, "could not connect to h:1 (connection refused)")
    for step_s in (0.0, 1.0, 1.0, common.RETRY_NOTICE_EVERY_S, 1.0):
        now[0] += step_s
        notices(refused, 0.1)
    out, err = capsys.readouterr()
    assert out == ""  # stdout (and --json) untouched
    lines = err.splitlines()
    assert lines == [
        "waiting: could not connect to h:1 (connection refused); retrying for up to 30 s more "
        "(--timeout; Ctrl-C stops)",
        "waiting: could not connect to h:1 (connection refused); retrying for up to 23 s more "
        "(--timeout; Ctrl-C stops)",
    ]


def test_version_names_the_package_the_snapshot_format_and_python() -> None:
    from importlib import metadata

    from raftsched.state.snapshot import FORMAT_VERSION

    result = subprocess.run([sys.executable, "-m", "raftsched", "--version"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (f"raftsched {metadata.version('raftsched')} (snapshot format "
                             f"{FORMAT_VERSION}, Python {sys.version.split()[0]})\n")
