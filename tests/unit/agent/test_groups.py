"""One agent serving several scheduler groups (`agent.groups`, issue 27): a core per group over
one shared executor — fences and terms per group, completions to their own group, admission
against what every group holds, and what each group is offered."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agent.core import NOTHING, AgentCore, CoreConfig, Decision
from agent.fence import MemoryFenceStore
from agent.groups import (
    TURN_SHARE_S,
    OfferRule,
    SharedExecutor,
    local_key,
    split_key,
)
from agent.model import Completion, Directives, Registered, ReportKind, Resources
from agent.outbox import MemoryOutbox
from raftsched import limits
from raftsched.clock import ManualClock
from tests.support.agent import assignment
from tests.unit.agent.test_core import FakeExecutor

SLOT = Resources(1000, 100, 0)
CAPACITY = Resources(2000, 1000, 0)
"""Two slots."""


@dataclass
class Group:
    core: AgentCore
    fences: MemoryFenceStore
    outbox: MemoryOutbox

    def answer(self, *assignments: object, term: int = 2) -> list[Decision]:
        return self.core.handle(Directives(term, tuple(assignments), ()))  # type: ignore[arg-type]

    def reports(self, fence: int) -> list[ReportKind]:
        return [r.kind for r in self.outbox.pending(100) if r.fence == fence]


def _agent(groups: int, rule: OfferRule = OfferRule.TURN, capacity: Resources = CAPACITY,
           turn_max_starts: int = 64, queue_depth: int = 0, clock: ManualClock | None = None,
           ) -> tuple[SharedExecutor, FakeExecutor, list[Group]]:
    """K groups' cores over one executor; with `queue_depth`, each with its local queue and
    started in its turn only (`may_start`; a core without a queue is never held back), as
    `agent.agent.GroupedAgent` makes them."""
    executor = FakeExecutor()
    clock = clock or ManualClock()
    shared = SharedExecutor(executor, "east", capacity, groups, rule, turn_max_starts,
                            clock=clock)
    cores = []
    for group in range(groups):
        fences, outbox, view = MemoryFenceStore(), MemoryOutbox(), shared.view(group)
        core = AgentCore(CoreConfig("east", capacity, queue_depth=queue_depth), clock,
                         fences, outbox, view, offer=view.offer,
                         may_start=view.may_start)
        core.start()
        core.registered(Registered(2, "leader", 0, 0, ()))
        cores.append(Group(core, fences, outbox))
    return shared, executor, cores


def _task(fence: int, job: str, task: str = "t") -> object:
    return assignment(fence, job_id=job, task_id=task, resources=SLOT)


def test_a_local_key_tells_group_and_fence_apart() -> None:
    assert local_key(0, 1) != local_key(1, 1)
    for group in (0, 1, limits.MAX_GROUPS - 1):
        for fence in (1, 2, 10**12):
            assert split_key(local_key(group, fence)) == (group, fence)
    with pytest.raises(AssertionError):
        local_key(limits.MAX_GROUPS, 1)


def test_two_groups_run_the_same_fence_side_by_side_each_under_its_own_key() -> None:
    _, executor, (a, b) = _agent(2)
    assert a.answer(_task(1, "g0-job")) == [Decision.STARTED]
    assert b.answer(_task(1, "g1-job")) == [Decision.STARTED]
    assert executor.started == [local_key(0, 1), local_key(1, 1)]
    assert a.core.running() == [1] and b.core.running() == [1]
    assert a.core.registration().known[0].job_id == "g0-job"
    assert b.core.registration().known[0].job_id == "g1-job"


def test_a_completion_goes_to_its_own_group_only() -> None:
    _, executor, (a, b) = _agent(2)
    a.answer(_task(1, "g0-job"))
    b.answer(_task(1, "g1-job"))
    executor.completions.append(Completion(local_key(1, 1), 0))
    assert a.core.collect() == 0  # polled first: group 1's completion waits for group 1
    assert b.core.collect() == 1
    assert b.reports(1) == [ReportKind.STARTED, ReportKind.FINISHED]
    assert a.reports(1) == [ReportKind.STARTED] and a.core.running() == [1]


def test_admission_counts_every_groups_attempts_so_no_two_groups_over_commit() -> None:
    shared, executor, (a, b) = _agent(2)
    assert a.answer(_task(1, "g0-job")) == [Decision.STARTED]
    decisions = b.answer(_task(1, "g1-job"), _task(2, "g1-job", "u"))
    assert sorted(decisions, key=lambda d: d.value) == [Decision.NO_CAPACITY, Decision.STARTED]
    assert shared.held() == 2 and shared.free() == Resources(0, 800, 0)
    assert b.reports(2) == [ReportKind.REJECTED]
    executor.completions.append(Completion(local_key(0, 1), 0))
    assert b.core.collect() == 0  # group 1 polled group 0's completion first...
    assert shared.held() == 2  # ...but it holds its slot until group 0's core takes it
    assert b.answer(_task(3, "g1-job", "v")) == [Decision.NO_CAPACITY]
    assert a.core.collect() == 1 and shared.held() == 1
    assert b.answer(_task(4, "g1-job", "w")) == [Decision.STARTED]


def test_terms_and_fences_are_kept_per_group() -> None:
    _, _, (a, b) = _agent(2)
    a.answer(_task(40, "g0-job"), term=9)
    assert a.fences.term() == 9 and b.fences.term() == 2
    assert b.answer(_task(3, "g1-job"), term=3) == [Decision.STARTED]  # not stale for group 1
    assert a.answer(_task(4, "g0-job", "u"), term=3) == [Decision.STALE_TERM]
    assert a.fences.fence("g0-job/t") == 40 and b.fences.fence("g0-job/t") is None


def test_the_turn_offers_the_free_capacity_to_one_group_at_a_time() -> None:
    shared, _, cores = _agent(3)
    owner = shared.turn.owner
    offered = [group.core.next_beat().free for group in cores]
    assert offered[owner] == CAPACITY
    assert all(free == NOTHING for g, free in enumerate(offered) if g != owner)
    assert cores[owner].core.free() == CAPACITY  # admission still judges all of it
    shared.answered(owner, CAPACITY, assigned=1)
    assert shared.turn.owner == owner  # it placed: it keeps the turn
    shared.answered((owner + 1) % 3, NOTHING, assigned=0)
    assert shared.turn.owner == owner  # only the owner's answer moves the turn
    shared.answered(owner, CAPACITY, assigned=0)
    assert shared.turn.owner == owner  # one empty answer may precede the leader's plan
    shared.answered(owner, CAPACITY, assigned=1)
    shared.answered(owner, CAPACITY, assigned=0)
    assert shared.turn.owner == owner  # not two in a row
    shared.answered(owner, CAPACITY, assigned=0)
    new = (owner + 1) % 3
    assert shared.turn.owner == new and shared.turn.passes == 1
    # Handed over: nobody is offered anything until the old owner heard that nothing is free.
    assert cores[new].core.next_beat().free == NOTHING
    assert cores[owner].core.next_beat().free == NOTHING
    shared.answered(new, NOTHING, assigned=0)
    assert cores[new].core.next_beat().free == NOTHING
    shared.answered(owner, NOTHING, assigned=0)
    assert cores[new].core.next_beat().free == CAPACITY
    assert cores[owner].core.next_beat().free == NOTHING


def test_an_owner_that_placed_nothing_on_no_room_keeps_the_turn() -> None:
    shared, _, _ = _agent(2)
    owner = shared.turn.owner
    shared.answered(owner, NOTHING, assigned=0)
    assert shared.turn.owner == owner


def test_the_turn_passes_after_its_owner_started_its_share() -> None:
    shared, _, cores = _agent(2, capacity=Resources(8000, 1000, 0), turn_max_starts=2)
    owner = shared.turn.owner
    cores[owner].answer(_task(1, "j", "a"), _task(2, "j", "b"))
    assert shared.turn.owner == 1 - owner


def test_the_whole_rule_and_a_single_group_offer_everything_free() -> None:
    _, _, cores = _agent(2, OfferRule.WHOLE)
    assert [g.core.next_beat().free for g in cores] == [CAPACITY, CAPACITY]
    _, _, (only,) = _agent(1)
    assert only.core.next_beat().free == CAPACITY


def test_a_group_that_does_not_answer_loses_the_turn_and_is_skipped_until_it_answers() -> None:
    shared, _, cores = _agent(3)
    owner = shared.turn.owner
    shared.silent(owner)  # no leader of the owner's group answers: the next group is offered
    new = shared.turn.owner
    assert new != owner and shared.turn.previous is None
    assert cores[new].core.next_beat().free == CAPACITY
    shared.answered(new, CAPACITY, assigned=0)
    shared.answered(new, CAPACITY, assigned=0)  # placed nothing twice: the turn moves on...
    assert shared.turn.owner not in (new, owner)  # ...past the silent group
    third = shared.turn.owner
    shared.silent(new)  # the hand-over waited for `new` to hear that nothing is free
    assert shared.turn.previous is None and cores[third].core.next_beat().free == CAPACITY
    shared.answered(owner, NOTHING, assigned=0)  # the silent group answers again
    shared.answered(third, CAPACITY, assigned=0)
    shared.answered(third, CAPACITY, assigned=0)
    assert shared.turn.owner == owner


# -- the local queue with several groups (late binding) --------------------------------------


def test_only_the_turns_owner_starts_and_the_others_queue_what_would_fit() -> None:
    shared, executor, cores = _agent(2, queue_depth=1)
    owner, other = cores[shared.turn.owner], cores[1 - shared.turn.owner]
    assert other.answer(_task(1, "other")) == [Decision.QUEUED]  # room is free, not its turn
    assert executor.started == [] and other.core.queued() == [1]
    assert other.reports(1) == [ReportKind.QUEUED]
    # With its queue full, what arrives was placed on its last offer before its turn passed
    # on (the leader's plan crossed the hand-over): it runs if the room is there...
    assert other.answer(_task(2, "other", "u")) == [Decision.STARTED]
    assert owner.answer(_task(1, "owner")) == [Decision.STARTED]  # the cluster is full now
    # ...else it waits past the depth while all it holds queued fits the capacity...
    assert other.answer(_task(3, "other", "v")) == [Decision.QUEUED_PAST_DEPTH]
    # ...and past that it is refused, saying why.
    refused = other.answer(_task(4, "other", "w"))
    assert refused == [Decision.NO_CAPACITY] and other.reports(4) == [ReportKind.REJECTED]
    reason = next(r.reason for r in other.outbox.pending(100) if r.fence == 4)
    assert "another group's turn" in reason


def test_a_queue_waits_for_its_groups_turn_then_starts_without_a_completion_of_its_own() -> None:
    shared, executor, cores = _agent(2, queue_depth=2)
    first = shared.turn.owner
    owner, other = cores[first], cores[1 - first]
    other.answer(_task(1, "other"))
    assert other.core.collect_and_start() == (0, [])  # not its turn: it waits
    shared.answered(first, CAPACITY, assigned=0)
    shared.answered(first, CAPACITY, assigned=0)  # the owner has no work: the turn passes...
    assert shared.turn.owner == 1 - first and not shared.may_start(1 - first, 1)
    assert shared.may_start(first, 0)  # ...handed over: the old owner's last plan may land
    assert other.core.collect_and_start() == (0, [])
    shared.answered(first, NOTHING, assigned=0)  # the old owner heard that nothing is free
    assert shared.may_start(1 - first, 1) and not shared.may_start(first, 0)
    assert other.core.collect_and_start() == (0, [Decision.QUEUE_STARTED])
    assert executor.started == [local_key(1 - first, 1)]
    assert owner.answer(_task(5, "owner")) == [Decision.QUEUED]


def test_a_group_is_not_offered_the_room_its_own_queue_waits_to_take() -> None:
    shared, _, cores = _agent(2, queue_depth=2)
    owner = cores[shared.turn.owner]
    owner.answer(_task(1, "j", "a"), _task(2, "j", "b"))
    executor_free = shared.free()
    assert executor_free == Resources(0, 800, 0)
    owner.answer(_task(3, "j", "c"))
    assert owner.core.queued() == [3]
    assert owner.core.next_beat().free == Resources(0, 700, 0)  # its queue takes 1 slot's memory
    assert owner.core.free() == executor_free  # admission still judges what is free


def test_with_the_whole_rule_every_group_starts() -> None:
    shared, executor, cores = _agent(2, OfferRule.WHOLE, queue_depth=1)
    assert shared.may_start(0, 0) and shared.may_start(1, 0)
    assert [g.answer(_task(1, f"g{n}")) for n, g in enumerate(cores)] == \
        [[Decision.STARTED], [Decision.STARTED]]
    assert len(executor.started) == 2


def test_without_a_queue_a_group_never_waits_and_the_turn_lasts() -> None:
    """No queue: another group's demand is not seen, so the owner keeps its turn (up to
    TURN_MAX_STARTS), and a group that is not the owner starts what fits, as before."""
    clock = ManualClock()
    shared, _, cores = _agent(2, capacity=Resources(200_000, 100_000, 0), turn_max_starts=1_000,
                              clock=clock)
    owner = shared.turn.owner
    assert cores[1 - owner].answer(_task(1, "w")) == [Decision.STARTED]
    clock.advance(2 * TURN_SHARE_S)
    for n in range(100):
        cores[owner].answer(_task(10 + n, "o", f"t{n}"))
        cores[1 - owner].core.collect_and_start()
    assert shared.turn.owner == owner


def test_a_group_with_work_waiting_gets_the_turn_after_a_while_however_few_started() -> None:
    """Long tasks free slots seldom: the owner keeps its turn at most TURN_SHARE_S while
    another group has work waiting in its queue here."""
    clock = ManualClock()
    shared, executor, cores = _agent(2, queue_depth=2, clock=clock)
    owner = shared.turn.owner
    other = cores[1 - owner]
    assert cores[owner].answer(_task(1, "o", "a"), _task(2, "o", "b")) == [Decision.STARTED] * 2
    assert other.answer(_task(1, "w")) == [Decision.QUEUED]  # the cluster is full anyway
    clock.advance(TURN_SHARE_S - 0.1)
    assert other.core.collect_and_start() == (0, []) and shared.turn.owner == owner
    clock.advance(0.1)
    assert other.core.collect_and_start() == (0, [])  # asks: the turn passes, handed over
    assert (shared.turn.owner, shared.turn.previous) == (1 - owner, owner)
    shared.answered(owner, NOTHING, assigned=0)
    executor.completions.append(Completion(local_key(owner, 1), 0))
    assert cores[owner].core.collect() == 1  # a slot frees: it goes to the waiting group
    assert other.core.collect_and_start() == (0, [Decision.QUEUE_STARTED])
    assert cores[owner].answer(_task(3, "o", "c")) == [Decision.QUEUED]
