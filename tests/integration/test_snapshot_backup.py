"""Backup and restore through the public surfaces: `raftsched admin snapshot save` from a live
cluster (a job run to the end on a real agent, a waiting job, a cancelled one, a tenant
policy), `admin snapshot inspect` offline, then a new 3-replica cluster started with
`replica --restore-from` that serves the same jobs (same jobs digest, same task attempts) and
takes new work; a restore into a used data dir and a file that is no snapshot are refused.

The first test is also the regression test of a crash of the forked snapshot child: with
gRPC's fork support on (grpcio's default), about one save in two from the restored cluster
failed (the child died of SIGSEGV after writing the file; `raftsched/__init__.py`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched.state.snapshot import MAGIC
from tests.support.cluster import LocalCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 60
DONE = """\
name: done
tenant: ml
tasks:
  - {id: a, command: [mock, sleep_ms=10]}
  - {id: b, command: [mock, exit=3], depends_on: [a], retry: {max_attempts: 2}}
"""
WAITING = """\
name: waiting
allow_unschedulable: true
tasks:
  - {id: w, command: [mock], requires: [nowhere]}
"""


def cli(cluster: LocalCluster, *argv: str, timeout_s: float = RUN_TIMEOUT_S) -> Any:
    """`raftsched ARGV --json` against `cluster`; the parsed JSON (exit 0 or 1)."""
    result = cluster.cli(*argv, "--json", timeout_s=timeout_s)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return json.loads(result.stdout)


def run(*argv: str, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`raftsched ARGV --json` with no cluster (offline commands, refusals)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED_")}
    return subprocess.run([sys.executable, "-m", "raftsched", *argv, "--json"],
                          capture_output=True, text=True, timeout=timeout_s, env=env,
                          check=False)


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[list[LocalCluster]]:
    made: list[LocalCluster] = []
    yield made
    for cluster in made:
        cluster.close()


def jobs_of(cluster: LocalCluster) -> dict[str, Any]:
    """Every job and its tasks (state, attempts with fence, cluster, exit code)."""
    listing = cli(cluster, "job", "list")
    return {job["job_id"]: (job["state"], job["tasks"],
                            [(t["task_id"], t["state"], t["attempts"], t["cluster"], t["fence"],
                              t["exit_code"]) for t in cli(cluster, "job", "tasks", job["job_id"])])
            for job in listing["jobs"]}


def test_save_inspect_and_restore_into_a_new_cluster(tmp_path: Path,
                                                     clusters: list[LocalCluster]) -> None:
    old = LocalCluster(tmp_path / "old")
    clusters.append(old)
    old.start()
    old.add_agent("east")
    old.wait_clusters_ready("east")
    (tmp_path / "done.yaml").write_text(DONE)
    (tmp_path / "waiting.yaml").write_text(WAITING)
    cli(old, "admin", "tenant", "set", "ml", "--weight", "3", "--max-queued", "50")
    done = cli(old, "submit", str(tmp_path / "done.yaml"), "--watch")
    assert done["state"] == "FAILED" and done["tasks"] == {"SUCCEEDED": 1, "FAILED": 1}
    waiting = cli(old, "submit", str(tmp_path / "waiting.yaml"),
                  "--idempotency-key", "first")["job_id"]
    cancelled = cli(old, "submit", str(tmp_path / "waiting.yaml"),
                    "--idempotency-key", "second")["job_id"]
    cli(old, "job", "cancel", cancelled)
    before = jobs_of(old)
    assert len(before) == 3

    backup = tmp_path / "backup.snap"
    saved = cli(old, "admin", "snapshot", "save", str(backup))
    data = backup.read_bytes()
    assert data.startswith(MAGIC) and saved["bytes"] == len(data)
    assert saved["sha256"] == hashlib.sha256(data).hexdigest()
    assert not backup.with_name("backup.snap.partial").exists()
    status = cli(old, "admin", "status")
    assert 0 < saved["index"] <= status["commit_index"] and saved["term"] == status["term"]
    again = run("admin", "snapshot", "save", str(backup), "--servers", ",".join(old.grpc))
    assert again.returncode == 2 and "exists" in again.stdout  # nothing overwritten
    assert backup.read_bytes() == data

    inspected = run("admin", "snapshot", "inspect", str(backup))
    assert inspected.returncode == 0, inspected.stderr
    summary = json.loads(inspected.stdout)
    assert (summary["index"], summary["term"]) == (saved["index"], saved["term"])
    assert summary["members"] == sorted(old.raft)
    assert (summary["jobs"], summary["live_jobs"], summary["tasks"]) == (3, 1, 4)
    assert summary["clusters"] == 1 and summary["tenants"] == 1
    old.close()  # the old cluster is gone; the backup is all that is left

    new = LocalCluster(tmp_path / "new", replica_flags=["--restore-from", str(backup)])
    clusters.append(new)
    # The restored state holds the old cluster's API tokens (its bootstrap token put is refused
    # once tokens exist): the old admin token works on the new cluster, the new one does not.
    new_token, new.admin_token = new.admin_token, old.admin_token
    new.start()
    assert new_token != old.admin_token
    assert jobs_of(new) == before
    tenants = {t["tenant"]: t for t in cli(new, "admin", "tenant", "list")["tenants"]}
    assert (tenants["ml"]["weight"], tenants["ml"]["max_queued"]) == (3, 50)
    fresh = cli(new, "submit", str(tmp_path / "waiting.yaml"), "--idempotency-key", "third")
    assert fresh["created"] and fresh["job_id"] not in before
    again_key = cli(new, "submit", str(tmp_path / "waiting.yaml"), "--idempotency-key", "first")
    assert again_key["job_id"] == waiting and not again_key["created"]  # idempotency kept

    resaved = tmp_path / "resaved.snap"
    cli(new, "admin", "snapshot", "save", str(resaved))
    second = json.loads(run("admin", "snapshot", "inspect", str(resaved)).stdout)
    assert second["members"] == sorted(new.raft)
    assert second["index"] > summary["index"] and second["term"] > summary["term"]
    assert second["jobs"] == 4  # the old three, unchanged, and the new one


def test_restore_refuses_a_used_data_dir_and_a_file_that_is_no_snapshot(tmp_path: Path) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "raft.journal").write_bytes(b"x")
    junk = tmp_path / "junk.snap"
    junk.write_bytes(b"not a snapshot")
    base = [sys.executable, "-m", "raftsched.replica.main", "--raft", "127.0.0.1:1",
            "--grpc", "127.0.0.1:2", "--peers", "", "--insecure-dev"]
    refused = subprocess.run([*base, "--data-dir", str(used), "--restore-from", str(junk)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2
    assert "already holds a replica's state" in refused.stderr, refused.stderr
    fresh = tmp_path / "fresh"
    refused = subprocess.run([*base, "--data-dir", str(fresh), "--restore-from", str(junk)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "is not a saved snapshot" in refused.stderr
    assert not (fresh / "raft.dump").exists() and not (fresh / "raft.journal").exists()
    inspected = run("admin", "snapshot", "inspect", str(junk))
    assert inspected.returncode == 2 and "not a saved snapshot" in inspected.stdout


def test_a_lost_majority_is_recovered_from_a_survivors_data_dir(
        tmp_path: Path, clusters: list[LocalCluster]) -> None:
    """Two of three replicas gone for good: nothing commits, `snapshot save` cannot run. The
    survivor, stopped, is exported from its data dir (its last snapshot plus the journal after
    it) and a new cluster restored from that serves every acknowledged job."""
    old = LocalCluster(tmp_path / "old", replica_flags=["--snapshot-entries", "5"])
    clusters.append(old)
    old.start()
    (tmp_path / "waiting.yaml").write_text(WAITING)
    for i in range(12):
        cli(old, "submit", str(tmp_path / "waiting.yaml"), "--idempotency-key", f"k{i}")
    before = jobs_of(old)
    survivor = old.wait_leader()  # the leader holds every acknowledged entry
    data_dir = old.root / f"replica-{survivor}"
    wait_until(lambda: (data_dir / "raft.dump").exists() or None,
               "the survivor to have compacted its log once", RUN_TIMEOUT_S)
    for i, replica in enumerate(old.replicas):
        if i != survivor:
            replica.kill()  # SIGKILL: lost for good
    rescued = tmp_path / "rescued.snap"
    busy = run("admin", "snapshot", "export", "--data-dir", str(data_dir), str(rescued))
    assert busy.returncode == 2 and "in use" in busy.stdout, busy.stdout  # it still runs
    old.replicas[survivor].kill()
    exported = run("admin", "snapshot", "export", "--data-dir", str(data_dir), str(rescued))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    document = json.loads(exported.stdout)
    assert document["index"] > 0 and document["replayed"] >= 1  # journal entries after the dump
    assert stat.S_IMODE(rescued.stat().st_mode) == 0o600  # env values inside: owner only
    summary = json.loads(run("admin", "snapshot", "inspect", str(rescued)).stdout)
    assert (summary["index"], summary["jobs"]) == (document["index"], 12)

    new = LocalCluster(tmp_path / "new", replica_flags=["--restore-from", str(rescued)])
    clusters.append(new)
    new.admin_token = old.admin_token
    new.start()
    assert jobs_of(new) == before


def test_save_writes_a_private_file_and_refuses_a_planted_partial(tmp_path: Path) -> None:
    """Issue 21, finding 8: the backup (every job's env values) was written 0644, and a
    FILE.partial symlink planted by another local user was followed: the admin's save
    overwrote the file it pointed to."""
    cluster = LocalCluster(tmp_path / "c", replica_count=1)
    try:
        cluster.start()
        old_umask = os.umask(0o022)  # the usual umask: the file must be 0600 all the same
        try:
            backup = tmp_path / "backup.snap"
            cli(cluster, "admin", "snapshot", "save", str(backup))
            assert stat.S_IMODE(backup.stat().st_mode) == 0o600
            assert not backup.with_name("backup.snap.partial").exists()

            victim = tmp_path / "victim"
            victim.write_text("not yours\n")
            planted = tmp_path / "second.snap.partial"
            planted.symlink_to(victim)
            refused = cluster.cli("admin", "snapshot", "save", str(tmp_path / "second.snap"))
        finally:
            os.umask(old_umask)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "Traceback" not in refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: FAILED_PRECONDITION: "), lines
        assert f"a symbolic link to {victim}" in lines[0] and "remove it" in lines[0]
        assert victim.read_text() == "not yours\n"  # nothing written through the link
        assert planted.is_symlink()  # and the link left where it was
        assert not (tmp_path / "second.snap").exists()
    finally:
        cluster.close()
