"""Property tests: random command streams keep every invariant, replicas fed the same log agree
byte for byte, and a snapshot taken mid-stream and replayed with the rest equals the straight run.

Two drivers share one generator (tests/support/fsmgen.py): a Hypothesis state machine (shrinks a
failure
to a short stream and prints its reproduction blob) and a seeded random walk with longer streams
(prints the seed that replays a failure exactly: `SIM_SEED=<n> pytest -k random_walk`).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from raftsched.state import fsm, invariants, snapshot
from raftsched.state.model import State
from tests.support.fsmgen import DataChooser, RandomChooser, next_command, setup
from tests.support.fsmkit import Harness, assert_same_state


def replay(log: list[bytes], state: State | None = None) -> State:
    state = state if state is not None else State()
    for entry in log:
        fsm.apply(state, entry)
    return state


def assert_deterministic(h: Harness, split: int) -> None:
    """The straight run, a second replica, and snapshot-at-`split` + the rest all agree."""
    final = snapshot.dump(h.state)
    assert snapshot.dump(replay(h.log)) == final, "two replicas fed the same log diverged"
    restored = snapshot.load(snapshot.dump(replay(h.log[:split])))
    assert snapshot.dump(replay(h.log[split:], restored)) == final, "snapshot + rest diverged"
    loaded = snapshot.load(final)
    assert_same_state(loaded, h.state)
    invariants.check_invariants(loaded)


class FsmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        setup(self.h)
        self.jobs = [0]

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        self.h.run(next_command(DataChooser(data), self.h, self.jobs))

    @invariant()
    def snapshot_roundtrips(self) -> None:
        assert_same_state(snapshot.load(snapshot.dump(self.h.state)), self.h.state)

    def teardown(self) -> None:
        assert_deterministic(self.h, len(self.h.log) // 2)


FsmMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("FSM_EXAMPLES", "40")), stateful_step_count=60,
    deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow],
)
TestFsmMachine = FsmMachine.TestCase

SEEDS = [int(os.environ["SIM_SEED"])] if "SIM_SEED" in os.environ else list(range(8))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_walk(seed: int) -> None:
    h = Harness()
    setup(h)
    chooser = RandomChooser(seed)
    jobs = [0]
    try:
        for _ in range(1_000):
            h.run(next_command(chooser, h, jobs))
        assert_deterministic(h, len(h.log) // 3)
    except AssertionError as exc:
        raise AssertionError(f"random walk failed; replay with SIM_SEED={seed}: {exc}") from exc
    assert h.state.fence > 0, f"seed {seed}: the walk never assigned anything"
