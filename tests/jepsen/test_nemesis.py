"""The nemesis's pure parts: the fault menu parser and the majorities ring."""

from __future__ import annotations

import random
import sys
from itertools import combinations

import pytest

from tests.support import paths

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen.nemesis import FaultError, parse_faults, ring_links


def test_groups_expand_to_kinds_in_menu_order() -> None:
    assert parse_faults("pause,kill", 3) == ("kill-leader", "kill-random", "kill-minority",
                                              "kill-all", "pause-leader")
    assert parse_faults("agent-kill, partition-leader", 3) == ("partition-leader", "agent-kill")


def test_unknown_fault_names_the_choices() -> None:
    with pytest.raises(FaultError, match=r"unknown fault .kil..*groups kill, pause"):
        parse_faults("kil", 3)
    with pytest.raises(FaultError, match="no faults chosen"):
        parse_faults(" , ", 3)


def test_ring_needs_five_nodes_unless_it_only_comes_with_all() -> None:
    with pytest.raises(FaultError, match="partition-ring needs 5 replicas"):
        parse_faults("partition-ring", 3)
    assert "partition-ring" not in parse_faults("all", 3)
    assert "partition-ring" in parse_faults("all", 5)


@pytest.mark.parametrize("seed", range(20))
def test_majorities_ring_gives_every_node_a_different_majority(seed: int) -> None:
    nodes = ["r0", "r1", "r2", "r3", "r4"]
    cut = {frozenset(link) for link in ring_links(random.Random(seed), nodes)}
    sees = {n: frozenset([n, *(m for m in nodes if m != n and frozenset((n, m)) not in cut)])
            for n in nodes}
    assert all(len(view) == 3 for view in sees.values()), (seed, sees)
    assert len(set(sees.values())) == 5, (seed, sees)
    for a, b in combinations(nodes, 2):  # any two majorities overlap: no split brain possible
        assert sees[a] & sees[b], (seed, a, b)


def test_the_hostile_agent_is_a_group_of_its_own_and_part_of_all() -> None:
    assert parse_faults("hostile", 3) == ("hostile-agent",)
    assert parse_faults("kill-leader,hostile-agent", 3) == ("kill-leader", "hostile-agent")
    assert "hostile-agent" in parse_faults("all", 3)


def test_group_faults_need_several_groups() -> None:
    """kill-group-majority and partition-group take one group's quorum away: with one group they
    are an error when named and left out of 'all'; with two they are in 'all' and `group`."""
    for named in ("group", "partition-group", "kill-leader,kill-group-majority"):
        with pytest.raises(FaultError, match="need several groups"):
            parse_faults(named, 3)
    assert not set(parse_faults("all", 3)) & {"kill-group-majority", "partition-group"}
    assert parse_faults("all", 3, 2)[-2:] == ("kill-group-majority", "partition-group")
    assert parse_faults("group,kill-leader", 3, 2) == ("kill-leader", "kill-group-majority",
                                                       "partition-group")
