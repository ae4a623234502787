"""Property: what the planner proposes, apply accepts. Planner and apply share one feasibility
rule, so a plan made against a state and applied to that same state loses nothing to a
feasibility reason (nor to any other: the planner only offers RUNNABLE tasks, once each, on
registered clusters) — whatever the agents report as free, whatever `max_items`.

Random command streams from tests/support/fsmgen.py move the state between plans (submits,
reports, cluster status changes and shrinking re-registrations, ticks...). Two drivers: Hypothesis
(shrinks a failure and prints its reproduction blob) and a seeded walk (prints the seed that
replays it: `PLAN_SEED=<n> pytest tests/sim/test_planner_properties.py`).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from raftsched.state import commands as c
from raftsched.state import placement
from raftsched.state.feasibility import Unfit
from raftsched.state.results import AssignResult
from tests.support.fsmgen import CAPS, CLUSTERS, Chooser, DataChooser, RandomChooser, next_command
from tests.support.fsmkit import Harness

WALK_STEPS = 600
"""Commands per seeded walk; each is followed by a plan applied at once."""
SEEDS = [int(os.environ["PLAN_SEED"])] if "PLAN_SEED" in os.environ else list(range(6))


def setup(h: Harness) -> None:
    """fsmgen's clusters, with less memory than cpu allows for (three 512 MB tasks), so that
    every resource binds now and then (a re-registration gives them fsmgen's 4096 MB)."""
    for cluster_id in CLUSTERS:
        h.register(cluster_id, caps=CAPS[cluster_id], cpu=4, memory_mb=1536,
                   gpu=2 if cluster_id == "gpu" else 0)


def _reported_free(ch: Chooser) -> dict[str, tuple[int, int, int]]:
    """What agents might have reported: nothing, or some clusters with any free capacity."""
    reported = {}
    for cluster_id in CLUSTERS:
        if ch.int(0, 2) == 0:
            reported[cluster_id] = (ch.choice([0, 500, 1000, 2500, 10**6]),
                                    ch.choice([0, 64, 600, 10**6]), ch.int(0, 2))
    return reported


def plan_and_apply(ch: Chooser, h: Harness) -> int:
    """Plan against the current state, apply the plan to it; nothing may be dropped. Returns
    how many placements were applied."""
    planned = placement.plan(h.state, now_ms=h.now_ms, max_items=ch.choice([1, 3, 100]),
                             reported_free=_reported_free(ch))
    items = tuple(planned.placements)
    if not items and not planned.reservations and not planned.preemptions:
        return 0
    result = h.expect(c.AssignBatch(h.now_ms, items, tuple(planned.reservations),
                                    tuple(planned.preemptions)), AssignResult)
    assert list(result.preempted) == [p.fence for p in planned.preemptions], \
        "apply refused a planned preemption"
    unfit = [d for d in result.dropped if isinstance(d.reason, Unfit)]
    assert not unfit, f"apply dropped planned placements for feasibility reasons: {unfit}"
    assert not result.dropped, f"apply dropped planned placements: {result.dropped}"
    assert [p for p, _ in result.assigned] == list(items)
    return len(items)


def walk(ch: Chooser, steps: int) -> int:
    h = Harness()
    setup(h)
    jobs = [0]
    applied = 0
    for _ in range(steps):
        h.run(next_command(ch, h, jobs))
        applied += plan_and_apply(ch, h)
    return applied


class PlannerMachine(RuleBasedStateMachine):
    """Commands of any kind, interleaved with plans applied at once."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        setup(self.h)
        self.jobs = [0]

    @rule(data=st.data())
    def command(self, data: st.DataObject) -> None:
        self.h.run(next_command(DataChooser(data), self.h, self.jobs))

    @rule(data=st.data())
    def plan(self, data: st.DataObject) -> None:
        plan_and_apply(DataChooser(data), self.h)


PlannerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("PLAN_EXAMPLES", "40")), stateful_step_count=60,
    deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow],
)
TestPlannerMachine = PlannerMachine.TestCase


@pytest.mark.parametrize("seed", SEEDS)
def test_apply_accepts_every_plan_on_a_seeded_walk(seed: int) -> None:
    try:
        applied = walk(RandomChooser(seed), WALK_STEPS)
    except AssertionError as exc:
        raise AssertionError(f"planner/apply disagree; replay with PLAN_SEED={seed}: "
                             f"{exc}") from exc
    assert applied > 0, f"seed {seed}: the walk never planned anything"
