"""Where a job lives with several groups (`raftsched.topology`, issue 27)."""

from __future__ import annotations

import random

import pytest

from raftsched import limits, topology


def test_groups_are_parsed_in_order_and_a_bad_one_is_named() -> None:
    assert topology.parse_groups("a:1,b:2;c:3", "--servers") == [["a:1", "b:2"], ["c:3"]]
    assert topology.parse_groups("a:1", "--servers") == [["a:1"]]
    with pytest.raises(ValueError, match=r"--servers \(group 1\): no addresses"):
        topology.parse_groups("a:1;", "--servers")
    with pytest.raises(ValueError, match=r"group 0"):
        topology.parse_groups("nonsense;c:3", "--servers")
    with pytest.raises(ValueError, match="at most 64"):
        topology.parse_groups(";".join(["a:1"] * (limits.MAX_GROUPS + 1)), "X")


def test_a_key_always_lands_in_the_same_shard_and_keys_spread_over_groups() -> None:
    assert topology.shard_of_key("alpha", "k1") == topology.shard_of_key("alpha", "k1")
    assert topology.shard_of_key("alpha", "k1") != topology.shard_of_key("beta", "k1")
    counts = [0] * 4
    for n in range(4_000):
        counts[topology.group_of_key("t", f"key-{n}", 4)] += 1
    assert all(800 < count < 1200 for count in counts), counts


def test_a_job_id_names_its_shard_and_so_its_group() -> None:
    rng = random.Random(7)
    for groups in (1, 2, 3, 16):
        for group in range(groups):
            shard = topology.owned_shard(rng.getrandbits(64), group, groups)
            assert topology.group_of_shard(shard, groups) == group
            job_id = f"nightly-etl-{topology.job_id_tail(shard, rng.getrandbits(64))}"
            assert topology.shard_of_job_id(job_id) == shard
            assert topology.group_of_job_id(job_id, groups) == group
    assert topology.shard_of_job_id("tick-20261205T100000Z") is None
    assert topology.group_of_job_id("no-shard-here", 2) is None


def test_owned_shards_cover_every_shard_of_the_group() -> None:
    seen = {topology.owned_shard(bits, 1, 3) for bits in range(limits.VIRTUAL_SHARDS)}
    assert seen == set(range(1, limits.VIRTUAL_SHARDS, 3))
