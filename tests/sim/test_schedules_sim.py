"""Schedules in the seeded simulation (issue 25): the real leader loop fires an `every: 5s`
schedule while leaders change (deposed leaders still believing they lead and proposing),
followers lag, snapshots are installed and the clock jumps over downtimes. Every nominal time
from the creation to the last one passed runs exactly once (`World.check_schedule`); the
usual checks (identical snapshots, invariants, liveness) hold throughout.

`SIM_SEED=<seed>` replays one seed (`SIM_STEPS` the step count)."""

from __future__ import annotations

import pytest

from tests.sim.test_simulation import _seeds, _steps
from tests.sim.world import World, summary

SEEDS = tuple(range(100, 106))


@pytest.mark.parametrize("seed", SEEDS if _seeds() == tuple(range(20)) else _seeds())
def test_every_nominal_time_runs_once_through_leader_changes_and_clock_jumps(seed: int) -> None:
    world = World(seed, schedules=True)
    try:
        world.run(_steps(300))
    except AssertionError as error:
        trace = "\n".join(world.trace)
        raise AssertionError(f"replay with SIM_SEED={seed}: {error}\nlast steps:\n{trace}") \
            from error
    print(summary(world))
    assert world.history.counts.get("schedule_fired", 0) > 0
    assert world.history.counts.get("step_leader_change", 0) > 0
