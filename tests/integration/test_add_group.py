"""Integration (issue 27, docs/scale-out.md §5): a deployment that outgrows one scheduler group
gets a second one while it runs, through the public surfaces only. Group 0 (three real
replicas, one agent) takes keyed jobs; a new group is started with `--joining` (it refuses
every submit: it owns no shard); `raftsched admin groups add` moves half of the shards to it
and hands over their idempotency keys. Then: every group is at the same map epoch with even
shares, a re-run changes nothing, a retried submit of a moved key answers the job it made before
the move (no second job), that job is still found (in its former owner), a new job in a moved
shard lands in the new group and runs there, on the agent restarted (before the move) with both
groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from raftsched import limits, topology
from raftsched.client.client import Client
from raftsched.errors import Code, RaftschedError
from tests.support.cluster import LocalCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

JOB = "name: grow\ntasks:\n  - {id: a, command: [mock, sleep_ms=20]}\n"
KEYS = 40
STATE_TIMEOUT_S = 120.0
CLI_TIMEOUT_S = 120.0


def _cli(servers: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED_")}
    return subprocess.run([sys.executable, "-m", "raftsched", *argv, "--servers", servers,
                           "--insecure-dev"], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, env=env, check=False)


def _ok(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0 and "Traceback" not in result.stderr, (
        f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout)


def _submit(servers: str, spec: Path, key: str) -> Any:
    return _ok(_cli(servers, "submit", str(spec), "--idempotency-key", key, "--json"))


def _status(servers: str, job_id: str) -> Any:
    return _ok(_cli(servers, "job", "status", job_id, "--json"))


def test_a_running_group_grows_into_two_without_losing_or_doubling_a_job(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    first = LocalCluster(tmp_path / "g0", secure=False)
    second = LocalCluster(tmp_path / "g1", replica_count=1, secure=False,
                          replica_flags=["--group", "1", "--groups", "2", "--joining"])
    try:
        first.start()
        g0 = ",".join(first.grpc)
        first.add_agent("east")
        first.wait_clusters_ready("east")
        before = first.client()  # gRPC for the bulk: the CLI is what the checks below use
        made = {key: before.submit(JOB, key).job_id for key in (f"grow-{n}" for n in range(KEYS))}
        assert len(set(made.values())) == KEYS

        second.start()
        g1 = ",".join(second.grpc)
        joining = Client(second.grpc, retry_budget_s=1.0)
        with pytest.raises(RaftschedError) as refused:
            joining.submit(JOB, "grow-joining")
        joining.close()
        assert refused.value.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED)

        reader = first.client()  # the one-group agent ends its attempts before it is restarted
        wait_until(lambda: all(reader.get_job(j).state == "SUCCEEDED" for j in made.values()),
                   "every job made before the move to succeed", STATE_TIMEOUT_S)
        first.agents["east"].stop()
        agent = first.supervisor.start("agent-east-2", [
            sys.executable, "-m", "agent", "--cluster-id", "east", "--servers", f"{g0};{g1}",
            "--capabilities", "linux", "--cpu", "4", "--memory-mb", "8192", "--gpu", "0",
            "--data-dir", str(first.root / "agent-east"), "--executor", "mock",
            "--insecure-dev"], first.root / "logs" / "agent-east-2.log")
        first.agents["east-2"] = agent
        status = Client(second.grpc, retry_budget_s=5.0)
        wait_until(lambda: any(c.cluster_id == "east" and c.status == "READY"
                               for c in status.cluster_status().clusters),
                   "the agent to serve the new group too", STATE_TIMEOUT_S)
        status.close()
        added = _ok(_cli(g0, "admin", "groups", "add", g1, "--json"))
        owners = bytes(s % 1 for s in range(limits.VIRTUAL_SHARDS))
        moves = dict(topology.balancing_moves(owners, 2))
        moved_keys = [k for k in made if topology.shard_of_key("default", k) in moves]
        assert added["groups"] == 2 and added["epoch"] == 2
        assert added["moved"] == len(moves) == limits.VIRTUAL_SHARDS // 2
        assert added["keys_imported"] == len(moved_keys) > 0

        shown = _ok(_cli(g0, "admin", "groups", "show", "--json"))["groups"]
        assert [(g["group"], g["epoch"], g["shards"], g["moving_out"], g["joining"])
                for g in shown] == [(0, 2, 2048, 0, False), (1, 2, 2048, 0, False)]
        again = _ok(_cli(g0, "admin", "groups", "add", g1, "--json"))
        assert (again["epoch"], again["moved"], again["keys_imported"]) == (2, 0, 0)

        key = moved_keys[0]  # a retry after the move: the job made before it, not a second
        retried = _submit(g0, spec, key)
        assert (retried["job_id"], retried["created"]) == (made[key], False)
        before = _status(g0, made[key])
        assert before["group"] == 0 and before["job_id"] == made[key]

        new_key = next(f"grown-{n}" for n in range(10_000)
                       if topology.shard_of_key("default", f"grown-{n}") in moves)
        stay_key = next(f"stays-{n}" for n in range(10_000)
                        if topology.shard_of_key("default", f"stays-{n}") not in moves)
        grown = _submit(g0, spec, new_key)
        stays = _submit(f"{g0};{g1}", spec, stay_key)
        assert grown["created"] and stays["created"]
        assert _status(g0, grown["job_id"])["group"] == 1
        assert _status(g1, stays["job_id"])["group"] == 0

        for job_id in (grown["job_id"], stays["job_id"], made[key]):
            wait_until(lambda j=job_id: _status(g0, j)["state"] == "SUCCEEDED",
                       f"job {job_id} to succeed", STATE_TIMEOUT_S)
    except BaseException:
        print(first.logs())
        print(second.logs())
        raise
    finally:
        second.close()
        first.close()
