"""What the CLI prints: API messages -> JSON documents -> human text.

Two layers, both pure (no I/O, no clock: times are passed in):
- `*_doc` functions turn an API message (a protobuf message, read by field name only, so this
  module imports neither grpc nor the generated code) into the plain dict that `--json` prints.
  Their keys are the CLI's JSON contract (README "CLI"); adding a key is fine, renaming is not.
- `*_text` functions and `table` turn those same dicts into human output, so the two outputs
  cannot disagree. Columns are aligned; numbers are right-aligned; a missing value prints "-".
  Every value from the cluster passes through `visible` (raftsched.state.text) on its way to
  the terminal: a reason, a note, a certificate's subject with a control character (an
  agent's report, a certificate, older state) shows it escaped (`\x1b`, `\n`) and can
  neither move the cursor nor fake a line. `--json` prints the exact text (JSON escapes it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from raftsched.state.text import visible
from raftsched.states import (
    TASK_QUEUED_AT_AGENT,
    TERMINAL_JOB_STATE_NAMES,
    TERMINAL_TASK_STATE_NAMES,
    TaskStateName,
)

TERMINAL_TASK_STATES = TERMINAL_TASK_STATE_NAMES
TERMINAL_JOB_STATES = TERMINAL_JOB_STATE_NAMES
TASK_STATE_ORDER: tuple[str, ...] = (
    TaskStateName.SUCCEEDED, TaskStateName.FAILED, TaskStateName.SKIPPED, TaskStateName.CANCELLED,
    TaskStateName.RUNNING, TASK_QUEUED_AT_AGENT, TaskStateName.ASSIGNED, TaskStateName.RETRY_WAIT,
    TaskStateName.RUNNABLE, TaskStateName.PENDING,
)
"""Finished states first, then the ones closest to finishing; unknown states sort after these."""
MISSING = "-"
OUTPUTS_LINE_CHARS = 200
"""`task history` shows a task's outputs on one line of at most this many characters."""
COLUMN_GAP = "  "
MILLI = 1000

Doc = dict[str, Any]


# --- documents (the --json contract) ----------------------------------------------------------


def optional_int(message: Any, field: str) -> int | None:
    """A proto3 `optional int32`: None when unset (0 is a real exit code)."""
    return int(getattr(message, field)) if message.HasField(field) else None


def ordered_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Task state -> count in TASK_STATE_ORDER (then alphabetical), zero counts dropped."""
    rank = {state: index for index, state in enumerate(TASK_STATE_ORDER)}
    states = sorted(counts, key=lambda state: (rank.get(state, len(rank)), state))
    return {state: int(counts[state]) for state in states if counts[state]}


def job_doc(job: Any, *, params: bool = True) -> Doc:
    """`job status`: {"job_id", "state", "tasks": {STATE: count}} and the job's other fields
    (`params` too, unless `params=False`: a ListJobs page has none)."""
    document: Doc = {
        "job_id": job.job_id,
        "state": job.state,
        "tasks": ordered_counts(dict(job.tasks)),
        "name": job.name,
        "tenant": job.tenant,
        "priority": job.priority,
        "total_tasks": job.total_tasks,
        "failure_policy": job.failure_policy,
        "submitted_ms": job.submitted_ms,
        "started_ms": job.started_ms,
        "finished_ms": job.finished_ms,
        "reason": job.reason,
        "applied_index": job.applied_index,
        "for_each": [{"task_id": group.task_id, "instances": group.instances,
                      "tasks": ordered_counts(dict(group.tasks))} for group in job.for_each],
        "schedule_id": job.schedule_id,
    }
    if params:
        document["params"] = dict(sorted(job.params.items()))
    return document


def task_doc(task: Any) -> Doc:
    """One row of `job tasks`: {"task_id", "state", "attempts", "cluster", "fence", ...}."""
    return {
        "task_id": task.task_id,
        "state": task.state,
        "attempts": task.attempts,
        "cluster": task.cluster,
        "fence": task.fence,
        "exit_code": optional_int(task, "exit_code"),
        "reason": task.reason,
        "instance_of": task.instance_of or None,
        "instances": optional_int(task, "instances"),
    }


def attempt_doc(attempt: Any) -> Doc:
    return {
        "number": attempt.number,
        "fence": attempt.fence,
        "cluster": attempt.cluster,
        "state": attempt.state,
        "exit_code": optional_int(attempt, "exit_code"),
        "assigned_ms": attempt.assigned_ms,
        "started_ms": attempt.started_ms,
        "finished_ms": attempt.finished_ms,
        "reason": attempt.reason,
        "outputs": outputs_of(attempt),
    }


def outputs_of(message: Any) -> Any:
    """The outputs object a message carries as JSON text (an attempt record or a task
    history), or None when it carries none."""
    return json.loads(message.outputs) if message.HasField("outputs") else None


def note_doc(note: Any) -> Doc:
    return {
        "kind": note.kind,
        "fence": note.fence,
        "report": note.report,
        "at_ms": note.at_ms,
        "detail": note.detail,
    }


def history_doc(history: Any) -> Doc:
    """`task history`: the task's state, every attempt, and late/duplicate report notes."""
    return {
        "job_id": history.job_id,
        "task_id": history.task_id,
        "state": history.state,
        "reason": history.reason,
        "attempts": [attempt_doc(attempt) for attempt in history.attempts],
        "notes": [note_doc(note) for note in history.notes],
        "notes_dropped": history.notes_dropped,
        "app_failures": history.app_failures,
        "infra_failures": history.infra_failures,
        "outputs": outputs_of(history),
    }


def explain_doc(explanation: Any, job_id: str, task_id: str) -> Doc:
    """`task explain`: {"state", "summary", "clusters": [{"cluster", "eligible", "reason"}]}."""
    return {
        "job_id": job_id,
        "task_id": task_id,
        "state": explanation.state,
        "summary": explanation.summary,
        "clusters": [
            {"cluster": verdict.cluster, "eligible": verdict.eligible, "reason": verdict.reason}
            for verdict in explanation.clusters
        ],
    }


def resources_doc(resources: Any) -> Doc:
    return {"cpu_milli": resources.cpu_milli, "memory_mb": resources.memory_mb,
            "gpu": resources.gpu}


def compute_cluster_doc(cluster: Any) -> Doc:
    return {
        "cluster": cluster.cluster_id,
        "status": cluster.status,
        "capabilities": list(cluster.capabilities),
        "capacity": resources_doc(cluster.capacity),
        "reserved": resources_doc(cluster.reserved),
        "incarnation": cluster.incarnation,
        "live_attempts": cluster.live_attempts,
        "pending_kills": cluster.pending_kills,
        "heartbeat_age_ms": cluster.heartbeat_age_ms,
        "draining": cluster.draining,
        "drain_reason": cluster.drain_reason,
        "degraded_until_ms": cluster.degraded_until_ms,
        "reserved_for": cluster.reserved_for,
        "custom": dict(sorted(cluster.custom.items())),
        "custom_reserved": dict(sorted(cluster.custom_reserved.items())),
        "kills_unrecorded": cluster.kills_unrecorded,
        "reported_free": resources_doc(cluster.reported_free)
        if cluster.HasField("reported_free") else None,
        "queue_depth": cluster.queue_depth,
        "queued": cluster.queued,
    }


def tenant_doc(tenant: Any) -> Doc:
    """One tenant's policy and usage (`admin tenant list`, `admin status`)."""
    return {
        "tenant": tenant.tenant,
        "weight": tenant.weight,
        "max_queued": tenant.max_queued,
        "max_running": tenant.max_running,
        "configured": tenant.configured,
        "queued": tenant.queued,
        "running": tenant.running,
        "reserved": resources_doc(tenant.reserved),
        "dominant_share": round(tenant.dominant_share, 4),
    }


def tenants_table(tenants: Sequence[Doc]) -> str:
    rows = [[t["tenant"], t["weight"], t["max_queued"] or "none", t["max_running"] or "none",
             t["queued"], t["running"], f"{t['dominant_share']:.2f}",
             "" if t["configured"] else "defaults"] for t in tenants]
    return table(["TENANT", "WEIGHT", "MAX QUEUED", "MAX RUNNING", "QUEUED", "RUNNING",
                  "SHARE", "POLICY"], rows, right=[1, 2, 3, 4, 5, 6])


def cluster_status_doc(status: Any) -> Doc:
    """`admin status`: {"leader", "term", "replicas", "clusters", "commit_index",
    "applied_index", "responder", "state_index", "state_digest" ("" unless asked for)}."""
    return {
        "leader": status.leader,
        "term": status.term,
        "replicas": [
            {"raft_address": r.raft_address, "grpc_address": r.grpc_address, "leader": r.leader}
            for r in status.replicas
        ],
        "clusters": [compute_cluster_doc(cluster) for cluster in status.clusters],
        "commit_index": status.commit_index,
        "applied_index": status.applied_index,
        "responder": status.responder,
        "state_index": status.state_index,
        "state_digest": status.state_digest,
        "tenants": [tenant_doc(tenant) for tenant in status.tenants],
        "queued_total": status.queued_total,
        "max_queued_tasks": status.max_queued_tasks,
        "now_ms": status.now_ms,
    }


# --- text building blocks ---------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]],
          right: Iterable[int] = ()) -> str:
    """Aligned columns separated by two spaces; columns whose index is in `right` are
    right-aligned. None and "" print as "-". No trailing spaces; no final newline."""
    cells = [[_cell(value) for value in row] for row in rows]
    assert all(len(row) == len(headers) for row in cells), "every row has one cell per header"
    widths = [max([len(header)] + [len(row[i]) for row in cells]) for i, header in
              enumerate(headers)]
    right_set = frozenset(right)

    def line(values: Sequence[str]) -> str:
        parts = [value.rjust(widths[i]) if i in right_set else value.ljust(widths[i])
                 for i, value in enumerate(values)]
        return COLUMN_GAP.join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def _cell(value: object) -> str:
    if value is None or value == "":
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    return visible(str(value))


def format_time_ms(ms: int, tz: tzinfo | None = None, *, now_ms: int | None = None) -> str:
    """"-" for 0 (not happened); HH:MM:SS when on the same day as `now_ms` (or always when
    `now_ms` is None); else YYYY-MM-DD HH:MM:SS. `tz` None means the local time zone."""
    if ms <= 0:
        return MISSING
    moment = datetime.fromtimestamp(ms / MILLI, tz)
    if now_ms is not None and datetime.fromtimestamp(now_ms / MILLI, tz).date() != moment.date():
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.strftime("%H:%M:%S")


def format_duration_ms(ms: int) -> str:
    """1.2s, 3m04s, 2h05m."""
    if ms < 0:
        return MISSING
    seconds = ms / MILLI
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{second:02d}s"
    hours, minute = divmod(minutes, 60)
    return f"{hours}h{minute:02d}m"


def format_cpu_milli(cpu_milli: int) -> str:
    """Cores: 4000 -> "4", 500 -> "0.5"."""
    return f"{cpu_milli / MILLI:g}"


def state_counts_text(counts: Mapping[str, int]) -> str:
    """"SUCCEEDED 3, RUNNING 2, RUNNABLE 2" ("no tasks" when empty)."""
    ordered = ordered_counts(counts)
    return ", ".join(f"{state} {count}" for state, count in ordered.items()) or "no tasks"


def done_and_total(job: Doc) -> tuple[int, int]:
    """(tasks in a terminal state, all tasks) of a job document."""
    counts: Mapping[str, int] = job["tasks"]
    done = sum(count for state, count in counts.items() if state in TERMINAL_TASK_STATES)
    return done, max(int(job.get("total_tasks") or 0), sum(counts.values()))


def exit_code_text(exit_code: int | None) -> str:
    return MISSING if exit_code is None else str(exit_code)


# --- jobs and tasks ---------------------------------------------------------------------------


def progress_line(job: Doc, at: datetime) -> str:
    """`[12:00:01] RUNNING  3/7 done  (SUCCEEDED 3, RUNNING 2, RUNNABLE 2)`."""
    done, total = done_and_total(job)
    return (f"[{at.strftime('%H:%M:%S')}] {job['state']:<8} {done}/{total} done  "
            f"({state_counts_text(job['tasks'])})")


BAR_CELLS = 24
"""Width of `status_line`'s progress bar, in characters."""


def status_line(job: Doc, elapsed_ms: int, width: int) -> str:
    """The line `job watch` redraws in place on a terminal, cut to `width` - 1 columns so that
    it never wraps: `[#########---------------]  3/7  RUNNING  SUCCEEDED 3, RUNNING 2, RUNNABLE
    2  12.0s`."""
    done, total = done_and_total(job)
    filled = BAR_CELLS * done // total if total else 0
    bar = "#" * filled + "-" * (BAR_CELLS - filled)
    line = (f"[{bar}] {done:>{len(str(total))}}/{total}  {job['state']}  "
            f"{state_counts_text(job['tasks'])}  {format_duration_ms(elapsed_ms)}")
    return line[:max(1, width - 1)]


def job_text(job: Doc, tz: tzinfo | None = None, *, now_ms: int | None = None) -> str:
    """`job status`: one field per line."""
    done, total = done_and_total(job)
    times = [("submitted", job["submitted_ms"]), ("started", job["started_ms"]),
             ("finished", job["finished_ms"])]
    rows: list[tuple[str, str]] = [
        ("job", f"{job['job_id']} ({job['name']})" if job.get("name") else job["job_id"]),
        ("state", f"{job['state']}  {done}/{total} tasks done"),
        ("tasks", state_counts_text(job["tasks"])),
        *((f"  {group['task_id']}", f"{group['instances']} instances: "
           f"{state_counts_text(group['tasks'])}") for group in job.get("for_each", ())),
        ("tenant", f"{job['tenant']}  priority {job['priority']}  "
                   f"failure policy {job['failure_policy']}"),
    ]
    rows += [(label, format_time_ms(ms, tz, now_ms=now_ms)) for label, ms in times if ms > 0]
    if job["started_ms"] > 0:
        end_ms = job["finished_ms"] if job["finished_ms"] > 0 else now_ms
        if end_ms is not None:
            rows.append(("elapsed", format_duration_ms(end_ms - job["started_ms"])))
    if job.get("reason"):
        rows.append(("reason", job["reason"]))
    rows += [(f"param {name}", value) for name, value in job.get("params", {}).items()]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {visible(value)}" for label, value in rows)


def jobs_table(jobs: Sequence[Doc], tz: tzinfo | None = None, *,
               now_ms: int | None = None) -> str:
    """`job list`: one line per job."""
    if not jobs:
        return "no jobs"
    rows = []
    for job in jobs:
        done, total = done_and_total(job)
        rows.append([job["job_id"], job.get("name"), job.get("tenant"), job["state"],
                     f"{done}/{total}", format_time_ms(job.get("submitted_ms", 0), tz,
                                                       now_ms=now_ms)])
    return table(["JOB", "NAME", "TENANT", "STATE", "DONE", "SUBMITTED"], rows, right=[4])


def state_counts_line(counts: Mapping[str, int], *, partial: bool = False) -> str:
    """`job list`: "by state: PENDING 3, RUNNING 1, ..." (the states with jobs)."""
    shown = ", ".join(f"{state} {count}" for state, count in counts.items() if count)
    note = " (of the newest jobs examined for the query only)" if partial else ""
    return f"by state: {shown or 'no jobs'}{note}"


def tasks_table(tasks: Sequence[Doc]) -> str:
    """`job tasks` and the end of `submit --watch`: task, state, attempts, cluster, fence, exit
    code, and the reason column when any task has a reason."""
    if not tasks:
        return "no tasks"
    with_reason = any(task.get("reason") for task in tasks)
    headers = ["TASK", "STATE", "ATTEMPTS", "CLUSTER", "FENCE", "EXIT"]
    rows: list[list[object]] = []
    for task in tasks:
        name = task["task_id"]
        if task.get("instance_of"):  # an instance, under its for_each task
            name = "  " + name
        elif task.get("instances") is not None:
            name = f"{name} (for_each: {task['instances']})"
        row: list[object] = [name, task["state"], task["attempts"], task["cluster"],
                             task["fence"] or None, exit_code_text(task.get("exit_code"))]
        if with_reason:
            row.append(task.get("reason"))
        rows.append(row)
    if with_reason:
        headers.append("REASON")
    return table(headers, rows, right=[2, 4, 5])


def history_text(history: Doc, tz: tzinfo | None = None, *, now_ms: int | None = None) -> str:
    """`task history`: the task line, the attempts table, then the report notes."""
    failures = (f"{history['app_failures']} application / {history['infra_failures']} "
                f"infrastructure failure(s)")
    lines = [visible(f"task {history['job_id']}/{history['task_id']}  {history['state']}  "
                     f"({failures})")]
    if history.get("reason"):
        lines.append(f"reason: {visible(history['reason'])}")
    lines.append("")
    lines.append(_attempts_table(history["attempts"], tz, now_ms))
    if history.get("outputs") is not None:
        lines += ["", visible(f"outputs: {outputs_line(history['outputs'])}")]
    notes = history["notes"]
    if notes or history.get("notes_dropped"):
        lines += ["", "reports that changed nothing:"]
        lines += [visible(f"  {note['kind']} {note['report']} report for fence {note['fence']} "
                          f"at {format_time_ms(note['at_ms'], tz, now_ms=now_ms)}"
                          + (f": {note['detail']}" if note.get("detail") else ""))
                  for note in notes]
        if history.get("notes_dropped"):
            lines.append(f"  ... and {history['notes_dropped']} more not kept")
    return "\n".join(lines)


def outputs_line(outputs: Doc) -> str:
    """A task's outputs on one line, cut at OUTPUTS_LINE_CHARS (`task outputs` prints them
    whole)."""
    text = json.dumps(outputs, sort_keys=True, ensure_ascii=False)
    if len(text) <= OUTPUTS_LINE_CHARS:
        return text
    return text[:OUTPUTS_LINE_CHARS] + " ... (raftsched task outputs shows them whole)"


def _attempts_table(attempts: Sequence[Doc], tz: tzinfo | None, now_ms: int | None) -> str:
    if not attempts:
        return "no attempts yet"
    rows = []
    for attempt in attempts:
        end_ms = attempt["finished_ms"] or now_ms
        took = (format_duration_ms(end_ms - attempt["started_ms"])
                if attempt["started_ms"] and end_ms else None)
        rows.append([attempt["number"], attempt["fence"], attempt["cluster"], attempt["state"],
                     exit_code_text(attempt.get("exit_code")),
                     format_time_ms(attempt["assigned_ms"], tz, now_ms=now_ms),
                     format_time_ms(attempt["started_ms"], tz, now_ms=now_ms),
                     format_time_ms(attempt["finished_ms"], tz, now_ms=now_ms),
                     took, attempt.get("reason")])
    headers = ["#", "FENCE", "CLUSTER", "STATE", "EXIT", "ASSIGNED", "STARTED", "FINISHED",
               "TOOK", "REASON"]
    return table(headers, rows, right=[0, 1, 4, 8])


def explain_text(explanation: Doc) -> str:
    """`task explain`: the state and summary, then each cluster's verdict."""
    summary = explanation["summary"]
    state = explanation["state"]
    lines = [visible(f"{state}: {summary}" if summary and summary != state else state)]
    if explanation["clusters"]:
        rows = [[verdict["cluster"], verdict["eligible"], verdict["reason"]]
                for verdict in explanation["clusters"]]
        lines += ["", table(["CLUSTER", "ELIGIBLE", "WHY NOT"], rows)]
    return "\n".join(lines)


# --- admin and dev cluster --------------------------------------------------------------------


def cluster_status_text(status: Doc) -> str:
    """`admin status`: leadership, the replicas, the compute clusters."""
    leader = status["leader"] or "unknown (no leader known to this replica)"
    lines = [visible(f"leader {leader}  term {status['term']}  commit index "
                     f"{status['commit_index']}  applied {status['applied_index']}  (answered "
                     f"by {status['responder'] or '?'})")]
    if status.get("state_digest"):
        lines.append(f"state digest {status['state_digest']} at index {status['state_index']}")
    lines.append("")
    replicas = [[r["raft_address"], r["grpc_address"], "leader" if r["leader"] else "follower"]
                for r in status["replicas"]]
    lines.append(table(["REPLICA (RAFT)", "GRPC", "ROLE"], replicas) if replicas
                 else "no replicas known")
    lines.append("")
    lines.append(compute_clusters_table(status["clusters"], status.get("now_ms", 0))
                 if status["clusters"] else "no compute clusters registered")
    notes = [_cluster_note(cluster, status.get("now_ms", 0)) for cluster in status["clusters"]]
    lines.extend(note for note in notes if note)
    lines.append("")
    lines.append(f"queued tasks {status.get('queued_total', 0)} of at most "
                 f"{status.get('max_queued_tasks', 0)} (MAX_QUEUED_TASKS)")
    if status.get("tenants"):
        lines.append(tenants_table(status["tenants"]))
    return "\n".join(lines)


def _cluster_note(cluster: Doc, now_ms: int) -> str:
    """A line for a cluster that takes no new work, or keeps its room for one task."""
    parts = []
    if cluster.get("draining"):
        why = f" ({cluster['drain_reason']})" if cluster.get("drain_reason") else ""
        parts.append(f"draining{why}: no new work until `raftsched admin undrain`")
    if cluster.get("degraded_until_ms", 0) > now_ms:
        parts.append(f"degraded (attempts of many tasks failed there) for another "
                     f"{format_duration_ms(cluster['degraded_until_ms'] - now_ms)}")
    if cluster.get("kills_unrecorded"):
        parts.append(f"{cluster['kills_unrecorded']} kill(s) owed could not be recorded: its "
                     f"agent left {cluster['pending_kills']} unconfirmed "
                     "(MAX_KILL_DIRECTIVES_PER_CLUSTER); no new work until it confirms them "
                     "and registers again")
    if cluster.get("reserved_for"):
        parts.append(f"reserved for {cluster['reserved_for']} (a large task that waited for "
                     "room)")
    if cluster.get("queued"):
        parts.append(f"{cluster['queued']} attempt(s) queued at its agent beyond its room (of "
                     f"queue_depth {cluster.get('queue_depth', 0)}): each starts the moment a "
                     "slot frees there")
    if cluster.get("custom"):
        held = cluster.get("custom_reserved", {})
        parts.append("custom resources " + ", ".join(
            f"{name} {held.get(name, 0)}/{total} in use"
            for name, total in cluster["custom"].items()))
    return visible(f"cluster {cluster['cluster']}: {'; '.join(parts)}") if parts else ""


def compute_clusters_table(clusters: Sequence[Doc], now_ms: int = 0) -> str:
    rows = []
    for cluster in clusters:
        capacity, reserved = cluster["capacity"], cluster["reserved"]
        age_ms = cluster["heartbeat_age_ms"]
        status = cluster["status"]
        if cluster.get("draining"):
            status += " (draining)"
        elif cluster.get("kills_unrecorded"):
            status += " (kills unrecorded)"
        elif cluster.get("degraded_until_ms", 0) > now_ms:
            status += " (degraded)"
        rows.append([
            cluster["cluster"], status, ",".join(cluster["capabilities"]),
            f"{format_cpu_milli(reserved['cpu_milli'])}/{format_cpu_milli(capacity['cpu_milli'])}",
            f"{reserved['memory_mb']}/{capacity['memory_mb']}",
            f"{reserved['gpu']}/{capacity['gpu']}",
            cluster["live_attempts"],
            f"{format_duration_ms(age_ms)} ago" if age_ms >= 0 else None,
        ])
    headers = ["CLUSTER", "STATUS", "CAPABILITIES", "CPU USED", "MEMORY MB USED", "GPU USED",
               "LIVE", "HEARTBEAT"]
    return table(headers, rows, right=[3, 4, 5, 6])


def dev_cluster_text(cluster: Doc) -> str:
    """`dev up` / `dev status`: the processes of a local dev cluster and how to use it."""
    grouped = len({r.get("group", 0) for r in cluster["replicas"]}) > 1
    replicas = [[r["id"], *([_group(r)] if grouped else []), r["pid"], _alive(r["alive"]),
                 r["address"], r["raft_address"],
                 "leader" if r["leader"] else ("follower" if r["alive"] else None)]
                for r in cluster["replicas"]]
    with_resources = any(a.get("resources") for a in cluster["agents"])
    agents = [[a["cluster"], a["pid"], _alive(a["alive"]), _executor(a),
               ",".join(a.get("capabilities", [])),
               *([_resources(a.get("resources", {}))] if with_resources else []),
               a.get("status")] for a in cluster["agents"]]
    lines = [table(["REPLICA", *(["GROUP"] if grouped else []), "PID", "PROCESS", "GRPC", "RAFT",
                    "ROLE"], replicas, right=[2] if grouped else [1])]
    if agents:
        headers = ["AGENT", "PID", "PROCESS", "EXECUTOR", "CAPABILITIES",
                   *(["RESOURCES"] if with_resources else []), "STATUS"]
        lines += ["", table(headers, agents, right=[1])]
    slurm = cluster.get("slurm")
    if slurm:
        daemons = [[d["name"], d["pid"], _alive(d["alive"]), d["log"]] for d in slurm["daemons"]]
        lines += ["", table(["SLURM DAEMON", "PID", "PROCESS", "LOG"], daemons, right=[1])]
    groups = cluster.get("groups", [cluster["servers"]])
    lines += ["", f"dir:     {cluster['dir']}  (logs in {cluster['dir']}/logs)",
              f"servers: {';'.join(','.join(group) for group in groups)}"]
    if slurm:
        lines.append(f"slurm:   partition {slurm['partition']}; client commands need "
                     f"SLURM_CONF={slurm['conf']}")
    user_tls = cluster.get("user_tls")
    if cluster.get("insecure"):
        lines.append("tls:     none: plaintext, no authentication (--insecure-dev)")
    elif user_tls:
        lines.append(f"tls:     mutual; your certificate {user_tls['cert']} (CA {user_tls['ca']})")
    return "\n".join(lines)


def dev_agent_text(agent: Doc) -> str:
    """`dev add-agent`: the agent it started (an agent of `dev_cluster_text`'s document)."""
    row = [agent["cluster"], agent["pid"], _alive(agent["alive"]),
           ",".join(agent["capabilities"]), agent["cpu"], agent["memory_mb"],
           agent["gpu"], agent["status"]]
    return "\n".join([
        table(["AGENT", "PID", "PROCESS", "CAPABILITIES", "CPU", "MEMORY MB", "GPU", "STATUS"],
              [row], right=[1, 4, 5, 6]),
        "", f"executor:  {_executor(agent)}",
        f"resources: {_resources(agent.get('resources', {})) or 'none'}",
        f"log:       {agent['log']}", f"data:      {agent['data_dir']}",
        f"metrics:   127.0.0.1:{agent['metrics_port']}"])


def _group(replica: Doc) -> str:
    """A replica's group, `N joining` while `dev add-group` has not given it shards."""
    return f"{replica['group']}{' joining' if replica.get('joining') else ''}"


def _alive(alive: bool) -> str:
    return "alive" if alive else "DEAD"


def _executor(agent: Doc) -> str:
    """mock, subprocess, or `slurm:PARTITION`."""
    executor = str(agent.get("executor") or "")
    partition = agent.get("slurm_partition")
    return f"{executor}:{partition}" if partition else executor


def _resources(resources: Mapping[str, int]) -> str:
    return ",".join(f"{name}={count}" for name, count in resources.items())
