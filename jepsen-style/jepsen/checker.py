"""The checker: every safety violation in a finished run's results folder, plus statistics.

    PYTHONPATH=jepsen-style python -m jepsen.checker RESULTS_DIR [--json]

Exit status: 0 no violation, 1 at least one violation, 2 the folder cannot be read (one
`error:` line). Liveness is reported (`Report.liveness_met`) but does not change the status.

What it reads (see `jepsen.history` for the history schema):
- `replicas/<name>/applied.log` of every replica: entries at one index must be byte-identical
  within a file and across replicas (log_agreement). Their union by index is replayed through the
  pure FSM from an empty state, fed to `raftsched.state.audit.LogAuditor` before and after each
  apply
  (fences, DAG order, retry budgets, accepted reports, capacity, idempotency keys, placements
  only on open clusters, reservations, tenants' max_running, jobs' retry_budget,
  `invariants.check_invariants`).
  pysyncobj's own entries (its initial entry, each new leader's no-op, membership changes) take
  Raft indices but never reach our apply, so no replica records them: a run of at most
  `MAX_UNRECORDED_RUN` unrecorded indices is read as such and skipped; a longer one (or one before
  the first recorded index) stops the replay there, as a limitation, not a violation.
- the `final` event: the replay's state digest at each replica's `state_index` must equal its
  `state_digest`; replicas at one `state_index` must report one digest (replica_digest).
- submissions (history + log): submit_acked_present, submit_ack_consistent,
  submit_failed_absent, submit_one_job_per_key.
- reads: read_monotonic (per client and job, `applied_index` and progress never go back),
  read_matches_log (state and task counts equal the replay at `applied_index`), stale_read
  (`applied_index` is at least the log index of every job acknowledged before the read began,
  and such a job is never NOT_FOUND).
- `ledger.txt`, appended by the tasks themselves: ledger_fence_once, ledger_fence_committed,
  ledger_dag_order, ledger_overlap (two attempts of a task alive at once, allowed only when the
  earlier one was declared LOST: counted as a duplicate execution), ledger_duplicate_effect (two
  successful ends of one task, allowed under the same rule: counted as an external duplicate
  effect), ledger_format. A start without an end (a killed task) cannot be shown to overlap.
- `logs/agent-<cluster>.log`: agent_start_assigned (an agent starts only fences committed to its
  cluster), agent_start_once; `stale_fence_rejected` events are counted.
- kills (`jepsen.kills`, on the replay): kill_liveness (every kill owed to an honest agent — an
  attempt the scheduler ended under it — is settled by its report or registration within
  KILL_LIVENESS_BOUND_S of replicated time while its cluster is READY), hostile_no_kills (the
  hostile-agent fault's cluster never holds a kill directive).
- the `liveness` event and the replayed final state: liveness_met, pending jobs.
Also: fsm_apply (the FSM raised while replaying: the replay stops there) and history_format (a
line of the history that is not JSON or not the schema, but for a torn last line).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import hashlib
import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jepsen.kills import KillLiveness
from raftsched.eventlog import Event, read_events
from raftsched.protocol import task_key
from raftsched.replica.applied_log import AppliedLog, read_applied_log
from raftsched.spec.job import FailurePolicy, TaskSpec, runs_when_upstream_done
from raftsched.state import fsm, snapshot
from raftsched.state.audit import MAX_VIOLATIONS_PER_CHECK, LogAuditor, TaskKey, Violation
from raftsched.state.commands import CommandError, Tag, decode
from raftsched.state.model import (
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    AttemptState,
    State,
    TaskState,
)

MAX_UNRECORDED_RUN = 0
"""Consecutive Raft indices missing from every applied log that are tolerated. Replicas record
pysyncobj's own entries (no-ops after elections, membership changes) as empty entries, so any gap
stops the replay (a limitation reported, not a violation)."""
LOW_INDEX = MAX_UNRECORDED_RUN + 1
"""A replica whose applied log starts above this did not apply the log from its start (it
restored or installed a snapshot after compaction): the report says so."""
MAX_NOTES = 200
"""Notes kept in a report; past it they are only counted."""
EARLY_TIMEOUT_FRACTION = 0.5
"""A task described as running for less than this fraction of its timeout must never time out."""
MAX_NOTES_SHOWN = 10
"""Notes printed under the results table (all kept ones are in --json / report.json)."""

_OP_TYPES = ("invoke", "ok", "fail", "info")
_TERMINAL_JOB_NAMES = frozenset(s.name for s in TERMINAL_JOB_STATES)
_TERMINAL_TASK_NAMES = frozenset(s.name for s in TERMINAL_TASK_STATES)


class CheckError(Exception):
    """The results folder cannot be read (missing, not a folder, unreadable history)."""


@dataclass
class Report:
    results_dir: str
    violations: list[Violation] = field(default_factory=list)
    liveness_met: bool = False
    liveness_pending: list[str] = field(default_factory=list)
    """Acknowledged jobs not terminal at the end."""
    acknowledged_jobs: int = 0
    liveness_waited_s: float | None = None
    """From the liveness event: how long after the final heal the last acknowledged job was
    seen terminal (or the bound, when it was not)."""
    liveness_bound_s: float | None = None
    notes: list[str] = field(default_factory=list)
    """Limitations and observations that are not violations."""
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    """f -> {"invoked", "ok", "fail", "info", "open" (no completion)}."""
    faults: dict[str, int] = field(default_factory=dict)
    """Fault kind -> `start` events."""
    recovery_s: list[float] = field(default_factory=list)
    """Per fault: seconds from its end (its start, for kinds with no end) to the first ok
    submit or read invoked after it."""
    recovery_p50_s: float | None = None
    recovery_max_s: float | None = None
    faults_unrecovered: int = 0
    invariants_checked: dict[str, int] = field(default_factory=dict)
    """Check name -> times it was evaluated."""
    violations_suppressed: dict[str, int] = field(default_factory=dict)
    duplicate_executions: int = 0
    """Overlapping attempts of one task allowed because the earlier one was LOST."""
    external_duplicate_effects: int = 0
    """Tasks with two or more successful `end` lines in the ledger."""
    entries_replayed: int = 0
    replay_complete: bool = False
    last_index_replayed: int = 0
    unrecorded_indices: int = 0
    stale_fence_rejections: int = 0
    reads_compared: int = 0
    ledger_starts: int = 0
    ledger_unended: int = 0
    """Ledger starts with no end line (killed tasks): their overlap cannot be judged."""
    kills_settled: int = 0
    """Kills owed to honest agents and settled in time (kill_liveness)."""
    kills_unjudged: int = 0
    """Owed kills still open when the log ends (within the bound, or their cluster not READY)."""
    kill_settle_p50_s: float | None = None
    kill_settle_max_s: float | None = None
    """READY time from an attempt's end to its agent's word that it is gone."""
    replicas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name -> first/last index, entries, re-applied records, torn tail bytes of its log."""


# --- collecting findings ------------------------------------------------------------------------


class _Findings:
    def __init__(self, results_dir: Path) -> None:
        self.report = Report(str(results_dir))
        self._kept: dict[str, int] = {}
        self._notes_dropped = 0

    def count(self, check: str, n: int = 1) -> None:
        checked = self.report.invariants_checked
        checked[check] = checked.get(check, 0) + n

    def violate(self, check: str, message: str, *, ops: Iterable[int] = (),
                indices: Iterable[int] = (), keys: Iterable[str] = ()) -> None:
        kept = self._kept.get(check, 0)
        if kept >= MAX_VIOLATIONS_PER_CHECK:
            suppressed = self.report.violations_suppressed
            suppressed[check] = suppressed.get(check, 0) + 1
            return
        self._kept[check] = kept + 1
        self.report.violations.append(
            Violation(check, message, tuple(indices), tuple(keys), tuple(ops)))

    def note(self, text: str) -> None:
        if len(self.report.notes) < MAX_NOTES:
            self.report.notes.append(text)
        else:
            self._notes_dropped += 1

    def finish(self) -> Report:
        if self._notes_dropped:
            self.report.notes.append(f"{self._notes_dropped} more notes not kept (MAX_NOTES)")
        return self.report


# --- the history --------------------------------------------------------------------------------


@dataclass
class Op:
    """An invoke and its completion (None: never completed)."""

    op: int
    process: Any
    f: str
    invoke: dict[str, Any]
    done: dict[str, Any] | None = None

    @property
    def outcome(self) -> str | None:
        return None if self.done is None else str(self.done["type"])

    def value(self) -> dict[str, Any]:
        return _dict(self.invoke.get("value"))

    def result(self) -> dict[str, Any]:
        return {} if self.done is None else _dict(self.done.get("value"))


@dataclass
class _History:
    records: list[dict[str, Any]] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise CheckError(f"{path}: no {what}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CheckError(f"{path}: cannot read the {what}: {error}") from None


def _numbered(lines: list[str]) -> Iterator[tuple[int, str, bool]]:
    """(1-based line number, text, is the last non-empty line) for every non-empty line."""
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    for n, line in enumerate(lines):
        if line.strip():
            yield n + 1, line, n == last


def read_history(path: Path, found: _Findings) -> _History:
    history = _History()
    for number, line, last in _numbered(_read_lines(path, "history")):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if not last:
                found.violate("history_format", f"history.jsonl line {number} is not JSON")
            continue
        problem = _record_problem(record)
        if problem is not None:
            found.violate("history_format", f"history.jsonl line {number}: {problem}")
            continue
        history.records.append(record)
    _pair_ops(history, found)
    return history


def _record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return "not an object"
    if _int(record.get("i")) is None or not isinstance(record.get("t"), int | float):
        return "no integer 'i' or number 't'"
    kind = record.get("type")
    if kind not in (*_OP_TYPES, "event") or not isinstance(record.get("f"), str):
        return f"i={record.get('i')}: unknown type {kind!r} or no 'f'"
    if kind != "event" and _int(record.get("op")) is None:
        return f"i={record['i']}: an operation without an integer 'op'"
    if not isinstance(record.get("value", {}), dict):
        return f"i={record['i']}: 'value' is not an object"
    return None


def _pair_ops(history: _History, found: _Findings) -> None:
    open_ops: dict[int, Op] = {}
    for record in history.records:
        kind = record["type"]
        if kind == "event":
            history.events.append(record)
        elif kind == "invoke":
            op = Op(record["op"], record.get("process"), record["f"], record)
            if record["op"] in open_ops:
                found.violate("history_format", f"i={record['i']}: op {record['op']} invoked "
                                                f"twice", ops=(record["i"],))
            open_ops[record["op"]] = op
            history.ops.append(op)
        else:
            invoked = open_ops.pop(record["op"], None)
            if invoked is None or invoked.f != record["f"]:
                found.violate("history_format", f"i={record['i']}: {kind} of op {record['op']} "
                                                f"without an open invoke of {record['f']}",
                              ops=(record["i"],))
                continue
            invoked.done = record


def _event(history: _History, f: str) -> dict[str, Any] | None:
    matches = [e for e in history.events if e["f"] == f]
    return _dict(matches[-1].get("value")) if matches else None


# --- replica logs -------------------------------------------------------------------------------


@dataclass
class _Replica:
    name: str
    path: Path
    final: dict[str, Any]
    log: AppliedLog | None = None


def _replicas(results_dir: Path, final: dict[str, Any] | None,
              found: _Findings) -> list[_Replica]:
    replicas: dict[str, _Replica] = {}
    for entry in _list(final.get("replicas") if final else None):
        item = _dict(entry)
        name = str(item.get("name", ""))
        relative = item.get("applied_log") or f"replicas/{name}/applied.log"
        if name and isinstance(relative, str):
            replicas[name] = _Replica(name, results_dir / relative, item)
    if final is None:
        found.note("no `final` event in the history: replica digests are not compared")
    with contextlib.suppress(OSError):
        for path in sorted((results_dir / "replicas").glob("*/applied.log")):
            name = path.parent.name
            if name not in replicas:
                replicas[name] = _Replica(name, path, {})
    return list(replicas.values())


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def read_logs(replicas: list[_Replica], found: _Findings) -> dict[int, bytes]:
    """Every replica's applied log; conflicts within and across files; the merged log."""
    merged: dict[int, bytes] = {}
    owner: dict[int, str] = {}
    for replica in replicas:
        try:
            replica.log = read_applied_log(str(replica.path))
        except FileNotFoundError:
            found.note(f"replica {replica.name}: no applied log at {replica.path}")
            continue
        except OSError as error:
            raise CheckError(f"{replica.path}: cannot read: {error}") from None
        log = replica.log
        _summarise(replica, found)
        for index, first, later in log.conflicts:
            found.violate("log_agreement",
                          f"replica {replica.name} applied two different entries at log index "
                          f"{index}: {_describe(first)} and later {_describe(later)}",
                          indices=(index,), keys=(f"replica={replica.name}",))
        found.count("log_agreement", len(log.entries))
        for index, entry in log.entries.items():
            existing = merged.setdefault(index, entry)
            if existing is not entry and existing != entry:
                found.violate("log_agreement",
                              f"log index {index}: replica {owner[index]} applied "
                              f"{_describe(existing)}, replica {replica.name} applied "
                              f"{_describe(entry)}", indices=(index,),
                              keys=(f"replica={owner[index]}", f"replica={replica.name}"))
            owner.setdefault(index, replica.name)
    return merged


def _summarise(replica: _Replica, found: _Findings) -> None:
    log = replica.log
    assert log is not None
    first = min(log.entries, default=0)
    found.report.replicas[replica.name] = {
        "first_index": first, "last_index": max(log.entries, default=0),
        "entries": len(log.entries), "reapplied": log.reapplied,
        "torn_tail_bytes": log.torn_tail_bytes,
    }
    if first > LOW_INDEX:
        found.note(f"replica {replica.name}: applied log starts at index {first} (it restored "
                   f"or installed a snapshot after compaction); earlier entries come from the "
                   f"other replicas")


def _describe(entry: bytes) -> str:
    tag = Tag(entry[0]).name if entry and entry[0] in Tag._value2member_map_ else "?"
    return f"{tag} ({len(entry)} bytes, sha256 {hashlib.sha256(entry).hexdigest()[:12]})"


# --- the replay ---------------------------------------------------------------------------------


@dataclass
class _Read:
    op: Op
    applied_index: int
    job_id: str
    state: Any
    tasks: dict[str, Any]


@dataclass
class _Replay:
    state: State = field(default_factory=State)
    auditor: LogAuditor = field(default_factory=LogAuditor)
    kills: KillLiveness = field(default_factory=lambda: KillLiveness(None, None))
    last_index: int = 0
    complete: bool = False
    broken: bool = False
    """The FSM raised: the state may be half-changed, nothing more is compared with it."""


def replay(merged: dict[int, bytes], reads: list[_Read], replicas: list[_Replica],
           found: _Findings, kills: KillLiveness | None = None) -> _Replay:
    """Apply the merged log in index order; compare reads and digests at their indices."""
    run = _Replay() if kills is None else _Replay(kills=kills)
    reads = sorted(reads, key=lambda r: r.applied_index)
    digests = _digest_points(replicas, found)
    points = sorted(digests)
    read_at = point_at = 0
    stop: str | None = None
    for index in sorted(merged):
        if index - run.last_index - 1 > MAX_UNRECORDED_RUN:
            stop = (f"indices {run.last_index + 1}..{index - 1} are in no replica's applied "
                    f"log: replay stops at index {run.last_index}")
            break
        found.report.unrecorded_indices += index - run.last_index - 1
        while read_at < len(reads) and reads[read_at].applied_index < index:
            _compare_read(reads[read_at], run.state, found)
            read_at += 1
        while point_at < len(points) and points[point_at] < index:
            _compare_digests(points[point_at], digests[points[point_at]], run.state, found)
            point_at += 1
        if not merged[index]:  # pysyncobj's own entry: nothing for the state machine
            run.last_index = index
            continue
        if not _apply(run, index, merged[index], found):
            run.broken = True
            stop = f"the FSM failed on log index {index}: replay stops there"
            break
    else:
        run.complete = True
    if not run.broken:
        run.auditor.finish(run.last_index, run.state)
        _kill_figures(run.kills, found)
    _after_replay(run, reads[read_at:], {p: digests[p] for p in points[point_at:]}, stop, found)
    return run


def _apply(run: _Replay, index: int, entry: bytes, found: _Findings) -> bool:
    try:
        command = decode(entry)
    except CommandError:
        command = None
    if command is not None:
        run.auditor.before(index, command, run.state)
        run.kills.before(run.state)
    try:
        outcome = fsm.apply_command(run.state, command) if command is not None \
            else fsm.apply(run.state, entry)
    except Exception as error:  # a bug in the FSM: the state may be half-changed
        found.violate("fsm_apply", f"log index {index}: applying {_describe(entry)} raised "
                                   f"{error!r}", indices=(index,))
        return False
    if command is not None:
        run.auditor.observe(index, command, outcome, run.state)
        run.kills.after(index, command, run.state,
                        lambda check, message, indices, keys: found.violate(
                            check, message, indices=indices, keys=keys))
    run.last_index = index
    found.report.entries_replayed += 1
    return True


def _after_replay(run: _Replay, reads: list[_Read], digests: dict[int, list[_Replica]],
                  stop: str | None, found: _Findings) -> None:
    """Reads and digests at or past the last replayed index: compared with the final state when
    at most MAX_UNRECORDED_RUN indices past it (pysyncobj's own entries), else not compared."""
    report = found.report
    report.replay_complete = run.complete
    report.last_index_replayed = run.last_index
    if stop is not None:
        found.note(f"replay incomplete: {stop}; checks needing later entries were skipped")
    reach = run.last_index + (MAX_UNRECORDED_RUN if run.complete else 0)
    if run.broken:
        reach = -1
    late = 0
    for read in reads:
        if read.applied_index <= reach:
            _compare_read(read, run.state, found)
        else:
            late += 1
    for index, replicas in digests.items():
        if index <= reach:
            _compare_digests(index, replicas, run.state, found)
        else:
            found.note(f"replicas {', '.join(r.name for r in replicas)} report state_index "
                       f"{index}, past the replayed log (index {run.last_index}): their digest "
                       f"is not compared")
    if late:
        found.note(f"{late} reads report an applied_index past the replayed log (index "
                   f"{run.last_index}): not compared")


def _kill_figures(kills: KillLiveness, found: _Findings) -> None:
    kills.finish()
    report = found.report
    found.count("kill_liveness", kills.checked)
    found.count("hostile_no_kills", kills.hostile_checked)
    report.kills_settled = len(kills.latencies_ms)
    report.kills_unjudged = kills.unjudged
    if kills.latencies_ms:
        ordered = sorted(kills.latencies_ms)
        report.kill_settle_p50_s = ordered[math.ceil(0.5 * len(ordered)) - 1] / 1000
        report.kill_settle_max_s = ordered[-1] / 1000


def _kills_for(results_dir: Path) -> KillLiveness:
    """The kill-liveness judge for this run: meta.json names the honest clusters (its agents)
    and the hostile agent's; without them every cluster is judged."""
    try:
        meta = json.loads((results_dir / "meta.json").read_text())
    except (OSError, ValueError):
        meta = {}
    meta = _dict(meta)
    agents = meta.get("agents")
    honest = frozenset(map(str, agents)) if isinstance(agents, dict) else None
    hostile = meta.get("hostile_cluster")
    return KillLiveness(honest, hostile if isinstance(hostile, str) else None)


def _digest_points(replicas: list[_Replica], found: _Findings) -> dict[int, list[_Replica]]:
    points: dict[int, list[_Replica]] = {}
    for replica in replicas:
        final = replica.final
        if not final:
            continue
        index = _int(final.get("state_index"))
        if index is None or not isinstance(final.get("state_digest"), str):
            found.note(f"replica {replica.name}: no state_index/state_digest in the final event"
                       + (" (unreachable)" if final.get("unreachable") else ""))
            continue
        points.setdefault(index, []).append(replica)
    for index, group in points.items():
        found.count("replica_digest")
        if len({r.final["state_digest"] for r in group}) > 1:
            found.violate("replica_digest",
                          f"replicas at state_index {index} report different digests: "
                          + ", ".join(f"{r.name}={r.final['state_digest']}" for r in group),
                          indices=(index,), keys=tuple(f"replica={r.name}" for r in group))
    return points


def _compare_digests(index: int, replicas: list[_Replica], state: State,
                     found: _Findings) -> None:
    digest = snapshot.digest(state)
    for replica in replicas:
        found.count("replica_digest")
        if replica.final["state_digest"] != digest:
            found.violate("replica_digest",
                          f"replica {replica.name} reports digest "
                          f"{replica.final['state_digest']} at state_index {index}; replaying "
                          f"the applied logs gives {digest} (unrecorded indices before it: "
                          f"{found.report.unrecorded_indices})",
                          indices=(index,), keys=(f"replica={replica.name}",))


def _compare_read(read: _Read, state: State, found: _Findings) -> None:
    found.count("read_matches_log")
    found.report.reads_compared += 1
    job = state.jobs.get(read.job_id)
    op_i = read.op.done["i"] if read.op.done else read.op.invoke["i"]
    if job is None:
        found.violate("read_matches_log",
                      f"read i={op_i} (client {read.op.process}) saw job {read.job_id} "
                      f"{read.state} at applied_index {read.applied_index}; the log holds no "
                      f"such job there", ops=(op_i,), indices=(read.applied_index,),
                      keys=(read.job_id,))
        return
    counts = {TaskState(s).name: n for s, n in enumerate(job.counts) if n}
    seen = {str(k): v for k, v in read.tasks.items() if v}
    if job.state.name != read.state or counts != seen:
        found.violate("read_matches_log",
                      f"read i={op_i} (client {read.op.process}) of job {read.job_id} at "
                      f"applied_index {read.applied_index} saw {read.state} {_counts(seen)}; "
                      f"the log gives {job.state.name} {_counts(counts)}",
                      ops=(op_i,), indices=(read.applied_index,), keys=(read.job_id,))


def _counts(counts: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + "}"


# --- submissions --------------------------------------------------------------------------------


def check_submissions(ops: list[Op], run: _Replay, found: _Findings) -> None:
    by_key: dict[tuple[str, str], list[Op]] = {}
    for op in ops:
        if op.f == "submit":
            value = op.value()
            by_key.setdefault((str(value.get("tenant")), str(value.get("key"))), []).append(op)
    reported = {k for v in run.auditor.violations if v.check == "idempotency_key_unique"
                for k in v.keys[:1]}
    for (tenant, key), tries in by_key.items():
        _check_key(tenant, key, tries, run, reported, found)


def _check_key(tenant: str, key: str, tries: list[Op], run: _Replay, reported: set[str],
               found: _Findings) -> None:
    acked = [op for op in tries if op.outcome == "ok"]
    created = run.auditor.key_jobs.get((tenant, key), [])
    label = f"key={tenant}/{key}"
    found.count("submit_ack_consistent")
    named = {str(op.result().get("job_id")) for op in acked}
    if len(named) > 1:
        found.violate("submit_ack_consistent",
                      f"submissions of key {key!r} (tenant {tenant}) were acknowledged with "
                      f"different job ids {sorted(named)} (ops i="
                      f"{', '.join(str(op.done['i']) for op in acked if op.done)})",
                      ops=[op.done["i"] for op in acked if op.done], keys=(label,))
    for op in acked:
        _check_acked(op, tenant, key, run, found)
    if tries and all(op.outcome == "fail" for op in tries):
        found.count("submit_failed_absent")
        if created:
            found.violate("submit_failed_absent",
                          f"every submission of key {key!r} (tenant {tenant}) failed (ops i="
                          f"{', '.join(str(op.done['i']) for op in tries if op.done)}), yet the "
                          f"log created job {created[0]} at index "
                          f"{run.auditor.created[created[0]].index}",
                          ops=[op.done["i"] for op in tries if op.done],
                          indices=(run.auditor.created[created[0]].index,), keys=(label,))
    found.count("submit_one_job_per_key")
    if len(created) > 1 and label not in reported:
        found.violate("submit_one_job_per_key",
                      f"key {key!r} (tenant {tenant}) created {len(created)} jobs: "
                      + ", ".join(f"{j} at log index {run.auditor.created[j].index}"
                                  for j in created)
                      + " (the first one's key record had expired or been dropped)",
                      indices=[run.auditor.created[j].index for j in created], keys=(label,))


def _check_acked(op: Op, tenant: str, key: str, run: _Replay, found: _Findings) -> None:
    assert op.done is not None
    job_id = str(op.result().get("job_id"))
    created = run.auditor.created.get(job_id)
    found.count("submit_acked_present")
    if created is not None and (created.tenant, created.key) == (tenant, key):
        return
    if created is None and not run.complete:
        found.note(f"submit i={op.done['i']} acknowledged job {job_id}, not in the replayed "
                   f"part of the log (replay incomplete)")
        return
    where = "is in no log" if created is None else \
        f"was created at log index {created.index} under key {created.tenant}/{created.key}"
    found.violate("submit_acked_present",
                  f"submit i={op.done['i']} (client {op.process}) of key {key!r} (tenant "
                  f"{tenant}) was acknowledged as job {job_id}, which {where}",
                  ops=(op.invoke["i"], op.done["i"]), keys=(job_id, f"key={tenant}/{key}"))


# --- reads --------------------------------------------------------------------------------------


def collect_reads(ops: list[Op], found: _Findings) -> list[_Read]:
    reads = []
    unreported = 0
    for op in ops:
        if op.f != "read" or op.outcome != "ok":
            continue
        result = op.result()
        index = _int(result.get("applied_index"))
        if not index:  # 0 or absent: the server did not say which index the view reflects
            unreported += 1
            continue
        reads.append(_Read(op, index, str(result.get("job_id", op.value().get("job_id"))),
                           result.get("state"), _dict(result.get("tasks"))))
    if unreported:
        found.note(f"{unreported} ok reads carry no applied_index (0 or absent): not compared "
                   f"with the log, not checked for staleness")
    return reads


def check_read_order(reads: list[_Read], found: _Findings) -> None:
    """Per client and job, in completion order: applied_index and progress never go back."""
    last: dict[tuple[str, str], _Read] = {}
    for read in sorted(reads, key=lambda r: _done_i(r.op)):
        key = (str(read.op.process), read.job_id)
        before = last.get(key)
        last[key] = read
        if before is None:
            continue
        found.count("read_monotonic")
        problem = None
        if read.applied_index < before.applied_index:
            problem = f"applied_index went from {before.applied_index} to {read.applied_index}"
        elif _progress(read) < _progress(before) or (
                before.state in _TERMINAL_JOB_NAMES and read.state != before.state):
            problem = f"progress went back from {before.state} {_counts(before.tasks)} to " \
                      f"{read.state} {_counts(read.tasks)}"
        if problem is not None:
            found.violate("read_monotonic",
                          f"client {read.op.process} reads of job {read.job_id}: i="
                          f"{_done_i(before.op)} then i={_done_i(read.op)}: {problem}",
                          ops=(_done_i(before.op), _done_i(read.op)),
                          indices=(before.applied_index, read.applied_index),
                          keys=(read.job_id,))


def _done_i(op: Op) -> int:
    return int(op.done["i"]) if op.done else int(op.invoke["i"])


def _progress(read: _Read) -> tuple[int, int]:
    rank = 2 if read.state in _TERMINAL_JOB_NAMES else 1 if read.state == "RUNNING" else 0
    done = sum(v for k, v in read.tasks.items() if k in _TERMINAL_TASK_NAMES and _int(v))
    return rank, done


def check_stale_reads(history: _History, run: _Replay, found: _Findings) -> None:
    """A read must reflect every job acknowledged before it was invoked (real-time order)."""
    highest = 0
    highest_op = -1
    acked: dict[str, int] = {}
    read_invoked: dict[int, tuple[int, int, int]] = {}
    """read op -> (highest creation index acknowledged before it, that submit's i, its i)."""
    for record in history.records:
        kind, f = record["type"], record["f"]
        if f == "submit" and kind == "ok":
            job_id = str(_dict(record.get("value")).get("job_id"))
            created = run.auditor.created.get(job_id)
            if created is not None:
                acked.setdefault(job_id, record["i"])
                if created.index > highest:
                    highest, highest_op = created.index, record["i"]
        elif f == "read" and kind == "invoke":
            read_invoked[record["op"]] = (highest, highest_op, record["i"])
        elif f == "read" and kind in ("ok", "fail") and record["op"] in read_invoked:
            _stale(record, read_invoked[record["op"]], acked, found)


def _stale(record: dict[str, Any], before: tuple[int, int, int], acked: dict[str, int],
           found: _Findings) -> None:
    bound, source, invoked = before
    value = _dict(record.get("value"))
    job_id = str(value.get("job_id"))
    if record["type"] == "fail":
        if value.get("error") == "NOT_FOUND" and acked.get(job_id, invoked) < invoked:
            found.count("stale_read")
            found.violate("stale_read",
                          f"read i={record['i']} (client {record.get('process')}) got NOT_FOUND "
                          f"for job {job_id}, acknowledged at i={acked[job_id]}",
                          ops=(acked[job_id], record["i"]), keys=(job_id,))
        return
    index = _int(value.get("applied_index"))
    if not index:
        return
    found.count("stale_read")
    if index < bound:
        found.violate("stale_read",
                      f"read i={record['i']} (client {record.get('process')}) of job {job_id} "
                      f"reflects applied_index {index}, but submit i={source}, acknowledged "
                      f"before the read began, was created at log index {bound}",
                      ops=(source, record["i"]), indices=(index, bound), keys=(job_id,))


# --- the ledger ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerLine:
    line: int
    kind: str
    key: str
    fence: int
    job_id: str
    task_id: str
    attempt: int
    exit_code: int | None


def read_ledger(path: Path, found: _Findings) -> list[LedgerLine] | None:
    if not path.exists():
        found.note("no ledger.txt: the external side effects are not checked")
        return None
    lines = []
    for number, text, last in _numbered(_read_lines(path, "ledger")):
        parsed = _ledger_line(number, text)
        if parsed is None:
            if not last:
                found.violate("ledger_format", f"ledger line {number} is malformed: {text!r}")
            continue
        lines.append(parsed)
    return lines


def _ledger_line(number: int, text: str) -> LedgerLine | None:
    parts = text.split()
    if len(parts) not in (6, 7) or parts[0] not in ("start", "end"):
        return None
    if (parts[0] == "start") != (len(parts) == 6):
        return None
    try:
        fence, attempt = int(parts[2]), int(parts[5])
        exit_code = int(parts[6]) if len(parts) == 7 else None
    except ValueError:
        return None
    return LedgerLine(number, parts[0], parts[1], fence, parts[3], parts[4], attempt, exit_code)


class _LedgerCheck:
    """One pass over the ledger in its (real-time) order."""

    def __init__(self, lines: list[LedgerLine], run: _Replay, found: _Findings) -> None:
        self.run = run
        self.found = found
        self.lines = lines
        self.ends: dict[int, LedgerLine] = {}
        for entry in lines:
            if entry.kind == "end":
                self.ends.setdefault(entry.fence, entry)
        self.starts: dict[int, LedgerLine] = {}
        self.running: dict[TaskKey, dict[int, LedgerLine]] = {}
        """Started attempts whose end line comes later, per task."""
        self.succeeded: dict[TaskKey, dict[int, LedgerLine]] = {}
        """Fences with an `end ... 0` line so far, per task."""
        self.specs: dict[str, dict[str, TaskSpec]] = {}

    def run_all(self) -> None:
        for entry in self.lines:
            task = (entry.job_id, entry.task_id)
            if entry.kind == "start":
                self.found.report.ledger_starts += 1
                self._start(entry)
                self._overlap(entry, self.running.setdefault(task, {}))
                end = self.ends.get(entry.fence)
                if end is None:
                    self.found.report.ledger_unended += 1
                elif end.line > entry.line:
                    self.running[task][entry.fence] = entry
            else:
                self._end(entry)
                self.running.get(task, {}).pop(entry.fence, None)
                if entry.exit_code == 0:
                    self.succeeded.setdefault(task, {}).setdefault(entry.fence, entry)
        self._duplicates()

    def _start(self, entry: LedgerLine) -> None:
        found = self.found
        name = f"{entry.job_id}/{entry.task_id}"
        keys = (name, f"fence={entry.fence}")
        found.count("ledger_fence_once")
        first = self.starts.setdefault(entry.fence, entry)
        if first is not entry:
            found.violate("ledger_fence_once",
                          f"ledger lines {first.line} and {entry.line}: fence {entry.fence} of "
                          f"{name} started twice", keys=keys)
        assignment = self.run.auditor.assigned.get(entry.fence)
        if assignment is None and not self.run.complete and entry.fence > self.run.state.fence:
            return  # past the replayed part of the log
        found.count("ledger_fence_committed")
        problem = None
        if assignment is None:
            problem = "was never committed"
        elif (assignment.job_id, assignment.task_id) != (entry.job_id, entry.task_id):
            problem = f"was committed for {assignment.job_id}/{assignment.task_id} at log " \
                      f"index {assignment.index}"
        elif entry.key != (expected := _idempotency_key(self.run.state, entry)):
            problem = f"was committed at log index {assignment.index}, but the line's key is " \
                      f"{entry.key!r}, not {expected!r}"
        if problem is not None:
            found.violate("ledger_fence_committed",
                          f"ledger line {entry.line}: {name} started with fence {entry.fence}, "
                          f"which {problem}",
                          indices=() if assignment is None else (assignment.index,), keys=keys)
            return
        self._dag(entry)

    def _task_spec(self, job_id: str, task_id: str) -> tuple[TaskSpec, FailurePolicy] | None:
        created = self.run.auditor.created.get(job_id)
        if created is None:
            return None
        tasks = self.specs.get(job_id)
        if tasks is None:
            tasks = self.specs[job_id] = {t.id: t for t in created.spec.tasks}
        task = tasks.get(task_id)
        return None if task is None else (task, created.spec.failure_policy)

    def _dag(self, entry: LedgerLine) -> None:
        found = self.found
        spec = self._task_spec(entry.job_id, entry.task_id)
        if spec is None:
            return
        task, policy = spec
        found.count("ledger_dag_order")
        if runs_when_upstream_done(policy, task.trigger):
            return
        missing = [d for d in task.depends_on if not self.succeeded.get((entry.job_id, d))]
        if missing:
            found.violate("ledger_dag_order",
                          f"ledger line {entry.line}: {entry.job_id}/{entry.task_id} fence "
                          f"{entry.fence} started before upstream {', '.join(missing)} had a "
                          f"successful end line",
                          keys=(f"{entry.job_id}/{entry.task_id}", f"fence={entry.fence}"))

    def _overlap(self, entry: LedgerLine, running: dict[int, LedgerLine]) -> None:
        """`running`: this task's attempts started earlier whose end line comes later."""
        found = self.found
        found.count("ledger_overlap")
        for fence, earlier in running.items():
            if fence == entry.fence:
                continue  # the same fence twice is ledger_fence_once
            state = _attempt_state(self.run, earlier)
            if state is None:
                continue  # past the replayed part of the log: cannot be judged
            if state == AttemptState.LOST.name:
                found.report.duplicate_executions += 1
                continue
            found.violate("ledger_overlap",
                          f"ledger line {entry.line}: {entry.job_id}/{entry.task_id} fence "
                          f"{entry.fence} started while fence {fence} (started line "
                          f"{earlier.line}, ended line {self.ends[fence].line}) was running; "
                          f"fence {fence} ended {state} in the log, not LOST",
                          keys=(f"{entry.job_id}/{entry.task_id}", f"fence={fence}",
                                f"fence={entry.fence}"))

    def _end(self, entry: LedgerLine) -> None:
        found = self.found
        name = f"{entry.job_id}/{entry.task_id}"
        keys = (name, f"fence={entry.fence}")
        if entry.fence not in self.starts:
            found.violate("ledger_format", f"ledger line {entry.line}: fence {entry.fence} of "
                                           f"{name} ends without a start line before it",
                          keys=keys)
        elif self.ends[entry.fence] is not entry:
            found.count("ledger_fence_once")
            found.violate("ledger_fence_once",
                          f"ledger lines {self.ends[entry.fence].line} and {entry.line}: fence "
                          f"{entry.fence} of {name} ended twice", keys=keys)

    def _duplicates(self) -> None:
        found = self.found
        for (job_id, task_id), fences in self.succeeded.items():
            if len(fences) < 2:
                continue
            found.report.external_duplicate_effects += 1
            found.count("ledger_duplicate_effect")
            states = {f: _attempt_state(self.run, line) for f, line in fences.items()}
            if None in states.values():
                continue  # past the replayed part of the log: cannot be judged
            unlost = [f for f, s in states.items() if s != AttemptState.LOST.name]
            if len(unlost) > 1:
                found.violate("ledger_duplicate_effect",
                              f"{job_id}/{task_id} ended successfully {len(fences)} times "
                              f"(ledger lines {', '.join(str(x.line) for x in fences.values())}"
                              f"); fences {', '.join(f'{f} {states[f]}' for f in sorted(states))}"
                              f": more than one was not LOST",
                              keys=(f"{job_id}/{task_id}",
                                    *(f"fence={f}" for f in sorted(fences))))


def check_ledger(lines: list[LedgerLine], run: _Replay, found: _Findings) -> None:
    _LedgerCheck(lines, run, found).run_all()


def _idempotency_key(state: State, entry: LedgerLine) -> str:
    """The key the task was given (the gateway's: `protocol.task_key` of its job and task)."""
    return task_key(entry.job_id, entry.task_id)


def _attempt_state(run: _Replay, line: LedgerLine) -> str | None:
    """The attempt's final state in the replayed log; 'unknown' when the log has no such attempt
    (its own violation elsewhere); None when it may be past an incomplete replay."""
    job = run.state.jobs.get(line.job_id)
    index = None if job is None else job.index_of.get(line.task_id)
    if job is not None and index is not None:
        for attempt in job.tasks[index].attempts:
            if attempt.fence == line.fence:
                if attempt.live and not run.complete:
                    return None  # its end is past the replayed part of the log
                return attempt.state.name
    if not run.complete and line.fence > run.state.fence:
        return None
    return "unknown"


# --- agent logs ---------------------------------------------------------------------------------


def check_agent_logs(logs_dir: Path, run: _Replay, found: _Findings) -> None:
    """Agent starts against the committed log, read through the shared event-log parser."""
    started: dict[int, str] = {}
    try:
        paths = sorted(logs_dir.glob("agent-*.log"))
    except OSError:
        paths = []
    if not paths:
        found.note("no logs/agent-*.log: agent starts are not checked")
    unparsed = 0
    for path in paths:
        cluster_id = path.name[len("agent-"):-len(".log")]
        try:
            for event in read_events(path, ("attempt_started", "stale_fence_rejected")):
                if event.name == "stale_fence_rejected":
                    found.report.stale_fence_rejections += 1
                elif not _agent_start(event, cluster_id, started, run, found):
                    unparsed += 1
        except OSError as error:
            raise CheckError(f"{path}: cannot read: {error}") from None
    if unparsed:
        found.note(f"{unparsed} attempt_started events without fence/job/task: not checked")


AGENT_EVENTS = ("agent_registered", "attempt_started", "attempt_adopted", "attempt_finished",
                "stale_fence_rejected", "report_verdict")
"""Agent log events the runner copies into the history."""


def agent_events(logs_dir: Path) -> Iterator[dict[str, Any]]:
    """Every AGENT_EVENTS event of every logs/agent-<cluster>.log: {"cluster", "event", "where"
    (file:line), "ts" (the agent's wall clock), and the event's fields}. Unreadable files are
    skipped."""
    for path in sorted(logs_dir.glob("agent-*.log")):
        cluster_id = path.name[len("agent-"):-len(".log")]
        try:
            for event in read_events(path, AGENT_EVENTS):
                yield {**event.fields, "cluster": cluster_id, "event": event.name,
                       "where": event.where, "ts": event.ts}
        except OSError:
            continue


def _agent_start(event: Event, cluster_id: str, started: dict[int, str], run: _Replay,
                 found: _Findings) -> bool:
    job_id, task_id = event.fields.get("job"), event.fields.get("task")
    fence = event.fields.get("fence")
    where = event.where
    if type(fence) is not int or not isinstance(job_id, str) or not isinstance(task_id, str) \
            or not job_id or not task_id:
        return False
    keys = (f"{job_id}/{task_id}", f"fence={fence}", f"cluster={cluster_id}")
    found.count("agent_start_once")
    first = started.setdefault(fence, where)
    if first != where:
        found.violate("agent_start_once", f"{where}: agent {cluster_id} started fence {fence} "
                                          f"of {job_id}/{task_id}, already started at {first}",
                      keys=keys)
    assignment = run.auditor.assigned.get(fence)
    if assignment is None and not run.complete and fence > run.state.fence:
        return True
    found.count("agent_start_assigned")
    if assignment is None or (assignment.job_id, assignment.task_id, assignment.cluster_id) \
            != (job_id, task_id, cluster_id):
        committed = "was never committed" if assignment is None else \
            f"was committed to {assignment.cluster_id} for {assignment.job_id}/" \
            f"{assignment.task_id} at log index {assignment.index}"
        found.violate("agent_start_assigned",
                      f"{where}: agent {cluster_id} started fence {fence} of {job_id}/"
                      f"{task_id}, which {committed}",
                      indices=() if assignment is None else (assignment.index,), keys=keys)
    return True


# --- liveness and statistics --------------------------------------------------------------------


def check_liveness(history: _History, run: _Replay, found: _Findings) -> None:
    report = found.report
    acked = sorted({str(op.result().get("job_id")) for op in history.ops
                    if op.f == "submit" and op.outcome == "ok"})
    event = _event(history, "liveness")
    report.acknowledged_jobs = len(acked)
    if event is not None:
        report.liveness_waited_s = _float(event.get("waited_s"))
        report.liveness_bound_s = _float(event.get("bound_s"))
    if run.complete:
        pending = [j for j in acked if j not in run.state.jobs
                   or run.state.jobs[j].state not in TERMINAL_JOB_STATES]
        report.liveness_pending = pending
        report.liveness_met = not pending
        if event is not None and bool(event.get("met")) != report.liveness_met:
            found.note(f"the liveness event says met={event.get('met')}; the replayed final "
                       f"state says met={report.liveness_met}")
    elif event is not None:
        report.liveness_met = bool(event.get("met"))
        report.liveness_pending = [str(j) for j in _list(event.get("pending"))]
        found.note("liveness taken from the liveness event (the replay is incomplete)")
    else:
        found.note("no liveness event and an incomplete replay: liveness unknown (not met)")
    if event is None and run.complete:
        found.note("no liveness event in the history: liveness judged from the final state")


def check_timeouts(ops: list[Op], run: _Replay, found: _Findings) -> None:
    """early_timeout: no attempt of a task that runs for less than EARLY_TIMEOUT_FRACTION of its
    timeout_s (as the submit described it) may end TIMED_OUT: that would mean replicated time
    ran ahead of real time (a wrong clock stamped into the log)."""
    if not run.complete:
        return
    for op in ops:
        if op.f != "submit" or op.outcome != "ok":
            continue
        job = run.state.jobs.get(str(op.result().get("job_id")))
        tasks = _dict(op.value().get("tasks"))
        if job is None:
            continue
        for task in job.tasks:
            described = _dict(tasks.get(task.spec.id))
            run_s, timeout_s = _float(described.get("run_s")), _float(described.get("timeout_s"))
            if run_s is None or timeout_s is None:
                continue
            found.count("early_timeout")
            for attempt in task.attempts:
                if attempt.state == AttemptState.TIMED_OUT \
                        and run_s < timeout_s * EARLY_TIMEOUT_FRACTION:
                    found.violate("early_timeout",
                                  f"job {job.id} task {task.spec.id} fence {attempt.fence} "
                                  f"TIMED_OUT although it runs {run_s:g} s against timeout_s "
                                  f"{timeout_s:g}", ops=(int(op.invoke["i"]),),
                                  keys=(f"{job.id}/{task.spec.id}",))


def count_ops(ops: list[Op], found: _Findings) -> None:
    table = found.report.ops
    for op in ops:
        row = table.setdefault(op.f, {"invoked": 0, "ok": 0, "fail": 0, "info": 0, "open": 0})
        row["invoked"] += 1
        row[op.outcome or "open"] += 1


def fault_statistics(history: _History, found: _Findings) -> None:
    report = found.report
    faults = [e for e in history.events if e["f"] == "fault"]
    ended_kinds = {_dict(e.get("value")).get("kind") for e in faults
                   if _dict(e.get("value")).get("phase") == "end"}
    starts: dict[tuple[str, str], list[float]] = {}
    references: list[float] = []
    for event in faults:
        value = _dict(event.get("value"))
        kind = str(value.get("kind"))
        key = (kind, json.dumps(sorted(map(str, _list(value.get("targets"))))))
        if value.get("phase") == "start":
            report.faults[kind] = report.faults.get(kind, 0) + 1
            if kind in ended_kinds:
                starts.setdefault(key, []).append(event["t"])
            else:
                references.append(event["t"])
        elif value.get("phase") == "end" and starts.get(key):
            starts[key].pop(0)
            references.append(event["t"])
    report.faults_unrecovered = sum(len(v) for v in starts.values())
    _recovery(history, sorted(references), found)


def _recovery(history: _History, references: list[float], found: _Findings) -> None:
    report = found.report
    served = sorted((op.invoke["t"], op.done["t"]) for op in history.ops
                    if op.f in ("submit", "read") and op.outcome == "ok" and op.done)
    invoked = [s[0] for s in served]
    earliest = [math.inf] * (len(served) + 1)
    for position in range(len(served) - 1, -1, -1):
        earliest[position] = min(served[position][1], earliest[position + 1])
    for reference in references:
        first_ok = earliest[bisect.bisect_right(invoked, reference)]
        if math.isinf(first_ok):
            report.faults_unrecovered += 1
        else:
            report.recovery_s.append(round(first_ok - reference, 3))
    if report.recovery_s:
        ordered = sorted(report.recovery_s)
        report.recovery_p50_s = ordered[math.ceil(0.5 * len(ordered)) - 1]
        report.recovery_max_s = ordered[-1]


# --- the whole check ----------------------------------------------------------------------------


def check(results_dir: Path) -> Report:
    """Every check over a results folder; raises CheckError when it cannot be read."""
    if not results_dir.is_dir():
        raise CheckError(f"{results_dir}: not a results folder")
    found = _Findings(results_dir)
    history = read_history(results_dir / "history.jsonl", found)
    replicas = _replicas(results_dir, _event(history, "final"), found)
    merged = read_logs(replicas, found)
    if not merged:
        found.note("no applied log holds any entry: the log checks did nothing")
    reads = collect_reads(history.ops, found)
    run = replay(merged, reads, replicas, found, _kills_for(results_dir))
    found.report.violations[:0] = run.auditor.violations
    for name, count in run.auditor.checks.items():
        found.count(name, count)
    for name, count in run.auditor.suppressed.items():
        found.report.violations_suppressed[name] = count
    check_submissions(history.ops, run, found)
    check_read_order(reads, found)
    check_stale_reads(history, run, found)
    ledger = read_ledger(results_dir / "ledger.txt", found)
    if ledger is not None:
        check_ledger(ledger, run, found)
    check_agent_logs(results_dir / "logs", run, found)
    check_timeouts(history.ops, run, found)
    check_liveness(history, run, found)
    count_ops(history.ops, found)
    fault_statistics(history, found)
    return found.finish()


# --- output -------------------------------------------------------------------------------------


def report_json(report: Report) -> dict[str, Any]:
    return asdict(report)


def format_violation(violation: Violation) -> str:
    return f"VIOLATION [{violation.check}] {violation.message}"


def _statistics(report: Report) -> list[str]:
    lines = ["operations:"]
    for f, row in sorted(report.ops.items()):
        lines.append(f"  {f:<8} invoked {row['invoked']:>6}  ok {row['ok']:>6}  fail "
                     f"{row['fail']:>5}  info {row['info']:>5}"
                     + (f"  open {row['open']}" if row["open"] else ""))
    faults = ", ".join(f"{k}={v}" for k, v in sorted(report.faults.items())) or "none"
    lines.append(f"faults injected: {faults}")
    if report.recovery_s:
        lines.append(f"recovery after faults: p50 {report.recovery_p50_s:.2f} s, max "
                     f"{report.recovery_max_s:.2f} s over {len(report.recovery_s)} faults"
                     + (f", {report.faults_unrecovered} never followed by an ok operation"
                        if report.faults_unrecovered else ""))
    else:
        lines.append(f"recovery after faults: none measured ({report.faults_unrecovered} "
                     f"faults never followed by an ok operation)")
    checked = ", ".join(f"{k}={v}" for k, v in sorted(report.invariants_checked.items()))
    lines += [
        f"invariants checked: {checked or 'none'}",
        f"log entries replayed: {report.entries_replayed} (through index "
        f"{report.last_index_replayed}, {report.unrecorded_indices} unrecorded indices, "
        f"{'complete' if report.replay_complete else 'INCOMPLETE'})",
        f"reads compared with the log: {report.reads_compared}",
        f"duplicate executions (allowed, LOST): {report.duplicate_executions}",
        f"external duplicate effects: {report.external_duplicate_effects}",
        f"stale fence rejections: {report.stale_fence_rejections}",
        f"ledger: {report.ledger_starts} starts, {report.ledger_unended} without an end line",
        f"kills settled: {_kills_row(report)}",
    ]
    return lines


def _kills_row(report: Report) -> str:
    timing = (f", p50 {report.kill_settle_p50_s:.2f} s, max {report.kill_settle_max_s:.2f} s"
              if report.kill_settle_p50_s is not None and report.kill_settle_max_s is not None
              else "")
    return f"{report.kills_settled}{timing} ({report.kills_unjudged} open at the end)"


def format_report(report: Report) -> str:
    count = len(report.violations) + sum(report.violations_suppressed.values())
    lines = [f"results: {report.results_dir}",
             "safety: OK, no violations" if not count else
             f"safety: VIOLATED, {count} violation{'s' if count > 1 else ''}"]
    lines += [format_violation(v) for v in report.violations]
    lines += [f"({n} more [{c}] violations not kept)"
              for c, n in sorted(report.violations_suppressed.items())]
    lines.append("liveness: " + ("met" if report.liveness_met else
                                 f"NOT met; pending: {', '.join(report.liveness_pending) or '?'}"))
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines + _statistics(report))


def format_table(report: Report, *, seed: int | None = None, nodes: int | None = None,
                 time_s: float | None = None, injected: dict[str, int] | None = None,
                 results: Path | None = None, harness_failure: str | None = None) -> str:
    """The runner's results: a Markdown table of the headline figures (the README carries the
    latest), then every violation, the notes and the per-check counts."""
    count = len(report.violations) + sum(report.violations_suppressed.values())
    faults = injected if injected is not None else report.faults
    rows = [("run", f"seed {seed}, {nodes} replicas, {time_s:g} s of faults"
             if time_s is not None else f"seed {seed}, {nodes} replicas")]
    for f, row in sorted(report.ops.items()):
        rows.append((f"{f}: invoked / ok / fail / info",
                     f"{row['invoked']} / {row['ok']} / {row['fail']} / {row['info']}"
                     + (f" ({row['open']} open)" if row["open"] else "")))
    rows.append(("faults injected", f"{sum(faults.values())}: " + ", ".join(
        f"{k} {v}" for k, v in sorted(faults.items())) if faults else "none"))
    rows.append(("invariants checked", f"{len(report.invariants_checked)} checks, "
                 f"{sum(report.invariants_checked.values()):,} evaluations"))
    rows.append(("violations", str(count) if not harness_failure
                 else f"{count}; HARNESS FAILURE: {harness_failure}"))
    rows.append(("duplicate executions (overlapping attempts, allowed after LOST)",
                 str(report.duplicate_executions)))
    rows.append(("external duplicate effects (a task's effect completed twice)",
                 str(report.external_duplicate_effects)))
    rows.append(("stale-fence rejections by agents", str(report.stale_fence_rejections)))
    rows.append(("kills owed to honest agents settled (READY time p50 / max)",
                 _kills_row(report)))
    rows.append(("recovery: fault end to next ok operation",
                 f"p50 {report.recovery_p50_s:.2f} s, max {report.recovery_max_s:.2f} s"
                 if report.recovery_p50_s is not None and report.recovery_max_s is not None
                 else "not measured"))
    waited = (f" in {report.liveness_waited_s:.1f} s" if report.liveness_waited_s is not None
              else "")
    bound = f" (bound {report.liveness_bound_s:g} s)" if report.liveness_bound_s else ""
    done = report.acknowledged_jobs - len(report.liveness_pending)
    rows.append(("liveness: acknowledged jobs terminal after the heal",
                 f"{'met' if report.liveness_met else 'NOT met'}, {done}/"
                 f"{report.acknowledged_jobs}{waited}{bound}"))
    rows.append(("log entries replayed / reads compared with the log",
                 f"{report.entries_replayed:,} / {report.reads_compared:,}"
                 + ("" if report.replay_complete else " (replay INCOMPLETE)")))
    lines = ["| figure | value |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines.append("")
    lines += [format_violation(v) for v in report.violations]
    lines += [f"({n} more [{c}] violations not kept)"
              for c, n in sorted(report.violations_suppressed.items())]
    if not report.liveness_met:
        lines.append(f"liveness pending: {', '.join(report.liveness_pending) or '?'}")
    lines += [f"note: {n}" for n in report.notes[:MAX_NOTES_SHOWN]]
    if len(report.notes) > MAX_NOTES_SHOWN:
        lines.append(f"({len(report.notes) - MAX_NOTES_SHOWN} more notes in report.json)")
    lines.append("checks: " + ", ".join(f"{k} {v}" for k, v in
                                        sorted(report.invariants_checked.items())))
    lines.append(f"results folder: {results or report.results_dir}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jepsen.checker",
        description="Check a jepsen-style results folder: every safety violation (one per "
                    "line), liveness and statistics. Exit 0 clean, 1 violations, 2 unreadable.")
    parser.add_argument("results_dir", type=Path, metavar="RESULTS_DIR")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    try:
        report = check(args.results_dir)
    except CheckError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report_json(report), sort_keys=True))
    else:
        print(format_report(report))
    return 1 if report.violations or report.violations_suppressed else 0


if __name__ == "__main__":
    sys.exit(main())
