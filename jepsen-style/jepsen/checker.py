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
  cluster), agent_start_once; `stale_fence_rejected` events are counted; agent_capacity (the
  attempts an agent ran at once fit its capacity) and queued_start_once (an attempt held in an
  agent's local queue starts at most once, never after it left the queue unstarted).
- kills (`jepsen.kills`, on the replay): kill_liveness (every kill owed to an honest agent — an
  attempt the scheduler ended under it — is settled by its report or registration within
  KILL_LIVENESS_BOUND_S of replicated time while its cluster is READY), hostile_no_kills (the
  hostile-agent fault's cluster never holds a kill directive).
- task data (`jepsen.checks_outputs`, on the replay): outputs_from_succeeded_fence (every
  output kept on an attempt belongs to a SUCCEEDED attempt and names its fence; a fan-out job's
  `ls`, `map[i]` and `reduce` kept the items, each item, their count and sum).
- the `liveness` event and the replayed final state: liveness_met, pending jobs.
- several scheduler groups (meta.json "groups" K > 1; `jepsen.checks_groups`): every check
  above that reads a log runs once per group over that group's replicas, operations, ledger
  lines and agent events (a fence is one group's), its findings prefixed "group g: ";
  job_one_group (no job id in two groups' logs) and job_group_shard (a job is in the log of
  the group its id's shard names); liveness over every group.
Also: fsm_apply (the FSM raised while replaying: the replay stops there) and history_format (a
line of the history that is not JSON or not the schema, but for a torn last line).

One module per property family: `checks_history` (findings, report, the history),
`checks_replay` (log agreement, the replay, digests), `checks_submits` (submits and idempotency),
`checks_reads` (read order, stale reads), `checks_ledger` (the ledger), `checks_agents` (fences
and attempts in the agents' logs), `checks_capacity` (what the agents ran at once, their local
queues), `checks_liveness` (liveness, timeouts, statistics), `checks_outputs` (task data); this
module runs them all and renders the report.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jepsen.checks_agents import agent_events as agent_events
from jepsen.checks_agents import check_agent_logs
from jepsen.checks_capacity import check_capacity
from jepsen.checks_groups import check_groups, grow_figures
from jepsen.checks_history import (
    MAX_NOTES_SHOWN,
    _event,
    _Findings,
    read_history,
)
from jepsen.checks_history import (
    CheckError as CheckError,
)
from jepsen.checks_history import (
    Report as Report,
)
from jepsen.checks_ledger import check_ledger, read_ledger
from jepsen.checks_liveness import check_liveness, check_timeouts, count_ops, fault_statistics
from jepsen.checks_outputs import check_fanouts
from jepsen.checks_reads import check_read_order, check_stale_reads, collect_reads
from jepsen.checks_replay import _kills_for, _replicas, read_logs, replay
from jepsen.checks_schedules import check_schedules
from jepsen.checks_submits import check_submissions
from raftsched.state.audit import Violation

# --- the whole check ----------------------------------------------------------------------------


def check(results_dir: Path) -> Report:
    """Every check over a results folder; raises CheckError when it cannot be read."""
    if not results_dir.is_dir():
        raise CheckError(f"{results_dir}: not a results folder")
    found = _Findings(results_dir)
    history = read_history(results_dir / "history.jsonl", found)
    replicas = _replicas(results_dir, _event(history, "final"), found)
    groups = _groups(results_dir)
    if groups > 1:
        grown = _meta(results_dir).get("grow") is True
        check_groups(results_dir, history, replicas, groups, found, grown=grown)
        if grown:
            grow_figures(history, found)
        count_ops(history.ops, found)
        fault_statistics(history, found)
        return found.finish()
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
    check_capacity(results_dir / "logs", run, found)
    check_timeouts(history.ops, run, found)
    check_liveness(history, run, found)
    check_schedules(run, found)
    check_fanouts(history.ops, run, found)
    count_ops(history.ops, found)
    fault_statistics(history, found)
    return found.finish()


def _meta(results_dir: Path) -> dict[str, Any]:
    """meta.json, or {} when it cannot be read."""
    try:
        meta = json.loads((results_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _groups(results_dir: Path) -> int:
    """meta.json's "groups" (a run of several scheduler groups), else 1."""
    groups = _meta(results_dir).get("groups", 1)
    return groups if type(groups) is int and groups >= 1 else 1


# --- output -------------------------------------------------------------------------------------


def _grow_row(grow: dict[str, Any]) -> str:
    if not grow.get("done"):
        return f"NOT done ({grow.get('tries')} tries)"
    held = "" if "held_s" not in grow else \
        f", held moving {grow['held_s']:.1f} s with {grow['faults_while_moving']} faults active"
    return (f"{grow.get('moved')} shards, {grow.get('keys_imported')} keys handed over"
            f"{held}, {grow.get('tries')} tries")


def report_json(report: Report) -> dict[str, Any]:
    """The report as a dict ("groups" only for a run of several groups)."""
    whole = asdict(report)
    if not whole["groups"]:
        del whole["groups"]
    if whole["grow"] is None:
        del whole["grow"]
    return whole


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
                 results: Path | None = None, harness_failure: str | None = None,
                 groups: int = 1) -> str:
    """The runner's results: a Markdown table of the headline figures (the README carries the
    latest), then every violation, the notes and the per-check counts."""
    count = len(report.violations) + sum(report.violations_suppressed.values())
    faults = injected if injected is not None else report.faults
    replicas = f"{groups} groups of {nodes} replicas" if groups > 1 else f"{nodes} replicas"
    rows = [("run", f"seed {seed}, {replicas}, {time_s:g} s of faults"
             if time_s is not None else f"seed {seed}, {replicas}")]
    rows += [(f"group {g['group']}: jobs in its log / acknowledged / log entries",
              f"{g['jobs']} / {g['acknowledged_jobs']} / {g['last_index_replayed']}")
             for g in report.groups]
    for f, row in sorted(report.ops.items()):
        rows.append((f"{f}: invoked / ok / fail / info",
                     f"{row['invoked']} / {row['ok']} / {row['fail']} / {row['info']}"
                     + (f" ({row['open']} open)" if row["open"] else "")))
    if report.grow is not None:
        rows.append(("shards moved to the joining group (--grow)", _grow_row(report.grow)))
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
