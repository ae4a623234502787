"""The checker on a run of two scheduler groups (issue 27): each group's log is checked apart, so
the same fence numbers in both groups (each group's leader counts its own) are no violation,
while a job id in both groups' logs, or in the log of a group its shard does not belong to, is.

Each group is a `Run` of tests/jepsen/test_checker.py (the real FSM's log, history, ledger and
agent logs); the two are written as one results folder: replicas g<g>r<i>, one history (each
operation recording its group), one ledger and one log per agent holding both groups' lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from raftsched.replica.raft.applied_log import AppliedLogWriter
from raftsched.state import snapshot
from raftsched.topology import job_id_tail
from tests.support import paths

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen import checker

from tests.jepsen.test_checker import J1, J3, Run, agent_line, checks

GROUPS = 2


def job_id(group: int, n: int) -> str:
    """A job id whose shard belongs to `group` (shard s is group s mod 2)."""
    return f"jepsen-{job_id_tail(group + GROUPS * n, n)}"


def group_run(group: int, extra_job: str | None = None, east_cpu: float = 8) -> Run:
    """One group's small run: a two-task DAG on east, a one-task job on west, reads; `extra_job`:
    a further job submitted under that id (a planted mistake)."""
    run = Run()
    run.h.register("east", cpu=east_cpu)
    run.h.register("west")
    first, second = job_id(group, 1), job_id(group, 2)
    run.submit(0, first, f"g{group}-k1", "alpha", J1)
    run.run_attempt("east", first, "a")
    run.run_attempt("east", first, "b")
    run.read(0, first)
    run.submit(1, second, f"g{group}-k2", "beta", J3)
    run.run_attempt("west", second, "y")
    run.read(1, second)
    if extra_job is not None:
        run.submit(2, extra_job, f"g{group}-k3", "alpha", J3)
        run.run_attempt("west", extra_job, "y")
    run.sync()
    return run


def write(root: Path, runs: list[Run], *, groups_in_meta: bool = True) -> Path:
    """The runs as one results folder of len(runs) groups."""
    records: list[dict[str, Any]] = [
        {"type": "event", "process": "harness", "f": "start", "value": {"leader": "g0r0"}}]
    final = []
    for group, run in enumerate(runs):
        ops: dict[int, int] = {}
        for record in run.records:
            op = record.get("op")
            if op is not None:
                ops.setdefault(op, len(ops) + 1 + 1000 * group)
                record = {**record, "op": ops[op]}
            if record["type"] == "invoke":
                record = {**record, "value": {**record["value"], "group": group}}
            records.append(record)
        index, digest = run.last_command_index(), snapshot.digest(run.h.state)
        for i in range(3):
            name = f"g{group}r{i}"
            (root / "replicas" / name).mkdir(parents=True)
            writer = AppliedLogWriter(str(root / "replicas" / name / "applied.log"))
            for entry_index, entry in run.log:
                writer.append(entry_index, entry)
            writer.close()
            final.append({"name": name, "group": group, "applied_index": run.index,
                          "state_index": index, "state_digest": digest, "term": 2,
                          "applied_log": f"replicas/{name}/applied.log"})
    records.append({"type": "event", "process": "harness", "f": "final",
                    "value": {"replicas": final}})
    records.append({"type": "event", "process": "harness", "f": "liveness",
                    "value": {"bound_s": 60, "waited_s": 0.5, "met": True, "pending": []}})
    for i, record in enumerate(records):
        record.update(i=i, t=round(0.25 * i, 3))
    (root / "history.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    (root / "ledger.txt").write_text(
        "".join(line + "\n" for run in runs for line in run.ledger))
    (root / "logs").mkdir()
    for cluster in ("east", "west"):
        (root / "logs" / f"agent-{cluster}.log").write_text(
            agent_line("agent_starting", cluster=cluster) + "\n"
            + "".join(line + "\n" for run in runs for line in run.agents[cluster]))
    meta: dict[str, Any] = {"seed": 1, "nodes": 3}
    if groups_in_meta:
        meta["groups"] = len(runs)
    (root / "meta.json").write_text(json.dumps(meta))
    return root


def test_two_clean_groups_sharing_fence_numbers_have_no_violation(tmp_path: Path) -> None:
    runs = [group_run(0), group_run(1)]
    fences = [{a.fence for job in run.h.state.jobs.values() for task in job.tasks
               for a in task.attempts} for run in runs]
    assert fences[0] & fences[1] == {1, 2, 3}  # each group's leader counts its own fences
    report = checker.check(write(tmp_path / "run", runs))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    assert report.liveness_met and report.acknowledged_jobs == 4
    assert [g["jobs"] for g in report.groups] == [2, 2]
    assert report.replay_complete and report.entries_replayed == sum(r.commands() for r in runs)
    assert report.reads_compared == 4
    checked = report.invariants_checked
    assert checked["job_one_group"] == 4 and checked["job_group_shard"] == 4
    assert checked["ledger_fence_once"] > 0 and checked["agent_start_once"] == 6
    assert checked["agent_start_assigned"] == 6
    # the same folder read as ONE group: its fences and logs collide
    merged = checker.check(write(tmp_path / "as-one", runs, groups_in_meta=False))
    assert {"log_agreement", "agent_start_once"} <= checks(merged)


def test_a_job_id_in_both_groups_logs_is_a_violation(tmp_path: Path) -> None:
    twice = job_id(0, 1)  # group 0's first job, also submitted in group 1
    report = checker.check(write(tmp_path, [group_run(0), group_run(1, extra_job=twice)]))
    # (its attempts in group 1 are judged against group 0's log, where it lives first: also
    # violations, of that group)
    assert "job_one_group" in checks(report), [
        checker.format_violation(v) for v in report.violations]
    assert report.violations[0].message == (f"job {twice} is in the logs of group 0 and "
                                            "group 1")


def test_a_job_in_the_log_of_a_group_its_shard_does_not_name_is_a_violation(
        tmp_path: Path) -> None:
    stray = job_id(0, 7)  # a shard of group 0, in group 1's log only
    report = checker.check(write(tmp_path, [group_run(0), group_run(1, extra_job=stray)]))
    assert "job_group_shard" in checks(report), [
        checker.format_violation(v) for v in report.violations]
    assert any(v.message == f"job {stray} is in group 1's log, but its id's shard belongs to "
                            "group 0" for v in report.violations)


def test_a_fence_started_twice_within_one_group_is_still_caught_and_names_the_group(
        tmp_path: Path) -> None:
    runs = [group_run(0), group_run(1)]
    runs[1].agents["east"].append(runs[1].agents["east"][0])  # group 1's fence 1 started again
    report = checker.check(write(tmp_path, runs))
    assert checks(report) == {"agent_start_once"}
    assert all(v.message.startswith("group 1: ") for v in report.violations)


def test_one_agent_running_both_groups_attempts_beyond_its_capacity_is_a_violation(
        tmp_path: Path) -> None:
    """An agent serves every group: what it runs at once is every group's attempts, keyed by
    (group, fence): group 1's fence 1 started while group 0's fence 1 still runs is two
    attempts, more than east's 1.5 cpu holds."""
    runs = [group_run(0, east_cpu=1.5), group_run(1, east_cpu=1.5)]
    assert checker.check(write(tmp_path / "apart", runs)).violations == []
    runs[0].agents["east"].insert(1, runs[1].agents["east"].pop(0))
    report = checker.check(write(tmp_path / "together", runs))
    assert checks(report) == {"agent_capacity"}, [
        checker.format_violation(v) for v in report.violations]
    assert report.violations[0].message.endswith("(fences 1 (group 0), 1 (group 1))")
