"""The seeded simulation with K groups sharing every agent (issue 27, `tests.sim.groups`): ten
faulted seeds (leader changes, one group's quorum lost, snapshots, agent crashes and restarts,
partitions, lost, duplicated, delayed and replayed messages) keep every property, with each
offer rule; an agent whose admission looks only at its own group's attempts over-commits and
the simulation catches it.

A failing seed is printed as `replay with GROUPS_SEED=<seed>`; `GROUPS_SEED=<seed> pytest
tests/sim/test_groups_sim.py` replays it alone (`GROUPS_STEPS` sets the step count).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest

from agent.core import AgentCore
from agent.groups import OfferRule
from agent.model import Resources
from tests.sim.groups import GroupedWorld
from tests.sim.machine import CoreFactory
from tests.sim.test_simulation import GROUPS_ONLY

SEEDS = tuple(range(10))
STEPS = 1_200


def _seeds() -> tuple[int, ...]:
    chosen = os.environ.get("GROUPS_SEED")
    return (int(chosen),) if chosen else SEEDS


def simulate(seed: int, groups: int, rule: OfferRule = OfferRule.TURN,
             core_factory: CoreFactory | None = None) -> GroupedWorld:
    steps = int(os.environ.get("GROUPS_STEPS", STEPS))
    world = GroupedWorld(seed, groups, rule, core_factory)
    try:
        world.run(steps)
    except AssertionError as error:
        raise AssertionError(f"replay with GROUPS_SEED={seed} (GROUPS_STEPS={steps}, "
                             f"{groups} groups, {rule.value}): {error}\n"
                             f"last steps:\n{world.trace()}") from error
    return world


@functools.cache
def _seeded(seed: int) -> GroupedWorld:
    """One seeded run of 2 or 3 groups, shared by the tests that look at it."""
    return simulate(seed, 2 + seed % 2)


@pytest.mark.parametrize("seed", _seeds())
def test_k_groups_sharing_every_agent_keep_every_property_under_faults(seed: int) -> None:
    groups = 2 + seed % 2
    world = _seeded(seed)
    counts = world.counts()
    print(f"seed {seed}, {groups} groups: {counts}")
    for group, history in enumerate(world.histories):
        assert history.counts.get("runs", 0) > 0, f"group {group} ran nothing"
    assert counts.get("quorum_lost", 0) + counts.get("step_leader_change", 0) > 0


def test_the_seeded_runs_make_the_decisions_only_several_groups_make() -> None:
    """What `tests/sim/test_simulation.py` leaves to these runs (GROUPS_ONLY): made here, so
    checked here."""
    counts = {d: sum(_seeded(seed).counts().get(f"decision_{d.value}", 0)
                     for seed in _seeds()[:3]) for d in GROUPS_ONLY}
    print({d.value: n for d, n in counts.items()})
    assert all(counts.values()), counts


@pytest.mark.parametrize("seed", _seeds()[:3])
def test_telling_every_group_the_whole_free_capacity_is_safe_too(seed: int) -> None:
    """The naive offer rule makes leaders place on the same room: the agents refuse the excess
    (capacity rejections), and nothing is over-committed."""
    world = simulate(seed, 3, OfferRule.WHOLE)
    assert world.counts().get("decision_no_capacity", 0) > 0


class _OwnGroupOnly:
    """An executor view that hides what the other groups' attempts hold (a planted bug)."""

    def __init__(self, view: Any) -> None:
        self._view = view

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def observed_free(self) -> Resources | None:
        return None


class BlindToOtherGroupsCore(AgentCore):
    """Admission that counts only its own group's attempts (capacity less its own running)."""

    def __init__(self, config: Any, clock: Any, fences: Any, outbox: Any, executor: Any,
                 metrics: Any = None, offer: Any = None, group: Any = None,
                 may_start: Any = None) -> None:
        super().__init__(config, clock, fences, outbox, _OwnGroupOnly(executor), metrics, offer,
                         group, may_start)


def test_an_agent_blind_to_the_other_groups_over_commits_and_the_simulation_catches_it() -> None:
    for seed in range(10):
        try:
            GroupedWorld(seed, 3, OfferRule.WHOLE, BlindToOtherGroupsCore).run(STEPS)
        except AssertionError as error:
            assert "over-committed" in str(error), error
            return
    pytest.fail("no seed caught an agent that admits past the capacity the other groups hold")
