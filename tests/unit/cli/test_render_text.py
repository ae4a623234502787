"""What the CLI prints of text the state holds but did not validate — an agent's reason for
an attempt's end, a drain reason or certificate subject from older state — is escaped on the
terminal, so that it can neither move the cursor nor fake a line (issue 21, finding 12). The
state is made by the real state machine, read through the replica's real views (the messages
the API answers), and rendered by the CLI's renderer; `--json` keeps the exact text."""

from __future__ import annotations

from raftsched.cli import render
from raftsched.replica import views
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from tests.support.fsmkit import Harness, job_doc, task_doc

RAW = "\x1b[2J\nfake line \u202e"
SHOWN = "\\x1b[2J\\nfake line \\u202e"


def failed_by_its_agent() -> Harness:
    """A job whose only task failed with a reason its agent reported (the agent's words: a
    report is never refused for its text), and whose task and job reasons hold such text too
    (state written before the rule)."""
    h = Harness()
    h.register("east")
    h.ok(c.JobSubmit("j1", doc_to_wire(job_doc([task_doc("a")])), h.now_ms))
    fence = h.assign_one("j1", "a", "east")
    h.started("east", "j1", "a", fence)
    h.report("east", c.Report(c.ReportKind.FINISHED, "j1", "a", fence, 1, False, reason=RAW))
    assert h.current("j1", "a").reason == RAW
    h.task("j1", "a").reason = RAW
    h.job("j1").reason = RAW
    return h


def assert_escaped(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text, text
    assert SHOWN in text, text
    assert not any(line.startswith("fake line") for line in text.splitlines()), text


def test_task_history_escapes_an_agents_reason() -> None:
    h = failed_by_its_agent()
    history = render.history_doc(views.task_history(h.state, "j1", "a"))
    assert history["attempts"][0]["reason"] == RAW  # --json: the exact text
    assert_escaped(render.history_text(history, now_ms=h.now_ms))


def test_job_tasks_task_explain_and_job_status_escape_reasons() -> None:
    h = failed_by_its_agent()
    tasks = [render.task_doc(t) for t in views.list_tasks(h.state, "j1").tasks]
    assert tasks[0]["reason"] == RAW
    assert_escaped(render.tasks_table(tasks))
    explained = render.explain_doc(views.explain_task(h.state, "j1", "a"), "j1", "a")
    assert RAW in explained["summary"]
    assert_escaped(render.explain_text(explained))
    job = render.job_doc(views.job_message(views.job_of(h.state, "j1")))
    assert_escaped(render.job_text(job, now_ms=h.now_ms))


def test_admin_status_escapes_a_drain_reason_and_table_cells_escape_everything() -> None:
    cluster = {"cluster": "east", "status": "READY", "capabilities": [], "draining": True,
               "drain_reason": RAW, "capacity": {"cpu_milli": 1000, "memory_mb": 1, "gpu": 0},
               "reserved": {"cpu_milli": 0, "memory_mb": 0, "gpu": 0}, "live_attempts": 0,
               "heartbeat_age_ms": 0, "degraded_until_ms": 0, "reserved_for": ""}
    status = {"leader": "a:1", "term": 1, "commit_index": 1, "applied_index": 1,
              "responder": "a:1", "replicas": [], "clusters": [cluster], "now_ms": 0}
    assert_escaped(render.cluster_status_text(status))
    assert_escaped(render.table(["FINGERPRINT", "SUBJECT"], [["ab", RAW]]))
