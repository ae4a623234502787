"""The agents' local queues (late binding) in the seeded simulation: seeded machines hold queues
(`tests.sim.machine.QUEUE_DEPTHS`, some 0), and the simulation's checks catch a queue that
over-commits the real capacity or starts a fence it withdrew."""

from __future__ import annotations

from typing import Any

import pytest

from agent.core import QUEUE_WITHDRAWN_REASON, AgentCore, Decision
from agent.model import ReportKind
from tests.sim import machine
from tests.sim.test_simulation import SEEDS, STEPS, simulate
from tests.sim.world import World


def _caught(core: type[AgentCore]) -> list[str]:
    caught: list[str] = []
    for seed in SEEDS:
        try:
            simulate(seed, STEPS, core)
        except AssertionError as error:
            caught.append(str(error).splitlines()[0])
            break
    return caught


class OverCommittingQueueCore(AgentCore):
    """A planted bug: the whole queue starts when a slot frees, whether it fits or not."""

    def start_queued(self, carry: Any = ((), ())) -> list[Decision]:
        queued = [self._queue.pop(fence) for fence in sorted(self._queue)]
        return self._launch(queued, (), carry=carry)


def test_the_simulation_catches_a_queue_that_over_commits_the_real_capacity() -> None:
    caught = _caught(OverCommittingQueueCore)
    print(caught)
    assert caught and "over-committed" in caught[0]


class KeepsKilledQueuedCore(AgentCore):
    """A planted bug: a kill (or withdrawal) of a queued fence is answered but the fence stays
    queued."""

    def _withdraw(self, fence: int, kind: ReportKind = ReportKind.KILLED,
                  reason: str = QUEUE_WITHDRAWN_REASON) -> None:
        queued = self._queue[fence]
        super()._withdraw(fence, kind, reason)
        self._queue[fence] = queued


def test_the_simulation_catches_a_queue_that_starts_a_withdrawn_fence() -> None:
    caught = _caught(KeepsKilledQueuedCore)
    print(caught)
    assert caught, "no seed caught a core that starts a fence withdrawn from its queue"


def test_without_queues_nothing_is_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "QUEUE_DEPTHS", (0,))
    world: World = simulate(SEEDS[0], STEPS)
    counts = world.history.counts
    print({k: v for k, v in counts.items() if k.startswith("decision_")})
    assert counts.get("runs", 0) > 0 and not counts.get("decision_queued")
    assert all(agent.config.queue_depth == 0 for agent in world.agents)
