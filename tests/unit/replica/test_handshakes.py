"""The bookkeeping of unauthenticated Raft connections (raftsched/replica/raft/handshakes.py):
caps per address and in total, the deadline, the rate-limited report. Time is passed in."""

from __future__ import annotations

from raftsched.replica.raft.handshakes import (
    MAX_REPORTED_ADDRESSES,
    REPORT_PERIOD_S,
    SWEEP_PERIOD_S,
    ClosedCounts,
    HandshakeGuard,
    Report,
)

TIMEOUT_S = 5.0


def guard(per_address: int = 2, total: int = 3) -> HandshakeGuard[str]:
    return HandshakeGuard(TIMEOUT_S, per_address, total)


def test_each_address_has_its_cap_and_all_together_theirs() -> None:
    g = guard(per_address=2, total=3)
    assert g.admit("a1", "10.0.0.1", 0.0) and g.admit("a2", "10.0.0.1", 0.0)
    assert not g.admit("a3", "10.0.0.1", 0.0), "a third from one address"
    assert g.admit("b1", "10.0.0.2", 0.0), "another address is not held by the first one's"
    assert not g.admit("c1", "10.0.0.3", 0.0), "the total is reached"
    assert g.pending == 3 and g.totals == ClosedCounts(over_cap=2)


def test_a_settled_connection_frees_its_place_and_settling_twice_is_harmless() -> None:
    g = guard(per_address=1, total=3)
    assert g.admit("a1", "10.0.0.1", 0.0)
    g.settle("a1")  # authenticated
    g.settle("a1")
    g.settle("never-pending")  # an outgoing connection closing
    assert g.admit("a2", "10.0.0.1", 0.0) and g.pending == 1
    assert g.expire(100.0) == [] and g.expire(100.0 + SWEEP_PERIOD_S) == ["a2"], \
        "only the pending one is timed out"


def test_a_connection_is_closed_at_the_second_sweep_past_its_deadline() -> None:
    g = guard()
    assert g.admit("early", "10.0.0.1", 0.0) and g.admit("late", "10.0.0.2", 1.0)
    before = TIMEOUT_S - 0.01
    assert g.expire(before) == []
    first = before + SWEEP_PERIOD_S
    assert g.expire(first) == [], "first sweep past the deadline: marked, a poll comes first"
    assert g.expire(first + SWEEP_PERIOD_S / 2) == [], "at most one sweep per period"
    assert g.expire(first + SWEEP_PERIOD_S) == ["early"]
    assert g.pending == 1 and g.totals == ClosedCounts(handshake_timeout=1)
    assert g.expire(1.0 + TIMEOUT_S) == [] and g.expire(1.0 + TIMEOUT_S + SWEEP_PERIOD_S) == \
        ["late"]
    assert g.pending == 0 and g.admit("again", "10.0.0.1", 10.0), "its place is free again"


def test_closed_connections_are_reported_at_most_once_per_period_with_counts() -> None:
    g = guard(per_address=1, total=100)
    assert g.report(0.0) is None, "nothing closed, nothing to say"
    assert g.admit("a1", "10.0.0.1", 0.0) and not g.admit("a2", "10.0.0.1", 0.0)
    assert g.report(0.0) == Report(over_cap=1, handshake_timeout=0, pending=1,
                                   addresses=("10.0.0.1",), unnamed=0)
    for i in range(3):
        assert not g.admit(f"x{i}", "10.0.0.1", 1.0)
    assert g.report(1.0) is None, "too soon after the last"
    g.expire(TIMEOUT_S)
    assert g.expire(TIMEOUT_S + SWEEP_PERIOD_S) == ["a1"]
    assert g.report(REPORT_PERIOD_S) == Report(over_cap=3, handshake_timeout=1, pending=0,
                                               addresses=("10.0.0.1",), unnamed=0)
    assert g.report(3 * REPORT_PERIOD_S) is None
    assert g.totals == ClosedCounts(over_cap=4, handshake_timeout=1)


def test_a_report_names_a_bounded_number_of_addresses() -> None:
    g = guard(per_address=1, total=1)
    assert g.admit("held", "10.0.0.1", 0.0)
    extra = 5
    for i in range(MAX_REPORTED_ADDRESSES + extra):
        assert not g.admit(f"c{i}", f"10.0.1.{i}", 0.0)
    report = g.report(0.0)
    assert report is not None and len(report.addresses) == MAX_REPORTED_ADDRESSES
    assert report.unnamed == extra and report.over_cap == MAX_REPORTED_ADDRESSES + extra
