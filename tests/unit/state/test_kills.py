"""Kill directives (issue 21, finding 1): recorded only for attempts the state placed on that
cluster, bounded per cluster with every kill past the bound counted (and the cluster closed to
new work until its agent registers again), dropped when the cluster is LOST or removed and
re-derived when its agent registers again. A registration's ids follow the spec's id rule
(finding 11)."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import feasibility, snapshot
from raftsched.state.feasibility import Unfit
from raftsched.state.model import AttemptState
from raftsched.state.outcome import Rejected
from raftsched.state.results import ClusterRegistered
from tests.support.fsmkit import Harness, job_doc, task_doc


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east")
    harness.register("west")
    return harness


def _running(h: Harness, job_id: str, task_id: str, cluster_id: str) -> int:
    fence = h.assign_one(job_id, task_id, cluster_id)
    assert h.started(cluster_id, job_id, task_id, fence) == "accepted"
    return fence


def _register(h: Harness, cluster_id: str, *known: c.KnownAttempt,
              incarnation: int = 2) -> ClusterRegistered:
    return h.expect(c.ClusterRegister(cluster_id, incarnation, ("linux",), 8000, 16_384, 0,
                                      h.now_ms, known), ClusterRegistered)


# --- reconcile: a kill only for an attempt the state placed on that very cluster -------------


def test_reregistration_kills_its_own_stale_attempt_and_nothing_it_merely_claims(
        h: Harness) -> None:
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    stale = _running(h, "j", "a", "east")
    h.cancel("j")
    h.report("east", c.Report(c.ReportKind.KILLED, "j", "a", stale))  # confirmed once
    assert h.state.clusters["east"].kills == {}
    h.submit("k", job_doc([task_doc("t")]))
    west = _running(h, "k", "t", "west")
    top = h.state.fence
    result = _register(h, "east",
                       c.KnownAttempt("j", "a", stale, True),  # its own, still running: kill
                       c.KnownAttempt("k", "t", west, True),  # west's attempt
                       c.KnownAttempt("j", "b", top + 1, True),  # a task never placed
                       c.KnownAttempt("j", "a", top + 2, True),  # an unknown fence
                       c.KnownAttempt("nope", "a", top + 3, True),  # an unknown job
                       c.KnownAttempt("j", "zz", top + 4, True))  # an unknown task
    assert result.kills == 1
    assert h.state.clusters["east"].kills == {stale: ("j", "a")}
    assert h.state.clusters["west"].kills == {}
    assert h.current("k", "t").state == AttemptState.RUNNING  # west's attempt is untouched
    assert h.state.kill_count == 1


def test_a_finished_attempt_in_the_agents_outbox_draws_no_kill(h: Harness) -> None:
    h.submit("j", job_doc([task_doc("a")]))
    fence = _running(h, "j", "a", "east")
    h.cancel("j")
    h.report("east", c.Report(c.ReportKind.KILLED, "j", "a", fence))
    assert _register(h, "east", c.KnownAttempt("j", "a", fence, False)).kills == 0
    assert h.state.clusters["east"].kills == {}


def test_a_new_cluster_of_a_known_id_kills_its_stale_attempts_at_once(h: Harness) -> None:
    """Removed, then its agent registers again (created anew): it is reconciled like any
    other registration."""
    h.submit("j", job_doc([task_doc("a")]))
    fence = _running(h, "j", "a", "east")
    h.cancel("j")
    h.ok(c.ClusterRemove("east", h.now_ms))
    result = _register(h, "east", c.KnownAttempt("j", "a", fence, True),
                       c.KnownAttempt("ghost", "t", 77, True), incarnation=1)
    assert (result.created, result.kills) == (True, 1)
    assert h.state.clusters["east"].kills == {fence: ("j", "a")}


# --- the per-cluster bound: counted, closes only that cluster, cleared by re-registering -------


def test_past_the_bound_kills_are_counted_and_close_only_that_cluster(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 2)
    h.submit("j", job_doc([task_doc(f"t{i}") for i in range(3)] + [task_doc("w")]))
    fences = [_running(h, "j", f"t{i}", "east") for i in range(3)]
    west = _running(h, "j", "w", "west")
    h.cancel("j")
    east = h.state.clusters["east"]
    assert sorted(east.kills) == fences[:2] and east.kills_unrecorded == 1
    assert h.state.clusters["west"].kills == {west: ("j", "w")}  # the other cluster: as ever
    h.submit("n", job_doc([task_doc("x")]))
    task = h.task("n", "x")
    assert feasibility.unfit_committed(task.spec, east, h.now_ms) is Unfit.KILLS_UNRECORDED
    infeasible = feasibility.explain_committed(task.spec, east, h.now_ms)
    assert infeasible is not None and "owes 1 kill directive(s)" in infeasible.detail
    assert "MAX_KILL_DIRECTIVES_PER_CLUSTER=2" in infeasible.detail
    dropped = h.assign(("n", "x", "east")).dropped
    assert [d.reason for d in dropped] == [Unfit.KILLS_UNRECORDED]
    assert feasibility.unfit_committed(task.spec, h.state.clusters["west"], h.now_ms) is None
    # The agent confirms one kill; the count stays until it registers again, listing what it
    # still runs: the kills it is owed are derived anew and the cluster opens again.
    h.report("east", c.Report(c.ReportKind.KILLED, "j", "t0", fences[0]))
    assert east.kills_unrecorded == 1
    _register(h, "east", *(c.KnownAttempt("j", f"t{i}", fences[i], True) for i in (1, 2)))
    assert sorted(east.kills) == fences[1:] and east.kills_unrecorded == 0
    assert feasibility.unfit_committed(task.spec, east, h.now_ms) is None


def test_the_count_survives_a_snapshot_and_old_records_keep_their_bytes(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 1)
    before = snapshot._cluster_record(h.state.clusters["east"])
    assert len(before) == 20  # no custom resources, nothing unrecorded: the old record
    h.submit("j", job_doc([task_doc("a"), task_doc("b")]))
    for task_id in ("a", "b"):
        _running(h, "j", task_id, "east")
    h.cancel("j")
    record = snapshot._cluster_record(h.state.clusters["east"])
    assert record[20:] == [[], 1]  # the count, after an empty list of custom resources
    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert loaded.clusters["east"].kills_unrecorded == 1
    assert snapshot.dump(loaded) == data


# --- LOST and remove drop the kills; the next registration re-derives them --------------------


def test_lost_drops_kills_records_none_and_the_agent_coming_back_gets_them_again(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 1)
    h.submit("j", job_doc([task_doc("r"), task_doc("w", on_lost="wait"), task_doc("f")]))
    replaced = _running(h, "j", "r", "east")
    waiting = _running(h, "j", "w", "east")
    finished = _running(h, "j", "f", "east")
    h.finished("east", "j", "f", finished)
    h.submit("k", job_doc([task_doc("x"), task_doc("y")]))
    kx, ky = _running(h, "k", "x", "east"), _running(h, "k", "y", "east")
    h.cancel("k")
    east = h.state.clusters["east"]
    assert len(east.kills) == 1 and east.kills_unrecorded == 1
    h.status("east", c.ClusterStatus.LOST)
    assert (east.kills, east.kills_unrecorded, h.state.kill_count) == ({}, 0, 0)
    assert h.current("j", "r").state == AttemptState.LOST  # replaced, no kill recorded
    h.cancel("j")  # ends the waiting attempt on the LOST cluster: no kill recorded either
    assert h.current("j", "w").state == AttemptState.CANCELLED and east.kills == {}
    held = (c.KnownAttempt("k", "x", kx, True), c.KnownAttempt("k", "y", ky, True),
            c.KnownAttempt("j", "r", replaced, True), c.KnownAttempt("j", "w", waiting, True),
            c.KnownAttempt("j", "f", finished, False))
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 10)
    result = _register(h, "east", *held)
    assert result.kills == 4 and result.lost == 0
    assert sorted(east.kills) == sorted([kx, ky, replaced, waiting])


# --- a registration's ids: the spec's rule, at apply too ---------------------------------------


@pytest.mark.parametrize(("cluster_id", "capabilities", "fragment"), [
    ("", ("linux",), "cluster_id: must use only letters"),
    ("east\x1b[31m", ("linux",), "cluster_id: must use only"),
    ("x" * (limits.MAX_ID_CHARS + 1), (), "cluster_id: "),
    ("east", ("linux", "gpu\x1b[2J"), r"capabilities[1]: must use only"),
    ("east", ("",), r"capabilities[0]: must use only"),
    ("east", ("bad cap",), r"capabilities[0]: must use only"),
])
def test_a_registration_with_a_bad_id_is_refused_at_apply_and_changes_nothing(
        h: Harness, cluster_id: str, capabilities: tuple[str, ...], fragment: str) -> None:
    before = snapshot.digest(h.state)
    outcome = h.run(c.ClusterRegister(cluster_id, 5, capabilities, 1000, 10, 0, h.now_ms))
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT
    assert fragment in outcome.reason, outcome.reason
    assert snapshot.digest(h.state) == before
