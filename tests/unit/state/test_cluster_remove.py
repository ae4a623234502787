"""CLUSTER_REMOVE: an admin forgets a decommissioned compute cluster, never one that may still run
something."""

from __future__ import annotations

from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import snapshot
from raftsched.state.outcome import Rejected
from raftsched.state.results import ClusterRemoved
from tests.support.fsmkit import Harness, job_doc, task_doc


def test_a_cluster_with_a_live_attempt_is_not_removed_and_nothing_changes() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    h.assign_one("j", "t", "east")
    before = snapshot.digest(h.state)
    outcome = h.run(c.ClusterRemove("east", h.state.now_ms))
    assert isinstance(outcome, Rejected) and outcome.code == Code.FAILED_PRECONDITION
    assert "1 live attempt" in outcome.reason
    assert snapshot.digest(h.state) == before


def test_an_idle_cluster_is_removed_and_its_history_stays() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    h.run_task("east", "j", "t")
    assert h.expect(c.ClusterRemove("east", h.state.now_ms), ClusterRemoved).cluster_id == "east"
    assert "east" not in h.state.clusters
    assert h.current("j", "t").cluster_id == "east"  # the attempt's record keeps the id
    missing = h.run(c.ClusterRemove("east", h.state.now_ms))
    assert isinstance(missing, Rejected) and missing.code == Code.NOT_FOUND
    h.register("east")  # its agent registering again brings it back
    assert "east" in h.state.clusters


def test_pending_kill_directives_go_with_the_cluster_and_come_back_with_its_agent() -> None:
    """An agent that never confirms its kills cannot keep its cluster from being removed; if it
    registers again still running the attempt, the registration records the kill anew."""
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    fence = h.assign_one("j", "t", "east")
    h.started("east", "j", "t", fence)
    h.cancel("j")  # the agent must still confirm the kill
    assert h.state.clusters["east"].kills == {fence: ("j", "t")}
    assert h.expect(c.ClusterRemove("east", h.state.now_ms), ClusterRemoved).cluster_id == "east"
    assert "east" not in h.state.clusters and h.state.kill_count == 0
    h.register("east", incarnation=2, known=(c.KnownAttempt("j", "t", fence, True),))
    assert h.state.clusters["east"].kills == {fence: ("j", "t")}


def test_the_command_round_trips() -> None:
    command = c.ClusterRemove("east", 5)
    assert c.decode(c.encode(command)) == command
