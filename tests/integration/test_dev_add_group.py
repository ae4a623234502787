"""Integration (issue 27, docs/scale-out.md §5): `raftsched dev add-group` grows a running
`dev up` cluster of one scheduler group by a second one, through the CLI only. Keyed jobs made
before the move stay where they are; the new group's replicas are started, every agent is
restarted to serve both groups, and half of the shards move; the dev dir's later commands
then talk to both groups: a new job of a moved shard lands in group 1 and succeeds there, and
`dev down` stops every process, the new group's included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched import limits, procfs, topology
from tests.support.cli import dev_cluster_dir, parsed_ok, run_cli
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

UP_TIMEOUT_S = 120.0
"""`dev up` and `dev add-group` (each of their waits has its own `--timeout`)."""
STATE_TIMEOUT_S = 60.0
JOB = "name: grow\ntasks:\n  - {id: a, command: [mock, sleep_ms=1500]}\n"
"""Long enough that the jobs made just before `dev add-group` still run when it drains the
agents (it waits until they run nothing)."""
MOVES = dict(topology.balancing_moves(bytes(limits.VIRTUAL_SHARDS), 2))
"""From one group to two: the shards that move to group 1."""


@pytest.fixture
def dev_dir() -> Iterator[Path]:
    with dev_cluster_dir("raftsched-add-group-") as directory:
        yield directory


def _keys(prefix: str, moved: bool, count: int) -> list[str]:
    """`count` idempotency keys of the default tenant whose shard moves (or stays)."""
    keys = (f"{prefix}-{n}" for n in range(10_000))
    return [key for key in keys
            if (topology.shard_of_key("default", key) in MOVES) == moved][:count]


def _status(dev_dir: Path, job_id: str) -> Any:
    return parsed_ok(run_cli(dev_dir, "job", "status", job_id, "--json"))


def _recorded_processes(dev_dir: Path) -> list[tuple[str, int, int]]:
    """(name, pid, start time) of every process the dev record names."""
    state = json.loads((dev_dir / "cluster.json").read_text())
    entries = [(r["id"], r) for r in state["replicas"]] + [(a["cluster"], a)
                                                           for a in state["agents"]]
    if state.get("web"):
        entries.append(("web", state["web"]))
    return [(name, e["pid"], e["start_time_ticks"]) for name, e in entries]


def test_dev_add_group_grows_a_running_cluster_and_down_stops_every_process(
        dev_dir: Path, tmp_path: Path) -> None:
    cluster = parsed_ok(run_cli(dev_dir, "dev", "up", "--dir", str(dev_dir), "--executor",
                                "mock", "--json", timeout_s=UP_TIMEOUT_S))
    assert len(cluster["groups"]) == 1
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    moved_keys = _keys("before", True, 3)
    made = {key: parsed_ok(run_cli(dev_dir, "submit", str(spec), "--idempotency-key", key,
                                   "--json"))["job_id"]
            for key in [*moved_keys, *_keys("before", False, 3)]}

    made_before = parsed_ok(run_cli(dev_dir, "admin", "token", "create", "--tenant", "default",
                                    "--role", "user", "--json"))  # only group 0 holds it yet

    added = parsed_ok(run_cli(dev_dir, "dev", "add-group", "--dir", str(dev_dir), "--json",
                              timeout_s=UP_TIMEOUT_S))
    assert (added["group"], added["groups"], added["epoch"]) == (1, 2, 2)
    assert added["moved"] == len(MOVES) == limits.VIRTUAL_SHARDS // 2
    assert (added["keys_imported"], added["keys_kept"]) == (len(moved_keys), 0)
    assert added["servers"][0] == cluster["groups"][0] and len(added["servers"][1]) == 3
    assert [r["address"] for r in added["replicas"]] == added["servers"][1]
    assert all(r["alive"] and not r["joining"] for r in added["replicas"])
    assert sorted(added["restarted"]) == ["cpu-east", "gpu-west"]

    shown = parsed_ok(run_cli(dev_dir, "admin", "groups", "show", "--json"))["groups"]
    assert [(g["group"], g["epoch"], g["shards"], g["moving_out"], g["joining"])
            for g in shown] == [(0, 2, 2048, 0, False), (1, 2, 2048, 0, False)]
    status = parsed_ok(run_cli(dev_dir, "admin", "status", "--json"))
    for group in status["groups"]:  # every agent serves both groups, undrained
        assert {c["cluster"]: (c["status"], c["draining"]) for c in group["clusters"]} == {
            "cpu-east": ("READY", False), "gpu-west": ("READY", False)}, group

    grown = parsed_ok(run_cli(dev_dir, "submit", str(spec), "--idempotency-key",
                              _keys("after", True, 1)[0], "--json", "--token",
                              made_before["token"]))  # the new group was given the token
    assert grown["created"] and _status(dev_dir, grown["job_id"])["group"] == 1
    wait_until(lambda: _status(dev_dir, grown["job_id"])["state"] == "SUCCEEDED",
               "the new job of a moved shard to succeed in group 1", STATE_TIMEOUT_S)
    for job_id in made.values():  # made before the move: they ran, and stay, in group 0
        assert (_status(dev_dir, job_id)["state"], _status(dev_dir, job_id)["group"]) == (
            "SUCCEEDED", 0)

    processes = _recorded_processes(dev_dir)
    assert {name for name, _, _ in processes} >= {r["id"] for r in added["replicas"]}
    down = parsed_ok(run_cli(dev_dir, "dev", "down", "--dir", str(dev_dir), "--json"))
    assert {s["name"] for s in down["stopped"]} == {name for name, _, _ in processes}
    assert not [name for name, pid, start in processes if procfs.is_alive(pid, start)]
