"""CLUSTER_REMOVE: an admin forgets a decommissioned compute cluster, never one that may still run
something."""

from __future__ import annotations

from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.results import ClusterRemoved
from tests.support.fsmkit import Harness, job_doc, task_doc


def test_a_cluster_with_a_live_attempt_is_not_removed_and_nothing_changes() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    h.assign_one("j", "t", "east")
    before = snapshot.digest(h.state)
    outcome = h.run(c.ClusterRemove("east", h.state.now_ms))
    assert isinstance(outcome, fsm.Rejected) and outcome.code == Code.FAILED_PRECONDITION
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
    assert isinstance(missing, fsm.Rejected) and missing.code == Code.NOT_FOUND
    h.register("east")  # its agent registering again brings it back
    assert "east" in h.state.clusters


def test_a_pending_kill_directive_keeps_the_cluster() -> None:
    h = Harness()
    h.register("east")
    h.submit("j", job_doc([task_doc("t")]))
    fence = h.assign_one("j", "t", "east")
    h.started("east", "j", "t", fence)
    h.cancel("j")  # the agent must still confirm the kill
    outcome = h.run(c.ClusterRemove("east", h.state.now_ms))
    assert isinstance(outcome, fsm.Rejected) and "kill directive" in outcome.reason


def test_the_command_round_trips() -> None:
    command = c.ClusterRemove("east", 5)
    assert c.decode(c.encode(command)) == command
