"""The seeded simulation with K scheduler groups (issue 27): K independent groups, each a
`tests.sim.world.World` (its own simulated log of 3 replicas, the real FSM and a real `Leader`
per replica, its own jobs), whose agents are shared: on every cluster one agent serves every
group, one real `AgentCore` per group (its own fences, terms, outbox and session) over one
executor (`agent.groups.SharedExecutor`).

Each step picks a group and plays one of that world's steps (submits, leader rounds, leader
changes, snapshots, agents' beats, delayed and replayed answers, crashes, partitions, clock
jumps), or takes one group's quorum away for a while. What must hold, checked as it happens:
- no cluster runs more than its capacity, all groups' attempts together (the simulated
  executor asserts it at every start: `SimExecutor._check_capacity`);
- in every group, every replica's invariants (among them one live attempt per task), identical
  snapshots for identical prefixes, the committed log's audit (`raftsched.state.audit`), each
  fence run at most once and only above every fence of its task the agent was handed before
  (the group's own `History`: fences are compared within a group only);
- after the heal, every job of every group terminal, every replica of every group caught up.

A run raises AssertionError on the first broken property; `GroupedWorld.trace()` holds the
last steps of every group for the failure message, which names the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from agent.groups import OfferRule, SharedExecutor, split_key
from raftsched.clock import ManualClock
from tests.sim.history import History
from tests.sim.machine import Faults, SimExecutor
from tests.sim.world import CLUSTERS, QUIET_ROUNDS, SHARED_PARTITIONS, CoreFactory, World

QUORUM_LOSS_STEPS = (5, 20, 60)
"""How long one group's quorum is gone when the fault strikes (steps), drawn seeded."""


class _Starts:
    """The shared executor's start observer: tells the group's own history of each start,
    with the group's fence (the executor sees the agent's local key)."""

    def __init__(self, histories: list[History]) -> None:
        self._histories = histories

    def on_start(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> None:
        group, group_fence = split_key(fence)
        self._histories[group].on_start(cluster_id, job_id, task_id, group_fence)


@dataclass
class GroupedWorld:
    seed: int
    groups: int = 2
    rule: OfferRule = OfferRule.TURN
    core_factory: CoreFactory | None = None
    clock: ManualClock = field(default_factory=ManualClock)
    step_number: int = 0

    def __post_init__(self) -> None:
        assert self.groups >= 1
        self.rng = random.Random(self.seed)
        self.histories = [History() for _ in range(self.groups)]
        self.executor_faults = Faults()
        starts = _Starts(self.histories)
        self.hubs: dict[str, SharedExecutor] = {}
        for cid, (_, capacity) in CLUSTERS.items():
            executor = SimExecutor(cid, self.clock, random.Random(self.rng.getrandbits(64)),
                                   starts, self.executor_faults,
                                   capacity if cid in SHARED_PARTITIONS else None, capacity,
                                   fence_of=lambda key: split_key(key)[1])
            self.hubs[cid] = SharedExecutor(executor, cid, capacity, self.groups, self.rule,
                                            clock=self.clock)
        extra = {} if self.core_factory is None else {"core_factory": self.core_factory}
        self.worlds = [World(self.rng.getrandbits(64), clock=self.clock,
                             history=self.histories[g], group=g, hubs=self.hubs, **extra)
                       for g in range(self.groups)]
        self.quorum_losses = 0

    def run(self, steps: int) -> None:
        for world in self.worlds:
            world._boot()
        actions = [world._actions() for world in self.worlds]
        names = list(actions[0])
        weights = [actions[0][n][0] for n in names]
        for _ in range(steps):
            self.step_number += 1
            group = self.rng.randrange(self.groups)
            world = self.worlds[group]
            world.step_number += 1
            if self.rng.random() < 0.004:
                self._quorum_loss(world)
            else:
                name = self.rng.choices(names, weights)[0]
                world.note(name)
                world.history.count(f"step_{name}")
                actions[group][name][1]()
            for each in self.worlds:
                each._background()
                each.check()
        self.heal_and_finish()

    def _quorum_loss(self, world: World) -> None:
        steps = self.rng.choice(QUORUM_LOSS_STEPS)
        world.log.no_quorum_steps = steps  # every world's log steps once per grouped step
        world.note(f"quorum lost for {steps} steps")
        world.history.count("quorum_lost")
        self.quorum_losses += 1

    def heal_and_finish(self) -> None:
        """Every group heals, then quiet rounds of every group in turn (the agents' capacity is
        shared: one group's work finishes only if the others' turns and attempts move on too)
        until every job of every group is terminal."""
        for world in self.worlds:
            world.heal()
        self.executor_faults.quiet()
        for number in range(QUIET_ROUNDS):
            done = [world.finish_round() for world in self.worlds]
            if all(done):
                self.histories[0].count("quiet_rounds", number + 1)
                break
        else:
            open_jobs = [line for world in self.worlds for line in world._open_jobs()]
            raise AssertionError(f"liveness: jobs not terminal after {QUIET_ROUNDS} quiet "
                                 f"rounds: {open_jobs[:12]}")
        for world in self.worlds:
            world.check_final()

    def trace(self) -> str:
        return "\n".join(f"[group {g}] {line}" for g, world in enumerate(self.worlds)
                         for line in world.trace)

    def counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for history in self.histories:
            for key, value in history.counts.items():
                total[key] = total.get(key, 0) + value
        total["turn_passes"] = sum(hub.turn.passes for hub in self.hubs.values())
        return total


def run(seed: int, steps: int, groups: int = 2, rule: OfferRule = OfferRule.TURN,
        core_factory: CoreFactory | None = None) -> GroupedWorld:
    world = GroupedWorld(seed, groups, rule, core_factory)
    world.run(steps)
    return world

