"""The one proposal path (raftsched.replica.proposals): one typed outcome for every way a
proposal ends, one mapping to what a client is told (the codes and messages clients always saw),
one for the leader's loop, and one named timeout."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.clock import ManualClock
from raftsched.errors import Code, RaftschedError
from raftsched.replica import gateway, leader, proposals
from raftsched.replica.proposals import (
    Committed,
    NotLeading,
    Proposer,
    Refused,
    TooBig,
    Unknown,
    error_of,
    for_leader,
    result_or_error,
)
from raftsched.replica.raft.errors import NotLeader, OutcomeUnknown
from raftsched.state import commands as c
from raftsched.state.outcome import Outcome
from raftsched.state.results import BarrierResult
from tests.support.memory_node import MemoryNode, make_leader


class Raising:
    """A pending entry whose wait raises `error`."""

    def __init__(self, error: RaftschedError) -> None:
        self.error = error
        self.waited: list[float] = []

    def outcome(self, timeout_s: float) -> Outcome:
        self.waited.append(timeout_s)
        raise self.error


class ScriptedNode(MemoryNode):
    """`submit` raises `on_submit`, or returns `pending`, or applies as MemoryNode does."""

    def __init__(self) -> None:
        super().__init__()
        self.on_submit: RaftschedError | None = None
        self.pending: Raising | None = None
        self.submits = 0

    def submit(self, data: bytes) -> object:  # type: ignore[override]
        self.submits += 1
        if self.on_submit is not None:
            raise self.on_submit
        if self.pending is not None:
            return self.pending
        return super().submit(data)


def barrier(nonce: str = "n") -> c.Command:
    return c.Barrier(nonce, 0)


def test_a_committed_entry_gives_its_result_and_runs_the_hooks_in_order() -> None:
    node, calls = ScriptedNode(), []
    proposer = Proposer(node, leading=lambda: True, committed=lambda: calls.append("committed"))
    outcome = proposer.propose(barrier(), appended=lambda: calls.append("appended"))
    assert outcome == Committed(BarrierResult("n"))
    assert calls == ["appended", "committed"] and node.proposed == ["Barrier"]
    assert result_or_error(outcome) == BarrierResult("n") and error_of(outcome) is None


def test_not_in_office_proposes_nothing_and_says_not_the_leader() -> None:
    node = ScriptedNode()
    outcome = Proposer(node, leading=lambda: False).propose(barrier())
    assert isinstance(outcome, NotLeading) and node.proposed == []
    with pytest.raises(RaftschedError) as info:
        result_or_error(outcome)
    assert (info.value.code, info.value.message) == (Code.UNAVAILABLE, "not the leader")


@pytest.mark.parametrize("at", ["submit", "wait"])
def test_not_leader_from_raft_is_passed_on_as_is_naming_the_leader(at: str) -> None:
    node, error = ScriptedNode(), NotLeader("10.0.0.2:7000")
    if at == "submit":
        node.on_submit = error
    else:
        node.pending = Raising(error)
    outcome = Proposer(node).propose(barrier())
    assert outcome == NotLeading(error)
    with pytest.raises(NotLeader) as info:
        result_or_error(outcome)
    assert info.value is error and info.value.leader == "10.0.0.2:7000"
    assert info.value.code == Code.UNAVAILABLE


def test_an_unknown_outcome_is_deadline_exceeded_and_waits_the_named_timeout() -> None:
    node = ScriptedNode()
    node.pending = Raising(OutcomeUnknown("no commit within 5 s"))
    outcome = Proposer(node).propose(barrier())
    assert isinstance(outcome, Unknown) and node.pending.waited == [limits.PROPOSE_TIMEOUT_S]
    error = error_of(outcome)
    assert error is not None and error.code == Code.DEADLINE_EXCEEDED
    assert "retry with the same request id" in error.message


def test_too_big_before_or_at_raft_is_resource_exhausted_with_the_bound_named() -> None:
    node = ScriptedNode()
    node.on_submit = RaftschedError(Code.RESOURCE_EXHAUSTED, "entry of 9 bytes is over "
                                    "MAX_ENTRY_BYTES=8")
    outcome = Proposer(node).propose(barrier())
    assert outcome == TooBig("entry of 9 bytes is over MAX_ENTRY_BYTES=8")
    error = error_of(outcome)
    assert error is not None and (error.code, error.message) == (
        Code.RESOURCE_EXHAUSTED, "entry of 9 bytes is over MAX_ENTRY_BYTES=8")
    huge = c.Barrier("x" * (limits.MAX_ENTRY_BYTES + 1), 0)
    encoded = Proposer(ScriptedNode()).propose(huge)
    assert isinstance(encoded, TooBig) and "MAX_ENTRY_BYTES" in encoded.message


def test_a_closed_replica_is_unavailable_in_its_own_words() -> None:
    node = ScriptedNode()
    node.on_submit = RaftschedError(Code.UNAVAILABLE, "this Raft replica is closed")
    error = error_of(Proposer(node).propose(barrier()))
    assert error is not None and (error.code, error.message) == (
        Code.UNAVAILABLE, "this Raft replica is closed")


def test_a_refusal_keeps_the_state_machines_code_reason_and_retry_after() -> None:
    node, woken = ScriptedNode(), []
    node.pending = None
    refused = Refused(Code.RESOURCE_EXHAUSTED, "queue full", 250)
    outcome = Proposer(node, committed=lambda: woken.append(1)).propose(
        c.JobCancel("nope", 0, ""))
    assert isinstance(outcome, Refused) and outcome.code == Code.NOT_FOUND and woken == []
    error = error_of(refused)
    assert error is not None and (error.code, error.message, error.retry_after_ms) == (
        Code.RESOURCE_EXHAUSTED, "queue full", 250)


def test_the_leader_reading_passes_over_a_refusal_and_ends_the_round_otherwise() -> None:
    assert for_leader(Committed(BarrierResult("n")), "barrier") == BarrierResult("n")
    assert for_leader(Refused(Code.NOT_FOUND, "gone"), "tick") is None
    unknown = OutcomeUnknown("no commit")
    with pytest.raises(OutcomeUnknown):
        for_leader(Unknown(unknown), "tick")
    with pytest.raises(RaftschedError) as info:
        for_leader(TooBig("too big"), "assign_batch")
    assert info.value.code == Code.RESOURCE_EXHAUSTED


def test_the_leader_and_the_gateway_share_the_path_and_the_timeout() -> None:
    """No second timeout constant, and the leader's loop and the gateway both propose through
    `Proposer` (the leader submits, never calls the node's own propose)."""
    assert not hasattr(gateway, "PROPOSE_TIMEOUT_S") and not hasattr(leader, "PROPOSE_TIMEOUT_S")
    node = ScriptedNode()
    chief = make_leader(node, ManualClock())
    chief._round()  # takes office through the proposer
    assert chief.leading() and node.proposed[0] == "Barrier"
    result = gateway.propose(node, chief, c.Tick(1, 1))
    assert node.proposed[-1] == "Tick" and result is not None
    assert node.submits == len(node.proposed)  # every entry came through Proposer's submit
    assert proposals.Proposer is Proposer
