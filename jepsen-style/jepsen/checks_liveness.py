"""Liveness, timeouts and statistics. (Part of `jepsen.checker`.)"""

from __future__ import annotations

import bisect
import json
import math

from jepsen.checks_history import (
    EARLY_TIMEOUT_FRACTION,
    Op,
    _dict,
    _event,
    _Findings,
    _float,
    _History,
)
from jepsen.checks_replay import _list, _Replay
from raftsched.state.model import (
    TERMINAL_JOB_STATES,
    AttemptState,
)

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
            owner = job.tasks[task.instance_of] if task.instance_of >= 0 else task
            described = _dict(tasks.get(owner.spec.id))  # an instance: as its for_each task
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
