"""GROUP_SET (issue 27): a log records once which group of a deployment it is; the same again
changes nothing, anything else is refused and changes nothing; snapshots keep it."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.model import GroupIdentity, State
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.results import GroupSetResult

SHARDS = limits.VIRTUAL_SHARDS


def _set(state: State, group: int, groups: int, shards: int = SHARDS) -> object:
    return fsm.apply(state, c.encode(c.GroupSet(group, groups, shards, 1)))


def test_the_first_group_set_records_it_and_the_same_again_changes_nothing() -> None:
    state = State()
    assert _set(state, 1, 3) == Applied(GroupSetResult(1, 3, changed=True))
    assert state.group == GroupIdentity(1, 3, SHARDS)
    assert _set(state, 1, 3) == Applied(GroupSetResult(1, 3, changed=False))


@pytest.mark.parametrize(("group", "groups"), [(0, 3), (1, 2), (2, 4)])
def test_another_answer_is_refused_naming_both_and_changes_nothing(group: int,
                                                                   groups: int) -> None:
    state = State()
    _set(state, 1, 3)
    outcome = _set(state, group, groups)
    assert isinstance(outcome, Rejected) and outcome.code == Code.FAILED_PRECONDITION
    assert "this log is group 1 of 3" in outcome.reason
    assert f"group {group} of {groups}" in outcome.reason
    assert state.group == GroupIdentity(1, 3, SHARDS)


@pytest.mark.parametrize(("group", "groups", "shards", "words"), [
    (2, 2, SHARDS, "need 0 <= group < groups"),
    (-1, 2, SHARDS, "group: -1 is outside"),
    (0, limits.MAX_GROUPS + 1, SHARDS, "MAX_GROUPS"),
    (0, 2, 16, "VIRTUAL_SHARDS"),
])
def test_an_impossible_identity_is_refused_by_name(group: int, groups: int, shards: int,
                                                   words: str) -> None:
    state = State()
    outcome = _set(state, group, groups, shards)
    assert isinstance(outcome, Rejected) and words in outcome.reason
    assert state.group is None


def test_a_snapshot_keeps_the_group_and_one_group_states_keep_their_bytes() -> None:
    state = State()
    plain = snapshot.dump(state)
    assert snapshot.load(plain).group is None
    _set(state, 2, 5)
    loaded = snapshot.load(snapshot.dump(state))
    assert loaded.group == GroupIdentity(2, 5, SHARDS)
    assert snapshot.dump(loaded) == snapshot.dump(state)
    assert snapshot.dump(State()) == plain  # nothing is written for a deployment of one group


TOPOLOGY = (("10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"), ("10.0.1.1:7001",))


def _set_servers(state: State, servers: tuple[tuple[str, ...], ...],
                 group: int = 1, groups: int = 2) -> object:
    return fsm.apply(state, c.encode(c.GroupSet(group, groups, SHARDS, 1, servers)))


def test_the_groups_servers_are_recorded_replaced_by_the_same_group_and_kept_by_none() -> None:
    state = State()
    assert _set_servers(state, TOPOLOGY) == Applied(GroupSetResult(1, 2, changed=True))
    assert state.group == GroupIdentity(1, 2, SHARDS, TOPOLOGY)
    assert _set_servers(state, ()) == Applied(GroupSetResult(1, 2, changed=False))
    assert state.group.servers == TOPOLOGY  # a replica without --topology keeps them
    moved = (TOPOLOGY[0], ("10.0.9.9:7001", "10.0.9.8:7001"))
    assert _set_servers(state, moved) == Applied(GroupSetResult(1, 2, changed=True))
    assert state.group.servers == moved
    loaded = snapshot.load(snapshot.dump(state))
    assert loaded.group == state.group
    refused = _set_servers(state, moved, group=0)  # another group's identity: refused still
    assert isinstance(refused, Rejected) and state.group.servers == moved


@pytest.mark.parametrize(("servers", "words"), [
    ((("a:1",),), "1 groups' addresses for a deployment of 2"),
    ((("a:1",), ()), "servers (group 1): 0 addresses"),
    ((("a:1",), ("nohost",)), "servers (group 1): 'nohost' is not HOST:PORT"),
    ((("a:1",), tuple(f"h{i}:1" for i in range(limits.MAX_REPLICAS + 1))), "over the bound of 16"),
])
def test_impossible_servers_are_refused_by_name_and_change_nothing(
        servers: tuple[tuple[str, ...], ...], words: str) -> None:
    state = State()
    _set_servers(state, TOPOLOGY)
    outcome = _set_servers(state, servers)
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT
    assert words in outcome.reason, outcome.reason
    assert state.group == GroupIdentity(1, 2, SHARDS, TOPOLOGY)


def test_a_group_set_of_four_fields_from_an_older_log_still_decodes() -> None:
    import msgpack

    old = c.encode(c.GroupSet(1, 2, SHARDS, 7))
    payload = msgpack.unpackb(old[1:])
    assert len(payload) == 5
    assert c.decode(old[:1] + msgpack.packb(payload[:4])) == c.GroupSet(1, 2, SHARDS, 7)
