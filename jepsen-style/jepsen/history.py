"""The run's history: one JSON object per line in `history.jsonl`, Jepsen semantics.

Every line has:
  "i"        sequence number in the file (0, 1, 2, ...)
  "t"        seconds since the run started (monotonic clock of the harness)
  "process"  the client's number (int), "nemesis", "harness", or "agent:<cluster>"
  "type"     "invoke", then exactly one of "ok" (it happened), "fail" (it certainly did not
             happen) or "info" (outcome unknown: a timeout, a lost connection, a leader change);
             "event" for lines that are not operations (faults, final observations)
  "f"        what: "submit", "cancel", "read" for clients; "fault" for the nemesis; "final",
             "liveness" for the harness; "agent" for agent events
  "op"       operation id, shared by an invoke and its completion (absent on events)
  "value"    a dict, by f and type:

  submit invoke  {"key": idempotency key, unique per logical job, "tenant": str,
                  "long": true for a long job (one task its client cancels after the ack),
                  "try": 1 for the first call of that key, 2+ for retries after info,
                  "failure_policy": str,
                  "fanout": {"items": [ints]} for a fan-out job (ls -> map[i] -> reduce; the
                            instances map[i] are described once, as "map", with "fail_first":
                            the indexes that fail their first attempt),
                  "tasks": {task_id: {"depends_on": [ids], "fail_attempts": n, "max_attempts": n,
                                      "run_s": seconds it runs, "timeout_s": its timeout}}}
  submit ok      {"key", "job_id", "created": bool}
  submit fail/info {"key", "error": code name, "message": str}
  cancel invoke  {"job_id"}            ok {"job_id", "cancelled": bool}
  cancel fail/info {"job_id", "error", "message"}
  read invoke    {"job_id"}
  read ok        {"job_id", "state": job state name, "tasks": {task state name: count},
                  "applied_index": int (the Raft index the view reflects)}
  read fail/info {"job_id", "error", "message"}
  fault event    {"kind": fault kind, "phase": "start" | "end", "targets": [node names], ...}
  hostile event  process "nemesis", at the end of a hostile-agent fault: {"cluster",
                 "registers", "claimed", "told_to_stop", "kills_recorded", "refused": {why: n}}
  cleanup event  {"long_jobs_not_cancelled": [job ids]}: after the heal the harness cancels
                 the long jobs the clients left running
  final event    {"replicas": [{"name", "applied_index", "state_index", "state_digest", "term",
                   "applied_log": path relative to the results dir}]}
  liveness event {"bound_s", "waited_s", "met": bool, "pending": [job ids not terminal]}
  agent event    process "agent:<cluster>", copied from the agent's log after the run:
                 {"event": attempt_started | attempt_finished | attempt_adopted |
                  stale_fence_rejected | agent_registered | report_verdict, "where": file:line,
                  and the log line's fields (fence, job, task, ..., ts: the agent's wall clock)}

With several scheduler groups (`run --groups K`, K > 1) a few values say which group:
  submit invoke  also "group": the group of its (tenant, key) (`raftsched.topology`)
  read/cancel invoke  also "group": the group of its job id's shard
  fault event    a replica fault's start also has "group": the group it hit
  schedule event also "group"; final event: each replica also "group"
  start event    also "leaders": each group's leader

The one reader of this file is `jepsen.checks_history.read_history` (it checks every line's
shape, drops a torn last line and pairs each invoke with its completion).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO


class History:
    """Thread-safe JSONL writer; every line is flushed (a crash of the harness keeps the
    history up to that point)."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._lock = threading.Lock()
        self._seq = 0
        self._ops = 0
        self._start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._start

    def _write(self, record: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            record = {"i": self._seq, "t": round(self.now(), 6), **record}
            self._seq += 1
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()
        return record

    def invoke(self, process: int, f: str, value: dict[str, Any]) -> int:
        with self._lock:
            self._ops += 1
            op = self._ops
        self._write({"process": process, "type": "invoke", "f": f, "op": op, "value": value})
        return op

    def complete(self, process: int, op: int, kind: str, f: str, value: dict[str, Any]) -> None:
        assert kind in ("ok", "fail", "info"), kind
        self._write({"process": process, "type": kind, "f": f, "op": op, "value": value})

    def event(self, process: str, f: str, value: dict[str, Any]) -> dict[str, Any]:
        return self._write({"process": process, "type": "event", "f": f, "value": value})

    def close(self) -> None:
        with self._lock:
            self._file.close()
