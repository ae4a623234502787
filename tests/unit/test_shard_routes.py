"""Routing by the shard map (`topology.Routes`), the moves that spread shards over a grown
deployment (`topology.balancing_moves`) and the maps of a move's steps
(`client.shards.marked` / `handed_over`): docs/scale-out.md §5."""

from __future__ import annotations

import random
import zlib

import pytest

from raftsched import limits, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.client.shards import MapView, handed_over, marked

SHARDS = limits.VIRTUAL_SHARDS


def implicit(groups: int) -> bytes:
    """The map of a deployment no shard ever moved in: shard s is group s mod groups."""
    return bytes(s % groups for s in range(SHARDS))


def counts(owners: bytes, groups: int) -> list[int]:
    held = [0] * groups
    for owner in owners:
        held[owner] += 1
    return held


def apply_moves(owners: bytes, moves: list[tuple[int, int]]) -> bytes:
    moved = bytearray(owners)
    for shard, to in moves:
        moved[shard] = to
    return bytes(moved)


def share(groups: int) -> list[int]:
    """Each group's share as `balancing_moves` defines it: the remainder to the lowest."""
    base, extra = divmod(SHARDS, groups)
    return [base + (1 if g < extra else 0) for g in range(groups)]


# -- Routes ------------------------------------------------------------------------------------


def test_routes_without_owners_are_shard_mod_groups() -> None:
    for groups in (1, 2, 3, 5):
        routes = topology.Routes(groups)
        assert routes.epoch == 0
        assert [routes.owner(s) for s in range(SHARDS)] == [s % groups for s in range(SHARDS)]
        assert all(routes.readers(s) == [s % groups] for s in range(SHARDS))


def test_routes_with_owners_follow_them() -> None:
    owners = bytes(random.Random(7).randrange(4) for _ in range(SHARDS))
    assert owners != implicit(4)
    routes = topology.Routes(4, owners, epoch=3)
    assert [routes.owner(s) for s in range(SHARDS)] == list(owners)
    # a shard that never moved has no former owners: its owner alone reads it
    assert routes.readers(17) == [owners[17]]


def test_readers_are_the_owner_then_former_owners_newest_first_without_repeats() -> None:
    owners = bytearray(implicit(3))
    owners[5], owners[6], owners[7] = 0, 2, 1
    routes = topology.Routes(3, bytes(owners),
                             {5: (2, 1), 6: (0, 2, 0), 7: (1,), 8: (2, 0)}, epoch=4)
    assert routes.readers(5) == [0, 2, 1]
    assert routes.readers(6) == [2, 0]  # the owner once, then group 0 once
    assert routes.readers(7) == [1]
    assert routes.readers(8) == [8 % 3, 0] == [2, 0]
    assert routes.readers(9) == [0]


def test_schedule_group_is_crc32_mod_schedule_groups_else_groups() -> None:
    ids = [f"nightly-{n}" for n in range(200)]
    # ids where the two rules disagree, so that using the wrong count fails the test
    telling = [i for i in ids if zlib.crc32(i.encode()) % 2 != zlib.crc32(i.encode()) % 3]
    assert len(telling) > 50
    fixed = topology.Routes(3, schedule_groups=2)
    rule = topology.Routes(3)
    for schedule_id in ids:
        crc = zlib.crc32(schedule_id.encode())
        assert fixed.schedule_group(schedule_id) == crc % 2
        assert rule.schedule_group(schedule_id) == crc % 3
    assert {fixed.schedule_group(i) for i in ids} == {0, 1}
    assert topology.Routes(4, schedule_groups=1).schedule_group("anything") == 0


def test_routes_of_a_topology_answer() -> None:
    owners = bytearray(implicit(2))
    owners[4] = owners[9] = 2
    answer = pb.Topology(group=1, groups=3, shards=SHARDS, map_epoch=6, owners=bytes(owners),
                         schedule_groups=2,
                         moving=[pb.TopologyMove(shard=10, to=2)],
                         formers=[pb.TopologyFormers(shard=4, groups=[0]),
                                  pb.TopologyFormers(shard=9, groups=[1, 0])])
    routes = topology.Routes.of(answer)
    assert routes == topology.Routes(3, bytes(owners), {4: (0,), 9: (1, 0)}, 2, 6)
    assert isinstance(routes.owners, bytes)
    assert routes.owner(4) == 2 and routes.owner(10) == 0  # moving: still its owner's
    assert routes.readers(9) == [2, 1, 0]
    assert routes.schedule_group("s") == zlib.crc32(b"s") % 2

    before = topology.Routes.of(pb.Topology(group=0, groups=3, shards=SHARDS,
                                            schedule_groups=3))
    assert before == topology.Routes(3, b"", {}, 3, 0)
    assert before.owner(4) == 1


# -- balancing_moves ---------------------------------------------------------------------------


def check_moves(owners: bytes, groups: int) -> bytes:
    """Every property `balancing_moves` promises, for one (owners, groups); the map after."""
    moves = topology.balancing_moves(owners, groups)
    assert moves == sorted(moves)
    shards = [shard for shard, _ in moves]
    assert len(set(shards)) == len(shards), "a shard moves at most once"
    assert all(0 <= to < groups and owners[shard] != to for shard, to in moves)
    held = counts(owners, groups)
    wanted = share(groups)
    excess = [max(0, held[g] - wanted[g]) for g in range(groups)]
    assert len(moves) == sum(excess)
    given = [0] * groups
    taken = [0] * groups
    for shard, to in moves:
        given[owners[shard]] += 1
        taken[to] += 1
    assert given == excess, "only groups above their share give, exactly their excess"
    assert taken == [max(0, wanted[g] - held[g]) for g in range(groups)]
    for group in range(groups):  # a group gives its highest shards
        mine = [s for s in range(SHARDS) if owners[s] == group]
        gone = sorted(s for s in shards if owners[s] == group)
        assert gone == mine[len(mine) - given[group]:]
    after = apply_moves(owners, moves)
    floor, ceil = SHARDS // groups, -(-SHARDS // groups)
    assert all(floor <= n <= ceil for n in counts(after, groups))
    assert counts(after, groups) == wanted
    assert topology.balancing_moves(bytes(bytearray(owners)), groups) == moves
    assert topology.balancing_moves(after, groups) == []
    return after


def test_one_group_to_two_moves_the_upper_half() -> None:
    moves = topology.balancing_moves(implicit(1), 2)
    assert moves == [(s, 1) for s in range(SHARDS // 2, SHARDS)]
    check_moves(implicit(1), 2)


def test_groups_grown_one_at_a_time_stay_balanced() -> None:
    owners = implicit(1)
    for groups in range(2, 9):
        owners = check_moves(owners, groups)
    assert counts(owners, 8) == [512] * 8


@pytest.mark.parametrize("start, groups", [(2, 3), (3, 4), (2, 4), (3, 5), (4, 7), (1, 64)])
def test_from_the_rule_to_more_groups(start: int, groups: int) -> None:
    owners = implicit(start)
    check_moves(owners, groups)
    # the new groups only take; every old group gives
    moves = topology.balancing_moves(owners, groups)
    givers = {owners[shard] for shard, _ in moves}
    takers = {to for _, to in moves}
    assert takers == set(range(start, groups))
    assert givers == set(range(start))


def test_two_to_three_then_three_to_four() -> None:
    after3 = check_moves(implicit(2), 3)
    moves3 = topology.balancing_moves(implicit(2), 3)
    assert len(moves3) == 1365
    assert sum(1 for s, _ in moves3 if s % 2 == 0) == 2048 - 1366
    after4 = check_moves(after3, 4)
    assert counts(after4, 4) == [1024] * 4


def test_an_unbalanced_map_is_evened_out() -> None:
    rng = random.Random(3)
    lopsided = bytes(0 if rng.random() < 0.7 else rng.randrange(1, 3) for _ in range(SHARDS))
    check_moves(lopsided, 3)  # group 0 gives to groups 1 and 2
    check_moves(lopsided, 5)
    everything_in_two = bytes(2 if s < 3000 else 0 for s in range(SHARDS))
    after = check_moves(everything_in_two, 4)
    assert counts(after, 4) == [1024] * 4
    # group 1 holds more than its share and gives; group 0 holds fewer and takes
    some = bytes(1 if s % 4 else 0 for s in range(SHARDS))
    moves = topology.balancing_moves(some, 2)
    assert {to for _, to in moves} == {0} and len(moves) == 3072 - 2048
    check_moves(some, 2)


@pytest.mark.parametrize("groups", [1, 2, 3, 4, 5, 7, 64])
def test_a_balanced_map_gives_no_moves(groups: int) -> None:
    assert topology.balancing_moves(implicit(groups), groups) == []
    blocks = bytes(sorted(implicit(groups)))  # the same shares in blocks, not interleaved
    assert topology.balancing_moves(blocks, groups) == []


# -- the maps of a move's steps ----------------------------------------------------------------


def view(groups: int, *, epoch: int = 0, owners: bytes | None = None,
         formers: tuple[tuple[int, tuple[int, ...]], ...] = ()) -> MapView:
    return MapView(0, groups, epoch, implicit(groups) if owners is None else owners,
                   formers=formers, schedule_groups=groups)


def test_marked_is_the_next_epoch_with_the_balancing_moves() -> None:
    current = view(2, epoch=4, formers=((3, (1,)),))
    step1 = marked(current, 3)
    assert step1.epoch == 5 and step1.groups == 3
    assert step1.moving == tuple(topology.balancing_moves(implicit(2), 3))
    assert step1.owners == current.owners and step1.formers == current.formers
    assert step1.schedule_groups == 2, "schedules stay where the first groups put them"


def test_handed_over_gives_the_marked_shards_to_their_new_owners() -> None:
    owners = bytearray(implicit(3))
    owners[10], owners[11] = 2, 1
    # shard 10 came from group 1 (before that group 0); shard 11 came from group 2
    earlier = ((10, (1, 0)), (11, (2,)), (12, (0,)))
    step1 = marked(view(3, epoch=2, owners=bytes(owners), formers=earlier), 4)
    moving = dict(step1.moving)
    step3 = handed_over(step1)
    assert step3.epoch == step1.epoch + 1 == 4
    assert step3.moving == ()
    assert step3.groups == 4
    assert step3.owners == apply_moves(step1.owners, list(step1.moving))
    formers = dict(step3.formers)
    assert [s for s, _ in step3.formers] == sorted(formers)
    before = dict(earlier)
    for shard in range(SHARDS):
        if shard in moving:
            old = step1.owners[shard]
            expected = tuple(dict.fromkeys([old, *before.get(shard, ())]))
            assert formers[shard] == expected
            assert formers[shard][0] == old
            assert len(set(formers[shard])) == len(formers[shard])
        else:
            assert formers.get(shard) == before.get(shard)
    assert counts(step3.owners, 4) == [1024] * 4


def test_handed_over_keeps_earlier_formers_after_the_old_owner() -> None:
    owners = bytes(0 for _ in range(SHARDS))
    step1 = MapView(0, 3, 7, owners, moving=((1, 2), (2, 1), (3, 2)),
                    formers=((1, (2, 1)), (2, (1,)), (3, (1, 0)), (4, (1,))),
                    schedule_groups=1)
    step3 = handed_over(step1)
    assert step3.epoch == 8
    assert step3.owners[:5] == bytes([0, 2, 1, 2, 0])
    assert step3.formers == ((1, (0, 2, 1)), (2, (0, 1)), (3, (0, 1)), (4, (1,)))


def test_two_moves_in_sequence_stack_the_former_owners() -> None:
    first = handed_over(marked(view(2), 3))
    second = handed_over(marked(first, 4))
    assert (first.epoch, second.epoch) == (2, 4)
    formers = dict(second.formers)
    moved_before = dict(first.formers)
    twice = [s for s, _ in marked(first, 4).moving if s in moved_before]
    assert twice, "some shard moves in both steps"
    for shard in twice:
        assert formers[shard] == (first.owners[shard], implicit(2)[shard])
    assert all(second.owners[s] != g for s, gs in formers.items() for g in gs[:1])


def test_map_view_of_an_answer_and_its_request() -> None:
    joining = MapView.of(pb.Topology(group=2, groups=3, joining=True, schedule_groups=1))
    assert joining.owners == b"" and joining.epoch == 0
    rule = MapView.of(pb.Topology(group=1, groups=2, recorded=True, schedule_groups=2,
                                  members=[pb.TopologyGroup(group=0, servers=["a:1"]),
                                           pb.TopologyGroup(group=1, servers=["b:1"])]))
    assert rule.owners == implicit(2) and rule.group == 1 and rule.schedule_groups == 2
    assert rule.servers == (("a:1",), ("b:1",))
    step3 = handed_over(marked(rule, 3))
    request = step3.request([["a:1"], ["b:1"], ["c:1"]])
    assert request.epoch == 2 and request.groups == 3 and request.schedule_groups == 2
    assert bytes(request.owners) == step3.owners
    assert not request.moving
    assert [(f.shard, tuple(f.groups)) for f in request.formers] == list(step3.formers)
    assert [(g.group, list(g.servers)) for g in request.servers] == [
        (0, ["a:1"]), (1, ["b:1"]), (2, ["c:1"])]
    step1 = marked(rule, 3)
    assert [(m.shard, m.to) for m in step1.request([]).moving] == list(step1.moving)
