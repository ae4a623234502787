"""A run of several scheduler groups (issue 27, `run --groups K`): every per-log check, per group.
(Part of `jepsen.checker`.)

Each group is its own Raft log with its own fences, attempts and job ids, so every check that
reads a log runs once per group, over that group's replicas' applied logs (`final` event: each
replica's "group"), that group's operations (a submit's invoke records its "group"; a read or
cancel's too), the ledger lines and agent events of that group's jobs (an agent logs the group's
own fence and the job id, not the group: a job's group is the group whose log holds it, or else
the one its id's shard names), and that group's share of the liveness event. A fence of group A
is never compared with group B's. Violations and notes found in group g's pass are prefixed
"group g: ".

Across groups:
- job_one_group: no job id is in two groups' logs.
- job_group_shard: a job whose id names a shard (`raftsched.topology`) is in the log of the
  group that shard belongs to (a schedule's runs, whose ids name none, are not judged).
Liveness: every acknowledged job of every group terminal after the heal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from jepsen.checks_agents import check_agent_logs
from jepsen.checks_capacity import check_capacity, check_capacity_across
from jepsen.checks_history import Op, _dict, _Findings, _History
from jepsen.checks_ledger import LedgerLine, check_ledger, read_ledger
from jepsen.checks_liveness import check_liveness, check_timeouts
from jepsen.checks_outputs import check_fanouts
from jepsen.checks_reads import check_read_order, check_stale_reads, collect_reads
from jepsen.checks_replay import _kills_for, _list, _Replay, _Replica, read_logs, replay
from jepsen.checks_schedules import check_schedules
from jepsen.checks_submits import check_submissions
from raftsched.eventlog import Event
from raftsched.topology import group_of_job_id

_REPLICA_NAME = re.compile(r"^g(\d+)r\d+$")


def replica_group(replica: _Replica) -> int | None:
    """The group of a replica: its `final` entry's "group", else its name g<group>r<i>."""
    group = replica.final.get("group")
    if type(group) is int:
        return group
    match = _REPLICA_NAME.match(replica.name)
    return int(match.group(1)) if match else None


def op_group(op: Op, groups: int) -> int | None:
    """The group an operation went to: its invoke's "group", else its job id's shard."""
    value = op.value()
    group = value.get("group")
    if type(group) is int:
        return group
    job_id = value.get("job_id") or op.result().get("job_id")
    return group_of_job_id(job_id, groups) if isinstance(job_id, str) else None


def group_history(history: _History, group: int, groups: int) -> _History:
    """The operations of `group` (records of other groups' operations left out); events kept,
    but the liveness event's pending jobs and verdict are the group's."""
    ops = [op for op in history.ops if op_group(op, groups) == group]
    mine = {op.op for op in ops}
    others = {op.op for op in history.ops} - mine
    records = [r for r in history.records if r.get("op") not in others]
    events = [_group_liveness(e, group, groups) if e.get("f") == "liveness" else e
              for e in history.events]
    return _History(records=records, ops=ops, events=events)


def _group_liveness(event: dict[str, Any], group: int, groups: int) -> dict[str, Any]:
    value = _dict(event.get("value"))
    pending = [j for j in _list(value.get("pending"))
               if isinstance(j, str) and group_of_job_id(j, groups) in (group, None)]
    return {**event, "value": {**value, "pending": pending, "met": not pending}}


def check_groups(results_dir: Path, history: _History, replicas: list[_Replica], groups: int,
                 found: _Findings) -> None:
    """Every per-log check once per group, then the properties across groups."""
    members: dict[int, list[_Replica]] = {g: [] for g in range(groups)}
    for replica in replicas:
        group = replica_group(replica)
        if group is None or group not in members:
            found.note(f"replica {replica.name}: no group among 0..{groups - 1}: its applied "
                       "log is not checked")
            continue
        members[group].append(replica)
    views = {g: group_history(history, g, groups) for g in range(groups)}
    runs: dict[int, _Replay] = {}
    reads_of: dict[int, list[Any]] = {}
    for group in range(groups):
        with _prefixed(found, group):
            merged = read_logs(members[group], found)
            if not merged:
                found.note("no applied log holds any entry: the log checks did nothing")
            reads = reads_of[group] = collect_reads(views[group].ops, found)
            report = found.report
            report.kill_settle_p50_s = report.kill_settle_max_s = None
            run = replay(merged, reads, members[group], found, _kills_for(results_dir))
            found.report.violations.extend(run.auditor.violations)
            for name, count in run.auditor.checks.items():
                found.count(name, count)
            for name, count in run.auditor.suppressed.items():
                suppressed = found.report.violations_suppressed
                suppressed[name] = suppressed.get(name, 0) + count
            runs[group] = run
            _figures(found, group, run, reads)
    home = check_one_group_per_job(runs, groups, found)
    ledger = read_ledger(results_dir / "ledger.txt", found)
    for group in range(groups):
        run, view = runs[group], views[group]
        keep = _keeper(home, group, groups)
        with _prefixed(found, group):
            check_submissions(view.ops, run, found)
            check_read_order(reads_of[group], found)
            check_stale_reads(view, run, found)
            if ledger is not None:
                check_ledger(_ledger_of(ledger, keep), run, found)
            check_agent_logs(results_dir / "logs", run, found,
                             keep=_event_keeper(keep, group))
            check_capacity(results_dir / "logs", run, found, keep=_event_keeper(keep, group))
            check_timeouts(view.ops, run, found)
            check_liveness(view, run, found)
            check_schedules(run, found)
            check_fanouts(view.ops, run, found)
            _liveness_figures(found, group)
    check_capacity_across(results_dir / "logs", runs, _event_group(home, groups), found)
    _combine(found)


def check_one_group_per_job(runs: dict[int, _Replay], groups: int,
                            found: _Findings) -> dict[str, int]:
    """job_one_group and job_group_shard over the replayed states; job id -> its group."""
    home: dict[str, int] = {}
    for group, run in sorted(runs.items()):
        for job_id in run.state.jobs:
            found.count("job_one_group")
            if job_id in home:
                found.violate("job_one_group", f"job {job_id} is in the logs of group "
                                               f"{home[job_id]} and group {group}",
                              keys=(job_id,))
                continue
            home[job_id] = group
            named = group_of_job_id(job_id, groups)
            if named is None:
                continue
            found.count("job_group_shard")
            if named != group:
                found.violate("job_group_shard", f"job {job_id} is in group {group}'s log, but "
                                                 f"its id's shard belongs to group {named}",
                              keys=(job_id,))
    return home


def _keeper(home: dict[str, int], group: int, groups: int) -> Callable[[str], bool]:
    """Whether a job id is `group`'s: the group whose log holds it, else its id's shard's."""
    def keep(job_id: str) -> bool:
        where = home.get(job_id)
        if where is None:
            where = group_of_job_id(job_id, groups)
        return where == group
    return keep


def _event_keeper(keep: Callable[[str], bool], group: int) -> Callable[[Event], bool]:
    """Whether an agent event is `group`'s: the group it names (an agent serving several
    groups logs it), else by its job (`keep`)."""
    def kept(event: Event) -> bool:
        named = event.fields.get("group")
        return named == group if isinstance(named, int) else keep(str(event.fields.get("job", "")))
    return kept


def _event_group(home: dict[str, int], groups: int) -> Callable[[Event], int | None]:
    """An agent event's group: the one it names (an agent serving several groups logs it),
    else the group whose log holds its job, else its id's shard's."""
    def group(event: Event) -> int | None:
        named = event.fields.get("group")
        if isinstance(named, int) and 0 <= named < groups:
            return named
        job_id = str(event.fields.get("job", ""))
        return home[job_id] if job_id in home else group_of_job_id(job_id, groups)
    return group


def _ledger_of(ledger: list[LedgerLine], keep: Callable[[str], bool]) -> list[LedgerLine]:
    return [line for line in ledger if keep(line.job_id)]


class _prefixed:
    """Within it: the violations and notes added are prefixed "group g: "; the report's
    per-pass figures (replay, liveness) are the group's and are combined after."""

    def __init__(self, found: _Findings, group: int) -> None:
        self._found, self._group = found, group

    def __enter__(self) -> None:
        report = self._found.report
        self._violations, self._notes = len(report.violations), len(report.notes)

    def __exit__(self, *_: object) -> None:
        report, tag = self._found.report, f"group {self._group}: "
        report.violations[self._violations:] = [
            replace(v, message=tag + v.message) for v in report.violations[self._violations:]]
        report.notes[self._notes:] = [tag + n for n in report.notes[self._notes:]]


def _figures(found: _Findings, group: int, run: _Replay, reads: list[Any]) -> None:
    report = found.report
    found.report.groups.append({
        "group": group, "last_index_replayed": run.last_index, "complete": run.complete,
        "jobs": len(run.state.jobs), "reads": len(reads), "kills_settled": report.kills_settled,
        "kills_unjudged": report.kills_unjudged, "kill_settle_max_s": report.kill_settle_max_s,
        "kill_settle_p50_s": report.kill_settle_p50_s})


def _liveness_figures(found: _Findings, group: int) -> None:
    report = found.report
    found.report.groups[group].update(
        acknowledged_jobs=report.acknowledged_jobs, liveness_met=report.liveness_met,
        liveness_pending=list(report.liveness_pending))


def _combine(found: _Findings) -> None:
    """The report's figures over every group: sums, and met/complete only when every group's
    is (the kill settle p50 is the highest group's p50)."""
    report, groups = found.report, found.report.groups
    report.replay_complete = all(g["complete"] for g in groups)
    report.last_index_replayed = max(g["last_index_replayed"] for g in groups)
    report.acknowledged_jobs = sum(g["acknowledged_jobs"] for g in groups)
    report.liveness_met = all(g["liveness_met"] for g in groups)
    report.liveness_pending = [j for g in groups for j in g["liveness_pending"]]
    report.kills_settled = sum(g["kills_settled"] for g in groups)
    report.kills_unjudged = sum(g["kills_unjudged"] for g in groups)
    maxima = [g["kill_settle_max_s"] for g in groups if g["kill_settle_max_s"] is not None]
    p50s = [g["kill_settle_p50_s"] for g in groups if g["kill_settle_p50_s"] is not None]
    report.kill_settle_max_s = max(maxima) if maxima else None
    report.kill_settle_p50_s = max(p50s) if p50s else None
