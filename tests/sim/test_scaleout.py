"""The scale-out study (`tests/sim/scaleout.py`, `scripts/bench scaleout`) at a small size: it
runs, two groups place well over what one does, the turn rule serves every group without
capacity rejections where telling every group all the free room serves one group (the others
see only what it left) or draws rejections, and the tenants' shares follow their weights. The
figures of the full study (1,000 agents) are the benchmark's, not asserted here."""

from __future__ import annotations

import functools
import logging

import pytest

from agent.core import Decision
from agent.groups import OfferRule
from raftsched.state import clusters, lifecycle
from tests.sim.scaleout import TENANTS, Figures, Study

AGENTS = 80
SECONDS = 1.0


@functools.cache
def _run(groups: int, rule: OfferRule = OfferRule.TURN, workload: str = "paced") -> Figures:
    logging.disable(logging.WARNING)
    try:
        return Study(groups, seed=3, rule=rule, agents=AGENTS, workload=workload).run(SECONDS)
    finally:
        logging.disable(logging.NOTSET)


def test_two_groups_place_about_twice_what_one_does() -> None:
    one, two = _run(1), _run(2)
    print(one.as_dict(), two.as_dict())
    assert one.placements > 0 and min(two.per_group_placements) > 0
    assert two.placements_per_s >= 1.5 * one.placements_per_s


@pytest.mark.parametrize("groups", [2, 4])
def test_the_turn_serves_every_group_without_rejections_where_the_whole_offer_does_not(
        groups: int) -> None:
    turn, whole = _run(groups), _run(groups, OfferRule.WHOLE)
    print(turn.as_dict(), whole.as_dict())

    def balance(figures: Figures) -> float:
        return min(figures.per_group_placements) / max(figures.per_group_placements)

    assert turn.rejection_rate <= 0.05 and balance(turn) >= 0.4
    assert whole.capacity_rejections > turn.capacity_rejections or balance(whole) < 0.4
    assert turn.placements > whole.placements


def test_under_contention_tenants_hold_slots_by_their_weights() -> None:
    figures = _run(2, workload="contended")
    weights = sum(TENANTS.values())
    for tenant, weight in TENANTS.items():
        assert figures.tenant_shares[tenant] == pytest.approx(weight / weights, rel=0.10), \
            figures.as_dict()


def _queued_run() -> tuple[Figures, int, int]:
    """Contended, three groups, every agent keeping a local queue of 4 per group: the figures,
    how many attempts the agents started from their queues, and how many they queued past the
    depth (placed on a group's last offer before its turn passed on)."""
    logging.disable(logging.WARNING)
    try:
        study = Study(3, seed=3, agents=AGENTS, workload="contended", queue_depth=4)
        figures = study.run(SECONDS)
    finally:
        logging.disable(logging.NOTSET)
    return (figures, sum(a.decisions[Decision.QUEUE_STARTED] for a in study.agents_),
            sum(a.decisions[Decision.QUEUED_PAST_DEPTH] for a in study.agents_))


def test_with_a_local_queue_per_group_slots_stay_busier_and_rejections_stay_rare() -> None:
    figures, from_queue, past_depth = _queued_run()
    without = _run(3, workload="contended")
    print(figures.as_dict(), without.as_dict(), from_queue, past_depth)
    assert from_queue > 0.1 * figures.placements  # the queues did the work...
    assert figures.rejection_rate <= 0.05  # ...placements rarely found them full...
    assert past_depth <= 0.1 * figures.placements  # ...or overfilled them (one offer a pass)
    assert figures.utilisation > without.utilisation
    # (How the groups share the agents over turns of TURN_SHARE_S is the turns study's and
    # tests/unit/agent/test_groups.py's: this run is shorter than a turn.)


def test_a_state_that_hands_freed_room_to_the_queue_with_several_groups_overfills_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule for one group (freed room goes to the queue at once) planted in every group:
    a group then takes its queue for started while the agent holds it for that group's turn
    and queues more, which the agent refuses or holds past the depth."""
    right, _, right_past = _queued_run()
    for module in (lifecycle, clusters):
        monkeypatch.setattr(module, "promotes_on_free", lambda state: True)
    planted, _, planted_past = _queued_run()
    print(right.as_dict(), right_past, planted.as_dict(), planted_past)
    excess = (planted.capacity_rejections + planted_past) / planted.placements
    assert excess > 2 * (right.capacity_rejections + right_past) / right.placements
