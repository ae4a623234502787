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
  group that shard belongs to (a schedule's runs, whose ids name none, are not judged). In a
  run that grew (`run --grow`: shards moved to a group that joined), of a group that owned the
  shard at some time: its owner or a former owner in the newest map any group's log holds.
- key_one_job: no idempotency key of a tenant made two jobs, in one group or across groups
  (what handing the keys over with a moving shard is for).
Liveness: every acknowledged job of every group terminal after the heal.

A run that grew records no group for its submits and reads (it is not known in advance): an
operation's group is then the group whose log holds its job (found by replaying each group's
log once more, quietly, before the checks), else its shard's owner in the newest map; a submit
without a job id (failed, or its outcome unknown) goes by its (tenant, key) the same way.
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
from raftsched.topology import Routes, group_of_job_id, shard_of_job_id, shard_of_key

_REPLICA_NAME = re.compile(r"^g(\d+)r\d+$")


def replica_group(replica: _Replica) -> int | None:
    """The group of a replica: its `final` entry's "group", else its name g<group>r<i>."""
    group = replica.final.get("group")
    if type(group) is int:
        return group
    match = _REPLICA_NAME.match(replica.name)
    return int(match.group(1)) if match else None


Locate = Callable[[str], "int | None"]
"""A job id's group: where its job lives (None: not known)."""


def by_shard(groups: int) -> Locate:
    """The group a job id's shard names (a run that never moved shards)."""
    return lambda job_id: group_of_job_id(job_id, groups)


LocateKey = Callable[[str, str], "int | None"]
"""A (tenant, idempotency key)'s group: where a job of it lives, else its shard's owner."""


def op_group(op: Op, locate: Locate, locate_key: LocateKey | None = None) -> int | None:
    """The group an operation went to: its invoke's "group", else its job's, else (a submit
    that failed or whose outcome is unknown, in a run that grew) its key's."""
    value = op.value()
    group = value.get("group")
    if type(group) is int:
        return group
    job_id = value.get("job_id") or op.result().get("job_id")
    if isinstance(job_id, str):
        return locate(job_id)
    tenant, key = value.get("tenant"), value.get("key")
    if locate_key is not None and isinstance(tenant, str) and isinstance(key, str):
        return locate_key(tenant, key)
    return None


def group_history(history: _History, group: int, locate: Locate,
                  locate_key: LocateKey | None = None) -> _History:
    """The operations of `group` (records of other groups' operations left out); events kept,
    but the liveness event's pending jobs and verdict are the group's."""
    ops = [op for op in history.ops if op_group(op, locate, locate_key) == group]
    mine = {op.op for op in ops}
    others = {op.op for op in history.ops} - mine
    records = [r for r in history.records if r.get("op") not in others]
    events = [_group_liveness(e, group, locate) if e.get("f") == "liveness" else e
              for e in history.events]
    return _History(records=records, ops=ops, events=events)


def _group_liveness(event: dict[str, Any], group: int, locate: Locate) -> dict[str, Any]:
    value = _dict(event.get("value"))
    pending = [j for j in _list(value.get("pending"))
               if isinstance(j, str) and locate(j) in (group, None)]
    return {**event, "value": {**value, "pending": pending, "met": not pending}}


def grown_locator(results_dir: Path, merged_of: dict[int, dict[int, bytes]],
                  members: dict[int, list[_Replica]]) -> tuple[Locate, LocateKey, Routes]:
    """For a run that grew: where each job and each key's job lives (every group's log
    replayed once, quietly) and the newest shard map any group's log holds."""
    home: dict[str, int] = {}
    keyed: dict[tuple[str, str], int] = {}
    newest = Routes(len(merged_of))
    for group, merged in sorted(merged_of.items()):
        state = replay(merged, [], members[group], _Findings(results_dir)).state
        home.update(dict.fromkeys(state.jobs, group))
        for job in state.jobs.values():
            if job.spec.idempotency_key is not None:
                keyed.setdefault((job.spec.tenant, job.spec.idempotency_key), group)
        shard_map = state.shard_map
        if shard_map is not None and shard_map.owners and shard_map.epoch >= newest.epoch:
            newest = Routes(len(merged_of), shard_map.owners, dict(shard_map.formers),
                            shard_map.schedule_groups, shard_map.epoch)

    def locate(job_id: str) -> int | None:
        if job_id in home:
            return home[job_id]
        shard = shard_of_job_id(job_id)
        return None if shard is None else newest.owner(shard)

    def locate_key(tenant: str, key: str) -> int | None:
        where = keyed.get((tenant, key))
        return newest.owner(shard_of_key(tenant, key)) if where is None else where
    return locate, locate_key, newest


def check_groups(results_dir: Path, history: _History, replicas: list[_Replica], groups: int,
                 found: _Findings, *, grown: bool = False) -> None:
    """Every per-log check once per group, then the properties across groups. `grown`: shards
    moved during the run (module doc)."""
    members: dict[int, list[_Replica]] = {g: [] for g in range(groups)}
    for replica in replicas:
        group = replica_group(replica)
        if group is None or group not in members:
            found.note(f"replica {replica.name}: no group among 0..{groups - 1}: its applied "
                       "log is not checked")
            continue
        members[group].append(replica)
    merged_of: dict[int, dict[int, bytes]] = {}
    for group in range(groups):
        with _prefixed(found, group):
            merged_of[group] = read_logs(members[group], found)
            if not merged_of[group]:
                found.note("no applied log holds any entry: the log checks did nothing")
    locate, locate_key, routes = grown_locator(results_dir, merged_of, members) if grown \
        else (by_shard(groups), None, Routes(groups))
    views = {g: group_history(history, g, locate, locate_key) for g in range(groups)}
    runs: dict[int, _Replay] = {}
    reads_of: dict[int, list[Any]] = {}
    for group in range(groups):
        with _prefixed(found, group):
            merged = merged_of[group]
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
    home = check_one_group_per_job(runs, routes, found)
    check_one_job_per_key(runs, found)
    ledger = read_ledger(results_dir / "ledger.txt", found)
    for group in range(groups):
        run, view = runs[group], views[group]
        keep = _keeper(home, group, locate)
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
    check_capacity_across(results_dir / "logs", runs, _event_group(home, groups, locate), found)
    _combine(found)


def check_one_group_per_job(runs: dict[int, _Replay], routes: Routes,
                            found: _Findings) -> dict[str, int]:
    """job_one_group and job_group_shard over the replayed states (a shard's groups: its
    owner and former owners in `routes`); job id -> its group."""
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
            shard = shard_of_job_id(job_id)
            if shard is None:
                continue
            found.count("job_group_shard")
            if group not in routes.readers(shard):
                named = " or ".join(map(str, routes.readers(shard)))
                found.violate("job_group_shard", f"job {job_id} is in group {group}'s log, but "
                                                 f"its id's shard belongs to group {named}",
                              keys=(job_id,))
    return home


def check_one_job_per_key(runs: dict[int, _Replay], found: _Findings) -> None:
    """key_one_job: every (tenant, idempotency key) of every group's jobs names one job."""
    made: dict[tuple[str, str], tuple[str, int]] = {}
    for group, run in sorted(runs.items()):
        for job_id, job in run.state.jobs.items():
            key = job.spec.idempotency_key
            if key is None:
                continue
            found.count("key_one_job")
            first = made.setdefault((job.spec.tenant, key), (job_id, group))
            if first != (job_id, group):
                found.violate("key_one_job", f"idempotency key {key!r} of tenant "
                                             f"{job.spec.tenant!r} made job {first[0]} (group "
                                             f"{first[1]}) and job {job_id} (group {group})",
                              keys=(key,))


def _keeper(home: dict[str, int], group: int, locate: Locate) -> Callable[[str], bool]:
    """Whether a job id is `group`'s: the group whose log holds it, else `locate`'s."""
    def keep(job_id: str) -> bool:
        where = home.get(job_id)
        if where is None:
            where = locate(job_id)
        return where == group
    return keep


def _event_keeper(keep: Callable[[str], bool], group: int) -> Callable[[Event], bool]:
    """Whether an agent event is `group`'s: the group it names (an agent serving several
    groups logs it), else by its job (`keep`)."""
    def kept(event: Event) -> bool:
        named = event.fields.get("group")
        return named == group if isinstance(named, int) else keep(str(event.fields.get("job", "")))
    return kept


def _event_group(home: dict[str, int], groups: int,
                 locate: Locate) -> Callable[[Event], int | None]:
    """An agent event's group: the one it names (an agent serving several groups logs it),
    else the group whose log holds its job, else `locate`'s."""
    def group(event: Event) -> int | None:
        named = event.fields.get("group")
        if isinstance(named, int) and 0 <= named < groups:
            return named
        job_id = str(event.fields.get("job", ""))
        return home[job_id] if job_id in home else locate(job_id)
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


def grow_figures(history: _History, found: _Findings) -> None:
    """A run that grew: when the shards were marked and handed over, how long they were held
    moving, what moved, how many tries it took, and the faults active while they moved."""
    grows = [e for e in history.events if e.get("f") == "grow"]
    ok = {str(_dict(e.get("value")).get("phase")): e for e in grows
          if _dict(e.get("value")).get("ok") is True}
    marked, done = ok.get("marked"), ok.get("done")
    figures: dict[str, Any] = {"tries": len(grows), "done": done is not None}
    if done is not None:
        value = _dict(done.get("value"))
        figures.update(moved=value.get("moved"), keys_imported=value.get("keys_imported"),
                       epoch=value.get("epoch"))
    if marked is not None and done is not None:
        start, end = float(marked["t"]), float(done["t"])
        figures.update(marked_at_s=round(start, 3), done_at_s=round(end, 3),
                       held_s=round(end - start, 3),
                       faults_while_moving=_faults_between(history, start, end))
    found.report.grow = figures
    if done is None:
        found.note("the shards did not move to the joining group: the run checked one group's "
                   "jobs staying put, not a move")


def _faults_between(history: _History, start: float, end: float) -> int:
    """Faults that began before `end` and had not ended by `start`."""
    active = 0
    began: dict[str, float] = {}
    for event in history.events:
        if event.get("f") != "fault":
            continue
        value = _dict(event.get("value"))
        key = f"{value.get('kind')}:{sorted(map(str, _list(value.get('targets'))))}"
        if value.get("phase") == "start":
            began[key] = float(event["t"])
        elif value.get("phase") == "end" and key in began \
                and began.pop(key) < end and float(event["t"]) > start:
            active += 1
    return active + sum(1 for t in began.values() if t < end)
