"""CI's short jepsen-style runs: 3 replicas and 2 agents in private network namespaces, 3
clients, a fixed seed; kill + partition + pause faults, and a shorter one with the hostile agent.
Fails on any safety violation, on unmet liveness, or when the run did not exercise what it
claims (no faults, no acknowledged jobs, no kills). Skipped, with the reason printed, only where
network namespaces cannot be made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import paths

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen.checks_history import _Findings, read_history

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = paths.REPO
CI_SEED = 20261130
CI_ARGS = ["--nodes", "3", "--time", "35", "--seed", str(CI_SEED), "--clients", "3",
           "--faults", "kill,partition,pause", "--liveness-bound-s", "60"]
HOSTILE_ARGS = ["--nodes", "3", "--time", "20", "--seed", str(CI_SEED), "--clients", "3",
                "--faults", "hostile,kill-leader", "--liveness-bound-s", "60"]
"""20 s: one or two floods of the hostile agent beside leader kills."""
GROUPS_ARGS = ["--nodes", "3", "--groups", "2", "--time", "30", "--seed", str(CI_SEED),
               "--clients", "3", "--faults", "kill-leader,partition-halves,group,agent-kill",
               "--liveness-bound-s", "60"]
"""Two scheduler groups of 3 replicas (issue 27): faults in one group, a group's quorum taken
away (kill-group-majority, partition-group), an agent killed (it serves both groups)."""
GROW_ARGS = ["--nodes", "3", "--groups", "1", "--grow", "--time", "25", "--seed",
             str(CI_SEED), "--clients", "3", "--faults", "kill-leader,partition-halves,group",
             "--liveness-bound-s", "60"]
"""A deployment of one group that gets a second one during the run (`--grow`): shards marked
moving, held open a few seconds under the faults, then handed over with their keys."""
RUN_TIMEOUT_S = 240
EXIT_NO_NAMESPACES = 77


def _run(tmp_path: Path, args: list[str]) -> tuple[dict[str, Any], Path]:
    """One jepsen-style run; its --json output and results folder (skips where namespaces
    cannot be made; fails with the table and stderr on a non-zero exit)."""
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "jepsen-style"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "jepsen.main", *args,
                           "--results", str(results), "--json"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env,
                          check=False)
    if done.returncode == EXIT_NO_NAMESPACES:
        print(done.stderr, file=sys.stderr)
        pytest.skip("jepsen-style CI run SKIPPED, network namespaces are impossible here: "
                    + " ".join(done.stderr.split()))
    table = (results / "results.txt").read_text() if (results / "results.txt").exists() else ""
    assert done.returncode == 0, (f"jepsen-style run exited {done.returncode} ({args})"
                                  f"\n{table}\n--- stderr\n{done.stderr[-6000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["harness_failure"] is None
    assert out["report"]["violations"] == []
    assert out["report"]["liveness_met"] is True
    return out, results


def test_short_fixed_seed_run_has_no_violations_and_meets_liveness(tmp_path: Path) -> None:
    out, _ = _run(tmp_path, CI_ARGS)
    report = out["report"]
    assert sum(out["faults_injected"].values()) >= 3, out["faults_injected"]
    ops = report["ops"]
    assert ops["submit"]["ok"] >= 20, ops
    assert ops["read"]["ok"] >= 10, ops
    assert ops["cancel"]["ok"] >= 5, ops  # the long jobs: tasks killed through the scheduler
    assert report["entries_replayed"] > 0
    assert report["invariants_checked"]["kill_liveness"] >= 5
    assert report["invariants_checked"]["outputs_from_succeeded_fence"] >= 5  # fan-out jobs


def test_a_hostile_agent_flooding_register_kills_nothing_and_delays_no_kill(
        tmp_path: Path) -> None:
    """The hostile-agent fault (issue 21): an agent certificate of its own, phantom running
    attempts by the hundred thousand. Its cluster never holds a kill directive; every kill
    owed to the honest agents is settled in time."""
    out, results = _run(tmp_path, HOSTILE_ARGS)
    report = out["report"]
    assert out["faults_injected"].get("hostile-agent", 0) >= 1, out["faults_injected"]
    assert report["invariants_checked"]["kill_liveness"] >= 3
    history = read_history(results / "history.jsonl", _Findings(results))
    floods = [event["value"] for event in history.events if event["f"] == "hostile"]
    assert floods and all(flood["kills_recorded"] == 0 for flood in floods)
    # every registration the scheduler answered was committed, and the checker looked at the
    # hostile cluster after each (how many fit in the run depends on the machine's load)
    answered = sum(flood["registers"] - sum(flood["refused"].values()) for flood in floods)
    assert answered >= 1, floods
    assert report["invariants_checked"]["hostile_no_kills"] >= answered, floods
    assert sum(flood["told_to_stop"] for flood in floods) >= 10_000


def test_two_groups_under_faults_have_no_violations_and_both_commit_jobs(
        tmp_path: Path) -> None:
    """`--groups 2`: each group's log checked apart, no job in two groups, every acknowledged
    job of both groups terminal after the heal; jobs were committed in both groups and the
    nemesis hit them."""
    out, results = _run(tmp_path, GROUPS_ARGS)
    report = out["report"]
    assert [g["group"] for g in report["groups"]] == [0, 1]
    assert all(g["jobs"] >= 5 and g["acknowledged_jobs"] >= 5 for g in report["groups"]), \
        report["groups"]
    assert report["invariants_checked"]["job_one_group"] >= 10
    assert sum(out["faults_injected"].values()) >= 3, out["faults_injected"]
    history = read_history(results / "history.jsonl", _Findings(results))
    hit = {event["value"].get("group") for event in history.events
           if event["f"] == "fault" and event["value"]["phase"] == "start"}
    assert hit & {0, 1}, hit  # replica faults name the group they hit
    for log in sorted((results / "logs").glob("agent-*.log")):  # given one group's replicas,
        events = [json.loads(line) for line in log.read_text().splitlines()  # each learned both
                  if line.startswith("{") and '"topology_' in line]
        assert any(e["event"] in ("topology_learned", "topology_saved") and e["groups"] == 2
                   for e in events), (log.name, events)
        assert not any(e["event"] == "topology_unknown" for e in events), (log.name, events)


def test_a_group_added_under_faults_moves_shards_without_a_violation(tmp_path: Path) -> None:
    """`--groups 1 --grow`: the move finishes (after retries if the faults hit it), the new
    group commits jobs of the shards it took, no idempotency key makes two jobs across the
    groups, every job is in a group that owned its shard, and every acknowledged job is terminal
    after the heal."""
    out, results = _run(tmp_path, GROW_ARGS)
    report = out["report"]
    grow = report["grow"]
    assert grow["done"] and grow["moved"] == 2048 and grow["held_s"] > 0, grow
    assert [g["group"] for g in report["groups"]] == [0, 1]
    assert report["groups"][1]["jobs"] >= 3, report["groups"]
    checked = report["invariants_checked"]
    assert checked["key_one_job"] >= 10 and checked["job_group_shard"] >= 10, checked
    assert sum(out["faults_injected"].values()) >= 2, out["faults_injected"]
    history = read_history(results / "history.jsonl", _Findings(results))
    phases = [event["value"].get("phase") for event in history.events if event["f"] == "grow"
              and event["value"].get("ok")]
    assert phases == ["marked", "done"], phases
