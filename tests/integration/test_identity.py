"""Integration: who a call is from, on a real cluster (issue 21, findings 3, 4, 5 and 9).

- Operator and admin tokens are of tenant `*`: one of another tenant is refused at creation,
  and one a state already holds (injected through a snapshot restore, as an older version made
  them) acts as a user of its tenant only.
- One interceptor checks every service: a revoked certificate is refused by Health (Check and
  Watch) and Reflection too.
- Stream slots are per caller (token), with a reserve for admins: one token holding its quota
  of watches from 127.0.0.1 blocks neither another tenant's watch and logs from the same host
  nor an admin's snapshot save; a stream past the maximum stream age ends and the CLI's watch
  carries on; the CLI waits (saying so) while the slots are full.
- An unknown token id costs no log entry, and the refusals' log lines are bounded."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from raftsched import limits, rpc, tls, tokens
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.dev import pki
from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft.restore import write_snapshot_file
from raftsched.state import snapshot
from raftsched.state.model import Role, TokenRecord
from tests.support.cluster import LocalCluster, code_of, running, with_token
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

PARKED = ("name: parked\ntenant: {tenant}\nallow_unschedulable: true\ntasks:\n"
          "  - {{id: t, command: [mock], requires: [nowhere]}}\n")
"""A job that never ends (no agent has the capability): watches of it stay open."""
RUNNING = "name: running\ntenant: {tenant}\ntasks:\n  - {{id: t, command: [mock, sleep_ms={ms}]}}\n"
CALL_TIMEOUT_S = 10.0
STREAM_DEADLINE_S = 120.0
CLI_TIMEOUT_S = 120.0


def _first(call: Any) -> Any:
    """"open" once the stream's first message arrives, or the status code it ended with."""
    try:
        next(call)
        return "open"
    except grpc.RpcError as error:
        return error.code()


def _leader_channel(cluster: LocalCluster, files: tls.TlsFiles | None,
                    token: str | None = None) -> grpc.Channel:
    channel = tls.open_channel(cluster.grpc[cluster.wait_leader()], files, rpc.CHANNEL_OPTIONS)
    if files is not None and files.cert:
        # Connected first: a first call on a channel whose connection is still being made
        # (a busy machine) fails UNAVAILABLE at once, which is not what these tests look at.
        with contextlib.suppress(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=CALL_TIMEOUT_S)
    return channel if token is None else with_token(channel, token)


def _token(cluster: LocalCluster, tenant: str, role: str = "user") -> str:
    return str(cluster.client().create_token(tenant, role, f"test {tenant}").token)


# --- finding 3: operator and admin tokens are of every tenant -----------------------------------


def test_an_admin_token_of_one_tenant_is_refused_and_an_old_one_acts_as_a_user(
        tmp_path: Path) -> None:
    backup, seeded = tmp_path / "backup.snap", tmp_path / "seeded.snap"
    with running(tmp_path / "old", replica_count=1) as old:
        admin = old.client()
        for role in ("admin", "operator"):
            with pytest.raises(RaftschedError) as refused:
                admin.create_token("ta", role)
            assert refused.value.code == Code.INVALID_ARGUMENT
            message = refused.value.message
            assert "--tenant '*'" in message and "--role user" in message, message
        cli = old.cli("admin", "token", "create", "--tenant", "ta", "--role", "admin")
        assert cli.returncode == 2 and "--tenant '*'" in cli.stdout + cli.stderr, cli
        assert {t.role for t in admin.list_tokens().tokens} == {"admin"}  # nothing was made
        admin.set_tenant("tb", weight=2)
        with backup.open("wb") as out:
            admin.save_snapshot(out)
        old_admin = old.admin_token
    # An older version made such tokens: one in the state, restored into a new cluster.
    with backup.open("rb") as file:
        state, extra = snapshot.load_with_extra(file)
    legacy = tokens.new_token()
    state.tokens[legacy.token_id] = TokenRecord(legacy.token_id, legacy.digest, "ta",
                                                Role.ADMIN, state.now_ms, "made before 21")
    write_snapshot_file(str(seeded), state, extra)
    new = LocalCluster(tmp_path / "new", replica_count=1,
                       replica_flags=["--restore-from", str(seeded)])
    new.admin_token = old_admin
    try:
        new.start()
        as_legacy = new.client(token=legacy.token, retry_budget_s=5)
        for call in (lambda: as_legacy.create_token("*", "admin"),
                     lambda: as_legacy.set_tenant("tb", weight=9),
                     lambda: as_legacy.save_snapshot(io.BytesIO()),
                     lambda: as_legacy.list_tenants(),
                     lambda: as_legacy.cluster_status()):
            assert code_of(call) == Code.PERMISSION_DENIED
        assert code_of(lambda: as_legacy.list_jobs()) is None  # a user of its tenant still
        tenants = {t.tenant: t for t in new.client().list_tenants().tenants}
        assert tenants["tb"].weight == 2
        listed = new.cli("admin", "token", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        row = next(r for r in json.loads(listed.stdout) if r["token_id"] == legacy.token_id)
        assert (row["tenant"], row["role"], row["acts_as"]) == ("ta", "admin", "user")
    except BaseException:
        print(new.logs())
        raise
    finally:
        new.close()


# --- finding 4: one identity check for every service --------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        yield local


def _health_and_reflection(channel: grpc.Channel) -> list[Any]:
    """The status of Health/Check, the first answer of Health/Watch and of a reflection stream."""
    outcomes: list[Any] = []
    try:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                  timeout=CALL_TIMEOUT_S)
        outcomes.append("open")
    except grpc.RpcError as error:
        outcomes.append(error.code())
    for call in (health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(),
                                                           timeout=CALL_TIMEOUT_S),
                 reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                     iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                     timeout=CALL_TIMEOUT_S)):
        outcomes.append(_first(call))
        call.cancel()
    return outcomes


def test_a_revoked_certificate_is_refused_by_health_and_reflection_too(
        cluster: LocalCluster) -> None:
    assert cluster.authority is not None
    stolen = pki.issue_user(cluster.authority, "stolen")
    agent = pki.issue_agent(cluster.authority, "east")
    with _leader_channel(cluster, stolen) as channel:
        assert _health_and_reflection(channel) == ["open"] * 3  # no token needed
    revoked = cluster.cli("admin", "cert", "revoke", str(stolen.cert), "--json")
    assert revoked.returncode == 0, revoked.stderr
    for address in cluster.grpc:  # each replica refuses it once it has applied the revocation
        def refused(address: str = address) -> bool:
            with tls.open_channel(address, stolen, rpc.CHANNEL_OPTIONS) as channel:
                return _health_and_reflection(channel) == \
                    [grpc.StatusCode.UNAUTHENTICATED] * 3
        wait_until(refused, f"{address} to refuse the revoked certificate everywhere", 30)
    with _leader_channel(cluster, agent) as channel:  # any certificate that is not revoked
        assert _health_and_reflection(channel) == ["open"] * 3


# --- finding 5: stream slots per caller, a reserve for admins, a maximum age ----------------------


def _watches(channel: grpc.Channel, job_id: str, count: int) -> list[Any]:
    stub = pb_grpc.SchedulerStub(channel)
    return [stub.WatchJob(pb.WatchJobRequest(job_id=job_id), timeout=STREAM_DEADLINE_S)
            for _ in range(count)]


def test_one_tokens_watches_block_neither_other_tenants_nor_the_admin(
        cluster: LocalCluster) -> None:
    """The probe: a user token holding 8 watches of its never-ending job from 127.0.0.1
    blocked every tenant's WatchJob and TaskLogs and the admin's SaveSnapshot from that host."""
    cluster.add_agent("east")
    cluster.wait_clusters_ready("east")
    alpha, beta, gamma = (_token(cluster, t) for t in ("alpha", "beta", "gamma"))
    parked = cluster.client(token=alpha).submit(PARKED.format(tenant="alpha")).job_id
    betas = cluster.client(token=beta)
    running_job = betas.submit(RUNNING.format(tenant="beta", ms=120_000)).job_id
    wait_until(lambda: betas.list_tasks(running_job).tasks[0].state == "RUNNING" or None,
               "beta's task to run", 60)
    held: list[Any] = []
    with _leader_channel(cluster, cluster.user_tls, alpha) as as_alpha, \
            _leader_channel(cluster, cluster.user_tls, beta) as as_beta, \
            _leader_channel(cluster, cluster.user_tls, gamma) as as_gamma:
        try:
            held += _watches(as_alpha, parked, limits.MAX_STREAMS_PER_CALLER)
            assert [_first(call) for call in held] == ["open"] * limits.MAX_STREAMS_PER_CALLER
            extra = _watches(as_alpha, parked, 1)[0]
            assert _first(extra) == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "MAX_STREAMS_PER_CALLER" in extra.details()
            # Another tenant, from the same host: its watch and its task's logs are served.
            held += _watches(as_beta, running_job, 1)
            logs = pb_grpc.SchedulerStub(as_beta).TaskLogs(pb.TaskLogsRequest(
                job_id=running_job, task_id="t", follow=True), timeout=STREAM_DEADLINE_S)
            assert [_first(held[-1]), _first(logs)] == ["open", "open"]
            logs.cancel()  # (a mock task writes no output: the stream would end on its own)
            # Fill every ordinary slot with a third tenant's watches: the admin still saves.
            ordinary = limits.MAX_STREAMS - limits.ADMIN_STREAM_RESERVE
            gamma_job = cluster.client(token=gamma).submit(PARKED.format(tenant="gamma")).job_id
            for _ in range(ordinary - len(held)):  # the cancelled logs' slot frees soon
                held.append(wait_until(lambda: _opened(as_gamma, gamma_job), "a free ordinary slot",
                                       30))
            extra = _watches(as_gamma, gamma_job, 1)[0]
            assert _first(extra) == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "ADMIN_STREAM_RESERVE" in extra.details()
            saved = cluster.client().save_snapshot(io.BytesIO())
            assert saved.size > 0
        finally:
            for call in held:
                call.cancel()


def _opened(channel: grpc.Channel, job_id: str) -> Any:
    """A watch that opened, or None (it was refused)."""
    call = _watches(channel, job_id, 1)[0]
    if _first(call) == "open":
        return call
    call.cancel()
    return None


def _cli_argv(cluster: LocalCluster, *argv: str) -> tuple[list[str], dict[str, str]]:
    """What `cluster.cli` runs, to start it with Popen."""
    assert cluster.user_tls is not None and cluster.admin_token is not None
    files = cluster.user_tls
    connection = ["--servers", ",".join(cluster.grpc), "--tls-ca", str(files.ca),
                  "--tls-cert", str(files.cert), "--tls-key", str(files.key),
                  "--token", cluster.admin_token]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED_")}
    return [sys.executable, "-m", "raftsched", *argv, *connection], env


def test_the_cli_waits_for_a_stream_slot_and_says_so(cluster: LocalCluster) -> None:
    """The CLI exited 2 at once when the slots were full: now it waits within its --timeout,
    saying on stderr what it waits for, and goes on once a slot frees."""
    client = cluster.client()
    job_id = client.submit(PARKED.format(tenant="default")).job_id
    assert cluster.admin_token is not None
    with _leader_channel(cluster, cluster.user_tls, cluster.admin_token) as channel:
        held = _watches(channel, job_id, limits.MAX_STREAMS_PER_CALLER)
        try:
            assert [_first(call) for call in held] == ["open"] * limits.MAX_STREAMS_PER_CALLER
            argv, env = _cli_argv(cluster, "job", "watch", job_id, "--json", "--timeout", "90")
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env)
            try:
                assert proc.stderr is not None
                line = _line_with(proc.stderr, "waiting:", CLI_TIMEOUT_S)
                assert "MAX_STREAMS_PER_CALLER" in line and "--timeout" in line, line
                held.pop().cancel()  # a slot frees: the watch goes on
                client.cancel(job_id, "test done")
                out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == 1, (out, err)  # the job ended CANCELLED
            assert json.loads(out)["state"] == "CANCELLED"
        finally:
            for call in held:
                call.cancel()


def _line_with(stream: Any, fragment: str, timeout_s: float) -> str:
    """The first line of `stream` holding `fragment`, read on a thread, within `timeout_s`."""
    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in stream:
            if fragment in line:
                found.append(line)
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout_s) and found, f"no line with {fragment!r} in {timeout_s:g} s"
    return found[0]


SLOW = ("name: slow\ntasks:\n  - {id: a, command: [mock, sleep_ms=2500]}\n"
        "  - {id: b, command: [mock, sleep_ms=2500], depends_on: [a]}\n"
        "  - {id: c, command: [mock, sleep_ms=2500], depends_on: [b]}\n")
"""At least 7.5 s: several 2-second stream ages."""
MAX_AGE_S = "2"


def test_a_watch_past_the_maximum_stream_age_resumes_to_the_jobs_end(tmp_path: Path) -> None:
    with running(tmp_path, replica_flags=["--max-stream-age-s", MAX_AGE_S]) as cluster:
        cluster.add_agent("east")
        cluster.wait_clusters_ready("east")
        job_id = cluster.client().submit(SLOW).job_id
        watched = cluster.cli("job", "watch", job_id, "--json")
        assert watched.returncode == 0, watched
        assert json.loads(watched.stdout)["state"] == "SUCCEEDED"
        assert "waiting" not in watched.stderr and "error" not in watched.stderr
        ended = [line for line in cluster.logs().splitlines()
                 if "stream_ended_for_age" in line]
        assert ended, "no stream was ended for its age: the test proved nothing"
        _token_less_streams_end_at_their_age(cluster)


def _token_less_streams_end_at_their_age(cluster: LocalCluster) -> None:
    """A health watch ends (OK, the max-age trailer); a reflection stream waiting for its
    client's next request is cancelled: neither keeps its slot past the age."""
    stop = threading.Event()

    def requests() -> Iterator[Any]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")
        stop.wait(STREAM_DEADLINE_S)  # then nothing more: the server waits for the next one

    with _leader_channel(cluster, cluster.user_tls) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(),
                                                          timeout=STREAM_DEADLINE_S)
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            requests(), timeout=STREAM_DEADLINE_S)
        try:
            assert _first(watch) == "open" and _first(reflection) == "open"
            for _ in watch:  # SERVING does not change: the stream ends at its age
                pass
            assert rpc.ended_for_age(watch)
            with pytest.raises(grpc.RpcError) as ended:
                next(reflection)
            assert ended.value.code() == grpc.StatusCode.CANCELLED
        finally:
            stop.set()
            watch.cancel()
            reflection.cancel()


# --- finding 9: unknown tokens ----------------------------------------------------------------


RANDOM_TOKENS = 200
ENTRY_ALLOWANCE = 20
"""Entries the leader may commit meanwhile on its own (ticks), far below one per token."""


def test_unknown_tokens_cost_no_log_entries_and_few_log_lines(cluster: LocalCluster) -> None:
    client = cluster.client()
    leader = cluster.wait_leader()
    before = client.cluster_status(cluster.grpc[leader]).commit_index
    started_s = time.monotonic()
    with _leader_channel(cluster, cluster.user_tls) as channel:
        stub = pb_grpc.SchedulerStub(channel)
        for _ in range(RANDOM_TOKENS):
            bogus = f"rst_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"
            with pytest.raises(grpc.RpcError) as refused:
                stub.ListJobs(pb.ListJobsRequest(), timeout=CALL_TIMEOUT_S,
                              metadata=(("authorization", f"Bearer {bogus}"),))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    windows = (time.monotonic() - started_s) // limits.REFUSED_CALL_LOG_WINDOW_S + 2
    after = client.cluster_status(cluster.grpc[leader]).commit_index
    assert after - before <= ENTRY_ALLOWANCE, (before, after)
    log = cluster.root / "logs" / f"r{leader}.log"

    def events() -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in log.read_text().splitlines()
                 if line.startswith("{")]
        return [e for e in lines if e.get("event") in ("call_refused",
                                                       "call_refused_suppressed")]

    def counted() -> list[dict[str, Any]] | None:
        found = events()
        written = sum(1 for e in found if e["event"] == "call_refused")
        suppressed = sum(e["count"] for e in found if e["event"] == "call_refused_suppressed")
        return found if written + suppressed >= RANDOM_TOKENS else None

    found = wait_until(counted, "the suppressed refusals to be counted",
                       limits.REFUSED_CALL_LOG_WINDOW_S * 3)
    written = sum(1 for e in found if e["event"] == "call_refused")
    assert written <= limits.REFUSED_CALL_LOG_LINES * windows, (written, windows)
    assert found[0]["event"] == "call_refused" and "unknown" in found[0]["reason"]
