"""One agent serving K scheduler groups (issue 27, docs/scale-out.md §2): one
`agent.core.AgentCore` per group over one cluster's executor, the agent staying the final
arbiter of the cluster's capacity.

- **Per group**: each group has its own core, fence store, outbox and session with that group's
  leader. Terms and fences are therefore kept per group: a fence of group A is never compared
  with one of group B (they are counted by different leaders), and the floor one group's store
  keeps after pruning never refuses another group's fences. Nothing in `AgentCore` changes: a
  group's core is today's core, whose executor is this module's `GroupExecutor`.
- **One executor**: `SharedExecutor` runs every group's attempts under a *local key*
  (`local_key(group, fence)`, unique on this agent), so the executor's own state (attempt
  directories, processes, cgroups) never mixes two groups' attempts that carry the same fence,
  and hands each group's completions to that group's view only.
- **Admission across groups**: a group's core takes as free what the executor observes free
  (`AttemptExecutor.observed_free`, the port a shared Slurm partition already uses), and the
  shared executor observes the cluster's capacity less what the attempts of *every* group hold.
  The cores run one after another under the agent's lock, so before any start a core sees every
  attempt any group started: two groups can never over-commit one cluster.
- **What each group is offered** (`OfferRule`): what a group's heartbeats report as free is what
  its leader places on. Telling every group the whole free capacity (`WHOLE`) lets two leaders
  place on the same room, and the agent then refuses one of them (a capacity rejection: the
  task goes back at no cost, but it costs a round trip and log entries). `TURN` offers the free
  capacity to one group at a time, the *owner*; the turn passes on when the owner's answers to
  `TURN_EMPTY_ANSWERS` offers in a row place nothing (it has no work that fits), when it has
  held the turn `TURN_SHARE_S` while another group waits for one (that group holds work in its
  local queue here: with a queue a group's demand reaches the agent), or after
  `TURN_MAX_STARTS` (so every group with work gets its turn on every cluster; without a queue
  a group's demand is not seen, and a turn lasts long). A turn is
  handed over: nobody is offered anything until the old owner's next heartbeat has told it that
  nothing is free, so its leader stops placing before the new owner's starts. A rejection then
  needs an assignment the old leader planned on its last offer and that crossed that heartbeat.
  The seeded simulation (`tests/sim/scaleout.py`, `scripts/bench scaleout`)
  measures both rules.

With one group (K = 1) none of this is used: the agent runs one core over its executor, as it
always did.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, replace

from agent.core import NOTHING, AttemptExecutor
from agent.executors import Launch
from agent.model import Assignment, AttemptRecord, Completion, Resources
from raftsched import limits
from raftsched.clock import Clock, SystemClock

TURN_MAX_STARTS = 4_096
TURN_SHARE_S = 30.0
"""How long the owner keeps its turn once another group waits for one (a group that holds work
in its local queue here: late binding makes a group's demand visible to the agent), however few
it started: long tasks free slots seldom, and counted in starts such a turn could last hours.
Not shorter: each hand-over costs the cluster about a heartbeat, and what the old owner's
leader planned on its last offer waits in its queue for its next turn (two groups on fast
no-op work ran at 0.61x one group's rate with a turn shared every 64 starts and 0.86x every
5 s of the turn, 1.06x without sharing: `scripts/bench groups`). Without such a group the
turn lasts up to `TURN_MAX_STARTS`."""
TURN_EMPTY_ANSWERS = 2
"""Answers in a row that place nothing on a non-empty offer before the turn passes on: the
first answer after the turn arrives may precede the leader's plan on the news (the leader
places in its next round), so one empty answer is no proof that the owner has no work."""
"""Attempts a group may start on a cluster in one turn of `OfferRule.TURN` before the turn
passes to the next group (so a group with a long backlog does not keep a cluster from the
others)."""


class OfferRule(enum.Enum):
    WHOLE = "whole"
    """Every group is offered the whole free capacity (the naive rule, measured as a baseline)."""
    TURN = "turn"
    """One group at a time is offered the free capacity; the turn passes on (module doc)."""


def local_key(group: int, fence: int) -> int:
    """An attempt's key on this agent: unique across groups (two groups may issue one fence)."""
    assert 0 <= group < limits.MAX_GROUPS and fence >= 1, (group, fence)
    return fence * limits.MAX_GROUPS + group


def split_key(key: int) -> tuple[int, int]:
    """(group, fence) of a local key."""
    fence, group = divmod(key, limits.MAX_GROUPS)
    return group, fence


@dataclass
class _Turn:
    owner: int
    previous: int | None = None
    """While set, the turn is being handed over from this group: nobody is offered anything
    until it has been told that nothing is free (its next heartbeat reports nothing and its
    answer is handled), so its leader can no longer place on what it was offered before while
    the new owner places on the same room."""
    started: int = 0
    """Attempts the owner started in this turn."""
    empty: int = 0
    """Answers in a row that placed nothing on a non-empty offer."""
    passes: int = 0
    """Times the turn has passed on (a figure for the simulation)."""


class SharedExecutor:
    """The cluster's one executor (an `agent.core.AttemptExecutor`), shared by K groups' cores
    through their `GroupExecutor` views. Volatile like a core: an agent that restarts builds a
    new one around the same executor, and the cores' adoption rebuilds what it holds."""

    def __init__(self, executor: AttemptExecutor, cluster_id: str, capacity: Resources,
                 groups: int, rule: OfferRule = OfferRule.TURN,
                 turn_max_starts: int = TURN_MAX_STARTS,
                 clock: Clock | None = None, turn_share_s: float = TURN_SHARE_S) -> None:
        assert 1 <= groups <= limits.MAX_GROUPS and turn_max_starts >= 1 and turn_share_s > 0
        self.executor = executor
        self.capacity = capacity
        self.groups = groups
        self.rule = rule
        self._turn_max_starts = turn_max_starts
        self._turn_share_s = turn_share_s
        self._others_since_s: float | None = None
        """Since when a group other than the owner has had work waiting here (this turn)."""
        self._clock = clock or SystemClock()
        self._waiting: set[int] = set()
        """Groups whose core last said it holds attempts in its local queue (`may_start`):
        work waiting here for the group's turn."""
        self._held: dict[int, Resources] = {}
        """Local key -> what the attempt holds, from its start (or adoption) until its
        completion is polled."""
        self._done: list[list[Completion]] = [[] for _ in range(groups)]
        """Completions polled from the executor, per group, not yet handed to its view."""
        self.turn = _Turn(zlib.crc32(cluster_id.encode()) % groups)
        self._silent: set[int] = set()
        """Groups whose last heartbeat failed (no leader answers: a group without a quorum):
        the turn skips them until one answers again."""

    def view(self, group: int) -> GroupExecutor:
        assert 0 <= group < self.groups
        return GroupExecutor(self, group)

    # -- capacity ------------------------------------------------------------------------------

    def free(self) -> Resources:
        """The capacity less what every group's attempts hold, and no more than the executor
        itself sees free."""
        free = self.capacity
        for held in self._held.values():
            free = free.minus(held)
        seen = self.executor.observed_free()
        return free if seen is None else free.capped(seen)

    def held(self) -> int:
        """Attempts holding capacity now, all groups together."""
        return len(self._held)

    def offer(self, group: int, free: Resources) -> Resources:
        """What `group`'s heartbeats report free when the cluster has `free` (`OfferRule`)."""
        if self.groups == 1 or self.rule == OfferRule.WHOLE:
            return free
        if group == self.turn.owner and self.turn.previous is None:
            return free
        return NOTHING

    def may_start(self, group: int, waiting: int) -> bool:
        """Whether `group`'s core, holding `waiting` attempts in its local queue, may start
        work now (`AgentCore` `may_start`): the owner of the turn; while a turn is handed over,
        the old owner only (what its leader planned on its last offer may still arrive and
        fit). Any other group's assignments go to its local queue (late binding) and wait
        there for its turn: started at once, they would take the room the owner was offered,
        and the owner's placements would then be refused. A group with work waiting gets the
        turn once the owner has held it `TURN_SHARE_S`. With `OfferRule.WHOLE` (or one
        group) every group may start."""
        if waiting:
            self._waiting.add(group)
        else:
            self._waiting.discard(group)
        if self.groups == 1 or self.rule == OfferRule.WHOLE:
            return True
        now_s = self._clock.monotonic_s()
        if not self._others_wait():
            self._others_since_s = None
        elif self._others_since_s is None:
            self._others_since_s = now_s
        elif self.turn.previous is None and now_s - self._others_since_s >= self._turn_share_s:
            self._pass_turn()
        if self.turn.previous is not None:
            return group == self.turn.previous
        return group == self.turn.owner

    def answered(self, group: int, offered: Resources, assigned: int) -> None:
        """`group` answered a heartbeat that offered `offered` with `assigned` assignments: the
        turn passes on when its owner placed nothing on `TURN_EMPTY_ANSWERS` non-empty offers in
        a row."""
        if self.rule != OfferRule.TURN or self.groups == 1:
            return
        self._silent.discard(group)
        if group == self.turn.previous and offered == NOTHING:
            self.turn.previous = None  # the old owner knows: the new one may be offered
            return
        if group != self.turn.owner or self.turn.previous is not None:
            return
        if assigned or not _any_room(offered):
            self.turn.empty = 0
            return
        self.turn.empty += 1
        if self.turn.empty >= TURN_EMPTY_ANSWERS:
            self._pass_turn()

    def silent(self, group: int) -> None:
        """`group`'s heartbeat failed (no leader of it answers). Its turn passes on, and a
        hand-over waiting for it to hear that nothing is free ends: a group that cannot be
        reached must not keep the others from this cluster. (If its leader is alive behind a
        partition and places on its last offer, admission still refuses what does not fit.)"""
        if self.rule != OfferRule.TURN or self.groups == 1:
            return
        self._silent.add(group)
        if self.turn.previous == group:
            self.turn.previous = None
        if self.turn.owner == group and self.turn.previous is None:
            self._pass_turn(handover=False)

    def _others_wait(self) -> bool:
        """A group other than the owner, not silent, holds work in its queue here."""
        return bool(self._waiting - self._silent - {self.turn.owner})

    def _pass_turn(self, *, handover: bool = True) -> None:
        """To the next group waiting for a turn, else the next that is not silent (the next
        one if all are)."""
        following = [(self.turn.owner + step) % self.groups for step in range(1, self.groups)]
        awake = [g for g in following if g not in self._silent]
        owner = next((g for g in awake if g in self._waiting), awake[0] if awake else following[0])
        self.turn = _Turn(owner, previous=self.turn.owner if handover else None,
                          passes=self.turn.passes + 1)
        self._others_since_s = None

    # -- the executor, by local key ------------------------------------------------------------

    def attempt_dir(self, group: int, fence: int) -> str:
        return self.executor.attempt_dir(local_key(group, fence))

    def start(self, group: int, assignment: Assignment) -> Launch:
        key = local_key(group, assignment.fence)
        # The executor knows the attempt by its key; the task is told its group's fence.
        launch = self.executor.start(replace(assignment, fence=key, task_fence=assignment.fence))
        self._held[key] = assignment.resources
        if group == self.turn.owner and self.groups > 1:
            self.turn.started += 1
            if self.turn.started >= self._turn_max_starts and self.rule == OfferRule.TURN:
                self._pass_turn()
        return launch

    def adopt(self, group: int, record: AttemptRecord) -> bool:
        key = local_key(group, record.fence)
        adopted = self.executor.adopt(replace(record, fence=key))
        if adopted:
            self._held[key] = record.resources
        return adopted

    def kill(self, group: int, fence: int) -> bool:
        return self.executor.kill(local_key(group, fence))

    def poll(self, group: int) -> list[Completion]:
        """`group`'s completions: the executor's are sorted into every group's share, and this
        group's are handed over. What an attempt held is free once its own group's core takes
        its completion (and writes its FINISHED report and logs it), not when another group's
        poll happens to see it first: the agent's own record of what runs at once (its log,
        which the jepsen-style checker reads) then never shows more than its capacity."""
        for completion in self.executor.poll():
            owner, fence = split_key(completion.fence)
            if owner < self.groups:
                self._done[owner].append(replace(completion, fence=fence))
            else:
                self._held.pop(completion.fence, None)
        done, self._done[group] = self._done[group], []
        for completion in done:
            self._held.pop(local_key(group, completion.fence), None)
        return done

    def observed_free(self) -> Resources | None:
        return self.executor.observed_free()


class GroupExecutor:
    """One group's view of the shared executor: the `AttemptExecutor` its core is given. Fences
    are the group's own; `observed_free` is the cluster's free across every group."""

    def __init__(self, shared: SharedExecutor, group: int) -> None:
        self._shared = shared
        self.group = group

    def attempt_dir(self, fence: int) -> str:
        return self._shared.attempt_dir(self.group, fence)

    def start(self, assignment: Assignment) -> Launch:
        return self._shared.start(self.group, assignment)

    def adopt(self, record: AttemptRecord) -> bool:
        return self._shared.adopt(self.group, record)

    def kill(self, fence: int) -> bool:
        return self._shared.kill(self.group, fence)

    def poll(self) -> list[Completion]:
        return self._shared.poll(self.group)

    def observed_free(self) -> Resources:
        return self._shared.free()

    def offer(self, free: Resources) -> Resources:
        """What this group's heartbeats report free (`SharedExecutor.offer`)."""
        return self._shared.offer(self.group, free)

    def may_start(self, waiting: int) -> bool:
        """Whether this group's core, `waiting` attempts in its queue, may start work now
        (`SharedExecutor.may_start`)."""
        return self._shared.may_start(self.group, waiting)

    def answered(self, offered: Resources, assigned: int) -> None:
        """This group answered a heartbeat that offered `offered` (`SharedExecutor.answered`)."""
        self._shared.answered(self.group, offered, assigned)

    def silent(self) -> None:
        """This group's heartbeat failed (`SharedExecutor.silent`)."""
        self._shared.silent(self.group)


def _any_room(free: Resources) -> bool:
    return free.cpu_milli > 0 and free.memory_mb > 0
