"""A cluster past its bound of kill directives is never silent (issue 21): `admin status` (its
protobuf view, JSON and table), the metrics and the leader's log say so."""

from __future__ import annotations

import logging

import pytest

from raftsched import limits
from raftsched.cli import render
from raftsched.clock import ManualClock
from raftsched.replica import views
from raftsched.replica.metrics import StateCollector
from raftsched.state import commands as c
from tests.support.fsmkit import Harness, job_doc, task_doc
from tests.support.memory_node import MemoryNode, make_leader


def _past_the_bound(monkeypatch: pytest.MonkeyPatch) -> Harness:
    """East's agent confirms no kill: two are owed, one fits the bound of 1."""
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 1)
    h = Harness()
    h.register("east")
    h.register("west")
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    for task_id in ("a", "b"):
        fence = h.assign_one("j", task_id, "east")
        h.started("east", "j", task_id, fence)
    h.cancel("j")
    assert h.state.clusters["east"].kills_unrecorded == 1
    return h


def test_admin_status_shows_pending_and_unrecorded_kills(monkeypatch: pytest.MonkeyPatch) -> None:
    h = _past_the_bound(monkeypatch)
    message = views.compute_cluster(h.state, h.state.clusters["east"], 100)
    assert (message.pending_kills, message.kills_unrecorded) == (1, 1)
    doc = render.compute_cluster_doc(message)
    assert (doc["pending_kills"], doc["kills_unrecorded"]) == (1, 1)
    note = render._cluster_note(doc, h.state.now_ms)
    assert "1 kill(s) owed could not be recorded" in note and "registers again" in note
    assert "east" in note
    table = render.compute_clusters_table([doc], h.state.now_ms)
    assert "READY (kills unrecorded)" in table
    west = render.compute_cluster_doc(views.compute_cluster(h.state, h.state.clusters["west"], 1))
    assert west["kills_unrecorded"] == 0 and render._cluster_note(west, h.state.now_ms) == ""


def test_metrics_show_pending_and_unrecorded_kills(monkeypatch: pytest.MonkeyPatch) -> None:
    h = _past_the_bound(monkeypatch)
    node = MemoryNode()
    node.state = h.state
    gauges = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in StateCollector(node, lambda: True, dict).collect() for s in f.samples}
    assert gauges[("raftsched_cluster_pending_kills", (("cluster", "east"),))] == 1
    assert gauges[("raftsched_cluster_kills_unrecorded", (("cluster", "east"),))] == 1
    assert gauges[("raftsched_cluster_kills_unrecorded", (("cluster", "west"),))] == 0


def test_the_leader_logs_a_warning_each_time_the_count_grows(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 1)
    node = MemoryNode()
    leader = make_leader(node, ManualClock())
    leader._round()  # takes office
    h = Harness(node.state)
    h.register("east")
    h.submit("j", job_doc([task_doc(t) for t in ("a", "b", "c")]))
    fences = [h.assign_one("j", t, "east") for t in ("a", "b", "c")]
    with caplog.at_level(logging.INFO, logger="raftsched.leader"):
        h.cancel("j")
        leader._round()
        leader._round()  # no change: no second line
        warnings = [r for r in caplog.records if getattr(r, "event", "") == "kills_unrecorded"]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        assert warnings[0].fields["unrecorded"] == 2  # type: ignore[attr-defined]
        h.report("east", c.Report(c.ReportKind.KILLED, "j", "a", fences[0]))
        h.register("east", incarnation=2)  # the agent runs none of them any more
        leader._round()
    events = [getattr(r, "event", "") for r in caplog.records]
    assert events.count("kills_unrecorded") == 1 and "kills_recorded_again" in events
