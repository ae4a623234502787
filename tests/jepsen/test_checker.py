"""The jepsen-style checker and the log auditor, on results folders built from real logs.

`Run` drives the real state machine (tests/support/fsmkit.py) and records what a jepsen-style run
would:
each replica's applied log (with pysyncobj's own no-op entries as empty records), the history, the
ledger the tasks append to and the agents' logs. A clean run must give no violation; each test
after it corrupts exactly one thing and expects exactly the check that names it. Properties a
correct state machine can never break are shown by feeding `LogAuditor` fabricated outcomes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from raftsched import eventlog, limits
from raftsched.protocol import ReportVerdict
from raftsched.replica.raft.applied_log import AppliedLogWriter
from raftsched.state import assign, fsm, snapshot
from raftsched.state import commands as c
from raftsched.state.audit import LogAuditor
from raftsched.state.model import Attempt, AttemptState, TaskState
from raftsched.state.outcome import Applied, Outcome
from raftsched.state.results import AssignResult, JobSubmitted, ReportResult
from tests.support import paths
from tests.support.fsmkit import Harness, job_doc, task_doc

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen import checker


class Run:
    """A small run: the real FSM's log plus the history, ledger and agent logs around it."""

    def __init__(self) -> None:
        self.h = Harness()
        self.log: list[tuple[int, bytes]] = [(1, b""), (2, b"")]
        self.synced = 0
        """Entries of the harness's log already copied into `log`."""
        self.index = 2
        """Last Raft index used: 1 is pysyncobj's first entry, 2 the first leader's no-op."""
        self.records: list[dict[str, Any]] = []
        self.t = 0.0
        self.op = 0
        self.ledger: list[str] = []
        self.agents: dict[str, list[str]] = {"east": [], "west": []}
        self.marks: dict[str, tuple[int, str]] = {}

    # -- the log ----------------------------------------------------------------------------------
    def sync(self) -> None:
        for entry in self.h.log[self.synced:]:
            self.index += 1
            self.log.append((self.index, entry))
        self.synced = len(self.h.log)

    def election(self) -> None:
        """A new leader's no-op: an empty record in every applied log."""
        self.sync()
        self.noop()

    def noop(self) -> None:
        self.index += 1
        self.log.append((self.index, b""))

    def mark(self, name: str) -> None:
        self.sync()
        self.marks[name] = (self.index, snapshot.digest(self.h.state))

    def commands(self) -> int:
        """Entries for the state machine (not pysyncobj's own empty ones)."""
        return sum(1 for _, entry in self.log if entry)

    def last_command_index(self) -> int:
        return next(index for index, entry in reversed(self.log) if entry)

    # -- the history ------------------------------------------------------------------------------
    def record(self, process: Any, kind: str, f: str, value: dict[str, Any],
               op: int | None = None) -> dict[str, Any]:
        self.t += 0.25
        record = {"i": len(self.records), "t": round(self.t, 3), "process": process,
                  "type": kind, "f": f, "value": value}
        if op is not None:
            record["op"] = op
        self.records.append(record)
        return record

    def invoke(self, process: int, f: str, value: dict[str, Any]) -> int:
        self.op += 1
        self.record(process, "invoke", f, value, self.op)
        return self.op

    def submit(self, process: int, job_id: str, key: str, tenant: str,
               tasks: list[dict[str, Any]], attempt: int = 1, reply: str = "ok",
               described_extra: dict[str, Any] | None = None) -> None:
        described = {t["id"]: {"depends_on": t["depends_on"], **(described_extra or {})}
                     for t in tasks}
        op = self.invoke(process, "submit", {"key": key, "tenant": tenant, "try": attempt,
                                             "tasks": described})
        if reply == "fail":
            self.record(process, "fail", "submit",
                        {"key": key, "error": "INVALID_ARGUMENT", "message": "bad"}, op)
            return
        result = self.h.expect(c.JobSubmit(job_id, _wire(tasks, tenant, key), self.h.now_ms),
                               JobSubmitted)
        self.sync()
        if reply == "info":
            self.record(process, "info", "submit",
                        {"key": key, "error": "DEADLINE_EXCEEDED", "message": "timeout"}, op)
        else:
            self.record(process, "ok", "submit",
                        {"key": key, "job_id": result.job_id, "created": result.created}, op)

    def view(self, job_id: str) -> dict[str, Any]:
        self.sync()
        job = self.h.job(job_id)
        return {"job_id": job_id, "state": job.state.name, "applied_index": self.index,
                "tasks": {TaskState(s).name: n for s, n in enumerate(job.counts) if n}}

    def read(self, process: int, job_id: str, view: dict[str, Any] | None = None) -> None:
        shown = view if view is not None else self.view(job_id)
        op = self.invoke(process, "read", {"job_id": job_id})
        self.record(process, "ok", "read", shown, op)

    def fault(self, kind: str, phase: str, targets: list[str]) -> None:
        self.record("nemesis", "event", "fault",
                    {"kind": kind, "phase": phase, "targets": targets})

    # -- tasks and agents -------------------------------------------------------------------------
    def run_attempt(self, cluster: str, job_id: str, task_id: str, exit_code: int = 0,
                    *, end: bool = True) -> int:
        fence = self.h.assign_one(job_id, task_id, cluster)
        attempt = self.h.current(job_id, task_id).number
        self.agents[cluster].append(agent_line("attempt_started", fence=fence, job=job_id,
                                               task=task_id, attempt=attempt, pid=4242))
        self.ledger.append(f"start {job_id}/{task_id} {fence} {job_id} {task_id} {attempt}")
        assert self.h.started(cluster, job_id, task_id, fence) == "accepted"
        if end:
            self.end(job_id, task_id, fence, exit_code, cluster)
            assert self.h.finished(cluster, job_id, task_id, fence, exit_code) == "accepted"
        self.sync()
        return fence

    def end(self, job_id: str, task_id: str, fence: int, exit_code: int,
            cluster: str = "") -> None:
        """The task's ledger end line, and its agent's `attempt_finished` when `cluster` is
        named (an agent that is cut off or gone logs none)."""
        attempt = next(a.number for a in self.h.task(job_id, task_id).attempts
                       if a.fence == fence)
        self.ledger.append(f"end {job_id}/{task_id} {fence} {job_id} {task_id} {attempt} "
                           f"{exit_code}")
        if cluster:
            self.agents[cluster].append(agent_line(
                "attempt_finished", fence=fence, job=job_id, task=task_id,
                report="FINISHED" if exit_code == 0 else "FAILED", exit_code=exit_code))

    # -- the folder -------------------------------------------------------------------------------
    def final(self, lagging: str = "r2") -> None:
        self.sync()
        index, digest = self.last_command_index(), snapshot.digest(self.h.state)
        replicas = [{"name": name, "applied_index": self.index, "state_index": index,
                     "state_digest": digest, "term": 3,
                     "applied_log": f"replicas/{name}/applied.log"} for name in ("r0", "r1")]
        lag_index, lag_digest = self.marks[lagging]
        replicas.append({"name": lagging, "applied_index": lag_index, "state_index": lag_index,
                         "state_digest": lag_digest, "term": 3,
                         "applied_log": f"replicas/{lagging}/applied.log"})
        self.record("harness", "event", "final", {"replicas": replicas})

    def write(self, root: Path) -> Path:
        lag_index = self.marks["r2"][0]
        logs = {"r0": self.log, "r1": self.log + self.log[-3:],  # r1 restarted: re-applied
                "r2": [(i, e) for i, e in self.log if i <= lag_index]}
        for name, entries in logs.items():
            (root / "replicas" / name).mkdir(parents=True)
            writer = AppliedLogWriter(str(root / "replicas" / name / "applied.log"))
            for index, entry in entries:
                writer.append(index, entry)
            writer.close()
        (root / "history.jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records))
        (root / "ledger.txt").write_text("".join(line + "\n" for line in self.ledger)
                                         + "start j1/a 1 j1")  # a torn last line
        (root / "logs").mkdir()
        for cluster, lines in self.agents.items():
            (root / "logs" / f"agent-{cluster}.log").write_text(
                agent_line("agent_starting", cluster=cluster) + "\n"
                + "".join(line + "\n" for line in lines))
        (root / "meta.json").write_text(json.dumps({"seed": 1, "nodes": 3}))
        return root


def agent_line(event: str, **fields: object) -> str:
    """One line of an agent's log, written by the real formatter."""
    record = logging.LogRecord("agent", logging.INFO, __file__, 1, event, None, None)
    record.event = event
    record.fields = fields
    return eventlog.JsonFormatter().format(record)


def _wire(tasks: list[dict[str, Any]], tenant: str, key: str) -> list[Any]:
    from raftsched.spec.wire import doc_to_wire

    return doc_to_wire(job_doc(tasks, tenant=tenant, idempotency_key=key))


J1 = [task_doc("a"), task_doc("b", ["a"])]
J2 = [task_doc("x", retry={"max_attempts": 2, "backoff_s": 0.2})]
J3 = [task_doc("y")]


def clean_run() -> Run:
    """Three jobs: a two-task DAG; a retried task whose first submit timed out; a task whose
    cluster was lost while it ran (a zombie finishes after its replacement)."""
    run = Run()
    run.h.register("east")
    run.h.register("west")
    run.record("harness", "event", "start", {"leader": "r0"})
    run.submit(0, "j1", "k1", "alpha", J1)
    fence = run.run_attempt("east", "j1", "a", end=False)
    run.read(0, "j1")
    run.end("j1", "a", fence, 0, "east")
    run.h.finished("east", "j1", "a", fence)
    run.election()
    run.run_attempt("east", "j1", "b")
    run.read(0, "j1")
    run.submit(1, "j2", "k2", "beta", J2, reply="info")
    run.submit(1, "j2-retry", "k2", "beta", J2, attempt=2)  # same key: job j2, created False
    run.mark("r2")
    run.run_attempt("east", "j2", "x", exit_code=1)
    run.h.tick(60_000)
    run.run_attempt("east", "j2", "x")
    run.submit(2, "j3", "k3", "alpha", J3)
    run.fault("agent-cut", "start", ["west"])
    lost = run.run_attempt("west", "j3", "y", end=False)
    run.h.status("west", c.ClusterStatus.LOST)
    run.agents["west"].append(agent_line("stale_fence_rejected", fence=lost, job="j3", task="y",
                                         seen=99))
    run.run_attempt("east", "j3", "y")
    run.end("j3", "y", lost, 0)  # the zombie on the lost cluster finishes late
    run.fault("agent-cut", "end", ["west"])
    run.read(2, "j3")
    run.fault("kill-leader", "start", ["r0"])
    run.fault("kill-leader", "end", ["r0"])
    run.read(2, "j2")
    run.submit(0, "never", "k4", "alpha", J3, reply="fail")
    run.final()
    run.record("harness", "event", "liveness",
               {"bound_s": 60, "waited_s": 0.5, "met": True, "pending": []})
    return run


def checks(report: checker.Report) -> set[str]:
    return {v.check for v in report.violations}


@pytest.fixture
def run() -> Run:
    return clean_run()


# --- a clean run --------------------------------------------------------------------------------


def test_a_clean_run_has_no_violations(run: Run, tmp_path: Path) -> None:
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    assert report.liveness_met and report.liveness_pending == []
    assert report.replay_complete
    assert report.entries_replayed == run.commands()
    assert report.unrecorded_indices == 0
    assert report.duplicate_executions == 1  # the LOST attempt overlapped its replacement
    assert report.external_duplicate_effects == 1
    assert report.stale_fence_rejections == 1
    assert report.reads_compared == 4
    assert report.ledger_starts == 6 and report.ledger_unended == 0
    assert report.ops["submit"] == {"invoked": 5, "ok": 3, "fail": 1, "info": 1, "open": 0}
    assert report.faults == {"agent-cut": 1, "kill-leader": 1}
    assert report.recovery_s == [0.5, 0.5] and report.recovery_max_s == 0.5
    assert report.replicas["r1"]["reapplied"] == 3
    for name in ("fence_unique", "dag_order", "retry_bounds", "report_fence_current",
                 "success_once", "capacity", "idempotency_key_unique", "fsm_invariants",
                 "log_agreement", "replica_digest", "read_matches_log", "read_monotonic",
                 "stale_read", "submit_acked_present", "submit_failed_absent",
                 "ledger_fence_once", "ledger_fence_committed", "ledger_dag_order",
                 "ledger_overlap", "agent_start_assigned", "placement_open",
                 "reservation_respected", "tenant_running_limit", "retry_budget"):
        assert report.invariants_checked.get(name, 0) > 0, name


def test_cli_prints_one_line_per_violation_and_exit_codes(run: Run, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    root = run.write(tmp_path / "clean")
    assert checker.main([str(root)]) == 0
    assert "safety: OK" in capsys.readouterr().out
    assert checker.main([str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["violations"] == [] and out["liveness_met"] is True
    assert out["ops"]["submit"]["ok"] == 3 and out["entries_replayed"] == run.commands()
    ack = next(r for r in run.records if r["type"] == "ok" and r["op"] == 1)
    run.records.append({**ack, "i": len(run.records)})  # a second completion of op 1
    bad = run.write(tmp_path / "bad")
    assert checker.main([str(bad)]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("VIOLATION")]
    assert lines == [f"VIOLATION [history_format] i={len(run.records) - 1}: ok of op 1 without "
                     f"an open invoke of submit"]


def test_an_unreadable_folder_is_one_error_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert checker.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert checker.main([str(tmp_path / "empty")]) == 2
    assert "no history" in capsys.readouterr().err


# --- one corruption, one check ------------------------------------------------------------------


def test_a_lost_acknowledged_submission(run: Run, tmp_path: Path) -> None:
    op = run.invoke(3, "submit", {"key": "k9", "tenant": "alpha", "try": 1, "tasks": {}})
    run.record(3, "ok", "submit", {"key": "k9", "job_id": "ghost", "created": True}, op)
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"submit_acked_present"}
    assert "ghost, which is in no log" in report.violations[0].message
    assert report.liveness_pending == ["ghost"] and not report.liveness_met


def test_a_failed_submission_that_is_in_the_log(run: Run, tmp_path: Path) -> None:
    for record in run.records:
        if record["f"] == "submit" and record["value"].get("key") == "k3" \
                and record["type"] == "ok":
            record["type"], record["value"] = "fail", {"key": "k3", "error": "NOT_FOUND"}
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"submit_failed_absent"}
    assert "created job j3" in report.violations[0].message


def test_two_acknowledgements_naming_different_jobs(run: Run, tmp_path: Path) -> None:
    op = run.invoke(1, "submit", {"key": "k2", "tenant": "beta", "try": 3, "tasks": {}})
    run.record(1, "ok", "submit", {"key": "k2", "job_id": "j1", "created": False}, op)
    report = checker.check(run.write(tmp_path))
    # j1 was created under another key: the ack is inconsistent and names a job not of k2.
    assert checks(report) == {"submit_ack_consistent", "submit_acked_present"}


def test_two_jobs_for_one_key_after_the_key_expired(tmp_path: Path) -> None:
    run = clean_run()
    run.records = [r for r in run.records if r["f"] not in ("final", "liveness")]
    run.h.tick(limits.IDEMPOTENCY_TTL_MS)  # the FSM forgets k1: a retry creates a new job
    run.submit(0, "j1-again", "k1", "alpha", J1, attempt=2)
    run.final()
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"submit_ack_consistent", "submit_one_job_per_key"}
    assert "created 2 jobs: j1 at log index" in next(
        v.message for v in report.violations if v.check == "submit_one_job_per_key")


def test_differing_entries_at_one_index_across_replicas(run: Run, tmp_path: Path) -> None:
    root = run.write(tmp_path)
    index = run.log[5][0]
    (root / "replicas" / "r3").mkdir()
    writer = AppliedLogWriter(str(root / "replicas" / "r3" / "applied.log"))
    writer.append(index, c.encode(c.Tick(1, 7)))
    writer.close()
    report = checker.check(root)
    assert checks(report) == {"log_agreement"}
    assert f"log index {index}: replica r0 applied" in report.violations[0].message


def test_differing_entries_at_one_index_within_one_file(run: Run, tmp_path: Path) -> None:
    root = run.write(tmp_path)
    writer = AppliedLogWriter(str(root / "replicas" / "r1" / "applied.log"))
    writer.append(run.log[2][0], c.encode(c.Tick(1, 1)))
    writer.close()
    report = checker.check(root)
    assert checks(report) == {"log_agreement"}
    assert "replica r1 applied two different entries" in report.violations[0].message


def test_a_wrong_state_digest(run: Run, tmp_path: Path) -> None:
    final = next(r for r in run.records if r["f"] == "final")
    final["value"]["replicas"][1]["state_digest"] = "0123456789abcdef"
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"replica_digest"}
    messages = " | ".join(v.message for v in report.violations)
    assert "replica r1 reports digest 0123456789abcdef" in messages
    assert "replicas at state_index" in messages  # and r0, at the same index, disagrees


def test_a_stale_read(run: Run, tmp_path: Path) -> None:
    early = next(r["value"] for r in run.records if r["f"] == "read" and r["type"] == "ok")
    run.read(5, "j1", early)  # invoked after j3 was acknowledged, shows the log before it
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"stale_read"}
    assert "acknowledged before the read began" in report.violations[0].message


def test_a_not_found_read_of_an_acknowledged_job(run: Run, tmp_path: Path) -> None:
    op = run.invoke(5, "read", {"job_id": "j3"})
    run.record(5, "fail", "read", {"job_id": "j3", "error": "NOT_FOUND", "message": "x"}, op)
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"stale_read"}


def test_a_read_going_backwards(run: Run, tmp_path: Path) -> None:
    older = run.view("j2")
    run.noop()  # the same state at a higher index
    run.read(6, "j2")
    run.read(6, "j2", older)
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"read_monotonic"}
    assert f"applied_index went from {older['applied_index'] + 1}" in \
        report.violations[0].message


def test_a_read_that_disagrees_with_the_log(run: Run, tmp_path: Path) -> None:
    view = run.view("j1")
    run.read(7, "j1", {**view, "tasks": {"SUCCEEDED": 1, "RUNNING": 1}, "state": "RUNNING"})
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"read_matches_log"}
    assert "the log gives SUCCEEDED {SUCCEEDED: 2}" in report.violations[0].message


def _move(lines: list[str], prefix: str, before: str) -> None:
    line = next(x for x in lines if x.startswith(prefix))
    lines.remove(line)
    lines.insert(lines.index(next(x for x in lines if x.startswith(before))), line)


def test_overlapping_attempts_without_a_lost_one(run: Run, tmp_path: Path) -> None:
    fences = [a.fence for a in run.h.task("j2", "x").attempts]
    _move(run.ledger, f"end j2/x {fences[0]} ", f"end j2/x {fences[1]} ")
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"ledger_overlap"}
    assert f"fence {fences[0]} ended FAILED in the log, not LOST" in report.violations[0].message


def test_a_fence_started_twice(run: Run, tmp_path: Path) -> None:
    fence = run.h.task("j1", "a").attempts[0].fence
    run.ledger.append(f"start j1/a {fence} j1 a 1")
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"ledger_fence_once"}


def test_a_downstream_start_before_its_upstream_ended(run: Run, tmp_path: Path) -> None:
    fence_a = run.h.task("j1", "a").attempts[0].fence
    _move(run.ledger, "start j1/b ", f"end j1/a {fence_a} ")
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"ledger_dag_order"}
    assert "before upstream a had a successful end line" in report.violations[0].message


def test_a_ledger_start_of_an_uncommitted_fence(run: Run, tmp_path: Path) -> None:
    run.ledger.append("start j1/a 999 j1 a 9")
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"ledger_fence_committed"}


def test_two_successful_effects_without_a_lost_attempt(run: Run, tmp_path: Path) -> None:
    fences = [a.fence for a in run.h.task("j2", "x").attempts]
    run.ledger[run.ledger.index(next(x for x in run.ledger
                                     if x.startswith(f"end j2/x {fences[0]} ")))] = \
        f"end j2/x {fences[0]} j2 x 1 0"
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"ledger_duplicate_effect"}
    assert report.external_duplicate_effects == 2


def test_a_malformed_ledger_line_in_the_middle(run: Run, tmp_path: Path) -> None:
    run.ledger.insert(2, "start j1/b")
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"ledger_format"}
    assert "ledger line 3 is malformed" in report.violations[0].message


def test_an_agent_starting_a_fence_of_another_cluster(run: Run, tmp_path: Path) -> None:
    fence = run.h.task("j1", "a").attempts[0].fence
    run.agents["west"].append(agent_line("attempt_started", fence=fence, job="j1", task="a",
                                         attempt=1, pid=1))
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"agent_start_assigned", "agent_start_once"}
    assert "was committed to east" in next(
        v.message for v in report.violations if v.check == "agent_start_assigned")


def test_liveness_not_met_is_not_a_violation(tmp_path: Path) -> None:
    run = clean_run()
    run.records = [r for r in run.records if r["f"] not in ("final", "liveness")]
    run.submit(0, "j5", "k5", "alpha", J3)
    run.final()
    report = checker.check(run.write(tmp_path))
    assert report.violations == []
    assert not report.liveness_met and report.liveness_pending == ["j5"]
    assert checker.main([str(tmp_path)]) == 0


def test_a_long_unrecorded_gap_stops_the_replay_as_a_limitation(run: Run,
                                                                tmp_path: Path) -> None:
    run.log = [(i + (100 if n >= 20 else 0), e) for n, (i, e) in enumerate(run.log)]
    report = checker.check(run.write(tmp_path))
    assert not report.replay_complete
    assert report.entries_replayed == sum(1 for _, entry in run.log[:20] if entry)
    assert any("replay incomplete" in n for n in report.notes)
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]


def test_a_replica_log_starting_late_is_noted(run: Run, tmp_path: Path) -> None:
    root = run.write(tmp_path)
    path = root / "replicas" / "r1" / "applied.log"
    path.unlink()
    writer = AppliedLogWriter(str(path))
    for index, entry in run.log[20:]:
        writer.append(index, entry)
    writer.close()
    report = checker.check(root)
    assert report.violations == []
    assert any("replica r1: applied log starts at index" in n for n in report.notes)


def test_reads_without_an_applied_index_are_noted_not_compared(run: Run,
                                                               tmp_path: Path) -> None:
    view = run.view("j1")
    run.read(8, "j1", {**view, "applied_index": 0, "state": "PENDING"})
    report = checker.check(run.write(tmp_path))
    assert report.violations == []
    assert any("carry no applied_index" in n for n in report.notes)


def test_an_fsm_failure_stops_the_replay_and_nothing_is_compared_after_it(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = fsm.apply_command
    calls = itertools.count(1)

    def failing(state: Any, command: c.Command) -> Outcome:
        if next(calls) == 11:
            raise AssertionError("boom")
        return real(state, command)

    monkeypatch.setattr(fsm, "apply_command", failing)
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"fsm_apply"}
    message = report.violations[0].message
    eleventh = [index for index, entry in run.log if entry][10]
    assert message.startswith(f"log index {eleventh}: applying JOB_SUBMIT (")
    assert message.endswith("raised AssertionError('boom')")
    assert report.entries_replayed == 10 and not report.replay_complete


# --- the auditor, with outcomes a correct FSM never produces --------------------------------------


def _audited(h: Harness, leave: int = 0) -> LogAuditor:
    """An auditor fed `h`'s log, replayed from an empty state, but for the last `leave`
    entries (a test feeds them itself, with a tampered state)."""
    replay = Harness()
    auditor = LogAuditor()
    fed = h.log[:len(h.log) - leave]
    for number, entry in enumerate(fed, 1):
        command = c.decode(entry)
        outcome = fsm.apply_command(replay.state, command)
        auditor.observe(number, command, outcome, replay.state)
    auditor.finish(len(fed), replay.state)
    assert auditor.violations == []
    return auditor


def _harness() -> Harness:
    h = Harness()
    h.register("east", cpu=2)
    h.submit("j", job_doc([task_doc("a"), task_doc("b", ["a"]),
                           task_doc("r", retry={"max_attempts": 2})]))
    return h


def test_auditor_finds_nothing_in_a_real_log() -> None:
    h = _harness()
    fence = h.run_task("east", "j", "a")
    h.run_task("east", "j", "b")
    h.run_task("east", "j", "r", exit_code=1)
    h.tick(60_000)
    h.run_task("east", "j", "r")
    auditor = _audited(h)
    assert auditor.assigned[fence].task_id == "a"
    assert set(auditor.checks) >= {"fence_unique", "dag_order", "retry_bounds", "capacity",
                                   "success_once", "report_fence_current", "fsm_invariants"}


def _one_assigned(job_id: str, task_id: str, cluster_id: str,
                  fence: int) -> Applied[AssignResult]:
    """The result of an ASSIGN_BATCH that gave one placement this fence."""
    return Applied(AssignResult(((c.Placement(job_id, task_id, cluster_id), fence),), ()))


def test_auditor_an_accepted_report_of_an_old_fence() -> None:
    h = _harness()
    old = h.run_task("east", "j", "r", exit_code=1)
    h.tick(60_000)
    h.assign_one("j", "r", "east")
    auditor = _audited(h)
    report = c.Report(c.ReportKind.FINISHED, "j", "r", old, 0)
    batch = c.ReportBatch("east", h.now_ms, 1, (report,))
    auditor.observe(99, batch, Applied(ReportResult((ReportVerdict.ACCEPTED,))), h.state)
    assert {v.check for v in auditor.violations} == {"report_fence_current", "success_once"}
    assert "the task's current fence is" in auditor.violations[0].message


def test_auditor_a_second_accepted_success() -> None:
    h = _harness()
    fence = h.run_task("east", "j", "a")
    auditor = _audited(h)
    report = c.Report(c.ReportKind.FINISHED, "j", "a", fence, 0)
    batch = c.ReportBatch("east", h.now_ms, 1, (report,))
    auditor.observe(99, batch, Applied(ReportResult((ReportVerdict.ACCEPTED,))), h.state)
    assert {v.check for v in auditor.violations} == {"success_once"}
    assert "a second accepted success" in auditor.violations[0].message


def test_auditor_an_assignment_before_the_upstream_succeeded() -> None:
    h = _harness()
    h.run_task("east", "j", "a")
    fence = h.assign_one("j", "b", "east")
    auditor = _audited(h, leave=1)
    h.task("j", "a").state = TaskState.RUNNING  # as if b had been placed too early
    auditor.observe(len(h.log), c.decode(h.log[-1]),
                    _one_assigned("j", "b", "east", fence), h.state)
    assert {v.check for v in auditor.violations} == {"dag_order"}
    assert "while upstream a is RUNNING" in auditor.violations[0].message


def test_auditor_a_fence_committed_twice() -> None:
    h = _harness()
    fence = h.assign_one("j", "a", "east")
    auditor = _audited(h)
    batch = c.AssignBatch(h.now_ms, (c.Placement("j", "r", "east"),))
    auditor.observe(99, batch, _one_assigned("j", "r", "east", fence), h.state)
    found = {v.check for v in auditor.violations}
    assert "fence_unique" in found and found <= {"fence_unique", "fence_order"}


def test_auditor_an_attempt_past_the_retry_budget() -> None:
    h = _harness()
    h.run_task("east", "j", "r", exit_code=1)
    h.tick(60_000)
    h.run_task("east", "j", "r", exit_code=1)  # max_attempts=2: the task is FAILED now
    auditor = _audited(h)
    task = h.task("j", "r")
    assert task.state == TaskState.FAILED
    h.state.fence += 1
    task.attempts.append(Attempt(h.state.fence, 3, "east", AttemptState.ASSIGNED, h.now_ms))
    batch = c.AssignBatch(h.now_ms, (c.Placement("j", "r", "east"),))
    auditor.observe(99, batch, _one_assigned("j", "r", "east", h.state.fence), h.state)
    assert {v.check for v in auditor.violations} == {"retry_bounds"}
    assert "2 application failures reached max_attempts=2" in auditor.violations[0].message


def test_auditor_infrastructure_budget_is_exact() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    for _ in range(limits.MAX_INFRA_RETRIES + 1):
        fence = h.assign_one("j", "t", "east")
        assert h.rejected("east", "j", "t", fence) == "accepted"
        h.tick(limits.INFRA_BACKOFF_MAX_MS * 2)
    assert h.task("j", "t").state == TaskState.FAILED
    auditor = _audited(h)
    assert auditor.checks["retry_bounds"] == limits.MAX_INFRA_RETRIES


def test_auditor_reservations_past_capacity() -> None:
    h = _harness()
    fence = h.assign_one("j", "a", "east")
    auditor = _audited(h, leave=1)
    h.state.clusters["east"].reserved_cpu_milli = 2_001
    auditor.observe(len(h.log), c.decode(h.log[-1]),
                    _one_assigned("j", "a", "east", fence), h.state)
    assert {v.check for v in auditor.violations} == {"capacity"}
    assert "cpu_milli 2001/2000" in auditor.violations[0].message


def test_auditor_two_jobs_created_for_one_key() -> None:
    h = Harness()
    h.submit("j1", job_doc([task_doc("a")], idempotency_key="k"))
    h.submit("j2", job_doc([task_doc("a")], idempotency_key="other"))
    auditor = _audited(h)
    job = h.job("j2")
    job.spec = dataclasses.replace(job.spec, idempotency_key="k")
    submit = c.decode(h.log[-1])
    auditor.observe(99, submit, Applied(JobSubmitted("j2", created=True)), h.state)
    assert {v.check for v in auditor.violations} == {"idempotency_key_unique"}
    assert "created job j1 at log index 1" in auditor.violations[0].message


def test_auditor_reports_a_broken_invariant() -> None:
    h = _harness()
    auditor = _audited(h)
    h.state.live_jobs += 1
    auditor.check_invariants(7, h.state)
    assert [v.check for v in auditor.violations] == ["fsm_invariants"]
    assert "after log index 7" in auditor.violations[0].message


def test_an_assignment_on_a_reserved_cluster_is_found_in_the_replayed_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker shows the auditor each entry before it applies it: a placement that ignored
    a reservation is found, though the state after the entry cannot tell (tests/unit/state/
    test_audit.py has the other contention checks)."""
    run = Run()
    h = run.h
    h.register("east", cpu=2)
    h.submit("small", job_doc([task_doc("s"), task_doc("m")]))
    h.submit("big", job_doc([task_doc("b", resources={"cpu": 2})]))
    h.assign_one("small", "s", "east")
    h.expect(c.AssignBatch(h.now_ms, (), (c.Reservation("big", "b", "east"),)), AssignResult)
    # A state machine that ignores reservations writes the next entry and replays the log.
    monkeypatch.setattr(assign, "reserved_for_other", lambda *_: None)
    fence = h.assign_one("small", "m", "east")
    run.mark("r2")
    run.final()
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"reservation_respected"}
    assert report.violations[0].message.endswith(
        f"small/m assigned fence {fence} on cluster east, which was reserved for task big/b")


def test_an_attempt_timed_out_long_before_its_timeout_is_an_early_timeout(
        run: Run, tmp_path: Path) -> None:
    run.submit(3, "j9", "k9", "alpha", [task_doc("z", timeout_s=30)],
               described_extra={"run_s": 0.5, "timeout_s": 30})
    fence = run.h.assign_one("j9", "z", "east")
    run.h.started("east", "j9", "z", fence)
    run.h.tick(120_000)  # a leader stamped a wall clock two minutes fast
    run.sync()
    assert run.h.current("j9", "z").state == AttemptState.TIMED_OUT
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"early_timeout"}
    assert "job j9 task z fence" in report.violations[0].message


def test_a_task_that_really_outruns_its_timeout_is_not_an_early_timeout(
        run: Run, tmp_path: Path) -> None:
    run.submit(3, "j9", "k9", "alpha", [task_doc("z", timeout_s=30)],
               described_extra={"run_s": 45, "timeout_s": 30})
    fence = run.h.assign_one("j9", "z", "east")
    run.h.started("east", "j9", "z", fence)
    run.h.tick(120_000)
    run.sync()
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]


def test_agent_events_are_parsed_for_the_history(tmp_path: Path) -> None:
    (tmp_path / "agent-east.log").write_text(
        agent_line("agent_registered", cluster="east", incarnation=1, term=3, known=0, lost=0,
                   kills=0) + "\n"
        "some other line\n"
        + agent_line("attempt_finished", fence=12, job="j1", task="a", report="FINISHED",
                     exit_code=-9, timed_out=False, reason="killed by the agent") + "\n")
    events = list(checker.agent_events(tmp_path))
    assert [e["event"] for e in events] == ["agent_registered", "attempt_finished"]
    finished = events[1]
    assert finished["cluster"] == "east" and finished["where"] == "agent-east.log:3"
    assert (finished["fence"], finished["exit_code"]) == (12, -9)
    assert finished["reason"] == "killed by the agent" and finished["job"] == "j1"


# --- kill liveness (jepsen.kills) ---------------------------------------------------------------


def _cancelled_running(run: Run, cluster: str = "east") -> int:
    """A job whose one task runs on `cluster` and is cancelled: a kill is owed its agent."""
    run.submit(3, "jk", "kk", "alpha", [task_doc("z")])
    fence = run.run_attempt(cluster, "jk", "z", end=False)
    run.h.cancel("jk")
    run.sync()
    return fence


def test_a_kill_the_agent_reports_in_time_is_settled(run: Run, tmp_path: Path) -> None:
    fence = _cancelled_running(run)
    run.h.tick(2_000)
    assert run.h.report("east", c.Report(c.ReportKind.KILLED, "jk", "z", fence)) == ["late"]
    run.h.tick(60_000)
    run.sync()
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    assert report.kills_settled == 1 and report.kill_settle_max_s == 2.0
    assert report.invariants_checked["kill_liveness"] == 1


def test_a_kill_never_settled_on_a_ready_cluster_is_a_kill_liveness_violation(
        run: Run, tmp_path: Path) -> None:
    fence = _cancelled_running(run)
    for _ in range(20):  # 20 s of replicated time; east stays READY, its agent says nothing
        run.h.tick(1_000)
    run.sync()
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"kill_liveness"}
    message = report.violations[0].message
    assert f"jk/z fence {fence} on east ended CANCELLED" in message
    assert "within 15 s of replicated time while east was READY" in message


def test_a_kill_owed_to_a_cut_off_cluster_waits_for_its_registration(
        run: Run, tmp_path: Path) -> None:
    """A LOST cluster cannot hear its kills: its clock stops; registering again without the
    attempt settles it (the agent does not run it); one it still runs is killed then."""
    fence = _cancelled_running(run)
    run.h.status("east", c.ClusterStatus.LOST)
    run.h.tick(120_000)
    run.h.register("east", incarnation=2, known=(c.KnownAttempt("jk", "z", fence, True),))
    run.h.tick(3_000)
    run.h.report("east", c.Report(c.ReportKind.KILLED, "jk", "z", fence))
    run.sync()
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    assert report.kills_settled == 1 and report.kill_settle_max_s == 3.0


def test_the_hostile_agents_cluster_holding_a_kill_is_a_violation(run: Run,
                                                                  tmp_path: Path) -> None:
    """hostile_no_kills: in a run nothing is placed on the hostile cluster, so a kill there
    can only come from what its agent claimed (here, made possible by placing a task there)."""
    run.h.register("hostile")
    run.agents["hostile"] = []
    fence = _cancelled_running(run, "hostile")
    run.h.register("hostile", incarnation=2, known=(c.KnownAttempt("jk", "z", fence, True),))
    run.sync()
    root = run.write(tmp_path)
    (root / "meta.json").write_text(json.dumps({"seed": 1, "nodes": 3, "agents": {
        "east": {}, "west": {}}, "hostile_cluster": "hostile"}))
    report = checker.check(root)
    assert checks(report) == {"hostile_no_kills"}
    assert "its cluster hostile holds 1 kill directive(s)" in report.violations[0].message


# --- what the agents ran at once, and their local queues (jepsen.checks_capacity) ---------------

HALF = {"resources": {"cpu": 4, "memory_mb": 0}}
"""Two of these fill a registered cluster (fsmkit registers 8 cpu)."""


def _three_halves(run: Run) -> tuple[int, int, int]:
    """Job j4 (p, q, r of 4 cpu each) on east: p and q assigned; p finished in the log; then
    r assigned. The agent logs the three starts; the caller writes p's end (or not)."""
    run.submit(0, "j4", "k4", "alpha", [task_doc(t, **HALF) for t in "pqr"])
    p = run.run_attempt("east", "j4", "p", end=False)
    q = run.run_attempt("east", "j4", "q", end=False)
    run.end("j4", "p", p, 0)
    assert run.h.finished("east", "j4", "p", p) == "accepted"
    return p, q, run.run_attempt("east", "j4", "r", end=False)


def _finished_line(fence: int, job: str, task: str) -> str:
    return agent_line("attempt_finished", fence=fence, job=job, task=task, report="FINISHED")


def test_an_agent_within_its_capacity_is_no_violation(run: Run, tmp_path: Path) -> None:
    p, q, _ = _three_halves(run)
    r_start = run.agents["east"].pop()
    run.agents["east"] += [_finished_line(p, "j4", "p"), _finished_line(q, "j4", "q"), r_start]
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    assert report.invariants_checked["agent_capacity"] >= 3


def test_an_agent_running_more_than_its_capacity_at_once(run: Run, tmp_path: Path) -> None:
    p, q, r = _three_halves(run)  # the agent never logged p's end before r's start
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"agent_capacity"}
    message = report.violations[0].message
    assert f"started fence {r}" in message and "cpu_milli 12000" in message
    assert "capacity cpu_milli 8000" in message and f"{p}, {q}, {r}" in message


def test_a_restarted_agent_holds_only_what_it_adopted(run: Run, tmp_path: Path) -> None:
    p, q, _ = _three_halves(run)
    r_start = run.agents["east"].pop()
    run.agents["east"] += [agent_line("agent_starting", cluster="east"),
                           agent_line("attempt_adopted", fence=p, job="j4", task="p", pid=1),
                           r_start]  # q's process died with the old agent; p is adopted
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    run.agents["east"].insert(-1, agent_line("attempt_adopted", fence=q, job="j4", task="q",
                                             pid=2))
    assert checks(checker.check(run.write(tmp_path / "adopted-both"))) == {"agent_capacity"}


def _queued(run: Run) -> int:
    """j4/p assigned to east, held in the agent's queue, then started from it."""
    run.submit(0, "j4", "k4", "alpha", [task_doc("p", **HALF)])
    fence = run.h.assign_one("j4", "p", "east")
    run.sync()
    run.agents["east"] += [
        agent_line("attempt_queued", fence=fence, job="j4", task="p", queued=1),
        agent_line("attempt_started", fence=fence, job="j4", task="p", attempt=1, pid=7)]
    return fence


def test_a_queued_attempt_started_once_is_no_violation(run: Run, tmp_path: Path) -> None:
    _queued(run)
    report = checker.check(run.write(tmp_path))
    assert report.violations == [], [checker.format_violation(v) for v in report.violations]
    assert report.invariants_checked["queued_start_once"] == 1


def test_a_queued_attempt_started_twice(run: Run, tmp_path: Path) -> None:
    fence = _queued(run)
    run.agents["east"] += [agent_line("agent_starting", cluster="east"),
                           agent_line("attempt_started", fence=fence, job="j4", task="p",
                                      attempt=1, pid=8)]
    report = checker.check(run.write(tmp_path))
    assert "queued_start_once" in checks(report)
    assert checks(report) <= {"queued_start_once", "agent_start_once"}
    assert any(f"queued fence {fence}" in v.message and "started again" in v.message
               for v in report.violations)


def test_a_queued_attempt_started_after_it_left_the_queue(run: Run, tmp_path: Path) -> None:
    fence = _queued(run)
    start = run.agents["east"].pop()
    run.agents["east"] += [agent_line("agent_starting", cluster="east"),
                           agent_line("attempt_queued_at_restart", fence=fence, job="j4",
                                      task="p"), start]
    report = checker.check(run.write(tmp_path))
    assert checks(report) == {"queued_start_once"}
    assert "started after it left the queue unstarted" in report.violations[0].message
