"""Free text a caller stores — a cancel reason, a drain reason, a token's note, a revoked
certificate's subject — is printable text or refused, and what the CLI prints of the state is
escaped (issue 21, finding 12: a cancel reason `$'\\e[2J\\nfake line'` cleared the screen and
faked a line in `job status`, `job tasks` and `task explain`; a certificate's common name is
the certificate's, so `admin cert list` printed whatever it held).

Against a real one-replica cluster through the CLI and over gRPC with the dev certificates and
admin token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftsched.dev import pki
from raftsched.errors import Code, RaftschedError
from tests.support.cluster import LocalCluster, running

pytestmark = pytest.mark.integration

HOSTILE = "\x1b[2J\nfake line"
"""Clears the screen, then a line that looks like the CLI's own output."""
BIDI = "ok \u202etxt.exe"
WAITING = """\
name: waiting
allow_unschedulable: true
tasks:
  - {id: w, command: [mock], requires: [nowhere]}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running(tmp_path_factory.mktemp("free-text"), replica_count=1) as local:
        yield local


def submit_waiting(cluster: LocalCluster, tmp_path: Path) -> str:
    spec = tmp_path / "waiting.yaml"
    spec.write_text(WAITING)
    result = cluster.cli("submit", str(spec), "--json")
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["job_id"])


def job_state(cluster: LocalCluster, job_id: str) -> tuple[str, str]:
    result = cluster.cli("job", "status", job_id, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    return document["state"], document["reason"]


@pytest.mark.parametrize("reason", [HOSTILE, BIDI, "tab\there", "del\x7f", "c1\x9b2J"])
def test_the_cli_refuses_an_unprintable_cancel_reason_before_sending(
        cluster: LocalCluster, tmp_path: Path, reason: str) -> None:
    job_id = submit_waiting(cluster, tmp_path)
    refused = cluster.cli("job", "cancel", job_id, "--reason", reason)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "argument --reason: must be printable text" in refused.stderr
    assert "Traceback" not in refused.stderr and "\x1b" not in refused.stderr
    assert job_state(cluster, job_id) == ("PENDING", "")  # nothing changed


def test_the_replicas_refuse_unprintable_free_text_over_grpc(cluster: LocalCluster,
                                                             tmp_path: Path) -> None:
    job_id = submit_waiting(cluster, tmp_path)
    client = cluster.client()
    calls = {
        "reason": lambda: client.cancel(job_id, reason=HOSTILE),
        "note": lambda: client.create_token("ml", "user", note=HOSTILE),
        "subject": lambda: client.revoke_certificate("ab" * 32, subject=HOSTILE),
    }
    for field, call in calls.items():
        with pytest.raises(RaftschedError) as refused:
            call()
        assert refused.value.code == Code.INVALID_ARGUMENT, refused.value
        assert refused.value.message.startswith(f"{field}: must be printable text")
    with pytest.raises(RaftschedError) as drained:
        client.drain_cluster("nowhere", True, reason=BIDI)
    assert drained.value.code == Code.INVALID_ARGUMENT  # before NOT_FOUND: nothing proposed
    assert job_state(cluster, job_id) == ("PENDING", "")
    assert all(t.note != HOSTILE for t in client.list_tokens().tokens)
    assert not client.list_revoked_certificates().certificates or all(
        c.subject != HOSTILE for c in client.list_revoked_certificates().certificates)
    cancelled = cluster.cli("job", "cancel", job_id, "--reason", "a printable reason")
    assert cancelled.returncode == 0, cancelled.stderr  # printable text is fine
    assert job_state(cluster, job_id) == ("CANCELLED", "a printable reason")


def test_a_revoked_certificates_common_name_shows_escaped(cluster: LocalCluster) -> None:
    assert cluster.authority is not None
    common_name = "raftsched-user:\x1b[2Jx\nfake"
    files = pki.issue(cluster.authority, "hostile-cn", common_name)
    revoked = cluster.cli("admin", "cert", "revoke", str(files.cert), "--reason", "stolen")
    assert revoked.returncode == 0, revoked.stderr
    assert "\x1b" not in revoked.stdout
    listed = cluster.cli("admin", "cert", "list")
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout
    row = [line for line in listed.stdout.splitlines() if "stolen" in line]
    assert len(row) == 1 and "raftsched-user:\\x1b[2Jx\\nfake" in row[0], listed.stdout
    assert "fake" not in "\n".join(line for line in listed.stdout.splitlines()
                                   if "stolen" not in line)  # no line of its own
    as_json = json.loads(cluster.cli("admin", "cert", "list", "--json").stdout)
    assert [c["subject"] for c in as_json if c["reason"] == "stolen"] == [
        "raftsched-user:\\x1b[2Jx\\nfake"]


def test_removing_the_leader_says_what_to_do_in_cli_terms(cluster: LocalCluster) -> None:
    """Issue 21, cosmetic: the hint named an internal function (`transfer_leadership()`)."""
    leader = cluster.raft[0]  # the only replica
    refused = cluster.cli("admin", "remove-replica", leader)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "transfer_leadership" not in refused.stderr and "()" not in refused.stderr
    assert f"stop the replica at {leader}" in refused.stderr, refused.stderr
    assert f"`raftsched admin remove-replica {leader}` again" in refused.stderr
