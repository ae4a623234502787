"""Reads: their order and staleness. (Part of `jepsen.checker`.)"""

from __future__ import annotations

from typing import Any

from jepsen.checks_history import (
    _TERMINAL_JOB_NAMES,
    _TERMINAL_TASK_NAMES,
    Op,
    _dict,
    _Findings,
    _History,
    _int,
)
from jepsen.checks_replay import _counts, _Read, _Replay
from raftsched.states import JobStateName

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
    running = read.state == JobStateName.RUNNING
    rank = 2 if read.state in _TERMINAL_JOB_NAMES else 1 if running else 0
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
