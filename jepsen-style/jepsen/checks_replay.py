"""Log agreement: the replicas' applied logs, their replay through the pure FSM, the state digests
and the reads compared with the replay, kill figures. (Part of `jepsen.checker`.)"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jepsen.checks_history import (
    LOW_INDEX,
    MAX_UNRECORDED_RUN,
    CheckError,
    Op,
    _dict,
    _Findings,
    _int,
)
from jepsen.checks_outputs import OutputsAudit
from jepsen.kills import KillLiveness
from raftsched.replica.raft.applied_log import AppliedLog, read_applied_log
from raftsched.state import fsm, snapshot
from raftsched.state.audit import LogAuditor
from raftsched.state.commands import CommandError, Tag, decode
from raftsched.state.model import (
    State,
    TaskState,
)

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
    outputs: OutputsAudit = field(default_factory=OutputsAudit)
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
        run.outputs.finish(run.last_index, run.state, found)
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
        run.outputs.after(index, command, run.state, found)
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
