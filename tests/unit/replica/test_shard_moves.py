"""The replica's side of shard moves (`raftsched.replica.shard_moves`): what bad input to the
admin RPCs gets before anything is proposed or read."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import Code, RaftschedError
from raftsched.replica import shard_moves
from raftsched.state.model import GroupIdentity, ShardMap, State


def test_an_import_over_the_bound_is_refused_by_name_before_a_proposal() -> None:
    page = pb.ShardKeys(epoch=1, keys=[pb.ShardKey(tenant="t", key=f"k{n}", job_id="j",
                                                    digest=b"d", created_ms=1)
                                       for n in range(limits.MAX_KEYS_PER_IMPORT + 1)])
    with pytest.raises(RaftschedError) as refused:
        shard_moves.import_command(page, 5)
    assert refused.value.code == Code.INVALID_ARGUMENT
    assert f"over MAX_KEYS_PER_IMPORT={limits.MAX_KEYS_PER_IMPORT}" in refused.value.message
    del page.keys[-1]
    assert len(shard_moves.import_command(page, 5).records) == limits.MAX_KEYS_PER_IMPORT


def test_keys_are_exported_only_of_shards_this_group_marked_moving_at_that_epoch() -> None:
    state = State()
    state.group = GroupIdentity(0, 2, limits.VIRTUAL_SHARDS)
    with pytest.raises(RaftschedError) as never:
        shard_moves.keys_of(state, 1, {3})
    assert never.value.code == Code.FAILED_PRECONDITION and "at epoch 0" in never.value.message
    state.shard_map = ShardMap(1, bytes(limits.VIRTUAL_SHARDS), ((4, 1),), (), 2)
    with pytest.raises(RaftschedError) as other:
        shard_moves.keys_of(state, 1, {3, 4})
    assert "shards [3] are not moving" in other.value.message
    with pytest.raises(RaftschedError) as later:
        shard_moves.keys_of(state, 2, {4})
    assert "asked; this group is at epoch 1" in later.value.message
    assert shard_moves.keys_of(state, 1, {4}) == []
