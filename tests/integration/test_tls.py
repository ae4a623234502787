"""Integration: the gRPC API over mutual TLS (raftsched/tls.py, raftsched/replica/identity.py)
on a real cluster. Every RPC of every service is called as every kind of caller, so a new RPC
without a rule fails here; the agent-impersonation and forged-report probes are refused; a
revoked certificate is refused on every call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory

from raftsched import rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.dev import pki
from raftsched.replica.identity import Rule, rule_of
from tests.support.cluster import LocalCluster, running, with_token
from tests.support.paths import REPO
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

JOB = "name: tls\ntasks:\n  - {id: t, command: [mock, sleep_ms=60000]}\n"
CALL_TIMEOUT_S = 10.0
EXIT_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        yield local


def _call(channel: grpc.Channel, service: Any, method: Any, request: Any) -> grpc.StatusCode:
    """One RPC with `request`; its status code (OK when it answered)."""
    path = f"/{service.full_name}/{method.name}"
    output = message_factory.GetMessageClass(method.output_type)
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=type(request).SerializeToString,
                                          response_deserializer=output.FromString)
            responses = stream(request, timeout=CALL_TIMEOUT_S)
            next(iter(responses), None)
            responses.cancel()
        else:
            channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                                response_deserializer=output.FromString)(
                request, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def _request(method: Any, cluster_id: str) -> Any:
    message = message_factory.GetMessageClass(method.input_type)()
    if "cluster_id" in message.DESCRIPTOR.fields_by_name:
        message.cluster_id = cluster_id
    if "job_id" in message.DESCRIPTOR.fields_by_name:
        message.job_id = "no-such-job"
    return message


def _channel(cluster: LocalCluster, files: tls.TlsFiles | None) -> grpc.Channel:
    """A channel to the leader that sends the cluster's admin token with every call (so only
    the certificate decides here; roles and tenants: test_tokens.py)."""
    channel = tls.open_channel(cluster.grpc[cluster.wait_leader()], files, rpc.CHANNEL_OPTIONS)
    assert cluster.admin_token is not None
    return with_token(channel, cluster.admin_token)


def test_every_rpc_admits_only_the_callers_its_rule_names(cluster: LocalCluster) -> None:
    assert cluster.authority is not None and cluster.user_tls is not None
    east = cluster.agent_tls("east")
    services = [pb.DESCRIPTOR.services_by_name[name] for name in ("Scheduler", "AgentGateway",
                                                                  "Admin", "Schedules")]
    denied = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
    checked = 0
    with _channel(cluster, cluster.user_tls) as user, _channel(cluster, east) as agent:
        for service in services:
            for method in service.methods:
                rule = rule_of(service, method)
                as_user = _call(user, service, method, _request(method, "east"))
                as_agent = _call(agent, service, method, _request(method, "east"))
                as_other_agent = _call(agent, service, method, _request(method, "west"))
                where = f"{service.name}.{method.name}"
                if rule is Rule.CERTIFICATE:  # GetTopology: agents learn the groups too
                    assert as_user not in denied, (where, as_user)
                    assert as_agent not in denied, (where, as_agent)
                elif rule is not Rule.AGENT:
                    assert as_user not in denied, (where, as_user)
                    assert as_agent == grpc.StatusCode.PERMISSION_DENIED, (where, as_agent)
                else:
                    assert as_user == grpc.StatusCode.PERMISSION_DENIED, (where, as_user)
                    assert as_agent not in denied, (where, as_agent)
                    assert as_other_agent == grpc.StatusCode.PERMISSION_DENIED, where
                checked += 1
    assert checked == sum(len(s.methods) for s in services)


def test_no_certificate_or_a_foreign_ca_gets_no_connection(cluster: LocalCluster,
                                                           tmp_path: Path) -> None:
    foreign = pki.create_authority(tmp_path / "foreign")
    impostor = pki.issue_user(foreign, "tests")  # the right name, the wrong CA
    address = cluster.grpc[cluster.wait_leader()]
    status = pb.DESCRIPTOR.services_by_name["Admin"].methods_by_name["ClusterStatus"]
    service = pb.DESCRIPTOR.services_by_name["Admin"]
    for channel in (grpc.insecure_channel(address),
                    tls.open_channel(address, impostor, rpc.CHANNEL_OPTIONS)):
        with channel:
            assert _call(channel, service, status, pb.ClusterStatusRequest()) \
                == grpc.StatusCode.UNAVAILABLE


def test_another_process_cannot_take_over_an_agents_cluster_or_forge_its_results(
        cluster: LocalCluster) -> None:
    """The probes: a second process registered for an existing cluster with incarnation + 1
    (locking the real agent out and re-running its tasks), and a forged FINISHED for a running
    task whose fence ListTasks hands out. With another agent's certificate or a user's, both
    are refused, and the real agent and its task carry on."""
    cluster.add_agent("east")
    cluster.wait_clusters_ready("east")
    client = cluster.client()
    job_id = client.submit(JOB).job_id
    wait_until(lambda: client.list_tasks(job_id).tasks[0].state == "RUNNING" or None,
               "the task to run on east", 30)
    fence = client.list_tasks(job_id).tasks[0].fence
    gateway = pb.DESCRIPTOR.services_by_name["AgentGateway"]
    west = cluster.agent_tls("west")
    for files in (west, cluster.user_tls):
        with _channel(cluster, files) as channel:
            take_over = pb.RegisterRequest(cluster_id="east", incarnation=2**64 - 1)
            assert _call(channel, gateway, gateway.methods_by_name["Register"], take_over) \
                == grpc.StatusCode.PERMISSION_DENIED
            forged = pb.ReportRequest(cluster_id="east", incarnation=1, reports=[pb.AgentReport(
                kind=pb.AgentReport.FINISHED, job_id=job_id, task_id="t", fence=fence,
                exit_code=0)])
            assert _call(channel, gateway, gateway.methods_by_name["Report"], forged) \
                == grpc.StatusCode.PERMISSION_DENIED
    status = {c.cluster_id: c for c in client.cluster_status().clusters}
    assert status["east"].status == "READY"
    task = client.list_tasks(job_id).tasks[0]
    assert task.state == "RUNNING" and task.fence == fence and task.attempts == 1


def _start(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=EXIT_TIMEOUT_S,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_servers_refuse_to_run_without_tls_unless_told_insecure(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    replica = _start(["raftsched.replica.main", "--raft", "127.0.0.1:1", "--grpc",
                      "127.0.0.1:2", "--data-dir", str(tmp_path / "r"), "--secret-file",
                      str(secret)], tmp_path)
    assert replica.returncode == 2 and "mutual TLS" in replica.stderr, replica.stderr
    authority = pki.create_authority(tmp_path / "tls")
    west = pki.issue_agent(authority, "west")
    agent = _start(["agent", "--cluster-id", "east", "--servers", "127.0.0.1:2",
                    "--data-dir", str(tmp_path / "a"), "--tls-ca", str(west.ca),
                    "--tls-cert", str(west.cert), "--tls-key", str(west.key)], tmp_path)
    assert agent.returncode == 2 and "raftsched-agent:west" in agent.stderr, agent.stderr
    plain = _start(["agent", "--cluster-id", "east", "--servers", "127.0.0.1:2",
                    "--data-dir", str(tmp_path / "b")], tmp_path)
    assert plain.returncode == 2 and "--insecure-dev" in plain.stderr, plain.stderr


def test_a_revoked_certificate_is_refused_and_a_new_one_for_the_cluster_works(
        cluster: LocalCluster) -> None:
    """A stolen agent key: the admin revokes its certificate through the CLI; the agent's
    calls are refused, its cluster stops being READY; a new certificate for the same cluster
    id works. A revoked user certificate is refused whatever token it carries."""
    agent = cluster.add_agent("east")
    cluster.wait_clusters_ready("east")
    east = cluster.agent_tls("east")  # reissued: the running agent read the previous one
    assert east is not None
    stolen = tls.certificate_identity(east.cert)  # what the agent now runs with after restart
    agent.kill()
    agent.start()
    cluster.wait_clusters_ready("east")
    revoked = cluster.cli("admin", "cert", "revoke", str(east.cert), "--reason", "stolen",
                          "--json")
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout) == {"fingerprint": stolen.fingerprint,
                                          "subject": "raftsched-agent:east", "created": True}
    client = cluster.client()
    wait_until(lambda: {c.cluster_id: c.status for c in client.cluster_status().clusters}
               ["east"] != "READY" or None, "east to stop being READY", EXIT_TIMEOUT_S)
    gateway = pb.DESCRIPTOR.services_by_name["AgentGateway"]
    with _channel(cluster, east) as channel:
        assert _call(channel, gateway, gateway.methods_by_name["Register"],
                     pb.RegisterRequest(cluster_id="east", incarnation=99)) \
            == grpc.StatusCode.UNAUTHENTICATED
    listed = json.loads(cluster.cli("admin", "cert", "list", "--json").stdout)
    assert [(r["fingerprint"], r["reason"]) for r in listed] == [(stolen.fingerprint, "stolen")]
    again = cluster.cli("admin", "cert", "revoke", str(east.cert))
    assert again.returncode == 0 and "revoked already" in again.stdout, again

    cluster.agent_tls("east")  # a new certificate, same cluster id: the agent is welcome back
    agent.kill()
    agent.start()
    cluster.wait_clusters_ready("east")

    assert cluster.authority is not None
    mallory = pki.issue_user(cluster.authority, "mallory")
    colons = ":".join(f"{b:02X}" for b in bytes.fromhex(
        tls.certificate_identity(mallory.cert).fingerprint))  # as openssl prints it
    assert cluster.cli("admin", "cert", "revoke", "--fingerprint", colons).returncode == 0
    admin = pb.DESCRIPTOR.services_by_name["Admin"]
    with _channel(cluster, mallory) as channel:
        assert _call(channel, admin, admin.methods_by_name["ClusterStatus"],
                     pb.ClusterStatusRequest()) == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(("argv", "fragment"), [
    ((), "CERT_PEM or --fingerprint"),
    (("--fingerprint", "abc"), "--fingerprint: the sha256"),
    (("/nonexistent.pem",), "not a regular file"),
])
def test_cert_revoke_names_what_is_wrong_and_revokes_nothing(
        cluster: LocalCluster, argv: tuple[str, ...], fragment: str) -> None:
    done = cluster.cli("admin", "cert", "revoke", *argv)
    assert done.returncode == 2 and fragment in done.stderr, done
    assert json.loads(cluster.cli("admin", "cert", "list", "--json").stdout) == []
