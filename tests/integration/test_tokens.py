"""Integration: API tokens on a real cluster (raftsched/replica/identity.py, state tokens).

Every Scheduler and Admin RPC is called with a token of each role (a new RPC without a rule
fails here); tokens of one tenant neither see nor touch another tenant's jobs; a revoked token
stops working; the secret of a token never reaches the log, the applied log or a snapshot."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory

from raftsched import tokens
from raftsched.api import raftsched_pb2 as pb
from raftsched.client.client import Client
from raftsched.errors import Code
from raftsched.replica.identity import Rule, rule_of
from tests.support.cluster import LocalCluster, code_of, running
from tests.support.paths import REPO
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

PARKED = ("name: parked\ntenant: {tenant}\nallow_unschedulable: true\ntasks:\n"
          "  - {{id: t, command: [mock], requires: [nowhere]}}\n")
CLI_TIMEOUT_S = 60.0
ROLE_NEEDED = {Rule.CERTIFICATE: 0, Rule.USER: 0, Rule.OPERATOR: 1, Rule.ADMIN: 2}
"""The least role that may call a rule's RPCs (CERTIFICATE: GetTopology, any token or none)."""
ROLES = ("user", "operator", "admin")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        yield local


def _token(cluster: LocalCluster, tenant: str, role: str) -> str:
    return str(cluster.client().create_token(tenant, role, f"test {role}").token)


def _as(cluster: LocalCluster, token: str | None) -> Client:
    return cluster.client(token=token, retry_budget_s=5)


def test_every_rpc_needs_a_token_of_its_role(cluster: LocalCluster) -> None:
    services = [pb.DESCRIPTOR.services_by_name[n] for n in ("Scheduler", "Admin")]
    tokens = {role: _token(cluster, "*", role) for role in ROLES}
    checked = 0
    for service in services:
        for method in service.methods:
            rule = rule_of(service, method)
            for rank, role in enumerate(ROLES):
                client = _as(cluster, tokens[role])
                request = message_factory.GetMessageClass(method.input_type)()
                if "job_id" in request.DESCRIPTOR.fields_by_name:
                    request.job_id = "no-such-job"
                code = code_of(functools.partial(_invoke, client, service, method, request))
                where = (service.name, method.name, role, code)
                if rank < ROLE_NEEDED[rule]:
                    assert code == Code.PERMISSION_DENIED, where
                else:
                    assert code not in (Code.PERMISSION_DENIED, Code.UNAUTHENTICATED), where
                checked += 1
    assert checked == 3 * sum(len(s.methods) for s in services)


def test_token_digests_are_listed_only_when_asked(cluster: LocalCluster) -> None:
    """`ListTokens with_digests` (admin only, as every ListTokens): what `admin groups add`
    copies into a new group. The digest is the sha256 of the secret, never the secret."""
    token = _token(cluster, "*", "user")
    parsed = tokens.parse_token(token)
    assert parsed is not None
    token_id, secret = parsed
    plain = {t.token_id: t.digest for t in cluster.client().list_tokens().tokens}
    assert plain[token_id] == ""
    listed = {t.token_id: t.digest for t in cluster.client().list_tokens(with_digests=True).tokens}
    assert listed[token_id] == hashlib.sha256(secret.encode()).hexdigest()
    assert all(len(d) == 64 and secret not in d and token not in d for d in listed.values())


def _invoke(client: Client, service: Any, method: Any, request: Any) -> Any:
    from raftsched.api import raftsched_pb2_grpc as pb_grpc

    if method.server_streaming:
        assert method.name in ("WatchJob", "SaveSnapshot", "TaskLogs", "WatchEvents",
                               "ExportShardKeys"), "a new stream: call it here"
        if method.name == "ExportShardKeys":  # refused (no shard moves here) once let through
            return client.export_shard_keys(request.epoch, list(request.shards))
        if method.name == "WatchEvents":  # a stream that never ends: its first event will do
            return next(iter(client.watch_events(job_id=request.job_id)))
        if method.name == "SaveSnapshot":
            return client.save_snapshot(io.BytesIO())
        if method.name == "TaskLogs":
            return list(client.task_logs(request.job_id, "t"))
        return list(client.watch(request.job_id))
    return client._call(getattr(pb_grpc, f"{service.name}Stub"), method.name, request)


def test_no_malformed_or_revoked_token_is_unauthenticated(cluster: LocalCluster) -> None:
    assert code_of(lambda: _as(cluster, None).list_jobs()) == Code.UNAUTHENTICATED
    bogus = "rst_0123456789abcdef_" + "x" * 43
    assert code_of(lambda: _as(cluster, bogus).list_jobs()) == Code.UNAUTHENTICATED
    token = _token(cluster, "*", "user")
    assert code_of(lambda: _as(cluster, token).list_jobs()) is None
    token_id = token.split("_")[1]
    cluster.client().revoke_token(token_id)
    assert code_of(lambda: _as(cluster, token).list_jobs()) == Code.UNAUTHENTICATED
    listed = [t.token_id for t in cluster.client().list_tokens().tokens]
    assert token_id not in listed


def test_a_tenants_token_neither_sees_nor_touches_another_tenants_jobs(
        cluster: LocalCluster) -> None:
    alpha, beta = _as(cluster, _token(cluster, "alpha", "user")), \
        _as(cluster, _token(cluster, "beta", "user"))
    mine = alpha.submit(PARKED.format(tenant="alpha")).job_id
    theirs = beta.submit(PARKED.format(tenant="beta")).job_id
    assert alpha.get_job(mine).job_id == mine
    for call in (lambda: beta.get_job(mine), lambda: beta.list_tasks(mine),
                 lambda: beta.cancel(mine), lambda: beta.task_history(mine, "t"),
                 lambda: beta.explain(mine, "t"), lambda: list(beta.watch(mine)),
                 lambda: beta.get_job("no-such-job")):
        assert code_of(call) == Code.NOT_FOUND  # the same answer as for no such job
    assert alpha.get_job(mine).state != "CANCELLED"
    assert [j.job_id for j in beta.list_jobs().jobs] == [theirs]
    assert code_of(lambda: beta.list_jobs(tenant="alpha")) == Code.PERMISSION_DENIED
    assert code_of(lambda: beta.submit(PARKED.format(tenant="alpha"))) == Code.PERMISSION_DENIED
    everyone = {j.job_id for j in cluster.client().list_jobs().jobs}  # the admin token: "*"
    assert {mine, theirs} <= everyone


def test_token_secrets_never_reach_the_log_or_snapshots(cluster: LocalCluster,
                                                        tmp_path: Path) -> None:
    token = _token(cluster, "*", "user")
    secret = token.split("_", 2)[2].encode()
    assert cluster.admin_token is not None
    admin_secret = cluster.admin_token.split("_", 2)[2].encode()
    leader = cluster.wait_leader()
    client = cluster.client()
    client.submit(PARKED.format(tenant="default"))
    target = client.cluster_status(cluster.grpc[leader]).applied_index
    assert target > 0  # the token's entry and the submit are applied on the leader
    for i in range(3):  # and on every replica, with its files written, before they are read
        wait_until(lambda i=i: client.cluster_status(cluster.grpc[i]).applied_index >= target
                   and cluster.applied_log(i).is_file(), f"replica {i} to apply the entries",
                   30)
    stores = [path for i in range(3) for path in (tmp_path / f"replica-{i}").rglob("*")
              if path.is_file()] + [cluster.applied_log(i) for i in range(3)]
    assert stores
    for path in stores:
        data = path.read_bytes()
        assert secret not in data and admin_secret not in data, path


def test_the_cli_makes_lists_and_uses_tokens(cluster: LocalCluster) -> None:
    assert cluster.user_tls is not None and cluster.admin_token is not None
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAFTSCHED_SERVERS": ",".join(cluster.grpc),
           "RAFTSCHED_TLS_CA": str(cluster.user_tls.ca),
           "RAFTSCHED_TLS_CERT": str(cluster.user_tls.cert),
           "RAFTSCHED_TLS_KEY": str(cluster.user_tls.key),
           "RAFTSCHED_TOKEN": cluster.admin_token, "RAFTSCHED_DEV_DIR": str(cluster.root / "none")}

    def cli(*argv: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        run_env = dict(env) if token is None else {**env, "RAFTSCHED_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "raftsched", *argv], env=run_env,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_S)

    made = cli("admin", "token", "create", "--tenant", "gamma", "--role", "user", "--json")
    assert made.returncode == 0, made.stderr
    document = json.loads(made.stdout)
    assert document["tenant"] == "gamma" and document["token"].startswith("rst_")
    listed = json.loads(cli("admin", "token", "list", "--json").stdout)
    assert document["token_id"] in [t["token_id"] for t in listed]
    assert all("token" not in t for t in listed)  # never a secret
    user = document["token"]
    assert cli("job", "list", "--json", token=user).returncode == 0
    refused = cli("admin", "status", token=user)
    assert refused.returncode == 2 and "PERMISSION_DENIED" in refused.stderr
    assert "Traceback" not in refused.stderr
